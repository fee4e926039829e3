/*
 * internal.h: librdmacm.so.1 for xrnic. The rdma_cm C ABI over the
 * engine's connection manager (xrnic_cm_*, xrnic_chan_*): every object the
 * application sees (channel, id, event) is the public struct at the start
 * of a private one, and every pointer it hands back is looked up in a
 * table first, so a stale or garbage pointer is EINVAL, not a crash.
 */
#ifndef XRNIC_RDMACM_INTERNAL_H
#define XRNIC_RDMACM_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <rdma/rdma_cma.h>

#include "xrnic_engine.h"
#include "xrnic_private.h"

#define XAPI __attribute__((visibility("default")))

/* The engine's functions: xe.<name>(...) calls xrnic_<name> through
   libibverbs.so.1's table (xrnic_private.h), which loads the engine. */
extern struct xrnic_engine *xcm_engine __attribute__((visibility("hidden")));
#define xe (*xcm_engine)

struct xchan {
	struct rdma_event_channel pub; /* first: the application's pointer */
	uint64_t h;		       /* the engine's channel */
	int nids;		       /* ids whose events come here */
	int waiters;		       /* threads in rdma_get_cm_event on it */
	int closed;		       /* destroyed by the application */
	int internal;		       /* made for a synchronous id */
};

struct xid {
	struct rdma_cm_id pub; /* first */
	uint64_t h;	       /* the engine's id */
	uint64_t serial;       /* the engine's cookie for it: never reused */
	struct xchan *chan;
	int refs;      /* the application's (until destroy) + one per
			  unacked event naming it */
	int unacked;   /* delivered events it owns (a CONNECT_REQUEST is its
			  listener's), not yet acked: rdma_destroy_id waits */
	int destroyed; /* rdma_destroy_id ran: no more events, no calls */
	int sync;      /* created without a channel: calls wait */
	int own_cqs;   /* we made send/recv CQs and channels */
	int listening;
	int disc_seen; /* DISCONNECTED was delivered: it comes only once */
	uint8_t req_rr, req_id; /* CONNECT_REQUEST: the peer's IRD, ORD */
	/* rdma_create_ep on a passive id: the QP each request gets. */
	struct ibv_qp_init_attr *ep_attr;
	struct ibv_pd *ep_pd;
};

struct xev {
	struct rdma_cm_event pub; /* first */
	struct xid *id, *listen;  /* referenced until the ack */
	uint8_t pdata[XRNIC_PRIVATE_DATA_MAX];
};

/* Object kinds in the pointer table. */
enum { XK_CHAN = 1, XK_ID, XK_EV, XK_DEVLIST };

/* The table lock: taken briefly, never across a blocking call. */
extern pthread_mutex_t xcm_lock;
extern pthread_cond_t xcm_acked; /* an event was acked (with xcm_lock) */
int xtab_put(uint64_t key, uintptr_t val, int which);
uintptr_t xtab_get(uint64_t key, int which);
void xtab_del(uint64_t key, int which);
enum { XT_OBJ, XT_SERIAL }; /* which: pointers, or id serials */

/* The live id behind p with one more reference (NULL: errno EINVAL), and
   the release of it. */
struct xid *xid_ref(struct rdma_cm_id *p);
void xid_unref(struct xid *x);
/* rdma_get_request's wait for a CONNECT_REQUEST on synchronous listener l. */
int xcm_sync_request(struct xid *l, struct rdma_cm_id **idp);

/* Destroys the CQs and completion channels rdma_create_qp made. */
void xcm_drop_cqs(struct xid *x);

/* The process's xrnic ibv_context (opened once), its default PD and its
   limits; NULL with errno ENODEV if there is none. */
struct ibv_context *xcm_device(void);
struct ibv_pd *xcm_default_pd(struct ibv_context *ctx);
void xcm_limits(int *max_ird, int *max_ord);

/* Prints "xrnic: <text>" to stderr once per distinct text. */
void xcm_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* -1 with errno set, for the int-returning calls. */
static inline int xfail(int err)
{
	errno = err;
	return -1;
}

#endif
