/*
 * stubs.c: what xrnic does not do. Each is a real function with the
 * header's prototype that fails cleanly, by the function's own convention:
 * pointers NULL with errno, ints an errno value (or -1 with errno where
 * the man page says so). AH, multicast, MW, import, dmabuf, ECE and the
 * provider-side IBVERBS_PRIVATE_34 interface. (SRQs: srq.c.)
 */
#include <stdbool.h>
#include <string.h>

#include "internal.h"

/* ---- address handles and multicast: RC only -------------------------- */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	return EINVAL; /* no AH can exist */
}

EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
			       struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah_attr)
{
	errno = EOPNOTSUPP;
	return -1;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd,
					    struct ibv_wc *wc,
					    struct ibv_grh *grh,
					    uint8_t port_num)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
				       struct ibv_ah_attr *attr,
				       uint8_t eth_mac[ETHERNET_LL_SIZE],
				       uint16_t *vid)
{
	return EOPNOTSUPP;
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			    uint16_t lid)
{
	return EOPNOTSUPP;
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			    uint16_t lid)
{
	return EOPNOTSUPP;
}

/* ---- import (shared contexts), dmabuf, ECE, ordering --------------------- */

EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context,
				    uint32_t pd_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context,
				    uint32_t dm_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
					size_t length, uint64_t iova, int fd,
					int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
				      uint32_t flags)
{
	return 0; /* no in-order placement promised */
}

/* ---- the context ops xrnic lacks (verbs.h inlines call them) ------------- */

static struct ibv_mw *alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	errno = EOPNOTSUPP;
	return NULL;
}

static int bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		   struct ibv_mw_bind *mw_bind)
{
	return EOPNOTSUPP;
}

static int dealloc_mw(struct ibv_mw *mw)
{
	return EOPNOTSUPP;
}

static void *compat_op(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void xrnic_ibv_set_stub_ops(struct ibv_context_ops *o)
{
	o->alloc_mw = alloc_mw;
	o->bind_mw = bind_mw;
	o->dealloc_mw = dealloc_mw;
	o->_compat_alloc_pd = compat_op;
	o->_compat_dealloc_pd = compat_op;
	o->_compat_reg_mr = compat_op;
	o->_compat_rereg_mr = compat_op;
	o->_compat_dereg_mr = compat_op;
	o->_compat_create_cq = compat_op;
	o->_compat_cq_event = compat_op;
	o->_compat_resize_cq = compat_op;
	o->_compat_destroy_cq = compat_op;
	o->_compat_create_srq = compat_op;
	o->_compat_modify_srq = compat_op;
	o->_compat_query_srq = compat_op;
	o->_compat_destroy_srq = compat_op;
	o->_compat_create_qp = compat_op;
	o->_compat_query_qp = compat_op;
	o->_compat_modify_qp = compat_op;
	o->_compat_destroy_qp = compat_op;
	o->_compat_create_ah = compat_op;
	o->_compat_destroy_ah = compat_op;
	o->_compat_attach_mcast = compat_op;
	o->_compat_detach_mcast = compat_op;
	o->_compat_async_event = compat_op;
}

/* ---- IBVERBS_PRIVATE_34: the kernel-provider interface ------------------- */
/*
 * rdma-core's providers call these (driver.h, not installed); xrnic has
 * no kernel device and loads no provider, so each command fails with
 * EOPNOTSUPP and the registration hooks do nothing.
 */

#define CMD_STUB(name)                          \
	EXPORT int name(void);                  \
	EXPORT int name(void)                   \
	{                                       \
		return EOPNOTSUPP;              \
	}
CMD_STUB(execute_ioctl)
CMD_STUB(ibv_cmd_advise_mr)
CMD_STUB(ibv_cmd_alloc_dm)
CMD_STUB(ibv_cmd_alloc_mw)
CMD_STUB(ibv_cmd_alloc_pd)
CMD_STUB(ibv_cmd_attach_mcast)
CMD_STUB(ibv_cmd_close_xrcd)
CMD_STUB(ibv_cmd_create_ah)
CMD_STUB(ibv_cmd_create_counters)
CMD_STUB(ibv_cmd_create_cq)
CMD_STUB(ibv_cmd_create_cq_ex)
CMD_STUB(ibv_cmd_create_flow)
CMD_STUB(ibv_cmd_create_flow_action_esp)
CMD_STUB(ibv_cmd_create_qp)
CMD_STUB(ibv_cmd_create_qp_ex)
CMD_STUB(ibv_cmd_create_qp_ex2)
CMD_STUB(ibv_cmd_create_rwq_ind_table)
CMD_STUB(ibv_cmd_create_srq)
CMD_STUB(ibv_cmd_create_srq_ex)
CMD_STUB(ibv_cmd_create_wq)
CMD_STUB(ibv_cmd_dealloc_mw)
CMD_STUB(ibv_cmd_dealloc_pd)
CMD_STUB(ibv_cmd_dereg_mr)
CMD_STUB(ibv_cmd_destroy_ah)
CMD_STUB(ibv_cmd_destroy_counters)
CMD_STUB(ibv_cmd_destroy_cq)
CMD_STUB(ibv_cmd_destroy_flow)
CMD_STUB(ibv_cmd_destroy_flow_action)
CMD_STUB(ibv_cmd_destroy_qp)
CMD_STUB(ibv_cmd_destroy_rwq_ind_table)
CMD_STUB(ibv_cmd_destroy_srq)
CMD_STUB(ibv_cmd_destroy_wq)
CMD_STUB(ibv_cmd_detach_mcast)
CMD_STUB(ibv_cmd_free_dm)
CMD_STUB(ibv_cmd_get_context)
CMD_STUB(ibv_cmd_modify_cq)
CMD_STUB(ibv_cmd_modify_flow_action_esp)
CMD_STUB(ibv_cmd_modify_qp)
CMD_STUB(ibv_cmd_modify_qp_ex)
CMD_STUB(ibv_cmd_modify_srq)
CMD_STUB(ibv_cmd_modify_wq)
CMD_STUB(ibv_cmd_open_qp)
CMD_STUB(ibv_cmd_open_xrcd)
CMD_STUB(ibv_cmd_poll_cq)
CMD_STUB(ibv_cmd_post_recv)
CMD_STUB(ibv_cmd_post_send)
CMD_STUB(ibv_cmd_post_srq_recv)
CMD_STUB(ibv_cmd_query_context)
CMD_STUB(ibv_cmd_query_device_any)
CMD_STUB(ibv_cmd_query_mr)
CMD_STUB(ibv_cmd_query_port)
CMD_STUB(ibv_cmd_query_qp)
CMD_STUB(ibv_cmd_query_srq)
CMD_STUB(ibv_cmd_read_counters)
CMD_STUB(ibv_cmd_reg_dm_mr)
CMD_STUB(ibv_cmd_reg_dmabuf_mr)
CMD_STUB(ibv_cmd_reg_mr)
CMD_STUB(ibv_cmd_req_notify_cq)
CMD_STUB(ibv_cmd_rereg_mr)
CMD_STUB(ibv_cmd_resize_cq)
#undef CMD_STUB

EXPORT bool verbs_allow_disassociate_destroy;

EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
					    void *link);
EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link)
{
	return num_attrs;
}

EXPORT void __verbs_log(void *ctx, const char *fmt, ...);
EXPORT void __verbs_log(void *ctx, const char *fmt, ...)
{
}

EXPORT void *_verbs_init_and_alloc_context(void *device, int cmd_fd,
					   size_t alloc_size, void *context_offset,
					   uint32_t driver_id);
EXPORT void *_verbs_init_and_alloc_context(void *device, int cmd_fd,
					   size_t alloc_size, void *context_offset,
					   uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT struct ibv_context *verbs_open_device(struct ibv_device *device,
					     void *private_data);
EXPORT struct ibv_context *verbs_open_device(struct ibv_device *device,
					     void *private_data)
{
	return ibv_open_device(device);
}

EXPORT void verbs_register_driver_34(const void *ops);
EXPORT void verbs_register_driver_34(const void *ops)
{
}

EXPORT void verbs_set_ops(struct verbs_context *vctx, const void *ops);
EXPORT void verbs_set_ops(struct verbs_context *vctx, const void *ops)
{
}

EXPORT void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
			  struct ibv_comp_channel *channel, void *cq_context);
EXPORT void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
			  struct ibv_comp_channel *channel, void *cq_context)
{
}

EXPORT void verbs_uninit_context(struct verbs_context *context);
EXPORT void verbs_uninit_context(struct verbs_context *context)
{
}

/* IBVERBS_1.1's old provider hook (ibv_register_driver@IBVERBS_1.1). */
EXPORT void xrnic_ibv_register_driver_1_1(const char *name, void *init);
EXPORT void xrnic_ibv_register_driver_1_1(const char *name, void *init)
{
}
COMPAT_SYMVER(xrnic_ibv_register_driver_1_1, ibv_register_driver, IBVERBS_1.1);
