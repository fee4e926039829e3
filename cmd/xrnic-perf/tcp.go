package main

import (
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
	d := net.Dialer{Timeout: p.timeout}
	c, err := d.DialContext(ctx, "tcp", hostPort(p.server, p.port))
	for start := time.Now(); err != nil && errors.Is(err, syscall.ECONNREFUSED) && time.Since(start) < 5*time.Second; {
		time.Sleep(50 * time.Millisecond) // the server may still be starting
		c, err = d.DialContext(ctx, "tcp", hostPort(p.server, p.port))
	}
	if err != nil {
		return err
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	if p.duration > 0 {
		return fmt.Errorf("%s: -D is not supported (use -n)", p.test.name)
	}
	if p.test.bw {
		fmt.Fprintln(out, bwHeader(p.unit()))
	} else {
		fmt.Fprintln(out, latHeader)
	}
	var results []any
	for _, size := range p.sizes() {
		var hdr [24]byte
		hdr[0] = 'B'
		if !p.test.bw {
			hdr[0] = 'L'
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
		if p.test.bw {
			r, err := tcpStream(c, buf, p)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, r.line())
			results = append(results, r)
		} else {
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
