/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: ring rewinds over shared memory (core/conn/conn_rewind.c, the checks
 * conn.c's rx_used / tx_free / tx_rewind make of what the peer writes into the control
 * block). Both ends of one direction run here in turn on one control block, as
 * conn.c chains the checks: a writer that rewinds whenever its ring is empty (a
 * superset of conn.c's policy, which also wants CONN_REWIND_MIN and twice the message
 * into the lap), a reader that validates the rewind and then the producer cursor, and
 * a hostile peer that overwrites any field of the block. The input: byte 0 the ring
 * size (2^12 .. 2^16), then ops of 3 bytes: write n, read n, or forge a field with the
 * next 8 bytes.
 *  - Always: what the reader takes as readable and the writer as room lies within the
 *    ring, at cursors valid for it (the copies then touch a ring of exactly that size:
 *    ASan sees a byte outside).
 *  - Until a field is forged: neither side aborts, the reader gets every byte in the
 *    order written, and at the end it has read everything.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/conn/conn_rewind.h"
#include "core/wire/cdc.h"
#include "core/wire/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct block {                 /* the fields of struct shm_dir_ctl the checks read */
	smc_cursor prod, cons, skip_at;
	uint32_t skip_seq, skip_done;
};

struct sim {
	uint32_t size;
	uint8_t *ring, *tmp;
	struct block b;
	smc_cursor tx_prod, tx_cons_seen; /* writer */
	smc_cursor rx_cons, rx_prod_seen; /* reader */
	uint64_t written, read;          /* stream offsets, for the contents */
	bool forged, tx_dead, rx_dead;
};

/* The stream's contents: byte off is off mod 251, a period prime to every ring size,
 * so a byte read from the wrong place (another lap, a skipped part) shows. */
#define PERIOD 251u
#define RING_MAX (1u << 16)
static uint8_t pattern[RING_MAX + PERIOD];

static const uint8_t *stream_at(uint64_t off)
{
	return pattern + off % PERIOD;
}

/* A buffer of exactly 2^shift bytes, so ASan reports any byte outside it; kept from
 * one input to the next (allocating 64 KiB each time halves the speed). */
static uint8_t *buffer(unsigned shift, unsigned which)
{
	static uint8_t *b[2][5];

	if (!b[which][shift - 12]) {
		b[which][shift - 12] = malloc(1u << shift);
		if (!b[which][shift - 12])
			abort();
	}
	return b[which][shift - 12];
}

/* conn.c's tx_free */
static int64_t tx_free(struct sim *s)
{
	smc_cursor cons = s->b.cons, base;
	int64_t room;

	if (cons != s->tx_cons_seen) {
		if (cdc_validate_peer_cons(cons, cons, s->tx_prod, s->size) < 0)
			return -1;
		s->tx_cons_seen = cons;
	}
	base = s->b.skip_seq == s->b.skip_done ? s->tx_cons_seen
		: conn_rewind_room_base(true, s->b.skip_at, s->tx_cons_seen, s->size);
	room = ring_free(s->tx_prod, base, s->size);
	return room < 0 ? 0 : room;
}

static void do_write(struct sim *s, uint32_t n)
{
	int64_t room;

	if (s->tx_dead)
		return;
	room = tx_free(s);
	if (room < 0) {
		if (!s->forged)
			abort(); /* an honest reader's cursor refused */
		s->tx_dead = true;
		return;
	}
	if (room > s->size)
		abort();
	/* conn.c's tx_rewind, before writing into an empty ring */
	if (n && room == s->size && cursor_count(s->tx_prod) != 0 &&
	    s->b.skip_seq == s->b.skip_done) {
		s->b.skip_at = s->tx_prod;
		s->b.skip_seq++;
		s->tx_prod = conn_rewind_lap_after(s->tx_prod, s->size);
		if (cursor_count(s->tx_prod) != 0 || !cursor_valid(s->tx_prod, s->size))
			abort();
		room = tx_free(s);
		if (room != s->size && !s->forged)
			abort(); /* a rewind never shrinks the room */
		if (room < 0 || room > s->size)
			abort();
	}
	if (n > room)
		n = (uint32_t)room;
	s->tx_prod = ring_copy_in(s->ring, s->size, s->tx_prod, stream_at(s->written), n);
	s->written += n;
	s->b.prod = s->tx_prod;
}

/* conn.c's rx_used with rx_take_rewind: readable bytes, or -1 for an abort */
static int64_t rx_used(struct sim *s)
{
	smc_cursor prod = s->b.prod;

	if (prod != s->rx_prod_seen) {
		if (s->b.skip_seq != s->b.skip_done) {
			smc_cursor next, old = s->rx_cons;

			if (conn_rewind_check(s->b.skip_at, s->rx_cons, s->rx_prod_seen, prod,
					      s->size, &next) < 0)
				return -1;
			/* the jump: to the next lap start, forward by less than a lap */
			if (cursor_count(next) != 0 || !cursor_valid(next, s->size) ||
			    cursor_diff(next, old, s->size) <= 0 ||
			    cursor_diff(next, old, s->size) >= s->size)
				abort();
			s->rx_cons = next;
			s->rx_prod_seen = next;
			s->b.skip_done = s->b.skip_seq;
			s->b.cons = next;
		}
		if (cdc_validate_peer_prod(prod, s->rx_prod_seen, s->rx_cons, s->size) < 0)
			return -1;
		s->rx_prod_seen = prod;
	}
	return ring_used(s->rx_prod_seen, s->rx_cons, s->size);
}

static void do_read(struct sim *s, uint32_t n)
{
	int64_t used;

	if (s->rx_dead)
		return;
	used = rx_used(s);
	if (used < 0) {
		if (!s->forged)
			abort(); /* an honest writer's rewind or cursor refused */
		s->rx_dead = true;
		return;
	}
	if (used > s->size || !cursor_valid(s->rx_cons, s->size) ||
	    !cursor_valid(s->rx_prod_seen, s->size))
		abort();
	if (n > used)
		n = (uint32_t)used;
	s->rx_cons = ring_copy_out(s->ring, s->size, s->rx_cons, s->tmp, n);
	if (!s->forged && memcmp(s->tmp, stream_at(s->read), n) != 0)
		abort();
	s->read += n;
	s->b.cons = s->rx_cons;
}

static void forge(struct sim *s, uint8_t field, const uint8_t v[8])
{
	uint64_t x;

	memcpy(&x, v, 8);
	s->forged = true;
	switch (field % 5) {
	case 0: s->b.prod = x; break;
	case 1: s->b.cons = x; break;
	case 2: s->b.skip_at = x; break;
	case 3: s->b.skip_seq = (uint32_t)x; break;
	default: s->b.skip_done = (uint32_t)x; break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sim s;
	size_t i = 1;
	unsigned shift;

	if (size < 1)
		return 0;
	if (pattern[1] == 0)
		for (uint32_t k = 0; k < sizeof(pattern); k++)
			pattern[k] = (uint8_t)(k % PERIOD);
	memset(&s, 0, sizeof(s));
	shift = 12 + data[0] % 5;
	s.size = 1u << shift;
	s.ring = buffer(shift, 0);
	s.tmp = buffer(shift, 1);
	memset(s.ring, 0xff, s.size); /* never a stream byte: no help from the last input */
	while (i + 3 <= size) {
		uint8_t op = data[i];
		uint32_t n = ((uint32_t)data[i + 1] << 8 | data[i + 2]) << (op >> 6);

		i += 3;
		switch (op % 3) {
		case 0:
			do_write(&s, n % (s.size + 1));
			break;
		case 1:
			do_read(&s, n % (s.size + 1));
			break;
		default:
			if (i + 8 > size)
				goto out;
			forge(&s, data[i - 2], data + i);
			i += 8;
			break;
		}
	}
out:
	/* an honest pair: the reader drains what was written */
	if (!s.forged) {
		do_read(&s, s.size);
		do_read(&s, s.size);
		if (s.read != s.written)
			abort();
	}
	return 0;
}
