/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Doorbells: the eventfds a connection's sleepers wait on (conn.h rx_bell, tx_bell) and
 * a peer's, reached through its descriptors (peer_rx_bell, peer_tx_bell). Every bell of
 * the library is rung and emptied here, so that the wakeups sent to peers are counted in
 * one place (stats "wakeups_sent"); waking the process's own sleepers costs the same
 * write but is not a wakeup sent.
 */
#ifndef SMC_BELL_H
#define SMC_BELL_H

#include <stdint.h>

#include "core/base/real.h"
#include "core/base/stats.h"

/* Wake this process's own sleepers on fd (none if fd < 0). EAGAIN means the counter is
 * saturated: the bell already rings. */
static inline void bell_ring(int fd)
{
	uint64_t one = 1;

	if (fd >= 0)
		(void)!REAL(write)(fd, &one, sizeof(one));
}

/* Wake a peer's sleepers through its bell, and count it. */
static inline void bell_ring_peer(int fd)
{
	if (fd < 0)
		return;
	bell_ring(fd);
	stats_count_wakeup();
}

/* Empty a bell this process sleeps on (nonblocking eventfd: nothing to read is fine). */
static inline void bell_drain(int fd)
{
	uint64_t v;

	if (fd >= 0)
		(void)!REAL(read)(fd, &v, sizeof(v));
}

#endif
