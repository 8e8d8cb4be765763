/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The cursor arithmetic of ring rewinds (conn_data.c, the rewinds): what a reader makes of a
 * writer's rewind announced in the shared control block, and what a writer counts its
 * room from while one is pending. Pure functions of cursors, so that everything a peer
 * can write into the block (skip_at, skip_seq, prod, cons) is checked by code the fuzz
 * harness tests/fuzz/fuzz_rewind.c drives without a connection.
 */
#ifndef SMC_CONN_REWIND_H
#define SMC_CONN_REWIND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire/ring.h"

/* The start of the lap after the one cursor `at` is in. */
smc_cursor conn_rewind_lap_after(smc_cursor at, uint32_t size);

/* The reader's check of a rewind the writer announced (skip_at = at) before it
 * validates the new producer cursor prod: the rewind must be at our cursor cons, with
 * everything before it read (prod_seen == cons), not at a lap start, and prod must
 * cover the jump. 0 and *next (our cursor's new place, the lap start after cons), or
 * -EPROTO. */
int conn_rewind_check(smc_cursor at, smc_cursor cons, smc_cursor prod_seen, smc_cursor prod,
		      uint32_t size, smc_cursor *next);

/* The cursor the writer's room counts from, given the reader's cons: while a rewind is
 * pending (skip_seq != skip_done) and the reader still stands where it left
 * (cons == skip_at, not a lap start), the lap start it moved to; else cons. The block
 * is the peer's to write too: a forged rewind can only make the room computed from this
 * negative (no room), which the callers clamp. */
smc_cursor conn_rewind_room_base(bool pending, smc_cursor skip_at, smc_cursor cons,
				 uint32_t size);

#endif
