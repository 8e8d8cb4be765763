/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* May this socket be upgraded: see upgrade_rule.h. */
#include "core/epoll_track.h"
#include "core/fdtab.h"
#include "core/io_uring_watch.h"
#include "core/upgrade_rule.h"

enum smc_reason upgrade_rule(int fd)
{
	if (io_uring_in_use())
		return SMC_REASON_IO_URING;
	if (fdtab_flags(fd) & FDF_TCP_ONLY)
		return SMC_REASON_SOCKOPT;
	return epoll_track_check(fd);
}
