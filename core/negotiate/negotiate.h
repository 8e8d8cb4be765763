/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * In-band negotiation: what runs on the TCP connection once both SYN and SYN-ACK carried
 * the SMC TCP option (core/negotiate/tcpopt.h). RFC 7609 framing, so a Linux kernel AF_SMC peer
 * understands every byte:
 *
 *   client                                         server (inside accept)
 *   SMC-R v1 Proposal (+ our block, clc.h) -->
 *        ours, same host, shm:  <-- connects to the rendezvous the block names, then the
 *                                   same-host handshake runs there (handshake.h, by key)
 *        ours, SMC-R:           <-- SMC-R Accept + "CRD"n (hs_ib.h)
 *                Confirm + "CRD"n -->         (or a Decline: both stay TCP)
 *        anything else:         <-- SMC-R v1 Decline{reason}: both stay TCP
 *   a kernel server may send an Accept without our credits extension: the client answers
 *   with a Decline.
 *
 * Which transport (SMC_TRANSPORT of each side; the server decides):
 *   client auto: offers shm, and SMC-R when it has a usable RDMA device (GID, MAC in
 *                the Proposal); shm: offers shm only; ib: SMC-R only (no rendezvous,
 *                CLC_BLOCK_NO_SHM), and without a device it declines at once.
 *   server: shm when both are on one host, the client offers it and the server is not
 *           ib; else SMC-R when the client offers it and the server is not shm (declined
 *           with CLC_DECL_NOSMCRDEV when the server has no device); else a Decline:
 *           CLC_DECL_MODEUNSUPP when the modes do not match (same host, or SMC_TRANSPORT
 *           =shm), CLC_DECL_NOSMCRDEV across hosts without SMC-R.
 *
 * After a Decline both ends are plain TCP and the application's bytes follow untouched;
 * no CLC byte ever reaches the application. A peer whose CLC is malformed gets its
 * connection reset (only that connection).
 */
#ifndef SMC_NEGOTIATE_H
#define SMC_NEGOTIATE_H

#include <stdbool.h>
#include <sys/types.h>
#include <stdint.h>

#include "core/base/stats.h"
#include "core/wire/clc.h"

/* Same value in two processes <=> they run on the same kernel (boot), whatever their
 * network or mount namespaces: a fold of /proc/sys/kernel/random/boot_id. 0 unknown. */
uint64_t neg_host_id(void);

/* ------------------------------------------------------------ client */

struct neg_client {
	uint64_t rdv_name; /* token naming the rendezvous socket; 0: no shm offered */
	uint64_t key;      /* the server echoes it in its Accept (hs_auth) */
	bool rdv_path;     /* a path under SMC_RDV_DIR (else an abstract name) */
	bool offer_ib;     /* the Proposal offers SMC-R (our GID and MAC) */
	int listen_fd;     /* the rendezvous listener, parked; -1 when none */
	/* rdv_path: on the list of paths unlinked at exit (a client that exits in the
	 * middle of a negotiation leaves no socket file behind) */
	struct neg_client *exit_prev, *exit_next;
	pid_t exit_pid;
};

/* After the TCP handshake, with the peer having sent the option: creates the rendezvous
 * socket (unless SMC_TRANSPORT=ib) and sends the Proposal on fd. 0: sent, wait for the
 * answer. 1: nothing to offer (no rendezvous, or SMC_TRANSPORT=ib without an RDMA
 * device), a Decline was sent instead: plain TCP for *why. -errno: the connection
 * cannot be used for negotiation (reset it). */
int neg_client_propose(int fd, struct neg_client *nc, enum smc_reason *why);
/* Removes the rendezvous path (the caller closes listen_fd). */
void neg_client_cleanup(struct neg_client *nc);

enum neg_answer {
	NEG_ANS_NONE = 0,   /* nothing complete yet: wait */
	NEG_ANS_DECLINE,    /* the server declined: plain TCP */
	NEG_ANS_ACCEPTED,   /* a kernel server accepted; we declined it: plain TCP */
	NEG_ANS_IB,         /* our server's SMC-R Accept + credits: in buf, for hs_ib.h */
	NEG_ANS_CLOSED,     /* EOF or a socket error before an answer: plain TCP */
	NEG_ANS_BAD,        /* not a valid answer: reset the connection */
};
/* Room for one in-band message and its credits extension. */
#define NEG_MSG_CAP (CLC_MAX_LEN + 4)
/*
 * One nonblocking step reading the server's answer from fd; *diag is the Decline's
 * reason (NEG_ANS_DECLINE). Consumes exactly one whole CLC message (with the 4-byte
 * credits extension after an SMC-R Accept when nc->offer_ib), or nothing. An SMC-R
 * Accept without the extension is a kernel's: our servers write both at once, so when
 * it is still alone at `final` (the caller's next tick) it is consumed and declined.
 * NEG_ANS_IB: the Accept and its extension are in buf[0..*len) (NEG_MSG_CAP bytes).
 */
enum neg_answer neg_client_answer(int fd, const struct neg_client *nc, bool final,
				  uint8_t *buf, size_t *len, uint32_t *diag);

/* ------------------------------------------------------------ server */

enum neg_offer {
	NEG_OFFER_OURS,  /* our Proposal, same host, shm: connect to *blk's rendezvous */
	NEG_OFFER_IB,    /* our Proposal, SMC-R: answer *prop on TCP (hs_ib.h) */
	NEG_OFFER_TCP,   /* answered (or nothing to answer): plain TCP for *why */
	NEG_OFFER_ABORT, /* malformed, timeout: reset the connection */
	NEG_OFFER_WAIT,  /* neg_server_try_offer: not all of it is there yet */
};
/* Inside accept(), after the peer sent the option: reads exactly one CLC message
 * (bounded by SMC_HANDSHAKE_TIMEOUT_MS) and answers everything but our own Proposal
 * that the rules above accept with a Decline. *prop: the decoded Proposal (OURS, IB). */
enum neg_offer neg_server_read_offer(int fd, struct clc_block *blk, struct clc_msg *prop,
				     enum smc_reason *why);
/* As neg_server_read_offer, without waiting: NEG_OFFER_WAIT (nothing consumed) while
 * the message is not complete, unless final (the deadline passed: NEG_OFFER_ABORT). */
enum neg_offer neg_server_try_offer(int fd, bool final, struct clc_block *blk,
				    struct clc_msg *prop, enum smc_reason *why);
/* Connects to the client's rendezvous; on failure sends the Decline itself. -errno:
 * -ECONNREFUSED when its socket exists but nobody listens any more (the client
 * finished, or exited: its socket file stays behind until the next boot). */
int neg_server_rendezvous(int fd, const struct clc_block *blk);

/* ------------------------------------------------------------ both */

/* The whole buffer onto TCP socket fd, bounded by SMC_HANDSHAKE_TIMEOUT_MS. 0, -EPIPE
 * (part of it went out), -ETIMEDOUT or -errno. */
int neg_send_all(int fd, const uint8_t *buf, size_t len);
/* One whole CLC message from TCP socket fd into buf (NEG_MSG_CAP bytes), with the
 * credits extension after an SMC-R Accept or Confirm, bounded by the handshake
 * timeout; not one byte more is consumed. 0 (*len), -ECONNRESET on EOF, -EBADMSG /
 * -EMSGSIZE when the stream does not start with one, -ETIMEDOUT, -errno. */
int neg_recv_msg(int fd, uint8_t *buf, size_t *len);
/* An SMC-R v1 Decline on TCP socket fd. 0 or -errno. */
int neg_send_decline(int fd, uint32_t diag);
/* fork (forklock.h): takes the exit list's lock; false when busy. */
bool neg_fork_lock(void);

#endif
