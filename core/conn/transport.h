/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * How an ACTIVE connection's bytes reach the peer: the operations the data path
 * (conn_data.c) calls on a transport, set once the handshake chose one (c->tp), as the
 * kernel's SMC puts its devices behind struct smcd_ops. Two implement it: shared memory
 * (transport_shm.c: the peer maps the same rings, cursors in a shared control block) and
 * SMC-R (core/ib/conn_ib.c: RDMA WRITEs into the peer's RMB, cursors in CDC messages).
 * conn/ knows the second only through this table.
 *
 * The data path holds rx_lock around the receive side's calls and tx_lock around the
 * send side's; the peeks run from any thread without them.
 */
#ifndef SMC_CONN_TRANSPORT_H
#define SMC_CONN_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/base/stats.h"
#include "core/wire/ring.h"

struct smc_conn;

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

/* How a leave (conn_transport.leave) ended. */
enum conn_leave {
	CONN_LEFT,    /* announced: the peer re-sends what we did not read */
	CONN_SECOND,  /* the peer went first: we re-send; our ring has no reader */
	CONN_CROSSED, /* both at once: each side re-sends what the other did not read */
	CONN_GONE,    /* aborted, or the transport failed */
};

struct conn_transport {
	enum smc_mode mode; /* what the stats count the bytes as */
	/* The writer may store with non-temporal instructions (copy_adapt.h): the reader
	 * is a CPU, not a NIC reading registered memory. */
	bool store_kinds;
	/* What the peer put in the rings before an event on its TCP socket (its FIN, a
	 * byte) is seen before that event: one host, one memory. Over RDMA the link and
	 * the TCP channel are two paths, and either may come first (conn_wait.c,
	 * conn_tcp_event: a FIN then tells nothing of the peer's state). */
	bool tcp_ordered;
	/* The connection's resources are this process's alone: a forked child cannot use
	 * them, an exec ends them, and no other process of our side can hold the
	 * connection (conn_registry.c, conn_down.c, downgrade.c). */
	bool process_bound;
	/* A closed connection may stay for its peer to read what it left (conn_orphan.h). */
	bool orphans;

	/* The handshake's result becomes the connection's: c->rx, c->tx, the rings and
	 * their sizes, c->mode. Under c->lock, still PENDING. */
	void (*activate)(struct smc_conn *c);
	/* Readable bytes from the peer's producer cursor, validated (>= 0), or -1 with the
	 * connection aborted. Under rx_lock. */
	int64_t (*rx_used)(struct smc_conn *c);
	/* Free room from the peer's consumer cursor, validated (>= 0), or -1 with the
	 * connection aborted. Under tx_lock. */
	int64_t (*tx_free)(struct smc_conn *c);
	/* Readiness, from any thread: never aborts; an impossible cursor reads as ready
	 * (1 byte readable, the whole ring free) so that the reader or writer meets it
	 * under its lock. */
	int64_t (*rx_used_peek)(struct smc_conn *c);
	int64_t (*tx_free_peek)(struct smc_conn *c);
	/* Our consumer (producer) cursor moved: tell the peer. last: the end of a copy,
	 * where a sleeping peer must be woken. */
	void (*rx_published)(struct smc_conn *c, bool last);
	void (*tx_published)(struct smc_conn *c, bool last);
	/* Before n bytes go into the empty ring of a connection that read from its peer
	 * since its last send: may restart the ring at its start, keeping a
	 * request/response connection's memory warm (transport_shm.c). NULL: never. */
	void (*tx_rewind)(struct smc_conn *c, size_t n);
	/* The largest piece a copy publishes at once (conn_data.c, chunked publishing). */
	size_t (*publish_chunk)(uint32_t ring_size);
	/* A send found no room and will wait or return EAGAIN. */
	void (*tx_blocked)(struct smc_conn *c);
	/* No more bytes will arrive once the ring is drained; nothing we write can be read
	 * any more. Either may mark the connection aborted. */
	bool (*rx_eof)(struct smc_conn *c);
	bool (*tx_dead)(struct smc_conn *c);
	/* shutdown(SHUT_WR), after the shared flag is set: tell the peer. */
	void (*shutdown_wr)(struct smc_conn *c);
	/* SIOCOUTQ: bytes written but not yet in the peer's memory. */
	int (*tx_unwritten)(struct smc_conn *c);
	/* The connection is freed: the transport's own resources go. */
	void (*free)(struct smc_conn *c);

	/* A protocol abort (conn_abort_protocol): tell the peer at once, as TCP's reset. */
	void (*abort)(struct smc_conn *c);
	/* The last descriptor of our side closed, the close (or abort: SO_LINGER 0) flags
	 * set: the peer learns it. */
	void (*closed)(struct smc_conn *c, bool abort);
	/* A close of one of our descriptors while others stay: our own threads still
	 * waiting on the connection through them re-evaluate. */
	void (*wake_own)(struct smc_conn *c);
	/* Our side is done with the transport (closed, or gone back to TCP): the peer may
	 * free what it holds for us. */
	void (*release)(struct smc_conn *c, bool abort);
	/* In a forked child, for a connection the child inherited. */
	void (*fork_child)(struct smc_conn *c);

	/* Going back to TCP (conn_down.c). Whether the peer announced its leave. */
	bool (*peer_went_tcp)(struct smc_conn *c);
	/* After the peer's leave: its consumer cursor (*cons), and where our re-send of
	 * what it did not read starts (*base). false: aborted. Under tx_lock. */
	bool (*resend_from)(struct smc_conn *c, smc_cursor *cons, smc_cursor *base);
	/* Our leave, under c->lock, rx_lock and tx_lock: our cursors and the end of our
	 * stream announced to the peer. */
	enum conn_leave (*leave)(struct smc_conn *c);
};

extern const struct conn_transport conn_transport_shm;

#endif
