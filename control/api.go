package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"xrnic/verbs"
	"xrnic/wire/term"
)

// StatusInfo is the answer of /v1/status.
type StatusInfo struct {
	Version       string    `json:"version"`
	PID           int       `json:"pid"`
	Transport     string    `json:"transport"`
	Listen        string    `json:"listen"`
	Metrics       string    `json:"metrics"`
	Allow         []string  `json:"allow"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Ready         bool      `json:"ready"`
	QPs           int       `json:"qps"`
	Regions       int       `json:"regions"`
	MaxQPs        int       `json:"max_qps"`
	MaxORD        int       `json:"max_ord"`
	MaxIRD        int       `json:"max_ird"`
	// Device is the device view of ibv_devinfo -v: transport, interface,
	// XDP and capabilities.
	Device DeviceInfo `json:"device"`
	// Listeners are the daemon's listening addresses.
	Listeners []ListenerInfo `json:"listeners"`
}

// DeviceInfo describes the daemon's device (verbs.Device.Attributes).
type DeviceInfo struct {
	Transport string `json:"transport"` // "iWARP"
	LLP       string `json:"llp"`       // "kernel" (kernel TCP) or "afxdp" (user-space TCP over AF_XDP)
	MPARev    int    `json:"mpa_rev"`   // the MPA revision Dial uses by default
	CRC       bool   `json:"crc"`       // MPA CRCs on by default
	Markers   bool   `json:"markers"`   // MPA markers supported

	// Interface, Ifindex, Addr and MTU describe the afxdp interface
	// (empty over kernel TCP: the kernel routes).
	Interface string `json:"interface,omitempty"`
	Ifindex   int    `json:"ifindex,omitempty"`
	Addr      string `json:"addr,omitempty"`
	MTU       int    `json:"mtu,omitempty"`
	// XDPMode is the XDP attach mode ("native" or "generic"; "" over
	// kernel TCP), XDPModeReason why it differs from the one asked.
	XDPMode       string `json:"xdp_mode,omitempty"`
	XDPModeReason string `json:"xdp_mode_reason,omitempty"`
	Queues        int    `json:"queues,omitempty"`
	// ZeroCopy is AF_XDP zero-copy (false: copy mode); nil over kernel TCP.
	ZeroCopy *bool `json:"zero_copy,omitempty"`

	MaxQPs        int    `json:"max_qp"`
	MaxWR         int    `json:"max_qp_wr"`
	MaxSGE        int    `json:"max_sge"`
	MaxCQE        int    `json:"max_cqe"`
	MaxMR         int    `json:"max_mr"`
	MaxMRSize     uint64 `json:"max_mr_size"`
	MaxMsgSize    uint32 `json:"max_msg_sz"`
	MaxORD        int    `json:"max_qp_init_rd_atom"` // ORD
	MaxIRD        int    `json:"max_qp_rd_atom"`      // IRD
	AtomicCap     string `json:"atomic_cap"`          // IBV_ATOMIC_GLOB, IBV_ATOMIC_HCA or IBV_ATOMIC_NONE
	MaskedAtomics bool   `json:"masked_atomics"`
	ImmediateData bool   `json:"immediate_data"`
}

// ListenerInfo is one listening address of the daemon.
type ListenerInfo struct {
	Kind    string `json:"kind"`    // "mpa" (iWARP connections) or "metrics" (HTTP)
	Address string `json:"address"` // HOST:PORT
}

// QPInfo is one element of /v1/qps.
type QPInfo struct {
	Num        uint32    `json:"num"`
	State      string    `json:"state"`
	Peer       string    `json:"peer"`
	Created    time.Time `json:"created"`
	MPARev     int       `json:"mpa_rev"`
	CRC        bool      `json:"crc"`
	IRD        int       `json:"ird"`
	ORD        int       `json:"ord"`
	PeerToPeer bool      `json:"peer_to_peer"`
	// LocalAddr and RemoteAddr are the LLP connection's addresses
	// (HOST:PORT; empty where the transport does not know one).
	LocalAddr  string `json:"local_addr"`
	RemoteAddr string `json:"remote_addr"`
	// SQDepth and RQDepth are the queues' depths (max_send_wr,
	// max_recv_wr); SQOutstanding the sends posted and not completed,
	// RQPosted the receives posted and not consumed; ORDOutstanding our
	// Reads and Atomics awaiting a response, IRDOutstanding the peer's
	// being answered.
	SQDepth        int    `json:"sq_depth"`
	RQDepth        int    `json:"rq_depth"`
	SQOutstanding  int    `json:"sq_outstanding"`
	RQPosted       int    `json:"rq_posted"`
	ORDOutstanding int    `json:"ord_outstanding"`
	IRDOutstanding int    `json:"ird_outstanding"`
	TxMsgs         uint64 `json:"tx_msgs"`
	RxMsgs         uint64 `json:"rx_msgs"`
	TxBytes        uint64 `json:"tx_bytes"`
	RxBytes        uint64 `json:"rx_bytes"`
	Error          string `json:"error,omitempty"` // the Terminate that moved it to error
}

// RegionInfo is one element of /v1/regions (and of `xrnicctl region list -j`).
type RegionInfo struct {
	Name     string `json:"name"`
	STag     string `json:"stag"`   // "0x%08x"
	TO       string `json:"to"`     // base tagged offset, "0x%016x"
	Length   uint64 `json:"length"` // bytes
	Access   string `json:"access"` // letters r, w, a
	PageSize string `json:"page_size"`
	Backing  string `json:"backing"`
}

// OpCount is one RDMAP opcode's counters in one direction.
type OpCount struct {
	Direction string `json:"direction"`
	Opcode    string `json:"opcode"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
}

// TermInfo counts Terminates of one error in one direction.
type TermInfo struct {
	Direction string `json:"direction"`
	Layer     string `json:"layer"`
	Type      string `json:"type"`
	Code      string `json:"code"`
	Error     string `json:"error"`
	Count     uint64 `json:"count"`
}

// StatsInfo is the answer of /v1/stats: the same counters as the metrics.
type StatsInfo struct {
	Messages       []OpCount         `json:"messages"`
	FetchAdds      uint64            `json:"fetch_adds"`
	CmpSwaps       uint64            `json:"cmp_swaps"`
	CmpSwapMatched uint64            `json:"cmp_swap_matched"`
	Terminates     []TermInfo        `json:"terminates"`
	MPA            map[string]uint64 `json:"mpa_negotiations"`
	Refused        uint64            `json:"connections_refused"`
	SinkMessages   map[string]uint64 `json:"sink_messages"`
	SinkBytes      map[string]uint64 `json:"sink_bytes"`
}

// StatusOf builds /v1/status.
func StatusOf(s *State) StatusInfo {
	a := s.Dev.Attributes()
	allow := s.Allow
	if allow == nil {
		allow = []string{}
	}
	return StatusInfo{
		Version: s.Version, PID: os.Getpid(), Transport: s.Transport, Listen: s.Listen, Metrics: s.Metrics,
		Allow: allow, Started: s.Started, UptimeSeconds: time.Since(s.Started).Seconds(), Ready: s.Ready(),
		QPs: len(s.QPs()), Regions: len(s.Regions()), MaxQPs: a.MaxQPs, MaxORD: a.MaxORD, MaxIRD: a.MaxIRD,
		Device: DeviceOf(a), Listeners: listenersOf(s),
	}
}

// DeviceOf builds the device view of StatusInfo from the attributes.
func DeviceOf(a verbs.Attributes) DeviceInfo {
	d := DeviceInfo{Transport: a.Transport, LLP: a.LLP, MPARev: int(a.MPARev), CRC: a.CRC, Markers: a.Markers,
		MaxQPs: a.MaxQPs, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR, MaxMRSize: a.MaxMRSize,
		MaxMsgSize: a.MaxMsgSize, MaxORD: a.MaxORD, MaxIRD: a.MaxIRD, AtomicCap: a.AtomicCap.String(),
		MaskedAtomics: a.MaskedAtomics, ImmediateData: a.ImmediateData}
	if x := a.XDP; x != nil {
		zc := x.ZeroCopy
		d.Interface, d.Ifindex, d.MTU, d.XDPMode, d.XDPModeReason, d.Queues, d.ZeroCopy =
			x.Iface, x.Ifindex, x.MTU, x.Mode, x.Reason, x.Queues, &zc
		if x.Addr.IsValid() {
			d.Addr = x.Addr.String()
		}
	}
	return d
}

func listenersOf(s *State) []ListenerInfo {
	out := []ListenerInfo{}
	if s.Listen != "" {
		out = append(out, ListenerInfo{"mpa", s.Listen})
	}
	if s.Metrics != "" {
		out = append(out, ListenerInfo{"metrics", s.Metrics})
	}
	return out
}

// addrText is a net.Addr as HOST:PORT, "" for nil.
func addrText(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// QPsOf builds /v1/qps.
func QPsOf(s *State) []QPInfo {
	out := []QPInfo{}
	for _, e := range s.QPs() {
		ci, st := e.QP.ConnInfo(), e.QP.Stats()
		q := QPInfo{Num: e.QP.Num(), State: e.QP.State().String(), Peer: e.Peer, Created: e.Created,
			MPARev: int(ci.MPARev), CRC: ci.CRC, IRD: ci.IRD, ORD: ci.ORD, PeerToPeer: ci.PeerToPeer,
			LocalAddr: addrText(ci.LocalAddr), RemoteAddr: addrText(ci.RemoteAddr)}
		qs := e.QP.Queues()
		q.SQDepth, q.RQDepth, q.SQOutstanding, q.RQPosted, q.ORDOutstanding, q.IRDOutstanding =
			qs.SQDepth, qs.RQDepth, qs.SQOutstanding, qs.RQPosted, qs.ORDOutstanding, qs.IRDOutstanding
		for i := range st.TxMsgs {
			q.TxMsgs += st.TxMsgs[i]
			q.RxMsgs += st.RxMsgs[i]
			q.TxBytes += st.TxBytes[i]
			q.RxBytes += st.RxBytes[i]
		}
		if err := e.QP.Err(); err != nil {
			q.Error = termText(err)
		}
		out = append(out, q)
	}
	return out
}

// RegionsOf builds /v1/regions.
func RegionsOf(s *State) []RegionInfo {
	out := []RegionInfo{}
	for _, r := range s.Regions() {
		out = append(out, RegionInfo{
			Name: r.Name, STag: fmt.Sprintf("0x%08x", r.MR.STag()), TO: fmt.Sprintf("0x%016x", r.MR.BaseTO()),
			Length: uint64(r.MR.Len()), Access: AccessLetters(r.Access), PageSize: PageSizeLabel(r.PageSize),
			Backing: r.Backing.String(),
		})
	}
	return out
}

// StatsOf builds /v1/stats.
func StatsOf(s *State) StatsInfo {
	t := s.Totals()
	out := StatsInfo{FetchAdds: t.FetchAdds, CmpSwaps: t.CmpSwaps, CmpSwapMatched: t.CmpSwapMatched,
		MPA: s.MPA(), Refused: s.Refused(), Messages: []OpCount{}, Terminates: []TermInfo{}}
	out.SinkMessages, out.SinkBytes = s.Sink()
	for op, name := range rdmapOpLabels {
		if t.TxMsgs[op] != 0 || t.TxBytes[op] != 0 {
			out.Messages = append(out.Messages, OpCount{"tx", name, t.TxMsgs[op], t.TxBytes[op]})
		}
		if t.RxMsgs[op] != 0 || t.RxBytes[op] != 0 {
			out.Messages = append(out.Messages, OpCount{"rx", name, t.RxMsgs[op], t.RxBytes[op]})
		}
	}
	add := func(dir string, m map[*term.Error]uint64) {
		for e, n := range m {
			l, ty, co := TermLabels(e)
			name := "unknown"
			if e != nil {
				name = e.String()
			}
			out.Terminates = append(out.Terminates, TermInfo{dir, l, ty, co, name, n})
		}
	}
	add("sent", t.TermsSent)
	add("received", t.TermsRecv)
	sort.Slice(out.Terminates, func(i, j int) bool {
		a, b := out.Terminates[i], out.Terminates[j]
		if a.Direction != b.Direction {
			return a.Direction > b.Direction
		}
		return a.Error < b.Error
	})
	return out
}

// API paths of the control socket.
const (
	PathStatus  = "/v1/status"
	PathQPs     = "/v1/qps"
	PathRegions = "/v1/regions"
	PathStats   = "/v1/stats"
)

// APIHandler serves the JSON control API (GET only).
func APIHandler(s *State) http.Handler {
	mux := http.NewServeMux()
	serve := func(path string, f func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(f())
		})
	}
	serve(PathStatus, func() any { return StatusOf(s) })
	serve(PathQPs, func() any { return QPsOf(s) })
	serve(PathRegions, func() any { return RegionsOf(s) })
	serve(PathStats, func() any { return StatsOf(s) })
	return mux
}

// Client talks to the control socket.
type Client struct {
	hc   *http.Client
	path string
}

// NewClient returns a client of the control socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}
	return &Client{hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}, path: path}
}

// errClosedEarly is how a refused user usually learns it.
var errClosedEarly = errors.New("control: the daemon closed the connection without answering: it refuses this user (run as root, as the daemon's user, or as a member of the socket's group: xrnicd --socket-group), or it is stopping")

// ErrDenied is returned when the daemon refused the caller's credentials
// with a 403.
var ErrDenied = errors.New("control: the daemon refused this user (run as root, as the daemon's user, or as a member of the socket's group: xrnicd --socket-group)")

// ErrPermission is wrapped by the error of a connection to the socket
// that the file permissions refused (EACCES): the socket is mode 0660,
// owned by the daemon's user and its --socket-group.
var ErrPermission = errors.New("permission denied")

// Get fetches path into v.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://xrnicd"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil && errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("%w on %s: run as root or as a member of the socket's group (xrnicd --socket-group): %w", ErrPermission, c.path, err)
	}
	if err != nil {
		// net/http reports a connection closed before the request was
		// written by an unexported error; it is matched by its text.
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) ||
			strings.Contains(err.Error(), "server closed idle connection") {
			// The daemon closes a refused peer at accept; a request
			// written after that fails before the 403 is read.
			return fmt.Errorf("%w (socket %s): %w", errClosedEarly, c.path, err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		return ErrDenied
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("control: %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// termText names an iWARP error as the Terminate it is (Layer/EType/Code
// and name), other errors by their message.
func termText(err error) string {
	var te *term.Error
	if errors.As(err, &te) {
		return te.String()
	}
	return err.Error()
}
