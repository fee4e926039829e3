/*
 * post.c: the fast path. Post converts ibv WR lists into xrnic WR arrays
 * on the stack, a chunk at a time, and makes one engine call per chunk;
 * poll hands the application's ibv_wc array to the engine as it is.
 * No malloc, no lock, no system call.
 */
#include <arpa/inet.h>
#include <sched.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>

#include "internal.h"

/* ---- layouts and values the engine shares with rdma-core ------------ */

#define SAME_FIELD(a, b, f)                                              \
	_Static_assert(offsetof(struct a, f) == offsetof(struct b, f) &&   \
			       sizeof(((struct a *)0)->f) ==               \
				       sizeof(((struct b *)0)->f),         \
		       #a "." #f " differs from " #b)

_Static_assert(sizeof(struct xrnic_wc) == sizeof(struct ibv_wc), "wc size");
SAME_FIELD(xrnic_wc, ibv_wc, wr_id);
SAME_FIELD(xrnic_wc, ibv_wc, status);
SAME_FIELD(xrnic_wc, ibv_wc, opcode);
SAME_FIELD(xrnic_wc, ibv_wc, vendor_err);
SAME_FIELD(xrnic_wc, ibv_wc, byte_len);
SAME_FIELD(xrnic_wc, ibv_wc, imm_data);
SAME_FIELD(xrnic_wc, ibv_wc, qp_num);
SAME_FIELD(xrnic_wc, ibv_wc, src_qp);
SAME_FIELD(xrnic_wc, ibv_wc, wc_flags);
SAME_FIELD(xrnic_wc, ibv_wc, pkey_index);
SAME_FIELD(xrnic_wc, ibv_wc, slid);
SAME_FIELD(xrnic_wc, ibv_wc, sl);
SAME_FIELD(xrnic_wc, ibv_wc, dlid_path_bits);
_Static_assert(sizeof(struct xrnic_sge) == sizeof(struct ibv_sge), "sge");
SAME_FIELD(xrnic_sge, ibv_sge, addr);
SAME_FIELD(xrnic_sge, ibv_sge, length);
SAME_FIELD(xrnic_sge, ibv_sge, lkey);

/* The rdma-core values the engine writes or reads as numbers. */
_Static_assert(IBV_WC_SUCCESS == 0 && IBV_WC_LOC_LEN_ERR == 1 &&
		       IBV_WC_LOC_QP_OP_ERR == 2 && IBV_WC_LOC_PROT_ERR == 4 &&
		       IBV_WC_WR_FLUSH_ERR == 5 && IBV_WC_BAD_RESP_ERR == 7 &&
		       IBV_WC_LOC_ACCESS_ERR == 8 &&
		       IBV_WC_REM_INV_REQ_ERR == 9 &&
		       IBV_WC_REM_ACCESS_ERR == 10 && IBV_WC_REM_OP_ERR == 11 &&
		       IBV_WC_RETRY_EXC_ERR == 12 &&
		       IBV_WC_RNR_RETRY_EXC_ERR == 13 &&
		       IBV_WC_REM_ABORT_ERR == 16 && IBV_WC_FATAL_ERR == 19 &&
		       IBV_WC_RESP_TIMEOUT_ERR == 20 &&
		       IBV_WC_GENERAL_ERR == 21,
	       "ibv_wc_status");
_Static_assert(IBV_WC_SEND == 0 && IBV_WC_RDMA_WRITE == 1 &&
		       IBV_WC_RDMA_READ == 2 && IBV_WC_COMP_SWAP == 3 &&
		       IBV_WC_FETCH_ADD == 4 && IBV_WC_BIND_MW == 5 &&
		       IBV_WC_LOCAL_INV == 6 && IBV_WC_RECV == 128 &&
		       IBV_WC_RECV_RDMA_WITH_IMM == 129,
	       "ibv_wc_opcode");
_Static_assert(IBV_WC_GRH == 1 && IBV_WC_WITH_IMM == 2 &&
		       IBV_WC_WITH_INV == 8,
	       "ibv_wc_flags");
_Static_assert(IBV_QPS_RESET == 0 && IBV_QPS_INIT == 1 && IBV_QPS_RTR == 2 &&
		       IBV_QPS_RTS == 3 && IBV_QPS_SQD == 4 &&
		       IBV_QPS_SQE == 5 && IBV_QPS_ERR == 6,
	       "ibv_qp_state");
_Static_assert(IBV_EVENT_CQ_ERR == 0 && IBV_EVENT_QP_FATAL == 1 &&
		       IBV_EVENT_QP_REQ_ERR == 2 &&
		       IBV_EVENT_QP_ACCESS_ERR == 3 &&
		       IBV_EVENT_COMM_EST == 4 && IBV_EVENT_SQ_DRAINED == 5 &&
		       IBV_EVENT_PORT_ACTIVE == 9 && IBV_EVENT_PORT_ERR == 10 &&
		       IBV_EVENT_QP_LAST_WQE_REACHED == 16 &&
		       IBV_EVENT_DEVICE_FATAL == 8,
	       "ibv_event_type");
_Static_assert(IBV_ACCESS_LOCAL_WRITE == 1 && IBV_ACCESS_REMOTE_WRITE == 2 &&
		       IBV_ACCESS_REMOTE_READ == 4 &&
		       IBV_ACCESS_REMOTE_ATOMIC == 8 &&
		       IBV_ACCESS_MW_BIND == 16 && IBV_ACCESS_ZERO_BASED == 32,
	       "IBV_ACCESS_*");
_Static_assert(IBV_PORT_DOWN == 1 && IBV_PORT_ACTIVE == 4, "port state");
_Static_assert(IBV_MTU_256 == 1 && IBV_MTU_4096 == 5, "ibv_mtu");
_Static_assert(IBV_ATOMIC_GLOB == 2, "ibv_atomic_cap");

/* ---- post -------------------------------------------------------------- */

enum { CHUNK = 32 };

#define KNOWN_SEND_FLAGS \
	(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)
_Static_assert(KNOWN_SEND_FLAGS == 15, "send flags are the low 4 bits");

/* IBV_SEND_* (FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8) to XRNIC_SEND_*. */
static const uint8_t send_flags[16] = {
#define F(v)                                                                \
	(((v) & IBV_SEND_FENCE ? XRNIC_SEND_FENCE : 0) |                     \
	 ((v) & IBV_SEND_SIGNALED ? XRNIC_SEND_SIGNALED : 0) |               \
	 ((v) & IBV_SEND_SOLICITED ? XRNIC_SEND_SOLICITED : 0) |             \
	 ((v) & IBV_SEND_INLINE ? XRNIC_SEND_INLINE : 0))
	F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7),
	F(8), F(9), F(10), F(11), F(12), F(13), F(14), F(15),
#undef F
};

static inline int conv_send(const struct ibv_send_wr *s,
			    struct xrnic_send_wr *w)
{
	if (s->num_sge < 0 || (s->num_sge && !s->sg_list) ||
	    (s->send_flags & ~(unsigned int)KNOWN_SEND_FLAGS))
		return EINVAL;
	*w = (struct xrnic_send_wr){
		.wr_id = s->wr_id,
		.flags = send_flags[s->send_flags & 15],
		.sg_list = (const struct xrnic_sge *)s->sg_list,
		.num_sge = s->num_sge,
	};
	switch (s->opcode) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		w->imm = (uint64_t)ntohl(s->imm_data);
		w->opcode = XRNIC_WR_WRITE_WITH_IMM;
		w->rkey = s->wr.rdma.rkey;
		w->remote_addr = s->wr.rdma.remote_addr;
		return 0;
	case IBV_WR_RDMA_WRITE:
		w->opcode = XRNIC_WR_WRITE;
		w->rkey = s->wr.rdma.rkey;
		w->remote_addr = s->wr.rdma.remote_addr;
		return 0;
	case IBV_WR_RDMA_READ:
		w->opcode = XRNIC_WR_READ;
		w->rkey = s->wr.rdma.rkey;
		w->remote_addr = s->wr.rdma.remote_addr;
		return 0;
	case IBV_WR_SEND:
		w->opcode = XRNIC_WR_SEND;
		return 0;
	case IBV_WR_SEND_WITH_INV:
		w->opcode = XRNIC_WR_SEND_WITH_INV;
		w->invalidate_rkey = s->invalidate_rkey;
		return 0;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->opcode = XRNIC_WR_FETCH_ADD;
		w->rkey = s->wr.atomic.rkey;
		w->remote_addr = s->wr.atomic.remote_addr;
		w->compare_add = s->wr.atomic.compare_add;
		return 0; /* add_mask 0: a plain add */
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		w->opcode = XRNIC_WR_CMP_SWAP;
		w->rkey = s->wr.atomic.rkey;
		w->remote_addr = s->wr.atomic.remote_addr;
		w->compare_add = s->wr.atomic.compare_add;
		w->swap = s->wr.atomic.swap;
		w->compare_mask = ~(uint64_t)0;
		w->swap_mask = ~(uint64_t)0;
		return 0;
	case IBV_WR_LOCAL_INV:
		w->opcode = XRNIC_WR_LOCAL_INV;
		w->invalidate_rkey = s->invalidate_rkey;
		return 0;
	default:
		/* IBV_WR_SEND_WITH_IMM: iWARP (RFC 7306) has no Send with
		   Immediate; others (MW bind, TSO, ...) xrnic lacks. */
		return EINVAL;
	}
}

/* The index in a chunk of n of the first WR the engine did not take, from
   its count (kept inside the chunk whatever the engine says). */
static int first_unposted(int posted, int n)
{
	return posted < 0 ? 0 : posted < n ? posted : n - 1;
}

int xrnic_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			struct ibv_send_wr **bad_wr)
{
	struct xrnic_send_wr w[CHUNK];
	struct ibv_send_wr *src[CHUNK];
	struct xqp *x = fast_xqp(qp);
	int n, err, posted, e;

	if (!x) {
		if (bad_wr)
			*bad_wr = wr;
		return EINVAL;
	}
	while (wr) {
		for (n = 0, err = 0; wr && n < CHUNK; wr = wr->next) {
			err = conv_send(wr, &w[n]);
			if (err)
				break;
			src[n++] = wr;
		}
		if (n) {
			posted = 0;
			e = xe.post_send(x->h, w, n, &posted);
			if (e) {
				if (bad_wr)
					*bad_wr = src[first_unposted(posted, n)];
				return e;
			}
		}
		if (err) {
			if (bad_wr)
				*bad_wr = wr;
			return err;
		}
	}
	return 0;
}

/* post_recv_list posts wr's list to the QP or (srq) SRQ h, a chunk per
   engine call. */
static inline int post_recv_list(uint64_t h, int srq, struct ibv_recv_wr *wr,
				 struct ibv_recv_wr **bad_wr)
{
	struct xrnic_recv_wr w[CHUNK];
	struct ibv_recv_wr *src[CHUNK];
	int n, err, posted, e;

	while (wr) {
		for (n = 0, err = 0; wr && n < CHUNK; wr = wr->next) {
			if (wr->num_sge < 0 || (wr->num_sge && !wr->sg_list)) {
				err = EINVAL;
				break;
			}
			w[n] = (struct xrnic_recv_wr){
				.wr_id = wr->wr_id,
				.sg_list = (const struct xrnic_sge *)wr->sg_list,
				.num_sge = wr->num_sge,
			};
			src[n++] = wr;
		}
		if (n) {
			posted = 0;
			e = srq ? xe.post_srq_recv(h, w, n, &posted)
				: xe.post_recv(h, w, n, &posted);
			if (e) {
				if (bad_wr)
					*bad_wr = src[first_unposted(posted, n)];
				return e;
			}
		}
		if (err) {
			if (bad_wr)
				*bad_wr = wr;
			return err;
		}
	}
	return 0;
}

int xrnic_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr)
{
	struct xqp *x = fast_xqp(qp);

	if (!x) {
		if (bad_wr)
			*bad_wr = wr;
		return EINVAL;
	}
	return post_recv_list(x->h, 0, wr, bad_wr);
}

int xrnic_ibv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad_wr)
{
	struct xsrq *x = fast_xsrq(srq);

	if (!x) {
		if (bad_wr)
			*bad_wr = wr;
		return EINVAL;
	}
	return post_recv_list(x->h, 1, wr, bad_wr);
}

/* ---- poll and notify ------------------------------------------------------ */

static inline int cq_empty(struct xcq *x)
{
	return __atomic_load_n(&x->ctr.pushed, __ATOMIC_ACQUIRE) ==
	       __atomic_load_n(&x->polled, __ATOMIC_RELAXED);
}

/* Sleeps until the engine queues a completion on x (xrnic_push_counter),
   a signal, or 1 ms: the timeout only bounds what a lost wake-up could
   cost. */
static void wait_push(struct xcq *x)
{
	struct timespec ts = {0, 1000000};
	uint32_t v;

	__atomic_add_fetch(&x->ctr.waiters, 1, __ATOMIC_SEQ_CST);
	v = (uint32_t)__atomic_load_n(&x->ctr.pushed, __ATOMIC_SEQ_CST);
	if (v == (uint32_t)__atomic_load_n(&x->polled, __ATOMIC_RELAXED))
		syscall(SYS_futex, (uint32_t *)&x->ctr.pushed,
			FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
	__atomic_sub_fetch(&x->ctr.waiters, 1, __ATOMIC_RELAXED);
}

static inline uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A wait for completions longer than this (a bandwidth test's moderated
   completions, not a ping-pong's round trip) makes the next one sleep
   after a sixteenth of the spin: the wait is likely long again, and
   spinning through it takes a core from the engine (kernel ib_write_bw
   in one interleaved batch: 1140 MiB/s sleeping after 2000 polls, 1439
   after 100). */
#define LONG_WAIT_NS 500000u

#define DRIVE_IDLE_MAX 64u

/* xrnic_drive: -1 none, 0 the engine polls, 1 stepped idle, 2 worked.
   e: the empty polls in a row, this one included. */
static inline int drive(struct xcq *x, uint32_t e)
{
	int r;

	if (x->kernel && x->idle_drives >= DRIVE_IDLE_MAX && e % DRIVE_IDLE_MAX)
		return 0;
	r = xe.drive(x->h);
	if (r < 0)
		x->drive = 0; /* XRNIC_DRIVE=0 */
	else if (r == 2)
		x->idle_drives = 0;
	else if (x->idle_drives < DRIVE_IDLE_MAX)
		x->idle_drives++;
	return r;
}

/* An empty poll drives the transport (xrnic_drive): the polling thread
   does the engine's receive work itself (afxdp: and transmit).
   After a long wait it does not (a bandwidth test's moderated
   completions: the engine's loop streams, and each drive is a call into
   Go that takes a scheduler P from it) and sleeps early instead. */
int xrnic_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct xcq *x = fast_xcq(cq);
	uint32_t e;
	int k, lw, d = -1;

	if (!x || n < 0 || (n && !wc))
		return -EINVAL;
	lw = __atomic_load_n(&x->long_wait, __ATOMIC_RELAXED);
	if (x->counting && cq_empty(x) &&
	    (!x->drive || lw ||
	     (d = drive(x, __atomic_load_n(&x->empty, __ATOMIC_RELAXED) + 1)) < 2 ||
	     cq_empty(x))) {
		/* A forked child's CQ looks empty for ever: fail instead. */
		if (__builtin_expect(__atomic_load_n(&xrnic_forked, __ATOMIC_RELAXED), 0))
			return -xrnic_ibv_engine_check();
		e = __atomic_add_fetch(&x->empty, 1, __ATOMIC_RELAXED);
		if (e == 1)
			__atomic_store_n(&x->wait_start, now_ns(),
					 __ATOMIC_RELAXED);
		if (x->sleep_after &&
		    e > (lw ? x->sleep_after / 16 : x->sleep_after)) {
			struct timespec ts = {0, 1000};

			/* A poller that stepped is the engine: nobody
			   else would push, so it naps instead. */
			if (d <= 0)
				wait_push(x);
			else
				nanosleep(&ts, NULL);
		} else if (d <= 0 && x->yield_after &&
			   e % x->yield_after == 0) {
			/* (A poller that stepped is the engine: nobody to
			   yield to.) */
			sched_yield();
		}
		return 0;
	}
	k = xe.poll_cq(x->h, n, (struct xrnic_wc *)wc);
	if (k > 0) {
		__atomic_add_fetch(&x->polled, (uint64_t)k, __ATOMIC_RELAXED);
		if (__atomic_exchange_n(&x->empty, 0, __ATOMIC_RELAXED))
			__atomic_store_n(
				&x->long_wait,
				now_ns() - __atomic_load_n(&x->wait_start,
							   __ATOMIC_RELAXED) >
					LONG_WAIT_NS,
				__ATOMIC_RELAXED);
	}
	return k;
}

int xrnic_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct xcq *x = fast_xcq(cq);

	if (!x)
		return EINVAL;
	return xe.req_notify_cq(x->h, solicited_only != 0);
}
