/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: SMC-R link and RMB parameters as a peer sends them
 * (core/wire/ib_proto.c). The input is a CLC Accept or Confirm followed by the 4-byte
 * credits extension, split as conn_ib.c's decoder splits it; what ib_params_from_clc
 * accepts must satisfy ib_proto.h's rules, since conn_ib.c registers and writes RDMA
 * to that RMB. The tail of the input drives the token table with peer-chosen tokens
 * (the token of every CDC) against a shadow copy.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/cdc.h"
#include "core/wire/ib_proto.h"

#define MAX_RMB (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_params(const struct clc_msg *m)
{
	struct ib_link_params l;
	struct ib_rmb_params r;
	uint32_t diag = ib_params_from_clc(m, MAX_RMB, &l, &r);

	if (diag != 0)
		return;
	if (r.token == 0 || r.size > MAX_RMB || r.size < (16u << 10) || (r.size & (r.size - 1)) ||
	    r.vaddr + r.size < r.vaddr || l.qpn == 0 || l.qpn >> 24 || l.psn >> 24 ||
	    ib_mtu_common(l.mtu, CLC_MTU_4096) == 0)
		abort();
	{
		struct ib_piece pc[2];
		smc_cursor from = cursor_make(1, r.size - 1);
		int n = ib_ring_pieces(from, cursor_add(from, r.size, r.size), r.size, pc);

		if (n < 1 || n > 2 || pc[0].off + pc[0].len > r.size ||
		    (n == 2 && pc[1].off + pc[1].len > r.size))
			abort();
	}
}

static void tokens(const uint8_t *p, size_t n)
{
	static struct ib_token_table t;
	static uint32_t shadow[IB_LINK_MAX_CONNS + 1];
	size_t nshadow = 0;

	ib_tokens_init(&t);
	for (; n >= 3; p += 3, n -= 3) {
		uint32_t tok = p[1] | (uint32_t)p[2] << 8; /* a small space: collisions */
		size_t k;

		for (k = 0; k < nshadow && shadow[k] != tok; k++)
			;
		switch (p[0] % 3) {
		case 0: {
			int r = ib_tokens_add(&t, tok, &shadow[0]);

			if (tok == 0 ? r != -EINVAL
			    : k < nshadow ? r != -EEXIST
			    : nshadow >= IB_LINK_MAX_CONNS ? r != -ENOSPC : r != 0)
				abort();
			if (r == 0)
				shadow[nshadow++] = tok;
			break;
		}
		case 1:
			if ((ib_tokens_find(&t, tok) != NULL) != (tok != 0 && k < nshadow))
				abort();
			break;
		default:
			if ((ib_tokens_del(&t, tok) == 0) != (tok != 0 && k < nshadow))
				abort();
			if (tok != 0 && k < nshadow)
				shadow[k] = shadow[--nshadow];
			break;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum clc_variant v;
	uint8_t type, credits;
	uint16_t total;
	struct clc_msg m;

	if (clc_peek_header(data, size, &v, &type, &total) < 0 || total > size) {
		tokens(data, size);
		return 0;
	}
	if (clc_decode(data, total, &m) == 0)
		check_params(&m);
	if (size - total >= IB_CREDITS_EXT_LEN) {
		if (ib_link_credits_decode(data + total, &credits) == 0 &&
		    credits < CDC_CREDITS_MIN_DEPTH)
			abort();
		tokens(data + total + IB_CREDITS_EXT_LEN, size - total - IB_CREDITS_EXT_LEN);
	}
	return 0;
}
