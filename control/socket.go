package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	srv  *http.Server
}

// ListenSocket creates the control socket at path with mode 0660 and group
// gid (-1 keeps the process's group), removing a stale socket file left by
// a crashed daemon. It fails if another daemon answers on path.
func ListenSocket(path string, gid int) (*SocketServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket: %w (choose another --socket or create the directory)", err)
	}
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
	return &SocketServer{path: path, ln: ln}, nil
}

// Path returns the socket path.
func (s *SocketServer) Path() string { return s.path }

// Serve serves h to peers admitted by policy until Close; others get 403.
func (s *SocketServer) Serve(h http.Handler, policy Policy) error {
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, ok := r.Context().Value(credKey{}).(Cred)
			if !ok || !policy(c) {
				http.Error(w, ErrDenied.Error(), http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if cr, err := peerCred(c); err == nil {
				return context.WithValue(ctx, credKey{}, cr)
			}
			return ctx
		},
		ReadHeaderTimeout: 5 * time.Second,
	}
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving and removes the socket file.
func (s *SocketServer) Close() error {
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.srv.Shutdown(ctx)
	}
	s.ln.Close()
	if _, err := os.Lstat(s.path); err == nil {
		return os.Remove(s.path)
	}
	return nil
}
