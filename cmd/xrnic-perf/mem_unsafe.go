package main

import (
	"sync/atomic"
	"unsafe"
)

// Memory the RNIC writes on the peer's behalf (RDMA Write placement, remote
// atomics) is read here with atomic loads, as a CPU would poll a DMA'd
// flag: write_lat waits for the last byte of the next message to change
// (perftest's method), and validation reads and resets atomic target words.

// loadByte reads b[i] with an atomic load of the aligned 32-bit word that
// holds it (b's backing array must be 4-byte aligned, as Go's large
// allocations are).
func loadByte(b []byte, i int) byte {
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i&^3])))
	return byte(w >> (8 * (i & 3))) // little-endian hosts (amd64, arm64)
}

// load64 and store64 access the aligned 64-bit word at b[off:off+8].
func load64(b []byte, off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

func store64(b []byte, off int, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[off])), v)
}
