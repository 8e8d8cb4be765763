/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R link groups, the bookkeeping only. See ib_lgr_book.h.
 */
#include "core/ib/ib_lgr_book.h"

#include <string.h>

void ib_lgr_book_init(struct ib_lgr_book *b, uint64_t idle_ns, unsigned max_conns)
{
	b->head = NULL;
	b->n = 0;
	b->idle_ns = idle_ns;
	b->max_conns = max_conns;
}

void ib_lgr_book_add(struct ib_lgr_book *b, struct ib_lgr_entry *e)
{
	e->up = false;
	e->failed = false;
	e->refs = 1;
	e->conns = 0;
	e->idle_since = 0;
	e->next = b->head;
	b->head = e;
	b->n++;
}

void ib_lgr_book_remove(struct ib_lgr_book *b, struct ib_lgr_entry *e)
{
	for (struct ib_lgr_entry **pp = &b->head; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			e->next = NULL;
			b->n--;
			return;
		}
	}
}

static bool same_peer(const struct ib_lgr_entry *e, const uint8_t *peer_id, const uint8_t *gid)
{
	return memcmp(e->peer_id, peer_id, CLC_PEER_ID_LEN) == 0 &&
	       memcmp(e->gid, gid, CLC_GID_LEN) == 0;
}

struct ib_lgr_entry *ib_lgr_book_find_server(struct ib_lgr_book *b, const uint8_t *peer_id,
					     const uint8_t *gid)
{
	for (struct ib_lgr_entry *e = b->head; e; e = e->next) {
		if (e->role != IB_LGR_SERVER || !e->up || e->failed || !same_peer(e, peer_id, gid))
			continue;
		/* every reference may become a connection: count them as such */
		if (e->conns + e->refs >= b->max_conns)
			continue;
		ib_lgr_book_ref(e);
		return e;
	}
	return NULL;
}

struct ib_lgr_entry *ib_lgr_book_find_client(struct ib_lgr_book *b, const uint8_t *peer_id,
					     const uint8_t *gid, uint32_t peer_qpn)
{
	if (peer_qpn == 0)
		return NULL;
	for (struct ib_lgr_entry *e = b->head; e; e = e->next) {
		if (e->role != IB_LGR_CLIENT || !e->up || e->failed || e->peer_qpn != peer_qpn ||
		    !same_peer(e, peer_id, gid))
			continue;
		ib_lgr_book_ref(e);
		return e;
	}
	return NULL;
}

void ib_lgr_book_up(struct ib_lgr_entry *e, uint32_t peer_qpn)
{
	e->peer_qpn = peer_qpn;
	e->up = true;
}

void ib_lgr_book_ref(struct ib_lgr_entry *e)
{
	e->refs++;
	e->idle_since = 0;
}

static void update_idle(struct ib_lgr_entry *e, uint64_t now)
{
	if (e->refs || e->conns)
		e->idle_since = 0;
	else if (!e->idle_since)
		e->idle_since = now ? now : 1; /* 0 means "in use" */
}

void ib_lgr_book_unref(struct ib_lgr_entry *e, uint64_t now)
{
	if (e->refs)
		e->refs--;
	update_idle(e, now);
}

void ib_lgr_book_failed(struct ib_lgr_entry *e)
{
	e->failed = true;
}

void ib_lgr_book_set_conns(struct ib_lgr_entry *e, unsigned conns, uint64_t now)
{
	e->conns = conns;
	update_idle(e, now);
}

uint64_t ib_lgr_book_expiry(const struct ib_lgr_book *b, const struct ib_lgr_entry *e)
{
	uint64_t keep;

	if (e->refs || e->conns || !e->idle_since)
		return UINT64_MAX;
	if (e->failed || !e->up)
		return e->idle_since; /* nobody can share it: go now */
	keep = e->role == IB_LGR_CLIENT ? 2 * b->idle_ns : b->idle_ns;
	return e->idle_since + keep;
}

bool ib_lgr_book_due(const struct ib_lgr_book *b, const struct ib_lgr_entry *e, uint64_t now)
{
	return now >= ib_lgr_book_expiry(b, e);
}
