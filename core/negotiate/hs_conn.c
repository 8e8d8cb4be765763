/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The handshakes' side of a connection's life (hs_conn.h). */
#include "core/negotiate/hs_conn.h"

#include "core/conn/conn.h"
#include "core/negotiate/hs_policy.h"
#include "core/negotiate/progress.h"

static const struct conn_negotiate_ops hs_conn_ops = {
	.staging_full = progress_watch_staging_full,
	.decided = progress_watch_decided,
	.flow_refuse = progress_flow_refuse,
	.policy_closed = hs_policy_closed,
};

void hs_conn_ops_install(void)
{
	conn_negotiate_ops_set(&hs_conn_ops);
}
