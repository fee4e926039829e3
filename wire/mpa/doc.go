// Package mpa implements MPA, the Marker PDU Aligned framing of iWARP over
// TCP (RFC 5044), with the enhanced connection setup of MPA revision 2
// (RFC 6581). It is a wire package: formats, framing and pure negotiation
// functions, no I/O.
//
// What is here, by RFC section:
//
//   - MPA Request/Reply frames (RFC 5044 §7.1.1, RFC 6581 §6): Frame is a
//     view over a received frame, ParseFrame validates one, FrameRemaining
//     tells a reader how many bytes follow the 20-byte header, PutFrame
//     encodes one into a caller buffer.
//   - The RFC 6581 enhanced word (§9): the Enhanced value type, and the
//     IRD/ORD and RTR negotiation of §9.1-9.3 as pure functions: Respond for
//     the responder, Complete for the initiator.
//   - FPDU framing (RFC 5044 §4.1, §4.4): PadLen, FPDULen, SealFPDU (in-place
//     sealing encoder), the FPDU view of a received FPDU.
//   - Markers (RFC 5044 §4.2-4.3): the Framer inserts them on send, the
//     Deframer strips and checks them on receive; IsMarkerSeq, FPDUStart and
//     StripMarkers are stream-level helpers.
//   - The receive stream Deframer: in-order TCP payload in, whole checked
//     ULPDUs out.
//   - MULPDU (RFC 5044 §5.1).
//
// Stream positions. Markers sit at every TCP sequence number SeqNum with
// (SeqNum - SeqStart) mod 512 == 0, SeqStart being the first octet of full
// operation (RFC 5044 §4.3). Framer and Deframer are configured with
// SeqStart and count in 32-bit TCP sequence space, so wrap-around is
// handled by plain uint32 arithmetic (2^32 is a multiple of 512).
//
// Marker ownership. A marker is emitted just before the next FPDU content
// octet that falls on a marker position. A marker that lands exactly after
// an FPDU's CRC field therefore belongs to the following FPDU (it is written
// with FPDUPTR 0 when that FPDU is sent, and that FPDU's CRC covers it);
// a marker between the PAD and the CRC field belongs to the FPDU around it
// and is covered by its CRC (RFC 5044 §4.4). Because FPDUs and markers are
// multiples of 4 octets, a marker never splits the length field, the PAD
// group or the CRC field.
//
// CRC. The CRC covers every received octet of the FPDU from its first octet
// (the leading marker if there is one) through the last PAD octet or marker
// before the CRC field, and is checked over the received bytes before the
// ULPDU is handed up. With CRC checking disabled the field is written as
// zero and never checked (RFC 5044 §4.1). Markers are checked only after
// the CRC has been found valid (or when CRC checking is off); a disagreement
// is term.MPAMarkerError.
//
// Errors. Protocol errors on the FPDU path are the predeclared *term.Error
// values (term.MPACRCError, term.MPAMarkerError, ...). Frame parse errors
// are package sentinels that unwrap to term.MPAInvalidFrame, so both
// errors.Is(err, mpa.ErrBadKey) and errors.Is(err, term.MPAInvalidFrame)
// work. Nothing on the FPDU path allocates or formats strings.
package mpa
