/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: the SMC-R engine's handshake messages (core/ib/conn_ib_msg.c), which
 * conn_ib.c decodes from the rendezvous socket (one datagram) and from the TCP
 * connection (a negotiate.h frame). The input is one whole message. What
 * conn_ib_msg_decode accepts must be a valid CLC message followed by exactly the
 * credits extension for an SMC-R Accept/Confirm (credits within their floor), and must
 * re-encode through conn_ib_msg_encode to exactly the input; an Accept/Confirm then
 * goes on to ib_params_from_clc as conn_ib.c does.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ib/conn_ib_msg.h"
#include "core/wire/cdc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[CONN_IB_MSG_CAP];
	struct clc_msg m;
	uint8_t credits = 0;
	bool ext;
	ssize_t n;

	memset(&m, 0xa5, sizeof(m)); /* the decoder must not rely on a zeroed output */
	if (conn_ib_msg_decode(data, size, &m, &credits) != 0)
		return 0;
	if (clc_validate(&m) != 0)
		abort();
	ext = m.variant == CLC_SMCR && (m.type == CLC_ACCEPT || m.type == CLC_CONFIRM);
	if (size != (size_t)clc_encoded_len(&m) + (ext ? IB_CREDITS_EXT_LEN : 0) ||
	    size > CONN_IB_MSG_CAP || (ext && credits < CDC_CREDITS_MIN_DEPTH))
		abort();
	/* round trip: the encoder of conn_ib.c's sends makes the same bytes. A same-host
	 * Accept/Confirm carries no extension (the encoder adds one by type alone, so
	 * conn_ib.c never sends those: only declines and SMC-R messages). */
	if (m.variant == CLC_SAMEHOST && (m.type == CLC_ACCEPT || m.type == CLC_CONFIRM))
		return 0;
	n = conn_ib_msg_encode(&m, credits, out);
	if (n != (ssize_t)size || memcmp(out, data, size) != 0)
		abort();
	if (ext) {
		struct ib_link_params l;
		struct ib_rmb_params r;

		if (ib_params_from_clc(&m, 1u << 20, &l, &r) == 0 &&
		    (r.size == 0 || r.vaddr + r.size < r.vaddr || r.token == 0))
			abort();
	}
	return 0;
}
