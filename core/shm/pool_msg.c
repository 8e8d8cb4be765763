/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <string.h>

#include "core/shm/pool_msg.h"

struct pool_req pool_req_make(uint32_t nslots, uint32_t ring_size)
{
	return (struct pool_req){ POOL_REQ_MAGIC, POOL_VERSION, nslots, ring_size };
}

struct pool_rep pool_rep_make(enum pool_status st, uint32_t nslots)
{
	return (struct pool_rep){ POOL_REP_MAGIC, POOL_VERSION, (uint32_t)st, nslots };
}

int pool_req_decode(const void *buf, ssize_t len, int nfds, struct pool_req *req)
{
	if (len != (ssize_t)sizeof(*req))
		return -EBADMSG;
	memcpy(req, buf, sizeof(*req));
	if (req->magic != POOL_REQ_MAGIC || req->version != POOL_VERSION ||
	    !pool_geometry_ok(req->nslots, req->ring_size) || nfds != 2 + 2 * (int)req->nslots)
		return -EBADMSG;
	return 0;
}

int pool_rep_decode(const void *buf, ssize_t len, int nfds, uint32_t nslots,
		    struct pool_rep *rep)
{
	if (len != (ssize_t)sizeof(*rep))
		return -EBADMSG;
	memcpy(rep, buf, sizeof(*rep));
	if (rep->magic == POOL_REP_MAGIC && rep->status == POOL_ANSWER_REFUSED)
		return -ECONNREFUSED;
	if (rep->magic != POOL_REP_MAGIC || rep->version != POOL_VERSION ||
	    rep->status != POOL_ANSWER_OK || rep->nslots != nslots || nfds != 2 * (int)nslots)
		return -EBADMSG;
	return 0;
}
