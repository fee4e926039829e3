package siw

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xrnic/wire/wiretest"
)

// capture is a case's slice of the guest NIC's frames (Guest.Pcap, which
// QEMU appends to): the frames after startCapture.
type capture struct {
	t     *testing.T
	g     *Guest
	start int64
	path  string
}

const pcapHeader = 24 // libpcap's global header

func startCapture(t *testing.T, g *Guest) *capture {
	t.Helper()
	fi, err := os.Stat(g.Pcap)
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{t: t, g: g, start: fi.Size(), path: filepath.Join(t.TempDir(), "siw.pcap")}
	// Earlier cases' frames are not read again: their disk space goes
	// back (the suite writes gigabytes of frames).
	if err := g.forgetFrames(c.start); err != nil {
		t.Logf("capture: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keep := filepath.Join(os.TempDir(), "xrnic-siw-"+strings.ReplaceAll(t.Name(), "/", "_")+".pcap")
			if c.write(keep) == nil {
				t.Logf("capture kept: %s", keep)
			}
		}
	})
	return c
}

// write writes the frames since the start as a pcap file.
func (c *capture) write(path string) error {
	f, err := os.Open(c.g.Pcap)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := make([]byte, pcapHeader)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("%s: %w", c.g.Pcap, err)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := out.Write(hdr); err != nil {
		out.Close()
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(f, c.start, 1<<62)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// check decodes the case's frames with tshark: every FPDU with a good CRC
// (when crc), and no TCP reset unless resetOK. The agent's port is left
// out. It returns the number of FPDUs tshark decoded.
func (c *capture) check(ctx context.Context, crc, resetOK bool) (fpdus int) {
	c.t.Helper()
	if err := c.write(c.path); err != nil {
		c.t.Fatal(err)
	}
	tshark, err := wiretest.FindTshark()
	if err != nil {
		c.t.Fatal(err)
	}
	d, err := wiretest.RunTshark(ctx, tshark, c.path)
	if err != nil {
		c.t.Fatal(err)
	}
	var resets []string
	frames := 0
	for n := 1; n <= len(d.Frames); n++ {
		f := d.Frames[n]
		if strings.Contains(f["_ws.col.Info"], "7999") {
			continue
		}
		frames++
		var flags uint64
		fmt.Sscanf(f["tcp.flags"], "0x%x", &flags)
		if flags&0x04 != 0 {
			resets = append(resets, fmt.Sprintf("frame %d: %s", n, f["_ws.col.Info"]))
		}
		if f["iwarp_mpa.ulpdulength"] == "" {
			continue
		}
		fpdus += strings.Count(f["iwarp_mpa.ulpdulength"], ",") + 1
		if v, ok := d.CRC[n]; crc && (!ok || !v.Good) {
			c.t.Errorf("frame %d (%s): CRC verdict %+v (present %v)", n, f["_ws.col.Info"], v, ok)
		}
	}
	if len(resets) > 0 && !resetOK {
		c.t.Errorf("TCP resets on the wire:\n%s", strings.Join(resets, "\n"))
	}
	c.t.Logf("capture: %d frames, %d FPDUs decoded by tshark %s", frames, fpdus, d.Version)
	return fpdus
}
