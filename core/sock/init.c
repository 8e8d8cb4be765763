/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <pthread.h>
#include <stdlib.h>

#include "core/base/base_init.h"
#include "core/base/config.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/progress.h"
#include "core/base/rendezvous.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/conn/conn_orphan.h"
#include "core/conn/statsrv.h"
#include "core/negotiate/hs_conn.h"
#include "core/negotiate/hs_policy.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/tcpopt.h"
#include "core/readiness/epoll.h"
#include "core/readiness/epoll_track.h"
#include "core/shm/pool.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/*
 * The order in which fork's prepare handler takes the library's locks (each module's
 * fork_lock function takes its own; why trying them in this order cannot deadlock:
 * base/forklock.c):
 *   1. the connection registry (conn_registry.c: conn_list_lock)
 *   2. the epoll emulation: its list of sets, then every set (epoll_set.c)
 *   3. the fd stripes (sock.c)
 *   4. the pools: destinations, the list of sets, every set (pool.c)
 *   5. every connection's lock, walking the registry (conn_registry.c: c->lock)
 *   6. the progress thread's start (base/progress.c)
 *   7. leaves that nest nothing: the handshake policy table (hs_policy.c), the path
 *      rendezvous exit list (negotiate.c), the local address cache (rendezvous.c), the
 *      TCP option map's reopen (tcpopt.c), the stats server's start (statsrv.c), the
 *      epoll registrations recorded before connect() (epoll_track.c).
 */
static bool fork_lock_all(void)
{
	return conn_fork_lock_registry() && epoll_emul_fork_lock() && fdtab_fork_lock() &&
	       pool_fork_lock() && conn_fork_lock_conns() && progress_fork_lock() &&
	       hs_policy_fork_lock() && neg_fork_lock() && rdv_fork_lock() &&
	       tcpopt_fork_lock() && statsrv_fork_lock() && epoll_track_fork_lock() &&
	       conn_orphans_fork_lock();
}

/* Every lock of the library is held by the forking thread across the fork, or the
 * child re-initialises it knowing why its data is sound (forklock.h). A forked child
 * holds every connection too (conn_fork_prepare). */
static void fork_prepare(void)
{
	conn_fork_settle();
	epoll_emul_atfork_prepare();
	forklock_prepare(fork_lock_all);
	conn_fork_prepare();
	pool_atfork_prepare();
}

static void fork_parent(void)
{
	fdtab_fork_happened();
	epoll_track_atfork_parent();
	epoll_emul_atfork_parent();
	forklock_parent();
}

static void fork_child(void)
{
	fdtab_fork_happened();
	forklock_child();
	stats_atfork_child();
	pool_atfork_child();
	conn_fork_child();
	conn_orphans_atfork_child();
	progress_atfork_child();
	progress_ib_atfork_child();
	epoll_emul_atfork_child();
	epoll_track_atfork_child();
	statsrv_atfork_child();
}

static void init_run(void)
{
	base_init();
	hs_conn_ops_install(); /* before any connection exists */
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void smc_init(void)
{
	pthread_once(&init_once, init_run);
}

/* The steps of fork() (preload/process.c, then the atfork handlers) for a copy of the
 * process that libc's fork() does not make. The child of a clone is, like a forked one,
 * the calling thread alone with a copy of the memory: the prepare handler's locks are
 * held by that thread in both copies, the fork counter was advanced under the registry,
 * and the child's handlers run on whatever stack the clone gave it. */
void smc_clone_prepare(void)
{
	smc_init();
	smc_sock_before_fork();
	fork_prepare();
	forklock_threads_settle();
}

void smc_clone_parent(bool failed)
{
	fork_parent();
	if (failed)
		conn_fork_failed();
}

void smc_clone_child(void)
{
	fork_child();
}

void smc_before_confinement(void)
{
	if (smc_enabled())
		progress_load();
}

bool smc_enabled(void)
{
	smc_init();
	/* SMC_TRANSPORT=ib: SMC-R even between same-host peers (conn_ib.h) */
	return smc_cfg.transport != SMC_TRANSPORT_TCP;
}
