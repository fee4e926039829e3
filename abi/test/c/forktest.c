/*
 * forktest: fork and xrnic's lazily loaded engine (docs/VERBS-ABI.md,
 * "Fork"). Every process here does real RDMA over an RC connection to
 * itself (rdma_cm, ADDR:PORT: a Write of a pattern into another MR range
 * and a Read back, both checked).
 *
 *   forktest before ADDR PORT  forks two children before any RDMA call;
 *                              the parent and each child (ports PORT,
 *                              PORT+1, PORT+2) connect and move data
 *   forktest after ADDR PORT   connects, then forks: the child's use of
 *                              the parent's objects and its own open must
 *                              fail with EIO at once; then the parent
 *                              moves data again on its connection
 *   forktest sigurg            an application SIGURG handler installed
 *                              before the engine loads still runs, also
 *                              for a SIGURG that lands on an engine thread
 *                              (Go takes SIGURG at start, and forwards it
 *                              only from threads that are not its own)
 *
 * Prints "ok NAME" or "FAIL NAME: why" lines. A child that does not end
 * within CHILD_SECS is killed and reported as hung.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHILD_SECS 30
#define LEN 3000

static const char *who = "parent";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define FAIL(name, ...)                                                  \
	do {                                                             \
		printf("FAIL %s: %s: ", name, who);                      \
		printf(__VA_ARGS__);                                     \
		printf(" (errno %s)\n", strerror(errno));                \
		return -1;                                               \
	} while (0)

/* A connection to itself: cid connects, sid accepts; one MR: bytes
   [0, 4096) a Write's source, [4096, 8192) its target, [8192, 12288)
   where the Read brings it back. */
struct conn {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *lid, *cid, *sid;
	struct ibv_pd *pd;
	struct ibv_cq *ccq, *scq;
	struct ibv_mr *mr;
	char buf[12288];
};

static int expect(struct conn *c, enum rdma_cm_event_type t, struct rdma_cm_id **id)
{
	struct pollfd p = {.fd = c->ech->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	if (poll(&p, 1, 10000) <= 0 || rdma_get_cm_event(c->ech, &ev))
		FAIL("connect", "no %s event", rdma_event_str(t));
	if (ev->event != t) {
		printf("FAIL connect: %s: %s (status %d), want %s\n", who,
		       rdma_event_str(ev->event), ev->status, rdma_event_str(t));
		rdma_ack_cm_event(ev);
		return -1;
	}
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	return 0;
}

static int make_qp(struct conn *c, struct rdma_cm_id *id, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16,
			.max_send_sge = 1, .max_recv_sge = 1},
	};

	if (rdma_create_qp(id, c->pd, &a))
		FAIL("connect", "rdma_create_qp");
	return 0;
}

static int connect_self(struct conn *c, const char *addr, int port)
{
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};

	inet_pton(AF_INET, addr, &sa.sin_addr);
	c->ech = rdma_create_event_channel();
	if (!c->ech)
		FAIL("connect", "rdma_create_event_channel");
	if (rdma_create_id(c->ech, &c->lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(c->lid, (struct sockaddr *)&sa) || rdma_listen(c->lid, 4))
		FAIL("connect", "listen on %s:%d", addr, port);
	if (rdma_create_id(c->ech, &c->cid, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(c->cid, NULL, (struct sockaddr *)&sa, 5000) ||
	    expect(c, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
	    rdma_resolve_route(c->cid, 5000) ||
	    expect(c, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL))
		FAIL("connect", "resolve");
	c->pd = ibv_alloc_pd(c->cid->verbs);
	c->ccq = ibv_create_cq(c->cid->verbs, 32, NULL, NULL, 0);
	c->scq = ibv_create_cq(c->cid->verbs, 32, NULL, NULL, 0);
	if (!c->pd || !c->ccq || !c->scq)
		FAIL("connect", "pd/cq");
	c->mr = ibv_reg_mr(c->pd, c->buf, sizeof(c->buf),
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ);
	if (!c->mr)
		FAIL("connect", "ibv_reg_mr");
	if (make_qp(c, c->cid, c->ccq) || rdma_connect(c->cid, &cp))
		FAIL("connect", "rdma_connect");
	if (expect(c, RDMA_CM_EVENT_CONNECT_REQUEST, &c->sid) ||
	    make_qp(c, c->sid, c->scq) || rdma_accept(c->sid, &cp))
		FAIL("connect", "accept");
	/* ESTABLISHED twice, for either id first. */
	if (expect(c, RDMA_CM_EVENT_ESTABLISHED, NULL) ||
	    expect(c, RDMA_CM_EVENT_ESTABLISHED, NULL))
		return -1;
	return 0;
}

static int one(struct conn *c, enum ibv_wr_opcode op, char *local, char *remote)
{
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = LEN, .lkey = c->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_wc wc;
	double end = now_s() + 10;
	int n = 0;

	w.wr.rdma.remote_addr = (uintptr_t)remote;
	w.wr.rdma.rkey = c->mr->rkey;
	if (ibv_post_send(c->cid->qp, &w, &bad))
		FAIL("rdma", "ibv_post_send");
	while (n == 0 && now_s() < end)
		n = ibv_poll_cq(c->ccq, 1, &wc);
	if (n != 1 || wc.status != IBV_WC_SUCCESS) {
		printf("FAIL rdma: %s: poll %d, status %s\n", who, n,
		       n == 1 ? ibv_wc_status_str(wc.status) : "-");
		return -1;
	}
	return 0;
}

/* A Write of a pattern and a Read of the target back. A Write completes
   when it is handed to TCP; the Read's response follows its placement. */
static int move_data(struct conn *c, int salt)
{
	char *src = c->buf, *dst = c->buf + 4096, *back = c->buf + 8192;
	int i;

	for (i = 0; i < LEN; i++)
		src[i] = (char)(i * 7 + salt);
	memset(dst, 0, LEN);
	memset(back, 0, LEN);
	if (one(c, IBV_WR_RDMA_WRITE, src, dst) || one(c, IBV_WR_RDMA_READ, back, dst))
		return -1;
	if (memcmp(src, dst, LEN)) {
		printf("FAIL rdma: %s: the Write placed other bytes\n", who);
		return -1;
	}
	if (memcmp(src, back, LEN)) {
		printf("FAIL rdma: %s: the Read brought other bytes\n", who);
		return -1;
	}
	return 0;
}

/* Waits for child p at most CHILD_SECS; kills it if it hangs. */
static int reap(pid_t p, const char *name)
{
	double end = now_s() + CHILD_SECS;
	int st;

	while (now_s() < end) {
		pid_t r = waitpid(p, &st, WNOHANG);

		if (r == p) {
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
				return 0;
			printf("FAIL %s: child exited with status %#x\n", name, st);
			return -1;
		}
		usleep(10000);
	}
	kill(p, SIGKILL);
	waitpid(p, &st, 0);
	printf("FAIL %s: child hung (killed after %d s)\n", name, CHILD_SECS);
	return -1;
}

static pid_t spawn(int (*f)(void *), void *arg)
{
	pid_t p;

	fflush(NULL);
	p = fork();
	if (p == 0) {
		/* Not outliving a parent the test kills. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(f(arg) ? 1 : 0);
	}
	return p;
}

static const char *g_addr;
static int g_port;

static int child_before(void *arg)
{
	static struct conn c;
	int k = (int)(intptr_t)arg;

	who = k == 1 ? "child1" : "child2";
	if (connect_self(&c, g_addr, g_port + k) || move_data(&c, 10 + k))
		return -1;
	printf("ok fork_before %s\n", who);
	return 0;
}

static int before(void)
{
	static struct conn c;
	pid_t p1, p2;
	int bad = 0;

	p1 = spawn(child_before, (void *)1);
	p2 = spawn(child_before, (void *)2);
	if (p1 < 0 || p2 < 0) {
		printf("FAIL fork_before: fork: %s\n", strerror(errno));
		return 1;
	}
	if (connect_self(&c, g_addr, g_port) || move_data(&c, 1))
		bad = 1;
	else
		printf("ok fork_before parent\n");
	bad |= reap(p1, "fork_before child1") | reap(p2, "fork_before child2");
	return bad;
}

static struct conn *g_conn;

/* In the child of a fork after the load: each must fail with EIO, at
   once (the parent's bound catches a hang). */
static int child_after(void *arg)
{
	struct conn *c = g_conn;
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf, .length = 8, .lkey = c->mr->lkey};
	struct ibv_send_wr w = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	struct ibv_device **l;
	struct rdma_cm_event *ev;
	struct ibv_wc wc;
	int n, i, fails = 0;

	who = "child";
#define EXPECT(name, cond)                                                  \
	do {                                                                \
		errno = 0;                                                  \
		if (cond)                                                   \
			printf("ok fork_after child_%s\n", name);           \
		else {                                                      \
			printf("FAIL fork_after child_%s: errno %s\n", name, \
			       strerror(errno));                            \
			fails++;                                            \
		}                                                           \
	} while (0)
	EXPECT("post_send", ibv_post_send(c->cid->qp, &w, &bad) == EIO);
	for (i = 0; i < 1000000 && (n = ibv_poll_cq(c->ccq, 1, &wc)) == 0; i++)
		;
	EXPECT("poll_cq", n == -EIO);
	EXPECT("reg_mr", !ibv_reg_mr(c->pd, c->buf, 64, IBV_ACCESS_LOCAL_WRITE) && errno == EIO);
	/* Must not read the parent's CM events off the shared fd. */
	EXPECT("get_cm_event", rdma_get_cm_event(c->ech, &ev) == -1 && errno == EIO);
	EXPECT("destroy_id", rdma_destroy_id(c->sid) == -1 && errno == EIO);
	l = ibv_get_device_list(&n);
	EXPECT("open_device", l && n == 1 && !ibv_open_device(l[0]) && errno == EIO);
	if (l)
		ibv_free_device_list(l);
	EXPECT("create_event_channel", !rdma_create_event_channel() && errno == EIO);
	return fails ? -1 : 0;
}

static int after(void)
{
	static struct conn c;
	pid_t p;
	int bad;

	if (connect_self(&c, g_addr, g_port) || move_data(&c, 1))
		return 1;
	printf("ok fork_after parent_before\n");
	g_conn = &c;
	p = spawn(child_after, NULL);
	if (p < 0) {
		printf("FAIL fork_after: fork: %s\n", strerror(errno));
		return 1;
	}
	bad = reap(p, "fork_after child") != 0;
	if (move_data(&c, 2))
		return 1;
	printf("ok fork_after parent_after\n");
	return bad;
}

static volatile sig_atomic_t urgs;

static void on_urg(int sig)
{
	urgs++;
}

static int urg_pipe[2];

/* Sends SIGURG to the main thread while it blocks in read(), then lets
   the read finish. */
static void *urg_then_write(void *arg)
{
	usleep(100 * 1000);
	syscall(SYS_tgkill, getpid(), getpid(), SIGURG);
	usleep(200 * 1000);
	if (write(urg_pipe[1], "x", 1) != 1)
		perror("write");
	return NULL;
}

static int sigurg(void)
{
	struct sigaction a = {.sa_handler = on_urg};
	struct ibv_device **l;
	struct ibv_context *c;
	struct dirent *de;
	double end;
	int n, tid, sent = 0;
	DIR *d;

	sigemptyset(&a.sa_mask);
	if (sigaction(SIGURG, &a, NULL))
		return printf("FAIL sigurg: sigaction: %s\n", strerror(errno)), 1;
	l = ibv_get_device_list(&n); /* loads the engine */
	/* A call into Go: the runtime has finished starting (until then it
	   forwards every signal). */
	c = l && n == 1 ? ibv_open_device(l[0]) : NULL;
	if (!c)
		return printf("FAIL sigurg: no device: %s\n", strerror(errno)), 1;
	ibv_free_device_list(l);
	/* Every thread but this one is the engine's. */
	d = opendir("/proc/self/task");
	while (d && (de = readdir(d)))
		if ((tid = atoi(de->d_name)) > 0 && tid != getpid() &&
		    syscall(SYS_tgkill, getpid(), tid, SIGURG) == 0)
			sent++;
	if (d)
		closedir(d);
	kill(getpid(), SIGURG);
	sent++;
	for (end = now_s() + 5; urgs < sent && now_s() < end;)
		usleep(1000);
	if (urgs < sent)
		return printf("FAIL sigurg: the application's handler ran %d times for %d SIGURGs\n",
			      (int)urgs, sent), 1;
	/* The runtime's preemption SIGURGs may land on a thread back in the
	   application's code: its handler got SA_RESTART, so a blocking
	   call goes on instead of failing with EINTR. */
	{
		pthread_t t;
		char b;
		ssize_t r;

		if (pipe(urg_pipe) || pthread_create(&t, NULL, urg_then_write, NULL))
			return printf("FAIL sigurg: pipe/thread: %s\n", strerror(errno)), 1;
		r = read(urg_pipe[0], &b, 1);
		pthread_join(t, NULL);
		if (r != 1)
			return printf("FAIL sigurg: read interrupted by SIGURG: %s\n", strerror(errno)), 1;
		sent++;
	}
	ibv_close_device(c);
	printf("ok sigurg %d\n", sent);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "sigurg"))
		return sigurg();
	if (argc != 4) {
		fprintf(stderr, "usage: forktest before|after ADDR PORT | forktest sigurg\n");
		return 2;
	}
	g_addr = argv[2];
	g_port = atoi(argv[3]);
	if (!strcmp(argv[1], "before"))
		return before();
	if (!strcmp(argv[1], "after"))
		return after();
	return 2;
}
