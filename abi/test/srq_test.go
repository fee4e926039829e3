package abitest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"xrnic/internal/netnstest"
)

// TestSRQProgram runs c/srqtest.c: two rdma_cm connections whose server
// QPs share one SRQ (ibv_create_srq, ibv_post_srq_recv), the limit event,
// an empty SRQ ending one connection only, rdma_create_srq. Kernel
// transport: the clients connect to their own process's address.
func TestSRQProgram(t *testing.T) {
	lib := requireLibs(t)
	requireBins(t)
	netnstest.RequireRoot(t, false)
	bin := buildC(t, "srqtest")
	netnstest.RemoveStale(nsPrefix)
	p := netnstest.NewPair(t, netnstest.PairOptions{Prefix: nsPrefix, DevA: "xra", DevB: "xrb", AddrA: ipA, AddrB: ipB})
	e := &env{lib: lib, tr: transports[0], pair: p, port: 22000}
	pr := e.start(t, p.NSA, time.Minute, nil, bin, ipA.String(), fmt.Sprint(e.nextPort()))
	err := pr.wait()
	out := pr.out.String()
	if err != nil || !strings.Contains(out, "ok srqtest") || strings.Contains(out, "FAIL") {
		t.Fatalf("srqtest: %v\n%s", err, pr.describe())
	}
}
