/*
 * srqtest.c: shared receive queues through libibverbs and librdmacm, in
 * one process: srqtest ADDR PORT.
 *
 * A server accepts two rdma_cm connections onto QPs created with one SRQ
 * (ibv_create_srq, init_attr.srq), each with its own receive CQ. The
 * clients' Sends take the SRQ's receives (ibv_post_srq_recv): every
 * completion is on the receiving QP's CQ with its qp_num, and the data
 * is the right client's. ibv_modify_srq(IBV_SRQ_LIMIT) gives one
 * IBV_EVENT_SRQ_LIMIT_REACHED naming the SRQ. A Send that finds the SRQ
 * empty ends only its own connection; the other one keeps receiving.
 * Also rdma_create_srq (the id's QP uses it), EBUSY, EINVAL, EOPNOTSUPP.
 * Prints "ok <name>" per check and "ok srqtest" at the end; exit 1 on
 * any failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define DEPTH 8
#define SLOT 64

static int failures;

#define CHECK(name, cond)                                                     \
	do {                                                                  \
		if (cond) {                                                   \
			printf("ok %s\n", name);                              \
		} else {                                                      \
			printf("FAIL %s: %s (line %d, errno %d)\n", name,     \
			       #cond, __LINE__, errno);                       \
			failures++;                                           \
		}                                                             \
		fflush(stdout);                                               \
	} while (0)
#define MUST(name, cond)                                                      \
	do {                                                                  \
		int ok_ = (cond);                                             \
		CHECK(name, ok_);                                             \
		if (!ok_)                                                     \
			exit(1);                                              \
	} while (0)

static struct rdma_event_channel *ech;

/* Events that came before the one waited for. */
static struct {
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
} pend[32];
static int npend;

/* Waits for an event of type for id (NULL: any id); returns its id. */
static struct rdma_cm_id *wait_cm(enum rdma_cm_event_type type, struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *got;
	struct pollfd pf = {.fd = ech->fd, .events = POLLIN};
	int i;

	for (i = 0; i < npend; i++)
		if (pend[i].type == type && (!id || pend[i].id == id)) {
			got = pend[i].id;
			pend[i] = pend[--npend];
			return got;
		}
	for (;;) {
		if (poll(&pf, 1, 10000) != 1) {
			printf("FAIL wait %s: timeout\n", rdma_event_str(type));
			exit(1);
		}
		if (rdma_get_cm_event(ech, &ev)) {
			printf("FAIL rdma_get_cm_event: %s\n", strerror(errno));
			exit(1);
		}
		got = ev->id;
		if (ev->event == type && (!id || got == id)) {
			rdma_ack_cm_event(ev);
			return got;
		}
		if (npend < (int)(sizeof(pend) / sizeof(pend[0])))
			pend[npend++] = (typeof(pend[0])){ev->event, got};
		rdma_ack_cm_event(ev);
	}
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	struct timespec t0, t;
	int got = 0, k;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < n) {
		k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return -1;
		got += k;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			break;
	}
	return got;
}

/* Waits for one async event of the context; 0 on timeout. */
static int wait_async(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct pollfd pf = {.fd = ctx->async_fd, .events = POLLIN};

	if (poll(&pf, 1, 10000) != 1)
		return 0;
	return ibv_get_async_event(ctx, ev) == 0;
}

struct client {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	uint8_t buf[256];
	int seq;
};

/* A Send of 16 bytes naming (client i, its seq); polled when wait. */
static int send_msg(struct client *c, int i, int wait)
{
	struct ibv_sge sge = {(uintptr_t)c->buf, 16, c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = (uint64_t)c->seq, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	uint32_t v[4] = {htonl(0x5e5e5e5e), htonl((uint32_t)i), htonl((uint32_t)c->seq), 0};

	memcpy(c->buf, v, sizeof(v));
	c->seq++;
	if (ibv_post_send(c->id->qp, &wr, &bad))
		return 0;
	if (!wait)
		return 1;
	return poll_n(c->id->send_cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	struct rdma_cm_id *lid, *sid[2];
	struct client cl[2];
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *smr = NULL;
	struct ibv_cq *scq = NULL, *rcq[2];
	struct ibv_srq *srq = NULL;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = DEPTH, .max_sge = 1}};
	struct ibv_srq_attr q;
	struct ibv_device_attr da;
	struct ibv_async_event aev;
	struct ibv_wc wc[8];
	static uint8_t sbuf[DEPTH * SLOT * 2];
	int i, k, n, seen[DEPTH * 2] = {0}, next[2] = {0};

	if (argc != 3) {
		fprintf(stderr, "usage: srqtest ADDR PORT\n");
		return 2;
	}
	MUST("getaddrinfo", rdma_getaddrinfo(argv[1], argv[2], &hints, &res) == 0);
	MUST("event channel", (ech = rdma_create_event_channel()) != NULL);
	MUST("listen id", rdma_create_id(ech, &lid, NULL, RDMA_PS_TCP) == 0);
	MUST("bind", rdma_bind_addr(lid, res->ai_dst_addr) == 0);
	MUST("listen", rdma_listen(lid, 4) == 0);

	/* Clients: client 1 gets its own SRQ through rdma_create_srq. */
	for (i = 0; i < 2; i++) {
		struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 16, .max_recv_wr = 4,
						      .max_send_sge = 1, .max_recv_sge = 1},
					      .qp_type = IBV_QPT_RC};

		memset(&cl[i], 0, sizeof(cl[i]));
		MUST("client id", rdma_create_id(ech, &cl[i].id, NULL, RDMA_PS_TCP) == 0);
		MUST("resolve addr", rdma_resolve_addr(cl[i].id, NULL, res->ai_dst_addr, 2000) == 0);
		wait_cm(RDMA_CM_EVENT_ADDR_RESOLVED, cl[i].id);
		MUST("resolve route", rdma_resolve_route(cl[i].id, 2000) == 0);
		wait_cm(RDMA_CM_EVENT_ROUTE_RESOLVED, cl[i].id);
		if (i == 1) {
			struct ibv_srq_init_attr ca = {.attr = {.max_wr = 4, .max_sge = 1}};

			CHECK("rdma_create_srq", rdma_create_srq(cl[i].id, NULL, &ca) == 0 && cl[i].id->srq);
		}
		MUST("client qp", rdma_create_qp(cl[i].id, NULL, &qa) == 0);
		if (i == 1)
			CHECK("rdma_create_qp uses id->srq", cl[i].id->qp->srq == cl[i].id->srq);
		MUST("client mr", (cl[i].mr = ibv_reg_mr(cl[i].id->pd, cl[i].buf, sizeof(cl[i].buf),
							   IBV_ACCESS_LOCAL_WRITE)) != NULL);
		MUST("connect", rdma_connect(cl[i].id, &(struct rdma_conn_param){.responder_resources = 1,
										.initiator_depth = 1}) == 0);
		sid[i] = wait_cm(RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
		if (i == 0) {
			ctx = sid[0]->verbs;
			MUST("query device", ibv_query_device(ctx, &da) == 0);
			CHECK("max_srq", da.max_srq > 0 && da.max_srq_wr >= DEPTH && da.max_srq_sge >= 1);
			MUST("pd", (pd = ibv_alloc_pd(ctx)) != NULL);
			MUST("server mr", (smr = ibv_reg_mr(pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE)) != NULL);
			MUST("send cq", (scq = ibv_create_cq(ctx, 16, NULL, NULL, 0)) != NULL);
			MUST("ibv_create_srq", (srq = ibv_create_srq(pd, &sa)) != NULL);
			CHECK("srq attrs", srq->pd == pd && sa.attr.max_wr >= DEPTH);
			{
				struct ibv_srq_init_attr_ex sx = {.comp_mask = IBV_SRQ_INIT_ATTR_PD |
									       IBV_SRQ_INIT_ATTR_TYPE,
								  .srq_type = IBV_SRQT_XRC, .pd = pd,
								  .attr = {.max_wr = 4}};
				struct ibv_srq *s2;

				errno = 0;
				CHECK("xrc srq EOPNOTSUPP", ibv_create_srq_ex(ctx, &sx) == NULL && errno == EOPNOTSUPP);
				sx.srq_type = IBV_SRQT_BASIC;
				s2 = ibv_create_srq_ex(ctx, &sx);
				CHECK("ibv_create_srq_ex basic", s2 && ibv_destroy_srq(s2) == 0);
			}
		}
		MUST("recv cq", (rcq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0)) != NULL);
		{
			struct ibv_qp_init_attr qa2 = {.send_cq = scq, .recv_cq = rcq[i], .srq = srq,
						       .cap = {.max_send_wr = 4, .max_send_sge = 1},
						       .qp_type = IBV_QPT_RC};

			MUST("server qp on the srq", rdma_create_qp(sid[i], pd, &qa2) == 0);
			CHECK("qp->srq", sid[i]->qp->srq == srq);
		}
		MUST("accept", rdma_accept(sid[i], &(struct rdma_conn_param){.responder_resources = 1,
									   .initiator_depth = 1}) == 0);
		wait_cm(RDMA_CM_EVENT_ESTABLISHED, cl[i].id);
		wait_cm(RDMA_CM_EVENT_ESTABLISHED, sid[i]);
	}

	{
		struct ibv_recv_wr rw = {.wr_id = 1}, *bad = NULL;

		CHECK("post_recv on a QP with an SRQ: EINVAL",
		      ibv_post_recv(sid[0]->qp, &rw, &bad) == EINVAL && bad == &rw);
	}
	for (k = 0; k < DEPTH; k++) {
		struct ibv_sge sge = {(uintptr_t)(sbuf + k * SLOT), SLOT, smr->lkey};
		struct ibv_recv_wr rw = {.wr_id = (uint64_t)k, .sg_list = &sge, .num_sge = 1}, *bad;

		MUST("ibv_post_srq_recv", ibv_post_srq_recv(srq, &rw, &bad) == 0);
	}
	q.srq_limit = 3;
	CHECK("ibv_modify_srq limit", ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT) == 0);
	q.max_wr = 64;
	CHECK("resize EOPNOTSUPP", ibv_modify_srq(srq, &q, IBV_SRQ_MAX_WR) == EOPNOTSUPP);
	CHECK("ibv_query_srq", ibv_query_srq(srq, &q) == 0 && q.srq_limit == 3 && q.max_wr >= DEPTH);

	/* 3 Sends from each client: 6 of the 8 receives. */
	for (k = 0; k < 3; k++)
		for (i = 0; i < 2; i++)
			MUST("send", send_msg(&cl[i], i, 1));
	for (i = 0; i < 2; i++) {
		n = poll_n(rcq[i], wc, 3);
		MUST("3 receives on each QP's CQ", n == 3);
		for (k = 0; k < n; k++) {
			uint32_t v[3];

			memcpy(v, sbuf + wc[k].wr_id * SLOT, sizeof(v));
			CHECK("receive ok", wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RECV &&
						    wc[k].byte_len == 16 && wc[k].wr_id < DEPTH);
			CHECK("qp_num is the receiving QP's", wc[k].qp_num == sid[i]->qp->qp_num);
			CHECK("each receive once", wc[k].wr_id < DEPTH && !seen[wc[k].wr_id]++);
			CHECK("data from this QP's client, in order",
			      ntohl(v[0]) == 0x5e5e5e5e && ntohl(v[1]) == (uint32_t)i &&
				      ntohl(v[2]) == (uint32_t)next[i]++);
		}
	}
	/* 2 left, below the limit of 3: one event, the SRQ disarmed. */
	MUST("limit event", wait_async(ctx, &aev));
	CHECK("IBV_EVENT_SRQ_LIMIT_REACHED names the SRQ",
	      aev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && aev.element.srq == srq);
	ibv_ack_async_event(&aev);
	CHECK("limit disarmed", ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0);
	CHECK("destroy busy SRQ: EBUSY", ibv_destroy_srq(srq) == EBUSY);

	/* Client 0 sends 3: two take the last receives, the third finds the
	   SRQ empty and ends only QP 0. */
	for (k = 0; k < 3; k++)
		MUST("send", send_msg(&cl[0], 0, k < 2));
	n = poll_n(rcq[0], wc, 2);
	CHECK("last 2 receives to QP 0", n == 2 && wc[0].status == IBV_WC_SUCCESS &&
						 wc[1].status == IBV_WC_SUCCESS);
	MUST("QP 0 async error", wait_async(ctx, &aev));
	CHECK("QP 0 fatal", (aev.event_type == IBV_EVENT_QP_FATAL ||
			     aev.event_type == IBV_EVENT_QP_ACCESS_ERR) &&
				    aev.element.qp == sid[0]->qp);
	ibv_ack_async_event(&aev);
	{
		struct ibv_sge sge = {(uintptr_t)(sbuf + DEPTH * SLOT), SLOT, smr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 100, .sg_list = &sge, .num_sge = 1}, *bad;

		MUST("repost", ibv_post_srq_recv(srq, &rw, &bad) == 0);
	}
	MUST("send", send_msg(&cl[1], 1, 1));
	n = poll_n(rcq[1], wc, 1);
	CHECK("QP 1 still receives", n == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 100 &&
					     wc[0].qp_num == sid[1]->qp->qp_num);

	for (i = 0; i < 2; i++) {
		rdma_disconnect(cl[i].id);
		rdma_destroy_qp(sid[i]);
		ibv_dereg_mr(cl[i].mr);
		rdma_destroy_qp(cl[i].id);
	}
	rdma_destroy_srq(cl[1].id);
	CHECK("rdma_destroy_srq", cl[1].id->srq == NULL);
	CHECK("ibv_destroy_srq", ibv_destroy_srq(srq) == 0);
	for (i = 0; i < 2; i++) {
		rdma_destroy_id(sid[i]);
		rdma_destroy_id(cl[i].id);
		ibv_destroy_cq(rcq[i]);
	}
	ibv_destroy_cq(scq);
	ibv_dereg_mr(smr);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(lid);
	rdma_freeaddrinfo(res);
	rdma_destroy_event_channel(ech);
	if (failures) {
		printf("FAIL srqtest: %d failures\n", failures);
		return 1;
	}
	printf("ok srqtest\n");
	return 0;
}
