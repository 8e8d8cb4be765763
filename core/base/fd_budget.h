/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's own descriptors and the rule that keeps them from costing the
 * application its RLIMIT_NOFILE.
 *
 * Every descriptor the core keeps (doorbells, rendezvous sockets, pool sockets, epoll
 * shadows, the progress thread's, the stats server's) lives in the application's fd
 * table and counts against the same soft limit as the application's own. One counter
 * (`held`) sums them: fd_budget_take/give where a descriptor (or a connection's worth
 * of them) is created and closed. Before an upgrade creates more, fd_budget_allows()
 * applies the rule below; a refused upgrade stays TCP with the reason `fd-limit`.
 *
 * The rule: after taking n more, the library holds at most a quarter of the
 * descriptors the application leaves free,
 *
 *     4 * (held + n) <= L - a
 *
 * L: the soft RLIMIT_NOFILE read now (the application may raise it at any time, redis
 * does at startup; bounded by fs.nr_open, which caps the table even under an infinite
 * limit); a: the descriptors the application holds (fd_budget.c: an estimate that never
 * falls below the fd being upgraded, checked against /proc/self/fd before refusing, at
 * most every 100 ms).
 * Why a quarter of what is free rather than of L: the library's descriptors stay
 * bounded by what the application has not used yet, so an application that grows after
 * the library's last upgrade keeps three quarters of the room it had then; a share of L
 * alone would let the library take L/4 from a program that already uses 3L/4. The
 * library's total never exceeds L/4 either, which is the park area (fdpark.h): its
 * descriptors never have to come down among the application's numbers. What this
 * cannot give by itself: a program that, after the library upgraded connections, grows
 * to within `held` of its limit. Its EMFILE makes the library give descriptors back
 * (core/sock/fd_pressure.c: upgraded connections go back to TCP) and the call is made
 * again. What is kept only as a cache (connection pools) is given back when the rule
 * refuses (fd_budget_on_pressure), and at such an EMFILE.
 */
#ifndef SMC_FD_BUDGET_H
#define SMC_FD_BUDGET_H

#include <stdbool.h>

/* The n of a same-host connection's decision, what it may need at its peak: its two
 * doorbells and the peer's two, the client's rendezvous listener and the socket it
 * accepts (the server's end, on its side), the memfd on its way, and the progress
 * thread's descriptor of the TCP socket while it watches the handshake. What it keeps
 * is counted where it is created (conn.c, conn_watch.c, handshake.c, progress.c). */
#define FD_COST_CONN 8u

/* Counts n descriptors the library now keeps / no longer keeps. */
void fd_budget_take(unsigned n);
void fd_budget_give(unsigned n);
/* n descriptors an upgrade decided already will create later (a client's handshake on
 * the progress thread): judged by the rule as if held, but not parked nor counted
 * among the open ones, since they do not exist yet. */
void fd_budget_reserve(unsigned n);
void fd_budget_unreserve(unsigned n);

/* The rule above, for an upgrade of the application's socket app_fd (or -1 when no
 * socket is concerned, e.g. a pool) that would take n more descriptors. Takes nothing:
 * the creation sites count what they create. Two upgrades decided at the same moment
 * can both pass; the excess is bounded by the threads deciding at once times n, small
 * against the three quarters of free descriptors the rule leaves. */
bool fd_budget_allows(int app_fd, unsigned n);

/* fn gives descriptors back that the library keeps only as a cache (pool.h): called
 * whenever the rule refuses an upgrade of an application's socket (never from a
 * decision with app_fd -1, which pools make under their own lock), and the rule asked
 * again if they gave any. */
void fd_budget_on_pressure(void (*fn)(void));
/* Calls that fn now (never under a pool's lock). */
void fd_budget_relieve(void);

/* An error from creating a descriptor or a mapping: the reason the connection stays
 * TCP for (fd-limit for EMFILE/ENFILE, resources otherwise). */
int fd_budget_reason_for(int err);

/* Descriptors the library keeps now (fdpark.c packs them, tests); reservations aside. */
unsigned fd_budget_held(void);

#endif
