/*
 * engine.c: libxrnic.so, the engine, is loaded on first use (dlopen), not
 * as a dependency. Its Go runtime starts with it, and a Go runtime does
 * not survive fork (its threads stay in the parent): a program that forks
 * before it touches RDMA (qperf's server forks a child per test) must
 * find no runtime in the child, so that the child can start its own.
 *
 * Every call into the engine goes through xe, a table of pointers with a
 * member per function of xrnic_engine.h (xrnic_engine_fns.h). Until the
 * engine is loaded each member is a stub that loads it (once) and calls
 * on; afterwards each is the engine's own function, so post and poll
 * cost one indirect call as a PLT call did. A child forked after the load
 * gets the stubs back, which then fail with EIO at once: entering the
 * parent's runtime would hang.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* The list must match the header, signature by signature. */
#define XRNIC_FN(kind, ret, name, params, args)                              \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&xrnic_##name), \
						    ret(*) params),            \
		       "xrnic_" #name ": xrnic_engine_fns.h differs from "    \
		       "xrnic_engine.h");
#include "xrnic_engine_fns.h"
#undef XRNIC_FN

enum { UNLOADED, LOADED, FAILED };

static int state;		/* atomic */
int xrnic_forked;		/* atomic; a child forked after LOADED */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static char why[512];		/* the load's failure, set before FAILED */
static int said_why, said_fork; /* atomic: each message once */
static struct xrnic_engine real; /* set before LOADED, then read-only */

static const char fork_text[] =
	"this process forked after the xrnic engine (libxrnic.so) was loaded "
	"in its parent; a child cannot use the parent's RDMA objects or open "
	"xrnic0 (the engine runs a Go runtime, which does not survive fork): "
	"open the device after fork, or exec";

static int copy_text(char *buf, int len)
{
	const char *t = __atomic_load_n(&xrnic_forked, __ATOMIC_ACQUIRE) ?
				fork_text : why;
	int n = (int)strlen(t);

	if (buf && len > 0)
		snprintf(buf, (size_t)len, "%s", t);
	return n;
}

/* How each kind of function fails (xrnic_engine_fns.h). */
#define FAIL_E(e, args) return e
#define FAIL_N(e, args) return -(e)
#define FAIL_D(e, args) return -1
#define FAIL_L(e, args) return copy_text args
#define FAIL_V(e, args) return
#define RET_E return
#define RET_N return
#define RET_D return
#define RET_L return
#define RET_V

#define XRNIC_FN(kind, ret, name, params, args)          \
	static ret lazy_##name params                    \
	{                                                \
		int e_ = xrnic_ibv_engine_check();       \
		if (e_) {                                \
			FAIL_##kind(e_, args);           \
		}                                        \
		RET_##kind real.name args;               \
	}
#include "xrnic_engine_fns.h"
#undef XRNIC_FN

static const struct xrnic_engine lazy = {
#define XRNIC_FN(kind, ret, name, params, args) .name = lazy_##name,
#include "xrnic_engine_fns.h"
#undef XRNIC_FN
};

struct xrnic_engine xe = {
#define XRNIC_FN(kind, ret, name, params, args) .name = lazy_##name,
#include "xrnic_engine_fns.h"
#undef XRNIC_FN
};

EXPORT struct xrnic_engine *xrnic_ibv_engine(void)
{
	return &xe;
}

/* Stores t's members into xe one pointer at a time: other threads may be
   calling through it. */
static void set_table(const struct xrnic_engine *t)
{
#define XRNIC_FN(kind, ret, name, params, args) \
	__atomic_store_n(&xe.name, t->name, __ATOMIC_RELEASE);
#include "xrnic_engine_fns.h"
#undef XRNIC_FN
}

/* dlopen and dlsym; 0 or ENOSYS with why set. Under load_lock. */
static int load(void)
{
	const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
	struct sigaction urg;
	char path[4096] = "";
	const char *slash;
	Dl_info di;
	void *h = NULL;
	int urg_ok;

	/* Next to libibverbs.so.1 itself: bin/lib holds both. Only a file
	   that is not there sends us to the search path; one that is there
	   but fails to load is the error. */
	if (!dladdr((void *)&load, &di) || !di.dli_fname ||
	    !(slash = strrchr(di.dli_fname, '/')) ||
	    snprintf(path, sizeof(path), "%.*s/libxrnic.so",
		     (int)(slash - di.dli_fname), di.dli_fname) >=
		    (int)sizeof(path) ||
	    access(path, F_OK) != 0)
		path[0] = 0;
	/* The application's SIGURG handler, if any: Go takes SIGURG (its
	   preemption signal) when it starts and does not forward it. */
	urg_ok = sigaction(SIGURG, NULL, &urg) == 0;
	h = dlopen(path[0] ? path : "libxrnic.so", flags);
	if (!h) {
		snprintf(why, sizeof(why),
			 "cannot load the engine: %s; it is built into bin/lib "
			 "with libibverbs.so.1 (make abi-libs)", dlerror());
		return ENOSYS;
	}
#define XRNIC_FN(kind, ret, name, params, args)                              \
	if (!(*(void **)&real.name = dlsym(h, "xrnic_" #name))) {             \
		snprintf(why, sizeof(why),                                    \
			 "the engine %s has no xrnic_" #name                  \
			 ": it is older than libibverbs.so.1; rebuild both "  \
			 "(make abi-libs)",                                   \
			 path[0] ? path : "libxrnic.so");                     \
		return ENOSYS;                                                \
	}
#include "xrnic_engine_fns.h"
#undef XRNIC_FN
	/* libxrnic.so's constructor blocked the asynchronous signals in this
	   thread before its runtime started (xrnic_engine.h): unblock. */
	real.restore_sigmask();
	/* Give the application its SIGURG handler back (with SA_ONSTACK, by
	   signals.c): as when it installed it after the engine started, its
	   handler also sees the runtime's preemption signals, and Go
	   preempts only cooperatively. Without it the application never
	   sees SIGURG (qperf: the peer's out-of-band error report). */
	if (urg_ok && urg.sa_handler != SIG_DFL && urg.sa_handler != SIG_IGN)
		sigaction(SIGURG, &urg, NULL);
	return 0;
}

static void say(int *said, const char *text)
{
	if (!__atomic_exchange_n(said, 1, __ATOMIC_ACQ_REL))
		fprintf(stderr, "xrnic: %s\n", text);
}

EXPORT int xrnic_ibv_engine_check(void)
{
	int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE), err;

	if (__atomic_load_n(&xrnic_forked, __ATOMIC_ACQUIRE)) {
		say(&said_fork, fork_text);
		return EIO;
	}
	if (s == LOADED)
		return 0;
	if (s == UNLOADED) {
		pthread_mutex_lock(&load_lock);
		s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
		if (s == UNLOADED) {
			err = load();
			if (!err)
				set_table(&real);
			s = err ? FAILED : LOADED;
			__atomic_store_n(&state, s, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&load_lock);
		if (s == LOADED)
			return 0;
	}
	say(&said_why, why);
	return ENOSYS;
}

int xrnic_ibv_engine_unusable(void)
{
	return __atomic_load_n(&xrnic_forked, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&state, __ATOMIC_ACQUIRE) != LOADED;
}

/* fork: hold load_lock across it, so that a child never inherits a load
   half done (pthread_once would leave it waiting for ever). */
static void fork_prepare(void)
{
	pthread_mutex_lock(&load_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&load_lock);
}

static void fork_child(void)
{
	if (__atomic_load_n(&state, __ATOMIC_RELAXED) == LOADED) {
		__atomic_store_n(&xrnic_forked, 1, __ATOMIC_RELEASE);
		set_table(&lazy);
	}
	/* The child says things afresh. */
	__atomic_store_n(&said_fork, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&said_why, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&load_lock);
}

__attribute__((constructor)) static void xrnic_engine_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
