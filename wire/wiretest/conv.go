package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"xrnic/wire/eth"
	"xrnic/wire/ipv4"
	"xrnic/wire/pcap"
	"xrnic/wire/tcp"
)

// Side names one end of a Conversation.
type Side int

// The two ends. The client sends the SYN; in an iWARP session it is also the
// MPA initiator.
const (
	Client Side = iota
	Server
)

// Peer returns the other side.
func (s Side) Peer() Side { return 1 - s }

func (s Side) String() string {
	if s == Client {
		return "client"
	}
	return "server"
}

// Endpoint is one end of a TCP connection.
type Endpoint struct {
	MAC  eth.MAC
	IP   [4]byte
	Port uint16
	ISN  tcp.Seq // initial sequence number (the SYN's)
	MSS  uint16  // MSS option sent in the SYN / SYN-ACK
	// WindowScale is the shift announced in the SYN; Window is the
	// unscaled window of the SYN and the (scaled) receive window used in
	// later segments is Window>>WindowScale.
	WindowScale uint8
	Window      uint16
	TSVal       uint32 // first timestamp value sent
}

// Config describes a Conversation. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	Client, Server Endpoint
	// Start is the capture time of the first frame; Step is added for each
	// following frame.
	Start time.Time
	Step  time.Duration
}

// Default addresses: 198.18.0.0/15 is the benchmarking range of RFC 2544
// (RFC 5735), so nothing in a capture looks like a real host; the MACs are
// locally administered.
var (
	DefaultClientIP  = [4]byte{198, 18, 0, 1}
	DefaultServerIP  = [4]byte{198, 18, 0, 2}
	DefaultClientMAC = eth.MAC{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	DefaultServerMAC = eth.MAC{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
)

// Default ports: neither has a port-registered dissector in Wireshark, so
// heuristic dissectors (MPA among them) see the payload.
const (
	DefaultClientPort = 42714
	DefaultServerPort = 21500
)

// DefaultConfig returns the default conversation: 198.18.0.1:42714 ->
// 198.18.0.2:21500, MSS 1460 both ways, window scale 7, timestamps on.
func DefaultConfig() Config {
	return Config{
		Client: Endpoint{MAC: DefaultClientMAC, IP: DefaultClientIP, Port: DefaultClientPort,
			ISN: 0x1a2b3c4d, MSS: 1460, WindowScale: 7, Window: 64240, TSVal: 1000},
		Server: Endpoint{MAC: DefaultServerMAC, IP: DefaultServerIP, Port: DefaultServerPort,
			ISN: 0x9e8d7c6b, MSS: 1460, WindowScale: 7, Window: 65160, TSVal: 5000},
		Start: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		Step:  100 * time.Microsecond,
	}
}

// Frame is one captured Ethernet/IPv4/TCP frame of a Conversation.
type Frame struct {
	Time     time.Time
	From     Side
	Flags    tcp.Flags
	Seq, Ack tcp.Seq
	Data     []byte // the whole Ethernet frame
	Payload  []byte // the TCP payload (aliases Data)
}

// Conversation builds the frames of one TCP connection between a client and
// a server: handshake, data from either side with consistent sequence and
// acknowledgment numbers, and a FIN close. Every frame carries correct IPv4
// and TCP checksums and the Timestamps option (as Linux sends it).
type Conversation struct {
	cfg    Config
	ep     [2]Endpoint
	next   [2]tcp.Seq // next sequence number each side sends
	ts     [2]uint32
	ipID   [2]uint16
	frames []Frame
	err    error
}

// ErrState reports a call out of order (data before the handshake, data
// after the close).
var ErrState = errors.New("wiretest: conversation call out of order")

// New returns an empty Conversation; zero fields of cfg take the defaults.
func New(cfg Config) *Conversation {
	d := DefaultConfig()
	fill := func(e *Endpoint, def Endpoint) {
		if e.MAC == (eth.MAC{}) {
			e.MAC = def.MAC
		}
		if e.IP == ([4]byte{}) {
			e.IP = def.IP
		}
		if e.Port == 0 {
			e.Port = def.Port
		}
		if e.ISN == 0 {
			e.ISN = def.ISN
		}
		if e.MSS == 0 {
			e.MSS = def.MSS
		}
		if e.Window == 0 {
			e.Window = def.Window
			e.WindowScale = def.WindowScale
		}
		if e.TSVal == 0 {
			e.TSVal = def.TSVal
		}
	}
	fill(&cfg.Client, d.Client)
	fill(&cfg.Server, d.Server)
	if cfg.Start.IsZero() {
		cfg.Start = d.Start
	}
	if cfg.Step == 0 {
		cfg.Step = d.Step
	}
	c := &Conversation{cfg: cfg, ep: [2]Endpoint{cfg.Client, cfg.Server}}
	for s := range 2 {
		c.next[s] = c.ep[s].ISN
		c.ts[s] = c.ep[s].TSVal
		c.ipID[s] = uint16(0x4000 + 0x1000*s)
	}
	return c
}

// Endpoint returns the endpoint of side s.
func (c *Conversation) Endpoint(s Side) Endpoint { return c.ep[s] }

// EMSS returns the most payload one segment carries: the smaller advertised
// MSS less the 12 bytes of the Timestamps option (RFC 5044's EMSS, which
// sizes MPA's MULPDU).
func (c *Conversation) EMSS() int {
	m := min(c.ep[0].MSS, c.ep[1].MSS)
	return int(m) - 12
}

// NextSeq returns the sequence number of the next byte side s sends.
func (c *Conversation) NextSeq(s Side) tcp.Seq { return c.next[s] }

// Frames returns the frames built so far.
func (c *Conversation) Frames() []Frame { return c.frames }

// Err returns the first error met while building frames.
func (c *Conversation) Err() error { return c.err }

// Handshake appends SYN, SYN-ACK and ACK. The SYN and SYN-ACK carry MSS,
// SACK-Permitted, Timestamps and Window Scale, laid out as Linux does.
func (c *Conversation) Handshake() {
	if len(c.frames) != 0 {
		c.fail(ErrState)
		return
	}
	cl, sv := &c.ep[Client], &c.ep[Server]
	c.emit(Client, tcp.FlagSYN, 0, cl.Window, &tcp.Options{HasMSS: true, MSS: cl.MSS,
		SACKPermitted: true, HasTimestamps: true, TSVal: c.ts[Client],
		HasWindowScale: true, WindowScale: cl.WindowScale}, nil)
	c.next[Client]++
	c.emit(Server, tcp.FlagSYN|tcp.FlagACK, c.next[Client], sv.Window, &tcp.Options{HasMSS: true,
		MSS: sv.MSS, SACKPermitted: true, HasTimestamps: true, TSVal: c.ts[Server],
		TSEcr: c.ts[Client], HasWindowScale: true, WindowScale: sv.WindowScale}, nil)
	c.next[Server]++
	c.emit(Client, tcp.FlagACK, c.next[Server], c.window(Client), c.tsOpt(Client), nil)
}

// Send appends data from side from as one or more segments: data starts a
// new segment and is cut into EMSS-sized pieces, the last one with PSH. So a
// PDU that fits one segment travels alone in it (the FPDU alignment RFC 5044
// §4.5 asks senders for). It returns the indices of the frames it added.
func (c *Conversation) Send(from Side, data []byte) []int {
	if len(c.frames) < 3 {
		c.fail(ErrState)
		return nil
	}
	var idx []int
	emss := c.EMSS()
	for len(data) > 0 {
		n := min(len(data), emss)
		f := tcp.FlagACK
		if n == len(data) {
			f |= tcp.FlagPSH
		}
		idx = append(idx, len(c.frames))
		c.emit(from, f, c.next[from.Peer()], c.window(from), c.tsOpt(from), data[:n])
		c.next[from] += tcp.Seq(n)
		data = data[n:]
	}
	return idx
}

// Ack appends a pure ACK from side from acknowledging everything the peer
// sent.
func (c *Conversation) Ack(from Side) {
	c.emit(from, tcp.FlagACK, c.next[from.Peer()], c.window(from), c.tsOpt(from), nil)
}

// Close appends the orderly close initiated by side from: FIN-ACK, the
// peer's FIN-ACK, and the final ACK.
func (c *Conversation) Close(from Side) {
	peer := from.Peer()
	c.emit(from, tcp.FlagFIN|tcp.FlagACK, c.next[peer], c.window(from), c.tsOpt(from), nil)
	c.next[from]++
	c.emit(peer, tcp.FlagFIN|tcp.FlagACK, c.next[from], c.window(peer), c.tsOpt(peer), nil)
	c.next[peer]++
	c.emit(from, tcp.FlagACK, c.next[peer], c.window(from), c.tsOpt(from), nil)
}

// WritePcap writes the frames as a classic pcap stream (LINKTYPE_ETHERNET).
func (c *Conversation) WritePcap(w io.Writer) error {
	if c.err != nil {
		return c.err
	}
	pw, err := pcap.NewWriter(w, pcap.WriterOptions{})
	if err != nil {
		return err
	}
	for _, f := range c.frames {
		if err := pw.WritePacket(f.Time, f.Data); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes the pcap to path.
func (c *Conversation) WriteFile(path string) error {
	var b bytes.Buffer
	if err := c.WritePcap(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func (c *Conversation) window(s Side) uint16 {
	e := c.ep[s]
	return e.Window >> e.WindowScale
}

func (c *Conversation) tsOpt(s Side) *tcp.Options {
	return &tcp.Options{HasTimestamps: true, TSVal: c.ts[s], TSEcr: c.ts[s.Peer()]}
}

func (c *Conversation) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// emit builds one frame from side s and appends it.
func (c *Conversation) emit(s Side, flags tcp.Flags, ack tcp.Seq, win uint16, o *tcp.Options, payload []byte) {
	if c.err != nil {
		return
	}
	src, dst := c.ep[s], c.ep[s.Peer()]
	if flags&tcp.FlagACK == 0 {
		ack = 0
	}
	segLen := tcp.MinHeaderLen + o.Len() + len(payload)
	b := make([]byte, eth.HeaderLen+ipv4.MinHeaderLen+segLen)
	n, err := eth.Put(b, dst.MAC, src.MAC, eth.TypeIPv4)
	if err != nil {
		c.fail(err)
		return
	}
	m, err := ipv4.Put(b[n:], &ipv4.Fields{TotalLen: uint16(ipv4.MinHeaderLen + segLen),
		ID: c.ipID[s], Flags: ipv4.FlagDF, TTL: 64, Protocol: ipv4.ProtoTCP, Src: src.IP, Dst: dst.IP})
	if err != nil {
		c.fail(err)
		return
	}
	off := n + m
	hl, err := tcp.Put(b[off:], &tcp.Fields{SrcPort: src.Port, DstPort: dst.Port, Seq: c.next[s],
		Ack: ack, Flags: flags, Window: win}, o)
	if err != nil {
		c.fail(err)
		return
	}
	if hl+len(payload) != segLen {
		c.fail(fmt.Errorf("wiretest: TCP header length %d, expected %d", hl, segLen-len(payload)))
		return
	}
	copy(b[off+hl:], payload)
	seg := tcp.Header(b[off:])
	seg.UpdateChecksum(tcp.PseudoHeaderSum(src.IP, dst.IP, segLen))
	c.frames = append(c.frames, Frame{
		Time: c.cfg.Start.Add(time.Duration(len(c.frames)) * c.cfg.Step),
		From: s, Flags: flags, Seq: c.next[s], Ack: ack, Data: b, Payload: b[off+hl:],
	})
	c.ipID[s]++
	c.ts[s] += 1
}
