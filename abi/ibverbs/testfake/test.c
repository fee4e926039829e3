/*
 * test.c: libibverbs.so.1 against the fake engine (fake.c): what reaches
 * the engine from each verb, bad_wr, chunking, events, and clean failures
 * on bad arguments. Exits 1 on the first failed check.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/xrnicdv.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xrnic_engine.h"

extern struct xrnic_send_wr fake_last_send[64];
extern int fake_nsend;
extern int fake_fail_after;

static int checks;
/* Runs f in a forked child; 1 if it exited 0. */
static int in_child(void (*f)(void))
{
	int st;
	pid_t p;

	fflush(NULL);
	p = fork();
	if (p == 0) {
		f();
		_exit(0);
	}
	return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) &&
	       WEXITSTATUS(st) == 0;
}

#define CHECK(c)                                                             \
	do {                                                                 \
		checks++;                                                    \
		if (!(c)) {                                                  \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d)\n", \
				__FILE__, __LINE__, #c, errno);              \
			exit(1);                                             \
		}                                                            \
	} while (0)

/* Forked before the engine was loaded: the child loads its own. */
static void child_fresh(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = l ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;

	CHECK(pd && ibv_dealloc_pd(pd) == 0 && ibv_close_device(c) == 0);
	ibv_free_device_list(l);
}

/* Forked after: every call that would enter the engine fails with EIO at
   once, and event waits do not read the parent's fds. */
static struct ibv_device *f_dev;
static struct ibv_context *f_ctx;
static struct ibv_qp *f_qp;
static struct ibv_cq *f_cq;
static struct ibv_comp_channel *f_ch;

static void child_forked(void)
{
	struct ibv_send_wr w = {.opcode = IBV_WR_SEND}, *bad;
	struct ibv_wc wc;
	struct ibv_cq *evcq;
	void *evctx;
	int n;

	CHECK(ibv_open_device(f_dev) == NULL && errno == EIO);
	CHECK(ibv_alloc_pd(f_ctx) == NULL && errno == EIO);
	CHECK(ibv_create_comp_channel(f_ctx) == NULL && errno == EIO);
	CHECK(ibv_post_send(f_qp, &w, &bad) == EIO && bad == &w);
	for (n = 0; n < 100000 && ibv_poll_cq(f_cq, 1, &wc) == 0; n++)
		;
	CHECK(ibv_poll_cq(f_cq, 1, &wc) == -EIO);
	CHECK(ibv_req_notify_cq(f_cq, 0) == EIO);
	CHECK(ibv_get_cq_event(f_ch, &evcq, &evctx) == -1 && errno == EIO);
	CHECK(ibv_get_device_list(&n) != NULL && n == 1);
}

int main(void)
{
	struct ibv_device **l;
	struct ibv_context *c;
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dx;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct ibv_gid_entry ge[4];
	__be16 pkey;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *evcq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_init_attr_ex iax;
	struct ibv_qp_attr qa;
	struct ibv_send_wr w[40], *bad;
	struct ibv_recv_wr rw[2], *rbad;
	struct ibv_sge sge;
	struct ibv_wc wc[64];
	struct ibv_pd junk_pd;
	void *evctx;
	static char buf[4096];
	int n, i;

	CHECK(in_child(child_fresh));
	l = ibv_get_device_list(&n);
	CHECK(l && n == 1 && l[1] == NULL);
	CHECK(!strcmp(ibv_get_device_name(l[0]), "xrnic0"));
	CHECK(l[0]->node_type == IBV_NODE_RNIC &&
	      l[0]->transport_type == IBV_TRANSPORT_IWARP);
	CHECK(ibv_get_device_guid(l[0]) != 0);
	c = ibv_open_device(l[0]);
	CHECK(c && c->num_comp_vectors == 1 && c->async_fd >= 0);
	CHECK(ibv_query_device(c, &da) == 0 && da.phys_port_cnt == 1 &&
	      da.atomic_cap == IBV_ATOMIC_GLOB && da.max_qp_rd_atom == 16);
	CHECK(ibv_query_device_ex(c, NULL, &dx) == 0 &&
	      dx.orig_attr.max_qp == 1024);
	CHECK(ibv_query_port(c, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE &&
	      pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.gid_tbl_len == 1);
	CHECK(ibv_query_port(c, 2, &pa) == EINVAL);
	CHECK(ibv_query_gid(c, 1, 0, &gid) == 0 && gid.raw[0] == 0x02 &&
	      gid.raw[5] == 0x30 && gid.raw[6] == 0 && gid.raw[15] == 0);
	CHECK(ibv_query_gid(c, 1, 1, &gid) == -1);
	CHECK(ibv_query_gid_ex(c, 1, 0, &ge[0], 0) == 0 &&
	      ge[0].gid.raw[1] == 0x00 && ge[0].port_num == 1);
	CHECK(ibv_query_gid_table(c, ge, 4, 0) == 1);
	CHECK(ibv_query_pkey(c, 1, 0, &pkey) == 0 && pkey == htons(0xffff));
	CHECK(ibv_create_cq_ex(c, &(struct ibv_cq_init_attr_ex){.cqe = 4}) ==
		      NULL && errno == EOPNOTSUPP);
	CHECK(ibv_create_srq(NULL, NULL) == NULL && errno == EINVAL);
	CHECK(da.max_srq == 1024 && da.max_srq_wr == da.max_qp_wr &&
	      da.max_srq_sge == da.max_sge);

	/* bad arguments */
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL);
	memset(&junk_pd, 0x5a, sizeof(junk_pd));
	CHECK(ibv_dealloc_pd(&junk_pd) == EINVAL);
	CHECK(ibv_dealloc_pd(NULL) == EINVAL);
	CHECK(ibv_close_device(NULL) == EINVAL);
	{
		/* bare rdma-core structs we never made: refused unread */
		struct ibv_qp jqp;
		struct ibv_cq jcq;
		struct ibv_mr jmr;
		struct ibv_comp_channel jch;
		struct ibv_context jc;
		struct ibv_device_attr jda;

		memset(&jqp, 0, sizeof(jqp));
		memset(&jcq, 0, sizeof(jcq));
		memset(&jmr, 0, sizeof(jmr));
		memset(&jch, 0, sizeof(jch));
		memset(&jc, 0, sizeof(jc));
		jc.abi_compat = __VERBS_ABI_IS_EXTENDED;
		CHECK(ibv_destroy_qp(&jqp) == EINVAL);
		CHECK(ibv_destroy_cq(&jcq) == EINVAL);
		CHECK(ibv_dereg_mr(&jmr) == EINVAL);
		CHECK(ibv_destroy_comp_channel(&jch) == EINVAL);
		CHECK(ibv_query_device(&jc, &jda) == EINVAL);
		CHECK(ibv_close_device(&jc) == EINVAL);
		CHECK(ibv_alloc_pd(&jc) == NULL && errno == EINVAL);
		CHECK(ibv_modify_qp(&jqp, &(struct ibv_qp_attr){0}, 0) == EINVAL);
		CHECK(ibv_open_device((struct ibv_device *)&jc) == NULL &&
		      errno == EINVAL);
	}

	pd = ibv_alloc_pd(c);
	CHECK(pd);
	CHECK(ibv_alloc_mw(pd, IBV_MW_TYPE_1) == NULL && errno == EOPNOTSUPP);
	mr = ibv_reg_mr(pd, buf, sizeof(buf),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr && mr->lkey == mr->rkey && mr->addr == buf);
	CHECK(ibv_reg_mr_iova(pd, buf, 64, 0, IBV_ACCESS_LOCAL_WRITE) != NULL);
	CHECK(ibv_reg_mr_iova(pd, buf, 64, 12345, IBV_ACCESS_LOCAL_WRITE) ==
		      NULL && errno == EINVAL);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_INPUT && errno == EOPNOTSUPP);

	ch = ibv_create_comp_channel(c);
	CHECK(ch && ch->fd >= 0);
	CHECK(ibv_create_cq(c, 16, NULL, NULL, 1) == NULL && errno == EINVAL);
	cq = ibv_create_cq(c, 16, (void *)0xc0ffee, ch, 0);
	CHECK(cq && cq->cqe >= 16);
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY);
	/* ibv_resize_cq reports the engine's size in cq->cqe. */
	CHECK(ibv_resize_cq(cq, 100) == 0 && cq->cqe == 100);
	CHECK(ibv_resize_cq(cq, 0) == EINVAL && cq->cqe == 100);
	CHECK(ibv_resize_cq(cq, 1 << 20) == EINVAL && cq->cqe == 100);
	CHECK(ibv_resize_cq(cq, 16) == 0 && cq->cqe == 16);

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_UD;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EOPNOTSUPP);
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = NULL;
	CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EINVAL);
	ia.send_cq = cq;
	memset(&iax, 0, sizeof(iax));
	iax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	iax.pd = pd;
	iax.send_cq = cq;
	iax.recv_cq = cq;
	iax.qp_type = IBV_QPT_RC;
	qp = ibv_create_qp_ex(c, &iax);
	CHECK(qp && ibv_destroy_qp(qp) == 0);
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp && qp->qp_num != 0 && qp->state == IBV_QPS_INIT);
	CHECK(ibv_qp_to_qp_ex(qp) == NULL && errno == EOPNOTSUPP);

	/* modify: no-ops that agree with the engine, EINVAL otherwise */
	qa.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL);
	qa.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0);
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_AV) == EINVAL);

	/* post_send: conversion and bad_wr */
	sge = (struct ibv_sge){.addr = (uintptr_t)buf, .length = 8,
			       .lkey = mr->lkey};
	memset(w, 0, sizeof(w));
	w[0].wr_id = 1;
	w[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w[0].imm_data = htonl(0xdeadbeef);
	w[0].wr.rdma.remote_addr = 0x1000;
	w[0].wr.rdma.rkey = 77;
	w[0].sg_list = &sge;
	w[0].num_sge = 1;
	w[0].send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
	w[0].next = &w[1];
	w[1].wr_id = 2;
	w[1].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	w[1].wr.atomic.compare_add = 5;
	w[1].wr.atomic.swap = 6;
	w[1].wr.atomic.rkey = 78;
	w[1].sg_list = &sge;
	w[1].num_sge = 1;
	w[1].next = &w[2];
	w[2].wr_id = 3;
	w[2].opcode = IBV_WR_SEND_WITH_IMM;
	fake_nsend = 0;
	bad = NULL;
	CHECK(ibv_post_send(qp, &w[0], &bad) == EINVAL && bad == &w[2]);
	CHECK(fake_nsend == 2);
	CHECK(fake_last_send[0].opcode == XRNIC_WR_WRITE_WITH_IMM &&
	      fake_last_send[0].imm == 0xdeadbeef &&
	      fake_last_send[0].rkey == 77 &&
	      fake_last_send[0].remote_addr == 0x1000 &&
	      fake_last_send[0].flags ==
		      (XRNIC_SEND_SIGNALED | XRNIC_SEND_FENCE) &&
	      fake_last_send[0].sg_list == (const void *)&sge);
	CHECK(fake_last_send[1].opcode == XRNIC_WR_CMP_SWAP &&
	      fake_last_send[1].compare_add == 5 &&
	      fake_last_send[1].swap == 6 &&
	      fake_last_send[1].compare_mask == ~0ull &&
	      fake_last_send[1].swap_mask == ~0ull &&
	      fake_last_send[1].flags == 0);
	w[2].num_sge = -1;
	w[2].opcode = IBV_WR_SEND;
	CHECK(ibv_post_send(qp, &w[2], &bad) == EINVAL && bad == &w[2]);
	w[2].num_sge = 0;
	w[2].send_flags = 1u << 7; /* IP_CSUM: not ours */
	CHECK(ibv_post_send(qp, &w[2], &bad) == EINVAL && bad == &w[2]);

	/* 40 WRs: two chunks; the engine refuses the 36th */
	for (i = 0; i < 40; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].wr_id = 100 + i;
		w[i].opcode = IBV_WR_SEND;
		w[i].next = i < 39 ? &w[i + 1] : NULL;
	}
	fake_nsend = 0;
	fake_fail_after = 35;
	CHECK(ibv_post_send(qp, &w[0], &bad) == ENOMEM && bad == &w[35]);
	fake_fail_after = -1;
	fake_nsend = 0;
	CHECK(ibv_post_send(qp, &w[0], &bad) == 0 && fake_nsend == 40);
	CHECK(fake_last_send[39 > 63 ? 0 : 39].wr_id == 139);

	/* post_recv: zero-SGE receives are fine */
	memset(rw, 0, sizeof(rw));
	rw[0].wr_id = 1;
	rw[0].next = &rw[1];
	rw[1].wr_id = 2;
	rw[1].num_sge = 1;
	rw[1].sg_list = NULL;
	CHECK(ibv_post_recv(qp, &rw[0], &rbad) == EINVAL && rbad == &rw[1]);
	rw[1].sg_list = &sge;
	CHECK(ibv_post_recv(qp, &rw[0], &rbad) == 0);

	/* poll: the wc array goes through as it is */
	while (ibv_poll_cq(cq, 64, wc) > 0)
		;
	CHECK(ibv_poll_cq(cq, -1, wc) < 0);
	CHECK(ibv_req_notify_cq(cq, 0) == 0);
	w[0].send_flags = IBV_SEND_SIGNALED;
	w[0].next = NULL;
	CHECK(ibv_post_send(qp, &w[0], &bad) == 0);
	CHECK(ibv_poll_cq(cq, 64, wc) == 1 && wc[0].wr_id == 100 &&
	      wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND);
	CHECK(ibv_get_cq_event(ch, &evcq, &evctx) == 0 && evcq == cq &&
	      evctx == (void *)0xc0ffee);
	ibv_ack_cq_events(cq, 1);

	/* direct verbs */
	CHECK(xrnicdv_is_supported(l[0]));
	fake_nsend = 0;
	CHECK(xrnicdv_post_masked_fetch_add(qp, 9, &sge, 0x2000, 79, 1, 0xf0,
					    IBV_SEND_SIGNALED) == 0);
	CHECK(fake_last_send[0].opcode == XRNIC_WR_FETCH_ADD &&
	      fake_last_send[0].add_mask == 0xf0 &&
	      fake_last_send[0].compare_add == 1);
	CHECK(xrnicdv_post_imm(qp, 10, 0x123456789abcdefull, 0) == 0 &&
	      fake_last_send[1].opcode == XRNIC_WR_IMM &&
	      fake_last_send[1].imm == 0x123456789abcdefull);
	CHECK(xrnicdv_post_imm(NULL, 10, 0, 0) == EINVAL);
	CHECK(xrnicdv_post_imm(qp, 10, 0, IBV_SEND_INLINE) == EINVAL);

	/* fork after the load: the child fails, the parent goes on */
	f_dev = l[0];
	f_ctx = c;
	f_qp = qp;
	f_cq = cq;
	f_ch = ch;
	CHECK(in_child(child_forked));
	CHECK(xrnicdv_post_imm(qp, 11, 1, 0) == 0);
	CHECK(ibv_req_notify_cq(cq, 0) == 0);

	qa.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0 &&
	      qp->state == IBV_QPS_ERR);
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &ia) == 0 &&
	      qa.qp_state == IBV_QPS_ERR && ia.qp_type == IBV_QPT_RC);

	CHECK(ibv_destroy_qp(qp) == 0);

	/* SRQs: basic only; init_attr.srq; post through ops */
	{
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 32, .max_sge = 2}};
		struct ibv_srq_init_attr_ex sx;
		struct ibv_srq_attr q;
		struct ibv_srq *srq, jsrq;
		struct ibv_recv_wr rw[2], *rbad;

		srq = ibv_create_srq(pd, &sa);
		CHECK(srq && srq->pd == pd && sa.attr.max_wr == 32);
		memset(&sx, 0, sizeof(sx));
		sx.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
		sx.pd = pd;
		sx.srq_type = IBV_SRQT_XRC;
		sx.attr.max_wr = 4;
		CHECK(ibv_create_srq_ex(c, &sx) == NULL && errno == EOPNOTSUPP);
		sx.srq_type = IBV_SRQT_BASIC;
		sx.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
		sx.cq = cq;
		{
			struct ibv_srq *s2 = ibv_create_srq_ex(c, &sx);

			CHECK(s2 && ibv_destroy_srq(s2) == 0);
		}
		CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 32 &&
		      q.max_sge == 2 && q.srq_limit == 0);
		q.srq_limit = 8;
		CHECK(ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT) == 0);
		CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 8);
		CHECK(ibv_modify_srq(srq, &q, IBV_SRQ_MAX_WR) == EOPNOTSUPP);
		memset(rw, 0, sizeof(rw));
		rw[0].sg_list = &sge;
		rw[0].num_sge = 1;
		rw[0].next = &rw[1];
		rw[1].num_sge = -1;
		rbad = NULL;
		CHECK(ibv_post_srq_recv(srq, &rw[0], &rbad) == EINVAL &&
		      rbad == &rw[1]);
		memset(&jsrq, 0, sizeof(jsrq));
		jsrq.context = c;
		CHECK(ibv_destroy_srq(&jsrq) == EINVAL);
		CHECK(ibv_query_srq(&jsrq, &q) == EINVAL);
		ia.srq = &jsrq;
		CHECK(ibv_create_qp(pd, &ia) == NULL && errno == EINVAL);
		ia.srq = srq;
		qp = ibv_create_qp(pd, &ia);
		CHECK(qp && qp->srq == srq && ia.cap.max_recv_wr == 0);
		CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &ia) == 0 &&
		      ia.srq == srq);
		CHECK(ibv_destroy_qp(qp) == 0);
		CHECK(ibv_destroy_srq(srq) == 0);
		ia.srq = NULL;
	}
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(c) == 0);
	ibv_free_device_list(l);
	printf("libibverbs against the fake engine: %d checks passed\n",
	       checks);
	return 0;
}
