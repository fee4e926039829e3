/*
 * libefa.so.1 stub for xrnic: every function (and version node) Debian
 * bookworm's libefa exports, with efadv.h's prototypes, answering "not an
 * EFA device". perftest calls efadv_* only for SRD QPs (-c SRD), which
 * xrnic0 does not offer. Pointers: NULL with errno EOPNOTSUPP; ints:
 * EOPNOTSUPP (efadv's 0-or-errno convention), errno set too.
 */
#include <errno.h>
#include <stddef.h>
#include <infiniband/efadv.h>

#define XSTUB __attribute__((visibility("default")))

XSTUB struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_cq_ex *efadv_create_cq(struct ibv_context *a0, struct ibv_cq_init_attr_ex *a1, struct efadv_cq_init_attr *a2, uint32_t a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_qp *efadv_create_driver_qp(struct ibv_pd *a0, struct ibv_qp_init_attr *a1, uint32_t a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_qp *efadv_create_qp_ex(struct ibv_context *a0, struct ibv_qp_init_attr_ex *a1, struct efadv_qp_init_attr *a2, uint32_t a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int efadv_query_ah(struct ibv_ah *a0, struct efadv_ah_attr *a1, uint32_t a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int efadv_query_device(struct ibv_context *a0, struct efadv_device_attr *a1, uint32_t a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
