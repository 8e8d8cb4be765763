/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The background progress thread: a libevent event_base (evlib.h) on a thread of its
 * own, which runs what the rest of the library hands it: plain fd and timer watches
 * (here), handshakes (core/negotiate/progress.h) and SMC-R link events. Started on
 * first need, never in a process that opens no TCP connection. Its libevent side, for
 * the files whose code runs on it, is progress_ev.h.
 */
#ifndef SMC_BASE_PROGRESS_H
#define SMC_BASE_PROGRESS_H

#include <stdbool.h>

/* Starts the thread if this process has none yet: a server does so at its first
 * handshake, so that the thread and its descriptors exist before any handshake needs it
 * (a process's resources do not grow at a loaded moment). 0 or -ENOMEM. */
int progress_ensure(void);
/* Whether this process's thread runs (no start). */
bool progress_running(void);
/* Loads libevent (evlib.h) now. It is loaded on the thread's first start (~0.3 ms of
 * mapping and relocating, which a process that never upgrades a connection does not
 * pay), and by this before the process confines itself where a later dlopen() could
 * not reach it: a chroot() (a privilege-separated daemon's login or session process,
 * vsftpd's, sshd's), a pivot_root(), a mount namespace, a Landlock domain, a seccomp
 * filter (core/base/sandbox.h). */
void progress_load(void);
/* Calls cb(arg) on the thread once fd becomes readable (data, EOF or an error), or at
 * once when it cannot be watched. fd must stay open until then. 0 or -ENOMEM (cb is
 * not called). */
int progress_watch_readable(int fd, void (*cb)(void *arg), void *arg);
/* The same for writable, or after at most `retry_ms` (0: no limit), whichever comes
 * first (cb then looks and watches again if it must). */
int progress_watch_writable(int fd, unsigned retry_ms, void (*cb)(void *arg), void *arg);
/* Calls cb(arg) on the thread once, ms milliseconds from now. 0 or -ENOMEM (cb is not
 * called). */
int progress_after(unsigned ms, void (*cb)(void *arg), void *arg);
/* fork (forklock.h): takes the thread's start lock; false when busy. */
bool progress_fork_lock(void);
/* In a forked child: the thread did not survive the fork. What ran on it is dropped by
 * its owners' own atfork handlers (progress_ib_atfork_child). */
void progress_atfork_child(void);

#endif
