/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Connection pools: short connections without a handshake.
 *
 * A full same-host handshake costs both processes ~270 us of CPU (three messages, a
 * memfd and two eventfds passed, five thread wake-ups), so hs_policy.h keeps a
 * destination whose connections keep closing soon on plain TCP. A pool removes that
 * cost: a client process and the server process behind one listener set up, once, a
 * region of slots (pool_slot.h) and a pair of eventfds per slot and side. A connection
 * to that destination then takes a slot and writes its bound TCP endpoint into it
 * before its SYN; the server's accept() finds the slot by the accepted socket's peer
 * and both sides run the connection on that slot's rings at once: no message, no
 * wake-up, no memfd. The TCP connection still exists (accept, addresses, liveness)
 * and ends with a reset, as every SMC connection of this library does.
 *
 * Setup, once per (client process, destination), when hs_policy.h would keep a
 * destination on TCP: the client sends a request datagram to the listener's
 * rendezvous name (rendezvous.h) carrying the region's memfd, its doorbells and one end
 * of a socket pair (the link), and makes that one connection a full SMC one. The
 * server reads requests where it already spends system calls on such a connection (the
 * rendezvous accept) and answers on the link with its doorbells; the client takes the
 * answer at its next connect to that destination. From then on its connections there
 * go through the pool while a slot is free.
 *
 * Trust. The client hands nothing over a pool before it knows who serves it: the
 * answer must carry the kernel's credentials of a process that runs as the owner of
 * the TCP listener (sock_diag) or as root. The server claims a slot for an accepted
 * connection only when the pool's client (the link's credentials) is root or runs as
 * the server does, or else when sock_diag says the connection's peer socket is owned
 * by that user: otherwise any local process could name another user's TCP connection
 * in its own pool. A slot whose check fails aborts that connection only.
 *
 * Where a pool is not used: a server that has forked since it started listening (a
 * forked process accepts on the same listener without knowing pools set up later:
 * the pools it has are retired, it answers no request) or whose listener has
 * SO_REUSEPORT; a listener passed to another process over a unix socket (both
 * processes' pools refuse), or made listening by a process that did not make its socket
 * alone (received, or made before a fork: sock_accept.c); a destination with too many
 * pools; when every slot is taken. Those connections go the way they went before
 * (hs_policy.h).
 */
#ifndef SMC_POOL_H
#define SMC_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/shm/pool_slot.h"
#include "core/shm/shm.h"

struct smc_pool;
struct pool_set;

/* ---------------------------------------------------------------- client */

enum pool_route {
	POOL_ROUTE_NONE = 0, /* no pool: the connection goes its usual way */
	POOL_ROUTE_FULL,     /* a setup request was sent: make this connection a full SMC one */
	POOL_ROUTE_POOL,     /* *out is a ready pool (a reference): offer a slot of it */
	POOL_ROUTE_FD_LIMIT, /* no pool for now: the descriptor budget refused one (fd_budget.h) */
	POOL_ROUTE_PENDING,  /* a pool was asked for and its answer has not come: TCP for now */
};

/* Before a connect to dst (key: hs_policy_key) that hs_policy.h keeps off SMC. */
enum pool_route pool_client_route(const struct sockaddr *dst, uint64_t key,
				  struct smc_pool **out);
/* Offers a slot of p for the client's bound endpoint `local`: the slot, or -1 (none
 * free: the connection stays TCP). */
int pool_client_offer(struct smc_pool *p, const struct sockaddr *local);
/* The server has not claimed offered slot `slot` yet. */
bool pool_client_unclaimed(struct smc_pool *p, int slot);
/* Takes an offered slot back (its connect failed, or it closes before the server
 * accepted and nothing was sent): true when the server had not claimed it. A refused
 * connection also means the server is gone (server_gone): no new offers then. */
bool pool_client_withdraw(struct smc_pool *p, int slot, bool server_gone);

/* ---------------------------------------------------------------- server */

/* A listener's pools. */
struct pool_set *pool_set_new(void);
/* The listener closed: its pools are retired and dropped (their connections live on). */
void pool_set_free(struct pool_set *set);
/* Every setup request is refused from now on, and the set's pools take no new offers
 * (those already offered stay claimable): the listener may be shared with processes
 * that this one does not know (one inherited across exec, or passed over a unix
 * socket), and any of them might accept a connection offered in a pool, with no
 * handshake to tell. */
void pool_set_refuse(struct pool_set *set);
/* Reads and answers the setup requests waiting on the listener's rendezvous name
 * (name_fd, nonblocking) for listening socket lfd. */
void pool_set_serve(struct pool_set *set, int name_fd, int lfd);
/* The slot offered for accepted socket tcp_fd, whose peer is `peer`: 1 with *out (a
 * reference) and *slot claimed; 0 when no pool names it; -1 when one did but its
 * client may not own that connection (the slot was aborted: reset tcp_fd). */
int pool_set_claim(struct pool_set *set, const struct sockaddr *peer, int tcp_fd,
		   struct smc_pool **out, int *slot);

/* Server: a claimed slot whose connection cannot be served: the client's side sees
 * the connection aborted (ECONNRESET); drops the claim's reference. Reset the TCP
 * connection too. */
void pool_slot_abort(struct smc_pool *p, int slot);

/* ---------------------------------------------------------------- both */

/* Slot i as a connection's map, and its doorbells: ours (rx, tx: we wait on them) and
 * the peer's (we ring them). Valid while the reference is held. */
void pool_slot_conn(struct smc_pool *p, int slot, struct shm_map *map, int bells[4]);
/* The connection on slot i is gone on this side: the slot goes back when both sides are
 * done; drops the connection's reference to p. */
void pool_conn_done(struct smc_pool *p, int slot);
void pool_get(struct smc_pool *p);
void pool_put(struct smc_pool *p);

/* Server: the pools take no new offers and no request is answered any more (the
 * process started using io_uring, io_uring_watch.h); offered slots stay claimable. */
void pool_server_retire_all(void);

/* fork(): in both processes, the server's pools take no new offers and no request is
 * answered any more; the child forgets the client's pools (its connections keep
 * theirs). pool_fork_lock takes the pools' locks (forklock.h; false when one is busy),
 * pool_atfork_prepare then marks the pools under them, pool_atfork_child forgets. */
bool pool_fork_lock(void);
void pool_atfork_prepare(void);
void pool_atfork_child(void);

#endif
