/*
 * cmtest.c: librdmacm's event flow and argument checks against the fake
 * engine and libibverbs of this directory (run.sh builds and runs it).
 * Exits 1 on the first failed check, naming it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

int fake_verbs_live(void);
int fake_engine_live(void);

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "cmtest: %s:%d: check failed: %s (errno %d %s)\n", \
				__FILE__, __LINE__, #c, errno, strerror(errno));   \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static struct sockaddr_in sin4(const char *ip, int port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };

	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
				  struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;

	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != want || (id && ev->id != id)) {
		fprintf(stderr, "cmtest: got %s for %p, want %s for %p\n", rdma_event_str(ev->event),
			(void *)ev->id, rdma_event_str(want), (void *)id);
		exit(1);
	}
	return ev;
}

static void qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	CHECK(rdma_create_qp(id, NULL, &a) == 0);
	CHECK(id->qp && id->pd && id->send_cq && id->recv_cq && id->send_cq_channel);
	CHECK(id->qp->state == IBV_QPS_INIT);
}

/* Client id resolved and with a QP, connecting to port with data. */
static struct rdma_cm_id *dial(struct rdma_event_channel *ch, int port, const char *data, void *ctx)
{
	struct sockaddr_in dst = sin4("127.0.0.1", port);
	struct rdma_conn_param cp = { .private_data = data, .private_data_len = strlen(data),
				      .responder_resources = 200, .initiator_depth = 8 };
	struct rdma_cm_id *c;

	CHECK(rdma_create_id(ch, &c, ctx, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(c->verbs != NULL);
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, c));
	CHECK(rdma_get_dst_port(c) == htons(port));
	CHECK(rdma_get_peer_addr(c)->sa_family == AF_INET);
	CHECK(rdma_resolve_route(c, 2000) == 0);
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, c));
	qp(c);
	CHECK(rdma_connect(c, &cp) == 0);
	return c;
}

struct late_ack {
	struct rdma_cm_event *ev;
	int acked;
};

static void *ack_later(void *arg)
{
	struct late_ack *a = arg;

	usleep(100 * 1000);
	__atomic_store_n(&a->acked, 1, __ATOMIC_SEQ_CST);
	CHECK(rdma_ack_cm_event(a->ev) == 0);
	return NULL;
}

/* Destroys id while another thread still holds its event ev: the destroy
   must return only after that thread acked it. */
static void destroy_after_ack(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct late_ack a = { .ev = ev };
	pthread_t t;

	CHECK(pthread_create(&t, NULL, ack_later, &a) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(__atomic_load_n(&a.acked, __ATOMIC_SEQ_CST) == 1);
	CHECK(pthread_join(t, NULL) == 0);
}

static void test_args(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	long junk[32] = { 0 };

	CHECK(ch && ch->fd >= 0);
	errno = 0;
	CHECK(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL);
	CHECK(rdma_create_id((void *)junk, &id, NULL, RDMA_PS_TCP) == -1 && errno == EINVAL);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == -1 && errno == ENOSYS);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_IB) == -1 && errno == ENOSYS);
	CHECK(rdma_create_id(ch, &id, NULL, 0x1234) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(NULL) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id((void *)junk) == -1 && errno == EINVAL);
	CHECK(rdma_ack_cm_event((void *)junk) == -1 && errno == EINVAL);
	CHECK(rdma_get_cm_event(NULL, &ev) == -1 && errno == EINVAL);
	CHECK(rdma_get_cm_event((void *)junk, &ev) == -1 && errno == EINVAL);
	CHECK(rdma_connect((void *)junk, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_bind_addr(NULL, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_create_qp((void *)junk, NULL, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_get_src_port((void *)junk) == 0);
	CHECK(rdma_join_multicast((void *)junk, NULL, NULL) == -1 && errno == ENOSYS);
	rdma_destroy_qp((void *)junk);
	rdma_destroy_ep(NULL);
	rdma_free_devices((void *)junk);

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(id->channel == ch && id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC);
	{
		struct sockaddr_in6 ib = { .sin6_family = AF_IB };
		struct sockaddr_in any = sin4("0.0.0.0", 7100);
		uint8_t tos = 4;
		int one = 1;
		struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT };
		int mask = 0;

		CHECK(rdma_bind_addr(id, (struct sockaddr *)&ib) == -1 && errno == EAFNOSUPPORT);
		CHECK(rdma_create_qp(id, NULL, &(struct ibv_qp_init_attr){ .qp_type = IBV_QPT_RC }) == -1 &&
		      errno == EINVAL); /* no device yet */
		CHECK(rdma_bind_addr(id, (struct sockaddr *)&any) == 0);
		CHECK(id->verbs == NULL); /* wildcard: no device */
		CHECK(rdma_get_src_port(id) == htons(7100));
		CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0);
		CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) == -1 && errno == EINVAL);
		CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == 0);
		CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &one, sizeof(one)) == -1 &&
		      errno == ENOSYS);
		CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0);
		CHECK(mask == (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT));
		CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
		qa.qp_state = IBV_QPS_SQD;
		CHECK(rdma_init_qp_attr(id, &qa, &mask) == -1 && errno == EINVAL);
		CHECK(rdma_establish(id) == 0);
		CHECK(rdma_accept(id, NULL) == -1 && errno == EINVAL); /* no QP */
	}
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(id) == -1 && errno == EINVAL); /* twice */

	{
		int n = -1;
		struct ibv_context **l = rdma_get_devices(&n);

		CHECK(l && n == 1 && l[0] && !l[1]);
		rdma_free_devices(l);
	}
	{
		/* rdma_create_srq: id->srq, which the id's QP then uses */
		struct sockaddr_in dst = sin4("127.0.0.1", 7101);
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
		struct ibv_srq_init_attr_ex sx = { .comp_mask = IBV_SRQ_INIT_ATTR_TYPE,
						   .srq_type = IBV_SRQT_XRC };

		CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
		CHECK(rdma_create_srq(id, NULL, &sa) == -1 && errno == EINVAL); /* no device yet */
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id));
		CHECK(rdma_create_srq_ex(id, &sx) == -1 && errno == EOPNOTSUPP);
		CHECK(rdma_create_srq(id, NULL, NULL) == -1 && errno == EINVAL);
		CHECK(rdma_create_srq(id, NULL, &sa) == 0 && id->srq && id->pd &&
		      id->srq->pd == id->pd);
		CHECK(rdma_create_srq(id, NULL, &sa) == -1 && errno == EEXIST);
		qp(id);
		CHECK(id->qp->srq == id->srq);
		rdma_destroy_qp(id);
		rdma_destroy_srq(id);
		CHECK(id->srq == NULL);
		rdma_destroy_srq((void *)junk);
		CHECK(rdma_destroy_id(id) == 0);
	}
	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED"));
	CHECK(!strcmp(rdma_event_str(99), "UNKNOWN EVENT"));
	CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1 && errno == ENOSYS);
	CHECK(rconnect(3, NULL, 0) == -1 && errno == ENOSYS);
	{
		int p[2];
		struct pollfd pf;
		fd_set r;
		struct timeval tv = { 0, 0 };

		CHECK(pipe(p) == 0);
		pf.fd = p[0];
		pf.events = POLLIN;
		CHECK(rpoll(&pf, 1, 0) == 0);
		CHECK(write(p[1], "x", 1) == 1);
		CHECK(rpoll(&pf, 1, 1000) == 1 && (pf.revents & POLLIN));
		FD_ZERO(&r);
		FD_SET(p[0], &r);
		CHECK(rselect(p[0] + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(p[0], &r));
		close(p[0]);
		close(p[1]);
	}
	rdma_destroy_event_channel(ch);
	printf("ok args\n");
}

static void test_flow(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in addr = sin4("127.0.0.1", 7000);
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;
	int L, C;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &l, &L, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&addr) == 0);
	CHECK(l->verbs != NULL); /* bound to an address of the device's interface */
	{
		/* Not the device's address (lo has only 127.0.0.1 of its /8):
		   bound, but to no device, as the kernel's rdma_cm does. */
		struct sockaddr_in other = sin4("127.0.0.2", 7000);
		struct rdma_cm_id *o;

		CHECK(rdma_create_id(ch, &o, NULL, RDMA_PS_TCP) == 0);
		CHECK(rdma_bind_addr(o, (struct sockaddr *)&other) == 0);
		CHECK(o->verbs == NULL);
		CHECK(rdma_destroy_id(o) == 0);
	}
	CHECK(rdma_listen(l, 8) == 0);
	c = dial(ch, 7000, "hello", &C);

	ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	s = ev->id;
	CHECK(s != l && s != c && ev->listen_id == l);
	CHECK(s->context == &L && s->verbs == l->verbs && s->channel == ch && s->ps == RDMA_PS_TCP);
	CHECK(ev->param.conn.private_data_len == 5 && !memcmp(ev->param.conn.private_data, "hello", 5));
	CHECK(ev->param.conn.responder_resources == 4 && ev->param.conn.initiator_depth == 4);
	CHECK(rdma_get_peer_addr(s)->sa_family == AF_INET);
	qp(s);
	{
		struct rdma_conn_param cp = { .private_data = "world", .private_data_len = 5 };

		CHECK(rdma_accept(s, &cp) == 0);
	}
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_ack_cm_event(ev) == -1 && errno == EINVAL); /* twice */
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED, s));
	ev = next(ch, RDMA_CM_EVENT_ESTABLISHED, c);
	CHECK(ev->param.conn.private_data_len == 5 && !memcmp(ev->param.conn.private_data, "world", 5));
	CHECK(ev->id->context == &C);
	rdma_ack_cm_event(ev);

	/* rping's order: its event thread still handles DISCONNECTED while
	   the main thread destroys the id and then the channel; the destroy
	   returns only after the ack, as librdmacm's does. */
	CHECK(rdma_disconnect(c) == 0);
	ev = next(ch, RDMA_CM_EVENT_DISCONNECTED, c);
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED, s));
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	CHECK(c->qp == NULL && c->send_cq == NULL);
	destroy_after_ack(c, ev);
	CHECK(rdma_destroy_id(s) == 0);

	/* Reject: REJECTED carries the status and the peer's private data. */
	c = dial(ch, 7000, "again", NULL);
	ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	s = ev->id;
	CHECK(rdma_reject(s, "no", 2) == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(s) == 0);
	ev = next(ch, RDMA_CM_EVENT_REJECTED, c);
	CHECK(ev->status == -ECONNREFUSED);
	CHECK(ev->param.conn.private_data_len == 2 && !memcmp(ev->param.conn.private_data, "no", 2));
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0);

	/* Unreachable: nobody listens there. */
	c = dial(ch, 7999, "x", NULL);
	ev = next(ch, RDMA_CM_EVENT_UNREACHABLE, c);
	CHECK(ev->status == -ETIMEDOUT);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0);

	/* A CONNECT_REQUEST is its listener's: the request's id may go
	   before the ack (a reject's usual order), the listener waits for it. */
	c = dial(ch, 7000, "late", NULL);
	ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(rdma_destroy_id(ev->id) == 0);
	CHECK(ev->listen_id == l && ev->param.conn.private_data_len == 4);
	destroy_after_ack(l, ev);
	rdma_destroy_qp(c);
	CHECK(rdma_destroy_id(c) == 0);

	/* After destroy, no event for the id: queued ones are gone. With the
	   fd non-blocking, an empty channel is EAGAIN. */
	{
		struct sockaddr_in dst = sin4("127.0.0.1", 7001);
		struct pollfd pf = { .fd = ch->fd, .events = POLLIN };

		CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0);
		CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0);
		CHECK(rpoll(&pf, 1, 1000) == 1);
		CHECK(rdma_destroy_id(c) == 0);
		CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
		errno = 0;
		CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);
		CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN);
		CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK) == 0);
	}

	/* Migration: the id's events come on the new channel. */
	{
		struct rdma_event_channel *ch2 = rdma_create_event_channel();
		struct sockaddr_in dst = sin4("127.0.0.1", 7001);

		CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0);
		CHECK(rdma_migrate_id(c, ch2) == 0 && c->channel == ch2);
		CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0);
		rdma_ack_cm_event(next(ch2, RDMA_CM_EVENT_ADDR_RESOLVED, c));
		CHECK(rdma_destroy_id(c) == 0);
		rdma_destroy_event_channel(ch2);
	}
	rdma_destroy_event_channel(ch);
	printf("ok flow\n");
}

static sem_t listening;

static void *sync_server(void *arg)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_cm_id *l, *id;

	CHECK(rdma_getaddrinfo("127.0.0.1", "7002", &hints, &res) == 0);
	CHECK(res->ai_src_addr && !res->ai_dst_addr);
	CHECK(rdma_create_ep(&l, res, NULL, &a) == 0);
	rdma_freeaddrinfo(res);
	CHECK(rdma_listen(l, 0) == 0);
	sem_post(&listening);
	CHECK(rdma_get_request(l, &id) == 0);
	CHECK(id->qp && id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_accept(id, NULL) == 0); /* waits for ESTABLISHED */
	CHECK(id->event->event == RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_disconnect(id) == 0);   /* the peer's DISCONNECTED or ours */
	CHECK(rdma_disconnect(id) == 0);   /* again: nothing left to wait for */
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	return NULL;
}

static void test_sync(void)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_cm_id *id;
	pthread_t t;

	sem_init(&listening, 0, 0);
	CHECK(pthread_create(&t, NULL, sync_server, NULL) == 0);
	sem_wait(&listening);
	CHECK(rdma_getaddrinfo("127.0.0.1", "7002", &hints, &res) == 0);
	CHECK(res->ai_dst_addr && !res->ai_src_addr && res->ai_qp_type == IBV_QPT_RC);
	a.qp_type = 0; /* rdma_create_ep takes the type from res (rdma_client) */
	CHECK(rdma_create_ep(&id, res, NULL, &a) == 0);
	rdma_freeaddrinfo(res);
	CHECK(id->verbs && id->qp && id->channel);
	CHECK(rdma_connect(id, NULL) == 0);
	CHECK(rdma_disconnect(id) == 0);
	pthread_join(t, NULL);
	rdma_destroy_ep(id);

	/* A sync connect nobody answers: -1 with the event's error. */
	CHECK(rdma_getaddrinfo("127.0.0.1", "7998", &hints, &res) == 0);
	CHECK(rdma_create_ep(&id, res, NULL, &a) == 0);
	rdma_freeaddrinfo(res);
	CHECK(rdma_connect(id, NULL) == -1 && errno == ETIMEDOUT);
	rdma_destroy_ep(id);
	printf("ok sync\n");
}

static void test_addrinfo(void)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE }, *res;
	struct sockaddr_in *s;
	int ret;

	CHECK(rdma_getaddrinfo(NULL, "7174", &hints, &res) == 0);
	s = (struct sockaddr_in *)res->ai_src_addr;
	CHECK(s && (s->sin_family == AF_INET || s->sin_family == AF_INET6));
	CHECK(res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC);
	rdma_freeaddrinfo(res);
	hints.ai_family = AF_INET;
	CHECK(rdma_getaddrinfo(NULL, "7174", &hints, &res) == 0);
	s = (struct sockaddr_in *)res->ai_src_addr;
	CHECK(s->sin_family == AF_INET && s->sin_addr.s_addr == 0 && s->sin_port == htons(7174));
	rdma_freeaddrinfo(res);
	hints.ai_flags = RAI_NUMERICHOST;
	ret = rdma_getaddrinfo("not.an.address", "1", &hints, &res);
	CHECK(ret != 0 && gai_strerror(ret));
	hints.ai_family = AF_IB;
	CHECK(rdma_getaddrinfo("127.0.0.1", "1", &hints, &res) == EAI_FAMILY);
	CHECK(rdma_getaddrinfo("127.0.0.1", "1", NULL, NULL) == -1 && errno == EINVAL);
	rdma_freeaddrinfo(NULL);
	printf("ok addrinfo\n");
}

int main(void)
{
	test_args();
	test_flow();
	test_sync();
	test_addrinfo();
	/* Everything made was freed: QPs, CQs, channels, engine ids. */
	CHECK(fake_verbs_live() == 0);
	CHECK(fake_engine_live() == 0);
	printf("PASS\n");
	return 0;
}
