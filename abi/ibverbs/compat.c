/*
 * compat.c: the IBVERBS_1.0 versions of the names IBVERBS_1.1 redefined
 * (name@IBVERBS_1.0 beside name@@IBVERBS_1.1). They took the libibverbs
 * 1.0 structures (struct ibv_device_1_0 and the like), which xrnic does
 * not build: a binary linked before 2006 gets no device and clean errors,
 * never a misread structure.
 */
#include <stdio.h>

#include "internal.h"

#define C10_PTR(name)                                               \
	EXPORT void *xrnic_10_##name(void);                         \
	EXPORT void *xrnic_10_##name(void)                          \
	{                                                           \
		errno = EOPNOTSUPP;                                 \
		return NULL;                                        \
	}                                                           \
	COMPAT_SYMVER(xrnic_10_##name, name, IBVERBS_1.0);
#define C10_INT(name)                                               \
	EXPORT int xrnic_10_##name(void);                           \
	EXPORT int xrnic_10_##name(void)                            \
	{                                                           \
		return EOPNOTSUPP;                                  \
	}                                                           \
	COMPAT_SYMVER(xrnic_10_##name, name, IBVERBS_1.0);
#define C10_NEG(name) /* 0 or -1 with errno */                      \
	EXPORT int xrnic_10_##name(void);                           \
	EXPORT int xrnic_10_##name(void)                            \
	{                                                           \
		errno = EOPNOTSUPP;                                 \
		return -1;                                          \
	}                                                           \
	COMPAT_SYMVER(xrnic_10_##name, name, IBVERBS_1.0);
#define C10_VOID(name)                                              \
	EXPORT void xrnic_10_##name(void);                          \
	EXPORT void xrnic_10_##name(void)                           \
	{                                                           \
	}                                                           \
	COMPAT_SYMVER(xrnic_10_##name, name, IBVERBS_1.0);

EXPORT struct ibv_device **xrnic_10_ibv_get_device_list(int *num);
EXPORT struct ibv_device **xrnic_10_ibv_get_device_list(int *num)
{
	static int said;

	if (!said++)
		fprintf(stderr, "xrnic: this program uses the libibverbs 1.0 "
				"ABI (IBVERBS_1.0), which xrnic does not "
				"provide; rebuild it against rdma-core\n");
	if (num)
		*num = 0;
	errno = EOPNOTSUPP;
	return NULL;
}
COMPAT_SYMVER(xrnic_10_ibv_get_device_list, ibv_get_device_list, IBVERBS_1.0);

C10_VOID(ibv_free_device_list)
C10_PTR(ibv_get_device_name)
EXPORT uint64_t xrnic_10_ibv_get_device_guid(void);
EXPORT uint64_t xrnic_10_ibv_get_device_guid(void)
{
	errno = EOPNOTSUPP;
	return 0;
}
COMPAT_SYMVER(xrnic_10_ibv_get_device_guid, ibv_get_device_guid, IBVERBS_1.0);
C10_PTR(ibv_open_device)
C10_INT(ibv_close_device)
C10_NEG(ibv_get_async_event)
C10_VOID(ibv_ack_async_event)
C10_INT(ibv_query_device)
C10_INT(ibv_query_port)
C10_NEG(ibv_query_gid)
C10_NEG(ibv_query_pkey)
C10_PTR(ibv_alloc_pd)
C10_INT(ibv_dealloc_pd)
C10_PTR(ibv_reg_mr)
C10_INT(ibv_dereg_mr)
C10_PTR(ibv_create_cq)
C10_INT(ibv_resize_cq)
C10_INT(ibv_destroy_cq)
C10_NEG(ibv_get_cq_event)
C10_VOID(ibv_ack_cq_events)
C10_PTR(ibv_create_srq)
C10_INT(ibv_modify_srq)
C10_INT(ibv_query_srq)
C10_INT(ibv_destroy_srq)
C10_PTR(ibv_create_qp)
C10_INT(ibv_query_qp)
C10_INT(ibv_modify_qp)
C10_INT(ibv_destroy_qp)
C10_PTR(ibv_create_ah)
C10_INT(ibv_destroy_ah)
C10_INT(ibv_attach_mcast)
C10_INT(ibv_detach_mcast)
