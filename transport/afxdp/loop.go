package afxdp

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The poll loop (one per device queue of the afxdp transport).
//
// One goroutine owns the queue's AF_XDP socket, its UMEM frames, the
// user-space TCP stack of the queue and every connection of it. Other
// goroutines never touch those: they hand the loop work in two ways, both
// of which wake it with an eventfd write only when it sleeps:
//
//   - kicks: a per-connection bit set (atomic) plus a list entry; posting a
//     WR kicks its QP's connection and the loop runs the QP's transmit step
//     (txStep) on the loop goroutine, framing straight into the stack's
//     segment buffers. This is the hot path: no allocation, no channel.
//   - commands: closures run on the loop (dial, listen, Write/CloseWrite/
//     Close from the MPA exchange and the QP's tx goroutine, StartPush),
//     the control path.
//
// One iteration: run commands, run kicks, Stack.Poll (drain the RX ring in
// batches, TCP input, timers, one TX batch), hand each readable
// connection's in-order payload views to its QP's receive function
// (zero-copy: the Deframer reads the views in the UMEM, placement copies
// into the MR) and release them, which is when frames return to the fill
// ring; then run the kicks that receive processing produced (Read and
// Atomic Responses, ACK-clocked sends), flush the stack once (one TX batch,
// one sendto), and refill the fill ring. When an iteration found nothing to
// do the loop spins for Config.Spin (default 50 µs, yielding the
// processor each turn: a reply to what it just sent usually arrives within
// that), then sleeps: an epoll set of the socket and the eventfd is waited
// for through the Go netpoller (the epoll fd is itself pollable), with the
// stack's next timer as the read deadline, so an idle device uses no CPU
// and a sleeping loop holds no P.
//
// Thread locking is optional (Config.LockThread). The loop needs no
// particular thread: the socket, the UMEM and netlink are bound at setup
// on a thread in the device's namespace, and port reservations are made on
// such a thread too. Locking was measured to cost 5x in atomic latency on
// the 2-core test machine (84 µs against 16 µs): every wakeup of a locked
// goroutine is a hand-off between its M and a P.
type pollLoop struct {
	x     *Transport
	queue int

	efd      int
	one      [8]byte
	sleeping atomic.Bool
	stopping atomic.Bool
	done     chan struct{}
	// running: Open started the loop's goroutine (stop waits for it only
	// then); set before the goroutine starts, read by teardown after.
	running bool
	stopped bool

	mu    sync.Mutex
	cmds  []func()
	kicks []*xconn
	// ncmds and nkicks are non-zero when cmds or kicks may be non-empty
	// (set under mu with the append, cleared under mu with the swap), so
	// an idle iteration takes no lock.
	ncmds, nkicks atomic.Uint32
	// swapped in by the loop
	cmdsRun  []func()
	kicksRun []*xconn

	// loop-owned
	q *xdpQueue
}

const (
	kickTx = 1 << iota
	kickRx
)

func newPollLoop(x *Transport, queue int) (*pollLoop, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &pollLoop{x: x, queue: queue, efd: efd, done: make(chan struct{}),
		cmds: make([]func(), 0, 16), kicks: make([]*xconn, 0, 64), cmdsRun: make([]func(), 0, 16), kicksRun: make([]*xconn, 0, 64)}
	l.one[0] = 1
	return l, nil
}

// wake interrupts the loop's poll(2) if it sleeps.
func (l *pollLoop) wake() {
	if l.sleeping.Load() {
		unix.Write(l.efd, l.one[:])
	}
}

// kick asks the loop to run x's transmit step (kickTx) or delivery (kickRx).
func (l *pollLoop) kick(x *xconn, bits uint32) {
	if x.kick.Or(bits)&bits == bits {
		return // already pending
	}
	l.mu.Lock()
	l.kicks = append(l.kicks, x)
	l.nkicks.Store(1)
	l.mu.Unlock()
	l.wake()
}

// post queues f to run on the loop.
func (l *pollLoop) post(f func()) {
	l.mu.Lock()
	l.cmds = append(l.cmds, f)
	l.ncmds.Store(1)
	l.mu.Unlock()
	l.wake()
}

// do runs f on the loop and waits for it. It returns ErrClosed when the
// loop has stopped (f did not run).
func (l *pollLoop) do(f func()) error {
	ch := make(chan struct{})
	l.post(func() { f(); close(ch) })
	select {
	case <-ch:
		return nil
	case <-l.done:
		select {
		case <-ch:
			return nil
		default:
			return errLoopClosed
		}
	}
}

func (l *pollLoop) pending() bool {
	return l.ncmds.Load() != 0 || l.nkicks.Load() != 0
}

// run is the loop goroutine.
func (l *pollLoop) run(started chan<- error) {
	defer close(l.done)
	if l.x.cfg.LockThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	q := l.q
	// Sleeping: an epoll set of the socket and the eventfd, itself waited
	// for through the Go netpoller, so a sleeping loop holds no P and
	// wakes like any goroutine blocked on a socket; the stack's next timer
	// is the read deadline.
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		started <- err
		return
	}
	// The socket is in the set only while the loop sleeps. In it, every
	// received frame runs the epoll callback chain (under the socket's wait
	// queue lock) up into the Go netpoller, whose next poll of the epoll set
	// polls the socket, and an AF_XDP socket's poll drives copy-mode
	// transmission under the socket's mutex: with the loop awake that is
	// pure overhead and contends with our own sendto (measured: ~15% of the
	// CPU time of a Write stream). Adding it back before sleeping polls it
	// once, so a frame that came in between is not missed.
	sfd := q.sock.Fd()
	sev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(sfd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, l.efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.efd)}); err != nil {
		unix.Close(ep)
		started <- err
		return
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sfd, &sev); err != nil { // checked once here
		unix.Close(ep)
		started <- err
		return
	}
	unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, sfd, nil)
	unix.SetNonblock(ep, true)
	epf := os.NewFile(uintptr(ep), "xrnic-poll")
	defer epf.Close()
	rc, err := epf.SyscallConn()
	if err != nil {
		started <- err
		return
	}
	started <- nil
	evs := make([]unix.EpollEvent, 4)
	ready := func(uintptr) bool {
		if l.pending() || l.stopping.Load() {
			return true
		}
		n, _ := unix.EpollWait(ep, evs, 0)
		return n > 0
	}
	var drain [8]byte
	spin := l.x.cfg.Spin
	last := q.clk.update()
	for {
		if l.stopping.Load() {
			l.runCommands() // let waiting callers finish
			q.shutdown()
			return
		}
		if l.iterate() {
			last = q.clk.now
			continue
		}
		if spin > 0 && q.clk.now-last < spin {
			runtime.Gosched()
			continue
		}
		l.sleeping.Store(true)
		if ms := q.timeoutMS(); ms >= 0 {
			epf.SetReadDeadline(time.Now().Add(time.Duration(ms) * time.Millisecond))
		} else {
			epf.SetReadDeadline(time.Time{})
		}
		q.stats.Sleeps++
		unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sfd, &sev) // a frame already there makes the set ready at once
		rc.Read(ready)
		unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, sfd, nil)
		l.sleeping.Store(false)
		unix.Read(l.efd, drain[:])
		last = q.clk.update()
	}
}

// loopClock is the stack's clock on a poll loop: the monotonic time read
// once per loop iteration, not on every stack call (a Poll and a Flush per
// iteration, and the spin check, each read it before: 10-15% of the CPU
// time at high message rates). An iteration takes microseconds; the stack
// works in milliseconds (timestamps, RTO) and the delayed ACK timer.
type loopClock struct {
	start time.Time
	now   time.Duration
}

func newLoopClock() *loopClock { return &loopClock{start: time.Now()} }

// Now implements tcpstack.Clock.
func (c *loopClock) Now() time.Duration { return c.now }

func (c *loopClock) update() time.Duration {
	c.now = time.Since(c.start)
	return c.now
}

func (l *pollLoop) runCommands() int {
	if l.ncmds.Load() == 0 {
		return 0
	}
	l.mu.Lock()
	l.ncmds.Store(0)
	l.cmds, l.cmdsRun = l.cmdsRun[:0], l.cmds
	l.mu.Unlock()
	for i, f := range l.cmdsRun {
		f()
		l.cmdsRun[i] = nil
	}
	return len(l.cmdsRun)
}

func (l *pollLoop) runKicks() int {
	if l.nkicks.Load() == 0 {
		return 0
	}
	l.mu.Lock()
	l.nkicks.Store(0)
	l.kicks, l.kicksRun = l.kicksRun[:0], l.kicks
	l.mu.Unlock()
	for i, x := range l.kicksRun {
		l.kicksRun[i] = nil
		bits := x.kick.Swap(0)
		if bits&kickRx != 0 {
			x.deliver()
		}
		if bits&kickTx != 0 {
			x.txStep()
		}
	}
	return len(l.kicksRun)
}

// iterate does one round and reports whether there was any work.
func (l *pollLoop) iterate() bool {
	q := l.q
	q.clk.update()
	work := l.runCommands() > 0
	if l.runKicks() > 0 {
		work = true
	}
	if q.pollStack() {
		work = true
	}
	// Responses and sends that receive processing made ready.
	for i := 0; i < 4 && l.runKicks() > 0; i++ {
		work = true
	}
	q.flush()
	return work
}

// stop ends the loop goroutine if it was started, waits for it, and
// closes the eventfd. It runs once, from teardown.
func (l *pollLoop) stop() {
	if l.stopped {
		return
	}
	l.stopped = true
	if l.running {
		l.stopping.Store(true)
		unix.Write(l.efd, l.one[:])
		<-l.done
	}
	unix.Close(l.efd)
}
