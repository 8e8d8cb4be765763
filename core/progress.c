/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <poll.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/config.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "core/handshake.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/real.h"

static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
static struct event_base *progress_base;
static pthread_t progress_thread;
static pid_t progress_pid;

struct pending {
	struct smc_conn *c;
	struct event *ev_rdv, *ev_tcp, *ev_deadline;
};

static void pending_finish(struct pending *p)
{
	struct smc_conn *c = p->c;

	event_free(p->ev_rdv);
	event_free(p->ev_tcp);
	event_free(p->ev_deadline);
	pthread_mutex_lock(&c->lock);
	if (c->rdv_listen_fd >= 0) {
		REAL(close)(c->rdv_listen_fd);
		c->rdv_listen_fd = -1;
	}
	pthread_mutex_unlock(&c->lock);
	conn_put(c);
	free(p);
}

/* Decides PENDING -> FALLBACK unless something else decided first. */
static void pending_give_up(struct pending *p, enum smc_reason why)
{
	struct smc_conn *c = p->c;

	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, why);
	pthread_mutex_unlock(&c->lock);
	pending_finish(p);
}

static void on_rdv(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	int ufd = REAL(accept4)(fd, NULL, NULL, SOCK_CLOEXEC);

	(void)what;
	if (ufd < 0) {
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
			return;
		pending_give_up(p, SMC_REASON_RESOURCES);
		return;
	}
	handshake_client(p->c, ufd);
	REAL(close)(ufd);
	pending_give_up(p, SMC_REASON_HANDSHAKE); /* no-op when the handshake decided */
}

static void on_tcp(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char b;
	ssize_t r;

	(void)what;
	/* A failed connect leaves its error for the application's SO_ERROR: give up
	 * without reading it (recv and getsockopt would clear it). */
	if (REAL(poll)(&pfd, 1, 0) == 1 && (pfd.revents & (POLLERR | POLLNVAL))) {
		pending_give_up(p, SMC_REASON_PEER_NOT_SMC);
		return;
	}
	r = REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	/* The server spoke TCP first, closed, or the connect failed: not SMC. */
	pending_give_up(p, SMC_REASON_PEER_NOT_SMC);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	pending_give_up(arg, SMC_REASON_HANDSHAKE);
}

static void *progress_main(void *arg)
{
	struct event_base *base = arg;

	smc_thread_internal = true;
	event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

/* libevent's warnings (an fd the application closed before we registered it) belong in
 * our log, not on the application's stderr. */
static void progress_libevent_log(int severity, const char *msg)
{
	log_debug("libevent (%d): %s", severity, msg);
}

static struct event_base *progress_start(void)
{
	static bool threads_ready;
	struct event_base *base;
	sigset_t all, old;

	pthread_mutex_lock(&progress_lock);
	if (progress_base && progress_pid == getpid()) {
		base = progress_base;
		goto out;
	}
	if (!threads_ready) {
		event_set_log_callback(progress_libevent_log);
		evthread_use_pthreads();
		threads_ready = true;
	}
	smc_thread_internal = true;
	base = event_base_new();
	smc_thread_internal = false;
	if (!base)
		goto out;
	/* The thread must never take the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&progress_thread, NULL, progress_main, base) != 0) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		event_base_free(base);
		base = NULL;
		goto out;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_detach(progress_thread);
	progress_base = base;
	progress_pid = getpid();
	log_debug("progress thread started");
out:
	pthread_mutex_unlock(&progress_lock);
	return base;
}

/* Runs on the progress thread: every event of a pending connection is created and
 * armed there, so no callback can run (and free it) while another thread still
 * registers its siblings. */
static void pending_register(evutil_socket_t fd, short what, void *arg)
{
	struct smc_conn *c = arg;
	struct event_base *base = progress_base;
	struct pending *p;
	struct timeval tv = {
		.tv_sec = smc_cfg.handshake_timeout_ms / 1000,
		.tv_usec = (smc_cfg.handshake_timeout_ms % 1000) * 1000,
	};

	(void)fd;
	(void)what;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto fail;
	p->c = c;
	p->ev_rdv = event_new(base, c->rdv_listen_fd, EV_READ | EV_PERSIST, on_rdv, p);
	p->ev_tcp = event_new(base, c->fd, EV_READ | EV_PERSIST, on_tcp, p);
	p->ev_deadline = event_new(base, -1, 0, on_deadline, p);
	if (!p->ev_rdv || !p->ev_tcp || !p->ev_deadline) {
		if (p->ev_rdv)
			event_free(p->ev_rdv);
		if (p->ev_tcp)
			event_free(p->ev_tcp);
		if (p->ev_deadline)
			event_free(p->ev_deadline);
		free(p);
		goto fail;
	}
	event_add(p->ev_rdv, NULL);
	event_add(p->ev_tcp, NULL);
	event_add(p->ev_deadline, &tv);
	return;
fail:
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, SMC_REASON_RESOURCES);
	pthread_mutex_unlock(&c->lock);
	conn_put(c);
}

int progress_watch_pending(struct smc_conn *c)
{
	struct event_base *base = progress_start();
	struct timeval now = { 0, 0 };
	int r;

	if (!base)
		return -ENOMEM;
	conn_get(c);
	/* libevent may touch its epoll set right here, in the application's thread: those
	 * calls must reach the kernel, not our emulation. */
	smc_thread_internal = true;
	r = event_base_once(base, -1, EV_TIMEOUT, pending_register, c, &now);
	smc_thread_internal = false;
	if (r < 0) {
		conn_put(c);
		return -ENOMEM;
	}
	return 0;
}

void progress_atfork_child(void)
{
	/* The thread is gone; its base may be mid-operation in the parent's image. Leave it
	 * and start a fresh one on next need. */
	progress_base = NULL;
	progress_pid = 0;
	pthread_mutex_init(&progress_lock, NULL);
}
