package mpa

import "xrnic/wire/term"

// wireError is a predeclared package error that may carry the iWARP error
// a QP reports for it.
type wireError struct {
	msg  string
	term *term.Error
}

func (e *wireError) Error() string { return e.msg }

// Unwrap returns the iWARP error this condition maps to, or nil.
func (e *wireError) Unwrap() error {
	if e.term == nil {
		return nil
	}
	return e.term
}

// Sentinel errors. Those that are iWARP protocol errors unwrap to the
// matching *term.Error.
var (
	// ErrTruncated: the buffer is shorter than the frame or FPDU it starts.
	ErrTruncated error = &wireError{msg: "mpa: truncated"}
	// ErrBadKey: the 16-byte key is neither the Request nor the Reply key.
	ErrBadKey error = &wireError{"mpa: bad frame key", term.MPAInvalidFrame}
	// ErrUnexpectedKey: the key is the valid key of the other frame kind
	// (a Reply where a Request was expected, or the reverse); RFC 5044
	// §7.1.2 uses this to detect Initiator/Initiator starts.
	ErrUnexpectedKey error = &wireError{"mpa: unexpected frame key", term.MPAInvalidFrame}
	// ErrBadRev: Rev is not 0, 1 or 2.
	ErrBadRev error = &wireError{"mpa: unsupported revision", term.MPAInvalidFrame}
	// ErrPrivateDataTooLong: PD_Length (or the private data to encode) is
	// over 512 bytes, enhanced word included.
	ErrPrivateDataTooLong error = &wireError{"mpa: private data longer than 512 bytes", term.MPAInvalidFrame}
	// ErrNoEnhanced: S=1 and Rev=2 but PD_Length < 4.
	ErrNoEnhanced error = &wireError{"mpa: enhanced frame without enhanced data", term.MPAInvalidFrame}
	// ErrRejectInRequest: an encoder was asked to set R in a Request.
	ErrRejectInRequest error = &wireError{msg: "mpa: R flag set in a request"}
	// ErrBufferTooSmall: an encoder's destination is too short.
	ErrBufferTooSmall error = &wireError{msg: "mpa: buffer too small"}
	// ErrULPDUTooLong: the ULPDU does not fit an FPDU (over 65535 bytes, or,
	// with markers, over MaxULPDUMarkers so FPDUPTR would overflow) or is
	// longer than a Deframer accepts. On receive it unwraps to
	// term.MPALocalCatastrophic: the receiver cannot buffer the FPDU.
	ErrULPDUTooLong error = &wireError{"mpa: ULPDU too long", term.MPALocalCatastrophic}
	// ErrNoRTRSupport: an enhanced endpoint was configured with no RTR type,
	// which RFC 6581 §9.2 forbids.
	ErrNoRTRSupport error = &wireError{msg: "mpa: no RTR type supported (RFC 6581 requires at least one)"}
)
