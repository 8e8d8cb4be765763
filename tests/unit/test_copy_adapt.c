/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the ring store-kind chooser (core/copy_adapt.c), driven by a model of
 * the two machines it must tell apart: CPUs sharing a cache (memcpy cheaper) and CPUs
 * far apart (streaming stores cheaper). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/copy_adapt.h"

#define CHUNK (16u * 1024)

/* the writer's ticks per KiB for each kind, as measured on the project's machine
 * (copy_adapt.c): streaming stores cost the writer little wherever the reader is */
struct machine {
	uint32_t cost[2];
};
static const struct machine near = { { 280, 80 } };  /* memcpy's pipeline is faster */
static const struct machine far = { { 1150, 80 } };  /* streaming's is, 3-5x */

static uint32_t rng = 12345;

/* +-10% of jitter, deterministic */
static uint64_t jitter(uint64_t v)
{
	rng = rng * 1103515245u + 12345u;
	return v * (90 + (rng >> 16) % 21) / 100;
}

struct run {
	unsigned chunks[2]; /* chunks copied with each kind */
	unsigned timed;
	int first_stream;   /* index of the first chunk stored with COPY_STREAM, -1 none */
	int last_switch;    /* index of the last chunk whose kind differs from the one before */
};

/* n chunks of `len` on machine m; `outlier_at` >= 0: that chunk's timing is 100x. */
static void drive(struct copy_adapt *a, const struct machine *m, unsigned n, size_t len,
		  int outlier_at, struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->first_stream = r->last_switch = -1;
	for (unsigned i = 0; i < n; i++) {
		bool timed;
		enum copy_store k = copy_adapt_pick(a, len, -1, &timed);

		r->chunks[k]++;
		if (k == COPY_STREAM && r->first_stream < 0)
			r->first_stream = (int)i;
		if (!timed)
			continue;
		r->timed++;
		uint64_t t = jitter((uint64_t)m->cost[k] * len / 1024);

		if ((int)i == outlier_at)
			t *= 100;
		copy_adapt_record(a, k, len, t);
	}
}

START_TEST(near_stays_cached)
{
	struct copy_adapt a = { 0 };
	struct run r;

	drive(&a, &near, 20000, CHUNK, -1, &r);
	/* probes back off to one per COPY_ADAPT_GAP_MAX chunks: well under 1% */
	ck_assert_msg(r.chunks[COPY_STREAM] * 100 < r.chunks[COPY_CACHED],
		      "%u streaming chunks of 20000", r.chunks[COPY_STREAM]);
	ck_assert_uint_gt(r.chunks[COPY_STREAM], 0); /* it did look */
	ck_assert_int_eq(a.kind, COPY_CACHED);
	/* about one chunk in COPY_ADAPT_TIME_EVERY is timed */
	ck_assert_uint_lt(r.timed, 20000 / COPY_ADAPT_TIME_EVERY + 200);
}
END_TEST

START_TEST(far_switches_to_stream)
{
	struct copy_adapt a = { 0 };
	struct run r;

	drive(&a, &far, 20000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_STREAM);
	/* the first probe comes after COPY_ADAPT_GAP_MIN chunks and wins at once */
	ck_assert_int_le(r.first_stream, COPY_ADAPT_GAP_MIN + 1);
	ck_assert_msg(r.chunks[COPY_CACHED] * 50 < r.chunks[COPY_STREAM],
		      "%u cached chunks of 20000", r.chunks[COPY_CACHED]);
}
END_TEST

START_TEST(follows_the_host)
{
	struct copy_adapt a = { 0 };
	struct run r;

	drive(&a, &near, 5000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_CACHED);
	/* the host moves a vCPU away: memcpy gets 6x slower; noticed within a few timed
	 * chunks, then one probe */
	drive(&a, &far, 5000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_STREAM);
	ck_assert_int_le(r.first_stream, 4 * COPY_ADAPT_TIME_EVERY + COPY_ADAPT_GAP_MIN);
	ck_assert_uint_lt(r.chunks[COPY_CACHED], 4 * COPY_ADAPT_TIME_EVERY + COPY_ADAPT_GAP_MIN + 40);
	/* and back: streaming gets no slower there, so only the backed-off probe finds it */
	drive(&a, &near, 5000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_CACHED);
	ck_assert_uint_lt(r.chunks[COPY_STREAM], COPY_ADAPT_GAP_MAX + 60);
}
END_TEST

START_TEST(cheaper_streaming_is_not_enough)
{
	/* streaming costs the writer 1/5 of memcpy: the reader would pay more than that */
	static const struct machine fifth = { { 300, 60 } };
	static const struct machine same = { { 100, 90 } };
	struct copy_adapt a = { 0 }, b = { 0 };
	struct run r;

	drive(&a, &fifth, 20000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_CACHED);
	ck_assert_uint_lt(r.chunks[COPY_STREAM], 200);
	drive(&b, &same, 20000, CHUNK, -1, &r);
	ck_assert_int_eq(b.kind, COPY_CACHED);
	ck_assert_uint_lt(r.chunks[COPY_STREAM], 200);
}
END_TEST

START_TEST(one_preempted_chunk_is_not_a_move)
{
	struct copy_adapt a = { 0 };
	struct run r;

	drive(&a, &near, 4000, CHUNK, -1, &r);
	uint16_t gap = a.gap;

	ck_assert_uint_gt(gap, COPY_ADAPT_GAP_MIN); /* backed off by now */
	/* one timed chunk 100x slower: clamped to 4x, it moves the average but neither
	 * the kind nor the probe schedule */
	copy_adapt_record(&a, COPY_CACHED, CHUNK, 100ull * near.cost[0] * CHUNK / 1024);
	ck_assert_int_eq(a.kind, COPY_CACHED);
	ck_assert_uint_eq(a.gap, gap);
	drive(&a, &near, 4000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_CACHED);
	ck_assert_uint_lt(r.chunks[COPY_STREAM], 12);
	/* a run of them (a long preemption) may trigger a look at streaming: it loses
	 * there, and memcpy comes back within a few probes */
	for (int i = 0; i < 4; i++)
		copy_adapt_record(&a, COPY_CACHED, CHUNK, 100ull * near.cost[0] * CHUNK / 1024);
	drive(&a, &near, 4000, CHUNK, -1, &r);
	ck_assert_int_eq(a.kind, COPY_CACHED);
	ck_assert_uint_lt(r.chunks[COPY_STREAM], 4 * COPY_ADAPT_GAP_MIN);
}
END_TEST

START_TEST(small_chunks_and_fixed_kinds)
{
	struct copy_adapt a = { 0 }, zero = { 0 };
	bool timed = true;

	for (int i = 0; i < 1000; i++) {
		ck_assert_int_eq(copy_adapt_pick(&a, COPY_ADAPT_MIN - 1, -1, &timed), COPY_CACHED);
		ck_assert(!timed);
		ck_assert_int_eq(copy_adapt_pick(&a, CHUNK, COPY_STREAM, &timed), COPY_STREAM);
		ck_assert(!timed);
		ck_assert_int_eq(copy_adapt_pick(&a, CHUNK, COPY_CACHED, &timed), COPY_CACHED);
		ck_assert(!timed);
	}
	ck_assert_mem_eq(&a, &zero, sizeof(a)); /* none of them touched the state */
	/* nonsense records are ignored */
	copy_adapt_record(&a, COPY_CACHED, 0, 100);
	copy_adapt_record(&a, (enum copy_store)7, CHUNK, 100);
	ck_assert_mem_eq(&a, &zero, sizeof(a));
}
END_TEST

START_TEST(ticks_advance)
{
	uint64_t t0 = copy_adapt_ticks(), t1;
	volatile unsigned sink = 0;

	for (unsigned i = 0; i < 1000000; i++)
		sink += i;
	t1 = copy_adapt_ticks();
	ck_assert_uint_gt(t1, t0);
}
END_TEST

static Suite *copy_adapt_suite(void)
{
	Suite *s = suite_create("copy_adapt");
	TCase *tc = tcase_create("choice");

	tcase_add_test(tc, near_stays_cached);
	tcase_add_test(tc, far_switches_to_stream);
	tcase_add_test(tc, follows_the_host);
	tcase_add_test(tc, cheaper_streaming_is_not_enough);
	tcase_add_test(tc, one_preempted_chunk_is_not_a_move);
	tcase_add_test(tc, small_chunks_and_fixed_kinds);
	tcase_add_test(tc, ticks_advance);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(copy_adapt_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);

	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
