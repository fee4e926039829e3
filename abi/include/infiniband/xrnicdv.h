/*
 * xrnicdv.h: xrnic direct verbs, the RFC 7306 (RDMA Protocol Extensions)
 * operations libibverbs has no words for, in the style of
 * rdma-core's mlx5dv.h/efadv.h. Link with libibverbs.so.1 (xrnic's); the
 * symbols are under the version node XRNICDV_1.0.
 *
 * Every xrnicdv_post_* posts one work request on an RC QP of the xrnic
 * device and returns 0 or an errno value, exactly as ibv_post_send does;
 * its completion is an ordinary ibv_wc on the QP's send CQ (signalled
 * per send_flags or sq_sig_all). send_flags are IBV_SEND_SIGNALED,
 * IBV_SEND_SOLICITED and IBV_SEND_FENCE (and IBV_SEND_INLINE for
 * xrnicdv_post_write_imm64); others are EINVAL.
 */
#ifndef XRNICDV_H
#define XRNICDV_H

#include <stdbool.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True if device is an xrnic device offering these operations. */
bool xrnicdv_is_supported(struct ibv_device *device);

/*
 * Masked Fetch-and-Add (RFC 7306 section 7.1.2): adds add to the 64-bit
 * word at remote_addr, with the carry out of each bit set in add_mask not
 * propagated (add_mask 0: a plain ibv Fetch-and-Add). The original value
 * lands in result (8 bytes; result->lkey a local MR with LOCAL_WRITE).
 * Completes as IBV_WC_FETCH_ADD.
 */
int xrnicdv_post_masked_fetch_add(struct ibv_qp *qp, uint64_t wr_id,
				  const struct ibv_sge *result,
				  uint64_t remote_addr, uint32_t rkey,
				  uint64_t add, uint64_t add_mask,
				  unsigned int send_flags);

/*
 * Masked Compare-and-Swap (RFC 7306 section 7.1.1): if the bits of the
 * remote word selected by compare_mask equal those of compare, the bits
 * selected by swap_mask are replaced by swap's. All-ones masks are a plain
 * ibv Compare-and-Swap. The original value lands in result. Completes as
 * IBV_WC_COMP_SWAP.
 */
int xrnicdv_post_masked_cmp_swap(struct ibv_qp *qp, uint64_t wr_id,
				 const struct ibv_sge *result,
				 uint64_t remote_addr, uint32_t rkey,
				 uint64_t compare, uint64_t compare_mask,
				 uint64_t swap, uint64_t swap_mask,
				 unsigned int send_flags);

/*
 * RDMA Write followed by Immediate Data carrying all 64 bits of imm
 * (RFC 7306 section 8). The peer consumes a receive and completes it as
 * IBV_WC_RECV_RDMA_WITH_IMM; libibverbs' ibv_wc shows it the low 32 bits
 * of imm, in network order, in wc.imm_data. Completes as
 * IBV_WC_RDMA_WRITE.
 */
int xrnicdv_post_write_imm64(struct ibv_qp *qp, uint64_t wr_id,
			     const struct ibv_sge *sg_list, int num_sge,
			     uint64_t remote_addr, uint32_t rkey, uint64_t imm,
			     unsigned int send_flags);

/*
 * Immediate Data alone (RFC 7306 section 8: the Immediate Data message
 * without a preceding Write): 64 bits to the peer, which consumes a
 * receive (a zero-SGE receive is enough) and sees the low 32 bits as
 * for xrnicdv_post_write_imm64.
 */
int xrnicdv_post_imm(struct ibv_qp *qp, uint64_t wr_id, uint64_t imm,
		     unsigned int send_flags);

#ifdef __cplusplus
}
#endif
#endif
