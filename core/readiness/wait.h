/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Readiness emulation for poll, ppoll, select and pselect.
 *
 * After the upgrade no byte flows over an SMC connection's TCP socket, so the kernel
 * cannot tell when it is readable or writable. Readiness is computed from the
 * connection's state (conn_poll_mask); to sleep, the caller's SMC entries are replaced
 * by the connection's wait fds (doorbell eventfds and the TCP socket, conn_wait_fds) in
 * a temporary pollfd array handed to the real ppoll. Non-SMC entries keep the kernel's
 * answer. Before sleeping, the caller spins for up to SMC_SPIN_US re-checking state:
 * a cross-process wakeup costs as much as a TCP round trip on this kind of machine.
 *
 * Epoll fds of kind FD_EPOLL (emulated sets, see epoll.h) in a poll set are readable
 * when the kernel says so or when one of their SMC registrations is ready.
 */
#ifndef SMC_WAIT_H
#define SMC_WAIT_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/select.h>
#include <time.h>

struct smc_conn;

/* poll/ppoll semantics: timeout NULL = forever; mask applied while sleeping. */
int wait_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
	      const sigset_t *mask);
/* pselect semantics. The sets are updated only on success; select()'s timeval update is
 * the caller's business. */
int wait_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		const sigset_t *mask);
/* True when some entry is an SMC connection or an emulated epoll fd. */
bool wait_poll_involved(const struct pollfd *fds, nfds_t n);

/* ---- shared with epoll.c ---- */

/* conn_poll_mask() with TCP's companion bits added (POLLRDNORM with POLLIN, POLLWRNORM
 * with POLLOUT), or CONN_MASK_FALLBACK. */
uint32_t wait_conn_mask(struct smc_conn *c);
/* The same expansion for a mask obtained otherwise (conn_prepare_sleep's result). */
uint32_t wait_expand_mask(uint32_t m);
/* Values that change whenever the receive side (peer producer cursor, peer's writer
 * flags, connection state, TCP EOF) or the send side (peer consumer cursor, peer's
 * reader flags, state) changes: edge-triggered epoll reports an edge on a change. */
uint64_t wait_rx_generation(struct smc_conn *c);
uint64_t wait_tx_generation(struct smc_conn *c);
/* A value that changes when conn_wait_fds() may return different fds (state change). */
uint32_t wait_fds_generation(struct smc_conn *c);

/* Deadlines in clock_now_ns() time (core/base/clock.h). A deadline of UINT64_MAX is forever. */
uint64_t wait_deadline(const struct timespec *timeout);
/* Time left until deadline: NULL when forever (writes nothing), else *ts (0 when past). */
const struct timespec *wait_remaining(uint64_t deadline, struct timespec *ts);

#endif
