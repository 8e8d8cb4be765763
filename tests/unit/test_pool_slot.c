/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for core/shm/pool_slot.c: the geometry and header of a connection pool region,
 * the slot layout (control page, connection header, two rings), and the slot state
 * machine (offer, claim, withdraw, release, generations, a retired pool, a full pool),
 * single-threaded and then raced by client and server threads on one shared region.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/shm/pool_slot.h"

#define K16 (16u * 1024)

/* ------------------------------------------------------------------ helpers */

static void *region_new(uint32_t nslots, uint32_t ring)
{
	void *p = mmap(NULL, pool_region_len(nslots, ring), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	pool_region_init(p, nslots, ring);
	return p;
}

static void region_free(void *p, uint32_t nslots, uint32_t ring)
{
	munmap(p, pool_region_len(nslots, ring));
}

/* ::ffff:10.0.<a>.<b> port `port` */
static struct rdv_endpoint ep_make(uint8_t a, uint8_t b, uint16_t port)
{
	struct rdv_endpoint e;

	memset(&e, 0, sizeof(e));
	e.addr[10] = e.addr[11] = 0xff;
	e.addr[12] = 10;
	e.addr[14] = a;
	e.addr[15] = b;
	e.port = port;
	return e;
}

static uint32_t offered(void *base)
{
	return __atomic_load_n(&((struct pool_hdr *)base)->offered, __ATOMIC_ACQUIRE);
}

static uint32_t st(void *base, uint32_t ring, uint32_t i)
{
	return pool_slot_word(base, ring, i) & 0xffu;
}

static uint32_t gen(void *base, uint32_t ring, uint32_t i)
{
	return pool_slot_word(base, ring, i) >> 8;
}

/* ------------------------------------------------------------------ geometry */

START_TEST(test_geometry)
{
	void *base;

	ck_assert(pool_geometry_ok(1, K16));
	ck_assert(pool_geometry_ok(64, 1u << 20));
	ck_assert(pool_geometry_ok(8, 64u * 1024));
	ck_assert(!pool_geometry_ok(0, K16));
	ck_assert(!pool_geometry_ok(65, K16));
	ck_assert(!pool_geometry_ok(UINT32_MAX, K16));
	ck_assert(!pool_geometry_ok(1, 8u * 1024));
	ck_assert(!pool_geometry_ok(1, 2u << 20));
	ck_assert(!pool_geometry_ok(1, K16 + 4096));   /* not a power of two */
	ck_assert(!pool_geometry_ok(1, (1u << 20) - 1));
	ck_assert(!pool_geometry_ok(1, 0));

	ck_assert_uint_eq(pool_region_len(1, K16), 4096 + 1 * (4096 + 2 * K16));
	ck_assert_uint_eq(pool_region_len(8, K16), 4096 + 8 * (4096 + 2 * K16));
	ck_assert_uint_eq(pool_region_len(64, 1u << 20),
			  4096 + (size_t)64 * (4096 + 2 * (size_t)(1u << 20)));

	base = region_new(4, K16);
	ck_assert(pool_region_check(base, 4, K16));
	ck_assert(!pool_region_check(base, 5, K16));
	ck_assert(!pool_region_check(base, 3, K16));
	ck_assert(!pool_region_check(base, 4, 2 * K16));
	((struct pool_hdr *)base)->magic ^= 1;
	ck_assert(!pool_region_check(base, 4, K16));
	((struct pool_hdr *)base)->magic ^= 1;
	ck_assert(pool_region_check(base, 4, K16));
	((struct pool_hdr *)base)->version++;
	ck_assert(!pool_region_check(base, 4, K16));
	region_free(base, 4, K16);

	/* a zeroed region was never initialised */
	base = calloc(1, pool_region_len(1, K16));
	ck_assert_ptr_nonnull(base);
	ck_assert(!pool_region_check(base, 1, K16));
	pool_region_init(base, 1, K16);
	ck_assert(pool_region_check(base, 1, K16));
	free(base);
}
END_TEST

/* ------------------------------------------------------------------ offer / claim */

START_TEST(test_offer_claim)
{
	const uint32_t n = 4, ring = K16;
	void *base = region_new(n, ring);
	uint8_t *end = (uint8_t *)base + pool_region_len(n, ring);
	struct rdv_endpoint a = ep_make(0, 1, 40001), b = ep_make(0, 2, 40003),
			    c = ep_make(0, 3, 40005), d = ep_make(0, 4, 40007);
	struct pool_slot_ctl *ctl;
	struct shm_map m;

	ck_assert_uint_eq(offered(base), 0);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), -1); /* nothing offered */

	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_OFFERED);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), 1);
	ck_assert_uint_eq(st(base, ring, 1), POOL_ST_OFFERED);
	ck_assert_uint_eq(offered(base), 2);
	ck_assert_uint_eq(st(base, ring, 2), POOL_ST_FREE);

	/* the endpoint is in the slot's control page */
	ctl = pool_slot_ctl_at(base, ring, 1);
	ck_assert_ptr_eq(ctl, (uint8_t *)base + 4096 + 1 * (4096 + 2 * ring));
	ck_assert_uint_eq(ctl->port, b.port);
	ck_assert_mem_eq(ctl->addr, b.addr, 16);

	ck_assert_int_eq(pool_slot_claim(base, n, ring, &c), -1); /* never offered */
	ck_assert_uint_eq(offered(base), 2);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &b), 1);
	ck_assert_uint_eq(st(base, ring, 1), POOL_ST_CLAIMED);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), 0);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_CLAIMED);
	ck_assert_uint_eq(offered(base), 0);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), -1); /* already claimed */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &b), -1);
	ck_assert_uint_eq(offered(base), 0);
	/* again with an offer outstanding, so that the claim looks at the slots */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &d), 2);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), -1);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &b), -1);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_CLAIMED);
	ck_assert_uint_eq(st(base, ring, 1), POOL_ST_CLAIMED);
	ck_assert_uint_eq(offered(base), 1);

	/* the slot's map: header between the control block and the rings */
	pool_slot_map(base, ring, 0, &m);
	ctl = pool_slot_ctl_at(base, ring, 0);
	ck_assert_ptr_eq(ctl, (uint8_t *)base + 4096);
	ck_assert_ptr_null(m.base);
	ck_assert_ptr_eq(m.ring[0], (uint8_t *)ctl + 4096);
	ck_assert_ptr_eq(m.ring[1], m.ring[0] + ring);
	ck_assert_uint_eq(m.size[0], ring);
	ck_assert_uint_eq(m.size[1], ring);
	ck_assert((uint8_t *)m.hdr >= (uint8_t *)(ctl + 1));
	ck_assert((uint8_t *)(m.hdr + 1) <= m.ring[0]);
	ck_assert_uint_eq((uintptr_t)m.hdr % 64, 0);
	ck_assert_uint_eq(m.hdr->magic, SHM_MAGIC);
	ck_assert_uint_eq(m.hdr->version, SHM_VERSION);
	ck_assert_uint_eq(m.hdr->ring_size[0], ring);
	ck_assert_uint_eq(m.hdr->ring_size[1], ring);
	ck_assert_uint_eq(m.hdr->side_refs[0], 1);
	ck_assert_uint_eq(m.hdr->side_refs[1], 1);
	ck_assert_uint_eq(m.hdr->dir[0].prod, 0);

	/* the last slot's rings end the region */
	pool_slot_map(base, ring, n - 1, &m);
	ck_assert_ptr_eq(m.ring[1] + ring, end);
	ck_assert(m.ring[0] > (uint8_t *)base && m.ring[1] + ring <= end);

	/* a re-offer resets the connection header the last connection left */
	ck_assert(pool_slot_release(base, ring, 0, POOL_CLIENT) == false);
	ck_assert(pool_slot_release(base, ring, 0, POOL_SERVER) == true);
	pool_slot_map(base, ring, 0, &m);
	m.hdr->magic = 0xdeadbeef;
	m.hdr->side_refs[0] = 7;
	m.hdr->side_refs[1] = 0;
	m.hdr->dir[0].prod = 12345;
	m.hdr->dir[0].wflags = SHM_W_CLOSED;
	m.hdr->dir[1].cons = 777;
	m.hdr->dir[1].rflags = SHM_R_ABORT;
	memset(m.ring[0], 0xab, 64); /* ring bytes are the connection's business */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &c), 0);
	ck_assert_uint_eq(m.hdr->magic, SHM_MAGIC);
	ck_assert_uint_eq(m.hdr->side_refs[0], 1);
	ck_assert_uint_eq(m.hdr->side_refs[1], 1);
	ck_assert_uint_eq(m.hdr->dir[0].prod, 0);
	ck_assert_uint_eq(m.hdr->dir[0].wflags, 0);
	ck_assert_uint_eq(m.hdr->dir[1].cons, 0);
	ck_assert_uint_eq(m.hdr->dir[1].rflags, 0);
	ck_assert_uint_eq(ctl->port, c.port);
	ck_assert_mem_eq(ctl->addr, c.addr, 16);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), -1); /* the old endpoint */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &c), 0);
	region_free(base, n, ring);
}
END_TEST

START_TEST(test_claim_whole_endpoint)
{
	const uint32_t n = 2, ring = K16;
	void *base = region_new(n, ring);
	struct rdv_endpoint a = ep_make(0, 1, 40001), x;

	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	for (int i = 0; i < 16; i++) {
		x = a;
		x.addr[i] ^= 0x01; /* same port, one address bit off */
		ck_assert_msg(pool_slot_claim(base, n, ring, &x) == -1, "addr byte %d ignored", i);
	}
	x = a;
	x.port ^= 0x100; /* same address, other port */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &x), -1);
	x = a;
	x.port ^= 0x1;
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &x), -1);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_OFFERED);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), 0);
	region_free(base, n, ring);
}
END_TEST

/* ------------------------------------------------------------------ withdraw */

START_TEST(test_withdraw)
{
	const uint32_t n = 2, ring = K16;
	void *base = region_new(n, ring);
	struct rdv_endpoint a = ep_make(0, 1, 40001), b = ep_make(0, 2, 40003);
	uint32_t g;

	ck_assert(!pool_slot_withdraw(base, ring, 0)); /* FREE */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), 1);
	ck_assert_uint_eq(offered(base), 2);
	g = gen(base, ring, 0);
	ck_assert(pool_slot_withdraw(base, ring, 0));
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);
	ck_assert_uint_gt(gen(base, ring, 0), g);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert(!pool_slot_withdraw(base, ring, 0)); /* twice */
	ck_assert_uint_eq(offered(base), 1);
	/* the endpoint is still written in the slot, but the slot is FREE (b stays
	 * offered, so that the claim does not stop at offered == 0) */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), -1);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert(pool_slot_withdraw(base, ring, 1));
	ck_assert_uint_eq(offered(base), 0);
	/* and it can be offered again */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	ck_assert_uint_eq(offered(base), 1);

	/* a claimed slot cannot be taken back */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), 0);
	g = pool_slot_word(base, ring, 0);
	ck_assert(!pool_slot_withdraw(base, ring, 0));
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), g);
	ck_assert_uint_eq(offered(base), 0);

	/* nor one the client already released (it sent something and closed) */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), 1);
	ck_assert(!pool_slot_release(base, ring, 1, POOL_CLIENT));
	g = pool_slot_word(base, ring, 1);
	ck_assert(!pool_slot_withdraw(base, ring, 1));
	ck_assert_uint_eq(pool_slot_word(base, ring, 1), g);
	ck_assert_uint_eq(offered(base), 1);
	region_free(base, n, ring);
}
END_TEST

/* ------------------------------------------------------------------ release */

START_TEST(test_release)
{
	const uint32_t n = 2, ring = K16;
	void *base = region_new(n, ring);
	struct rdv_endpoint a = ep_make(0, 1, 40001), b = ep_make(0, 2, 40003);
	uint32_t w, g;

	/* nothing to release on a FREE slot */
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT));
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), 0);

	/* client first, then server */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), 0);
	g = gen(base, ring, 0);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT));
	w = pool_slot_word(base, ring, 0);
	ck_assert_uint_eq(w & 0xffu, POOL_ST_CLAIMED | POOL_DONE_CLIENT);
	ck_assert_uint_eq(w >> 8, g);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT)); /* twice */
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), w);
	ck_assert(pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);
	ck_assert_uint_gt(gen(base, ring, 0), g);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER)); /* FREE now */
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT));
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);

	/* server first, then client */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), 0);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &b), 0);
	g = gen(base, ring, 0);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER));
	w = pool_slot_word(base, ring, 0);
	ck_assert_uint_eq(w & 0xffu, POOL_ST_CLAIMED | POOL_DONE_SERVER);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER)); /* twice */
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), w);
	ck_assert(pool_slot_release(base, ring, 0, POOL_CLIENT));
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);
	ck_assert_uint_gt(gen(base, ring, 0), g);

	/* the server cannot release a slot it never claimed */
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	w = pool_slot_word(base, ring, 0);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), w);
	ck_assert_uint_eq(offered(base), 1);

	/* a client that closes before the accept: the server still claims the slot */
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT));
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), w | POOL_DONE_CLIENT);
	ck_assert_uint_eq(offered(base), 1);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT)); /* twice */
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), w | POOL_DONE_CLIENT);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_uint_eq(pool_slot_word(base, ring, 0), w | POOL_DONE_CLIENT);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), 0);
	ck_assert_uint_eq(offered(base), 0);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_CLAIMED | POOL_DONE_CLIENT);
	ck_assert(pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);
	ck_assert_uint_gt(gen(base, ring, 0), w >> 8);
	ck_assert_uint_eq(st(base, ring, 1), POOL_ST_FREE);
	region_free(base, n, ring);
}
END_TEST

/* ------------------------------------------------------------------ generations */

START_TEST(test_generation)
{
	const uint32_t n = 1, ring = K16;
	void *base = region_new(n, ring);
	struct rdv_endpoint a = ep_make(0, 1, 40001), b = ep_make(0, 2, 40003);
	uint32_t g0, g1, g2, g3, g4;

	g0 = gen(base, ring, 0);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	g1 = gen(base, ring, 0);
	ck_assert_uint_gt(g1, g0);
	ck_assert(pool_slot_withdraw(base, ring, 0));
	g2 = gen(base, ring, 0);
	ck_assert_uint_gt(g2, g1);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), 0);
	g3 = gen(base, ring, 0);
	ck_assert_uint_gt(g3, g2);
	/* the slot now names b: a claim for the first offer's endpoint fails */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), -1);
	ck_assert_uint_eq(gen(base, ring, 0), g3);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &b), 0);
	ck_assert_uint_eq(gen(base, ring, 0), g3); /* a claim keeps the generation */
	ck_assert(!pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_uint_eq(gen(base, ring, 0), g3);
	ck_assert(pool_slot_release(base, ring, 0, POOL_CLIENT));
	g4 = gen(base, ring, 0);
	ck_assert_uint_gt(g4, g3);

	/* many rounds: the generation keeps growing, one step per transition to
	 * OFFERED or FREE, and the state bits always come back clean */
	for (uint32_t r = 0; r < 1000; r++) {
		struct rdv_endpoint e = ep_make(1, (uint8_t)r, (uint16_t)(1000 + r));
		uint32_t before = gen(base, ring, 0);

		ck_assert_int_eq(pool_slot_offer(base, n, ring, &e), 0);
		ck_assert_uint_eq(gen(base, ring, 0), before + 1);
		if (r % 2) {
			ck_assert(pool_slot_withdraw(base, ring, 0));
		} else {
			ck_assert_int_eq(pool_slot_claim(base, n, ring, &e), 0);
			ck_assert(!pool_slot_release(base, ring, 0, r % 4 ? POOL_CLIENT : POOL_SERVER));
			ck_assert(pool_slot_release(base, ring, 0, r % 4 ? POOL_SERVER : POOL_CLIENT));
		}
		ck_assert_uint_eq(pool_slot_word(base, ring, 0), (before + 2) << 8);
	}
	ck_assert_uint_eq(offered(base), 0);
	region_free(base, n, ring);
}
END_TEST

/* ------------------------------------------------------------------ retired pool */

START_TEST(test_retired)
{
	const uint32_t n = 2, ring = K16;
	void *base = region_new(n, ring);
	struct pool_hdr *h = base;
	struct rdv_endpoint a = ep_make(0, 1, 40001), b = ep_make(0, 2, 40003);

	ck_assert_int_eq(pool_slot_offer(base, n, ring, &a), 0);
	h->retired = 1;
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), -1);
	ck_assert_uint_eq(pool_slot_word(base, ring, 1), 0);
	ck_assert_uint_eq(offered(base), 1);
	/* what was offered before can still be accepted */
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &a), 0);
	ck_assert(!pool_slot_release(base, ring, 0, POOL_CLIENT));
	ck_assert(pool_slot_release(base, ring, 0, POOL_SERVER));
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), -1);
	ck_assert_uint_eq(st(base, ring, 0), POOL_ST_FREE);
	ck_assert_uint_eq(offered(base), 0);
	h->retired = 0;
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &b), 0);
	region_free(base, n, ring);
}
END_TEST

/* ------------------------------------------------------------------ full pool */

START_TEST(test_full)
{
	const uint32_t n = 4, ring = K16;
	void *base = region_new(n, ring);
	struct rdv_endpoint e[6];

	for (int i = 0; i < 6; i++)
		e[i] = ep_make(0, (uint8_t)(i + 1), (uint16_t)(40001 + 2 * i));
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pool_slot_offer(base, n, ring, &e[i]), i);
	ck_assert_uint_eq(offered(base), 4);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &e[4]), -1);
	ck_assert_uint_eq(offered(base), 4);
	/* the fifth offer touched nothing */
	for (uint32_t i = 0; i < n; i++) {
		struct pool_slot_ctl *ctl = pool_slot_ctl_at(base, ring, i);

		ck_assert_uint_eq(st(base, ring, i), POOL_ST_OFFERED);
		ck_assert_uint_eq(ctl->port, e[i].port);
	}

	ck_assert_int_eq(pool_slot_claim(base, n, ring, &e[2]), 2);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &e[4]), -1); /* claimed is not free */
	ck_assert(!pool_slot_release(base, ring, 2, POOL_CLIENT));
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &e[4]), -1); /* half released */
	ck_assert(pool_slot_release(base, ring, 2, POOL_SERVER));
	ck_assert_uint_eq(offered(base), 3);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &e[4]), 2);
	ck_assert_uint_eq(offered(base), 4);
	ck_assert_int_eq(pool_slot_offer(base, n, ring, &e[5]), -1);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &e[4]), 2);
	ck_assert_int_eq(pool_slot_claim(base, n, ring, &e[2]), -1);
	region_free(base, n, ring);
}
END_TEST

/* ------------------------------------------------------------------ concurrency */

/*
 * Client threads offer unique endpoints (addr byte = thread, port = iteration + 1) and
 * announce each in a queue; server threads claim what is announced. A client then
 * (i % 3 == 0) withdraws it, (1) releases it at once, without waiting for the accept,
 * or (2) waits until it is claimed and releases it. Each server releases what it
 * claimed at once. Every side records what the calls returned; the checks come after.
 */
#define C_CLIENTS 2
#define C_SERVERS 2
#define C_ITERS   20000
#define C_SLOTS   8u
#define C_RING    K16
#define C_WAIT_S  5 /* give up a wait after this: a lost offer must not hang the test */

struct c_ep {
	int offer_slot;   /* written by the client before it announces */
	int claims;       /* successful claims by servers */
	int claim_failed; /* a server's claim returned -1 */
	int withdrawn;    /* the client's withdraw returned true */
	int withdraw_lost;/* the client's withdraw returned false */
	int frees;        /* releases that returned true */
	int bad_slot;     /* claimed slot is not the offered one */
	int double_claim; /* a second claim of a claimed endpoint succeeded */
};

struct c_state {
	void *base;
	struct c_ep ep[C_CLIENTS][C_ITERS];
	pthread_mutex_t lock;
	uint32_t q[C_CLIENTS * C_ITERS];
	size_t qhead, qtail;
	int clients_done;
	int offer_timeouts, wait_timeouts, lost_waits;
	struct timespec deadline;
};

static struct c_state *cs;

static bool c_expired(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > cs->deadline.tv_sec ||
	       (now.tv_sec == cs->deadline.tv_sec && now.tv_nsec > cs->deadline.tv_nsec);
}

static struct rdv_endpoint c_endpoint(int tid, int i)
{
	return ep_make(0xc0, (uint8_t)(tid + 1), (uint16_t)(i + 1));
}

static int ld(int *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void inc(int *p)
{
	__atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL);
}

static void c_release(int tid, int i, int slot, enum pool_side side)
{
	if (pool_slot_release(cs->base, C_RING, (uint32_t)slot, side))
		inc(&cs->ep[tid][i].frees);
}

/* Client: waits until a server claimed (tid, i). false when no server will. */
static bool c_wait_claimed(int tid, int i)
{
	struct c_ep *e = &cs->ep[tid][i];

	for (unsigned spins = 0;; spins++) {
		if (ld(&e->claims))
			return true;
		if (ld(&e->claim_failed))
			return ld(&e->claims) != 0;
		if (spins % 256 == 255) {
			if (c_expired()) {
				inc(&cs->wait_timeouts);
				return false;
			}
			sched_yield();
		}
	}
}

static void *c_client(void *arg)
{
	int tid = (int)(intptr_t)arg;

	for (int i = 0; i < C_ITERS; i++) {
		struct rdv_endpoint ep = c_endpoint(tid, i);
		struct c_ep *e = &cs->ep[tid][i];
		int slot;

		while ((slot = pool_slot_offer(cs->base, C_SLOTS, C_RING, &ep)) < 0) {
			if (c_expired()) {
				inc(&cs->offer_timeouts);
				goto out;
			}
			sched_yield(); /* the pool is full of slots servers have not released */
		}
		e->offer_slot = slot;
		pthread_mutex_lock(&cs->lock);
		cs->q[cs->qtail++] = (uint32_t)tid << 16 | (uint32_t)i;
		pthread_mutex_unlock(&cs->lock);

		switch (i % 3) {
		case 0:
			/* sometimes at once, sometimes after a moment: both outcomes happen */
			for (int k = 0; k < (i & 1 ? (i % 61) * 40 : 0); k++)
				__asm__ volatile("" ::: "memory");
			if (pool_slot_withdraw(cs->base, C_RING, (uint32_t)slot)) {
				inc(&e->withdrawn);
			} else {
				inc(&e->withdraw_lost);
				if (c_wait_claimed(tid, i))
					c_release(tid, i, slot, POOL_CLIENT);
				else
					inc(&cs->lost_waits);
			}
			break;
		case 1:
			c_release(tid, i, slot, POOL_CLIENT);
			break;
		default:
			if (c_wait_claimed(tid, i)) {
				c_release(tid, i, slot, POOL_CLIENT);
			} else {
				inc(&cs->lost_waits);
				/* take it back so that the pool does not fill up */
				if (pool_slot_withdraw(cs->base, C_RING, (uint32_t)slot))
					inc(&e->withdrawn);
			}
			break;
		}
	}
out:
	inc(&cs->clients_done);
	return NULL;
}

static void *c_server(void *arg)
{
	(void)arg;
	for (;;) {
		uint32_t v = 0;
		bool got = false;
		int done = ld(&cs->clients_done);

		pthread_mutex_lock(&cs->lock);
		if (cs->qhead < cs->qtail) {
			v = cs->q[cs->qhead++];
			got = true;
		}
		pthread_mutex_unlock(&cs->lock);
		if (!got) {
			if (done == C_CLIENTS)
				break; /* nothing left, and nothing will come */
			sched_yield();
			continue;
		}

		int tid = (int)(v >> 16), i = (int)(v & 0xffff);
		struct rdv_endpoint ep = c_endpoint(tid, i);
		struct c_ep *e = &cs->ep[tid][i];
		int s = pool_slot_claim(cs->base, C_SLOTS, C_RING, &ep);

		if (s < 0) {
			inc(&e->claim_failed);
			continue;
		}
		if (s != e->offer_slot)
			inc(&e->bad_slot);
		inc(&e->claims);
		if (pool_slot_claim(cs->base, C_SLOTS, C_RING, &ep) >= 0)
			inc(&e->double_claim);
		c_release(tid, i, s, POOL_SERVER);
	}
	return NULL;
}

START_TEST(test_concurrent)
{
	pthread_t cl[C_CLIENTS], sv[C_SERVERS];
	int both = 0, multi = 0, neither = 0, lost_claims = 0, bad_frees = 0, bad_slots = 0,
	    doubles = 0, n_withdrawn = 0, n_claimed = 0, n_lost_race = 0, n_early = 0,
	    not_free = 0;

	cs = calloc(1, sizeof(*cs));
	ck_assert_ptr_nonnull(cs);
	cs->base = region_new(C_SLOTS, C_RING);
	pthread_mutex_init(&cs->lock, NULL);
	clock_gettime(CLOCK_MONOTONIC, &cs->deadline);
	cs->deadline.tv_sec += C_WAIT_S;

	for (int t = 0; t < C_SERVERS; t++)
		ck_assert_int_eq(pthread_create(&sv[t], NULL, c_server, NULL), 0);
	for (int t = 0; t < C_CLIENTS; t++)
		ck_assert_int_eq(pthread_create(&cl[t], NULL, c_client, (void *)(intptr_t)t), 0);
	for (int t = 0; t < C_CLIENTS; t++)
		pthread_join(cl[t], NULL);
	for (int t = 0; t < C_SERVERS; t++)
		pthread_join(sv[t], NULL);

	for (int t = 0; t < C_CLIENTS; t++) {
		for (int i = 0; i < C_ITERS; i++) {
			struct c_ep *e = &cs->ep[t][i];

			both += e->withdrawn && e->claims;
			multi += e->claims > 1;
			neither += !e->withdrawn && !e->claims;
			/* a claim may fail only because the client took the slot back */
			lost_claims += e->claim_failed && !e->withdrawn;
			/* a claimed slot is freed exactly once; a withdrawn one by the withdraw */
			bad_frees += e->frees != (e->claims ? 1 : 0);
			bad_slots += e->bad_slot;
			doubles += e->double_claim;
			n_withdrawn += e->withdrawn;
			n_claimed += e->claims != 0;
			n_lost_race += e->withdraw_lost;
			n_early += i % 3 == 1 && e->claims;
		}
	}
	for (uint32_t s = 0; s < C_SLOTS; s++)
		not_free += st(cs->base, C_RING, s) != POOL_ST_FREE;

	ck_assert_msg(both == 0, "%d endpoints both withdrawn and claimed", both);
	ck_assert_msg(multi == 0 && doubles == 0, "%d endpoints claimed twice (%d re-claims)",
		      multi, doubles);
	ck_assert_msg(bad_slots == 0, "%d claims found another slot than the offer's", bad_slots);
	ck_assert_msg(lost_claims == 0 && cs->lost_waits == 0,
		      "%d claims of offered, never withdrawn endpoints returned -1 "
		      "(%d clients waited in vain)", lost_claims, cs->lost_waits);
	ck_assert_msg(cs->offer_timeouts == 0 && cs->wait_timeouts == 0,
		      "gave up: %d offers found no free slot, %d waits saw no claim",
		      cs->offer_timeouts, cs->wait_timeouts);
	ck_assert_msg(neither == 0, "%d offers neither withdrawn nor claimed", neither);
	ck_assert_msg(bad_frees == 0, "%d claimed slots not freed exactly once", bad_frees);
	ck_assert_msg(not_free == 0 && offered(cs->base) == 0,
		      "at the end %d slots not FREE, offered %u", not_free, offered(cs->base));
	/* the run went through every path */
	ck_assert_int_eq(n_withdrawn + n_claimed, C_CLIENTS * C_ITERS);
	ck_assert_int_gt(n_withdrawn, 0);
	ck_assert_int_gt(n_claimed, C_CLIENTS * C_ITERS / 2);
	ck_assert_int_gt(n_early, 0);
	(void)n_lost_race; /* withdraws that lost to a claim: timing, often 0 */

	region_free(cs->base, C_SLOTS, C_RING);
	pthread_mutex_destroy(&cs->lock);
	free(cs);
	cs = NULL;
}
END_TEST

/*
 * The accept of a connection whose client already closed: the server's claim races the
 * client's release, which adds the client's done bit to the OFFERED word. The claim
 * must still succeed (the slot names the endpoint and nobody withdrew it).
 */
#define R_ROUNDS 100000

static struct {
	void *base;
	int seq;     /* round the client announced */
	int served;  /* round the server finished */
	int claimed;
	int failed;
	uint32_t fail_word;
	int fail_round;
} rc;

static void *r_server(void *arg)
{
	(void)arg;
	for (int r = 1; r <= R_ROUNDS; r++) {
		struct rdv_endpoint ep = ep_make(0xd0, 0, (uint16_t)r);
		int s;

		for (unsigned k = 1; ld(&rc.seq) < r; k++)
			if (k % 1024 == 0)
				sched_yield();
		s = pool_slot_claim(rc.base, 1, K16, &ep);
		if (s == 0) {
			rc.claimed++;
			pool_slot_release(rc.base, K16, 0, POOL_SERVER);
		} else if (!rc.failed++) {
			rc.fail_word = pool_slot_word(rc.base, K16, 0);
			rc.fail_round = r;
		}
		__atomic_store_n(&rc.served, r, __ATOMIC_RELEASE);
		if (s != 0)
			break; /* the slot stays OFFERED: nothing more to run */
	}
	return NULL;
}

START_TEST(test_claim_vs_client_release)
{
	pthread_t th;
	int r, offer_failed = 0;

	memset(&rc, 0, sizeof(rc));
	rc.base = region_new(1, K16);
	ck_assert_int_eq(pthread_create(&th, NULL, r_server, NULL), 0);
	for (r = 1; r <= R_ROUNDS; r++) {
		struct rdv_endpoint ep = ep_make(0xd0, 0, (uint16_t)r);

		if (pool_slot_offer(rc.base, 1, K16, &ep) != 0) {
			offer_failed = r;
			break;
		}
		__atomic_store_n(&rc.seq, r, __ATOMIC_RELEASE);
		/* a delay that sweeps the claim's window between its read of the word and
		 * its compare-and-swap */
		for (int k = 0; k < r % 256; k++)
			__asm__ volatile("" ::: "memory");
		pool_slot_release(rc.base, K16, 0, POOL_CLIENT); /* closed before the accept */
		for (unsigned k = 1; ld(&rc.served) < r; k++)
			if (k % 1024 == 0)
				sched_yield();
		if (rc.failed)
			break;
	}
	__atomic_store_n(&rc.seq, R_ROUNDS, __ATOMIC_RELEASE); /* let the server finish */
	pthread_join(th, NULL);
	ck_assert_msg(offer_failed == 0, "round %d: the slot was not free (word %#x)",
		      offer_failed, pool_slot_word(rc.base, K16, 0));
	ck_assert_msg(rc.failed == 0,
		      "round %d: the claim of an OFFERED slot returned -1 while the client "
		      "released it (word now %#x)", rc.fail_round, rc.fail_word);
	ck_assert_int_eq(rc.claimed, R_ROUNDS);
	ck_assert_uint_eq(st(rc.base, K16, 0), POOL_ST_FREE);
	ck_assert_uint_eq(offered(rc.base), 0);
	region_free(rc.base, 1, K16);
}
END_TEST

static Suite *pool_slot_suite(void)
{
	Suite *s = suite_create("pool_slot");
	TCase *tc = tcase_create("slots");

	tcase_add_test(tc, test_geometry);
	tcase_add_test(tc, test_offer_claim);
	tcase_add_test(tc, test_claim_whole_endpoint);
	tcase_add_test(tc, test_withdraw);
	tcase_add_test(tc, test_release);
	tcase_add_test(tc, test_generation);
	tcase_add_test(tc, test_retired);
	tcase_add_test(tc, test_full);
	suite_add_tcase(s, tc);

	tc = tcase_create("concurrent");
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, test_concurrent);
	tcase_add_test(tc, test_claim_vs_client_release);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pool_slot_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);

	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
