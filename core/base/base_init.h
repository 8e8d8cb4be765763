/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The base's own start: the real libc symbols, the clock, the configuration and the log,
 * libevent, the library's descriptors and the stats at exit. The library's constructor
 * (smc_init, core/sock/init.h) runs it first; code below sock/ that needs the
 * configuration loaded on a path of its own (tcpopt.c's map, found through
 * smc_cfg.bpf_dir and smc_cfg.rdv_dir) calls it too.
 */
#ifndef SMC_BASE_INIT_H
#define SMC_BASE_INIT_H

/* Idempotent, thread safe, cheap after the first call. */
void base_init(void);

#endif
