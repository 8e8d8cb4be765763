/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport, pure parts (no verbs calls, no I/O): unit-tested without a device.
 *
 *  - GID choice: which entry of a port's GID table the link uses;
 *  - the parameters two sides exchange to build an RC link and to reach each other's
 *    RMBs, and their mapping onto the SMC-R CLC Accept/Confirm fields (RFC 7609 4.3),
 *    with validation of everything a peer sends;
 *  - the link group's token table: the token in every CDC names the receiver's
 *    connection; a token that names nothing is dropped, never dereferenced;
 *  - send-queue accounting: how many work requests may still be posted.
 */
#ifndef SMC_IB_PROTO_H
#define SMC_IB_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire/clc.h"

/* ------------------------------------------------------------------ GID choice */

enum ib_gid_kind { IB_GID_IB = 0, IB_GID_ROCE_V1 = 1, IB_GID_ROCE_V2 = 2 };

struct ib_gid_cand {
	int index;             /* index in the port's GID table */
	enum ib_gid_kind kind;
	uint8_t gid[16];
};

/*
 * want_index >= 0: the entry with that index (and a non-zero GID), else -ENOENT.
 * want_index < 0 (automatic): RoCE v2 first, because it is routable (UDP/IP) and is
 * what SMC-R v2 uses; among RoCE v2 entries one carrying an IP address (IPv4-mapped,
 * then other global IPv6) before the MAC-derived link-local default, which only reaches
 * peers on the same L2 segment. Then RoCE v1, then IB. Returns the position in c[].
 */
int ib_pick_gid(const struct ib_gid_cand *c, size_t n, int want_index);

/* ------------------------------------------------------------------ parameters */

/* What one side tells the other about its end of the link (the RC QP). */
struct ib_link_params {
	uint8_t peer_id[CLC_PEER_ID_LEN]; /* system id: one link group per peer system */
	uint8_t gid[CLC_GID_LEN];
	uint8_t mac[CLC_MAC_LEN];
	uint32_t qpn;     /* 24 bits, != 0 */
	uint32_t psn;     /* 24 bits: first packet sequence number this side sends */
	uint8_t mtu;      /* enum clc_mtu (same numbering as enum ibv_mtu) */
	uint8_t credits;  /* receive buffers posted for the peer: its initial SEND credits.
			   * Not a CLC field (see ib_link_credits_*). */
};

/* What one side tells the other about one connection's RMB. */
struct ib_rmb_params {
	uint32_t token;   /* names this connection in the CDCs the peer sends; != 0 */
	uint32_t rkey;
	uint64_t vaddr;   /* RMB start in the owner's address space */
	uint32_t size;    /* bytes: a power of two, 16 KiB .. 512 MiB (compressible) */
};

/* Builds a CLC Accept (type CLC_ACCEPT) or Confirm (CLC_CONFIRM) carrying l and r.
 * first_contact: the message creates the link group (its QP parameters are new). */
void ib_params_to_clc(const struct ib_link_params *l, const struct ib_rmb_params *r,
		      uint8_t type, bool first_contact, struct clc_msg *out);

/*
 * Extracts and validates the peer's parameters from a decoded Accept/Confirm.
 * Beyond clc_validate: the RMB must not exceed max_rmb (our cap on what we register a
 * mirror for), must not wrap the address space, the token must be non-zero, the GID
 * non-zero. Returns 0, or a CLC decline reason (positive) to decline with:
 * CLC_DECL_CNFERR for bad values, CLC_DECL_MEM when the RMB is above max_rmb.
 * l->credits is left 0 (not carried by the CLC).
 */
uint32_t ib_params_from_clc(const struct clc_msg *m, uint32_t max_rmb,
			    struct ib_link_params *l, struct ib_rmb_params *r);

/* Initial credits travel next to the CLC message between two smc-preload peers as
 * 4 bytes: "CRD" + count. Encode / decode (-EBADMSG when malformed, -ERANGE when the
 * count is below CDC_CREDITS_MIN_DEPTH). */
#define IB_CREDITS_EXT_LEN 4
void ib_link_credits_encode(uint8_t credits, uint8_t out[IB_CREDITS_EXT_LEN]);
int ib_link_credits_decode(const uint8_t in[IB_CREDITS_EXT_LEN], uint8_t *credits);

/* Path MTU both sides can use: the smaller of the two (enum clc_mtu), 0 if invalid. */
uint8_t ib_mtu_common(uint8_t a, uint8_t b);

/* ------------------------------------------------------------------ token table */

/* Tokens of one link group. 0 is never a connection's token: a CDC with token 0 is a
 * link-level message (an explicit credit update). */
#define IB_LINK_MAX_CONNS 255u /* RFC 7609: at most 255 RMBEs per link group */
#define IB_TOKEN_SLOTS 512u    /* open addressing, load <= 1/2 */

struct ib_token_table {
	uint32_t key[IB_TOKEN_SLOTS]; /* 0 = empty */
	void *val[IB_TOKEN_SLOTS];
	uint32_t n;
};

void ib_tokens_init(struct ib_token_table *t);
/* -EINVAL for token 0, -EEXIST for a token in use, -ENOSPC past IB_LINK_MAX_CONNS. */
int ib_tokens_add(struct ib_token_table *t, uint32_t token, void *val);
void *ib_tokens_find(const struct ib_token_table *t, uint32_t token);
/* -ENOENT when absent. */
int ib_tokens_del(struct ib_token_table *t, uint32_t token);

/* ------------------------------------------------------------------ send queue */

/*
 * Work requests in the send queue: posted - done must never exceed the depth. Only
 * the CDC SEND of a publish is signalled; its completion retires it and every
 * unsignalled WRITE posted before it (completions of one QP arrive in order).
 */
struct ib_sq_acct {
	uint32_t depth;
	uint64_t posted;  /* work requests posted so far */
	uint64_t done;    /* retired (by the signalled completions) */
};

static inline bool ib_sq_has_room(const struct ib_sq_acct *s, uint32_t n)
{
	return s->posted - s->done + n <= s->depth;
}
/* Record n posted WRs; returns the mark the last one's completion retires up to. */
static inline uint64_t ib_sq_post(struct ib_sq_acct *s, uint32_t n)
{
	s->posted += n;
	return s->posted;
}
/* A signalled completion with mark m: -EPROTO when m is not a mark we handed out. */
int ib_sq_complete(struct ib_sq_acct *s, uint64_t mark);

/* ------------------------------------------------------------------ ring regions */

/* The region [from, to) of a ring of `size` bytes as at most two (offset, length)
 * pieces, split where it wraps: the RDMA WRITEs a publish needs. Returns the number
 * of pieces (0 when from == to). from/to must be a consistent cursor pair. */
struct ib_piece {
	uint32_t off, len;
};
int ib_ring_pieces(uint64_t from, uint64_t to, uint32_t size, struct ib_piece out[2]);

#endif
