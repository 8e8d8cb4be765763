/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The real libc functions behind every symbol the preload layer interposes.
 *
 * Core code never calls read(), close(), epoll_wait()... by name: inside the
 * preloaded object those names resolve to our own wrappers. It calls REAL(read)
 * instead. The table is resolved lazily with dlsym(RTLD_NEXT), once, so it is
 * usable before our constructor has run (other libraries' constructors may open
 * sockets first) and from several threads at once.
 */
#ifndef SMC_REAL_H
#define SMC_REAL_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

struct iovec;
struct mmsghdr;

/* X(return type, name, parameter list) for every interposed function. */
#define SMC_REAL_FUNCS(X) \
	X(int, socket, (int, int, int)) \
	X(int, socketpair, (int, int, int, int[2])) \
	X(int, bind, (int, const struct sockaddr *, socklen_t)) \
	X(int, listen, (int, int)) \
	X(int, accept, (int, struct sockaddr *, socklen_t *)) \
	X(int, accept4, (int, struct sockaddr *, socklen_t *, int)) \
	X(int, connect, (int, const struct sockaddr *, socklen_t)) \
	X(ssize_t, read, (int, void *, size_t)) \
	X(ssize_t, readv, (int, const struct iovec *, int)) \
	X(ssize_t, write, (int, const void *, size_t)) \
	X(ssize_t, writev, (int, const struct iovec *, int)) \
	X(ssize_t, recv, (int, void *, size_t, int)) \
	X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *)) \
	X(ssize_t, recvmsg, (int, struct msghdr *, int)) \
	X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *)) \
	X(ssize_t, send, (int, const void *, size_t, int)) \
	X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int)) \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int)) \
	X(ssize_t, sendfile, (int, int, off_t *, size_t)) \
	X(ssize_t, sendfile64, (int, int, off64_t *, size_t)) \
	X(ssize_t, splice, (int, off64_t *, int, off64_t *, size_t, unsigned int)) \
	X(int, close, (int)) \
	X(int, close_range, (unsigned int, unsigned int, int)) \
	X(int, shutdown, (int, int)) \
	X(int, dup, (int)) \
	X(int, open, (const char *, int, ...)) \
	X(int, open64, (const char *, int, ...)) \
	X(int, openat, (int, const char *, int, ...)) \
	X(int, openat64, (int, const char *, int, ...)) \
	X(int, pipe, (int[2])) \
	X(int, pipe2, (int[2], int)) \
	X(int, dup2, (int, int)) \
	X(int, dup3, (int, int, int)) \
	X(int, fcntl, (int, int, ...)) \
	X(int, fcntl64, (int, int, ...)) \
	X(int, ioctl, (int, unsigned long, ...)) \
	X(int, getsockopt, (int, int, int, void *, socklen_t *)) \
	X(int, setsockopt, (int, int, int, const void *, socklen_t)) \
	X(int, getsockname, (int, struct sockaddr *, socklen_t *)) \
	X(int, getpeername, (int, struct sockaddr *, socklen_t *)) \
	X(int, poll, (struct pollfd *, nfds_t, int)) \
	X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *)) \
	X(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)) \
	X(int, epoll_create, (int)) \
	X(int, epoll_create1, (int)) \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *)) \
	X(int, epoll_wait, (int, struct epoll_event *, int, int)) \
	X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *)) \
	X(int, epoll_pwait2, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *)) \
	X(pid_t, fork, (void)) \
	X(pid_t, vfork, (void)) \
	X(int, clone, (int (*)(void *), void *, int, void *, ...)) \
	X(int, daemon, (int, int)) \
	X(int, execve, (const char *, char *const[], char *const[])) \
	X(int, execveat, (int, const char *, char *const[], char *const[], int)) \
	X(int, fexecve, (int, char *const[], char *const[])) \
	X(int, execv, (const char *, char *const[])) \
	X(int, execvp, (const char *, char *const[])) \
	X(int, execvpe, (const char *, char *const[], char *const[])) \
	X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const[], char *const[])) \
	X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const[], char *const[])) \
	X(int, posix_spawn_file_actions_adddup2, (posix_spawn_file_actions_t *, int, int)) \
	X(int, system, (const char *)) \
	X(FILE *, popen, (const char *, const char *)) \
	X(FILE *, fdopen, (int, const char *)) \
	X(long, syscall, (long, ...)) \
	X(int, prctl, (int, ...)) \
	X(int, chroot, (const char *)) \
	X(int, unshare, (int)) \
	X(int, setns, (int, int))

#define SMC_REAL_DECLARE(ret, name, args) ret (*name) args;
struct smc_real {
	SMC_REAL_FUNCS(SMC_REAL_DECLARE)
};
#undef SMC_REAL_DECLARE

extern struct smc_real smc_real_fns;

/* Resolves the whole table; idempotent and thread safe. */
void real_init(void);

/* Functions glibc may lack (an old libc without close_range or epoll_pwait2) stay NULL;
 * callers of those check and fail with ENOSYS. */
#define REAL(name) (__builtin_expect(smc_real_fns.name != NULL, 1) ? smc_real_fns.name \
		    : (real_init(), smc_real_fns.name))

#endif
