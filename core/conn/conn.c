/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * One connection's life (conn.h): creation, the handshake's staged sends, activation,
 * fallback, and the last close with TCP's semantics (linger, the peer's unread bytes).
 * The data path is conn_data.c, waiting and readiness conn_wait.c, the way back to TCP
 * conn_down.c, the process's registry and fork conn_registry.c; what they share is
 * conn_int.h.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/log.h"
#include "core/conn/conn_int.h"
#include "core/conn/conn_orphan.h"
#include "core/conn/transport.h"
#include "core/shm/pool.h"

size_t conn_iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;

	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* ------------------------------------------------------------------ lifecycle */

struct smc_conn *conn_alloc(int fd, enum conn_side side)
{
	struct smc_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	conn_watch_prepare();
	c->fd = fd;
	c->fd_refs = 1;
	c->obj_refs = 1;
	c->side = side;
	c->state = CONN_PENDING;
	c->mode = SMC_MODE_SHM;
	c->tp = &conn_transport_shm; /* until SMC-R is chosen (conn_ib.c) */
	c->rdv_listen_fd = -1;
	c->watch_fd = -1;
	c->pool_slot = -1;
	c->peer_rx_bell = c->peer_tx_bell = -1;
	c->resend_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->rx_lock, NULL);
	pthread_mutex_init(&c->tx_lock, NULL);
	return c;
}

struct smc_conn *conn_new(int fd, enum conn_side side)
{
	struct smc_conn *c = conn_alloc(fd, side);

	if (!c)
		return NULL;
	c->rx_bell = fd_park(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	c->tx_bell = fd_park(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (c->rx_bell < 0 || c->tx_bell < 0) {
		int e = errno;

		if (c->rx_bell >= 0)
			fd_own_close(c->rx_bell);
		if (c->tx_bell >= 0)
			fd_own_close(c->tx_bell);
		pthread_mutex_destroy(&c->lock);
		pthread_mutex_destroy(&c->rx_lock);
		pthread_mutex_destroy(&c->tx_lock);
		free(c);
		errno = e; /* EMFILE/ENFILE: the caller's reason is fd-limit */
		return NULL;
	}
	fd_budget_take(2);
	/* The handshake creates the rest later (on the progress thread, for a client):
	 * reserved now, so that a burst of connects is judged by what it will hold. */
	c->fd_reserved = FD_COST_CONN - 2;
	fd_budget_reserve(c->fd_reserved);
	conn_list_add(c);
	return c;
}

/* The handshake ended (or never will): only what the connection keeps stays counted. */
static void conn_end_reservation(struct smc_conn *c)
{
	unsigned n = __atomic_exchange_n(&c->fd_reserved, 0, __ATOMIC_RELAXED);

	if (n)
		fd_budget_unreserve(n);
}

void conn_set_rdv(struct smc_conn *c, int fd)
{
	c->rdv_listen_fd = fd;
	if (fd >= 0)
		fd_budget_take(1);
}

void conn_close_rdv(struct smc_conn *c)
{
	if (c->rdv_listen_fd < 0)
		return;
	fd_own_close(c->rdv_listen_fd);
	c->rdv_listen_fd = -1;
	fd_budget_give(1);
}

void conn_get(struct smc_conn *c)
{
	__atomic_add_fetch(&c->obj_refs, 1, __ATOMIC_RELAXED);
}

void conn_free(struct smc_conn *c)
{
	conn_end_reservation(c);
	conn_list_del(c);
	if (c->bytes_sent || c->bytes_received)
		log_debug("conn fd %d closed: sent %llu received %llu", c->fd,
			  (unsigned long long)c->bytes_sent, (unsigned long long)c->bytes_received);
	if (c->pool) {
		/* the doorbells and the memory are the pool's: leave no count on them */
		unsigned undrained = __atomic_load_n(&c->bells_undrained, __ATOMIC_RELAXED);

		if (undrained & CONN_BELL_RX)
			bell_drain(c->rx_bell);
		if (undrained & CONN_BELL_TX)
			bell_drain(c->tx_bell);
		if (c->pool_slot >= 0)
			pool_conn_done(c->pool, c->pool_slot);
		else
			pool_put(c->pool);
		memset(&c->map, 0, sizeof(c->map));
	} else {
		fd_own_close(c->rx_bell);
		fd_own_close(c->tx_bell);
		fd_budget_give(2);
		if (c->peer_rx_bell >= 0) {
			fd_own_close(c->peer_rx_bell);
			fd_budget_give(1);
		}
		if (c->peer_tx_bell >= 0) {
			fd_own_close(c->peer_tx_bell);
			fd_budget_give(1);
		}
	}
	conn_close_rdv(c);
	if (c->resend_fd >= 0) {
		fd_own_close(c->resend_fd);
		fd_budget_give(1);
	}
	c->tp->free(c);
	shm_detach(&c->map);
	free(c->pend_buf);
	if (__atomic_load_n(&c->reserved, __ATOMIC_RELAXED))
		shm_unreserve(__atomic_load_n(&c->reserved, __ATOMIC_RELAXED));
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->rx_lock);
	pthread_mutex_destroy(&c->tx_lock);
	free(c);
}

void conn_put(struct smc_conn *c)
{
	if (__atomic_sub_fetch(&c->obj_refs, 1, __ATOMIC_ACQ_REL) == 0)
		conn_free(c);
}

void conn_wake_local(struct smc_conn *c)
{
	bell_ring(c->rx_bell);
	bell_ring(c->tx_bell);
}


/* The staging buffer is used only while PENDING: an idle connection keeps no 8 KiB
 * for the first bytes it sent. With tx_lock held, as the state leaves PENDING. */
static void pending_drop(struct smc_conn *c)
{
	free(c->pend_buf);
	c->pend_buf = NULL;
	c->pend_len = 0;
}

/* With tx_lock held, before the state leaves PENDING: into the (empty) ring. */
static void pending_flush_shm(struct smc_conn *c)
{
	uint32_t n = c->pend_len < c->tx_size ? (uint32_t)c->pend_len : c->tx_size;

	if (!n) {
		pending_drop(c);
		return;
	}
	c->tx_prod = ring_copy_in(c->tx_ring, c->tx_size, c->tx_prod, c->pend_buf, n);
	__atomic_store_n(&c->tx->prod, c->tx_prod, __ATOMIC_RELEASE);
	/* the end of a copy (true): the peer may be active and asleep in its read
	 * already, as a client's Confirm leaves before it turns active, and a server
	 * finishing in the background turns active after its client */
	c->tp->tx_published(c, true);
	c->bytes_sent += n;
	stats_bytes(c->mode, n, 0);
	pending_drop(c);
}

/* With tx_lock held, before the state becomes FALLBACK: onto the TCP socket. */
static void pending_flush_tcp(struct smc_conn *c)
{
	size_t off = 0;

	while (off < c->pend_len) {
		ssize_t r = REAL(send)(c->fd, c->pend_buf + off, c->pend_len - off,
				       MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r > 0) {
			off += (size_t)r;
			stats_bytes(SMC_MODE_TCP, (size_t)r, 0);
		} else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd p = { .fd = c->fd, .events = POLLOUT };

			if (REAL(poll)(&p, 1, (int)smc_cfg.handshake_timeout_ms) <= 0)
				break;
		} else {
			break; /* the connection failed: TCP would lose it too */
		}
	}
	pending_drop(c);
}

ssize_t conn_send_pending(struct smc_conn *c, const struct iovec *iov, int iovcnt)
{
	size_t want = conn_iov_total(iov, iovcnt), n;
	bool full;

	if (c->fork_orphan)
		return -1; /* nothing may be staged: see conn_fork_child */
	pthread_mutex_lock(&c->tx_lock);
	if (conn_state(c) != CONN_PENDING || want == 0) {
		pthread_mutex_unlock(&c->tx_lock);
		return 0;
	}
	if (!c->pend_buf)
		c->pend_buf = malloc(CONN_PENDING_BUF);
	n = c->pend_buf ? CONN_PENDING_BUF - c->pend_len : 0;
	if (n > want)
		n = want;
	/* the staging buffer as a ring that never wraps: pend_len + n <= its size */
	if (n)
		ring_copy_in_iov(c->pend_buf, CONN_PENDING_BUF, c->pend_len, iov, iovcnt, 0, n,
				 false);
	c->pend_len += n;
	if (n)
		__atomic_store_n(&c->sent_last, true, __ATOMIC_RELAXED);
	/* the send waits for the handshake from here on: not for long (progress.h) */
	full = (n < want || c->pend_len == CONN_PENDING_BUF) && !c->pend_full_told;
	if (full)
		c->pend_full_told = true;
	pthread_mutex_unlock(&c->tx_lock);
	if (full && conn_negotiate)
		conn_negotiate->staging_full(c);
	return n ? (ssize_t)n : -1;
}

void conn_note_peer(struct smc_conn *c)
{
	socklen_t len = sizeof(c->peer_sa);

	if (REAL(getpeername)(c->fd, (struct sockaddr *)&c->peer_sa, &len) == 0 &&
	    len <= sizeof(c->peer_sa))
		c->peer_len = len;
}

/* wake: ring our own bells so that every waiter re-evaluates (nobody waits on a
 * connection that is ACTIVE from its first moment) */
static void conn_go_active(struct smc_conn *c, bool wake)
{
	conn_note_peer(c);
	c->tp->activate(c);
	c->rx_cons = c->rx_prod_seen = 0;
	c->tx_prod = c->tx_cons_seen = 0;
	pthread_mutex_lock(&c->tx_lock);
	pending_flush_shm(c);
	__atomic_store_n(&c->state, CONN_ACTIVE, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->tx_lock);
	stats_conn(c->mode, SMC_REASON_NONE);
	log_debug("fd %d: %s connection active (%s, rx %u tx %u%s)", c->fd, stats_mode_name(c->mode),
		  c->side == CONN_CLIENT ? "client" : "server", c->rx_size, c->tx_size,
		  c->pool ? ", pooled" : "");
	if (wake)
		conn_wake_local(c);
}

void conn_first_verdict(struct smc_conn *c, uint64_t now)
{
	uint64_t moved;

	if (!__atomic_exchange_n(&c->policy_first, false, __ATOMIC_ACQ_REL) || !conn_negotiate ||
	    !c->policy_key)
		return;
	moved = __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED) +
		__atomic_load_n(&c->bytes_received, __ATOMIC_RELAXED);
	conn_negotiate->first_closed(c->policy_key, now - c->born_ns, moved,
				     __atomic_load_n(&c->exchanges, __ATOMIC_RELAXED), now,
				     (uint64_t)smc_cfg.short_conn_us * 1000);
}

void conn_activate(struct smc_conn *c)
{
	conn_end_reservation(c);
	/* the policy judges how long the connection is used, not how long its handshake
	 * took (a slow one on a busy host would otherwise pass for a long connection) */
	if (c->policy_key)
		c->born_ns = clock_now_ns();
	conn_go_active(c, true);
}

struct smc_conn *conn_new_pooled(int fd, enum conn_side side, struct smc_pool *p, int slot)
{
	struct smc_conn *c = conn_alloc(fd, side);
	int bells[4];

	if (!c)
		return NULL;
	c->pool = p;
	c->pool_slot = slot;
	pool_slot_conn(p, slot, &c->map, bells);
	c->rx_bell = bells[0];
	c->tx_bell = bells[1];
	c->peer_rx_bell = bells[2];
	c->peer_tx_bell = bells[3];
	conn_list_add(c);
	return c;
}

void conn_activate_pooled(struct smc_conn *c, bool watched)
{
	conn_go_active(c, watched);
	stats_count_pooled();
}

/* The TCP connection is established, or was and its peer closed it: a server may still
 * accept it. Not so for one whose connect failed or that was reset. */
static bool tcp_may_be_accepted(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return true;
	return ti.tcpi_state == TCP_ESTABLISHED || ti.tcpi_state == TCP_CLOSE_WAIT;
}

bool conn_pool_withdraw(struct smc_conn *c, bool server_gone)
{
	if (!c->pool || c->pool_slot < 0 ||
	    !pool_client_withdraw(c->pool, c->pool_slot, server_gone))
		return false;
	c->pool_slot = -1;
	return true;
}

void conn_fallback_to_tcp(struct smc_conn *c, enum smc_reason why, bool counted)
{
	conn_end_reservation(c);
	c->reason = why;
	c->mode = SMC_MODE_TCP;
	pthread_mutex_lock(&c->tx_lock);
	pending_flush_tcp(c);
	__atomic_store_n(&c->state, CONN_FALLBACK, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->tx_lock);
	if (counted)
		stats_conn(SMC_MODE_TCP, why);
	log_debug("fd %d: plain TCP (%s)", c->fd, stats_reason_name(why));
	conn_wake_local(c);
}

void conn_fallback(struct smc_conn *c, enum smc_reason why)
{
	conn_fallback_to_tcp(c, why, true);
}

void conn_fallback_failed(struct smc_conn *c, enum smc_reason why)
{
	conn_fallback_to_tcp(c, why, false);
}

/* Marks the connection aborted because the peer broke the protocol: the connection
 * ends with ECONNRESET, nothing is read or written outside the rings. */
void conn_abort_protocol(struct smc_conn *c, const char *what)
{
	bool first = !c->aborted;

	if (first) {
		log_warn("fd %d: peer sent an invalid %s: connection aborted", c->fd, what);
		stats_count_abort();
	}
	c->aborted = true;
	if (first)
		c->tp->abort(c);
	/* readiness hook: epoll sets learn about changes only from the bells */
	if (first)
		conn_wake_local(c);
}

void conn_linger_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	REAL(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

void conn_tcp_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	/* connect(AF_UNSPEC) disconnects: an established socket sends a RST and records
	 * ECONNRESET for the next call of the application */
	REAL(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	REAL(connect)(fd, &sa, sizeof(sa));
}

const struct conn_negotiate_ops *conn_negotiate;

void conn_negotiate_ops_set(const struct conn_negotiate_ops *ops)
{
	conn_negotiate = ops;
}

/*
 * Orphans (conn_orphan.h): a closed shared-memory connection whose peer has not read all
 * we wrote. What it still owes is the re-send of those bytes should the peer go back to
 * TCP before it reads them (the bytes stay in the ring until then, as a closed TCP
 * socket's stay in its send queue).
 */
int64_t conn_orphan_unread(struct smc_conn *c)
{
	int64_t room;

	if (c->aborted || conn_tx_dead(c))
		return -1;
	if (pthread_mutex_trylock(&c->tx_lock) != 0)
		return 1; /* a thread of ours is still in a call on it: look again later */
	/* after a fork, from the shared block's producer cursor (conn_tx_free) */
	room = c->aborted ? -1 : conn_tx_free(c);
	pthread_mutex_unlock(&c->tx_lock);
	return room < 0 ? -1 : (int64_t)c->tx_size - room;
}

enum conn_orphan_end conn_orphan_step(struct smc_conn *c)
{
	int64_t unread;

	if (conn_peer_went_tcp(c)) {
		/* the peer left the rings: what it did not read goes over TCP, the rest
		 * (if the socket does not take it at once) on the progress thread, and
		 * the socket's last close is then a FIN after it */
		if (pthread_mutex_trylock(&c->tx_lock) != 0)
			return CONN_ORPHAN_KEEP;
		/* the re-send ends at the shared block's producer cursor (fork) */
		if (c->fork_shared)
			conn_fork_lock(c, 1);
		conn_tx_resync(c);
		if (c->fork_shared)
			conn_fork_unlock(c, 1);
		(void)conn_down_step(c, true);
		pthread_mutex_unlock(&c->tx_lock);
		return CONN_ORPHAN_RESENT;
	}
	unread = conn_orphan_unread(c);
	return unread == 0 || unread < 0 ? CONN_ORPHAN_READ : CONN_ORPHAN_KEEP;
}

/* SO_LINGER with a timeout: close waits until the peer consumed what we wrote. */
static void conn_linger(struct smc_conn *c)
{
	uint64_t deadline = clock_now_ns() + (uint64_t)c->linger_s * 1000000000ull;

	/* conn_wait(POLLOUT) returns once a third of the ring is free; the ring draining
	 * completely is not a readiness event, so poll for it at a millisecond pace */
	while (!c->aborted && !conn_tx_dead(c) && conn_tx_free(c) < (int64_t)c->tx_size && clock_now_ns() < deadline)
		REAL(poll)(NULL, 0, 1);
}

/*
 * A server that closes a connection still negotiating, with bytes staged (an inetd
 * daytime service: accept, write a line, close): the bytes must reach the client the
 * way it will read them. While the client can take a Decline it gets one and they go
 * over TCP; once our Accept is out the client may be reading the rings already (its
 * Confirm is on the way), so the close waits for the handshake to end, a handshake
 * timeout at most (the client answers in microseconds), and they go into the ring.
 * Falling back alone there left the client on the rings and the line on TCP, which the
 * client takes for a broken peer (reset, the line lost).
 */
static void server_staged_settle(struct smc_conn *c)
{
	int r = conn_negotiate ? conn_negotiate->flow_refuse(c, SMC_REASON_HANDSHAKE) : -ENOENT;

	if (r != 1)
		conn_wait_pending(c, false, (int64_t)smc_cfg.handshake_timeout_ms * 1000000);
}

void conn_release_fd(struct smc_conn *c)
{
	int st;

	if (c->side == CONN_SERVER && !c->fork_orphan && conn_state(c) == CONN_PENDING &&
	    __atomic_load_n(&c->pend_len, __ATOMIC_RELAXED))
		server_staged_settle(c);
	/* one decision under the lock: the handshake may end concurrently */
	pthread_mutex_lock(&c->lock);
	st = conn_state(c);
	if (st == CONN_PENDING) {
		/* Staged data must reach the peer before our FIN: give up SMC for it. */
		if (c->pend_len)
			conn_fallback(c, SMC_REASON_HANDSHAKE);
		else
			__atomic_store_n(&c->state, CONN_CLOSED, __ATOMIC_RELEASE);
	}
	/* Decided or not: the watch's descriptor holds the socket until the progress thread
	 * ends the watch (pending_finish, server_wait_finish), which a busy host can put off
	 * past a close that follows the handshake closely. Linux releases the socket at its
	 * last close (__fput: eventpoll_release drops its epoll registrations, tcp_close
	 * sends the FIN or reset), and so must the program's close here. */
	conn_watch_let_go(c);
	pthread_mutex_unlock(&c->lock);
	if (st == CONN_PENDING && conn_negotiate)
		conn_negotiate->decided(c);
	if (st == CONN_ACTIVE && c->policy_key) {
		uint64_t now = clock_now_ns();
		uint64_t moved = __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED) +
				 __atomic_load_n(&c->bytes_received, __ATOMIC_RELAXED);

		uint32_t turns = __atomic_load_n(&c->exchanges, __ATOMIC_RELAXED);

		log_debug("fd %d: closed after %llu us, %llu bytes moved in %u exchanges", c->fd,
			  (unsigned long long)((now - c->born_ns) / 1000), (unsigned long long)moved,
			  turns);
		if (conn_negotiate)
			conn_negotiate->policy_closed(c->policy_key, now - c->born_ns, moved, turns,
						      now, (uint64_t)smc_cfg.short_conn_us * 1000);
		conn_first_verdict(c, now);
	}
	if (st == CONN_ACTIVE && c->pool && c->side == CONN_CLIENT && c->pool_slot >= 0 &&
	    !c->fork_shared && pool_client_unclaimed(c->pool, c->pool_slot) &&
	    (__atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED) == 0 || !tcp_may_be_accepted(c->fd)) &&
	    conn_pool_withdraw(c, false)) {
		/* Closed before the server accepted: with nothing sent, the server will see a
		 * plain TCP connection that closes, so close it as one (FIN, no reset); a
		 * connection the kernel never established (or reset) is never accepted,
		 * so its slot must not wait for the server either. */
		__atomic_store_n(&c->state, CONN_CLOSED, __ATOMIC_RELEASE);
		st = CONN_CLOSED;
	}
	if (st == CONN_ACTIVE && (conn_side_went_tcp(c) || conn_peer_went_tcp(c))) {
		/* plain TCP from here (downgrade): no SMC close and no reset, the FIN is the
		 * kernel's; the progress thread sends what the socket did not take yet of
		 * the re-send, over its own descriptor */
		if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
			conn_down_step(c, false);
		conn_wake_local(c);
		return;
	}
	if (st == CONN_ACTIVE) {
		uint32_t left = __atomic_sub_fetch(&c->map.hdr->side_refs[c->side], 1, __ATOMIC_ACQ_REL);

		if (left == 0) {
			if (c->linger_on && c->linger_s == 0) {
				__atomic_fetch_or(&c->tx->wflags, SHM_W_ABORT, __ATOMIC_RELEASE);
				__atomic_fetch_or(&c->rx->rflags, SHM_R_ABORT, __ATOMIC_RELEASE);
			} else {
				if (c->linger_on)
					conn_linger(c);
				__atomic_fetch_or(&c->tx->wflags, SHM_W_CLOSED, __ATOMIC_RELEASE);
				__atomic_fetch_or(&c->rx->rflags, SHM_R_CLOSED, __ATOMIC_RELEASE);
			}
			c->tp->closed(c, c->linger_on && c->linger_s == 0);
			/* The TCP channel carried no payload: close it with a reset, so neither
			 * side keeps it in TIME_WAIT (a churning client would run out of the
			 * ports it binds before connect). The peer knows from the flags above
			 * that this is a close, not an abort. Unless the peer has not read all
			 * we wrote: then the socket stays ours until it has (conn_orphan.h). */
			if (!c->tp->orphans || c->pool || (c->linger_on && c->linger_s == 0) ||
			    !conn_orphan_adopt(c))
				conn_linger_reset(c->fd);
		}
	}
	/* our own threads still waiting on the connection (another dup of the fd) */
	if (st == CONN_ACTIVE)
		c->tp->wake_own(c);
	else
		conn_wake_local(c);
}
