/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The same-host CLC exchange over the rendezvous socket:
 *
 *   client (progress thread)          server (accept(), then the progress thread)
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

#include "core/base/stats.h"
#include "core/wire/clc.h"

#include <stdbool.h>
#include <stdint.h>

struct smc_conn;

struct hs_auth {
	bool by_key;  /* in-band negotiation: the key authenticates the server */
	uint64_t key; /* the TCP Proposal's rendezvous key */
};

/* Bounds every read and write on rendezvous socket ufd by SMC_HANDSHAKE_TIMEOUT_MS. */
void handshake_set_timeouts(int ufd);

/*
 * Each side's exchange as steps, so that no wait for a peer blocks a thread that serves
 * others (the application's accept(), the progress thread): a step reads what arrived
 * on the rendezvous socket (made nonblocking) and returns HS_WAIT when it must wait for
 * more; the caller runs the next step once ufd is readable, or with final set at its
 * deadline (hs_flow_deadline: handshake timeouts since the phase began), which decides.
 * A flow holds ufd but does not close it.
 */
#define HS_WAIT 1

enum hs_phase {
	HS_PHASE_ACCEPT,   /* client: our Proposal is out */
	HS_PHASE_PROPOSAL, /* server: waiting for the client's Proposal */
	HS_PHASE_CONFIRM,  /* server: our Accept is out */
};

struct hs_flow {
	struct smc_conn *c;
	int ufd;
	struct hs_auth auth;
	uint8_t phase;        /* enum hs_phase */
	struct clc_msg prop;  /* client: ours; server: the client's */
	struct clc_msg acc;   /* server: ours */
	int bells[2];         /* server: the client's doorbells until taken */
	int in[3];            /* client: the Accept's descriptors until taken */
	enum smc_reason why;  /* server: the outcome's reason */
	int result;           /* server: the outcome, as handshake_server returns it */
	unsigned ticks;       /* deadline ticks passed in the current phase */
};

void hs_flow_init(struct hs_flow *f, struct smc_conn *c, int ufd, const struct hs_auth *auth);
/* Closes the descriptors a flow that will not be stepped again still holds. */
void hs_flow_abandon(struct hs_flow *f);
/* A deadline tick (SMC_HANDSHAKE_TIMEOUT_MS) of the flow's current phase passed: true
 * when it was the phase's last (the next step is final). A phase takes one; the
 * Confirm is waited for while the client lives (handshake.c). */
bool hs_flow_deadline(struct hs_flow *f);

/* Client side, on the progress thread, with ufd the accepted rendezvous socket: sends
 * the Proposal. HS_WAIT; or 0: decided (ACTIVE or FALLBACK, unless the application
 * closed it meanwhile); or -EACCES when the process on ufd is not the server (by key: it
 * did not prove it; by owner: it does not own the server's socket): nothing was handed
 * over nor decided, the caller drops ufd and waits for the next one. */
int hs_client_start(struct hs_flow *f, struct smc_conn *c, int ufd, const struct hs_auth *auth);
/* Client: reads the server's Accept (then sends the Confirm); results as hs_client_start. */
int hs_client_step(struct hs_flow *f, bool final);
/* Client: ends the exchange now with a Decline for diag (the server stays TCP at once),
 * c FALLBACK for why unless something decided first. 0. */
int hs_client_refuse_now(struct hs_flow *f, enum smc_reason why, uint32_t diag);
/* Client, blocking: the whole exchange (tests). Results as hs_client_start, never HS_WAIT. */
int handshake_client(struct smc_conn *c, int ufd, const struct hs_auth *auth);

/* Server side; under abstract names (not by key) the caller has checked the process on
 * ufd (rdv_peer_owns_tcp_peer) before starting. HS_WAIT, or 0 when decided: then
 * f->result is 0 (c is ready to activate) or -errno with f->why; -ECONNABORTED means
 * the client may already consider the connection upgraded, so the TCP connection must
 * be reset rather than used as plain TCP. Once the application holds c, each step runs
 * under c->lock with c PENDING. */
int hs_server_start(struct hs_flow *f, struct smc_conn *c, int ufd, const struct hs_auth *auth);
int hs_server_step(struct hs_flow *f, bool final);
/* Server: ends the exchange now with a Decline (why, diag) while the client can still
 * take it (our Accept is not out): 0, decided as hs_server_step's, or HS_WAIT when the
 * Accept is out and only the Confirm may end it. */
int hs_server_refuse_now(struct hs_flow *f, enum smc_reason why, uint32_t diag);
/* Server, inside accept(): hs_server_start, then steps while the client answers within
 * HS_INLINE_WAIT_US (handshake.c) in all; HS_WAIT when the rest is the progress
 * thread's. */
int hs_server_start_inline(struct hs_flow *f, struct smc_conn *c, int ufd,
			   const struct hs_auth *auth);
/* Server, inside accept(), when the progress thread cannot take the rest of a flow that
 * hs_server_start_inline left at HS_WAIT: once our Accept is out (also from this last
 * look at a Proposal that came just now) the client is committed and its Confirm is
 * waited for here (SMC_HANDSHAKE_TIMEOUT_MS from the Accept); a Proposal that has not
 * come is declined at once. Decides: 0 as hs_server_step's. */
int hs_server_finish_inline(struct hs_flow *f);
/* Server, blocking: the whole exchange, f->result returned, f->why in *why. */
int handshake_server(struct smc_conn *c, int ufd, const struct hs_auth *auth,
		     enum smc_reason *why);

/* Server side, without a connection (none could be had: fd_budget.h, or its creation
 * failed), inside accept(): answers the client's Proposal on ufd (waited for as long as
 * hs_server_start_inline does; or, by key, on TCP socket tcp_fd) with a Decline for
 * diag, so that it stays TCP at once and knows why. */
void handshake_server_decline(int tcp_fd, int ufd, const struct hs_auth *auth, uint32_t diag);

/* Client side, before its Proposal: a server connected to our rendezvous socket on ufd
 * gets a Decline for diag instead (we cannot go on: no memory), and stays TCP at once. */
void handshake_client_decline(int ufd, uint32_t diag);

#endif
