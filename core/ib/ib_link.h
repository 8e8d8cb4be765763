/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport: link groups and connections over one RC queue pair.
 *
 * A link (struct ib_link) is one RC QP to one peer, with one CQ and its completion
 * channel (an fd a libevent loop can watch), posted receive buffers for CDC messages,
 * and the receive-queue credits of cdc.h. Any number of connections (up to 255) share
 * it; each CDC names the receiver's connection by the token the receiver chose.
 *
 * A connection (struct ib_conn) owns
 *   - its RMB: the ring the peer RDMA-WRITEs into, registered for remote write;
 *   - its send buffer: a mirror of the peer's RMB (same size, same offsets), registered
 *     locally. The writer copies into the mirror at its producer cursor; a publish posts
 *     the new region as RDMA WRITE(s) to the same offsets in the peer RMB (two when it
 *     wraps) and then one CDC SEND with the cursors. RC ordering delivers the WRITEs
 *     before the SEND, so the peer never sees a cursor ahead of its data.
 *
 * Cursors of the writer side: prod (copied into the mirror) >= sent (written and
 * announced) >= fin (its WRITEs completed locally: mirror bytes before it may be
 * reused). Room = ring size - (prod - min(peer's cons, fin)).
 *
 * Threads: one reader and one writer per connection at a time (the caller's locks),
 * and one thread calling ib_link_process (the progress thread). Everything they share
 * is under the link's mutex; the payload copies are not.
 *
 * Nothing a peer sends is trusted: a CDC for an unknown token is dropped and counted,
 * a cursor outside what the peer may announce aborts that connection only (CDC with
 * the abort flag to the peer, IB_EV_ERR locally); the link goes on for the others.
 *
 * Link confirmation (the role of SMC-R's LLC CONFIRM LINK): the client's QP reaches RTS
 * before it sends the CLC Confirm, the server's only when that Confirm arrives. A SEND
 * from the client before then would meet a QP that is not ready (silently dropped, then
 * retried by RC: a stall of tens of ms per try, or a failed link). So the server sends a
 * credit-only CDC right after RTS, and the client posts nothing (its publishes wait in
 * the pending queue) until a first message from the server arrived.
 *
 * Liveness: a link that completed nothing for keepalive_ms gets a zero-length RDMA
 * WRITE (it needs no receive buffer, so no credit, and no peer software: the peer's
 * RC QP acknowledges it). A dead peer process (its QP destroyed with it), a dead host or
 * a lost path turns that, or any SEND/WRITE in flight, into a retry-exceeded completion
 * within timeout * (retry_cnt + 1) (about 1 s): the link fails and every connection
 * on it is aborted (IB_EV_ERR). ib_link_tick drives this; see ib_lgr.h for who calls it.
 */
#ifndef SMC_IB_LINK_H
#define SMC_IB_LINK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/ib/ib_dev.h"
#include "core/wire/cdc.h"
#include "core/wire/ib_proto.h"
#include "core/wire/ring.h"

struct ib_link;
struct ib_conn;

struct ib_link_opts {
	uint8_t rq_depth;  /* receive buffers = the credits the peer starts with (>= 3) */
	uint8_t rnr_retry; /* 0..7 (7 = forever). With credits an RNR never happens; 0 makes
			    * one visible as IBV_WC_RNR_RETRY_EXC_ERR instead of hiding it */
	uint8_t hop_limit; /* GRH hop limit for RoCE v2 */
	uint32_t keepalive_ms;       /* probe a link that completed nothing for this long */
	uint32_t confirm_timeout_ms; /* client: fail the link when no confirmation came */
};
#define IB_LINK_OPTS_DEFAULT                                                              \
	{ .rq_depth = 32, .rnr_retry = 7, .hop_limit = 64, .keepalive_ms = 1000,          \
	  .confirm_timeout_ms = 5000 }

struct ib_link_counters {
	uint64_t rdma_writes;     /* RDMA WRITE work requests posted */
	uint64_t rdma_bytes;      /* payload bytes written into peer RMBs */
	uint64_t cdc_sent, cdc_recv;
	uint64_t credit_updates;  /* explicit credit-only messages sent */
	uint64_t credit_waits;    /* publishes deferred: no receive credit at the peer */
	uint64_t sq_waits;        /* publishes deferred: send queue full */
	uint64_t cons_updates;    /* CDCs sent because of the window update policy */
	uint64_t rnr_errors;      /* IBV_WC_RNR_RETRY_EXC_ERR completions */
	uint64_t wc_errors;       /* other failed completions (flushes excluded) */
	uint64_t cdc_bad;         /* malformed CDCs / bad credit grants */
	uint64_t cdc_unknown;     /* CDCs naming no connection of ours */
	uint64_t conn_aborts;     /* connections aborted for a protocol violation */
	uint64_t keepalives;      /* zero-length WRITEs sent to probe an idle link */
	uint64_t confirms_sent;   /* link confirmations sent (server side: 1) */
	uint64_t confirms_recv;   /* link confirmations received (client side: 1) */
	uint64_t sends_held;      /* publishes that waited for the link confirmation */
};

/* ------------------------------------------------------------------ link */

/* Creates the QP (moved to INIT, receives posted), CQ and completion channel. */
int ib_link_create(struct ib_dev *dev, const struct ib_link_opts *o, struct ib_link **out);
/* This side's parameters for the CLC (qpn, psn, gid, mac, mtu, credits). peer_id is
 * left zero: the caller fills in its system id. */
void ib_link_local_params(const struct ib_link *l, struct ib_link_params *out);
/* With the peer's parameters: INIT -> RTR -> RTS. -EINVAL for a bad peer MTU/credits.
 * server: this side received the CLC Confirm; it sends the link confirmation now and
 * is confirmed itself. Client (server == false): confirmed when the server's first
 * message arrives; until then publishes wait (after confirm_timeout_ms the link fails).
 * The client calls this before it sends its Confirm, the server after receiving it. */
int ib_link_connect(struct ib_link *l, const struct ib_link_params *peer, bool server);
/* The peer's QP number (0 before ib_link_connect): what a CLC Accept without first
 * contact names. */
uint32_t ib_link_peer_qpn(struct ib_link *l);
/* Nonblocking fd: readable when ib_link_process has completions to handle. */
int ib_link_event_fd(const struct ib_link *l);
/* Handles every completion: received CDCs (validation, cursors, notifications),
 * retired sends, deferred publishes and credit updates. -EIO once the link failed
 * (all its connections were aborted and notified), else 0. */
int ib_link_process(struct ib_link *l);
bool ib_link_failed(struct ib_link *l);
/* Fails the link from outside (async event: QP fatal, port down): every connection on
 * it is aborted and notified (IB_EV_ERR). */
void ib_link_fail(struct ib_link *l, const char *why);
/* Timers, on the thread that calls ib_link_process, at ib_link_next_deadline or later:
 * the keepalive probe of an idle link, the client's confirmation timeout. now_ns:
 * CLOCK_MONOTONIC in nanoseconds. */
void ib_link_tick(struct ib_link *l, uint64_t now_ns);
/* When ib_link_tick has something to do next (UINT64_MAX: nothing, e.g. failed). */
uint64_t ib_link_next_deadline(struct ib_link *l);
/* What the process's exit would cut short on this link: a WRITE or SEND not yet
 * completed, a connection waiting for a credit, or a connection with data or its close
 * not yet sent to a peer that still reads (TCP's send queue after close()). Adds to
 * *progress a count that grows with every completion, sent or received. */
bool ib_link_output_pending(struct ib_link *l, uint64_t *progress);
/* Connections still registered (including ones waiting for their peer to close). */
unsigned ib_link_conn_count(struct ib_link *l);
void ib_link_get_counters(struct ib_link *l, struct ib_link_counters *out);
/* Tests of bad input only: posts m as given (token, cursors, flags; the credits byte
 * is ours), using a credit like any CDC. -EAGAIN without credit or SQ room. */
int ib_link_send_raw_cdc(struct ib_link *l, const struct cdc_msg *m);
/* Frees the QP (first: nothing lands in our memory after it), CQ, channel, buffers and
 * every connection left. Only when no other thread uses the link or its connections. */
void ib_link_destroy(struct ib_link *l);

/* ------------------------------------------------------------------ connection */

/* Events for the notify callback (called on the progress thread with the link lock
 * held: it must not call back into ib_*; ringing a doorbell is what it is for). */
#define IB_EV_RX 0x1u  /* data or a close flag arrived */
#define IB_EV_TX 0x2u  /* room freed for the writer */
#define IB_EV_ERR 0x4u /* connection aborted (protocol error, peer abort, link failure) */
typedef void (*ib_conn_notify_fn)(struct ib_conn *c, unsigned events, void *arg);

/* rmb_size: a power of two in 16 KiB .. 512 MiB. Registers the RMB, picks a token.
 * The RMB counts against SMC_MEM_CAP (the process-wide pool of shm_reserve, shared with
 * same-host rings) until the connection is freed: -ENOBUFS when that cap is reached
 * (decline with CLC_DECL_MEM), -ENOMEM/-errno when allocation or registration failed.
 * -EIO on a failed link. */
int ib_conn_create(struct ib_link *l, uint32_t rmb_size, ib_conn_notify_fn notify,
		   void *arg, struct ib_conn **out);
/* This connection's RMB for the CLC (token, rkey, vaddr, size). */
void ib_conn_local_rmb(const struct ib_conn *c, struct ib_rmb_params *out);
/* The peer's RMB (validated by ib_params_from_clc): allocates and registers the mirror,
 * which counts against SMC_MEM_CAP as the RMB does (-ENOBUFS at the cap). The peer may
 * write into our RMB before this (its CDCs are accepted; the reader may read): only our
 * writing waits for it. */
int ib_conn_set_peer(struct ib_conn *c, const struct ib_rmb_params *peer);

/* Reader side. */
uint8_t *ib_conn_rx_ring(const struct ib_conn *c);
uint32_t ib_conn_rx_size(const struct ib_conn *c);
smc_cursor ib_conn_rx_cons(const struct ib_conn *c);
/* Readable bytes (validated on arrival), -1 when aborted. */
int64_t ib_conn_rx_used(struct ib_conn *c);
/* The reader copied n bytes out from the consumer cursor: advance it and send it to the
 * writer when the window update policy says so. */
void ib_conn_rx_consumed(struct ib_conn *c, uint32_t n);
/* The peer will write no more (done writing, closed or aborted) */
bool ib_conn_rx_eof(struct ib_conn *c);

/* Writer side. */
uint8_t *ib_conn_tx_ring(const struct ib_conn *c);
uint32_t ib_conn_tx_size(const struct ib_conn *c);
smc_cursor ib_conn_tx_prod(const struct ib_conn *c);
/* Bytes the writer may copy into the mirror at the producer cursor; -1 when aborted,
 * 0 when full or when the peer will not read any more (see ib_conn_tx_dead). */
int64_t ib_conn_tx_free(struct ib_conn *c);
/* Bytes produced whose RDMA WRITE has not completed (posted or not): SIOCOUTQ. */
int64_t ib_conn_tx_unwritten(struct ib_conn *c);
/* The writer copied n bytes at the producer cursor: post them (WRITEs + CDC) now, or as
 * soon as a credit and send-queue room are there. */
void ib_conn_tx_produced(struct ib_conn *c, uint32_t n);
/* The writer found no room and is going to wait: tell the reader (CDC_WRITE_BLOCKED). */
void ib_conn_tx_blocked(struct ib_conn *c);
/* The peer closed or aborted: nothing written can be read. */
bool ib_conn_tx_dead(struct ib_conn *c);

bool ib_conn_aborted(struct ib_conn *c);
/* shutdown(SHUT_WR): CDC_DONE_WRITING after the data already produced. */
void ib_conn_shutdown_wr(struct ib_conn *c);
/*
 * Downgrade (conn_down.c): the owner goes back to plain TCP. IB_TCP_ANNOUNCED:
 * what it produced is posted, then a CDC with CDC_WENT_TCP and its consumer cursor
 * (the peer reads its RMB up to that CDC's producer cursor, then TCP, and re-sends
 * over TCP what it wrote from our cursor on); wait for the answer with
 * ib_conn_tcp_answer. IB_TCP_PEER_FIRST: the peer went first (nothing is announced:
 * its RMB has no reader any more).
 */
enum ib_tcp_answer {
	IB_TCP_WAITING,      /* nothing yet */
	IB_TCP_ANNOUNCED,    /* ib_conn_go_tcp: our flag is on its way */
	IB_TCP_PEER_FIRST,   /* ib_conn_go_tcp: the peer's flag came first */
	IB_TCP_ACKED,        /* the peer saw ours and stays: it re-sends */
	IB_TCP_CROSSED,      /* its flag crossed ours: each side re-sends the other's part */
	IB_TCP_GONE,         /* aborted, or the link failed */
};
enum ib_tcp_answer ib_conn_go_tcp(struct ib_conn *c);
/* final: the wait is over; a peer that did not answer was perhaps leaving too (its flag
 * still on its way), so unless it had read everything we wrote, IB_TCP_GONE. */
enum ib_tcp_answer ib_conn_tcp_answer(struct ib_conn *c, bool final);
/* The peer went back to TCP (CDC_WENT_TCP): its last consumer cursor, from which we
 * re-send; nothing more is written into its RMB. */
bool ib_conn_peer_went_tcp(struct ib_conn *c, smc_cursor *peer_cons);
/* Closes (CDC_CONN_CLOSED, or CDC_CONN_ABORT when abort) and releases the connection.
 * Its RMB stays registered until the peer said it closed too (it may still be writing)
 * and the mirror until our WRITEs completed; ib_link_process frees it then. */
void ib_conn_close(struct ib_conn *c, bool abort);

#endif
