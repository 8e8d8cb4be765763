/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The core's entry points for the preload layer. A wrapper looks the fd up with
 * fdtab_kind(); for FD_NONE it calls libc itself, otherwise exactly one of these.
 * Each has the libc function's contract: return value and errno as the socket API
 * documents them.
 */
#ifndef SMC_SOCK_H
#define SMC_SOCK_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "core/base/stats.h"
#include "core/readiness/epoll.h" /* smc_epoll_cookies */

/* After a successful real socket()/socketpair()/accept(): decides whether the core tracks fd. */
void smc_sock_created(int fd, int domain, int type, int protocol);
/* bind() on fd succeeded. */
void smc_sock_bound(int fd);

/* For fds of kind != FD_NONE. */
int smc_sock_connect(int fd, const struct sockaddr *addr, socklen_t len);
int smc_sock_listen(int fd, int backlog);
/* At load: tracks the TCP listeners inherited across exec that the previous program
 * image opted in for the SMC option (the kernel keeps the opt-in, our table starts
 * empty): their clients propose in band, and those bytes must not reach the
 * application (preload/process.c calls it from the library's constructor). The same
 * walk notes an io_uring instance among them (io_uring_watch.h). Then grows the fd
 * table for the library's descriptors (fd_park_prepare). */
void smc_sock_adopt_inherited(void);
/* After recvmsg() brought descriptors (SCM_RIGHTS): a TCP listener among them is
 * tracked as an inherited one (sock_accept.c). */
void smc_sock_after_fd_receive(const struct msghdr *msg);
/* Listener fd is being passed to another process: its pools refuse from now on. */
void sock_listener_passed(int fd);
int smc_sock_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags);
/* Vectored receive/send behind read/readv/recv/recvfrom/recvmsg and write/writev/send/
 * sendto/sendmsg. flags are MSG_* flags. */
ssize_t smc_sock_recv(int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t smc_sock_send(int fd, const struct iovec *iov, int iovcnt, int flags);
int smc_sock_shutdown(int fd, int how);
/* Called BEFORE the real close(fd): releases the core's state for fd. */
void smc_sock_before_close(int fd);
/* The FALLBACK connection c leaves the library's table: its descriptors are plain TCP
 * sockets to it from now on (a stdio hand-off, whose close no wrapper sees). */
void smc_sock_release_tcp_conn(struct smc_conn *c);
/* After a successful real dup/dup2/dup3/F_DUPFD: newfd refers to the same socket. */
void smc_sock_dup(int oldfd, int newfd);
/* O_NONBLOCK changed through fcntl(F_SETFL) or ioctl(FIONBIO). */
void smc_sock_set_nonblock(int fd, bool on);
/* O_ASYNC or FIOASYNC was set on fd: signal-driven I/O comes from the kernel's socket,
 * so the connection is plain TCP from now on (reason sockopt). */
void smc_sock_set_async(int fd);
int smc_sock_ioctl(int fd, unsigned long req, void *arg);
int smc_sock_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
/* getpeername() of a connection whose TCP channel the peer's close reset: the address it
 * had (ENOTCONN when not known). */
int smc_sock_getpeername(int fd, struct sockaddr *addr, socklen_t *len);
int smc_sock_setsockopt(int fd, int level, int name, const void *val, socklen_t len);

/* Readiness. Called when the set contains an fd of kind FD_SMC or FD_EPOLL. */
bool smc_poll_involved(const struct pollfd *fds, nfds_t n);
int smc_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
	     const sigset_t *mask);
int smc_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
/* epoll_create*: fd is an epoll instance (not yet emulated: that is lazy). */
void smc_epoll_created(int fd);
/* A kernel EPOLL_CTL_ADD of fd, which the emulation does not take: an epoll instance
 * added so is waited on where the emulation cannot see it. */
void smc_epoll_kernel_add(int fd);
int smc_epoll_wait(int epfd, struct epoll_event *ev, int max, const struct timespec *timeout,
		   const sigset_t *mask);
int smc_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
	       const sigset_t *mask);
/* A kernel epoll wait (epfd not FD_EPOLL when the caller looked) returned n > 0 events
 * while smc_epoll_cookies is set: the library's own event is taken out. */
int smc_epoll_after_kernel(int epfd, struct epoll_event *ev, int n, int max,
			   const struct timespec *timeout, const sigset_t *mask);
/* epoll_create*: the epoll fd itself is tracked lazily, on its first SMC registration. */


/* Before a new program starts with our descriptors (core/sock/downgrade.c): how says
 * whether the exec family replaces our image (SMC_EXEC_REPLACES; posix_spawn, system and
 * popen run the program in a child) and whether path is searched in $PATH
 * (SMC_EXEC_SEARCH). Every upgraded connection it inherits goes back to plain TCP, or,
 * when the new image loads this library, is carried into it (exec_carry.c). path (may
 * be NULL: unknown) and envp: the file and environment the program starts with.
 * Returns the environment the exec must pass: envp, or a copy that names the carried
 * connections. */
#define SMC_EXEC_REPLACES 0x1u
#define SMC_EXEC_SEARCH   0x2u
char *const *smc_sock_before_exec(unsigned how, const char *path, char *const envp[]);
/* The exec that smc_sock_before_exec prepared for failed: this image goes on with its
 * listeners and carried connections as before. */
void smc_sock_exec_failed(void);
/* execveat's file as a path for exec_image_runs_library (buf when one is built), or
 * NULL. */
const char *exec_image_at(int dirfd, const char *path, int flags, char *buf, size_t len);
/* core/sock/exec_image.c: whether the program at path (searched in $PATH when search)
 * loads this library with environment envp. */
bool exec_image_runs_library(const char *path, bool search, char *const envp[]);
/* Whether the ELF at path is a Go program (its runtime bypasses the C library). */
bool exec_image_is_go(const char *path);
/* core/sock/exec_carry.c: the old image's side (candidate: ACTIVE over shared memory;
 * hold_all: holds and records every one the new program inherits, `leave` taking
 * the others back to TCP; finish: the description and the new environment; release:
 * the exec failed) and the new image's (adopt, from the constructor). */
bool exec_carry_possible(void);
bool exec_carry_candidate(int fd);
void exec_carry_hold_all(void (*leave)(int fd));
char *const *exec_carry_finish(char *const envp[], void (*leave)(int fd));
void exec_carry_release(void);
void exec_carry_adopt(void);
/* core/sock/exec.c, for smc_sock_before_exec and smc_sock_before_spawn_dup: the opted-in
 * listeners a new program inherits stop answering the SMC TCP option, and their names
 * are shut when it does not load the library. */
void exec_listeners_withdraw(bool new_image_runs_library);
/* Whether descriptor fd goes into the new program of an exec (no FD_CLOEXEC). */
bool exec_fd_survives(int fd);
/* Whether an epoll set with one of our connections in it survives the exec. */
bool exec_epoll_inherited(void);
void exec_listener_spawn_dup(int fd);
/* Listener fd goes to a program without the library: its rendezvous name stops
 * answering, for every process that holds it (rdv_listener_shut). */
void sock_listener_shut_name(int fd);
/* core/sock/exec.c: an opted-in listener of ours started listening on fd. */
void exec_listener_listening(int fd);
/* Whether listening socket fd of ours answers the SMC TCP option (tcpopt.h). */
bool sock_listener_opted_in(int fd);
/* close_range() that closes (no CLOSE_RANGE_CLOEXEC), after smc_sock_before_close of
 * the tracked fds in the range: everything but the descriptors the connections still
 * need, which the library closes itself. A child that closes every descriptor above 2
 * before its exec (Python's subprocess, systemd's spawn) keeps the doorbells its exec
 * must ring to take the connections back to TCP (else the peer sleeps for ever). */
int smc_sock_close_range(unsigned int first, unsigned int last, int flags);
/* fd is named in a spawn's file actions (posix_spawn_file_actions_adddup2): the new
 * program may get it whatever its FD_CLOEXEC. */
void smc_sock_before_spawn_dup(int fd);
/* sendmsg() with control data on any socket: the upgraded connections whose
 * descriptors it passes (SCM_RIGHTS) go back to plain TCP first (downgrade.c). */
struct msghdr;
void smc_sock_before_fd_pass(const struct msghdr *msg);
/* fd is about to be used through stdio (fdopen, or it became fd 0, 1 or 2): an
 * upgraded connection goes back to plain TCP first (downgrade.c). */
void smc_sock_before_stdio(int fd);
/* A call of the program that makes a descriptor failed with err: when it is EMFILE and
 * the library holds descriptors, some go back (fd_pressure.c); true when any did, and
 * the call is worth making again. */
bool smc_sock_fd_pressure(int err);
/* Every upgraded connection of the process goes back to plain TCP (io_uring). */
void smc_sock_downgrade_all(enum smc_reason why);
/* An io_uring instance was created (core/base/io_uring_watch.h): from now on no
 * connection is upgraded, and those upgraded before go back to plain TCP (downgrade.c). */
void io_uring_note_setup(void);
/* Before fork(): the child may use any descriptor it inherits, and an RDMA connection
 * cannot be used there (the QP is the parent's): those whose descriptor a new program
 * would inherit (no FD_CLOEXEC: inetd-style servers, sshd, a backend per connection)
 * go back to TCP first. */
void smc_sock_before_fork(void);
/* Closes, as the kernel closes a socket, the RDMA connections for which closing(c)
 * holds, then waits (bounded) until no RDMA link has output pending: the process is
 * about to lose its QPs (exit, exec). exit_drain.c. */
void smc_sock_drain_rdma(bool (*closing)(const struct smc_conn *c));
/* Finishes, blocking (bounded), the re-sends to peers gone back to TCP that the
 * progress thread still had to send: it is about to end (exit, exec). */
void smc_sock_finish_resends(void);

/* fork handling is installed with pthread_atfork by the core's init (forklock.h). */

#endif
