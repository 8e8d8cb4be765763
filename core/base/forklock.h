/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * fork() and the library's locks. Only the forking thread exists in the child: a lock
 * another thread held at the fork would stay held there forever, and the data under it
 * could be half updated. So the atfork prepare handler takes every lock the library
 * holds only for bounded work (the order and why it cannot deadlock: forklock.c), the
 * fork happens with all of them held by the forking thread, the parent releases them
 * and the child re-initialises them, its data being consistent as nobody was inside.
 *
 * The locks held across a blocking wait (a connection's rx_lock and tx_lock, held
 * while recv/send sleep for data or room) cannot be taken: fork() would wait for the
 * peer. Their owners re-initialise them in the child and say why the data is sound
 * (conn_fork_child).
 */
#ifndef SMC_FORKLOCK_H
#define SMC_FORKLOCK_H

#include <pthread.h>
#include <stdbool.h>

/* The atfork handlers (core/sock/init.c). forklock_prepare calls take_all, which tries
 * every lock in the library's order and returns false at the first FORKLOCK_BUSY,
 * until it succeeds (releasing what it took before each retry); it may wait for lock
 * holders. */
void forklock_prepare(bool (*take_all)(void));
void forklock_parent(void);
void forklock_child(void);

/* For the modules' fork_lock functions, called by forklock_prepare in its order: tries
 * m and records it for the parent and child handlers.
 *   FORKLOCK_TAKEN    the forking thread holds m;
 *   FORKLOCK_BUSY     another thread does: the fork_lock function returns false at
 *                     once and the attempt starts over;
 *   FORKLOCK_SKIPPED  another thread still does after the patience: go on without it
 *                     (the child re-initialises it), but do not walk what it guards. */
enum forklock_result { FORKLOCK_TAKEN, FORKLOCK_BUSY, FORKLOCK_SKIPPED };
enum forklock_result forklock_take(pthread_mutex_t *m);

/*
 * The library's own threads across a clone() that is not libc's fork() (core/sock/init.h
 * smc_clone_prepare). glibc's fork() gives the child a list of threads holding only
 * itself; glibc's clone() and the raw system call leave the parent's list in the
 * child. A listed thread that has not yet begun to run (pthread_create returned, the
 * thread not scheduled yet) is marked as being created, and the child's setuid(),
 * setgroups()... wait for it for ever (glibc's set*id signals every listed thread,
 * and waits for one in creation to start). A started one is only signalled, which
 * fails in the child and is skipped. So the clone waits for every thread the library
 * made to have started:
 *   forklock_thread_created   after a pthread_create that succeeded, under the lock
 *                             the prepare handler takes for that thread's start;
 *   forklock_thread_started   first thing in the new thread;
 *   forklock_threads_settle   after the prepare handler, bounded.
 */
void forklock_thread_created(void);
void forklock_thread_started(void);
void forklock_threads_settle(void);

#endif
