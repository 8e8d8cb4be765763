/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for core/wire/ib_proto.c: GID choice, CLC Accept/Confirm parameter mapping and
 * validation of what a peer sends, the link group's token table, send-queue
 * accounting and the split of a ring region into RDMA WRITEs.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/cdc.h"
#include "core/wire/ib_proto.h"

/* ------------------------------------------------------------------ GID choice */

static struct ib_gid_cand cand(int index, enum ib_gid_kind kind, const char *hex16)
{
	struct ib_gid_cand c = { .index = index, .kind = kind };

	for (int i = 0; i < 16; i++) {
		unsigned v;

		sscanf(hex16 + 2 * i, "%2x", &v);
		c.gid[i] = (uint8_t)v;
	}
	return c;
}

#define LL "fe80000000000000020000fffe000000"
#define V4 "00000000000000000000ffff7f000001"
#define V6 "00000000000000000000000000000001"
#define ZERO "00000000000000000000000000000000"

START_TEST(test_gid_auto_prefers_v2_with_address)
{
	/* the table rxe builds on lo, RoCE v1 twins included */
	struct ib_gid_cand t[] = {
		cand(0, IB_GID_ROCE_V1, LL), cand(1, IB_GID_ROCE_V2, LL),
		cand(2, IB_GID_ROCE_V1, V4), cand(3, IB_GID_ROCE_V2, V4),
		cand(4, IB_GID_ROCE_V2, V6),
	};

	ck_assert_int_eq(ib_pick_gid(t, 5, -1), 3);
	/* without the IPv4-mapped one: the global IPv6 one, not the link-local */
	ck_assert_int_eq(ib_pick_gid(t, 3, -1), 1);
	struct ib_gid_cand u[] = { cand(0, IB_GID_ROCE_V2, LL), cand(1, IB_GID_ROCE_V2, V6) };
	ck_assert_int_eq(ib_pick_gid(u, 2, -1), 1);
	/* v1 only: still usable */
	struct ib_gid_cand v[] = { cand(7, IB_GID_ROCE_V1, LL) };
	ck_assert_int_eq(ib_pick_gid(v, 1, -1), 0);
}
END_TEST

START_TEST(test_gid_auto_first_of_equal_rank_and_none)
{
	struct ib_gid_cand t[] = { cand(5, IB_GID_ROCE_V2, ZERO), cand(6, IB_GID_ROCE_V2, V4),
				   cand(9, IB_GID_ROCE_V2, V4) };

	ck_assert_int_eq(ib_pick_gid(t, 3, -1), 1);
	ck_assert_int_eq(ib_pick_gid(t, 1, -1), -ENOENT); /* only a zero GID */
	ck_assert_int_eq(ib_pick_gid(t, 0, -1), -ENOENT);
}
END_TEST

START_TEST(test_gid_explicit_index)
{
	struct ib_gid_cand t[] = { cand(0, IB_GID_ROCE_V1, LL), cand(1, IB_GID_ROCE_V2, LL),
				   cand(3, IB_GID_ROCE_V2, ZERO) };

	ck_assert_int_eq(ib_pick_gid(t, 3, 0), 0); /* asked for: even v1 */
	ck_assert_int_eq(ib_pick_gid(t, 3, 1), 1);
	ck_assert_int_eq(ib_pick_gid(t, 3, 2), -ENOENT); /* absent */
	ck_assert_int_eq(ib_pick_gid(t, 3, 3), -ENOENT); /* zero GID */
}
END_TEST

/* ------------------------------------------------------------------ parameters */

static void sample(struct ib_link_params *l, struct ib_rmb_params *r)
{
	memset(l, 0, sizeof(*l));
	memcpy(l->peer_id, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	for (int i = 0; i < 16; i++)
		l->gid[i] = (uint8_t)(0xA0 + i);
	memcpy(l->mac, "\x02\x00\x00\xAB\xCD\xEF", 6);
	l->qpn = 0x123456;
	l->psn = 0xABCDEF;
	l->mtu = CLC_MTU_1024;
	l->credits = 32;
	*r = (struct ib_rmb_params){ .token = 0xDEADBEEF, .rkey = 0x1234,
				     .vaddr = 0x7f0012340000ull, .size = 65536 };
}

START_TEST(test_params_round_trip_through_wire)
{
	struct ib_link_params l, l2;
	struct ib_rmb_params r, r2;
	struct clc_msg m, d;
	uint8_t buf[CLC_MAX_LEN];
	ssize_t n;

	sample(&l, &r);
	for (int type = CLC_ACCEPT; type <= CLC_CONFIRM; type++) {
		ib_params_to_clc(&l, &r, (uint8_t)type, type == CLC_ACCEPT, &m);
		n = clc_encode(&m, buf, sizeof(buf));
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(clc_decode(buf, (size_t)n, &d), 0);
		ck_assert_uint_eq(d.type, type);
		ck_assert_uint_eq(d.flags & CLC_FLAG_FIRST_CONTACT,
				  type == CLC_ACCEPT ? CLC_FLAG_FIRST_CONTACT : 0);
		ck_assert_uint_eq(ib_params_from_clc(&d, 1u << 20, &l2, &r2), 0);
		ck_assert_mem_eq(l2.peer_id, l.peer_id, 8);
		ck_assert_mem_eq(l2.gid, l.gid, 16);
		ck_assert_mem_eq(l2.mac, l.mac, 6);
		ck_assert_uint_eq(l2.qpn, l.qpn);
		ck_assert_uint_eq(l2.psn, l.psn);
		ck_assert_uint_eq(l2.mtu, l.mtu);
		ck_assert_uint_eq(l2.credits, 0); /* not a CLC field */
		ck_assert_uint_eq(r2.token, r.token);
		ck_assert_uint_eq(r2.rkey, r.rkey);
		ck_assert_uint_eq(r2.vaddr, r.vaddr);
		ck_assert_uint_eq(r2.size, r.size);
	}
}
END_TEST

START_TEST(test_params_rejects_bad_peer_values)
{
	struct ib_link_params l, l2;
	struct ib_rmb_params r, r2;
	struct clc_msg m;

	sample(&l, &r);
	ib_params_to_clc(&l, &r, CLC_CONFIRM, false, &m);
	ck_assert_uint_eq(ib_params_from_clc(&m, 65536, &l2, &r2), 0);
	/* RMB above our cap: memory, the documented decline */
	ck_assert_uint_eq(ib_params_from_clc(&m, 32768, &l2, &r2), CLC_DECL_MEM);

	struct clc_msg bad = m;
	bad.u.r_acc.rmb_vaddr = UINT64_MAX - 100; /* region wraps the address space */
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
	bad = m;
	bad.u.r_acc.rmbe_alert_token = 0;
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
	bad = m;
	bad.u.r_acc.rmbe_idx = 2; /* we do not share an RMB between connections */
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
	bad = m;
	memset(bad.u.r_acc.lcl.gid, 0, 16);
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
	bad = m;
	bad.u.r_acc.qp_mtu = 6;
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
	bad = m;
	bad.u.r_acc.qpn = 0;
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
	bad = m;
	bad.type = CLC_PROPOSAL;
	ck_assert_uint_eq(ib_params_from_clc(&bad, 1u << 20, &l2, &r2), CLC_DECL_CNFERR);
}
END_TEST

START_TEST(test_rmb_size_compressed_round_up)
{
	struct ib_link_params l, l2;
	struct ib_rmb_params r, r2;
	struct clc_msg m;

	sample(&l, &r);
	r.size = 16384;
	ib_params_to_clc(&l, &r, CLC_ACCEPT, true, &m);
	ck_assert_uint_eq(m.u.r_acc.rmbe_size, 0);
	ck_assert_uint_eq(ib_params_from_clc(&m, 1u << 30, &l2, &r2), 0);
	ck_assert_uint_eq(r2.size, 16384);
	r.size = 1u << 20;
	ib_params_to_clc(&l, &r, CLC_ACCEPT, true, &m);
	ck_assert_uint_eq(m.u.r_acc.rmbe_size, 6);
}
END_TEST

START_TEST(test_credits_ext)
{
	uint8_t b[IB_CREDITS_EXT_LEN], c = 0;

	ib_link_credits_encode(40, b);
	ck_assert_int_eq(ib_link_credits_decode(b, &c), 0);
	ck_assert_uint_eq(c, 40);
	ib_link_credits_encode(CDC_CREDITS_MIN_DEPTH - 1, b);
	ck_assert_int_eq(ib_link_credits_decode(b, &c), -ERANGE);
	b[0] = 'X';
	ck_assert_int_eq(ib_link_credits_decode(b, &c), -EBADMSG);
}
END_TEST

START_TEST(test_mtu_common)
{
	ck_assert_uint_eq(ib_mtu_common(CLC_MTU_4096, CLC_MTU_1024), CLC_MTU_1024);
	ck_assert_uint_eq(ib_mtu_common(CLC_MTU_256, CLC_MTU_2048), CLC_MTU_256);
	ck_assert_uint_eq(ib_mtu_common(0, CLC_MTU_1024), 0);
	ck_assert_uint_eq(ib_mtu_common(CLC_MTU_1024, 9), 0);
}
END_TEST

/* ------------------------------------------------------------------ token table */

START_TEST(test_tokens_basic)
{
	struct ib_token_table *t = malloc(sizeof(*t));
	int a, b;

	ib_tokens_init(t);
	ck_assert_int_eq(ib_tokens_add(t, 0, &a), -EINVAL);
	ck_assert_int_eq(ib_tokens_add(t, 7, &a), 0);
	ck_assert_int_eq(ib_tokens_add(t, 7, &b), -EEXIST);
	ck_assert_int_eq(ib_tokens_add(t, 8, &b), 0);
	ck_assert_ptr_eq(ib_tokens_find(t, 7), &a);
	ck_assert_ptr_eq(ib_tokens_find(t, 8), &b);
	ck_assert_ptr_null(ib_tokens_find(t, 9));
	ck_assert_ptr_null(ib_tokens_find(t, 0));
	ck_assert_int_eq(ib_tokens_del(t, 7), 0);
	ck_assert_int_eq(ib_tokens_del(t, 7), -ENOENT);
	ck_assert_ptr_null(ib_tokens_find(t, 7));
	ck_assert_ptr_eq(ib_tokens_find(t, 8), &b);
	free(t);
}
END_TEST

/* Many tokens, colliding slots, deletes in between: the table against a plain array. */
START_TEST(test_tokens_model)
{
	struct ib_token_table *t = malloc(sizeof(*t));
	static uint32_t live[IB_LINK_MAX_CONNS];
	unsigned n = 0;
	uint32_t seed = 12345;

	ib_tokens_init(t);
	for (int step = 0; step < 20000; step++) {
		seed = seed * 1664525u + 1013904223u;
		bool add = (seed >> 8) % 3 != 0;

		if (add) {
			/* small range: forces collisions and re-adds of deleted tokens */
			uint32_t tok = 1 + (seed >> 16) % 700;
			bool present = false;

			for (unsigned i = 0; i < n; i++)
				present |= live[i] == tok;
			int rc = ib_tokens_add(t, tok, (void *)(uintptr_t)tok);

			int want = present ? -EEXIST : n == IB_LINK_MAX_CONNS ? -ENOSPC : 0;

			if (rc != want)
				ck_abort_msg("step %d: add %u returned %d, expected %d", step, tok, rc, want);
			if (rc == 0)
				live[n++] = tok;
		} else if (n) {
			unsigned i = (seed >> 16) % n;

			if (ib_tokens_del(t, live[i]) != 0)
				ck_abort_msg("step %d: delete of a live token failed", step);
			live[i] = live[--n];
		}
		/* (plain checks in the loop: each ck_assert costs a syscall in fork mode) */
		bool all_found = t->n == n;

		for (unsigned i = 0; i < n; i++)
			all_found &= ib_tokens_find(t, live[i]) == (void *)(uintptr_t)live[i];
		if (!all_found)
			ck_abort_msg("step %d: a live token is not found", step);
		/* and what is not live is not found */
		uint32_t absent = 1 + (seed >> 4) % 700;
		bool live_one = false;

		for (unsigned i = 0; i < n; i++)
			live_one |= live[i] == absent;
		if (!live_one && ib_tokens_find(t, absent) != NULL)
			ck_abort_msg("step %d: token %u found but not live", step, absent);
	}
	free(t);
}
END_TEST

/* ------------------------------------------------------------------ send queue */

START_TEST(test_sq_accounting)
{
	struct ib_sq_acct s = { .depth = 6 };
	uint64_t m1, m2;

	ck_assert(ib_sq_has_room(&s, 3));
	m1 = ib_sq_post(&s, 3); /* WRITE, WRITE, SEND */
	ck_assert(ib_sq_has_room(&s, 3));
	m2 = ib_sq_post(&s, 2);
	ck_assert(!ib_sq_has_room(&s, 2));
	ck_assert(ib_sq_has_room(&s, 1));
	ck_assert_int_eq(ib_sq_complete(&s, m1), 0);
	ck_assert(ib_sq_has_room(&s, 4));
	ck_assert(!ib_sq_has_room(&s, 5));
	ck_assert_int_eq(ib_sq_complete(&s, m1), -EPROTO); /* twice */
	ck_assert_int_eq(ib_sq_complete(&s, m2 + 1), -EPROTO); /* never handed out */
	ck_assert_int_eq(ib_sq_complete(&s, m2), 0);
	ck_assert(ib_sq_has_room(&s, 6));
}
END_TEST

/* ------------------------------------------------------------------ ring pieces */

START_TEST(test_ring_pieces)
{
	struct ib_piece p[2];
	const uint32_t size = 1024;

	ck_assert_int_eq(ib_ring_pieces(cursor_make(0, 100), cursor_make(0, 100), size, p), 0);
	ck_assert_int_eq(ib_ring_pieces(cursor_make(0, 100), cursor_make(0, 300), size, p), 1);
	ck_assert_uint_eq(p[0].off, 100);
	ck_assert_uint_eq(p[0].len, 200);
	/* ends exactly at the ring's end: the cursor wrapped to count 0 */
	ck_assert_int_eq(ib_ring_pieces(cursor_make(0, 1000), cursor_make(1, 0), size, p), 1);
	ck_assert_uint_eq(p[0].off, 1000);
	ck_assert_uint_eq(p[0].len, 24);
	ck_assert_int_eq(ib_ring_pieces(cursor_make(3, 1000), cursor_make(4, 10), size, p), 2);
	ck_assert_uint_eq(p[0].off, 1000);
	ck_assert_uint_eq(p[0].len, 24);
	ck_assert_uint_eq(p[1].off, 0);
	ck_assert_uint_eq(p[1].len, 10);
	/* a whole ring */
	ck_assert_int_eq(ib_ring_pieces(cursor_make(0xFFFF, 512), cursor_make(0, 512), size, p), 2);
	ck_assert_uint_eq(p[0].len + p[1].len, size);
	/* backwards: nothing */
	ck_assert_int_eq(ib_ring_pieces(cursor_make(0, 300), cursor_make(0, 100), size, p), 0);
}
END_TEST

static Suite *ib_proto_suite(void)
{
	Suite *s = suite_create("ib_proto");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_gid_auto_prefers_v2_with_address);
	tcase_add_test(tc, test_gid_auto_first_of_equal_rank_and_none);
	tcase_add_test(tc, test_gid_explicit_index);
	tcase_add_test(tc, test_params_round_trip_through_wire);
	tcase_add_test(tc, test_params_rejects_bad_peer_values);
	tcase_add_test(tc, test_rmb_size_compressed_round_up);
	tcase_add_test(tc, test_credits_ext);
	tcase_add_test(tc, test_mtu_common);
	tcase_add_test(tc, test_tokens_basic);
	tcase_add_test(tc, test_tokens_model);
	tcase_add_test(tc, test_sq_accounting);
	tcase_add_test(tc, test_ring_pieces);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ib_proto_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
