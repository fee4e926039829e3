package verbs

import (
	"errors"
	"strings"
	"testing"
)

// A reject of a Request that asked for markers names the option: Linux
// siw refuses markers with a plain reject.
func TestRejectHintMarkers(t *testing.T) {
	for _, markers := range []bool{false, true} {
		c := newSide(t, nil, 64, QPAttr{})
		s := newSide(t, nil, 64, QPAttr{})
		ln, err := s.dev.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		ctx := ctxT(t)
		go func() {
			if req, err := ln.Accept(ctx); err == nil {
				req.Reject(nil)
			}
		}()
		err = c.qp.Dial(ctx, ln.Addr().String(), ConnParam{Markers: markers})
		ln.Close()
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("markers %v: dial: %v", markers, err)
		}
		if got := strings.Contains(err.Error(), "markers"); got != markers {
			t.Errorf("markers %v: error %q", markers, err)
		}
	}
}
