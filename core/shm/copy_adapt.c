/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The store-kind chooser of copy_adapt.h. */
#include "core/shm/copy_adapt.h"

#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "core/base/clock.h"

/* A probe takes over when its window cost less than 9/10 of the current kind's: two
 * kinds within noise of each other do not flip back and forth. */
#define COPY_ADAPT_SWITCH_NUM 9
#define COPY_ADAPT_SWITCH_DEN 10
/* The current kind's average past this many times its best: the CPUs moved. */
#define COPY_ADAPT_MOVED 3
/* A window counts when the writer was busy for at least half of it. */
#define COPY_ADAPT_BUSY_NUM 1
#define COPY_ADAPT_BUSY_DEN 2

uint64_t copy_adapt_ticks(void)
{
#if defined(__x86_64__)
	return __rdtsc();
#else
	return clock_now_ns();
#endif
}

size_t copy_adapt_window(uint32_t ring_size)
{
	size_t w = 8 * (size_t)ring_size;

	return w > COPY_ADAPT_WINDOW_MIN ? w : COPY_ADAPT_WINDOW_MIN;
}

enum copy_store copy_adapt_kind(const struct copy_adapt *a, size_t len, int fixed)
{
	if (len < COPY_ADAPT_MIN)
		return COPY_CACHED;
	if (fixed >= 0)
		return fixed ? COPY_STREAM : COPY_CACHED;
	return (enum copy_store)a->win_kind;
}

static void probe_soon(struct copy_adapt *a)
{
	a->gap = COPY_ADAPT_GAP_MIN;
	if (a->until_probe > COPY_ADAPT_GAP_MIN)
		a->until_probe = COPY_ADAPT_GAP_MIN;
}

/* A busy window of `kind`: `elapsed` ticks for `bytes`. */
static void record(struct copy_adapt *a, enum copy_store kind, uint64_t bytes, uint64_t elapsed)
{
	uint64_t c64 = elapsed * 1024 / bytes;
	uint32_t c = c64 == 0 ? 1 : c64 > UINT32_MAX / 8 ? UINT32_MAX / 8 : (uint32_t)c64;
	uint32_t cur;

	if (kind == a->kind) {
		cur = a->cost[kind];
		/* one window during which we were preempted is not a slower kind: clamped
		 * to 2x, it alone cannot lift the average past 3x the best; a real move
		 * (memcpy 4-6x slower) does so in three windows. Not 2x: windows of one
		 * kind vary up to 2x here (1 MiB ring, 4 MiB writes: 140-320 ticks/KiB),
		 * and every false alarm costs a round of probes (5% at 2x) */
		if (cur && c > 2 * cur)
			c = 2 * cur;
		cur = cur ? (cur + c) / 2 : c;
		a->cost[kind] = cur;
		if (a->best == 0 || cur < a->best) {
			a->best = cur;
		} else if (cur > COPY_ADAPT_MOVED * a->best) {
			/* much slower than it was: the CPUs moved; see whether the other
			 * kind is better now, and measure "best" afresh from here */
			a->best = cur;
			probe_soon(a);
		}
		return;
	}
	/* a probe: rare, and what it measures may be new: its sample stands alone */
	a->cost[kind] = c;
	cur = a->cost[a->kind];
	if (cur && (uint64_t)c * COPY_ADAPT_SWITCH_DEN < (uint64_t)cur * COPY_ADAPT_SWITCH_NUM) {
		a->kind = (uint8_t)kind;
		a->best = c;
		a->gap = a->until_probe = COPY_ADAPT_GAP_MIN;
		return;
	}
	a->gap = a->gap >= COPY_ADAPT_GAP_MAX / 2 ? COPY_ADAPT_GAP_MAX : (uint16_t)(2 * a->gap);
	a->until_probe = a->gap;
}

static void window_end(struct copy_adapt *a, uint64_t elapsed)
{
	bool busy = a->win_busy * COPY_ADAPT_BUSY_DEN >= elapsed * COPY_ADAPT_BUSY_NUM;
	bool probe = a->win_kind != a->kind;

	if (!busy || a->started == 1) {
		/* the application's pace, not the copies' (or the ring's first pass, which
		 * also faults its pages in): not counted; a probe is tried again later */
		if (probe)
			a->until_probe = a->gap;
		a->win_kind = a->kind;
		return;
	}
	record(a, (enum copy_store)a->win_kind, a->win_bytes, elapsed);
	if (a->until_probe == 0) {
		a->win_kind = a->kind == COPY_CACHED ? COPY_STREAM : COPY_CACHED;
		a->until_probe = a->gap; /* record() sets the next gap from its result */
	} else {
		a->until_probe--;
		a->win_kind = a->kind;
	}
}

void copy_adapt_sent(struct copy_adapt *a, uint64_t t_in, uint64_t t_out, size_t bytes,
		     bool ring_full, size_t window)
{
	if (t_out < t_in)
		t_out = t_in;
	if (!a->started) {
		a->started = 1;
		a->win_start = t_in;
		a->win_busy = a->win_bytes = 0;
		a->gap = a->until_probe = COPY_ADAPT_GAP_MIN;
		a->win_kind = a->kind;
	} else if (a->ring_full && t_in > a->last_exit) {
		/* an event loop that was told "full" waited for room until this call */
		a->win_busy += t_in - a->last_exit;
	}
	a->win_busy += t_out - t_in;
	a->win_bytes += bytes;
	a->last_exit = t_out;
	a->ring_full = ring_full;
	if (a->win_bytes < window)
		return;
	window_end(a, t_out - a->win_start);
	if (a->started < 2)
		a->started = 2;
	a->win_start = t_out;
	a->win_busy = a->win_bytes = 0;
}
