/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The background progress thread: a libevent event_base that runs the client side of
 * handshakes (answering the accepting server on the per-connection rendezvous socket),
 * watches a pending connection's TCP socket (same-host rendezvous: data or an error
 * first means the server is not doing SMC; in-band: the end of the TCP handshake, then
 * the server's CLC answer) and its handshake deadline. Started on first need, never in a process
 * that opens no TCP connection.
 */
#ifndef SMC_PROGRESS_H
#define SMC_PROGRESS_H

struct smc_conn;

/* Hands a PENDING client connection to the thread: with rdv_listen_fd set, the
 * same-host rendezvous (the server connects to that name); with rdv_listen_fd -1, the
 * in-band negotiation (the socket was opted in for the TCP option: after the TCP
 * handshake the thread checks the option, sends the CLC Proposal and waits for the
 * server on the rendezvous it names or for its answer on TCP; negotiate.h). */
int progress_watch_pending(struct smc_conn *c);
/* SMC-R: starts the thread if needed and makes it serve the link registry (ib_lgr.h):
 * each link's completion channel, the device's async events, the link timers. Call
 * before the first ib_lgr_* call that may create a link. 0 or -ENOMEM. */
int progress_ib_init(void);
/* In a forked child: the thread did not survive the fork. */
void progress_atfork_child(void);

#endif
