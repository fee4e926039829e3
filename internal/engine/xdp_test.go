package datapath

import (
	"testing"

	"xrnic/wire/mpa"
)

// TestFPDULen checks the FPDU length put() packs segments by against the
// MPA framer's own sealing (RFC 5044 §4.1: header, ULPDU, pad, CRC).
func TestFPDULen(t *testing.T) {
	f := mpa.NewFramer(mpa.FramerConfig{CRC: true})
	for _, ulen := range []int{0, 1, 2, 3, 4, 18, 28, 1000, 1423} {
		buf := make([]byte, 2048)
		wl, err := f.Seal(buf, ulen)
		if err != nil {
			t.Fatal(err)
		}
		if got := fpduLen(buf[:wl]); got != wl {
			t.Errorf("ULPDU %d: fpduLen %d, sealed %d", ulen, got, wl)
		}
		if got := fpduLen(buf[:wl-1]); got != 0 {
			t.Errorf("ULPDU %d: truncated FPDU gave %d", ulen, got)
		}
	}
	if fpduLen([]byte{0}) != 0 {
		t.Error("1 byte")
	}
}

func TestTransportConfig(t *testing.T) {
	if _, err := Open(Config{Transport: "bogus"}); err != ErrTransport {
		t.Errorf("unknown transport: %v", err)
	}
	if _, err := Open(Config{Transport: TransportAFXDP}); err == nil {
		t.Error("afxdp without an interface opened")
	}
	d, err := Open(Config{Transport: TransportKernel})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.XDPInfo(); ok {
		t.Error("kernel transport reports XDP")
	}
}
