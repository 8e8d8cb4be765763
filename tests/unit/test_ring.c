/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for core/wire/ring.c: cursor arithmetic (count wrap, 16-bit wrap counter
 * wrap, invalid cursors) and ring copies compared against a byte-by-byte model.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/ring.h"

#define SMALL 16u

/* ------------------------------------------------------------------ cursors */

START_TEST(test_cursor_pack)
{
	smc_cursor c = cursor_make(0xBEEF, 0x12345678);

	ck_assert_uint_eq(cursor_wrap(c), 0xBEEF);
	ck_assert_uint_eq(cursor_count(c), 0x12345678);
	ck_assert_uint_eq(c >> 48, 0);
}
END_TEST

START_TEST(test_cursor_valid)
{
	ck_assert(cursor_valid(cursor_make(0, 0), SMALL));
	ck_assert(cursor_valid(cursor_make(0xFFFF, SMALL - 1), SMALL));
	ck_assert(!cursor_valid(cursor_make(0, SMALL), SMALL));
	ck_assert(!cursor_valid(cursor_make(0, 0xFFFFFFFF), SMALL));
	ck_assert(!cursor_valid(cursor_make(1, 0) | (1ULL << 48), SMALL));
	ck_assert(!cursor_valid(1ULL << 63, SMALL));
	ck_assert(!cursor_valid(0, 0)); /* no ring of size 0 */
}
END_TEST

START_TEST(test_cursor_add_count_wrap)
{
	smc_cursor c = cursor_make(7, 10);

	c = cursor_add(c, 5, SMALL);
	ck_assert_uint_eq(cursor_wrap(c), 7);
	ck_assert_uint_eq(cursor_count(c), 15);
	c = cursor_add(c, 1, SMALL); /* lands exactly on the end -> 0, next wrap */
	ck_assert_uint_eq(cursor_wrap(c), 8);
	ck_assert_uint_eq(cursor_count(c), 0);
	c = cursor_add(c, SMALL, SMALL); /* a whole ring */
	ck_assert_uint_eq(cursor_wrap(c), 9);
	ck_assert_uint_eq(cursor_count(c), 0);
	c = cursor_add(cursor_make(3, 15), SMALL, SMALL);
	ck_assert_uint_eq(cursor_wrap(c), 4);
	ck_assert_uint_eq(cursor_count(c), 15);
	c = cursor_add(cursor_make(3, 4), 0, SMALL);
	ck_assert_uint_eq(c, cursor_make(3, 4));
}
END_TEST

START_TEST(test_cursor_add_wrap_counter_wraps)
{
	smc_cursor c = cursor_add(cursor_make(0xFFFF, 12), 6, SMALL);

	ck_assert_uint_eq(cursor_wrap(c), 0);
	ck_assert_uint_eq(cursor_count(c), 2);
	ck_assert(cursor_valid(c, SMALL));
}
END_TEST

START_TEST(test_cursor_add_large_ring)
{
	/* count + n above 2^32 must not overflow */
	uint32_t size = 0xFFFFFFF0u;
	smc_cursor c = cursor_add(cursor_make(1, size - 1), size, size);

	ck_assert_uint_eq(cursor_wrap(c), 2);
	ck_assert_uint_eq(cursor_count(c), size - 1);
}
END_TEST

START_TEST(test_cursor_diff_basic)
{
	ck_assert_int_eq(cursor_diff(cursor_make(0, 0), cursor_make(0, 0), SMALL), 0);
	ck_assert_int_eq(cursor_diff(cursor_make(0, 9), cursor_make(0, 2), SMALL), 7);
	ck_assert_int_eq(cursor_diff(cursor_make(1, 2), cursor_make(0, 9), SMALL), 9);
	/* exactly one ring ahead: full ring */
	ck_assert_int_eq(cursor_diff(cursor_make(1, 5), cursor_make(0, 5), SMALL), SMALL);
	/* more than one ring ahead */
	ck_assert_int_eq(cursor_diff(cursor_make(1, 6), cursor_make(0, 5), SMALL), -1);
	ck_assert_int_eq(cursor_diff(cursor_make(2, 0), cursor_make(0, 15), SMALL), -1);
	/* backwards */
	ck_assert_int_eq(cursor_diff(cursor_make(0, 4), cursor_make(0, 5), SMALL), -1);
	ck_assert_int_eq(cursor_diff(cursor_make(0, 15), cursor_make(1, 0), SMALL), -1);
}
END_TEST

START_TEST(test_cursor_diff_wrap_counter_wraps)
{
	ck_assert_int_eq(cursor_diff(cursor_make(0x0000, 3), cursor_make(0xFFFF, 10), SMALL), 9);
	ck_assert_int_eq(cursor_diff(cursor_make(0x0000, 10), cursor_make(0xFFFF, 10), SMALL),
			 SMALL);
	ck_assert_int_eq(cursor_diff(cursor_make(0x0000, 11), cursor_make(0xFFFF, 10), SMALL), -1);
	/* the reverse direction is "backwards" */
	ck_assert_int_eq(cursor_diff(cursor_make(0xFFFF, 10), cursor_make(0x0000, 3), SMALL), -1);
	ck_assert_int_eq(cursor_diff(cursor_make(0x0001, 0), cursor_make(0xFFFF, 0), SMALL), -1);
}
END_TEST

START_TEST(test_cursor_diff_invalid)
{
	smc_cursor ok = cursor_make(0, 1);

	ck_assert_int_eq(cursor_diff(cursor_make(0, SMALL), ok, SMALL), -1);
	ck_assert_int_eq(cursor_diff(ok, cursor_make(0, SMALL), SMALL), -1);
	ck_assert_int_eq(cursor_diff(ok | (1ULL << 48), ok, SMALL), -1);
	ck_assert_int_eq(cursor_diff(ok, ok | (1ULL << 60), SMALL), -1);
	ck_assert_int_eq(cursor_diff(ok, ok, 0), -1);
	ck_assert_int_eq(ring_used(cursor_make(0, 99), ok, SMALL), -1);
	ck_assert_int_eq(ring_free(cursor_make(0, 99), ok, SMALL), -1);
}
END_TEST

/* Walk a producer/consumer pair through many laps (past the 16-bit wrap counter
 * wrapping) and check used/free against plain 64-bit byte totals. */
START_TEST(test_cursor_long_walk)
{
	smc_cursor prod = cursor_make(0xFFF0, 0), cons = prod;
	uint64_t produced = 0, consumed = 0;
	uint32_t seed = 12345;

	for (int i = 0; i < 4000; i++) {
		seed = seed * 1103515245u + 12345u;
		uint32_t room = SMALL - (uint32_t)(produced - consumed);
		uint32_t n = room ? (seed >> 16) % (room + 1) : 0;

		prod = cursor_add(prod, n, SMALL);
		produced += n;
		ck_assert_int_eq(ring_used(prod, cons, SMALL), (int64_t)(produced - consumed));
		ck_assert_int_eq(ring_free(prod, cons, SMALL),
				 (int64_t)(SMALL - (produced - consumed)));
		seed = seed * 1103515245u + 12345u;
		uint32_t m = (seed >> 16) % ((uint32_t)(produced - consumed) + 1);

		cons = cursor_add(cons, m, SMALL);
		consumed += m;
		ck_assert_int_eq(ring_used(prod, cons, SMALL), (int64_t)(produced - consumed));
	}
	/* the walk went well past 0xFFFF -> 0x0000 */
	ck_assert_uint_gt(produced / SMALL, 16);
}
END_TEST

START_TEST(test_ring_full_and_empty)
{
	smc_cursor c = cursor_make(5, 7);

	ck_assert_int_eq(ring_used(c, c, SMALL), 0);
	ck_assert_int_eq(ring_free(c, c, SMALL), SMALL);
	smc_cursor full = cursor_add(c, SMALL, SMALL);

	ck_assert_int_eq(ring_used(full, c, SMALL), SMALL);
	ck_assert_int_eq(ring_free(full, c, SMALL), 0);
	/* consumer ahead of producer: inconsistent */
	ck_assert_int_eq(ring_used(c, full, SMALL), -1);
}
END_TEST

/* ------------------------------------------------------------------ copies */

/* Reference model: byte i of the stream lives at (start + i) % size. */
static void model_write(uint8_t *ring, uint32_t size, uint32_t start, const uint8_t *src,
			size_t len)
{
	for (size_t i = 0; i < len; i++)
		ring[(start + i) % size] = src[i];
}

START_TEST(test_copy_every_split)
{
	uint8_t ring[SMALL], model[SMALL], src[SMALL], out[SMALL + 4];

	for (uint32_t i = 0; i < SMALL; i++)
		src[i] = (uint8_t)(0xA0 + i);
	for (uint32_t start = 0; start < SMALL; start++) {
		for (uint32_t len = 0; len <= SMALL; len++) {
			memset(ring, 0x11, sizeof(ring));
			memset(model, 0x11, sizeof(model));
			smc_cursor at = cursor_make(0xFFFF, start);
			smc_cursor end = ring_copy_in(ring, SMALL, at, src, len);

			model_write(model, SMALL, start, src, len);
			ck_assert_mem_eq(ring, model, SMALL);
			ck_assert_uint_eq(end, cursor_add(at, len, SMALL));
			ck_assert_int_eq(cursor_diff(end, at, SMALL), len);

			memset(out, 0x55, sizeof(out));
			smc_cursor end2 = ring_copy_out(ring, SMALL, at, out, len);

			ck_assert_uint_eq(end2, end);
			ck_assert_mem_eq(out, src, len);
			for (size_t k = len; k < sizeof(out); k++)
				ck_assert_uint_eq(out[k], 0x55); /* no overrun of dst */
		}
	}
}
END_TEST

/* A forged count (>= size) or an over-long length must stay inside the ring. */
START_TEST(test_copy_defensive)
{
	uint8_t buf[SMALL + 8], src[3 * SMALL], out[3 * SMALL];

	memset(buf, 0xEE, sizeof(buf));
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)i;
	ring_copy_in(buf, SMALL, cursor_make(0, SMALL + 3), src, 5);
	ring_copy_in(buf, SMALL, cursor_make(0, 2), src, sizeof(src));
	for (size_t k = SMALL; k < sizeof(buf); k++)
		ck_assert_uint_eq(buf[k], 0xEE);
	ring_copy_out(buf, SMALL, cursor_make(0, 0xFFFFFFFF), out, sizeof(out));
	ck_assert_uint_eq(ring_copy_in(buf, 0, cursor_make(0, 0), src, 4), cursor_make(0, 0));
}
END_TEST

/* Scatter a linear buffer into an iovec array with the given segment lengths. */
static int make_iov(struct iovec *iov, uint8_t *base, const size_t *lens, int n)
{
	size_t off = 0;

	for (int i = 0; i < n; i++) {
		iov[i].iov_base = lens[i] ? base + off : NULL;
		iov[i].iov_len = lens[i];
		off += lens[i];
	}
	return n;
}

START_TEST(test_copy_iov)
{
	static const size_t lens[] = { 0, 3, 0, 0, 5, 1, 0, 7, 0 };
	const int n = (int)(sizeof(lens) / sizeof(lens[0]));
	const size_t total = 16;
	uint8_t ring[SMALL], model[SMALL], src[16], dst[16];
	struct iovec iov[9];

	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(0x30 + i);
	for (uint32_t start = 0; start < SMALL; start++) {
		for (size_t skip = 0; skip <= total + 2; skip++) {
			for (size_t len = 0; len <= SMALL; len++) {
				size_t avail = skip < total ? total - skip : 0;
				size_t expect = len < avail ? len : avail;
				smc_cursor at = cursor_make(3, start);

				make_iov(iov, src, lens, n);
				memset(ring, 0, sizeof(ring));
				memset(model, 0, sizeof(model));
				size_t got = ring_copy_in_iov(ring, SMALL, at, iov, n, skip, len, false);

				ck_assert_uint_eq(got, expect);
				model_write(model, SMALL, start, src + (skip < total ? skip : 0),
					    expect);
				ck_assert_mem_eq(ring, model, SMALL);

				memset(dst, 0x77, sizeof(dst));
				make_iov(iov, dst, lens, n);
				got = ring_copy_out_iov(ring, SMALL, at, iov, n, skip, len);
				ck_assert_uint_eq(got, expect);
				for (size_t k = 0; k < total; k++) {
					bool in = k >= skip && k < skip + expect;

					ck_assert_uint_eq(dst[k], in ? src[k] : 0x77);
				}
			}
		}
	}
}
END_TEST

START_TEST(test_copy_iov_edge)
{
	uint8_t ring[SMALL] = { 0 }, a[4] = { 1, 2, 3, 4 };
	struct iovec iov[2] = { { a, 4 }, { NULL, 0 } };

	ck_assert_uint_eq(ring_copy_in_iov(ring, SMALL, 0, NULL, 0, 0, 10, false), 0);
	ck_assert_uint_eq(ring_copy_in_iov(ring, SMALL, 0, iov, -1, 0, 10, false), 0);
	ck_assert_uint_eq(ring_copy_in_iov(ring, SMALL, 0, iov, 2, 4, 10, false), 0);
	ck_assert_uint_eq(ring_copy_in_iov(ring, SMALL, 0, iov, 2, 0, 0, false), 0);
	ck_assert_uint_eq(ring_copy_in_iov(ring, SMALL, cursor_make(0, 14), iov, 2, 1, 10, false), 3);
	ck_assert_uint_eq(ring[14], 2);
	ck_assert_uint_eq(ring[15], 3);
	ck_assert_uint_eq(ring[0], 4);
	ck_assert_uint_eq(ring_copy_out_iov(ring, 0, 0, iov, 2, 0, 4), 0);
}
END_TEST

/* Non-temporal copies write exactly what cached ones write: every start offset within
 * a line, lengths around whole lines, across the ring's end, from unaligned sources. */
START_TEST(test_copy_in_stream)
{
	enum { RING = 1024, SRC = 700 };
	static uint8_t ring[RING], model[RING], src[SRC + 64];
	static const size_t lens[] = { 0, 1, 63, 64, 65, 127, 128, 129, 191, 255, 256, 300, SRC };

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 1);
	for (uint32_t start = RING - 200; start < RING - 200 + 70; start++) {
		for (size_t soff = 0; soff < 3; soff++) {
			for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
				struct iovec iov = { src + soff, lens[li] };
				size_t got;

				memset(ring, 0xee, sizeof(ring));
				memset(model, 0xee, sizeof(model));
				got = ring_copy_in_iov(ring, RING, cursor_make(0, start), &iov, 1, 0,
						       lens[li], true);
				ring_stream_fence();
				ck_assert_uint_eq(got, lens[li]);
				model_write(model, RING, start, src + soff, lens[li]);
				ck_assert_mem_eq(ring, model, RING);
			}
		}
	}
	/* and at the start of an aligned ring, a whole ring's worth */
	memset(ring, 0, sizeof(ring));
	{
		static uint8_t big[RING];
		struct iovec iov = { big, RING };

		for (size_t i = 0; i < RING; i++)
			big[i] = (uint8_t)(i ^ 0x5a);
		ck_assert_uint_eq(ring_copy_in_iov(ring, RING, 0, &iov, 1, 0, RING, true), RING);
		ring_stream_fence();
		ck_assert_mem_eq(ring, big, RING);
	}
}
END_TEST

/* The library's own copy loop (ring.c) at the 4K distances where glibc's memcpy slows
 * down and elsewhere: same bytes, both ways, at every distance tried, across the ring's
 * end and with partial 64-byte tails. */
START_TEST(test_copy_alias_zone)
{
	enum { RING = 8192 };
	static const size_t deltas[] = { 0, 1, 16, 63, 255, 256, 2048, 4095 };
	static const size_t lens[] = { 255, 256, 300, 2048 + 65, 5000, RING };
	static const uint32_t starts[] = { 0, 100, RING - 50 };
	uint8_t *ring = aligned_alloc(4096, RING), *model = malloc(RING);
	uint8_t *buf = aligned_alloc(4096, RING + 8192), *back = malloc(RING);

	ck_assert_ptr_nonnull(ring);
	ck_assert_ptr_nonnull(model);
	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(back);
	for (size_t di = 0; di < sizeof(deltas) / sizeof(deltas[0]); di++) {
		for (size_t si = 0; si < sizeof(starts) / sizeof(starts[0]); si++) {
			for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
				/* the buffer's page offset against the ring position */
				uint8_t *app = buf + ((starts[si] + deltas[di]) & 4095);
				size_t len = lens[li];
				struct iovec iov = { app, len };

				for (size_t i = 0; i < len; i++)
					app[i] = (uint8_t)(i * 13 + di + si);
				memset(ring, 0xa5, RING);
				memset(model, 0xa5, RING);
				ck_assert_uint_eq(ring_copy_in_iov(ring, RING, cursor_make(0, starts[si]),
								   &iov, 1, 0, len, false), len);
				model_write(model, RING, starts[si], app, len);
				ck_assert_mem_eq(ring, model, RING);
				memset(app, 0, len);
				ck_assert_uint_eq(ring_copy_out_iov(ring, RING, cursor_make(0, starts[si]),
								    &iov, 1, 0, len), len);
				for (size_t i = 0; i < len; i++)
					back[i] = (uint8_t)(i * 13 + di + si);
				ck_assert_mem_eq(app, back, len);
			}
		}
	}
	free(ring);
	free(model);
	free(buf);
	free(back);
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("cursor");

	tcase_add_test(tc, test_cursor_pack);
	tcase_add_test(tc, test_cursor_valid);
	tcase_add_test(tc, test_cursor_add_count_wrap);
	tcase_add_test(tc, test_cursor_add_wrap_counter_wraps);
	tcase_add_test(tc, test_cursor_add_large_ring);
	tcase_add_test(tc, test_cursor_diff_basic);
	tcase_add_test(tc, test_cursor_diff_wrap_counter_wraps);
	tcase_add_test(tc, test_cursor_diff_invalid);
	tcase_add_test(tc, test_cursor_long_walk);
	tcase_add_test(tc, test_ring_full_and_empty);
	suite_add_tcase(s, tc);

	tc = tcase_create("copy");
	tcase_add_test(tc, test_copy_every_split);
	tcase_add_test(tc, test_copy_defensive);
	tcase_add_test(tc, test_copy_iov);
	tcase_add_test(tc, test_copy_iov_edge);
	tcase_add_test(tc, test_copy_in_stream);
	tcase_add_test(tc, test_copy_alias_zone);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ring_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);

	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
