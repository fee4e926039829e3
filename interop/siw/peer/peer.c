// xrnic-peer: a librdmacm/libibverbs test peer for the siw interop suite,
// for what the stock tools cannot do. Built against Debian's rdma-core
// headers by the harness (interop/siw) and run in the guest.
//
// It connects (-c HOST) or listens (-s) on port -p, for -n connections.
// Each connection's private data (accept or connect) describes two memory
// regions of the peer, big-endian:
//   "XRPR" | u32 version=1 | u64 rw_addr | u32 rw_len | u32 rw_rkey
//          | u64 ro_addr | u32 ro_len | u32 ro_rkey            (40 bytes)
// rw allows remote read and write, ro remote read only.
//
// The other side drives the peer with Sends carrying ASCII commands; the
// peer answers each (but SEND and DISCONNECT) with a Send "OK ..." or
// "ERR ...". Non-command messages are recorded for LAST. As the initiator
// (-c) it first sends "HELLO i": an MPA responder waits for the first FPDU.
//   ECHO ...                    send the same bytes back
//   FILL off len seed           rw[off+i] = pattern(seed, i)
//   SUM off len                 OK <fnv1a64 of rw[off:off+len], 16 hex digits>
//   LAST                        OK <len> <fnv> <wc_flags> <invalidated_rkey> of the last data receive
//   WRITE loff len raddr rkey   RDMA Write rw[loff:] -> remote; OK
//   READ loff len raddr rkey    RDMA Read remote -> rw[loff:]; OK <fnv of the bytes read>
//   SEND loff len [SE] [INV k]  a Send of rw[loff:loff+len] (solicited, with invalidate)
//   BURST W|R n len raddr rkey  n Writes or Reads of len bytes, many outstanding; OK <n>
//   DISCONNECT                  rdma_disconnect
// Everything that happens is logged to stdout, a line each:
//   CONNECTED i pdata=<hex>, RECV i len flags, WC_ERR i op status (num),
//   CQEVENT n (with -S), DISCONNECTED i, CMEVENT i name status,
//   FLUSHED i n (work requests flushed, at the end), EXIT code.
// Exit: 0 when every connection ended with DISCONNECTED and no completion
// failed, 3 when a completion failed, 2 on timeout (-t), 1 on setup errors.
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define MAXC 128
#define NRECV 16
#define DEPTH 256

struct conn {
	struct rdma_cm_id *id;
	struct ibv_mr *rw_mr, *ro_mr, *recv_mr, *ctl_mr;
	char *rw, *ro, *recv, *ctl;
	int connected, disconnected, flushed;
	/* the last data receive */
	uint32_t last_len, last_flags, last_inv;
	uint64_t last_fnv;
	/* BURST in progress */
	int burst_left, burst_out;
	/* READ in progress: reply when it completes */
	uint64_t read_off, read_len;
};

static struct rdma_event_channel *ech;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_comp_channel *cch;
static struct conn conns[MAXC];
static int nconn, want = 1, ended, failed, solicited_only, server;
static size_t bufsize = 16 << 20, recvsize = 1 << 16;
static uint32_t ird = 16, ord = 16;
static unsigned long cqevents;

static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void die(const char *what)
{
	say("FATAL %s: %s", what, strerror(errno));
	say("EXIT 1");
	exit(1);
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static unsigned char pattern(uint32_t seed, uint64_t i)
{
	return (unsigned char)(seed + i + (i >> 8) + (i >> 16));
}

static const char *opname(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return "send";
	case IBV_WC_RDMA_WRITE: return "write";
	case IBV_WC_RDMA_READ: return "read";
	case IBV_WC_RECV: return "recv";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "recv_imm";
	default: return "other";
	}
}

static struct conn *byqp(uint32_t qpn)
{
	for (int i = 0; i < nconn; i++)
		if (conns[i].id && conns[i].id->qp && conns[i].id->qp->qp_num == qpn)
			return &conns[i];
	return NULL;
}

static void post_recv(struct conn *c, int slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(c->recv + slot * recvsize), .length = recvsize, .lkey = c->recv_mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(c->id->qp, &wr, &bad))
		die("ibv_post_recv");
}

static int post(struct conn *c, enum ibv_wr_opcode op, uint64_t wrid, void *addr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, int flags, uint32_t inv)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = wrid, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED | flags}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_SEND_WITH_INV)
		wr.invalidate_rkey = inv;
	int rc = ibv_post_send(c->id->qp, &wr, &bad);
	if (rc)
		say("POST_ERR %d %d %s", (int)(c - conns), op, strerror(rc));
	return rc;
}

/* wr_id: high byte says what completed */
enum { W_CTL = 1, W_WRITE, W_READ, W_DATA, W_BURST };
#define WRID(kind, v) (((uint64_t)(kind) << 56) | (v))

static void reply(struct conn *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(c->ctl, 256, fmt, ap);
	va_end(ap);
	post(c, IBV_WR_SEND, WRID(W_CTL, 0), c->ctl, n, c->ctl_mr->lkey, 0, 0, 0, 0);
}

static void burst_more(struct conn *c, int write, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	int max = write ? 64 : (int)ord;
	while (c->burst_left > 0 && c->burst_out < max) {
		uint64_t off = ((uint64_t)c->burst_left * len) % (bufsize - len + 1);
		if (post(c, write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, WRID(W_BURST, write), c->rw + off, len,
			 c->rw_mr->lkey, raddr, rkey, 0, 0))
			return;
		c->burst_left--;
		c->burst_out++;
	}
}

static struct { uint32_t len; uint64_t raddr; uint32_t rkey; int write; } bursts[MAXC];

static void command(struct conn *c, char *m, uint32_t len)
{
	char w[16] = "";
	unsigned long long a = 0, b = 0, d = 0, e = 0;
	int i = c - conns;
	m[len] = 0;
	sscanf(m, "%15s", w);
	if (!strcmp(w, "ECHO")) {
		memcpy(c->ctl, m, len < 4096 ? len : 4096);
		post(c, IBV_WR_SEND, WRID(W_CTL, 0), c->ctl, len < 4096 ? len : 4096, c->ctl_mr->lkey, 0, 0, 0, 0);
	} else if (!strcmp(w, "FILL") && sscanf(m, "%*s %llu %llu %llu", &a, &b, &d) == 3 && a + b <= bufsize) {
		for (uint64_t k = 0; k < b; k++)
			c->rw[a + k] = pattern(d, k);
		reply(c, "OK");
	} else if (!strcmp(w, "SUM") && sscanf(m, "%*s %llu %llu", &a, &b) == 2 && a + b <= bufsize) {
		reply(c, "OK %016" PRIx64, fnv(c->rw + a, b));
	} else if (!strcmp(w, "LAST")) {
		reply(c, "OK %u %016" PRIx64 " %u %u", c->last_len, c->last_fnv, c->last_flags, c->last_inv);
	} else if ((!strcmp(w, "WRITE") || !strcmp(w, "READ")) &&
		   sscanf(m, "%*s %llu %llu %lli %lli", &a, &b, (long long *)&d, (long long *)&e) == 4 && a + b <= bufsize) {
		int wr = w[0] == 'W';
		if (!wr) {
			c->read_off = a;
			c->read_len = b;
		}
		post(c, wr ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, WRID(wr ? W_WRITE : W_READ, 0), c->rw + a, b,
		     c->rw_mr->lkey, d, (uint32_t)e, 0, 0);
	} else if (!strcmp(w, "SEND") && sscanf(m, "%*s %llu %llu", &a, &b) == 2 && a + b <= bufsize) {
		int flags = strstr(m, " SE") ? IBV_SEND_SOLICITED : 0;
		char *inv = strstr(m, " INV ");
		uint32_t k = inv ? (uint32_t)strtoul(inv + 5, NULL, 0) : 0;
		post(c, inv ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND, WRID(W_DATA, 0), c->rw + a, b, c->rw_mr->lkey, 0, 0,
		     flags, k);
	} else if (!strcmp(w, "BURST") &&
		   sscanf(m, "%*s %15s %llu %llu %lli %lli", w, &a, &b, (long long *)&d, (long long *)&e) == 5 &&
		   b <= bufsize && b > 0) {
		bursts[i].write = w[0] == 'W';
		bursts[i].len = b;
		bursts[i].raddr = d;
		bursts[i].rkey = e;
		c->burst_left = a;
		c->burst_out = 0;
		burst_more(c, bursts[i].write, b, d, e);
	} else if (!strcmp(w, "DISCONNECT")) {
		rdma_disconnect(c->id);
	} else {
		reply(c, "ERR unknown or malformed command");
	}
}

static int is_command(const char *m, uint32_t len)
{
	return len >= 3 && m[0] >= 'A' && m[0] <= 'Z' && m[1] >= 'A' && m[1] <= 'Z' && m[2] >= 'A' && m[2] <= 'Z';
}

static void drain(void)
{
	struct ibv_wc wc[32];
	int n;
	while ((n = ibv_poll_cq(cq, 32, wc)) > 0) {
		for (int k = 0; k < n; k++) {
			struct conn *c = byqp(wc[k].qp_num);
			if (!c)
				continue;
			int i = c - conns;
			unsigned kind = wc[k].wr_id >> 56;
			if (wc[k].status == IBV_WC_WR_FLUSH_ERR) {
				c->flushed++; /* what a disconnect does to posted receives */
				continue;
			}
			if (wc[k].status != IBV_WC_SUCCESS) {
				say("WC_ERR %d %s %s (%d)", i, opname(wc[k].opcode), ibv_wc_status_str(wc[k].status),
				    wc[k].status);
				failed = 1;
				continue;
			}
			switch (wc[k].opcode) {
			case IBV_WC_RECV: {
				int slot = wc[k].wr_id;
				char *m = c->recv + slot * recvsize;
				if (is_command(m, wc[k].byte_len)) {
					char tmp[4097];
					uint32_t l = wc[k].byte_len < 4096 ? wc[k].byte_len : 4096;
					memcpy(tmp, m, l);
					post_recv(c, slot);
					command(c, tmp, l);
				} else {
					c->last_len = wc[k].byte_len;
					c->last_fnv = fnv(m, wc[k].byte_len);
					c->last_flags = wc[k].wc_flags;
					c->last_inv = (wc[k].wc_flags & IBV_WC_WITH_INV) ? wc[k].invalidated_rkey : 0;
					say("RECV %d %u flags=%u inv=0x%x", i, wc[k].byte_len, wc[k].wc_flags, c->last_inv);
					post_recv(c, slot);
				}
				break;
			}
			case IBV_WC_RDMA_WRITE:
			case IBV_WC_RDMA_READ:
				if (kind == W_BURST) {
					c->burst_out--;
					burst_more(c, bursts[i].write, bursts[i].len, bursts[i].raddr, bursts[i].rkey);
					if (c->burst_left == 0 && c->burst_out == 0)
						reply(c, "OK burst");
				} else if (kind == W_READ) {
					reply(c, "OK %016" PRIx64, fnv(c->rw + c->read_off, c->read_len));
				} else {
					reply(c, "OK");
				}
				break;
			default:
				break;
			}
		}
	}
}

static void ensure_dev(struct ibv_context *ctx)
{
	if (pd)
		return;
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	cch = ibv_create_comp_channel(ctx);
	cq = ibv_create_cq(ctx, 4096, NULL, cch, 0);
	if (!cch || !cq || ibv_req_notify_cq(cq, solicited_only))
		die("cq");
}

static void setup_conn(struct conn *c, struct rdma_cm_id *id)
{
	ensure_dev(id->verbs);
	c->id = id;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = DEPTH, .max_recv_wr = NRECV, .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(id, pd, &qa))
		die("rdma_create_qp");
	c->rw = aligned_alloc(4096, bufsize);
	c->ro = aligned_alloc(4096, bufsize);
	c->recv = aligned_alloc(4096, NRECV * recvsize);
	c->ctl = aligned_alloc(4096, 4096);
	if (!c->rw || !c->ro || !c->recv || !c->ctl)
		die("malloc");
	memset(c->rw, 0, bufsize);
	for (size_t k = 0; k < bufsize; k++)
		c->ro[k] = pattern(7, k);
	int acc = IBV_ACCESS_LOCAL_WRITE;
	c->rw_mr = ibv_reg_mr(pd, c->rw, bufsize, acc | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	c->ro_mr = ibv_reg_mr(pd, c->ro, bufsize, acc | IBV_ACCESS_REMOTE_READ);
	c->recv_mr = ibv_reg_mr(pd, c->recv, NRECV * recvsize, acc);
	c->ctl_mr = ibv_reg_mr(pd, c->ctl, 4096, acc);
	if (!c->rw_mr || !c->ro_mr || !c->recv_mr || !c->ctl_mr)
		die("ibv_reg_mr");
	for (int s = 0; s < NRECV; s++)
		post_recv(c, s);
}

static void pdata(struct conn *c, unsigned char *p)
{
	memcpy(p, "XRPR", 4);
	uint32_t v = htobe32(1), l = htobe32(bufsize);
	uint64_t a = htobe64((uintptr_t)c->rw), b = htobe64((uintptr_t)c->ro);
	uint32_t k1 = htobe32(c->rw_mr->rkey), k2 = htobe32(c->ro_mr->rkey);
	memcpy(p + 4, &v, 4);
	memcpy(p + 8, &a, 8);
	memcpy(p + 16, &l, 4);
	memcpy(p + 20, &k1, 4);
	memcpy(p + 24, &b, 8);
	memcpy(p + 32, &l, 4);
	memcpy(p + 36, &k2, 4);
}

static void hex(char *out, const void *p, int n)
{
	const unsigned char *b = p;
	for (int k = 0; k < n && k < 64; k++)
		sprintf(out + 2 * k, "%02x", b[k]);
}

static struct conn *conn_of(struct rdma_cm_id *id)
{
	for (int i = 0; i < nconn; i++)
		if (conns[i].id == id)
			return &conns[i];
	return NULL;
}

static void cm_event(void)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ech, &ev))
		die("rdma_get_cm_event");
	struct rdma_cm_event e = *ev;
	char h[130] = "";
	if (e.param.conn.private_data_len)
		hex(h, e.param.conn.private_data, e.param.conn.private_data_len);
	struct conn *c = conn_of(e.id);
	int i = c ? (int)(c - conns) : nconn;
	switch (e.event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(e.id, 5000))
			die("rdma_resolve_route");
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		setup_conn(c, e.id);
		unsigned char p[40];
		pdata(c, p);
		struct rdma_conn_param cp = {.private_data = p, .private_data_len = sizeof p,
					     .responder_resources = ird, .initiator_depth = ord, .retry_count = 7};
		if (rdma_connect(e.id, &cp))
			die("rdma_connect");
		break;
	}
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		if (nconn >= MAXC || nconn >= want) {
			rdma_reject(e.id, NULL, 0);
			say("REJECTED %d", nconn);
			break;
		}
		c = &conns[nconn++];
		setup_conn(c, e.id);
		unsigned char p[40];
		pdata(c, p);
		say("REQUEST %d pdata=%s ird=%u ord=%u", (int)(c - conns), h, e.param.conn.responder_resources,
		    e.param.conn.initiator_depth);
		struct rdma_conn_param cp = {.private_data = p, .private_data_len = sizeof p,
					     .responder_resources = ird, .initiator_depth = ord};
		if (rdma_accept(e.id, &cp))
			die("rdma_accept");
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (c) {
			c->connected = 1;
			say("CONNECTED %d pdata=%s", i, h);
			/* An MPA responder sends no FPDU before it has received
			 * one (RFC 5044 §7.1.2): the initiator speaks first. */
			if (!server)
				reply(c, "HELLO %d", i);
		}
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (c && !c->disconnected) {
			c->disconnected = 1;
			ended++;
			say("DISCONNECTED %d", i);
		}
		break;
	default:
		say("CMEVENT %d %s %d pdata=%s", i, rdma_event_str(e.event), e.status, h);
		if (e.event == RDMA_CM_EVENT_REJECTED || e.event == RDMA_CM_EVENT_CONNECT_ERROR ||
		    e.event == RDMA_CM_EVENT_UNREACHABLE || e.event == RDMA_CM_EVENT_ADDR_ERROR ||
		    e.event == RDMA_CM_EVENT_ROUTE_ERROR) {
			if (c && !c->disconnected) {
				c->disconnected = 1;
				ended++;
				failed = 1;
			}
		}
	}
	rdma_ack_cm_event(ev);
}

int main(int argc, char **argv)
{
	const char *host = NULL, *port = "7400";
	int opt, timeout = 60;
	while ((opt = getopt(argc, argv, "sc:p:n:b:r:Si:o:t:")) != -1) {
		switch (opt) {
		case 's': server = 1; break;
		case 'c': host = optarg; break;
		case 'p': port = optarg; break;
		case 'n': want = atoi(optarg); break;
		case 'b': bufsize = strtoul(optarg, NULL, 0); break;
		case 'r': recvsize = strtoul(optarg, NULL, 0); break;
		case 'S': solicited_only = 1; break;
		case 'i': ird = atoi(optarg); break;
		case 'o': ord = atoi(optarg); break;
		case 't': timeout = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -s | -c HOST [-p PORT] [-n CONNS] [-b BUF] [-r RECV] [-S] [-i IRD] [-o ORD] [-t SEC]\n", argv[0]);
			return 1;
		}
	}
	if (!server && !host) {
		fprintf(stderr, "%s: want -s or -c HOST\n", argv[0]);
		return 1;
	}
	if (want < 1 || want > MAXC)
		want = 1;
	ech = rdma_create_event_channel();
	if (!ech)
		die("rdma_create_event_channel");

	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	if (getaddrinfo(server ? "0.0.0.0" : host, port, &hints, &ai))
		die("getaddrinfo");
	struct rdma_cm_id *lid = NULL;
	if (server) {
		if (rdma_create_id(ech, &lid, NULL, RDMA_PS_TCP) || rdma_bind_addr(lid, ai->ai_addr) || rdma_listen(lid, 128))
			die("listen");
	} else {
		for (int k = 0; k < want; k++) {
			struct rdma_cm_id *id;
			if (rdma_create_id(ech, &id, NULL, RDMA_PS_TCP))
				die("rdma_create_id");
			conns[nconn++].id = id;
			if (rdma_resolve_addr(id, NULL, ai->ai_addr, 5000))
				die("rdma_resolve_addr");
		}
	}
	say("READY %s", server ? "server" : "client");

	time_t deadline = time(NULL) + timeout;
	while (ended < want) {
		if (time(NULL) > deadline) {
			say("TIMEOUT connected=%d ended=%d", nconn, ended);
			say("EXIT 2");
			return 2;
		}
		struct pollfd pf[2] = {{.fd = ech->fd, .events = POLLIN}, {.fd = cch ? cch->fd : -1, .events = POLLIN}};
		poll(pf, 2, solicited_only ? 100 : 10);
		if (!cq) {
			if (pf[0].revents & POLLIN)
				cm_event();
			continue;
		}
		if (pf[0].revents & POLLIN)
			cm_event();
		if (pf[1].revents & POLLIN) {
			struct ibv_cq *ecq;
			void *ctx;
			if (!ibv_get_cq_event(cch, &ecq, &ctx)) {
				cqevents++;
				if (solicited_only)
					say("CQEVENT %lu", cqevents);
				ibv_ack_cq_events(ecq, 1);
				ibv_req_notify_cq(cq, solicited_only);
			}
			drain();
		} else if (!solicited_only) {
			drain(); /* a poll tick without an event still makes progress */
		}
	}
	if (cq)
		drain();
	say("CQEVENTS %lu", cqevents);
	for (int k = 0; k < nconn; k++)
		if (conns[k].flushed)
			say("FLUSHED %d %d", k, conns[k].flushed);
	for (int k = 0; k < nconn; k++)
		if (conns[k].id && conns[k].id->qp)
			rdma_destroy_qp(conns[k].id);
	int code = failed ? 3 : 0;
	say("EXIT %d", code);
	return code;
}
