/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's own descriptors (doorbells, rendezvous sockets, shadow epoll sets) live
 * in the application's fd space. Applications size tables by their fd numbers (wrk
 * refuses fds above 10 + 3 * connections, select() stops at 1024), so internal fds are
 * moved to the top of RLIMIT_NOFILE (packed against it, within its top quarter), away
 * from the numbers the application gets from the kernel's lowest-free-fd rule.
 */
#ifndef SMC_FDPARK_H
#define SMC_FDPARK_H

#include <stdbool.h>
#include <stddef.h>

#include "core/base/fdtab.h"

/* Returns fd moved to a high number (CLOEXEC), or fd itself when there is no room;
 * either way marked as the library's own (fd_own). */
int fd_park(int fd);
/* A new descriptor of fd's file, parked as fd_park would put it and marked the
 * library's own; -1 with errno when there is none. */
int fd_park_dup(int fd);
/* For the few descriptors a process keeps whatever its connections (a listener's
 * rendezvous name, the TCP option's map, the smcpstat server): fd_park, but at the
 * lowest free number from 1024 up when the limit is high. fork() copies the fd table up
 * to the highest open number (dup_fd), so one descriptor near a limit of 20,000 costs a
 * server that forks per connection ~40 us per fork; 1024 keeps select()'s numbers the
 * program's, and a handful there shifts a growing program's numbers by no more. */
int fd_park_low(int fd);

/*
 * The library's own descriptors are FD_OWN in the fd table: a program that closes
 * "everything" (close_range(3, ~0U, 0), a close() loop over /proc/self/fd, closefrom)
 * closes only its own, as it would without the library; the call reports success for
 * ours. Every fd the library keeps is marked when made (fd_park does it) and unmarked
 * when the library closes it (fd_own_close), before the number can be reused.
 */
/* Marks fd (>= 0) as the library's; returns fd. */
int fd_own(int fd);
/* Unmarks and closes one of the library's fds (any fd: unmarked ones are just closed). */
int fd_own_close(int fd);
/* Unmarks fd without closing it: the number is no longer the library's. */
void fd_own_forget(int fd);
/* The program is about to dup2/dup3 its own file onto fd: the program wins, as
 * without the library; when fd is ours, its owner's later fd_own_close leaves the
 * program's file open. */
void fd_own_taken(int fd);
/* Who is told first, while fd still names the library's file, so that it can move it
 * (the progress thread: libevent's descriptors). One, set once. */
void fd_own_taken_notify(void (*fn)(int fd));
static inline bool fd_is_own(int fd)
{
	return fdtab_kind(fd) == FD_OWN;
}
/*
 * The kernel gives a new descriptor the lowest free number, and programs count on it:
 * a daemon that closed 0, 1 and 2 opens /dev/null three times to get them back;
 * ucspi-tcp's tcpclient closes 6 and 7 and dups its socket onto them. A descriptor a
 * library we call makes without our wrappers (libevent: core/base/evlib.c) would take
 * such a number. fd_low_fill takes every free number below 1024 (or below the park
 * area, when that starts lower) with a descriptor of /dev/null marked ours, so that the
 * call lands above them; fd_low_unfill gives them back. *fill gets the numbers (the
 * count is returned; 0 and nothing to give back when no memory or descriptor). Only
 * in a process whose only thread is the caller: meanwhile another thread's open() or
 * socket() would get a number from 1024 up, past select()'s FD_SETSIZE (a program
 * that put it in an fd_set aborted, 1 run in 30). With other threads the library's
 * call gets the lowest free numbers, as one of the program's own libraries would.
 */
size_t fd_low_fill(int **fill);
void fd_low_unfill(int *fill, size_t n);

/*
 * Descriptors a library we call makes without going through our wrappers (libevent,
 * loaded privately: core/base/evlib.c): the open fds before the call (fd_own_snapshot),
 * then those that appeared since, of the kinds such a library makes (epoll, eventfd,
 * timerfd, pipe, socketpair; all close-on-exec), are marked ours and their numbers
 * stored in out[0..max) (fd_own_adopt returns how many). A kind with more new fds
 * than `expect` allows is left unmarked: another thread of the program made some of
 * them meanwhile and ours cannot be told apart.
 */
struct fd_own_snapshot {
	int *fd;
	size_t n;
};
struct fd_own_expect {
	unsigned eventpoll, eventfd, timerfd, pipe, socket;
};
void fd_own_snapshot(struct fd_own_snapshot *s);
size_t fd_own_adopt(struct fd_own_snapshot *s, const struct fd_own_expect *expect, int *out,
		    size_t max);

/* The library's fds in [first, last] (FD_OWN), appended to *keep (realloc'ed, *n
 * entries): what a program's close_range must spare. */
void fd_own_collect(unsigned int first, unsigned int last, int **keep, size_t *n);

/* close_range(first, last, flags) except for the descriptors in keep[0..n) (sorted in
 * place): the program's call closes its own descriptors, not the library's. */
int fd_close_range_sparing(unsigned int first, unsigned int last, int flags, int *keep,
			   size_t n);

/* At load, while the process is most likely still single-threaded: grows its fd table
 * to the limit once (see fdpark.c), for limits up to FD_PARK_PREPARE_MAX. */
void fd_park_prepare(void);

#endif
