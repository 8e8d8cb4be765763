/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/sandbox.h"
#include "core/base/spin.h"

uint64_t spin_ns(void)
{
	return (uint64_t)smc_cfg.spin_us * 1000ull;
}

/* How often this thread's recent spins paid: a moving average, 0..SPIN_SCORE_MAX,
 * each spin weighing a quarter. A spin pays when it caught what it waited for within
 * SPIN_PAYS_NS, about what a sleep and its wakeup cost (a ping-pong answered in a
 * few microseconds); a longer spin costs more CPU than the sleep it avoided, and with
 * more runnable threads than cores (a connect-per-request client and its server on two
 * cores) it takes that CPU from the peer it waits for. Below half the thread stops
 * spinning, except one wait in SPIN_PROBE_EVERY, which finds out whether spinning
 * pays again. */
#define SPIN_SCORE_MAX 256u
#define SPIN_PROBE_EVERY 16u
#define SPIN_PAYS_NS 5000u
static __thread unsigned spin_score __attribute__((tls_model("initial-exec")));
static __thread unsigned spin_waits __attribute__((tls_model("initial-exec")));
static __thread bool spin_scored __attribute__((tls_model("initial-exec")));

static uint64_t spin_budget(void)
{
	if (!spin_scored) {
		spin_scored = true;
		spin_score = SPIN_SCORE_MAX; /* start by spinning */
	}
	if (spin_score < SPIN_SCORE_MAX / 2 && ++spin_waits % SPIN_PROBE_EVERY != 0)
		return 0;
	return spin_ns();
}

static void spin_outcome(bool caught, uint64_t spun_ns)
{
	bool paid = caught && spun_ns <= SPIN_PAYS_NS;

	spin_score = spin_score - spin_score / 4 + (paid ? SPIN_SCORE_MAX / 4 : 0);
}

/* Pauses between two looks: a look every 8 (~0.2 us on the project's EPYC VM) answers a
 * ping-pong sooner than one every 64 (1.5 us): sockperf pp 14 B p50 0.86-1.17 us -> 0.57,
 * p99 1.7-28 -> 0.7 (alternated runs). */
#define SPIN_PAUSES_PER_LOOK 8u
/* Looks between two yields (~12 us): with more runnable threads than cores (two spinning
 * ends plus anything else) the peer we wait for may need our core to answer. */
#define SPIN_LOOKS_PER_YIELD 64u

int spin_run(int (*look)(void *arg, unsigned n), void *arg, uint64_t deadline)
{
	uint64_t budget = spin_budget(), start, end;
	unsigned n = 0;

	/* no pause before the sleep when spinning is off: one round of 64 pauses (23 ns each
	 * on the project's EPYC VM) paid by every wait whose spin the budget turned off cost
	 * the crr server 18.7 -> 16.7 us of CPU per cycle, 33.5k -> 37k cycles/s */
	if (budget == 0)
		return 0;
	start = clock_now_ns();
	end = deadline < start + budget ? deadline : start + budget;
	for (;;) {
		int r;

		for (unsigned i = 0; i < SPIN_PAUSES_PER_LOOK; i++)
			spin_cpu_relax();
		r = look(arg, ++n);
		if (r != 0) {
			spin_outcome(r > 0, clock_now_ns() - start);
			return r;
		}
		if (clock_now_ns() >= end)
			break;
		if (n % SPIN_LOOKS_PER_YIELD == 0)
			sandbox_yield();
	}
	spin_outcome(false, budget);
	return 0;
}
