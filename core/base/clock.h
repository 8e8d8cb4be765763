/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's one clock: CLOCK_MONOTONIC, so timeouts, ages and spin budgets never jump
 * with the wall clock (the kernel's TCP timers run on jiffies for the same reason). Inline
 * because the spin loops read it every round (a vDSO call, about 20 ns here).
 */
#ifndef SMC_CLOCK_H
#define SMC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
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
