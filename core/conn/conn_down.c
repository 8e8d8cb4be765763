/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Downgrade: an upgraded connection goes back to plain TCP mid-stream without losing a
 * byte, because its fd goes into a program that will not know the rings (exec). The
 * side that leaves (conn_downgrade) stores its cursors, then SHM_W_TCP, rings the
 * peer's bells, and is plain TCP at once: it waits for nothing, so a busy or dead peer
 * cannot hold up an exec. The TCP byte stream stands where the upgrade left it (nothing
 * travels on it after the handshake), so it carries on from what the cursors name:
 *   - the leaver's stream: the peer reads what is left in its ring, then the TCP socket;
 *   - the peer's stream: what the leaver did not read, from its cons to our producer
 *     cursor, is still in the ring we map; we send it over TCP before anything else
 *     (resend_*), without blocking, the progress thread sending what the socket does
 *     not take at once, and our later sends follow on TCP.
 * Once both are done the connection is FALLBACK here too (conn_down_finish), and the
 * readiness emulation hands the socket back to the kernel. As TCP sends its queued
 * bytes whatever the program does next, the re-sent bytes go out whatever ours does:
 * every call and readiness check looks, sleepers wake on the bells the leaver rang, and
 * a close leaves the rest to the progress thread. Setting SHM_W_TCP on our own side
 * claims the re-send, so that of several processes holding our side (fork) one sends
 * it; the others, like those of the leaver's side, are plain TCP from then on. When
 * both ends leave at once, the second finds the first's flag: it sends what it owes,
 * and what the first left unread in its ring has no reader any more: reset.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/log.h"
#include "core/base/progress.h"
#include "core/base/sandbox.h"
#include "core/conn/conn_int.h"
#include "core/conn/transport.h"
#include "core/wire/cdc.h"


#define DOWN_RETRY_MS 20          /* the progress thread looks at least this often */
#define DOWN_SECOND_NS 1000000000ull /* the second of two leavers: its re-send's bound */

bool conn_peer_went_tcp(struct smc_conn *c)
{
	bool no = false;

	if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
		return true;
	if (!c->tp->peer_went_tcp(c))
		return false;
	if (__atomic_compare_exchange_n(&c->peer_tcp, &no, true, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		stats_count_downgrade(true);
		log_debug("fd %d: the peer went back to TCP", c->fd);
	}
	return true;
}

/* Another process holding our side took the connection to TCP (a forked sibling that
 * exec'd, or that re-sends for us): plain TCP here too. */
bool conn_side_went_tcp(struct smc_conn *c)
{
	int st = CONN_ACTIVE;

	if (!c->fork_shared || c->tp->process_bound ||
	    __atomic_load_n(&c->resend_taken, __ATOMIC_ACQUIRE) ||
	    !(__atomic_load_n(&c->tx->wflags, __ATOMIC_ACQUIRE) & SHM_W_TCP))
		return false;
	if (__atomic_compare_exchange_n(&c->state, &st, CONN_FALLBACK, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		c->reason = SMC_REASON_EXEC;
		c->mode = SMC_MODE_TCP;
		log_debug("fd %d: plain TCP (taken back by another process of this side)", c->fd);
		conn_wake_local(c);
	}
	return true;
}

/*
 * A sibling of our side left the rings (conn_side_went_tcp) with bytes in our ring it had not
 * read: the peer re-sends them over TCP as soon as it sees the flag, but they may not be
 * in the socket yet. A readiness call of ours that ran before the sibling left reported
 * them readable (the ring), and TCP never answers a read that follows "readable" with
 * EAGAIN: programs take that for an error (ncat --exec's relay ends the connection, its
 * close then resets it). So the first nonblocking read after the switch waits for them,
 * bounded: the peer's library sends them without waiting for its program, and a peer
 * that died ends the TCP connection, which ends the wait too.
 */
void conn_side_rest_wait(struct smc_conn *c, bool nonblock)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLRDHUP };
	smc_cursor prod, cons;

	if (!nonblock || c->tp->process_bound || c->side_rest_waited)
		return;
	c->side_rest_waited = true;
	prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);
	cons = __atomic_load_n(&c->rx->cons, __ATOMIC_ACQUIRE);
	if (prod == cons)
		return; /* the sibling read all: nothing is owed */
	(void)REAL(poll)(&p, 1, (int)smc_cfg.handshake_timeout_ms);
}

/* conn_fork_lock(dir) when this side is still on the rings (true); false, holding nothing,
 * when a process of our side took it back to TCP. */
bool conn_fork_lock_rings(struct smc_conn *c, int dir)
{
	conn_fork_lock(c, dir);
	if (!conn_side_went_tcp(c))
		return true;
	conn_fork_unlock(c, dir);
	return false;
}

/* Under tx_lock: fixes what the peer did not read, from its cons (or the lap start of a
 * rewind of ours it has not jumped) to our producer cursor, which moves no more. */
static int resend_take(struct smc_conn *c)
{
	smc_cursor cons, base;
	int64_t used;
	uint32_t had;

	if (c->resend_taken)
		return c->aborted ? -1 : 0;
	if (!c->tp->resend_from(c, &cons, &base))
		return -1;
	used = cursor_diff(c->tx_prod, base, c->tx_size);
	if (cdc_validate_peer_cons(cons, cons, c->tx_prod, c->tx_size) < 0 || used < 0 ||
	    used > c->tx_size) {
		conn_abort_protocol(c, "consumer cursor");
		return -1;
	}
	c->resend_at = base;
	c->resend_end = c->tx_prod;
	/* no other process holds a process-bound side (a forked child's copy is dead) */
	had = c->tp->process_bound
		      ? 0
		      : __atomic_fetch_or(&c->tx->wflags, SHM_W_TCP, __ATOMIC_ACQ_REL);
	if (had & SHM_W_TCP)
		c->resend_at = c->resend_end; /* another process of our side claimed it */
	__atomic_store_n(&c->resend_taken, true, __ATOMIC_RELEASE);
	return 0;
}

/* One send that does not block, with what a seccomp sandbox leaves (sandbox.h). */
static ssize_t tcp_send_now(int fd, const uint8_t *p, size_t n)
{
	struct pollfd pf = { .fd = fd, .events = POLLOUT };

	if (!sandbox_active())
		return REAL(send)(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (REAL(poll)(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT))
		return errno = (pf.revents & (POLLERR | POLLHUP)) ? EPIPE : EAGAIN, -1;
	/* less than the room POLLOUT promises (a third of the send buffer at least) */
	return REAL(write)(fd, p, n < 4096 ? n : 4096);
}

/* Under tx_lock: sends what is left of the re-send over fd without blocking; true when
 * all of it is out, or the socket is gone (nothing left to carry it). */
static bool resend_flush(struct smc_conn *c, int fd)
{
	while (c->resend_at != c->resend_end) {
		uint32_t off = cursor_count(c->resend_at);
		int64_t left = cursor_diff(c->resend_end, c->resend_at, c->tx_size);
		size_t n = (size_t)left < c->tx_size - off ? (size_t)left : c->tx_size - off;
		ssize_t r = tcp_send_now(fd, c->tx_ring + off, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		if (r <= 0) {
			log_debug("fd %d: re-send to a peer gone back to TCP: %s", c->fd,
				  r < 0 ? strerror(errno) : "nothing sent");
			c->resend_at = c->resend_end;
			break;
		}
		c->resend_at = cursor_add(c->resend_at, (uint32_t)r, c->tx_size);
	}
	if (!__atomic_load_n(&c->resend_done, __ATOMIC_RELAXED)) {
		__atomic_store_n(&c->resend_done, true, __ATOMIC_SEQ_CST);
		/* a shutdown(SHUT_WR) the peer knew from our flags it now learns from TCP
		 * (conn_shutdown: one of us sees the other's store) */
		if (__atomic_load_n(&c->shut_wr, __ATOMIC_SEQ_CST))
			REAL(shutdown)(fd, SHUT_WR);
		conn_wake_local(c); /* writers and readiness waited for it */
	}
	return true;
}

/* The peer's stream read up to where it left, ours re-sent: plain TCP from now on.
 * Lockless (the state moves once); true when the connection is FALLBACK. */
bool conn_down_finish(struct smc_conn *c)
{
	int st = CONN_ACTIVE;

	if (!__atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE) || conn_rx_used_peek(c) != 0)
		return false;
	if (!__atomic_compare_exchange_n(&c->state, &st, CONN_FALLBACK, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return st == CONN_FALLBACK;
	c->reason = SMC_REASON_PEER_DOWNGRADE;
	c->mode = SMC_MODE_TCP;
	log_debug("fd %d: plain TCP (%s)", c->fd, stats_reason_name(c->reason));
	c->tp->release(c, false); /* over RDMA: the leaver may free its RMB */
	conn_wake_local(c);
	return true;
}

static void resend_watch(struct smc_conn *c);

/* Progress thread: the socket takes more (or DOWN_RETRY_MS passed after a busy lock:
 * while the socket is full the thread sleeps, as TCP's queue waits). Also wakes our
 * waiters when a send of ours found the socket full: the readiness emulation watches
 * the TCP socket for input only. */
static void on_resend_writable(void *arg)
{
	struct smc_conn *c = arg;

	if (pthread_mutex_trylock(&c->tx_lock) != 0) {
		/* a sender has it: it sends, or leaves the rest to us again */
		if (progress_watch_writable(c->resend_fd, DOWN_RETRY_MS, on_resend_writable, c) == 0)
			return;
		pthread_mutex_lock(&c->tx_lock);
	}
	if (!c->aborted && !resend_flush(c, c->resend_fd) &&
	    progress_watch_writable(c->resend_fd, 0, on_resend_writable, c) == 0) {
		pthread_mutex_unlock(&c->tx_lock);
		return;
	}
	c->resend_watched = false;
	pthread_mutex_unlock(&c->tx_lock);
	conn_wake_local(c);
	conn_down_finish(c);
	conn_put(c);
}

/* Under tx_lock: the progress thread finishes the re-send (and rings our bells when the
 * socket takes more), over its own descriptor of the socket: the program may close its
 * fds before. */
static void resend_watch(struct smc_conn *c)
{
	if (c->resend_watched)
		return;
	if (c->resend_fd < 0) {
		c->resend_fd = fd_own(REAL(fcntl)(c->fd, F_DUPFD_CLOEXEC, 0));
		if (c->resend_fd < 0) {
			log_warn("fd %d: no descriptor to finish a re-send to the peer: %s", c->fd,
				 strerror(errno));
			return;
		}
		fd_budget_take(1);
	}
	conn_get(c);
	if (progress_watch_writable(c->resend_fd, 0, on_resend_writable, c) < 0) {
		log_warn("fd %d: the progress thread cannot finish a re-send to the peer", c->fd);
		conn_put(c);
		return;
	}
	c->resend_watched = true;
}

/* Takes the re-send and sends what the socket takes now, leaving the rest to the
 * progress thread; true when all of it is out. tx_locked: the caller holds tx_lock;
 * otherwise a busy lock means a sender is at it. */
bool conn_down_step(struct smc_conn *c, bool tx_locked)
{
	bool done;

	if (__atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE))
		return true;
	if (!tx_locked && pthread_mutex_trylock(&c->tx_lock) != 0)
		return false;
	/* after the program's close (an orphan, below) only that descriptor is ours */
	done = resend_take(c) == 0 && resend_flush(c, conn_tcp_fd(c));
	if (!done && !c->aborted)
		resend_watch(c);
	if (!tx_locked)
		pthread_mutex_unlock(&c->tx_lock);
	return done;
}

bool conn_resend_pending(const struct smc_conn *c)
{
	return __atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE);
}

bool conn_finish_resend(struct smc_conn *c, uint64_t idle_ns)
{
	uint64_t moved_at = clock_now_ns();
	bool done = false;

	pthread_mutex_lock(&c->tx_lock);
	for (;;) {
		/* after the program's close only the progress thread's descriptor is ours */
		int fd = conn_tcp_fd(c);
		smc_cursor at = c->resend_at;
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		if (resend_take(c) < 0 || resend_flush(c, fd)) {
			done = true;
			break;
		}
		if (c->resend_at != at)
			moved_at = clock_now_ns();
		else if (c->aborted || clock_now_ns() - moved_at >= idle_ns)
			break;
		REAL(poll)(&p, 1, 10);
	}
	pthread_mutex_unlock(&c->tx_lock);
	return done;
}

/* A reset connection, as tcp_poll sees it after tcp_reset: shut down both ways, and
 * POLLERR while the error is pending (until reported once, conn_reset_take). */
uint32_t conn_aborted_mask(struct smc_conn *c)
{
	/* tcp_poll() after a reset: both directions shut, so no POLLOUT */
	uint32_t m = POLLIN | POLLRDNORM | POLLHUP | POLLRDHUP;

	return __atomic_load_n(&c->reset_reported, __ATOMIC_ACQUIRE) ? m : m | POLLERR;
}

/* Readiness while the peer's rest is read from the ring and ours re-sent: the ring's
 * data, then the TCP socket's own readiness. */
uint32_t conn_down_poll_mask(struct smc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLOUT | POLLRDHUP };
	bool sent = conn_down_step(c, false);
	bool rx_left = conn_rx_used_peek(c) != 0;
	uint32_t m = 0;

	if (sent && !rx_left && conn_down_finish(c))
		return CONN_MASK_FALLBACK;
	if (REAL(poll)(&p, 1, 0) != 1)
		p.revents = 0;
	if (rx_left || c->shut_rd)
		m |= POLLIN | POLLRDNORM;
	else
		m |= p.revents & (POLLIN | POLLRDNORM | POLLRDHUP);
	if (sent || c->shut_wr)
		m |= p.revents & (POLLOUT | POLLWRNORM);
	m |= p.revents & (POLLERR | POLLHUP);
	if (c->aborted)
		m |= conn_aborted_mask(c) & ~(uint32_t)POLLRDHUP;
	return m;
}

/* The rest of iov past skip over the TCP socket, as sock.c's plain calls do it (under a
 * sandbox: readv, writev); `send` says which way. */
ssize_t conn_tcp_tail(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		      int flags, bool send)
{
	struct iovec rest[iovcnt > 0 ? iovcnt : 1];
	int n = iov_tail(iov, iovcnt, skip, rest);
	struct msghdr m = { .msg_iov = rest, .msg_iovlen = (size_t)n };
	ssize_t r;

	if (n == 0)
		return 0;
	if (flags == 0 && sandbox_active())
		r = send ? REAL(writev)(c->fd, rest, n) : REAL(readv)(c->fd, rest, n);
	else
		r = send ? REAL(sendmsg)(c->fd, &m, flags) : REAL(recvmsg)(c->fd, &m, flags);
	if (r > 0 && send)
		stats_bytes(SMC_MODE_TCP, (size_t)r, 0);
	else if (r > 0 && !(flags & MSG_PEEK))
		stats_bytes(SMC_MODE_TCP, 0, (size_t)r);
	return r;
}

/* Under tx_lock, the peer gone back to TCP: our re-send first, then the data over TCP.
 * Bytes sent (from `skip` on), or -1 with errno. */
ssize_t conn_down_send(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		       int flags, bool nonblock, uint64_t deadline)
{
	ssize_t r;

	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int ms = -1;

		if (resend_take(c) < 0)
			return errno = ECONNRESET, -1;
		if (resend_flush(c, c->fd))
			break;
		if (nonblock) {
			resend_watch(c);
			return errno = EAGAIN, -1;
		}
		if (deadline) {
			uint64_t now = clock_now_ns();

			if (now >= deadline)
				return errno = EAGAIN, -1;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		if (REAL(poll)(&p, 1, ms) < 0 && errno == EINTR && !conn_eintr_restarts(c->sndtimeo_ns))
			return -1;
	}
	r = conn_tcp_tail(c, iov, iovcnt, skip, flags | (nonblock ? MSG_DONTWAIT : 0), true);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		resend_watch(c); /* rings our bells when the socket takes more */
	return r;
}

/* The second of two ends leaving at once (the peer's SHM_W_TCP came first): what we owe
 * goes out now, bounded; what the peer left in our ring has no reader once we are gone,
 * unless it re-sends it too (rest_resent: over RDMA, when the two flags crossed). */
static void down_leave_second(struct smc_conn *c, bool rest_resent)
{
	uint64_t end = clock_now_ns() + DOWN_SECOND_NS;
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	if (resend_take(c) == 0) {
		while (!resend_flush(c, c->fd) && clock_now_ns() < end) {
			struct pollfd p = { .fd = c->fd, .events = POLLOUT };

			REAL(poll)(&p, 1, 10);
		}
	}
	if ((rest_resent || conn_rx_used(c) == 0) && __atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE))
		return;
	log_warn("fd %d: both ends left the rings at once, data unread: connection reset", c->fd);
	stats_count_abort();
	REAL(connect)(c->fd, &sa, sizeof(sa)); /* tcp_disconnect: a reset to the peer */
}

/* A lock held only for a copy is had soon; one held through a sleep in the library is
 * not, and is gone without us (an exec ends every other thread). */
bool conn_lock_briefly(pthread_mutex_t *m)
{
	for (int i = 0; i < 1000; i++) {
		if (pthread_mutex_trylock(m) == 0)
			return true;
		REAL(poll)(NULL, 0, 0);
	}
	return false;
}

/* Our side leaves, under both data locks: the transport announces our cursors and the
 * end of our stream (over RDMA the peer answers, bounded, so that both ends know which
 * of them re-sends), then what is owed goes out over TCP. */
static void down_leave(struct smc_conn *c)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	enum conn_leave how = c->tp->leave(c);

	switch (how) {
	case CONN_LEFT:
		if (c->shut_wr)
			REAL(shutdown)(c->fd, SHUT_WR);
		break;
	case CONN_SECOND:
	case CONN_CROSSED:
		/* we re-send the peer's part from its cursor; crossed, it re-sends ours */
		(void)conn_peer_went_tcp(c); /* counts the peer's downgrade */
		down_leave_second(c, how == CONN_CROSSED);
		break;
	case CONN_GONE:
		/* the peer cannot learn where our stream ends, or did not answer with our
		 * bytes unread: TCP must not carry on without them */
		log_warn("fd %d: connection lost while going back to TCP: reset", c->fd);
		REAL(connect)(c->fd, &sa, sizeof(sa));
		break;
	}
	c->tp->release(c, false);
}

int conn_downgrade(struct smc_conn *c, enum smc_reason why, bool image_ends)
{
	bool rx_locked, tx_locked;

	pthread_mutex_lock(&c->lock);
	if (conn_state(c) != CONN_ACTIVE) {
		pthread_mutex_unlock(&c->lock);
		return -EINVAL;
	}
	rx_locked = conn_lock_briefly(&c->rx_lock);
	tx_locked = conn_lock_briefly(&c->tx_lock);
	if (!image_ends && (!rx_locked || !tx_locked)) {
		if (tx_locked)
			pthread_mutex_unlock(&c->tx_lock);
		if (rx_locked)
			pthread_mutex_unlock(&c->rx_lock);
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	down_leave(c);
	c->reason = why;
	c->mode = SMC_MODE_TCP;
	__atomic_store_n(&c->state, CONN_FALLBACK, __ATOMIC_RELEASE);
	if (tx_locked)
		pthread_mutex_unlock(&c->tx_lock);
	if (rx_locked)
		pthread_mutex_unlock(&c->rx_lock);
	pthread_mutex_unlock(&c->lock);
	stats_count_downgrade(false);
	log_debug("fd %d: plain TCP (%s): sent %llu, received %llu over shared memory", c->fd,
		  stats_reason_name(why), (unsigned long long)c->bytes_sent,
		  (unsigned long long)c->bytes_received);
	conn_wake_local(c);
	return 0;
}

/* The program uses urgent data (MSG_OOB), which the rings cannot carry: the
 * connection goes back to TCP (reason sockopt). True when the kernel socket serves
 * the call now: gone back, or the peer went (its urgent byte is in the socket). */
bool conn_oob_tcp(struct smc_conn *c)
{
	if (conn_peer_went_tcp(c))
		return true;
	return conn_downgrade(c, SMC_REASON_SOCKOPT, false) == 0 ||
	       conn_state(c) == CONN_FALLBACK;
}
