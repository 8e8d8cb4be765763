/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * syscall(): the raw system call entry of libc, which programs use to bypass libc's
 * named functions (libuv closes every descriptor with syscall(SYS_close, fd)). A number
 * whose named function this library interposes goes, when it names a tracked fd (or may
 * create one), to that wrapper's own code through its internal name: a close releases
 * the connection, a read on an upgraded socket reads its ring. Everything else, and
 * every call on an fd the library does not track, goes to the real syscall() with all
 * six argument registers, so its result and errno are the kernel's own.
 *
 * The named functions and the raw calls share their contract (-1 and errno on error)
 * except where the kernel's interface differs from libc's: ppoll and pselect6 write the
 * unslept time back, and the signal masks of ppoll, pselect6 and epoll_pwait[2] come in
 * the kernel's size with that size as an argument. Those are converted here.
 *
 * clone and clone3 that make a process with a copy of the memory on the same stack
 * (vsftpd's) get the library's fork handling around them, as fork does.
 *
 * io_uring_setup passes through and, when it succeeds, keeps every later connection on
 * TCP (core/base/io_uring_watch.h).
 */
#include "preload/wrap.h"
#include "core/base/sandbox.h"

#include <linux/seccomp.h>
#include <sys/prctl.h>

#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "core/base/clock.h"
#include "core/sock/sock.h" /* io_uring_note_setup */

/* io_uring has one number on every architecture (Linux 5.1). */
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif

/* The kernel's sigset_t: one bit per signal, _NSIG of them (libc's is larger). */
#define KERNEL_SIGSET_SIZE (_NSIG / 8)

#define FD(i) ((int)a[i])
#define PTR(i) ((void *)a[i])
#define U32(i) ((unsigned int)a[i])

static bool tracked(long fd)
{
	return fdtab_kind((int)fd) != FD_NONE;
}

/* A kernel signal mask (ksize bytes at kmask) as libc's sigset_t: *mask is NULL for no
 * mask. -1 with EINVAL for a size the kernel rejects. */
static int mask_from_kernel(const void *kmask, unsigned long ksize, sigset_t *buf,
			    const sigset_t **mask)
{
	*mask = NULL;
	if (!kmask)
		return 0;
	if (ksize != KERNEL_SIGSET_SIZE) {
		errno = EINVAL;
		return -1;
	}
	sigemptyset(buf);
	memcpy(buf, kmask, KERNEL_SIGSET_SIZE);
	*mask = buf;
	return 0;
}

static bool timespec_valid(const struct timespec *ts)
{
	return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

/* ppoll and pselect6 as the kernel runs them: an invalid timeout is EINVAL; after the
 * call, whatever its result, a nonzero timeout holds the time not slept. */
enum timed_call { TIMED_PPOLL, TIMED_PSELECT6 };

static long timed_wait(enum timed_call which, const long *a, struct timespec *ts,
		       const sigset_t *mask)
{
	int64_t budget = 0, start = 0;
	long ret;

	if (ts) {
		if (!timespec_valid(ts)) {
			errno = EINVAL;
			return -1;
		}
		budget = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
		start = (int64_t)clock_now_ns();
	}
	if (which == TIMED_PPOLL)
		ret = smc_impl_ppoll(PTR(0), (nfds_t)U32(1), ts, mask);
	else
		ret = smc_impl_pselect(FD(0), PTR(1), PTR(2), PTR(3), ts, mask);
	if (budget > 0) {
		int saved_errno = errno;
		int64_t left = budget - ((int64_t)clock_now_ns() - start);
		if (left < 0)
			left = 0;
		ts->tv_sec = left / 1000000000;
		ts->tv_nsec = left % 1000000000;
		errno = saved_errno;
	}
	return ret;
}

static long raw_ppoll(const long *a)
{
	sigset_t buf;
	const sigset_t *mask;

	if (mask_from_kernel(PTR(3), (unsigned long)a[4], &buf, &mask) < 0)
		return -1;
	return timed_wait(TIMED_PPOLL, a, PTR(2), mask);
}

/* pselect6's sixth argument: { const kernel sigset *, its size }. */
struct pselect6_mask {
	const void *ss;
	unsigned long ss_len;
};

static long raw_pselect6(const long *a)
{
	const struct pselect6_mask *m = PTR(5);
	sigset_t buf;
	const sigset_t *mask = NULL;

	if (m && mask_from_kernel(m->ss, m->ss_len, &buf, &mask) < 0)
		return -1;
	return timed_wait(TIMED_PSELECT6, a, PTR(4), mask);
}

static long raw_epoll_pwait(const long *a, bool pwait2)
{
	sigset_t buf;
	const sigset_t *mask;

	if (mask_from_kernel(PTR(4), (unsigned long)a[5], &buf, &mask) < 0)
		return -1;
	if (pwait2)
		return smc_impl_epoll_pwait2(FD(0), PTR(1), FD(2), PTR(3), mask);
	return smc_impl_epoll_pwait(FD(0), PTR(1), FD(2), FD(3), mask);
}

/*
 * A raw clone or clone3 without CLONE_VM and without a new stack is a fork (vsftpd
 * starts each session with syscall(SYS_clone, CLONE_NEWPID | ... | SIGCHLD, NULL)), in
 * which libc's fork() and so the library's fork handling take no part: it gets fork()'s
 * steps here (core/sock/init.h). The child returns from the same call on its copy of this
 * stack. A raw call with a new stack (the child would return from libc's syscall()
 * through whatever that stack holds) or with CLONE_VM goes to the kernel untouched.
 */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
/* The first fields of the kernel's struct clone_args (CLONE_ARGS_SIZE_VER0 = 64). */
struct clone3_head {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};
/* clone's flags and stack: s390 swaps the two (the kernel's CLONE_BACKWARDS2). */
#if defined(__s390__)
#define CLONE_FLAGS(a) ((uint64_t)(unsigned long)(a)[1])
#define CLONE_STACK(a) ((uint64_t)(unsigned long)(a)[0])
#else
#define CLONE_FLAGS(a) ((uint64_t)(unsigned long)(a)[0])
#define CLONE_STACK(a) ((uint64_t)(unsigned long)(a)[1])
#endif

static bool raw_clone_forks(uint64_t flags, uint64_t stack)
{
	return !(flags & CLONE_VM) && stack == 0;
}

static long raw_fork_like(long nr, const long *a)
{
	long r;

	KEEP_ERRNO(smc_clone_prepare());
	r = CALL_REAL(syscall, nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (r == 0)
		KEEP_ERRNO(smc_clone_child());
	else
		KEEP_ERRNO(smc_clone_parent(r < 0));
	return r;
}

/* The call through the library's own wrapper when the library is concerned; *routed
 * false: it is not, the real syscall() serves it. */
static long route(long nr, const long *a, bool *routed)
{
	*routed = true;
	switch (nr) {
	case SYS_read:
		if (tracked(a[0]))
			return smc_impl_read(FD(0), PTR(1), (size_t)a[2]);
		break;
	case SYS_readv:
		if (tracked(a[0]))
			return smc_impl_readv(FD(0), PTR(1), FD(2));
		break;
	case SYS_recvfrom:
		if (tracked(a[0]))
			return smc_impl_recvfrom(FD(0), PTR(1), (size_t)a[2], FD(3), PTR(4), PTR(5));
		break;
	case SYS_recvmsg:
		if (tracked(a[0]))
			return smc_impl_recvmsg(FD(0), PTR(1), FD(2));
		break;
	case SYS_recvmmsg:
		if (tracked(a[0]))
			return smc_impl_recvmmsg(FD(0), PTR(1), U32(2), FD(3), PTR(4));
		break;
	case SYS_write:
		if (tracked(a[0]))
			return smc_impl_write(FD(0), PTR(1), (size_t)a[2]);
		break;
	case SYS_writev:
		if (tracked(a[0]))
			return smc_impl_writev(FD(0), PTR(1), FD(2));
		break;
	case SYS_sendto:
		if (tracked(a[0]))
			return smc_impl_sendto(FD(0), PTR(1), (size_t)a[2], FD(3), PTR(4),
					       (socklen_t)a[5]);
		break;
	case SYS_sendmsg:
		if (tracked(a[0]))
			return smc_impl_sendmsg(FD(0), PTR(1), FD(2));
		break;
	case SYS_sendmmsg:
		if (tracked(a[0]))
			return smc_impl_sendmmsg(FD(0), PTR(1), U32(2), FD(3));
		break;
#if __WORDSIZE == 64 /* 64-bit offsets: the sendfile64 of 32-bit ABIs */
	case SYS_sendfile:
		if (tracked(a[0]))
			return smc_impl_sendfile64(FD(0), FD(1), PTR(2), (size_t)a[3]);
		break;
#endif
	case SYS_splice:
		if (fdtab_kind(FD(0)) == FD_SMC || fdtab_kind(FD(2)) == FD_SMC)
			return smc_impl_splice(FD(0), PTR(1), FD(2), PTR(3), (size_t)a[4], U32(5));
		break;
	case SYS_socket:
		return smc_impl_socket(FD(0), FD(1), FD(2));
	case SYS_bind:
		if (tracked(a[0]))
			return smc_impl_bind(FD(0), PTR(1), (socklen_t)a[2]);
		break;
	case SYS_listen:
		if (tracked(a[0]))
			return smc_impl_listen(FD(0), FD(1));
		break;
	case SYS_accept:
		if (tracked(a[0]))
			return smc_impl_accept(FD(0), PTR(1), PTR(2));
		break;
	case SYS_accept4:
		if (tracked(a[0]))
			return smc_impl_accept4(FD(0), PTR(1), PTR(2), FD(3));
		break;
	case SYS_connect:
		if (tracked(a[0]))
			return smc_impl_connect(FD(0), PTR(1), (socklen_t)a[2]);
		break;
	case SYS_shutdown:
		if (tracked(a[0]))
			return smc_impl_shutdown(FD(0), FD(1));
		break;
	case SYS_getsockopt:
		if (tracked(a[0]))
			return smc_impl_getsockopt(FD(0), FD(1), FD(2), PTR(3), PTR(4));
		break;
	case SYS_setsockopt:
		if (tracked(a[0]))
			return smc_impl_setsockopt(FD(0), FD(1), FD(2), PTR(3), (socklen_t)a[4]);
		break;
	case SYS_close:
		if (tracked(a[0]))
			return smc_impl_close(FD(0));
		break;
#ifdef SYS_close_range
	case SYS_close_range:
		return smc_impl_close_range(U32(0), U32(1), FD(2));
#endif
	case SYS_unshare:
		if (a[0] & CLONE_FILES)
			return smc_impl_unshare(FD(0));
		break;
	case SYS_dup:
		if (tracked(a[0]))
			return smc_impl_dup(FD(0));
		break;
#ifdef SYS_dup2
	case SYS_dup2:
		if (tracked(a[0]) || tracked(a[1]))
			return smc_impl_dup2(FD(0), FD(1));
		break;
#endif
	case SYS_dup3:
		if (tracked(a[0]) || tracked(a[1]))
			return smc_impl_dup3(FD(0), FD(1), FD(2));
		break;
	case SYS_fcntl:
		if (tracked(a[0]))
			return smc_impl_fcntl(FD(0), FD(1), a[2]);
		break;
	case SYS_ioctl:
		if (tracked(a[0]))
			return smc_impl_ioctl(FD(0), U32(1), PTR(2));
		break;
#ifdef SYS_poll
	case SYS_poll:
		if (smc_poll_involved(PTR(0), (nfds_t)U32(1)))
			return smc_impl_poll(PTR(0), (nfds_t)U32(1), FD(2));
		break;
#endif
	case SYS_ppoll:
		if (smc_poll_involved(PTR(0), (nfds_t)U32(1)))
			return raw_ppoll(a);
		break;
#ifdef SYS_select
	case SYS_select:
		if (FD(0) > 0 && smc_fdsets_involved(FD(0), PTR(1), PTR(2), PTR(3)))
			return smc_impl_select(FD(0), PTR(1), PTR(2), PTR(3), PTR(4));
		break;
#endif
	case SYS_pselect6:
		if (FD(0) > 0 && smc_fdsets_involved(FD(0), PTR(1), PTR(2), PTR(3)))
			return raw_pselect6(a);
		break;
	case SYS_epoll_ctl:
		if (tracked(a[0]) || tracked(a[2]))
			return smc_impl_epoll_ctl(FD(0), FD(1), FD(2), PTR(3));
		break;
#ifdef SYS_epoll_wait
	case SYS_epoll_wait:
		if (tracked(a[0]))
			return smc_impl_epoll_wait(FD(0), PTR(1), FD(2), FD(3));
		break;
#endif
	case SYS_epoll_pwait:
		if (tracked(a[0]))
			return raw_epoll_pwait(a, false);
		break;
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2:
		if (tracked(a[0]))
			return raw_epoll_pwait(a, true);
		break;
#endif
	/* libc's fork runs the library's fork handlers; a bare fork system call would
	 * leave the child's copy of the connection state without them */
#ifdef SYS_fork
	case SYS_fork:
#endif
#ifdef SYS_vfork
	case SYS_vfork:
#endif
		return smc_impl_fork();
	case SYS_clone:
		if (raw_clone_forks(CLONE_FLAGS(a), CLONE_STACK(a)))
			return raw_fork_like(nr, a);
		break;
	case SYS_clone3:
		if (a[0] && (unsigned long)a[1] >= sizeof(struct clone3_head) &&
		    raw_clone_forks(((const struct clone3_head *)PTR(0))->flags,
				    ((const struct clone3_head *)PTR(0))->stack))
			return raw_fork_like(nr, a);
		break;
	default:
		break;
	}
	*routed = false;
	return 0;
}

/* A seccomp filter loaded through syscall() (libseccomp does it so). */
static bool syscall_enters_seccomp(long nr, const long a[6])
{
	return (nr == SYS_seccomp && (a[0] == SECCOMP_SET_MODE_STRICT ||
				      a[0] == SECCOMP_SET_MODE_FILTER)) ||
	       (nr == SYS_prctl && a[0] == PR_SET_SECCOMP);
}

/* Calls after which a later dlopen() may not reach the library's files: a new root,
 * another mount namespace, a Landlock domain (smc_before_confinement loads them first;
 * a seccomp filter is syscall_enters_seccomp's, smc_before_seccomp). */
static bool syscall_confines(long nr, const long a[6])
{
	switch (nr) {
	case SYS_chroot:
	case SYS_pivot_root:
		return true;
	case SYS_unshare:
		return (a[0] & CLONE_NEWNS) != 0;
	case SYS_setns:
		return a[1] == 0 || (a[1] & CLONE_NEWNS) != 0;
#ifdef SYS_landlock_restrict_self
	case SYS_landlock_restrict_self:
		return true;
#endif
	default:
		return false;
	}
}

/* Every caller passes at most six arguments after the number; reading six always is
 * what libc's own syscall() does (the unused ones are whatever the registers and the
 * caller's stack slot hold, and are ignored). */
SMC_EXPORT long syscall(long nr, ...)
{
	long a[6];
	va_list ap;
	bool routed;

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);

	long ret = route(nr, a, &routed);
	if (routed)
		return ret;
	if (syscall_enters_seccomp(nr, a))
		KEEP_ERRNO(smc_before_seccomp());
	else if (syscall_confines(nr, a))
		KEEP_ERRNO(smc_before_confinement());
	ret = CALL_REAL(syscall, nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (nr == SYS_io_uring_setup && ret >= 0)
		KEEP_ERRNO(io_uring_note_setup());
	/* a seccomp filter loaded this way limits us as prctl's does */
	if (ret == 0 && syscall_enters_seccomp(nr, a))
		KEEP_ERRNO(sandbox_entered());
	return ret;
}
