/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's one clock: CLOCK_MONOTONIC, so timeouts, ages and spin budgets never jump
 * with the wall clock (the kernel's TCP timers run on jiffies for the same reason). Inline
 * because the spin loops read it every round (a vDSO call, about 20 ns here).
 *
 * It is read straight from the kernel's vDSO, never through the C library's
 * clock_gettime: another preloaded library may replace that one (libfaketime with a
 * frozen clock stops CLOCK_MONOTONIC too), and then no deadline of ours would ever pass
 * (an exit waiting for its peer to read, bounded at 2 s, waited for ever). The kernel's
 * own timeouts (poll, epoll_wait) are not faked, and neither are ours.
 */
#ifndef SMC_CLOCK_H
#define SMC_CLOCK_H

#include <stdint.h>
#include <time.h>

typedef int (*clock_read_fn)(clockid_t id, struct timespec *ts);

/* The vDSO's clock_gettime, else a direct system call; set by clock_resolve. */
extern clock_read_fn clock_read;
clock_read_fn clock_resolve(void);

static inline uint64_t clock_now_ns(void)
{
	clock_read_fn f = __atomic_load_n(&clock_read, __ATOMIC_RELAXED);
	struct timespec ts;

	if (__builtin_expect(!f, 0))
		f = clock_resolve();
	f(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_now_us(void)
{
	return clock_now_ns() / 1000u;
}

static inline uint64_t clock_now_ms(void)
{
	return clock_now_ns() / 1000000u;
}

#endif
