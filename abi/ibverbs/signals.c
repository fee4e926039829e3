/*
 * signals.c: signal() and sigaction() as the application sees them add
 * SA_ONSTACK to every handler it installs.
 *
 * The engine is Go code, and the application's threads run it inside
 * every call into libxrnic.so, on a goroutine's small stack. A handler
 * without SA_ONSTACK (perftest -D: signal(SIGALRM, catch_alarm)) that
 * interrupts such a call runs on that stack and corrupts it; Go requires
 * SA_ONSTACK of every non-Go handler, and adds it itself to the handlers
 * that exist when it starts (seen in CI: perftest -D 2 crashed in the
 * engine). With SA_ONSTACK the handler runs on the alternate signal stack
 * the Go runtime gives each thread that calls into it; on other threads
 * the flag changes nothing. A SIGURG handler also gets SA_RESTART: the
 * runtime sends SIGURG to preempt the threads running Go code, and one
 * that lands after such a thread returned to the application (into
 * read() in ibv_get_cq_event, say) would otherwise fail that call with
 * EINTR (seen with qperf, whose handler lacks SA_RESTART). These definitions carry glibc's version, so
 * they bind the application's references (libibverbs.so.1 comes before
 * libc.so.6 in its search order) and pass on to glibc's (RTLD_NEXT).
 */
#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>

#include "internal.h"

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigaction_fn next_sigaction(void)
{
	static sigaction_fn next;
	sigaction_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);

	if (!f) {
		f = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
		__atomic_store_n(&next, f, __ATOMIC_RELEASE);
	}
	return f;
}

EXPORT int xrnic_sigaction(int sig, const struct sigaction *act,
			   struct sigaction *old)
{
	sigaction_fn f = next_sigaction();
	struct sigaction a;

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (act && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN) {
		int want = SA_ONSTACK | (sig == SIGURG ? SA_RESTART : 0);

		if ((act->sa_flags & want) != want) {
			a = *act;
			a.sa_flags |= want;
			act = &a;
		}
	}
	return f(sig, act, old);
}

/* glibc's signal(): BSD semantics (SA_RESTART, the signal blocked while
   its handler runs, the handler kept). */
EXPORT __sighandler_t xrnic_signal(int sig, __sighandler_t handler)
{
	struct sigaction a = {0}, old;

	if (sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	a.sa_handler = handler;
	sigemptyset(&a.sa_mask);
	sigaddset(&a.sa_mask, sig);
	a.sa_flags = SA_RESTART;
	if (xrnic_sigaction(sig, &a, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

__asm__(".symver xrnic_sigaction,sigaction@@GLIBC_2.2.5");
__asm__(".symver xrnic_signal,signal@@GLIBC_2.2.5");
