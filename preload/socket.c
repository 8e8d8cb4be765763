/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Wrappers for socket setup and fd management: socket, socketpair, bind, listen,
 * accept, accept4, connect, shutdown, [gs]etsockopt, get{sock,peer}name, close,
 * close_range, closefrom, dup, dup2, dup3, fcntl, fcntl64, ioctl.
 */
#include "preload/wrap.h"
#include "core/base/fdpark.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <linux/sockios.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

SMC_EXPORT int socket(int domain, int type, int protocol)
{
	int fd = FD_MAKING_CALL(REAL(socket)(domain, type, protocol));

	if (fd >= 0)
		KEEP_ERRNO(smc_sock_created(fd, domain, type, protocol));
	return fd;
}
int smc_impl_socket(int domain, int type, int protocol) SMC_INTERNAL_ALIAS(socket);

/* socketpair() only makes AF_UNIX (or other local) pairs: never ours. */
SMC_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	return FD_MAKING_CALL(REAL(socketpair)(domain, type, protocol, sv));
}

SMC_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	int r = REAL(bind)(fd, SA_PTR(addr), len);

	if (r == 0 && fdtab_kind(fd) == FD_TCP)
		smc_sock_bound(fd);
	return r;
}
int smc_impl_bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len) SMC_INTERNAL_ALIAS(bind);

SMC_EXPORT int listen(int fd, int backlog)
{
	enum fd_kind k = fdtab_kind(fd);

	/* FD_NONE too: a TCP socket made in another process (core/sock/sock_accept.c) */
	if (!kind_is_sock(k) && k != FD_NONE)
		return REAL(listen)(fd, backlog);
	return smc_sock_listen(fd, backlog);
}
int smc_impl_listen(int fd, int backlog) SMC_INTERNAL_ALIAS(listen);

/* A TCP socket that is (or is about to behave as) a listener: the core decides. */
static bool accepts_via_core(enum fd_kind k)
{
	return k == FD_LISTEN || k == FD_TCP;
}

SMC_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len)
{
	if (!accepts_via_core(fdtab_kind(fd)))
		return FD_MAKING_CALL(REAL(accept)(fd, SA_PTR(addr), len));
	return smc_sock_accept(fd, SA_PTR(addr), len, 0);
}
int smc_impl_accept(int fd, __SOCKADDR_ARG addr, socklen_t *len) SMC_INTERNAL_ALIAS(accept);

SMC_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len, int flags)
{
	if (!accepts_via_core(fdtab_kind(fd)))
		return FD_MAKING_CALL(REAL(accept4)(fd, SA_PTR(addr), len, flags));
	return smc_sock_accept(fd, SA_PTR(addr), len, flags);
}
int smc_impl_accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
	SMC_INTERNAL_ALIAS(accept4);

SMC_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(connect)(fd, SA_PTR(addr), len);
	return smc_sock_connect(fd, SA_PTR(addr), len);
}
SMC_EXPORT int __connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len) SMC_ALIAS(connect);
int smc_impl_connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len) SMC_INTERNAL_ALIAS(connect);

SMC_EXPORT int shutdown(int fd, int how)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(shutdown)(fd, how);
	return smc_sock_shutdown(fd, how);
}
int smc_impl_shutdown(int fd, int how) SMC_INTERNAL_ALIAS(shutdown);

SMC_EXPORT int getsockopt(int fd, int level, int name, void *restrict val,
			  socklen_t *restrict len)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(getsockopt)(fd, level, name, val, len);
	return smc_sock_getsockopt(fd, level, name, val, len);
}
int smc_impl_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
	SMC_INTERNAL_ALIAS(getsockopt);

SMC_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(setsockopt)(fd, level, name, val, len);
	return smc_sock_setsockopt(fd, level, name, val, len);
}
int smc_impl_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
	SMC_INTERNAL_ALIAS(setsockopt);

/* The TCP socket is the connection's identity: its names are always the real ones. */
SMC_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len)
{
	return REAL(getsockname)(fd, SA_PTR(addr), len);
}

SMC_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len)
{
	int r = REAL(getpeername)(fd, SA_PTR(addr), len);

	/* a peer's close resets the TCP channel of a connection on the rings */
	if (__builtin_expect(r < 0 && errno == ENOTCONN, 0) && fdtab_kind(fd) == FD_SMC)
		return smc_sock_getpeername(fd, SA_PTR(addr), len);
	return r;
}

/* ------------------------------------------------------------------ closing */

SMC_EXPORT int close(int fd)
{
	enum fd_kind k = fdtab_kind(fd);

	/* one of the library's own fds, which a program closing "everything" (a loop
	 * over /proc/self/fd or up to its limit) reaches: not the program's to close,
	 * and closing what is not there is no error for such a loop (fdpark.h) */
	if (__builtin_expect(k == FD_OWN, 0))
		return 0;
	if (k != FD_NONE)
		KEEP_ERRNO(smc_sock_before_close(fd));
	return REAL(close)(fd);
}
SMC_EXPORT int __close(int fd) SMC_ALIAS(close);
int smc_impl_close(int fd) SMC_INTERNAL_ALIAS(close);

/* Only a call the kernel will accept may release anything: bad flags or first > last
 * fail with EINVAL and close nothing, CLOSE_RANGE_CLOEXEC only marks the fds. */
static bool close_range_closes(unsigned int first, unsigned int last, int flags)
{
	unsigned int known = CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC;

	if ((unsigned int)flags & ~known)
		return false;
	if (flags & CLOSE_RANGE_CLOEXEC)
		return false;
	return first <= last && first <= INT_MAX;
}

SMC_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	if (REAL(close_range) && ((unsigned int)flags & CLOSE_RANGE_UNSHARE) &&
	    !((unsigned int)flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) && first <= last) {
		/* the table of this thread's own first (core/sock/table_split.c), then the
		 * rest of the call in it */
		bool split = false;
		int r;

		KEEP_ERRNO(split = smc_before_table_split());
		r = REAL(unshare)(CLONE_FILES);
		if (r < 0)
			return r;
		KEEP_ERRNO(smc_table_split(split));
		return close_range(first, last, flags & ~(int)CLOSE_RANGE_UNSHARE);
	}
	if (REAL(close_range) && close_range_closes(first, last, flags)) {
		int saved_errno = errno;
		for (int fd = fdtab_next_tracked((int)first); fd >= 0 && (unsigned int)fd <= last;
		     fd = fd == INT_MAX ? -1 : fdtab_next_tracked(fd + 1))
			smc_sock_before_close(fd);
		errno = saved_errno;
		return smc_sock_close_range(first, last, flags);
	}
	return CALL_REAL(close_range, first, last, flags);
}
int smc_impl_close_range(unsigned int first, unsigned int last, int flags)
	SMC_INTERNAL_ALIAS(close_range);

/* glibc's closefrom() makes the close_range system call itself, past the wrapper
 * above, and would close the library's descriptors with the program's (tmux, inetd,
 * Samba call it). Without close_range (a kernel before 5.9) each open number goes
 * through close(), as glibc's own fallback does. */
SMC_EXPORT void closefrom(int lowfd)
{
	unsigned int first = lowfd < 0 ? 0 : (unsigned int)lowfd;
	DIR *d;
	struct dirent *de;

	if (smc_impl_close_range(first, ~0U, 0) == 0)
		return;
	d = opendir("/proc/self/fd");
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		long fd = strtol(de->d_name, NULL, 10);

		if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && fd >= (long)first &&
		    fd != dirfd(d))
			smc_impl_close((int)fd);
	}
	closedir(d);
}

/* ------------------------------------------------------------------ duplication */

static void note_dup(int oldfd, int newfd)
{
	if (newfd >= 0 && newfd != oldfd && fdtab_kind(oldfd) != FD_NONE)
		KEEP_ERRNO(smc_sock_dup(oldfd, newfd));
}

/*
 * dup2/dup3 silently close newfd. Its state must be released before the real call
 * (the core may still use the fd while releasing), but only if the call is going to
 * succeed: an invalid oldfd (the usual failure) is checked first, and then libc
 * answers with its own errno. Rarer failures after the release (EBUSY, EINTR) leave
 * newfd open but untracked, i.e. plain TCP.
 */
static bool release_replaced_fd(int oldfd, int newfd)
{
	if (newfd == oldfd || fdtab_kind(newfd) == FD_NONE)
		return true;
	if (REAL(fcntl)(oldfd, F_GETFD) < 0)
		return false;
	if (fdtab_kind(newfd) == FD_OWN)
		KEEP_ERRNO(fd_own_taken(newfd)); /* the program's number from now on */
	else
		KEEP_ERRNO(smc_sock_before_close(newfd));
	return true;
}

SMC_EXPORT int dup(int oldfd)
{
	int fd = FD_MAKING_CALL(REAL(dup)(oldfd));

	note_dup(oldfd, fd);
	return fd;
}
int smc_impl_dup(int oldfd) SMC_INTERNAL_ALIAS(dup);

SMC_EXPORT int dup2(int oldfd, int newfd)
{
	if (!release_replaced_fd(oldfd, newfd))
		return REAL(dup2)(oldfd, newfd);
	int fd = REAL(dup2)(oldfd, newfd);
	note_dup(oldfd, fd);
	return fd;
}
SMC_EXPORT int __dup2(int oldfd, int newfd) SMC_ALIAS(dup2);
int smc_impl_dup2(int oldfd, int newfd) SMC_INTERNAL_ALIAS(dup2);

SMC_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	/* dup3(fd, fd, ...) and unknown flags are EINVAL: nothing to release then. */
	if ((flags & ~O_CLOEXEC) || !release_replaced_fd(oldfd, newfd))
		return REAL(dup3)(oldfd, newfd, flags);
	int fd = REAL(dup3)(oldfd, newfd, flags);
	note_dup(oldfd, fd);
	return fd;
}
int smc_impl_dup3(int oldfd, int newfd, int flags) SMC_INTERNAL_ALIAS(dup3);

/* ------------------------------------------------------------------ fcntl, ioctl */

typedef int (*fcntl_fn)(int, int, ...);

enum fcntl_arg { FCNTL_ARG_NONE, FCNTL_ARG_INT, FCNTL_ARG_PTR };

/* The third argument's type by command; unknown commands get a pointer-sized value,
 * as glibc itself forwards it. */
static enum fcntl_arg fcntl_arg_type(int cmd)
{
	switch (cmd) {
	case F_GETFD: case F_GETFL: case F_GETOWN: case F_GETSIG: case F_GETLEASE:
	case F_GETPIPE_SZ: case F_GET_SEALS:
		return FCNTL_ARG_NONE;
	case F_DUPFD: case F_DUPFD_CLOEXEC: case F_SETFD: case F_SETFL: case F_SETOWN:
	case F_SETSIG: case F_SETLEASE: case F_NOTIFY: case F_SETPIPE_SZ: case F_ADD_SEALS:
		return FCNTL_ARG_INT;
	default:
		return FCNTL_ARG_PTR;
	}
}

static int fcntl_int_cmd(fcntl_fn real, int fd, int cmd, int arg)
{
	int ret = real(fd, cmd, arg);

	if (ret < 0)
		return ret;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		note_dup(fd, ret);
	} else if (cmd == F_SETFL && kind_is_sock(fdtab_kind(fd))) {
		KEEP_ERRNO(smc_sock_set_nonblock(fd, (arg & O_NONBLOCK) != 0));
		if (arg & O_ASYNC)
			KEEP_ERRNO(smc_sock_set_async(fd));
	}
	return ret;
}

static int fcntl_dispatch(fcntl_fn real, int fd, int cmd, va_list ap)
{
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	switch (fcntl_arg_type(cmd)) {
	case FCNTL_ARG_NONE:
		return real(fd, cmd);
	case FCNTL_ARG_INT:
		return fcntl_int_cmd(real, fd, cmd, va_arg(ap, int));
	default:
		return real(fd, cmd, va_arg(ap, void *));
	}
}

SMC_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int ret = fcntl_dispatch(REAL(fcntl), fd, cmd, ap);
	va_end(ap);
	return ret;
}
SMC_EXPORT int __fcntl(int fd, int cmd, ...) SMC_ALIAS(fcntl);
int smc_impl_fcntl(int fd, int cmd, ...) SMC_INTERNAL_ALIAS(fcntl);

SMC_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int ret = fcntl_dispatch(REAL(fcntl64), fd, cmd, ap);
	va_end(ap);
	return ret;
}

SMC_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	/* Every socket ioctl takes one pointer-sized argument (or none). */
	void *arg = va_arg(ap, void *);
	va_end(ap);

	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(ioctl)(fd, req, arg);
	switch (req) {
	case FIONBIO: {
		int ret = REAL(ioctl)(fd, req, arg);
		if (ret == 0)
			KEEP_ERRNO(smc_sock_set_nonblock(fd, *(const int *)arg != 0));
		return ret;
	}
	case FIOASYNC: {
		int ret = REAL(ioctl)(fd, req, arg);
		if (ret == 0 && *(const int *)arg != 0)
			KEEP_ERRNO(smc_sock_set_async(fd));
		return ret;
	}
	case FIONREAD: /* == SIOCINQ */
	case SIOCOUTQ:
	case SIOCATMARK:
		return smc_sock_ioctl(fd, req, arg);
	default:
		return REAL(ioctl)(fd, req, arg);
	}
}
int smc_impl_ioctl(int fd, unsigned long req, ...) SMC_INTERNAL_ALIAS(ioctl);
