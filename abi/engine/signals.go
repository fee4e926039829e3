//go:build cgo

package main

/*
#include <pthread.h>
#include <signal.h>

// Applications install handlers for asynchronous signals without
// SA_ONSTACK (perftest -D: signal(SIGALRM, ...)). Delivered to a Go
// thread, such a handler runs on a goroutine's small stack and corrupts
// it (seen in CI: a poll loop crashed with "unexpected return pc" under
// ib_send_lat -D 2). So the Go threads keep those signals blocked: this
// constructor runs before the Go runtime's own (priority 101 sorts first
// in .init_array), the runtime's threads inherit the mask, and
// xrnic_restore_sigmask (called by libibverbs.so.1 in the same thread once
// its dlopen of this library returns) gives the loading thread its mask
// back. The kernel then delivers them to the application's threads.
static sigset_t xrnic_saved_mask;
static int xrnic_mask_saved;

__attribute__((constructor(101))) static void xrnic_block_async_signals(void)
{
	static const int sigs[] = {SIGALRM, SIGVTALRM, SIGUSR1, SIGUSR2, SIGINT, SIGTERM,
				   SIGHUP, SIGQUIT, SIGCHLD, SIGWINCH, SIGIO, SIGTSTP,
				   SIGCONT, SIGTTIN, SIGTTOU};
	sigset_t s;
	unsigned i;
	int r;

	sigemptyset(&s);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&s, sigs[i]);
	for (r = SIGRTMIN; r <= SIGRTMAX; r++)
		sigaddset(&s, r);
	if (pthread_sigmask(SIG_BLOCK, &s, &xrnic_saved_mask) == 0)
		xrnic_mask_saved = 1;
}

__attribute__((visibility("default"))) void xrnic_restore_sigmask(void)
{
	if (__atomic_exchange_n(&xrnic_mask_saved, 0, __ATOMIC_ACQ_REL))
		pthread_sigmask(SIG_SETMASK, &xrnic_saved_mask, NULL);
}
*/
import "C"
