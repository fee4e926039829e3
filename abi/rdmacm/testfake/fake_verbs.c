/*
 * fake_verbs.c: a stand-in libibverbs.so.1 for testing librdmacm on its
 * own: one device, objects that are plain allocations, and the
 * XRNIC_PRIVATE_1 calls. Not xrnic's libibverbs (abi/ibverbs).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "xrnic_private.h"

#define X __attribute__((visibility("default")))

static struct ibv_device dev = { .name = "xrnic0", .transport_type = IBV_TRANSPORT_IWARP };
static int live; /* objects alive: the test checks it returns to 0 */

X int fake_verbs_live(void) { return live; }

X struct ibv_device **ibv_get_device_list(int *n)
{
	struct ibv_device **l = calloc(2, sizeof(*l));

	l[0] = &dev;
	if (n)
		*n = 1;
	return l;
}
X void ibv_free_device_list(struct ibv_device **l) { free(l); }
X struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	struct ibv_context *c = calloc(1, sizeof(*c));

	c->device = d;
	return c;
}
X int ibv_close_device(struct ibv_context *c) { free(c); return 0; }
X int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 8;
	return 0;
}
X struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	pd->context = c;
	return pd;
}
X int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }
X struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));

	ch->context = c;
	ch->fd = -1;
	live++;
	return ch;
}
X int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) { live--; free(ch); return 0; }
X struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx,
			       struct ibv_comp_channel *ch, int vec)
{
	struct ibv_cq *cq = calloc(1, sizeof(*cq));

	cq->context = c;
	cq->channel = ch;
	cq->cq_context = ctx;
	cq->cqe = cqe;
	live++;
	return cq;
}
X int ibv_destroy_cq(struct ibv_cq *cq) { live--; free(cq); return 0; }
X struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	static uint32_t qpn = 100;
	struct ibv_qp *qp;

	if (!a->send_cq || !a->recv_cq || a->qp_type != IBV_QPT_RC) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	qp->context = pd->context;
	qp->pd = pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->qp_num = qpn++;
	qp->state = IBV_QPS_RESET;
	a->cap.max_inline_data = 64;
	live++;
	return qp;
}
X int ibv_destroy_qp(struct ibv_qp *qp) { live--; free(qp); return 0; }
X struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct ibv_srq *srq = calloc(1, sizeof(*srq));

	srq->context = pd->context;
	srq->pd = pd;
	srq->srq_context = a->srq_context;
	live++;
	return srq;
}
X int ibv_destroy_srq(struct ibv_srq *srq) { live--; free(srq); return 0; }
X int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if (mask & IBV_QP_STATE)
		qp->state = a->qp_state;
	return 0;
}
X uint64_t xrnic_ibv_pd_handle(struct ibv_pd *pd) { return (uintptr_t)pd; }
X uint64_t xrnic_ibv_qp_handle(struct ibv_qp *qp) { return (uintptr_t)qp; }
X int xrnic_ibv_is_ours(struct ibv_context *c) { return 1; }
X int xrnic_ibv_report(const char *what, int err)
{
	fprintf(stderr, "xrnic: %s failed: %s (fake)\n", what, strerror(err));
	return err;
}

/* The engine table, as xrnic's libibverbs.so.1 loads it: the fake engine
   (libxrnic.so of this directory) by dlopen, each function by dlsym; the
   fake has only what librdmacm calls, the rest stay NULL. */
#include <dlfcn.h>
#include <pthread.h>

static struct xrnic_engine eng;
static pthread_once_t eng_once = PTHREAD_ONCE_INIT;
static int eng_err;

static void eng_load(void)
{
	void *h = dlopen("libxrnic.so", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "fake_verbs: %s\n", dlerror());
		eng_err = ENOSYS;
		return;
	}
#define XRNIC_FN(kind, ret, name, params, args) \
	*(void **)&eng.name = dlsym(h, "xrnic_" #name);
#include "xrnic_engine_fns.h"
#undef XRNIC_FN
}

X struct xrnic_engine *xrnic_ibv_engine(void)
{
	pthread_once(&eng_once, eng_load);
	return &eng;
}

X int xrnic_ibv_engine_check(void)
{
	pthread_once(&eng_once, eng_load);
	return eng_err;
}
