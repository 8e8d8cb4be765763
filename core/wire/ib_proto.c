/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport, pure parts: GID choice, exchanged parameters, token table, send
 * queue accounting, ring pieces. See ib_proto.h.
 */
#include "core/wire/ib_proto.h"

#include <errno.h>
#include <string.h>

#include "core/wire/cdc.h"
#include "core/wire/ring.h"

/* ------------------------------------------------------------------ GID choice */

static bool gid_zero(const uint8_t g[16])
{
	static const uint8_t z[16];

	return memcmp(g, z, 16) == 0;
}

static bool gid_v4_mapped(const uint8_t g[16])
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g, pfx, sizeof(pfx)) == 0;
}

static bool gid_link_local(const uint8_t g[16])
{
	return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

/* Higher is better; -1 = unusable. */
static int gid_rank(const struct ib_gid_cand *c)
{
	int kind_rank;

	if (gid_zero(c->gid))
		return -1;
	switch (c->kind) {
	case IB_GID_ROCE_V2: kind_rank = 3; break;
	case IB_GID_ROCE_V1: kind_rank = 2; break;
	case IB_GID_IB: kind_rank = 1; break;
	default: return -1;
	}
	int addr_rank = gid_v4_mapped(c->gid) ? 2 : gid_link_local(c->gid) ? 0 : 1;

	return kind_rank * 4 + addr_rank;
}

int ib_pick_gid(const struct ib_gid_cand *c, size_t n, int want_index)
{
	int best = -ENOENT, best_rank = -1;

	for (size_t i = 0; i < n; i++) {
		int r = gid_rank(&c[i]);

		if (want_index >= 0) {
			if (c[i].index == want_index)
				return r >= 0 ? (int)i : -ENOENT;
			continue;
		}
		if (r > best_rank) { /* strict: the first of equal rank wins */
			best_rank = r;
			best = (int)i;
		}
	}
	return best;
}

/* ------------------------------------------------------------------ parameters */

void ib_params_to_clc(const struct ib_link_params *l, const struct ib_rmb_params *r,
		      uint8_t type, bool first_contact, struct clc_msg *out)
{
	struct clc_smcr_accept *a = &out->u.r_acc;

	memset(out, 0, sizeof(*out));
	out->variant = CLC_SMCR;
	out->type = type;
	out->flags = first_contact ? CLC_FLAG_FIRST_CONTACT : 0;
	memcpy(a->lcl.peer_id, l->peer_id, CLC_PEER_ID_LEN);
	memcpy(a->lcl.gid, l->gid, CLC_GID_LEN);
	memcpy(a->lcl.mac, l->mac, CLC_MAC_LEN);
	a->qpn = l->qpn;
	a->psn = l->psn;
	a->qp_mtu = l->mtu;
	a->rmb_rkey = r->rkey;
	a->rmbe_idx = 1; /* one RMBE per RMB: the RMB is the connection's ring */
	a->rmbe_alert_token = r->token;
	a->rmbe_size = clc_compress_rmb_size(r->size);
	a->rmb_vaddr = r->vaddr;
}

uint32_t ib_params_from_clc(const struct clc_msg *m, uint32_t max_rmb,
			    struct ib_link_params *l, struct ib_rmb_params *r)
{
	const struct clc_smcr_accept *a = &m->u.r_acc;
	uint32_t size;

	if (m->variant != CLC_SMCR || (m->type != CLC_ACCEPT && m->type != CLC_CONFIRM) ||
	    clc_validate(m) != 0)
		return CLC_DECL_CNFERR;
	/* One RMBE per RMB is all we register peers for: the ring starts at rmb_vaddr. */
	if (a->rmbe_idx != 1 || a->rmbe_alert_token == 0 || gid_zero(a->lcl.gid))
		return CLC_DECL_CNFERR;
	size = clc_uncompress_rmb_size(a->rmbe_size);
	if (size == 0)
		return CLC_DECL_CNFERR;
	if (size > max_rmb)
		return CLC_DECL_MEM;
	if (a->rmb_vaddr > UINT64_MAX - size)
		return CLC_DECL_CNFERR;
	memset(l, 0, sizeof(*l));
	memcpy(l->peer_id, a->lcl.peer_id, CLC_PEER_ID_LEN);
	memcpy(l->gid, a->lcl.gid, CLC_GID_LEN);
	memcpy(l->mac, a->lcl.mac, CLC_MAC_LEN);
	l->qpn = a->qpn;
	l->psn = a->psn;
	l->mtu = a->qp_mtu;
	r->token = a->rmbe_alert_token;
	r->rkey = a->rmb_rkey;
	r->vaddr = a->rmb_vaddr;
	r->size = size;
	return 0;
}

void ib_link_credits_encode(uint8_t credits, uint8_t out[IB_CREDITS_EXT_LEN])
{
	out[0] = 'C';
	out[1] = 'R';
	out[2] = 'D';
	out[3] = credits;
}

int ib_link_credits_decode(const uint8_t in[IB_CREDITS_EXT_LEN], uint8_t *credits)
{
	if (in[0] != 'C' || in[1] != 'R' || in[2] != 'D')
		return -EBADMSG;
	if (in[3] < CDC_CREDITS_MIN_DEPTH)
		return -ERANGE;
	*credits = in[3];
	return 0;
}

uint8_t ib_mtu_common(uint8_t a, uint8_t b)
{
	if (clc_mtu_bytes(a) == 0 || clc_mtu_bytes(b) == 0)
		return 0;
	return a < b ? a : b;
}

/* ------------------------------------------------------------------ token table */

static uint32_t token_slot(uint32_t token)
{
	/* tokens are random, but a peer never chooses ours: any mix will do */
	return (token * 2654435761u) >> 23; /* top 9 bits: 0..511 */
}

void ib_tokens_init(struct ib_token_table *t)
{
	memset(t, 0, sizeof(*t));
}

static int token_probe(const struct ib_token_table *t, uint32_t token)
{
	uint32_t s = token_slot(token);

	for (uint32_t i = 0; i < IB_TOKEN_SLOTS; i++, s = (s + 1) % IB_TOKEN_SLOTS) {
		if (t->key[s] == token)
			return (int)s;
		if (t->key[s] == 0)
			return -1;
	}
	return -1;
}

int ib_tokens_add(struct ib_token_table *t, uint32_t token, void *val)
{
	uint32_t s;

	if (token == 0)
		return -EINVAL;
	if (token_probe(t, token) >= 0)
		return -EEXIST;
	if (t->n >= IB_LINK_MAX_CONNS)
		return -ENOSPC;
	s = token_slot(token);
	while (t->key[s] != 0)
		s = (s + 1) % IB_TOKEN_SLOTS;
	t->key[s] = token;
	t->val[s] = val;
	t->n++;
	return 0;
}

void *ib_tokens_find(const struct ib_token_table *t, uint32_t token)
{
	int s = token ? token_probe(t, token) : -1;

	return s >= 0 ? t->val[s] : NULL;
}

/* Linear probing with backward-shift deletion: no tombstones, so lookups stay short
 * however many connections come and go on a long-lived link. */
int ib_tokens_del(struct ib_token_table *t, uint32_t token)
{
	int found = token ? token_probe(t, token) : -1;
	uint32_t hole, j;

	if (found < 0)
		return -ENOENT;
	hole = (uint32_t)found;
	for (j = (hole + 1) % IB_TOKEN_SLOTS; t->key[j] != 0; j = (j + 1) % IB_TOKEN_SLOTS) {
		uint32_t home = token_slot(t->key[j]);
		/* the entry at j may fill the hole when its home is not in (hole, j] */
		uint32_t d_home = (j - home + IB_TOKEN_SLOTS) % IB_TOKEN_SLOTS;
		uint32_t d_hole = (j - hole + IB_TOKEN_SLOTS) % IB_TOKEN_SLOTS;

		if (d_home >= d_hole) {
			t->key[hole] = t->key[j];
			t->val[hole] = t->val[j];
			hole = j;
		}
	}
	t->key[hole] = 0;
	t->val[hole] = NULL;
	t->n--;
	return 0;
}

/* ------------------------------------------------------------------ send queue */

int ib_sq_complete(struct ib_sq_acct *s, uint64_t mark)
{
	if (mark <= s->done || mark > s->posted)
		return -EPROTO;
	s->done = mark;
	return 0;
}

/* ------------------------------------------------------------------ ring regions */

int ib_ring_pieces(uint64_t from, uint64_t to, uint32_t size, struct ib_piece out[2])
{
	int64_t len = cursor_diff(to, from, size);
	uint32_t off = cursor_count(from);

	if (len <= 0)
		return 0;
	if (off + (uint64_t)len <= size) {
		out[0] = (struct ib_piece){ off, (uint32_t)len };
		return 1;
	}
	out[0] = (struct ib_piece){ off, size - off };
	out[1] = (struct ib_piece){ 0, (uint32_t)len - (size - off) };
	return 2;
}
