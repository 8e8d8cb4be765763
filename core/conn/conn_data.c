/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The data path of an ACTIVE connection: send and receive with TCP's semantics, copying
 * between the program's buffers and the rings, whose cursors the transport validates and
 * publishes (transport.h: transport_shm.c, or SMC-R's conn_ib.c).
 *
 * Memory ordering: the writer copies payload, then publishes its producer cursor with a
 * release store; the reader loads it with acquire before copying out, then publishes its
 * consumer cursor with release. The sleep/wake handshake is Dekker-style: a waiter stores
 * its armed flag, issues a full fence and re-reads the cursor; the other side stores the
 * cursor, issues a full fence and reads the flag. One of them must see the other.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/sandbox.h"
#include "core/conn/conn_int.h"
#include "core/conn/statsrv.h"
#include "core/conn/transport.h"

/* The transport's cursors (transport.h), for the rest of conn/ and readiness. A side
 * shared with other processes (fork) counts from the shared block's cursors, taken under
 * the direction's word (conn_fork_lock): a sibling's reads and writes move them, and the
 * peer's cursor checked against a stale copy of ours looks impossible (a parent and its
 * child reading one connection at once aborted it for "an invalid producer cursor"). */
int64_t conn_rx_used(struct smc_conn *c)
{
	int64_t used;

	if (!c->fork_shared)
		return c->tp->rx_used(c);
	conn_fork_lock(c, 0);
	conn_rx_resync(c);
	used = c->tp->rx_used(c);
	conn_fork_unlock(c, 0);
	return used;
}

int64_t conn_tx_free(struct smc_conn *c)
{
	int64_t room;

	if (!c->fork_shared)
		return c->tp->tx_free(c);
	conn_fork_lock(c, 1);
	conn_tx_resync(c);
	room = c->tp->tx_free(c);
	conn_fork_unlock(c, 1);
	return room;
}

int64_t conn_rx_used_peek(struct smc_conn *c)
{
	return c->tp->rx_used_peek(c);
}

int64_t conn_tx_free_peek(struct smc_conn *c)
{
	return c->tp->tx_free_peek(c);
}

/* No more data will ever arrive once the ring is drained. */
bool conn_rx_eof(struct smc_conn *c)
{
	return c->tp->rx_eof(c);
}

/* Nothing we write can ever be read. */
bool conn_tx_dead(struct smc_conn *c)
{
	return c->tp->tx_dead(c);
}

/*
 * After a fork several processes may read from (or write to) this side's rings while one
 * of them leaves for TCP (conn_downgrade at its exec). Each copy is made under the
 * direction's word of the shared block, after checking the side is still on the rings,
 * and the leaver stores its cursors and the flag under both: otherwise a sibling that
 * checked before the flag publishes its cursor after the leaver's, and the peer re-sends
 * over TCP what that sibling already took (ncat -k --exec echoed a first line twice).
 * Nothing waits under it; a holder that died is taken over.
 */
void conn_fork_lock(struct smc_conn *c, int dir)
{
	uint32_t *w = &c->map.hdr->fork_lock[c->side][dir];
	uint32_t me = (uint32_t)getpid();

	for (unsigned tries = 1;; tries++) {
		uint32_t cur = 0;

		if (__atomic_compare_exchange_n(w, &cur, me, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		if (tries % 1024 == 0 && !sandbox_active() && kill((pid_t)cur, 0) < 0 &&
		    errno == ESRCH)
			__atomic_compare_exchange_n(w, &cur, 0, false, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
		sandbox_yield();
	}
}

void conn_fork_unlock(struct smc_conn *c, int dir)
{
	__atomic_store_n(&c->map.hdr->fork_lock[c->side][dir], 0, __ATOMIC_RELEASE);
}

/* After a fork, this side of the connection may be driven by several processes (a parent
 * hands a connection to its child, or both use it): our cursors are then the ones in the
 * shared control block, not our private copies. Under the direction's conn_fork_lock:
 * without it a sibling may move the cursors between our loads. */
void conn_rx_resync(struct smc_conn *c)
{
	smc_cursor cons;

	if (!c->fork_shared)
		return;
	cons = __atomic_load_n(&c->rx->cons, __ATOMIC_ACQUIRE);
	if (cons == c->rx_cons)
		return;
	if (!cursor_valid(cons, c->rx_size)) {
		conn_abort_protocol(c, "consumer cursor"); /* the caller meets c->aborted */
		return;
	}
	__atomic_store_n(&c->rx_cons, cons, __ATOMIC_RELAXED);
	c->rx_prod_seen = cons;
}

void conn_tx_resync(struct smc_conn *c)
{
	smc_cursor prod, cons, base;
	int64_t used;

	/* not even a load otherwise: cons sits on the reader's line, which every read of
	 * the peer's moves to its CPU (one cache-line round trip per send) */
	if (!c->fork_shared)
		return;
	prod = __atomic_load_n(&c->tx->prod, __ATOMIC_ACQUIRE);
	base = conn_tx_cons_base(c, &cons);
	if (prod == c->tx_prod)
		return;
	used = cursor_diff(prod, base, c->tx_size);
	if (!cursor_valid(prod, c->tx_size) || used < 0 || used > c->tx_size) {
		conn_abort_protocol(c, "producer cursor"); /* the caller meets c->aborted */
		return;
	}
	__atomic_store_n(&c->tx_prod, prod, __ATOMIC_RELAXED);
	c->tx_cons_seen = cons;
}


/* ------------------------------------------------------------------ data path */

static void conn_note_cpu(struct smc_conn *c)
{
	uint32_t *mine = &c->map.hdr->side_cpu[c->side].cpu;
	int cpu = sched_getcpu();

	if (cpu >= 0 && __atomic_load_n(mine, __ATOMIC_RELAXED) != (uint32_t)cpu + 1)
		__atomic_store_n(mine, (uint32_t)cpu + 1, __ATOMIC_RELAXED);
}

bool conn_peer_on_my_cpu(struct smc_conn *c)
{
	int cpu;

	if (conn_state(c) != CONN_ACTIVE)
		return false;
	cpu = sched_getcpu();
	return cpu >= 0 &&
	       __atomic_load_n(&c->map.hdr->side_cpu[1 - c->side].cpu, __ATOMIC_RELAXED) ==
		       (uint32_t)cpu + 1;
}

/* Ring the peer's bell when one of its threads sleeps for what we just did, once per
 * sleep: a busy peer costs no syscall. */
void conn_ring_if_asleep(const uint32_t *sleepers, const uint32_t *seq, uint32_t *rung,
			 int bell)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(sleepers, __ATOMIC_RELAXED)) {
		uint32_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);

		if (s != *rung) {
			*rung = s;
			bell_ring_peer(bell);
		}
	}
}




/* Copies n readable bytes out of the ring into the iovecs (from `skip` bytes on),
 * publishing the consumer cursor chunk by chunk. */
static void rx_copy_publish(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			    size_t skip, size_t n)
{
	/* over RDMA the window policy turns publishes into CDCs (every quarter RMB): a
	 * reader copying a whole RMB publishes as it goes, so the writer refills the
	 * first quarters while it copies the rest instead of both taking turns */
	size_t chunk = c->tp->publish_chunk(c->rx_size);

	while (n) {
		size_t k = n < chunk ? n : chunk;

		if (iov) /* NULL: MSG_TRUNC, the bytes are dropped (conn_recv) */
			ring_copy_out_iov(c->rx_ring, c->rx_size, c->rx_cons, iov, iovcnt, skip, k);
		__atomic_store_n(&c->rx_cons, cursor_add(c->rx_cons, (uint32_t)k, c->rx_size),
				 __ATOMIC_RELAXED);
		c->tp->rx_published(c, k == n);
		skip += k;
		n -= k;
	}
}

/* Copies k bytes from the iovecs into the peer's ring at our producer cursor; over shm
 * with the store kind copy_adapt chose for this stretch of the stream. */
static void tx_copy_in(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t k)
{
	enum copy_store kind = !c->tp->store_kinds ? COPY_CACHED
				     : copy_adapt_kind(&c->tx_copy, k, smc_cfg.copy_store);

	ring_copy_in_iov(c->tx_ring, c->tx_size, c->tx_prod, iov, iovcnt, skip, k,
			 kind == COPY_STREAM);
	if (kind == COPY_STREAM) {
		/* the reader must not see the cursor before the lines it covers */
		ring_stream_fence();
		stats_count_stream(k);
	}
}

/* Copies n bytes (n <= free room) from the iovecs into the ring, publishing the producer
 * cursor chunk by chunk. */
static void tx_copy_publish(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			    size_t skip, size_t n)
{
	/* over RDMA a publish is a WRITE and a CDC message: at most one per quarter RMB,
	 * so the reader starts on the first quarter while we copy the rest */
	size_t chunk = c->tp->publish_chunk(c->tx_size);

	while (n) {
		size_t k = n < chunk ? n : chunk;

		tx_copy_in(c, iov, iovcnt, skip, k);
		__atomic_store_n(&c->tx_prod, cursor_add(c->tx_prod, (uint32_t)k, c->tx_size),
				 __ATOMIC_RELAXED);
		c->tp->tx_published(c, k == n);
		skip += k;
		n -= k;
	}
}

/* MSG_PEEK with MSG_WAITALL: TCP waits until the whole length is there (its receive
 * target), unless the stream ends first. Under rx_lock, with `used` bytes in the ring. */
static bool peek_wait_all(struct smc_conn *c, int flags, size_t used, size_t want,
			  bool nonblock)
{
	return (flags & MSG_WAITALL) && used < want && !nonblock && !c->shut_rd &&
	       !c->aborted && !conn_rx_eof(c) && !conn_peer_went_tcp(c);
}

/* Its wait: readiness says "readable" already, so no bell tells of more bytes; a look
 * every millisecond (a rare call, never a spin). 0, or EAGAIN at SO_RCVTIMEO's deadline,
 * EINTR for a signal that does not restart the call. */
static int peek_sleep(struct smc_conn *c, uint64_t deadline)
{
	struct wait_cancel wc = { .c = c }; /* see conn_wait_cancelled */
	int r;

	if (deadline && clock_now_ns() >= deadline)
		return EAGAIN;
	pthread_mutex_unlock(&c->rx_lock); /* see wait_unlocked */
	pthread_cleanup_push(conn_wait_cancelled, &wc);
	r = REAL(poll)(NULL, 0, 1);
	pthread_cleanup_pop(0);
	pthread_mutex_lock(&c->rx_lock);
	if (r < 0 && errno == EINTR && !conn_eintr_restarts(c->rcvtimeo_ns))
		return EINTR;
	return 0;
}

/*
 * A blocking recv or send sleeps without its direction's lock, as TCP's sleeps
 * (sk_wait_data, sk_stream_wait_memory) release the socket lock: another thread's
 * nonblocking call, FIONREAD or SIOCOUTQ answers at once meanwhile, and a second
 * blocking reader sleeps beside the first. Whoever wakes takes the lock again and looks
 * at the ring afresh. 0 or a positive errno.
 */
static int wait_unlocked(struct smc_conn *c, uint32_t events, uint64_t deadline,
			 pthread_mutex_t *lock)
{
	int err;

	pthread_mutex_unlock(lock);
	err = -conn_wait(c, events, false, deadline);
	pthread_mutex_lock(lock);
	return err;
}

/*
 * O_NONBLOCK belongs to the open file and the timeouts to the socket, both shared with
 * the processes that hold this side after a fork: one of them may have changed them
 * since we cached them (fcntl and setsockopt in this process update the cache), and may
 * have exited since. Asked of the kernel only for a side shared at a fork, and only where
 * the call would wait or fail with EAGAIN (two system calls beside a sleep). rx:
 * SO_RCVTIMEO, else SO_SNDTIMEO; MSG_DONTWAIT stays.
 */
int conn_timeo_read(int fd, int name, int64_t *ns)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);

	if (REAL(getsockopt)(fd, SOL_SOCKET, name, &tv, &len) < 0)
		return -1;
	*ns = (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000;
	return 0;
}

static void shared_file_refresh(struct smc_conn *c, bool rx, int flags, bool *nonblock,
				uint64_t *deadline)
{
	int fl;
	int64_t *timeo = rx ? &c->rcvtimeo_ns : &c->sndtimeo_ns, ns;

	if (!c->fork_shared)
		return;
	fl = REAL(fcntl)(c->fd, F_GETFL);
	if (fl >= 0) {
		c->nonblock = (fl & O_NONBLOCK) != 0;
		*nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	}
	if (conn_timeo_read(c->fd, rx ? SO_RCVTIMEO : SO_SNDTIMEO, &ns) < 0)
		return;
	if (ns != *timeo) {
		*timeo = ns;
		*deadline = conn_deadline_from(ns);
	}
}

ssize_t conn_recv(struct smc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	size_t want = conn_iov_total(iov, iovcnt), got = 0;
	bool nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	uint64_t deadline = conn_deadline_from(c->rcvtimeo_ns);
	bool tcp_rest = false; /* the peer's stream goes on over TCP (downgrade) */
	/* MSG_TRUNC: TCP drops (or with MSG_PEEK only counts) the bytes, copying none,
	 * so the buffer may be NULL (tcp_recvmsg) */
	const struct iovec *dst = (flags & MSG_TRUNC) ? NULL : iov;
	int err = 0;

	/* the old image's stats server went with it: smcpstat finds this one's from the
	 * first call on (not from the constructor: no thread before main) */
	if (__builtin_expect(c->carried, 0))
		statsrv_ensure();
	if (conn_side_went_tcp(c)) {
		conn_side_rest_wait(c, nonblock);
		return conn_tcp_tail(c, iov, iovcnt, 0, flags, false);
	}
	if (flags & MSG_OOB) {
		/* urgent data has no place in the rings: the connection goes back to TCP
		 * (conn_oob_tcp), whose urgent byte is out of the stream and so not behind
		 * what is left in our ring */
		if (!conn_oob_tcp(c))
			return errno = EINVAL, -1;
		return conn_tcp_tail(c, iov, iovcnt, 0, flags, false);
	}
	if (want == 0)
		return 0;
	pthread_mutex_lock(&c->rx_lock);
	conn_note_cpu(c);
	for (;;) {
		int64_t used;

		/* What arrived before a reset stays readable, as in tcp_recvmsg(), which
		 * empties the receive queue before it reports sk_err: a reply followed by
		 * the server's SO_LINGER {1, 0} close is read, then ECONNRESET. (Over RDMA
		 * the data precedes the abort on the link, ib_conn_rx_used.) */
		if (c->aborted && conn_rx_used(c) <= 0) {
			/* what this call read is returned first; the reset stays pending for
			 * the next call, as tcp_recvmsg() leaves sk_err when it copied any */
			if (!got)
				err = conn_reset_take(c) ? ECONNRESET : 0; /* then EOF */
			break;
		}
		if (conn_state(c) == CONN_FALLBACK) {
			/* we went back to TCP while this call slept (conn_downgrade) */
			tcp_rest = true;
			break;
		}
		used = conn_rx_used(c);
		if (used < 0)
			continue; /* aborted: reported above */
		if (used > 0) {
			size_t n = (size_t)used < want - got ? (size_t)used : want - got;

			if (flags & MSG_PEEK) {
				if (peek_wait_all(c, flags, (size_t)used, want, nonblock)) {
					err = peek_sleep(c, deadline);
					if (!err)
						continue;
					/* SO_RCVTIMEO's deadline or a signal ends TCP's wait
					 * with what is there (tcp_recvmsg: copied ? : error) */
					used = conn_rx_used(c);
					if (used <= 0)
						break;
					err = 0;
					n = (size_t)used < want - got ? (size_t)used : want - got;
				}
				if (dst)
					ring_copy_out_iov(c->rx_ring, c->rx_size, c->rx_cons, dst,
							  iovcnt, got, n);
				got += n;
				break;
			}
			if (c->fork_shared) {
				if (!conn_fork_lock_rings(c, 0)) {
					tcp_rest = true;
					break;
				}
				conn_rx_resync(c);
				used = c->tp->rx_used(c); /* held: not conn_rx_used */
				if (used <= 0) {
					conn_fork_unlock(c, 0);
					continue;
				}
				n = (size_t)used < want - got ? (size_t)used : want - got;
				rx_copy_publish(c, dst, iovcnt, got, n);
				conn_fork_unlock(c, 0);
			} else {
				rx_copy_publish(c, dst, iovcnt, got, n);
			}
			got += n;
			if (got == want || !(flags & MSG_WAITALL))
				break;
			continue;
		}
		if (!c->shut_rd && conn_peer_went_tcp(c)) {
			/* its last cursor was stored before the flag */
			if (conn_rx_used(c) > 0)
				continue;
			tcp_rest = true;
			break;
		}
		if (c->shut_rd || conn_rx_eof(c)) {
			/* the peer publishes its last cursor before its close flag */
			if (!c->shut_rd && !c->aborted && conn_rx_used(c) > 0)
				continue;
			if (c->aborted && !got)
				err = conn_reset_take(c) ? ECONNRESET : 0;
			break;
		}
		shared_file_refresh(c, true, flags, &nonblock, &deadline);
		if (nonblock) {
			if (!got)
				err = EAGAIN;
			break;
		}
		err = wait_unlocked(c, POLLIN, deadline, &c->rx_lock);
		/* a signal after part of the call returns that part, SA_RESTART or not
		 * (tcp_recvmsg: copied ? : sock_intr_errno) */
		if (err == EINTR && !got && conn_eintr_restarts(c->rcvtimeo_ns))
			err = 0;
		if (err) {
			if (got)
				err = 0;
			break;
		}
	}
	if (got && !(flags & MSG_PEEK)) {
		c->bytes_received += got;
		if (__atomic_load_n(&c->sent_last, __ATOMIC_RELAXED)) {
			__atomic_store_n(&c->sent_last, false, __ATOMIC_RELAXED);
			__atomic_fetch_add(&c->exchanges, 1, __ATOMIC_RELAXED);
		}
		stats_bytes(c->tp->mode, 0, got);
	}
	if (tcp_rest && (!got || ((flags & MSG_WAITALL) && !(flags & MSG_PEEK)))) {
		/* still under rx_lock: a second reader must not pass the ring's rest */
		ssize_t r;

		if (!got && !__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
			conn_side_rest_wait(c, nonblock);
		/* what we owe the peer goes out before we wait on TCP: its answer may be
		 * what our re-send carries (a request it never read from the ring); the
		 * progress thread finishes what the socket does not take at once */
		if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
			(void)conn_down_step(c, false);
		r = conn_tcp_tail(c, iov, iovcnt, got, flags | (nonblock ? MSG_DONTWAIT : 0), false);

		if (r < 0 && !got)
			err = errno;
		else if (r > 0)
			got += (size_t)r;
		pthread_mutex_unlock(&c->rx_lock);
		if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE)) {
			conn_down_step(c, false);
			conn_down_finish(c);
		}
		if (err && !got) {
			errno = err;
			return -1;
		}
		return (ssize_t)got;
	}
	pthread_mutex_unlock(&c->rx_lock);
	if (err && !got) {
		errno = err;
		return -1;
	}
	return (ssize_t)got;
}

/*
 * As the kernel's TCP: a reset sets sk_err (tcp_reset), and the first call that reports
 * it takes it (sock_error() exchanges sk_err with 0: SO_ERROR, tcp_recvmsg,
 * sk_stream_error); after that the socket is only shut down both ways, so recv reads
 * EOF and send fails with EPIPE and SIGPIPE.
 */
bool conn_reset_take(struct smc_conn *c)
{
	return !__atomic_exchange_n(&c->reset_reported, true, __ATOMIC_ACQ_REL);
}

static void raise_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
}

ssize_t conn_send(struct smc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	size_t want = conn_iov_total(iov, iovcnt), sent = 0;
	bool nonblock = c->nonblock || (flags & MSG_DONTWAIT), full = false;
	uint64_t deadline = conn_deadline_from(c->sndtimeo_ns);
	/* copy_adapt times the shm pipeline when it chooses the store kind itself */
	bool adapt = c->tp->store_kinds && smc_cfg.copy_store < 0;
	uint64_t t_in = 0, received;
	bool answered; /* we read from the peer since our last send: see the transport's tx_rewind */
	ssize_t tcp_sent = 0; /* after a downgrade, over TCP */
	size_t dropped = 0; /* the first send after the peer's close */
	bool tcp_failed = false;
	bool side_left = false; /* another process of our side went back to TCP (fork) */
	int err = 0;

	if (__builtin_expect(c->carried, 0))
		statsrv_ensure(); /* as in conn_recv */
	if (conn_side_went_tcp(c))
		return conn_tcp_tail(c, iov, iovcnt, 0, flags, true);
	/* another process of our side (fork) shut the stream for writing: one socket, one
	 * shutdown, as TCP has it (EPIPE) */
	if (c->fork_shared && !c->shut_wr &&
	    (__atomic_load_n(&c->tx->wflags, __ATOMIC_ACQUIRE) & SHM_W_DONE_WRITING))
		c->shut_wr = true;
	/* urgent data has no place in the rings: the connection goes back to TCP
	 * (conn_oob_tcp); the peer gone back already, it follows our re-send (conn_down_send) */
	if ((flags & MSG_OOB) && !conn_peer_went_tcp(c)) {
		if (!conn_oob_tcp(c))
			return errno = EOPNOTSUPP, -1;
		return conn_tcp_tail(c, iov, iovcnt, 0, flags, true);
	}
	pthread_mutex_lock(&c->tx_lock);
	received = __atomic_load_n(&c->bytes_received, __ATOMIC_RELAXED);
	answered = received != c->tx_rx_mark;
	c->tx_rx_mark = received;
	if (adapt)
		t_in = copy_adapt_ticks();
	conn_note_cpu(c);
	for (;;) {
		int64_t room;

		if (c->aborted) {
			/* reported once, then EPIPE and SIGPIPE (conn_reset_take); after a
			 * partial send the count is returned and the reset stays pending, as
			 * tcp_sendmsg() leaves sk_err when it copied any */
			if (!sent)
				err = conn_reset_take(c) ? ECONNRESET : EPIPE;
			break;
		}
		if ((conn_state(c) == CONN_FALLBACK || side_left) && sent < want) {
			/* we went back to TCP while this call slept (conn_downgrade), or a
			 * process of our side did (fork) */
			tcp_sent = conn_tcp_tail(c, iov, iovcnt, sent, flags, true);
			if (tcp_sent < 0) {
				err = sent ? 0 : errno;
				tcp_failed = true;
				tcp_sent = 0;
			}
			break;
		}
		if (!c->shut_wr && sent < want && conn_peer_went_tcp(c)) {
			tcp_sent = conn_down_send(c, iov, iovcnt, sent, flags, nonblock, deadline);
			if (tcp_sent < 0) {
				/* the kernel raised its own SIGPIPE */
				err = sent ? 0 : errno;
				tcp_failed = true;
				tcp_sent = 0;
			}
			break;
		}
		if (c->shut_wr || conn_tx_dead(c)) {
			if (!sent && want > 0 && !c->shut_wr && !c->aborted && !c->wrote_past_close) {
				/* As TCP after the peer's close: its FIN does not stop our next
				 * send, the reset it answers with does (tcp_reset in
				 * CLOSE_WAIT: EPIPE and SIGPIPE from then on). A peer that
				 * closed with our bytes unread reset at once: ECONNRESET,
				 * without SIGPIPE. */
				int64_t unread_room = conn_tx_free(c);

				c->wrote_past_close = true;
				if (unread_room >= 0 && unread_room < (int64_t)c->tx_size) {
					err = ECONNRESET;
				} else {
					dropped = want;
					__atomic_store_n(&c->epipe_owed, true, __ATOMIC_RELEASE);
				}
				break;
			}
			if (!sent) {
				err = c->aborted && conn_reset_take(c) ? ECONNRESET : EPIPE;
				__atomic_store_n(&c->epipe_owed, false, __ATOMIC_RELAXED);
			}
			break;
		}
		if (sent == want)
			break;
		room = conn_tx_free(c);
		if (room < 0)
			continue;
		if (room > 0) {
			size_t n = (size_t)room < want - sent ? (size_t)room : want - sent;

			if (c->fork_shared) {
				if (!conn_fork_lock_rings(c, 1)) {
					side_left = true;
					continue;
				}
				conn_tx_resync(c);
				room = c->tp->tx_free(c); /* held: not conn_tx_free */
				if (room <= 0) {
					conn_fork_unlock(c, 1);
					continue;
				}
				n = (size_t)room < want - sent ? (size_t)room : want - sent;
			}
			if (c->tp->tx_rewind && room == c->tx_size && answered)
				c->tp->tx_rewind(c, n);
			tx_copy_publish(c, iov, iovcnt, sent, n);
			if (c->fork_shared)
				conn_fork_unlock(c, 1);
			sent += n;
			continue;
		}
		shared_file_refresh(c, false, flags, &nonblock, &deadline);
		if (nonblock) {
			if (!sent)
				err = EAGAIN;
			conn_tx_full(c);
			full = true;
			break;
		}
		c->tp->tx_blocked(c);
		err = wait_unlocked(c, POLLOUT, deadline, &c->tx_lock);
		/* as tcp_sendmsg: what was copied before a signal is returned */
		if (err == EINTR && !sent && conn_eintr_restarts(c->sndtimeo_ns))
			err = 0;
		if (err) {
			if (sent)
				err = 0;
			break;
		}
	}
	if (adapt && conn_state(c) == CONN_ACTIVE)
		copy_adapt_sent(&c->tx_copy, t_in, copy_adapt_ticks(), sent, full,
				copy_adapt_window(c->tx_size));
	pthread_mutex_unlock(&c->tx_lock);
	if (sent) {
		c->bytes_sent += sent;
		__atomic_store_n(&c->sent_last, true, __ATOMIC_RELAXED);
		stats_bytes(c->tp->mode, sent, 0);
	}
	if (sent || tcp_sent) {
		if (tcp_sent)
			conn_down_finish(c);
		return (ssize_t)sent + tcp_sent;
	}
	if (dropped) {
		conn_wake_local(c); /* readiness: the reset's POLLHUP and POLLERR */
		return (ssize_t)dropped;
	}
	if (err == EPIPE && !tcp_failed)
		raise_sigpipe(flags);
	if (!err && want == 0)
		return 0;
	errno = err;
	return -1;
}

int conn_shutdown(struct smc_conn *c, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return errno = EINVAL, -1;
	if (conn_peer_went_tcp(c)) {
		/* the socket is the stream now; our FIN waits for the re-sent bytes */
		if (how != SHUT_WR)
			c->shut_rd = true;
		if (how != SHUT_RD) {
			__atomic_store_n(&c->shut_wr, true, __ATOMIC_SEQ_CST);
			if (__atomic_load_n(&c->resend_done, __ATOMIC_SEQ_CST))
				REAL(shutdown)(c->fd, SHUT_WR);
		}
		if (how != SHUT_WR)
			REAL(shutdown)(c->fd, SHUT_RD);
		conn_wake_local(c);
		return 0;
	}
	if (how != SHUT_WR)
		c->shut_rd = true;
	if (how != SHUT_RD && !c->shut_wr) {
		c->shut_wr = true;
		__atomic_fetch_or(&c->tx->wflags, SHM_W_DONE_WRITING, __ATOMIC_RELEASE);
		c->tp->shutdown_wr(c);
		bell_ring_peer(c->peer_rx_bell);
	}
	conn_wake_local(c);
	return 0;
}

bool conn_rx_ring_unread(struct smc_conn *c)
{
	return conn_state(c) == CONN_ACTIVE && conn_rx_used_peek(c) > 0;
}

int conn_rx_available(struct smc_conn *c)
{
	int64_t used;

	if (conn_state(c) != CONN_ACTIVE)
		return 0;
	pthread_mutex_lock(&c->rx_lock);
	used = conn_rx_used(c); /* after a fork, from the shared block's cursor */
	pthread_mutex_unlock(&c->rx_lock);
	if (used == 0 && conn_peer_went_tcp(c)) {
		int n = 0;

		return REAL(ioctl)(c->fd, FIONREAD, &n) == 0 ? n : 0;
	}
	return used > 0 ? (int)used : 0;
}

/* TCP's SIOCOUTQ counts what the peer has not acknowledged, and on one host it
 * acknowledges what is in its receive queue, read or not. Our ring is the peer's
 * receive buffer: once written, nothing is outstanding (the kernel's SMC, smc_ioctl,
 * counts its send buffer's unsent bytes likewise). Over RDMA, what is not yet written
 * into the peer's RMB. */
int conn_tx_queued(struct smc_conn *c)
{
	if (conn_state(c) != CONN_ACTIVE)
		return 0;
	return c->tp->tx_unwritten(c);
}
