/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Same-host transport memory: one sealed memfd per connection holding a control page
 * and the two RMB rings (client->server, server->client). The server creates it,
 * passes it to the client over the rendezvous socket (SCM_RIGHTS), both map it shared.
 *
 * The peer can write anywhere in the mapping, so nothing read from it is trusted:
 * sizes come from the handshake, each side keeps its own cursors locally, and a cursor
 * read from the peer's half is validated (cdc_validate_*) before it moves a byte.
 */
#ifndef SMC_SHM_H
#define SMC_SHM_H

#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC   0x534d4350u /* "SMCP" */
/* Layout and ring rules of the region, for anyone inspecting it: 2 since rewinds (the
 * skip fields below), 3 since downgrades (SHM_W_TCP). Peers never read it: the handshake's CLC_SAMEHOST_PROTO is what
 * keeps two different versions from sharing a ring. */
#define SHM_VERSION 3

/* Writer -> reader flags (dir_ctl.wflags) */
#define SHM_W_DONE_WRITING 0x1u /* shutdown(SHUT_WR): EOF after the ring drains */
#define SHM_W_CLOSED       0x2u /* writer side closed */
#define SHM_W_ABORT        0x4u /* connection aborted (SO_LINGER 0, protocol error) */
/* The writer's side went back to plain TCP (conn_down.c): its stream goes on
 * over the TCP socket after prod, and it stopped reading the other direction at that
 * direction's cons, from where the reader of this one re-sends over TCP. */
#define SHM_W_TCP          0x8u
/* Reader -> writer flags (dir_ctl.rflags) */
#define SHM_R_CLOSED       0x1u /* reader will never read again: writes fail with EPIPE */
#define SHM_R_ABORT        0x2u

/* One direction of the connection. The writer's and the reader's fields sit on their
 * own cache lines so publishing a cursor never bounces the other side's line. */
struct shm_dir_ctl {
	/* written by the writer */
	_Alignas(64) uint64_t prod;
	uint32_t wflags;
	uint32_t w_sleepers;  /* writer threads asleep waiting for room */
	uint32_t w_seq;       /* bumped each time one goes to sleep */
	uint32_t skip_seq;    /* bumped at each rewind (conn_data.c, tx_rewind) */
	uint64_t skip_at;     /* cursor at which the latest rewind left its lap */
	/* written by the reader */
	_Alignas(64) uint64_t cons;
	uint32_t rflags;
	uint32_t r_sleepers;  /* reader threads asleep waiting for data */
	uint32_t r_seq;       /* bumped each time one goes to sleep */
	uint32_t skip_done;   /* the skip_seq whose rewind the reader has jumped */
};

struct shm_hdr {
	uint32_t magic, version;
	uint32_t ring_size[2];    /* informational; both sides use the handshake's sizes */
	uint32_t side_refs[2];    /* processes holding each side (fork) */
	/* CPU each side last ran its data path on: spinning for a peer that shares our CPU
	 * only delays it. One cache line each, written only when it changes. */
	struct {
		_Alignas(64) uint32_t cpu;
	} side_cpu[2];
	_Alignas(64) struct shm_dir_ctl dir[2]; /* dir[0]: client->server, dir[1]: server->client */
	/* The processes of one side after a fork copy out of and into the rings under
	 * these, and a downgrade moves the side to TCP under both (conn_data.c, conn_fork_lock):
	 * [side][0: receive, 1: send], the holder's pid or 0. The peer never touches them. */
	_Alignas(64) uint32_t fork_lock[2][2];
};

#define SHM_HDR_SPACE 4096u

struct shm_map {
	void *base;
	size_t len;
	struct shm_hdr *hdr;
	uint8_t *ring[2];         /* ring[d] is the buffer of direction d */
	uint32_t size[2];
};

/* Bytes of the memfd for the given ring sizes. */
size_t shm_region_len(uint32_t size0, uint32_t size1);
/* A new memfd of len bytes (CLOEXEC) whose size is sealed, so a peer that maps it cannot
 * shrink it under our mapping; -errno. */
int shm_memfd_new(const char *name, size_t len);
/* A memfd received from a peer: size sealed against shrinking, a regular file of at least
 * len bytes. 0, -EPROTO or -errno. */
int shm_memfd_check(int memfd, size_t len);
/* Creates, sizes, seals and maps a new region; returns the memfd (CLOEXEC) or -errno. */
int shm_create(uint32_t size0, uint32_t size1, struct shm_map *out);
/* Maps a region received from the peer after checking its seals and size. */
int shm_attach(int memfd, uint32_t size0, uint32_t size1, struct shm_map *out);
void shm_detach(struct shm_map *m);

/* Unit in which ring memory is counted: what a first write into it allocates. */
#define SHM_PAGE 4096u

/* Process-wide RMB memory accounting against SMC_MEM_CAP: memory in use. A same-host
 * connection is admitted for its control page and counts its RMB's pages as the peer
 * writes into them (conn_data.c, rx_count_touched); an RDMA connection reserves its
 * registered RMB whole (it is pinned). */
int shm_reserve(size_t bytes);   /* 0, or -ENOMEM past the cap */
void shm_charge(size_t bytes);   /* counted without a check: memory already in use */
void shm_unreserve(size_t bytes);

#endif
