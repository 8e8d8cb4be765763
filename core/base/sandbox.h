/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A process that put itself under a seccomp filter (prctl(PR_SET_SECCOMP), as OpenSSH's
 * pre-authentication child does) may be killed for a system call its own code never
 * makes. Its connections must go on working all the same, so from then on the library
 * sleeps, yields and looks at its sockets only with the calls such a sandbox leaves:
 * read, write, poll or select, nanosleep, futex, clock_gettime (OpenSSH's list is the
 * strictest known; calls the application makes itself, with its arguments, stay as
 * they are).
 * A filter loaded with the seccomp(2) system call through syscall() (libseccomp) is
 * seen too (preload/syscall.c); one loaded with an inline system call is not. A filter
 * in place before the program started is probed for the library's calls
 * (sandbox_probe.c).
 */
#ifndef SMC_SANDBOX_H
#define SMC_SANDBOX_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>

/* preload/: a seccomp filter is in place (prctl or seccomp succeeded). */
void sandbox_entered(void);
bool sandbox_active(void);
/* Before the library's first call of its own for a connection: a filter the process
 * started under is judged once (sandbox_probe.c), and when it refuses one of the
 * library's calls the process counts as sandboxed. True when sandboxed. */
bool sandbox_keeps_off(void);
/* The library stays off for good without a filter (a thread took a descriptor table of
 * its own: core/sock/table_split.c); inherited across fork, dropped by exec. */
void sandbox_keep_off(void);
/* The same judgement, for bpf() alone (the SMC TCP option's map). */
bool sandbox_bpf_refused(void);

/* The library's own sleeps: ppoll, or when sandboxed (and no mask) poll(2), the timeout
 * rounded up to milliseconds, and where even poll is refused select(2) on the fds it
 * can name, for a short slice at most (the caller's loop looks again). */
int sandbox_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		  const sigset_t *mask);
/* fd has something to read (data, EOF or an error) now. */
bool sandbox_readable(int fd);
/* sched_yield, or nothing when sandboxed (a spin then simply goes on). */
void sandbox_yield(void);

#endif
