/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Spinning before a sleep: a waiter for the peer's answer (a blocking read or write,
 * poll/select, epoll_wait) looks again for up to SMC_SPIN_US before it sleeps, since a
 * sleep and its wakeup cost more than a ping-pong's answer takes. The budget adapts per
 * thread to whether its spins paid (spin.c); each wait loop (conn_wait.c, wait.c,
 * epoll.c) spins with these.
 */
#ifndef SMC_SPIN_H
#define SMC_SPIN_H

#include <stdbool.h>
#include <stdint.h>

/* Spin bound in ns (SMC_SPIN_US), 0 when spinning is off. */
uint64_t spin_ns(void);
/* The spin this thread should make now: the bound, or 0 while its recent spins did
 * not pay (they ended in a sleep anyway, or caught their event only after
 * longer than a sleep costs); then one wait in 16 spins again to see whether it pays. */
uint64_t spin_budget(void);
/* After a spin of spin_budget(): whether it caught what it waited for, after how
 * long. */
void spin_outcome(bool caught, uint64_t spun_ns);
/* A short pause inside a spin loop (the CPU's pause instruction); inline, as the
 * spin loops run it every round. */
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
/* Every few spin rounds: give the CPU away. With more runnable threads than cores (two
 * spinning ends plus anything else) the peer we wait for may need our core to answer. */
void spin_yield(void);

#endif
