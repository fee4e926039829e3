package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Cred are a connected peer's credentials (SO_PEERCRED) plus its
// supplementary groups (from /proc/PID/status).
type Cred struct {
	PID, UID, GID int
	Groups        []int
}

// Policy decides whether a peer may use the control API.
type Policy func(Cred) bool

// DefaultPolicy admits root, the daemon's own user, and members (primary
// or supplementary) of gid, the socket's group.
func DefaultPolicy(gid int) Policy {
	me := os.Getuid()
	return func(c Cred) bool {
		if c.UID == 0 || c.UID == me || c.GID == gid {
			return true
		}
		for _, g := range c.Groups {
			if g == gid {
				return true
			}
		}
		return false
	}
}

type credKey struct{}

// peerCred reads SO_PEERCRED of a unix connection.
func peerCred(c net.Conn) (Cred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}, errors.New("control: not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var u *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { u, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return Cred{}, err
	}
	if serr != nil {
		return Cred{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	cr := Cred{PID: int(u.Pid), UID: int(u.Uid), GID: int(u.Gid)}
	cr.Groups = procGroups(cr.PID)
	return cr, nil
}

// procGroups reads the supplementary groups of pid (best effort).
func procGroups(pid int) []int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			var gs []int
			for _, f := range strings.Fields(rest) {
				if g, err := strconv.Atoi(f); err == nil {
					gs = append(gs, g)
				}
			}
			return gs
		}
	}
	return nil
}

// SocketServer serves the JSON control API on a unix socket.
type SocketServer struct {
	path string
	ln   *net.UnixListener

	made []string // directories ListenSocket created, deepest first

	mu     sync.Mutex
	srv    *http.Server
	closed bool
}

// mkdirs creates dir and its missing parents and returns those it
// created, deepest first, so that they can be removed again.
func mkdirs(dir string) ([]string, error) {
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		removeDirs(made)
		return nil, err
	}
	return made, nil
}

// removeDirs removes the directories (deepest first) while they are empty.
func removeDirs(dirs []string) {
	for _, d := range dirs {
		if os.Remove(d) != nil {
			return
		}
	}
}

// ListenSocket creates the control socket at path with mode 0660 and group
// gid (-1 keeps the process's group), removing a stale socket file left by
// a crashed daemon. It fails if another daemon answers on path.
func ListenSocket(path string, gid int) (s *SocketServer, err error) {
	made, err := mkdirs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("control socket: %w (choose another --socket or create the directory)", err)
	}
	defer func() {
		if err != nil {
			removeDirs(made) // a failed start leaves nothing behind
		}
	}()
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another xrnicd is running (stop it or use another --socket)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket %s: removing stale socket: %w", path, err)
		}
	}
	old := unix.Umask(0o117)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket: chown group %d: %w", gid, err)
		}
	}
	return &SocketServer{path: path, ln: ln, made: made}, nil
}

// Path returns the socket path.
func (s *SocketServer) Path() string { return s.path }

// Serve is ServeConfig with the default bounds.
func (s *SocketServer) Serve(h http.Handler, policy Policy) error {
	return s.ServeConfig(h, policy, ServerConfig{})
}

// ServeConfig serves h to peers admitted by policy until Close, within
// c's bounds. Each connection's peer credentials are read when it is
// accepted: a refused peer is closed at once, before it can send a
// request, hold a connection or count against c.MaxConns.
func (s *SocketServer) ServeConfig(h http.Handler, policy Policy, c ServerConfig) error {
	c = c.withDefaults()
	if c.Stats.Name == "" {
		c.Stats.Name = "control"
	}
	cl := &credListener{UnixListener: s.ln, policy: policy, st: c.Stats, log: c.Log}
	ll := NewLimitListener(cl, c.MaxConns, c.Stats, c.Log)
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Refused peers never get here; checked again all the same.
		cr, ok := r.Context().Value(credKey{}).(Cred)
		if !ok || !policy(cr) {
			http.Error(w, ErrDenied.Error(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}), ll, c)
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if cr, ok := connCred(nc); ok {
			return context.WithValue(ctx, credKey{}, cr)
		}
		return ctx
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.srv = srv
	s.mu.Unlock()
	err := srv.Serve(ll)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// credListener reads each accepted connection's peer credentials and
// closes the refused ones at once.
type credListener struct {
	*net.UnixListener
	policy Policy
	st     *ServerStats
	log    LogFunc
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cr, err := peerCred(c)
		if err == nil && l.policy(cr) {
			return &credConn{UnixConn: c, cred: cr}, nil
		}
		// Closed before anything is read or written: the client sees
		// the connection closed (control.Client says why), and a
		// refused user can hold nothing. (An early 403 would reach Go
		// clients before their request and be dropped as unsolicited.)
		l.st.credentials.Add(1)
		c.Close()
		if err != nil {
			l.log(slog.LevelWarn, "control-refused", "control socket: connection closed: peer credentials unreadable", "err", err)
		} else {
			l.log(slog.LevelWarn, "control-refused", "control socket: peer refused (not root, the daemon's user or the socket's group)",
				"uid", cr.UID, "gid", cr.GID, "pid", cr.PID)
		}
	}
}

// credConn is an admitted connection with its peer's credentials.
type credConn struct {
	*net.UnixConn
	cred Cred
}

// connCred finds the credentials of a connection credListener admitted,
// through the wrappers around it.
func connCred(c net.Conn) (Cred, bool) {
	for c != nil {
		if cc, ok := c.(*credConn); ok {
			return cc.cred, true
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	return Cred{}, false
}

// Close stops serving and removes the socket file.
func (s *SocketServer) Close() error {
	s.mu.Lock()
	s.closed = true
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
	s.ln.Close()
	var err error
	if _, lerr := os.Lstat(s.path); lerr == nil {
		err = os.Remove(s.path)
	}
	removeDirs(s.made) // the directories it created for the socket, when empty
	return err
}
