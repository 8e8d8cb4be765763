/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * An upgraded shared-memory connection handed from one program image to the next
 * across exec, as it is: the new image maps the same region, rings the same doorbells
 * and goes on from the cursors where the old one stopped, with no handshake and no
 * byte lost (core/sock/exec_carry.c collects and adopts them). The record travels in
 * an inherited memfd; the new image trusts nothing in it it can check otherwise: the
 * descriptors must be what the record says they are, and the cursors must be what this
 * side published in the shared block.
 */
#ifndef SMC_CONN_CARRY_H
#define SMC_CONN_CARRY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/conn/conn.h"

#define CONN_CARRY_FDS 8

/* One connection, as the old image leaves it. Plain data: a fixed layout that the same
 * build of the library writes and reads. */
struct conn_carry {
	int32_t fds[CONN_CARRY_FDS];  /* the program's descriptors of the socket; -1 after the last */
	int32_t memfd;                /* the region (shm.h), opened for the new image */
	int32_t rx_bell, tx_bell;     /* ours */
	int32_t peer_rx_bell, peer_tx_bell;
	uint8_t side;                 /* enum conn_side */
	uint8_t shut_rd, shut_wr, fork_shared;
	uint32_t size[2];             /* the region's ring sizes, dir[0] client->server */
	uint64_t rx_cons, rx_prod_seen, tx_prod, tx_cons_seen;
	uint32_t rung_rx_seq, rung_tx_seq;
	uint32_t asleep_rx, asleep_tx; /* our sleepers counted in the shared block: the exec ends them */
	uint32_t rx_touched, exchanges;
	uint64_t bytes_sent, bytes_received;
};

/*
 * Before the exec. conn_carry_hold takes c's lock and both data locks when c can be
 * carried (ACTIVE over shared memory, not on a pool slot, not leaving the rings, no
 * thread in a copy on it): no cursor moves until the exec ends this image, or
 * conn_carry_unhold gives them back when it failed. false: c is not carried (the
 * caller takes it back to TCP).
 */
bool conn_carry_hold(struct smc_conn *c);
void conn_carry_unhold(struct smc_conn *c);
/* Under the hold: a descriptor of c's region that the new image can map, opened without
 * FD_CLOEXEC (/proc/self/map_files: only with CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN);
 * -errno. */
int conn_carry_region_fd(struct smc_conn *c);
/* Under the hold: the record of c (fds filled by the caller). */
void conn_carry_out(struct smc_conn *c, struct conn_carry *out, int memfd);

/* In the new image: the connection the record describes, every check passed, ACTIVE,
 * with a reference for each of its descriptors (the caller enters them in the fd
 * table); its doorbells and region descriptor are the connection's then. NULL with
 * *why set when the record is refused: nothing of it is taken. */
struct smc_conn *conn_carry_in(const struct conn_carry *in, const char **why);
/* A record refused: its socket is reset, and its doorbells and region are closed where
 * they are what it says (an eventfd, a memfd) and no connection of ours holds them. */
void conn_carry_drop(const struct conn_carry *r);

#endif
