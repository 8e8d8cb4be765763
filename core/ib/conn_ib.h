/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The connection engine over the SMC-R transport (ib_link.h): what conn.c calls for a
 * connection whose c->ib is set (its transport.h operations, and what conn_down.c and
 * conn.c call to go back to TCP and to close), and the steps that set one up from the
 * CLC messages of its handshake (the exchange itself is core/negotiate/hs_ib.c's).
 *
 * Rings: the receive ring is the connection's RMB (the peer RDMA-WRITEs into it), the
 * send ring is the mirror of the peer's RMB (ib_link.h). conn.c copies in and out of
 * them exactly as it does for shared memory, at its own cursors, and hands every
 * cursor move to the transport (conn_transport_ib: its rx_published / tx_published).
 *
 * Control block: c->rx / c->tx point at a private struct shm_hdr (not shared with
 * anybody), so the sleeper counts and sequences of conn_prepare_sleep/conn_end_sleep
 * work unchanged; the transport's notify callback (progress thread) reads them and
 * rings this side's own bells. Its rx prod / tx cons fields count the transport's
 * RX / TX events: the epoll emulation's edge generations (wait.c) read them. Nothing
 * rings the peer's bells: the peer learns everything from the CDCs.
 *
 * Setup: from the peer's CLC parameters (RFC 7609 field meanings, ib_params_to_clc), a
 * link (new, first contact, or shared in a link group), a connection on it and its
 * RMB; installed as c's transport once the handshake succeeds.
 *
 * fork(): the child cannot use the parent's verbs objects (ib_lgr.h): its RDMA
 * connections are reset (ECONNRESET) there, the parent keeps them.
 */
#ifndef SMC_CONN_IB_H
#define SMC_CONN_IB_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/base/stats.h"
#include "core/wire/clc.h"
#include "core/wire/ib_proto.h"
#include "core/wire/ring.h"

struct smc_conn;
struct conn_ib;
struct ib_link;

/* ------------------------------------------------------------ data path (conn_data.c) */

/* The transport's operations (transport.h); set as c->tp with c->ib by the handshake. */
extern const struct conn_transport conn_transport_ib;

/* ------------------------------------------------------------ setup (hs_ib.c) */

/* SMC_TRANSPORT=ib asks for RDMA between same-host peers too. */
bool conn_ib_wanted(void);

/* The transport connection of one handshake, and the link reference it holds; zeroed
 * before the first step. */
struct conn_ib_setup {
	struct ib_link *link;
	bool first;               /* first contact: the link is new */
	struct conn_ib *ci;
	struct ib_link_params mine;
	struct ib_rmb_params rmb;
};

/* The decline reason (CLC_DECL_*) for an ib_* error. */
uint32_t conn_ib_diag_of(int rc);
/* Client, with the server's Accept acc and its credits: the link (new or shared), our
 * connection on it, the peer's RMB. 0 or a decline reason. */
uint32_t conn_ib_setup_client(struct smc_conn *c, const struct clc_msg *acc, uint8_t credits,
			      struct conn_ib_setup *s);
/* Server, with the client's SMC-R Proposal m: the link for its peer, our connection on
 * it. 0 or -errno (conn_ib_diag_of says which Decline). */
int conn_ib_setup_server(struct smc_conn *c, const struct clc_msg *m, struct conn_ib_setup *s);
/* Server: the client's Confirm completes the link (first contact) and names the
 * client's RMB. 0 or -errno (the client may already consider the connection upgraded). */
int conn_ib_setup_confirm(struct smc_conn *c, const struct clc_msg *conf, uint8_t credits,
			  struct conn_ib_setup *s);
/* Our Accept or Confirm (type) with the parameters of s. */
void conn_ib_setup_params(const struct conn_ib_setup *s, uint8_t type, struct clc_msg *m);
/* The handshake succeeded: c's transport is the connection of s (c->ib, c->tp), which s
 * no longer holds. */
void conn_ib_setup_install(struct smc_conn *c, struct conn_ib_setup *s);
/* Releases what s still holds: the link reference, and a connection not installed. */
void conn_ib_setup_end(struct conn_ib_setup *s);

#endif
