/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's locks across fork(), see forklock.h; their order is init.c's
 * (fork_lock_all).
 *
 * The order follows the code's own nestings where they are fixed (an epoll set locks a
 * connection, a stripe a pool set, a pool set starts the progress thread), so a lock
 * is rarely found held by a thread that waits for one taken before it. Rarely is not never: an outer epoll set locks an
 * inner one and then the list of sets, and sets nest in any order the application
 * chooses. So every lock is only tried: one that is busy makes the handler release all
 * it took, give the holder time, and start over. The handler never waits while it
 * holds a lock, so it cannot close a cycle of waiters, whatever the nesting; every
 * holder finishes bounded work (none of these locks is held across a sleep for data),
 * so an attempt soon finds them all free.
 *
 * Only a thread that never lets go stops that (a fork from a signal handler that
 * interrupted this very thread inside the library): after FORKLOCK_PATIENCE the
 * handler takes what is free and the child re-initialises the rest, as the only
 * alternative left is a fork that never returns.
 *
 * Not here, and why:
 *   - a connection's rx_lock and tx_lock: held across blocking recv/send
 *     (conn_fork_child re-initialises them);
 *   - the SMC-R registry, links and the progress thread's link watches (ib_lgr.c,
 *     ib_link.c, progress_ib.c ib_watch_lock, conn_ib.c's use lock): the child forgets
 *     all of the parent's verbs objects and re-initialises those locks without
 *     reading what they protect (ib_lgr_atfork_child, conn_ib_atfork_child);
 *   - libevent's locks: the progress thread's base is abandoned in the child, never
 *     touched again (progress_atfork_child), a new one is made on next need;
 *   - pthread_once controls (init.c, real.c, fdtab.c, epoll_set.c, negotiate.c,
 *     tcpopt.c, hs_policy.c): glibc restarts an initialisation that another thread had
 *     under way at the fork;
 *   - stats and log: lock-free (relaxed atomics, one write() per line).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/sandbox.h"

/* As long as the longest bounded hold: a connection flushing its staged bytes to TCP
 * under its lock waits up to a handshake timeout per step (conn.c pending_flush_tcp). */
#define FORKLOCK_PATIENCE_NS (4ull * smc_cfg.handshake_timeout_ms * 1000000ull + 1000000000ull)

struct lock_list {
	pthread_mutex_t **v;
	size_t n, cap;
};

static struct lock_list held;   /* taken by the forking thread */
static struct lock_list busy;   /* after the patience: not taken, re-initialised in the child */
static bool giving_up;

static bool list_add(struct lock_list *l, pthread_mutex_t *m)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		pthread_mutex_t **v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return false;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = m;
	return true;
}

enum forklock_result forklock_take(pthread_mutex_t *m)
{
	if (pthread_mutex_trylock(m) != 0) {
		if (!giving_up)
			return FORKLOCK_BUSY;
		(void)list_add(&busy, m); /* no memory: it stays as it is */
		return FORKLOCK_SKIPPED;
	}
	if (!list_add(&held, m)) {
		/* no memory to remember it: try again, or fork without it */
		pthread_mutex_unlock(m);
		return giving_up ? FORKLOCK_SKIPPED : FORKLOCK_BUSY;
	}
	return FORKLOCK_TAKEN;
}

static void release_held(void)
{
	while (held.n > 0)
		pthread_mutex_unlock(held.v[--held.n]);
}

/* The holder must run to let go: yield first, then sleep longer and longer (a woken
 * waiter needs a CPU before our next try, or we take the lock back from it). */
static void backoff(unsigned round)
{
	struct timespec ts = { 0, 0 };

	if (round < 8) {
		sandbox_yield();
		return;
	}
	ts.tv_nsec = round < 16 ? 50000L : round < 32 ? 200000L : 1000000L;
	nanosleep(&ts, NULL);
}

void forklock_prepare(bool (*take_all)(void))
{
	uint64_t give_up_at = clock_now_ns() + FORKLOCK_PATIENCE_NS;
	unsigned round = 0;

	held.n = busy.n = 0;
	giving_up = false;
	while (!take_all()) {
		release_held();
		backoff(round++);
		if (!giving_up && clock_now_ns() >= give_up_at)
			giving_up = true;
	}
	if (busy.n)
		log_warn("fork: %zu lock(s) still held by another thread after %llu ms: the child "
			 "re-initialises them", busy.n,
			 (unsigned long long)(FORKLOCK_PATIENCE_NS / 1000000ull));
}

void forklock_parent(void)
{
	release_held();
	busy.n = 0;
	giving_up = false;
}

/* Threads the library made in this process, and how many of them have started. */
static unsigned threads_created, threads_started;

void forklock_thread_created(void)
{
	__atomic_add_fetch(&threads_created, 1, __ATOMIC_RELEASE);
}

void forklock_thread_started(void)
{
	__atomic_add_fetch(&threads_started, 1, __ATOMIC_RELEASE);
}

/* A created thread only needs a CPU to start; past a second something else is wrong,
 * and the clone goes ahead rather than never. */
#define THREADS_SETTLE_NS 1000000000ull

void forklock_threads_settle(void)
{
	uint64_t give_up_at = clock_now_ns() + THREADS_SETTLE_NS;
	unsigned round = 0;

	while (__atomic_load_n(&threads_started, __ATOMIC_ACQUIRE) <
	       __atomic_load_n(&threads_created, __ATOMIC_ACQUIRE)) {
		if (clock_now_ns() >= give_up_at) {
			log_warn("clone: a thread of the library has not started after 1 s");
			return;
		}
		backoff(round++);
	}
}

void forklock_child(void)
{
	/* none of the library's threads exists in the child */
	threads_created = threads_started = 0;
	/* The forking thread is the only one, and it holds them: fresh locks, same data. */
	while (held.n > 0)
		pthread_mutex_init(held.v[--held.n], NULL);
	while (busy.n > 0)
		pthread_mutex_init(busy.v[--busy.n], NULL);
	giving_up = false;
}
