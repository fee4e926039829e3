/*
 * fake_engine.c: a stand-in libxrnic.so with the connection manager of
 * xrnic_engine.h done in process memory, for testing librdmacm on its own.
 * Listeners match by port; connect queues CONNECT_REQUEST, accept queues
 * ESTABLISHED to both ends, reject queues REJECTED (status ECONNREFUSED,
 * the private data), disconnect DISCONNECTED to both, once. Destroying an
 * id purges its queued events, as the real engine may.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>

#include "xrnic_engine.h"

#define X __attribute__((visibility("default")))
#define MAXO 4096

struct qev {
	struct qev *next;
	uint64_t owner; /* the id it is for (purged with it) */
	struct xrnic_event ev;
};
struct ch {
	int fd;
	struct qev *head, *tail;
};
struct id {
	uint64_t ch, cookie, peer, qp;
	int port, listening, connected, disc;
	struct sockaddr_storage local, remote;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct ch *chans[MAXO];
static struct id *ids[MAXO];
static uint64_t nch, nid;
static int nlive_ch, nlive_id;

X int fake_engine_live(void) { return nlive_ch + nlive_id; }

static struct ch *CH(uint64_t h) { return h && h < MAXO ? chans[h] : NULL; }
static struct id *ID(uint64_t h) { return h && h < MAXO ? ids[h] : NULL; }

static void lo(struct sockaddr_storage *ss, int port)
{
	struct sockaddr_in *s = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* Queues an event for id h (mu held). */
static void q(uint64_t h, uint32_t code, int status, uint64_t new_id, const void *pd, int len)
{
	struct id *d = ID(h);
	struct ch *c = d ? CH(d->ch) : NULL;
	struct qev *e;
	uint64_t one = 1;

	if (!c)
		return;
	e = calloc(1, sizeof(*e));
	e->owner = h;
	e->ev.kind = XRNIC_EV_CM;
	e->ev.code = code;
	e->ev.status = status;
	e->ev.cookie = d->cookie;
	e->ev.new_id = new_id;
	e->ev.responder_resources = 4;
	e->ev.initiator_depth = 4;
	if (len) {
		memcpy(e->ev.private_data, pd, len);
		e->ev.private_data_len = len;
	}
	e->ev.local = d->local;
	e->ev.peer = d->remote;
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
	if (write(c->fd, &one, 8) != 8)
		abort();
}

X int xrnic_last_error(char *buf, int len)
{
	if (len > 0)
		snprintf(buf, len, "fake engine");
	return 11;
}

X int xrnic_chan_create(int *fd, uint64_t *h)
{
	struct ch *c = calloc(1, sizeof(*c));

	c->fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	pthread_mutex_lock(&mu);
	*h = ++nch;
	chans[*h] = c;
	nlive_ch++;
	pthread_mutex_unlock(&mu);
	*fd = c->fd;
	return 0;
}

X int xrnic_chan_destroy(uint64_t h)
{
	struct ch *c;
	struct qev *e;

	pthread_mutex_lock(&mu);
	c = CH(h);
	if (c) {
		chans[h] = NULL;
		nlive_ch--;
	}
	pthread_mutex_unlock(&mu);
	if (!c)
		return EBADF;
	while ((e = c->head)) {
		c->head = e->next;
		free(e);
	}
	close(c->fd);
	free(c);
	return 0;
}

X int xrnic_chan_get(uint64_t h, struct xrnic_event *ev)
{
	struct ch *c;
	struct qev *e = NULL;

	pthread_mutex_lock(&mu);
	c = CH(h);
	if (c && (e = c->head)) {
		c->head = e->next;
		if (!c->head)
			c->tail = NULL;
	}
	pthread_mutex_unlock(&mu);
	if (!c)
		return EBADF;
	if (!e)
		return EAGAIN;
	*ev = e->ev;
	free(e);
	return 0;
}

X int xrnic_cm_create_id(uint64_t ch, uint64_t cookie, uint64_t *h)
{
	struct id *d;

	pthread_mutex_lock(&mu);
	if (!CH(ch)) {
		pthread_mutex_unlock(&mu);
		return EBADF;
	}
	d = calloc(1, sizeof(*d));
	d->ch = ch;
	d->cookie = cookie;
	*h = ++nid;
	ids[*h] = d;
	nlive_id++;
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_set_cookie(uint64_t h, uint64_t cookie)
{
	int err = 0;

	pthread_mutex_lock(&mu);
	if (ID(h))
		ID(h)->cookie = cookie;
	else
		err = EBADF;
	pthread_mutex_unlock(&mu);
	return err;
}

X int xrnic_cm_destroy_id(uint64_t h)
{
	struct id *d;
	struct ch *c;

	pthread_mutex_lock(&mu);
	d = ID(h);
	if (!d) {
		pthread_mutex_unlock(&mu);
		return EBADF;
	}
	if (d->connected && !d->disc && ID(d->peer)) {
		ID(d->peer)->disc = 1;
		q(d->peer, RDMA_CM_EVENT_DISCONNECTED, 0, 0, NULL, 0);
	}
	if (ID(d->peer))
		ID(d->peer)->peer = 0;
	/* Purge its queued events; their eventfd counts stay (the C side
	   then finds EAGAIN). */
	c = CH(d->ch);
	if (c) {
		struct qev **pp = &c->head, *e;

		c->tail = NULL;
		while ((e = *pp)) {
			if (e->owner == h) {
				*pp = e->next;
				free(e);
			} else {
				c->tail = e;
				pp = &e->next;
			}
		}
	}
	ids[h] = NULL;
	nlive_id--;
	pthread_mutex_unlock(&mu);
	free(d);
	return 0;
}

X int xrnic_cm_migrate_id(uint64_t h, uint64_t ch)
{
	int err = 0;

	pthread_mutex_lock(&mu);
	if (!ID(h) || !CH(ch))
		err = EBADF;
	else
		ID(h)->ch = ch;
	pthread_mutex_unlock(&mu);
	return err;
}

X int xrnic_cm_bind(uint64_t h, const struct sockaddr *a)
{
	int err = 0;

	pthread_mutex_lock(&mu);
	if (!ID(h)) {
		err = EBADF;
	} else {
		ID(h)->port = ntohs(((const struct sockaddr_in *)a)->sin_port);
		lo(&ID(h)->local, ID(h)->port);
	}
	pthread_mutex_unlock(&mu);
	return err;
}

X int xrnic_cm_resolve_addr(uint64_t h, const struct sockaddr *src, const struct sockaddr *dst,
			    struct sockaddr_storage *out)
{
	struct id *d;

	pthread_mutex_lock(&mu);
	d = ID(h);
	if (!d) {
		pthread_mutex_unlock(&mu);
		return EBADF;
	}
	lo(&d->local, 40000 + (int)h);
	memcpy(&d->remote, dst, sizeof(struct sockaddr_in));
	*out = d->local;
	q(h, RDMA_CM_EVENT_ADDR_RESOLVED, 0, 0, NULL, 0);
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_resolve_route(uint64_t h)
{
	pthread_mutex_lock(&mu);
	q(h, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, 0, NULL, 0);
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_listen(uint64_t h, int backlog)
{
	int err = 0;

	pthread_mutex_lock(&mu);
	if (!ID(h) || !ID(h)->port)
		err = EINVAL;
	else
		ID(h)->listening = 1;
	pthread_mutex_unlock(&mu);
	return err;
}

X int xrnic_cm_connect(uint64_t h, uint64_t qp, const struct xrnic_conn_param *p)
{
	struct id *d, *l = NULL, *c;
	uint64_t i, lh = 0, ch;
	int port;

	pthread_mutex_lock(&mu);
	d = ID(h);
	if (!d || !qp) {
		pthread_mutex_unlock(&mu);
		return EINVAL;
	}
	port = ntohs(((struct sockaddr_in *)&d->remote)->sin_port);
	for (i = 1; i <= nid && i < MAXO; i++)
		if (ids[i] && ids[i]->listening && ids[i]->port == port)
			l = ids[i], lh = i;
	if (!l) {
		q(h, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, 0, NULL, 0);
		pthread_mutex_unlock(&mu);
		return 0;
	}
	d->qp = qp;
	c = calloc(1, sizeof(*c));
	c->ch = l->ch;
	c->cookie = l->cookie;
	c->peer = h;
	c->local = l->local;
	c->remote = d->local;
	ch = ++nid;
	ids[ch] = c;
	nlive_id++;
	d->peer = ch;
	q(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, ch, p->private_data, p->private_data_len);
	(void)lh;
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_accept(uint64_t h, uint64_t qp, const struct xrnic_conn_param *p)
{
	struct id *c;

	pthread_mutex_lock(&mu);
	c = ID(h);
	if (!c || !qp || !ID(c->peer)) {
		pthread_mutex_unlock(&mu);
		return EINVAL;
	}
	c->qp = qp;
	c->connected = ID(c->peer)->connected = 1;
	q(h, RDMA_CM_EVENT_ESTABLISHED, 0, 0, NULL, 0);
	q(c->peer, RDMA_CM_EVENT_ESTABLISHED, 0, 0, p->private_data, p->private_data_len);
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_reject(uint64_t h, const void *pd, int len)
{
	struct id *c;

	pthread_mutex_lock(&mu);
	c = ID(h);
	if (!c) {
		pthread_mutex_unlock(&mu);
		return EBADF;
	}
	if (ID(c->peer)) {
		q(c->peer, RDMA_CM_EVENT_REJECTED, ECONNREFUSED, 0, pd, len);
		ID(c->peer)->peer = 0;
		c->peer = 0;
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_disconnect(uint64_t h)
{
	struct id *d;

	pthread_mutex_lock(&mu);
	d = ID(h);
	if (!d || !d->connected) {
		pthread_mutex_unlock(&mu);
		return EINVAL;
	}
	if (!d->disc) {
		d->disc = 1;
		q(h, RDMA_CM_EVENT_DISCONNECTED, 0, 0, NULL, 0);
	}
	if (ID(d->peer) && !ID(d->peer)->disc) {
		ID(d->peer)->disc = 1;
		q(d->peer, RDMA_CM_EVENT_DISCONNECTED, 0, 0, NULL, 0);
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

X int xrnic_cm_addrs(uint64_t h, struct sockaddr_storage *l, struct sockaddr_storage *p)
{
	int err = 0;

	pthread_mutex_lock(&mu);
	if (ID(h)) {
		*l = ID(h)->local;
		*p = ID(h)->remote;
	} else {
		err = EBADF;
	}
	pthread_mutex_unlock(&mu);
	return err;
}

/* The device stands for lo: 127.0.0.1 is its address, 127.0.0.2 not. */
X int xrnic_query_device(struct xrnic_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	strcpy(a->ifname, "lo");
	a->ipv4[0] = 127;
	a->ipv4[3] = 1;
	return 0;
}

X void xrnic_restore_sigmask(void)
{
}
