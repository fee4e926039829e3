package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// The kernel TCP baseline: tcp_bw streams -s byte writes over one kernel
// TCP connection (what an iperf-style tool measures; the receiver
// acknowledges the end with one byte), tcp_lat ping-pongs -s bytes. They
// print perftest's columns so they sit next to the RDMA numbers (peak
// bandwidth is not measured: 0.00, as perftest in duration mode).
//
// tcp_lat -o N (N > 1) is the pipelined baseline, the kernel TCP
// counterpart of atomic_bw -o N: N requests of -s bytes in flight on the
// one connection, the server echoing the bytes as they arrive. It reports
// the message rate (requests completed per second) and the mean round
// trip of a request (tcpPipe).

// maxTCPOuts bounds tcp_lat -o.
const maxTCPOuts = 1024

func runTCP(ctx context.Context, p *params, out io.Writer) error {
	if p.server == "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(p.bind, fmt.Sprint(p.port)))
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() { <-ctx.Done(); ln.Close() }()
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		return tcpServe(c)
	}
	c, err := dialControl(ctx, p)
	if err != nil {
		return err
	}
	defer c.Close()
	if p.duration > 0 {
		return fmt.Errorf("%s: -D is not supported (use -n)", p.test.name)
	}
	pipe := !p.test.bw && p.outs > 1
	switch {
	case p.test.bw:
		fmt.Fprintln(out, bwHeader(p.unit()))
	case pipe:
		fmt.Fprintln(out, pipeHeader)
	default:
		fmt.Fprintln(out, latHeader)
	}
	var results []any
	for _, size := range p.sizes() {
		var hdr [24]byte
		hdr[0] = 'B'
		if !p.test.bw {
			hdr[0] = 'L'
		}
		if pipe {
			hdr[0] = 'P'
		}
		binary.BigEndian.PutUint32(hdr[4:], uint32(size))
		binary.BigEndian.PutUint64(hdr[8:], uint64(p.iters))
		binary.BigEndian.PutUint64(hdr[16:], uint64(p.duration))
		if _, err := c.Write(hdr[:]); err != nil {
			return err
		}
		buf := make([]byte, size)
		for j := range buf {
			buf[j] = pattern(0, j)
		}
		switch {
		case p.test.bw:
			r, err := tcpStream(c, buf, p)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, r.line())
			results = append(results, r)
		case pipe:
			r, err := tcpPipe(c, buf, p.iters, p.outs)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, r.line())
			results = append(results, r)
		default:
			stamps := make([]int64, p.iters)
			base := time.Now()
			in := make([]byte, size)
			for i := range p.iters {
				stamps[i] = int64(time.Since(base))
				if _, err := c.Write(buf); err != nil {
					return err
				}
				if _, err := io.ReadFull(c, in); err != nil {
					return err
				}
			}
			r := computeLat(size, stamps, 2)
			fmt.Fprintln(out, r.line())
			results = append(results, r)
		}
	}
	c.Write(make([]byte, 24)) // mode 0: bye
	fmt.Fprintln(out, resultLine)
	return writeResults(p, results)
}

func tcpStream(c net.Conn, buf []byte, p *params) (BWResult, error) {
	start := time.Now()
	n := 0
	for {
		if n == p.iters {
			break
		}
		if _, err := c.Write(buf); err != nil {
			return BWResult{}, err
		}
		n++
	}
	var ack [8]byte
	binary.BigEndian.PutUint64(ack[:], uint64(n))
	if _, err := c.Write(ack[:]); err != nil {
		return BWResult{}, err
	}
	if _, err := io.ReadFull(c, ack[:1]); err != nil {
		return BWResult{}, err
	}
	return durationBW(len(buf), n, int64(time.Since(start)), false, p.unit()), nil
}

func tcpServe(c net.Conn) error {
	var hdr [24]byte
	var echoBuf []byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return err
		}
		size := int(binary.BigEndian.Uint32(hdr[4:]))
		iters := int(binary.BigEndian.Uint64(hdr[8:]))
		switch hdr[0] {
		case 0:
			return nil
		case 'B':
			// Stream until the client's count trailer: read exactly
			// count×size bytes after learning the count is impossible
			// up front, so the client writes messages then an 8-byte
			// count; read message-sized chunks while a duration run
			// may send any number.
			if _, err := io.CopyN(io.Discard, c, int64(size)*int64(iters)+8); err != nil {
				return err
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return err
			}
		case 'P':
			// Pipelined: echo the bytes as they come, whatever part
			// of a request a read returns (the client reads whole
			// responses); a 64 KiB buffer, reused.
			if echoBuf == nil {
				echoBuf = make([]byte, 64<<10)
			}
			if err := tcpEcho(c, echoBuf, int64(size)*int64(iters)); err != nil {
				return err
			}
		case 'L':
			in := make([]byte, size)
			for range iters {
				if _, err := io.ReadFull(c, in); err != nil {
					return err
				}
				if _, err := c.Write(in); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("tcp baseline: bad header")
		}
	}
}

// tcpEcho writes back the next n bytes read from c, through buf.
func tcpEcho(c net.Conn, buf []byte, n int64) error {
	for n > 0 {
		k, err := c.Read(buf[:min(int64(len(buf)), n)])
		if k > 0 {
			if _, werr := c.Write(buf[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
		}
		if err != nil && n > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// TCPPipeResult is one line of tcp_lat -o N: the message rate in
// Mops/s (perftest's MsgRate key, as atomic_bw's) and the mean round trip
// of a request in microseconds (t_avg, with rtt_factor 1: the full round
// trip, as Read and atomics report). -o goes to test_info as atomic_bw's
// Outstand_reads.
type TCPPipeResult struct {
	Size    int     `json:"MsgSize"`
	Iters   int     `json:"n_iterations"`
	Outs    int     `json:"-"`              // test_info's Outstand_reads
	Lost    int     `json:"lost,omitempty"` // xdp_lat -o N: frames that never came back (raw frames are not retransmitted)
	MsgRate float64 `json:"MsgRate"`
	Avg     float64 `json:"t_avg"`
	RTTDiv  int     `json:"rtt_factor"`
}

const pipeHeader = " #bytes     #iterations    #outstanding    MsgRate[Mops/s]    t_avg RTT[usec]"

func (r TCPPipeResult) line() string {
	return fmt.Sprintf(" %-7d    %-10d     %-7d         %-7.6f           %-7.2f", r.Size, r.Iters, r.Outs, r.MsgRate, r.Avg)
}

// computePipe is the arithmetic of tcp_lat -o N: sent[i] is when request
// i was written, done[i] when its response had been read (ns, one
// origin). The rate counts the requests over the first write to the last
// response; the round trip is the mean of done[i]−sent[i].
func computePipe(size, outs int, sent, done []int64) TCPPipeResult {
	n := len(done)
	r := TCPPipeResult{Size: size, Iters: n, Outs: outs, RTTDiv: 1}
	if n == 0 || len(sent) < n {
		return r
	}
	var sum float64
	for i := range n {
		sum += float64(done[i] - sent[i])
	}
	r.Avg = sum / float64(n) / 1e3
	if total := done[n-1] - sent[0]; total > 0 {
		r.MsgRate = float64(n) / (float64(total) / 1e9) / 1e6
	}
	return r
}

// tcpPipe runs iters requests of len(buf) bytes with up to outs in
// flight. This goroutine writes them, one Write each; one reader
// goroutine for the run reads the responses (through a buffered reader,
// so several that arrive together cost one read) and returns a credit
// per response. Writer and reader are apart so a window larger than the
// sockets' buffers cannot deadlock the two ends. Nothing in the loops
// allocates: the buffers, stamps and credits are made up front.
func tcpPipe(c net.Conn, buf []byte, iters, outs int) (TCPPipeResult, error) {
	sent := make([]int64, iters)
	done := make([]int64, iters)
	credits := make(chan struct{}, outs)
	for range outs {
		credits <- struct{}{}
	}
	stop := make(chan struct{}) // closed when the reader ends early
	rerr := make(chan error, 1)
	br := bufio.NewReaderSize(c, max(64<<10, len(buf)))
	in := make([]byte, len(buf))
	base := time.Now()
	go func() {
		for i := range iters {
			if _, err := io.ReadFull(br, in); err != nil {
				close(stop)
				rerr <- err
				return
			}
			done[i] = int64(time.Since(base))
			credits <- struct{}{}
		}
		rerr <- nil
	}()
	// A batch: the requests whose credits are there together go out in
	// one Write, up to 64 KiB (as a pipelining client would send them).
	batch := max(1, min(outs, (64<<10)/len(buf)))
	wbuf := make([]byte, 0, batch*len(buf))
	for range batch {
		wbuf = append(wbuf, buf...)
	}
	for i := 0; i < iters; {
		select {
		case <-credits:
		case <-stop:
			return TCPPipeResult{}, <-rerr
		}
		k := 1
	more:
		for k < batch && i+k < iters {
			select {
			case <-credits:
				k++
			default:
				break more
			}
		}
		now := int64(time.Since(base))
		for j := range k {
			sent[i+j] = now
		}
		if _, err := c.Write(wbuf[:k*len(buf)]); err != nil {
			c.Close() // ends the reader
			<-rerr
			return TCPPipeResult{}, err
		}
		i += k
	}
	if err := <-rerr; err != nil {
		return TCPPipeResult{}, err
	}
	return computePipe(len(buf), outs, sent, done), nil
}

// dialControl connects to the server's kernel TCP port, retrying for 5 s
// while it is refused (the server may still be starting); the connection
// closes when ctx ends.
func dialControl(ctx context.Context, p *params) (net.Conn, error) {
	d := net.Dialer{Timeout: p.timeout}
	c, err := d.DialContext(ctx, "tcp", hostPort(p.server, p.port))
	for start := time.Now(); err != nil && errors.Is(err, syscall.ECONNREFUSED) && time.Since(start) < 5*time.Second; {
		time.Sleep(50 * time.Millisecond)
		c, err = d.DialContext(ctx, "tcp", hostPort(p.server, p.port))
	}
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); c.Close() }()
	return c, nil
}
