/*
 * xrnic_engine.h: the contract between libxrnic.so (the xrnic engine, Go,
 * built with -buildmode=c-shared from abi/engine) and the C libraries that
 * give it the rdma-core ABI (abi/ibverbs: libibverbs.so.1, abi/rdmacm:
 * librdmacm.so.1).
 *
 * Rules:
 * - Every Go object is named by a uint64_t handle; 0 is never a handle.
 *   Handles stay valid until destroyed; a destroyed or unknown handle gives
 *   EBADF, never a crash.
 * - Functions return 0 or a positive errno value (as libibverbs does);
 *   xrnic_poll_cq returns a count or a negative errno. xrnic_last_error
 *   copies the text of the most recent failure (what went wrong and what
 *   to do), for the C side to print or return.
 * - Post, poll and notify take no lock beyond the engine's own, allocate
 *   nothing and make no system call.
 * - Channels (completion, CM and async events) are eventfds in semaphore
 *   mode: the engine queues an event and then adds 1; the C side reads the
 *   fd (8 bytes, blocking or not as the application set it), which takes
 *   exactly one count, and then takes exactly one event with
 *   xrnic_chan_get. The fd is readable exactly when events wait.
 * - Numeric values that are rdma-core ABI values (ibv_wc_status,
 *   ibv_wc_opcode, ibv_qp_state, ibv_event_type, rdma_cm_event_type,
 *   IBV_ACCESS_*) are passed as rdma-core defines them; the C side checks
 *   the layouts below against rdma-core's headers with static asserts.
 */
#ifndef XRNIC_ENGINE_H
#define XRNIC_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device -------------------------------------------------------- */

/*
 * Configuration comes from the environment, read by the first xrnic_open:
 *   XRNIC_TRANSPORT  kernel (default) | afxdp
 *   XRNIC_IFACE      the interface: afxdp's, and the one whose MAC, MTU,
 *                    state and address the port reports (default: the
 *                    first up, non-loopback interface with an IPv4
 *                    address, else lo)
 *   XRNIC_CONFIG     a file of KEY=VALUE lines with the same keys (the
 *                    environment wins)
 *   XRNIC_DEBUG      1: log engine events to stderr
 */
int xrnic_open(void);  /* refcounted; the first call opens the device */
int xrnic_close(void); /* the last call closes it */
int xrnic_last_error(char *buf, int len); /* returns the full length */

struct xrnic_device_attr {
	char fw_ver[64];	/* "xrnic <version>" */
	char ifname[32];	/* the interface the port stands for */
	uint8_t mac[6];		/* its hardware address (GID and GUID) */
	uint8_t ipv4[4];	/* its first IPv4 address, 0.0.0.0 if none */
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id, vendor_part_id, hw_ver;
	int32_t max_qp, max_qp_wr, max_sge, max_cq, max_cqe, max_mr, max_pd;
	int32_t max_qp_rd_atom;	     /* IRD */
	int32_t max_qp_init_rd_atom; /* ORD */
	int32_t max_res_rd_atom;
	int32_t max_inline_data;
	uint32_t max_msg_sz;
	int32_t atomic_cap;	/* IBV_ATOMIC_GLOB */
	int32_t masked_atomics; /* 1: RFC 7306 masks (xrnicdv.h) */
	int32_t port_state;	/* IBV_PORT_ACTIVE or IBV_PORT_DOWN */
	int32_t active_mtu;	/* enum ibv_mtu from the interface MTU */
	int32_t ifmtu;		/* the interface MTU in bytes */
	int32_t afxdp;		/* 1: the afxdp transport is in use */
};
int xrnic_query_device(struct xrnic_device_attr *attr);

/* ---- channels ------------------------------------------------------ */

enum {
	XRNIC_EV_COMP = 1,  /* a CQ's notification fired: cookie is the CQ's */
	XRNIC_EV_ASYNC = 2, /* an async event: code is an ibv_event_type,
			       cookie the QP's (IBV_EVENT_SRQ_LIMIT_REACHED:
			       the SRQ's) */
	XRNIC_EV_CM = 3,    /* an rdma_cm event: code is an
			       rdma_cm_event_type, cookie the id's */
};

#define XRNIC_PRIVATE_DATA_MAX 512

struct xrnic_event {
	uint32_t kind;	 /* XRNIC_EV_* */
	uint32_t code;	 /* see kind */
	int32_t status;	 /* rdma_cm: 0, a negative errno, or the reject
			    status (ECONNREFUSED as rdma_cm gives on iWARP) */
	uint32_t reserved;
	uint64_t cookie; /* the C object the event is for */
	/* RDMA_CM_EVENT_CONNECT_REQUEST: the new id's handle; the C side
	   creates its rdma_cm_id and calls xrnic_cm_set_cookie for it. */
	uint64_t new_id;
	uint8_t responder_resources; /* the peer's IRD (connect request,
					established) */
	uint8_t initiator_depth;     /* the peer's ORD */
	uint16_t private_data_len;
	uint8_t private_data[XRNIC_PRIVATE_DATA_MAX];
	struct sockaddr_storage local, peer; /* the connection's addresses */
};

int xrnic_chan_create(int *fd, uint64_t *ch);
int xrnic_chan_destroy(uint64_t ch); /* also closes the fd */
/* Takes one event; EAGAIN if none (call it after reading the fd). */
int xrnic_chan_get(uint64_t ch, struct xrnic_event *ev);

/* ---- protection domains and memory --------------------------------- */

int xrnic_alloc_pd(uint64_t *pd);
int xrnic_dealloc_pd(uint64_t pd); /* EBUSY while MRs or QPs use it */

/*
 * Registers [addr, addr+len) of the caller's memory; access is IBV_ACCESS_*.
 * iova is the tagged offset of addr: addr itself, or 0 (zero-based);
 * anything else is EINVAL for now. lkey and rkey are both the STag.
 */
int xrnic_reg_mr(uint64_t pd, void *addr, uint64_t len, uint64_t iova,
		 int access, uint64_t *mr, uint32_t *stag);
int xrnic_dereg_mr(uint64_t mr);

/* ---- completion queues --------------------------------------------- */

/* The layout of struct ibv_wc (48 bytes). */
struct xrnic_wc {
	uint64_t wr_id;
	uint32_t status; /* enum ibv_wc_status */
	uint32_t opcode; /* enum ibv_wc_opcode */
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data; /* network order, or invalidated_rkey */
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags; /* IBV_WC_WITH_IMM, IBV_WC_WITH_INV */
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

/* ch 0: no completion channel. depth gets the depth made (>= cqe). A CQ
   grows as work requests are posted, up to max_cqe: the queues attached
   may exceed its depth. */
int xrnic_create_cq(int cqe, uint64_t ch, uint64_t cookie, uint64_t *cq,
		    int *depth);
int xrnic_destroy_cq(uint64_t cq); /* EBUSY while QPs use it */
/* ibv_resize_cq: makes room for cqe completions, keeping those queued;
   *actual gets the size made (more than cqe while more entries are
   reserved by posted work requests). EINVAL: cqe outside 1..max_cqe, or
   below the completions queued. */
int xrnic_cq_resize(uint64_t cq, int cqe, int *actual);
int xrnic_poll_cq(uint64_t cq, int n, struct xrnic_wc *wc);
/* Where a CQ counts its completions (xrnic_cq_count_pushes). */
struct xrnic_push_counter {
	uint64_t pushed;  /* completions queued, atomic */
	uint32_t waiters; /* pollers futex-waiting on pushed's low 32 bits */
	uint32_t reserved;
};
/* From now on every completion queued on the CQ adds 1 to c->pushed (C
   memory, 8-byte aligned, atomic; valid until xrnic_destroy_cq): a poller
   that compares it with the completions it has polled can skip the call
   into the engine while the CQ is empty. To sleep until the next
   completion a poller adds 1 to c->waiters, reads pushed and, if the CQ
   is still empty, futex-waits (FUTEX_WAIT_PRIVATE) on pushed's low 32
   bits (x86-64: the word at its address); while waiters is not zero the
   engine wakes them on every completion. NULL stops it. */
int xrnic_cq_count_pushes(uint64_t cq, struct xrnic_push_counter *c);
/* Drives the transport from the calling thread (run to completion), for
   a poller of cq. afxdp: once drives come often, and the queue does not
   stream, the engine's poll loop steps aside and each drive runs its poll
   step here, so a spinning poller and the loop do not compete for the
   cores. kernel: reads the sockets of cq's QPs and handles what arrived
   (their readers stay awake). -1: no such step (XRNIC_DRIVE=0); 0: the
   engine polls (poll as usual, yielding now and then; kernel: nothing had
   arrived); 1: a step ran and found nothing; 2: a step did work
   (completions may have been queued). afxdp: posts drive too, and
   xrnic_req_notify_cq hands the transport back to the engine. */
int xrnic_drive(uint64_t cq);

/* Gives the thread that loaded libxrnic.so its signal mask back: the
   engine's threads are started with the asynchronous signals blocked (an
   application's handler without SA_ONSTACK must not run on a Go stack),
   and so was the loading thread until now. libibverbs.so.1 loads the
   engine on first use (dlopen) and calls it right after. */
void xrnic_restore_sigmask(void);
/* Arms the CQ once: the next completion (solicited_only: the next
   solicited receive or any error) queues XRNIC_EV_COMP on its channel. */
int xrnic_req_notify_cq(uint64_t cq, int solicited_only);

/* ---- queue pairs ---------------------------------------------------- */

struct xrnic_qp_init {
	uint64_t send_cq, recv_cq;
	uint32_t max_send_wr, max_recv_wr;    /* in: asked; out: made */
	uint32_t max_send_sge, max_recv_sge;  /* in: asked; out: made */
	uint32_t max_inline_data;	      /* in: asked; out: made */
	int32_t sq_sig_all;
	uint64_t async_ch; /* the context's async channel (0: none) */
	uint64_t cookie;   /* the C ibv_qp, for async events */
	/* 0, or the SRQ the QP takes its receives from: then max_recv_wr
	   and max_recv_sge are ignored (out: 0) and xrnic_post_recv on the
	   QP is EINVAL. */
	uint64_t srq;
};

int xrnic_create_qp(uint64_t pd, struct xrnic_qp_init *init, uint64_t *qp,
		    uint32_t *qpn);
int xrnic_destroy_qp(uint64_t qp);
int xrnic_qp_state(uint64_t qp, int *state); /* enum ibv_qp_state */
int xrnic_qp_to_error(uint64_t qp);	     /* flushes every WR */

/* The layout of struct ibv_sge. */
struct xrnic_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

enum { /* xrnic_send_wr.opcode */
	XRNIC_WR_WRITE = 1,
	XRNIC_WR_WRITE_WITH_IMM,
	XRNIC_WR_SEND,
	XRNIC_WR_SEND_WITH_INV,
	XRNIC_WR_READ,
	XRNIC_WR_FETCH_ADD,
	XRNIC_WR_CMP_SWAP,
	XRNIC_WR_LOCAL_INV,
	XRNIC_WR_IMM, /* RFC 7306 Immediate Data alone */
};

enum { /* xrnic_send_wr.flags */
	XRNIC_SEND_SIGNALED = 1 << 0,
	XRNIC_SEND_SOLICITED = 1 << 1,
	XRNIC_SEND_FENCE = 1 << 2,
	XRNIC_SEND_INLINE = 1 << 3, /* copy the SGEs' bytes now; lkeys unused */
};

struct xrnic_send_wr {
	uint64_t wr_id;
	uint32_t opcode; /* XRNIC_WR_* */
	uint32_t flags;	 /* XRNIC_SEND_* */
	const struct xrnic_sge *sg_list;
	int32_t num_sge;
	uint32_t rkey;	      /* remote STag */
	uint64_t remote_addr; /* remote tagged offset */
	/* Immediate Data (64 bits, RFC 7306). From the ABI's 32-bit
	   imm_data: (uint64_t)ntohl(imm_data) — see docs/VERBS-ABI.md. */
	uint64_t imm;
	uint32_t invalidate_rkey;
	uint32_t reserved;
	uint64_t compare_add; /* FetchAdd: add; CmpSwap: compare */
	uint64_t swap;
	/* RFC 7306 masks: add_mask 0 is a plain add; compare_mask and
	   swap_mask all-ones are a plain compare-and-swap. */
	uint64_t add_mask, compare_mask, swap_mask;
};

struct xrnic_recv_wr {
	uint64_t wr_id;
	const struct xrnic_sge *sg_list;
	int32_t num_sge; /* 0 is allowed: Immediate Data only */
	uint32_t reserved;
};

/* Post n WRs in order; *posted says how many were taken before an error
   (the C side's bad_wr). ENOMEM: queue or CQ full; EINVAL: a malformed WR;
   the QP's state refusing it: EINVAL as libibverbs does. */
int xrnic_post_send(uint64_t qp, const struct xrnic_send_wr *wr, int n,
		    int *posted);
int xrnic_post_recv(uint64_t qp, const struct xrnic_recv_wr *wr, int n,
		    int *posted);

/* ---- shared receive queues ----------------------------------------- */

/*
 * A QP created with an SRQ (xrnic_qp_init.srq) takes one of its receives
 * per inbound Send, Immediate Data or Write with Immediate; the receive
 * completes on that QP's receive CQ with its qp_num. A message that finds
 * the SRQ empty ends only its own connection (Terminate DDP 2/0x02, as an
 * empty RQ); a QP that ends flushes only the receive it had taken. The
 * limit is one-shot: once fewer than srq_limit receives are left, the
 * SRQ's async channel gets XRNIC_EV_ASYNC IBV_EVENT_SRQ_LIMIT_REACHED with
 * its cookie and the limit is 0 (disarmed) again.
 */
struct xrnic_srq_init {
	uint32_t max_wr;    /* in: asked; out: made */
	uint32_t max_sge;   /* in: asked; out: made */
	uint32_t srq_limit; /* armed at creation (0: not), at most max_wr */
	uint32_t reserved;
	uint64_t async_ch; /* the context's async channel (0: none) */
	uint64_t cookie;   /* the C ibv_srq, for the limit event */
};

/* The layout of struct ibv_srq_attr. */
struct xrnic_srq_attr {
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t srq_limit;
};

enum { /* xrnic_modify_srq's mask: enum ibv_srq_attr_mask's values */
	XRNIC_SRQ_MAX_WR = 1 << 0, /* resizing: EOPNOTSUPP (as Linux siw) */
	XRNIC_SRQ_LIMIT = 1 << 1,  /* arm (0: disarm); EINVAL above max_wr */
};

int xrnic_create_srq(uint64_t pd, struct xrnic_srq_init *init,
		     uint64_t *srq);
/* EBUSY while QPs use it; the receives left are dropped, not completed. */
int xrnic_destroy_srq(uint64_t srq);
int xrnic_modify_srq(uint64_t srq, const struct xrnic_srq_attr *attr,
		     int mask);
int xrnic_query_srq(uint64_t srq, struct xrnic_srq_attr *attr);
/* As xrnic_post_recv; ENOMEM: the SRQ is full. */
int xrnic_post_srq_recv(uint64_t srq, const struct xrnic_recv_wr *wr, int n,
			int *posted);

/* ---- connection management (rdma_cm on iWARP) ----------------------- */

struct xrnic_conn_param {
	const void *private_data;
	int32_t private_data_len;
	int32_t responder_resources; /* IRD */
	int32_t initiator_depth;     /* ORD */
	int32_t reserved;
};

/* Events go to ch, with the id's cookie (the C rdma_cm_id). */
int xrnic_cm_create_id(uint64_t ch, uint64_t cookie, uint64_t *id);
int xrnic_cm_set_cookie(uint64_t id, uint64_t cookie);
int xrnic_cm_destroy_id(uint64_t id); /* no events after it returns */
/* Move an id to another channel (rdma_migrate_id). */
int xrnic_cm_migrate_id(uint64_t id, uint64_t ch);
int xrnic_cm_bind(uint64_t id, const struct sockaddr *addr);
/* Picks the source address towards dst (src may be NULL) and queues
   RDMA_CM_EVENT_ADDR_RESOLVED or ADDR_ERROR; *src_out gets it. */
int xrnic_cm_resolve_addr(uint64_t id, const struct sockaddr *src,
			  const struct sockaddr *dst,
			  struct sockaddr_storage *src_out);
int xrnic_cm_resolve_route(uint64_t id); /* queues ROUTE_RESOLVED */
int xrnic_cm_listen(uint64_t id, int backlog);
/* Connect qp (MPA initiator); queues ESTABLISHED, REJECTED (with the
   peer's private data), UNREACHABLE or CONNECT_ERROR. */
int xrnic_cm_connect(uint64_t id, uint64_t qp,
		     const struct xrnic_conn_param *p);
/* Accept a CONNECT_REQUEST id on qp; queues ESTABLISHED. */
int xrnic_cm_accept(uint64_t id, uint64_t qp,
		    const struct xrnic_conn_param *p);
int xrnic_cm_reject(uint64_t id, const void *private_data, int len);
/* Both sides then get RDMA_CM_EVENT_DISCONNECTED, once. */
int xrnic_cm_disconnect(uint64_t id);
/* The bound/resolved and peer addresses (zeroed family if unknown). */
int xrnic_cm_addrs(uint64_t id, struct sockaddr_storage *local,
		   struct sockaddr_storage *peer);

#ifdef __cplusplus
}
#endif
#endif
