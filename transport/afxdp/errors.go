package afxdp

import "errors"

// The steps of Open, for OpError.Op.
const (
	OpInterface = "interface"        // the interface: exists, Ethernet, IPv4 address
	OpQueues    = "queues"           // Config.Queues against the device's receive queues
	OpLock      = "lock"             // the per-interface owner lock (owner.go)
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

// ErrInUse: another xrnic process holds the interface's owner lock
// (wrapped by an OpError with Op OpLock; the message names its pid and
// command).
var ErrInUse = errors.New("another xrnic process")

// ErrQueues: Config.Queues exceeds the device's receive queues (wrapped by
// an OpError with Op OpQueues; the message says how to raise them).
var ErrQueues = errors.New("more queues than the device has")

// ErrNotAttached: our XDP program is no longer the one attached to the
// interface (Healthy).
var ErrNotAttached = errors.New("the xrnic XDP program is no longer attached")

// errLoopClosed: the poll loop has stopped (the transport was closed).
var errLoopClosed = errors.New("afxdp transport: closed")
