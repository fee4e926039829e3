package engine

import (
	"testing"
	"time"

	"xrnic/transport"
	"xrnic/wire/term"
)

// TestULPDUOverAdvertisedMULPDU: the bound of TestULPDULongerThanMULPDU
// computed independently of the code under test. That test takes its bound
// from maxULPDU, so without the bound it skips; this one derives the
// MULPDU from the MSS the kernel advertised with RFC 5044 §5.1 written out
// (docs/spec/mpa.md#mulpdu-and-emss-rfc-5044-3-45-51): EMSS − (6 + EMSS mod
// 4), between 128 and 64768. An FPDU header announcing one byte more is
// refused at once with Terminate 2/0/0x05, without waiting for the bytes.
func TestULPDUOverAdvertisedMULPDU(t *testing.T) {
	s, p := rawResponder(t, ConnParams{}, Config{FPDUTimeout: -1})
	a, ok := s.qp.llp.(transport.MSSAdvertiser)
	if !ok {
		t.Fatalf("the kernel transport's LLP %T does not report its advertised MSS", s.qp.llp)
	}
	emss := a.AdvertisedMSS()
	if emss <= 0 {
		t.Fatalf("advertised MSS %d", emss)
	}
	mulpdu := min(max(emss-(6+emss%4), 128), 64768)
	n := mulpdu + 1
	t.Logf("advertised MSS %d: MULPDU %d; announcing ULPDU_Length %d", emss, mulpdu, n)
	if err := p.WriteRaw(append([]byte{byte(n >> 8), byte(n)}, make([]byte, 22)...)); err != nil {
		t.Fatal(err)
	}
	tm, _, err := p.ExpectTerminate(5 * time.Second)
	if err != nil || tm.Err != term.MPALocalCatastrophic {
		t.Fatalf("Terminate %v (%v), want %v", tm.Err, err, term.MPALocalCatastrophic)
	}
}
