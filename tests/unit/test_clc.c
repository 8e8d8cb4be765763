/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for core/wire/clc.c: round trips of every message of both variants, exact
 * SMC-R layout, strict rejection (truncation at every length, oversize, eyecatchers,
 * lengths, versions, reserved bytes, ranges), a byte-flip mutation sweep, and helpers.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/clc.h"
#include "tests/progs/clc_fixtures.h"

/* ------------------------------------------------------------------ sample messages */

/* the valid messages of tests/progs/clc_fixtures.h, by number */
#define N_SAMPLES 12
static struct clc_msg sample(int i)
{
	switch (i) {
	case 0: return clc_fx_r_proposal(0, 0, true);
	case 1: return clc_fx_r_proposal(2, 0, true);
	case 2: return clc_fx_r_proposal(CLC_MAX_V6_PREFIX, CLC_MAX_IPAREA_OFFSET, true);
	case 3: return clc_fx_r_accept(CLC_ACCEPT);
	case 4: return clc_fx_r_accept(CLC_CONFIRM);
	case 5: return clc_fx_r_decline();
	case 6: return clc_fx_sh_proposal(AF_INET);
	case 7: return clc_fx_sh_proposal(AF_INET6);
	case 8: return clc_fx_sh_accept();
	case 9: return clc_fx_sh_confirm();
	case 10: return clc_fx_sh_decline();
	default: return clc_fx_r_proposal(1, 40, true);
	}
}

static size_t encode_ok(const struct clc_msg *m, uint8_t *buf, size_t cap)
{
	ssize_t n = clc_encode(m, buf, cap);

	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(clc_encoded_len(m), n);
	return (size_t)n;
}

/* Compare decoded with original field by field via a re-encode (the codec is
 * bijective on valid messages) plus a few direct field checks. */
START_TEST(test_round_trip)
{
	struct clc_msg m = sample(_i), d;
	uint8_t a[CLC_MAX_LEN], b[CLC_MAX_LEN];
	size_t n = encode_ok(&m, a, sizeof(a));

	ck_assert_int_eq(clc_decode(a, n, &d), 0);
	ck_assert_int_eq(d.variant, m.variant);
	ck_assert_uint_eq(d.type, m.type);
	ck_assert_uint_eq(d.flags, m.flags);
	ck_assert_uint_eq(encode_ok(&d, b, sizeof(b)), n);
	ck_assert_mem_eq(a, b, n);
	if (m.variant == CLC_SAMEHOST && m.type == CLC_PROPOSAL) {
		ck_assert_uint_eq(d.u.s_prop.client_token, m.u.s_prop.client_token);
		ck_assert_uint_eq(d.u.s_prop.family, m.u.s_prop.family);
		ck_assert_uint_eq(d.u.s_prop.server_port, m.u.s_prop.server_port);
		ck_assert_mem_eq(d.u.s_prop.client_addr, m.u.s_prop.client_addr, 16);
	}
	if (m.variant == CLC_SMCR && m.type == CLC_ACCEPT) {
		ck_assert_uint_eq(d.u.r_acc.qpn, m.u.r_acc.qpn);
		ck_assert_uint_eq(d.u.r_acc.rmb_vaddr, m.u.r_acc.rmb_vaddr);
		ck_assert_uint_eq(d.u.r_acc.psn, m.u.r_acc.psn);
		ck_assert_uint_eq(d.u.r_acc.qp_mtu, m.u.r_acc.qp_mtu);
		ck_assert_uint_eq(d.u.r_acc.rmbe_size, m.u.r_acc.rmbe_size);
	}
	/* the header peek agrees */
	enum clc_variant v;
	uint8_t type;
	uint16_t total;

	ck_assert_int_eq(clc_peek_header(a, CLC_HDR_LEN, &v, &type, &total), 0);
	ck_assert_int_eq(v, m.variant);
	ck_assert_uint_eq(type, m.type);
	ck_assert_uint_eq(total, n);
}
END_TEST

/* The SMC-R layout byte by byte, as RFC 7609 and the Linux kernel have it. */
START_TEST(test_smcr_accept_layout)
{
	struct clc_msg m = clc_fx_r_accept(CLC_ACCEPT);
	uint8_t b[128];
	size_t n = encode_ok(&m, b, sizeof(b));

	ck_assert_uint_eq(n, 68);
	ck_assert_mem_eq(b, ((uint8_t[]){ 0xE2, 0xD4, 0xC3, 0xD9, 2, 0, 68, 0x18 }), 8);
	ck_assert_mem_eq(b + 8, m.u.r_acc.lcl.peer_id, 8);
	ck_assert_mem_eq(b + 16, m.u.r_acc.lcl.gid, 16);
	ck_assert_mem_eq(b + 32, m.u.r_acc.lcl.mac, 6);
	ck_assert_mem_eq(b + 38, ((uint8_t[]){ 0x12, 0x34, 0x56 }), 3);
	ck_assert_mem_eq(b + 41, ((uint8_t[]){ 0xCA, 0xFE, 0xBA, 0xBE }), 4);
	ck_assert_uint_eq(b[45], 1);
	ck_assert_mem_eq(b + 46, ((uint8_t[]){ 0x0B, 0xAD, 0xF0, 0x0D }), 4);
	ck_assert_uint_eq(b[50], (2 << 4) | 3); /* 64 KiB = 2^(2+14), MTU 1024 = 3 */
	ck_assert_uint_eq(b[51], 0);
	ck_assert_mem_eq(b + 52, ((uint8_t[]){ 0, 1, 2, 3, 4, 5, 6, 7 }), 8);
	ck_assert_uint_eq(b[60], 0);
	ck_assert_mem_eq(b + 61, ((uint8_t[]){ 0xAB, 0xCD, 0xEF }), 3);
	ck_assert_mem_eq(b + 64, ((uint8_t[]){ 0xE2, 0xD4, 0xC3, 0xD9 }), 4);
}
END_TEST

START_TEST(test_smcr_proposal_decline_layout)
{
	struct clc_msg m = clc_fx_r_proposal(1, 0, true);
	uint8_t b[256];
	size_t n = encode_ok(&m, b, sizeof(b));

	ck_assert_uint_eq(n, 52 + 17);
	ck_assert_uint_eq(b[4], 1);
	ck_assert_uint_eq(b[7], 0x10);
	ck_assert_mem_eq(b + 38, ((uint8_t[]){ 0, 0, 192, 168, 7, 0, 24, 0, 0, 1 }), 10);
	ck_assert_mem_eq(b + 48, m.u.r_prop.ipv6[0].prefix, 16);
	ck_assert_uint_eq(b[64], 64);

	m = clc_fx_r_proposal(0, 40, true);
	ck_assert_uint_eq(encode_ok(&m, b, sizeof(b)), 92); /* what a kernel sends for IPv4 */
	ck_assert_uint_eq(b[39], 40);

	m = clc_fx_r_decline();
	m.flags = CLC_FLAG_OUT_OF_SYNC;
	n = encode_ok(&m, b, sizeof(b));
	ck_assert_uint_eq(n, 28);
	ck_assert_uint_eq(b[7], 0x18);
	ck_assert_mem_eq(b + 16, ((uint8_t[]){ 0x03, 0x03, 0x00, 0x02, 0, 0, 0, 0 }), 8);
}
END_TEST

START_TEST(test_samehost_distinct)
{
	struct clc_msg m = clc_fx_sh_proposal(AF_INET);
	uint8_t b[128];
	size_t n = encode_ok(&m, b, sizeof(b));

	ck_assert_uint_eq(n, 72);
	ck_assert_mem_eq(b, ((uint8_t[]){ 0xE2, 0xD4, 0xC3, 0xE4 }), 4);
	ck_assert_mem_eq(b + n - 4, ((uint8_t[]){ 0xE2, 0xD4, 0xC3, 0xE4 }), 4);
	ck_assert_uint_eq(b[28], 4);
	ck_assert_mem_eq(b + 30, ((uint8_t[]){ 0x9C, 0x40, 0x18, 0xEB }), 4);
	/* a same-host body under an SMC-R eyecatcher is not a valid SMC-R message */
	memcpy(b, (uint8_t[]){ 0xE2, 0xD4, 0xC3, 0xD9 }, 4);
	memcpy(b + n - 4, (uint8_t[]){ 0xE2, 0xD4, 0xC3, 0xD9 }, 4);
	struct clc_msg d;

	ck_assert_int_lt(clc_decode(b, n, &d), 0);
}
END_TEST

/* ------------------------------------------------------------------ rejection */

START_TEST(test_truncated_every_prefix)
{
	struct clc_msg m = sample(_i), d;
	uint8_t b[CLC_MAX_LEN];
	size_t n = encode_ok(&m, b, sizeof(b));

	for (size_t len = 0; len < n; len++) {
		/* copy into an exactly sized heap block so ASan sees any over-read */
		uint8_t *p = malloc(len ? len : 1);

		memcpy(p, b, len);
		ck_assert_int_eq(clc_decode(p, len, &d), -ENODATA);
		free(p);
	}
}
END_TEST

START_TEST(test_oversized_and_length)
{
	struct clc_msg m = clc_fx_sh_decline(), d;
	uint8_t b[CLC_MAX_LEN + 16];
	size_t n = encode_ok(&m, b, sizeof(b));
	enum clc_variant v;
	uint8_t type;
	uint16_t total;

	/* more bytes than the length field says */
	ck_assert_int_eq(clc_decode(b, n + 1, &d), -EMSGSIZE);
	/* length field above the maximum / below the minimum */
	b[5] = (CLC_MAX_LEN + 1) >> 8;
	b[6] = (CLC_MAX_LEN + 1) & 0xFF;
	ck_assert_int_eq(clc_peek_header(b, n, &v, &type, &total), -EMSGSIZE);
	ck_assert_int_eq(clc_decode(b, sizeof(b), &d), -EMSGSIZE);
	b[5] = 0xFF;
	ck_assert_int_eq(clc_decode(b, sizeof(b), &d), -EMSGSIZE);
	b[5] = 0;
	b[6] = CLC_MIN_LEN - 1;
	ck_assert_int_eq(clc_decode(b, sizeof(b), &d), -EMSGSIZE);
	/* length field consistent with the buffer but wrong for the type */
	n = encode_ok(&m, b, sizeof(b));
	memcpy(b + n, b + n - 4, 4); /* move the trailer 4 bytes on */
	memset(b + n - 4, 0, 4);
	b[6] = (uint8_t)(n + 4);
	ck_assert_int_eq(clc_decode(b, n + 4, &d), -EBADMSG);
	/* SMC-R proposal: length not matching offset and prefix count */
	m = clc_fx_r_proposal(2, 0, true);
	n = encode_ok(&m, b, sizeof(b));
	b[47] = 3; /* claims 3 prefixes, carries 2 */
	ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
	b[47] = 9; /* more than the RFC allows */
	ck_assert_int_eq(clc_decode(b, n, &d), -ERANGE);
	n = encode_ok(&m, b, sizeof(b));
	b[39] = 41; /* IP area offset beyond the SMC-D area */
	ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
	/* encode into too small a buffer */
	ck_assert_int_eq(clc_encode(&m, b, n - 1), -ENOSPC);
}
END_TEST

START_TEST(test_eyecatchers_type_version)
{
	for (int i = 0; i < N_SAMPLES; i++) {
		struct clc_msg m = sample(i), d;
		uint8_t b[CLC_MAX_LEN];
		size_t n = encode_ok(&m, b, sizeof(b));

		b[0] ^= 0x01; /* head */
		ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
		b[0] ^= 0x01;
		b[n - 1] ^= 0x80; /* trailer */
		ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
		b[n - 1] ^= 0x80;
		/* trailer of the other variant */
		uint8_t save = b[n - 1];

		b[n - 1] = save == 0xD9 ? 0xE4 : 0xD9;
		ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
		b[n - 1] = save;
		/* SMC-D: recognised, not supported */
		b[3] = 0xC4;
		ck_assert_int_eq(clc_decode(b, n, &d), -EPROTONOSUPPORT);
		b[3] = save;
		/* unknown types */
		uint8_t t = b[4];

		b[4] = 0;
		ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
		b[4] = 5;
		ck_assert_int_eq(clc_decode(b, n, &d), -EBADMSG);
		b[4] = t;
		/* versions 0 and 2 */
		b[7] = (uint8_t)((b[7] & 0x0F) | 0x00);
		ck_assert_int_eq(clc_decode(b, n, &d), -EPROTONOSUPPORT);
		b[7] = (uint8_t)((b[7] & 0x0F) | 0x20);
		ck_assert_int_eq(clc_decode(b, n, &d), -EPROTONOSUPPORT);
		b[7] = (uint8_t)((b[7] & 0x0F) | 0x10);
		ck_assert_int_eq(clc_decode(b, n, &d), 0);
	}
}
END_TEST

/* Encode m after applying `mutate`, expecting err from encode (validation). */
#define EXPECT_INVALID(base, stmt, err)                                        \
	do {                                                                   \
		struct clc_msg x_ = (base);                                    \
		uint8_t b_[CLC_MAX_LEN];                                       \
		stmt;                                                          \
		ck_assert_int_eq(clc_encode(&x_, b_, sizeof(b_)), (err));      \
	} while (0)

START_TEST(test_out_of_range_encode)
{
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.qp_mtu = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.qp_mtu = 6, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.rmbe_size = 16, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.qpn = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.qpn = 1u << 24, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.psn = 1u << 24, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_ACCEPT), x_.u.r_acc.rmbe_idx = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_r_accept(CLC_CONFIRM), x_.flags = 0x01, -EPROTO);
	EXPECT_INVALID(clc_fx_r_proposal(1, 0, true), x_.u.r_prop.ipv4_prefix_len = 33, -ERANGE);
	EXPECT_INVALID(clc_fx_r_proposal(1, 0, true), x_.u.r_prop.ipv6[0].len = 129, -ERANGE);
	EXPECT_INVALID(clc_fx_r_proposal(1, 0, true), x_.u.r_prop.ipv6_count = 9, -ERANGE);
	EXPECT_INVALID(clc_fx_r_proposal(1, 0, true), x_.u.r_prop.iparea_offset = 41, -ERANGE);
	EXPECT_INVALID(clc_fx_r_proposal(1, 0, true), x_.flags = 0x01, -EPROTO); /* SMC-D only */
	EXPECT_INVALID(clc_fx_r_decline(), x_.flags = 0x04, -EPROTO);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.c2s_size = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.c2s_size = 4095, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.s2c_size = 3u << 16, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.s2c_size = 1u << 30, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.family = AF_UNIX, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.client_port = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.server_port = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.client_token = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.server_addr[4] = 1, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.proto = CLC_SAMEHOST_PROTO + 1,
		       -EPROTONOSUPPORT);
	/* protocol 1 had no rewinds: its reader would take a skipped lap for data */
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.proto = 1, -EPROTONOSUPPORT);
	/* protocol 2 had no downgrades: its reader would take our TCP flag for nothing and
	 * the new program's bytes on TCP for a broken peer */
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.proto = 2, -EPROTONOSUPPORT);
	/* protocol 3 had no RDMA downgrades: it ignores CDC_WENT_TCP */
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.u.s_prop.proto = 3, -EPROTONOSUPPORT);
	EXPECT_INVALID(clc_fx_sh_proposal(AF_INET), x_.flags = 0x08, -EPROTO);
	EXPECT_INVALID(clc_fx_sh_accept(), x_.u.s_acc.server_token = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_accept(), x_.u.s_acc.c2s_size = 1, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_confirm(), x_.u.s_conf.server_token = 0, -ERANGE);
	EXPECT_INVALID(clc_fx_sh_decline(), x_.type = 9, -EINVAL);
	EXPECT_INVALID(clc_fx_sh_decline(), x_.variant = 7, -EINVAL);
	EXPECT_INVALID(clc_fx_r_decline(), x_.type = 0, -EINVAL);
}
END_TEST

/* The same ranges enforced on the wire side (decode), incl. reserved bytes. */
START_TEST(test_out_of_range_decode)
{
	struct clc_msg m, d;
	uint8_t b[CLC_MAX_LEN];
	size_t n;

	m = clc_fx_r_accept(CLC_ACCEPT);
	n = encode_ok(&m, b, sizeof(b));
	b[50] = (uint8_t)((b[50] & 0xF0) | 7); /* MTU enum 7 */
	ck_assert_int_eq(clc_decode(b, n, &d), -ERANGE);
	n = encode_ok(&m, b, sizeof(b));
	b[51] = 1; /* reserved */
	ck_assert_int_eq(clc_decode(b, n, &d), -EPROTO);
	n = encode_ok(&m, b, sizeof(b));
	b[38] = b[39] = b[40] = 0; /* QPN 0 */
	ck_assert_int_eq(clc_decode(b, n, &d), -ERANGE);

	m = clc_fx_sh_proposal(AF_INET);
	n = encode_ok(&m, b, sizeof(b));
	b[28] = 5; /* family */
	ck_assert_int_eq(clc_decode(b, n, &d), -ERANGE);
	n = encode_ok(&m, b, sizeof(b));
	b[30] = b[31] = 0; /* client port 0 */
	ck_assert_int_eq(clc_decode(b, n, &d), -ERANGE);
	n = encode_ok(&m, b, sizeof(b));
	b[12] = 0x80; /* c2s size 2 GiB + 64 KiB */
	ck_assert_int_eq(clc_decode(b, n, &d), -ERANGE);
	n = encode_ok(&m, b, sizeof(b));
	b[35] = 1; /* reserved */
	ck_assert_int_eq(clc_decode(b, n, &d), -EPROTO);
	n = encode_ok(&m, b, sizeof(b));
	b[9] = CLC_SAMEHOST_PROTO + 1; /* library protocol version */
	ck_assert_int_eq(clc_decode(b, n, &d), -EPROTONOSUPPORT);
	b[9] = 1; /* protocol 1: no rewinds */
	ck_assert_int_eq(clc_decode(b, n, &d), -EPROTONOSUPPORT);

	m = clc_fx_sh_decline();
	n = encode_ok(&m, b, sizeof(b));
	b[15] = 1;
	ck_assert_int_eq(clc_decode(b, n, &d), -EPROTO);
}
END_TEST

/* Flip every bit of every byte of each sample: decode either fails with one of the
 * documented codes or yields a message that re-encodes to exactly the mutated bytes.
 * Each input lives in an exactly sized heap block so ASan catches any over-read. */
START_TEST(test_mutation)
{
	struct clc_msg m = sample(_i);
	uint8_t b[CLC_MAX_LEN], re[CLC_MAX_LEN];
	size_t n = encode_ok(&m, b, sizeof(b));
	unsigned accepted = 0, rejected = 0;

	for (size_t pos = 0; pos < n; pos++) {
		for (int bit = 0; bit < 8; bit++) {
			uint8_t *p = malloc(n);
			struct clc_msg d;

			memcpy(p, b, n);
			p[pos] ^= (uint8_t)(1u << bit);
			int rc = clc_decode(p, n, &d);

			if (rc == 0) {
				ssize_t k = clc_encode(&d, re, sizeof(re));

				ck_assert_int_eq(k, (ssize_t)n);
				ck_assert_mem_eq(re, p, n);
				accepted++;
			} else {
				ck_assert(rc == -ENODATA || rc == -EMSGSIZE || rc == -EBADMSG ||
					  rc == -EPROTONOSUPPORT || rc == -EPROTO ||
					  rc == -ERANGE);
				rejected++;
			}
			free(p);
		}
	}
	/* both outcomes occur: payload bytes are free, framing bytes are not */
	ck_assert_uint_gt(accepted, 0);
	ck_assert_uint_gt(rejected, 0);
}
END_TEST

/* Random garbage of random lengths never crashes and never decodes to something that
 * does not re-encode identically. */
START_TEST(test_garbage)
{
	uint32_t seed = 2024;
	uint8_t re[CLC_MAX_LEN];

	for (int i = 0; i < 20000; i++) {
		seed = seed * 1103515245u + 12345u;
		size_t n = (seed >> 8) % 120;
		uint8_t *p = malloc(n ? n : 1);

		for (size_t k = 0; k < n; k++) {
			seed = seed * 1103515245u + 12345u;
			p[k] = (uint8_t)(seed >> 16);
		}
		/* half the time give it a plausible header */
		if ((i & 1) && n >= 8) {
			static const uint8_t eye[2][4] = { { 0xE2, 0xD4, 0xC3, 0xD9 },
							   { 0xE2, 0xD4, 0xC3, 0xE4 } };
			memcpy(p, eye[(i >> 1) & 1], 4);
			p[4] = (uint8_t)(1 + (seed >> 3) % 4);
			p[5] = 0;
			p[6] = (uint8_t)n;
			p[7] = 0x10;
			if (n >= 12)
				memcpy(p + n - 4, p, 4);
		}
		struct clc_msg d;

		if (clc_decode(p, n, &d) == 0) {
			ck_assert_int_eq(clc_encode(&d, re, sizeof(re)), (ssize_t)n);
			ck_assert_mem_eq(re, p, n);
		}
		free(p);
	}
}
END_TEST

START_TEST(test_peek_header)
{
	struct clc_msg m = clc_fx_r_proposal(3, 0, true);
	uint8_t b[CLC_MAX_LEN];
	size_t n = encode_ok(&m, b, sizeof(b));
	enum clc_variant v;
	uint8_t type;
	uint16_t total;

	for (size_t len = 0; len < CLC_HDR_LEN; len++)
		ck_assert_int_eq(clc_peek_header(b, len, &v, &type, &total), -ENODATA);
	ck_assert_int_eq(clc_peek_header(b, CLC_HDR_LEN, &v, &type, &total), 0);
	ck_assert_uint_eq(total, n);
	ck_assert_int_eq(v, CLC_SMCR);
	ck_assert_uint_eq(type, CLC_PROPOSAL);
	/* peek does not judge the version: a reader still learns how much to consume */
	b[7] = 0x20;
	ck_assert_int_eq(clc_peek_header(b, CLC_HDR_LEN, &v, &type, &total), 0);
	/* not SMC at all (e.g. an HTTP request) */
	ck_assert_int_eq(clc_peek_header((const uint8_t *)"GET / HTTP/1.1", 14, &v, &type,
					 &total), -EBADMSG);
}
END_TEST

/* ------------------------------------------------------------------ helpers */

START_TEST(test_compressed_size)
{
	ck_assert_uint_eq(clc_uncompress_rmb_size(0), 16384);
	ck_assert_uint_eq(clc_uncompress_rmb_size(1), 32768);
	ck_assert_uint_eq(clc_uncompress_rmb_size(15), 512u << 20);
	ck_assert_uint_eq(clc_uncompress_rmb_size(16), 0);
	ck_assert_uint_eq(clc_uncompress_rmb_size(255), 0);
	ck_assert_uint_eq(clc_compress_rmb_size(0), 0);
	ck_assert_uint_eq(clc_compress_rmb_size(1), 0);
	ck_assert_uint_eq(clc_compress_rmb_size(16384), 0);
	ck_assert_uint_eq(clc_compress_rmb_size(16385), 1);
	ck_assert_uint_eq(clc_compress_rmb_size(65536), 2);
	ck_assert_uint_eq(clc_compress_rmb_size(512u << 20), 15);
	ck_assert_uint_eq(clc_compress_rmb_size(0xFFFFFFFFu), 15); /* capped */
	/* compress rounds up: the buffer is at least the size asked for (below the cap) */
	for (uint32_t s = 1; s < (1u << 24); s = s * 3 + 1) {
		uint8_t v = clc_compress_rmb_size(s);

		ck_assert_uint_ge(clc_uncompress_rmb_size(v), s);
		if (v > 0)
			ck_assert_uint_lt(clc_uncompress_rmb_size(v - 1), s);
	}
	for (uint8_t v = 0; v <= 15; v++)
		ck_assert_uint_eq(clc_compress_rmb_size(clc_uncompress_rmb_size(v)), v);
}
END_TEST

START_TEST(test_mtu_and_sizes)
{
	ck_assert_uint_eq(clc_mtu_bytes(0), 0);
	ck_assert_uint_eq(clc_mtu_bytes(CLC_MTU_256), 256);
	ck_assert_uint_eq(clc_mtu_bytes(CLC_MTU_4096), 4096);
	ck_assert_uint_eq(clc_mtu_bytes(6), 0);
	ck_assert(clc_sh_rmb_size_valid(4096));
	ck_assert(clc_sh_rmb_size_valid(512u << 20));
	ck_assert(!clc_sh_rmb_size_valid(0));
	ck_assert(!clc_sh_rmb_size_valid(2048));
	ck_assert(!clc_sh_rmb_size_valid(1u << 30));
	ck_assert(!clc_sh_rmb_size_valid(12288));
}
END_TEST

START_TEST(test_reason_str)
{
	ck_assert_str_eq(clc_decline_reason_str(CLC_DECL_MEM), "memory");
	ck_assert_str_eq(clc_decline_reason_str(CLC_DECL_SH_ADDR), "address mismatch");
	ck_assert_str_eq(clc_decline_reason_str(0x02990000), "timeout");
	ck_assert_str_eq(clc_decline_reason_str(0xEE000000), "unknown");
}
END_TEST

static socklen_t make_in(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		ck_assert_int_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
		return sizeof(*s6);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	s4->sin_family = AF_INET;
	s4->sin_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	return sizeof(*s4);
}

START_TEST(test_sh_addrs)
{
	struct sockaddr_storage c, s, pc, ps;
	struct clc_msg m = clc_fx_sh_proposal(AF_INET);
	struct clc_sh_proposal *p = &m.u.s_prop;
	socklen_t cl = make_in(&c, "127.0.0.1", 40001), sl = make_in(&s, "127.0.0.1", 8080);

	ck_assert_int_eq(clc_sh_set_addrs(p, (struct sockaddr *)&c, cl, (struct sockaddr *)&s,
					  sl), 0);
	ck_assert_int_eq(p->family, AF_INET);
	ck_assert_uint_eq(p->client_port, 40001);
	ck_assert_int_eq(clc_validate(&m), 0);
	/* the server sees the same pair, IPv4 or IPv4-mapped on a dual-stack listener */
	ck_assert(clc_sh_addrs_match(p, (struct sockaddr *)&c, cl, (struct sockaddr *)&s, sl));
	socklen_t pcl = make_in(&pc, "::ffff:127.0.0.1", 40001);
	socklen_t psl = make_in(&ps, "::ffff:127.0.0.1", 8080);

	ck_assert(clc_sh_addrs_match(p, (struct sockaddr *)&pc, pcl, (struct sockaddr *)&ps,
				     psl));
	/* a different port, address or the two swapped do not match */
	pcl = make_in(&pc, "127.0.0.1", 40002);
	ck_assert(!clc_sh_addrs_match(p, (struct sockaddr *)&pc, pcl, (struct sockaddr *)&s, sl));
	pcl = make_in(&pc, "127.0.0.2", 40001);
	ck_assert(!clc_sh_addrs_match(p, (struct sockaddr *)&pc, pcl, (struct sockaddr *)&s, sl));
	ck_assert(!clc_sh_addrs_match(p, (struct sockaddr *)&s, sl, (struct sockaddr *)&c, cl));
	ck_assert(!clc_sh_addrs_match(p, NULL, 0, (struct sockaddr *)&s, sl));
	ck_assert(!clc_sh_addrs_match(p, (struct sockaddr *)&c, 4, (struct sockaddr *)&s, sl));

	/* IPv6, and v4-mapped client addresses stored as IPv4 */
	cl = make_in(&c, "::1", 5555);
	sl = make_in(&s, "::1", 6666);
	ck_assert_int_eq(clc_sh_set_addrs(p, (struct sockaddr *)&c, cl, (struct sockaddr *)&s,
					  sl), 0);
	ck_assert_int_eq(p->family, AF_INET6);
	ck_assert(clc_sh_addrs_match(p, (struct sockaddr *)&c, cl, (struct sockaddr *)&s, sl));
	cl = make_in(&c, "::ffff:10.0.0.1", 5555);
	sl = make_in(&s, "::ffff:10.0.0.2", 6666);
	ck_assert_int_eq(clc_sh_set_addrs(p, (struct sockaddr *)&c, cl, (struct sockaddr *)&s,
					  sl), 0);
	ck_assert_int_eq(p->family, AF_INET);
	ck_assert_int_eq(clc_validate(&m), 0);
	pcl = make_in(&pc, "10.0.0.1", 5555);
	psl = make_in(&ps, "10.0.0.2", 6666);
	ck_assert(clc_sh_addrs_match(p, (struct sockaddr *)&pc, pcl, (struct sockaddr *)&ps,
				     psl));
	struct sockaddr un = { .sa_family = AF_UNIX };

	ck_assert_int_eq(clc_sh_set_addrs(p, &un, sizeof(un), (struct sockaddr *)&s, sl),
			 -EAFNOSUPPORT);
}
END_TEST

START_TEST(test_sh_checks)
{
	struct clc_msg p = clc_fx_sh_proposal(AF_INET), a = clc_fx_sh_accept();
	struct clc_msg c = clc_fx_sh_confirm();

	ck_assert_uint_eq(clc_sh_check_accept(&p.u.s_prop, &a.u.s_acc), 0);
	a.u.s_acc.s2c_size >>= 1;
	ck_assert_uint_eq(clc_sh_check_accept(&p.u.s_prop, &a.u.s_acc), CLC_DECL_SH_SIZE);
	a = clc_fx_sh_accept();
	a.u.s_acc.proto = CLC_SAMEHOST_PROTO + 1;
	ck_assert_uint_eq(clc_sh_check_accept(&p.u.s_prop, &a.u.s_acc), CLC_DECL_VERSMISMAT);
	a.u.s_acc.proto = 1;
	ck_assert_uint_eq(clc_sh_check_accept(&p.u.s_prop, &a.u.s_acc), CLC_DECL_VERSMISMAT);
	a.u.s_acc.proto = 2;
	ck_assert_uint_eq(clc_sh_check_accept(&p.u.s_prop, &a.u.s_acc), CLC_DECL_VERSMISMAT);
	a.u.s_acc.proto = 3;
	ck_assert_uint_eq(clc_sh_check_accept(&p.u.s_prop, &a.u.s_acc), CLC_DECL_VERSMISMAT);
	a = clc_fx_sh_accept();
	ck_assert_uint_eq(clc_sh_check_confirm(&p.u.s_prop, &a.u.s_acc, &c.u.s_conf), 0);
	c.u.s_conf.client_token ^= 1;
	ck_assert_uint_eq(clc_sh_check_confirm(&p.u.s_prop, &a.u.s_acc, &c.u.s_conf),
			  CLC_DECL_SH_TOKEN);
	c = clc_fx_sh_confirm();
	c.u.s_conf.server_token ^= 1;
	ck_assert_uint_eq(clc_sh_check_confirm(&p.u.s_prop, &a.u.s_acc, &c.u.s_conf),
			  CLC_DECL_SH_TOKEN);
}
END_TEST

/* ------------------------------------------------------------------ in-band */

START_TEST(test_peek_smcd_and_frame)
{
	struct clc_msg m = clc_fx_r_decline();
	uint8_t b[CLC_MAX_LEN];
	size_t n = encode_ok(&m, b, sizeof(b));
	struct clc_frame f;
	enum clc_variant v;
	uint8_t type;
	uint16_t total;

	ck_assert_int_eq(clc_frame(b, n, &f), 0);
	ck_assert_int_eq(f.variant, CLC_SMCR);
	ck_assert_uint_eq(f.type, CLC_DECLINE);
	ck_assert_uint_eq(f.version, 1);
	ck_assert_uint_eq(clc_frame_decline_diag(b, n), CLC_DECL_NOSMCRDEV);
	ck_assert_int_eq(clc_frame(b, n - 1, &f), -ENODATA); /* length field says n */
	/* a kernel's SMC-D message: framed (so it can be consumed and declined), never
	 * decoded */
	b[0] = 0xE2, b[1] = 0xD4, b[2] = 0xC3, b[3] = 0xC4;
	ck_assert_int_eq(clc_peek_header(b, n, &v, &type, &total), 0);
	ck_assert_int_eq(v, CLC_SMCD);
	ck_assert_int_eq(clc_decode(b, n, &m), -EPROTONOSUPPORT);
	ck_assert_int_eq(clc_frame(b, n, &f), 0); /* the kernel may end it with "SMCR" */
	/* version 2 (a kernel's Decline): framed, its diagnosis readable */
	b[7] = 0x20;
	b[20] = 0x20; /* os_type Linux in a v2 Decline */
	ck_assert_int_eq(clc_frame(b, n, &f), 0);
	ck_assert_uint_eq(f.version, 2);
	ck_assert_uint_eq(clc_frame_decline_diag(b, n), CLC_DECL_NOSMCRDEV);
	/* a wrong trailer */
	b[n - 1] = 0;
	ck_assert_int_eq(clc_frame(b, n, &f), -EBADMSG);
}
END_TEST

START_TEST(test_block)
{
	struct clc_msg m = clc_fx_r_proposal(0, 0, true), d;
	struct clc_block b = { .version = CLC_BLOCK_VERSION, .flags = CLC_BLOCK_RDV_PATH,
			       .host_id = 0x0102030405060708ULL, .rdv_name = 0x1112131415161718ULL,
			       .rdv_key = 0x2122232425262728ULL }, got;
	uint8_t buf[CLC_MAX_LEN];
	size_t n;

	ck_assert_int_eq(clc_block_get(&m.u.r_prop, &got), -ENOENT);
	clc_block_put(&m.u.r_prop, &b);
	n = encode_ok(&m, buf, sizeof(buf));
	/* what the kernel checks of a v1 Proposal: length = 40 + offset + 8 + 17 * count +
	 * 4, offset <= 40, and the v2 extension offset (bytes 10-11 of the area) zero */
	ck_assert_uint_eq(n, 40 + CLC_MAX_IPAREA_OFFSET + 8 + 4);
	ck_assert_uint_eq((buf[38] << 8) | buf[39], CLC_MAX_IPAREA_OFFSET);
	ck_assert_uint_eq(buf[40 + 10] | buf[40 + 11], 0);
	ck_assert_uint_eq(buf[7], 0x10); /* version 1, SMC-R only */
	ck_assert_int_eq(clc_decode(buf, n, &d), 0);
	ck_assert_int_eq(clc_block_get(&d.u.r_prop, &got), 0);
	ck_assert_uint_eq(got.version, b.version);
	ck_assert_uint_eq(got.flags, b.flags);
	ck_assert(got.host_id == b.host_id && got.rdv_name == b.rdv_name &&
		  got.rdv_key == b.rdv_key);
	/* SMC_TRANSPORT=ib: no shared memory offered, no rendezvous */
	b.flags = CLC_BLOCK_NO_SHM;
	b.rdv_name = b.rdv_key = 0;
	clc_block_put(&m.u.r_prop, &b);
	n = encode_ok(&m, buf, sizeof(buf));
	ck_assert_int_eq(clc_decode(buf, n, &d), 0);
	ck_assert_int_eq(clc_block_get(&d.u.r_prop, &got), 0);
	ck_assert_uint_eq(got.flags, CLC_BLOCK_NO_SHM);
	ck_assert(got.host_id == b.host_id && got.rdv_name == 0 && got.rdv_key == 0);
	/* another magic, or another offset: not ours */
	d.u.r_prop.iparea_gap[0] ^= 1;
	ck_assert_int_eq(clc_block_get(&d.u.r_prop, &got), -ENOENT);
	m.u.r_prop.iparea_offset = 36;
	ck_assert_int_eq(clc_block_get(&m.u.r_prop, &got), -ENOENT);
}
END_TEST

static Suite *clc_suite(void)
{
	Suite *s = suite_create("clc");
	TCase *tc = tcase_create("codec");

	tcase_add_loop_test(tc, test_round_trip, 0, N_SAMPLES);
	tcase_add_test(tc, test_smcr_accept_layout);
	tcase_add_test(tc, test_smcr_proposal_decline_layout);
	tcase_add_test(tc, test_samehost_distinct);
	tcase_add_test(tc, test_peek_header);
	suite_add_tcase(s, tc);

	tc = tcase_create("reject");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_truncated_every_prefix, 0, N_SAMPLES);
	tcase_add_test(tc, test_oversized_and_length);
	tcase_add_test(tc, test_eyecatchers_type_version);
	tcase_add_test(tc, test_out_of_range_encode);
	tcase_add_test(tc, test_out_of_range_decode);
	tcase_add_loop_test(tc, test_mutation, 0, N_SAMPLES);
	tcase_add_test(tc, test_garbage);
	suite_add_tcase(s, tc);

	tc = tcase_create("helpers");
	tcase_add_test(tc, test_compressed_size);
	tcase_add_test(tc, test_mtu_and_sizes);
	tcase_add_test(tc, test_reason_str);
	tcase_add_test(tc, test_sh_addrs);
	tcase_add_test(tc, test_sh_checks);
	suite_add_tcase(s, tc);

	tc = tcase_create("inband");
	tcase_add_test(tc, test_peek_smcd_and_frame);
	tcase_add_test(tc, test_block);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(clc_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);

	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
