package mpa

// MULPDU bounds (RFC 5044 §5.1).
const (
	MinMULPDU = 128
	// MaxMULPDU is the largest ULPDU whose FPDU still fits an IPv4
	// datagram, rounded down to a multiple of 128.
	MaxMULPDU = 64768
)

// MULPDU returns the Maximum ULPDU size for an effective MSS (EMSS =
// min(TCP MSS, path MTU)) per RFC 5044 §5.1: EMSS − (6 + EMSS mod 4)
// without markers, EMSS − (6 + 4·⌈EMSS/512⌉ + EMSS mod 4) with markers
// (worst case), clamped to 128…64768. MPA never offers less than 128, even
// for a tiny EMSS.
func MULPDU(emss int, markers bool) int {
	if emss < 0 {
		emss = 0
	}
	m := emss - (Overhead + emss%4)
	if markers {
		m -= MarkerSize * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	return min(max(m, MinMULPDU), MaxMULPDU)
}
