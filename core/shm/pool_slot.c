/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <string.h>

#include "core/shm/pool_slot.h"

/* A peer that keeps changing the word makes a compare-and-swap loop fail forever: give
 * up after this many tries (the slot then stays as it is: the peer's loss). */
#define POOL_CAS_TRIES 64

_Static_assert(sizeof(struct pool_hdr) <= POOL_HDR_SPACE, "pool header fits its page");
_Static_assert(sizeof(struct pool_slot_ctl) + sizeof(struct shm_hdr) <= POOL_SLOT_CTL_SPACE,
	       "slot control fits its page");

static size_t slot_stride(uint32_t ring_size)
{
	return (size_t)POOL_SLOT_CTL_SPACE + 2 * (size_t)ring_size;
}

bool pool_geometry_ok(uint32_t nslots, uint32_t ring_size)
{
	return nslots >= 1 && nslots <= POOL_SLOTS_MAX && ring_size >= POOL_RING_MIN &&
	       ring_size <= POOL_RING_MAX && (ring_size & (ring_size - 1)) == 0;
}

size_t pool_region_len(uint32_t nslots, uint32_t ring_size)
{
	return (size_t)POOL_HDR_SPACE + (size_t)nslots * slot_stride(ring_size);
}

void pool_region_init(void *base, uint32_t nslots, uint32_t ring_size)
{
	struct pool_hdr *h = base;

	h->magic = POOL_MAGIC;
	h->version = POOL_VERSION;
	h->nslots = nslots;
	h->ring_size = ring_size;
}

bool pool_region_check(const void *base, uint32_t nslots, uint32_t ring_size)
{
	const struct pool_hdr *h = base;

	return h->magic == POOL_MAGIC && h->version == POOL_VERSION && h->nslots == nslots &&
	       h->ring_size == ring_size;
}

struct pool_slot_ctl *pool_slot_ctl_at(void *base, uint32_t ring_size, uint32_t i)
{
	return (struct pool_slot_ctl *)((uint8_t *)base + POOL_HDR_SPACE +
					(size_t)i * slot_stride(ring_size));
}

static struct shm_hdr *slot_shm(struct pool_slot_ctl *s)
{
	/* the connection header on its own cache lines, after the slot word's */
	return (struct shm_hdr *)((uint8_t *)s + 64 * ((sizeof(*s) + 63) / 64));
}

void pool_slot_map(void *base, uint32_t ring_size, uint32_t i, struct shm_map *out)
{
	struct pool_slot_ctl *s = pool_slot_ctl_at(base, ring_size, i);

	memset(out, 0, sizeof(*out));
	out->hdr = slot_shm(s);
	out->ring[0] = (uint8_t *)s + POOL_SLOT_CTL_SPACE;
	out->ring[1] = out->ring[0] + ring_size;
	out->size[0] = ring_size;
	out->size[1] = ring_size;
}

static uint32_t word_load(struct pool_slot_ctl *s)
{
	return __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
}

static bool word_cas(struct pool_slot_ctl *s, uint32_t *old, uint32_t new)
{
	return __atomic_compare_exchange_n(&s->word, old, new, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

static uint32_t next_gen(uint32_t w, uint32_t state)
{
	return ((w >> 8) + 1) << 8 | state;
}

static void offered_add(void *base, int d)
{
	struct pool_hdr *h = base;

	__atomic_add_fetch(&h->offered, (uint32_t)d, __ATOMIC_RELEASE);
}

int pool_slot_offer(void *base, uint32_t nslots, uint32_t ring_size,
		    const struct rdv_endpoint *client)
{
	struct pool_hdr *h = base;

	if (__atomic_load_n(&h->retired, __ATOMIC_ACQUIRE))
		return -1;
	for (uint32_t i = 0; i < nslots; i++) {
		struct pool_slot_ctl *s = pool_slot_ctl_at(base, ring_size, i);
		uint32_t w = word_load(s);
		struct shm_hdr *sh;

		if ((w & 0xffu) != POOL_ST_FREE || !word_cas(s, &w, (w & ~0xffu) | POOL_ST_BUSY))
			continue;
		sh = slot_shm(s);
		memset(sh, 0, sizeof(*sh));
		sh->magic = SHM_MAGIC;
		sh->version = SHM_VERSION;
		sh->ring_size[0] = sh->ring_size[1] = ring_size;
		sh->side_refs[0] = sh->side_refs[1] = 1;
		s->port = client->port;
		memcpy(s->addr, client->addr, sizeof(s->addr));
		offered_add(base, 1);
		/* release: the server that sees OFFERED sees the endpoint and the reset header */
		__atomic_store_n(&s->word, next_gen(w, POOL_ST_OFFERED), __ATOMIC_RELEASE);
		return (int)i;
	}
	return -1;
}

bool pool_slot_withdraw(void *base, uint32_t ring_size, uint32_t i)
{
	struct pool_slot_ctl *s = pool_slot_ctl_at(base, ring_size, i);
	uint32_t w = word_load(s);

	if ((w & 0xffu) != POOL_ST_OFFERED || !word_cas(s, &w, next_gen(w, POOL_ST_FREE)))
		return false;
	offered_add(base, -1);
	return true;
}

/* OFFERED word w -> CLAIMED. The client may add its done bit meanwhile (it closed
 * before our accept): the same offer, so try again while the generation holds. */
static bool claim_offer(struct pool_slot_ctl *s, uint32_t w)
{
	uint32_t gen = w >> 8;

	for (int tries = 0; tries < POOL_CAS_TRIES; tries++) {
		if (word_cas(s, &w, (w & ~POOL_ST_MASK) | POOL_ST_CLAIMED))
			return true;
		if ((w >> 8) != gen || (w & POOL_ST_MASK) != POOL_ST_OFFERED)
			return false;
	}
	return false;
}

int pool_slot_claim(void *base, uint32_t nslots, uint32_t ring_size,
		    const struct rdv_endpoint *client)
{
	struct pool_hdr *h = base;

	if (__atomic_load_n(&h->offered, __ATOMIC_ACQUIRE) == 0)
		return -1;
	for (uint32_t i = 0; i < nslots; i++) {
		struct pool_slot_ctl *s = pool_slot_ctl_at(base, ring_size, i);
		uint32_t w = word_load(s);

		if ((w & POOL_ST_MASK) != POOL_ST_OFFERED)
			continue;
		/* The endpoint belongs to the offer of generation w only if the word is still
		 * w after we read it: the compare-and-swap below checks exactly that. */
		if (__atomic_load_n(&s->port, __ATOMIC_RELAXED) != client->port ||
		    memcmp(s->addr, client->addr, sizeof(s->addr)) != 0)
			continue;
		if (!claim_offer(s, w))
			continue;
		offered_add(base, -1);
		return (int)i;
	}
	return -1;
}

bool pool_slot_release(void *base, uint32_t ring_size, uint32_t i, enum pool_side side)
{
	struct pool_slot_ctl *s = pool_slot_ctl_at(base, ring_size, i);
	uint32_t mine = side == POOL_CLIENT ? POOL_DONE_CLIENT : POOL_DONE_SERVER;
	uint32_t other = side == POOL_CLIENT ? POOL_DONE_SERVER : POOL_DONE_CLIENT;
	uint32_t w = word_load(s);

	for (int tries = 0; tries < POOL_CAS_TRIES; tries++) {
		uint32_t st = w & POOL_ST_MASK, nw;

		if (st == POOL_ST_CLAIMED)
			nw = (w & other) ? next_gen(w, POOL_ST_FREE) : (w | mine);
		else if (st == POOL_ST_OFFERED && side == POOL_CLIENT)
			nw = w | mine; /* the server may still claim it */
		else
			return false;
		if (nw == w)
			return false;
		if (word_cas(s, &w, nw))
			return (nw & POOL_ST_MASK) == POOL_ST_FREE;
	}
	return false;
}

uint32_t pool_slot_word(void *base, uint32_t ring_size, uint32_t i)
{
	return word_load(pool_slot_ctl_at(base, ring_size, i));
}
