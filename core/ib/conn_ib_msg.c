/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>

#include "core/ib/conn_ib_msg.h"

ssize_t conn_ib_msg_encode(const struct clc_msg *m, uint8_t credits, uint8_t *buf)
{
	ssize_t n = clc_encode(m, buf, CLC_MAX_LEN);

	if (n < 0 || (m->type != CLC_ACCEPT && m->type != CLC_CONFIRM))
		return n;
	ib_link_credits_encode(credits, buf + n);
	return n + IB_CREDITS_EXT_LEN;
}

int conn_ib_msg_decode(const uint8_t *buf, size_t len, struct clc_msg *m, uint8_t *credits)
{
	enum clc_variant v;
	uint8_t type;
	uint16_t total;
	int r = clc_peek_header(buf, len, &v, &type, &total);

	if (r < 0)
		return r;
	if (total > len)
		return -EBADMSG;
	r = clc_decode(buf, total, m);
	if (r < 0)
		return r;
	if (m->variant == CLC_SMCR && (m->type == CLC_ACCEPT || m->type == CLC_CONFIRM)) {
		if (len != (size_t)total + IB_CREDITS_EXT_LEN)
			return -EBADMSG;
		r = ib_link_credits_decode(buf + total, credits);
		return r < 0 ? -EBADMSG : 0;
	}
	return len == total ? 0 : -EBADMSG;
}
