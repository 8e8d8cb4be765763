/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/ib/ib_lgr.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/progress_int.h"

/*
 * The registry (ib_lgr.h) tells us through its hooks, from any thread and with its
 * lock held, which fds to watch; everything it asks to be called runs here, on the
 * progress thread: ib_link_process, ib_lgr_async_process, ib_lgr_tick. Lock order:
 * registry -> ib_watch_lock -> libevent's own.
 */
struct ib_watch {
	struct ib_link *link;      /* NULL: the device's async fd */
	int fd;
	struct event *ev;
	struct ib_watch *next;
};

static pthread_mutex_t ib_watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ib_watch *ib_watches;
static struct event *ib_timer;
static struct event_base *ib_base;  /* the base the hooks register with */
static pid_t ib_pid;

/* Under ib_watch_lock. libevent calls from an application thread must reach the
 * kernel, not our emulation. */
static void ib_timer_arm_locked(uint64_t delay_ns)
{
	struct timeval tv;
	bool internal = smc_thread_internal;

	if (!ib_timer)
		return;
	if (delay_ns < 1000000ull)
		delay_ns = 1000000ull;
	if (delay_ns > 1000000000ull)
		delay_ns = 1000000000ull;
	tv.tv_sec = (time_t)(delay_ns / 1000000000ull);
	tv.tv_usec = (suseconds_t)(delay_ns % 1000000000ull / 1000u);
	smc_thread_internal = true;
	event_add(ib_timer, &tv);
	smc_thread_internal = internal;
}

static void on_ib_timer(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = clock_now_ns(), next;

	(void)fd;
	(void)what;
	(void)arg;
	ib_lgr_tick(now);
	next = ib_lgr_next_deadline();
	if (next == UINT64_MAX)
		return; /* no link left: armed again by the next one */
	now = clock_now_ns();
	pthread_mutex_lock(&ib_watch_lock);
	ib_timer_arm_locked(next > now ? next - now : 0);
	pthread_mutex_unlock(&ib_watch_lock);
}

static void on_ib_fd(evutil_socket_t fd, short what, void *arg)
{
	struct ib_watch *w = arg;

	(void)fd;
	(void)what;
	if (!w->link) {
		ib_lgr_async_process();
		return;
	}
	if (ib_link_process(w->link) == -EIO) {
		/* failed: its connections were aborted; the tick releases it. Its channel
		 * may stay readable: stop watching it. */
		event_del(w->ev);
		pthread_mutex_lock(&ib_watch_lock);
		ib_timer_arm_locked(0);
		pthread_mutex_unlock(&ib_watch_lock);
	}
}

static void ib_watch_add(struct ib_link *l, int fd)
{
	struct ib_watch *w = calloc(1, sizeof(*w));
	bool internal = smc_thread_internal;

	if (!w) {
		log_warn("ib: out of memory: fd %d not watched", fd);
		return;
	}
	w->link = l;
	w->fd = fd;
	pthread_mutex_lock(&ib_watch_lock);
	smc_thread_internal = true;
	w->ev = ib_base ? event_new(ib_base, fd, EV_READ | EV_PERSIST, on_ib_fd, w) : NULL;
	if (w->ev)
		event_add(w->ev, NULL);
	smc_thread_internal = internal;
	if (!w->ev) {
		pthread_mutex_unlock(&ib_watch_lock);
		log_warn("ib: no progress thread: fd %d not watched", fd);
		free(w);
		return;
	}
	w->next = ib_watches;
	ib_watches = w;
	if (l)
		ib_timer_arm_locked(0);
	pthread_mutex_unlock(&ib_watch_lock);
}

static void ib_watch_del(struct ib_link *l, int fd)
{
	struct ib_watch **pp, *w = NULL;
	bool internal = smc_thread_internal;

	pthread_mutex_lock(&ib_watch_lock);
	for (pp = &ib_watches; *pp; pp = &(*pp)->next) {
		if ((*pp)->link == l && (*pp)->fd == fd) {
			w = *pp;
			*pp = w->next;
			break;
		}
	}
	if (w) {
		smc_thread_internal = true;
		event_free(w->ev);
		smc_thread_internal = internal;
	}
	pthread_mutex_unlock(&ib_watch_lock);
	free(w);
}

static void hook_link_added(struct ib_link *l, void *arg)
{
	(void)arg;
	ib_watch_add(l, ib_link_event_fd(l));
}

static void hook_link_removed(struct ib_link *l, void *arg)
{
	(void)arg;
	ib_watch_del(l, ib_link_event_fd(l));
}

static void hook_dev_opened(int async_fd, void *arg)
{
	(void)arg;
	ib_watch_add(NULL, async_fd);
}

static void hook_dev_closing(int async_fd, void *arg)
{
	(void)arg;
	ib_watch_del(NULL, async_fd);
}

int progress_ib_init(void)
{
	static const struct ib_lgr_hooks hooks = {
		.link_added = hook_link_added,
		.link_removed = hook_link_removed,
		.dev_opened = hook_dev_opened,
		.dev_closing = hook_dev_closing,
	};
	struct event_base *base = progress_start();
	int r = 0;

	if (!base)
		return -ENOMEM;
	pthread_mutex_lock(&ib_watch_lock);
	if (ib_base != base || ib_pid != getpid()) {
		bool internal = smc_thread_internal;

		smc_thread_internal = true;
		ib_timer = evtimer_new(base, on_ib_timer, NULL);
		smc_thread_internal = internal;
		if (!ib_timer) {
			r = -ENOMEM;
		} else {
			ib_base = base;
			ib_pid = getpid();
		}
	}
	pthread_mutex_unlock(&ib_watch_lock);
	if (r == 0)
		ib_lgr_set_hooks(&hooks);
	return r;
}

void progress_ib_atfork_child(void)
{
	/* the parent's links, device and events are not ours (ib_lgr.h) */
	pthread_mutex_init(&ib_watch_lock, NULL);
	ib_watches = NULL;
	ib_timer = NULL;
	ib_base = NULL;
	ib_lgr_atfork_child();
}
