package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"xrnic/internal/require"
)

// parseEnums returns the values of every enumerator in a C header's
// enums (implicit values counted, simple constant expressions: numbers,
// shifts, ors, and earlier enumerators).
func parseEnums(t *testing.T, paths ...string) map[string]int64 {
	vals := map[string]int64{}
	for _, path := range paths {
		parseHeader(t, path, vals)
	}
	return vals
}

func parseHeader(t *testing.T, path string, vals map[string]int64) {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err, "needs rdma-core's headers to check the ABI values (Debian: apt-get install libibverbs-dev librdmacm-dev)")
	s := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(src), "")
	s = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(s, "")
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(\w+)\s+(.+)$`).FindAllStringSubmatch(s, -1) {
		if v, ok := evalExpr(m[2], vals); ok {
			vals[m[1]] = v
		}
	}
	for _, m := range regexp.MustCompile(`(?s)enum\s+\w*\s*\{(.*?)\}`).FindAllStringSubmatch(s, -1) {
		next := int64(0)
		for _, item := range strings.Split(m[1], ",") {
			item = strings.TrimSpace(item)
			if item == "" || strings.HasPrefix(item, "#") {
				continue
			}
			name, expr, has := strings.Cut(item, "=")
			name = strings.TrimSpace(name)
			if has {
				v, ok := evalExpr(strings.TrimSpace(expr), vals)
				if !ok {
					next = -1 << 40 // unknown: the following implicit ones too
					continue
				}
				next = v
			}
			if next >= 0 {
				vals[name] = next
			}
			next++
		}
	}
}

func evalExpr(e string, vals map[string]int64) (int64, bool) {
	e = strings.TrimSpace(e)
	for strings.HasPrefix(e, "(") && strings.HasSuffix(e, ")") {
		e = strings.TrimSpace(e[1 : len(e)-1])
	}
	if a, b, ok := strings.Cut(e, "|"); ok {
		x, ok1 := evalExpr(a, vals)
		y, ok2 := evalExpr(b, vals)
		return x | y, ok1 && ok2
	}
	if a, b, ok := strings.Cut(e, "<<"); ok {
		x, ok1 := evalExpr(a, vals)
		y, ok2 := evalExpr(b, vals)
		return x << y, ok1 && ok2
	}
	if v, ok := vals[e]; ok {
		return v, true
	}
	v, err := strconv.ParseInt(strings.TrimRight(e, "uUlL"), 0, 64)
	return v, err == nil
}

func TestABIValues(t *testing.T) {
	v := parseEnums(t, "/usr/include/infiniband/ib_user_ioctl_verbs.h", "/usr/include/infiniband/verbs_api.h",
		"/usr/include/infiniband/verbs.h")
	// IBV_ACCESS_OPTIONAL_RANGE is an expression of these two.
	if first, last := v["IB_UVERBS_ACCESS_OPTIONAL_FIRST"], v["IB_UVERBS_ACCESS_OPTIONAL_LAST"]; first == 0 || last == 0 {
		t.Error("IB_UVERBS_ACCESS_OPTIONAL_FIRST/LAST not found")
	} else {
		v["IBV_ACCESS_OPTIONAL_RANGE"] = ((last << 1) - 1) &^ (first - 1)
	}
	cm := parseEnums(t, "/usr/include/rdma/rdma_cma.h")
	check := func(m map[string]int64, name string, ours int64) {
		t.Helper()
		got, ok := m[name]
		if !ok {
			t.Errorf("%s not found in the header", name)
		} else if got != ours {
			t.Errorf("%s = %d in the header, %d here", name, got, ours)
		}
	}
	for name, ours := range map[string]int64{
		"IBV_WC_SUCCESS": IBV_WC_SUCCESS, "IBV_WC_LOC_LEN_ERR": IBV_WC_LOC_LEN_ERR,
		"IBV_WC_LOC_QP_OP_ERR": IBV_WC_LOC_QP_OP_ERR, "IBV_WC_LOC_PROT_ERR": IBV_WC_LOC_PROT_ERR,
		"IBV_WC_WR_FLUSH_ERR": IBV_WC_WR_FLUSH_ERR, "IBV_WC_BAD_RESP_ERR": IBV_WC_BAD_RESP_ERR,
		"IBV_WC_LOC_ACCESS_ERR": IBV_WC_LOC_ACCESS_ERR, "IBV_WC_REM_INV_REQ_ERR": IBV_WC_REM_INV_REQ_ERR,
		"IBV_WC_REM_ACCESS_ERR": IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_OP_ERR": IBV_WC_REM_OP_ERR,
		"IBV_WC_RETRY_EXC_ERR": IBV_WC_RETRY_EXC_ERR, "IBV_WC_FATAL_ERR": IBV_WC_FATAL_ERR,
		"IBV_WC_GENERAL_ERR": IBV_WC_GENERAL_ERR,
		"IBV_WC_SEND":        IBV_WC_SEND, "IBV_WC_RDMA_WRITE": IBV_WC_RDMA_WRITE, "IBV_WC_RDMA_READ": IBV_WC_RDMA_READ,
		"IBV_WC_COMP_SWAP": IBV_WC_COMP_SWAP, "IBV_WC_FETCH_ADD": IBV_WC_FETCH_ADD, "IBV_WC_LOCAL_INV": IBV_WC_LOCAL_INV,
		"IBV_WC_RECV": IBV_WC_RECV, "IBV_WC_RECV_RDMA_WITH_IMM": IBV_WC_RECV_RDMA_WITH_IMM,
		"IBV_WC_WITH_IMM": IBV_WC_WITH_IMM, "IBV_WC_WITH_INV": IBV_WC_WITH_INV,
		"IBV_QPS_INIT": IBV_QPS_INIT, "IBV_QPS_RTR": IBV_QPS_RTR, "IBV_QPS_RTS": IBV_QPS_RTS,
		"IBV_QPS_SQD": IBV_QPS_SQD, "IBV_QPS_ERR": IBV_QPS_ERR,
		"IBV_EVENT_QP_FATAL": IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_ACCESS_ERR": IBV_EVENT_QP_ACCESS_ERR,
		"IBV_EVENT_SRQ_LIMIT_REACHED": IBV_EVENT_SRQ_LIMIT_REACHED,
		"IBV_SRQ_MAX_WR":              srqMaxWR, "IBV_SRQ_LIMIT": srqLimit,
		"IBV_ACCESS_LOCAL_WRITE": IBV_ACCESS_LOCAL_WRITE, "IBV_ACCESS_REMOTE_WRITE": IBV_ACCESS_REMOTE_WRITE,
		"IBV_ACCESS_REMOTE_READ": IBV_ACCESS_REMOTE_READ, "IBV_ACCESS_REMOTE_ATOMIC": IBV_ACCESS_REMOTE_ATOMIC,
		"IBV_ACCESS_MW_BIND": IBV_ACCESS_MW_BIND, "IBV_ACCESS_ZERO_BASED": IBV_ACCESS_ZERO_BASED,
		"IBV_ACCESS_ON_DEMAND": IBV_ACCESS_ON_DEMAND, "IBV_ACCESS_HUGETLB": IBV_ACCESS_HUGETLB,
		"IBV_ACCESS_OPTIONAL_FIRST": IBV_ACCESS_OPTIONAL_FIRST, "IBV_ACCESS_OPTIONAL_RANGE": IBV_ACCESS_OPTIONAL_RANGE,
		"IBV_ACCESS_RELAXED_ORDERING": IBV_ACCESS_RELAXED_ORDERING,
		"IBV_MTU_256":                 IBV_MTU_256, "IBV_MTU_512": IBV_MTU_512, "IBV_MTU_1024": IBV_MTU_1024,
		"IBV_MTU_2048": IBV_MTU_2048, "IBV_MTU_4096": IBV_MTU_4096,
		"IBV_PORT_DOWN": IBV_PORT_DOWN, "IBV_PORT_ACTIVE": IBV_PORT_ACTIVE, "IBV_ATOMIC_GLOB": IBV_ATOMIC_GLOB,
	} {
		check(v, name, ours)
	}
	for name, ours := range map[string]int64{
		"RDMA_CM_EVENT_ADDR_RESOLVED": RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_ERROR": RDMA_CM_EVENT_ADDR_ERROR,
		"RDMA_CM_EVENT_ROUTE_RESOLVED": RDMA_CM_EVENT_ROUTE_RESOLVED, "RDMA_CM_EVENT_CONNECT_REQUEST": RDMA_CM_EVENT_CONNECT_REQUEST,
		"RDMA_CM_EVENT_CONNECT_ERROR": RDMA_CM_EVENT_CONNECT_ERROR, "RDMA_CM_EVENT_UNREACHABLE": RDMA_CM_EVENT_UNREACHABLE,
		"RDMA_CM_EVENT_REJECTED": RDMA_CM_EVENT_REJECTED, "RDMA_CM_EVENT_ESTABLISHED": RDMA_CM_EVENT_ESTABLISHED,
		"RDMA_CM_EVENT_DISCONNECTED": RDMA_CM_EVENT_DISCONNECTED,
	} {
		check(cm, name, ours)
	}
}
