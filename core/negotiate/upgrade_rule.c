/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* May this socket be upgraded: see upgrade_rule.h. */
#include "core/base/fdtab.h"
#include "core/base/io_uring_watch.h"
#include "core/negotiate/upgrade_rule.h"
#include "core/readiness/epoll_track.h"

enum smc_reason upgrade_rule(int fd)
{
	if (io_uring_in_use())
		return SMC_REASON_IO_URING;
	if (fdtab_flags(fd) & FDF_TCP_ONLY)
		return SMC_REASON_SOCKOPT;
	return epoll_track_check(fd);
}
