/*
 * srq.c: shared receive queues (basic type). The engine keeps the
 * receives (xrnic_create_srq); a QP created with init_attr.srq takes one
 * per inbound message and completes it on its own receive CQ with its
 * qp_num. The limit event comes as IBV_EVENT_SRQ_LIMIT_REACHED on the
 * context's async fd (device.c). IBV_SRQ_MAX_WR (resize) is EOPNOTSUPP,
 * as on Linux siw; XRC and tag-matching SRQs are EOPNOTSUPP.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

_Static_assert(sizeof(struct xrnic_srq_attr) == sizeof(struct ibv_srq_attr),
	       "srq_attr size");
_Static_assert(offsetof(struct xrnic_srq_attr, srq_limit) ==
		       offsetof(struct ibv_srq_attr, srq_limit),
	       "srq_attr.srq_limit");
_Static_assert((int)XRNIC_SRQ_MAX_WR == (int)IBV_SRQ_MAX_WR &&
		       (int)XRNIC_SRQ_LIMIT == (int)IBV_SRQ_LIMIT,
	       "srq attr mask");

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
				      struct ibv_srq_init_attr *a)
{
	struct xpd *p = to_xpd(pd);
	struct xctx *c = p ? to_xctx(pd->context) : NULL;
	struct xrnic_srq_init init;
	struct xsrq *x;
	int err;

	if (!p || !c || !a) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&init, 0, sizeof(init));
	init.max_wr = a->attr.max_wr;
	init.max_sge = a->attr.max_sge;
	init.srq_limit = a->attr.srq_limit;
	init.async_ch = c->async_ch;
	init.cookie = (uintptr_t)x;
	err = xe.create_srq(p->h, &init, &x->h);
	if (err) {
		free(x);
		errno = xrnic_ibv_report("ibv_create_srq", err);
		return NULL;
	}
	if (xrnic_reg_add(&x->srq)) {
		xe.destroy_srq(x->h);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	a->attr.max_wr = init.max_wr;
	a->attr.max_sge = init.max_sge;
	x->magic = XSRQ_MAGIC;
	x->srq.context = pd->context;
	x->srq.srq_context = a->srq_context;
	x->srq.pd = pd;
	pthread_mutex_init(&x->srq.mutex, NULL);
	pthread_cond_init(&x->srq.cond, NULL);
	pthread_mutex_lock(&c->lock);
	x->next = c->srqs;
	c->srqs = x;
	pthread_mutex_unlock(&c->lock);
	return &x->srq;
}

/* verbs.h's ibv_create_srq_ex calls ibv_create_srq itself for a basic SRQ
   with a PD and nothing else; what reaches here asked for more. */
static struct ibv_srq *create_srq_ex(struct ibv_context *context,
				     struct ibv_srq_init_attr_ex *a)
{
	struct ibv_srq_init_attr b;
	struct ibv_srq *srq;

	if (!to_xctx(context) || !a || !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
	    !a->pd || a->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	/* A CQ is for XRC SRQs only; it is ignored on a basic one. */
	if ((a->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD |
					IBV_SRQ_INIT_ATTR_TYPE |
					IBV_SRQ_INIT_ATTR_CQ)) ||
	    ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
	     a->srq_type != IBV_SRQT_BASIC)) {
		errno = EOPNOTSUPP; /* XRC, tag matching */
		return NULL;
	}
	memset(&b, 0, sizeof(b));
	b.srq_context = a->srq_context;
	b.attr = a->attr;
	srq = ibv_create_srq(a->pd, &b);
	if (srq)
		a->attr = b.attr;
	return srq;
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			  int mask)
{
	struct xsrq *x = to_xsrq(srq);
	struct xrnic_srq_attr a;

	if (!x || !attr)
		return EINVAL;
	memcpy(&a, attr, sizeof(a));
	return xe.modify_srq(x->h, &a, mask);
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct xsrq *x = to_xsrq(srq);
	struct xrnic_srq_attr a;
	int err;

	if (!x || !attr)
		return EINVAL;
	err = xe.query_srq(x->h, &a);
	if (!err)
		memcpy(attr, &a, sizeof(a));
	return err;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct xsrq *x = to_xsrq(srq), **pp;
	struct xctx *c;
	int err;

	if (!x)
		return EINVAL;
	err = xe.destroy_srq(x->h);
	if (err)
		return err; /* EBUSY: QPs still use it */
	xrnic_reg_del(&x->srq);
	c = to_xctx(srq->context);
	if (c) {
		pthread_mutex_lock(&c->lock);
		for (pp = &c->srqs; *pp; pp = &(*pp)->next)
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		pthread_mutex_unlock(&c->lock);
	}
	/* As rdma-core: wait until every reported event is acknowledged. */
	pthread_mutex_lock(&srq->mutex);
	while ((int32_t)(x->events_reported - srq->events_completed) > 0)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	x->magic = 0;
	pthread_cond_destroy(&srq->cond);
	pthread_mutex_destroy(&srq->mutex);
	free(x);
	return 0;
}

void xrnic_ibv_set_srq_ops(struct xctx *x)
{
	x->vctx.create_srq_ex = create_srq_ex;
	x->vctx.context.ops.post_srq_recv = xrnic_ibv_post_srq_recv;
}
