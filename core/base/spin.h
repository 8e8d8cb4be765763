/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Spinning before a sleep: a waiter for the peer's answer (a blocking read or write,
 * poll/select, epoll_wait) looks again for up to SMC_SPIN_US before it sleeps, since a
 * sleep and its wakeup cost more than a ping-pong's answer takes. The budget adapts per
 * thread to whether its spins paid (spin.c). Every wait loop (conn_wait.c, wait.c,
 * epoll.c) spins through spin_run, with one cadence.
 */
#ifndef SMC_SPIN_H
#define SMC_SPIN_H

#include <stdbool.h>
#include <stdint.h>

/* Spin bound in ns (SMC_SPIN_US), 0 when spinning is off. */
uint64_t spin_ns(void);
/*
 * The spin of a wait: look(arg, n) is called every few pauses, with n counting its calls
 * from 1, until it returns non-zero, the thread's spin budget (spin_budget) runs out or
 * deadline (clock_now_ns; UINT64_MAX for none) passes. Returns what look returned, or 0
 * when nothing came (the caller sleeps). The budget is the bound, or 0 while this
 * thread's recent spins did not pay (they ended in a sleep anyway, or caught their event
 * only after longer than a sleep costs); then one wait in 16 spins again to see whether
 * it pays. look returns > 0 for "caught", < 0 for an error that ends the wait.
 */
int spin_run(int (*look)(void *arg, unsigned n), void *arg, uint64_t deadline);
/* A short pause (the CPU's pause instruction). */
static inline void spin_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#endif
