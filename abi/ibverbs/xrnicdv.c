/*
 * xrnicdv.c: the direct verbs of infiniband/xrnicdv.h: one engine WR
 * each, built on the stack, as ibv_post_send builds them.
 */
#include <infiniband/xrnicdv.h>

#include "internal.h"

#define DV_FLAGS (IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_FENCE)

static uint32_t dv_flags(unsigned int f)
{
	return (f & IBV_SEND_SIGNALED ? XRNIC_SEND_SIGNALED : 0) |
	       (f & IBV_SEND_SOLICITED ? XRNIC_SEND_SOLICITED : 0) |
	       (f & IBV_SEND_FENCE ? XRNIC_SEND_FENCE : 0) |
	       (f & IBV_SEND_INLINE ? XRNIC_SEND_INLINE : 0);
}

static int post1(struct ibv_qp *qp, const struct xrnic_send_wr *w)
{
	struct xqp *x = fast_xqp(qp);
	int posted = 0;

	if (!x)
		return EINVAL;
	return xe.post_send(x->h, w, 1, &posted);
}

EXPORT bool xrnicdv_is_supported(struct ibv_device *device)
{
	static int masked = -1;
	struct xrnic_device_attr a;

	if (device != &xrnic_device)
		return false;
	if (__atomic_load_n(&masked, __ATOMIC_ACQUIRE) < 0 &&
	    xrnic_ibv_attr(&a) == 0)
		__atomic_store_n(&masked, a.masked_atomics, __ATOMIC_RELEASE);
	return __atomic_load_n(&masked, __ATOMIC_ACQUIRE) == 1;
}

EXPORT int xrnicdv_post_masked_fetch_add(struct ibv_qp *qp, uint64_t wr_id,
					 const struct ibv_sge *result,
					 uint64_t remote_addr, uint32_t rkey,
					 uint64_t add, uint64_t add_mask,
					 unsigned int send_flags)
{
	struct xrnic_send_wr w = {
		.wr_id = wr_id,
		.opcode = XRNIC_WR_FETCH_ADD,
		.flags = dv_flags(send_flags),
		.sg_list = (const struct xrnic_sge *)result,
		.num_sge = 1,
		.rkey = rkey,
		.remote_addr = remote_addr,
		.compare_add = add,
		.add_mask = add_mask,
	};

	if (!result || (send_flags & ~(unsigned int)DV_FLAGS))
		return EINVAL;
	return post1(qp, &w);
}

EXPORT int xrnicdv_post_masked_cmp_swap(struct ibv_qp *qp, uint64_t wr_id,
					const struct ibv_sge *result,
					uint64_t remote_addr, uint32_t rkey,
					uint64_t compare, uint64_t compare_mask,
					uint64_t swap, uint64_t swap_mask,
					unsigned int send_flags)
{
	struct xrnic_send_wr w = {
		.wr_id = wr_id,
		.opcode = XRNIC_WR_CMP_SWAP,
		.flags = dv_flags(send_flags),
		.sg_list = (const struct xrnic_sge *)result,
		.num_sge = 1,
		.rkey = rkey,
		.remote_addr = remote_addr,
		.compare_add = compare,
		.swap = swap,
		.compare_mask = compare_mask,
		.swap_mask = swap_mask,
	};

	if (!result || (send_flags & ~(unsigned int)DV_FLAGS))
		return EINVAL;
	return post1(qp, &w);
}

EXPORT int xrnicdv_post_write_imm64(struct ibv_qp *qp, uint64_t wr_id,
				    const struct ibv_sge *sg_list, int num_sge,
				    uint64_t remote_addr, uint32_t rkey,
				    uint64_t imm, unsigned int send_flags)
{
	struct xrnic_send_wr w = {
		.wr_id = wr_id,
		.opcode = XRNIC_WR_WRITE_WITH_IMM,
		.flags = dv_flags(send_flags),
		.sg_list = (const struct xrnic_sge *)sg_list,
		.num_sge = num_sge,
		.rkey = rkey,
		.remote_addr = remote_addr,
		.imm = imm,
	};

	if (num_sge < 0 || (num_sge && !sg_list) ||
	    (send_flags & ~(unsigned int)(DV_FLAGS | IBV_SEND_INLINE)))
		return EINVAL;
	return post1(qp, &w);
}

EXPORT int xrnicdv_post_imm(struct ibv_qp *qp, uint64_t wr_id, uint64_t imm,
			    unsigned int send_flags)
{
	struct xrnic_send_wr w = {
		.wr_id = wr_id,
		.opcode = XRNIC_WR_IMM,
		.flags = dv_flags(send_flags),
		.imm = imm,
	};

	if (send_flags & ~(unsigned int)DV_FLAGS)
		return EINVAL;
	return post1(qp, &w);
}
