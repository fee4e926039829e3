/*
 * pingpong.c: ib_write_lat's pattern between two processes over
 * 127.0.0.1: each side RDMA-Writes a counter into the other's buffer and
 * waits for the peer's by watching its own memory, without calling
 * libibverbs while it waits. "pingpong N" runs the initiator and forks+execs
 * the responder (a Go engine does not survive a bare fork); with
 * RESPONDER_FIRST=1 the responder (the accepting side, as perftest's
 * server) writes first, which needs the initiator to have sent the RFC 6581
 * RTR before any application data. The connection comes from the engine's
 * CM calls (no librdmacm). Exits 1 if a side gets stuck (bounded waits).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "xrnic_engine.h"
#include "xrnic_private.h"

static const char *role = "initiator";
static pid_t child; /* the responder, when we are the initiator */

#define CHECK(c)                                                          \
	do {                                                              \
		if (!(c)) {                                               \
			char t[256] = "";                                 \
			xrnic_last_error(t, sizeof(t));                   \
			fprintf(stderr, "%s: %s:%d: %s failed (%s)\n",    \
				role, __FILE__, __LINE__, #c, t);         \
			exit(1);                                          \
		}                                                         \
	} while (0)

static int cmfd;
static uint64_t cmch;

static struct xrnic_event cm_wait(uint32_t code)
{
	struct xrnic_event ev;
	uint64_t n;

	CHECK(read(cmfd, &n, 8) == 8);
	CHECK(xrnic_chan_get(cmch, &ev) == 0);
	CHECK(ev.code == code);
	return ev;
}

struct info {
	uint64_t addr;
	uint32_t rkey;
	uint16_t port;
};

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 100;
	int responder = argc > 3, first, rfd, wfd, status = 0;
	int p2c[2], c2p[2];

	if (!responder) {
		char a[2][16];

		CHECK(pipe(p2c) == 0 && pipe(c2p) == 0);
		child = fork();
		CHECK(child >= 0);
		if (child == 0) {
			snprintf(a[0], 16, "%d", p2c[0]);
			snprintf(a[1], 16, "%d", c2p[1]);
			execl("/proc/self/exe", argv[0], argc > 1 ? argv[1] : "100",
			      a[0], a[1], (char *)NULL);
			_exit(127);
		}
		rfd = c2p[0];
		wfd = p2c[1];
	} else {
		role = "responder";
		rfd = atoi(argv[2]);
		wfd = atoi(argv[3]);
	}
	first = getenv("RESPONDER_FIRST") ? responder : !responder;

	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	struct ibv_context *c = ibv_open_device(l[0]);
	CHECK(c);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	CHECK(pd);
	volatile char *buf = aligned_alloc(4096, 8192);
	CHECK(buf);
	memset((char *)buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, (void *)buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr);
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	CHECK(cq);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
				      .qp_type = IBV_QPT_RC,
				      .cap = {16, 16, 1, 1, 0}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp);
	struct xrnic_conn_param p = {.responder_resources = 4,
				     .initiator_depth = 4};
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage loc, peer;
	struct info me = {(uintptr_t)buf, mr->rkey, 0}, them;
	uint64_t id;

	CHECK(xrnic_chan_create(&cmfd, &cmch) == 0);
	CHECK(xrnic_cm_create_id(cmch, 1, &id) == 0);
	if (responder) {
		CHECK(xrnic_cm_bind(id, (struct sockaddr *)&a) == 0);
		CHECK(xrnic_cm_listen(id, 1) == 0);
		CHECK(xrnic_cm_addrs(id, &loc, &peer) == 0);
		me.port = ((struct sockaddr_in *)&loc)->sin_port;
		CHECK(write(wfd, &me, sizeof(me)) == sizeof(me));
		CHECK(read(rfd, &them, sizeof(them)) == sizeof(them));
		struct xrnic_event ev = cm_wait(RDMA_CM_EVENT_CONNECT_REQUEST);
		CHECK(xrnic_cm_accept(ev.new_id, xrnic_ibv_qp_handle(qp), &p) == 0);
		cm_wait(RDMA_CM_EVENT_ESTABLISHED);
	} else {
		CHECK(read(rfd, &them, sizeof(them)) == sizeof(them));
		CHECK(write(wfd, &me, sizeof(me)) == sizeof(me));
		a.sin_port = them.port;
		CHECK(xrnic_cm_resolve_addr(id, NULL, (struct sockaddr *)&a,
					    &loc) == 0);
		cm_wait(RDMA_CM_EVENT_ADDR_RESOLVED);
		CHECK(xrnic_cm_resolve_route(id) == 0);
		cm_wait(RDMA_CM_EVENT_ROUTE_RESOLVED);
		CHECK(xrnic_cm_connect(id, xrnic_ibv_qp_handle(qp), &p) == 0);
		cm_wait(RDMA_CM_EVENT_ESTABLISHED);
	}

	struct ibv_sge sge = {(uintptr_t)buf, 2, mr->lkey};
	struct ibv_send_wr w = {.sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct ibv_wc wc;

	w.wr.rdma.remote_addr = them.addr + 4096;
	w.wr.rdma.rkey = them.rkey;
	for (int i = 1; i <= iters; i++) {
		if (!first || i > 1) {
			char want = (char)(first ? i - 1 : i);
			long s;

			for (s = 0; buf[4097] != want; s++)
				if (s == 4000000000L) {
					fprintf(stderr, "%s: no write %d from the peer\n",
						role, i);
					if (child)
						kill(child, SIGTERM);
					exit(1);
				}
		}
		buf[1] = (char)i;
		CHECK(ibv_post_send(qp, &w, &bad) == 0);
		int ne;
		long s = 0;

		do {
			ne = ibv_poll_cq(cq, 1, &wc);
			if (++s == 100000000L) {
				fprintf(stderr, "%s: write %d never completes\n",
					role, i);
				exit(1);
			}
		} while (ne == 0);
		CHECK(ne == 1 && wc.status == IBV_WC_SUCCESS);
	}
	printf("%s: %d round trips, %s first\n", role, iters,
	       getenv("RESPONDER_FIRST") ? "responder" : "initiator");
	xrnic_cm_disconnect(id);
	if (child) {
		CHECK(waitpid(child, &status, 0) == child);
		return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	}
	return 0;
}
