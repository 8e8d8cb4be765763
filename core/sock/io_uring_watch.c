/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Whether the process uses io_uring (io_uring_watch.h). */
#include "core/sock/io_uring_watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/log.h"
#include "core/shm/pool.h"
#include "core/sock/sock.h"

static bool in_use;

bool io_uring_in_use(void)
{
	return __atomic_load_n(&in_use, __ATOMIC_ACQUIRE);
}

void io_uring_note_setup(void)
{
	if (__atomic_exchange_n(&in_use, true, __ATOMIC_ACQ_REL))
		return;
	log_info("the process uses io_uring, which bypasses this library: its connections "
		 "go back to TCP, new ones stay TCP");
	/* pooled connections are upgraded before accept() sees them: take no new ones */
	pool_server_retire_all();
	smc_sock_downgrade_all(SMC_REASON_IO_URING);
}

/* The kernel names an io_uring descriptor's file "anon_inode:[io_uring]". */
bool io_uring_fd_is_ring(int fd)
{
	static const char ring[] = "anon_inode:[io_uring]";
	char path[sizeof("/proc/self/fd/") + 3 * sizeof(int)], target[sizeof(ring) + 1];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	return n == (ssize_t)sizeof(ring) - 1 && memcmp(target, ring, (size_t)n) == 0;
}
