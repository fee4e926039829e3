// Package wiretest builds packet captures of iWARP traffic and checks them
// against an independent decoder, Wireshark's tshark.
//
// It has three parts:
//
//   - Conversation turns a two-sided TCP byte conversation into
//     Ethernet/IPv4/TCP frames (packages eth, ipv4, tcp, pcap): a SYN,
//     SYN-ACK, ACK handshake with Linux-style options (MSS, SACK-Permitted,
//     Timestamps, Window Scale), data from either side with consistent
//     sequence and acknowledgment numbers, correct IPv4 and TCP checksums,
//     a FIN close. Every Send starts a new segment and is cut at the EMSS
//     (MSS less the Timestamps option), so a PDU that fits travels alone in
//     its segment: the FPDU alignment RFC 5044 §4.5 asks senders for.
//     The default addresses are 198.18.0.1 and 198.18.0.2, the RFC 2544
//     benchmarking range; the result is a file, nothing is sent.
//   - BuildSession lays a canonical iWARP session on a Conversation with
//     the repository's encoders (mpa.PutFrame, mpa.Framer, the rdmap Put*
//     segment encoders, term): MPA Request and Reply (Rev 1, or Rev 2 with
//     the RFC 6581 enhanced word), CRC on, no markers; then RDMA Write (one
//     and three segments), Read Request, Read Response (two segments), the
//     four Sends, Atomic Requests FetchAdd and CmpSwap with non-zero masks,
//     their Atomic Responses, Immediate Data with and without SE, a Send,
//     and one Terminate each way (RDMAP Remote Protection with DDP and RDMA
//     headers, DDP tagged-buffer error with the DDP header). Each FPDU
//     records the field values it was encoded with.
//   - RunTshark decodes a capture with tshark (fields, CRC verdicts),
//     ExpertInfo collects its warnings, and Session.Compare checks every
//     decoded field against what was encoded, modelling the documented
//     limits of the tshark 4.0 dissectors (the Note constants): no MPA Rev 2,
//     no opcodes 0x8/0x9, the mislabelled Atomic Response value, the
//     Terminate DDP-header size taken from the error type.
//
// The tests and the tour command (wire/wiretest/tour, `make demo`) use it;
// later engine tests can use Conversation to capture what the engine sends.
// It is a test and tooling aid: it allocates freely.
package wiretest
