/*
 * xrnic_private.h: what libibverbs.so.1 (abi/ibverbs) exports for
 * librdmacm.so.1 (abi/rdmacm) and the stub providers, under the version
 * node XRNIC_PRIVATE_1. Not for applications.
 */
#ifndef XRNIC_PRIVATE_H
#define XRNIC_PRIVATE_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include "xrnic_engine.h"

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

/* The engine's functions, as libibverbs.so.1 calls them: a member per
   function of xrnic_engine.h (xrnic_engine_fns.h). Until libxrnic.so is
   loaded each member loads it first (dlopen, once); if it cannot be
   loaded, or this process forked after it was, each fails cleanly. */
struct xrnic_engine {
#define XRNIC_FN(kind, ret, name, params, args) ret(*name) params;
#include "xrnic_engine_fns.h"
#undef XRNIC_FN
};
/* libibverbs.so.1's table (one per process), for librdmacm. */
struct xrnic_engine *xrnic_ibv_engine(void);
/* 0 if the engine can be used (loading it if need be); else the errno
   (EIO: this process forked after loading it; ENOSYS: libxrnic.so cannot
   be loaded), having said why on stderr once. Call it before waiting on
   an fd the engine owns: a forked child must not take the parent's
   events. */
int xrnic_ibv_engine_check(void);

#ifdef __cplusplus
}
#endif
#endif
