/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The store-kind chooser of copy_adapt.h. */
#include "core/copy_adapt.h"

#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* Streaming stores are chosen when memcpy costs the writer more than this many times
 * what they cost it. The writer's clock sees only its own side: streaming stores are
 * cheap to issue (50-150 ticks per KiB here, wherever the reader is) but leave the
 * lines in memory, so the reader pays a memory read for each (~400 ticks per KiB) where
 * after memcpy it would have found them in a cache. memcpy costs the writer 240-350 ticks
 * per KiB when the CPUs share a cache (ratio 2-6: memcpy's pipeline is faster, 11-18
 * GB/s against 7-8) and 990-1550 when they do not (ratio 8-19: streaming is 3-5x
 * faster). Measured with bench/msgsize at 16 KiB-1 MiB writes, 1 MiB RMB. */
#define COPY_ADAPT_STREAM_RATIO 7

uint64_t copy_adapt_ticks(void)
{
#if defined(__x86_64__)
	return __rdtsc();
#else
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

enum copy_store copy_adapt_pick(struct copy_adapt *a, size_t len, int fixed, bool *timed)
{
	*timed = false;
	if (len < COPY_ADAPT_MIN)
		return COPY_CACHED;
	if (fixed >= 0)
		return fixed ? COPY_STREAM : COPY_CACHED;
	if (a->gap == 0)
		a->gap = a->until_probe = COPY_ADAPT_GAP_MIN;
	if (a->until_probe == 0) {
		a->until_probe = a->gap; /* copy_adapt_record sets the next gap */
		*timed = true;
		return a->kind == COPY_CACHED ? COPY_STREAM : COPY_CACHED;
	}
	a->until_probe--;
	if (++a->tick >= COPY_ADAPT_TIME_EVERY) {
		a->tick = 0;
		*timed = true;
	}
	return (enum copy_store)a->kind;
}

static void probe_again_soon(struct copy_adapt *a)
{
	a->gap = COPY_ADAPT_GAP_MIN;
	if (a->until_probe > COPY_ADAPT_GAP_MIN)
		a->until_probe = COPY_ADAPT_GAP_MIN;
}

static bool want_stream(const struct copy_adapt *a)
{
	return (uint64_t)a->cost[COPY_CACHED] >
	       (uint64_t)a->cost[COPY_STREAM] * COPY_ADAPT_STREAM_RATIO;
}

void copy_adapt_record(struct copy_adapt *a, enum copy_store kind, size_t len, uint64_t ticks)
{
	uint64_t c64;
	uint32_t c, cur, other;
	bool moved;

	if (len == 0 || (unsigned)kind > COPY_STREAM)
		return;
	c64 = ticks * 1024 / len;
	c = c64 == 0 ? 1 : c64 > UINT32_MAX / 8 ? UINT32_MAX / 8 : (uint32_t)c64;
	if (a->gap == 0)
		a->gap = a->until_probe = COPY_ADAPT_GAP_MIN;
	if (kind == a->kind) {
		cur = a->cost[kind];
		/* one chunk during which we were preempted must not look like a slow kind */
		if (cur && c > 4 * cur)
			c = 4 * cur;
		cur = cur ? (3 * cur + c) / 4 : c;
		a->cost[kind] = cur;
		if (a->best == 0 || cur < a->best) {
			a->best = cur;
		} else if (cur > 2 * a->best) {
			/* much slower than it was: the CPUs moved; see whether the other
			 * kind is better now, and measure "best" afresh from here */
			a->best = cur;
			probe_again_soon(a);
		}
		return;
	}
	/* a probe: half its sample, half what the kind cost before */
	other = a->cost[kind];
	moved = other && (c > 2 * other || 2 * c < other);
	other = other ? (other + c) / 2 : c;
	a->cost[kind] = other;
	cur = a->cost[a->kind];
	if (cur && want_stream(a) != (a->kind == COPY_STREAM)) {
		a->kind = (uint8_t)kind;
		a->best = other;
		a->gap = a->until_probe = COPY_ADAPT_GAP_MIN;
		return;
	}
	/* the other kind still loses: look less often, unless its cost just changed a
	 * lot (the CPUs moved), when the next probe settles it soon */
	if (moved)
		a->gap = COPY_ADAPT_GAP_MIN;
	else
		a->gap = a->gap >= COPY_ADAPT_GAP_MAX / 2 ? COPY_ADAPT_GAP_MAX
							   : (uint16_t)(2 * a->gap);
	a->until_probe = a->gap;
}
