/*
 * device.c: the one device (xrnic0), contexts, device/port/GID queries,
 * async events and error reporting.
 */
#include <endian.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct ibv_device xrnic_device = {
	.node_type = IBV_NODE_RNIC,
	.transport_type = IBV_TRANSPORT_IWARP,
	.name = "xrnic0",
	.dev_name = "xrnic0",
	.dev_path = "",
	.ibdev_path = "",
};

/* ---- error reporting ------------------------------------------------- */

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static char reported[8][256]; /* the texts already printed */
static unsigned nreported;

EXPORT int xrnic_ibv_report(const char *what, int err)
{
	char text[256] = "";
	unsigned i;

	/* The engine's absence or a fork: said once already. */
	if (xrnic_ibv_engine_unusable())
		return err;
	xe.last_error(text, sizeof(text));
	if (!text[0])
		snprintf(text, sizeof(text), "%s", strerror(err));
	pthread_mutex_lock(&report_lock);
	for (i = 0; i < 8 && i < nreported; i++)
		if (!strcmp(reported[i], text))
			break;
	if (i == 8 || i == nreported) {
		fprintf(stderr, "xrnic: %s failed: %s\n", what, text);
		snprintf(reported[nreported % 8], sizeof(reported[0]), "%s",
			 text);
		nreported++;
	}
	pthread_mutex_unlock(&report_lock);
	return err;
}

/* The device's attributes; opens the engine for the query if no context
   holds it open. */
int xrnic_ibv_attr(struct xrnic_device_attr *attr)
{
	int err = xe.open();

	if (err)
		return xrnic_ibv_report("xrnic_open", err);
	err = xe.query_device(attr);
	xe.close();
	return err;
}

void xrnic_ibv_gid(const struct xrnic_device_attr *a, union ibv_gid *gid)
{
	/* iWARP: the MAC in the first 6 bytes, the rest 0. */
	memset(gid, 0, sizeof(*gid));
	memcpy(gid->raw, a->mac, 6);
}

static __be64 guid_of(const uint8_t *m)
{
	/* The MAC in the first 6 bytes, as siw makes it. */
	uint8_t g[8] = {m[0], m[1], m[2], m[3], m[4], m[5], 0, 0};
	uint64_t v;

	memcpy(&v, g, 8);
	return v; /* already in network order */
}

/* ---- the device list ------------------------------------------------- */

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **l;
	int err;

	/* The device is there if the engine is: load it now (a child forked
	   after the load still lists it, and fails to open it). */
	err = xrnic_ibv_engine_check();
	if (err && err != EIO) {
		if (num_devices)
			*num_devices = 0;
		errno = err; /* ENOSYS, as rdma-core without kernel support */
		return NULL;
	}
	l = calloc(2, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &xrnic_device;
	if (num_devices)
		*num_devices = 1;
	return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	if (device != &xrnic_device) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return device == &xrnic_device ? 0 : -1;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	static __be64 guid;
	struct xrnic_device_attr a;

	if (device != &xrnic_device) {
		errno = EINVAL;
		return 0;
	}
	if (!__atomic_load_n(&guid, __ATOMIC_ACQUIRE) && xrnic_ibv_attr(&a) == 0)
		__atomic_store_n(&guid, guid_of(a.mac), __ATOMIC_RELEASE);
	return __atomic_load_n(&guid, __ATOMIC_ACQUIRE);
}

/* ---- contexts ---------------------------------------------------------- */

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct xctx *x;
	struct ibv_context *c;
	int err, fd;

	if (device != &xrnic_device) {
		errno = EINVAL;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	err = xe.open();
	if (err) {
		free(x);
		errno = xrnic_ibv_report("opening xrnic0 (xrnic_open)", err);
		return NULL;
	}
	err = xe.query_device(&x->attr);
	if (!err)
		err = xe.chan_create(&fd, &x->async_ch);
	if (!err && xrnic_reg_add(&x->vctx.context)) {
		xe.chan_destroy(x->async_ch);
		err = ENOMEM;
	}
	if (err) {
		errno = xrnic_ibv_report("opening xrnic0", err);
		xe.close();
		free(x);
		return NULL;
	}
	x->magic = XCTX_MAGIC;
	pthread_mutex_init(&x->lock, NULL);
	c = &x->vctx.context;
	c->device = device;
	c->cmd_fd = -1;
	c->async_fd = fd;
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	x->vctx.sz = sizeof(x->vctx);
	xrnic_ibv_set_stub_ops(&c->ops);
	xrnic_ibv_set_ops(x);
	return c;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct xctx *x = to_xctx(context);

	if (!x)
		return EINVAL;
	xrnic_reg_del(context);
	x->magic = 0;
	xe.chan_destroy(x->async_ch);
	xe.close();
	pthread_mutex_destroy(&context->mutex);
	pthread_mutex_destroy(&x->lock);
	free(x);
	return 0;
}

/* ---- queries ------------------------------------------------------------ */

static void fill_device_attr(const struct xrnic_device_attr *a,
			     struct ibv_device_attr *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->fw_ver, sizeof(d->fw_ver), "%s", a->fw_ver);
	d->node_guid = guid_of(a->mac);
	d->sys_image_guid = d->node_guid;
	d->max_mr_size = a->max_mr_size;
	d->page_size_cap = a->page_size_cap;
	d->vendor_id = a->vendor_id;
	d->vendor_part_id = a->vendor_part_id;
	d->hw_ver = a->hw_ver;
	d->max_qp = a->max_qp;
	d->max_qp_wr = a->max_qp_wr;
	/* An SRQ has a receive queue's limits (one per QP at most). */
	d->max_srq = a->max_qp;
	d->max_srq_wr = a->max_qp_wr;
	d->max_srq_sge = a->max_sge;
	d->device_cap_flags = IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_PORT_ACTIVE_EVENT;
	d->max_sge = a->max_sge;
	d->max_sge_rd = a->max_sge;
	d->max_cq = a->max_cq;
	d->max_cqe = a->max_cqe;
	d->max_mr = a->max_mr;
	d->max_pd = a->max_pd;
	d->max_qp_rd_atom = a->max_qp_rd_atom;
	d->max_qp_init_rd_atom = a->max_qp_init_rd_atom;
	d->max_res_rd_atom = a->max_res_rd_atom;
	d->atomic_cap = (enum ibv_atomic_cap)a->atomic_cap;
	d->max_pkeys = 1;
	d->phys_port_cnt = 1;
}

static int ctx_attr(struct ibv_context *context, struct xrnic_device_attr *a)
{
	struct xctx *x = to_xctx(context);
	int err;

	if (!x)
		return EINVAL;
	err = xe.query_device(a);
	if (!err)
		x->attr = *a;
	return err;
}

EXPORT int ibv_query_device(struct ibv_context *context,
			    struct ibv_device_attr *device_attr)
{
	struct xrnic_device_attr a;
	int err;

	if (!device_attr)
		return EINVAL;
	err = ctx_attr(context, &a);
	if (err)
		return err;
	fill_device_attr(&a, device_attr);
	return 0;
}

static int query_device_ex(struct ibv_context *context,
			   const struct ibv_query_device_ex_input *input,
			   struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex e;
	struct xrnic_device_attr a;
	int err;

	if (!attr || attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	if (input && input->comp_mask)
		return EINVAL;
	err = ctx_attr(context, &a);
	if (err)
		return err;
	memset(&e, 0, sizeof(e));
	fill_device_attr(&a, &e.orig_attr);
	e.phys_port_cnt_ex = 1;
	memcpy(attr, &e, attr_size < sizeof(e) ? attr_size : sizeof(e));
	return 0;
}

static void fill_port_attr(const struct xrnic_device_attr *a,
			   struct ibv_port_attr *p)
{
	memset(p, 0, sizeof(*p));
	p->state = (enum ibv_port_state)a->port_state;
	p->max_mtu = IBV_MTU_4096;
	p->active_mtu = (enum ibv_mtu)a->active_mtu;
	p->gid_tbl_len = 1;
	/* iWARP: connections come from the CM, nothing else applies. */
	p->port_cap_flags = IBV_PORT_CM_SUP;
	p->max_msg_sz = a->max_msg_sz;
	p->pkey_tbl_len = 1;
	p->max_vl_num = 1;
	p->active_width = 2;  /* 4X */
	p->active_speed = 32; /* 25 Gb/s a lane: a 100 Gb/s port */
	p->phys_state = a->port_state == IBV_PORT_ACTIVE ? 5 : 3;
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
}

static int query_port(struct ibv_context *context, uint8_t port_num,
		      struct ibv_port_attr *port_attr, size_t len)
{
	struct ibv_port_attr p;
	struct xrnic_device_attr a;
	int err;

	if (!port_attr)
		return EINVAL;
	if (port_num != 1)
		return EINVAL;
	err = ctx_attr(context, &a);
	if (err)
		return err;
	fill_port_attr(&a, &p);
	memcpy(port_attr, &p, len < sizeof(p) ? len : sizeof(p));
	return 0;
}

/* The exported ibv_query_port: verbs.h's inline calls it only for
   contexts without verbs_context.query_port, with the older, shorter
   struct (it ends before port_cap_flags2). */
#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			  struct _compat_ibv_port_attr *port_attr)
{
	return query_port(context, port_num, (struct ibv_port_attr *)port_attr,
			  offsetof(struct ibv_port_attr, port_cap_flags2));
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
			 int index, union ibv_gid *gid)
{
	struct xrnic_device_attr a;

	if (!gid || port_num != 1 || index != 0 || ctx_attr(context, &a)) {
		errno = EINVAL;
		return -1;
	}
	xrnic_ibv_gid(&a, gid);
	return 0;
}

static void fill_gid_entry(const struct xrnic_device_attr *a,
			   struct ibv_gid_entry *e)
{
	memset(e, 0, sizeof(*e));
	xrnic_ibv_gid(a, &e->gid);
	e->gid_index = 0;
	e->port_num = 1;
	e->gid_type = IBV_GID_TYPE_IB; /* neither RoCE v1 nor v2 */
	e->ndev_ifindex = if_nametoindex(a->ifname);
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
			     uint32_t gid_index, struct ibv_gid_entry *entry,
			     uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	struct xrnic_device_attr a;
	int err;

	if (!entry || flags || entry_size < sizeof(e) || port_num != 1)
		return EINVAL;
	if (gid_index != 0)
		return ENODATA;
	err = ctx_attr(context, &a);
	if (err)
		return err;
	fill_gid_entry(&a, &e);
	memcpy(entry, &e, sizeof(e));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
				    struct ibv_gid_entry *entries,
				    size_t max_entries, uint32_t flags,
				    size_t entry_size)
{
	struct xrnic_device_attr a;
	int err;

	if (!entries || flags || entry_size < sizeof(*entries))
		return -EINVAL;
	if (max_entries < 1)
		return -EINVAL;
	err = ctx_attr(context, &a);
	if (err)
		return -err;
	memset(entries, 0, entry_size);
	fill_gid_entry(&a, entries);
	return 1;
}

/* rdma-core's private ibv_query_gid_type: type is an enum
   ibv_gid_type_sysfs, whose IB/RoCE v1 value is 0. */
EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
			      unsigned int index, int *type)
{
	if (!to_xctx(context) || !type || port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*type = 0;
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num,
			  int index, __be16 *pkey)
{
	if (!to_xctx(context) || !pkey || port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
			      __be16 pkey)
{
	if (!to_xctx(context) || port_num != 1)
		return -EINVAL;
	return pkey == htobe16(0xffff) ? 0 : -ENOENT;
}

/* ---- async events ------------------------------------------------------ */

/* The event types whose element is a QP (ibv_get_async_event(3)). */
static int qp_event(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return 1;
	default:
		return 0;
	}
}

/* The event types whose element is an SRQ. */
static int srq_event(enum ibv_event_type t)
{
	return t == IBV_EVENT_SRQ_ERR || t == IBV_EVENT_SRQ_LIMIT_REACHED;
}

/* Finds the live SRQ cookie names and counts the event reported (x->lock
   held). */
static struct ibv_srq *srq_of(struct xctx *x, uint64_t cookie)
{
	struct xsrq *s;

	for (s = x->srqs; s; s = s->next)
		if ((uintptr_t)s == cookie) {
			pthread_mutex_lock(&s->srq.mutex);
			s->events_reported++;
			pthread_mutex_unlock(&s->srq.mutex);
			return &s->srq;
		}
	return NULL;
}

EXPORT int ibv_get_async_event(struct ibv_context *context,
			       struct ibv_async_event *event)
{
	struct xctx *x = to_xctx(context);
	struct xrnic_event ev;
	uint64_t n;
	int err;

	if (!x || !event) {
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
		struct xqp *q, *found = NULL;

		if (read(context->async_fd, &n, sizeof(n)) != sizeof(n))
			return -1; /* errno from read: EAGAIN if non-blocking */
		err = xe.chan_get(x->async_ch, &ev);
		if (err == EAGAIN)
			continue;
		if (err) {
			errno = err;
			return -1;
		}
		memset(event, 0, sizeof(*event));
		event->event_type = (enum ibv_event_type)ev.code;
		if (ev.cookie && srq_event(event->event_type)) {
			pthread_mutex_lock(&x->lock);
			event->element.srq = srq_of(x, ev.cookie);
			pthread_mutex_unlock(&x->lock);
			if (event->element.srq)
				return 0;
			continue; /* destroyed meanwhile */
		}
		if (!ev.cookie || !qp_event(event->event_type)) {
			/* the port's or the device's */
			if (event->event_type != IBV_EVENT_DEVICE_FATAL)
				event->element.port_num = 1;
			return 0;
		}
		/* A QP's: only one still alive, never a stale pointer. */
		pthread_mutex_lock(&x->lock);
		for (q = x->qps; q; q = q->next)
			if ((uintptr_t)q == ev.cookie)
				found = q;
		if (found) {
			pthread_mutex_lock(&found->qp.mutex);
			found->events_reported++;
			pthread_mutex_unlock(&found->qp.mutex);
		}
		pthread_mutex_unlock(&x->lock);
		if (found) {
			event->element.qp = &found->qp;
			return 0;
		}
	}
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	if (qp_event(event->event_type)) {
		struct ibv_qp *qp = event->element.qp;

		if (!to_xqp(qp))
			return;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
	} else if (srq_event(event->event_type)) {
		struct ibv_srq *srq = event->element.srq;

		if (!to_xsrq(srq))
			return;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
	}
}

/* ---- for librdmacm (XRNIC_PRIVATE_1) ------------------------------------ */

EXPORT uint64_t xrnic_ibv_pd_handle(struct ibv_pd *pd)
{
	struct xpd *x = to_xpd(pd);

	return x ? x->h : 0;
}

EXPORT uint64_t xrnic_ibv_qp_handle(struct ibv_qp *qp)
{
	struct xqp *x = to_xqp(qp);

	return x ? x->h : 0;
}

EXPORT int xrnic_ibv_is_ours(struct ibv_context *ctx)
{
	return to_xctx(ctx) != NULL;
}

/* The verbs_context ops this file owns. */
void xrnic_ibv_set_device_ops(struct xctx *x);
void xrnic_ibv_set_device_ops(struct xctx *x)
{
	x->vctx.query_port = query_port;
	x->vctx.query_device_ex = query_device_ex;
	x->vctx.context.ops._compat_query_device = ibv_query_device;
	x->vctx.context.ops._compat_query_port = ibv_query_port;
}
