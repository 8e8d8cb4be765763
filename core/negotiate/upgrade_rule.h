/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * May this socket become an SMC connection? The one place that says so, asked by
 * connect() before anything of the handshake starts (the socket is still plain TCP
 * and a "no" costs nothing). The rule, also in libsmc_preload(7) under "readiness":
 *
 *   Everything that watches the socket for readiness must see the connection's
 *   readiness after the upgrade, which the kernel can no longer compute (the payload
 *   goes through the rings). poll() and select() name the fd on every call and find
 *   it upgraded; an epoll registration made through the library before connect() is
 *   moved into the emulation with its events, data and one-shot state (epoll_track.h).
 *   A registration that cannot be moved exactly keeps the socket TCP, reason
 *   `readiness`: one in a set shared with another process (made before a fork), one
 *   made through a dup of the socket, one the library failed to record, a one-shot one
 *   whose state the kernel does not show (no /proc).
 *
 *   Nothing may reach the socket behind the library's back: a process that uses
 *   io_uring (io_uring_watch.h) keeps every new connection TCP, reason `io-uring`.
 *   The server side applies the same where it accepts (sock.c, accept_io_uring).
 *
 *   The library's own descriptors never crowd the program's RLIMIT_NOFILE: that one
 *   depends on the way the connection would be carried (a pool slot costs none, a
 *   handshake several), so connect() asks fd_budget_allows() on each way it tries
 *   (fd_budget.h, reason `fd-limit`).
 */
#ifndef SMC_UPGRADE_RULE_H
#define SMC_UPGRADE_RULE_H

#include "core/base/stats.h"

/* SMC_REASON_NONE when fd (FD_TCP, about to connect) may be upgraded, else why not. */
enum smc_reason upgrade_rule(int fd);

#endif
