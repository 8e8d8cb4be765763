/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Writes the seed corpora of the fuzz harnesses, every message made by the encoders the
 * harnesses' decoders mirror: gen_seeds DIR writes DIR/<harness>/<name>. The seeds are
 * checked in under tests/fuzz/corpus (`make fuzz-seeds` regenerates them).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/base/config.h"
#include "core/ib/conn_ib_msg.h"
#include "core/shm/pool_msg.h"
#include "core/shm/pool_slot.h"
#include "core/wire/cdc.h"
#include "core/wire/clc.h"
#include "core/wire/ib_proto.h"
#include "tests/progs/clc_fixtures.h"

static const char *top;

static void put(const char *harness, const char *name, const void *a, size_t alen,
		const void *b, size_t blen)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", top, harness);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/%s", top, harness, name);
	f = fopen(path, "wb");
	if (!f || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) ||
	    fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static size_t encode(const struct clc_msg *m, uint8_t *buf)
{
	ssize_t n = clc_encode(m, buf, CLC_MAX_LEN);

	if (n < 0) {
		fprintf(stderr, "gen_seeds: clc_encode: %s\n", strerror((int)-n));
		exit(1);
	}
	return (size_t)n;
}

/* An SMC-R Proposal (tests/progs/clc_fixtures.h), with our rendezvous block when block:
 * ib a client that can do SMC-R only (NO_SHM), else one that offers shared memory. */
static struct clc_msg r_proposal(unsigned v6, bool block, bool ib)
{
	struct clc_msg m = clc_fx_r_proposal(v6, 0, ib);

	if (block) {
		struct clc_block b = { .version = CLC_BLOCK_VERSION, .flags = ib ? CLC_BLOCK_NO_SHM : 0,
				       .host_id = 0x0102030405060708ULL,
				       .rdv_name = ib ? 0 : 0x1111222233334444ULL,
				       .rdv_key = ib ? 0 : 0x5555666677778888ULL };

		clc_block_put(&m.u.r_prop, &b);
	}
	return m;
}

/* The SMC-R Accept/Confirm fixture, checked to be one ib_params_from_clc takes (the
 * ib_proto and ib_msg seeds must reach past it). */
static struct clc_msg r_accept(uint8_t type)
{
	struct clc_msg m = clc_fx_r_accept(type);
	struct ib_link_params l;
	struct ib_rmb_params r;

	if (ib_params_from_clc(&m, 1u << 20, &l, &r) != 0) {
		fprintf(stderr, "gen_seeds: the Accept fixture is not valid SMC-R\n");
		exit(1);
	}
	return m;
}

static void clc_seeds(void)
{
	uint8_t buf[CLC_MAX_LEN], ext[IB_CREDITS_EXT_LEN], fd0 = 0x05, fd1 = 0x01;
	struct clc_msg m;
	size_t n;

	m = r_proposal(0, false, true);
	n = encode(&m, buf);
	put("clc", "smcr_proposal_kernel", buf, n, NULL, 0);
	put("rendezvous", "smcr_proposal_kernel", &fd0, 1, buf, n);
	m = r_proposal(2, true, false);
	n = encode(&m, buf);
	put("clc", "smcr_proposal_block", buf, n, NULL, 0);
	put("rendezvous", "smcr_proposal_block", &fd0, 1, buf, n);
	m = r_proposal(1, true, true);
	n = encode(&m, buf);
	put("clc", "smcr_proposal_block_ib", buf, n, NULL, 0);
	put("rendezvous", "smcr_proposal_block_ib", &fd0, 1, buf, n);

	ib_link_credits_encode(16, ext);
	m = r_accept(CLC_ACCEPT);
	n = encode(&m, buf);
	put("clc", "smcr_accept", buf, n, NULL, 0);
	put("ib_proto", "smcr_accept_credits", buf, n, ext, sizeof(ext));
	put("rendezvous", "smcr_accept", &fd0, 1, buf, n);
	memcpy(buf + n, ext, sizeof(ext));
	put("rendezvous", "smcr_accept_credits", &fd0, 1, buf, n + sizeof(ext));
	m = r_accept(CLC_CONFIRM);
	n = encode(&m, buf);
	put("clc", "smcr_confirm", buf, n, NULL, 0);
	put("ib_proto", "smcr_confirm_credits", buf, n, ext, sizeof(ext));
	/* no CLC header: token table operations (op, token low, token high) */
	put("ib_proto", "tokens", (uint8_t[]){ 0, 1, 0, 0, 2, 0, 1, 1, 0, 2, 1, 0, 1, 1, 0 }, 15,
	    NULL, 0);
	m = clc_fx_r_decline();
	n = encode(&m, buf);
	put("clc", "smcr_decline", buf, n, NULL, 0);
	put("rendezvous", "smcr_decline", &fd0, 1, buf, n);

	m = clc_fx_sh_proposal(AF_INET);
	n = encode(&m, buf);
	put("clc", "sh_proposal", buf, n, NULL, 0);
	put("rendezvous", "sh_proposal_fds", &fd1, 1, buf, n);
	m = clc_fx_sh_accept();
	n = encode(&m, buf);
	put("clc", "sh_accept", buf, n, NULL, 0);
	put("rendezvous", "sh_accept_fds", (uint8_t[]){ 0x0f }, 1, buf, n);
	m = clc_fx_sh_confirm();
	n = encode(&m, buf);
	put("clc", "sh_confirm", buf, n, NULL, 0);
	m = clc_fx_sh_decline();
	n = encode(&m, buf);
	put("clc", "sh_decline", buf, n, NULL, 0);
	put("rendezvous", "sh_decline", &fd0, 1, buf, n);
}

/* conn_ib.c's messages, as conn_ib_msg_encode makes them */
static void ib_msg_seeds(void)
{
	struct { const char *name; struct clc_msg m; uint8_t credits; } s[] = {
		{ "smcr_proposal_kernel", r_proposal(0, false, true), 0 },
		{ "smcr_proposal_block_ib", r_proposal(1, true, true), 0 },
		{ "smcr_accept", r_accept(CLC_ACCEPT), 16 },
		{ "smcr_confirm", r_accept(CLC_CONFIRM), CDC_CREDITS_MIN_DEPTH },
		{ "smcr_decline", clc_fx_r_decline(), 0 },
		{ "sh_decline", clc_fx_sh_decline(), 0 },
	};

	for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
		uint8_t buf[CONN_IB_MSG_CAP];
		ssize_t n = conn_ib_msg_encode(&s[i].m, s[i].credits, buf);

		if (n < 0) {
			fprintf(stderr, "gen_seeds: conn_ib_msg_encode %s\n", s[i].name);
			exit(1);
		}
		put("ib_msg", s[i].name, buf, (size_t)n, NULL, 0);
	}
}

/* pool setup messages behind fuzz_pool_msg's 3 bytes: kind (0 request, 1 answer),
 * descriptors, slots asked for */
static void pool_msg_seeds(void)
{
	struct pool_req req = pool_req_make(4, 1u << 16);
	struct pool_req big = pool_req_make(POOL_SLOTS_MAX, POOL_RING_MAX);
	struct pool_rep ok = pool_rep_make(POOL_ANSWER_OK, 4);
	struct pool_rep no = pool_rep_make(POOL_ANSWER_REFUSED, 4);

	put("pool_msg", "request", (uint8_t[]){ 0, 2 + 2 * 4, 0 }, 3, &req, sizeof(req));
	put("pool_msg", "request_largest", (uint8_t[]){ 0, POOL_MAX_FDS, 0 }, 3, &big, sizeof(big));
	put("pool_msg", "answer", (uint8_t[]){ 1, 2 * 4, 4 }, 3, &ok, sizeof(ok));
	put("pool_msg", "answer_refused", (uint8_t[]){ 1, 0, 4 }, 3, &no, sizeof(no));
}

/* fuzz_rewind's ops: ring size, then (op, n high, n low): op 0 write, 1 read, 2 forge
 * (field in n high, 8 bytes of value after) */
static void rewind_seeds(void)
{
	/* 4 KiB ring: 3000 bytes there and back, then 2000 (empty ring 3000 into its lap:
	 * the writer rewinds), read in two parts, then a whole ring */
	static const uint8_t stream[] = {
		0, 0, 0x0b, 0xb8, 1, 0x0b, 0xb8, 0, 0x07, 0xd0, 1, 0x03, 0xe8, 1, 0x03, 0xe8,
		0, 0x10, 0x00, 1, 0x08, 0x00, 1, 0x08, 0x00,
	};
	/* 64 KiB ring: a rewind the reader has not seen when the writer writes again */
	static const uint8_t pending[] = {
		4, 0, 0x50, 0x00, 1, 0x50, 0x00, 0, 0x10, 0x00, 0, 0x10, 0x00, 1, 0xff, 0xff,
		1, 0xff, 0xff,
	};
	/* 4 KiB ring: 100 bytes read, then a rewind forged at the reader's cursor */
	static const uint8_t forged[] = {
		0, 0, 0x00, 0x64, 1, 0x00, 0x64,
		2, 2, 0, 0x64, 0, 0, 0, 0, 0, 0, 0, /* skip_at = cursor_make(0, 100) */
		2, 3, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, /* skip_seq = 1 */
		2, 0, 0, 0x00, 0, 0, 0, 1, 0, 0, 0, /* prod = cursor_make(1, 0) */
		1, 0x10, 0x00, 0, 0x10, 0x00,
	};

	put("rewind", "stream", stream, sizeof(stream), NULL, 0);
	put("rewind", "pending", pending, sizeof(pending), NULL, 0);
	put("rewind", "forged", forged, sizeof(forged), NULL, 0);
}

static void cdc_seeds(void)
{
	struct { const char *name; struct cdc_msg m; uint8_t ring_shift; } s[] = {
		{ "data", { 7, 0x0BADF00D, { cursor_make(0, 4096), cursor_make(0, 0), 0 }, 4 }, 4 },
		{ "wrapped", { 65535, 1, { cursor_make(3, 100), cursor_make(3, 50),
					   CDC_WRITE_BLOCKED | CDC_CONS_UPDATE_REQ }, 0 }, 0 },
		{ "closed", { 1, 2, { cursor_make(0xffff, 0), cursor_make(0xfffe, 65000),
				      CDC_DONE_WRITING | CDC_CONN_CLOSED }, 255 }, 4 },
	};

	for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
		uint8_t buf[CDC_MSG_LEN], state[1 + 4 * 8];

		if (cdc_encode(&s[i].m, buf) != 0) {
			fprintf(stderr, "gen_seeds: cdc_encode %s\n", s[i].name);
			exit(1);
		}
		memset(state, 0, sizeof(state));
		state[0] = s[i].ring_shift;
		/* last prod and my cons at the message's cons, the peer read up to its prod */
		memcpy(state + 1, &s[i].m.st.cons, 8);
		memcpy(state + 9, &s[i].m.st.cons, 8);
		memcpy(state + 17, &s[i].m.st.cons, 8);
		memcpy(state + 25, &s[i].m.st.prod, 8);
		put("cdc", s[i].name, buf, sizeof(buf), state, sizeof(state));
	}
}

static void pool_seeds(void)
{
	/* 2 slots, 2 offers from 10.0.0.1:40001; no peer write; claim 40001 then 40002 */
	static const uint8_t claim[] = {
		1, 2, 10, 0, 0, 1, 0x41, 0x9c,
		0xff, 0, 0, 0, 0, 0, /* ends the writes */
		10, 0, 0, 1, 0x41, 0x9c, 10, 0, 0, 1, 0x42, 0x9c,
	};
	/* 1 slot, 1 offer, the peer rewrites the slot's endpoint and word, then a claim */
	static const uint8_t forged[] = {
		0, 1, 10, 0, 0, 1, 0x41, 0x9c,
		1, 1, 10, 0, 0, 2,     /* slot 0: port and the first address bytes */
		1, 0, 0x02, 0x01, 0, 0, /* slot 0: word OFFERED, generation 1 */
		0xff, 0, 0, 0, 0, 0,
		10, 0, 0, 1, 0x41, 0x9c,
	};

	put("pool_slot", "claim", claim, sizeof(claim), NULL, 0);
	put("pool_slot", "forged", forged, sizeof(forged), NULL, 0);
}

static void config_seeds(void)
{
	static const char *const extra[] = { "256k", "1G", "0", "yes", "off", "debug", "4",
					     "18446744073709551615", "9999999999999999999999k" };

	for (size_t i = 0; i < smc_cfg_nvars; i++) {
		uint8_t idx = (uint8_t)i;
		const char *def = smc_cfg_vars[i].def ? smc_cfg_vars[i].def : "";

		put("config", smc_cfg_vars[i].name, &idx, 1, def, strlen(def));
	}
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
		uint8_t idx = (uint8_t)(i * 3 % smc_cfg_nvars);
		char name[32];

		snprintf(name, sizeof(name), "extra%zu", i);
		put("config", name, &idx, 1, extra[i], strlen(extra[i]));
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds DIR\n");
		return 2;
	}
	top = argv[1];
	clc_seeds();
	cdc_seeds();
	ib_msg_seeds();
	pool_msg_seeds();
	rewind_seeds();
	pool_seeds();
	config_seeds();
	return 0;
}
