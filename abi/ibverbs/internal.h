/*
 * internal.h: the wrapper objects of libibverbs.so.1 on xrnic. Every
 * object embeds the rdma-core struct first (the context: a whole
 * struct verbs_context) and keeps the engine handle behind it, so the
 * ops reach the handle with container_of and nothing else.
 */
#ifndef XRNIC_IBVERBS_INTERNAL_H
#define XRNIC_IBVERBS_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include "xrnic_engine.h"
#include "xrnic_private.h"

#define EXPORT __attribute__((visibility("default")))
/* A second, older version of an exported name (name@node, not default). */
#define COMPAT_SYMVER(impl, name, node) \
	__asm__(".symver " #impl "," #name "@" #node)

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Magic words: cheap detection of garbage pointers handed to us. */
enum {
	XCTX_MAGIC = 0x78637478, /* "xctx" */
	XPD_MAGIC = 0x78706478,
	XMR_MAGIC = 0x786d7278,
	XCQ_MAGIC = 0x78637178,
	XQP_MAGIC = 0x78717078,
	XCH_MAGIC = 0x78636878,
	XSRQ_MAGIC = 0x78737178,
};

struct xctx {
	struct verbs_context vctx; /* ends with struct ibv_context */
	uint32_t magic;
	uint64_t async_ch;
	struct xrnic_device_attr attr; /* as of open */
	pthread_mutex_t lock;	/* guards qps and srqs */
	struct xqp *qps;	/* live QPs: async events name only these */
	struct xsrq *srqs;	/* live SRQs, likewise */
};

struct xpd {
	struct ibv_pd pd;
	uint32_t magic;
	uint64_t h;
};

struct xmr {
	struct ibv_mr mr;
	uint32_t magic;
	uint64_t h;
};

struct xchan {
	struct ibv_comp_channel ch;
	uint32_t magic;
	uint64_t h;
	pthread_mutex_t lock;	/* guards cqs */
	struct xcq *cqs;	/* live CQs on this channel */
};

struct xcq {
	struct ibv_cq cq;
	uint32_t magic;
	uint64_t h;
	struct xcq *next;		/* on its channel's list */
	/* Completions the engine queued (xrnic_cq_count_pushes) and those
	   polled: equal means empty, so ibv_poll_cq need not enter the
	   engine (each entry takes a Go scheduler P from its threads). */
	struct xrnic_push_counter ctr;
	uint64_t polled;
	int counting; /* the engine keeps ctr */
	int drive;    /* empty polls drive the transport (xrnic_drive) */
	/* Kernel transport: drives in a row that found nothing. Past
	   DRIVE_IDLE_MAX only every DRIVE_IDLE_MAX-th empty poll drives:
	   a poller whose completions are local (a Write stream's) would
	   otherwise make a system call and a call into Go per poll, the
	   latter taking a scheduler P from the engine's threads. */
	uint32_t idle_drives;
	int kernel;   /* the device is on the kernel transport */
	/* A poller that found the CQ empty this many times in a row yields
	   the CPU once (XRNIC_POLL_YIELD, 0: never): the engine's threads
	   must run for anything to complete, and a spinning application
	   on a host with few cores would otherwise starve them. */
	uint32_t yield_after, empty;
	/* ... and past this many it sleeps until the engine queues a
	   completion (a futex on ctr.pushed, 1 ms at most; XRNIC_POLL_SLEEP,
	   0: never): a long wait, as for a bandwidth test's moderated
	   completions, leaves the cores to the engine, and the wake-up
	   costs one system call in the engine per completion slept for. */
	uint32_t sleep_after;
	/* When this run of empty polls began (ns), and whether the last run
	   lasted over LONG_WAIT_NS: then this one sleeps after a sixteenth
	   of sleep_after, and does not drive. */
	uint64_t wait_start;
	uint32_t long_wait;
	uint32_t comp_events_reported;	/* under cq.mutex */
};

struct xqp {
	struct ibv_qp qp;
	uint32_t magic;
	uint64_t h;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	int access;		/* as set by ibv_modify_qp */
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	uint32_t events_reported; /* under qp.mutex */
	struct xqp *next;	  /* on its context's list */
};

/* engine.c: the engine's functions, xe.<name>(...) for xrnic_<name>
   (loaded on first use; see xrnic_private.h). xrnic_forked: this process
   is a child forked after the load. */
extern struct xrnic_engine xe __attribute__((visibility("hidden")));
extern int xrnic_forked __attribute__((visibility("hidden")));
/* 1 if the engine cannot be called (not loaded, failed, or forked): its
   reason has been said by xrnic_ibv_engine_check. */
int xrnic_ibv_engine_unusable(void);

struct xsrq {
	struct ibv_srq srq;
	uint32_t magic;
	uint64_t h;
	uint32_t events_reported; /* under srq.mutex */
	struct xsrq *next;	  /* on its context's list */
};

/* registry.c: live objects, for the slow paths' argument checks. */
int xrnic_reg_add(const void *p);
void xrnic_reg_del(const void *p);
int xrnic_reg_has(const void *p);

/* to_x*: slow paths, registry and magic. fast_x*: post and poll, whose
   object verbs.h's inline has already dereferenced: magic only. */
static inline struct xctx *to_xctx(struct ibv_context *c)
{
	struct xctx *x;

	if (!c || !xrnic_reg_has(c))
		return NULL;
	x = container_of(c, struct xctx, vctx.context);
	return x->magic == XCTX_MAGIC ? x : NULL;
}

#define XTO(fn, fast, T, M, ib, field)                            \
	static inline struct T *fast(ib *p)                        \
	{                                                          \
		struct T *x;                                       \
		if (!p)                                            \
			return NULL;                               \
		x = container_of(p, struct T, field);              \
		return x->magic == M ? x : NULL;                   \
	}                                                          \
	static inline struct T *fn(ib *p)                          \
	{                                                          \
		return p && xrnic_reg_has(p) ? fast(p) : NULL;     \
	}
XTO(to_xpd, fast_xpd, xpd, XPD_MAGIC, struct ibv_pd, pd)
XTO(to_xmr, fast_xmr, xmr, XMR_MAGIC, struct ibv_mr, mr)
XTO(to_xcq, fast_xcq, xcq, XCQ_MAGIC, struct ibv_cq, cq)
XTO(to_xqp, fast_xqp, xqp, XQP_MAGIC, struct ibv_qp, qp)
XTO(to_xchan, fast_xchan, xchan, XCH_MAGIC, struct ibv_comp_channel, ch)
XTO(to_xsrq, fast_xsrq, xsrq, XSRQ_MAGIC, struct ibv_srq, srq)
#undef XTO

/* device.c */
extern struct ibv_device xrnic_device;
int xrnic_ibv_attr(struct xrnic_device_attr *attr);
void xrnic_ibv_gid(const struct xrnic_device_attr *a, union ibv_gid *gid);
/* verbs.c: the ops installed in every context */
void xrnic_ibv_set_ops(struct xctx *x);
/* stubs.c: ops that answer EOPNOTSUPP */
void xrnic_ibv_set_stub_ops(struct ibv_context_ops *ops);
/* wc.c checks layouts; post.c */
int xrnic_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			struct ibv_send_wr **bad_wr);
int xrnic_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr);
int xrnic_ibv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad_wr);
/* srq.c */
void xrnic_ibv_set_srq_ops(struct xctx *x);
int xrnic_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int xrnic_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

#endif
