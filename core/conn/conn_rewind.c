/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>

#include "core/conn/conn_rewind.h"

smc_cursor conn_rewind_lap_after(smc_cursor at, uint32_t size)
{
	return cursor_add(at, size - cursor_count(at), size);
}

int conn_rewind_check(smc_cursor at, smc_cursor cons, smc_cursor prod_seen, smc_cursor prod,
		      uint32_t size, smc_cursor *next)
{
	smc_cursor n = conn_rewind_lap_after(cons, size);

	if (at != cons || prod_seen != cons || cursor_count(at) == 0 ||
	    cursor_diff(prod, n, size) < 0)
		return -EPROTO;
	*next = n;
	return 0;
}

smc_cursor conn_rewind_room_base(bool pending, smc_cursor skip_at, smc_cursor cons,
				 uint32_t size)
{
	if (pending && cons == skip_at && cursor_count(cons) != 0)
		return conn_rewind_lap_after(cons, size);
	return cons;
}
