/*
 * libmlx5.so.1 stub for xrnic: every function (and version node) Debian
 * bookworm's libmlx5 exports, with mlx5dv.h's prototypes, answering "not
 * an mlx5 device". perftest links libmlx5 and libefa unconditionally and
 * calls mlx5dv_* only for DC QPs (-c DC) or --aes_xts, which xrnic0
 * cannot serve: those fail with EOPNOTSUPP and perftest reports it.
 *
 * Conventions: pointers come back NULL with errno EOPNOTSUPP; int
 * functions return EOPNOTSUPP (mlx5dv's 0-or-errno convention) and set
 * errno; ssize_t and fd returns are -1 with errno; void ones (which free
 * objects that can never exist here) do nothing; mlx5dv_is_supported is
 * false. No function dereferences its arguments.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <infiniband/mlx5dv.h>

#define XSTUB __attribute__((visibility("default")))

/* mlx5dv_init_obj exists in two versions (the old one is MLX5_1.0). */
__asm__(".symver mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
__asm__(".symver mlx5dv_init_obj_1_2, mlx5dv_init_obj@@MLX5_1.2");

XSTUB int _mlx5dv_mkey_check(struct mlx5dv_mkey *a0, struct mlx5dv_mkey_err *a1, size_t a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int _mlx5dv_query_port(struct ibv_context *a0, uint32_t a1, struct mlx5_ib_uapi_query_port *a2, size_t a3)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct ibv_dm *mlx5dv_alloc_dm(struct ibv_context *a0, struct ibv_alloc_dm_attr *a1, struct mlx5dv_alloc_dm_attr *a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_var *mlx5dv_alloc_var(struct ibv_context *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_cq_ex *mlx5dv_create_cq(struct ibv_context *a0, struct ibv_cq_init_attr_ex *a1, struct mlx5dv_cq_init_attr *a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_flow *mlx5dv_create_flow(struct mlx5dv_flow_matcher *a0, struct mlx5dv_flow_match_parameters *a1, size_t a2, struct mlx5dv_flow_action_attr *a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_flow_action *mlx5dv_create_flow_action_esp(struct ibv_context *a0, struct ibv_flow_action_esp_attr *a1, struct mlx5dv_flow_action_esp *a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_flow_action *mlx5dv_create_flow_action_modify_header(struct ibv_context *a0, size_t a1, uint64_t *a2, enum mlx5_ib_uapi_flow_table_type a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_flow_action *mlx5dv_create_flow_action_packet_reformat(struct ibv_context *a0, size_t a1, void *a2, enum mlx5_ib_uapi_flow_action_packet_reformat_type a3, enum mlx5_ib_uapi_flow_table_type a4)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_flow_matcher *mlx5dv_create_flow_matcher(struct ibv_context *a0, struct mlx5dv_flow_matcher_attr *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_qp *mlx5dv_create_qp(struct ibv_context *a0, struct ibv_qp_init_attr_ex *a1, struct mlx5dv_qp_init_attr *a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_steering_anchor *mlx5dv_create_steering_anchor(struct ibv_context *a0, struct mlx5dv_steering_anchor_attr *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct ibv_wq *mlx5dv_create_wq(struct ibv_context *a0, struct ibv_wq_init_attr *a1, struct mlx5dv_wq_init_attr *a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_crypto_login(struct ibv_context *a0, struct mlx5dv_crypto_login_attr *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_crypto_login_obj *mlx5dv_crypto_login_create(struct ibv_context *a0, struct mlx5dv_crypto_login_attr_ex *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_crypto_login_destroy(struct mlx5dv_crypto_login_obj *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_crypto_login_query(struct mlx5dv_crypto_login_obj *a0, struct mlx5dv_crypto_login_query_attr *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_crypto_login_query_state(struct ibv_context *a0, enum mlx5dv_crypto_login_state *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_crypto_logout(struct ibv_context *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dci_stream_id_reset(struct ibv_qp *a0, uint16_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *a0, struct mlx5dv_dek_init_attr *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_dek_destroy(struct mlx5dv_dek *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dek_query(struct mlx5dv_dek *a0, struct mlx5dv_dek_attr *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_destroy_flow_matcher(struct mlx5dv_flow_matcher *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_destroy_mkey(struct mlx5dv_mkey *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_destroy_steering_anchor(struct mlx5dv_steering_anchor *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_devx_msi_vector *mlx5dv_devx_alloc_msi_vector(struct ibv_context *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_devx_cq_modify(struct ibv_cq *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_cq_query(struct ibv_cq *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_devx_cmd_comp *mlx5dv_devx_create_cmd_comp(struct ibv_context *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_devx_eq *mlx5dv_devx_create_eq(struct ibv_context *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_devx_event_channel *mlx5dv_devx_create_event_channel(struct ibv_context *a0, enum mlx5_ib_uapi_devx_create_event_channel_flags a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB void mlx5dv_devx_destroy_cmd_comp(struct mlx5dv_devx_cmd_comp *a0)
{
}

XSTUB int mlx5dv_devx_destroy_eq(struct mlx5dv_devx_eq *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB void mlx5dv_devx_destroy_event_channel(struct mlx5dv_devx_event_channel *a0)
{
}

XSTUB int mlx5dv_devx_free_msi_vector(struct mlx5dv_devx_msi_vector *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *a0)
{
}

XSTUB int mlx5dv_devx_general_cmd(struct ibv_context *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_get_async_cmd_comp(struct mlx5dv_devx_cmd_comp *a0, struct mlx5_ib_uapi_devx_async_cmd_hdr *a1, size_t a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB ssize_t mlx5dv_devx_get_event(struct mlx5dv_devx_event_channel *a0, struct mlx5_ib_uapi_devx_async_event_hdr *a1, size_t a2)
{
	errno = EOPNOTSUPP;
	return -1;
}

XSTUB int mlx5dv_devx_ind_tbl_modify(struct ibv_rwq_ind_table *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_ind_tbl_query(struct ibv_rwq_ind_table *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_obj_query_async(struct mlx5dv_devx_obj *a0, const void *a1, size_t a2, size_t a3, uint64_t a4, struct mlx5dv_devx_cmd_comp *a5)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_qp_modify(struct ibv_qp *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_qp_query(struct ibv_qp *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_query_eqn(struct ibv_context *a0, uint32_t a1, uint32_t *a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_srq_modify(struct ibv_srq *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_srq_query(struct ibv_srq *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_subscribe_devx_event(struct mlx5dv_devx_event_channel *a0, struct mlx5dv_devx_obj *a1, uint16_t a2, uint16_t *a3, uint64_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_subscribe_devx_event_fd(struct mlx5dv_devx_event_channel *a0, int a1, struct mlx5dv_devx_obj *a2, uint16_t a3)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(struct ibv_context *a0, void *a1, size_t a2, uint32_t a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(struct ibv_context *a0, struct mlx5dv_devx_umem_in *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_devx_wq_modify(struct ibv_wq *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_devx_wq_query(struct ibv_wq *a0, const void *a1, size_t a2, void *a3, size_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB void *mlx5dv_dm_map_op_addr(struct ibv_dm *a0, uint8_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_aso(struct mlx5dv_dr_domain *a0, struct mlx5dv_devx_obj *a1, uint32_t a2, uint32_t a3, uint8_t a4)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_default_miss(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_array(struct mlx5dv_dr_domain *a0, size_t a1, struct mlx5dv_dr_action_dest_attr **a2)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_devx_tir(struct mlx5dv_devx_obj *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_ib_port(struct mlx5dv_dr_domain *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_ibv_qp(struct ibv_qp *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_root_table(struct mlx5dv_dr_table *a0, uint16_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_table(struct mlx5dv_dr_table *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_vport(struct mlx5dv_dr_domain *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_drop(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_flow_counter(struct mlx5dv_devx_obj *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_flow_meter(struct mlx5dv_dr_flow_meter_attr *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_flow_sampler(struct mlx5dv_dr_flow_sampler_attr *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_modify_header(struct mlx5dv_dr_domain *a0, uint32_t a1, size_t a2, __be64 *a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_packet_reformat(struct mlx5dv_dr_domain *a0, uint32_t a1, enum mlx5_ib_uapi_flow_action_packet_reformat_type a2, size_t a3, void *a4)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_pop_vlan(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_push_vlan(struct mlx5dv_dr_domain *a0, __be32 a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_dr_action *mlx5dv_dr_action_create_tag(uint32_t a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_dr_action_destroy(struct mlx5dv_dr_action *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dr_action_modify_aso(struct mlx5dv_dr_action *a0, uint32_t a1, uint32_t a2, uint8_t a3)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dr_action_modify_flow_meter(struct mlx5dv_dr_action *a0, struct mlx5dv_dr_flow_meter_attr *a1, __be64 a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dr_aso_other_domain_link(struct mlx5dv_devx_obj *a0, struct mlx5dv_dr_domain *a1, struct mlx5dv_dr_domain *a2, uint32_t a3, uint8_t a4)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dr_aso_other_domain_unlink(struct mlx5dv_devx_obj *a0, struct mlx5dv_dr_domain *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB void mlx5dv_dr_domain_allow_duplicate_rules(struct mlx5dv_dr_domain *a0, _Bool a1)
{
}

XSTUB struct mlx5dv_dr_domain *mlx5dv_dr_domain_create(struct ibv_context *a0, enum mlx5dv_dr_domain_type a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_dr_domain_destroy(struct mlx5dv_dr_domain *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB void mlx5dv_dr_domain_set_reclaim_device_memory(struct mlx5dv_dr_domain *a0, _Bool a1)
{
}

XSTUB int mlx5dv_dr_domain_sync(struct mlx5dv_dr_domain *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_dr_matcher *mlx5dv_dr_matcher_create(struct mlx5dv_dr_table *a0, uint16_t a1, uint8_t a2, struct mlx5dv_flow_match_parameters *a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_dr_matcher_destroy(struct mlx5dv_dr_matcher *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dr_matcher_set_layout(struct mlx5dv_dr_matcher *a0, struct mlx5dv_dr_matcher_layout *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_dr_rule *mlx5dv_dr_rule_create(struct mlx5dv_dr_matcher *a0, struct mlx5dv_flow_match_parameters *a1, size_t a2, struct mlx5dv_dr_action **a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_dr_rule_destroy(struct mlx5dv_dr_rule *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_dr_table *mlx5dv_dr_table_create(struct mlx5dv_dr_domain *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_dr_table_destroy(struct mlx5dv_dr_table *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dump_dr_domain(FILE *a0, struct mlx5dv_dr_domain *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dump_dr_matcher(FILE *a0, struct mlx5dv_dr_matcher *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dump_dr_rule(FILE *a0, struct mlx5dv_dr_rule *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_dump_dr_table(FILE *a0, struct mlx5dv_dr_table *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB void mlx5dv_free_var(struct mlx5dv_var *a0)
{
}

XSTUB int mlx5dv_get_clock_info(struct ibv_context *a0, struct mlx5dv_clock_info *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct ibv_device **mlx5dv_get_vfio_device_list(struct mlx5dv_vfio_context_attr *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_init_obj_1_0(struct mlx5dv_obj *a0, uint64_t a1);
int mlx5dv_init_obj_1_0(struct mlx5dv_obj *a0, uint64_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_init_obj_1_2(struct mlx5dv_obj *a0, uint64_t a1);
int mlx5dv_init_obj_1_2(struct mlx5dv_obj *a0, uint64_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB bool mlx5dv_is_supported(struct ibv_device *a0)
{
	return false;
}

XSTUB int mlx5dv_map_ah_to_qp(struct ibv_ah *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_modify_qp_lag_port(struct ibv_qp *a0, uint8_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_modify_qp_sched_elem(struct ibv_qp *a0, const struct mlx5dv_sched_leaf *a1, const struct mlx5dv_sched_leaf *a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_modify_qp_udp_sport(struct ibv_qp *a0, uint16_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct ibv_context *mlx5dv_open_device(struct ibv_device *a0, struct mlx5dv_context_attr *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB struct mlx5dv_pp *mlx5dv_pp_alloc(struct ibv_context *a0, size_t a1, const void *a2, uint32_t a3)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB void mlx5dv_pp_free(struct mlx5dv_pp *a0)
{
}

XSTUB int mlx5dv_qp_cancel_posted_send_wrs(struct mlx5dv_qp_ex *a0, uint64_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *a0)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_query_device(struct ibv_context *a0, struct mlx5dv_context *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_query_qp_lag_port(struct ibv_qp *a0, uint8_t *a1, uint8_t *a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_reserved_qpn_alloc(struct ibv_context *a0, uint32_t *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_reserved_qpn_dealloc(struct ibv_context *a0, uint32_t a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_sched_leaf *mlx5dv_sched_leaf_create(struct ibv_context *a0, const struct mlx5dv_sched_attr *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_sched_leaf_destroy(struct mlx5dv_sched_leaf *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_sched_leaf_modify(struct mlx5dv_sched_leaf *a0, const struct mlx5dv_sched_attr *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB struct mlx5dv_sched_node *mlx5dv_sched_node_create(struct ibv_context *a0, const struct mlx5dv_sched_attr *a1)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XSTUB int mlx5dv_sched_node_destroy(struct mlx5dv_sched_node *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_sched_node_modify(struct mlx5dv_sched_node *a0, const struct mlx5dv_sched_attr *a1)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_set_context_attr(struct ibv_context *a0, enum mlx5dv_set_ctx_attr_type a1, void *a2)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

XSTUB int mlx5dv_vfio_get_events_fd(struct ibv_context *a0)
{
	errno = EOPNOTSUPP;
	return -1;
}

XSTUB int mlx5dv_vfio_process_events(struct ibv_context *a0)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
