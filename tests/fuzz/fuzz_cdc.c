/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: CDC messages and the cursors a peer announces (core/wire/cdc.c,
 * core/wire/ring.c). The first 44 bytes are a CDC message off the wire; the bytes after them
 * pick the receiver's state (its last seen cursors and ring size). Whatever
 * cdc_validate_peer_prod/cons accept must be a cursor the ring arithmetic can use
 * without reading or writing outside the ring: the harness then copies through a ring of
 * exactly that size, so a validation gap shows up as an ASan report.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/cdc.h"
#include "core/wire/ring.h"

#define RING_MAX_SHIFT 16 /* rings of 2^12 .. 2^16 bytes: enough for the arithmetic */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t take64(const uint8_t **p, size_t *left)
{
	uint64_t v = 0;
	size_t n = *left < 8 ? *left : 8;

	memcpy(&v, *p, n);
	*p += n;
	*left -= n;
	return v;
}

/* A cursor the receiver itself holds: always valid for its ring (it made it). */
static smc_cursor own_cursor(uint64_t raw, uint32_t size)
{
	return cursor_make((uint16_t)(raw >> 32), (uint32_t)raw & (size - 1));
}

static void check_prod(smc_cursor prod, smc_cursor last, smc_cursor cons, uint32_t size,
		       uint8_t *ring, uint8_t *tmp)
{
	int64_t used;

	if (cdc_validate_peer_prod(prod, last, cons, size) != 0)
		return;
	used = ring_used(prod, cons, size);
	if (!cursor_valid(prod, size) || used < 0 || used > size ||
	    cursor_diff(prod, last, size) < 0)
		abort();
	(void)ring_copy_out(ring, size, cons, tmp, (size_t)used);
}

static void check_cons(smc_cursor cons, smc_cursor last, smc_cursor prod, uint32_t size,
		       uint8_t *ring, const uint8_t *tmp)
{
	int64_t room;

	if (cdc_validate_peer_cons(cons, last, prod, size) != 0)
		return;
	room = ring_free(prod, cons, size);
	if (!cursor_valid(cons, size) || room < 0 || room > size)
		abort();
	(void)ring_copy_in(ring, size, prod, tmp, (size_t)room);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t ring[1u << RING_MAX_SHIFT], tmp[1u << RING_MAX_SHIFT];
	const uint8_t *p;
	size_t left;
	struct cdc_msg m;
	uint8_t again[CDC_MSG_LEN];
	uint32_t rsize;
	smc_cursor last_prod, my_cons, last_cons, my_prod;

	memset(&m, 0xa5, sizeof(m));
	if (cdc_decode(data, size, &m) != 0)
		return 0;
	if (size < CDC_MSG_LEN)
		abort();
	/* what was decoded re-encodes when it is encodable at all */
	if (cdc_encode(&m, again) == 0) {
		struct cdc_msg m2;

		if (cdc_decode(again, sizeof(again), &m2) != 0 || m2.seqno != m.seqno ||
		    m2.token != m.token || m2.st.prod != m.st.prod || m2.st.cons != m.st.cons ||
		    m2.st.flags != m.st.flags || m2.credits != m.credits)
			abort();
	}

	p = data + CDC_MSG_LEN;
	left = size - CDC_MSG_LEN;
	rsize = 1u << (12 + (left ? p[0] % (RING_MAX_SHIFT - 11) : 0));
	if (left) {
		p++;
		left--;
	}
	last_prod = own_cursor(take64(&p, &left), rsize);
	my_cons = own_cursor(take64(&p, &left), rsize);
	last_cons = own_cursor(take64(&p, &left), rsize);
	my_prod = own_cursor(take64(&p, &left), rsize);

	/* the receiver's own pair is consistent in a real connection: keep it so */
	if (ring_used(last_prod, my_cons, rsize) < 0)
		my_cons = last_prod;
	if (ring_used(my_prod, last_cons, rsize) < 0)
		last_cons = my_prod;

	check_prod(m.st.prod, last_prod, my_cons, rsize, ring, tmp);
	check_cons(m.st.cons, last_cons, my_prod, rsize, ring, tmp);
	/* shared memory: the writer checks the reader's cursor against itself (conn.c) */
	check_cons(m.st.cons, m.st.cons, my_prod, rsize, ring, tmp);

	{
		struct cdc_credits c;

		if (cdc_credits_init(&c, 16, 16) == 0 && cdc_credits_grant(&c, m.credits) == 0 &&
		    c.avail > c.peer_depth)
			abort();
	}
	return 0;
}
