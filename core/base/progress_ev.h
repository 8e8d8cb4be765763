/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The progress thread's libevent side (progress.h), for the files whose events run on
 * it (core/negotiate/progress_*.c). Not for the rest of the library, which goes through
 * progress.h.
 */
#ifndef SMC_BASE_PROGRESS_EV_H
#define SMC_BASE_PROGRESS_EV_H

#include <event2/event.h>

#include "core/base/evlib.h"

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

static inline void progress_event_drop(struct event **ev)
{
	if (*ev)
		event_free(*ev);
	*ev = NULL;
}

#endif
