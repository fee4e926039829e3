/*
 * cma.c: event channels, rdma_cm_ids and their events, and the calls that
 * drive a connection (bind, resolve, listen, connect, accept, reject,
 * disconnect), over the engine's connection manager.
 *
 * Semantics kept from rdma_cm(7): events come in order per id, each
 * rdma_get_cm_event needs an rdma_ack_cm_event, and no event names an id
 * after rdma_destroy_id, which (as librdmacm's) returns only once every
 * event delivered for the id is acked; a CONNECT_REQUEST is its listener's.
 * An id created without a channel is synchronous: each call waits for its
 * event, kept in id->event until the next call.
 */
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

_Static_assert(XRNIC_PRIVATE_DATA_MAX >= 255, "private data");

static uint64_t next_serial;

/* ---- channels --------------------------------------------------------- */

static void chan_free(struct xchan *ch)
{
	int err = xe.chan_destroy(ch->h);

	if (err)
		xrnic_ibv_report("rdma_destroy_event_channel", err);
	free(ch);
}

/* Drops one user (an id, or a waiter: a thread taking events); called
   with xcm_lock held. 1: the caller frees it. */
static int chan_drop(struct xchan *ch, int waiter)
{
	if (waiter)
		ch->waiters--;
	else
		ch->nids--;
	return ch->nids + ch->waiters == 0 && (ch->closed || ch->internal);
}

static void chan_release(struct xchan *ch, int waiter)
{
	int last;

	pthread_mutex_lock(&xcm_lock);
	last = chan_drop(ch, waiter);
	pthread_mutex_unlock(&xcm_lock);
	if (last)
		chan_free(ch);
}

/* A new channel with one user (the caller) if internal. */
static struct xchan *chan_new(int internal)
{
	struct xchan *ch = calloc(1, sizeof(*ch));
	int err, fd = -1;

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	err = xe.chan_create(&fd, &ch->h);
	if (err) {
		free(ch);
		errno = xrnic_ibv_report("rdma_create_event_channel", err);
		return NULL;
	}
	ch->pub.fd = fd;
	ch->internal = internal;
	ch->nids = internal;
	pthread_mutex_lock(&xcm_lock);
	err = xtab_put((uintptr_t)ch, XK_CHAN, XT_OBJ);
	pthread_mutex_unlock(&xcm_lock);
	if (err) {
		chan_free(ch);
		errno = err;
		return NULL;
	}
	return ch;
}

/* The live channel behind c, with one more user; NULL: EINVAL. */
static struct xchan *chan_ref(struct rdma_event_channel *c, int waiter)
{
	struct xchan *ch = NULL;

	pthread_mutex_lock(&xcm_lock);
	if (c && xtab_get((uintptr_t)c, XT_OBJ) == XK_CHAN) {
		ch = (struct xchan *)c;
		if (ch->closed)
			ch = NULL;
		else if (waiter)
			ch->waiters++;
		else
			ch->nids++;
	}
	pthread_mutex_unlock(&xcm_lock);
	if (!ch)
		errno = EINVAL;
	return ch;
}

XAPI struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct xchan *ch;

	if (!xcm_device())
		return NULL;
	ch = chan_new(0);
	return ch ? &ch->pub : NULL;
}

XAPI void rdma_destroy_event_channel(struct rdma_event_channel *c)
{
	struct xchan *ch = NULL;
	int now = 0, users = 0;

	pthread_mutex_lock(&xcm_lock);
	if (c && xtab_get((uintptr_t)c, XT_OBJ) == XK_CHAN) {
		ch = (struct xchan *)c;
		xtab_del((uintptr_t)c, XT_OBJ);
		ch->closed = 1;
		users = ch->nids;
		now = users + ch->waiters == 0;
	}
	pthread_mutex_unlock(&xcm_lock);
	if (!ch) {
		xcm_say("rdma_destroy_event_channel: not a live channel (ignored)");
		return;
	}
	if (now)
		chan_free(ch);
	else if (users)
		xcm_say("rdma_destroy_event_channel: rdma_cm_ids still use the channel; "
			"it closes when the last of them is destroyed (destroy ids first)");
}

/* ---- ids -------------------------------------------------------------- */

static int salen(const struct sockaddr *sa)
{
	if (!sa)
		return xfail(EINVAL);
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	case AF_IB:
		xcm_say("rdma_cm: AF_IB addresses are not supported on iWARP; use AF_INET or AF_INET6");
		return xfail(EAFNOSUPPORT);
	default:
		return xfail(EINVAL);
	}
}

static void set_addr(struct sockaddr_storage *to, const struct sockaddr *sa)
{
	int n = salen(sa);

	if (n > 0) {
		memset(to, 0, sizeof(*to));
		memcpy(to, sa, n);
	}
}

static int wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* Whether sa is an address of the device's interface. Only those bind an
   id to the device (id->verbs), as in the kernel's rdma_cm: a loopback
   address or another interface's leaves verbs NULL, which libfabric's
   verbs provider reads as "listen on the device's own addresses" (else
   it would advertise 127.0.0.1 to its peers). */
static int on_device(const struct sockaddr *sa)
{
	struct xrnic_device_attr a;
	struct ifaddrs *ifs, *i;
	int yes = 0;

	if (!xcm_device() || xe.query_device(&a) || getifaddrs(&ifs))
		return 0;
	for (i = ifs; i && !yes; i = i->ifa_next) {
		const struct sockaddr *ia = i->ifa_addr;

		if (!ia || ia->sa_family != sa->sa_family || strcmp(i->ifa_name, a.ifname))
			continue;
		if (sa->sa_family == AF_INET)
			yes = ((const struct sockaddr_in *)ia)->sin_addr.s_addr ==
			      ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
		else
			yes = !memcmp(&((const struct sockaddr_in6 *)ia)->sin6_addr,
				      &((const struct sockaddr_in6 *)sa)->sin6_addr, sizeof(struct in6_addr));
	}
	freeifaddrs(ifs);
	return yes;
}

static void id_free(struct xid *x)
{
	/* CQs we made outlive the id only if the application left its QP. */
	if (!x->pub.qp)
		xcm_drop_cqs(x);
	free(x->ep_attr);
	free(x);
}

/* The live id behind p, referenced; NULL: EINVAL. */
struct xid *xid_ref(struct rdma_cm_id *p)
{
	struct xid *x = NULL;

	pthread_mutex_lock(&xcm_lock);
	if (p && xtab_get((uintptr_t)p, XT_OBJ) == XK_ID) {
		x = (struct xid *)p;
		if (x->destroyed)
			x = NULL;
		else
			x->refs++;
	}
	pthread_mutex_unlock(&xcm_lock);
	if (!x)
		errno = EINVAL;
	return x;
}

void xid_unref(struct xid *x)
{
	int last;

	pthread_mutex_lock(&xcm_lock);
	last = --x->refs == 0;
	pthread_mutex_unlock(&xcm_lock);
	if (last)
		id_free(x);
}

/* Makes the C id for engine id h (0: create one on ch) and registers it;
   takes over one user of ch. */
static struct xid *id_new(struct xchan *ch, uint64_t h, int sync, void *context,
			  enum rdma_port_space ps, int refs)
{
	struct xid *x = calloc(1, sizeof(*x));
	int err;

	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	x->chan = ch;
	x->sync = sync;
	x->refs = refs;
	x->pub.channel = &ch->pub;
	x->pub.context = context;
	x->pub.ps = ps;
	x->pub.qp_type = IBV_QPT_RC;
	pthread_mutex_lock(&xcm_lock);
	x->serial = ++next_serial;
	err = xtab_put(x->serial, (uintptr_t)x, XT_SERIAL);
	if (!err && (err = xtab_put((uintptr_t)x, XK_ID, XT_OBJ)))
		xtab_del(x->serial, XT_SERIAL);
	pthread_mutex_unlock(&xcm_lock);
	if (err) {
		free(x);
		errno = err;
		return NULL;
	}
	/* Registered first, so an event the engine queues at once is ours. */
	if (h) {
		x->h = h;
		err = xe.cm_set_cookie(h, x->serial);
	} else {
		err = xe.cm_create_id(ch->h, x->serial, &x->h);
	}
	if (err) {
		pthread_mutex_lock(&xcm_lock);
		xtab_del(x->serial, XT_SERIAL);
		xtab_del((uintptr_t)x, XT_OBJ);
		pthread_mutex_unlock(&xcm_lock);
		free(x);
		errno = xrnic_ibv_report("rdma_create_id", err);
		return NULL;
	}
	return x;
}

XAPI int rdma_create_id(struct rdma_event_channel *c, struct rdma_cm_id **idp,
			void *context, enum rdma_port_space ps)
{
	struct xchan *ch;
	struct xid *x;

	if (!idp)
		return xfail(EINVAL);
	switch (ps) {
	case RDMA_PS_TCP:
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
	case RDMA_PS_IB:
		xcm_say("rdma_create_id: port space %#x is not supported: xrnic is iWARP, "
			"which has RDMA_PS_TCP (RC QPs) only", (unsigned)ps);
		return xfail(ENOSYS);
	default:
		return xfail(EINVAL);
	}
	if (!xcm_device())
		return -1;
	ch = c ? chan_ref(c, 0) : chan_new(1);
	if (!ch)
		return -1;
	x = id_new(ch, 0, !c, context, ps, 1);
	if (!x) {
		int e = errno;

		chan_release(ch, 0);
		return xfail(e);
	}
	*idp = &x->pub;
	return 0;
}

/* As librdmacm does, rdma_destroy_id returns once every event delivered
   for the id is acked: a thread still handling its last event (rping's,
   after DISCONNECTED) then loops back before the caller goes on to
   destroy the channel. A caller holding such an event itself would wait
   forever, as with librdmacm: say so instead of hanging silently. */
static void wait_acked(struct xid *x)
{
	struct timespec until;
	int said = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&xcm_lock);
	while (x->unacked > 0) {
		if (said) {
			pthread_cond_wait(&xcm_acked, &xcm_lock);
			continue;
		}
		if (pthread_cond_timedwait(&xcm_acked, &xcm_lock, &until) == ETIMEDOUT) {
			said = 1;
			xcm_say("rdma_destroy_id: waiting for %d unacked event(s) of this id; "
				"call rdma_ack_cm_event on every event before destroying its id",
				x->unacked);
		}
	}
	pthread_mutex_unlock(&xcm_lock);
}

XAPI int rdma_destroy_id(struct rdma_cm_id *p)
{
	struct rdma_cm_event *held;
	struct xid *x = NULL;
	int err = xrnic_ibv_engine_check();

	/* A forked child: the parent's unacked events would never be acked. */
	if (err)
		return xfail(err);
	pthread_mutex_lock(&xcm_lock);
	if (p && xtab_get((uintptr_t)p, XT_OBJ) == XK_ID && !((struct xid *)p)->destroyed) {
		x = (struct xid *)p;
		x->destroyed = 1;
		xtab_del((uintptr_t)x, XT_OBJ);
		xtab_del(x->serial, XT_SERIAL); /* its queued events are dropped */
	}
	pthread_mutex_unlock(&xcm_lock);
	if (!x)
		return xfail(EINVAL);
	err = xe.cm_destroy_id(x->h);
	if (err)
		xrnic_ibv_report("rdma_destroy_id", err);
	held = x->pub.event;
	x->pub.event = NULL;
	if (held)
		rdma_ack_cm_event(held);
	wait_acked(x);
	chan_release(x->chan, 0);
	xid_unref(x);
	return 0;
}

XAPI int rdma_migrate_id(struct rdma_cm_id *p, struct rdma_event_channel *c)
{
	struct xchan *ch, *old;
	struct xid *x = xid_ref(p);
	int err;

	if (!x)
		return -1;
	ch = c ? chan_ref(c, 0) : chan_new(1);
	if (!ch) {
		xid_unref(x);
		return -1;
	}
	err = xe.cm_migrate_id(x->h, ch->h);
	if (err) {
		chan_release(ch, 0);
		xid_unref(x);
		return xfail(xrnic_ibv_report("rdma_migrate_id", err));
	}
	old = x->chan;
	x->chan = ch;
	x->sync = !c;
	x->pub.channel = &ch->pub;
	chan_release(old, 0);
	xid_unref(x);
	return 0;
}

/* ---- events ----------------------------------------------------------- */

static struct xid *child_new(struct xid *l, const struct xrnic_event *raw)
{
	struct xchan *ch;
	struct xid *c;
	int err;

	if (l->sync) {
		/* A synchronous listener's requests are synchronous ids too,
		   each on its own channel. */
		ch = chan_new(1);
		if (!ch)
			return NULL;
		err = xe.cm_migrate_id(raw->new_id, ch->h);
		if (err) {
			xrnic_ibv_report("rdma_get_cm_event", err);
			chan_release(ch, 0);
			return NULL;
		}
	} else {
		/* Even if the application closed it: the listener still uses it. */
		ch = l->chan;
		pthread_mutex_lock(&xcm_lock);
		ch->nids++;
		pthread_mutex_unlock(&xcm_lock);
	}
	c = id_new(ch, raw->new_id, l->sync, l->pub.context, l->pub.ps, 2);
	if (!c) {
		chan_release(ch, 0);
		return NULL;
	}
	c->pub.verbs = xcm_device();
	c->pub.port_num = 1;
	c->pub.qp_type = l->pub.qp_type;
	c->req_rr = raw->responder_resources;
	c->req_id = raw->initiator_depth;
	return c;
}

/* Takes the next event of ch (blocking unless its fd is O_NONBLOCK). */
static int get_event(struct xchan *ch, struct rdma_cm_event **evp)
{
	struct xrnic_event raw;
	int e = xrnic_ibv_engine_check();

	/* A forked child must not take the parent's events from the fd. */
	if (e)
		return xfail(e);
	for (;;) {
		struct xid *x, *l = NULL;
		struct xev *ev;
		uint64_t v;
		ssize_t n = read(ch->pub.fd, &v, sizeof(v));
		int err;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1; /* EAGAIN passes through */
		if (n != sizeof(v))
			return xfail(EIO);
		err = xe.chan_get(ch->h, &raw);
		if (err == EAGAIN)
			continue; /* its event went with a destroyed id */
		if (err)
			return xfail(xrnic_ibv_report("rdma_get_cm_event", err));
		if (raw.kind != XRNIC_EV_CM)
			continue;
		pthread_mutex_lock(&xcm_lock);
		x = (struct xid *)xtab_get(raw.cookie, XT_SERIAL);
		if (x)
			x->refs++;
		pthread_mutex_unlock(&xcm_lock);
		if (!x) {
			/* For an id already destroyed: no event after that. */
			if (raw.code == RDMA_CM_EVENT_CONNECT_REQUEST && raw.new_id) {
				xe.cm_reject(raw.new_id, NULL, 0);
				xe.cm_destroy_id(raw.new_id);
			}
			continue;
		}
		ev = calloc(1, sizeof(*ev));
		if (ev && raw.code == RDMA_CM_EVENT_CONNECT_REQUEST) {
			l = x;
			x = raw.new_id ? child_new(l, &raw) : NULL;
			if (!x) {
				xcm_say("rdma_get_cm_event: a connection request was rejected: "
					"no id could be made for it (%s)", strerror(errno));
				if (raw.new_id) {
					xe.cm_reject(raw.new_id, NULL, 0);
					xe.cm_destroy_id(raw.new_id);
				}
				free(ev);
				xid_unref(l);
				continue;
			}
		}
		if (!ev) {
			if (raw.code == RDMA_CM_EVENT_CONNECT_REQUEST && raw.new_id) {
				xe.cm_reject(raw.new_id, NULL, 0);
				xe.cm_destroy_id(raw.new_id);
			}
			xid_unref(x);
			return xfail(ENOMEM);
		}
		ev->id = x;
		ev->listen = l;
		ev->pub.id = &x->pub;
		ev->pub.listen_id = l ? &l->pub : NULL;
		ev->pub.event = raw.code;
		/* iWARP's statuses are negative errnos (REJECTED: -ECONNREFUSED). */
		ev->pub.status = raw.status > 0 ? -raw.status : raw.status;
		if (raw.private_data_len) {
			size_t len = raw.private_data_len;

			if (len > XRNIC_PRIVATE_DATA_MAX)
				len = XRNIC_PRIVATE_DATA_MAX;
			memcpy(ev->pdata, raw.private_data, len);
			ev->pub.param.conn.private_data = ev->pdata;
			ev->pub.param.conn.private_data_len = len > 255 ? 255 : len;
		}
		ev->pub.param.conn.responder_resources = raw.responder_resources;
		ev->pub.param.conn.initiator_depth = raw.initiator_depth;
		ev->pub.param.conn.flow_control = 1;
		ev->pub.param.conn.retry_count = 7;
		ev->pub.param.conn.rnr_retry_count = 7;
		switch (raw.code) {
		case RDMA_CM_EVENT_DISCONNECTED:
			x->disc_seen = 1;
			break;
		case RDMA_CM_EVENT_ADDR_RESOLVED:
		case RDMA_CM_EVENT_CONNECT_REQUEST:
		case RDMA_CM_EVENT_ESTABLISHED:
			if (raw.local.ss_family)
				set_addr(&x->pub.route.addr.src_storage, (struct sockaddr *)&raw.local);
			if (raw.peer.ss_family)
				set_addr(&x->pub.route.addr.dst_storage, (struct sockaddr *)&raw.peer);
			break;
		}
		pthread_mutex_lock(&xcm_lock);
		err = xtab_put((uintptr_t)ev, XK_EV, XT_OBJ);
		if (!err)
			(l ? l : x)->unacked++;
		pthread_mutex_unlock(&xcm_lock);
		if (err) {
			if (l) {
				xe.cm_reject(x->h, NULL, 0);
				rdma_destroy_id(&x->pub);
				xid_unref(l);
			}
			xid_unref(x);
			free(ev);
			return xfail(err);
		}
		*evp = &ev->pub;
		return 0;
	}
}

XAPI int rdma_get_cm_event(struct rdma_event_channel *c, struct rdma_cm_event **evp)
{
	struct xchan *ch;
	int ret;

	if (!evp)
		return xfail(EINVAL);
	ch = chan_ref(c, 1);
	if (!ch)
		return -1;
	ret = get_event(ch, evp);
	if (ret) {
		int e = errno;

		chan_release(ch, 1);
		return xfail(e);
	}
	chan_release(ch, 1);
	return 0;
}

XAPI int rdma_ack_cm_event(struct rdma_cm_event *e)
{
	struct xev *ev = NULL;

	pthread_mutex_lock(&xcm_lock);
	if (e && xtab_get((uintptr_t)e, XT_OBJ) == XK_EV) {
		ev = (struct xev *)e;
		xtab_del((uintptr_t)e, XT_OBJ);
		(ev->listen ? ev->listen : ev->id)->unacked--;
		pthread_cond_broadcast(&xcm_acked);
	}
	pthread_mutex_unlock(&xcm_lock);
	if (!ev)
		return xfail(EINVAL);
	xid_unref(ev->id);
	if (ev->listen)
		xid_unref(ev->listen);
	free(ev);
	return 0;
}

/* A synchronous id's call waits for its event, kept in id->event. */
static int sync_wait(struct xid *x, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev, *old;
	struct xchan *ch;
	int st;

	if (!x->sync)
		return 0;
	old = x->pub.event;
	x->pub.event = NULL;
	if (old)
		rdma_ack_cm_event(old);
	ch = chan_ref(&x->chan->pub, 1);
	if (!ch)
		return -1;
	st = get_event(ch, &ev);
	chan_release(ch, 1);
	if (st)
		return -1;
	x->pub.event = ev;
	st = ev->status;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return xfail(ECONNREFUSED);
	if (st)
		return xfail(st < 0 ? -st : st);
	if (ev->event != want)
		return xfail(ev->event == RDMA_CM_EVENT_DISCONNECTED ? ECONNRESET : EPROTO);
	return 0;
}

/* Runs the synchronous wait and drops the call's reference. */
static int done(struct xid *x, enum rdma_cm_event_type want)
{
	int ret = sync_wait(x, want), e = errno;

	xid_unref(x);
	errno = e;
	return ret;
}

/* ---- addresses -------------------------------------------------------- */

static void refresh_local(struct xid *x)
{
	struct sockaddr_storage local, peer;

	if (!xe.cm_addrs(x->h, &local, &peer) && local.ss_family)
		set_addr(&x->pub.route.addr.src_storage, (struct sockaddr *)&local);
}

XAPI int rdma_bind_addr(struct rdma_cm_id *p, struct sockaddr *addr)
{
	struct xid *x;
	int err;

	if (salen(addr) < 0)
		return -1;
	x = xid_ref(p);
	if (!x)
		return -1;
	err = xe.cm_bind(x->h, addr);
	if (err) {
		xid_unref(x);
		/* EADDRNOTAVAIL is a probe's answer (libfabric binds every
		   interface address, a tentative IPv6 one too): no line. */
		if (err == EADDRNOTAVAIL)
			return xfail(err);
		return xfail(xrnic_ibv_report("rdma_bind_addr", err));
	}
	set_addr(&x->pub.route.addr.src_storage, addr);
	refresh_local(x);
	if (!wildcard(addr) && on_device(addr)) {
		x->pub.verbs = xcm_device();
		x->pub.port_num = 1;
	}
	xid_unref(x);
	return 0;
}

XAPI int rdma_resolve_addr(struct rdma_cm_id *p, struct sockaddr *src,
			   struct sockaddr *dst, int timeout_ms)
{
	struct sockaddr_storage out;
	struct xid *x;
	int err;

	if (src && src->sa_family == AF_UNSPEC)
		src = NULL;
	if (salen(dst) < 0 || (src && salen(src) < 0))
		return -1;
	x = xid_ref(p);
	if (!x)
		return -1;
	/* Before the engine call: another thread may take ADDR_RESOLVED and
	   read verbs at once. */
	x->pub.verbs = xcm_device();
	x->pub.port_num = 1;
	set_addr(&x->pub.route.addr.dst_storage, dst);
	memset(&out, 0, sizeof(out));
	err = xe.cm_resolve_addr(x->h, src, dst, &out);
	if (err) {
		xid_unref(x);
		return xfail(xrnic_ibv_report("rdma_resolve_addr", err));
	}
	if (out.ss_family)
		set_addr(&x->pub.route.addr.src_storage, (struct sockaddr *)&out);
	return done(x, RDMA_CM_EVENT_ADDR_RESOLVED);
}

XAPI int rdma_resolve_route(struct rdma_cm_id *p, int timeout_ms)
{
	struct xid *x = xid_ref(p);
	int err;

	if (!x)
		return -1;
	err = xe.cm_resolve_route(x->h);
	if (err) {
		xid_unref(x);
		return xfail(xrnic_ibv_report("rdma_resolve_route", err));
	}
	return done(x, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

XAPI int rdma_listen(struct rdma_cm_id *p, int backlog)
{
	struct xid *x = xid_ref(p);
	int err;

	if (!x)
		return -1;
	err = xe.cm_listen(x->h, backlog > 0 ? backlog : 1024);
	if (err) {
		xid_unref(x);
		return xfail(xrnic_ibv_report("rdma_listen", err));
	}
	x->listening = 1;
	refresh_local(x);
	xid_unref(x);
	return 0;
}

/* The port of an AF_INET or AF_INET6 address (network order), else 0. */
static __be16 sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

XAPI __be16 rdma_get_src_port(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);
	__be16 port = 0;

	if (!x)
		return 0;
	port = sa_port(&x->pub.route.addr.src_addr);
	xid_unref(x);
	return port;
}

XAPI __be16 rdma_get_dst_port(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);
	__be16 port = 0;

	if (!x)
		return 0;
	port = sa_port(&x->pub.route.addr.dst_addr);
	xid_unref(x);
	return port;
}

/* ---- connections ------------------------------------------------------ */

static int clamp(int v, int max)
{
	return v > max ? max : v < 0 ? 0 : v;
}

static int conn_param(struct xid *x, const struct rdma_conn_param *p, int accepting,
		      struct xrnic_conn_param *out)
{
	int ird, ord;

	xcm_limits(&ird, &ord);
	memset(out, 0, sizeof(*out));
	if (!p) {
		/* librdmacm's defaults: as much as the device (and, when
		   accepting, the request) allows. */
		out->responder_resources = accepting ? clamp(x->req_id, ird) : ird;
		out->initiator_depth = accepting ? clamp(x->req_rr, ord) : ord;
		return 0;
	}
	if (p->private_data_len && !p->private_data)
		return EINVAL;
	out->private_data = p->private_data_len ? p->private_data : NULL;
	out->private_data_len = p->private_data_len;
	out->responder_resources = clamp(p->responder_resources, ird);
	out->initiator_depth = clamp(p->initiator_depth, ord);
	return 0;
}

static uint64_t qp_handle(struct xid *x, const struct rdma_conn_param *p, const char *what)
{
	uint64_t h = x->pub.qp ? xrnic_ibv_qp_handle(x->pub.qp) : 0;

	if (!h) {
		if (!x->pub.qp)
			xcm_say("%s: the rdma_cm_id has no QP: create it with rdma_create_qp%s", what,
				p && p->qp_num ? " (QPs made with ibv_create_qp and named by "
						 "conn_param->qp_num, rping -q, are not supported)" : "");
		else
			xcm_say("%s: the id's QP is not an xrnic QP", what);
		errno = EINVAL;
	}
	return h;
}

XAPI int rdma_connect(struct rdma_cm_id *p, struct rdma_conn_param *param)
{
	struct xrnic_conn_param cp;
	struct xid *x = xid_ref(p);
	uint64_t qp;
	int err;

	if (!x)
		return -1;
	qp = qp_handle(x, param, "rdma_connect");
	err = qp ? conn_param(x, param, 0, &cp) : EINVAL;
	if (!err && (err = xe.cm_connect(x->h, qp, &cp)))
		xrnic_ibv_report("rdma_connect", err);
	if (err) {
		xid_unref(x);
		return xfail(err);
	}
	return done(x, RDMA_CM_EVENT_ESTABLISHED);
}

XAPI int rdma_accept(struct rdma_cm_id *p, struct rdma_conn_param *param)
{
	struct xrnic_conn_param cp;
	struct xid *x = xid_ref(p);
	uint64_t qp;
	int err;

	if (!x)
		return -1;
	if (x->listening) {
		xid_unref(x);
		return xfail(EINVAL);
	}
	qp = qp_handle(x, param, "rdma_accept");
	err = qp ? conn_param(x, param, 1, &cp) : EINVAL;
	if (!err && (err = xe.cm_accept(x->h, qp, &cp)))
		xrnic_ibv_report("rdma_accept", err);
	if (err) {
		xid_unref(x);
		return xfail(err);
	}
	return done(x, RDMA_CM_EVENT_ESTABLISHED);
}

XAPI int rdma_reject(struct rdma_cm_id *p, const void *private_data, uint8_t len)
{
	struct xid *x;
	int err;

	if (len && !private_data)
		return xfail(EINVAL);
	x = xid_ref(p);
	if (!x)
		return -1;
	err = xe.cm_reject(x->h, len ? private_data : NULL, len);
	xid_unref(x);
	if (err)
		return xfail(xrnic_ibv_report("rdma_reject", err));
	return 0;
}

XAPI int rdma_reject_ece(struct rdma_cm_id *p, const void *private_data, uint8_t len)
{
	return rdma_reject(p, private_data, len);
}

XAPI int rdma_disconnect(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);
	int err;

	if (!x)
		return -1;
	err = xe.cm_disconnect(x->h);
	if (err) {
		xid_unref(x);
		return xfail(xrnic_ibv_report("rdma_disconnect", err));
	}
	if (x->disc_seen) { /* a synchronous id has nothing more to wait for */
		xid_unref(x);
		return 0;
	}
	return done(x, RDMA_CM_EVENT_DISCONNECTED);
}

/* iWARP connections are established by the MPA exchange itself. */
XAPI int rdma_establish(struct rdma_cm_id *p)
{
	struct xid *x = xid_ref(p);

	if (!x)
		return -1;
	xid_unref(x);
	return 0;
}

/* The kernel's rdma_notify is a no-op on iWARP (it serves IB's CM). */
XAPI int rdma_notify(struct rdma_cm_id *p, enum ibv_event_type event)
{
	return rdma_establish(p);
}

XAPI int rdma_set_option(struct rdma_cm_id *p, int level, int optname, void *optval,
			 size_t optlen)
{
	struct xid *x;
	int ret = 0;

	if (!optval)
		return xfail(EINVAL);
	x = xid_ref(p);
	if (!x)
		return -1;
	if (level != RDMA_OPTION_ID) {
		xcm_say("rdma_set_option: level %d (RDMA_OPTION_IB: path records) does not exist on iWARP",
			level);
		ret = xfail(ENOSYS);
	} else {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:	 /* uint8_t */
		case RDMA_OPTION_ID_ACK_TIMEOUT: /* uint8_t: TCP's timers rule on iWARP */
			if (optlen != sizeof(uint8_t))
				ret = xfail(EINVAL);
			break;
		case RDMA_OPTION_ID_REUSEADDR: /* int: the engine reuses addresses */
		case RDMA_OPTION_ID_AFONLY:    /* int */
			if (optlen != sizeof(int))
				ret = xfail(EINVAL);
			break;
		default:
			xcm_say("rdma_set_option: option %d is not supported", optname);
			ret = xfail(ENOSYS);
		}
	}
	xid_unref(x);
	return ret;
}

XAPI int rdma_set_local_ece(struct rdma_cm_id *p, struct ibv_ece *ece)
{
	return xfail(EOPNOTSUPP);
}

XAPI int rdma_get_remote_ece(struct rdma_cm_id *p, struct ibv_ece *ece)
{
	return xfail(EOPNOTSUPP);
}

XAPI int rdma_join_multicast(struct rdma_cm_id *p, struct sockaddr *addr, void *context)
{
	xcm_say("rdma_join_multicast: multicast needs UD QPs, which iWARP does not have");
	return xfail(ENOSYS);
}

XAPI int rdma_join_multicast_ex(struct rdma_cm_id *p, struct rdma_cm_join_mc_attr_ex *attr,
				void *context)
{
	return rdma_join_multicast(p, NULL, context);
}

XAPI int rdma_leave_multicast(struct rdma_cm_id *p, struct sockaddr *addr)
{
	return xfail(ENOSYS);
}

XAPI const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

/* ---- the synchronous API (rdma_verbs.h style) ------------------------- */

int xcm_sync_request(struct xid *l, struct rdma_cm_id **idp)
{
	struct rdma_cm_event *ev;
	struct xchan *ch;
	struct xid *c;
	int st;

	ch = chan_ref(&l->chan->pub, 1);
	if (!ch)
		return -1;
	st = get_event(ch, &ev);
	chan_release(ch, 1);
	if (st)
		return -1;
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		st = ev->status;
		rdma_ack_cm_event(ev);
		return xfail(st < 0 ? -st : EPROTO);
	}
	c = (struct xid *)ev->id;
	c->pub.event = ev; /* kept (and acked) by the new id, as librdmacm does */
	*idp = &c->pub;
	return 0;
}

/* libibverbs.so.1's engine table (it loads libxrnic.so on first use);
   its constructors ran before ours. */
struct xrnic_engine *xcm_engine;

__attribute__((constructor)) static void xrnic_rdmacm_init(void)
{
	xcm_engine = xrnic_ibv_engine();
}
