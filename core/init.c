/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <pthread.h>
#include <stdlib.h>

#include "core/config.h"
#include "core/conn.h"
#include "core/conn_orphan.h"
#include "core/epoll.h"
#include "core/epoll_track.h"
#include "core/fdpark.h"
#include "core/fdtab.h"
#include "core/forklock.h"
#include "core/init.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/progress.h"
#include "core/real.h"
#include "core/sock.h"
#include "core/stats.h"
#include "core/statsrv.h"

__thread bool smc_thread_internal __attribute__((tls_model("initial-exec")));

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Every lock of the library is held by the forking thread across the fork, or the
 * child re-initialises it knowing why its data is sound (forklock.h). A forked child
 * holds every connection too (conn_fork_prepare). */
static void fork_prepare(void)
{
	conn_fork_settle();
	epoll_emul_atfork_prepare();
	forklock_prepare();
	conn_fork_prepare();
	pool_atfork_prepare();
}

static void fork_parent(void)
{
	epoll_track_atfork_parent();
	epoll_emul_atfork_parent();
	forklock_parent();
}

static void fork_child(void)
{
	forklock_child();
	stats_atfork_child();
	pool_atfork_child();
	conn_fork_child();
	conn_orphans_atfork_child();
	progress_atfork_child();
	epoll_emul_atfork_child();
	epoll_track_atfork_child();
	statsrv_atfork_child();
}

static void init_run(void)
{
	real_init();
	config_load(NULL);
	log_init();
	progress_load();
	fd_park_prepare();
	atexit(stats_at_exit);
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

bool smc_enabled(void)
{
	smc_init();
	/* SMC_TRANSPORT=ib: SMC-R even between same-host peers (conn_ib.h) */
	return smc_cfg.transport != SMC_TRANSPORT_TCP;
}
