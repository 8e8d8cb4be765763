/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The description of the connections carried across exec (exec_carry.c): a sealed
 * memfd the new image inherits, named by SMC_EXEC_STATE in its environment, holding
 * this header and `count` records (struct conn_carry, conn_carry.h).
 */
#ifndef SMC_EXEC_CARRY_H
#define SMC_EXEC_CARRY_H

#include <stdint.h>

#include "core/base/stats.h"

#define CARRY_ENV "SMC_EXEC_STATE"
#define CARRY_MAGIC 0x45434d53u /* "SMCE" */
/* The layout of the description and of struct conn_carry: only the same build of the
 * library reads it (exec_image.c checks that the new image preloads our very file). */
#define CARRY_VERSION 1
#define CARRY_MAX 65536u

struct carry_hdr {
	uint32_t magic, version;
	int32_t pid;       /* the process it was written in and for (exec keeps the pid) */
	uint32_t count;
	uint32_t rec_size, stats_size; /* sizeof(struct conn_carry), of the snapshot */
	struct smc_stats_snapshot stats; /* the process's counts before the exec */
};

#endif
