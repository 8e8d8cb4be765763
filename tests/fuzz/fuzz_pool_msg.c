/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: the pool setup messages (core/shm/pool_msg.c). A server decodes a
 * request from any local client that can reach its listener's rendezvous name, a
 * client decodes the answer on its link. Input: byte 0 picks request (even) or answer
 * (odd), byte 1 the number of descriptors that came with it (0..POOL_MAX_FDS + 1, as
 * recvmsg can report), byte 2 the slots a client asked for (answer only); the rest is
 * the message as recvmsg returned it. What the decoders accept must have a geometry
 * the server can map (pool_geometry_ok; its region length neither overflows nor
 * exceeds the largest), descriptors for exactly that geometry, and re-encode to the
 * same bytes through the constructors pool.c sends with.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/shm/pool_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const uint8_t *msg, size_t len, int nfds)
{
	struct pool_req req, again;

	if (pool_req_decode(msg, (ssize_t)len, nfds, &req) != 0)
		return;
	if (len != sizeof(req) || !pool_geometry_ok(req.nslots, req.ring_size) ||
	    nfds != 2 + 2 * (int)req.nslots || nfds > (int)POOL_MAX_FDS ||
	    pool_region_len(req.nslots, req.ring_size) <
		    (size_t)req.nslots * req.ring_size * 2 ||
	    pool_region_len(req.nslots, req.ring_size) >
		    pool_region_len(POOL_SLOTS_MAX, POOL_RING_MAX))
		abort();
	again = pool_req_make(req.nslots, req.ring_size);
	if (memcmp(&again, msg, sizeof(again)) != 0)
		abort();
}

static void answer(const uint8_t *msg, size_t len, int nfds, uint32_t nslots)
{
	struct pool_rep rep, again;
	int r = pool_rep_decode(msg, (ssize_t)len, nfds, nslots, &rep);

	if (r == -ECONNREFUSED) {
		if (len != sizeof(rep) || rep.magic != POOL_REP_MAGIC ||
		    rep.status != POOL_ANSWER_REFUSED)
			abort();
		return;
	}
	if (r != 0) {
		if (r != -EBADMSG)
			abort();
		return;
	}
	if (len != sizeof(rep) || rep.nslots != nslots || nfds != 2 * (int)nslots ||
	    rep.status != POOL_ANSWER_OK)
		abort();
	again = pool_rep_make(POOL_ANSWER_OK, nslots);
	if (memcmp(&again, msg, sizeof(again)) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int nfds;

	if (size < 3)
		return 0;
	nfds = data[1] % (POOL_MAX_FDS + 2);
	if (data[0] & 1)
		answer(data + 3, size - 3, nfds, data[2] % (POOL_SLOTS_MAX + 1));
	else
		request(data + 3, size - 3, nfds);
	return 0;
}
