/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: a connection pool region written by a hostile client
 * (core/shm/pool_slot.c). The region is set up as a client would, then the input overwrites
 * words of the header and of the slot control pages (the peer may write anything there,
 * pool_slot.h), and the server side runs on it: the header check, claims for endpoints
 * taken from the input, the map of a claimed slot and its release. Everything the server
 * returns must stay within the geometry it mapped, whatever the region says.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/shm/pool_slot.h"

#define NSLOTS_MAX 4u
#define RING POOL_RING_MIN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *region(void)
{
	static uint8_t *base;

	if (!base) {
		void *p = mmap(NULL, pool_region_len(NSLOTS_MAX, RING), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			abort();
		base = p;
	}
	return base;
}

static void endpoint(const uint8_t *b, struct rdv_endpoint *ep)
{
	memset(ep, 0, sizeof(*ep));
	ep->addr[10] = ep->addr[11] = 0xff;
	memcpy(&ep->addr[12], b, 4);
	ep->port = (uint16_t)(b[4] | b[5] << 8);
}

/* A peer's write: 2 bytes pick a 4-byte word in the header or a control page, 4 bytes
 * its value. */
static void peer_write(uint8_t *base, uint32_t nslots, const uint8_t *w)
{
	uint32_t page = w[0] % (nslots + 1), word = w[1] % (1024 / 4) /* first KiB */;
	uint8_t *at = page == 0 ? base : (uint8_t *)pool_slot_ctl_at(base, RING, page - 1);

	memcpy(at + word * 4, w + 2, 4);
}

static void check_map(uint8_t *base, uint32_t nslots, uint32_t i)
{
	struct shm_map m;
	uint8_t *end = base + pool_region_len(nslots, RING);

	pool_slot_map(base, RING, i, &m);
	if ((uint8_t *)m.hdr < base || (uint8_t *)(m.hdr + 1) > end || m.ring[0] < base ||
	    m.ring[1] + m.size[1] > end || m.size[0] != RING || m.size[1] != RING)
		abort();
	/* the server's data path touches the whole slot: ASan checks it is mapped */
	memset(m.ring[0], 0, m.size[0]);
	memset(m.ring[1], 0, m.size[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *base = region();
	uint32_t nslots;
	struct rdv_endpoint ep;
	int offers, i;

	if (size < 8)
		return 0;
	nslots = 1 + data[0] % NSLOTS_MAX;
	offers = data[1] % (nslots + 1);
	endpoint(data + 2, &ep);
	data += 8;
	size -= 8;

	memset(base, 0, pool_region_len(nslots, RING));
	pool_region_init(base, nslots, RING);
	for (int k = 0; k < offers; k++) {
		i = pool_slot_offer(base, nslots, RING, &ep);
		if (i < -1 || i >= (int)nslots)
			abort();
		ep.port++;
	}

	/* the peer's writes, then one claim per 6-byte endpoint that follows them */
	for (; size >= 6 && data[0] != 0xff; data += 6, size -= 6)
		peer_write(base, nslots, data);
	if (!pool_region_check(base, nslots, RING))
		return 0;
	for (; size >= 6; data += 6, size -= 6) {
		struct rdv_endpoint want;

		endpoint(data, &want);
		i = pool_slot_claim(base, nslots, RING, &want);
		if (i < -1 || i >= (int)nslots)
			abort();
		if (i < 0)
			continue;
		check_map(base, nslots, (uint32_t)i);
		(void)pool_slot_word(base, RING, (uint32_t)i);
		(void)pool_slot_release(base, RING, (uint32_t)i, POOL_SERVER);
	}
	return 0;
}
