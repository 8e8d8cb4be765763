/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What the progress thread's files share (progress.c: the thread; progress_client.c,
 * progress_server.c, progress_ib.c: what runs on it). Not for the rest of the library,
 * which goes through progress.h.
 */
#ifndef SMC_PROGRESS_INT_H
#define SMC_PROGRESS_INT_H

#include <event2/event.h>
#include <stdint.h>

#include "core/base/evlib.h"
#include "core/conn/conn.h"

/* The thread's event base, started if this process has none yet; NULL when it cannot be
 * had. Any thread. */
struct event_base *progress_start(void);
/* The running thread's base: on the thread only (or under a call it was handed). */
struct event_base *progress_thread_base(void);
/* Runs fn(arg) on the thread once, ms milliseconds from now, or as soon as it can (0):
 * registrations create their events there. 0, or -ENOMEM when the thread or the call
 * could not be had. Any thread. */
int progress_call_after(event_callback_fn fn, void *arg, unsigned ms);
int progress_call(event_callback_fn fn, void *arg);

/* The descriptor a handshake is watched through (c->watch_fd, progress.c): made by the
 * thread that starts the watch, which holds c->fd; closed under c->lock. */
int progress_watch_fd_open(struct smc_conn *c); /* 0 or -errno */
void progress_watch_fd_close(struct smc_conn *c);

/* In band: deadline ticks (SMC_HANDSHAKE_TIMEOUT_MS each) a Proposal waits for its
 * answer, and a server for its client's CLC message. */
#define PROGRESS_INBAND_ANSWER_TICKS 10u

/* In a forked child: the parent's link watches are not ours (progress_ib.c). */
void progress_ib_atfork_child(void);

static inline void progress_event_drop(struct event **ev)
{
	if (*ev)
		event_free(*ev);
	*ev = NULL;
}

static inline void progress_hs_watch_set(struct smc_conn *c, enum conn_hs_watch w)
{
	__atomic_store_n(&c->hs_watch, (uint8_t)w, __ATOMIC_RELEASE);
}

#endif
