/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The same-host CLC exchange over the rendezvous socket:
 *
 *   client (progress thread)                      server (inside accept)
 *                               <-- connect --    to the client's 4-tuple name
 *   Proposal{tokens, RMB sizes, 4-tuple}  + [rx bell, tx bell]  -->
 *                  <--  Accept{token, both sizes} + [memfd, rx bell, tx bell]
 *   (client maps the RMBs, goes ACTIVE)
 *   Confirm{both tokens}                 -->      (server goes ACTIVE)
 *
 * Either side may answer with a Decline{reason} instead; both then stay plain TCP.
 * Before handing anything over, each side checks that the process on the other end of
 * the unix socket owns the other end of the TCP connection (rdv_peer_owns_tcp_peer),
 * and the server that the Proposal's 4-tuple is its accepted connection's. Every field
 * is validated.
 */
#ifndef SMC_HANDSHAKE_H
#define SMC_HANDSHAKE_H

#include "core/stats.h"

struct smc_conn;

/* Client side, on the progress thread, with ufd the accepted rendezvous socket. Leaves
 * the connection ACTIVE or FALLBACK (unless the application closed it meanwhile). */
void handshake_client(struct smc_conn *c, int ufd);

/* Server side. 0: c is ready to activate. Otherwise -errno and *why; -ECONNABORTED
 * means the client may already consider the connection upgraded, so the TCP connection
 * must be reset rather than used as plain TCP. */
int handshake_server(struct smc_conn *c, int ufd, enum smc_reason *why);

#endif
