/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The data path of an ACTIVE connection: its cursors into the shared rings, validated
 * before they move a byte, and send and receive with TCP's semantics on top.
 *
 * Memory ordering: the writer copies payload, then publishes its producer cursor with a
 * release store; the reader loads it with acquire before copying out, then publishes its
 * consumer cursor with release. The sleep/wake handshake is Dekker-style: a waiter stores
 * its armed flag, issues a full fence and re-reads the cursor; the other side stores the
 * cursor, issues a full fence and reads the flag. One of them must see the other.
 */
#include <errno.h>
#include <sys/ioctl.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/sandbox.h"
#include "core/conn/conn_int.h"
#include "core/conn/conn_rewind.h"
#include "core/ib/conn_ib.h"
#include "core/wire/cdc.h"

static void rx_publish(struct smc_conn *c, bool last);

/* Before a new producer cursor is validated: when the writer rewound (tx_rewind) at our
 * cursor, ours jumps to the lap start it moved to, and the new cursor counts from there.
 * 0, or -1 (aborted) for a rewind that cannot be: anywhere but at our cursor with
 * everything before it read, or a producer cursor that does not cover the jump. */
static int rx_take_rewind(struct smc_conn *c, smc_cursor prod)
{
	uint32_t seq = __atomic_load_n(&c->rx->skip_seq, __ATOMIC_ACQUIRE);
	smc_cursor at, next;

	if (seq == __atomic_load_n(&c->rx->skip_done, __ATOMIC_RELAXED))
		return 0;
	at = __atomic_load_n(&c->rx->skip_at, __ATOMIC_RELAXED);
	if (conn_rewind_check(at, c->rx_cons, c->rx_prod_seen, prod, c->rx_size, &next) < 0) {
		log_debug("fd %d: rewind at %#llx, our cursor %#llx, producer seen %#llx, now %#llx",
			  c->fd, (unsigned long long)at, (unsigned long long)c->rx_cons,
			  (unsigned long long)c->rx_prod_seen, (unsigned long long)prod);
		conn_abort_protocol(c, "ring rewind");
		return -1;
	}
	__atomic_store_n(&c->rx_cons, next, __ATOMIC_RELAXED);
	c->rx_prod_seen = next;
	/* our cursor at the lap start first, then the rewind marked taken: a writer that
	 * sees it taken sees the cursor too (conn_tx_cons_base), never our old one, which
	 * would leave the skipped end of the lap counted as unread */
	rx_publish(c, true);
	__atomic_store_n(&c->rx->skip_done, seq, __ATOMIC_RELEASE);
	return 0;
}

/*
 * SMC_MEM_CAP counts memory that is used: a connection is admitted for its control
 * page (handshake.c), and its RMB's pages count once the peer has written into them.
 * The writer fills a ring from its start and a rewind goes back to the start, so what
 * it has touched is always a prefix of the ring, up to the furthest producer cursor
 * seen; a new cursor [from, +n) that runs past the end has touched the whole ring.
 * Counted, not checked: the connection is admitted already and its peer may fill its
 * ring as TCP's peer may fill a receive buffer (the cap decides the next admissions).
 * Several threads may look at once: the prefix only grows, by compare-and-swap.
 */
static void rx_count_touched(struct smc_conn *c, smc_cursor from, uint32_t n)
{
	uint64_t end = (uint64_t)cursor_count(from) + n;
	uint32_t want, cur;

	if (c->pool)
		return; /* the pool's region, counted by nobody (pool.h) */
	end = (end + SHM_PAGE - 1) & ~(uint64_t)(SHM_PAGE - 1);
	want = end >= c->rx_size ? c->rx_size : (uint32_t)end;
	cur = __atomic_load_n(&c->rx_touched, __ATOMIC_RELAXED);
	while (want > cur) {
		if (__atomic_compare_exchange_n(&c->rx_touched, &cur, want, true,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			shm_charge(want - cur);
			__atomic_add_fetch(&c->reserved, (size_t)(want - cur), __ATOMIC_RELAXED);
			return;
		}
	}
}

/* Peer's producer cursor, validated. Returns readable bytes (>= 0) or -1 when aborted. */
int64_t conn_rx_used(struct smc_conn *c)
{
	smc_cursor prod;

	if (c->ib)
		return conn_ib_rx_used(c);
	prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);

	if (prod != c->rx_prod_seen) {
		if (rx_take_rewind(c, prod) < 0)
			return -1;
		if (cdc_validate_peer_prod(prod, c->rx_prod_seen, c->rx_cons, c->rx_size) < 0) {
			conn_abort_protocol(c, "producer cursor");
			return -1;
		}
		rx_count_touched(c, c->rx_prod_seen,
				 (uint32_t)cursor_diff(prod, c->rx_prod_seen, c->rx_size));
		c->rx_prod_seen = prod;
	}
	return ring_used(c->rx_prod_seen, c->rx_cons, c->rx_size);
}

/* The reader's cons, and the cursor our room counts from: while the reader has not
 * jumped our latest rewind, the lap start it moved to (the skipped rest of the lap holds
 * nothing, so it is room as soon as the rewind is published, reader or not). Lockless:
 * everything here is in the shared block. */
smc_cursor conn_tx_cons_base(struct smc_conn *c, smc_cursor *cons)
{
	/* whether our rewind is pending, before the cursor: the reader publishes its
	 * cursor, then marks the rewind taken (rx_take_rewind) */
	bool pending = __atomic_load_n(&c->tx->skip_seq, __ATOMIC_RELAXED) !=
		       __atomic_load_n(&c->tx->skip_done, __ATOMIC_ACQUIRE);
	smc_cursor at = pending ? __atomic_load_n(&c->tx->skip_at, __ATOMIC_RELAXED) : 0;

	*cons = __atomic_load_n(&c->tx->cons, __ATOMIC_ACQUIRE);
	return conn_rewind_room_base(pending, at, *cons, c->tx_size);
}

/* Peer's consumer cursor, validated. Returns free bytes (>= 0) or -1 when aborted. */
int64_t conn_tx_free(struct smc_conn *c)
{
	smc_cursor cons, base;
	int64_t room;

	if (c->ib)
		return conn_ib_tx_free(c);
	base = conn_tx_cons_base(c, &cons);

	/* Checked against itself, not the last one seen (last_cons = cons): a reader that
	 * jumped a rewind and then read a whole lap moved more than a lap since we last
	 * looked. Going backwards would only cost it room; it must stay within what we
	 * wrote. */
	if (cons != c->tx_cons_seen) {
		if (cdc_validate_peer_cons(cons, cons, c->tx_prod, c->tx_size) < 0) {
			conn_abort_protocol(c, "consumer cursor");
			return -1;
		}
		c->tx_cons_seen = cons;
	}
	room = ring_free(c->tx_prod, base, c->tx_size);
	if (room < 0) {
		/* Our rewind is pending at the reader's cursor, yet its lap start lies
		 * beyond what we wrote: no rewind of ours left it so (we name the cursor we
		 * leave and write from that lap start on), so the reader forged skip_done
		 * or our skip fields. Reporting "no room" instead would never end: the
		 * readiness peek takes the impossible cursor for "writable" so that we meet
		 * it, and pollers and blocking sends would spin on it. */
		conn_abort_protocol(c, "ring rewind");
		return -1;
	}
	return room;
}

static inline uint32_t peer_rflags(struct smc_conn *c)
{
	return __atomic_load_n(&c->tx->rflags, __ATOMIC_ACQUIRE);
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

/* After a fork, this side of the connection may be driven by several processes in
 * turn (a parent hands a connection to its child, or takes it back): our cursors are
 * then the ones in the shared control block, not our private copies. */
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

/* Readiness checks from any thread, without the reader's or writer's lock: they never
 * abort, an impossible cursor reads as "ready" so that the reader or writer, which
 * validates under its lock, meets it and aborts the connection. */
int64_t conn_rx_used_peek(struct smc_conn *c)
{
	smc_cursor prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);
	smc_cursor cons = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
	int64_t d = c->ib ? conn_ib_rx_used(c) : cursor_diff(prod, cons, c->rx_size);

	return d < 0 || d > c->rx_size ? 1 : d;
}

int64_t conn_tx_free_peek(struct smc_conn *c)
{
	smc_cursor cons, prod = __atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED);
	int64_t d = c->ib ? c->tx_size - conn_ib_tx_free(c)
			  : cursor_diff(prod, conn_tx_cons_base(c, &cons), c->tx_size);

	return d < 0 || d > c->tx_size ? 1 : c->tx_size - d;
}

/* No more data will ever arrive once the ring is drained. */
bool conn_rx_eof(struct smc_conn *c)
{
	/* over RDMA the TCP channel's end may overtake the last data: the CDCs decide */
	if (c->ib)
		return conn_ib_rx_eof(c);
	if (conn_peer_wflags(c) & (SHM_W_ABORT)) {
		c->aborted = true;
		return true;
	}
	return c->tcp_eof || (conn_peer_wflags(c) & (SHM_W_DONE_WRITING | SHM_W_CLOSED));
}

/* Nothing we write can ever be read. */
bool conn_tx_dead(struct smc_conn *c)
{
	if (c->ib)
		return conn_ib_tx_dead(c);
	if (peer_rflags(c) & SHM_R_ABORT)
		c->aborted = true;
	return c->tcp_eof || (peer_rflags(c) & (SHM_R_CLOSED | SHM_R_ABORT));
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

/*
 * Publishing in chunks. A copy larger than a chunk publishes its cursor after every
 * chunk, so the peer starts on the first chunk while we still copy the rest: without it
 * a writer that fills the whole free space (writes >= the RMB) and a reader that drains
 * the whole ring (reads >= the RMB) take turns instead of copying at the same time.
 * Measured with bench/msgsize, 64 KiB RMB, reader and writer pinned to the two cores:
 * 7.5 GB/s at 16 KiB writes but 5.7 at 64 KiB, 256 KiB and 4 MiB before; 7.0-8.2 at all
 * four sizes with 16 KiB chunks. 16 KiB: half of a core's L1d, so the reader finds each
 * chunk still in the writer's caches; it beat 8 and 32 KiB chunks for 64 KiB and 1 MiB
 * RMBs in A/B runs on the project's 2-core VM. A cursor store per 16 KiB costs the peer
 * one cache-line transfer.
 */
#define CONN_PUBLISH_CHUNK (16u * 1024)

/* Over RDMA: a quarter of the ring, the window policy's period (cdc.h). */
static size_t ib_publish_chunk(uint32_t ring_size)
{
	size_t q = ring_size / 4;

	return q > CONN_PUBLISH_CHUNK ? q : CONN_PUBLISH_CHUNK;
}

/*
 * Doorbells during a chunked copy. A peer that sleeps on another CPU is rung at the first
 * chunk, so it runs in parallel with the rest of our copy. A peer that last ran on our
 * CPU is rung only at the end of the copy: woken earlier, it would preempt us to copy one
 * chunk and sleep again, one context switch pair per chunk (64 KiB RMB, both processes
 * pinned to one CPU, 64 KiB to 4 MiB writes: 2.3-3.2 GB/s with a bell per chunk, 4.2-4.3
 * without chunks, 3.8-5.1 with this rule). The end of a copy always checks, with the full
 * barrier of the sleep protocol; the checks between chunks are hints (a relaxed load of
 * the sleeper count).
 */
static bool ring_now(struct smc_conn *c, const uint32_t *sleepers, bool last)
{
	return last || (__atomic_load_n(sleepers, __ATOMIC_RELAXED) && !conn_peer_on_my_cpu(c));
}

static void rx_publish(struct smc_conn *c, bool last)
{
	if (c->ib) {
		conn_ib_rx_published(c); /* the transport tells the peer (window policy) */
		return;
	}
	__atomic_store_n(&c->rx->cons, c->rx_cons, __ATOMIC_RELEASE);
	if (ring_now(c, &c->rx->w_sleepers, last))
		conn_ring_if_asleep(&c->rx->w_sleepers, &c->rx->w_seq, &c->rung_tx_seq,
				    c->peer_tx_bell);
}

/*
 * Rewinds. The cursors go round the ring lap after lap, so a request/response connection
 * on a 1 MiB ring touches a new 1 MiB of memory every lap even when each message is
 * 1 KiB: redis-benchmark -c 50 -P 16 wrote, and redis-server read, 50 MiB of rings that
 * were never in a cache, where TCP recycles the same warm buffers (ring_memcpy was 17.5%
 * of redis-server's CPU, most of it in the loads; the kernel's copy 6.2% under TCP). So
 * when we have read from the peer since our last send (request/response traffic), the
 * reader has taken every byte (the ring is empty) and our cursor is at least
 * CONN_REWIND_MIN and twice the message into its lap, the message starts the next lap
 * instead: we name the cursor we leave (skip_at, then skip_seq bumped) and publish our
 * producer cursor as usual; the reader's cursor jumps the empty rest of the lap when it
 * next looks (rx_take_rewind). Until then our room counts from the lap start we moved
 * to (conn_tx_cons_base), so a rewind never shrinks the buffer a program may rely on. A
 * ring's warm part stays within CONN_REWIND_MIN plus twice a message; twice, so that a
 * writer streaming messages of half the ring or more, which finds the ring empty only
 * because the reader is faster, keeps going round (a jump costs the reader one more
 * cursor publish). redis-benchmark -c 50 -d 1024 -P 16, pinned, 9 rounds: GET
 * 1.64-1.84 -> 2.15-2.37 M requests/s, SET 1.58-1.81 -> 1.71-2.00 M; 4 KiB and 64 KiB
 * minimums did as well as 16. Not in a one-way stream (no read between our sends): a
 * reader that keeps up empties the ring there too, and a rewind then puts our stores on
 * lines its CPU still holds, dearer than the cold lines further round (~1 KiB messages
 * into a 1 MiB ring read 3/4 at a time: 5.7 -> 4.8 GB/s when every empty ring rewound).
 * Shared memory only (over RDMA the ring follows SMC-R's cursor rules); both peers must
 * speak CLC_SAMEHOST_PROTO 2 or later.
 */
#define CONN_REWIND_MIN (16u * 1024)

/* Before writing n bytes into our empty ring, under tx_lock. */
static void tx_rewind(struct smc_conn *c, size_t n)
{
	uint32_t off = cursor_count(c->tx_prod);
	uint32_t seq = __atomic_load_n(&c->tx->skip_seq, __ATOMIC_RELAXED);

	if (off < CONN_REWIND_MIN || off / 2 < n ||
	    seq != __atomic_load_n(&c->tx->skip_done, __ATOMIC_RELAXED))
		return;
	/* the reader sees both through the release store of prod that follows */
	__atomic_store_n(&c->tx->skip_at, c->tx_prod, __ATOMIC_RELAXED);
	__atomic_store_n(&c->tx->skip_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&c->tx_prod, conn_rewind_lap_after(c->tx_prod, c->tx_size),
			 __ATOMIC_RELAXED);
	stats_count_rewind();
}

static void tx_publish(struct smc_conn *c, bool last)
{
	if (c->ib) {
		conn_ib_tx_published(c); /* RDMA WRITE(s) + CDC */
		return;
	}
	__atomic_store_n(&c->tx->prod, c->tx_prod, __ATOMIC_RELEASE);
	if (ring_now(c, &c->tx->r_sleepers, last))
		conn_ring_if_asleep(&c->tx->r_sleepers, &c->tx->r_seq, &c->rung_rx_seq,
				    c->peer_rx_bell);
}

/* Copies n readable bytes out of the ring into the iovecs (from `skip` bytes on),
 * publishing the consumer cursor chunk by chunk. */
static void rx_copy_publish(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			    size_t skip, size_t n)
{
	/* over RDMA the window policy turns publishes into CDCs (every quarter RMB): a
	 * reader copying a whole RMB publishes as it goes, so the writer refills the
	 * first quarters while it copies the rest instead of both taking turns */
	size_t chunk = c->ib ? ib_publish_chunk(c->rx_size) : CONN_PUBLISH_CHUNK;

	while (n) {
		size_t k = n < chunk ? n : chunk;

		if (iov) /* NULL: MSG_TRUNC, the bytes are dropped (conn_recv) */
			ring_copy_out_iov(c->rx_ring, c->rx_size, c->rx_cons, iov, iovcnt, skip, k);
		__atomic_store_n(&c->rx_cons, cursor_add(c->rx_cons, (uint32_t)k, c->rx_size),
				 __ATOMIC_RELAXED);
		rx_publish(c, k == n);
		skip += k;
		n -= k;
	}
}

/* Copies k bytes from the iovecs into the peer's ring at our producer cursor; over shm
 * with the store kind copy_adapt chose for this stretch of the stream. */
static void tx_copy_in(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t k)
{
	enum copy_store kind = c->ib ? COPY_CACHED
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
	size_t chunk = c->ib ? ib_publish_chunk(c->tx_size) : CONN_PUBLISH_CHUNK;

	while (n) {
		size_t k = n < chunk ? n : chunk;

		tx_copy_in(c, iov, iovcnt, skip, k);
		__atomic_store_n(&c->tx_prod, cursor_add(c->tx_prod, (uint32_t)k, c->tx_size),
				 __ATOMIC_RELAXED);
		tx_publish(c, k == n);
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
	struct wait_cancel wc = { .c = c, .held = &c->rx_lock }; /* see conn_wait_cancelled */
	int r;

	if (deadline && clock_now_ns() >= deadline)
		return EAGAIN;
	pthread_cleanup_push(conn_wait_cancelled, &wc);
	r = REAL(poll)(NULL, 0, 1);
	pthread_cleanup_pop(0);
	if (r < 0 && errno == EINTR && !conn_eintr_restarts(c->rcvtimeo_ns))
		return EINTR;
	return 0;
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
	conn_rx_resync(c);
	for (;;) {
		int64_t used;

		/* over RDMA what arrived before a reset stays readable (ib_conn_rx_used) */
		if (c->aborted && !(c->ib && conn_rx_used(c) > 0)) {
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
					if (err)
						break;
					continue;
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
				used = conn_rx_used(c);
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
		if (nonblock) {
			if (!got)
				err = EAGAIN;
			break;
		}
		err = -conn_wait(c, POLLIN, false, deadline, &c->rx_lock);
		if (err == EINTR && conn_eintr_restarts(c->rcvtimeo_ns))
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
		stats_bytes(c->ib ? SMC_MODE_IB : SMC_MODE_SHM, 0, got);
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
	bool adapt = !c->ib && smc_cfg.copy_store < 0;
	uint64_t t_in = 0, received;
	bool answered; /* we read from the peer since our last send: see tx_rewind */
	ssize_t tcp_sent = 0; /* after a downgrade, over TCP */
	size_t dropped = 0; /* the first send after the peer's close */
	bool tcp_failed = false;
	bool side_left = false; /* another process of our side went back to TCP (fork) */
	int err = 0;

	if (conn_side_went_tcp(c))
		return conn_tcp_tail(c, iov, iovcnt, 0, flags, true);
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
	conn_tx_resync(c);
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
				if (unread_room >= 0 && unread_room < (int64_t)c->tx_size)
					err = ECONNRESET;
				else
					dropped = want;
				break;
			}
			if (!sent)
				err = c->aborted && conn_reset_take(c) ? ECONNRESET : EPIPE;
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
				room = conn_tx_free(c);
				if (room <= 0) {
					conn_fork_unlock(c, 1);
					continue;
				}
				n = (size_t)room < want - sent ? (size_t)room : want - sent;
			}
			if (!c->ib && room == c->tx_size && answered)
				tx_rewind(c, n);
			tx_copy_publish(c, iov, iovcnt, sent, n);
			if (c->fork_shared)
				conn_fork_unlock(c, 1);
			sent += n;
			continue;
		}
		if (nonblock) {
			if (!sent)
				err = EAGAIN;
			conn_tx_full(c);
			full = true;
			break;
		}
		if (c->ib)
			conn_ib_tx_blocked(c);
		err = -conn_wait(c, POLLOUT, false, deadline, &c->tx_lock);
		if (err == EINTR && conn_eintr_restarts(c->sndtimeo_ns))
			err = 0;
		if (err)
			break;
	}
	if (adapt && conn_state(c) == CONN_ACTIVE)
		copy_adapt_sent(&c->tx_copy, t_in, copy_adapt_ticks(), sent, full,
				copy_adapt_window(c->tx_size));
	pthread_mutex_unlock(&c->tx_lock);
	if (sent) {
		c->bytes_sent += sent;
		__atomic_store_n(&c->sent_last, true, __ATOMIC_RELAXED);
		stats_bytes(c->ib ? SMC_MODE_IB : SMC_MODE_SHM, sent, 0);
	}
	if (sent || tcp_sent) {
		if (tcp_sent)
			conn_down_finish(c);
		return (ssize_t)sent + tcp_sent;
	}
	if (dropped)
		return (ssize_t)dropped;
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
		if (c->ib)
			conn_ib_shutdown_wr(c);
		bell_ring_peer(c->peer_rx_bell);
	}
	conn_wake_local(c);
	return 0;
}

int conn_rx_available(struct smc_conn *c)
{
	int64_t used;

	if (conn_state(c) != CONN_ACTIVE)
		return 0;
	pthread_mutex_lock(&c->rx_lock);
	conn_rx_resync(c); /* after a fork our cursor may be behind the one in the shared block */
	used = conn_rx_used(c);
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
	if (conn_state(c) != CONN_ACTIVE || !c->ib)
		return 0;
	return conn_ib_tx_unwritten(c);
}
