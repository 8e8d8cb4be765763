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
 *
 * Who is on the other end of the unix socket:
 *  - same-host rendezvous (abstract 4-tuple names, no TCP option): before handing
 *    anything over, each side checks that the process on the other end owns the other
 *    end of the TCP connection (rdv_peer_owns_tcp_peer, sock_diag: one network
 *    namespace; the server right after its connect, before it reads anything), and
 *    the server that the Proposal's 4-tuple is its accepted connection's;
 *  - in-band negotiation (TCP option, struct hs_auth by_key): the client named its
 *    rendezvous socket and a secret key in the TCP Proposal, which only the TCP peer
 *    read. The server connects to that name (a socket nobody else can bind or replace,
 *    see rdv_token_listen) and proves itself by echoing the key in its Accept; the
 *    client hands nothing over before that proof: its Proposal carries no descriptor,
 *    its doorbells travel with the Confirm. Addresses are not compared (NAT between
 *    containers changes them). Works across network namespaces.
 * Every field is validated.
 */
#ifndef SMC_HANDSHAKE_H
#define SMC_HANDSHAKE_H

#include "core/stats.h"

#include <stdbool.h>
#include <stdint.h>

struct smc_conn;

struct hs_auth {
	bool by_key;  /* in-band negotiation: the key authenticates the server */
	uint64_t key; /* the TCP Proposal's rendezvous key */
};

/* Bounds every read and write on rendezvous socket ufd by SMC_HANDSHAKE_TIMEOUT_MS. */
void handshake_set_timeouts(int ufd);

/* Client side, on the progress thread, with ufd the accepted rendezvous socket. Returns
 * 0 and leaves the connection ACTIVE or FALLBACK (unless the application closed it
 * meanwhile); or -EACCES when the process on ufd is not the server (by key: it did not
 * prove it; by owner: it does not own the server's socket): nothing was handed over
 * nor decided, wait for the next one. */
int handshake_client(struct smc_conn *c, int ufd, const struct hs_auth *auth);

/* Server side; under abstract names (not by key) the caller has checked the process on
 * ufd (rdv_peer_owns_tcp_peer) before calling. 0: c is ready to activate. Otherwise
 * -errno and *why; -ECONNABORTED means the client may already consider the connection
 * upgraded, so the TCP connection must be reset rather than used as plain TCP.
 * in_accept: run inside the application's accept(), so the client's Proposal is waited
 * for only HS_ACCEPT_PROPOSAL_MS (handshake.c), then the connection stays TCP
 * (SMC_REASON_HANDSHAKE). */
int handshake_server(struct smc_conn *c, int ufd, const struct hs_auth *auth, bool in_accept,
		     enum smc_reason *why);

/* Server side, without a connection (none could be had: fd_budget.h, or its creation
 * failed), inside accept(): answers the client's Proposal on ufd (waited for as long as
 * handshake_server's in_accept does; or, by key, on TCP socket tcp_fd) with a Decline
 * for diag, so that it stays TCP at once and knows why. */
void handshake_server_decline(int tcp_fd, int ufd, const struct hs_auth *auth, uint32_t diag);

#endif
