/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef SMC_INIT_H
#define SMC_INIT_H
#include <stdbool.h>
/* Loads configuration, logging, stats-at-exit and fork handlers; idempotent, thread safe,
 * cheap after the first call. A process that never creates a TCP socket starts no
 * thread and maps nothing. */
void smc_init(void);
/* False when SMC_TRANSPORT=tcp or the library is otherwise inert (no upgrade attempted). */
bool smc_enabled(void);
#endif
