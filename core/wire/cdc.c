/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Connection Data Control: wire format, cursor validation, window update policy and
 * receive-queue credits. See cdc.h.
 *
 * Wire layout of the SMC-R CDC message (RFC 7609 4.8, 44 bytes, big endian):
 *    0  type (0xFE)             1  length (44)
 *    2  sequence number (16)    4  alert token (32)
 *    8  producer cursor: reserved (16), wrap (16), count (32)
 *   16  consumer cursor: same layout
 *   24  producer flags: 0x80 write blocked, 0x40 urgent pending, 0x20 urgent present,
 *       0x10 consumer cursor update requested, 0x08 failover validation
 *   25  connection state flags: 0x80 done writing, 0x40 closed, 0x20 abort
 *   26  reserved (18); this project uses byte 26 for RQ credits between two
 *       smc-preload peers, and byte 27 for their downgrade flags: 0x80 went back to
 *       TCP, 0x40 acknowledged the peer's (a kernel peer writes 0 and ignores both)
 * A cursor's 8 bytes are exactly the big-endian form of our packed smc_cursor
 * (reserved 16 | wrap 16 | count 32), so reserved bits survive decoding and make the
 * cursor invalid for cdc_validate_*.
 */
#include "core/wire/cdc.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------ wire message */

#define OFF_TYPE 0
#define OFF_LEN 1
#define OFF_SEQ 2
#define OFF_TOKEN 4
#define OFF_PROD 8
#define OFF_CONS 16
#define OFF_PFLAGS 24
#define OFF_CFLAGS 25
#define OFF_CREDITS 26
#define OFF_XFLAGS 27

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	put_be16(p, (uint16_t)(v >> 16));
	put_be16(p + 2, (uint16_t)v);
}

static void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static uint16_t get_be16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_be32(const uint8_t *p)
{
	return ((uint32_t)get_be16(p) << 16) | get_be16(p + 2);
}

static uint64_t get_be64(const uint8_t *p)
{
	return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

/* Host flag <-> wire bit, for both flag bytes. */
static const struct {
	uint32_t host;
	uint8_t wire;
	uint8_t byte; /* OFF_PFLAGS or OFF_CFLAGS */
} flag_map[] = {
	{ CDC_WRITE_BLOCKED, 0x80, OFF_PFLAGS },
	{ CDC_URG_PENDING, 0x40, OFF_PFLAGS },
	{ CDC_URG_PRESENT, 0x20, OFF_PFLAGS },
	{ CDC_CONS_UPDATE_REQ, 0x10, OFF_PFLAGS },
	{ CDC_FAILOVER_VALID, 0x08, OFF_PFLAGS },
	{ CDC_DONE_WRITING, 0x80, OFF_CFLAGS },
	{ CDC_CONN_CLOSED, 0x40, OFF_CFLAGS },
	{ CDC_CONN_ABORT, 0x20, OFF_CFLAGS },
	{ CDC_WENT_TCP, 0x80, OFF_XFLAGS },
	{ CDC_TCP_ACK, 0x40, OFF_XFLAGS },
};
#define FLAG_MAP_N (sizeof(flag_map) / sizeof(flag_map[0]))
#define CURSOR_RESERVED_MASK 0xFFFF000000000000ULL

int cdc_encode(const struct cdc_msg *m, uint8_t out[CDC_MSG_LEN])
{
	if ((m->st.prod & CURSOR_RESERVED_MASK) || (m->st.cons & CURSOR_RESERVED_MASK) ||
	    (m->st.flags & ~(uint32_t)CDC_FLAGS_MASK))
		return -EINVAL;
	memset(out, 0, CDC_MSG_LEN);
	out[OFF_TYPE] = CDC_MSG_TYPE;
	out[OFF_LEN] = CDC_MSG_LEN;
	put_be16(out + OFF_SEQ, m->seqno);
	put_be32(out + OFF_TOKEN, m->token);
	put_be64(out + OFF_PROD, m->st.prod);
	put_be64(out + OFF_CONS, m->st.cons);
	for (size_t i = 0; i < FLAG_MAP_N; i++)
		if (m->st.flags & flag_map[i].host)
			out[flag_map[i].byte] |= flag_map[i].wire;
	out[OFF_CREDITS] = m->credits;
	return 0;
}

int cdc_decode(const uint8_t *buf, size_t len, struct cdc_msg *out)
{
	if (len < CDC_MSG_LEN || buf[OFF_TYPE] != CDC_MSG_TYPE || buf[OFF_LEN] != CDC_MSG_LEN)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->seqno = get_be16(buf + OFF_SEQ);
	out->token = get_be32(buf + OFF_TOKEN);
	out->st.prod = get_be64(buf + OFF_PROD);
	out->st.cons = get_be64(buf + OFF_CONS);
	for (size_t i = 0; i < FLAG_MAP_N; i++)
		if (buf[flag_map[i].byte] & flag_map[i].wire)
			out->st.flags |= flag_map[i].host;
	out->credits = buf[OFF_CREDITS];
	return 0;
}

/* ------------------------------------------------------------------ validation */

int cdc_validate_peer_prod(smc_cursor new_prod, smc_cursor last_prod, smc_cursor my_cons,
			   uint32_t rmb_size)
{
	if (!cursor_valid(new_prod, rmb_size))
		return -EPROTO;
	if (cursor_diff(new_prod, last_prod, rmb_size) < 0)
		return -EPROTO; /* moved backwards or jumped more than a ring */
	/* cursor_diff is -1 for "behind my consumer" and never above rmb_size, so
	 * this also bounds the readable region to the RMB. */
	if (cursor_diff(new_prod, my_cons, rmb_size) < 0)
		return -EPROTO;
	return 0;
}

int cdc_validate_peer_cons(smc_cursor new_cons, smc_cursor last_cons, smc_cursor my_prod,
			   uint32_t peer_rmb_size)
{
	if (!cursor_valid(new_cons, peer_rmb_size))
		return -EPROTO;
	if (cursor_diff(new_cons, last_cons, peer_rmb_size) < 0)
		return -EPROTO;
	/* The peer cannot have read what I have not written. */
	if (cursor_diff(my_prod, new_cons, peer_rmb_size) < 0)
		return -EPROTO;
	return 0;
}

/* ------------------------------------------------------------------ window updates */

/*
 * Why these numbers (seed 000). The kernel withholds an update until more than 10% of
 * the RMB was consumed AND the writer's free space is at most half the RMB (or it is
 * blocked). Reads whose first part is under 10% and readers that drain more than half
 * per call then publish once per message, and writer and reader take turns instead of
 * overlapping: throughput falls by up to half at message sizes tied to the RMB size.
 *
 * Here:
 *  - period = size/4: however the reads fall, the writer never sees more than a quarter
 *    of the ring as "used" when the reader has in fact freed it, so at least 3/4 of the
 *    ring stays available for pipelining. 1/2 is the kernel's lock-step zone; 1/8 would
 *    double the SENDs for little gain: at 1/4 an update costs one SEND per 16 KiB even
 *    for a 64 KiB RMB, negligible next to the RDMA WRITEs it lets through.
 *  - granule = size/8: once the writer is blocked (it said so) or short of room in its
 *    own view (< size/4 free, estimated from what we have received), any freed region of
 *    size/8 goes out at once, so the writer does not wait a round trip for space that
 *    is already free. Below the granule we wait: answering a blocked writer byte by byte
 *    is silly window syndrome, and cannot deadlock: a blocked writer's view is full,
 *    so everything the reader consumes is unannounced and reaches the granule long
 *    before the ring is empty.
 * Evaluating after each CDC received (not only after consumes) matters: a writer that
 * becomes blocked while the reader is idle still gets the space the reader freed.
 */
static uint32_t at_least_1(uint32_t v)
{
	return v ? v : 1;
}

void cdc_policy_init(struct cdc_update_policy *p, uint32_t rmb_size)
{
	p->rmb_size = rmb_size;
	p->period = at_least_1(rmb_size / 4);
	p->granule = at_least_1(rmb_size / 8);
	p->low_room = at_least_1(rmb_size / 4);
}

bool cdc_should_send_cons_update(const struct cdc_update_policy *p,
				 uint32_t consumed_since_last_update, bool peer_write_blocked,
				 uint32_t bytes_left_unread)
{
	uint32_t consumed = consumed_since_last_update;

	if (consumed == 0)
		return false;
	if (consumed >= p->period)
		return true;
	if (consumed < p->granule)
		return false;
	if (peer_write_blocked)
		return true;
	/* The writer's free space as it sees it: the ring minus what it knows to be
	 * unread (what we hold unread plus what we consumed without telling it). */
	uint64_t seen_used = (uint64_t)bytes_left_unread + consumed;
	uint64_t writer_room = seen_used >= p->rmb_size ? 0 : p->rmb_size - seen_used;

	return writer_room < p->low_room;
}

/* ------------------------------------------------------------------ RQ credits */

int cdc_credits_init(struct cdc_credits *c, uint32_t peer_depth, uint32_t local_depth)
{
	if (peer_depth < CDC_CREDITS_MIN_DEPTH || local_depth < CDC_CREDITS_MIN_DEPTH)
		return -EINVAL;
	c->avail = peer_depth;
	c->peer_depth = peer_depth;
	c->unannounced = 0;
	c->local_depth = local_depth;
	/*
	 * Announce explicitly once half my queue is unannounced. Bounds: at least 2, so
	 * that a received explicit update (which itself consumed one of my buffers) never
	 * triggers an update in return (no ping-pong); at most depth - 1, so a peer stuck
	 * on its reserved last credit (it consumed depth - 1 of my buffers) always gets one.
	 */
	uint32_t at = local_depth / 2;

	if (at < 2)
		at = 2;
	if (at > local_depth - 1)
		at = local_depth - 1;
	c->update_at = at;
	return 0;
}

int cdc_credits_take(struct cdc_credits *c, uint8_t *announce)
{
	uint32_t give = c->unannounced < CDC_CREDITS_MAX_ANNOUNCE ? c->unannounced
								 : CDC_CREDITS_MAX_ANNOUNCE;

	if (c->avail == 0 || (c->avail == 1 && give == 0))
		return -EAGAIN;
	c->avail--;
	c->unannounced -= give;
	*announce = (uint8_t)give;
	return 0;
}

void cdc_credits_untake(struct cdc_credits *c, uint8_t announce)
{
	c->avail++;
	c->unannounced += announce;
}

bool cdc_credits_can_send(const struct cdc_credits *c)
{
	return c->avail > 1 || (c->avail == 1 && c->unannounced > 0);
}

int cdc_credits_grant(struct cdc_credits *c, uint32_t n)
{
	if (n > c->peer_depth - c->avail)
		return -EPROTO;
	c->avail += n;
	return 0;
}

int cdc_credits_reposted(struct cdc_credits *c, uint32_t n)
{
	if (n > c->local_depth - c->unannounced)
		return -EPROTO;
	c->unannounced += n;
	return 0;
}

bool cdc_credits_need_update(const struct cdc_credits *c)
{
	return c->unannounced >= c->update_at && c->avail > 0;
}
