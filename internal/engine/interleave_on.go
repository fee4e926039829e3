//go:build xrnic_interleave

package engine

// See interleave_off.go. Never in a release build.
const interleaveForTest = true
