/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The background progress thread: a libevent event_base that runs the client side of
 * handshakes (answering the accepting server on the per-connection rendezvous socket),
 * watches a pending connection's TCP socket (data or an error first means the server is
 * not doing SMC) and its handshake deadline. Started on first need, never in a process
 * that opens no TCP connection.
 */
#ifndef SMC_PROGRESS_H
#define SMC_PROGRESS_H

struct smc_conn;

/* Hands a PENDING client connection (with rdv_listen_fd set) to the thread. */
int progress_watch_pending(struct smc_conn *c);
/* In a forked child: the thread did not survive the fork. */
void progress_atfork_child(void);

#endif
