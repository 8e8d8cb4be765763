/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The connection engine over the SMC-R transport (ib_link.h): what conn.c calls for a
 * connection whose c->ib is set (its transport.h operations, and what conn_down.c and
 * conn.c call to go back to TCP and to close), and the CLC exchange that sets it up.
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
 * Handshake (same host, SMC_TRANSPORT=ib, over the rendezvous socket when there is no
 * TCP option; and in-band over the TCP connection when both sent the option,
 * negotiate.h, across hosts or with SMC_TRANSPORT=ib): SMC-R v1 Proposal (our peer id, GID,
 * MAC) -> Accept (+ "CRD"+n) -> Confirm (+ "CRD"+n), RFC 7609 field meanings
 * (ib_params_to_clc). A side without a usable RDMA device declines with
 * CLC_DECL_NOSMCRDEV and both stay TCP.
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
#include "core/wire/ring.h"

struct smc_conn;
struct conn_ib;
struct ib_link;

/* ------------------------------------------------------------ data path (conn_data.c) */

/* The transport's operations (transport.h); set as c->tp with c->ib by the handshake. */
extern const struct conn_transport conn_transport_ib;

/* ------------------------------------------------------------ handshake */

/* SMC_TRANSPORT=ib asks for RDMA between same-host peers too. */
bool conn_ib_wanted(void);
/* Client, progress thread, same-host rendezvous socket ufd: the whole SMC-R exchange.
 * Leaves c ACTIVE (over RDMA) or FALLBACK. */
int conn_ib_client_rdv(struct smc_conn *c, int ufd);
/* Server, inside accept(): the client's SMC-R Proposal m arrived on rendezvous socket
 * ufd. 0: c is ready to activate; -errno and *why otherwise (-ECONNABORTED: reset the
 * TCP connection, the client may consider it upgraded). */
int conn_ib_server_rdv(struct smc_conn *c, int ufd, const struct clc_msg *m,
		       enum smc_reason *why);

/* In-band over the TCP connection itself (negotiate.h: both sent the SMC option; across
 * hosts, or SMC_TRANSPORT=ib on one host), the same steps, SMC-R messages only. */
/* Our SMC-R identity for a Proposal (starts the progress thread's RDMA watches first).
 * 0, or -ENODEV / -errno: do not offer SMC-R. */
int conn_ib_local_offer(struct clc_smcr_local *lcl);
/* Client, progress thread: the server's Accept and credits extension (buf[0..len), as
 * neg_client_answer returned them) -> Confirm on c->fd and ACTIVE, or a Decline and
 * FALLBACK. -errno when the Accept is malformed: the caller resets the connection. */
int conn_ib_client_inband(struct smc_conn *c, const uint8_t *buf, size_t len);
/* Server, inside accept(): the client's SMC-R Proposal m (read by neg_server_read_offer)
 * -> Accept on c->fd, then the Confirm (bounded by SMC_HANDSHAKE_TIMEOUT_MS). Results as
 * conn_ib_server_rdv; a Decline has been sent on c->fd for -ECONNREFUSED. */
int conn_ib_server_inband(struct smc_conn *c, const struct clc_msg *m, enum smc_reason *why);

#endif
