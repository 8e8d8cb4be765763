/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The memory of a connection pool and the life of its slots. Pure code on a mapped
 * region: no I/O, no allocation (unit-tested in tests/unit/test_pool_slot.c).
 *
 * A pool belongs to one client process and one listener of one server process
 * (pool.h). The client creates the region (a sealed memfd) once; both map it. It holds
 * a header and `nslots` slots; a slot is one short connection's shared memory: a
 * control page (the slot word, the client's TCP endpoint, and a struct shm_hdr as a
 * per-connection region has) and two rings of `ring_size` bytes. A connection through
 * the pool costs no handshake message: the client takes a free slot and writes its
 * bound TCP endpoint into it *before* its SYN, and the server's accept() finds the
 * slot by the accepted socket's peer endpoint.
 *
 * The slot word (gen << 8 | state | done bits), changed only by compare-and-swap:
 *
 *   FREE --client: pool_slot_offer--> BUSY (client fills it) --> OFFERED
 *   OFFERED --server: pool_slot_claim (endpoint matches)--> CLAIMED
 *   OFFERED --client: pool_slot_withdraw (connect failed, nothing sent)--> FREE
 *   OFFERED, CLAIMED --pool_slot_release(side)--> + that side's done bit;
 *        CLAIMED with both done bits --> FREE
 *
 * The generation grows with every offer and every return to FREE, so a claim that
 * compared the endpoint of an earlier offer fails its compare-and-swap. A client that
 * closes before the server accepted leaves the slot OFFERED with its done bit: the
 * server still claims it and reads what was sent, as TCP would deliver it.
 *
 * The peer may write anything anywhere in the region: the server only compares what it
 * reads there, the slot indices callers pass are those their own offer or claim returned
 * (below the geometry they mapped, never read from the region), and every loop on the
 * shared word is bounded.
 */
#ifndef SMC_POOL_SLOT_H
#define SMC_POOL_SLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/base/rendezvous.h"
#include "core/shm/shm.h"

#define POOL_MAGIC   0x534d504cu /* "SMPL" */
#define POOL_VERSION 1u

#define POOL_HDR_SPACE  4096u
#define POOL_SLOT_CTL_SPACE 4096u

#define POOL_SLOTS_MAX  64u
#define POOL_RING_MIN   (16u * 1024)
#define POOL_RING_MAX   (1u << 20)

/* slot word: low nibble state, two done bits, generation from bit 8 */
#define POOL_ST_FREE     0u
#define POOL_ST_BUSY     1u
#define POOL_ST_OFFERED  2u
#define POOL_ST_CLAIMED  3u
#define POOL_ST_MASK     0x0fu
#define POOL_DONE_CLIENT 0x10u
#define POOL_DONE_SERVER 0x20u

struct pool_hdr {
	uint32_t magic, version;
	uint32_t nslots, ring_size;
	/* written by the server: no new offers (it forked, or stops serving the pool) */
	_Alignas(64) uint32_t retired;
	/* slots OFFERED now: the server skips a pool with none. A hint only. */
	_Alignas(64) uint32_t offered;
};

struct pool_slot_ctl {
	_Alignas(64) uint32_t word;
	uint16_t port;        /* the client's bound TCP endpoint, host order */
	uint8_t addr[16];     /* IPv4-mapped IPv6 (rdv_endpoint) */
};

enum pool_side { POOL_CLIENT = 0, POOL_SERVER = 1 };

/* Geometry limits: nslots 1..POOL_SLOTS_MAX, ring_size a power of two in
 * [POOL_RING_MIN, POOL_RING_MAX]. */
bool pool_geometry_ok(uint32_t nslots, uint32_t ring_size);
/* Bytes of the region. */
size_t pool_region_len(uint32_t nslots, uint32_t ring_size);
/* Client: writes the header of a fresh (zeroed) region. */
void pool_region_init(void *base, uint32_t nslots, uint32_t ring_size);
/* Server: the header of a mapped region matches the geometry it was offered with. */
bool pool_region_check(const void *base, uint32_t nslots, uint32_t ring_size);

struct pool_slot_ctl *pool_slot_ctl_at(void *base, uint32_t ring_size, uint32_t i);
/* The shared memory of slot i as a connection's map (base NULL: nothing to unmap). */
void pool_slot_map(void *base, uint32_t ring_size, uint32_t i, struct shm_map *out);

/* Client: takes a FREE slot for endpoint `client` (its bound address and port), resets
 * its connection header and publishes it OFFERED. The slot index, or -1 when none is
 * free or the pool is retired. */
int pool_slot_offer(void *base, uint32_t nslots, uint32_t ring_size,
		    const struct rdv_endpoint *client);
/* Client: takes back an OFFERED slot nobody claimed (the connect failed, nothing was
 * sent). false when the server claimed it meanwhile. */
bool pool_slot_withdraw(void *base, uint32_t ring_size, uint32_t i);
/* Server: claims the OFFERED slot whose endpoint is `client` (the accepted socket's
 * peer). The slot index, or -1 when no slot names it. */
int pool_slot_claim(void *base, uint32_t nslots, uint32_t ring_size,
		    const struct rdv_endpoint *client);
/* Either side, when its connection on slot i is gone: sets its done bit; true when that
 * made the slot FREE (both sides done). */
bool pool_slot_release(void *base, uint32_t ring_size, uint32_t i, enum pool_side side);
/* The slot word, for tests and the report of a stuck slot. */
uint32_t pool_slot_word(void *base, uint32_t ring_size, uint32_t i);

#endif
