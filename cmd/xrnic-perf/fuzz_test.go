package main

import (
	"bytes"
	"testing"
)

// FuzzPrivateData feeds arbitrary MPA private data and control messages
// to the parsers: no panic, and whatever parses re-encodes to the same
// fields.
func FuzzPrivateData(f *testing.F) {
	p, _ := parseParams([]string{"send_bw", "-q", "3", "--data_validation"}, &bytes.Buffer{})
	f.Add(ptr(p.hello()).put())
	f.Add(bufInfo{STag: 1, RecvTO: 2, SrcTO: 3, Slot: 64, RxD: 9, Index: 1}.put())
	f.Add(make([]byte, ctlMsgLen))
	f.Add([]byte("XPF1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHello(b); err == nil {
			if g, err := parseHello(h.put()); err != nil || g != h {
				t.Fatalf("hello round trip: %+v -> %+v, %v", h, g, err)
			}
			var q params
			q.maxSize = 1 << 20
			h.apply(&q) // must not panic on any value
		}
		if bi, err := parseBufInfo(b); err == nil {
			if g, err := parseBufInfo(bi.put()); err != nil || g != bi {
				t.Fatalf("bufInfo round trip: %+v -> %+v, %v", bi, g, err)
			}
		}
		if len(b) >= ctlMsgLen {
			m := parseCtl(b)
			out := make([]byte, ctlMsgLen)
			m.put(out)
			if g := parseCtl(out); g != m && g.Peak == g.Peak && g.Avg == g.Avg && g.Rate == g.Rate {
				t.Fatalf("ctl round trip: %+v -> %+v", m, g)
			}
		}
	})
}
