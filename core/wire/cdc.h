/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Connection Data Control (CDC), RFC 7609 section 4.7 / 4.8. Pure code: no I/O, no
 * allocation.
 *
 * - the 44-byte SMC-R CDC message: encode/decode (network byte order);
 * - validation of the cursors a peer announces (shared memory and RDMA alike): a
 *   forged cursor is refused before it can move a single byte;
 * - the consumer-cursor ("window") update policy for RDMA, where each update costs a
 *   SEND (see cdc_should_send_cons_update for the rules and why);
 * - receive-queue credits for SMC-R SENDs, so no SEND ever hits a missing receive
 *   buffer (RNR).
 */
#ifndef SMC_CDC_H
#define SMC_CDC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire/ring.h"

/* ------------------------------------------------------------------ wire message */

#define CDC_MSG_TYPE 0xFE
#define CDC_MSG_LEN 44

/* Host-side flags: producer flags and connection state flags of RFC 7609. */
enum cdc_flag {
	CDC_WRITE_BLOCKED = 1u << 0,   /* writer has data but no room in our RMB */
	CDC_URG_PENDING = 1u << 1,     /* urgent data pending */
	CDC_URG_PRESENT = 1u << 2,     /* urgent data present */
	CDC_CONS_UPDATE_REQ = 1u << 3, /* "please send me your consumer cursor" */
	CDC_FAILOVER_VALID = 1u << 4,  /* failover validation (link-group failover) */
	CDC_DONE_WRITING = 1u << 8,    /* peer_done_writing: shutdown(SHUT_WR) */
	CDC_CONN_CLOSED = 1u << 9,     /* peer_conn_closed: orderly close */
	CDC_CONN_ABORT = 1u << 10,     /* peer_conn_abort: abnormal close */
	/* smc-preload peers only (a reserved byte of the RFC's layout): the sender went
	 * back to plain TCP (conn_downgrade): its stream goes on over TCP after this CDC's
	 * producer cursor, and the other side re-sends over TCP what it wrote from this
	 * CDC's consumer cursor on */
	CDC_WENT_TCP = 1u << 11,
	CDC_TCP_ACK = 1u << 12,        /* the peer's CDC_WENT_TCP was seen, ours is not coming */
};
#define CDC_PROD_FLAGS_MASK 0x001Fu
#define CDC_CONN_FLAGS_MASK 0x1F00u
#define CDC_FLAGS_MASK (CDC_PROD_FLAGS_MASK | CDC_CONN_FLAGS_MASK)

/* A connection's control state as one side announces it. */
struct cdc_state {
	smc_cursor prod;  /* how far I wrote into the peer's RMB */
	smc_cursor cons;  /* how far I read from my RMB */
	uint32_t flags;   /* enum cdc_flag bits */
};

struct cdc_msg {
	uint16_t seqno;   /* per-connection sequence number (wraps) */
	uint32_t token;   /* RMBE alert token: picks the connection in the link group */
	struct cdc_state st;
	/* Receive-queue credits piggybacked in the first reserved byte. Only meaningful on
	 * a link whose peers negotiated credits (both smc-preload); a kernel peer sends 0
	 * there and ignores it. */
	uint8_t credits;
};

/* Writes the 44-byte wire form into out. -EINVAL if a cursor has bits 48..63 set or
 * flags has bits outside CDC_FLAGS_MASK. */
int cdc_encode(const struct cdc_msg *m, uint8_t out[CDC_MSG_LEN]);
/* Parses a received message. -EBADMSG when len < 44, the type is not 0xFE or the
 * length byte is not 44. Reserved bits and bytes are ignored (RFC 7609: reserved on
 * receipt). Cursors are returned as sent, including reserved bits: the cdc_validate_*
 * functions reject them. */
int cdc_decode(const uint8_t *buf, size_t len, struct cdc_msg *out);

/* ------------------------------------------------------------------ validation */

/* A new producer cursor from the peer (it writes into my RMB of rmb_size bytes):
 * valid, not behind last_prod, and at most rmb_size bytes ahead of my consumer cursor.
 * 0 or -EPROTO. */
int cdc_validate_peer_prod(smc_cursor new_prod, smc_cursor last_prod, smc_cursor my_cons,
			   uint32_t rmb_size);
/* A new consumer cursor from the peer (it reads the peer RMB of peer_rmb_size bytes
 * that I write into): valid, not behind last_cons, not beyond my producer cursor.
 * 0 or -EPROTO. */
int cdc_validate_peer_cons(smc_cursor new_cons, smc_cursor last_cons, smc_cursor my_prod,
			   uint32_t peer_rmb_size);

/* ------------------------------------------------------------------ window updates */

/*
 * When does the reader of an RMB send its consumer cursor (one SEND each) on RDMA?
 * On shared memory the answer is "always": publishing is a store.
 *
 * Thresholds are fractions of the RMB, so the behaviour is the same for every size.
 */
struct cdc_update_policy {
	uint32_t rmb_size;
	uint32_t period;   /* publish at least every `period` consumed bytes (size/4) */
	uint32_t granule;  /* smallest update worth a SEND for a writer short of room (size/8) */
	uint32_t low_room; /* writer "short of room" below this free space in its view (size/4) */
};

void cdc_policy_init(struct cdc_update_policy *p, uint32_t rmb_size);

/*
 * Decide after every consume AND after every CDC received from the writer (its flags or
 * producer cursor changed).
 *   consumed_since_last_update: my cons - the cons I last announced
 *   peer_write_blocked: the writer's last CDC had CDC_WRITE_BLOCKED or CDC_CONS_UPDATE_REQ
 *   bytes_left_unread: peer prod (as received) - my cons
 */
bool cdc_should_send_cons_update(const struct cdc_update_policy *p,
				 uint32_t consumed_since_last_update, bool peer_write_blocked,
				 uint32_t bytes_left_unread);

/* ------------------------------------------------------------------ RQ credits */

/*
 * Receive-queue flow control for SMC-R (seed 002). One credit = one receive buffer the
 * peer has posted; every SEND (CDC or other control message) consumes one. The peer
 * returns credits for the buffers it reposted, piggybacked on its CDC messages.
 *
 * Deadlock freedom: the last credit may only be spent on a message that itself returns
 * credits (announce > 0). So the last message in flight always hands its receiver
 * something to answer with, and a side whose peer is out of credits always has both a
 * credit and a reason (need_update) to send an explicit credit update.
 */
struct cdc_credits {
	uint32_t avail;        /* SENDs I may still post (peer receive buffers known free) */
	uint32_t peer_depth;   /* the peer's receive queue depth: avail never exceeds it */
	uint32_t unannounced;  /* receives I reposted that the peer does not know about yet */
	uint32_t local_depth;  /* my receive queue depth */
	uint32_t update_at;    /* need_update when unannounced reaches this */
};

#define CDC_CREDITS_MIN_DEPTH 3u
#define CDC_CREDITS_MAX_ANNOUNCE 255u /* one byte in the CDC message */

/* Both depths >= CDC_CREDITS_MIN_DEPTH, else -EINVAL. Starts with avail = peer_depth. */
int cdc_credits_init(struct cdc_credits *c, uint32_t peer_depth, uint32_t local_depth);
/* Takes a credit for one SEND and moves up to 255 unannounced credits into *announce
 * (put them in the message). -EAGAIN when no credit may be spent now. */
int cdc_credits_take(struct cdc_credits *c, uint8_t *announce);
/* Undoes cdc_credits_take when the SEND could not be posted. */
void cdc_credits_untake(struct cdc_credits *c, uint8_t announce);
/* True when cdc_credits_take would succeed now. */
bool cdc_credits_can_send(const struct cdc_credits *c);
/* The peer announced n credits. -EPROTO when that exceeds its queue depth. */
int cdc_credits_grant(struct cdc_credits *c, uint32_t n);
/* I reposted n receive buffers. -EPROTO when more than my queue depth are pending. */
int cdc_credits_reposted(struct cdc_credits *c, uint32_t n);
/* True when I should send an explicit credit update (a CDC without new data): the peer
 * is running low because I have not announced many reposted buffers, and I can. */
bool cdc_credits_need_update(const struct cdc_credits *c);

#endif
