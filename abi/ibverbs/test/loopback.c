/*
 * loopback.c: libibverbs.so.1 on the real engine, an RC pair over
 * 127.0.0.1. The connection is made with the engine's CM calls
 * (xrnic_engine.h) directly, so this needs no librdmacm; everything else
 * goes through the ibverbs ABI: Write, Write with Immediate, Send, Read,
 * both atomics, the xrnicdv masked atomics and Immediate Data alone,
 * a 100-WR list, completion events, EBUSY on destroy in use, and the
 * flush after IBV_QPS_ERR. Exits 1 on the first failed check.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/xrnicdv.h>
#include <rdma/rdma_cma.h>

#include "xrnic_engine.h"
#include "xrnic_private.h"

static int checks;
#define CHECK(c)                                                             \
	do {                                                                 \
		checks++;                                                    \
		if (!(c)) {                                                  \
			char t[512] = "";                                    \
			xrnic_last_error(t, sizeof(t));                      \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d; engine: %s)\n", \
				__FILE__, __LINE__, #c, errno, t);           \
			exit(1);                                             \
		}                                                            \
	} while (0)

static int cmfd;
static uint64_t cmch;

static struct xrnic_event cm_wait(uint32_t code)
{
	struct xrnic_event ev;
	uint64_t n;

	CHECK(read(cmfd, &n, 8) == 8);
	CHECK(xrnic_chan_get(cmch, &ev) == 0);
	if (ev.code != code)
		fprintf(stderr, "cm event %u (status %d), want %u\n", ev.code,
			ev.status, code);
	CHECK(ev.kind == XRNIC_EV_CM && ev.code == code);
	return ev;
}

/* Polls until one completion arrives; the bound only stops a hang. */
static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	long i;
	int n = 0;

	for (i = 0; i < 200000000L && n == 0; i++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n == 0 && i > 1000)
			usleep(10);
	}
	CHECK(n == 1);
	return wc;
}

/* iWARP completes a Write at the sender once it is sent, not placed: wait
   for the bytes to land (bounded, to stop a hang). */
static int landed(const char *where, const char *what)
{
	for (long i = 0; i < 1000000; i++) {
		if (!strcmp(where, what))
			return 1;
		usleep(10);
	}
	return 0;
}

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static void make_side(struct ibv_context *c, struct ibv_pd *pd,
		      struct ibv_comp_channel *ch, struct side *s)
{
	struct ibv_qp_init_attr ia;

	s->buf = aligned_alloc(4096, 1 << 16);
	CHECK(s->buf);
	memset(s->buf, 0, 1 << 16);
	s->mr = ibv_reg_mr(pd, s->buf, 1 << 16,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr);
	s->cq = ibv_create_cq(c, 256, s, ch, 0);
	CHECK(s->cq);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = s->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 128;
	ia.cap.max_recv_wr = 128;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 2;
	ia.cap.max_inline_data = 64;
	s->qp = ibv_create_qp(pd, &ia);
	CHECK(s->qp);
	CHECK(ia.cap.max_send_wr >= 128 && ia.cap.max_inline_data >= 64);
}

static void post_recv(struct side *s, uint64_t id, int nsge)
{
	struct ibv_sge sge = {(uintptr_t)s->buf + 0x8000, 4096, s->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = id, .sg_list = &sge, .num_sge = nsge},
			   *bad;

	CHECK(ibv_post_recv(s->qp, &rw, &bad) == 0);
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct side sv, cl;
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct sockaddr_storage local, peer;
	struct xrnic_conn_param p = {.responder_resources = 16,
				     .initiator_depth = 16};
	struct xrnic_event ev;
	uint64_t lid, cid, sid;
	struct ibv_send_wr w[100], *bad;
	struct ibv_sge sge, rsge;
	struct ibv_wc wc;
	struct ibv_cq *evcq;
	struct ibv_qp_attr qa;
	void *evctx;
	uint64_t v;
	int i, n;

	CHECK(l && l[0]);
	c = ibv_open_device(l[0]);
	CHECK(c);
	pd = ibv_alloc_pd(c);
	CHECK(pd);
	ch = ibv_create_comp_channel(c);
	CHECK(ch);
	make_side(c, pd, ch, &sv);
	make_side(c, pd, ch, &cl);
	CHECK(ibv_destroy_cq(sv.cq) == EBUSY);
	CHECK(ibv_dealloc_pd(pd) == EBUSY);

	/* connect through the engine's CM */
	CHECK(xrnic_chan_create(&cmfd, &cmch) == 0);
	CHECK(xrnic_cm_create_id(cmch, 1, &lid) == 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(xrnic_cm_bind(lid, (struct sockaddr *)&a) == 0);
	CHECK(xrnic_cm_listen(lid, 4) == 0);
	CHECK(xrnic_cm_addrs(lid, &local, &peer) == 0);
	a.sin_port = ((struct sockaddr_in *)&local)->sin_port;
	CHECK(a.sin_port != 0);
	CHECK(xrnic_cm_create_id(cmch, 2, &cid) == 0);
	CHECK(xrnic_cm_resolve_addr(cid, NULL, (struct sockaddr *)&a,
				    &local) == 0);
	cm_wait(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(xrnic_cm_resolve_route(cid) == 0);
	cm_wait(RDMA_CM_EVENT_ROUTE_RESOLVED);
	for (i = 0; i < 4; i++)
		post_recv(&sv, 500 + i, 1);
	post_recv(&sv, 504, 0); /* zero SGEs: for Immediate Data alone */
	CHECK(xrnic_cm_connect(cid, xrnic_ibv_qp_handle(cl.qp), &p) == 0);
	ev = cm_wait(RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev.new_id;
	CHECK(sid && xrnic_cm_set_cookie(sid, 3) == 0);
	CHECK(xrnic_cm_accept(sid, xrnic_ibv_qp_handle(sv.qp), &p) == 0);
	ev = cm_wait(RDMA_CM_EVENT_ESTABLISHED);
	ev = cm_wait(RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ibv_query_qp(cl.qp, &qa, IBV_QP_STATE, &(struct ibv_qp_init_attr){0}) == 0 &&
	      qa.qp_state == IBV_QPS_RTS);
	qa.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(cl.qp, &qa, IBV_QP_STATE) == 0);
	qa.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(cl.qp, &qa, IBV_QP_STATE) == EINVAL);

	/* RDMA Write, signalled, inline */
	strcpy(cl.buf, "hello, xrnic");
	sge = (struct ibv_sge){(uintptr_t)cl.buf, 13, cl.mr->lkey};
	memset(w, 0, sizeof(w));
	w[0] = (struct ibv_send_wr){.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				    .opcode = IBV_WR_RDMA_WRITE,
				    .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	w[0].wr.rdma.remote_addr = (uintptr_t)sv.buf;
	w[0].wr.rdma.rkey = sv.mr->rkey;
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == 0);
	wc = poll1(cl.cq);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_RDMA_WRITE);
	CHECK(landed(sv.buf, "hello, xrnic"));

	/* Write with Immediate: the receiver gets imm_data back */
	w[0].wr_id = 2;
	w[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w[0].imm_data = htonl(0x01020304);
	w[0].send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == 0);
	wc = poll1(cl.cq);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS);
	wc = poll1(sv.cq);
	CHECK(wc.wr_id == 500 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) &&
	      wc.imm_data == htonl(0x01020304));

	/* Send; Send with Immediate is EINVAL with bad_wr at it */
	w[0] = (struct ibv_send_wr){.wr_id = 3, .sg_list = &sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND,
				    .send_flags = IBV_SEND_SIGNALED,
				    .next = &w[1]};
	w[1] = (struct ibv_send_wr){.wr_id = 4, .opcode = IBV_WR_SEND_WITH_IMM};
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == EINVAL && bad == &w[1]);
	wc = poll1(cl.cq);
	CHECK(wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_SEND);
	wc = poll1(sv.cq);
	CHECK(wc.wr_id == 501 && wc.opcode == IBV_WC_RECV &&
	      wc.byte_len == 13 && !strcmp(sv.buf + 0x8000, "hello, xrnic"));

	/* Read */
	strcpy(sv.buf + 0x100, "read me");
	rsge = (struct ibv_sge){(uintptr_t)cl.buf + 0x100, 8, cl.mr->lkey};
	w[0] = (struct ibv_send_wr){.wr_id = 5, .sg_list = &rsge, .num_sge = 1,
				    .opcode = IBV_WR_RDMA_READ,
				    .send_flags = IBV_SEND_SIGNALED};
	w[0].wr.rdma.remote_addr = (uintptr_t)sv.buf + 0x100;
	w[0].wr.rdma.rkey = sv.mr->rkey;
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == 0);
	wc = poll1(cl.cq);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_RDMA_READ && !strcmp(cl.buf + 0x100, "read me"));

	/* Atomics: FetchAdd 5 to 10, then CmpSwap 15 -> 99 */
	v = 10;
	memcpy(sv.buf + 0x200, &v, 8);
	rsge = (struct ibv_sge){(uintptr_t)cl.buf + 0x200, 8, cl.mr->lkey};
	w[0] = (struct ibv_send_wr){.wr_id = 6, .sg_list = &rsge, .num_sge = 1,
				    .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				    .send_flags = IBV_SEND_SIGNALED};
	w[0].wr.atomic.remote_addr = (uintptr_t)sv.buf + 0x200;
	w[0].wr.atomic.rkey = sv.mr->rkey;
	w[0].wr.atomic.compare_add = 5;
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == 0);
	wc = poll1(cl.cq);
	memcpy(&v, cl.buf + 0x200, 8);
	CHECK(wc.wr_id == 6 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_FETCH_ADD && v == 10);
	w[0].wr_id = 7;
	w[0].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	w[0].wr.atomic.compare_add = 15;
	w[0].wr.atomic.swap = 99;
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == 0);
	wc = poll1(cl.cq);
	memcpy(&v, cl.buf + 0x200, 8);
	CHECK(wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_COMP_SWAP && v == 15);
	memcpy(&v, sv.buf + 0x200, 8);
	CHECK(v == 99);

	/* xrnicdv: masked FetchAdd with bit 1 not carrying into bit 2 */
	if (xrnicdv_is_supported(l[0])) {
		v = 0x2;
		memcpy(sv.buf + 0x208, &v, 8);
		CHECK(xrnicdv_post_masked_fetch_add(cl.qp, 8, &rsge,
						    (uintptr_t)sv.buf + 0x208,
						    sv.mr->rkey, 0x2, 0x2,
						    IBV_SEND_SIGNALED) == 0);
		wc = poll1(cl.cq);
		CHECK(wc.wr_id == 8 && wc.status == IBV_WC_SUCCESS);
		memcpy(&v, sv.buf + 0x208, 8);
		CHECK(v == 0x0); /* 2+2 with the carry out of bit 1 dropped */
		CHECK(xrnicdv_post_imm(cl.qp, 9, 0xaabbccdd11223344ull,
				       IBV_SEND_SIGNALED) == 0);
		wc = poll1(cl.cq);
		CHECK(wc.wr_id == 9 && wc.status == IBV_WC_SUCCESS);
		wc = poll1(sv.cq);
		CHECK(wc.wr_id == 502 && wc.status == IBV_WC_SUCCESS &&
		      (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      wc.imm_data == htonl(0x11223344));
		printf("xrnicdv: masked FetchAdd and Immediate Data ok\n");
	}

	/* 100 Writes in one list (4 chunks), the last one signalled; then a
	   completion event for it */
	CHECK(ibv_req_notify_cq(cl.cq, 0) == 0);
	for (i = 0; i < 100; i++) {
		w[i] = (struct ibv_send_wr){.wr_id = 1000 + i, .sg_list = &sge,
					    .num_sge = 1,
					    .opcode = IBV_WR_RDMA_WRITE,
					    .next = i < 99 ? &w[i + 1] : NULL};
		w[i].wr.rdma.remote_addr = (uintptr_t)sv.buf + 0x1000 + 16 * i;
		w[i].wr.rdma.rkey = sv.mr->rkey;
	}
	w[99].send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(cl.qp, &w[0], &bad) == 0);
	CHECK(ibv_get_cq_event(ch, &evcq, &evctx) == 0 && evcq == cl.cq &&
	      evctx == &cl);
	ibv_ack_cq_events(evcq, 1);
	wc = poll1(cl.cq);
	CHECK(wc.wr_id == 1099 && wc.status == IBV_WC_SUCCESS);
	CHECK(landed(sv.buf + 0x1000 + 16 * 99, "hello, xrnic"));

	/* ERR flushes the server's posted receives */
	qa.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(sv.qp, &qa, IBV_QP_STATE) == 0);
	for (n = 0; n < 2; n++) {
		wc = poll1(sv.cq);
		CHECK(wc.status == IBV_WC_WR_FLUSH_ERR);
	}
	printf("flush after IBV_QPS_ERR: ok (%s)\n", ibv_wc_status_str(wc.status));

	xrnic_cm_disconnect(cid);
	xrnic_cm_destroy_id(cid);
	xrnic_cm_destroy_id(sid);
	xrnic_cm_destroy_id(lid);
	while (ibv_poll_cq(cl.cq, 1, &wc) > 0 || ibv_poll_cq(sv.cq, 1, &wc) > 0)
		;
	CHECK(ibv_destroy_qp(cl.qp) == 0);
	CHECK(ibv_destroy_qp(sv.qp) == 0);
	CHECK(ibv_destroy_cq(cl.cq) == 0);
	CHECK(ibv_destroy_cq(sv.cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
	CHECK(ibv_dereg_mr(cl.mr) == 0 && ibv_dereg_mr(sv.mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	xrnic_chan_destroy(cmch);
	CHECK(ibv_close_device(c) == 0);
	ibv_free_device_list(l);
	printf("loopback RC pair on the engine: %d checks passed\n", checks);
	return 0;
}
