package afxdp

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"xrnic/transport"
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
// Run to completion (Drive): an application thread that spins on its
// completions (the C ABI's ibv_poll_cq) can run the iterations itself.
// Whoever iterates holds the queue's token (owner): the loop goroutine,
// or while the queue is handed over a driver, for one iteration. A loop that
// idles while drivers knock often (driveMin within driveWindow) and whose
// queue does not stream hands the queue over: it releases the token and
// waits on the eventfd alone, with the socket out of its epoll set,
// checking back every driveWindow (in practice about a millisecond: the
// netpoller's timers) whether the drivers are still there. Until then a
// Drive only knocks. So a spinning application and the loop do not fight
// over the cores as two spinning threads (measured on the 2-core VM:
// afxdp ib_send_lat through the ABI 99 µs typical before, about 5 µs
// after). Undrive (an application about to block), a command, drivers
// that went quiet or a streaming queue give the queue back to the loop.
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

	// owner is the token of whoever runs iterations: the loop goroutine,
	// or while the queue is handed over a driver, for one iteration.
	owner atomic.Bool
	// drives counts Drive calls (successful or not); handedOver is set
	// while the loop waits with the queue handed to drivers, undrive asks
	// it to take the queue back.
	drives     atomic.Uint64
	handedOver atomic.Bool
	undrive    atomic.Bool

	// loop-owned
	q *xdpQueue
}

// A loop hands its queue to drivers after driveMin Drive calls within
// driveWindow, and takes it back when a window passes with fewer. A
// spinning application calls Drive every few hundred nanoseconds; one that
// only polls now and then (a passive target answering Reads) stays far
// below, so its peer's requests are still served by the loop at once; so
// does one that polls in bursts and waits elsewhere between them
// (ib_write_lat polls for its Write's completion, then spins on memory:
// 10-20 calls per window). Handed such a queue, nobody polled the socket
// until the next check: ib_write_lat through the ABI at 540 µs typical
// with 16 calls per window, about 50 µs with 64 (and the spin guard
// below), ib_send_lat unchanged at about 4 µs.
//
// A queue that moves streamFrames frames (both directions) within a
// window streams: the loop keeps it, or takes it back, for driveBusyKeep,
// since the work split over two threads (the application posting and
// polling, the loop receiving and transmitting) moves more. Measured
// through perftest on the 2-core VM: ib_write_bw at 0.66-0.68 of
// xrnic-perf with the application doing all the work, 0.97 without
// driving. A ping-pong of small messages moves a few frames per round
// trip, 40-80 per window here; 128 in 200 µs is 0.64 Mpps, near the
// copy-mode frame rate of a veth.
const (
	driveMin      = 64
	driveWindow   = 200 * time.Microsecond
	streamFrames  = 128
	driveBusyKeep = 10 * time.Millisecond
)

// A turn of the idle spin runs in well under a microsecond while the
// loop's thread has its core; one longer than spinLostTurn lost the core
// to another runnable thread. Spinning on cores that runnable threads
// wait for (an application spinning on memory, as ib_write_lat does in
// both processes) delays everyone: spinLostMax lost turns, each within
// spinLostWindow of the last, stop the spin for spinCalm (the loop then
// sleeps as soon as it idles). Measured on the 2-core VM, afxdp, perftest
// through the ABI with XRNIC_DRIVE=0: ib_write_lat 93-104 µs typical
// with the spin, 43-48 with this (36-42 never spinning); loops beside
// sleeping or driving applications (ib_send_lat, xrnic-perf) rarely lose
// a turn and keep spinning.
const (
	spinLostTurn   = 20 * time.Microsecond
	spinLostMax    = 2
	spinLostWindow = 50 * time.Millisecond
	spinCalm       = 50 * time.Millisecond
)

// spinGuard counts the idle spin's lost turns.
type spinGuard struct {
	// prev: when the last turn yielded (before the loop's last work:
	// none in this spin yet); lost turns, the last at lostAt; no
	// spinning before calmUntil.
	prev, lostAt, calmUntil time.Duration
	lost                    int
}

// check looks at the turn that ends at now (the loop's last work at
// last) and reports whether it stopped the spin.
func (g *spinGuard) check(now, last time.Duration) bool {
	if g.prev <= last || now-g.prev <= spinLostTurn {
		return false
	}
	if now-g.lostAt > spinLostWindow {
		g.lost = 0
	}
	g.lost++
	g.lostAt = now
	if g.lost < spinLostMax {
		return false
	}
	g.calmUntil, g.lost = now+spinCalm, 0
	return true
}

// may reports whether the loop may spin at now.
func (g *spinGuard) may(now time.Duration) bool { return now >= g.calmUntil }

// streams reports whether n frames in d are a stream (streamFrames per
// driveWindow or more).
func streams(n uint64, d time.Duration) bool {
	return d > 0 && n*uint64(driveWindow) >= streamFrames*uint64(d)
}

// frames is the frames the queue's stack received and sent (token holder).
func (q *xdpQueue) frames() uint64 { return q.stack.Stats.RxFrames + q.stack.Stats.TxFrames }

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

// post queues f to run on the loop. A queue handed to drivers is taken
// back for it: the caller may be the driver itself, waiting in do.
func (l *pollLoop) post(f func()) {
	l.mu.Lock()
	l.cmds = append(l.cmds, f)
	l.ncmds.Store(1)
	l.mu.Unlock()
	l.wake()
	l.undriveNow()
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
	// A wait ends when cond holds or the epoll set is ready.
	readyIf := func(cond func() bool) func(uintptr) bool {
		return func(uintptr) bool {
			if cond() {
				return true
			}
			n, _ := unix.EpollWait(ep, evs, 0)
			return n > 0
		}
	}
	ready := readyIf(func() bool { return l.pending() || l.stopping.Load() })
	handedReady := readyIf(func() bool { return l.stopping.Load() || l.undrive.Load() })
	var drain [8]byte
	spin := l.x.cfg.Spin
	// The loop holds the token (it starts with it) except while its
	// queue is handed over.
	l.acquire()
	last := q.clk.update()
	seen, seenAt := l.drives.Load(), last
	// seenF: the frames moved at seenAt; keepUntil: no hand-over before
	// (the queue streamed).
	seenF := q.frames()
	var keepUntil time.Duration
	var g spinGuard
	for {
		if l.stopping.Load() {
			l.runCommands() // let waiting callers finish
			q.shutdown()
			return // keeping the token: no Drive runs after this
		}
		worked := l.iterate()
		q.stats.Iterations++
		now := q.clk.now
		if d := l.drives.Load(); !worked && d-seen >= driveMin && now >= keepUntil && !l.undrive.Swap(false) {
			// Drivers are spinning while we idle: hand them the queue
			// until they stop, or until the queue streams (then two
			// threads, theirs and ours, move more).
			for {
				d0, f0, t0 := d, q.frames(), q.clk.update()
				q.stats.Handovers++
				l.handedOver.Store(true)
				l.owner.Store(false)
				epf.SetReadDeadline(time.Now().Add(driveWindow))
				rc.Read(handedReady)
				l.handedOver.Store(false)
				unix.Read(l.efd, drain[:])
				l.acquire()
				d = l.drives.Load()
				if d-d0 < driveMin || l.undrive.Swap(false) || l.stopping.Load() {
					q.stats.TakenBack++
					break
				}
				if t := q.clk.update(); streams(q.frames()-f0, t-t0) {
					q.stats.TakenBackStream++
					keepUntil = t + driveBusyKeep
					break
				}
			}
			last = q.clk.update()
			seen, seenAt, seenF = l.drives.Load(), last, q.frames()
			continue
		} else if now-seenAt >= driveWindow {
			f := q.frames()
			if streams(f-seenF, now-seenAt) {
				keepUntil = now + driveBusyKeep
			}
			seen, seenAt, seenF = d, now, f
		}
		if worked {
			last = now
			continue
		}
		if spin > 0 && g.check(now, last) {
			q.stats.SpinsCut++
		}
		if spin > 0 && now-last < spin && g.may(now) {
			runtime.Gosched()
			g.prev = q.clk.update()
			continue
		}
		l.sleeping.Store(true)
		if ms := q.timeoutMS(); ms >= 0 {
			epf.SetReadDeadline(time.Now().Add(time.Duration(ms) * time.Millisecond))
		} else {
			epf.SetReadDeadline(time.Time{})
		}
		q.stats.Sleeps++
		// (The token stays ours: drivers step only a queue handed over.)
		unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sfd, &sev) // a frame already there makes the set ready at once
		rc.Read(ready)
		unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, sfd, nil)
		l.sleeping.Store(false)
		unix.Read(l.efd, drain[:])
		last = q.clk.update()
	}
}

// acquire takes the token for the loop goroutine, waiting out a driver's
// iteration (microseconds).
func (l *pollLoop) acquire() {
	for !l.owner.CompareAndSwap(false, true) {
		runtime.Gosched()
	}
}

// drive runs one iteration on the caller's goroutine if the loop has
// handed its queue over and nobody else is iterating. Every call counts
// towards the hand-over, also one that ran nothing: until the loop hands
// over, drivers only knock (a driver stepping while the loop sleeps in
// epoll would have every frame wake the loop for nothing).
func (l *pollLoop) drive() transport.DriveResult {
	l.drives.Add(1)
	if !l.handedOver.Load() || !l.owner.CompareAndSwap(false, true) {
		return transport.DriveNone
	}
	if l.stopping.Load() {
		l.owner.Store(false)
		return transport.DriveNone
	}
	l.q.stats.Drives++
	w := l.iterate()
	l.owner.Store(false)
	if w {
		return transport.DriveWork
	}
	return transport.DriveIdle
}

// undriveNow gives a handed-over queue back to the loop at once.
func (l *pollLoop) undriveNow() {
	if l.handedOver.Load() {
		l.undrive.Store(true)
		unix.Write(l.efd, l.one[:])
	}
}

// Drive is for a consumer that spins on its completions: calling it on
// every empty poll makes the transport's poll loops step aside once the
// calls come often and the queue does not stream (see the poll loop's
// documentation), and from then on Drive runs their poll steps on the
// calling goroutine, so that one spinning thread does the work of two. It
// reports the most any queue did (transport.DriveResult). Drive never
// blocks; after Close it does nothing.
func (x *Transport) Drive() transport.DriveResult {
	r := transport.DriveNone
	for _, l := range x.loops {
		if l.running {
			r = max(r, l.drive())
		}
	}
	return r
}

// Undrive tells the transport that its driver is about to block (for
// example on a completion channel): loops that had handed their queues
// over take them back now instead of at the end of their check interval.
func (x *Transport) Undrive() {
	for _, l := range x.loops {
		l.undriveNow()
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
	if work {
		// Framing can take a while (milliseconds under load): the
		// stack's timers and RTT samples want the time of its Poll.
		q.clk.update()
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
