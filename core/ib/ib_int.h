/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport internals shared by ib_link.c (QP, completions, CDC traffic) and
 * ib_conn.c (per-connection buffers and the reader/writer API). Not for other files.
 */
#ifndef SMC_IB_INT_H
#define SMC_IB_INT_H

#include <pthread.h>

#include "core/ib/ib_link.h"

#define IB_MSG_SLOT 64u /* bytes per receive / control send buffer (a CDC is 44) */

struct ib_send_meta {   /* what the completion of one CDC SEND retires */
	uint32_t token;     /* sender connection (0: link-level message) */
	smc_cursor prod;    /* its producer cursor when posted: WRITEs up to it done */
	uint64_t mark;      /* send-queue accounting mark */
};

struct ib_link {
	struct ib_dev *dev;
	struct ib_link_opts opts;
	pthread_mutex_t lock;
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t psn;
	uint8_t mtu;            /* ours before connect, the common one after */
	bool connected, failed;
	bool confirmed;         /* SENDs may flow: see "Link confirmation" in ib_link.h */
	bool server;            /* the side that sends the confirmation */
	uint32_t peer_qpn;

	/* timers (ib_link_tick), in CLOCK_MONOTONIC ns */
	bool activity;          /* a completion arrived since the last tick */
	bool ping_inflight;     /* a keepalive WRITE awaits its completion */
	uint64_t ping_at;       /* when it was posted */
	uint64_t last_active;   /* tick that last saw activity (0: not started) */
	uint64_t confirm_deadline;

	uint8_t *rbuf;          /* rq_depth receive slots */
	struct ibv_mr *rbuf_mr;
	uint8_t *sbuf;          /* sq_depth control send slots */
	struct ibv_mr *sbuf_mr;
	struct ib_send_meta *smeta;
	uint64_t sends_posted;  /* CDC SENDs so far: slot = sends_posted % sq.depth */

	struct cdc_credits cred;
	struct ib_sq_acct sq;
	struct ib_token_table tokens;
	struct ib_conn *pending; /* FIFO of connections waiting for a credit / SQ room */
	struct ib_conn *pending_tail;
	unsigned nconns;
	unsigned cq_events_unacked;
	struct ib_link_counters cnt;
	void *lgr;              /* its entry in the registry (ib_lgr.c) */
};

struct ib_conn {
	struct ib_link *link;
	uint32_t token, peer_token;
	ib_conn_notify_fn notify;
	void *arg;

	uint8_t *rmb;           /* the ring the peer writes into */
	uint32_t rmb_size;
	struct ibv_mr *rmb_mr;
	uint8_t *tx;            /* mirror of the peer's RMB */
	uint32_t tx_size;
	struct ibv_mr *tx_mr;
	uint32_t peer_rkey;
	uint64_t peer_vaddr;
	bool peer_set;

	/* reader side */
	smc_cursor rx_cons;         /* written by the reader under the lock; atomic loads */
	smc_cursor rx_prod_peer;    /* validated, written under the lock; atomic loads */
	smc_cursor cons_announced;
	struct cdc_update_policy policy;
	bool peer_write_blocked;
	bool cons_due;              /* the policy decided to announce rx_cons */

	/* writer side (under the lock) */
	smc_cursor tx_prod, tx_sent, tx_fin, tx_cons_peer;
	bool tx_blocked, blocked_announced;

	uint32_t my_flags;          /* CDC_DONE_WRITING / CLOSED / ABORT to announce */
	uint32_t flags_announced;
	uint32_t peer_flags;        /* connection flags the peer announced */
	uint16_t seq_out;
	bool aborted;               /* atomic loads */
	bool rx_discard;            /* aborted by us: what the RMB holds is not to be read */
	bool peer_tcp;              /* CDC_WENT_TCP seen (atomic loads: readiness asks often) */
	bool closed;                /* the owner called ib_conn_close: freed by the link */
	bool queued;
	struct ib_conn *next_pending;
	size_t reserved;            /* bytes counted against SMC_MEM_CAP */
};

/* ib_link.c, called with the link lock held */
void ib_link_flush_locked(struct ib_link *l, struct ib_conn *c);
/* level: SMC_LOG_WARN for a fault (peer, link), SMC_LOG_DEBUG for an abort the owner
 * chose (a close with abort, a handshake given up) */
void ib_conn_abort_locked(struct ib_conn *c, const char *why, int level);
void ib_link_reap_locked(struct ib_link *l, struct ib_conn *c);
/* ib_conn.c */
void ib_conn_free(struct ib_conn *c);

#endif
