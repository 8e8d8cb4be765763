/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for core/wire/cdc.c: CDC wire format, peer cursor validation, the consumer
 * cursor update policy (with a deterministic writer/reader simulation) and RQ credits.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/cdc.h"

/* ------------------------------------------------------------------ wire format */

START_TEST(test_cdc_layout)
{
	struct cdc_msg m = {
		.seqno = 0x1234,
		.token = 0xA1B2C3D4,
		.st = { .prod = cursor_make(0x0102, 0x03040506),
			.cons = cursor_make(0xFFFF, 0x0000FFFF),
			.flags = CDC_WRITE_BLOCKED | CDC_URG_PRESENT | CDC_CONN_CLOSED },
		.credits = 7,
	};
	uint8_t b[CDC_MSG_LEN];
	static const uint8_t want[CDC_MSG_LEN] = {
		0xFE, 44, 0x12, 0x34, 0xA1, 0xB2, 0xC3, 0xD4,
		0, 0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
		0, 0, 0xFF, 0xFF, 0x00, 0x00, 0xFF, 0xFF,
		0xA0, 0x40, 7,
	};

	ck_assert_int_eq(cdc_encode(&m, b), 0);
	ck_assert_mem_eq(b, want, CDC_MSG_LEN);
}
END_TEST

START_TEST(test_cdc_flags_bits)
{
	static const struct { uint32_t f; int byte; uint8_t bit; } map[] = {
		{ CDC_WRITE_BLOCKED, 24, 0x80 }, { CDC_URG_PENDING, 24, 0x40 },
		{ CDC_URG_PRESENT, 24, 0x20 },   { CDC_CONS_UPDATE_REQ, 24, 0x10 },
		{ CDC_FAILOVER_VALID, 24, 0x08 }, { CDC_DONE_WRITING, 25, 0x80 },
		{ CDC_CONN_CLOSED, 25, 0x40 },   { CDC_CONN_ABORT, 25, 0x20 },
		{ CDC_WENT_TCP, 27, 0x80 },      { CDC_TCP_ACK, 27, 0x40 },
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		struct cdc_msg m = { .st = { .flags = map[i].f } }, d;
		uint8_t b[CDC_MSG_LEN];

		ck_assert_int_eq(cdc_encode(&m, b), 0);
		for (int k = 24; k < 28; k++)
			if (k != 26) /* the credits byte */
				ck_assert_uint_eq(b[k], k == map[i].byte ? map[i].bit : 0);
		ck_assert_int_eq(cdc_decode(b, sizeof(b), &d), 0);
		ck_assert_uint_eq(d.st.flags, map[i].f);
	}
}
END_TEST

START_TEST(test_cdc_round_trip)
{
	uint32_t seed = 99;

	for (int i = 0; i < 2000; i++) {
		struct cdc_msg m, d;
		uint8_t b[CDC_MSG_LEN];

		seed = seed * 1664525u + 1013904223u;
		m.seqno = (uint16_t)seed;
		m.token = seed ^ 0x5A5A5A5Au;
		m.st.prod = cursor_make((uint16_t)(seed >> 7), seed * 3u);
		m.st.cons = cursor_make((uint16_t)(seed >> 3), seed * 5u);
		m.st.flags = seed & CDC_FLAGS_MASK;
		m.credits = (uint8_t)(seed >> 24);
		ck_assert_int_eq(cdc_encode(&m, b), 0);
		ck_assert_int_eq(cdc_decode(b, sizeof(b), &d), 0);
		ck_assert_uint_eq(d.seqno, m.seqno);
		ck_assert_uint_eq(d.token, m.token);
		ck_assert_uint_eq(d.st.prod, m.st.prod);
		ck_assert_uint_eq(d.st.cons, m.st.cons);
		ck_assert_uint_eq(d.st.flags, m.st.flags);
		ck_assert_uint_eq(d.credits, m.credits);
	}
}
END_TEST

START_TEST(test_cdc_reject)
{
	struct cdc_msg m = { .seqno = 1 }, d;
	uint8_t b[CDC_MSG_LEN + 4];

	ck_assert_int_eq(cdc_encode(&m, b), 0);
	for (size_t len = 0; len < CDC_MSG_LEN; len++)
		ck_assert_int_eq(cdc_decode(b, len, &d), -EBADMSG);
	ck_assert_int_eq(cdc_decode(b, CDC_MSG_LEN + 4, &d), 0); /* trailing bytes: ok */
	b[0] = 0xFD;
	ck_assert_int_eq(cdc_decode(b, CDC_MSG_LEN, &d), -EBADMSG);
	b[0] = 0xFE;
	b[1] = 43;
	ck_assert_int_eq(cdc_decode(b, CDC_MSG_LEN, &d), -EBADMSG);

	m.st.prod = 1ULL << 48;
	ck_assert_int_eq(cdc_encode(&m, b), -EINVAL);
	m.st.prod = 0;
	m.st.cons = 1ULL << 63;
	ck_assert_int_eq(cdc_encode(&m, b), -EINVAL);
	m.st.cons = 0;
	m.st.flags = 1u << 20;
	ck_assert_int_eq(cdc_encode(&m, b), -EINVAL);
}
END_TEST

/* Reserved cursor bits arrive as-is and make the cursor invalid for validation. */
START_TEST(test_cdc_reserved_cursor_bits)
{
	struct cdc_msg m = { .st = { .prod = cursor_make(0, 5) } }, d;
	uint8_t b[CDC_MSG_LEN];

	ck_assert_int_eq(cdc_encode(&m, b), 0);
	b[8] = 0x01;
	ck_assert_int_eq(cdc_decode(b, sizeof(b), &d), 0);
	ck_assert(!cursor_valid(d.st.prod, 1024));
	ck_assert_int_eq(cdc_validate_peer_prod(d.st.prod, 0, 0, 1024), -EPROTO);
}
END_TEST

/* Every single-byte mutation decodes or fails cleanly; what decodes re-encodes to the
 * mutated bytes except in positions RFC 7609 reserves (ignored on receipt). */
START_TEST(test_cdc_mutation)
{
	struct cdc_msg m = {
		.seqno = 77, .token = 0x01020304,
		.st = { .prod = cursor_make(3, 100), .cons = cursor_make(2, 900),
			.flags = CDC_WRITE_BLOCKED | CDC_DONE_WRITING },
		.credits = 3,
	};
	uint8_t b[CDC_MSG_LEN], mut[CDC_MSG_LEN], re[CDC_MSG_LEN];

	ck_assert_int_eq(cdc_encode(&m, b), 0);
	for (int pos = 0; pos < CDC_MSG_LEN; pos++) {
		for (int bit = 0; bit < 8; bit++) {
			struct cdc_msg d;

			memcpy(mut, b, sizeof(b));
			mut[pos] ^= (uint8_t)(1u << bit);
			int rc = cdc_decode(mut, sizeof(mut), &d);

			if (rc != 0) {
				ck_assert_int_eq(rc, -EBADMSG);
				ck_assert(pos < 2);
				continue;
			}
			/* byte 27: our downgrade flags in its two high bits (cdc.c) */
			bool reserved = pos >= 28 || (pos == 27 && bit < 6) || (pos == 24 && bit < 3) ||
					(pos == 25 && bit < 5);

			if (pos == 8 || pos == 9 || pos == 16 || pos == 17) {
				/* reserved cursor bytes are carried, so encoding refuses */
				ck_assert_int_eq(cdc_encode(&d, re), -EINVAL);
				continue;
			}
			ck_assert_int_eq(cdc_encode(&d, re), 0);
			if (reserved)
				ck_assert_mem_eq(re, b, sizeof(b));
			else
				ck_assert_mem_eq(re, mut, sizeof(mut));
		}
	}
}
END_TEST

/* ------------------------------------------------------------------ validation */

#define RMB 1024u

START_TEST(test_validate_prod)
{
	smc_cursor cons = cursor_make(7, 1000), last = cursor_make(8, 10);

	ck_assert_int_eq(cdc_validate_peer_prod(last, last, cons, RMB), 0);
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(8, 500), last, cons, RMB), 0);
	/* full ring: prod exactly one ring ahead of my consumer */
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(8, 1000), last, cons, RMB), 0);
	/* one byte more than the ring */
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(8, 1001), last, cons, RMB), -EPROTO);
	/* backwards */
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(8, 9), last, cons, RMB), -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(7, 1010), last, cons, RMB), -EPROTO);
	/* invalid count / high bits */
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(8, RMB), last, cons, RMB), -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(8, 20) | (1ULL << 50), last, cons,
						RMB), -EPROTO);
	/* far ahead by wraps */
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(10, 20), last, cons, RMB), -EPROTO);
	/* behind my consumer (and thus behind last) */
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(7, 999), cursor_make(7, 990), cons,
						RMB), -EPROTO);
}
END_TEST

START_TEST(test_validate_prod_wrap16)
{
	smc_cursor cons = cursor_make(0xFFFF, 900), last = cursor_make(0xFFFF, 950);

	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(0x0000, 100), last, cons, RMB), 0);
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(0x0000, 900), last, cons, RMB), 0);
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(0x0000, 901), last, cons, RMB),
			 -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_prod(cursor_make(0x0001, 0), last, cons, RMB),
			 -EPROTO);
}
END_TEST

START_TEST(test_validate_cons)
{
	smc_cursor prod = cursor_make(3, 100), last = cursor_make(2, 900);

	ck_assert_int_eq(cdc_validate_peer_cons(last, last, prod, RMB), 0);
	ck_assert_int_eq(cdc_validate_peer_cons(cursor_make(2, 1000), last, prod, RMB), 0);
	ck_assert_int_eq(cdc_validate_peer_cons(prod, last, prod, RMB), 0);
	ck_assert_int_eq(cdc_validate_peer_cons(cursor_make(3, 101), last, prod, RMB), -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_cons(cursor_make(2, 899), last, prod, RMB), -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_cons(cursor_make(2, RMB), last, prod, RMB), -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_cons(cursor_make(2, 950) | (1ULL << 63), last, prod,
						RMB), -EPROTO);
	ck_assert_int_eq(cdc_validate_peer_cons(cursor_make(0xFFFF, 950), last, prod, RMB),
			 -EPROTO);
}
END_TEST

/* Random walk with forged cursors mixed in: whatever validation accepts keeps
 * 0 <= used <= size, the property that keeps every copy inside the RMB. */
START_TEST(test_validate_random_forgery)
{
	smc_cursor prod = cursor_make(0xFFF0, 0), cons = prod;
	uint32_t seed = 4242, bad = 0, accepted = 0;

	for (int i = 0; i < 200000; i++) {
		seed = seed * 1103515245u + 12345u;
		smc_cursor cand;

		switch ((seed >> 28) & 3) {
		case 0: /* arbitrary garbage */
			cand = ((uint64_t)seed << 32) ^ (seed * 2654435761u);
			break;
		case 1: /* plausible: small step */
			cand = cursor_add(prod, (seed >> 8) % (RMB + 8), RMB);
			break;
		default: /* near-miss wraps */
			cand = cursor_make((uint16_t)(cursor_wrap(prod) + (seed & 3) - 1),
					   (seed >> 4) % (RMB + 2));
			break;
		}
		if (cdc_validate_peer_prod(cand, prod, cons, RMB) == 0) {
			int64_t used = ring_used(cand, cons, RMB);

			if (used < 0 || used > RMB || cursor_diff(cand, prod, RMB) < 0)
				bad++;
			prod = cand;
			accepted++;
		}
		/* the reader consumes some */
		int64_t used = ring_used(prod, cons, RMB);

		if (used < 0) {
			bad++;
			break;
		}
		cons = cursor_add(cons, (uint32_t)(used ? (seed >> 12) % (used + 1) : 0), RMB);
	}
	ck_assert_uint_eq(bad, 0);
	ck_assert_uint_gt(accepted, 1000); /* the walk did move */
}
END_TEST

/* ------------------------------------------------------------------ update policy */

START_TEST(test_policy_rules)
{
	struct cdc_update_policy p;

	cdc_policy_init(&p, 1024);
	ck_assert_uint_eq(p.period, 256);
	ck_assert_uint_eq(p.granule, 128);
	ck_assert(!cdc_should_send_cons_update(&p, 0, true, 0));
	/* long read: every quarter, whatever the writer does */
	ck_assert(cdc_should_send_cons_update(&p, 256, false, 0));
	ck_assert(!cdc_should_send_cons_update(&p, 255, false, 0));
	/* blocked writer: at once past the granule, not byte by byte */
	ck_assert(cdc_should_send_cons_update(&p, 128, true, 0));
	ck_assert(!cdc_should_send_cons_update(&p, 127, true, 900));
	ck_assert(!cdc_should_send_cons_update(&p, 1, true, 1023));
	/* writer short of room in its view (< 1/4 free): at once past the granule */
	ck_assert(cdc_should_send_cons_update(&p, 128, false, 1024 - 128 - 255));
	ck_assert(!cdc_should_send_cons_update(&p, 128, false, 1024 - 128 - 256));
	/* inconsistent inputs never overflow */
	ck_assert(cdc_should_send_cons_update(&p, 200, false, 0xFFFFFFFFu));

	cdc_policy_init(&p, 3); /* tiny rings still work */
	ck_assert(cdc_should_send_cons_update(&p, 1, false, 0));
}
END_TEST

/*
 * Deterministic simulation of one RDMA connection direction, in ticks.
 *  writer: the application writes msg-byte calls into a send buffer of one ring; the
 *    transport pushes up to `bw` bytes per tick into the peer RMB, limited by the free
 *    space in its view (ring - (prod - last consumer cursor received)); each push is an
 *    RDMA WRITE + CDC arriving `lat` ticks later, with write_blocked when data is left
 *    and the view is full. A writer that finds its view full without having said so
 *    sends a CDC with write_blocked.
 *  reader: the application reads rd-byte calls, copying up to `cp` bytes per tick;
 *    the policy is asked after every call and after every CDC received; an update
 *    arrives `lat` ticks later.
 * Reported: ticks to move `total` bytes, SENDs spent on updates, and stall ticks where
 * the writer is stuck with a full view, the reader has received all it wrote, no update
 * is in flight, and the reader holds at least a granule of consumed-but-unannounced
 * space (the writer waits on space that is free and known to be free).
 */
typedef bool (*policy_fn)(const struct cdc_update_policy *p, uint32_t consumed, bool blocked,
			  uint32_t left);

struct sim_cfg {
	uint32_t ring, bw, cp, lat;
	uint64_t total;
};

struct sim_result {
	uint64_t ticks, updates, bad_stalls;
	bool deadlock;
};

#define SIM_Q 8192
struct sim_ev {
	uint64_t at, val;
	bool blocked;
};
struct sim_q {
	struct sim_ev e[SIM_Q];
	unsigned h, t;
};

/* Hot loops avoid ck_assert: each passing Check assertion costs a syscall. */
static unsigned sim_overflows;

static void q_push(struct sim_q *q, uint64_t at, uint64_t val, bool blocked)
{
	if (q->t - q->h >= SIM_Q) {
		sim_overflows++;
		return;
	}
	q->e[q->t++ % SIM_Q] = (struct sim_ev){ at, val, blocked };
}

static bool q_pop(struct sim_q *q, uint64_t now, struct sim_ev *e)
{
	if (q->h == q->t || q->e[q->h % SIM_Q].at > now)
		return false;
	*e = q->e[q->h++ % SIM_Q];
	return true;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static struct sim_result simulate(policy_fn pol, const struct sim_cfg *cfg, uint32_t msg,
				  uint32_t rd)
{
	static struct sim_q w2r, r2w;
	struct cdc_update_policy p;
	struct sim_result res = { 0 };
	const uint32_t S = cfg->ring;
	/* writer */
	uint64_t app_bytes = 0, prod = 0, wcons = 0;
	uint32_t msg_left = 0;
	bool told_blocked = false;
	/* reader */
	uint64_t rprod = 0, cons = 0, announced = 0;
	uint32_t rd_left = 0;
	bool peer_blocked = false;
	uint64_t now = 0, last_progress = 0;

	w2r.h = w2r.t = 0;
	r2w.h = r2w.t = 0;
	cdc_policy_init(&p, S);

#define SEND_UPDATE(at)                                         \
	do {                                                    \
		q_push(&r2w, (at), cons, false);                \
		announced = cons;                               \
		peer_blocked = false;                           \
		res.updates++;                                  \
	} while (0)

	while (cons < cfg->total) {
		struct sim_ev e;
		bool got = false;

		while (q_pop(&w2r, now, &e)) {
			rprod = e.val;
			peer_blocked = e.blocked;
			got = true;
		}
		if (got && pol(&p, (uint32_t)(cons - announced), peer_blocked,
			       (uint32_t)(rprod - cons)))
			SEND_UPDATE(now + cfg->lat);
		while (q_pop(&r2w, now, &e))
			wcons = e.val;

		/* writer application: as many write calls as the send buffer takes */
		while (app_bytes < cfg->total) {
			if (msg_left == 0)
				msg_left = msg;
			uint64_t n = min64(min64(msg_left, S - (app_bytes - prod)),
					   cfg->total - app_bytes);

			if (n == 0)
				break;
			app_bytes += n;
			msg_left -= (uint32_t)n;
		}
		/* writer transport */
		uint64_t pending = app_bytes - prod, room = S - (prod - wcons);
		uint64_t n = min64(min64(pending, room), cfg->bw);

		if (n > 0) {
			prod += n;
			told_blocked = app_bytes > prod && room == n;
			q_push(&w2r, now + cfg->lat, prod, told_blocked);
		} else if (pending > 0 && room == 0 && !told_blocked) {
			told_blocked = true;
			q_push(&w2r, now + cfg->lat, prod, true);
		}
		/* the property: a stuck writer never waits on space the reader freed */
		if (pending > 0 && room == 0 && rprod == prod && r2w.h == r2w.t &&
		    cons - announced >= p.granule)
			res.bad_stalls++;

		/* reader application */
		uint32_t budget = cfg->cp;

		for (;;) {
			if (rd_left == 0)
				rd_left = rd;
			uint64_t m = min64(min64(rprod - cons, rd_left), budget);

			if (m == 0)
				break;
			cons += m;
			rd_left -= (uint32_t)m;
			budget -= (uint32_t)m;
			last_progress = now;
			if (pol(&p, (uint32_t)(cons - announced), peer_blocked,
				(uint32_t)(rprod - cons)))
				SEND_UPDATE(now + cfg->lat);
		}
		now++;
		if (now - last_progress > 100000) {
			res.deadlock = true;
			break;
		}
	}
#undef SEND_UPDATE
	res.ticks = now;
	return res;
}

/* A lock-step policy of the kind seed 000 describes: publish only past half the ring,
 * or past 10% when the writer is blocked. Used to show the measure catches it. */
static bool policy_half(const struct cdc_update_policy *p, uint32_t consumed, bool blocked,
			uint32_t left)
{
	(void)left;
	return consumed >= p->rmb_size / 2 || (blocked && consumed > p->rmb_size / 10);
}

struct sweep {
	double best, worst, worst_jump;
	uint32_t worst_msg, jump_msg;
	uint64_t max_updates, bad_stalls;
	int deadlocks;
};

/* Writer message sizes 1..ring; reader sizes equal to the message, just above half the
 * ring, and the whole ring. Rounds per byte = ticks / total. */
static struct sweep run_sweep(policy_fn pol, const struct sim_cfg *cfg)
{
	struct sweep s = { .best = 1e30 };

	for (int rk = 0; rk < 3; rk++) {
		double prev = 0;

		for (uint32_t msg = 1; msg <= cfg->ring; msg++) {
			uint32_t rd = rk == 0 ? msg : rk == 1 ? cfg->ring / 2 + 1 : cfg->ring;
			struct sim_result r = simulate(pol, cfg, msg, rd);

			if (r.deadlock) {
				s.deadlocks++;
				prev = 0;
				continue;
			}
			double rpb = (double)r.ticks / (double)cfg->total;

			if (rpb < s.best)
				s.best = rpb;
			if (rpb > s.worst) {
				s.worst = rpb;
				s.worst_msg = msg;
			}
			if (prev > 0) {
				double j = rpb > prev ? rpb / prev : prev / rpb;

				if (j > s.worst_jump) {
					s.worst_jump = j;
					s.jump_msg = msg;
				}
			}
			prev = rpb;
			if (r.updates > s.max_updates)
				s.max_updates = r.updates;
			s.bad_stalls += r.bad_stalls;
		}
	}
	return s;
}

static const struct sim_cfg sim_cfgs[] = {
	/* ring, bw/tick, copy/tick, latency; bandwidth-delay product near the ring size,
	 * where the update policy decides the throughput */
	{ 256, 16, 32, 8, 64 * 256 },
	{ 256, 32, 64, 4, 64 * 256 },
	{ 256, 16, 16, 4, 64 * 256 },
	{ 128, 16, 32, 2, 64 * 128 },
};

START_TEST(test_policy_simulation)
{
	const struct sim_cfg *cfg = &sim_cfgs[_i];
	struct sweep s = run_sweep(cdc_should_send_cons_update, cfg);

	ck_assert_uint_eq(sim_overflows, 0);
	ck_assert_int_eq(s.deadlocks, 0);
	ck_assert_uint_eq(s.bad_stalls, 0);
	/* no cliff: no message size more than 30% worse than the best one, and no step
	 * between neighbouring sizes above 15% */
	ck_assert_msg(s.worst <= 1.30 * s.best, "cliff at msg %u: %.4f vs best %.4f",
		      s.worst_msg, s.worst, s.best);
	ck_assert_msg(s.worst_jump <= 1.15, "step %.3f at msg %u", s.worst_jump, s.jump_msg);
	fprintf(stderr, "cfg %d: rounds/byte best %.4f worst %.4f (msg %u) step %.3f updates %llu\n",
		_i, s.best, s.worst, s.worst_msg, s.worst_jump, (unsigned long long)s.max_updates);
	/* bounded cost: at most one update per granule consumed, plus the blocked-writer
	 * answers (at most one per CDC with write_blocked, itself at most one per push) */
	ck_assert_uint_le(s.max_updates, cfg->total / (cfg->ring / 8) + cfg->total / cfg->bw);
}
END_TEST

/* The simulation is able to tell a lock-step policy from ours. */
START_TEST(test_policy_simulation_detects_lockstep)
{
	const struct sim_cfg *cfg = &sim_cfgs[0];
	struct sweep ours = run_sweep(cdc_should_send_cons_update, cfg);
	struct sweep half = run_sweep(policy_half, cfg);

	ck_assert_int_eq(half.deadlocks, 0);
	fprintf(stderr, "half: best %.4f worst %.4f stalls %llu; ours: best %.4f worst %.4f\n",
		half.best, half.worst, (unsigned long long)half.bad_stalls, ours.best, ours.worst);
	ck_assert_msg(half.best > 1.10 * ours.best, "half %.4f ours %.4f", half.best, ours.best);
}
END_TEST

/* ------------------------------------------------------------------ credits */

START_TEST(test_credits_basic)
{
	struct cdc_credits c;
	uint8_t ann;

	ck_assert_int_eq(cdc_credits_init(&c, 2, 8), -EINVAL);
	ck_assert_int_eq(cdc_credits_init(&c, 8, 2), -EINVAL);
	ck_assert_int_eq(cdc_credits_init(&c, 4, 8), 0);
	/* three plain SENDs, the last credit is reserved for a message that returns some */
	for (int i = 0; i < 3; i++) {
		ck_assert(cdc_credits_can_send(&c));
		ck_assert_int_eq(cdc_credits_take(&c, &ann), 0);
		ck_assert_uint_eq(ann, 0);
	}
	ck_assert(!cdc_credits_can_send(&c));
	ck_assert_int_eq(cdc_credits_take(&c, &ann), -EAGAIN);
	ck_assert_int_eq(cdc_credits_reposted(&c, 2), 0);
	ck_assert(cdc_credits_can_send(&c));
	ck_assert_int_eq(cdc_credits_take(&c, &ann), 0);
	ck_assert_uint_eq(ann, 2);
	ck_assert_uint_eq(c.unannounced, 0);
	ck_assert_int_eq(cdc_credits_take(&c, &ann), -EAGAIN); /* none at all */
	cdc_credits_untake(&c, 2);
	ck_assert_uint_eq(c.avail, 1);
	ck_assert_uint_eq(c.unannounced, 2);
	/* grants: never above the peer's depth */
	ck_assert_int_eq(cdc_credits_grant(&c, 3), 0);
	ck_assert_uint_eq(c.avail, 4);
	ck_assert_int_eq(cdc_credits_grant(&c, 1), -EPROTO);
	ck_assert_int_eq(cdc_credits_grant(&c, 0), 0);
	/* reposts: never above my depth */
	ck_assert_int_eq(cdc_credits_reposted(&c, 6), 0);
	ck_assert_int_eq(cdc_credits_reposted(&c, 1), -EPROTO);
}
END_TEST

START_TEST(test_credits_need_update)
{
	struct cdc_credits c;
	uint8_t ann;

	ck_assert_int_eq(cdc_credits_init(&c, 16, 16), 0);
	ck_assert_uint_eq(c.update_at, 8);
	ck_assert_int_eq(cdc_credits_reposted(&c, 7), 0);
	ck_assert(!cdc_credits_need_update(&c));
	ck_assert_int_eq(cdc_credits_reposted(&c, 1), 0);
	ck_assert(cdc_credits_need_update(&c));
	ck_assert_int_eq(cdc_credits_take(&c, &ann), 0);
	ck_assert_uint_eq(ann, 8);
	ck_assert(!cdc_credits_need_update(&c));
	/* a depth of 3: update after 2, never after the 1 buffer an update consumes */
	ck_assert_int_eq(cdc_credits_init(&c, 3, 3), 0);
	ck_assert_uint_eq(c.update_at, 2);
	/* announcements are capped at one byte */
	ck_assert_int_eq(cdc_credits_init(&c, 1000, 1000), 0);
	ck_assert_int_eq(cdc_credits_reposted(&c, 600), 0);
	ck_assert_int_eq(cdc_credits_take(&c, &ann), 0);
	ck_assert_uint_eq(ann, 255);
	ck_assert_uint_eq(c.unannounced, 345);
}
END_TEST

/*
 * Two peers exchanging SENDs over receive queues of the given depths, deterministic
 * pseudo-random traffic: no SEND ever finds the peer's receive queue empty (no RNR),
 * and the exchange never deadlocks, also for one-directional traffic.
 */
struct peer {
	struct cdc_credits cr;
	uint32_t rq_posted;   /* receive buffers currently posted (the real queue) */
	uint32_t inbox_n;     /* messages delivered, not yet processed */
	uint8_t inbox[4096];  /* credits carried by each */
	uint64_t sent_data;
};

static void peer_process(struct peer *me)
{
	for (uint32_t i = 0; i < me->inbox_n; i++) {
		ck_assert_int_eq(cdc_credits_grant(&me->cr, me->inbox[i]), 0);
		me->rq_posted++; /* repost the buffer the message used */
		ck_assert_int_eq(cdc_credits_reposted(&me->cr, 1), 0);
	}
	me->inbox_n = 0;
}

static bool peer_send(struct peer *me, struct peer *to)
{
	uint8_t ann;

	if (cdc_credits_take(&me->cr, &ann) < 0)
		return false;
	ck_assert_uint_gt(to->rq_posted, 0); /* an RNR would happen here */
	to->rq_posted--;
	ck_assert_uint_lt(to->inbox_n, sizeof(to->inbox));
	to->inbox[to->inbox_n++] = ann;
	return true;
}

START_TEST(test_credits_two_peers)
{
	static const uint32_t depths[][2] = { { 3, 3 }, { 3, 16 }, { 16, 4 }, { 32, 32 } };

	for (size_t d = 0; d < sizeof(depths) / sizeof(depths[0]); d++) {
		for (int pattern = 0; pattern < 3; pattern++) {
			struct peer a = { 0 }, b = { 0 };
			uint32_t seed = 7 + (uint32_t)d * 31 + (uint32_t)pattern;

			ck_assert_int_eq(cdc_credits_init(&a.cr, depths[d][1], depths[d][0]), 0);
			ck_assert_int_eq(cdc_credits_init(&b.cr, depths[d][0], depths[d][1]), 0);
			a.rq_posted = depths[d][0];
			b.rq_posted = depths[d][1];
			for (int step = 0; step < 20000; step++) {
				seed = seed * 1103515245u + 12345u;
				struct peer *me = (seed >> 16) & 1 ? &a : &b;
				struct peer *other = me == &a ? &b : &a;
				bool wants_data = pattern == 0 ? me == &a
						: pattern == 1 ? true : ((seed >> 20) & 3) == 0;

				peer_process(me);
				if (wants_data && peer_send(me, other))
					me->sent_data++;
				else if (cdc_credits_need_update(&me->cr))
					ck_assert(peer_send(me, other));
			}
			/* progress in every direction that wanted to send */
			ck_assert_uint_gt(a.sent_data, 1000);
			if (pattern != 0)
				ck_assert_uint_gt(b.sent_data, 1000);
		}
	}
}
END_TEST

static Suite *cdc_suite(void)
{
	Suite *s = suite_create("cdc");
	TCase *tc = tcase_create("wire");

	tcase_add_test(tc, test_cdc_layout);
	tcase_add_test(tc, test_cdc_flags_bits);
	tcase_add_test(tc, test_cdc_round_trip);
	tcase_add_test(tc, test_cdc_reject);
	tcase_add_test(tc, test_cdc_reserved_cursor_bits);
	tcase_add_test(tc, test_cdc_mutation);
	suite_add_tcase(s, tc);

	tc = tcase_create("validate");
	tcase_add_test(tc, test_validate_prod);
	tcase_add_test(tc, test_validate_prod_wrap16);
	tcase_add_test(tc, test_validate_cons);
	tcase_add_test(tc, test_validate_random_forgery);
	suite_add_tcase(s, tc);

	tc = tcase_create("policy");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_policy_rules);
	tcase_add_loop_test(tc, test_policy_simulation, 0,
			    (int)(sizeof(sim_cfgs) / sizeof(sim_cfgs[0])));
	tcase_add_test(tc, test_policy_simulation_detects_lockstep);
	suite_add_tcase(s, tc);

	tc = tcase_create("credits");
	tcase_add_test(tc, test_credits_basic);
	tcase_add_test(tc, test_credits_need_update);
	tcase_add_test(tc, test_credits_two_peers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(cdc_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);

	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
