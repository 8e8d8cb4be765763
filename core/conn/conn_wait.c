/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Readiness and waiting for one connection: its poll mask as TCP would report it, the
 * sleep protocol with the peer (sleeper counts, sequence numbers, doorbells), the hooks
 * the epoll emulation uses, and the blocking waits of send and receive.
 */
#include <errno.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fdpark.h"
#include "core/base/log.h"
#include "core/base/sandbox.h"
#include "core/base/spin.h"
#include "core/conn/conn_int.h"
#include "core/conn/transport.h"

/* While the handshake runs, a connected socket is writable as TCP's would be: sends are
 * staged until the staging buffer is full (an in-band client waits for the server's
 * accept(), progress_client.c; a nonblocking listener's accept() hands the server its
 * connection before the client's Proposal arrived, sock.c). Never readable: reads wait
 * for the decision. */
static uint32_t pending_poll_mask(struct smc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLOUT };

	if (__atomic_load_n(&c->pend_len, __ATOMIC_RELAXED) >= CONN_PENDING_BUF)
		return 0;
	if (REAL(poll)(&p, 1, 0) != 1 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)))
		return 0;
	return (p.revents & POLLOUT) ? POLLOUT | POLLWRNORM : 0;
}

uint32_t conn_poll_mask(struct smc_conn *c)
{
	uint32_t m = 0;
	int st = conn_state(c);

	if (st == CONN_FALLBACK)
		return CONN_MASK_FALLBACK;
	if (st == CONN_PENDING && c->fork_orphan)
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR | POLLHUP; /* see below */
	if (st == CONN_PENDING)
		return pending_poll_mask(c);
	if (st != CONN_ACTIVE)
		return 0;
	if (c->aborted)
		return conn_aborted_mask(c);
	if (conn_side_went_tcp(c))
		return CONN_MASK_FALLBACK;
	if (conn_peer_went_tcp(c))
		return conn_down_poll_mask(c);
	if (conn_rx_used_peek(c) != 0)
		m |= POLLIN | POLLRDNORM;
	/* tcp_poll(): RCV_SHUTDOWN, the peer's end of data or our own shutdown(SHUT_RD) */
	if (c->shut_rd || conn_rx_eof(c))
		m |= POLLIN | POLLRDNORM | POLLRDHUP;
	if (c->aborted)
		return conn_aborted_mask(c);
	if (c->shut_wr || conn_tx_dead(c) || conn_room_writable(conn_tx_free_peek(c), c->tx_size))
		m |= POLLOUT | POLLWRNORM;
	/* tcp_poll(): hang-up once both directions are shut (the peer's end of data and our
	 * shutdown(SHUT_WR)); a peer's close alone is POLLRDHUP, as over TCP until its reset */
	if ((m & POLLRDHUP) && c->shut_wr)
		m |= POLLHUP;
	/* the peer's reset answering our send after its close (conn_send) */
	if (c->wrote_past_close)
		m |= POLLHUP;
	if (__atomic_load_n(&c->epipe_owed, __ATOMIC_ACQUIRE))
		m |= POLLERR;
	if (c->aborted)
		m |= POLLERR | POLLHUP;
	return m;
}

/* Counts a sleeper in the shared block so the peer rings (once per sequence). A count
 * the peer scribbled to ~0 would wrap to "nobody sleeps" with ours: then we count twice
 * (sleeper_del gives back one per sleep, so the extra one stays: a spare ring at most). */
static void sleeper_hold(uint32_t *sleepers, uint32_t *mine)
{
	uint32_t add = 1;

	if (__atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST) == 0) {
		__atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
		add = 2;
	}
	__atomic_add_fetch(mine, add, __ATOMIC_RELAXED);
}

/* ... and bumps the sequence so that it rings once for this sleep. */
static void sleeper_add(uint32_t *sleepers, uint32_t *seq, uint32_t *mine)
{
	__atomic_add_fetch(seq, 1, __ATOMIC_SEQ_CST);
	sleeper_hold(sleepers, mine);
}

static void sleeper_del(uint32_t *sleepers, uint32_t *mine)
{
	uint32_t n = __atomic_load_n(mine, __ATOMIC_RELAXED);

	/* only what this process added: the peer could scribble the shared count */
	while (n && !__atomic_compare_exchange_n(mine, &n, n - 1, true, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
		;
	if (n)
		__atomic_sub_fetch(sleepers, 1, __ATOMIC_RELEASE);
}

uint32_t conn_prepare_sleep(struct smc_conn *c, uint32_t events, unsigned drained_bells,
			    uint32_t *armed)
{
	uint32_t m, a = 0;

	if (drained_bells & CONN_BELL_RX)
		bell_drain(c->rx_bell);
	if (drained_bells & CONN_BELL_TX)
		bell_drain(c->tx_bell);
	if (conn_state(c) == CONN_ACTIVE) {
		a = events & (POLLIN | POLLOUT);
		if (events & POLLIN)
			sleeper_add(&c->rx->r_sleepers, &c->rx->r_seq, &c->asleep_rx);
		if (events & POLLOUT)
			sleeper_add(&c->tx->w_sleepers, &c->tx->w_seq, &c->asleep_tx);
	}
	if (armed)
		*armed = a;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	m = conn_poll_mask(c);
	/* Another waiter may sleep on the bell we just emptied: ring it again for the
	 * direction that is ready so that waiter re-evaluates too. */
	if ((drained_bells & CONN_BELL_RX) && (m & (POLLIN | POLLERR | POLLHUP | CONN_MASK_FALLBACK)))
		bell_ring(c->rx_bell);
	if ((drained_bells & CONN_BELL_TX) && (m & (POLLOUT | POLLERR | POLLHUP | CONN_MASK_FALLBACK)))
		bell_ring(c->tx_bell);
	return m;
}

void conn_end_sleep(struct smc_conn *c, uint32_t events)
{
	if (conn_state(c) != CONN_ACTIVE)
		return;
	if (events & POLLIN)
		sleeper_del(&c->rx->r_sleepers, &c->asleep_rx);
	if (events & POLLOUT)
		sleeper_del(&c->tx->w_sleepers, &c->asleep_tx);
}

/* ---- readiness hooks for the epoll emulation (epoll.c owns this region) ---- */

uint32_t conn_hold_sleep(struct smc_conn *c, uint32_t events)
{
	if (conn_state(c) != CONN_ACTIVE)
		return 0;
	if (events & POLLIN)
		sleeper_hold(&c->rx->r_sleepers, &c->asleep_rx);
	if (events & POLLOUT)
		sleeper_hold(&c->tx->w_sleepers, &c->asleep_tx);
	return events & (POLLIN | POLLOUT);
}

void conn_rearm(struct smc_conn *c, uint32_t events)
{
	if (conn_state(c) == CONN_ACTIVE) {
		if (events & POLLIN)
			__atomic_add_fetch(&c->rx->r_seq, 1, __ATOMIC_SEQ_CST);
		if (events & POLLOUT)
			__atomic_add_fetch(&c->tx->w_seq, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* A nonblocking sender found the ring full. Like TCP's SOCK_NOSPACE: a waiter that holds
 * a sleeper count without a fresh sequence (an epoll set's edge-triggered EPOLLOUT) must
 * hear when room comes back, so ask the peer to ring once more; room freed before the
 * peer could see the new sequence is announced on our own bell. */
void conn_tx_full(struct smc_conn *c)
{
	c->tp->tx_blocked(c);
	if (!__atomic_load_n(&c->asleep_tx, __ATOMIC_RELAXED))
		return;
	conn_rearm(c, POLLOUT);
	if (conn_room_writable(conn_tx_free_peek(c), c->tx_size))
		bell_ring(c->tx_bell);
}

/* ---- end of the epoll readiness hooks ---- */

int conn_wait_fds(struct smc_conn *c, uint32_t events, struct pollfd *out, unsigned *tags)
{
	int n = 0;

	if (events & POLLIN || conn_state(c) == CONN_PENDING) {
		out[n] = (struct pollfd){ .fd = c->rx_bell, .events = POLLIN };
		tags[n++] = CONN_BELL_RX;
	}
	if (events & POLLOUT) {
		out[n] = (struct pollfd){ .fd = c->tx_bell, .events = POLLIN };
		tags[n++] = CONN_BELL_TX;
	}
	if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE)) {
		/* the socket carries the peer's data and takes ours (downgrade) */
		short tev = (events & POLLIN ? POLLIN | POLLRDHUP : 0) | (events & POLLOUT ? POLLOUT : 0);

		if (tev) {
			out[n] = (struct pollfd){ .fd = c->fd, .events = tev };
			tags[n++] = CONN_WAIT_TCP;
		}
	} else if (!c->tcp_eof) {
		out[n] = (struct pollfd){ .fd = c->fd, .events = POLLIN | POLLRDHUP };
		tags[n++] = CONN_WAIT_TCP;
	}
	return n;
}

bool conn_on_rings(struct smc_conn *c)
{
	if (conn_state(c) != CONN_ACTIVE || conn_side_went_tcp(c) || conn_peer_went_tcp(c))
		return false;
	conn_tcp_event(c); /* the peer's death marks c aborted */
	return true;
}

bool conn_so_error(struct smc_conn *c, int *err)
{
	if (!conn_on_rings(c))
		return false;
	*err = c->aborted && conn_reset_take(c)                          ? ECONNRESET
	       : __atomic_exchange_n(&c->epipe_owed, false, __ATOMIC_ACQ_REL) ? EPIPE
										: 0;
	return true;
}

void conn_tcp_event(struct smc_conn *c)
{
	char b;
	ssize_t r;

	if (c->tcp_eof || conn_state(c) != CONN_ACTIVE)
		return;
	/* after a downgrade the socket is the stream itself (conn_down.c): the
	 * peer's flag is stored before its new program can write */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (conn_peer_went_tcp(c) || (c->fork_shared && conn_side_went_tcp(c)))
		return;
	if (sandbox_active()) {
		/* no recv(): a read that cannot block (the channel is readable), and what
		 * it takes is never the application's (anything there ends the connection) */
		if (!sandbox_readable(c->fd))
			return;
		r = REAL(read)(c->fd, &b, 1);
	} else {
		r = REAL(recv)(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	}
	if (r == 0) {
		c->tcp_eof = true;
		/* A FIN with no close flag in the rings: the peer's process ended without
		 * closing (SIGKILL, _exit), and its kernel closed the socket. TCP resets
		 * when such a close leaves received bytes unread; ours were in the ring, so
		 * its kernel saw none: the reset is ours to report (redis-benchmark says
		 * "Connection reset by peer" for a killed server, not "Server closed").
		 * What the peer wrote before is still read first (conn_recv), as TCP
		 * hands out what arrived before its reset. */
		if (c->tp->tcp_ordered &&
		    !(conn_peer_wflags(c) & (SHM_W_CLOSED | SHM_W_DONE_WRITING | SHM_W_TCP)) &&
		    conn_tx_free_peek(c) < c->tx_size)
			c->aborted = true;
	} else if (r > 0) {
		/* over RDMA the leaver's first TCP bytes may overtake its CDC_WENT_TCP (two
		 * paths): they wait; the link tells what they are */
		if (!c->tp->tcp_ordered)
			return;
		/* After the upgrade nothing may travel over TCP. */
		conn_abort_protocol(c, "byte on the TCP channel");
		c->tcp_eof = true;
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		/* a peer that closed cleanly resets the TCP channel (see conn_release_fd) */
		c->tcp_eof = true;
		/* over RDMA a dead peer is the link's to report (ib_link.h: keepalive) */
		if (c->tp->tcp_ordered &&
		    !(conn_peer_wflags(c) & (SHM_W_CLOSED | SHM_W_DONE_WRITING)))
			c->aborted = true;
	}
	if (c->tcp_eof) {
		log_debug("fd %d: TCP channel closed by peer", c->fd);
		conn_wake_local(c);
	}
}

void conn_note_undrained(struct smc_conn *c, unsigned bells)
{
	if (bells && c->pool)
		__atomic_fetch_or(&c->bells_undrained, bells, __ATOMIC_RELAXED);
}

/* Is the wait over? A wait that started PENDING ends with the handshake. */
static bool conn_wait_done(struct smc_conn *c, uint32_t want, bool for_handshake)
{
	if (for_handshake)
		return conn_state(c) != CONN_PENDING;
	/* the callers' loops take a downgrade themselves, under their lock */
	if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
		return true;
	/* a blocking send goes on with any room, as tcp_sendmsg() copies what fits; only
	 * readiness (poll, epoll) waits for a third of the ring (conn_room_writable) */
	if ((want & POLLOUT) && conn_state(c) == CONN_ACTIVE && conn_tx_free_peek(c) > 0)
		return true;
	return (conn_poll_mask(c) & want) != 0;
}

struct spin_look {
	struct smc_conn *c;
	uint32_t want;
	bool for_handshake;
};

static int conn_spin_look(void *arg, unsigned n)
{
	struct spin_look *l = arg;

	(void)n;
	return conn_wait_done(l->c, l->want, l->for_handshake);
}

void conn_wait_cancelled(void *arg)
{
	struct wait_cancel *w = arg;

	conn_end_sleep(w->c, w->armed);
	conn_put(w->c);
}

/* The sleep of conn_wait, a cancellation point (recv is one): a cancelled thread ends
 * its sleep and drops its caller's reference (conn_wait_cancelled). */
static int conn_sleep(struct smc_conn *c, struct pollfd *pfd, int n, const struct timespec *tsp,
		      uint32_t armed)
{
	struct wait_cancel wc = { .c = c, .armed = armed };
	int r;

	pthread_cleanup_push(conn_wait_cancelled, &wc);
	r = sandbox_ppoll(pfd, (nfds_t)n, tsp, NULL);
	pthread_cleanup_pop(0);
	return r;
}

/* Blocks until `events` may be ready (for_handshake: until the connection is no longer
 * PENDING, events 0), the deadline passes (-EAGAIN) or a signal arrives (-EINTR). Spins
 * first: a peer about to answer is much cheaper to catch on the cursors than through a
 * kernel wakeup (shared/recipes/wakeup-cost). The caller says what the wait is for: a
 * caller that saw PENDING may find the handshake decided by the time it gets here, and
 * a wait for a decision that already came must end at once, not wait for events that
 * nobody asked for until the deadline. */
int conn_wait(struct smc_conn *c, uint32_t events, bool for_handshake, uint64_t deadline)
{
	uint32_t want = events | POLLERR | POLLHUP | CONN_MASK_FALLBACK;
	struct spin_look look = { c, want, for_handshake };
	unsigned drained = 0;

	/* a handshake takes two cross-process round trips through the progress thread:
	 * spinning for it only takes a CPU away from that thread */
	if (!for_handshake && !conn_peer_on_my_cpu(c) &&
	    spin_run(conn_spin_look, &look, deadline ? deadline : UINT64_MAX) > 0)
		return 0;

	for (;;) {
		struct pollfd pfd[3];
		unsigned tags[3];
		struct timespec ts, *tsp = NULL;
		uint32_t armed;
		int n, r;

		conn_prepare_sleep(c, events, drained, &armed);
		if (conn_wait_done(c, want, for_handshake)) {
			conn_end_sleep(c, armed);
			return 0;
		}
		drained = 0;
		if (deadline) {
			uint64_t now = clock_now_ns();

			if (now >= deadline) {
				conn_end_sleep(c, armed);
				return -EAGAIN;
			}
			ts.tv_sec = (time_t)((deadline - now) / 1000000000ull);
			ts.tv_nsec = (long)((deadline - now) % 1000000000ull);
			tsp = &ts;
		}
		/* The handshake's end rings the rx bell, always watched then; and as another
		 * waiter (poll on the same socket) may drain that ring first, the wait is
		 * bounded: the handshake itself is. */
		if (for_handshake) {
			static const struct timespec tick = { 0, 10 * 1000 * 1000 };

			if (!tsp || tsp->tv_sec > 0 || tsp->tv_nsec > tick.tv_nsec) {
				ts = tick;
				tsp = &ts;
			}
		}
		n = conn_wait_fds(c, for_handshake ? events | POLLIN : events, pfd, tags);
		r = conn_sleep(c, pfd, n, tsp, armed);
		conn_end_sleep(c, armed);
		if (r < 0)
			return -errno;
		for (int i = 0; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (tags[i] == CONN_WAIT_TCP)
				conn_tcp_event(c);
			else
				drained |= tags[i];
		}
		if (conn_wait_done(c, want, for_handshake)) {
			conn_note_undrained(c, drained);
			return 0;
		}
	}
}

/* A blocking socket call interrupted by a signal: the kernel restarts it when the
 * handler has SA_RESTART and the socket has no timeout (signal(7)). Which signal
 * interrupted our sleep is unknown, so restart only when every caught signal asks for
 * it; an application that relies on EINTR keeps getting it. */
bool conn_eintr_restarts(int64_t timeo_ns)
{
	if (timeo_ns > 0)
		return false;
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

uint64_t conn_deadline_from(int64_t timeo_ns)
{
	return timeo_ns > 0 ? clock_now_ns() + (uint64_t)timeo_ns : 0;
}

/*
 * The progress thread decides every handshake within its deadline (a few handshake
 * timeouts at most, see progress_client.c). Should a decision never come, a call waiting for
 * it must not wait forever: after CONN_PENDING_WATCHDOG_TICKS handshake timeouts of
 * waiting (the TCP connect is over by then), the waiting thread resets the connection
 * itself (the peer may have taken it as upgraded, so plain TCP could mix protocols):
 * the application gets ECONNRESET, as from a peer that died, and the log says so.
 */
#define CONN_PENDING_WATCHDOG_TICKS 15u

static const char *hs_watch_name(uint8_t w)
{
	switch (w) {
	case HS_WATCH_NONE: return "never handed to the progress thread";
	case HS_WATCH_QUEUED: return "queued for the progress thread, never armed";
	case HS_WATCH_ARMED: return "armed on the progress thread";
	case HS_WATCH_DONE: return "released by the progress thread";
	}
	return "?";
}

static void pending_watchdog_reset(struct smc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	if (conn_state(c) == CONN_PENDING) {
		struct fd_entry *e = fdtab_peek(c->fd);
		bool in_table = e && __atomic_load_n(&e->obj, __ATOMIC_ACQUIRE) == (void *)c;

		/* Should never happen: say everything that tells how it did. */
		log_warn("fd %d: handshake still undecided after %u ms: resetting the connection "
			 "(%s side, %s%s, rendezvous fd %d, tcp eof %d, fd refs %d, object refs %d, "
			 "%s the fd table)",
			 c->fd, CONN_PENDING_WATCHDOG_TICKS * smc_cfg.handshake_timeout_ms,
			 c->side == CONN_CLIENT ? "client" : "server",
			 hs_watch_name(__atomic_load_n(&c->hs_watch, __ATOMIC_ACQUIRE)),
			 c->deferred ? ", deferred" : "", c->rdv_listen_fd, c->tcp_eof, c->fd_refs,
			 c->obj_refs, in_table ? "in" : "not in");
		stats_count_abort();
		conn_tcp_reset(c->fd);
		conn_fallback(c, SMC_REASON_HANDSHAKE);
	}
	pthread_mutex_unlock(&c->lock);
}

int conn_wait_pending(struct smc_conn *c, bool nonblock, int64_t timeo_ns)
{
	uint64_t deadline = conn_deadline_from(timeo_ns);
	uint64_t watchdog = clock_now_ns() + (uint64_t)CONN_PENDING_WATCHDOG_TICKS *
					       smc_cfg.handshake_timeout_ms * 1000000ull;

	if (c->fork_orphan && conn_state(c) == CONN_PENDING)
		return -ECONNRESET; /* never decided here: see conn_fork_child */
	while (conn_state(c) == CONN_PENDING) {
		uint64_t until = deadline && deadline < watchdog ? deadline : watchdog;
		int r;

		if (nonblock)
			return -EAGAIN;
		r = conn_wait(c, 0, true, until);
		if (r == -EINTR && conn_eintr_restarts(timeo_ns))
			r = 0;
		if (r == -EAGAIN && conn_state(c) == CONN_PENDING) {
			if (until == deadline)
				return -EAGAIN; /* SO_RCVTIMEO / SO_SNDTIMEO, as TCP */
			pending_watchdog_reset(c);
			r = 0;
		}
		if (r < 0)
			return r;
	}
	return 0;
}
