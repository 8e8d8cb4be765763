/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The handshakes' side of a connection's life (hs_conn.h). */
#include "core/negotiate/hs_conn.h"

#include "core/conn/conn.h"
#include "core/negotiate/hs_history.h"
#include "core/negotiate/hs_policy.h"
#include "core/negotiate/progress.h"

static void first_closed(uint64_t key, uint64_t lifetime_ns, uint64_t bytes, uint32_t exchanges,
			 uint64_t now_ns, uint64_t short_ns)
{
	hs_history_closed(key, hs_policy_short(lifetime_ns, bytes, exchanges, short_ns),
			  now_ns, short_ns);
}

static const struct conn_negotiate_ops hs_conn_ops = {
	.staging_full = progress_watch_staging_full,
	.decided = progress_watch_decided,
	.flow_refuse = progress_flow_refuse,
	.policy_closed = hs_policy_closed,
	.first_closed = first_closed,
};

void hs_conn_ops_install(void)
{
	conn_negotiate_ops_set(&hs_conn_ops);
}
