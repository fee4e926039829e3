package afxdp

import "errors"

// The steps of Open, for OpError.Op.
const (
	OpInterface = "interface"        // the interface: exists, Ethernet, IPv4 address
	OpNetlink   = "netlink"          // the rtnetlink socket
	OpStale     = "stale attachment" // an XDP program already on the interface
	OpLoad      = "load"             // loading the XDP program
	OpAttach    = "attach"           // attaching it to the interface
	OpUMEM      = "umem"             // mapping and registering the UMEM
	OpSocket    = "socket"           // an AF_XDP socket of a queue
	OpPollLoop  = "poll loop"        // starting a queue's poll loop
)

// OpError is an error of Open: the step that failed (one of the Op
// constants), the interface, and the cause. Callers choose advice by Op and
// errors.Is on Err, never by the message.
type OpError struct {
	Op    string
	Iface string
	Err   error
}

func (e *OpError) Error() string {
	if e.Iface == "" {
		return "afxdp transport: " + e.Op + ": " + e.Err.Error()
	}
	return "afxdp transport on " + e.Iface + ": " + e.Op + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// ErrOtherProgram: another XDP program than ours is attached to the
// interface (wrapped by an OpError with Op OpStale).
var ErrOtherProgram = errors.New("another XDP program")

// errLoopClosed: the poll loop has stopped (the transport was closed).
var errLoopClosed = errors.New("afxdp transport: closed")
