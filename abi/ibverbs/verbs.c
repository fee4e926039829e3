/*
 * verbs.c: protection domains, memory regions, completion channels and
 * queues, queue pairs (create, query, modify, destroy).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* ---- protection domains ---------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct xpd *x;
	int err;

	if (!to_xctx(context)) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	err = xe.alloc_pd(&x->h);
	if (err) {
		free(x);
		errno = xrnic_ibv_report("ibv_alloc_pd", err);
		return NULL;
	}
	if (xrnic_reg_add(&x->pd)) {
		xe.dealloc_pd(x->h);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	x->magic = XPD_MAGIC;
	x->pd.context = context;
	return &x->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct xpd *x = to_xpd(pd);
	int err;

	if (!x)
		return EINVAL;
	err = xe.dealloc_pd(x->h);
	if (err)
		return err; /* EBUSY: MRs or QPs still use it */
	xrnic_reg_del(&x->pd);
	x->magic = 0;
	free(x);
	return 0;
}

/* ---- memory regions ----------------------------------------------------- */

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			     uint64_t iova, unsigned int access)
{
	struct xpd *p = to_xpd(pd);
	struct xmr *x;
	uint32_t stag;
	int err;

	if (!p || (!addr && length)) {
		errno = EINVAL;
		return NULL;
	}
	/* Optional flags (relaxed ordering) may be ignored, says verbs.h. */
	access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	err = xe.reg_mr(p->h, addr, length, iova, (int)access, &x->h,
			   &stag);
	if (err) {
		free(x);
		errno = xrnic_ibv_report("ibv_reg_mr", err);
		return NULL;
	}
	if (xrnic_reg_add(&x->mr)) {
		xe.dereg_mr(x->h);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	x->magic = XMR_MAGIC;
	x->mr.context = pd->context;
	x->mr.pd = pd;
	x->mr.addr = addr;
	x->mr.length = length;
	x->mr.lkey = stag;
	x->mr.rkey = stag;
	return &x->mr;
}

#undef ibv_reg_mr
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				 int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

#undef ibv_reg_mr_iova
EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
				      size_t length, uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned int)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
				       size_t length, uint64_t iova,
				       unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			void *addr, size_t length, int access)
{
	/* Old MR still valid: IBV_REREG_MR_ERR_INPUT with errno. */
	errno = to_xmr(mr) ? EOPNOTSUPP : EINVAL;
	return IBV_REREG_MR_ERR_INPUT;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct xmr *x = to_xmr(mr);
	int err;

	if (!x)
		return EINVAL;
	err = xe.dereg_mr(x->h);
	if (err)
		return err;
	xrnic_reg_del(&x->mr);
	x->magic = 0;
	free(x);
	return 0;
}

/* ---- completion channels -------------------------------------------------- */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct xchan *x;
	int err;

	if (!to_xctx(context)) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	err = xe.chan_create(&x->ch.fd, &x->h);
	if (err) {
		free(x);
		errno = xrnic_ibv_report("ibv_create_comp_channel", err);
		return NULL;
	}
	if (xrnic_reg_add(&x->ch)) {
		xe.chan_destroy(x->h);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&x->lock, NULL);
	x->magic = XCH_MAGIC;
	x->ch.context = context;
	return &x->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct xchan *x = to_xchan(channel);
	int err;

	if (!x)
		return EINVAL;
	pthread_mutex_lock(&x->lock);
	err = x->cqs || channel->refcnt ? EBUSY : 0;
	pthread_mutex_unlock(&x->lock);
	if (err)
		return err;
	err = xe.chan_destroy(x->h);
	if (err)
		return err;
	xrnic_reg_del(&x->ch);
	x->magic = 0;
	pthread_mutex_destroy(&x->lock);
	free(x);
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel,
			    struct ibv_cq **cq, void **cq_context)
{
	struct xchan *x = to_xchan(channel);
	struct xrnic_event ev;
	struct xcq *c, *found;
	uint64_t n;
	int err;

	if (!x || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	/* A forked child must not take the parent's events from the fd. */
	err = xrnic_ibv_engine_check();
	if (err) {
		errno = err;
		return -1;
	}
	for (;;) {
		if (read(channel->fd, &n, sizeof(n)) != sizeof(n))
			return -1; /* errno from read: EAGAIN if non-blocking */
		err = xe.chan_get(x->h, &ev);
		if (err == EAGAIN)
			continue;
		if (err) {
			errno = err;
			return -1;
		}
		/* Only a CQ still on this channel: never a stale pointer. */
		found = NULL;
		pthread_mutex_lock(&x->lock);
		for (c = x->cqs; c && ev.kind == XRNIC_EV_COMP; c = c->next)
			if ((uintptr_t)c == ev.cookie)
				found = c;
		if (found) {
			pthread_mutex_lock(&found->cq.mutex);
			found->comp_events_reported++;
			pthread_mutex_unlock(&found->cq.mutex);
		}
		pthread_mutex_unlock(&x->lock);
		if (found)
			break;
	}
	*cq = &found->cq;
	*cq_context = found->cq.cq_context;
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!to_xcq(cq))
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- completion queues ---------------------------------------------------- */

/* XRNIC_POLL_YIELD (default 16), XRNIC_POLL_SLEEP (default 2000): empty
   polls in a row before a poller yields the CPU once, and before it
   sleeps until the next completion (0: never). */
static uint32_t poll_env(const char *name, uint32_t def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (!v || !*v)
		return def;
	n = strtoul(v, &end, 10);
	return *end || n > 1u << 30 ? def : (uint32_t)n;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
				    void *cq_context,
				    struct ibv_comp_channel *channel,
				    int comp_vector)
{
	struct xchan *ch = NULL;
	struct xcq *x;
	int err, depth = 0;

	if (!to_xctx(context) || cqe < 1 || comp_vector != 0 ||
	    (channel && !(ch = to_xchan(channel)))) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	err = xe.create_cq(cqe, ch ? ch->h : 0, (uintptr_t)x, &x->h,
			      &depth);
	if (err) {
		free(x);
		errno = xrnic_ibv_report("ibv_create_cq", err);
		return NULL;
	}
	/* Without the counter every poll enters the engine. */
	x->counting = xe.cq_count_pushes(x->h, &x->ctr) == 0;
	x->drive = 1; /* until xrnic_drive says -1 */
	x->kernel = !to_xctx(context)->attr.afxdp;
	x->yield_after = poll_env("XRNIC_POLL_YIELD", 16);
	x->sleep_after = poll_env("XRNIC_POLL_SLEEP", 2000);
	if (xrnic_reg_add(&x->cq)) {
		xe.destroy_cq(x->h);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	x->magic = XCQ_MAGIC;
	x->cq.context = context;
	x->cq.channel = channel;
	x->cq.cq_context = cq_context;
	x->cq.cqe = depth;
	pthread_mutex_init(&x->cq.mutex, NULL);
	pthread_cond_init(&x->cq.cond, NULL);
	if (ch) {
		pthread_mutex_lock(&ch->lock);
		x->next = ch->cqs;
		ch->cqs = x;
		channel->refcnt++;
		pthread_mutex_unlock(&ch->lock);
	}
	return &x->cq;
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct xcq *x = to_xcq(cq);
	int err, actual = 0;

	if (!x || cqe < 1)
		return EINVAL;
	/* EINVAL (too small for what is queued) is the caller's to handle:
	   no report on stderr (XRNIC_DEBUG=1 shows the engine's reason). */
	err = xe.cq_resize(x->h, cqe, &actual);
	if (!err)
		cq->cqe = actual;
	return err;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct xcq *x = to_xcq(cq), **pp;
	struct xchan *ch;
	int err;

	if (!x)
		return EINVAL;
	err = xe.destroy_cq(x->h);
	if (err)
		return err; /* EBUSY: QPs still use it */
	xrnic_reg_del(&x->cq);
	ch = to_xchan(cq->channel);
	if (ch) {
		pthread_mutex_lock(&ch->lock);
		for (pp = &ch->cqs; *pp; pp = &(*pp)->next)
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		cq->channel->refcnt--;
		pthread_mutex_unlock(&ch->lock);
	}
	/* As rdma-core: wait until every reported event is acknowledged. */
	pthread_mutex_lock(&cq->mutex);
	while ((int32_t)(x->comp_events_reported - cq->comp_events_completed) > 0)
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);
	x->magic = 0;
	pthread_cond_destroy(&cq->cond);
	pthread_mutex_destroy(&cq->mutex);
	free(x);
	return 0;
}

/* ---- queue pairs ----------------------------------------------------------- */

static struct ibv_qp *create_qp(struct ibv_context *context, struct ibv_pd *pd,
				struct ibv_qp_init_attr *a)
{
	struct xctx *c = to_xctx(context);
	struct xpd *p = to_xpd(pd);
	struct xcq *scq, *rcq;
	struct xsrq *srq = NULL;
	struct xrnic_qp_init init;
	struct xqp *x;
	uint32_t qpn;
	int err;

	if (!c || !p || !a || pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP; /* iWARP is RC only */
		return NULL;
	}
	if (a->srq && (!(srq = to_xsrq(a->srq)) || a->srq->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	scq = to_xcq(a->send_cq);
	rcq = to_xcq(a->recv_cq);
	if (!scq || !rcq) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&init, 0, sizeof(init));
	init.send_cq = scq->h;
	init.recv_cq = rcq->h;
	init.max_send_wr = a->cap.max_send_wr;
	init.max_recv_wr = a->cap.max_recv_wr;
	init.max_send_sge = a->cap.max_send_sge;
	init.max_recv_sge = a->cap.max_recv_sge;
	init.max_inline_data = a->cap.max_inline_data;
	init.sq_sig_all = a->sq_sig_all;
	init.async_ch = c->async_ch;
	init.cookie = (uintptr_t)x;
	init.srq = srq ? srq->h : 0;
	err = xe.create_qp(p->h, &init, &x->h, &qpn);
	if (err) {
		free(x);
		errno = xrnic_ibv_report("ibv_create_qp", err);
		return NULL;
	}
	a->cap.max_send_wr = init.max_send_wr;
	a->cap.max_recv_wr = init.max_recv_wr;
	a->cap.max_send_sge = init.max_send_sge;
	a->cap.max_recv_sge = init.max_recv_sge;
	a->cap.max_inline_data = init.max_inline_data;
	if (xrnic_reg_add(&x->qp)) {
		xe.destroy_qp(x->h);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	x->cap = a->cap;
	x->sq_sig_all = a->sq_sig_all;
	x->max_rd_atomic = (uint8_t)c->attr.max_qp_init_rd_atom;
	x->max_dest_rd_atomic = (uint8_t)c->attr.max_qp_rd_atom;
	x->magic = XQP_MAGIC;
	x->qp.context = context;
	x->qp.qp_context = a->qp_context;
	x->qp.pd = pd;
	x->qp.send_cq = a->send_cq;
	x->qp.recv_cq = a->recv_cq;
	x->qp.srq = a->srq;
	x->qp.qp_num = qpn;
	x->qp.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&x->qp.mutex, NULL);
	pthread_cond_init(&x->qp.cond, NULL);
	{
		int st = IBV_QPS_RESET;
		xe.qp_state(x->h, &st);
		x->qp.state = (enum ibv_qp_state)st;
	}
	pthread_mutex_lock(&c->lock);
	x->next = c->qps;
	c->qps = x;
	pthread_mutex_unlock(&c->lock);
	return &x->qp;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *qp_init_attr)
{
	return create_qp(pd ? pd->context : NULL, pd, qp_init_attr);
}

static struct ibv_qp *create_qp_ex(struct ibv_context *context,
				   struct ibv_qp_init_attr_ex *a)
{
	struct ibv_qp_init_attr b;
	struct ibv_qp *qp;

	if (!a || !(a->comp_mask & IBV_QP_INIT_ATTR_PD)) {
		errno = EINVAL;
		return NULL;
	}
	/* Basic creation only: no ibv_qp_ex send ops, no create flags. */
	if ((a->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD |
					IBV_QP_INIT_ATTR_CREATE_FLAGS)) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     a->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	memset(&b, 0, sizeof(b));
	b.qp_context = a->qp_context;
	b.send_cq = a->send_cq;
	b.recv_cq = a->recv_cq;
	b.srq = a->srq;
	b.cap = a->cap;
	b.qp_type = a->qp_type;
	b.sq_sig_all = a->sq_sig_all;
	qp = create_qp(context, a->pd, &b);
	if (qp)
		a->cap = b.cap;
	return qp;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	/* No ibv_wr_* API: post with ibv_post_send. */
	errno = to_xqp(qp) ? EOPNOTSUPP : EINVAL;
	return NULL;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct xqp *x = to_xqp(qp), **pp;
	struct xctx *c;
	int err;

	if (!x)
		return EINVAL;
	err = xe.destroy_qp(x->h);
	if (err)
		return err; /* EBUSY: the engine still uses it */
	xrnic_reg_del(&x->qp);
	c = to_xctx(qp->context);
	if (c) {
		pthread_mutex_lock(&c->lock);
		for (pp = &c->qps; *pp; pp = &(*pp)->next)
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_lock(&qp->mutex);
	while ((int32_t)(x->events_reported - qp->events_completed) > 0)
		pthread_cond_wait(&qp->cond, &qp->mutex);
	pthread_mutex_unlock(&qp->mutex);
	x->magic = 0;
	pthread_cond_destroy(&qp->cond);
	pthread_mutex_destroy(&qp->mutex);
	free(x);
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct xqp *x = to_xqp(qp);
	struct xctx *c;
	int st, err;

	if (!x || !attr || !init_attr)
		return EINVAL;
	c = to_xctx(qp->context);
	err = xe.qp_state(x->h, &st);
	if (err)
		return err;
	qp->state = (enum ibv_qp_state)st;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = (enum ibv_qp_state)st;
	attr->cur_qp_state = (enum ibv_qp_state)st;
	attr->path_mtu = c ? (enum ibv_mtu)c->attr.active_mtu : IBV_MTU_1024;
	attr->qp_access_flags = x->access;
	attr->cap = x->cap;
	attr->max_rd_atomic = x->max_rd_atomic;
	attr->max_dest_rd_atomic = x->max_dest_rd_atomic;
	attr->port_num = 1;
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	init_attr->cap = x->cap;
	init_attr->qp_type = IBV_QPT_RC;
	init_attr->sq_sig_all = x->sq_sig_all;
	return 0;
}

/* The engine's states before the MPA exchange: a QP not yet connected. */
static int unconnected(int s)
{
	return s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			 int attr_mask)
{
	const int allowed = IBV_QP_STATE | IBV_QP_CUR_STATE |
			    IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT | IBV_QP_MAX_QP_RD_ATOMIC |
			    IBV_QP_MAX_DEST_RD_ATOMIC;
	struct xqp *x = to_xqp(qp);
	struct xctx *c;
	int s, err;

	if (!x || !attr || (attr_mask & ~allowed))
		return EINVAL;
	c = to_xctx(qp->context);
	err = xe.qp_state(x->h, &s);
	if (err)
		return err;
	if ((attr_mask & IBV_QP_CUR_STATE) && (int)attr->cur_qp_state != s)
		return EINVAL;
	if ((attr_mask & IBV_QP_PORT) && attr->port_num != 1)
		return EINVAL;
	if ((attr_mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
		return EINVAL;
	if (c && (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
	    attr->max_rd_atomic > c->attr.max_qp_init_rd_atom)
		return EINVAL;
	if (c && (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
	    attr->max_dest_rd_atomic > c->attr.max_qp_rd_atom)
		return EINVAL;
	if (attr_mask & IBV_QP_STATE) {
		/* The engine moves the QP itself (the CM connects it);
		   here only ERR acts, and what agrees with it is a no-op. */
		switch (attr->qp_state) {
		case IBV_QPS_ERR:
			if (s != IBV_QPS_ERR) {
				err = xe.qp_to_error(x->h);
				if (err)
					return err;
			}
			break;
		case IBV_QPS_RESET:
		case IBV_QPS_INIT:
		case IBV_QPS_RTR:
			if (!unconnected(s))
				return EINVAL;
			break;
		case IBV_QPS_RTS:
			if (s != IBV_QPS_RTS)
				return EINVAL;
			break;
		default:
			return EINVAL;
		}
	}
	if (attr_mask & IBV_QP_ACCESS_FLAGS)
		x->access = (int)attr->qp_access_flags;
	if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
		x->max_rd_atomic = attr->max_rd_atomic;
	if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		x->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (xe.qp_state(x->h, &s) == 0)
		qp->state = (enum ibv_qp_state)s;
	return 0;
}

void xrnic_ibv_set_device_ops(struct xctx *x);

void xrnic_ibv_set_ops(struct xctx *x)
{
	struct ibv_context_ops *o = &x->vctx.context.ops;

	xrnic_ibv_set_device_ops(x);
	xrnic_ibv_set_srq_ops(x);
	x->vctx.create_qp_ex = create_qp_ex;
	o->post_send = xrnic_ibv_post_send;
	o->post_recv = xrnic_ibv_post_recv;
	o->poll_cq = xrnic_ibv_poll_cq;
	o->req_notify_cq = xrnic_ibv_req_notify_cq;
}
