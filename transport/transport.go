// Package transport is the seam between the RNIC engine and the lower
// layer protocol (LLP) it runs over: an established, reliable, in-order
// byte stream (RFC 5044 runs MPA over TCP). A Transport dials and listens;
// each connection is a Conn.
//
// Two implementations sit beside this package: transport/kernel (kernel
// TCP sockets, no privileges) and transport/afxdp (the user-space TCP of
// package tcpstack over AF_XDP sockets, with the XDP steering program of
// package bpf). Neither imports the engine, and the engine imports
// neither but kernel, its default.
//
// A Conn is read and written as a stream during the MPA exchange. After
// it, a PushConn delivers received payload by calling the engine's
// receive function instead of being read, and an InlineConn also runs the
// engine's transmit step on its own goroutine, pulling framed FPDUs one at
// a time, so a poll loop can own both directions of every connection.
package transport

import (
	"context"
	"net"
	"time"
)

// Conn is one LLP connection. Read is used for the MPA exchange and,
// unless the Conn is a PushConn, by the QP's receive loop. Write is called
// by one goroutine at a time with whole FPDUs and must write all of p (or
// fail). EMSS is the effective maximum segment size, from which the
// engine derives MULPDU (RFC 5044 §5.1; docs/spec/mpa.md).
//
// A Conn that knows its peer also has RemoteAddr() net.Addr.
type Conn interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	CloseWrite() error
	Close() error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	EMSS() int
}

// PushConn is a Conn of a push-based stack: after the MPA exchange the
// engine calls StartPush once with its receive function, which the stack
// then calls with each in-order piece of payload (a zero-copy view valid
// only during the call). rx always consumes the whole piece and returns
// len(p); a non-nil error means the QP stopped receiving (it has gone to
// error) and the stack may drop the rest. The stack calls rx from one
// goroutine at a time and reports the end of the stream by calling rx
// once more, and then never again: with an empty, non-nil piece for the
// peer's FIN (an orderly close; the Conn stays writable where the stack
// allows it), with a nil piece for a lost connection (reset, timeout,
// closed under it).
type PushConn interface {
	Conn
	StartPush(rx func(p []byte) (int, error))
}

// TxStep is a QP's transmit step: it frames what is ready to send,
// about room bytes at most, and hands each FPDU to put, whole and in
// order; put must take it before it returns (the bytes are reused). The
// end of the stream (Terminate, half-close) is not part of a step: the
// engine writes it through Conn.Write and CloseWrite.
type TxStep func(room int, put func(fpdu []byte))

// InlineConn is a PushConn whose owner goroutine runs the QP's transmit
// step itself, with the room its send queue has. StartInline is called
// once, before StartPush; the returned kick asks the owner to run step
// soon (the engine kicks when work is posted), from any goroutine.
type InlineConn interface {
	PushConn
	StartInline(step TxStep) (kick func())
}

// TryWriter is a Conn that can write without blocking, so the engine can
// transmit in the goroutine that posted the work (or received the request)
// instead of waking its transmitter: TryWrite writes what the connection
// takes now, possibly a prefix of p (n < len(p), err nil), and fails only
// when the connection is unusable. Calls never overlap with each other or
// with Write.
type TryWriter interface {
	TryWrite(p []byte) (n int, err error)
}

// TryReader is a Conn whose receive side can be busy-polled: a consumer
// spinning on completions reads the socket itself instead of waiting for
// the engine's reader to be woken (run to completion on the kernel
// transport). TryRead reads what the connection holds now without
// blocking: (0, nil) when nothing has arrived, io.EOF after the peer's
// FIN. ReadLoop is the connection's reader: it calls try once at once
// and again each time data may have arrived, until try returns true or
// the connection is closed; try does the reading (with TryRead). The
// caller serializes TryRead calls; ReadLoop runs on one goroutine.
type TryReader interface {
	TryRead(p []byte) (n int, err error)
	ReadLoop(try func() bool) error
}

// Driver is a transport whose progress a consumer may drive on its own
// goroutine (run to completion): one that spins on completions calls Drive
// on each empty poll, and the transport's own threads step aside instead
// of spinning beside it. Undrive says the consumer is about to block.
type Driver interface {
	Drive() DriveResult
	Undrive()
}

// DriveResult is what a Drive did.
type DriveResult int

const (
	// DriveNone: the transport's own threads are polling (they have not
	// handed the work over, or another driver is stepping): poll as
	// usual, yielding the CPU now and then.
	DriveNone DriveResult = iota
	// DriveIdle: the caller ran a step that found nothing to do.
	DriveIdle
	// DriveWork: the caller ran a step that did work (completions may
	// have been queued).
	DriveWork
)

// Pender is a Conn that can tell, without reading, whether received bytes
// wait to be read: a listener that must evict a connection in setup keeps
// the ones whose MPA Request has arrived.
type Pender interface {
	Pending() bool
}

// Aborter is a Conn that can be closed at once with a reset (TCP RST), for
// connections refused before anything is read.
type Aborter interface {
	Abort() error
}

// MSSAdvertiser is a Conn that knows the MSS it advertised to the peer:
// the peer's segments, and so its FPDUs, are no longer (RFC 5044 §5.1:
// FPDUs are sized to the sender's EMSS), which bounds the FPDUs the engine
// accepts.
type MSSAdvertiser interface {
	AdvertisedMSS() int
}

// Listener accepts LLP connections.
type Listener interface {
	// Accept waits for the next established connection (or ctx).
	Accept(ctx context.Context) (Conn, error)
	Addr() net.Addr
	Close() error
}

// Transport opens LLP connections: the engine's Device dials and listens
// through it and closes it with the device.
type Transport interface {
	// Name is the transport's name in attributes and metrics ("kernel",
	// "afxdp").
	Name() string
	Dial(ctx context.Context, addr string) (Conn, error)
	Listen(network, addr string) (Listener, error)
	Close() error
}
