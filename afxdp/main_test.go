//go:build linux

package afxdp

import (
	"testing"

	"xrnic/internal/testclean"
)

// TestMain removes what killed runs of earlier tests left (testclean).
func TestMain(m *testing.M) { testclean.Main(m) }
