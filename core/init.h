/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef SMC_INIT_H
#define SMC_INIT_H
#include <stdbool.h>
/* Loads configuration, logging, stats-at-exit and fork handlers; idempotent, thread safe,
 * cheap after the first call. A process that never creates a TCP socket starts no
 * thread and maps nothing. */
void smc_init(void);
/* True when connections may be upgraded to shared memory (SMC_TRANSPORT auto or shm). */
bool smc_enabled(void);
#endif
