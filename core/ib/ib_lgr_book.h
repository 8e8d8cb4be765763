/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R link groups, the bookkeeping only (no verbs, no clock, no locks): which link a
 * new connection to a peer may share, who holds a link, and when an unused one goes.
 * core/ib/ib_lgr.c wraps it around real links; tests/unit/test_ib_lgr.c drives it with a
 * made-up clock.
 *
 * Keys. A link joins this process to one peer *process*: the peer id of smc-preload is
 * drawn per process (two processes on one host have separate QPs), plus the GID of
 * the peer's port. The server looks links up by (peer id, GID) among the links it
 * serves; the client by (peer id, GID, the server's QP number), because the Accept of
 * a later connection names the link by that QP number. Two first contacts that race
 * make two links to one peer: correct, only less shared.
 *
 * Lifetime. A link is "up" (shareable) once connected: the server's after the Confirm of
 * its first contact, the client's after ib_link_connect. It is held by references
 * (handshakes in progress) and by its connections. With neither, it is idle; an idle
 * up link is torn down after idle_ns (server role) or 2 * idle_ns (client role): the
 * server decides reuse, so the client keeps its end longer and a server never names a
 * link the client already dropped (the client's keepalive then notices the server's QP
 * is gone and fails its end early). A failed link, or one never brought up, goes as soon
 * as nothing holds it.
 */
#ifndef SMC_IB_LGR_BOOK_H
#define SMC_IB_LGR_BOOK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire/clc.h"

enum ib_lgr_role { IB_LGR_SERVER = 0, IB_LGR_CLIENT = 1 };

struct ib_lgr_entry {
	/* key (set by the caller before ib_lgr_book_add) */
	uint8_t peer_id[CLC_PEER_ID_LEN];
	uint8_t gid[CLC_GID_LEN];
	enum ib_lgr_role role;
	uint32_t peer_qpn;   /* 0 until known (ib_lgr_book_up) */
	/* state */
	bool up;
	bool failed;
	unsigned refs;       /* handshakes holding the link */
	unsigned conns;      /* its connections, as last reported */
	uint64_t idle_since; /* when refs and conns both reached 0; 0 while in use */
	void *link;          /* the owner's link object */
	struct ib_lgr_entry *next;
};

struct ib_lgr_book {
	struct ib_lgr_entry *head;
	unsigned n;
	uint64_t idle_ns;
	unsigned max_conns; /* per link (IB_LINK_MAX_CONNS) */
};

void ib_lgr_book_init(struct ib_lgr_book *b, uint64_t idle_ns, unsigned max_conns);
/* Adds e (key fields set) holding one reference, not up, not failed. */
void ib_lgr_book_add(struct ib_lgr_book *b, struct ib_lgr_entry *e);
void ib_lgr_book_remove(struct ib_lgr_book *b, struct ib_lgr_entry *e);

/* A shareable server link to (peer_id, gid): up, not failed, with room for one more
 * connection. Takes a reference. NULL when there is none (make a new one). */
struct ib_lgr_entry *ib_lgr_book_find_server(struct ib_lgr_book *b, const uint8_t *peer_id,
					     const uint8_t *gid);
/* The client link the server's Accept names: (peer_id, gid, peer_qpn), up, not failed.
 * Takes a reference. NULL when there is none (decline: out of sync). */
struct ib_lgr_entry *ib_lgr_book_find_client(struct ib_lgr_book *b, const uint8_t *peer_id,
					     const uint8_t *gid, uint32_t peer_qpn);

/* The link is connected to the peer's QP peer_qpn: it may be shared from now on. */
void ib_lgr_book_up(struct ib_lgr_entry *e, uint32_t peer_qpn);
void ib_lgr_book_ref(struct ib_lgr_entry *e);
/* Drops a reference taken by add/find/ref; now: for the idle clock. */
void ib_lgr_book_unref(struct ib_lgr_entry *e, uint64_t now);
/* The link failed: never found again, torn down once nothing holds it. */
void ib_lgr_book_failed(struct ib_lgr_entry *e);
/* Its current connection count (the link's own count) at time now. */
void ib_lgr_book_set_conns(struct ib_lgr_entry *e, unsigned conns, uint64_t now);

/* When e is to be torn down (UINT64_MAX: not while it is in use). */
uint64_t ib_lgr_book_expiry(const struct ib_lgr_book *b, const struct ib_lgr_entry *e);
bool ib_lgr_book_due(const struct ib_lgr_book *b, const struct ib_lgr_entry *e, uint64_t now);

#endif
