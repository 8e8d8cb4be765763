/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * glibc's _FORTIFY_SOURCE entry points for the interposed calls. A program built with
 * -D_FORTIFY_SOURCE calls __read_chk() instead of read() when the buffer size is
 * known; these check the size exactly as glibc does (and abort through glibc's own
 * __chk_fail with its usual message), then behave like the plain wrapper.
 */
#include "preload/wrap.h"

#include <poll.h>

extern void __chk_fail(void) __attribute__((noreturn));

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t n, size_t buflen, int flags,
		       __SOCKADDR_ARG addr, socklen_t *restrict addrlen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout_ms, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		const sigset_t *mask, size_t fdslen);

SMC_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return smc_impl_read(fd, buf, n);
}

SMC_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return smc_impl_recv(fd, buf, n, flags);
}

SMC_EXPORT ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t n, size_t buflen,
				  int flags, __SOCKADDR_ARG addr, socklen_t *restrict addrlen)
{
	if (n > buflen)
		__chk_fail();
	return smc_impl_recvfrom(fd, buf, n, flags, addr, addrlen);
}

/* fdslen is the size in bytes of the array fds points into. */
SMC_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout_ms, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return smc_impl_poll(fds, n, timeout_ms);
}

SMC_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
			   const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return smc_impl_ppoll(fds, n, timeout, mask);
}
