/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * In-band negotiation: what runs on the TCP connection once both SYN and SYN-ACK carried
 * the SMC TCP option (core/tcpopt.h). RFC 7609 framing, so a Linux kernel AF_SMC peer
 * understands every byte:
 *
 *   client                                         server (inside accept)
 *   SMC-R v1 Proposal (+ our block, clc.h) -->
 *        ours, same host:   <-- connects to the rendezvous the block names, then the
 *                               same-host handshake runs there (handshake.h, by key)
 *        anything else:     <-- SMC-R v1 Decline{reason}: both stay TCP
 *   a kernel server may send an Accept instead: the client answers with a Decline.
 *
 * After a Decline both ends are plain TCP and the application's bytes follow untouched;
 * no CLC byte ever reaches the application. A peer whose CLC is malformed gets its
 * connection reset (only that connection).
 */
#ifndef SMC_NEGOTIATE_H
#define SMC_NEGOTIATE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clc.h"
#include "core/stats.h"

/* Same value in two processes <=> they run on the same kernel (boot), whatever their
 * network or mount namespaces: a fold of /proc/sys/kernel/random/boot_id. 0 unknown. */
uint64_t neg_host_id(void);

/* ------------------------------------------------------------ client */

struct neg_client {
	uint64_t rdv_name; /* token naming the rendezvous socket */
	uint64_t key;      /* the server echoes it in its Accept (hs_auth) */
	bool rdv_path;     /* a path under SMC_RDV_DIR (else an abstract name) */
	int listen_fd;     /* the rendezvous listener, parked; -1 when none */
};

/* After the TCP handshake, with the peer having sent the option: creates the rendezvous
 * socket and sends the Proposal on fd. 0: sent, wait for the answer. 1: no rendezvous
 * could be created, a Decline was sent instead (plain TCP from now on). -errno: the
 * connection cannot be used for negotiation (reset it). */
int neg_client_propose(int fd, struct neg_client *nc);
/* Removes the rendezvous path (the caller closes listen_fd). */
void neg_client_cleanup(struct neg_client *nc);

enum neg_answer {
	NEG_ANS_NONE = 0,   /* nothing complete yet: wait */
	NEG_ANS_DECLINE,    /* the server declined: plain TCP */
	NEG_ANS_ACCEPTED,   /* a kernel server accepted; we declined it: plain TCP */
	NEG_ANS_CLOSED,     /* EOF or a socket error before an answer: plain TCP */
	NEG_ANS_BAD,        /* not a valid answer: reset the connection */
};
/* One nonblocking step reading the server's answer from fd; *diag is the Decline's
 * reason (NEG_ANS_DECLINE). Consumes exactly one whole CLC message, or nothing. */
enum neg_answer neg_client_answer(int fd, uint32_t *diag);

/* ------------------------------------------------------------ server */

enum neg_offer {
	NEG_OFFER_OURS,  /* our Proposal, same host: connect to *blk's rendezvous */
	NEG_OFFER_TCP,   /* answered (or nothing to answer): plain TCP for *why */
	NEG_OFFER_ABORT, /* malformed, timeout: reset the connection */
};
/* Inside accept(), after the peer sent the option: reads exactly one CLC message
 * (bounded by SMC_HANDSHAKE_TIMEOUT_MS) and answers everything but our own same-host
 * Proposal with a Decline. */
enum neg_offer neg_server_read_offer(int fd, struct clc_block *blk, enum smc_reason *why);
/* Connects to the client's rendezvous; on failure sends the Decline itself. -errno:
 * -ECONNREFUSED when its socket exists but nobody listens any more (the client
 * finished, or exited: its socket file stays behind until the next boot). */
int neg_server_rendezvous(int fd, const struct clc_block *blk);

/* ------------------------------------------------------------ both */

/* An SMC-R v1 Decline on TCP socket fd. 0 or -errno. */
int neg_send_decline(int fd, uint32_t diag);
/* Resets TCP connection fd (RST to the peer, ECONNRESET to our application) and keeps
 * the descriptor: the application still owns it. */
void neg_reset(int fd);

#endif
