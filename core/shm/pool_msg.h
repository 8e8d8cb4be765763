/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The two messages that set a pool up (pool.c): the client's request, sent to the
 * listener's rendezvous name with the region's memfd, the link and the client's
 * doorbells, and the server's answer on the link with its doorbells. Same host, so
 * native byte order. The decoders take what recvmsg returned (bytes and the number of
 * descriptors that came with them) and are pure, so that tests/fuzz/fuzz_pool_msg.c
 * drives them with any bytes.
 */
#ifndef SMC_POOL_MSG_H
#define SMC_POOL_MSG_H

#include <stdint.h>
#include <sys/types.h>

#include "core/shm/pool_slot.h"

#define POOL_REQ_MAGIC 0x534d5052u /* "SMPR" */
#define POOL_REP_MAGIC 0x534d5041u /* "SMPA" */
/* descriptors of the largest request: memfd, link, 2 doorbells per slot */
#define POOL_MAX_FDS   (2 + 2 * POOL_SLOTS_MAX)

enum pool_status { POOL_ANSWER_OK = 0, POOL_ANSWER_REFUSED = 1 };

struct pool_req {
	uint32_t magic, version;
	uint32_t nslots, ring_size;
};

struct pool_rep {
	uint32_t magic, version;
	uint32_t status, nslots;
};

struct pool_req pool_req_make(uint32_t nslots, uint32_t ring_size);
struct pool_rep pool_rep_make(enum pool_status st, uint32_t nslots);

/* A request of len bytes that came with nfds descriptors: 0 and *req when it is
 * well-formed (our magic and version, a geometry pool_geometry_ok accepts, and exactly
 * the memfd, the link and 2 doorbells per slot), else -EBADMSG. */
int pool_req_decode(const void *buf, ssize_t len, int nfds, struct pool_req *req);

/* The answer (len bytes, nfds descriptors) to a request for nslots slots: 0 and *rep
 * for an acceptance of exactly that (2 doorbells per slot); -ECONNREFUSED for a
 * well-formed refusal; -EBADMSG otherwise. *rep is filled whenever len is its size. */
int pool_rep_decode(const void *buf, ssize_t len, int nfds, uint32_t nslots,
		    struct pool_rep *rep);

#endif
