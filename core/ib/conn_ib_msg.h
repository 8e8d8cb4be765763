/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The handshake messages of the SMC-R engine (conn_ib.c), on the same-host rendezvous
 * socket (one datagram each) or in-band on the TCP connection (framed by negotiate.h):
 * a CLC message, and after an SMC-R Accept or Confirm the 4-byte credits extension
 * (ib_proto.h). Pure, so that tests/fuzz/fuzz_ib_msg.c drives the decoder with any
 * bytes.
 */
#ifndef SMC_CONN_IB_MSG_H
#define SMC_CONN_IB_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/wire/clc.h"
#include "core/wire/ib_proto.h"

#define CONN_IB_MSG_CAP (CLC_MAX_LEN + IB_CREDITS_EXT_LEN)

/* m plus, for an Accept or Confirm, the credits extension into buf (CONN_IB_MSG_CAP
 * bytes). Length or -errno. */
ssize_t conn_ib_msg_encode(const struct clc_msg *m, uint8_t credits, uint8_t *buf);

/* One whole message of len bytes: a CLC message, then the credits extension for an
 * SMC-R Accept/Confirm (*credits, at least CDC_CREDITS_MIN_DEPTH), nothing else after
 * it. 0 or -errno. */
int conn_ib_msg_decode(const uint8_t *buf, size_t len, struct clc_msg *m, uint8_t *credits);

#endif
