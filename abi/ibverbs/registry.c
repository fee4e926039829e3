/*
 * registry.c: the set of live objects we handed out (contexts, PDs, MRs,
 * channels, CQs, QPs), so a pointer an application got elsewhere is
 * refused with EINVAL before we read a byte behind it. Only the slow
 * paths look here; post and poll check the magic word alone.
 */
#include <stdlib.h>

#include "internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *slot;	   /* open addressing; 0 empty, 1 deleted */
static size_t cap, used; /* used counts live and deleted slots */

static size_t hash(uintptr_t p, size_t n)
{
	return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ull) & (n - 1);
}

static int put(uintptr_t *s, size_t n, uintptr_t p)
{
	size_t i = hash(p, n);

	while (s[i] > 1) {
		if (s[i] == p)
			return 0;
		i = (i + 1) & (n - 1);
	}
	s[i] = p;
	return 1;
}

static int grow(void)
{
	size_t n = cap ? cap * 2 : 64, i, live = 0;
	uintptr_t *s;

	for (i = 0; i < cap; i++)
		live += slot[i] > 1;
	if (cap && live * 4 < cap)
		n = cap; /* mostly deleted: rehash at the same size */
	s = calloc(n, sizeof(*s));
	if (!s)
		return ENOMEM;
	for (i = 0; i < cap; i++)
		if (slot[i] > 1)
			put(s, n, slot[i]);
	free(slot);
	slot = s;
	cap = n;
	used = live;
	return 0;
}

int xrnic_reg_add(const void *p)
{
	int err = 0;

	pthread_mutex_lock(&lock);
	if ((used + 1) * 2 > cap)
		err = grow();
	if (!err)
		used += put(slot, cap, (uintptr_t)p);
	pthread_mutex_unlock(&lock);
	return err;
}

void xrnic_reg_del(const void *p)
{
	size_t i;

	pthread_mutex_lock(&lock);
	if (cap) {
		for (i = hash((uintptr_t)p, cap); slot[i]; i = (i + 1) & (cap - 1))
			if (slot[i] == (uintptr_t)p) {
				slot[i] = 1;
				break;
			}
	}
	pthread_mutex_unlock(&lock);
}

int xrnic_reg_has(const void *p)
{
	size_t i;
	int found = 0;

	pthread_mutex_lock(&lock);
	if (cap && p) {
		for (i = hash((uintptr_t)p, cap); slot[i]; i = (i + 1) & (cap - 1))
			if (slot[i] == (uintptr_t)p) {
				found = 1;
				break;
			}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

/* fork: a child forked before the engine was loaded uses the registry;
   it must not inherit the lock held by another thread. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_release(void)
{
	pthread_mutex_unlock(&lock);
}

__attribute__((constructor)) static void xrnic_reg_init(void)
{
	pthread_atfork(fork_prepare, fork_release, fork_release);
}
