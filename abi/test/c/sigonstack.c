/*
 * sigonstack.c: installs a SIGALRM handler with signal() and one for
 * SIGUSR2 with sigaction() without SA_ONSTACK, as perftest -D does, and
 * prints whether each ended up with SA_ONSTACK (xrnic's libibverbs adds
 * it: a handler interrupting a call into the Go engine must not run on
 * a goroutine stack). Then raises SIGALRM while the engine runs in this
 * thread (ibv_get_device_list opens it) and prints "handled".
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

static volatile sig_atomic_t got;

static void on_signal(int sig)
{
	char pad[16384]; /* a handler with a real frame */

	memset(pad, sig, sizeof(pad));
	got += pad[100] != 0;
}

static int onstack(int sig)
{
	struct sigaction sa;

	if (sigaction(sig, NULL, &sa) < 0)
		return -1;
	return (sa.sa_flags & SA_ONSTACK) != 0;
}

int main(void)
{
	struct sigaction sa;
	struct ibv_device **l;
	int n;

	l = ibv_get_device_list(&n);
	if (l)
		ibv_free_device_list(l);
	if (signal(SIGALRM, on_signal) == SIG_ERR)
		return 2;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	if (sigaction(SIGUSR2, &sa, NULL) < 0)
		return 2;
	printf("SIGALRM onstack %d\n", onstack(SIGALRM));
	printf("SIGUSR2 onstack %d\n", onstack(SIGUSR2));
	raise(SIGALRM);
	printf("handled %d\n", (int)got);
	return 0;
}
