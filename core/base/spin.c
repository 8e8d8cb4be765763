/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
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

uint64_t spin_budget(void)
{
	if (!spin_scored) {
		spin_scored = true;
		spin_score = SPIN_SCORE_MAX; /* start by spinning */
	}
	if (spin_score < SPIN_SCORE_MAX / 2 && ++spin_waits % SPIN_PROBE_EVERY != 0)
		return 0;
	return spin_ns();
}

void spin_outcome(bool caught, uint64_t spun_ns)
{
	bool paid = caught && spun_ns <= SPIN_PAYS_NS;

	spin_score = spin_score - spin_score / 4 + (paid ? SPIN_SCORE_MAX / 4 : 0);
}

void spin_yield(void)
{
	sandbox_yield();
}
