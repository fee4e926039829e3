/*
 * util.c: the pointer and serial tables, the process's xrnic device and
 * the once-per-text messages of librdmacm for xrnic.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

pthread_mutex_t xcm_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t xcm_acked = PTHREAD_COND_INITIALIZER;

/* Open addressing with linear probing and backward-shift deletion; keys
   are never 0 (no object is at address 0 and serials start at 1). */
struct xtab {
	uint64_t *keys;
	uintptr_t *vals;
	size_t cap, n; /* cap is a power of two, n < cap/2 */
};

static struct xtab tabs[2];

static size_t slot(uint64_t k, size_t cap)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static int grow(struct xtab *t)
{
	size_t ncap = t->cap ? t->cap * 2 : 64, i;
	uint64_t *nk = calloc(ncap, sizeof(*nk));
	uintptr_t *nv = calloc(ncap, sizeof(*nv));

	if (!nk || !nv) {
		free(nk);
		free(nv);
		return ENOMEM;
	}
	for (i = 0; i < t->cap; i++) {
		size_t j;

		if (!t->keys[i])
			continue;
		for (j = slot(t->keys[i], ncap); nk[j]; j = (j + 1) & (ncap - 1))
			;
		nk[j] = t->keys[i];
		nv[j] = t->vals[i];
	}
	free(t->keys);
	free(t->vals);
	t->keys = nk;
	t->vals = nv;
	t->cap = ncap;
	return 0;
}

/* Called with xcm_lock held. */
int xtab_put(uint64_t key, uintptr_t val, int which)
{
	struct xtab *t = &tabs[which];
	size_t i;

	if ((t->n + 1) * 2 > t->cap && grow(t))
		return ENOMEM;
	for (i = slot(key, t->cap); t->keys[i]; i = (i + 1) & (t->cap - 1))
		if (t->keys[i] == key)
			break;
	if (!t->keys[i])
		t->n++;
	t->keys[i] = key;
	t->vals[i] = val;
	return 0;
}

uintptr_t xtab_get(uint64_t key, int which)
{
	struct xtab *t = &tabs[which];
	size_t i;

	if (!t->cap || !key)
		return 0;
	for (i = slot(key, t->cap); t->keys[i]; i = (i + 1) & (t->cap - 1))
		if (t->keys[i] == key)
			return t->vals[i];
	return 0;
}

void xtab_del(uint64_t key, int which)
{
	struct xtab *t = &tabs[which];
	size_t i, j;

	if (!t->cap || !key)
		return;
	for (i = slot(key, t->cap); t->keys[i] != key; i = (i + 1) & (t->cap - 1))
		if (!t->keys[i])
			return;
	t->keys[i] = 0;
	t->n--;
	/* Shift later members of the run back so lookups never stop early. */
	for (j = (i + 1) & (t->cap - 1); t->keys[j]; j = (j + 1) & (t->cap - 1)) {
		size_t h = slot(t->keys[j], t->cap);

		if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
			t->keys[i] = t->keys[j];
			t->vals[i] = t->vals[j];
			t->keys[j] = 0;
			i = j;
		}
	}
}

/* ---- the device ------------------------------------------------------ */

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context *dev_ctx;
static struct ibv_pd *dev_pd;
static int dev_ird = 0xff, dev_ord = 0xff;

/* The xrnic context, opened on first use and kept for the process (as
   librdmacm keeps its devices while the library is loaded). */
struct ibv_context *xcm_device(void)
{
	struct ibv_device **list;
	struct ibv_context *ret;
	int i, n = 0, err = ENODEV;

	pthread_mutex_lock(&dev_lock);
	if (dev_ctx)
		goto out;
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n && !dev_ctx; i++) {
		struct ibv_context *c = ibv_open_device(list[i]);
		struct ibv_device_attr a;

		if (!c)
			continue;
		if (!xrnic_ibv_is_ours(c)) {
			ibv_close_device(c);
			continue;
		}
		dev_ctx = c;
		if (!ibv_query_device(c, &a)) {
			dev_ird = a.max_qp_rd_atom;
			dev_ord = a.max_qp_init_rd_atom;
		}
	}
	if (list)
		ibv_free_device_list(list);
	err = errno ? errno : ENODEV;
out:
	ret = dev_ctx;
	pthread_mutex_unlock(&dev_lock);
	if (!ret) {
		/* (xcm_say takes dev_lock.) The engine's absence or a fork
		   has been said by libibverbs. */
		if (!xrnic_ibv_engine_check())
			xcm_say("rdma_cm: no xrnic device could be opened (ibv_open_device failed: %s); "
				"check that LD_LIBRARY_PATH names xrnic's bin/lib and XRNIC_* settings",
				strerror(err));
		errno = err == EIO ? EIO : ENODEV;
	}
	return ret;
}

struct ibv_pd *xcm_default_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd;

	pthread_mutex_lock(&dev_lock);
	if (ctx != dev_ctx) {
		pthread_mutex_unlock(&dev_lock);
		errno = EINVAL;
		return NULL;
	}
	if (!dev_pd)
		dev_pd = ibv_alloc_pd(ctx);
	pd = dev_pd;
	pthread_mutex_unlock(&dev_lock);
	if (!pd && !errno)
		errno = ENOMEM;
	return pd;
}

void xcm_limits(int *max_ird, int *max_ord)
{
	pthread_mutex_lock(&dev_lock);
	*max_ird = dev_ird;
	*max_ord = dev_ord;
	pthread_mutex_unlock(&dev_lock);
}

/* ---- messages -------------------------------------------------------- */

#define SAID_MAX 64
static uint64_t said[SAID_MAX];
static int nsaid;

void xcm_say(const char *fmt, ...)
{
	char buf[512];
	uint64_t h = 1469598103934665603ULL;
	va_list ap;
	int i, dup = 0;
	const char *p;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	for (p = buf; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	pthread_mutex_lock(&dev_lock);
	for (i = 0; i < nsaid; i++)
		dup |= said[i] == h;
	if (!dup && nsaid < SAID_MAX)
		said[nsaid++] = h;
	pthread_mutex_unlock(&dev_lock);
	if (!dup)
		fprintf(stderr, "xrnic: %s\n", buf);
}

/* fork: a child must not inherit these held by another thread (a child
   forked before the engine was loaded uses them). xcm_say takes dev_lock
   under xcm_lock, so that order. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&xcm_lock);
	pthread_mutex_lock(&dev_lock);
}

static void fork_release(void)
{
	pthread_mutex_unlock(&dev_lock);
	pthread_mutex_unlock(&xcm_lock);
}

__attribute__((constructor)) static void xcm_fork_init(void)
{
	pthread_atfork(fork_prepare, fork_release, fork_release);
}
