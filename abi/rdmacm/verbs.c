/*
 * verbs.c: the QP side of librdmacm for xrnic (rdma_create_qp and kin,
 * rdma_init_qp_attr, the device list), the synchronous endpoint API of
 * rdma_verbs.h (rdma_create_ep, rdma_get_request), and SRQs through the
 * CM (rdma_create_srq: basic SRQs; a QP the id then creates uses it).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Remote access as the iWARP CM grants a connected QP (RFC 7306
   atomics included: xrnic has them). */
#define XCM_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

void xcm_drop_cqs(struct xid *x)
{
	if (!x->own_cqs)
		return;
	if (x->pub.send_cq && x->pub.send_cq != x->pub.recv_cq)
		ibv_destroy_cq(x->pub.send_cq);
	if (x->pub.recv_cq)
		ibv_destroy_cq(x->pub.recv_cq);
	if (x->pub.send_cq_channel && x->pub.send_cq_channel != x->pub.recv_cq_channel)
		ibv_destroy_comp_channel(x->pub.send_cq_channel);
	if (x->pub.recv_cq_channel)
		ibv_destroy_comp_channel(x->pub.recv_cq_channel);
	x->pub.send_cq = x->pub.recv_cq = NULL;
	x->pub.send_cq_channel = x->pub.recv_cq_channel = NULL;
	x->own_cqs = 0;
}

/* A CQ (and its completion channel) of depth wr, as librdmacm makes for a
   QP created without one. */
static struct ibv_cq *make_cq(struct xid *x, uint32_t wr, struct ibv_comp_channel **chp)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(x->pub.verbs);
	struct ibv_cq *cq;

	if (!ch)
		return NULL;
	cq = ibv_create_cq(x->pub.verbs, wr ? (int)wr : 1, &x->pub, ch, 0);
	if (!cq) {
		int e = errno;

		ibv_destroy_comp_channel(ch);
		errno = e;
		return NULL;
	}
	*chp = ch;
	return cq;
}

static int create_qp(struct xid *x, struct ibv_qp_init_attr_ex *in)
{
	struct ibv_qp_init_attr_ex a = *in;
	struct ibv_qp_attr init = {
		.qp_state = IBV_QPS_INIT,
		.qp_access_flags = XCM_ACCESS,
		.port_num = 1,
	};
	struct ibv_qp *qp;
	int err;

	if (!x->pub.verbs) {
		xcm_say("rdma_create_qp: the rdma_cm_id has no device yet: resolve its "
			"address (or take it from a CONNECT_REQUEST) first");
		return xfail(EINVAL);
	}
	if (x->pub.qp)
		return xfail(EEXIST);
	if ((a.comp_mask & IBV_QP_INIT_ATTR_PD) && a.pd) {
		if (a.pd->context != x->pub.verbs)
			return xfail(EINVAL);
	} else {
		a.pd = xcm_default_pd(x->pub.verbs);
		if (!a.pd)
			return -1;
		a.comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (!a.srq)
		a.srq = x->pub.srq; /* as librdmacm: the id's SRQ (rdma_create_srq) */
	if (!a.recv_cq) {
		a.recv_cq = make_cq(x, a.cap.max_recv_wr, &x->pub.recv_cq_channel);
		if (!a.recv_cq)
			goto fail;
		x->pub.recv_cq = a.recv_cq;
		x->own_cqs = 1;
	}
	if (!a.send_cq) {
		a.send_cq = make_cq(x, a.cap.max_send_wr, &x->pub.send_cq_channel);
		if (!a.send_cq)
			goto fail;
		x->pub.send_cq = a.send_cq;
		x->own_cqs = 1;
	}
	if (a.comp_mask & ~IBV_QP_INIT_ATTR_PD) {
		qp = ibv_create_qp_ex(x->pub.verbs, &a);
	} else {
		struct ibv_qp_init_attr b = {
			.qp_context = a.qp_context,
			.send_cq = a.send_cq,
			.recv_cq = a.recv_cq,
			.srq = a.srq,
			.cap = a.cap,
			.qp_type = a.qp_type,
			.sq_sig_all = a.sq_sig_all,
		};

		qp = ibv_create_qp(a.pd, &b);
		a.cap = b.cap;
	}
	if (!qp)
		goto fail;
	/* librdmacm leaves a new QP in INIT with the CM's access rights; the
	   engine takes it on from there at connect or accept. */
	err = ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
					      IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	if (err) {
		ibv_destroy_qp(qp);
		errno = err;
		goto fail;
	}
	in->cap = a.cap;
	x->pub.qp = qp;
	x->pub.pd = a.pd;
	return 0;
fail:
	err = errno ? errno : ENOMEM;
	xcm_drop_cqs(x);
	return xfail(err);
}

XAPI int rdma_create_qp_ex(struct rdma_cm_id *p, struct ibv_qp_init_attr_ex *attr)
{
	struct xid *x;
	int ret;

	if (!attr)
		return xfail(EINVAL);
	x = xid_ref(p);
	if (!x)
		return -1;
	ret = create_qp(x, attr);
	if (ret) {
		int e = errno;

		xid_unref(x);
		return xfail(e);
	}
	xid_unref(x);
	return 0;
}

XAPI int rdma_create_qp(struct rdma_cm_id *p, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a;
	int ret;

	if (!attr)
		return xfail(EINVAL);
	memset(&a, 0, sizeof(a));
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	a.pd = pd;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	ret = rdma_create_qp_ex(p, &a);
	if (!ret)
		attr->cap = a.cap;
	return ret;
}

XAPI void rdma_destroy_qp(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);
	int err;

	if (!x)
		return;
	if (x->pub.qp) {
		err = ibv_destroy_qp(x->pub.qp);
		if (err)
			xcm_say("rdma_destroy_qp: ibv_destroy_qp failed: %s", strerror(err));
		else
			x->pub.qp = NULL;
	}
	if (!x->pub.qp)
		xcm_drop_cqs(x);
	xid_unref(x);
}

/* What the iWARP CM gives a QP moved by hand (rping -q): INIT and RTR
   carry the access rights, RTS only the state; the engine does the rest
   when the connection is made. */
XAPI int rdma_init_qp_attr(struct rdma_cm_id *p, struct ibv_qp_attr *attr, int *mask)
{
	struct xid *x;
	int ret = 0;

	if (!attr || !mask)
		return xfail(EINVAL);
	x = xid_ref(p);
	if (!x)
		return -1;
	switch (attr->qp_state) {
	case IBV_QPS_INIT:
		attr->qp_access_flags = XCM_ACCESS;
		attr->pkey_index = 0;
		attr->port_num = 1;
		*mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		break;
	case IBV_QPS_RTR:
		attr->qp_access_flags = XCM_ACCESS;
		*mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
		break;
	case IBV_QPS_RTS:
		*mask = IBV_QP_STATE;
		break;
	default:
		ret = xfail(EINVAL);
	}
	xid_unref(x);
	return ret;
}

/* ---- devices ---------------------------------------------------------- */

XAPI struct ibv_context **rdma_get_devices(int *num)
{
	struct ibv_context *c = xcm_device(), **list;
	int err;

	if (num)
		*num = 0;
	if (!c)
		return NULL;
	list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = c;
	pthread_mutex_lock(&xcm_lock);
	err = xtab_put((uintptr_t)list, XK_DEVLIST, XT_OBJ);
	pthread_mutex_unlock(&xcm_lock);
	if (err) {
		free(list);
		errno = err;
		return NULL;
	}
	if (num)
		*num = 1;
	return list;
}

XAPI void rdma_free_devices(struct ibv_context **list)
{
	int ours;

	pthread_mutex_lock(&xcm_lock);
	ours = list && xtab_get((uintptr_t)list, XT_OBJ) == XK_DEVLIST;
	if (ours)
		xtab_del((uintptr_t)list, XT_OBJ);
	pthread_mutex_unlock(&xcm_lock);
	if (ours)
		free(list);
}

/* The header makes these inline; RDMACM_1.0 also exports them. */
XAPI struct sockaddr *xcm_get_local_addr(struct rdma_cm_id *id) __asm__("rdma_get_local_addr");
XAPI struct sockaddr *xcm_get_peer_addr(struct rdma_cm_id *id) __asm__("rdma_get_peer_addr");

struct sockaddr *xcm_get_local_addr(struct rdma_cm_id *id)
{
	return id ? &id->route.addr.src_addr : NULL;
}

struct sockaddr *xcm_get_peer_addr(struct rdma_cm_id *id)
{
	return id ? &id->route.addr.dst_addr : NULL;
}

/* ---- shared receive queues -------------------------------------------- */

/* As librdmacm: the SRQ goes to id->srq (the id's PD, or the default PD
   of its device, unless attr names one), and rdma_create_qp on the id
   then uses it. Basic SRQs only: XRC is EOPNOTSUPP. */
XAPI int rdma_create_srq_ex(struct rdma_cm_id *p, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq_init_attr_ex a;
	struct ibv_srq *srq;
	struct xid *x;
	int e = 0;

	if (!attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return xfail(EINVAL);
	if (attr->srq_type != IBV_SRQT_BASIC)
		return xfail(EOPNOTSUPP);
	x = xid_ref(p);
	if (!x)
		return -1;
	if (!x->pub.verbs) {
		xcm_say("rdma_create_srq: the rdma_cm_id has no device yet: resolve its "
			"address (or take it from a CONNECT_REQUEST) first");
		e = EINVAL;
	} else if (x->pub.srq) {
		e = EEXIST;
	}
	a = *attr;
	if (!e && (!(a.comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a.pd)) {
		a.pd = x->pub.pd ? x->pub.pd : xcm_default_pd(x->pub.verbs);
		a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
		if (!a.pd)
			e = errno ? errno : ENOMEM;
	}
	if (!e && a.pd->context != x->pub.verbs)
		e = EINVAL;
	if (e) {
		xid_unref(x);
		return xfail(e);
	}
	srq = ibv_create_srq_ex(x->pub.verbs, &a);
	if (!srq) {
		e = errno;
		xid_unref(x);
		return xfail(e);
	}
	attr->attr = a.attr;
	attr->pd = a.pd;
	attr->comp_mask = a.comp_mask;
	if (!x->pub.pd)
		x->pub.pd = a.pd;
	x->pub.srq = srq;
	xid_unref(x);
	return 0;
}

XAPI int rdma_create_srq(struct rdma_cm_id *p, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex a;
	int ret;

	if (!attr)
		return xfail(EINVAL);
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_BASIC;
	a.pd = pd;
	ret = rdma_create_srq_ex(p, &a);
	if (!ret)
		attr->attr = a.attr;
	return ret;
}

XAPI void rdma_destroy_srq(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);
	int err;

	if (!x)
		return;
	if (x->pub.srq) {
		err = ibv_destroy_srq(x->pub.srq);
		if (err)
			xcm_say("rdma_destroy_srq: ibv_destroy_srq failed: %s", strerror(err));
		else
			x->pub.srq = NULL;
	}
	xid_unref(x);
}

/* ---- endpoints (rdma_verbs.h) ------------------------------------------ */

XAPI int rdma_create_ep(struct rdma_cm_id **idp, struct rdma_addrinfo *res, struct ibv_pd *pd,
			struct ibv_qp_init_attr *attr)
{
	struct rdma_cm_id *id;
	struct xid *x;
	int e;

	if (!idp || !res)
		return xfail(EINVAL);
	if (rdma_create_id(NULL, &id, NULL, res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP))
		return -1;
	x = (struct xid *)id;
	/* As librdmacm: the QP's type is the address's (RC for RDMA_PS_TCP). */
	if (attr)
		attr->qp_type = res->ai_qp_type ? (enum ibv_qp_type)res->ai_qp_type : IBV_QPT_RC;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(id, res->ai_src_addr))
			goto fail;
		if (attr) {
			/* Each request's id gets a QP like this one. */
			x->ep_attr = malloc(sizeof(*attr));
			if (!x->ep_attr) {
				errno = ENOMEM;
				goto fail;
			}
			*x->ep_attr = *attr;
			x->ep_pd = pd;
		}
	} else {
		if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000) ||
		    rdma_resolve_route(id, 2000))
			goto fail;
		if (attr && rdma_create_qp(id, pd, attr))
			goto fail;
	}
	*idp = id;
	return 0;
fail:
	e = errno;
	rdma_destroy_id(id);
	return xfail(e);
}

XAPI void rdma_destroy_ep(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);

	if (!x)
		return;
	if (x->pub.qp)
		rdma_destroy_qp(p);
	if (x->pub.srq)
		rdma_destroy_srq(p);
	xid_unref(x);
	rdma_destroy_id(p);
}

XAPI int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **idp)
{
	struct rdma_cm_id *id;
	struct xid *l;
	int e;

	if (!idp)
		return xfail(EINVAL);
	l = xid_ref(listen);
	if (!l)
		return -1;
	if (!l->sync) {
		xid_unref(l);
		xcm_say("rdma_get_request: the listener must be synchronous (made by rdma_create_ep "
			"or rdma_create_id with a NULL channel); use rdma_get_cm_event otherwise");
		return xfail(EINVAL);
	}
	if (xcm_sync_request(l, &id))
		goto fail;
	if (l->ep_attr) {
		struct ibv_qp_init_attr a = *l->ep_attr;

		if (rdma_create_qp(id, l->ep_pd, &a)) {
			e = errno;
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			errno = e;
			goto fail;
		}
	}
	xid_unref(l);
	*idp = id;
	return 0;
fail:
	e = errno;
	xid_unref(l);
	return xfail(e);
}
