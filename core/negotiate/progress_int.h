/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What the handshakes' files on the progress thread share (progress_client.c,
 * progress_server.c, progress_ib.c; the thread itself is core/base/progress_ev.h). Not
 * for the rest of the library, which goes through progress.h.
 */
#ifndef SMC_PROGRESS_INT_H
#define SMC_PROGRESS_INT_H

#include <event2/event.h>
#include <stdint.h>

#include "core/base/progress_ev.h"
#include "core/conn/conn.h"

/* In band: deadline ticks (SMC_HANDSHAKE_TIMEOUT_MS each) a Proposal waits for its
 * answer, and a server for its client's CLC message. */
#define PROGRESS_INBAND_ANSWER_TICKS 10u

static inline void progress_hs_watch_set(struct smc_conn *c, enum conn_hs_watch w)
{
	__atomic_store_n(&c->hs_watch, (uint8_t)w, __ATOMIC_RELEASE);
}

#endif
