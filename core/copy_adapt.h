/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * How a writer stores into a peer's shared-memory ring: through its cache (memcpy) or
 * with non-temporal stores that send whole lines to memory.
 *
 * Which is faster depends on where the two CPUs sit, and on a VM that changes under us.
 * When writer and reader share a cache, memcpy wins (measured here: 9-18 GB/s against
 * 4-7.5 for streaming stores). When the host has put the two vCPUs on cores that share
 * no cache (bench/c2c: a cache-line round trip of ~340 ns instead of ~60), every line the
 * writer stores must first be fetched back from the reader's cache and memcpy falls to
 * 1.7-2.5 GB/s, while streaming stores, which fetch nothing, keep 7.9-8.6.
 *
 * So the writer times some of its copies (ticks per KiB), keeps an average per store
 * kind, and now and then copies one chunk the other way to compare; it streams while
 * memcpy costs it several times what streaming stores do (copy_adapt.c says why a
 * ratio and which). Probes back off while the verdict stands (COPY_ADAPT_GAP_MIN..MAX
 * chunks apart) and come back quickly when a kind's cost changes a lot (the host moved
 * a vCPU).
 * Pure logic on caller-supplied timings, unit-tested in tests/unit/test_copy_adapt.c.
 */
#ifndef SMC_COPY_ADAPT_H
#define SMC_COPY_ADAPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Chunks below this size are always copied through the cache and never timed: a small
 * message's lines are read back while still in a shared cache, and two clock reads
 * would be a visible part of its cost. */
#define COPY_ADAPT_MIN       (8u * 1024)
#define COPY_ADAPT_TIME_EVERY 4    /* time one chunk in this many of the current kind */
#define COPY_ADAPT_GAP_MIN   16    /* chunks between probes, right after a change */
#define COPY_ADAPT_GAP_MAX   1024  /* ... at most, while the other kind keeps losing */

enum copy_store { COPY_CACHED = 0, COPY_STREAM = 1 };

/* Per writer (one connection's send side, under its tx lock). Zero-initialised = start
 * with memcpy, nothing measured. */
struct copy_adapt {
	uint32_t cost[2];     /* average ticks per KiB of each kind; 0 = not measured */
	uint32_t best;        /* the current kind's lowest average since it was chosen */
	uint16_t gap;         /* chunks between probes now */
	uint16_t until_probe; /* chunks of the current kind before the next probe */
	uint8_t kind;         /* enum copy_store in use */
	uint8_t tick;         /* chunks since the last timed one */
};

/* The store kind for the next chunk of `len` bytes, and whether to time it (then pass
 * the ticks to copy_adapt_record). `fixed` >= 0 forces that kind (SMC_COPY). */
enum copy_store copy_adapt_pick(struct copy_adapt *a, size_t len, int fixed, bool *timed);

/* A timed chunk: `len` bytes stored with `kind` in `ticks` (copy_adapt_ticks units). */
void copy_adapt_record(struct copy_adapt *a, enum copy_store kind, size_t len, uint64_t ticks);

/* A cheap monotonic tick counter (the TSC on x86-64, nanoseconds elsewhere). */
uint64_t copy_adapt_ticks(void);

#endif
