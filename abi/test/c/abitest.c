/*
 * abitest: xrnic's own test of the rdma-core ABI, covering what rping and
 * perftest do not: Write with Immediate into a zero-SGE receive, plain and
 * masked atomics against a reference model, every error status and the
 * asynchronous Terminate event, completion-channel wakeups (solicited
 * only too), and many QPs. Built by abi/test (go test) against the system
 * rdma-core headers, run with LD_LIBRARY_PATH=bin/lib.
 *
 *   abitest server ADDR PORT     listens on ADDR:PORT (rdma_cm) and
 *                                ADDR:PORT+1 (TCP, the control channel)
 *   abitest client ADDR PORT [CASE...]
 *
 * Each side prints "ok NAME [detail]" or "FAIL NAME: why" per check, and
 * "info ..." lines; the exit status is 1 if any check failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <dlfcn.h>

/* xrnicdv.h (abi/include) declares the direct verbs; they are looked up
   at run time (dlvsym, version XRNICDV_1.0), so this program links
   against Debian's libibverbs like any application and runs on xrnic's. */
#include <infiniband/xrnicdv.h>
static __typeof__(xrnicdv_post_masked_fetch_add) *dv_fetch_add;
static __typeof__(xrnicdv_post_masked_cmp_swap) *dv_cmp_swap;
static __typeof__(xrnicdv_post_write_imm64) *dv_write_imm64;
static __typeof__(xrnicdv_post_imm) *dv_imm;
static __typeof__(xrnicdv_is_supported) *dv_is_supported;

static int load_dv(void)
{
	dv_fetch_add = dlvsym(RTLD_DEFAULT, "xrnicdv_post_masked_fetch_add", "XRNICDV_1.0");
	dv_cmp_swap = dlvsym(RTLD_DEFAULT, "xrnicdv_post_masked_cmp_swap", "XRNICDV_1.0");
	dv_write_imm64 = dlvsym(RTLD_DEFAULT, "xrnicdv_post_write_imm64", "XRNICDV_1.0");
	dv_imm = dlvsym(RTLD_DEFAULT, "xrnicdv_post_imm", "XRNICDV_1.0");
	dv_is_supported = dlvsym(RTLD_DEFAULT, "xrnicdv_is_supported", "XRNICDV_1.0");
	return dv_fetch_add && dv_cmp_swap && dv_write_imm64 && dv_imm && dv_is_supported;
}

#define TIMEOUT_MS 10000
#define BUFSZ (1 << 20)
#define NMANY 64

static int failures;
static const char *role;

static void ok(const char *name, const char *fmt, ...)
{
	char d[512] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d, sizeof(d), fmt, ap);
		va_end(ap);
	}
	printf("ok %s%s%s\n", name, d[0] ? " " : "", d);
	fflush(stdout);
}

static void fail(const char *name, const char *fmt, ...)
{
	char d[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	printf("FAIL %s: %s\n", name, d);
	fflush(stdout);
	failures++;
}

static void info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("info %s: ", role);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* ---- control channel: lines over kernel TCP ------------------------ */

static int ctrl_fd = -1;
static char ctrl_buf[4096];
static size_t ctrl_len;

static int ctrl_send(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = write(ctrl_fd, line + off, n - off);
		if (w <= 0)
			return -1;
		off += w;
	}
	return 0;
}

/* Reads one line (without the newline) into out; -1 on EOF or timeout. */
static int ctrl_recv(char *out, size_t cap)
{
	long long deadline = now_ms() + 6 * TIMEOUT_MS;
	for (;;) {
		char *nl = memchr(ctrl_buf, '\n', ctrl_len);
		if (nl) {
			size_t n = nl - ctrl_buf;
			if (n >= cap)
				n = cap - 1;
			memcpy(out, ctrl_buf, n);
			out[n] = 0;
			ctrl_len -= nl + 1 - ctrl_buf;
			memmove(ctrl_buf, nl + 1, ctrl_len);
			return 0;
		}
		long long left = deadline - now_ms();
		if (left <= 0 || ctrl_len == sizeof(ctrl_buf))
			return -1;
		struct pollfd p = {.fd = ctrl_fd, .events = POLLIN};
		if (poll(&p, 1, (int)left) <= 0)
			return -1;
		ssize_t r = read(ctrl_fd, ctrl_buf + ctrl_len, sizeof(ctrl_buf) - ctrl_len);
		if (r <= 0)
			return -1;
		ctrl_len += r;
	}
}

/* Waits for the peer's line "want"; a failed check if something else. */
static int ctrl_expect(const char *name, const char *want)
{
	char line[1024];
	if (ctrl_recv(line, sizeof(line))) {
		fail(name, "control channel: no \"%s\" from the peer (it ended or hung)", want);
		return -1;
	}
	if (strcmp(line, want)) {
		fail(name, "control channel: got \"%s\", want \"%s\"", line, want);
		return -1;
	}
	return 0;
}

/* ---- rdma_cm events: a queue, so events of several ids interleave --- */

struct evrec {
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	int status;
	uint8_t pdata[64];
	int pdlen;
};

static struct rdma_event_channel *ech;
static struct evrec pending[4 * NMANY];
static int npending;

static int read_event(struct evrec *r, int timeout_ms)
{
	struct pollfd p = {.fd = ech->fd, .events = POLLIN};
	if (poll(&p, 1, timeout_ms) <= 0)
		return -1;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ech, &ev))
		return -1;
	r->type = ev->event;
	r->id = ev->id;
	r->status = ev->status;
	r->pdlen = 0;
	if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
		r->pdlen = ev->param.conn.private_data_len;
		if (r->pdlen > (int)sizeof(r->pdata))
			r->pdlen = sizeof(r->pdata);
		memcpy(r->pdata, ev->param.conn.private_data, r->pdlen);
	}
	rdma_ack_cm_event(ev);
	return 0;
}

/* Takes the next event of type for id (NULL: any id), keeping others. */
static int next_event(const char *name, enum rdma_cm_event_type type,
		      struct rdma_cm_id *id, struct evrec *out)
{
	for (int i = 0; i < npending; i++) {
		if (pending[i].type == type && (!id || pending[i].id == id)) {
			*out = pending[i];
			memmove(&pending[i], &pending[i + 1], (npending - i - 1) * sizeof(pending[0]));
			npending--;
			return 0;
		}
	}
	long long deadline = now_ms() + TIMEOUT_MS;
	for (;;) {
		long long left = deadline - now_ms();
		struct evrec r;
		if (left <= 0 || read_event(&r, (int)left)) {
			fail(name, "no %s event within %d ms", rdma_event_str(type), TIMEOUT_MS);
			return -1;
		}
		if (r.type == type && (!id || r.id == id)) {
			*out = r;
			return 0;
		}
		/* An error in place of what we wait for ends the wait. */
		if ((!id || r.id == id) &&
		    (r.type == RDMA_CM_EVENT_REJECTED || r.type == RDMA_CM_EVENT_UNREACHABLE ||
		     r.type == RDMA_CM_EVENT_CONNECT_ERROR || r.type == RDMA_CM_EVENT_ADDR_ERROR ||
		     r.type == RDMA_CM_EVENT_ROUTE_ERROR)) {
			fail(name, "waiting for %s: got %s (status %d)", rdma_event_str(type),
			     rdma_event_str(r.type), r.status);
			return -1;
		}
		if (npending == (int)(sizeof(pending) / sizeof(pending[0]))) {
			fail(name, "too many unexpected rdma_cm events");
			return -1;
		}
		pending[npending++] = r;
	}
}

/* ---- connections ---------------------------------------------------- */

struct peerinfo {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
	uint32_t idx;
	uint32_t pad;
};

struct opts {
	int depth;    /* send and receive queue depth */
	int channel;  /* receive CQ on a completion channel */
	int shared_cq; /* server: use the shared CQ/PD/MR (many QPs) */
	int cqe;      /* CQ size asked (0: depth) */
	size_t buflen;
};

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_comp_channel *cch;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t buflen;
	struct peerinfo local, remote;
	int shared;
	int disconnected;
};

/* The server's shared objects for the many-QPs case. */
static struct ibv_pd *spd;
static struct ibv_cq *scq_shared;
static struct ibv_mr *smr;
static uint8_t *sbuf;

static struct rdma_cm_id *listen_id;
static struct sockaddr_in server_addr;

static int setup_qp(const char *name, struct conn *c, const struct opts *o)
{
	struct ibv_context *ctx = c->id->verbs;
	if (!ctx) {
		fail(name, "rdma_cm id has no verbs context");
		return -1;
	}
	if (o->shared_cq) {
		if (!spd) {
			spd = ibv_alloc_pd(ctx);
			scq_shared = ibv_create_cq(ctx, NMANY * 2 * o->depth, NULL, NULL, 0);
			sbuf = aligned_alloc(4096, o->buflen * NMANY);
			if (spd && sbuf)
				smr = ibv_reg_mr(spd, sbuf, o->buflen * NMANY,
						 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							 IBV_ACCESS_REMOTE_READ);
			if (!spd || !scq_shared || !smr) {
				fail(name, "shared PD/CQ/MR: %s", strerror(errno));
				return -1;
			}
		}
		c->shared = 1;
		c->pd = spd;
		c->scq = c->rcq = scq_shared;
		c->mr = smr;
		c->buf = sbuf + c->local.idx * o->buflen;
		c->buflen = o->buflen;
	} else {
		c->pd = ibv_alloc_pd(ctx);
		if (!c->pd) {
			fail(name, "ibv_alloc_pd: %s", strerror(errno));
			return -1;
		}
		if (o->channel) {
			c->cch = ibv_create_comp_channel(ctx);
			if (!c->cch) {
				fail(name, "ibv_create_comp_channel: %s", strerror(errno));
				return -1;
			}
			fcntl(c->cch->fd, F_SETFL, fcntl(c->cch->fd, F_GETFL) | O_NONBLOCK);
		}
		c->scq = ibv_create_cq(ctx, o->cqe ? o->cqe : o->depth, NULL, c->cch, 0);
		c->rcq = ibv_create_cq(ctx, o->cqe ? o->cqe : o->depth, NULL, c->cch, 0);
		if (!c->scq || !c->rcq) {
			fail(name, "ibv_create_cq: %s", strerror(errno));
			return -1;
		}
		c->buflen = o->buflen;
		c->buf = aligned_alloc(4096, c->buflen);
		if (!c->buf) {
			fail(name, "out of memory");
			return -1;
		}
		memset(c->buf, 0, c->buflen);
		c->mr = ibv_reg_mr(c->pd, c->buf, c->buflen,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
		if (!c->mr) {
			fail(name, "ibv_reg_mr: %s", strerror(errno));
			return -1;
		}
	}
	struct ibv_qp_init_attr qa = {
		.send_cq = c->scq,
		.recv_cq = c->rcq,
		.cap = {.max_send_wr = o->depth, .max_recv_wr = o->depth,
			.max_send_sge = 2, .max_recv_sge = 2},
		.qp_type = IBV_QPT_RC,
	};
	if (rdma_create_qp(c->id, c->pd, &qa)) {
		fail(name, "rdma_create_qp: %s", strerror(errno));
		return -1;
	}
	c->qp = c->id->qp;
	c->local.addr = (uintptr_t)c->buf;
	c->local.rkey = c->mr->rkey;
	c->local.len = c->buflen;
	return 0;
}

static void conn_free(struct conn *c)
{
	if (c->id && c->qp)
		rdma_destroy_qp(c->id);
	if (!c->shared) {
		if (c->mr)
			ibv_dereg_mr(c->mr);
		free(c->buf);
		if (c->scq)
			ibv_destroy_cq(c->scq);
		if (c->rcq)
			ibv_destroy_cq(c->rcq);
		if (c->cch)
			ibv_destroy_comp_channel(c->cch);
		if (c->pd)
			ibv_dealloc_pd(c->pd);
	}
	if (c->id) {
		/* No stale event may match a later id at the same address. */
		for (int i = 0; i < npending;)
			if (pending[i].id == c->id) {
				memmove(&pending[i], &pending[i + 1], (npending - i - 1) * sizeof(pending[0]));
				npending--;
			} else
				i++;
		rdma_destroy_id(c->id);
	}
	memset(c, 0, sizeof(*c));
}

static struct conn_param_holder {
	struct rdma_conn_param p;
} cp_template = {{.responder_resources = 16, .initiator_depth = 16, .retry_count = 7,
		  .rnr_retry_count = 7}};

static int client_connect(const char *name, struct conn *c, const struct opts *o, uint32_t idx)
{
	struct evrec r;
	memset(c, 0, sizeof(*c));
	c->local.idx = idx;
	if (rdma_create_id(ech, &c->id, c, RDMA_PS_TCP)) {
		fail(name, "rdma_create_id: %s", strerror(errno));
		return -1;
	}
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&server_addr, 5000)) {
		fail(name, "rdma_resolve_addr: %s", strerror(errno));
		return -1;
	}
	if (next_event(name, RDMA_CM_EVENT_ADDR_RESOLVED, c->id, &r))
		return -1;
	if (rdma_resolve_route(c->id, 5000)) {
		fail(name, "rdma_resolve_route: %s", strerror(errno));
		return -1;
	}
	if (next_event(name, RDMA_CM_EVENT_ROUTE_RESOLVED, c->id, &r))
		return -1;
	if (setup_qp(name, c, o))
		return -1;
	struct rdma_conn_param p = cp_template.p;
	p.private_data = &c->local;
	p.private_data_len = sizeof(c->local);
	if (rdma_connect(c->id, &p)) {
		fail(name, "rdma_connect: %s", strerror(errno));
		return -1;
	}
	if (next_event(name, RDMA_CM_EVENT_ESTABLISHED, c->id, &r))
		return -1;
	if (r.pdlen < (int)sizeof(c->remote)) {
		fail(name, "ESTABLISHED: %d bytes of private data, want the server's %zu", r.pdlen,
		     sizeof(c->remote));
		return -1;
	}
	memcpy(&c->remote, r.pdata, sizeof(c->remote));
	return 0;
}

/* Takes a connection request, makes the QP, posts nrecv receives of
   recvlen bytes (0: zero-SGE) with wr_ids base+i, and accepts. */
static int server_accept(const char *name, struct conn *c, const struct opts *o, int nrecv,
			 uint32_t recvlen, uint64_t base)
{
	struct evrec r;
	memset(c, 0, sizeof(*c));
	if (next_event(name, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, &r))
		return -1;
	c->id = r.id;
	c->id->context = c;
	if (r.pdlen < (int)sizeof(c->remote)) {
		fail(name, "CONNECT_REQUEST: %d bytes of private data, want the client's %zu", r.pdlen,
		     sizeof(c->remote));
		rdma_reject(c->id, NULL, 0);
		return -1;
	}
	memcpy(&c->remote, r.pdata, sizeof(c->remote));
	c->local.idx = c->remote.idx;
	if (setup_qp(name, c, o))
		return -1;
	for (int i = 0; i < nrecv; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)c->buf + i * recvlen, .length = recvlen,
				      .lkey = c->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = base + i, .sg_list = &sge, .num_sge = recvlen ? 1 : 0},
				   *bad;
		if (ibv_post_recv(c->qp, &wr, &bad)) {
			fail(name, "ibv_post_recv: %s", strerror(errno));
			return -1;
		}
	}
	struct rdma_conn_param p = cp_template.p;
	p.private_data = &c->local;
	p.private_data_len = sizeof(c->local);
	if (rdma_accept(c->id, &p)) {
		fail(name, "rdma_accept: %s", strerror(errno));
		return -1;
	}
	if (next_event(name, RDMA_CM_EVENT_ESTABLISHED, c->id, &r))
		return -1;
	return 0;
}

/* Disconnects and waits for this id's DISCONNECTED, then frees. */
static void conn_close(const char *name, struct conn *c)
{
	struct evrec r;
	if (c->id && c->qp) {
		rdma_disconnect(c->id);
		if (!c->disconnected)
			next_event(name, RDMA_CM_EVENT_DISCONNECTED, c->id, &r);
	}
	conn_free(c);
}

/* ---- work requests and completions ---------------------------------- */

/* Polls until n completions or the timeout; returns how many. */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
	int got = 0;
	long long deadline = now_ms() + timeout_ms;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return got;
		got += r;
		if (got < n) {
			if (now_ms() > deadline)
				break;
			if (!r)
				usleep(50);
		}
	}
	return got;
}

/* 1 if another completion shows up within ms: a WR completed twice. */
static int extra_completion(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	return poll_n(cq, &wc, 1, ms) > 0;
}

static int post1(struct conn *c, enum ibv_wr_opcode op, uint64_t wr_id, void *laddr,
		 uint32_t len, uint64_t raddr, uint32_t rkey, int flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0,
				 .opcode = op, .send_flags = flags},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(c->qp, &wr, &bad);
}

static const char *wcs(enum ibv_wc_status s) { return ibv_wc_status_str(s); }

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

/* ---- local checks ---------------------------------------------------- */

static void check_device(struct ibv_context *ctx)
{
	const char *name = "device_query";
	struct ibv_device_attr a;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	if (ibv_query_device(ctx, &a)) {
		fail(name, "ibv_query_device: %s", strerror(errno));
		return;
	}
	if (ibv_query_port(ctx, 1, &pa)) {
		fail(name, "ibv_query_port: %s", strerror(errno));
		return;
	}
	if (ibv_query_gid(ctx, 1, 0, &gid)) {
		fail(name, "ibv_query_gid: %s", strerror(errno));
		return;
	}
	printf("gid ");
	for (int i = 0; i < 16; i++)
		printf("%02x", gid.raw[i]);
	printf("\nnode_guid %016" PRIx64 "\n", be64toh(a.node_guid));
	if (ctx->device->transport_type != IBV_TRANSPORT_IWARP)
		fail(name, "transport_type %d, want IBV_TRANSPORT_IWARP", ctx->device->transport_type);
	else if (ctx->device->node_type != IBV_NODE_RNIC)
		fail(name, "node_type %d (%s), want IBV_NODE_RNIC", ctx->device->node_type,
		     ibv_node_type_str(ctx->device->node_type));
	else if (pa.state != IBV_PORT_ACTIVE || pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		fail(name, "port state %d link_layer %d, want ACTIVE, Ethernet", pa.state,
		     pa.link_layer);
	else if (a.atomic_cap != IBV_ATOMIC_GLOB)
		fail(name, "atomic_cap %d, want IBV_ATOMIC_GLOB", a.atomic_cap);
	else
		ok(name, "%s max_qp_rd_atom=%d max_qp_init_rd_atom=%d active_mtu=%d",
		   ibv_get_device_name(ctx->device), a.max_qp_rd_atom, a.max_qp_init_rd_atom,
		   pa.active_mtu);
}

/* ---- cases ------------------------------------------------------------ */

static const uint32_t imms[] = {0x80000001u, 0x00000000u, 0xffffffffu, 0x12345678u};
#define NIMM (int)(sizeof(imms) / sizeof(imms[0]))
#define IMMLEN 4096

/* Checks NIMM Write-with-Immediate receives: imm i, data at buf+i*IMMLEN. */
static int check_imm_recvs(const char *name, struct conn *c, uint32_t delta, unsigned seed)
{
	struct ibv_wc wc[NIMM];
	int n = poll_n(c->rcq, wc, NIMM, TIMEOUT_MS);
	if (n != NIMM) {
		fail(name, "%d of %d receive completions", n, NIMM);
		return -1;
	}
	for (int i = 0; i < NIMM; i++) {
		uint32_t want = imms[i] + delta;
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
		    !(wc[i].wc_flags & IBV_WC_WITH_IMM) || ntohl(wc[i].imm_data) != want ||
		    wc[i].wr_id != 0x100u + i || wc[i].qp_num != c->qp->qp_num) {
			fail(name,
			     "completion %d: wr_id %#" PRIx64 " status %s opcode %d flags %#x imm %#x "
			     "qp_num %u; want wr_id %#x SUCCESS RECV_RDMA_WITH_IMM(%d) WITH_IMM imm %#x qp_num %u",
			     i, wc[i].wr_id, wcs(wc[i].status), wc[i].opcode, wc[i].wc_flags,
			     ntohl(wc[i].imm_data), wc[i].qp_num, 0x100 + i, IBV_WC_RECV_RDMA_WITH_IMM,
			     want, c->qp->qp_num);
			return -1;
		}
		uint8_t ref[IMMLEN];
		pattern(ref, IMMLEN, seed + i);
		if (memcmp(c->buf + 65536 + i * IMMLEN, ref, IMMLEN)) {
			fail(name, "write %d: data differs", i);
			return -1;
		}
	}
	if (extra_completion(c->rcq, 50)) {
		fail(name, "an extra receive completion");
		return -1;
	}
	info("write_imm receive byte_len %u", wc[0].byte_len);
	return 0;
}

/* Posts NIMM Writes with Immediate imms[i]+delta of IMMLEN bytes each. */
static int send_imms(const char *name, struct conn *c, uint32_t delta, unsigned seed)
{
	for (int i = 0; i < NIMM; i++) {
		uint8_t *src = c->buf + 262144 + i * IMMLEN;
		pattern(src, IMMLEN, seed + i);
		struct ibv_sge sge = {.addr = (uintptr_t)src, .length = IMMLEN, .lkey = c->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 0x200u + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htonl(imms[i] + delta)},
				   *bad;
		wr.wr.rdma.remote_addr = c->remote.addr + 65536 + i * IMMLEN;
		wr.wr.rdma.rkey = c->remote.rkey;
		if (ibv_post_send(c->qp, &wr, &bad)) {
			fail(name, "ibv_post_send WRITE_WITH_IMM: %s", strerror(errno));
			return -1;
		}
	}
	struct ibv_wc wc[NIMM];
	int n = poll_n(c->scq, wc, NIMM, TIMEOUT_MS);
	if (n != NIMM) {
		fail(name, "%d of %d send completions", n, NIMM);
		return -1;
	}
	for (int i = 0; i < NIMM; i++)
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RDMA_WRITE ||
		    wc[i].wr_id != 0x200u + i) {
			fail(name, "send completion %d: wr_id %#" PRIx64 " status %s opcode %d", i,
			     wc[i].wr_id, wcs(wc[i].status), wc[i].opcode);
			return -1;
		}
	return 0;
}

/* The client writes with imm into the server's zero-SGE receives; the
   server answers each with imm+1 into the client's. */
static void case_write_imm(int server)
{
	const char *name = "write_imm_zero_sge";
	struct opts o = {.depth = 16, .buflen = BUFSZ};
	struct conn c;
	int bad = 0;
	if (server) {
		bad = server_accept(name, &c, &o, NIMM, 0, 0x100);
		if (!bad)
			bad = check_imm_recvs(name, &c, 0, 7);
		if (!bad)
			bad = send_imms(name, &c, 1, 9);
	} else {
		bad = client_connect(name, &c, &o, 0);
		for (int i = 0; !bad && i < NIMM; i++) {
			struct ibv_recv_wr wr = {.wr_id = 0x100u + i, .num_sge = 0}, *b;
			if (ibv_post_recv(c.qp, &wr, &b)) {
				fail(name, "ibv_post_recv (zero SGE): %s", strerror(errno));
				bad = -1;
			}
		}
		/* Ours are posted before the server's answer: it waits for
		   our "posted". */
		if (!bad && ctrl_send("posted"))
			bad = -1;
		if (!bad)
			bad = send_imms(name, &c, 0, 7);
		if (!bad)
			bad = check_imm_recvs(name, &c, 1, 9);
	}
	if (server && ctrl_expect(name, "posted"))
		bad = -1;
	if (!bad)
		ok(name, "imm %#x %#x %#x %#x round trip", imms[0], imms[1], imms[2], imms[3]);
	conn_close(name, &c);
}

/* xrnicdv's 64-bit Immediate Data: Write with imm64 and Immediate Data
   alone, into zero-SGE receives; the ABI shows the low 32 bits. */
static void case_imm64(int server)
{
	const char *name = "xrnicdv_imm64";
	struct opts o = {.depth = 16, .buflen = BUFSZ};
	struct conn c;
	int bad;
	struct ibv_wc wc[2];
	if (!load_dv()) {
		if (!server)
			fail(name, "xrnicdv_* (XRNICDV_1.0) not found in libibverbs.so.1: %s", dlerror());
		return;
	}
	if (server) {
		bad = server_accept(name, &c, &o, 2, 0, 0xf00);
		int n = bad ? 0 : poll_n(c.rcq, wc, 2, TIMEOUT_MS);
		if (!bad && n != 2)
			fail(name, "%d of 2 receive completions", n);
		else if (!bad && (wc[0].status || wc[0].opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
				  !(wc[0].wc_flags & IBV_WC_WITH_IMM) || ntohl(wc[0].imm_data) != 0x55667788u))
			fail(name, "write_imm64: status %s opcode %d flags %#x imm %#x; want RECV_RDMA_WITH_IMM, imm 0x55667788",
			     wcs(wc[0].status), wc[0].opcode, wc[0].wc_flags, ntohl(wc[0].imm_data));
		else if (!bad && (wc[1].status || !(wc[1].wc_flags & IBV_WC_WITH_IMM) ||
				  ntohl(wc[1].imm_data) != 0xcafef00du || wc[1].byte_len != 0))
			fail(name, "imm alone: status %s opcode %d flags %#x imm %#x byte_len %u; want WITH_IMM imm 0xcafef00d byte_len 0",
			     wcs(wc[1].status), wc[1].opcode, wc[1].wc_flags, ntohl(wc[1].imm_data), wc[1].byte_len);
		else if (!bad) {
			uint8_t ref[256];
			pattern(ref, sizeof(ref), 5);
			if (memcmp(c.buf, ref, sizeof(ref)))
				fail(name, "write_imm64: data differs");
			else
				ok(name, "low 32 bits seen; Immediate Data alone completes opcode %d", wc[1].opcode);
		}
		ctrl_expect(name, "end");
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	if (!bad && !dv_is_supported(c.id->verbs->device)) {
		fail(name, "xrnicdv_is_supported is false for %s", ibv_get_device_name(c.id->verbs->device));
		bad = -1;
	}
	if (!bad) {
		pattern(c.buf, 256, 5);
		struct ibv_sge sge = {.addr = (uintptr_t)c.buf, .length = 256, .lkey = c.mr->lkey};
		int r = dv_write_imm64(c.qp, 0xf10, &sge, 1, c.remote.addr, c.remote.rkey,
				       0x1122334455667788ULL, IBV_SEND_SIGNALED);
		if (!r)
			r = dv_imm(c.qp, 0xf11, 0xdeadbeefcafef00dULL, IBV_SEND_SIGNALED);
		int n = r ? 0 : poll_n(c.scq, wc, 2, TIMEOUT_MS);
		if (r)
			fail(name, "post: %s", strerror(r));
		else if (n != 2 || wc[0].status || wc[1].status || wc[0].opcode != IBV_WC_RDMA_WRITE)
			fail(name, "sender: %d completions (%s, %s; opcode %d)", n, n > 0 ? wcs(wc[0].status) : "-",
			     n > 1 ? wcs(wc[1].status) : "-", n > 0 ? (int)wc[0].opcode : -1);
		else
			ok(name, "sender completed both");
	}
	ctrl_send("end");
	conn_close(name, &c);
}

/* Atomics against a reference model: the server's words start known;
   the client runs FetchAdds and CmpSwaps, checks every original value,
   reads the words back, and the server checks its memory. */
#define NWORDS 4
static const uint64_t word0[NWORDS] = {0x0123456789abcdefULL, 0xfffffffffffffff0ULL, 0,
				       0x8000000000000000ULL};

struct atom {
	int cas;
	int word;
	uint64_t a, b; /* FetchAdd: add; CmpSwap: compare, swap */
	int masked;
	uint64_t m1, m2; /* add mask; compare mask, swap mask */
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* RFC 7306 masked FetchAdd: the add mask's set bits end carry chains
   (each bit i set in the mask marks the most significant bit of a field:
   no carry out of bit i into bit i+1). */
static uint64_t masked_add(uint64_t orig, uint64_t add, uint64_t mask)
{
	uint64_t res = 0, carry = 0;
	for (int i = 0; i < 64; i++) {
		uint64_t x = (orig >> i) & 1, y = (add >> i) & 1;
		uint64_t s = x ^ y ^ carry;
		carry = (x & y) | (x & carry) | (y & carry);
		res |= s << i;
		if ((mask >> i) & 1)
			carry = 0;
	}
	return res;
}

static void case_atomics(int server, int masked)
{
	const char *name = masked ? "masked_atomics" : "atomics";
	struct opts o = {.depth = 64, .buflen = BUFSZ};
	struct conn c;
	int bad;
	uint64_t model[NWORDS];
	memcpy(model, word0, sizeof(model));
	if (masked && !load_dv()) {
		if (!server)
			fail(name, "xrnicdv_* (XRNICDV_1.0) not found in libibverbs.so.1: %s", dlerror());
		return;
	}
	if (server) {
		bad = server_accept(name, &c, &o, 0, 0, 0);
		if (!bad)
			memcpy(c.buf, word0, sizeof(word0));
		if (!bad && ctrl_send("ready"))
			bad = -1;
		char line[512];
		if (ctrl_recv(line, sizeof(line))) {
			fail(name, "no final values from the client");
			bad = -1;
		} else if (!bad) {
			unsigned long long f[NWORDS];
			if (sscanf(line, "final %llx %llx %llx %llx", &f[0], &f[1], &f[2], &f[3]) != 4) {
				fail(name, "control: %s", line);
				bad = -1;
			}
			volatile uint64_t *w = (volatile uint64_t *)c.buf;
			for (int i = 0; !bad && i < NWORDS; i++)
				if (w[i] != f[i]) {
					fail(name, "server word %d = %#" PRIx64 ", want %#llx", i, w[i], f[i]);
					bad = -1;
				}
			if (!bad)
				ok(name, "server memory matches the model");
		}
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	if (!bad && ctrl_expect(name, "ready"))
		bad = -1;
	int nops = 0;
	/* Batches of 8 in flight on one QP: the responder runs them in order,
	   so the originals follow the model. */
	for (int batch = 0; !bad && batch < 25; batch++) {
		struct atom at[8];
		uint64_t want[8];
		struct ibv_wc wc[8];
		uint64_t *res = (uint64_t *)(c.buf + 8192);
		for (int i = 0; i < 8; i++) {
			struct atom *x = &at[i];
			memset(x, 0, sizeof(*x));
			x->word = rng() % NWORDS;
			x->cas = rng() & 1;
			uint64_t cur = model[x->word];
			if (x->cas) {
				/* Half hit the current value. */
				x->a = (rng() & 1) ? cur : cur ^ (1ULL << (rng() % 64));
				x->b = rng();
			} else {
				x->a = (rng() & 3) ? rng() % 1000 : rng();
			}
			want[i] = cur;
			x->masked = masked;
			if (masked) {
				x->m1 = rng();
				x->m2 = rng();
			}
			if (masked && x->cas) {
				/* RFC 7306: swap where (orig & cm) == (compare & cm),
				   then new = (orig & ~sm) | (swap & sm). */
				if ((cur & x->m1) == (x->a & x->m1))
					model[x->word] = (cur & ~x->m2) | (x->b & x->m2);
			} else if (masked) {
				model[x->word] = masked_add(cur, x->a, x->m1);
			} else if (x->cas) {
				if (cur == x->a)
					model[x->word] = x->b;
			} else {
				model[x->word] = cur + x->a;
			}
			res[i] = 0x5555555555555555ULL;
		}
		for (int i = 0; i < 8 && !bad; i++) {
			struct atom *x = &at[i];
			struct ibv_sge sge = {.addr = (uintptr_t)&res[i], .length = 8, .lkey = c.mr->lkey};
			uint64_t raddr = c.remote.addr + 8 * x->word;
			int r;
			if (x->masked) {
				r = x->cas ? dv_cmp_swap(c.qp, 1000 + nops + i, &sge, raddr,
									  c.remote.rkey, x->a, x->m1, x->b,
									  x->m2, IBV_SEND_SIGNALED)
					   : dv_fetch_add(c.qp, 1000 + nops + i, &sge, raddr,
									   c.remote.rkey, x->a, x->m1,
									   IBV_SEND_SIGNALED);
			} else
			{
				struct ibv_send_wr wr = {.wr_id = 1000 + nops + i, .sg_list = &sge, .num_sge = 1,
							 .opcode = x->cas ? IBV_WR_ATOMIC_CMP_AND_SWP
									  : IBV_WR_ATOMIC_FETCH_AND_ADD,
							 .send_flags = IBV_SEND_SIGNALED},
						   *b;
				wr.wr.atomic.remote_addr = raddr;
				wr.wr.atomic.rkey = c.remote.rkey;
				wr.wr.atomic.compare_add = x->a;
				wr.wr.atomic.swap = x->b;
				r = ibv_post_send(c.qp, &wr, &b);
			}
			if (r) {
				fail(name, "post atomic %d: %s", nops + i, strerror(r));
				bad = -1;
			}
		}
		if (bad)
			break;
		int n = poll_n(c.scq, wc, 8, TIMEOUT_MS);
		if (n != 8) {
			fail(name, "%d of 8 atomic completions", n);
			bad = -1;
			break;
		}
		for (int i = 0; i < 8; i++) {
			enum ibv_wc_opcode op = at[i].cas ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD;
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != op ||
			    wc[i].wr_id != (uint64_t)(1000 + nops + i)) {
				fail(name, "op %d: status %s opcode %d wr_id %" PRIu64 ", want SUCCESS %d %d",
				     nops + i, wcs(wc[i].status), wc[i].opcode, wc[i].wr_id, op, nops + i + 1000);
				bad = -1;
				break;
			}
			if (res[i] != want[i]) {
				fail(name, "op %d (%s word %d a=%#" PRIx64 " b=%#" PRIx64 "): original %#" PRIx64
					   ", model %#" PRIx64,
				     nops + i, at[i].cas ? "CmpSwap" : "FetchAdd", at[i].word, at[i].a, at[i].b,
				     res[i], want[i]);
				bad = -1;
				break;
			}
		}
		nops += 8;
	}
	if (!bad) {
		/* Read the words back. */
		uint64_t *rb = (uint64_t *)(c.buf + 16384);
		memset(rb, 0, 8 * NWORDS);
		struct ibv_wc wc;
		if (post1(&c, IBV_WR_RDMA_READ, 77, rb, 8 * NWORDS, c.remote.addr, c.remote.rkey,
			  IBV_SEND_SIGNALED) ||
		    poll_n(c.scq, &wc, 1, TIMEOUT_MS) != 1 || wc.status != IBV_WC_SUCCESS) {
			fail(name, "read back failed");
			bad = -1;
		}
		for (int i = 0; !bad && i < NWORDS; i++)
			if (rb[i] != model[i]) {
				fail(name, "word %d reads %#" PRIx64 ", model %#" PRIx64, i, rb[i], model[i]);
				bad = -1;
			}
	}
	ctrl_send("final %llx %llx %llx %llx", (unsigned long long)model[0],
		  (unsigned long long)model[1], (unsigned long long)model[2],
		  (unsigned long long)model[3]);
	if (!bad)
		ok(name, "%d ops match the model", nops);
	conn_close(name, &c);
}

/* Waits up to ms for an async event on ctx for qp (others are logged and
   acked); -1 if none came. */
static int wait_async_quiet(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type *type,
			    int ms)
{
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	long long deadline = now_ms() + ms;
	for (;;) {
		long long left = deadline - now_ms();
		struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return -1;
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev)) {
			if (errno == EAGAIN)
				continue;
			info("ibv_get_async_event: %s", strerror(errno));
			return -1;
		}
		enum ibv_event_type t = ev.event_type;
		struct ibv_qp *eq = ev.element.qp;
		ibv_ack_async_event(&ev);
		if (eq == qp) {
			*type = t;
			return 0;
		}
		info("async event %s for another QP (skipped)", ibv_event_type_str(t));
	}
}

static int wait_async(const char *name, struct ibv_context *ctx, struct ibv_qp *qp,
		      enum ibv_event_type *type)
{
	if (wait_async_quiet(ctx, qp, type, TIMEOUT_MS)) {
		fail(name, "no async event for the QP on the context's async_fd within %d ms", TIMEOUT_MS);
		return -1;
	}
	return 0;
}

/* A Read with a bad rkey: REM_ACCESS_ERR, and every later WR flushed. */
static void case_bad_rkey(int server)
{
	const char *name = "bad_rkey_read";
	struct opts o = {.depth = 16, .buflen = BUFSZ};
	struct conn c;
	int bad;
	struct ibv_wc wc[4];
	if (server) {
		bad = server_accept(name, &c, &o, 2, 64, 0x300);
		int n = bad ? 0 : poll_n(c.rcq, wc, 2, TIMEOUT_MS);
		if (!bad && (n != 2 || wc[0].status != IBV_WC_WR_FLUSH_ERR || wc[1].status != IBV_WC_WR_FLUSH_ERR ||
			     wc[0].wr_id != 0x300 || wc[1].wr_id != 0x301))
			fail(name, "responder: %d receive completions (want 2 WR_FLUSH_ERR, wr_id 0x300, 0x301): %s %s", n,
			     n > 0 ? wcs(wc[0].status) : "-", n > 1 ? wcs(wc[1].status) : "-");
		else if (!bad && extra_completion(c.rcq, 50))
			fail(name, "responder: an extra receive completion");
		else if (!bad)
			ok(name, "responder's receives flushed");
		ctrl_expect(name, "end");
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	for (int i = 0; !bad && i < 2; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)c.buf, .length = 64, .lkey = c.mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 0x310u + i, .sg_list = &sge, .num_sge = 1}, *b;
		if (ibv_post_recv(c.qp, &wr, &b))
			bad = -1;
	}
	uint32_t badkey = c.remote.rkey ^ 0x5a5a5a00u;
	if (!bad && (post1(&c, IBV_WR_RDMA_READ, 0x401, c.buf, 4096, c.remote.addr, badkey,
			   IBV_SEND_SIGNALED) ||
		     post1(&c, IBV_WR_RDMA_READ, 0x402, c.buf + 4096, 4096, c.remote.addr,
			   c.remote.rkey, IBV_SEND_SIGNALED) ||
		     post1(&c, IBV_WR_SEND, 0x403, c.buf, 16, 0, 0, IBV_SEND_SIGNALED))) {
		fail(name, "ibv_post_send: %s", strerror(errno));
		bad = -1;
	}
	if (!bad) {
		int n = poll_n(c.scq, wc, 3, TIMEOUT_MS);
		if (n != 3)
			fail(name, "%d of 3 send completions", n);
		else if (wc[0].wr_id != 0x401 || wc[0].status != IBV_WC_REM_ACCESS_ERR)
			fail(name, "first completion wr_id %#" PRIx64 " %s, want 0x401 remote access error",
			     wc[0].wr_id, wcs(wc[0].status));
		else if (wc[1].wr_id != 0x402 || wc[1].status != IBV_WC_WR_FLUSH_ERR ||
			 wc[2].wr_id != 0x403 || wc[2].status != IBV_WC_WR_FLUSH_ERR)
			fail(name, "later WRs: %#" PRIx64 " %s, %#" PRIx64 " %s; want 0x402, 0x403 WR_FLUSH_ERR",
			     wc[1].wr_id, wcs(wc[1].status), wc[2].wr_id, wcs(wc[2].status));
		else if (extra_completion(c.scq, 50))
			fail(name, "an extra send completion");
		else {
			n = poll_n(c.rcq, wc, 2, TIMEOUT_MS);
			if (n != 2 || wc[0].status != IBV_WC_WR_FLUSH_ERR || wc[1].status != IBV_WC_WR_FLUSH_ERR)
				fail(name, "%d receive completions, want 2 WR_FLUSH_ERR", n);
			else if (extra_completion(c.rcq, 50))
				fail(name, "an extra receive completion");
			else
				ok(name, "REM_ACCESS_ERR then WR_FLUSH_ERR for 2 sends and 2 receives");
		}
	}
	ctrl_send("end");
	conn_close(name, &c);
}

/* A Write with a bad rkey completes (iWARP Writes complete once sent);
   the responder's Terminate then comes as an async event. */
static void case_term_async(int server)
{
	const char *name = "terminate_async_event";
	struct opts o = {.depth = 16, .buflen = BUFSZ};
	struct conn c;
	int bad;
	struct ibv_wc wc[2];
	if (server) {
		bad = server_accept(name, &c, &o, 1, 64, 0x500);
		int n = bad ? 0 : poll_n(c.rcq, wc, 1, TIMEOUT_MS);
		if (!bad && (n != 1 || wc[0].status != IBV_WC_WR_FLUSH_ERR))
			fail(name, "responder: %d receive completions, want 1 WR_FLUSH_ERR (%s)", n,
			     n ? wcs(wc[0].status) : "-");
		else if (!bad)
			ok(name, "responder's receive flushed");
		ctrl_expect(name, "end");
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	if (!bad && post1(&c, IBV_WR_RDMA_WRITE, 0x601, c.buf, 64, c.remote.addr,
			  c.remote.rkey ^ 0x5a5a5a00u, IBV_SEND_SIGNALED)) {
		fail(name, "ibv_post_send: %s", strerror(errno));
		bad = -1;
	}
	if (!bad) {
		int n = poll_n(c.scq, wc, 1, TIMEOUT_MS);
		enum ibv_event_type t;
		if (n != 1)
			fail(name, "no Write completion");
		else if (wc[0].status == IBV_WC_REM_ACCESS_ERR) {
			/* The engine held the completion until the Terminate came:
			   the error is in it, and an async event is optional. */
			int got = !wait_async_quiet(c.id->verbs, c.qp, &t, 2000);
			ok(name, "the Write's own completion carried the Terminate (remote access error); async event %s",
			   got ? ibv_event_type_str(t) : "none");
		} else if (wc[0].status != IBV_WC_SUCCESS)
			fail(name, "Write completed %s, want SUCCESS (or remote access error)",
			     wcs(wc[0].status));
		else if (!wait_async(name, c.id->verbs, c.qp, &t)) {
			if (t != IBV_EVENT_QP_FATAL && t != IBV_EVENT_QP_ACCESS_ERR)
				fail(name, "async event %s, want QP_FATAL or QP_ACCESS_ERR", ibv_event_type_str(t));
			else {
				/* A WR posted now must still complete once. */
				int r = post1(&c, IBV_WR_RDMA_WRITE, 0x602, c.buf, 64, c.remote.addr,
					      c.remote.rkey, IBV_SEND_SIGNALED);
				n = r ? 0 : poll_n(c.scq, wc, 1, TIMEOUT_MS);
				if (!r && (n != 1 || wc[0].status != IBV_WC_WR_FLUSH_ERR))
					fail(name, "a Write posted after the Terminate: %d completions (%s), want 1 WR_FLUSH_ERR",
					     n, n ? wcs(wc[0].status) : "-");
				else
					ok(name, "%s; a later post %s", ibv_event_type_str(t),
					   r ? "refused" : "flushed");
			}
		}
	}
	ctrl_send("end");
	conn_close(name, &c);
}

/* A Send larger than the receive: LOC_LEN_ERR, the next receive flushed. */
static void case_len_err(int server)
{
	const char *name = "local_length_error";
	struct opts o = {.depth = 16, .buflen = BUFSZ};
	struct conn c;
	int bad;
	struct ibv_wc wc[2];
	if (server) {
		bad = server_accept(name, &c, &o, 2, 16, 0x700);
		int n = bad ? 0 : poll_n(c.rcq, wc, 2, TIMEOUT_MS);
		if (!bad && n < 1)
			fail(name, "no receive completion");
		else if (!bad && (wc[0].wr_id != 0x700 || wc[0].status != IBV_WC_LOC_LEN_ERR))
			fail(name, "receive wr_id %#" PRIx64 " %s, want 0x700 local length error", wc[0].wr_id,
			     wcs(wc[0].status));
		else if (!bad && (n != 2 || wc[1].wr_id != 0x701 || wc[1].status != IBV_WC_WR_FLUSH_ERR))
			fail(name, "second receive: %d completions (%s), want 0x701 WR_FLUSH_ERR", n,
			     n > 1 ? wcs(wc[1].status) : "-");
		else if (!bad && extra_completion(c.rcq, 50))
			fail(name, "an extra receive completion");
		else if (!bad)
			ok(name, "LOC_LEN_ERR, then WR_FLUSH_ERR");
		ctrl_expect(name, "end");
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	if (!bad && post1(&c, IBV_WR_SEND, 0x801, c.buf, 64, 0, 0, IBV_SEND_SIGNALED)) {
		fail(name, "ibv_post_send: %s", strerror(errno));
		bad = -1;
	}
	if (!bad) {
		int n = poll_n(c.scq, wc, 1, TIMEOUT_MS);
		if (n != 1)
			fail(name, "sender: no Send completion");
		else if (extra_completion(c.scq, 50))
			fail(name, "sender: an extra completion");
		else
			ok(name, "sender's Send completed once (%s)", wcs(wc[0].status));
	}
	ctrl_send("end");
	conn_close(name, &c);
}

/* What libfabric's verbs provider, qperf and MPI do: a QP of 384 + 384
   on 1-entry CQs. Every WR is posted before any is polled: the CQs grow,
   and every completion arrives once, in order. The client's send CQ is
   resized meanwhile: never below what it holds (EINVAL), nor below what
   posted WRs reserved (cq->cqe says so), and its entries survive. */
#define NSMALL 384
static void case_small_cq(int server)
{
	const char *name = "small_cq";
	struct opts o = {.depth = NSMALL, .cqe = 1, .buflen = BUFSZ};
	struct conn c;
	struct ibv_wc wc[NSMALL];
	int bad, n, i;
	if (server) {
		bad = server_accept(name, &c, &o, NSMALL, 8, 0x1000);
		n = bad ? 0 : poll_n(c.rcq, wc, NSMALL, TIMEOUT_MS);
		for (i = 0; !bad && i < n; i++)
			if (wc[i].wr_id != 0x1000u + i || wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != 8)
				break;
		if (!bad && (n != NSMALL || i != n))
			fail(name, "receiver: %d of %d completions, #%d wr_id %#" PRIx64 " %s", n, NSMALL, i,
			     i < n ? wc[i].wr_id : 0, i < n ? wcs(wc[i].status) : "-");
		else if (!bad && extra_completion(c.rcq, 50))
			fail(name, "receiver: an extra completion");
		else if (!bad)
			ok(name, "receiver: %d receives on a CQ of %d, in order", n, c.rcq->cqe);
		ctrl_expect(name, "end");
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	for (i = 0; !bad && i < NSMALL; i++)
		if (post1(&c, IBV_WR_SEND, i, c.buf + 8 * i, 8, 0, 0, IBV_SEND_SIGNALED)) {
			fail(name, "ibv_post_send #%d on a CQ of %d: %s", i, c.scq->cqe, strerror(errno));
			bad = -1;
		}
	struct ibv_device_attr da;
	if (!bad && ibv_query_device(c.id->verbs, &da)) {
		fail(name, "ibv_query_device: %s", strerror(errno));
		bad = -1;
	}
	if (!bad && (ibv_resize_cq(c.scq, 0) != EINVAL || ibv_resize_cq(c.scq, da.max_cqe + 1) != EINVAL)) {
		fail(name, "ibv_resize_cq to 0 or max_cqe + 1 accepted");
		bad = -1;
	}
	/* Until more than 5 completions are queued, a resize to 5 keeps the
	   384 entries reserved; then it is EINVAL. */
	long long deadline = now_ms() + TIMEOUT_MS;
	int r = 0;
	while (!bad && (r = ibv_resize_cq(c.scq, 5)) == 0 && c.scq->cqe == NSMALL && now_ms() < deadline)
		usleep(1000);
	if (!bad && r != EINVAL) {
		fail(name, "ibv_resize_cq(5) with %d sends outstanding: %d, cqe %d", NSMALL, r, c.scq->cqe);
		bad = -1;
	}
	if (!bad && (ibv_resize_cq(c.scq, NSMALL) || c.scq->cqe != NSMALL ||
		     ibv_resize_cq(c.scq, 4 * NSMALL) || c.scq->cqe != 4 * NSMALL)) {
		fail(name, "ibv_resize_cq to %d and %d: cqe %d", NSMALL, 4 * NSMALL, c.scq->cqe);
		bad = -1;
	}
	if (!bad) {
		n = poll_n(c.scq, wc, NSMALL, TIMEOUT_MS);
		for (i = 0; i < n; i++)
			if (wc[i].wr_id != (uint64_t)i || wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_SEND)
				break;
		if (n != NSMALL || i != n)
			fail(name, "sender: %d of %d completions, #%d wr_id %#" PRIx64 " %s", n, NSMALL, i,
			     i < n ? wc[i].wr_id : 0, i < n ? wcs(wc[i].status) : "-");
		else if (extra_completion(c.scq, 50))
			fail(name, "sender: an extra completion");
		else if (ibv_resize_cq(c.scq, 2) || c.scq->cqe != 2)
			fail(name, "ibv_resize_cq(2) on an idle CQ: cqe %d", c.scq->cqe);
		else
			ok(name, "sender: %d sends on a CQ of 1, resized, in order", n);
	}
	ctrl_send("end");
	conn_close(name, &c);
}

/* Waits for a completion event on c's channel; 0 if it came for cq. */
static int wait_cq_event(const char *name, struct conn *c, struct ibv_cq *cq, int ms)
{
	struct pollfd p = {.fd = c->cch->fd, .events = POLLIN};
	if (poll(&p, 1, ms) <= 0)
		return -1;
	struct ibv_cq *ecq;
	void *ectx;
	if (ibv_get_cq_event(c->cch, &ecq, &ectx)) {
		fail(name, "ibv_get_cq_event: %s", strerror(errno));
		return -2;
	}
	ibv_ack_cq_events(ecq, 1);
	if (ecq != cq) {
		fail(name, "event for CQ %p, want %p", (void *)ecq, (void *)cq);
		return -2;
	}
	return 0;
}

static void case_comp_channel(int server)
{
	const char *name = "completion_channel";
	struct opts o = {.depth = 16, .buflen = BUFSZ, .channel = 1};
	struct conn c;
	int bad;
	struct ibv_wc wc[4];
	if (server) {
		bad = server_accept(name, &c, &o, 4, 64, 0x900);
		/* 1: armed for any completion; the client's Send wakes us. */
		if (!bad && (ibv_req_notify_cq(c.rcq, 0) || ctrl_send("armed")))
			bad = -1;
		if (!bad && wait_cq_event(name, &c, c.rcq, TIMEOUT_MS)) {
			fail(name, "no wakeup for a receive on an armed CQ");
			bad = -1;
		}
		if (!bad && (poll_n(c.rcq, wc, 1, TIMEOUT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS)) {
			fail(name, "woken, but no successful receive in the CQ");
			bad = -1;
		}
		if (!bad && wait_cq_event(name, &c, c.rcq, 50) != -1) {
			fail(name, "a second event for one arming");
			bad = -1;
		}
		/* 2: solicited only; an unsolicited Send must not wake us. */
		if (!bad && (ibv_req_notify_cq(c.rcq, 1) || ctrl_send("armed-se")))
			bad = -1;
		if (!bad && poll_n(c.rcq, wc, 1, TIMEOUT_MS) != 1) {
			fail(name, "no unsolicited receive");
			bad = -1;
		}
		if (!bad && wait_cq_event(name, &c, c.rcq, 100) != -1) {
			fail(name, "a solicited-only CQ woke for an unsolicited receive");
			bad = -1;
		}
		if (!bad && ctrl_send("send-se"))
			bad = -1;
		if (!bad && wait_cq_event(name, &c, c.rcq, TIMEOUT_MS)) {
			fail(name, "no wakeup for a solicited receive");
			bad = -1;
		}
		if (!bad && (poll_n(c.rcq, wc, 1, TIMEOUT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS ||
			     wc[0].byte_len != 24)) {
			fail(name, "woken, but no 24-byte solicited receive in the CQ");
			bad = -1;
		}
		if (!bad)
			ok(name, "armed wakeup, solicited-only ignores unsolicited, wakes for solicited");
		ctrl_expect(name, "end");
		conn_close(name, &c);
		return;
	}
	bad = client_connect(name, &c, &o, 0);
	/* The sender's CQ on the channel too: one signaled Send wakes it. */
	if (!bad && ctrl_expect(name, "armed"))
		bad = -1;
	if (!bad && (ibv_req_notify_cq(c.scq, 0) ||
		     post1(&c, IBV_WR_SEND, 0xa01, c.buf, 32, 0, 0, IBV_SEND_SIGNALED)))
		bad = -1;
	if (!bad && wait_cq_event(name, &c, c.scq, TIMEOUT_MS)) {
		fail(name, "sender: no wakeup for its Send completion");
		bad = -1;
	}
	if (!bad && poll_n(c.scq, wc, 1, TIMEOUT_MS) != 1)
		bad = -1;
	if (!bad && ctrl_expect(name, "armed-se"))
		bad = -1;
	if (!bad && post1(&c, IBV_WR_SEND, 0xa02, c.buf, 16, 0, 0, IBV_SEND_SIGNALED))
		bad = -1;
	if (!bad && ctrl_expect(name, "send-se"))
		bad = -1;
	if (!bad && post1(&c, IBV_WR_SEND, 0xa03, c.buf, 24, 0, 0,
			  IBV_SEND_SIGNALED | IBV_SEND_SOLICITED))
		bad = -1;
	if (!bad && poll_n(c.scq, wc, 2, TIMEOUT_MS) != 2) {
		fail(name, "sender: missing Send completions");
		bad = -1;
	}
	if (!bad)
		ok(name, "sender woken by its completion");
	ctrl_send("end");
	conn_close(name, &c);
}

/* Many QPs: NMANY connections, a Send each way on every one; the server
   shares one PD, CQ and MR among them and maps completions by qp_num. */
static void case_many_qps(int server)
{
	const char *name = "many_qps";
	struct opts o = {.depth = 4, .buflen = 4096, .shared_cq = server};
	static struct conn c[NMANY];
	struct ibv_wc wc[2 * NMANY];
	int bad = 0, made = 0;
	for (int i = 0; i < NMANY && !bad; i++, made++)
		bad = server ? server_accept(name, &c[i], &o, 1, 64, 0xb00 + i)
			     : client_connect(name, &c[i], &o, i);
	if (!bad && !server) {
		for (int i = 0; i < NMANY && !bad; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)c[i].buf + 1024, .length = 64,
					      .lkey = c[i].mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = 0xc00u + i, .sg_list = &sge, .num_sge = 1}, *b;
			if (ibv_post_recv(c[i].qp, &wr, &b))
				bad = -1;
		}
		if (!bad && ctrl_send("posted"))
			bad = -1;
		for (int i = 0; i < NMANY && !bad; i++) {
			snprintf((char *)c[i].buf, 64, "qp %d", i);
			if (post1(&c[i], IBV_WR_SEND, 0xd00 + i, c[i].buf, 64, 0, 0, IBV_SEND_SIGNALED))
				bad = -1;
		}
		for (int i = 0; i < NMANY && !bad; i++) {
			if (poll_n(c[i].scq, wc, 1, TIMEOUT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS) {
				fail(name, "QP %d: Send failed", i);
				bad = -1;
			} else if (poll_n(c[i].rcq, wc, 1, TIMEOUT_MS) != 1 || wc[0].status != IBV_WC_SUCCESS) {
				fail(name, "QP %d: no answer", i);
				bad = -1;
			} else {
				char want[64];
				snprintf(want, sizeof(want), "answer %d", i);
				if (strcmp((char *)c[i].buf + 1024, want)) {
					fail(name, "QP %d: answer \"%.64s\", want \"%s\"", i,
					     (char *)c[i].buf + 1024, want);
					bad = -1;
				}
			}
		}
		if (!bad)
			ok(name, "%d connections, a Send each way", NMANY);
	} else if (!bad) {
		if (ctrl_expect(name, "posted"))
			bad = -1;
		int n = bad ? 0 : poll_n(scq_shared, wc, NMANY, 3 * TIMEOUT_MS);
		if (!bad && n != NMANY) {
			fail(name, "%d of %d receives", n, NMANY);
			bad = -1;
		}
		int seen[NMANY] = {0};
		for (int k = 0; k < n && !bad; k++) {
			int i;
			for (i = 0; i < NMANY; i++)
				if (c[i].qp->qp_num == wc[k].qp_num)
					break;
			char want[64];
			snprintf(want, sizeof(want), "qp %u", i < NMANY ? c[i].local.idx : 0);
			if (i == NMANY || wc[k].status != IBV_WC_SUCCESS || wc[k].opcode != IBV_WC_RECV) {
				fail(name, "receive %d: qp_num %u status %s opcode %d", k, wc[k].qp_num,
				     wcs(wc[k].status), wc[k].opcode);
				bad = -1;
			} else if (wc[k].wr_id != 0xb00u + i || seen[i]++) {
				fail(name, "receive on QP %d: wr_id %#" PRIx64 " (twice?)", i, wc[k].wr_id);
				bad = -1;
			} else if (strcmp((char *)c[i].buf, want)) {
				fail(name, "QP %d got \"%.64s\", want \"%s\" (the connect's private data)", i,
				     (char *)c[i].buf, want);
				bad = -1;
			} else {
				snprintf((char *)c[i].buf + 512, 64, "answer %u", c[i].local.idx);
				if (post1(&c[i], IBV_WR_SEND, 0xe00 + i, c[i].buf + 512, 64, 0, 0,
					  IBV_SEND_SIGNALED))
					bad = -1;
			}
		}
		n = bad ? 0 : poll_n(scq_shared, wc, NMANY, 3 * TIMEOUT_MS);
		if (!bad && n != NMANY) {
			fail(name, "%d of %d answer completions", n, NMANY);
			bad = -1;
		}
		if (!bad)
			ok(name, "%d QPs on one PD, CQ and MR", NMANY);
	}
	if (server)
		ctrl_expect(name, "end");
	else
		ctrl_send("end");
	/* Both sides disconnect every id; each gets one DISCONNECTED. */
	for (int i = 0; i < made; i++)
		if (c[i].id && c[i].qp)
			rdma_disconnect(c[i].id);
	int ndisc = 0;
	for (int i = 0; i < made; i++) {
		struct evrec r;
		if (c[i].id && c[i].qp && !next_event(name, RDMA_CM_EVENT_DISCONNECTED, c[i].id, &r))
			ndisc++;
	}
	struct evrec r;
	int extra = 0;
	while (!read_event(&r, 100))
		if (r.type == RDMA_CM_EVENT_DISCONNECTED)
			extra++;
	if (!bad && (ndisc != made || extra))
		fail(name, "%d DISCONNECTED for %d connections, then %d more", ndisc, made, extra);
	else if (!bad)
		ok("many_qps_disconnect", "%d DISCONNECTED, once each", ndisc);
	for (int i = 0; i < made; i++)
		conn_free(&c[i]);
	if (server && spd) {
		ibv_dereg_mr(smr);
		ibv_destroy_cq(scq_shared);
		ibv_dealloc_pd(spd);
		free(sbuf);
		spd = NULL;
	}
}

static const struct {
	const char *name;
	void (*run)(int server);
} cases[] = {
	{"write_imm", case_write_imm},
	{"imm64", case_imm64},
	{"atomics", NULL},
	{"masked_atomics", NULL},
	{"bad_rkey", case_bad_rkey},
	{"len_err", case_len_err},
	{"term_async", case_term_async},
	{"comp_channel", case_comp_channel},
	{"many_qps", case_many_qps},
	{"small_cq", case_small_cq},
};
#define NCASES (int)(sizeof(cases) / sizeof(cases[0]))

static void run_case(int i, int server)
{
	if (!strcmp(cases[i].name, "atomics"))
		case_atomics(server, 0);
	else if (!strcmp(cases[i].name, "masked_atomics"))
		case_atomics(server, 1);
	else
		cases[i].run(server);
}

static int find_case(const char *n)
{
	for (int i = 0; i < NCASES; i++)
		if (!strcmp(cases[i].name, n))
			return i;
	return -1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client ADDR PORT [CASE...]\n", argv[0]);
		return 2;
	}
	int server = !strcmp(argv[1], "server");
	role = argv[1];
	int port = atoi(argv[3]);
	server_addr.sin_family = AF_INET;
	server_addr.sin_port = htons(port);
	if (inet_pton(AF_INET, argv[2], &server_addr.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", argv[2]);
		return 2;
	}
	ech = rdma_create_event_channel();
	if (!ech) {
		fail("setup", "rdma_create_event_channel: %s", strerror(errno));
		return 1;
	}
	fcntl(ech->fd, F_SETFL, fcntl(ech->fd, F_GETFL) | O_NONBLOCK);

	struct sockaddr_in caddr = server_addr;
	caddr.sin_port = htons(port + 1);
	if (server) {
		if (rdma_create_id(ech, &listen_id, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(listen_id, (struct sockaddr *)&server_addr) ||
		    rdma_listen(listen_id, 128)) {
			fail("setup", "rdma listen on %s:%d: %s", argv[2], port, strerror(errno));
			return 1;
		}
		if (listen_id->verbs)
			check_device(listen_id->verbs);
		int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(ls, (struct sockaddr *)&caddr, sizeof(caddr)) || listen(ls, 1)) {
			fail("setup", "control listen on port %d: %s", port + 1, strerror(errno));
			return 1;
		}
		printf("listening\n");
		struct pollfd p = {.fd = ls, .events = POLLIN};
		if (poll(&p, 1, 6 * TIMEOUT_MS) <= 0 || (ctrl_fd = accept(ls, NULL, NULL)) < 0) {
			fail("setup", "no client on the control channel");
			return 1;
		}
		close(ls);
		char line[256];
		while (!ctrl_recv(line, sizeof(line))) {
			if (!strcmp(line, "quit"))
				break;
			int i = strncmp(line, "case ", 5) ? -1 : find_case(line + 5);
			if (i < 0) {
				fail("setup", "control: unknown \"%s\"", line);
				break;
			}
			run_case(i, 1);
		}
		rdma_destroy_id(listen_id);
	} else {
		long long deadline = now_ms() + TIMEOUT_MS;
		for (;;) {
			ctrl_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (!connect(ctrl_fd, (struct sockaddr *)&caddr, sizeof(caddr)))
				break;
			close(ctrl_fd);
			if (now_ms() > deadline) {
				fail("setup", "control connect to port %d: %s", port + 1, strerror(errno));
				return 1;
			}
			usleep(50000);
		}
		int first = 1;
		for (int a = 4; a < argc || (argc == 4 && a - 4 < NCASES); a++) {
			const char *n = argc > 4 ? argv[a] : cases[a - 4].name;
			int i = find_case(n);
			if (i < 0) {
				fail("setup", "unknown case %s", n);
				continue;
			}
			if (ctrl_send("case %s", n))
				break;
			run_case(i, 0);
			if (first) {
				/* The client's context exists once it connected. */
				struct ibv_device **l = ibv_get_device_list(NULL);
				if (l && l[0]) {
					struct ibv_context *ctx = ibv_open_device(l[0]);
					if (ctx) {
						check_device(ctx);
						ibv_close_device(ctx);
					}
				}
				if (l)
					ibv_free_device_list(l);
				first = 0;
			}
		}
		ctrl_send("quit");
	}
	rdma_destroy_event_channel(ech);
	printf("done %s: %d failures\n", role, failures);
	return failures ? 1 : 0;
}
