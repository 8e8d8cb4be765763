/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The live-statistics query socket read by smcpstat(8).
 *
 * A process that has (had) an SMC connection listens on the abstract unix
 * SOCK_SEQPACKET name "smcp1:stat:<pid>" (abstract names live in the network
 * namespace; nothing is created on disk). Protocol, version 1:
 *
 *   client -> server   one message "list"
 *   server -> client   one message per connection of the process, each a flat JSON
 *                      object (keys below), then the server closes the socket.
 *
 *   {"pid":N,"comm":"S","fd":N,"side":"client"|"server",
 *    "state":"pending"|"active"|"fallback"|"closed",
 *    "mode":"shm"|"ib"|"tcp","reason":"<stats reason name>",
 *    "local_addr":"S"|null,"local_port":N|null,"peer_addr":"S"|null,"peer_port":N|null,
 *    "rx_size":N,"tx_size":N,"bytes_sent":N,"bytes_received":N}
 *
 * Only peers whose SO_PEERCRED uid is ours or root get an answer; others get the single
 * message {"error":"permission denied"}. The server runs on its
 * own detached thread with every signal blocked, so it never takes the application's
 * signals, and a slow client only ever delays that thread (send/receive timeouts).
 */
#ifndef SMC_STATSRV_H
#define SMC_STATSRV_H

#define STATSRV_NAME_PREFIX "smcp1:stat:"
#define STATSRV_REQUEST_LIST "list"

/* Starts serving this process's name if not already served: idempotent, cheap after the
 * first call (one atomic load). A forked child serves its own name from its first call;
 * the parent's socket is closed in the child at fork. Never fails the caller: when the
 * name cannot be served the process is simply not listed. */
void statsrv_ensure(void);
/* fork (forklock.h): takes the start lock (false when busy); in the child, forgets the
 * parent's server. */
bool statsrv_fork_lock(void);
void statsrv_atfork_child(void);

#endif
