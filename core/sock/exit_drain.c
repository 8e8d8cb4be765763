/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What a process's exit owes the peers of its RDMA connections. The kernel keeps
 * sending a TCP socket's queued data, then its FIN, after the process is gone; an
 * SMC-R connection lives in the process (its QP, its send queue and the mirror of the
 * peer's RMB go with it), so exit does first what the kernel's close would: every RDMA
 * connection still open announces its close, and the exit waits until the WRITEs and
 * CDCs of every connection have completed (acknowledged by the peer's device: they are
 * in its memory, and the peer reads them after we are gone). The wait lasts while the
 * peer makes progress, and gives up after IDLE_NS without a completion (a peer that
 * stopped reading: as TCP's zero-window probing would, bounded) or, over RDMA, MAX_NS
 * in all.
 *
 * The same holds for a re-send to a peer that went back to TCP (conn_down.c):
 * the progress thread that finishes it ends with the process, so exit finishes it
 * first (same bound).
 *
 * A destructor, so that it runs after the program's atexit handlers, which may still
 * write. An exec ends the QPs the same way: smc_sock_before_exec closes the RDMA
 * connections the new program does not inherit and drains the links too. Shared-memory connections need nothing: the peer's mapping keeps the ring.
 * _exit() and a fatal signal skip it: the peer then sees an abort (ib_link.h).
 *
 * It also records what a one-shot client's first connection, still open at the exit,
 * taught (hs_history.h), as its close would have.
 */
#include <stdlib.h>

#include "core/base/clock.h"
#include "core/base/log.h"
#include "core/conn/conn.h"
#include "core/conn/conn_orphan.h"
#include "core/conn/transport.h"
#include "core/ib/ib_lgr.h"
#include "core/sock/sock.h"

/* TCP keeps an orphan's data for minutes; a process cannot wait that long, but a
 * reader busy for a few seconds (a loaded host, a program between two reads) must not
 * lose the end of the stream */
#define IDLE_NS (10ull * 1000000000ull)
#define MAX_NS (60ull * 1000000000ull)

static bool over_rdma(const struct smc_conn *c)
{
	return c->tp->mode == SMC_MODE_IB;
}

void smc_sock_finish_resends(void)
{
	size_t n;
	struct smc_conn **c = conn_collect_active(conn_resend_pending, &n);

	for (size_t i = 0; i < n; i++) {
		if (!conn_finish_resend(c[i], IDLE_NS))
			log_warn("fd %d: gave up re-sending to a peer gone back to TCP (%llu s "
				 "without progress): its stream is cut short", c[i]->fd,
				 IDLE_NS / 1000000000ull);
		conn_put(c[i]);
	}
	free(c);
}

void smc_sock_drain_rdma(bool (*closing)(const struct smc_conn *c))
{
	struct smc_conn **c;
	size_t n;

	if (ib_lgr_link_count() == 0)
		return; /* no RDMA in this process: nothing to wait for */
	c = conn_collect_active(closing, &n);
	for (size_t i = 0; i < n; i++) {
		c[i]->tp->release(c[i], false);
		conn_put(c[i]);
	}
	free(c);
	if (!ib_lgr_drain(IDLE_NS, MAX_NS))
		log_warn("exit: gave up waiting for RDMA peers to take the rest of their "
			 "data (%llu s without progress, or %llu s in all): it is lost",
			 IDLE_NS / 1000000000ull, MAX_NS / 1000000000ull);
}

static bool first_still_open(const struct smc_conn *c)
{
	return __atomic_load_n(&c->policy_first, __ATOMIC_RELAXED);
}

/* A one-shot client that exits without closing its connection: the verdict its close
 * would have left (hs_history.h). */
static void first_verdicts(void)
{
	size_t n;
	struct smc_conn **c = conn_collect_active(first_still_open, &n);

	for (size_t i = 0; i < n; i++) {
		conn_first_verdict(c[i], clock_now_ns());
		conn_put(c[i]);
	}
	free(c);
}

__attribute__((destructor)) static void exit_drain(void)
{
	first_verdicts();
	conn_orphans_settle(CONN_ORPHAN_END_IDLE_NS, true);
	smc_sock_finish_resends();
	smc_sock_drain_rdma(over_rdma);
}
