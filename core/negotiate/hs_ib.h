/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R's CLC exchange, which sets up a connection over RDMA (core/ib/conn_ib.h).
 *
 * Same host, SMC_TRANSPORT=ib, over the rendezvous socket when there is no TCP option;
 * and in-band over the TCP connection when both sent the option (negotiate.h, across
 * hosts or with SMC_TRANSPORT=ib): SMC-R v1 Proposal (our peer id, GID, MAC) -> Accept
 * (+ "CRD"+n) -> Confirm (+ "CRD"+n), RFC 7609 field meanings (ib_params_to_clc). A
 * side without a usable RDMA device declines with CLC_DECL_NOSMCRDEV and both stay TCP.
 */
#ifndef SMC_HS_IB_H
#define SMC_HS_IB_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/stats.h"
#include "core/wire/clc.h"

struct smc_conn;

/* Client, progress thread, same-host rendezvous socket ufd: the whole SMC-R exchange.
 * Leaves c ACTIVE (over RDMA) or FALLBACK. */
int hs_ib_client_rdv(struct smc_conn *c, int ufd);
/* Server, inside accept(): the client's SMC-R Proposal m arrived on rendezvous socket
 * ufd. 0: c is ready to activate; -errno and *why otherwise (-ECONNABORTED: reset the
 * TCP connection, the client may consider it upgraded). */
int hs_ib_server_rdv(struct smc_conn *c, int ufd, const struct clc_msg *m, enum smc_reason *why);

/* In-band over the TCP connection itself (negotiate.h: both sent the SMC option; across
 * hosts, or SMC_TRANSPORT=ib on one host), the same steps, SMC-R messages only. */
/* Our SMC-R identity for a Proposal (starts the progress thread's RDMA watches first).
 * 0, or -ENODEV / -errno: do not offer SMC-R. */
int hs_ib_local_offer(struct clc_smcr_local *lcl);
/* Client, progress thread: the server's Accept and credits extension (buf[0..len), as
 * neg_client_answer returned them) -> Confirm on c->fd and ACTIVE, or a Decline and
 * FALLBACK. -errno when the Accept is malformed: the caller resets the connection. */
int hs_ib_client_inband(struct smc_conn *c, const uint8_t *buf, size_t len);
/* Server, inside accept(): the client's SMC-R Proposal m (read by neg_server_read_offer)
 * -> Accept on c->fd, then the Confirm (bounded by SMC_HANDSHAKE_TIMEOUT_MS). Results as
 * hs_ib_server_rdv; a Decline has been sent on c->fd for -ECONNREFUSED. */
int hs_ib_server_inband(struct smc_conn *c, const struct clc_msg *m, enum smc_reason *why);

#endif
