/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Process-level wrappers (fork, vfork, daemon, prctl) and the library constructor.
 */
#include "preload/wrap.h"
#include "core/conn.h"
#include "core/sandbox.h"
#include "core/sock.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

/* Resolve libc and load the configuration at load time, so a bad SMC_* variable is
 * reported when the program starts rather than at its first connection. Wrappers do
 * not depend on this having run: REAL() resolves lazily. */
__attribute__((constructor)) static void smc_preload_load(void)
{
	real_init();
	smc_init();
	smc_sock_adopt_inherited();
}

/* The core's pthread_atfork handlers (installed by smc_init) do the per-fork work;
 * what may wait for a peer (an RDMA connection going back to TCP) comes before them. */
SMC_EXPORT pid_t fork(void)
{
	pid_t pid;

	KEEP_ERRNO(smc_sock_before_fork());
	pid = REAL(fork)();

	if (pid < 0)
		conn_fork_failed();
	return pid;
}
SMC_EXPORT pid_t __fork(void) SMC_ALIAS(fork);
pid_t smc_impl_fork(void) SMC_INTERNAL_ALIAS(fork);

/*
 * vfork() is served by fork(), for two reasons:
 *  - a wrapper cannot call the real vfork(): the child would run on, and return
 *    through, the wrapper's stack frame, which the parent later returns through
 *    again; the child's return clobbers the parent's saved state;
 *  - a vfork child shares the parent's memory until exec/_exit, so anything it does
 *    through this library between vfork and exec (close() of a tracked fd, dup2 onto
 *    one) would change the parent's connection state.
 * fork() gives the child its own copy of everything and runs the core's atfork
 * handlers. POSIX only allows a vfork child to call _exit or exec, and both work the
 * same after fork(); the cost is copying the page tables.
 */
SMC_EXPORT pid_t vfork(void)
{
	KEEP_ERRNO(smc_sock_before_fork());
	return REAL(fork)();
}
SMC_EXPORT pid_t __vfork(void) SMC_ALIAS(vfork);

/* daemon() forks inside libc, where the core's atfork handlers run as for fork(). */
SMC_EXPORT int daemon(int nochdir, int noclose)
{
	return REAL(daemon)(nochdir, noclose);
}

/* A seccomp filter limits the library's own system calls from now on (core/sandbox.h).
 * prctl takes up to four more arguments, all of them unsigned long in the kernel's ABI. */
SMC_EXPORT int prctl(int option, ...)
{
	unsigned long a[4];
	va_list ap;
	int r;

	va_start(ap, option);
	for (int i = 0; i < 4; i++)
		a[i] = va_arg(ap, unsigned long);
	va_end(ap);
	r = CALL_REAL(prctl, option, a[0], a[1], a[2], a[3]);
	if (r == 0 && option == PR_SET_SECCOMP)
		KEEP_ERRNO(sandbox_entered());
	return r;
}
