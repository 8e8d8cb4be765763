/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <poll.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/evlib.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/ib/conn_ib.h"
#include "core/ib/ib_lgr.h"
#include "core/negotiate/handshake.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/tcpopt.h"

static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
/* What event_base_new keeps (libevent 2.1, epoll backend, threads enabled): the epoll
 * set, the signal pipe's two ends and the notification eventfd. */
#define PROGRESS_BASE_FDS 4u
static struct event_base *progress_base;
/* its fds, marked the library's (fdpark.h): a program closing all its fds keeps them */
static int progress_base_fd[PROGRESS_BASE_FDS + 2];
static size_t progress_nbase_fds;
static pthread_t progress_thread;
static pid_t progress_pid;

struct pending {
	struct smc_conn *c;
	struct event *ev_rdv, *ev_tcp, *ev_deadline;
	bool inband;          /* negotiation through the TCP option (negotiate.h) */
	bool proposed;        /* inband: our Proposal is out, waiting for the answer */
	bool fd_limited;      /* inband: the rendezvous could not be accepted (EMFILE) */
	unsigned idle_ticks;  /* inband: deadline ticks since then */
	struct neg_client nc; /* inband: rendezvous name and key */
	struct attempt *attempts; /* handshakes on our rendezvous socket, newest first */
	unsigned nattempts;
	pid_t wrong_pid;      /* abstract names: the last process found not to be the server */
};

/*
 * One process that connected to a pending connection's rendezvous socket, answered by
 * its own flow. By key (a token socket in SMC_RDV_DIR, which any local user may
 * connect to) only the one that proves it read our TCP Proposal decides: the others
 * are dropped when they answer wrongly, close, or stay silent for a handshake timeout,
 * and never delay the server's. At most PENDING_ATTEMPTS at a time: a newcomer beyond
 * them replaces the oldest.
 */
struct attempt {
	struct pending *p;
	struct hs_flow f;
	struct event *ev;
	struct attempt *next;
};

#define PENDING_ATTEMPTS 8u

static void event_drop(struct event **ev)
{
	if (*ev)
		event_free(*ev);
	*ev = NULL;
}

static void hs_watch_set(struct smc_conn *c, enum conn_hs_watch w)
{
	__atomic_store_n(&c->hs_watch, (uint8_t)w, __ATOMIC_RELEASE);
}

static void attempt_drop(struct attempt *a)
{
	struct pending *p = a->p;

	for (struct attempt **at = &p->attempts; *at; at = &(*at)->next) {
		if (*at == a) {
			*at = a->next;
			p->nattempts--;
			break;
		}
	}
	event_drop(&a->ev);
	hs_flow_abandon(&a->f);
	fd_own_close(a->f.ufd);
	free(a);
}

/*
 * The progress thread watches a handshake through a descriptor of its own: libevent
 * keys its events by number, and the program may close c->fd while the handshake runs,
 * keeping a dup (c->fd moves to it, and a socket the library opens next, a rendezvous
 * peer, gets the old number: libevent took it for one it already watched, and never
 * told the kernel, so that handshake waited out its timeout) or its last one (the
 * number comes back for the program's next socket). Made by the thread that starts the
 * watch, which holds the fd; closed under c->lock, so a fork sees it open or gone.
 */
static int watch_fd_open(struct smc_conn *c)
{
	c->watch_fd = fd_park_dup(c->fd);
	if (c->watch_fd < 0)
		return -errno;
	fd_budget_take(1);
	return 0;
}

/* An open file that is nothing (/dev/null), the library's, put in place of a watch's
 * socket when the program closes the socket (progress_watch_let_go). */
static int inert_fd = -1;
static pthread_once_t inert_once = PTHREAD_ONCE_INIT;

static void inert_open(void)
{
	inert_fd = fd_park(open("/dev/null", O_RDONLY | O_CLOEXEC));
}

void progress_watch_let_go(struct smc_conn *c)
{
	if (c->watch_fd < 0)
		return;
	pthread_once(&inert_once, inert_open);
	/* the number stays ours (libevent still keys the watch's events by it) but no
	 * longer holds the socket, whose end is now the program's close; the kernel
	 * drops the socket's epoll registration with it */
	if (inert_fd < 0 || REAL(dup2)(inert_fd, c->watch_fd) < 0)
		/* no stand-in: the number goes, and the events are left to the watch's end */
		progress_watch_fd_drop(c);
}

void progress_watch_fd_drop(struct smc_conn *c)
{
	if (c->watch_fd >= 0) {
		fd_own_close(c->watch_fd);
		fd_budget_give(1);
	}
	c->watch_fd = -1;
}

static void watch_fd_close(struct smc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	progress_watch_fd_drop(c);
	pthread_mutex_unlock(&c->lock);
}

/* Under c->lock: servers queued on our rendezvous name get a Decline in place of our
 * Proposal (they would take its close for a client gone, and reset). */
static void rdv_decline_queued(struct smc_conn *c, uint32_t diag)
{
	for (unsigned i = 0; c->rdv_listen_fd >= 0 && i < PENDING_ATTEMPTS; i++) {
		int ufd = REAL(accept4)(c->rdv_listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (ufd < 0)
			break;
		handshake_client_decline(ufd, diag);
		REAL(close)(ufd);
	}
}

/*
 * The handshake ended. When it ended in TCP while servers still wait on our rendezvous
 * (the program closed the connection, or went TCP, while the handshake ran), each is
 * told so by a Decline: a server that sent its Accept takes a bare close for a client
 * gone after upgrading and resets the connection, losing what the client sent over TCP
 * (its staged bytes at close). With the Decline it stays TCP and reads them.
 */
static void pending_finish(struct pending *p)
{
	struct smc_conn *c = p->c;
	bool tcp = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_ACTIVE;

	while (p->attempts) {
		if (tcp)
			handshake_client_decline(p->attempts->f.ufd, CLC_DECL_PEERDECL);
		attempt_drop(p->attempts);
	}
	hs_watch_set(c, HS_WATCH_DONE);
	event_drop(&p->ev_rdv);
	event_drop(&p->ev_tcp);
	event_drop(&p->ev_deadline);
	pthread_mutex_lock(&c->lock);
	if (tcp)
		rdv_decline_queued(c, CLC_DECL_PEERDECL);
	conn_close_rdv(c);
	if (c->bg_pending == p)
		c->bg_pending = NULL;
	pthread_mutex_unlock(&c->lock);
	watch_fd_close(c);
	if (p->inband)
		neg_client_cleanup(&p->nc);
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

/* In-band: after our Proposal the connection may no longer simply turn into plain TCP
 * (the server's answer could still arrive and reach the application): reset it. */
static void pending_abort(struct pending *p, const char *what)
{
	struct smc_conn *c = p->c;

	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
		log_warn("fd %d: %s: resetting the connection", c->fd, what);
		stats_count_abort();
		neg_reset(c->fd);
		conn_fallback(c, SMC_REASON_HANDSHAKE);
	}
	pthread_mutex_unlock(&c->lock);
	pending_finish(p);
}

/* An attempt's rendezvous socket became readable, or its handshake timeout passed. */
static void on_attempt(evutil_socket_t fd, short what, void *arg)
{
	struct attempt *a = arg;
	struct pending *p = a->p;
	int r = hs_client_step(&a->f, (what & EV_TIMEOUT) != 0);

	(void)fd;
	if (r == HS_WAIT)
		return;
	attempt_drop(a);
	if (r != -EACCES) /* not the server: it may still come, or answer on TCP */
		pending_give_up(p, SMC_REASON_HANDSHAKE); /* no-op when the handshake decided */
}

/* Flow f waits for its peer's Accept: 0, or -ENOMEM (not taken). */
static int attempt_add(struct pending *p, const struct hs_flow *f)
{
	struct timeval tv = smc_cfg_handshake_timeout();
	struct attempt *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	a->p = p;
	a->f = *f;
	a->ev = event_new(progress_base, f->ufd, EV_READ | EV_PERSIST, on_attempt, a);
	if (!a->ev) {
		free(a);
		return -ENOMEM;
	}
	/* no room for its event (evmap's per-fd entry): -ENOMEM before it is linked */
	if (event_add(a->ev, &tv) < 0) {
		event_free(a->ev);
		free(a);
		return -ENOMEM;
	}
	if (p->nattempts >= PENDING_ATTEMPTS) {
		struct attempt *oldest = p->attempts;

		while (oldest->next)
			oldest = oldest->next;
		attempt_drop(oldest);
	}
	a->next = p->attempts;
	p->attempts = a;
	p->nattempts++;
	return 0;
}

static void on_rdv(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct hs_auth auth = { .by_key = p->inband, .key = p->nc.key };
	int ufd = REAL(accept4)(fd, NULL, NULL, SOCK_CLOEXEC);
	struct hs_flow f;
	pid_t connector = 0;
	int r;

	(void)what;
	/* up and away from the numbers the program gets next (fdpark.h): the handshake
	 * keeps it a while, the connection may be active before it is closed */
	if (ufd >= 0)
		ufd = fd_park(ufd);
	if (ufd < 0) {
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
			return;
		if (p->inband && (errno == EMFILE || errno == ENFILE)) {
			/* No descriptor for the server's rendezvous connection: closing our
			 * name resets it, and the server, which cannot reach us, declines on
			 * TCP, where answer_step reads it (the connection stays TCP). */
			event_drop(&p->ev_rdv);
			pthread_mutex_lock(&p->c->lock);
			conn_close_rdv(p->c);
			pthread_mutex_unlock(&p->c->lock);
			p->fd_limited = true;
		} else if (p->inband) {
			pending_abort(p, "rendezvous socket failed");
		} else {
			/* closing our name (pending_finish) ends the server's wait at once */
			pending_give_up(p, fd_budget_reason_for(errno));
		}
		return;
	}
	/* Under abstract names the check of who connected may read the process's fds
	 * (rendezvous.h): one already found not to be the server is not looked at again,
	 * or a flood of its connections would keep this thread from the server's. */
	if (!p->inband) {
		struct ucred cred;
		socklen_t cl = sizeof(cred);

		if (REAL(getsockopt)(ufd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
			if (cred.pid > 0 && cred.pid == p->wrong_pid) {
				fd_own_close(ufd);
				return;
			}
			connector = cred.pid;
		}
	}
	r = hs_client_start(&f, p->c, ufd, &auth);
	if (r == HS_WAIT && attempt_add(p, &f) == 0)
		return; /* the attempt holds ufd now */
	if (r == -EACCES && !p->inband)
		p->wrong_pid = connector;
	/* Nothing would hear the Accept: declined now rather than the server left waiting
	 * for our Confirm (and the application for the decision) a handshake timeout. By
	 * key, whoever connected has proved nothing yet: the deadline decides. */
	if (r == HS_WAIT && !auth.by_key)
		r = hs_client_refuse_now(&f, SMC_REASON_RESOURCES, CLC_DECL_MEM);
	if (r == HS_WAIT)
		r = hs_client_step(&f, true);
	hs_flow_abandon(&f);
	fd_own_close(ufd);
	if (r == -EACCES)
		return; /* not the server: it may still come, or answer on TCP */
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

static void answer_step(struct pending *p, bool final);

/* In-band: deadline ticks (SMC_HANDSHAKE_TIMEOUT_MS each) a Proposal waits for an answer. */
#define INBAND_ANSWER_TICKS 10u

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct timeval tv = smc_cfg_handshake_timeout();

	(void)fd;
	(void)what;
	if (!p->inband) {
		pending_give_up(p, SMC_REASON_HANDSHAKE);
	} else if (__atomic_load_n(&p->c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pending_finish(p); /* the application closed it meanwhile */
	} else if (p->proposed && ++p->idle_ticks >= INBAND_ANSWER_TICKS) {
		/* A server that takes this long answers nobody: a listener opted in by a
		 * process that then exec'd something without the library (our Proposal
		 * reached its application), or a stuck one. Its answer could still come:
		 * the connection cannot turn into plain TCP. */
		pending_abort(p, "no answer to the CLC Proposal");
	} else {
		/* In-band, the TCP handshake is bounded by the kernel, and the server answers
		 * our Proposal only once its application calls accept(), which may take a
		 * while (a TCP client would wait for its answer too): generously bounded
		 * above. This tick notices a close, and a kernel's SMC-R Accept (no credits
		 * extension behind it). */
		event_add(p->ev_deadline, &tv);
		if (p->ev_tcp && p->nc.offer_ib && event_pending(p->ev_tcp, EV_READ, NULL))
			answer_step(p, true);
	}
}

/* ------------------------------------------------------------ in-band negotiation */

/* Under c->lock, PENDING: the state a finished TCP handshake leaves. 1: both sent the
 * option. 0: plain TCP (*why). */
static int inband_peer_is_smc(struct smc_conn *c, enum smc_reason *why)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };

	*why = SMC_REASON_PEER_NOT_SMC;
	/* A failed connect leaves its error for the application's SO_ERROR: give up
	 * without reading it. */
	if (REAL(poll)(&pfd, 1, 0) == 1 && (pfd.revents & (POLLERR | POLLNVAL | POLLHUP)))
		return 0;
	return tcpopt_peer_sent(c->fd) == 1;
}

/* One step reading the server's answer; final: the deadline tick (a lone SMC-R Accept
 * is a kernel's then, see neg_client_answer). */
static void answer_step(struct pending *p, bool final)
{
	struct smc_conn *c = p->c;
	enum smc_reason why = SMC_REASON_DECLINED;
	uint8_t buf[NEG_MSG_CAP];
	size_t len = 0;
	enum neg_answer a;
	uint32_t diag = 0;

	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		pending_finish(p);
		return;
	}
	a = neg_client_answer(c->fd, &p->nc, final, buf, &len, &diag);
	pthread_mutex_unlock(&c->lock);
	switch (a) {
	case NEG_ANS_NONE:
		return;
	case NEG_ANS_BAD:
		pending_abort(p, "invalid CLC answer from the server");
		return;
	case NEG_ANS_IB:
		/* leaves c ACTIVE or FALLBACK, unless the Accept is malformed */
		if (conn_ib_client_inband(c, buf, len) < 0) {
			pending_abort(p, "malformed SMC-R Accept");
			return;
		}
		why = SMC_REASON_HANDSHAKE; /* a no-op: decided */
		break;
	case NEG_ANS_DECLINE:
		log_debug("fd %d: server declined SMC: %s", c->fd, clc_decline_reason_str(diag));
		why = diag == CLC_DECL_SH_FDLIMIT || p->fd_limited ? SMC_REASON_FD_LIMIT
		      : diag == CLC_DECL_MEM                         ? SMC_REASON_MEM_CAP
								      : SMC_REASON_DECLINED;
		break;
	case NEG_ANS_ACCEPTED:
		/* a kernel server wanted SMC-R: we cannot complete it with a kernel; counted
		 * as not-local as before (no RDMA transport with that peer) */
		why = SMC_REASON_NOT_LOCAL;
		break;
	case NEG_ANS_CLOSED:
		why = SMC_REASON_PEER_CLOSED;
		break;
	}
	pending_give_up(p, why);
}

static void on_answer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	answer_step(arg, false);
}

static bool inband_arm(struct pending *p)
{
	struct event_base *base = progress_base;
	struct smc_conn *c = p->c;
	struct timeval tv = smc_cfg_handshake_timeout();

	event_drop(&p->ev_tcp);
	/* no rendezvous when we offer SMC-R only (SMC_TRANSPORT=ib) */
	if (c->rdv_listen_fd >= 0)
		p->ev_rdv = event_new(base, c->rdv_listen_fd, EV_READ | EV_PERSIST, on_rdv, p);
	/* edge-triggered: a partial message leaves the socket readable until the rest */
	p->ev_tcp = event_new(base, c->watch_fd, EV_READ | EV_PERSIST | EV_ET, on_answer, p);
	if ((c->rdv_listen_fd >= 0 && !p->ev_rdv) || !p->ev_tcp)
		return false;
	if ((p->ev_rdv && event_add(p->ev_rdv, NULL) < 0) || event_add(p->ev_tcp, NULL) < 0)
		return false;
	event_del(p->ev_deadline);
	p->proposed = true;
	p->idle_ticks = 0;
	return event_add(p->ev_deadline, &tv) == 0;
}

/* The TCP handshake finished (the socket became writable): propose, or stay TCP. */
static void on_connected(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct smc_conn *c = p->c;
	enum smc_reason why;
	int r;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		pending_finish(p);
		return;
	}
	if (!inband_peer_is_smc(c, &why)) {
		pthread_mutex_unlock(&c->lock);
		pending_give_up(p, why); /* not one byte was sent */
		return;
	}
	r = neg_client_propose(c->fd, &p->nc, &why);
	conn_set_rdv(c, p->nc.listen_fd);
	pthread_mutex_unlock(&c->lock);
	/* connected: a waiter for POLLOUT may stage its data now (conn_poll_mask) */
	conn_wake_local(c);
	if (r == 1) {
		pending_give_up(p, why); /* we declined: plain TCP */
		return;
	}
	if (r == 0)
		log_debug("fd %d: both sent the SMC option: CLC Proposal sent (%s%s)", c->fd,
			  p->nc.listen_fd < 0 ? "no shm" : p->nc.rdv_path ? "path rendezvous"
							   : "abstract rendezvous",
			  p->nc.offer_ib ? ", SMC-R" : "");
	if (r < 0)
		pending_abort(p, "sending the CLC Proposal failed");
	else if (!inband_arm(p))
		pending_abort(p, "out of memory");
}

static void *progress_main(void *arg)
{
	struct event_base *base = arg;

	forklock_thread_started();
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
	if (evlib_load() < 0) {
		base = NULL;
		goto out;
	}
	if (!threads_ready) {
		event_set_log_callback(progress_libevent_log);
		evthread_use_pthreads();
		threads_ready = true;
	}
	/* libevent, loaded privately, makes its fds without our wrappers: found by what
	 * appeared meanwhile (2.1: epoll set, notification eventfd, signal pipe or
	 * socketpair; a timerfd with a precise timer) */
	static const struct fd_own_expect base_fds = {
		.eventpoll = 1, .eventfd = 1, .timerfd = 1, .pipe = 2, .socket = 2,
	};
	struct fd_own_snapshot snap;
	int fds[PROGRESS_BASE_FDS + 2];
	size_t nfds;

	int *fill;
	size_t nfill;

	fd_own_snapshot(&snap);
	/* above the numbers programs pick themselves (fdpark.h) */
	nfill = fd_low_fill(&fill);
	smc_thread_internal = true;
	base = event_base_new();
	smc_thread_internal = false;
	fd_low_unfill(fill, nfill);
	nfds = fd_own_adopt(&snap, &base_fds, fds, base ? PROGRESS_BASE_FDS + 2 : 0);
	if (!base)
		goto out;
	fd_budget_take(PROGRESS_BASE_FDS);
	/* The thread must never take the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&progress_thread, NULL, progress_main, base) != 0) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		for (size_t i = 0; i < nfds; i++)
			fd_own_forget(fds[i]); /* libevent closes them */
		event_base_free(base);
		fd_budget_give(PROGRESS_BASE_FDS);
		base = NULL;
		goto out;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	forklock_thread_created();
	pthread_detach(progress_thread);
	progress_base = base;
	memcpy(progress_base_fd, fds, nfds * sizeof(*fds));
	progress_nbase_fds = nfds;
	__atomic_store_n(&progress_pid, getpid(), __ATOMIC_RELEASE);
	log_debug("progress thread started");
out:
	pthread_mutex_unlock(&progress_lock);
	return base;
}

void progress_load(void)
{
	(void)evlib_load();
}

int progress_ensure(void)
{
	if (__atomic_load_n(&progress_pid, __ATOMIC_ACQUIRE) == getpid())
		return 0;
	return progress_start() ? 0 : -ENOMEM;
}

/* Runs fn(arg) on the progress thread as soon as it can (registration callbacks create
 * their events there). 0, or -ENOMEM when the thread or the call could not be had. */
static int progress_call_after(event_callback_fn fn, void *arg, unsigned ms)
{
	struct event_base *base = progress_start();
	struct timeval now = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
	bool internal = smc_thread_internal; /* set for good on the progress thread */
	int r;

	if (!base)
		return -ENOMEM;
	/* libevent may touch its epoll set right here, in the application's thread: those
	 * calls must reach the kernel, not our emulation. */
	smc_thread_internal = true;
	r = event_base_once(base, -1, EV_TIMEOUT, fn, arg, &now);
	smc_thread_internal = internal;
	return r < 0 ? -ENOMEM : 0;
}

static int progress_call(event_callback_fn fn, void *arg)
{
	return progress_call_after(fn, arg, 0);
}

/* A client whose handshake cannot be watched (no memory for its events: an address-space
 * limit, say) goes TCP now, and so does its server rather than at its handshake timeout,
 * its first read waiting for the decision meanwhile: a server already queued on our
 * rendezvous socket gets a Decline in place of our Proposal, one still to come finds
 * the name closed. In band nothing was sent yet: the connection stays TCP. */
static void pending_refuse(struct smc_conn *c, enum smc_reason why)
{
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
		rdv_decline_queued(c, CLC_DECL_MEM);
		conn_close_rdv(c);
		conn_fallback(c, why);
	}
	pthread_mutex_unlock(&c->lock);
}

/* Runs on the progress thread: every event of a pending connection is created and
 * armed there, so no callback can run (and free it) while another thread still
 * registers its siblings. */
static void pending_register(evutil_socket_t fd, short what, void *arg)
{
	struct smc_conn *c = arg;
	struct event_base *base = progress_base;
	struct pending *p;
	struct timeval tv = smc_cfg_handshake_timeout();
	bool decided;

	(void)fd;
	(void)what;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto fail;
	p->c = c;
	p->nc.listen_fd = -1;
	/* in band, the rendezvous comes after the TCP handshake (rdv_listen_fd still -1) */
	p->inband = c->clc_in_stream;
	if (p->inband) {
		p->ev_tcp = event_new(base, c->watch_fd, EV_WRITE, on_connected, p);
	} else {
		p->ev_rdv = event_new(base, c->rdv_listen_fd, EV_READ | EV_PERSIST, on_rdv, p);
		p->ev_tcp = event_new(base, c->watch_fd, EV_READ | EV_PERSIST, on_tcp, p);
	}
	p->ev_deadline = event_new(base, -1, 0, on_deadline, p);
	/* event_add allocates too (libevent's per-fd entry) */
	if ((!p->inband && !p->ev_rdv) || !p->ev_tcp || !p->ev_deadline ||
	    (p->ev_rdv && event_add(p->ev_rdv, NULL) < 0) || event_add(p->ev_tcp, NULL) < 0 ||
	    event_add(p->ev_deadline, &tv) < 0) {
		event_drop(&p->ev_rdv);
		event_drop(&p->ev_tcp);
		event_drop(&p->ev_deadline);
		free(p);
		goto fail;
	}
	hs_watch_set(c, HS_WATCH_ARMED);
	pthread_mutex_lock(&c->lock);
	decided = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING;
	if (!decided)
		c->bg_pending = p;
	pthread_mutex_unlock(&c->lock);
	if (decided) /* the program closed it before the watch began */
		pending_finish(p);
	return;
fail:
	watch_fd_close(c);
	hs_watch_set(c, HS_WATCH_DONE);
	log_debug("fd %d: no memory to watch the handshake: declining", c->fd);
	pending_refuse(c, SMC_REASON_RESOURCES);
	conn_put(c);
}

/* The program decided c (its close) while the watch runs: the watch ends now, so that
 * a server waiting on our rendezvous gets its Decline at once (pending_finish) and not
 * at the watch's next event, which an exit right after the close would never see. */
static void pending_decided(evutil_socket_t fd, short what, void *arg)
{
	struct smc_conn *c = arg;
	struct pending *p;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&c->lock);
	p = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING ? c->bg_pending : NULL;
	pthread_mutex_unlock(&c->lock);
	if (p)
		pending_finish(p);
	conn_put(c);
}

void progress_watch_decided(struct smc_conn *c)
{
	if (c->side != CONN_CLIENT)
		return;
	conn_get(c);
	if (progress_call(pending_decided, c) < 0)
		conn_put(c); /* the watch's next event finishes it */
}

/*
 * The program filled the staging buffer of a connection still negotiating (conn.c,
 * CONN_PENDING_BUF), and its next send waits. TCP would go on taking its bytes (a few
 * MiB before the server's accept() on loopback), and the server program may accept
 * only once this one went on: an FTP client in active mode accepts its data connection
 * after the server's reply on the control connection, which the server sends when the
 * data it writes is taken. So a handshake on the rendezvous not decided a tenth of the
 * handshake timeout later ends as TCP (a Decline however far it got, the staged bytes
 * over TCP first); a server that accepts at once has answered by then. In band our
 * Proposal may be on the TCP stream already: that handshake runs its course.
 */
static void pending_full_expired(evutil_socket_t fd, short what, void *arg)
{
	struct smc_conn *c = arg;
	struct pending *p;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&c->lock);
	p = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING ? c->bg_pending : NULL;
	pthread_mutex_unlock(&c->lock);
	/* p stays valid: only this thread finishes it (pending_finish); not in band
	 * (progress_watch_staging_full) */
	if (p) {
		log_debug("fd %d: the program filled its staging buffer and the server has not "
			  "answered: plain TCP", c->fd);
		pending_give_up(p, SMC_REASON_HANDSHAKE);
	}
	conn_put(c);
}

void progress_watch_staging_full(struct smc_conn *c)
{
	unsigned ms = smc_cfg.handshake_timeout_ms / 10;

	if (c->side != CONN_CLIENT || c->clc_in_stream)
		return;
	conn_get(c);
	if (progress_call_after(pending_full_expired, c, ms ? ms : 1) < 0)
		conn_put(c); /* the handshake timeout decides */
}

int progress_watch_pending(struct smc_conn *c)
{
	int r = watch_fd_open(c);

	if (r < 0)
		return r;
	conn_get(c);
	hs_watch_set(c, HS_WATCH_QUEUED);
	if (progress_call(pending_register, c) < 0) {
		hs_watch_set(c, HS_WATCH_NONE);
		watch_fd_close(c);
		conn_put(c);
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------ server side, in-band */

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
 * answer (INBAND_ANSWER_TICKS). */
#define SERVER_MESSAGE_TICKS INBAND_ANSWER_TICKS

static void server_wait_finish(struct server_wait *w)
{
	hs_watch_set(w->c, HS_WATCH_DONE);
	event_drop(&w->ev_tcp);
	event_drop(&w->ev_deadline);
	watch_fd_close(w->c);
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
	struct event_base *base = progress_base;
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
	hs_watch_set(w->c, HS_WATCH_ARMED);
	/* the message may have arrived before the event was armed (edge-triggered) */
	if (w->step(w->c, false))
		server_wait_finish(w);
}

int progress_watch_server(struct smc_conn *c, progress_server_step step)
{
	struct server_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	if (watch_fd_open(c) < 0) {
		free(w);
		return -EMFILE;
	}
	w->c = c;
	w->step = step;
	conn_get(c);
	hs_watch_set(c, HS_WATCH_QUEUED);
	if (progress_call(server_register, w) < 0) {
		hs_watch_set(c, HS_WATCH_NONE);
		watch_fd_close(c);
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
	hs_watch_set(c, HS_WATCH_DONE);
	event_drop(&w->ev);
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
	w->ev = event_new(progress_base, w->f.ufd, EV_READ | EV_PERSIST, on_flow, w);
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
	hs_watch_set(w->f.c, HS_WATCH_ARMED);
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
	hs_watch_set(f->c, HS_WATCH_QUEUED);
	if (progress_call(flow_register, w) < 0) {
		hs_watch_set(f->c, HS_WATCH_NONE);
		conn_put(f->c);
		free(w);
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------ SMC-R links
 *
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

/* ------------------------------------------------------------ readable fds */

struct fd_watch {
	int fd;
	short what;           /* EV_READ or EV_WRITE */
	struct timeval retry; /* the longest wait, or none (0) */
	void (*cb)(void *arg);
	void *arg;
	struct event *ev;
};

static void on_fd_watch(evutil_socket_t fd, short what, void *arg)
{
	struct fd_watch *w = arg;

	(void)fd;
	(void)what;
	event_free(w->ev);
	w->cb(w->arg);
	free(w);
}

static void fd_watch_register(evutil_socket_t fd, short what, void *arg)
{
	struct fd_watch *w = arg;

	(void)fd;
	(void)what;
	w->ev = event_new(progress_base, w->fd, w->what, on_fd_watch, w);
	if (!w->ev || event_add(w->ev, w->retry.tv_sec || w->retry.tv_usec ? &w->retry : NULL) < 0) {
		if (w->ev)
			event_free(w->ev);
		w->cb(w->arg); /* as if it had become ready: the owner looks now */
		free(w);
	}
}

static int fd_watch_start(int fd, short what, unsigned retry_ms, void (*cb)(void *arg),
			  void *arg)
{
	struct fd_watch *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->what = what;
	w->retry.tv_sec = retry_ms / 1000;
	w->retry.tv_usec = (retry_ms % 1000) * 1000;
	w->cb = cb;
	w->arg = arg;
	if (progress_call(fd_watch_register, w) < 0) {
		free(w);
		return -ENOMEM;
	}
	return 0;
}

int progress_watch_readable(int fd, void (*cb)(void *arg), void *arg)
{
	return fd_watch_start(fd, EV_READ, 0, cb, arg);
}

int progress_watch_writable(int fd, unsigned retry_ms, void (*cb)(void *arg), void *arg)
{
	return fd_watch_start(fd, EV_WRITE, retry_ms, cb, arg);
}

struct timer_call {
	void (*cb)(void *arg);
	void *arg;
};

static void on_timer_call(evutil_socket_t fd, short what, void *arg)
{
	struct timer_call t = *(struct timer_call *)arg;

	(void)fd;
	(void)what;
	free(arg);
	t.cb(t.arg);
}

int progress_after(unsigned ms, void (*cb)(void *arg), void *arg)
{
	struct timer_call *t = malloc(sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->cb = cb;
	t->arg = arg;
	if (progress_call_after(on_timer_call, t, ms) < 0) {
		free(t);
		return -ENOMEM;
	}
	return 0;
}

/* Held while a base and its thread start. ib_watch_lock is not taken: the child drops
 * everything it guards (below). */
bool progress_fork_lock(void)
{
	return forklock_take(&progress_lock) != FORKLOCK_BUSY;
}

void progress_atfork_child(void)
{
	/* The thread is gone; its base may be mid-operation in the parent's image, its
	 * locks held: nothing here touches it again (no event of it is reachable from
	 * what the child keeps), a fresh one starts on next need. */
	progress_base = NULL;
	progress_pid = 0;
	/* nor its fds, which would only hold numbers the child's program may want */
	for (size_t i = 0; i < progress_nbase_fds; i++)
		fd_own_close(progress_base_fd[i]);
	progress_nbase_fds = 0;
	/* the parent's links, device and events are not ours (ib_lgr.h) */
	pthread_mutex_init(&ib_watch_lock, NULL);
	ib_watches = NULL;
	ib_timer = NULL;
	ib_base = NULL;
	ib_lgr_atfork_child();
}
