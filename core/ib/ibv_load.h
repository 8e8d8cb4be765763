/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libibverbs, loaded on first use (see ibv_load.c): the library is not linked with it.
 * The ibv_* functions the SMC-R code calls are defined in ibv_load.c (hidden) and
 * forward to libibverbs.so.1 once ibv_load() has loaded it.
 */
#ifndef SMC_IBV_LOAD_H
#define SMC_IBV_LOAD_H

#include <stdbool.h>

/*
 * Loads libibverbs.so.1 and resolves every function the library uses, once per process
 * (later calls return the first result). false: no libibverbs, or one without a symbol
 * at the version we were built against; RDMA is then unavailable, as with no device
 * (logged at debug level). Device discovery calls it before any other verb. While
 * sysfs shows no RDMA device on the host it loads nothing and returns false (looked at
 * again at most once a second: a device added later is found).
 */
bool ibv_load(void);
/* The same, whatever sysfs shows (the unit test of the symbols). */
bool ibv_load_always(void);

#endif
