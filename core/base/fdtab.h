/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Which fds the library cares about. Sized by RLIMIT_NOFILE (no 16-bit limit): a
 * two-level table whose chunks are allocated on first use, so lookups are lock-free
 * and a process with a million-fd limit pays only for the fds it touches.
 */
#ifndef SMC_FDTAB_H
#define SMC_FDTAB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

enum fd_kind {
	FD_NONE = 0, /* not ours: every call goes straight to libc */
	FD_TCP,      /* AF_INET/AF_INET6 stream socket that may still be upgraded, or fallback */
	FD_LISTEN,   /* listening TCP socket with a rendezvous */
	FD_SMC,      /* upgraded (or upgrading) connection; obj is a struct smc_conn * */
	FD_EPOLL,    /* epoll instance that has SMC fds in it; obj is a struct smc_epoll * */
	/* the library's own descriptor (doorbell, rendezvous, libevent's): not the
	 * program's, so its close()/close_range() leave it alone (core/base/fdpark.h) */
	FD_OWN,
};

/* What the application did to a TCP socket that the core would otherwise ask the kernel
 * about, system call by system call, when it turns the socket into a connection. */
enum fd_flag {
	FDF_SOCKOPTS = 0x1, /* SO_RCVTIMEO, SO_SNDTIMEO or SO_LINGER set (or not known) */
	FDF_BOUND = 0x2,    /* bind() called (or not known) */
	/* FD_TCP that is never upgraded (accepted, or its connect went ahead as TCP): its
	 * epoll registrations need no record (epoll_track.h) */
	FDF_TCP_FINAL = 0x4,
	FDF_DUPED = 0x8,      /* FD_TCP duplicated: other fd numbers name the same socket */
	FDF_TRACK_LOST = 0x10, /* an epoll registration of it could not be recorded */
	/* an option the rings cannot honour was set (SO_RCVLOWAT > 1): its connection,
	 * or a listener's accepted ones, stay plain TCP (reason sockopt) */
	FDF_TCP_ONLY = 0x20,
	/* an epoll instance (epoll_create), and one added to another epoll set: a set that
	 * becomes emulated then has a waiter the emulation never sees (epoll.c, fd_waited) */
	FDF_EPOLL_FD = 0x40,
	FDF_NESTED = 0x80,
	/* TCP_QUICKACK or TCP_DEFER_ACCEPT set, which may hold a connect()'s last ACK
	 * (their state is the kernel's to tell: sock_connect.c) */
	FDF_ACK_HELD = 0x100,
};

struct fd_entry {
	uint8_t kind;
	uint8_t owed_err; /* fdtab_owe_error (atomic) */
	uint16_t flags; /* enum fd_flag, atomic */
	uint32_t born;  /* the fork generation its socket was made in (fdtab_born_now) */
	void *obj;
};

/* Largest fd the table can hold (RLIMIT_NOFILE hard limit, at least 1024). */
int fdtab_capacity(void);
/* Entry for fd, or NULL when fd is out of range. Never allocates. */
struct fd_entry *fdtab_peek(int fd);
/* Entry for fd, allocating its chunk if needed; NULL when out of range or no memory. */
struct fd_entry *fdtab_get(int fd);
void fdtab_set(int fd, enum fd_kind kind, void *obj);
void fdtab_clear(int fd);
/* The fd_flag bits of fd (0 when untracked); set adds bits; reset sets them all. */
unsigned fdtab_flags(int fd);
void fdtab_flags_set(int fd, unsigned flags);
void fdtab_flags_reset(int fd, unsigned flags);
/*
 * The kernel hands a TCP socket's error (a reset, a timeout) to one call only, and a
 * recv() that finds no data takes it even with MSG_PEEK (tcp_recvmsg: sock_error). When
 * the library's own look at the program's socket took one (a handshake reading its
 * peer's answer), the program is owed it: its next receive, send or SO_ERROR gets it,
 * as the kernel would have given it (a send gets ECONNRESET, not EPIPE and SIGPIPE).
 * fdtab_owe_error keeps err when it is such a socket error; take returns it once (0:
 * none). A new socket on the number owes nothing (fdtab_flags_reset, fdtab_clear).
 */
void fdtab_owe_error(int fd, int err);
int fdtab_owed_error_take(int fd);
/*
 * Whether another process may hold fd's socket: a fork copies every descriptor, and a
 * socket made before one may be listened on and accepted from by both (the parent binds,
 * each forked worker calls listen()). fork (and a fork-like clone) advances the process's
 * generation in parent and child; a socket is stamped with it when made (fdtab_born_now,
 * a dup copies it) and predates a fork when the generation moved on since.
 */
void fdtab_fork_happened(void);
void fdtab_born_now(int fd);
void fdtab_born_copy(int from, int to);
bool fdtab_born_before_fork(int fd);
/* The next tracked fd at or after `from`, or -1 (close_range walks only those). */
int fdtab_next_tracked(int from);
/* Looking up an fd's object and taking a reference must not interleave with another
 * thread closing that fd (which drops the table's reference): one lock per stripe of
 * fds, held only for the lookup, never across a wait. */
#define FDTAB_STRIPES 64
extern pthread_mutex_t fdtab_stripe[FDTAB_STRIPES];

static inline pthread_mutex_t *fdtab_lock(int fd)
{
	return &fdtab_stripe[(unsigned)fd % FDTAB_STRIPES];
}

/* fork (forklock.h): takes every stripe; false when one is busy. */
bool fdtab_fork_lock(void);

/* Set on the library's own threads (the progress thread): the libraries they call
 * (libevent) reach our wrappers through the PLT, and must get plain libc there. */
extern __thread bool smc_thread_internal __attribute__((tls_model("initial-exec")));

/* Fast check for the wrappers: kind of fd, FD_NONE when unknown or when the calling
 * thread is one of the library's own. */
static inline enum fd_kind fdtab_kind(int fd)
{
	extern struct fd_entry *fdtab_peek(int fd);
	struct fd_entry *e;

	if (__builtin_expect(smc_thread_internal, 0))
		return FD_NONE;
	e = fdtab_peek(fd);
	return e ? (enum fd_kind)__atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) : FD_NONE;
}

#endif
