/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The client side of handshakes, run on the progress thread (progress.h): a PENDING
 * connection's same-host rendezvous, where servers connect and are answered each by
 * its own flow, and its in-band negotiation through the TCP option (negotiate.h), with
 * the deadlines of both.
 */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/negotiate/handshake.h"
#include "core/negotiate/hs_ib.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/progress_int.h"
#include "core/negotiate/tcpopt.h"

/* The deadline timer's period while it looks for an answer that has no event of its
 * own (inband_poll_answer). */
#define ANSWER_POLL_US 10000

struct pending {
	struct smc_conn *c;
	struct event *ev_rdv, *ev_tcp, *ev_deadline;
	bool inband;          /* negotiation through the TCP option (negotiate.h) */
	bool proposed;        /* inband: our Proposal is out, waiting for the answer */
	bool fd_limited;      /* inband: the rendezvous could not be accepted (EMFILE) */
	unsigned idle_ticks;  /* inband: deadline ticks since then */
	/* inband: no memory for the answer's event (inband_poll_answer): the deadline
	 * timer looks for it, until answer_by_ms */
	bool answer_polled;
	uint64_t answer_by_ms;
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
	progress_event_drop(&a->ev);
	hs_flow_abandon(&a->f);
	fd_own_close(a->f.ufd);
	free(a);
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
	progress_hs_watch_set(c, HS_WATCH_DONE);
	progress_event_drop(&p->ev_rdv);
	progress_event_drop(&p->ev_tcp);
	progress_event_drop(&p->ev_deadline);
	pthread_mutex_lock(&c->lock);
	if (tcp)
		rdv_decline_queued(c, CLC_DECL_PEERDECL);
	conn_close_rdv(c);
	if (c->bg_pending == p)
		c->bg_pending = NULL;
	pthread_mutex_unlock(&c->lock);
	conn_watch_fd_close(c);
	if (p->inband)
		neg_client_cleanup(&p->nc);
	conn_put(c);
	free(p);
}

/* Decides PENDING -> FALLBACK unless something else decided first. */
static void pending_end_tcp(struct pending *p, enum smc_reason why, bool counted)
{
	struct smc_conn *c = p->c;

	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
		if (counted)
			conn_fallback(c, why);
		else
			conn_fallback_failed(c, why);
	}
	pthread_mutex_unlock(&c->lock);
	pending_finish(p);
}

static void pending_give_up(struct pending *p, enum smc_reason why)
{
	pending_end_tcp(p, why, true);
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
		conn_tcp_reset(c->fd);
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
	a->ev = event_new(progress_thread_base(), f->ufd, EV_READ | EV_PERSIST, on_attempt, a);
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
			progress_event_drop(&p->ev_rdv);
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
	if (r < 0)
		fdtab_owe_error(fd, errno); /* reset since the poll: the program's */
	/* The server spoke TCP first, closed, or the connect failed: not SMC. */
	pending_give_up(p, SMC_REASON_PEER_NOT_SMC);
}

static bool answer_step(struct pending *p, bool final);


static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct timeval tv = smc_cfg_handshake_timeout();

	(void)fd;
	(void)what;
	if (p->answer_polled) {
		if (answer_step(p, false))
			return;
		if (clock_now_ms() >= p->answer_by_ms) {
			pending_abort(p, "no answer to the CLC Proposal");
			return;
		}
		tv = (struct timeval){ .tv_usec = ANSWER_POLL_US };
		event_add(p->ev_deadline, &tv);
	} else if (!p->inband) {
		pending_give_up(p, SMC_REASON_HANDSHAKE);
	} else if (__atomic_load_n(&p->c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pending_finish(p); /* the application closed it meanwhile */
	} else if (p->proposed && ++p->idle_ticks >= PROGRESS_INBAND_ANSWER_TICKS) {
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
			(void)answer_step(p, true);
	}
}

/* ------------------------------------------------------------ in-band negotiation */

/* Under c->lock, PENDING: the state a finished TCP handshake leaves. 1: both sent the
 * option. 0: plain TCP (*why). */
/* 1: the server sent the option; 0: it did not; -1: the connect failed. */
static int inband_peer_is_smc(struct smc_conn *c, enum smc_reason *why)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };

	*why = SMC_REASON_PEER_NOT_SMC;
	/* A failed connect leaves its error for the application's SO_ERROR: give up
	 * without reading it. */
	if (REAL(poll)(&pfd, 1, 0) == 1 && (pfd.revents & (POLLERR | POLLNVAL | POLLHUP)))
		return -1;
	return tcpopt_peer_sent(c->fd) == 1;
}

/* One step reading the server's answer; final: the deadline tick (a lone SMC-R Accept
 * is a kernel's then, see neg_client_answer). True when it decided (p is freed). */
static bool answer_step(struct pending *p, bool final)
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
		return true;
	}
	a = neg_client_answer(c->fd, &p->nc, final, buf, &len, &diag);
	pthread_mutex_unlock(&c->lock);
	switch (a) {
	case NEG_ANS_NONE:
		return false;
	case NEG_ANS_BAD:
		pending_abort(p, "invalid CLC answer from the server");
		return true;
	case NEG_ANS_IB:
		/* leaves c ACTIVE or FALLBACK, unless the Accept is malformed */
		if (hs_ib_client_inband(c, buf, len) < 0) {
			pending_abort(p, "malformed SMC-R Accept");
			return true;
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
	return true;
}

static void on_answer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)answer_step(arg, false);
}

/*
 * Our Proposal is out but no event could be made to wait for the answer (an address-
 * space limit): the server's answer may still come and must not reach the application,
 * so the connection cannot simply be TCP, and resetting it for want of memory is what
 * TCP would never do. The deadline timer, which exists already, looks for the answer
 * every ANSWER_POLL_US instead, as long as the events would have waited; without our
 * rendezvous name the server answers on the stream (a Decline: plain TCP).
 */
static void inband_poll_answer(struct pending *p)
{
	struct smc_conn *c = p->c;
	struct timeval tv = { .tv_usec = ANSWER_POLL_US };

	progress_event_drop(&p->ev_rdv);
	progress_event_drop(&p->ev_tcp);
	pthread_mutex_lock(&c->lock);
	conn_close_rdv(c);
	pthread_mutex_unlock(&c->lock);
	log_info("fd %d: no memory to wait for the CLC answer: looking for it every %u ms",
		 c->fd, ANSWER_POLL_US / 1000);
	p->answer_polled = true;
	p->answer_by_ms = clock_now_ms() +
			  (uint64_t)PROGRESS_INBAND_ANSWER_TICKS * smc_cfg.handshake_timeout_ms;
	if (event_add(p->ev_deadline, &tv) < 0)
		pending_abort(p, "out of memory");
}

static bool inband_arm(struct pending *p)
{
	struct event_base *base = progress_thread_base();
	struct smc_conn *c = p->c;
	struct timeval tv = smc_cfg_handshake_timeout();

	progress_event_drop(&p->ev_tcp);
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
	r = inband_peer_is_smc(c, &why);
	if (r <= 0) {
		pthread_mutex_unlock(&c->lock);
		/* not one byte was sent; a refused connect is no connection to count, as a
		 * blocking one's ECONNREFUSED is not (sock_connect.c) */
		pending_end_tcp(p, why, r == 0);
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
		inband_poll_answer(p);
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
	struct event_base *base = progress_thread_base();
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
		progress_event_drop(&p->ev_rdv);
		progress_event_drop(&p->ev_tcp);
		progress_event_drop(&p->ev_deadline);
		free(p);
		goto fail;
	}
	progress_hs_watch_set(c, HS_WATCH_ARMED);
	pthread_mutex_lock(&c->lock);
	decided = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING;
	if (!decided)
		c->bg_pending = p;
	pthread_mutex_unlock(&c->lock);
	if (decided) /* the program closed it before the watch began */
		pending_finish(p);
	return;
fail:
	conn_watch_fd_close(c);
	progress_hs_watch_set(c, HS_WATCH_DONE);
	/* a program's close before the watch began put /dev/null in the watch's place
	 * (conn_watch_let_go), which epoll refuses: not a lack of memory */
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING)
		log_debug("fd %d: closed before its handshake's watch began: declining", c->fd);
	else
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
	int r = conn_watch_fd_open(c);

	if (r < 0)
		return r;
	conn_get(c);
	progress_hs_watch_set(c, HS_WATCH_QUEUED);
	if (progress_call(pending_register, c) < 0) {
		progress_hs_watch_set(c, HS_WATCH_NONE);
		conn_watch_fd_close(c);
		conn_put(c);
		return -ENOMEM;
	}
	return 0;
}
