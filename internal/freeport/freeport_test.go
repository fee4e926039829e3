package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPick: the port is below the ephemeral range and can be bound.
func TestPick(t *testing.T) {
	for range 20 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if p < 20000 || p >= ephemeralStart() {
			t.Fatalf("port %d outside [20000, %d)", p, ephemeralStart())
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		ln.Close()
	}
}
