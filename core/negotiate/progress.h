/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The background progress thread: a libevent event_base that runs the client side of
 * handshakes (answering the accepting server on the per-connection rendezvous socket),
 * watches a pending connection's TCP socket (same-host rendezvous: data or an error
 * first means the server is not doing SMC; in-band: the end of the TCP handshake, then
 * the server's CLC answer) and its handshake deadline; and the server side of accepted
 * connections whose client's Proposal had not arrived when a nonblocking accept()
 * returned. Started on first need, never in a process that opens no TCP connection.
 */
#ifndef SMC_PROGRESS_H
#define SMC_PROGRESS_H

#include <stdbool.h>

#include "core/negotiate/handshake.h"

struct smc_conn;

/* Starts the thread if this process has none yet: a server does so at its first
 * handshake, so that the thread and its descriptors exist before any handshake needs it
 * (a process's resources do not grow at a loaded moment). 0 or -ENOMEM. */
int progress_ensure(void);
/* Hands a PENDING client connection to the thread: with rdv_listen_fd set, the
 * same-host rendezvous (the server connects to that name); with rdv_listen_fd -1, the
 * in-band negotiation (the socket was opted in for the TCP option: after the TCP
 * handshake the thread checks the option, sends the CLC Proposal and waits for the
 * server on the rendezvous it names or for its answer on TCP; negotiate.h). */
int progress_watch_pending(struct smc_conn *c); /* 0 or -errno */
/* Under c->lock, the program closed its last fd of c while the thread watches c's
 * handshake (on a descriptor of its own, progress.c): the watch lets go of the socket,
 * so that the close ends it now (FIN or reset) as without the library. */
void progress_watch_let_go(struct smc_conn *c);
/* Under c->lock, or in a fork's child (whose copy is not the thread's): closes the
 * watch's descriptor of c's socket, if any. */
void progress_watch_fd_drop(struct smc_conn *c);
/* Not under c->lock: the program decided c (PENDING no more) while the thread watches
 * its client handshake: the watch ends soon, telling a waiting server (a Decline). */
void progress_watch_decided(struct smc_conn *c);
/* Not under any lock: the program filled c's staging buffer while its client handshake
 * runs; a rendezvous handshake still undecided a tenth of the handshake timeout later
 * ends as TCP (progress.c). */
void progress_watch_staging_full(struct smc_conn *c);
/* One step of a PENDING server connection's in-band negotiation, run on the thread each
 * time its TCP socket becomes readable and at every deadline tick
 * (SMC_HANDSHAKE_TIMEOUT_MS), with final set at the last one (progress.c: the client
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
/* Loads libevent (core/base/evlib.h) now, from the library's constructor: it is found by
 * path, which a program that later chroots (a privilege-separated daemon's login
 * process) would no longer reach. */
void progress_load(void);
/* SMC-R: starts the thread if needed and makes it serve the link registry (ib_lgr.h):
 * each link's completion channel, the device's async events, the link timers. Call
 * before the first ib_lgr_* call that may create a link. 0 or -ENOMEM. */
int progress_ib_init(void);
/* Calls cb(arg) on the thread once fd becomes readable (data, EOF or an error), or at
 * once when it cannot be watched. fd must stay open until then. 0 or -ENOMEM (cb is
 * not called). */
int progress_watch_readable(int fd, void (*cb)(void *arg), void *arg);
/* The same for writable, or after at most `retry_ms` (0: no limit), whichever comes
 * first (cb then looks and watches again if it must). */
int progress_watch_writable(int fd, unsigned retry_ms, void (*cb)(void *arg), void *arg);
/* Calls cb(arg) on the thread once, ms milliseconds from now. 0 or -ENOMEM (cb is not
 * called). */
int progress_after(unsigned ms, void (*cb)(void *arg), void *arg);
/* fork (forklock.h): takes the thread's start lock; false when busy. */
bool progress_fork_lock(void);
/* In a forked child: the thread did not survive the fork. */
void progress_atfork_child(void);

#endif
