/*
 * xrnic_engine_fns.h: every function of xrnic_engine.h, once, for the C
 * libraries that load libxrnic.so with dlopen (abi/ibverbs/engine.c) and
 * call it through a table of pointers. abi/check-engine-fns.sh checks that
 * this list names every function the header declares; engine.c checks
 * each signature against the header's declaration at compile time.
 *
 * XRNIC_FN(kind, ret, name, params, args) for xrnic_<name>. kind says how
 * the function reports a failure when the engine is missing or unusable:
 *   E  returns a positive errno
 *   N  returns a negative errno (xrnic_poll_cq)
 *   D  returns -1, "no such step" (xrnic_drive)
 *   L  copies the text of the failure (xrnic_last_error)
 *   V  returns nothing
 * Not for applications.
 */
XRNIC_FN(E, int, open, (void), ())
XRNIC_FN(E, int, close, (void), ())
XRNIC_FN(L, int, last_error, (char *buf, int len), (buf, len))
XRNIC_FN(E, int, query_device, (struct xrnic_device_attr *attr), (attr))
XRNIC_FN(E, int, chan_create, (int *fd, uint64_t *ch), (fd, ch))
XRNIC_FN(E, int, chan_destroy, (uint64_t ch), (ch))
XRNIC_FN(E, int, chan_get, (uint64_t ch, struct xrnic_event *ev), (ch, ev))
XRNIC_FN(E, int, alloc_pd, (uint64_t *pd), (pd))
XRNIC_FN(E, int, dealloc_pd, (uint64_t pd), (pd))
XRNIC_FN(E, int, reg_mr,
	 (uint64_t pd, void *addr, uint64_t len, uint64_t iova, int access,
	  uint64_t *mr, uint32_t *stag),
	 (pd, addr, len, iova, access, mr, stag))
XRNIC_FN(E, int, dereg_mr, (uint64_t mr), (mr))
XRNIC_FN(E, int, create_cq,
	 (int cqe, uint64_t ch, uint64_t cookie, uint64_t *cq, int *depth),
	 (cqe, ch, cookie, cq, depth))
XRNIC_FN(E, int, destroy_cq, (uint64_t cq), (cq))
XRNIC_FN(N, int, poll_cq, (uint64_t cq, int n, struct xrnic_wc *wc),
	 (cq, n, wc))
XRNIC_FN(E, int, cq_count_pushes,
	 (uint64_t cq, struct xrnic_push_counter *c), (cq, c))
XRNIC_FN(E, int, cq_resize, (uint64_t cq, int cqe, int *actual),
	 (cq, cqe, actual))
XRNIC_FN(D, int, drive, (uint64_t cq), (cq))
XRNIC_FN(V, void, restore_sigmask, (void), ())
XRNIC_FN(E, int, req_notify_cq, (uint64_t cq, int solicited_only),
	 (cq, solicited_only))
XRNIC_FN(E, int, create_qp,
	 (uint64_t pd, struct xrnic_qp_init *init, uint64_t *qp, uint32_t *qpn),
	 (pd, init, qp, qpn))
XRNIC_FN(E, int, destroy_qp, (uint64_t qp), (qp))
XRNIC_FN(E, int, qp_state, (uint64_t qp, int *state), (qp, state))
XRNIC_FN(E, int, qp_to_error, (uint64_t qp), (qp))
XRNIC_FN(E, int, post_send,
	 (uint64_t qp, const struct xrnic_send_wr *wr, int n, int *posted),
	 (qp, wr, n, posted))
XRNIC_FN(E, int, post_recv,
	 (uint64_t qp, const struct xrnic_recv_wr *wr, int n, int *posted),
	 (qp, wr, n, posted))
XRNIC_FN(E, int, create_srq,
	 (uint64_t pd, struct xrnic_srq_init *init, uint64_t *srq),
	 (pd, init, srq))
XRNIC_FN(E, int, destroy_srq, (uint64_t srq), (srq))
XRNIC_FN(E, int, modify_srq,
	 (uint64_t srq, const struct xrnic_srq_attr *attr, int mask),
	 (srq, attr, mask))
XRNIC_FN(E, int, query_srq, (uint64_t srq, struct xrnic_srq_attr *attr),
	 (srq, attr))
XRNIC_FN(E, int, post_srq_recv,
	 (uint64_t srq, const struct xrnic_recv_wr *wr, int n, int *posted),
	 (srq, wr, n, posted))
XRNIC_FN(E, int, cm_create_id, (uint64_t ch, uint64_t cookie, uint64_t *id),
	 (ch, cookie, id))
XRNIC_FN(E, int, cm_set_cookie, (uint64_t id, uint64_t cookie), (id, cookie))
XRNIC_FN(E, int, cm_destroy_id, (uint64_t id), (id))
XRNIC_FN(E, int, cm_migrate_id, (uint64_t id, uint64_t ch), (id, ch))
XRNIC_FN(E, int, cm_bind, (uint64_t id, const struct sockaddr *addr),
	 (id, addr))
XRNIC_FN(E, int, cm_resolve_addr,
	 (uint64_t id, const struct sockaddr *src, const struct sockaddr *dst,
	  struct sockaddr_storage *src_out),
	 (id, src, dst, src_out))
XRNIC_FN(E, int, cm_resolve_route, (uint64_t id), (id))
XRNIC_FN(E, int, cm_listen, (uint64_t id, int backlog), (id, backlog))
XRNIC_FN(E, int, cm_connect,
	 (uint64_t id, uint64_t qp, const struct xrnic_conn_param *p),
	 (id, qp, p))
XRNIC_FN(E, int, cm_accept,
	 (uint64_t id, uint64_t qp, const struct xrnic_conn_param *p),
	 (id, qp, p))
XRNIC_FN(E, int, cm_reject, (uint64_t id, const void *private_data, int len),
	 (id, private_data, len))
XRNIC_FN(E, int, cm_disconnect, (uint64_t id), (id))
XRNIC_FN(E, int, cm_addrs,
	 (uint64_t id, struct sockaddr_storage *local,
	  struct sockaddr_storage *peer),
	 (id, local, peer))
