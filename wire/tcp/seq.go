package tcp

// Seq is a TCP sequence number. Arithmetic and comparisons are modulo 2^32
// (RFC 9293 §3.4: "all arithmetic dealing with sequence numbers must be
// performed modulo 2**32"); a comparison means "s comes before t" in the
// window of 2^31 numbers behind t, so it is meaningful only for numbers
// less than 2^31 apart (RFC 1982 serial number arithmetic).
type Seq uint32

// Add returns s advanced by n octets.
func (s Seq) Add(n uint32) Seq { return s + Seq(n) }

// Sub returns s moved back by n octets.
func (s Seq) Sub(n uint32) Seq { return s - Seq(n) }

// Size returns the number of octets from s up to end (end − s mod 2^32).
func (s Seq) Size(end Seq) uint32 { return uint32(end - s) }

// LessThan reports whether s comes strictly before t.
func (s Seq) LessThan(t Seq) bool { return int32(s-t) < 0 }

// LessThanEq reports whether s comes before t or equals it.
func (s Seq) LessThanEq(t Seq) bool { return int32(s-t) <= 0 }

// GreaterThan reports whether s comes strictly after t.
func (s Seq) GreaterThan(t Seq) bool { return int32(s-t) > 0 }

// GreaterThanEq reports whether s comes after t or equals it.
func (s Seq) GreaterThanEq(t Seq) bool { return int32(s-t) >= 0 }

// InWindow reports whether s lies in the window of size octets that starts
// at start: start ≤ s < start+size. An empty window contains nothing. This
// is the RFC 9293 §3.4 acceptability test RCV.NXT =< SEG.SEQ < RCV.NXT+RCV.WND
// written without overflow.
func (s Seq) InWindow(start Seq, size uint32) bool { return uint32(s-start) < size }

// InRange reports whether a ≤ s < b, walking forward from a.
func (s Seq) InRange(a, b Seq) bool { return uint32(s-a) < uint32(b-a) }

// Max returns the later of s and t.
func (s Seq) Max(t Seq) Seq {
	if s.LessThan(t) {
		return t
	}
	return s
}

// Min returns the earlier of s and t.
func (s Seq) Min(t Seq) Seq {
	if s.LessThan(t) {
		return s
	}
	return t
}
