/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What the background progress thread (core/base/progress.h) runs for the handshakes:
 * the client side (answering the accepting server on the per-connection rendezvous
 * socket), the watch of a pending connection's TCP socket (same-host rendezvous: data
 * or an error first means the server is not doing SMC; in-band: the end of the TCP
 * handshake, then the server's CLC answer) and its handshake deadline; the server side
 * of accepted connections whose client's Proposal had not arrived when a nonblocking
 * accept() returned; and the SMC-R links' events.
 */
#ifndef SMC_PROGRESS_H
#define SMC_PROGRESS_H

#include <stdbool.h>

#include "core/negotiate/handshake.h"

struct smc_conn;

/* Hands a PENDING client connection to the thread: with rdv_listen_fd set, the
 * same-host rendezvous (the server connects to that name); with rdv_listen_fd -1, the
 * in-band negotiation (the socket was opted in for the TCP option: after the TCP
 * handshake the thread checks the option, sends the CLC Proposal and waits for the
 * server on the rendezvous it names or for its answer on TCP; negotiate.h). */
int progress_watch_pending(struct smc_conn *c); /* 0 or -errno */
/* Not under c->lock: the program decided c (PENDING no more) while the thread watches
 * its client handshake: the watch ends soon, telling a waiting server (a Decline). */
void progress_watch_decided(struct smc_conn *c);
/* Not under any lock: the program filled c's staging buffer while its client handshake
 * runs; a rendezvous handshake still undecided a tenth of the handshake timeout later
 * ends as TCP (progress_client.c). */
void progress_watch_staging_full(struct smc_conn *c);
/* One step of a PENDING server connection's in-band negotiation, run on the thread each
 * time its TCP socket becomes readable and at every deadline tick
 * (SMC_HANDSHAKE_TIMEOUT_MS), with final set at the last one (progress_server.c: the client
 * may be held up). true: decided (c is no longer PENDING, or the application closed
 * it); false: wait for more. */
typedef bool (*progress_server_step)(struct smc_conn *c, bool final);
/* Hands an accepted PENDING connection whose client's CLC message has not arrived yet to
 * the thread, so that a nonblocking accept() does not wait for it. 0 or -errno. */
int progress_watch_server(struct smc_conn *c, progress_server_step step);
/* Called on the thread, under c->lock with c PENDING, when a server flow decided:
 * f->result and f->why (handshake.h). */
typedef void (*progress_flow_done)(struct smc_conn *c, int result, enum smc_reason why);
/* Hands the server's side of a same-host exchange that waits for the client (HS_WAIT)
 * to the thread, which steps it as its rendezvous socket becomes readable and at its
 * deadlines, then calls done and closes f->ufd. The connection is the application's
 * (fd table) and PENDING; f is copied. 0 or -ENOMEM (nothing taken). */
int progress_watch_flow(const struct hs_flow *f, progress_flow_done done);
/* From any thread, c PENDING under a flow of progress_watch_flow: ends its exchange at
 * once with a Decline while the client can still take one (hs_server_refuse_now) and
 * calls the flow's done. Takes c->lock. 1: c is no longer PENDING; 0: the flow's Accept
 * is out (only the Confirm ends it); -ENOENT: c is PENDING under no such flow (yet). */
int progress_flow_refuse(struct smc_conn *c, enum smc_reason why);
/* SMC-R: starts the thread if needed and makes it serve the link registry (ib_lgr.h):
 * each link's completion channel, the device's async events, the link timers. Call
 * before the first ib_lgr_* call that may create a link. 0 or -ENOMEM. */
int progress_ib_init(void);
/* In a forked child, after progress_atfork_child: the parent's link watches are not
 * ours. */
void progress_ib_atfork_child(void);

#endif
