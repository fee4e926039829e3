package reliability

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xrnic/internal/engine/enginetest"
	"xrnic/mem"
	"xrnic/wire/rdmap"
	"xrnic/wire/term"
)

// TestPDIsolation: two PDs on one device. A QP of PD A reaches PD A's
// region and never PD B's, by any operation, even with B's exact STag
// (RFC 5040 §8.1.1, RFC 5042 §2.2.4): the answer is "STag not associated"
// (DDP 1/0x02 for placement, RDMAP 1/0x03 for Read and atomics), and B's
// bytes stay as they were. A stream-bound region refuses other streams of
// its own PD the same way. (Access rights per operation, bounds, wrap and
// alignment, with every Terminate code, are the table in
// internal/engine/negative_test.go; not repeated here.)
func TestPDIsolation(t *testing.T) {
	e := newEngine(t)
	pdA, pdB := e.pd, e.dev.AllocPD()
	all := mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic
	mrA, _ := e.region(t, pdA, 4096, all, 0xA)
	mrB, bufB := e.region(t, pdB, 4096, all, 0xB)
	sumB := sum(bufB)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for op := guessOp(0); op < numGuessOps; op++ {
		// A's own region works through a QP of A (a Read or atomic gets a
		// response, a Write is answered by nothing: the next request then
		// works too).
		q, p, err := e.connect(ctx, pdA)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Send(guessULPDU(op, mrA.STag(), 0)); err != nil {
			t.Fatal(err)
		}
		if op != guessWrite {
			u, err := p.Next(5 * time.Second)
			if err != nil || len(u) < 2 || u[1]&0x0F == 0x07 {
				t.Fatalf("%v on its own PD's region: %v % x", op, err, u)
			}
		}
		// Now B's STag from the same QP.
		msn := uint32(2) // the second Read/Atomic Request of the stream
		if op == guessWrite {
			msn = 1
		}
		if err := p.Send(guessULPDUMSN(op, mrB.STag(), 0, msn)); err != nil {
			t.Fatal(err)
		}
		tm, _, err := p.ExpectTerminate(5 * time.Second)
		want := term.RDMAPSTagNotAssociated
		if op == guessWrite {
			want = term.DDPTaggedSTagNotAssociated
		}
		if err != nil || tm.Err != want {
			t.Fatalf("%v from PD A on PD B's STag: %v %v, want %v", op, tm.Err, err, want)
		}
		p.Close()
		q.close(e)
	}
	if sum(bufB) != sumB {
		t.Fatal("PD B's region changed")
	}

	// Stream binding inside one PD.
	q1, p1, err := e.connect(ctx, pdA)
	if err != nil {
		t.Fatal(err)
	}
	defer q1.close(e)
	defer p1.Close()
	bound := make([]byte, 4096)
	mrS, err := e.dev.RegMR(bound, mem.MROptions{PD: pdA, Access: all | mem.LocalWrite, Stream: q1.qp.Num(), TO: mem.TOZeroBased})
	if err != nil {
		t.Fatal(err)
	}
	q2, p2, err := e.connect(ctx, pdA)
	if err != nil {
		t.Fatal(err)
	}
	defer q2.close(e)
	defer p2.Close()
	p2.Send(guessULPDU(guessFetchAdd, mrS.STag(), 0))
	if tm, _, err := p2.ExpectTerminate(5 * time.Second); err != nil || tm.Err != term.RDMAPSTagNotAssociated {
		t.Fatalf("atomic on another stream's bound STag: %v %v", tm.Err, err)
	}
	p1.Send(guessULPDU(guessFetchAdd, mrS.STag(), 0))
	if u, err := p1.Next(5 * time.Second); err != nil || len(u) < 2 || u[1]&0x0F == 0x07 {
		t.Fatalf("atomic on its own stream's bound STag: %v % x", err, u)
	}
	if bound[0] != 1 && bound[7] != 1 {
		t.Fatalf("the owning stream's FetchAdd did not land: % x", bound[:8])
	}
}

// TestRevocation: an STag that was deregistered, invalidated, or replaced
// by re-registration is refused, and its old memory is not touched (RFC
// 5040 §8.1.1: after revocation the RNIC must not modify the buffer).
func TestRevocation(t *testing.T) {
	e := newEngine(t)
	all := mem.RemoteRead | mem.RemoteWrite | mem.RemoteAtomic
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, how := range []string{"deregistered", "invalidated", "re-registered"} {
		t.Run(how, func(t *testing.T) {
			mr, buf := e.region(t, e.pd, 4096, all, 0x3C)
			stag := mr.STag()
			switch how {
			case "deregistered":
				if err := e.dev.DeregMR(mr); err != nil {
					t.Fatal(err)
				}
			case "invalidated":
				if err := e.dev.Table().Invalidate(stag, e.pd); err != nil {
					t.Fatal(err)
				}
			case "re-registered":
				m2, err := e.dev.Table().Reregister(mr, nil, mem.MROptions{PD: e.pd, Access: all | mem.LocalWrite, TO: mem.TOZeroBased})
				if err != nil {
					t.Fatal(err)
				}
				if m2.STag() == stag || m2.STag()>>8 != stag>>8 {
					t.Fatalf("re-registration kept the key: %#x -> %#x", stag, m2.STag())
				}
				defer e.dev.DeregMR(m2)
			}
			s0 := sum(buf)
			for op := guessOp(0); op < numGuessOps; op++ {
				got, err := e.guess(ctx, e.pd, op, stag, 0)
				if err != nil || got != wantGuessErr(op) {
					t.Fatalf("%v on a %s STag: %s", op, how, errString(got, err))
				}
			}
			if sum(buf) != s0 {
				t.Fatalf("the memory of a %s STag changed", how)
			}
		})
	}
}

// TestIntegrationDaemonGuessing: STag guesses against a real xrnicd over
// loopback TCP, each on its own connection: every one is answered with the
// Terminate of an invalid STag, the regions are unchanged (read back
// through a fresh connection), the daemon's QPs all end, and a legitimate
// client still works. 1,000 guesses (10,000 with XRNIC_LONG=1).
func TestIntegrationDaemonGuessing(t *testing.T) {
	n := 1000
	if long() {
		n = 10_000
	}
	if testing.Short() {
		n = 100
	}
	d := startDaemon(t, "--region", "data:64K:rw", "--region", "counter:4K:rwa", "--log-level", "warn", "--sink-depth", "2", "--sink-buffer", "1K")
	live := map[uint32]bool{}
	for _, r := range d.regions {
		live[r.stag(t)] = true
	}
	before := d.mustCtl(t, "read", d.listen, d.regions["data"].STag, "0", "4096")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	refused := 0
	for i := 0; i < n; i++ {
		stag := uint32(rng2(int64(i)+7) >> 32)
		if live[stag] {
			continue
		}
		op := guessOp(i % int(numGuessOps))
		p, err := enginetest.Dial(ctx, d.listen, enginetest.Options{})
		if err != nil {
			t.Fatalf("guess %d: dial: %v", i, err)
		}
		p.Send(guessULPDU(op, stag, 0))
		tm, _, err := p.ExpectTerminate(5 * time.Second)
		p.Close()
		if err != nil || tm.Err != wantGuessErr(op) {
			t.Fatalf("guess %d (%v %#x): %v %v", i, op, stag, tm.Err, err)
		}
		refused++
	}
	el := time.Since(start)
	if after := d.mustCtl(t, "read", d.listen, d.regions["data"].STag, "0", "4096"); after != before {
		t.Fatal("the data region changed under the guesses")
	}
	deadline := time.Now().Add(15 * time.Second)
	for d.status(t) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if q := d.status(t); q != 0 {
		t.Fatalf("%d QPs left after the guesses", q)
	}
	c := d.regions["counter"]
	d.mustCtl(t, "fetchadd", d.listen, c.STag, c.TO, "1")
	t.Logf("%d guesses against xrnicd over loopback TCP, all refused with a Terminate: %.0f guesses/s (connection setup dominates)",
		refused, float64(refused)/el.Seconds())
}

// TestIntegrationControlSocketOtherUser: the control socket (mode 0660,
// root:root here) refuses a process of another user: xrnicctl run as
// nobody cannot read status, and the daemon is unaffected. Root only.
func TestIntegrationControlSocketOtherUser(t *testing.T) {
	uid, gid := nobody(t, "run xrnicctl as another user (nobody)")
	d := startDaemon(t, "--region", "x:4K:r")
	// The directories on the way must be traversable by nobody, so that
	// it is the socket's own permission (and the daemon's peer-credential
	// policy) that refuses it, not a parent directory.
	for p := d.socket; p != "/" && p != "."; {
		p = p[:strings.LastIndex(p, "/")]
		if p == "" {
			break
		}
		if st, err := os.Stat(p); err == nil && st.Mode()&0o001 == 0 {
			os.Chmod(p, st.Mode().Perm()|0o011)
		}
	}
	// Also with the socket itself opened up to everybody: the peer
	// credential check must still refuse.
	for _, open := range []bool{false, true} {
		if open {
			os.Chmod(d.socket, 0o666)
		}
		cmd := exec.Command(xrnicctl, "--socket", d.socket, "--timeout", "5s", "status", "-j")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("xrnicctl as nobody (socket mode open=%v) succeeded:\n%s", open, out)
		}
		if bytes.Contains(out, []byte(`"ready"`)) {
			t.Fatalf("nobody got the status: %s", out)
		}
		t.Logf("as nobody, socket open to all=%v: refused: %s", open, strings.TrimSpace(string(out)))
	}
	d.mustCtl(t, "status")
}

// TestIntegrationLogsNoSecrets: a session through the daemon with
// --log-level debug writes and reads distinctive bytes, sends a message
// and private data; none of them may appear in the daemon's output, in
// any encoding a log would use (raw, hex, base64-ish fragments are
// covered by hex and raw).
func TestIntegrationLogsNoSecrets(t *testing.T) {
	d := startDaemon(t, "--region", "data:64K:rw", "--region", "counter:4K:rwa", "--log-level", "debug")
	secret := []byte("S3CR3T-xrnic-7f1d2c9e")
	secretHex := hex.EncodeToString(secret)
	data := d.regions["data"]
	d.mustCtl(t, "write", d.listen, data.STag, "128", secretHex)
	if out := d.mustCtl(t, "read", d.listen, data.STag, "128", strconv.Itoa(len(secret))); !strings.Contains(out, secretHex) {
		t.Fatalf("read back %q, want %s", out, secretHex)
	}
	d.mustCtl(t, "send", d.listen, string(secret))
	c := d.regions["counter"]
	d.mustCtl(t, "fetchadd", d.listen, c.STag, c.TO, "0x5ec2e75ec2e75ec2")
	// Private data in the MPA Request, and a malformed request.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p, err := enginetest.Dial(ctx, d.listen, enginetest.Options{PrivateData: secret}); err == nil {
		w := make([]byte, 14+len(secret))
		rdmap.PutWrite(w, data.stag(t), 0x10000-4, true, len(secret)) // out of bounds: a Terminate
		copy(w[14:], secret)
		p.Send(w)
		p.ExpectTerminate(5 * time.Second)
		p.Close()
	} else {
		t.Fatal(err)
	}
	// The claim is about debug-level logs, so debug logging must have
	// been on: xrnicd logs each orderly QP close at debug level, and each
	// of the four xrnicctl sessions above ended in one.
	const closed = `level=DEBUG msg="QP closed" `
	time.Sleep(300 * time.Millisecond)
	logs := d.log.Bytes()
	for deadline := time.Now().Add(5 * time.Second); bytes.Count(logs, []byte(closed)) < 4 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		logs = d.log.Bytes()
	}
	if n := bytes.Count(logs, []byte(closed)); n < 4 {
		t.Errorf("%d lines %q in the daemon's output, want one per xrnicctl session (4): nothing was checked at debug level", n, closed)
	}
	for _, needle := range [][]byte{secret, []byte(secretHex), []byte(strings.ToUpper(secretHex)), []byte("5ec2e75ec2e75ec2"), []byte("7f1d2c9e")} {
		if bytes.Contains(logs, needle) {
			i := bytes.Index(logs, needle)
			t.Errorf("daemon output contains %q: ...%s...", needle, logs[max(0, i-200):min(len(logs), i+100)])
		}
	}
	if !t.Failed() {
		t.Logf("daemon logged %d bytes at debug level; no payload, private data or atomic operand in them", len(logs))
	}
}

// TestIntegrationQPLimit: --max-qps bounds the QPs of the daemon; a
// connection beyond it is rejected at MPA (not accepted and left hanging),
// and once QPs close new ones are accepted again.
func TestIntegrationQPLimit(t *testing.T) {
	const limit = 5
	d := startDaemon(t, "--region", "counter:4K:rwa", "--max-qps", strconv.Itoa(limit), "--log-level", "warn", "--sink-depth", "2", "--sink-buffer", "1K")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var peers []*enginetest.Peer
	for i := 0; i < limit; i++ {
		p, err := enginetest.Dial(ctx, d.listen, enginetest.Options{})
		if err != nil {
			t.Fatalf("connection %d of %d: %v", i+1, limit, err)
		}
		peers = append(peers, p)
	}
	if _, err := enginetest.Dial(ctx, d.listen, enginetest.Options{}); err == nil {
		t.Fatalf("connection %d accepted with --max-qps %d", limit+1, limit)
	} else {
		t.Logf("connection %d: %v", limit+1, err)
	}
	for _, p := range peers {
		p.Close()
	}
	deadline := time.Now().Add(15 * time.Second)
	for d.status(t) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	p, err := enginetest.Dial(ctx, d.listen, enginetest.Options{})
	if err != nil {
		t.Fatalf("after the QPs closed: %v", err)
	}
	p.Close()
}

// TestIntegrationQPLimitPerPeer: --max-qps-per-peer keeps one client
// address from taking every QP: its third connection is rejected while
// another address (127.0.0.2, also loopback) is still served.
func TestIntegrationQPLimitPerPeer(t *testing.T) {
	d := startDaemon(t, "--region", "counter:4K:rwa", "--max-qps", "10", "--max-qps-per-peer", "2", "--log-level", "warn", "--sink-depth", "2", "--sink-buffer", "1K")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dialFrom := func(src string) (*enginetest.Peer, error) {
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := dl.DialContext(ctx, "tcp", d.listen)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		p, err := enginetest.Handshake(c, enginetest.Options{})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.SetDeadline(time.Time{})
		return p, nil
	}
	var keep []*enginetest.Peer
	defer func() {
		for _, p := range keep {
			p.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		p, err := dialFrom("127.0.0.1")
		if err != nil {
			t.Fatalf("connection %d from 127.0.0.1: %v", i+1, err)
		}
		keep = append(keep, p)
	}
	if p, err := dialFrom("127.0.0.1"); err == nil {
		p.Close()
		t.Fatal("a third connection from 127.0.0.1 was accepted with --max-qps-per-peer 2")
	}
	p, err := dialFrom("127.0.0.2")
	if err != nil {
		t.Fatalf("another peer address was refused: %v", err)
	}
	keep = append(keep, p)
	keep[0].Close()
	keep = keep[1:]
	deadline := time.Now().Add(10 * time.Second)
	for d.status(t) != 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p, err = dialFrom("127.0.0.1")
	if err != nil {
		t.Fatalf("after one of its QPs closed, 127.0.0.1 was refused: %v", err)
	}
	keep = append(keep, p)
}

// TestIntegrationRegisteredBytesLimit: regions beyond
// --max-registered-bytes stop the daemon at start-up with a message that
// names the limit.
func TestIntegrationRegisteredBytesLimit(t *testing.T) {
	buildBins(t)
	dir := t.TempDir()
	// A daemon that ignores the limit would run on: bound the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, xrnicd, "--transport", "kernel", "--listen", "127.0.0.1:0", "--metrics", "off", "--socket", dir+"/s.sock",
		"--hugepages", "off", "--max-registered-bytes", "1M", "--region", "a:768K:r", "--region", "b:512K:r")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("xrnicd still ran 60 s with 1.25 MiB of regions over --max-registered-bytes 1M:\n%s", out)
	}
	if err == nil {
		t.Fatalf("xrnicd started with 1.25 MiB of regions over --max-registered-bytes 1M:\n%s", out)
	}
	if !strings.Contains(string(out), "max-registered-bytes") {
		t.Fatalf("the error does not name the limit:\n%s", out)
	}
}
