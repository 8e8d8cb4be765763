/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * How a writer stores into a peer's shared-memory ring: through its cache (memcpy) or
 * with non-temporal stores that send whole lines to memory.
 *
 * Which is faster depends on where the two CPUs sit, and on a VM that changes under us,
 * and on the ring and message sizes. When the host has put the two vCPUs on cores that
 * share no cache (bench/c2c: a cache-line round trip of ~340 ns instead of ~60), every
 * line memcpy stores must first be fetched back from the reader's cache: a 1 MiB ring
 * runs at ~2 GB/s with memcpy and ~8 with streaming stores. When the CPUs share a cache
 * it depends: 1 MiB ring, 128 KiB writes: memcpy 11-18 GB/s, streaming 7-8 (the reader
 * then reads the lines from memory instead of a cache); 64 KiB ring, 4 KiB writes:
 * memcpy ~7, streaming ~9.5. The writer's own copy time cannot tell: streaming stores
 * are cheap to issue and the reader pays for them later.
 *
 * So the writer measures the pipeline. Its sends are cut into windows of a few rings'
 * worth of bytes, each copied with one kind; a window in which the writer was busy
 * (inside send, or waiting for room after the ring filled) most of the time is paced by
 * the copies and the reader, and its wall time per byte is that kind's cost. Now and
 * then a window uses the other kind; a probe at least 10% faster (COPY_ADAPT_SWITCH_NUM/DEN)
 * takes over. Probes back off while they lose (COPY_ADAPT_GAP_MIN..MAX windows apart)
 * and come back soon when the current kind's cost rises (the host moved a vCPU).
 * Windows during which the application kept the writer idle measure the application,
 * not the copies, and are not counted. Pure logic on caller-supplied timings,
 * unit-tested in tests/unit/test_copy_adapt.c.
 */
#ifndef SMC_COPY_ADAPT_H
#define SMC_COPY_ADAPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Chunks below this size always go through the cache: a small message is read back at
 * once, from a cache if it is there. */
#define COPY_ADAPT_MIN        1024u
#define COPY_ADAPT_WINDOW_MIN (8u * 1024 * 1024) /* and at least 8 rings' worth */
#define COPY_ADAPT_GAP_MIN    4   /* windows between probes, right after a change */
#define COPY_ADAPT_GAP_MAX    64  /* ... at most, while the other kind keeps losing */

enum copy_store { COPY_CACHED = 0, COPY_STREAM = 1 };

/* Per writer (one connection's send side, under its tx lock). Zero-initialised = start
 * with memcpy, nothing measured. */
struct copy_adapt {
	uint64_t win_start;   /* ticks: when this window began */
	uint64_t win_busy;    /* ticks of it the writer spent sending or waiting for room */
	uint64_t win_bytes;   /* bytes sent in it */
	uint64_t last_exit;   /* ticks: when the last send returned */
	uint32_t cost[2];     /* ticks per KiB of busy windows, per kind; 0 = not measured */
	uint32_t best;        /* the current kind's lowest cost since it was chosen */
	uint16_t gap;         /* windows between probes now */
	uint16_t until_probe; /* busy windows of the current kind before the next probe */
	uint8_t kind;         /* enum copy_store: the chosen kind */
	uint8_t win_kind;     /* the kind this window copies with */
	uint8_t started;      /* 0: no window yet; 1: the first (the ring's first pass); 2 */
	bool ring_full;       /* the last send stopped at a full ring */
};

/* The store kind for a chunk of `len` bytes. `fixed` >= 0 forces that kind (SMC_COPY). */
enum copy_store copy_adapt_kind(const struct copy_adapt *a, size_t len, int fixed);

/* One send call: entered at t_in, returned at t_out (copy_adapt_ticks), moved `bytes`,
 * stopped at a full ring or not. `window`: the window size for this ring. Closes the
 * window when it is full, and chooses the next window's kind. */
void copy_adapt_sent(struct copy_adapt *a, uint64_t t_in, uint64_t t_out, size_t bytes,
		     bool ring_full, size_t window);

/* The window size for a ring of `ring_size` bytes. */
size_t copy_adapt_window(uint32_t ring_size);

/* A cheap monotonic tick counter (the TSC on x86-64, nanoseconds elsewhere). */
uint64_t copy_adapt_ticks(void);

#endif
