package abitest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// rpingData is ping k's payload as rping prints it with -S size:
// "rdma-ping-k: " then letters from 'A'+k (65..122, wrapping), the last
// byte of the buffer a NUL.
func rpingData(k, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", k))
	c := byte(65 + k%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b[:size-1])
}

// checkPings checks that out has exactly the count ping lines of prefix,
// in order, with the right data.
func checkPings(out, prefix string, count, size int) error {
	k := 0
	for _, line := range strings.Split(out, "\n") {
		data, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		if k >= count {
			return fmt.Errorf("more than %d %q lines", count, prefix)
		}
		if want := rpingData(k, size); data != want {
			return fmt.Errorf("ping %d: %q, want %q", k, data, want)
		}
		k++
	}
	if k != count {
		return fmt.Errorf("%d %q lines, want %d", k, prefix, count)
	}
	return nil
}

func TestRping(t *testing.T) {
	forEachTransport(t, []string{"rping"}, func(t *testing.T, e *env) {
		for _, c := range []struct{ count, size int }{{50, 64}, {50, 4096}, {10, 65000}} {
			t.Run(fmt.Sprintf("C%d_S%d", c.count, c.size), func(t *testing.T) {
				port := fmt.Sprint(e.nextPort())
				common := []string{"-a", ipA.String(), "-p", port, "-v", "-C", fmt.Sprint(c.count), "-S", fmt.Sprint(c.size)}
				srv := e.startServer(t, 60*time.Second, e.port, "rping", append([]string{"-s"}, common...)...)
				cli := e.start(t, e.pair.NSB, 60*time.Second, nil, "rping", append([]string{"-c", "-V"}, common...)...)
				cliErr, srvErr := cli.wait(), srv.waitAfter(cli)
				if cliErr != nil || srvErr != nil {
					t.Fatalf("rping failed\nclient %s\nserver %s", cli.describe(), srv.describe())
				}
				if err := checkPings(cli.out.String(), "ping data: ", c.count, c.size); err != nil {
					t.Errorf("client: %v\n%s", err, cli.describe())
				}
				if err := checkPings(srv.out.String(), "server ping data: ", c.count, c.size); err != nil {
					t.Errorf("server: %v\n%s", err, srv.describe())
				}
			})
		}
	})
}
