/*
 * xrnic_private.h: what libibverbs.so.1 (abi/ibverbs) exports for
 * librdmacm.so.1 (abi/rdmacm) and the stub providers, under the version
 * node XRNIC_PRIVATE_1. Not for applications.
 */
#ifndef XRNIC_PRIVATE_H
#define XRNIC_PRIVATE_H

#include <stdint.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The engine handles behind our ibverbs objects (0 if the object is not
   one of ours). */
uint64_t xrnic_ibv_pd_handle(struct ibv_pd *pd);
uint64_t xrnic_ibv_qp_handle(struct ibv_qp *qp);
/* 1 if ctx is an xrnic context. */
int xrnic_ibv_is_ours(struct ibv_context *ctx);
/* Prints "xrnic: <what> failed: <engine error text>" to stderr (once per
   distinct text) and returns err, for errno. */
int xrnic_ibv_report(const char *what, int err);

#ifdef __cplusplus
}
#endif
#endif
