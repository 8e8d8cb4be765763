/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Process-level wrappers (fork, vfork, clone, daemon, prctl, chroot, unshare, setns) and
 * the library constructor.
 */
#include "preload/wrap.h"
#include "core/base/sandbox.h"
#include "core/conn/conn.h"
#include "core/sock/sock.h"

#include <sched.h>
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

/*
 * clone() without CLONE_VM makes a new process with a copy of the memory, as fork()
 * does (vsftpd starts each session so, with namespace flags), with or without
 * CLONE_VFORK; but glibc's clone() runs no atfork handler. So it gets fork()'s steps
 * here: the child runs a trampoline that runs the child's handlers, then the program's
 * fn(arg), whose result is the child's exit status as before. The trampoline's
 * argument lives in this frame, which the child's copy of the memory holds too.
 * With CLONE_VM (a thread, or a vfork-like child sharing our memory) the child is no
 * new copy of the library's state: nothing more to do.
 *
 * The optional arguments are positional (parent_tid, tls, child_tid): as many are read
 * as the flags use; the rest go on as NULL, which the kernel ignores for those flags.
 */
struct clone_start {
	int (*fn)(void *);
	void *arg;
};

static int clone_child_start(void *p)
{
	const struct clone_start *s = p;

	smc_clone_child();
	return s->fn(s->arg);
}

SMC_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	pid_t *ptid = NULL, *ctid = NULL;
	void *tls = NULL;
	int nargs = 0, r;
	va_list ap;

	if (flags & (CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID))
		nargs = 3;
	else if (flags & CLONE_SETTLS)
		nargs = 2;
	else if (flags & (CLONE_PARENT_SETTID | CLONE_PIDFD))
		nargs = 1;
	va_start(ap, arg);
	if (nargs >= 1)
		ptid = va_arg(ap, pid_t *);
	if (nargs >= 2)
		tls = va_arg(ap, void *);
	if (nargs >= 3)
		ctid = va_arg(ap, pid_t *);
	va_end(ap);

	if ((flags & CLONE_VM) || !fn)
		return CALL_REAL(clone, fn, stack, flags, arg, ptid, tls, ctid);

	struct clone_start start = { fn, arg };

	KEEP_ERRNO(smc_clone_prepare());
	r = CALL_REAL(clone, clone_child_start, stack, flags, &start, ptid, tls, ctid);
	KEEP_ERRNO(smc_clone_parent(r < 0));
	return r;
}
SMC_EXPORT int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
	SMC_ALIAS(clone);

/* daemon() forks inside libc, where the core's atfork handlers run as for fork(). */
SMC_EXPORT int daemon(int nochdir, int noclose)
{
	return REAL(daemon)(nochdir, noclose);
}

/* A seccomp filter limits the library's own system calls from now on (core/base/sandbox.h).
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
	if (option == PR_SET_SECCOMP)
		KEEP_ERRNO(smc_before_seccomp());
	r = CALL_REAL(prctl, option, a[0], a[1], a[2], a[3]);
	if (r == 0 && option == PR_SET_SECCOMP)
		KEEP_ERRNO(sandbox_entered());
	return r;
}

/* What the library loads on first need must be loaded before the root changes. */
SMC_EXPORT int chroot(const char *path)
{
	KEEP_ERRNO(smc_before_confinement());
	return REAL(chroot)(path);
}

/* So too before the process enters a mount namespace of its own or another one, where
 * a pivot_root() or a private mount may take those files away. */
SMC_EXPORT int unshare(int flags)
{
	bool split = false;
	int r;

	if (flags & CLONE_NEWNS)
		KEEP_ERRNO(smc_before_confinement());
	/* a descriptor table of this thread's own (core/sock/table_split.c) */
	if (flags & CLONE_FILES)
		KEEP_ERRNO(split = smc_before_table_split());
	r = REAL(unshare)(flags);
	if (r == 0 && (flags & CLONE_FILES))
		KEEP_ERRNO(smc_table_split(split));
	return r;
}
int smc_impl_unshare(int flags) SMC_INTERNAL_ALIAS(unshare);

SMC_EXPORT int setns(int fd, int nstype)
{
	if (nstype == 0 || (nstype & CLONE_NEWNS))
		KEEP_ERRNO(smc_before_confinement());
	return REAL(setns)(fd, nstype);
}
