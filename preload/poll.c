/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Readiness wrappers: poll, ppoll, select, pselect, epoll_create, epoll_create1,
 * epoll_ctl, epoll_wait, epoll_pwait, epoll_pwait2.
 *
 * Sets without an SMC fd go to the kernel untouched. Otherwise the core emulates the
 * call; it takes one timeout form (a timespec, NULL = forever), so the millisecond and
 * timeval forms are converted here, and select()'s Linux habit of writing back the
 * remaining time is reproduced.
 */
#include "preload/wrap.h"

#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#include "core/base/clock.h"

/* glibc declares poll()'s array write-only (__attr_access), so GCC believes a
 * definition of poll() that reads fds reads uninitialized memory. It is the caller's
 * initialized array. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* poll/epoll milliseconds: negative means wait forever (NULL). */
static const struct timespec *ms_to_timespec(int ms, struct timespec *ts)
{
	if (ms < 0)
		return NULL;
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (long)(ms % 1000) * 1000000L;
	return ts;
}

/* ------------------------------------------------------------------ poll */

SMC_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	if (!smc_poll_involved(fds, n))
		return REAL(poll)(fds, n, timeout_ms);
	struct timespec ts;
	return smc_poll(fds, n, ms_to_timespec(timeout_ms, &ts), NULL);
}
SMC_EXPORT int __poll(struct pollfd *fds, nfds_t n, int timeout_ms) SMC_ALIAS(poll);
int smc_impl_poll(struct pollfd *fds, nfds_t n, int timeout_ms) SMC_INTERNAL_ALIAS(poll);

/* glibc's ppoll() never writes the timeout back (the raw syscall would): neither do we. */
SMC_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		     const sigset_t *mask)
{
	if (!smc_poll_involved(fds, n))
		return REAL(ppoll)(fds, n, timeout, mask);
	return smc_poll(fds, n, timeout, mask);
}
int smc_impl_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		   const sigset_t *mask) SMC_INTERNAL_ALIAS(ppoll);

/* ------------------------------------------------------------------ select */

static bool kind_needs_core(enum fd_kind k)
{
	return k == FD_SMC || k == FD_EPOLL;
}

/* Whether any fd below nfds set in one of the sets is an SMC (or SMC-holding epoll)
 * fd. Bits are read word by word, without FD_ISSET, so sets larger than FD_SETSIZE
 * (allocated by programs with many fds) work as they do with the kernel. */
bool smc_fdsets_involved(int nfds, const fd_set *r, const fd_set *w, const fd_set *e)
{
	const int bits = (int)(8 * sizeof(__fd_mask));
	int cap = fdtab_capacity();

	if (nfds > cap)
		nfds = cap;
	for (int base = 0; base < nfds; base += bits) {
		__fd_mask word = 0;
		int idx = base / bits;
		if (r)
			word |= __FDS_BITS(r)[idx];
		if (w)
			word |= __FDS_BITS(w)[idx];
		if (e)
			word |= __FDS_BITS(e)[idx];
		if (nfds - base < bits)
			word &= (__fd_mask)((1UL << (nfds - base)) - 1);
		while (word) {
			int bit = __builtin_ctzl((unsigned long)word);
			if (kind_needs_core(fdtab_kind(base + bit)))
				return true;
			word &= word - 1;
		}
	}
	return false;
}

/* select() through the core, with Linux's timeval handling: tv_usec of a million or
 * more carries into seconds, negative values are EINVAL, and on return (whatever the
 * result) the unslept time is written back unless the timeout was zero. */
static int select_via_core(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	if (!tv)
		return smc_select(nfds, r, w, e, NULL, NULL);
	if (tv->tv_sec < 0 || tv->tv_usec < 0) {
		errno = EINVAL;
		return -1;
	}
	struct timespec ts = {
		.tv_sec = tv->tv_sec + tv->tv_usec / 1000000,
		.tv_nsec = (tv->tv_usec % 1000000) * 1000,
	};
	int64_t budget = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	int64_t start = (int64_t)clock_now_ns();
	int ret = smc_select(nfds, r, w, e, &ts, NULL);
	if (budget > 0) {
		int64_t left = budget - ((int64_t)clock_now_ns() - start);
		if (left < 0)
			left = 0;
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return ret;
}

SMC_EXPORT int select(int nfds, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
		      struct timeval *restrict tv)
{
	if (nfds <= 0 || !smc_fdsets_involved(nfds, r, w, e))
		return REAL(select)(nfds, r, w, e, tv);
	return select_via_core(nfds, r, w, e, tv);
}
SMC_EXPORT int __select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
	SMC_ALIAS(select);
int smc_impl_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
	SMC_INTERNAL_ALIAS(select);

SMC_EXPORT int pselect(int nfds, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
		       const struct timespec *restrict timeout, const sigset_t *restrict mask)
{
	if (nfds <= 0 || !smc_fdsets_involved(nfds, r, w, e))
		return REAL(pselect)(nfds, r, w, e, timeout, mask);
	return smc_select(nfds, r, w, e, timeout, mask);
}
int smc_impl_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		     const sigset_t *mask) SMC_INTERNAL_ALIAS(pselect);

/* ------------------------------------------------------------------ epoll */

/* A new epoll instance holds nothing of ours; the core tracks it on its first SMC
 * registration. */
SMC_EXPORT int epoll_create(int size)
{
	int fd = FD_MAKING_CALL(REAL(epoll_create)(size));

	if (fd >= 0)
		smc_epoll_created(fd);
	return fd;
}

SMC_EXPORT int epoll_create1(int flags)
{
	int fd = FD_MAKING_CALL(REAL(epoll_create1)(flags));

	if (fd >= 0)
		smc_epoll_created(fd);
	return fd;
}

/* FD_TCP goes to the core too: a socket that may still be upgraded has its kernel
 * registrations recorded (core/readiness/epoll_track.h). */
SMC_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	enum fd_kind k = fdtab_kind(fd);

	if (k != FD_SMC && k != FD_EPOLL && k != FD_TCP && fdtab_kind(epfd) != FD_EPOLL) {
		if (op == EPOLL_CTL_ADD)
			smc_epoll_kernel_add(fd);
		return REAL(epoll_ctl)(epfd, op, fd, ev);
	}
	return smc_epoll_ctl(epfd, op, fd, ev);
}
int smc_impl_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
	SMC_INTERNAL_ALIAS(epoll_ctl);

/* Once the library has put its own entry into some epoll set, every wait goes through
 * the core, which never lets that entry's event out. A wait that entered the kernel
 * before is checked on return: another thread may have made its set emulated. The
 * library's own threads never wait on an application's set. */
static bool cookies_possible(void)
{
	return !smc_thread_internal && __atomic_load_n(&smc_epoll_cookies, __ATOMIC_ACQUIRE);
}

static bool epoll_via_core(int epfd)
{
	return fdtab_kind(epfd) == FD_EPOLL || cookies_possible();
}

static int epoll_kernel_done(int epfd, struct epoll_event *ev, int n, int max,
			     const struct timespec *timeout, const sigset_t *mask)
{
	if (n <= 0 || !cookies_possible())
		return n;
	return smc_epoll_after_kernel(epfd, ev, n, max, timeout, mask);
}

SMC_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms)
{
	struct timespec ts;

	if (epoll_via_core(epfd))
		return smc_epoll_wait(epfd, ev, max, ms_to_timespec(timeout_ms, &ts), NULL);
	int n = REAL(epoll_wait)(epfd, ev, max, timeout_ms);
	return epoll_kernel_done(epfd, ev, n, max, ms_to_timespec(timeout_ms, &ts), NULL);
}
int smc_impl_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms)
	SMC_INTERNAL_ALIAS(epoll_wait);

SMC_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms,
			   const sigset_t *mask)
{
	struct timespec ts;

	if (epoll_via_core(epfd))
		return smc_epoll_wait(epfd, ev, max, ms_to_timespec(timeout_ms, &ts), mask);
	int n = REAL(epoll_pwait)(epfd, ev, max, timeout_ms, mask);
	return epoll_kernel_done(epfd, ev, n, max, ms_to_timespec(timeout_ms, &ts), mask);
}
int smc_impl_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms,
			 const sigset_t *mask) SMC_INTERNAL_ALIAS(epoll_pwait);

SMC_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *timeout, const sigset_t *mask)
{
	if (epoll_via_core(epfd))
		return smc_epoll_wait(epfd, ev, max, timeout, mask);
	int n = CALL_REAL(epoll_pwait2, epfd, ev, max, timeout, mask);
	return epoll_kernel_done(epfd, ev, n, max, timeout, mask);
}
int smc_impl_epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			  const struct timespec *timeout, const sigset_t *mask)
	SMC_INTERNAL_ALIAS(epoll_pwait2);
