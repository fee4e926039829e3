/*
 * fake.c: a tiny stand-in for libxrnic.so (xrnic_engine.h), for testing
 * libibverbs.so.1 without the Go engine. Handles are counters; posted send
 * WRs are recorded (fake_last_send) and, when signalled, complete at once
 * on the QP's send CQ; a CQ notification fires on the next completion.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "xrnic_engine.h"

#define E __attribute__((visibility("default")))
#define MAXH 256

static int opens;
static uint64_t next_h = 1;
static char last_err[256];

/* per-handle state */
static int chan_fd[MAXH];
static uint64_t cq_ch[MAXH], cq_cookie[MAXH];
static int cq_armed[MAXH];
static struct xrnic_wc cq_ring[MAXH][64];
static int cq_n[MAXH];
static uint64_t qp_scq[MAXH];
static int qp_state_[MAXH];
static struct xrnic_event ch_ev[MAXH][16];
static int ch_n[MAXH];

E struct xrnic_send_wr fake_last_send[64];
E int fake_nsend;
E int fake_fail_after = -1; /* post_send takes this many, then ENOMEM */

static uint64_t newh(void)
{
	return next_h < MAXH ? next_h++ : 0;
}

E int xrnic_open(void)
{
	if (getenv("FAKE_OPEN_FAIL")) {
		snprintf(last_err, sizeof(last_err),
			 "fake: no interface (set XRNIC_IFACE)");
		return ENODEV;
	}
	opens++;
	return 0;
}

E int xrnic_close(void)
{
	opens--;
	return 0;
}

E int xrnic_last_error(char *buf, int len)
{
	snprintf(buf, len, "%s", last_err);
	return (int)strlen(last_err);
}

E int xrnic_query_device(struct xrnic_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "xrnic fake");
	snprintf(a->ifname, sizeof(a->ifname), "lo");
	memcpy(a->mac, "\x02\x00\x5e\x10\x20\x30", 6);
	a->max_mr_size = 1ull << 40;
	a->page_size_cap = 4096;
	a->vendor_id = 0x1234;
	a->vendor_part_id = 1;
	a->max_qp = 1024;
	a->max_qp_wr = 4096;
	a->max_sge = 16;
	a->max_cq = 1024;
	a->max_cqe = 65536;
	a->max_mr = 4096;
	a->max_pd = 1024;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->max_res_rd_atom = 16 * 1024;
	a->max_inline_data = 256;
	a->max_msg_sz = 1u << 31;
	a->atomic_cap = 2;
	a->masked_atomics = 1;
	a->port_state = 4;
	a->active_mtu = 3;
	a->ifmtu = 1500;
	return 0;
}

static void queue(uint64_t ch, const struct xrnic_event *ev)
{
	uint64_t one = 1;

	if (ch_n[ch] < 16) {
		ch_ev[ch][ch_n[ch]++] = *ev;
		if (write(chan_fd[ch], &one, 8) != 8)
			perror("fake: eventfd");
	}
}

E int xrnic_chan_create(int *fd, uint64_t *ch)
{
	uint64_t h = newh();

	if (!h)
		return ENOMEM;
	chan_fd[h] = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	*fd = chan_fd[h];
	*ch = h;
	return 0;
}

E int xrnic_chan_destroy(uint64_t ch)
{
	if (!ch || ch >= MAXH)
		return EBADF;
	close(chan_fd[ch]);
	return 0;
}

E int xrnic_chan_get(uint64_t ch, struct xrnic_event *ev)
{
	if (!ch || ch >= MAXH)
		return EBADF;
	if (!ch_n[ch])
		return EAGAIN;
	*ev = ch_ev[ch][0];
	memmove(ch_ev[ch], ch_ev[ch] + 1, --ch_n[ch] * sizeof(*ev));
	return 0;
}

E int xrnic_alloc_pd(uint64_t *pd)
{
	return (*pd = newh()) ? 0 : ENOMEM;
}

E int xrnic_dealloc_pd(uint64_t pd)
{
	return 0;
}

E int xrnic_reg_mr(uint64_t pd, void *addr, uint64_t len, uint64_t iova,
		   int access, uint64_t *mr, uint32_t *stag)
{
	if (iova && iova != (uintptr_t)addr) {
		snprintf(last_err, sizeof(last_err), "fake: iova");
		return EINVAL;
	}
	*mr = newh();
	*stag = (uint32_t)(*mr << 8);
	return *mr ? 0 : ENOMEM;
}

E int xrnic_dereg_mr(uint64_t mr)
{
	return 0;
}

E int xrnic_create_cq(int cqe, uint64_t ch, uint64_t cookie, uint64_t *cq,
		      int *depth)
{
	uint64_t h = newh();

	if (!h)
		return ENOMEM;
	cq_ch[h] = ch;
	cq_cookie[h] = cookie;
	*cq = h;
	*depth = cqe < 64 ? 64 : cqe;
	return 0;
}

E int xrnic_destroy_cq(uint64_t cq)
{
	return 0;
}

E int xrnic_cq_resize(uint64_t cq, int cqe, int *actual)
{
	if (cqe < 1 || cqe > 65536 || cqe < cq_n[cq])
		return EINVAL;
	*actual = cqe;
	return 0;
}

E int xrnic_poll_cq(uint64_t cq, int n, struct xrnic_wc *wc)
{
	int k = n < cq_n[cq] ? n : cq_n[cq];

	memcpy(wc, cq_ring[cq], k * sizeof(*wc));
	memmove(cq_ring[cq], cq_ring[cq] + k, (cq_n[cq] - k) * sizeof(*wc));
	cq_n[cq] -= k;
	return k;
}

/* The fake keeps no push counter: every poll reaches it (the fallback). */
E int xrnic_cq_count_pushes(uint64_t cq, struct xrnic_push_counter *c)
{
	return ENOSYS;
}

E void xrnic_restore_sigmask(void)
{
}

E int xrnic_drive(uint64_t cq)
{
	return -1;
}

E int xrnic_req_notify_cq(uint64_t cq, int solicited_only)
{
	cq_armed[cq] = 1;
	return 0;
}

E int xrnic_create_qp(uint64_t pd, struct xrnic_qp_init *init, uint64_t *qp,
		      uint32_t *qpn)
{
	uint64_t h = newh();

	if (!h)
		return ENOMEM;
	qp_scq[h] = init->send_cq;
	qp_state_[h] = 1; /* INIT */
	if (init->srq)
		init->max_recv_wr = init->max_recv_sge = 0;
	*qp = h;
	*qpn = (uint32_t)h;
	return 0;
}

E int xrnic_destroy_qp(uint64_t qp)
{
	return 0;
}

E int xrnic_qp_state(uint64_t qp, int *state)
{
	*state = qp_state_[qp];
	return 0;
}

E int xrnic_qp_to_error(uint64_t qp)
{
	qp_state_[qp] = 6;
	return 0;
}

static int opcode_wc(uint32_t op)
{
	switch (op) {
	case XRNIC_WR_WRITE:
	case XRNIC_WR_WRITE_WITH_IMM:
		return 1;
	case XRNIC_WR_READ:
		return 2;
	case XRNIC_WR_CMP_SWAP:
		return 3;
	case XRNIC_WR_FETCH_ADD:
		return 4;
	case XRNIC_WR_LOCAL_INV:
		return 6;
	default:
		return 0;
	}
}

E int xrnic_post_send(uint64_t qp, const struct xrnic_send_wr *wr, int n,
		      int *posted)
{
	uint64_t cq = qp_scq[qp];
	int i;

	for (i = 0; i < n; i++) {
		if (fake_fail_after >= 0 && fake_nsend >= fake_fail_after) {
			*posted = i;
			return ENOMEM;
		}
		if (fake_nsend < 64)
			fake_last_send[fake_nsend] = wr[i];
		fake_nsend++;
		if ((wr[i].flags & XRNIC_SEND_SIGNALED) && cq_n[cq] < 64) {
			struct xrnic_wc *w = &cq_ring[cq][cq_n[cq]++];
			memset(w, 0, sizeof(*w));
			w->wr_id = wr[i].wr_id;
			w->opcode = (uint32_t)opcode_wc(wr[i].opcode);
			w->qp_num = (uint32_t)qp;
			if (cq_armed[cq] && cq_ch[cq]) {
				struct xrnic_event ev = {
					.kind = XRNIC_EV_COMP,
					.cookie = cq_cookie[cq],
				};
				cq_armed[cq] = 0;
				queue(cq_ch[cq], &ev);
			}
		}
	}
	*posted = n;
	return 0;
}

E int xrnic_post_recv(uint64_t qp, const struct xrnic_recv_wr *wr, int n,
		      int *posted)
{
	*posted = n;
	return 0;
}

/* SRQs: attributes kept, receives counted. */
static struct xrnic_srq_attr srq_attr_[MAXH];
static int srq_posted[MAXH];

E int xrnic_create_srq(uint64_t pd, struct xrnic_srq_init *init,
		       uint64_t *srq)
{
	uint64_t h = newh();

	if (!h)
		return ENOMEM;
	if (!init->max_wr || init->srq_limit > init->max_wr)
		return EINVAL;
	srq_attr_[h] = (struct xrnic_srq_attr){init->max_wr,
					       init->max_sge ? init->max_sge : 1,
					       init->srq_limit};
	init->max_sge = srq_attr_[h].max_sge;
	*srq = h;
	return 0;
}

E int xrnic_destroy_srq(uint64_t srq)
{
	return 0;
}

E int xrnic_modify_srq(uint64_t srq, const struct xrnic_srq_attr *attr,
		       int mask)
{
	if (mask & XRNIC_SRQ_MAX_WR)
		return EOPNOTSUPP;
	if ((mask & XRNIC_SRQ_LIMIT) && attr->srq_limit > srq_attr_[srq].max_wr)
		return EINVAL;
	if (mask & XRNIC_SRQ_LIMIT)
		srq_attr_[srq].srq_limit = attr->srq_limit;
	return 0;
}

E int xrnic_query_srq(uint64_t srq, struct xrnic_srq_attr *attr)
{
	*attr = srq_attr_[srq];
	return 0;
}

E int xrnic_post_srq_recv(uint64_t srq, const struct xrnic_recv_wr *wr, int n,
			  int *posted)
{
	srq_posted[srq] += n;
	*posted = n;
	return 0;
}

/* The CM half is librdmacm's; unused here. */
E int xrnic_cm_create_id(uint64_t ch, uint64_t cookie, uint64_t *id) { return ENOSYS; }
E int xrnic_cm_set_cookie(uint64_t id, uint64_t cookie) { return ENOSYS; }
E int xrnic_cm_destroy_id(uint64_t id) { return ENOSYS; }
E int xrnic_cm_migrate_id(uint64_t id, uint64_t ch) { return ENOSYS; }
E int xrnic_cm_bind(uint64_t id, const struct sockaddr *addr) { return ENOSYS; }
E int xrnic_cm_resolve_addr(uint64_t id, const struct sockaddr *src,
			    const struct sockaddr *dst,
			    struct sockaddr_storage *src_out) { return ENOSYS; }
E int xrnic_cm_resolve_route(uint64_t id) { return ENOSYS; }
E int xrnic_cm_listen(uint64_t id, int backlog) { return ENOSYS; }
E int xrnic_cm_connect(uint64_t id, uint64_t qp,
		       const struct xrnic_conn_param *p) { return ENOSYS; }
E int xrnic_cm_accept(uint64_t id, uint64_t qp,
		      const struct xrnic_conn_param *p) { return ENOSYS; }
E int xrnic_cm_reject(uint64_t id, const void *pd, int len) { return ENOSYS; }
E int xrnic_cm_disconnect(uint64_t id) { return ENOSYS; }
E int xrnic_cm_addrs(uint64_t id, struct sockaddr_storage *local,
		     struct sockaddr_storage *peer) { return ENOSYS; }
