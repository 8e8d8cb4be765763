/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The program ran out of descriptors while the library holds some.
 *
 * The budget (core/base/fd_budget.h) keeps the library's descriptors to a quarter of
 * the room the program leaves free when a connection is upgraded, but a program that
 * grows afterwards meets EMFILE earlier than over TCP by what the library holds:
 * httperf lowers its limit to 1024 for select() and opens 900 connections, the first
 * ~55 of which were upgraded with four descriptors each. TCP gives such a program
 * every number up to its limit, and so must we: when a call that makes a descriptor
 * fails with EMFILE, the pools give back their cache, then upgraded connections go back
 * to TCP (the downgrade of conn_down.c: lossless, and without waiting for the peer)
 * and leave the library's table, which closes their doorbells, until a quarter of what
 * the library held (at least PRESSURE_MIN_FREE) is free; the call is then made again.
 * New connections stay TCP (fd-limit) until the budget sees room again.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/base/fd_budget.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/readiness/epoll.h"
#include "core/sock/sock.h"

/* a few calls' worth at least: each pressure event walks every connection */
#define PRESSURE_MIN_FREE 32u

/* A connection whose descriptors are its own: a pooled one's are the pool's, which
 * the budget's pressure hook gives back. */
static bool owns_fds(const struct smc_conn *c)
{
	return c->pool == NULL;
}

static __thread bool in_pressure __attribute__((tls_model("initial-exec")));

/* What the library gave back since it held `before` (other threads may take more) */
static unsigned freed_since(unsigned before)
{
	unsigned now = fd_budget_held();

	return now < before ? before - now : 0;
}

bool smc_sock_fd_pressure(int err)
{
	unsigned before = fd_budget_held(), want, moved = 0;
	struct smc_conn **c;
	size_t n, i;

	/* Only the program's own calls: the library's threads, and libraries it calls
	 * with locks held (libevent, libibverbs: smc_thread_internal), never come here,
	 * nor a call made on the way (a log file opened) */
	if (err != EMFILE || before == 0 || smc_thread_internal || in_pressure)
		return false;
	in_pressure = true;
	fd_budget_relieve();
	want = before / 4 > PRESSURE_MIN_FREE ? before / 4 : PRESSURE_MIN_FREE;
	c = conn_collect_active(owns_fds, &n);
	for (i = 0; i < n && freed_since(before) < want; i++) {
		/* one in a call of another thread (rx/tx lock held) stays as it is */
		if (conn_downgrade(c[i], SMC_REASON_FD_LIMIT, false) == 0) {
			epoll_emul_hand_back_conn(c[i]);
			smc_sock_release_tcp_conn(c[i]);
			moved++;
		}
		conn_put(c[i]);
	}
	for (; i < n; i++)
		conn_put(c[i]);
	free(c);
	in_pressure = false;
	if (moved)
		log_info("out of descriptors: %u connections went back to TCP, %u descriptors "
			 "freed (%s)", moved, freed_since(before),
			 stats_reason_name(SMC_REASON_FD_LIMIT));
	return freed_since(before) > 0;
}
