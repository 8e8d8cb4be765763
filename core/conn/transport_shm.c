/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The shared-memory transport (transport.h): both processes map the rings and a control
 * block holding each direction's cursors, flags and sleeper counts (shm.h). A cursor is
 * published with a release store and read with acquire; everything the peer can write
 * into the block is validated before it moves a byte (cdc.h, conn_rewind.h). The peer
 * is woken through its doorbell only when one of its threads sleeps (conn_data.c).
 */
#include <errno.h>

#include "core/base/bell.h"
#include "core/base/log.h"
#include "core/conn/conn_int.h"
#include "core/conn/conn_rewind.h"
#include "core/conn/transport.h"
#include "core/wire/cdc.h"

/* dir[0] is client->server */
static void shm_activate(struct smc_conn *c)
{
	int rxd = c->side == CONN_CLIENT ? 1 : 0;
	int txd = 1 - rxd;

	c->rx = &c->map.hdr->dir[rxd];
	c->tx = &c->map.hdr->dir[txd];
	c->rx_ring = c->map.ring[rxd];
	c->tx_ring = c->map.ring[txd];
	c->rx_size = c->map.size[rxd];
	c->tx_size = c->map.size[txd];
	c->mode = SMC_MODE_SHM;
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

/* A writer asleep for room is rung at every chunk we take: a blocking send goes on
 * with any room (conn_wait.c); a wait for POLLOUT looks again and sleeps on until a
 * third of the ring is free (conn_room_writable). */
static void shm_rx_published(struct smc_conn *c, bool last)
{
	__atomic_store_n(&c->rx->cons, c->rx_cons, __ATOMIC_RELEASE);
	if (ring_now(c, &c->rx->w_sleepers, last))
		conn_ring_if_asleep(&c->rx->w_sleepers, &c->rx->w_seq, &c->rung_tx_seq,
				    c->peer_tx_bell);
}

/* Before a new producer cursor is validated: when the writer rewound (shm_tx_rewind) at our
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
	shm_rx_published(c, true);
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
static int64_t shm_rx_used(struct smc_conn *c)
{
	smc_cursor prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);

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
static int64_t shm_tx_free(struct smc_conn *c)
{
	smc_cursor cons, base = conn_tx_cons_base(c, &cons);
	int64_t room;

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

/* Readiness checks from any thread, without the reader's or writer's lock: they never
 * abort, an impossible cursor reads as "ready" so that the reader or writer, which
 * validates under its lock, meets it and aborts the connection. After a fork another
 * process of our side may have read or written since this one did: our own cursors are
 * then the shared block's (conn_rx_resync, conn_tx_resync), not our copies, which would
 * make a sibling's reads look unread (a spurious POLLIN) and its writes unwritten (an
 * rsync daemon's _exit read as a reset by the client's reading child). */
static int64_t shm_rx_used_peek(struct smc_conn *c)
{
	smc_cursor prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);
	smc_cursor cons = c->fork_shared ? __atomic_load_n(&c->rx->cons, __ATOMIC_ACQUIRE)
					 : __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
	int64_t d = cursor_diff(prod, cons, c->rx_size);

	return d < 0 || d > c->rx_size ? 1 : d;
}

static int64_t shm_tx_free_peek(struct smc_conn *c)
{
	smc_cursor cons, prod = c->fork_shared ? __atomic_load_n(&c->tx->prod, __ATOMIC_ACQUIRE)
					       : __atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED);
	int64_t d = cursor_diff(prod, conn_tx_cons_base(c, &cons), c->tx_size);

	return d < 0 || d > c->tx_size ? c->tx_size : c->tx_size - d;
}

/* No more data will ever arrive once the ring is drained. */
static bool shm_rx_eof(struct smc_conn *c)
{
	if (conn_peer_wflags(c) & (SHM_W_ABORT)) {
		c->aborted = true;
		return true;
	}
	return c->tcp_eof || (conn_peer_wflags(c) & (SHM_W_DONE_WRITING | SHM_W_CLOSED));
}

/* Nothing we write can ever be read. */
static bool shm_tx_dead(struct smc_conn *c)
{
	if (peer_rflags(c) & SHM_R_ABORT)
		c->aborted = true;
	return c->tcp_eof || (peer_rflags(c) & (SHM_R_CLOSED | SHM_R_ABORT));
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
static void shm_tx_rewind(struct smc_conn *c, size_t n)
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

static void shm_tx_published(struct smc_conn *c, bool last)
{
	__atomic_store_n(&c->tx->prod, c->tx_prod, __ATOMIC_RELEASE);
	if (ring_now(c, &c->tx->r_sleepers, last))
		conn_ring_if_asleep(&c->tx->r_sleepers, &c->tx->r_seq, &c->rung_rx_seq,
				    c->peer_rx_bell);
}

static size_t shm_publish_chunk(uint32_t ring_size)
{
	(void)ring_size;
	return CONN_PUBLISH_CHUNK;
}

/* the reader copies from memory the writer already filled: nothing to push */
static void shm_tx_blocked(struct smc_conn *c)
{
	(void)c;
}

/* the flag the data path set is what the peer reads */
static void shm_shutdown_wr(struct smc_conn *c)
{
	(void)c;
}

/* written is in the peer's memory (conn_tx_queued) */
static int shm_tx_unwritten(struct smc_conn *c)
{
	(void)c;
	return 0;
}

/* the mapping is the connection's own (conn.c, conn_free) */
static void shm_free(struct smc_conn *c)
{
	(void)c;
}

/* the peer learns it as from TCP's reset: its reads and writes fail, where it would wait
 * for ever on a side that stopped reading and writing */
static void shm_abort(struct smc_conn *c)
{
	struct shm_dir_ctl *tx = __atomic_load_n(&c->tx, __ATOMIC_ACQUIRE);
	struct shm_dir_ctl *rx = __atomic_load_n(&c->rx, __ATOMIC_ACQUIRE);

	if (!tx || !rx)
		return; /* not active yet: nothing maps the rings */
	__atomic_fetch_or(&tx->wflags, SHM_W_ABORT, __ATOMIC_RELEASE);
	__atomic_fetch_or(&rx->rflags, SHM_R_ABORT, __ATOMIC_RELEASE);
	bell_ring_peer(c->peer_rx_bell);
	bell_ring_peer(c->peer_tx_bell);
}

/* as for data: only a peer thread asleep on either direction needs the syscall (every
 * waiter counts as one, see conn_prepare_sleep) */
static void shm_closed(struct smc_conn *c, bool abort)
{
	(void)abort; /* the flags say it */
	conn_ring_if_asleep(&c->tx->r_sleepers, &c->tx->r_seq, &c->rung_rx_seq, c->peer_rx_bell);
	conn_ring_if_asleep(&c->rx->w_sleepers, &c->rx->w_seq, &c->rung_tx_seq, c->peer_tx_bell);
}

static void shm_wake_own(struct smc_conn *c)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->asleep_rx, __ATOMIC_RELAXED))
		bell_ring(c->rx_bell);
	if (__atomic_load_n(&c->asleep_tx, __ATOMIC_RELAXED))
		bell_ring(c->tx_bell);
}

/* the flags in the shared block are all the peer needs */
static void shm_release(struct smc_conn *c, bool abort)
{
	(void)c;
	(void)abort;
}

/* the child maps the rings too: conn_registry.c counts it as a holder of our side */
static void shm_fork_child(struct smc_conn *c)
{
	(void)c;
}

/* a leaver closes and aborts nothing on the rings after its flag: with either, the
 * close or abort is what counts */
static bool shm_peer_went_tcp(struct smc_conn *c)
{
	uint32_t wf = conn_peer_wflags(c);

	return (wf & (SHM_W_TCP | SHM_W_CLOSED | SHM_W_ABORT)) == SHM_W_TCP;
}

/* cons was stored before the SHM_W_TCP that shm_peer_went_tcp loaded with acquire; a
 * rewind of ours it had not jumped leaves nothing to re-send before its lap start */
static bool shm_resend_from(struct smc_conn *c, smc_cursor *cons, smc_cursor *base)
{
	*base = conn_tx_cons_base(c, cons);
	return true;
}

static enum conn_leave shm_leave(struct smc_conn *c)
{
	bool second;

	/* another process of our side (fork) may have read or written since we last did:
	 * the cursors we leave at are the shared block's */
	if (c->fork_shared) {
		conn_fork_lock(c, 0);
		conn_fork_lock(c, 1);
	}
	conn_rx_resync(c);
	conn_tx_resync(c);
	second = conn_peer_went_tcp(c);
	__atomic_store_n(&c->rx->cons, __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&c->tx->prod, __atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED),
			 __ATOMIC_RELEASE);
	__atomic_fetch_or(&c->tx->wflags, SHM_W_TCP, __ATOMIC_SEQ_CST);
	if (c->fork_shared) {
		conn_fork_unlock(c, 1);
		conn_fork_unlock(c, 0);
	}
	/* the peer may sleep on either direction, or on an epoll set of both */
	bell_ring_peer(c->peer_rx_bell);
	bell_ring_peer(c->peer_tx_bell);
	return second ? CONN_SECOND : CONN_LEFT;
}

const struct conn_transport conn_transport_shm = {
	.mode = SMC_MODE_SHM,
	.store_kinds = true,
	.tcp_ordered = true,
	.process_bound = false,
	.orphans = true,
	.activate = shm_activate,
	.rx_used = shm_rx_used,
	.tx_free = shm_tx_free,
	.rx_used_peek = shm_rx_used_peek,
	.tx_free_peek = shm_tx_free_peek,
	.rx_published = shm_rx_published,
	.tx_published = shm_tx_published,
	.tx_rewind = shm_tx_rewind,
	.publish_chunk = shm_publish_chunk,
	.tx_blocked = shm_tx_blocked,
	.rx_eof = shm_rx_eof,
	.tx_dead = shm_tx_dead,
	.shutdown_wr = shm_shutdown_wr,
	.tx_unwritten = shm_tx_unwritten,
	.free = shm_free,
	.abort = shm_abort,
	.closed = shm_closed,
	.wake_own = shm_wake_own,
	.release = shm_release,
	.fork_child = shm_fork_child,
	.peer_went_tcp = shm_peer_went_tcp,
	.resend_from = shm_resend_from,
	.leave = shm_leave,
};
