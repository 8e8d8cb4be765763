/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The server side of handshakes that wait for their client, run on the progress thread
 * (progress.h): an accepted connection whose client's CLC message has not arrived
 * (in band), and the same-host flows that wait on their rendezvous socket.
 */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/config.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/negotiate/handshake.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/progress_int.h"

/* ------------------------------------------------------------ in band */

struct server_wait {
	struct smc_conn *c;
	progress_server_step step;
	struct event *ev_tcp, *ev_deadline;
	unsigned ticks;       /* deadline ticks passed */
};

/* Deadline ticks (SMC_HANDSHAKE_TIMEOUT_MS each) the server waits for the client's CLC
 * message. The client sends it the moment its TCP connect completes, unless its process
 * is held up (a loaded host takes vCPUs away for seconds); once both sent the option,
 * the only decision left without it is a reset (its CLC bytes could still come), which
 * TCP would not have given that client. So the wait goes on while the client lives
 * (its close or reset decides at once: plain TCP), as long as a client waits for our
 * answer (PROGRESS_INBAND_ANSWER_TICKS). */
#define SERVER_MESSAGE_TICKS PROGRESS_INBAND_ANSWER_TICKS

static void server_wait_finish(struct server_wait *w)
{
	progress_hs_watch_set(w->c, HS_WATCH_DONE);
	progress_event_drop(&w->ev_tcp);
	progress_event_drop(&w->ev_deadline);
	conn_watch_fd_close(w->c);
	conn_put(w->c);
	free(w);
}

static void on_server_tcp(evutil_socket_t fd, short what, void *arg)
{
	struct server_wait *w = arg;

	(void)fd;
	(void)what;
	if (w->step(w->c, false))
		server_wait_finish(w);
}

static void on_server_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct server_wait *w = arg;
	struct timeval tv = smc_cfg_handshake_timeout();

	(void)fd;
	(void)what;
	if (++w->ticks < SERVER_MESSAGE_TICKS) {
		if (w->step(w->c, false)) {
			server_wait_finish(w);
			return;
		}
		if (w->ticks == 1)
			log_info("fd %d: no CLC message from the client within %u ms: waiting on "
				 "while it lives", w->c->fd, smc_cfg.handshake_timeout_ms);
		event_add(w->ev_deadline, &tv);
		return;
	}
	(void)w->step(w->c, true); /* decides, whatever it finds */
	server_wait_finish(w);
}

/* Runs on the progress thread (see pending_register). */
static void server_register(evutil_socket_t fd, short what, void *arg)
{
	struct server_wait *w = arg;
	struct event_base *base = progress_thread_base();
	struct timeval tv = smc_cfg_handshake_timeout();

	(void)fd;
	(void)what;
	/* edge-triggered: a partial message leaves the socket readable until the rest */
	w->ev_tcp = event_new(base, w->c->watch_fd, EV_READ | EV_PERSIST | EV_ET, on_server_tcp, w);
	w->ev_deadline = event_new(base, -1, 0, on_server_deadline, w);
	if (!w->ev_tcp || !w->ev_deadline || event_add(w->ev_tcp, NULL) < 0 ||
	    event_add(w->ev_deadline, &tv) < 0) {
		/* the deadline step decides without waiting */
		(void)w->step(w->c, true);
		server_wait_finish(w);
		return;
	}
	progress_hs_watch_set(w->c, HS_WATCH_ARMED);
	/* the message may have arrived before the event was armed (edge-triggered) */
	if (w->step(w->c, false))
		server_wait_finish(w);
}

int progress_watch_server(struct smc_conn *c, progress_server_step step)
{
	struct server_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	if (conn_watch_fd_open(c) < 0) {
		free(w);
		return -EMFILE;
	}
	w->c = c;
	w->step = step;
	conn_get(c);
	progress_hs_watch_set(c, HS_WATCH_QUEUED);
	if (progress_call(server_register, w) < 0) {
		progress_hs_watch_set(c, HS_WATCH_NONE);
		conn_watch_fd_close(c);
		conn_put(c);
		free(w);
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------ server, same-host flows */

struct flow_wait {
	struct hs_flow f;
	progress_flow_done done;
	struct event *ev;     /* f.ufd readable, or a deadline tick */
};

static void flow_wait_finish(struct flow_wait *w)
{
	struct smc_conn *c = w->f.c;

	pthread_mutex_lock(&c->lock);
	if (c->bg_flow == &w->f)
		c->bg_flow = NULL;
	pthread_mutex_unlock(&c->lock);
	progress_hs_watch_set(c, HS_WATCH_DONE);
	progress_event_drop(&w->ev);
	hs_flow_abandon(&w->f);
	fd_own_close(w->f.ufd);
	conn_put(c);
	free(w);
}

static void on_flow(evutil_socket_t fd, short what, void *arg)
{
	struct flow_wait *w = arg;
	struct smc_conn *c = w->f.c;
	bool final = (what & EV_TIMEOUT) && hs_flow_deadline(&w->f);
	int r;

	(void)fd;
	/* c->fd is the application's: under c->lock it cannot be closed meanwhile */
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		flow_wait_finish(w); /* the application closed it */
		return;
	}
	r = hs_server_step(&w->f, final);
	if (r != HS_WAIT)
		w->done(c, w->f.result, w->f.why);
	pthread_mutex_unlock(&c->lock);
	if (r != HS_WAIT) {
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE)
			statsrv_ensure();
		flow_wait_finish(w);
	}
}

/* Runs on the progress thread (see pending_register). */
static void flow_register(evutil_socket_t fd, short what, void *arg)
{
	struct flow_wait *w = arg;
	struct timeval tv = smc_cfg_handshake_timeout();

	(void)fd;
	(void)what;
	/* persistent: the timeout restarts at each activation, a tick of the phase */
	w->ev = event_new(progress_thread_base(), w->f.ufd, EV_READ | EV_PERSIST, on_flow, w);
	if (!w->ev || event_add(w->ev, &tv) < 0) {
		struct smc_conn *c = w->f.c;

		/* No memory to wait for the client: a Decline while it can take one (it goes
		 * TCP at once, as we do), else a last look for its Confirm. */
		pthread_mutex_lock(&c->lock);
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
			if (hs_server_refuse_now(&w->f, SMC_REASON_RESOURCES, CLC_DECL_MEM) ==
			    HS_WAIT)
				(void)hs_server_step(&w->f, true);
			w->done(c, w->f.result, w->f.why);
		}
		pthread_mutex_unlock(&c->lock);
		flow_wait_finish(w);
		return;
	}
	progress_hs_watch_set(w->f.c, HS_WATCH_ARMED);
	pthread_mutex_lock(&w->f.c->lock);
	if (__atomic_load_n(&w->f.c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		w->f.c->bg_flow = &w->f;
	pthread_mutex_unlock(&w->f.c->lock);
}

/* The flow stays registered: its next event finds c decided and finishes it (on_flow),
 * closing the rendezvous socket the Decline went out on. */
int progress_flow_refuse(struct smc_conn *c, enum smc_reason why)
{
	int r = -ENOENT;

	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING && c->bg_flow) {
		struct flow_wait *w = (struct flow_wait *)((char *)c->bg_flow -
							   offsetof(struct flow_wait, f));

		r = 0;
		if (hs_server_refuse_now(&w->f, why, CLC_DECL_SH_FORK) != HS_WAIT) {
			c->bg_flow = NULL;
			w->done(c, w->f.result, w->f.why);
		}
	}
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING)
		r = 1;
	pthread_mutex_unlock(&c->lock);
	return r;
}

int progress_watch_flow(const struct hs_flow *f, progress_flow_done done)
{
	struct flow_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->f = *f;
	w->done = done;
	conn_get(f->c);
	progress_hs_watch_set(f->c, HS_WATCH_QUEUED);
	if (progress_call(flow_register, w) < 0) {
		progress_hs_watch_set(f->c, HS_WATCH_NONE);
		conn_put(f->c);
		free(w);
		return -ENOMEM;
	}
	return 0;
}
