/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: CLC messages as a peer sends them (core/wire/clc.c). Feeds the bytes to
 * every entry point that reads a peer's message -- the stream header peek, the framing
 * used to answer messages we do not decode, the strict decoder, the in-band block -- and
 * checks clc.h's contract: a decoded message validates and re-encodes to exactly the
 * bytes it was decoded from.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/clc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_decoded(const uint8_t *data, size_t size, const struct clc_msg *m)
{
	uint8_t out[CLC_MAX_LEN];
	ssize_t n;

	if (clc_validate(m) != 0)
		abort();
	n = clc_encode(m, out, sizeof(out));
	if (n != (ssize_t)size || clc_encoded_len(m) != n || memcmp(out, data, size) != 0)
		abort();
	if (m->variant == CLC_SMCR && m->type == CLC_PROPOSAL) {
		struct clc_block b;

		(void)clc_block_get(&m->u.r_prop, &b);
	}
	if (m->variant == CLC_SAMEHOST && m->type == CLC_ACCEPT) {
		struct clc_sh_proposal p;

		memset(&p, 0, sizeof(p));
		p.proto = CLC_SAMEHOST_PROTO;
		p.c2s_size = p.s2c_size = 65536;
		(void)clc_sh_check_accept(&p, &m->u.s_acc);
	}
	if (m->variant == CLC_SMCR && m->type == CLC_DECLINE)
		(void)clc_decline_reason_str(m->u.r_decl.diag);
	if (m->variant == CLC_SAMEHOST && m->type == CLC_DECLINE)
		(void)clc_decline_reason_str(m->u.s_decl.diag);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum clc_variant v;
	uint8_t type;
	uint16_t total;
	struct clc_frame f;
	struct clc_msg m;

	if (clc_peek_header(data, size, &v, &type, &total) == 0 &&
	    (total < CLC_MIN_LEN || total > CLC_MAX_LEN || type < CLC_PROPOSAL ||
	     type > CLC_DECLINE))
		abort();
	if (clc_frame(data, size, &f) == 0) {
		if (size < CLC_MIN_LEN || size > CLC_MAX_LEN)
			abort();
		if (f.type == CLC_DECLINE)
			(void)clc_decline_reason_str(clc_frame_decline_diag(data, size));
	}
	memset(&m, 0xa5, sizeof(m)); /* the decoder must not rely on a zeroed output */
	if (clc_decode(data, size, &m) == 0)
		check_decoded(data, size, &m);
	return 0;
}
