/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * CLC handshake messages. See clc.h for the variants and the error codes.
 *
 * Header (all messages):  0 eyecatcher(4)  4 type  5 length(be16)  7 version<<4 | flags
 * Trailer: the header's eyecatcher again, in the last 4 bytes.
 *
 * SMC-R v1 (RFC 7609; offsets match the Linux kernel's struct layouts):
 *  Proposal: 8 peer id(8) 16 GID(16) 32 MAC(6) 38 IP area offset(be16)
 *            40 [offset bytes, opaque] then IPv4 subnet(4) prefix len(1) reserved(2)
 *            IPv6 prefix count(1), count x { prefix(16) len(1) }, trailer
 *            => 52 + offset + 17 * count bytes
 *  Accept / Confirm (68): 8 peer id 16 GID 32 MAC 38 QPN(be24) 41 rkey(be32)
 *            45 RMBE index 46 alert token(be32) 50 rmbe size<<4 | MTU 51 reserved
 *            52 RMB virtual address(be64) 60 reserved 61 PSN(be24) 64 trailer
 *  Decline (28): 8 peer id 16 diagnosis(be32) 20 reserved(4) 24 trailer
 *
 * Same host ("SMCU"):
 *  Proposal (72): 8 proto(be16) 10 reserved(2) 12 c2s size(be32) 16 s2c size(be32)
 *            20 client token(be64) 28 family(4|6) 29 reserved 30 client port(be16)
 *            32 server port(be16) 34 reserved(2) 36 client addr(16) 52 server addr(16)
 *            68 trailer
 *  Accept (40): 8 proto(be16) 10 reserved(2) 12 c2s size 16 s2c size
 *            20 server token(be64) 28 proof(be64) 36 trailer
 *  Confirm (28): 8 client token(be64) 16 server token(be64) 24 trailer
 *  Decline (20): 8 diagnosis(be32) 12 reserved(4) 16 trailer
 */
#include "core/wire/clc.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

/* ------------------------------------------------------------------ byte order */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	put16(p + 1, (uint16_t)v);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get24(const uint8_t *p)
{
	return ((uint32_t)p[0] << 16) | get16(p + 1);
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)get16(p) << 16) | get16(p + 2);
}

static uint64_t get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* ------------------------------------------------------------------ sizes */

#define R_PROP_FIXED 52u /* Proposal without the opaque area and IPv6 prefixes */
#define R_V6_PREFIX_LEN 17u
#define R_ACCEPT_LEN 68u
#define R_DECLINE_LEN 28u
#define SH_PROP_LEN 72u
#define SH_ACCEPT_LEN 40u
#define SH_CONFIRM_LEN 28u
#define SH_DECLINE_LEN 20u

#define WIRE_INET 4
#define WIRE_INET6 6

uint8_t clc_compress_rmb_size(uint32_t size)
{
	uint8_t v = 0;

	while (v < 15 && clc_uncompress_rmb_size(v) < size)
		v++;
	return v;
}

uint32_t clc_uncompress_rmb_size(uint8_t v)
{
	return v <= 15 ? 1u << (v + 14) : 0;
}

uint32_t clc_mtu_bytes(uint8_t mtu)
{
	return mtu >= CLC_MTU_256 && mtu <= CLC_MTU_4096 ? 128u << mtu : 0;
}

bool clc_sh_rmb_size_valid(uint32_t size)
{
	return size >= CLC_SH_RMB_MIN && size <= CLC_SH_RMB_MAX && (size & (size - 1)) == 0;
}

/* ------------------------------------------------------------------ validation */

static int validate_r_prop(const struct clc_msg *m)
{
	const struct clc_smcr_proposal *p = &m->u.r_prop;
	uint8_t path = m->flags & CLC_PATH_MASK;

	if (path != CLC_PATH_SMCR && path != CLC_PATH_SMCB)
		return -EPROTO; /* an SMC-D-only (or "neither") proposal: not for us */
	if (p->iparea_offset > CLC_MAX_IPAREA_OFFSET || p->ipv4_prefix_len > 32 ||
	    p->ipv6_count > CLC_MAX_V6_PREFIX)
		return -ERANGE;
	for (unsigned i = 0; i < p->ipv6_count; i++)
		if (p->ipv6[i].len > 128)
			return -ERANGE;
	return 0;
}

static int validate_r_accept(const struct clc_msg *m)
{
	const struct clc_smcr_accept *a = &m->u.r_acc;

	if (m->flags & ~CLC_FLAG_FIRST_CONTACT)
		return -EPROTO;
	if (a->qpn == 0 || a->qpn > 0xFFFFFF || a->psn > 0xFFFFFF || a->rmbe_idx == 0 ||
	    a->rmbe_size > 15 || clc_mtu_bytes(a->qp_mtu) == 0)
		return -ERANGE;
	return 0;
}

static bool sh_addr_ok(sa_family_t family, const uint8_t addr[16])
{
	/* IPv4 lives in the first 4 bytes; the rest must be zero so the encoding of a
	 * message is unique. */
	return family == AF_INET6 || all_zero(addr + 4, 12);
}

static int validate_sh_prop(const struct clc_sh_proposal *p)
{
	if (p->proto != CLC_SAMEHOST_PROTO)
		return -EPROTONOSUPPORT;
	if (!clc_sh_rmb_size_valid(p->c2s_size) || !clc_sh_rmb_size_valid(p->s2c_size) ||
	    p->client_token == 0 || (p->family != AF_INET && p->family != AF_INET6) ||
	    p->client_port == 0 || p->server_port == 0 ||
	    !sh_addr_ok(p->family, p->client_addr) || !sh_addr_ok(p->family, p->server_addr))
		return -ERANGE;
	return 0;
}

static int validate_sh_accept(const struct clc_sh_accept *a)
{
	if (a->proto != CLC_SAMEHOST_PROTO)
		return -EPROTONOSUPPORT;
	if (!clc_sh_rmb_size_valid(a->c2s_size) || !clc_sh_rmb_size_valid(a->s2c_size) ||
	    a->server_token == 0)
		return -ERANGE;
	return 0;
}

int clc_validate(const struct clc_msg *m)
{
	if (m->variant == CLC_SMCR) {
		switch (m->type) {
		case CLC_PROPOSAL:
			return validate_r_prop(m);
		case CLC_ACCEPT:
		case CLC_CONFIRM:
			return validate_r_accept(m);
		case CLC_DECLINE:
			return (m->flags & ~CLC_FLAG_OUT_OF_SYNC) ? -EPROTO : 0;
		}
		return -EINVAL;
	}
	if (m->variant == CLC_SAMEHOST) {
		if (m->type < CLC_PROPOSAL || m->type > CLC_DECLINE)
			return -EINVAL;
		if (m->flags)
			return -EPROTO;
		switch (m->type) {
		case CLC_PROPOSAL:
			return validate_sh_prop(&m->u.s_prop);
		case CLC_ACCEPT:
			return validate_sh_accept(&m->u.s_acc);
		case CLC_CONFIRM:
			return m->u.s_conf.client_token && m->u.s_conf.server_token ? 0 : -ERANGE;
		default:
			return 0;
		}
	}
	return -EINVAL;
}

/* ------------------------------------------------------------------ encode */

static uint32_t variant_eyecatcher(enum clc_variant v)
{
	return v == CLC_SMCR ? CLC_EYECATCHER_SMCR : CLC_EYECATCHER_SAMEHOST;
}

/* Length for a message that passed clc_validate. */
static size_t wire_len(const struct clc_msg *m)
{
	if (m->variant == CLC_SMCR) {
		switch (m->type) {
		case CLC_PROPOSAL:
			return R_PROP_FIXED + m->u.r_prop.iparea_offset +
			       R_V6_PREFIX_LEN * m->u.r_prop.ipv6_count;
		case CLC_ACCEPT:
		case CLC_CONFIRM:
			return R_ACCEPT_LEN;
		default:
			return R_DECLINE_LEN;
		}
	}
	switch (m->type) {
	case CLC_PROPOSAL:
		return SH_PROP_LEN;
	case CLC_ACCEPT:
		return SH_ACCEPT_LEN;
	case CLC_CONFIRM:
		return SH_CONFIRM_LEN;
	default:
		return SH_DECLINE_LEN;
	}
}

ssize_t clc_encoded_len(const struct clc_msg *m)
{
	int rc = clc_validate(m);

	return rc < 0 ? rc : (ssize_t)wire_len(m);
}

static void put_local(uint8_t *b, const struct clc_smcr_local *l)
{
	memcpy(b + 8, l->peer_id, CLC_PEER_ID_LEN);
	memcpy(b + 16, l->gid, CLC_GID_LEN);
	memcpy(b + 32, l->mac, CLC_MAC_LEN);
}

static void encode_r_prop(uint8_t *b, const struct clc_smcr_proposal *p)
{
	put_local(b, &p->lcl);
	put16(b + 38, p->iparea_offset);
	memcpy(b + 40, p->iparea_gap, p->iparea_offset);
	uint8_t *q = b + 40 + p->iparea_offset;

	memcpy(q, p->ipv4_subnet, 4);
	q[4] = p->ipv4_prefix_len;
	q[7] = p->ipv6_count;
	q += 8;
	for (unsigned i = 0; i < p->ipv6_count; i++, q += R_V6_PREFIX_LEN) {
		memcpy(q, p->ipv6[i].prefix, 16);
		q[16] = p->ipv6[i].len;
	}
}

static void encode_r_accept(uint8_t *b, const struct clc_smcr_accept *a)
{
	put_local(b, &a->lcl);
	put24(b + 38, a->qpn);
	put32(b + 41, a->rmb_rkey);
	b[45] = a->rmbe_idx;
	put32(b + 46, a->rmbe_alert_token);
	b[50] = (uint8_t)(a->rmbe_size << 4 | a->qp_mtu);
	put64(b + 52, a->rmb_vaddr);
	put24(b + 61, a->psn);
}

static void encode_sh_prop(uint8_t *b, const struct clc_sh_proposal *p)
{
	put16(b + 8, p->proto);
	put32(b + 12, p->c2s_size);
	put32(b + 16, p->s2c_size);
	put64(b + 20, p->client_token);
	b[28] = p->family == AF_INET ? WIRE_INET : WIRE_INET6;
	put16(b + 30, p->client_port);
	put16(b + 32, p->server_port);
	memcpy(b + 36, p->client_addr, 16);
	memcpy(b + 52, p->server_addr, 16);
}

static void encode_sh_accept(uint8_t *b, const struct clc_sh_accept *a)
{
	put16(b + 8, a->proto);
	put32(b + 12, a->c2s_size);
	put32(b + 16, a->s2c_size);
	put64(b + 20, a->server_token);
	put64(b + 28, a->proof);
}

ssize_t clc_encode(const struct clc_msg *m, uint8_t *buf, size_t cap)
{
	int rc = clc_validate(m);

	if (rc < 0)
		return rc;
	size_t len = wire_len(m);

	if (cap < len)
		return -ENOSPC;
	uint32_t eye = variant_eyecatcher(m->variant);
	uint8_t version = m->variant == CLC_SMCR ? CLC_SMCR_VERSION : CLC_SAMEHOST_VERSION;

	memset(buf, 0, len); /* every reserved field is zero */
	put32(buf, eye);
	buf[4] = m->type;
	put16(buf + 5, (uint16_t)len);
	buf[7] = (uint8_t)(version << 4 | m->flags);
	put32(buf + len - CLC_TRL_LEN, eye);

	if (m->variant == CLC_SMCR) {
		if (m->type == CLC_PROPOSAL) {
			encode_r_prop(buf, &m->u.r_prop);
		} else if (m->type == CLC_DECLINE) {
			memcpy(buf + 8, m->u.r_decl.peer_id, CLC_PEER_ID_LEN);
			put32(buf + 16, m->u.r_decl.diag);
		} else {
			encode_r_accept(buf, &m->u.r_acc);
		}
		return (ssize_t)len;
	}
	switch (m->type) {
	case CLC_PROPOSAL:
		encode_sh_prop(buf, &m->u.s_prop);
		break;
	case CLC_ACCEPT:
		encode_sh_accept(buf, &m->u.s_acc);
		break;
	case CLC_CONFIRM:
		put64(buf + 8, m->u.s_conf.client_token);
		put64(buf + 16, m->u.s_conf.server_token);
		break;
	default:
		put32(buf + 8, m->u.s_decl.diag);
		break;
	}
	return (ssize_t)len;
}

/* ------------------------------------------------------------------ decode */

int clc_peek_header(const uint8_t *buf, size_t len, enum clc_variant *variant,
		    uint8_t *type, uint16_t *total_len)
{
	if (len < CLC_HDR_LEN)
		return -ENODATA;
	uint32_t eye = get32(buf);

	if (eye == CLC_EYECATCHER_SMCR)
		*variant = CLC_SMCR;
	else if (eye == CLC_EYECATCHER_SAMEHOST)
		*variant = CLC_SAMEHOST;
	else if (eye == CLC_EYECATCHER_SMCD)
		*variant = CLC_SMCD;
	else
		return -EBADMSG;
	if (buf[4] < CLC_PROPOSAL || buf[4] > CLC_DECLINE)
		return -EBADMSG;
	*type = buf[4];
	*total_len = get16(buf + 5);
	if (*total_len < CLC_MIN_LEN || *total_len > CLC_MAX_LEN)
		return -EMSGSIZE;
	return 0;
}

static void get_local(const uint8_t *b, struct clc_smcr_local *l)
{
	memcpy(l->peer_id, b + 8, CLC_PEER_ID_LEN);
	memcpy(l->gid, b + 16, CLC_GID_LEN);
	memcpy(l->mac, b + 32, CLC_MAC_LEN);
}

static int decode_r_prop(const uint8_t *b, size_t len, struct clc_smcr_proposal *p)
{
	if (len < R_PROP_FIXED)
		return -EBADMSG;
	get_local(b, &p->lcl);
	p->iparea_offset = get16(b + 38);
	if (p->iparea_offset > CLC_MAX_IPAREA_OFFSET ||
	    len < R_PROP_FIXED + p->iparea_offset)
		return -EBADMSG;
	memcpy(p->iparea_gap, b + 40, p->iparea_offset);
	const uint8_t *q = b + 40 + p->iparea_offset;

	memcpy(p->ipv4_subnet, q, 4);
	p->ipv4_prefix_len = q[4];
	if (q[5] || q[6])
		return -EPROTO;
	p->ipv6_count = q[7];
	if (p->ipv6_count > CLC_MAX_V6_PREFIX)
		return -ERANGE;
	if (len != R_PROP_FIXED + p->iparea_offset + R_V6_PREFIX_LEN * p->ipv6_count)
		return -EBADMSG;
	q += 8;
	for (unsigned i = 0; i < p->ipv6_count; i++, q += R_V6_PREFIX_LEN) {
		memcpy(p->ipv6[i].prefix, q, 16);
		p->ipv6[i].len = q[16];
	}
	return 0;
}

static int decode_r_accept(const uint8_t *b, size_t len, struct clc_smcr_accept *a)
{
	if (len != R_ACCEPT_LEN)
		return -EBADMSG;
	if (b[51] || b[60])
		return -EPROTO;
	get_local(b, &a->lcl);
	a->qpn = get24(b + 38);
	a->rmb_rkey = get32(b + 41);
	a->rmbe_idx = b[45];
	a->rmbe_alert_token = get32(b + 46);
	a->rmbe_size = b[50] >> 4;
	a->qp_mtu = b[50] & 0x0F;
	a->rmb_vaddr = get64(b + 52);
	a->psn = get24(b + 61);
	return 0;
}

static int decode_r(const uint8_t *b, size_t len, struct clc_msg *out)
{
	switch (out->type) {
	case CLC_PROPOSAL:
		return decode_r_prop(b, len, &out->u.r_prop);
	case CLC_ACCEPT:
	case CLC_CONFIRM:
		return decode_r_accept(b, len, &out->u.r_acc);
	default:
		if (len != R_DECLINE_LEN)
			return -EBADMSG;
		if (!all_zero(b + 20, 4))
			return -EPROTO;
		memcpy(out->u.r_decl.peer_id, b + 8, CLC_PEER_ID_LEN);
		out->u.r_decl.diag = get32(b + 16);
		return 0;
	}
}

static int decode_sh_prop(const uint8_t *b, struct clc_sh_proposal *p)
{
	if (b[10] || b[11] || b[29] || b[34] || b[35])
		return -EPROTO;
	p->proto = get16(b + 8);
	p->c2s_size = get32(b + 12);
	p->s2c_size = get32(b + 16);
	p->client_token = get64(b + 20);
	if (b[28] == WIRE_INET)
		p->family = AF_INET;
	else if (b[28] == WIRE_INET6)
		p->family = AF_INET6;
	else
		return -ERANGE;
	p->client_port = get16(b + 30);
	p->server_port = get16(b + 32);
	memcpy(p->client_addr, b + 36, 16);
	memcpy(p->server_addr, b + 52, 16);
	return 0;
}

static int decode_sh(const uint8_t *b, size_t len, struct clc_msg *out)
{
	static const size_t want[] = { 0, SH_PROP_LEN, SH_ACCEPT_LEN, SH_CONFIRM_LEN,
				       SH_DECLINE_LEN };

	if (len != want[out->type])
		return -EBADMSG;
	switch (out->type) {
	case CLC_PROPOSAL:
		return decode_sh_prop(b, &out->u.s_prop);
	case CLC_ACCEPT:
		if (b[10] || b[11])
			return -EPROTO;
		out->u.s_acc.proto = get16(b + 8);
		out->u.s_acc.c2s_size = get32(b + 12);
		out->u.s_acc.s2c_size = get32(b + 16);
		out->u.s_acc.server_token = get64(b + 20);
		out->u.s_acc.proof = get64(b + 28);
		return 0;
	case CLC_CONFIRM:
		out->u.s_conf.client_token = get64(b + 8);
		out->u.s_conf.server_token = get64(b + 16);
		return 0;
	default:
		if (!all_zero(b + 12, 4))
			return -EPROTO;
		out->u.s_decl.diag = get32(b + 8);
		return 0;
	}
}

int clc_decode(const uint8_t *buf, size_t len, struct clc_msg *out)
{
	enum clc_variant variant;
	uint8_t type;
	uint16_t total;
	int rc = clc_peek_header(buf, len, &variant, &type, &total);

	if (rc < 0)
		return rc;
	if (variant == CLC_SMCD)
		return -EPROTONOSUPPORT;
	if (len < total)
		return -ENODATA;
	if (len > total)
		return -EMSGSIZE;
	if (get32(buf + total - CLC_TRL_LEN) != get32(buf))
		return -EBADMSG;
	uint8_t version = buf[7] >> 4;

	if (version != (variant == CLC_SMCR ? CLC_SMCR_VERSION : CLC_SAMEHOST_VERSION))
		return -EPROTONOSUPPORT;

	memset(out, 0, sizeof(*out));
	out->variant = variant;
	out->type = type;
	out->flags = buf[7] & 0x0F;
	rc = variant == CLC_SMCR ? decode_r(buf, len, out) : decode_sh(buf, len, out);
	if (rc < 0)
		return rc;
	return clc_validate(out);
}

/* ------------------------------------------------------------------ stream framing */

static bool kernel_eyecatcher(uint32_t eye)
{
	return eye == CLC_EYECATCHER_SMCR || eye == CLC_EYECATCHER_SMCD;
}

int clc_frame(const uint8_t *buf, size_t len, struct clc_frame *f)
{
	uint16_t total;
	int rc = clc_peek_header(buf, len, &f->variant, &f->type, &total);

	if (rc < 0)
		return rc;
	if (len != total)
		return len < total ? -ENODATA : -EMSGSIZE;
	f->version = buf[7] >> 4;
	f->flags = buf[7] & 0x0F;
	/* the kernel ends SMC-D v2 messages with either eyecatcher */
	if (f->variant == CLC_SAMEHOST ? get32(buf + len - CLC_TRL_LEN) != CLC_EYECATCHER_SAMEHOST
				       : !kernel_eyecatcher(get32(buf + len - CLC_TRL_LEN)))
		return -EBADMSG;
	return 0;
}

uint32_t clc_frame_decline_diag(const uint8_t *buf, size_t len)
{
	/* v1 and v2 Declines both carry the diagnosis right after the peer id */
	return len >= R_DECLINE_LEN ? get32(buf + 16) : 0;
}

/* ------------------------------------------------------------------ in-band block */

#define BLK_MAGIC CLC_EYECATCHER_SAMEHOST
#define BLK_LEN CLC_MAX_IPAREA_OFFSET

void clc_block_put(struct clc_smcr_proposal *p, const struct clc_block *b)
{
	uint8_t *g = p->iparea_gap;

	p->iparea_offset = BLK_LEN;
	memset(g, 0, BLK_LEN);
	put32(g, BLK_MAGIC);
	g[4] = b->version;
	g[5] = b->flags;
	put64(g + 12, b->host_id);
	put64(g + 20, b->rdv_name);
	put64(g + 28, b->rdv_key);
}

int clc_block_get(const struct clc_smcr_proposal *p, struct clc_block *b)
{
	const uint8_t *g = p->iparea_gap;

	if (p->iparea_offset != BLK_LEN || get32(g) != BLK_MAGIC)
		return -ENOENT;
	memset(b, 0, sizeof(*b));
	b->version = g[4];
	b->flags = g[5];
	b->host_id = get64(g + 12);
	b->rdv_name = get64(g + 20);
	b->rdv_key = get64(g + 28);
	return 0;
}

/* ------------------------------------------------------------------ reasons */

const char *clc_decline_reason_str(uint32_t diag)
{
	static const struct {
		uint32_t code;
		const char *text;
	} exact[] = {
		{ CLC_DECL_MEM, "memory" },
		{ CLC_DECL_TIMEOUT, "timeout" },
		{ CLC_DECL_TIMEOUT_CL, "timeout (confirm link)" },
		{ CLC_DECL_TIMEOUT_AL, "timeout (add link)" },
		{ CLC_DECL_CNFERR, "configuration error" },
		{ CLC_DECL_PEERNOSMC, "peer did not indicate SMC" },
		{ CLC_DECL_IPSEC, "IPsec" },
		{ CLC_DECL_NOSMCDEV, "no SMC device" },
		{ CLC_DECL_NOSMCDDEV, "no SMC-D device" },
		{ CLC_DECL_NOSMCRDEV, "no SMC-R device" },
		{ CLC_DECL_MODEUNSUPP, "SMC modes do not match" },
		{ CLC_DECL_DIFFPREFIX, "IP prefix mismatch" },
		{ CLC_DECL_VERSMISMAT, "version mismatch" },
		{ CLC_DECL_SYNCERR, "synchronisation error" },
		{ CLC_DECL_PEERDECL, "peer declined" },
		{ CLC_DECL_INTERR, "internal error" },
		{ CLC_DECL_SH_ADDR, "address mismatch" },
		{ CLC_DECL_SH_CRED, "peer credentials refused" },
		{ CLC_DECL_SH_SIZE, "ring size mismatch" },
		{ CLC_DECL_SH_TOKEN, "token mismatch" },
		{ CLC_DECL_SH_FDS, "ring descriptors missing" },
		{ CLC_DECL_SH_RDV, "rendezvous unreachable" },
		{ CLC_DECL_SH_FDLIMIT, "descriptors near their limit" },
		{ CLC_DECL_SH_FORK, "the server forked mid-handshake" },
	};
	static const struct {
		uint8_t cls;
		const char *text;
	} classes[] = {
		{ 0x01, "memory" }, { 0x02, "timeout" }, { 0x03, "configuration error" },
		{ 0x04, "synchronisation error" }, { 0x05, "peer declined" },
		{ 0x09, "internal error" },
	};

	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
		if (exact[i].code == diag)
			return exact[i].text;
	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
		if (classes[i].cls == diag >> 24)
			return classes[i].text;
	return "unknown";
}

/* ------------------------------------------------------------------ same-host helpers */

struct norm_addr {
	sa_family_t family;
	uint8_t addr[16];
	uint16_t port;
};

static const uint8_t v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF };

/* sockaddr -> (family, address, port) with IPv4-mapped IPv6 turned into IPv4. */
static int normalize(const struct sockaddr *sa, socklen_t len, struct norm_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa == NULL)
		return -EAFNOSUPPORT;
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		out->family = AF_INET;
		memcpy(out->addr, &in->sin_addr, 4);
		out->port = ntohs(in->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		const uint8_t *a = in6->sin6_addr.s6_addr;

		out->port = ntohs(in6->sin6_port);
		if (memcmp(a, v4mapped_prefix, sizeof(v4mapped_prefix)) == 0) {
			out->family = AF_INET;
			memcpy(out->addr, a + 12, 4);
		} else {
			out->family = AF_INET6;
			memcpy(out->addr, a, 16);
		}
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* A v4-mapped address as the IPv6 form, for a pair of mixed families. */
static void to_v6(struct norm_addr *a)
{
	if (a->family != AF_INET)
		return;
	memmove(a->addr + 12, a->addr, 4);
	memcpy(a->addr, v4mapped_prefix, sizeof(v4mapped_prefix));
	a->family = AF_INET6;
}

int clc_sh_set_addrs(struct clc_sh_proposal *p, const struct sockaddr *client,
		     socklen_t client_len, const struct sockaddr *server, socklen_t server_len)
{
	struct norm_addr c, s;

	if (normalize(client, client_len, &c) < 0 || normalize(server, server_len, &s) < 0)
		return -EAFNOSUPPORT;
	if (c.family != s.family) {
		to_v6(&c);
		to_v6(&s);
	}
	p->family = c.family;
	memcpy(p->client_addr, c.addr, 16);
	memcpy(p->server_addr, s.addr, 16);
	p->client_port = c.port;
	p->server_port = s.port;
	return 0;
}

static bool same(const struct norm_addr *a, sa_family_t family, const uint8_t addr[16],
		 uint16_t port)
{
	struct norm_addr b = { .family = family, .port = port };

	memcpy(b.addr, addr, 16);
	if (b.family == AF_INET6 && memcmp(b.addr, v4mapped_prefix, 12) == 0) {
		b.family = AF_INET;
		memmove(b.addr, b.addr + 12, 4);
		memset(b.addr + 4, 0, 12);
	}
	return a->family == b.family && a->port == b.port && memcmp(a->addr, b.addr, 16) == 0;
}

bool clc_sh_addrs_match(const struct clc_sh_proposal *p, const struct sockaddr *peer,
			socklen_t peer_len, const struct sockaddr *local, socklen_t local_len)
{
	struct norm_addr c, s;

	if (normalize(peer, peer_len, &c) < 0 || normalize(local, local_len, &s) < 0)
		return false;
	return same(&c, p->family, p->client_addr, p->client_port) &&
	       same(&s, p->family, p->server_addr, p->server_port);
}

uint32_t clc_sh_check_accept(const struct clc_sh_proposal *p, const struct clc_sh_accept *a)
{
	if (a->proto != p->proto)
		return CLC_DECL_VERSMISMAT;
	if (a->c2s_size != p->c2s_size || a->s2c_size != p->s2c_size)
		return CLC_DECL_SH_SIZE;
	return 0;
}

uint32_t clc_sh_check_confirm(const struct clc_sh_proposal *p, const struct clc_sh_accept *a,
			      const struct clc_sh_confirm *c)
{
	if (c->client_token != p->client_token || c->server_token != a->server_token)
		return CLC_DECL_SH_TOKEN;
	return 0;
}
