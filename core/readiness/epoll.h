/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * epoll emulation for SMC fds (DESIGN.md section 5, option (a)).
 *
 * An application epoll fd that holds SMC fds gets a struct smc_epoll (fdtab kind
 * FD_EPOLL) with a private "shadow" epoll fd. The shadow is added once to the
 * application's epoll set under a process-random cookie; it watches the connections'
 * wait fds (doorbells and the TCP socket, which reports a dead peer; both
 * edge-triggered). Readiness itself is computed from connection state, with TCP's level,
 * edge, one-shot, RDHUP and HUP semantics; non-SMC fds stay in the kernel's set. Only
 * connections on the set's ready list are evaluated (those whose doorbell rang, that
 * epoll_ctl touched, or that a level-triggered report left ready): a call costs
 * O(ready), not O(registered); epoll.c explains the design (epoll_int.h lists its files).
 *
 * Per (epoll set, connection) there is one "watch" holding the shadow entries and a
 * connection reference; each application fd registered in the set is a registration
 * pointing to its watch (two dup'ed fds of one connection share a watch, since a fd can
 * sit only once in the shadow). The core keeps its own index (an fd-indexed array per
 * set plus a global list of sets); struct smc_conn's regs field links the watches of a
 * connection.
 *
 * Lock order: global list lock -> outer set -> inner set (nested) -> connection.
 * No lock is held while sleeping in the kernel.
 */
#ifndef SMC_EPOLL_H
#define SMC_EPOLL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

struct smc_epoll;

/* epoll_ctl with TCP semantics and errno. Call when fd is FD_SMC or epfd is FD_EPOLL
 * (or fd is FD_EPOLL: an emulated set nested in another one). Other fds pass to the
 * real epoll_ctl. */
int epoll_emul_ctl(int epfd, int op, int fd, struct epoll_event *ev);
/* epoll_pwait2 semantics (timeout NULL = forever, mask applied while sleeping). */
int epoll_emul_wait(int epfd, struct epoll_event *ev, int max, const struct timespec *timeout,
		    const sigset_t *mask);
/* epoll_wait on a set that was not emulated when the caller entered the kernel
 * returned n events: strips our cookie (the set became emulated meanwhile) and, when
 * nothing else was there, goes on waiting in the emulation. */
int epoll_emul_after_kernel(int epfd, struct epoll_event *ev, int n, int max,
			    const struct timespec *timeout, const sigset_t *mask);
/* Set once any shadow joined an application set (see epoll_emul_after_kernel). */
extern bool smc_epoll_cookies;

/* ---- for epoll_track.c: a kernel registration of a socket that connect() upgrades ---- */

struct smc_conn;
/* Registers fd (becoming connection c) in epfd's emulation; `fired`: a one-shot
 * registration that already reported, disabled until EPOLL_CTL_MOD. */
int epoll_emul_adopt(int epfd, int fd, struct smc_conn *c, struct epoll_event *ev, bool fired);
/* Undoes epoll_emul_adopt (the connection stays TCP). */
void epoll_emul_unadopt(int epfd, int fd);

/* The application is closing fd (any kind): drop its registrations in every set.
 * Call BEFORE the real close. */
void epoll_emul_forget_fd(int fd);
/* Connection c's last fd in this process was closed while two threads closed two of its
 * fds at once (each saw the other's fd open): drops what epoll_emul_forget_fd left. */
void epoll_emul_forget_conn(struct smc_conn *c);
/* Connection c is FALLBACK for good: its registrations move to the kernel's sets now
 * rather than at their next scan, and c->regs is empty after. */
void epoll_emul_hand_back_conn(struct smc_conn *c);
/* The application is closing an epoll fd of kind FD_EPOLL (call before the real close). */
void epoll_emul_close_epfd(int epfd);
/* fork: the cookie exists before the first fork (prepare), and from then on every wait
 * strips it (parent, and the child's handler below). */
void epoll_emul_atfork_prepare(void);
void epoll_emul_atfork_parent(void);
/* fork (forklock.h): takes the list of sets and every set; false when one is busy. */
bool epoll_emul_fork_lock(void);
/* In a forked child: the sets are the parent's too (see epoll.c's top). */
void epoll_emul_atfork_child(void);

/* ---- for wait.c: an emulated set inside poll/select ---- */

/* POLLIN when an SMC registration of the set is ready now (does not consume edges or
 * one-shot registrations). Also harvests the shadow so that the kernel's readiness of
 * the epoll fd no longer includes doorbells already accounted for. */
uint32_t epoll_emul_poll_mask(int epfd);
/* Before the caller sleeps on epfd in the kernel: the same check, after which every
 * quiet connection of the set is armed (its next change makes epfd readable). */
uint32_t epoll_emul_prepare_sleep(int epfd);

/* Set once the library put its own entry into any application epoll set: the kernel's
 * epoll waits then look for it (the preload layer's epoll_wait). */
extern bool smc_epoll_cookies;

#endif
