/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <sys/select.h>

#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"

/* How long a sandboxed sleep that cannot watch every fd lasts before its caller looks
 * again (the doorbells it cannot name are rung meanwhile). */
#define SANDBOX_SLICE_NS 2000000L

/* Inherited across fork like the filter itself; exec drops both. */
static bool sandboxed;

void sandbox_entered(void)
{
	if (!__atomic_exchange_n(&sandboxed, true, __ATOMIC_RELAXED))
		log_debug("seccomp filter in place: restricted system calls from now on");
}

bool sandbox_active(void)
{
	return __atomic_load_n(&sandboxed, __ATOMIC_RELAXED);
}

/* select(2) in place of poll: RLIMIT_NOFILE 0 (OpenSSH sets it with its filter) makes
 * every poll of an fd fail with EINVAL, select only looks at the fds. Those it cannot
 * name (FD_SETSIZE and above: the library's parked doorbells) are not watched: the
 * sleep is a slice, after which the caller looks at its connections again. */
static int select_slice(struct pollfd *fds, nfds_t n, const struct timespec *timeout)
{
	struct timespec ts = { 0, SANDBOX_SLICE_NS };
	fd_set r, w, x;
	int maxfd = -1, ready = 0, k;

	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_ZERO(&x);
	for (nfds_t i = 0; i < n; i++) {
		int fd = fds[i].fd;

		fds[i].revents = 0;
		if (fd < 0 || fd >= FD_SETSIZE)
			continue;
		if (fds[i].events & (POLLIN | POLLRDHUP))
			FD_SET(fd, &r);
		if (fds[i].events & POLLOUT)
			FD_SET(fd, &w);
		FD_SET(fd, &x);
		if (fd > maxfd)
			maxfd = fd;
	}
	if (timeout && (timeout->tv_sec < ts.tv_sec ||
			(timeout->tv_sec == 0 && timeout->tv_nsec < ts.tv_nsec)))
		ts = *timeout;
	k = REAL(pselect)(maxfd + 1, &r, &w, &x, &ts, NULL);
	if (k <= 0)
		return k;
	for (nfds_t i = 0; i < n; i++) {
		int fd = fds[i].fd;

		if (fd < 0 || fd >= FD_SETSIZE)
			continue;
		if (FD_ISSET(fd, &r))
			fds[i].revents |= (short)(fds[i].events & (POLLIN | POLLRDHUP));
		if (FD_ISSET(fd, &w))
			fds[i].revents |= POLLOUT;
		if (FD_ISSET(fd, &x))
			fds[i].revents |= POLLPRI & fds[i].events;
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

int sandbox_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		  const sigset_t *mask)
{
	long long ms = -1;
	int r;

	if (mask || !sandbox_active())
		return REAL(ppoll)(fds, n, timeout, mask);
	if (timeout) {
		ms = (long long)timeout->tv_sec * 1000 + (timeout->tv_nsec + 999999) / 1000000;
		if (ms > INT_MAX)
			ms = INT_MAX;
	}
	r = REAL(poll)(fds, n, (int)ms);
	if (r >= 0 || errno != EINVAL || n == 0)
		return r;
	return select_slice(fds, n, timeout);
}

bool sandbox_readable(int fd)
{
	static const struct timespec zero = { 0, 0 };
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

	return sandbox_ppoll(&p, 1, &zero, NULL) == 1;
}

void sandbox_yield(void)
{
	if (!sandbox_active())
		sched_yield();
}
