/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Shared by the thin wrappers in preload/. Include this FIRST in each of their files.
 *
 * A wrapper looks its fd up in the table; an fd we do not track goes straight to the
 * real libc function with the caller's arguments, so its result and errno are libc's
 * own. Tracked fds go to exactly one core entry point (core/sock/sock.h). Wrappers never
 * call an interposed function by name: only REAL() or CALL_REAL().
 */
#ifndef SMC_PRELOAD_WRAP_H
#define SMC_PRELOAD_WRAP_H

/* The wrappers define read(), recv()... themselves: glibc's fortify inline versions of
 * those names must not be in the way. */
#undef _FORTIFY_SOURCE

#include <errno.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "core/base/fdtab.h"
#include "core/base/real.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"

/* The library is built with -fvisibility=hidden; only interposed symbols are exported. */
#define SMC_EXPORT __attribute__((visibility("default")))
/* A second exported name for the same wrapper (glibc's public __close, __read...);
 * copy() gives it the target's attributes (nothrow, leaf) as GCC wants for an alias. */
#if defined(__has_attribute) && __has_attribute(copy)
#define SMC_ALIAS(target) __attribute__((alias(#target), copy(target), visibility("default")))
#else
#define SMC_ALIAS(target) __attribute__((alias(#target), visibility("default")))
#endif

/* Calls the real function, or fails with ENOSYS when the running libc lacks it. */
#define CALL_REAL(name, ...) \
	({ __typeof__(smc_real_fns.name) real_fn_ = REAL(name); \
	   real_fn_ ? real_fn_(__VA_ARGS__) : (errno = ENOSYS, -1); })

/* Kinds that are sockets the core handles (FD_EPOLL is not a socket: data calls on it
 * go to libc, which answers as the kernel does). */
static inline bool kind_is_sock(enum fd_kind k)
{
	return k == FD_TCP || k == FD_LISTEN || k == FD_SMC;
}

/* A call that makes a descriptor: when it fails with EMFILE and the library gives some
 * of its own back (core/sock/fd_pressure.c), it is made once more, as the program would
 * have had that room without the library. */
#define FD_MAKING_CALL(call) \
	({ int fd_ = (call); \
	   if (fd_ < 0) { \
		   int e_ = errno; \
		   if (smc_sock_fd_pressure(e_)) \
			   fd_ = (call); \
		   else \
			   errno = e_; \
	   } \
	   fd_; })

/* Notifications to the core after a successful libc call must not disturb errno:
 * libc leaves it untouched on success and some programs look at it anyway. */
#define KEEP_ERRNO(stmt) do { int saved_errno_ = errno; stmt; errno = saved_errno_; } while (0)

/* sys/socket.h under _GNU_SOURCE declares the address parameters as transparent
 * unions; the wrappers' definitions must match those declarations. */
#if !defined(__USE_GNU) || defined(__cplusplus)
#error "preload/ must be compiled with _GNU_SOURCE (transparent sockaddr unions)"
#endif
#define SA_PTR(arg) ((arg).__sockaddr__)

/* A hidden second name for a wrapper, so another file of the library can call the
 * wrapper directly (not through the PLT, where another object's symbol could win). */
#if defined(__has_attribute) && __has_attribute(copy)
#define SMC_INTERNAL_ALIAS(target) __attribute__((alias(#target), copy(target), visibility("hidden")))
#else
#define SMC_INTERNAL_ALIAS(target) __attribute__((alias(#target), visibility("hidden")))
#endif

/* Internal names of wrappers, used by the fortify entry points (preload/fortify.c)
 * and by syscall() (preload/syscall.c), which route into the same code. */
ssize_t smc_impl_read(int fd, void *buf, size_t n);
ssize_t smc_impl_readv(int fd, const struct iovec *iov, int iovcnt);
ssize_t smc_impl_recv(int fd, void *buf, size_t n, int flags);
ssize_t smc_impl_recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
			  socklen_t *addrlen);
ssize_t smc_impl_recvmsg(int fd, struct msghdr *msg, int flags);
int smc_impl_recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		      struct timespec *timeout);
ssize_t smc_impl_write(int fd, const void *buf, size_t n);
ssize_t smc_impl_writev(int fd, const struct iovec *iov, int iovcnt);
ssize_t smc_impl_sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr,
			socklen_t addrlen);
ssize_t smc_impl_sendmsg(int fd, const struct msghdr *msg, int flags);
int smc_impl_sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags);
ssize_t smc_impl_sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count);
ssize_t smc_impl_splice(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out, size_t len,
			unsigned int flags);
int smc_impl_socket(int domain, int type, int protocol);
int smc_impl_bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len);
int smc_impl_listen(int fd, int backlog);
int smc_impl_accept(int fd, __SOCKADDR_ARG addr, socklen_t *len);
int smc_impl_accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags);
int smc_impl_connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len);
int smc_impl_shutdown(int fd, int how);
int smc_impl_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int smc_impl_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
int smc_impl_close(int fd);
int smc_impl_close_range(unsigned int first, unsigned int last, int flags);
int smc_impl_unshare(int flags);
int smc_impl_dup(int oldfd);
int smc_impl_dup2(int oldfd, int newfd);
int smc_impl_dup3(int oldfd, int newfd, int flags);
int smc_impl_fcntl(int fd, int cmd, ...);
int smc_impl_ioctl(int fd, unsigned long req, ...);
int smc_impl_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
int smc_impl_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		   const sigset_t *mask);
int smc_impl_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv);
int smc_impl_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		     const sigset_t *mask);
int smc_impl_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int smc_impl_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms);
int smc_impl_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout_ms,
			 const sigset_t *mask);
int smc_impl_epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			  const struct timespec *timeout, const sigset_t *mask);
pid_t smc_impl_fork(void);

/* Whether select()'s sets name an fd the core must handle (preload/poll.c). */
bool smc_fdsets_involved(int nfds, const fd_set *r, const fd_set *w, const fd_set *e);

#endif
