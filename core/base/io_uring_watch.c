/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Whether the process uses io_uring (io_uring_watch.h). */
#include "core/base/io_uring_watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static bool in_use;

bool io_uring_in_use(void)
{
	return __atomic_load_n(&in_use, __ATOMIC_ACQUIRE);
}

bool io_uring_mark_in_use(void)
{
	return !__atomic_exchange_n(&in_use, true, __ATOMIC_ACQ_REL);
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
