/*
 * overhead: what the ABI costs per call, on a connected RC QP over
 * loopback through xrnic's libibverbs/librdmacm (a benchmark; it asserts
 * nothing but that every WR completed successfully).
 *
 *   overhead ADDR PORT [N]
 *
 * connects to itself at ADDR:PORT (rdma_cm, one process, one thread: the
 * engine answers the Writes), then times N (default 1M; the test runs 200k) 0-byte RDMA Writes,
 * every 64th signaled, posted one ibv_post_send each and reaped with
 * ibv_poll_cq (the sustained rate), bursts of 256 posts into an idle queue
 * (ibv_post_send alone), and 10M ibv_poll_cq calls on an empty CQ. Prints
 * "bench NAME VALUE UNIT" lines.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define DEPTH 1024
#define SIGNAL_EVERY 64

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what)
{
	printf("FAIL overhead: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct rdma_event_channel *ech;

static struct rdma_cm_event *expect(enum rdma_cm_event_type type)
{
	struct pollfd p = {.fd = ech->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 10000) <= 0 || rdma_get_cm_event(ech, &ev)) {
		printf("FAIL overhead: no %s event\n", rdma_event_str(type));
		exit(1);
	}
	if (ev->event != type) {
		printf("FAIL overhead: %s (status %d), want %s\n", rdma_event_str(ev->event), ev->status,
		       rdma_event_str(type));
		exit(1);
	}
	return ev;
}

struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[4096];
};

static void make_qp(struct side *s)
{
	s->pd = ibv_alloc_pd(s->id->verbs);
	s->cq = ibv_create_cq(s->id->verbs, 2 * DEPTH, NULL, NULL, 0);
	if (!s->pd || !s->cq)
		die("pd/cq");
	s->mr = ibv_reg_mr(s->pd, s->buf, sizeof(s->buf),
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->mr)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr qa = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = DEPTH, .max_recv_wr = 16,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(s->id, s->pd, &qa))
		die("rdma_create_qp");
}

/* Polls once; returns the completions taken (each stands for a batch of
   SIGNAL_EVERY WRs), exiting on an error status. */
static int reap(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	int k = ibv_poll_cq(cq, 16, wc);
	if (k < 0) {
		printf("FAIL overhead: ibv_poll_cq: %d\n", k);
		exit(1);
	}
	for (int j = 0; j < k; j++)
		if (wc[j].status != IBV_WC_SUCCESS) {
			printf("FAIL overhead: WR %llu: %s\n", (unsigned long long)wc[j].wr_id,
			       ibv_wc_status_str(wc[j].status));
			exit(1);
		}
	return k;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s ADDR PORT [N]\n", argv[0]);
		return 2;
	}
	long n = argc > 3 ? atol(argv[3]) : 1000000;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	ech = rdma_create_event_channel();
	if (!ech)
		die("rdma_create_event_channel");
	fcntl(ech->fd, F_SETFL, fcntl(ech->fd, F_GETFL) | O_NONBLOCK);

	static struct side srv, cli;
	struct rdma_cm_id *lid;
	struct rdma_cm_event *ev;
	if (rdma_create_id(ech, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&sa) || rdma_listen(lid, 4))
		die("listen");
	if (rdma_create_id(ech, &cli.id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(cli.id, NULL, (struct sockaddr *)&sa, 5000))
		die("resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(cli.id, 5000))
		die("resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	make_qp(&cli);
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
	if (rdma_connect(cli.id, &p))
		die("rdma_connect");
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	srv.id = ev->id;
	rdma_ack_cm_event(ev);
	make_qp(&srv);
	if (rdma_accept(srv.id, &p))
		die("rdma_accept");
	/* Both ESTABLISHED, in either order. */
	for (int i = 0; i < 2; i++)
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));

	struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE, .num_sge = 0}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)srv.buf;
	wr.wr.rdma.rkey = srv.mr->rkey;
	long outstanding = 0, done = 0;
	double t0 = now_ns(), tpoll = 0;
	for (long i = 0; i < n; i++) {
		wr.wr_id = i;
		wr.send_flags = (i % SIGNAL_EVERY == SIGNAL_EVERY - 1) ? IBV_SEND_SIGNALED : 0;
		/* Keep the send queue from filling: reap a signaled batch. */
		while (outstanding >= DEPTH - SIGNAL_EVERY) {
			double a = now_ns();
			int k = reap(cli.cq);
			tpoll += now_ns() - a;
			outstanding -= k * SIGNAL_EVERY;
			done += k * SIGNAL_EVERY;
		}
		int r = ibv_post_send(cli.id->qp, &wr, &bad);
		if (r) {
			printf("FAIL overhead: ibv_post_send WR %ld: %s\n", i, strerror(r));
			return 1;
		}
		outstanding++;
	}
	while (done < n - n % SIGNAL_EVERY)
		done += reap(cli.cq) * SIGNAL_EVERY;
	double total = now_ns() - t0;
	printf("bench write0_post_and_poll %.1f ns/WR (%ld WRs, 1 in %d signaled, %.0f ms)\n",
	       total / n, n, SIGNAL_EVERY, total / 1e6);
	printf("bench write0_outside_poll %.1f ns/WR (post and loop, poll time taken out)\n",
	       (total - tpoll) / n);

	/* Bursts into an idle queue: ibv_post_send alone, no back-pressure
	   (each burst's last WR signaled and waited for before the next). */
	double tburst = 0;
	int bursts = 200, blen = 256;
	for (int b = 0; b < bursts; b++) {
		double a = now_ns();
		for (int i = 0; i < blen; i++) {
			wr.send_flags = i == blen - 1 ? IBV_SEND_SIGNALED : 0;
			int r = ibv_post_send(cli.id->qp, &wr, &bad);
			if (r) {
				printf("FAIL overhead: ibv_post_send (burst): %s\n", strerror(r));
				return 1;
			}
		}
		tburst += now_ns() - a;
		while (!reap(cli.cq))
			;
	}
	printf("bench write0_post_burst %.1f ns/ibv_post_send (%d bursts of %d into an idle queue)\n",
	       tburst / (bursts * blen), bursts, blen);

	struct ibv_wc wc[1];
	long m = 10 * 1000 * 1000;
	t0 = now_ns();
	for (long i = 0; i < m; i++)
		if (ibv_poll_cq(srv.cq, 1, wc)) {
			printf("FAIL overhead: a completion on the idle CQ\n");
			return 1;
		}
	printf("bench poll_cq_empty %.1f ns/call (%ld calls)\n", (now_ns() - t0) / m, m);

	rdma_disconnect(cli.id);
	for (int i = 0; i < 2; i++)
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(cli.id);
	rdma_destroy_qp(srv.id);
	ibv_dereg_mr(cli.mr);
	ibv_dereg_mr(srv.mr);
	ibv_destroy_cq(cli.cq);
	ibv_destroy_cq(srv.cq);
	ibv_dealloc_pd(cli.pd);
	ibv_dealloc_pd(srv.pd);
	rdma_destroy_id(cli.id);
	rdma_destroy_id(srv.id);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ech);
	printf("ok overhead\n");
	return 0;
}
