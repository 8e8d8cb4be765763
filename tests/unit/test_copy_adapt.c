/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the ring store-kind chooser (core/shm/copy_adapt.c), driven by a model of
 * the machines it must tell apart: a writer's sends take the pipeline's time per byte
 * for the kind in use, as measured on the project's VM. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/shm/copy_adapt.h"

#define RING (1024u * 1024)
#define MSG (128u * 1024)

/* pipeline ticks per KiB with each kind */
struct machine {
	uint32_t cost[2];
};
/* CPUs sharing a cache, 1 MiB ring, 128 KiB writes: memcpy ~11, streaming ~7.5 GB/s */
static const struct machine near = { { 250, 370 } };
/* CPUs far apart: memcpy ~2, streaming ~8 GB/s */
static const struct machine far = { { 1400, 350 } };

static uint32_t rng = 12345;

/* +-10% of jitter, deterministic */
static uint64_t jitter(uint64_t v)
{
	rng = rng * 1103515245u + 12345u;
	return v * (90 + (rng >> 16) % 21) / 100;
}

struct run {
	unsigned calls[2];  /* send calls made with each kind */
	int first_stream;   /* index of the first call made with COPY_STREAM, -1 none */
};

struct writer {
	struct copy_adapt a;
	uint64_t now;
};

/* n blocking sends of `msg` bytes on machine m, `idle` ticks of application work
 * between them; `slow_call` >= 0: that call takes 100x as long (preempted). */
static void drive(struct writer *w, const struct machine *m, unsigned n, size_t msg,
		  uint64_t idle, int slow_call, struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->first_stream = -1;
	for (unsigned i = 0; i < n; i++) {
		enum copy_store k = copy_adapt_kind(&w->a, msg, -1);
		uint64_t t_in = w->now, d = jitter((uint64_t)m->cost[k] * msg / 1024);

		if ((int)i == slow_call)
			d *= 100;
		r->calls[k]++;
		if (k == COPY_STREAM && r->first_stream < 0)
			r->first_stream = (int)i;
		w->now += d;
		copy_adapt_sent(&w->a, t_in, w->now, msg, false, copy_adapt_window(RING));
		w->now += idle;
	}
}

/* sends per window */
#define PER_WIN (copy_adapt_window(RING) / MSG)

START_TEST(near_stays_cached)
{
	struct writer w = { .now = 1000 };
	struct run r;

	drive(&w, &near, 20000, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
	ck_assert_uint_gt(r.calls[COPY_STREAM], 0); /* it did look */
	/* probes back off to one window in COPY_ADAPT_GAP_MAX + 1 */
	ck_assert_msg(r.calls[COPY_STREAM] * 30 < r.calls[COPY_CACHED],
		      "%u streaming sends of 20000", r.calls[COPY_STREAM]);
}
END_TEST

START_TEST(far_switches_to_stream)
{
	struct writer w = { .now = 1000 };
	struct run r;

	drive(&w, &far, 20000, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_STREAM);
	/* first window not counted, COPY_ADAPT_GAP_MIN + 1 counted, then the probe */
	ck_assert_int_le(r.first_stream, (COPY_ADAPT_GAP_MIN + 3) * PER_WIN);
	ck_assert_msg(r.calls[COPY_CACHED] * 20 < r.calls[COPY_STREAM],
		      "%u cached sends of 20000", r.calls[COPY_CACHED]);
}
END_TEST

START_TEST(follows_the_host)
{
	struct writer w = { .now = 1000 };
	struct run r;

	drive(&w, &near, 5000, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
	/* the host moves a vCPU away: memcpy gets 5x slower, noticed within two windows,
	 * then a probe within COPY_ADAPT_GAP_MIN (the current window may be the first) */
	drive(&w, &far, (COPY_ADAPT_GAP_MIN + 5) * PER_WIN, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_STREAM);
	drive(&w, &far, 80 * PER_WIN, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_STREAM);
	/* in 80 windows, probes of memcpy 4, 8, 16 and 32 windows apart */
	ck_assert_msg(r.calls[COPY_CACHED] <= 4 * PER_WIN, "%u cached sends", r.calls[COPY_CACHED]);
	/* and back: streaming costs the same there, so only the backed-off probe finds it */
	drive(&w, &near, (COPY_ADAPT_GAP_MAX + 3) * PER_WIN, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
}
END_TEST

START_TEST(noisy_windows_do_not_raise_alarms)
{
	struct writer w = { .now = 1000 };
	struct run r;

	unsigned stream = 0;

	/* whole windows 0.5x-1.5x as fast as usual (measured here: 8 MiB windows of one
	 * kind vary up to 2x), which must not look like a move of the CPUs */
	for (unsigned win = 0; win < 600; win++) {
		rng = rng * 1103515245u + 12345u;
		struct machine m = near;
		unsigned f = 50 + (rng >> 16) % 101;

		m.cost[0] = m.cost[0] * f / 100;
		m.cost[1] = m.cost[1] * f / 100;
		drive(&w, &m, PER_WIN, MSG, 0, -1, &r);
		stream += r.calls[COPY_STREAM];
	}
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
	/* backed-off probes only: 4+8+16+32, then one per COPY_ADAPT_GAP_MAX + 1 */
	ck_assert_msg(stream <= 14 * PER_WIN, "%u streaming sends in 600 windows", stream);
}
END_TEST

START_TEST(close_costs_do_not_flip)
{
	static const struct machine close = { { 100, 95 } }; /* within COPY_ADAPT_SWITCH */
	struct writer w = { .now = 1000 };
	struct run r;

	drive(&w, &close, 20000, MSG, 0, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
}
END_TEST

START_TEST(idle_writer_is_not_measured)
{
	struct writer w = { .now = 1000 };
	struct run r;

	/* the application works 2x as long as each send takes: its pace, not the copies' */
	drive(&w, &far, 20000, MSG, 2ull * far.cost[COPY_CACHED] * MSG / 1024, -1, &r);
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
	ck_assert_uint_eq(r.calls[COPY_STREAM], 0);
	ck_assert_uint_eq(w.a.cost[COPY_CACHED], 0);
}
END_TEST

START_TEST(event_loop_waiting_for_room_is_busy)
{
	struct writer w = { .now = 1000 };
	unsigned stream = 0;

	/* a nonblocking writer: each call fills what room there is and returns "full";
	 * the loop then waits (epoll) for room, which is the pipeline's time too */
	for (unsigned i = 0; i < 20000; i++) {
		enum copy_store k = copy_adapt_kind(&w.a, MSG, -1);
		uint64_t t_in = w.now, d = jitter((uint64_t)far.cost[k] * MSG / 1024);

		stream += k == COPY_STREAM;
		w.now += d / 10; /* the copy */
		copy_adapt_sent(&w.a, t_in, w.now, MSG, true, copy_adapt_window(RING));
		w.now += d - d / 10; /* waiting for the reader */
	}
	ck_assert_int_eq(w.a.kind, COPY_STREAM);
	ck_assert_uint_gt(stream, 19000);
}
END_TEST

START_TEST(one_preempted_window_is_not_a_move)
{
	struct writer w = { .now = 1000 };
	struct run r;

	drive(&w, &near, 3000, MSG, 0, -1, &r);
	uint16_t gap = w.a.gap;

	ck_assert_uint_gt(gap, COPY_ADAPT_GAP_MIN); /* backed off by now */
	/* one send 100x slower: its window's cost is clamped to 2x the average, which rises
	 * to 1.5x: neither the kind nor the probe schedule changes */
	drive(&w, &near, 3000, MSG, 0, 5, &r);
	ck_assert_int_eq(w.a.kind, COPY_CACHED);
	ck_assert_uint_le(r.calls[COPY_STREAM], 3 * PER_WIN);
}
END_TEST

START_TEST(small_chunks_and_fixed_kinds)
{
	struct copy_adapt a = { 0 };

	a.win_kind = COPY_STREAM;
	ck_assert_int_eq(copy_adapt_kind(&a, COPY_ADAPT_MIN - 1, -1), COPY_CACHED);
	ck_assert_int_eq(copy_adapt_kind(&a, COPY_ADAPT_MIN, -1), COPY_STREAM);
	ck_assert_int_eq(copy_adapt_kind(&a, COPY_ADAPT_MIN, COPY_CACHED), COPY_CACHED);
	a.win_kind = COPY_CACHED;
	ck_assert_int_eq(copy_adapt_kind(&a, MSG, COPY_STREAM), COPY_STREAM);
	ck_assert_int_eq(copy_adapt_kind(&a, COPY_ADAPT_MIN - 1, COPY_STREAM), COPY_CACHED);
	ck_assert_uint_eq(copy_adapt_window(64 * 1024), COPY_ADAPT_WINDOW_MIN);
	ck_assert_uint_eq(copy_adapt_window(4 * RING), 8 * 4 * RING);
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
	tcase_add_test(tc, close_costs_do_not_flip);
	tcase_add_test(tc, noisy_windows_do_not_raise_alarms);
	tcase_add_test(tc, idle_writer_is_not_measured);
	tcase_add_test(tc, event_loop_waiting_for_room_is_busy);
	tcase_add_test(tc, one_preempted_window_is_not_a_move);
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
