/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Exec hand-off: an upgraded same-host connection whose descriptor survives an exec
 * into a program that runs the library goes on over shared memory in the new image,
 * with no handshake and no byte lost (docs/design.md, "Hand-off across exec").
 *
 * Old image (handoff_exec_begin, from core/exec.c): when the target looks like a
 * program that loads the library (LD_PRELOAD in its environment names it, not setuid
 * or setgid, a dynamic ELF or a #! script), each such connection publishes its cursors
 * and moves its side's hand-off word (shm.h) to HANDING-OFF; its ring memfd and
 * doorbells stay open over the exec, and one sealed memfd describes them all (and
 * carries the process's stats counters), named by SMC_HANDOFF_FD in a copy of the
 * environment. The rest are downgraded as before.
 * New image (handoff_adopt, from the constructor): reads the description, checks every
 * descriptor, size, cursor and the shared word as a handshake would, claims each
 * connection (HANDING-OFF -> 0) and tracks it; what fails a check is downgraded (or
 * reset when nothing else is safe), never used.
 * Peer (handoff_peer_*, from conn.c): a hand-off not claimed within
 * SMC_HANDSHAKE_TIMEOUT_MS, or one whose new image writes plain TCP, or a close of
 * ours meanwhile, takes the word to FORCED: the other side counts as downgraded.
 */
#ifndef SMC_HANDOFF_H
#define SMC_HANDOFF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/conn.h"
#include "core/stats.h"

/* The description memfd (sealed against writes, named HANDOFF_NAME): a handoff_head,
 * then `count` handoff_rec, in the host's byte order (the same build reads it: the
 * version and both sizes must match). */
#define HANDOFF_MAGIC   0x534d4348u /* "SMCH" */
#define HANDOFF_VERSION 1u
#define HANDOFF_MAX     4096u       /* connections in one description */
#define HANDOFF_NAME    "smc-handoff"

struct handoff_head {
	uint32_t magic, version;
	uint32_t count, rec_size;
	uint32_t head_size, pid;
	struct smc_stats_snapshot stats; /* the old image's counters */
};

struct handoff_rec {
	int32_t fd, memfd;
	int32_t bells[4];          /* ours rx, tx; the peer's rx, tx */
	uint64_t word;             /* our side's hand-off word in the shared block */
	struct conn_handoff_state st;
	struct sockaddr_storage local, peer; /* the socket's ends at the exec */
};


/* The environment variable naming the description memfd in the new image. */
#define HANDOFF_ENV "SMC_HANDOFF_FD"

/* Before an exec replaces this image: path (relative to dirfd, AT_FDCWD for none) or,
 * with path NULL, the open executable exec_fd (fexecve), and the environment it will
 * get. Hands off what it can; returns the environment to pass instead (a new array,
 * freed by handoff_exec_end), or NULL: pass envp unchanged (nothing handed off). */
char **handoff_exec_begin(int dirfd, const char *path, int exec_fd, char *const envp[]);
/* The exec returned (it failed): every hand-off is taken back; frees env. */
void handoff_exec_end(char **env);
/* Whether c is handing off now (the downgrade of the others skips it). */
bool handoff_in_progress(const struct smc_conn *c);

/* The new image's constructor: takes over what its old image handed off. */
void handoff_adopt(void);

/* Peer side, shared memory only (conn.c): a look at the other side's hand-off word
 * (starts the bound when it says HANDING-OFF); a byte on the TCP channel (true when
 * it comes from a hand-off's new image: the connection went back to TCP); our close. */
void handoff_peer_look(struct smc_conn *c);
bool handoff_peer_forced_by_tcp(struct smc_conn *c);
void handoff_peer_on_close(struct smc_conn *c);

#endif
