/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/fd_budget.h"
#include "core/fdpark.h"
#include "core/real.h"

/* The park area for the current limit: [*floor, *limit); false when there is none. */
static bool park_area(rlim_t *floor, rlim_t *limit)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur < 256)
		return false;
	*limit = rl.rlim_cur;
	*floor = rl.rlim_cur - rl.rlim_cur / 4;
	return true;
}

/*
 * The first descriptor parked in a process grows its fd table to the park area, and
 * the kernel, when the table is shared by several threads, waits for an RCU grace
 * period to do so: 22 ms measured (strace -tt of the crr client, RLIMIT_NOFILE 20000),
 * every thread of the process stalled, at its first SMC connection. Done at load it
 * costs tens of microseconds, since a process rarely has threads before its
 * constructors run. Kernel memory is 8 bytes per slot, so only up to this many slots:
 * past it (containers with a limit of a million) the first park pays as before.
 */
#define FD_PARK_PREPARE_MAX 65536

void fd_park_prepare(void)
{
	rlim_t floor, limit;
	int fd, nfd;

	if (!park_area(&floor, &limit) || limit > FD_PARK_PREPARE_MAX)
		return;
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)(limit - 1));
	if (nfd >= 0)
		REAL(close)(nfd);
	REAL(close)(fd);
}

/*
 * Packed at the top: the lowest free number in the top `span` slots, where span is what
 * the library holds (fd_budget.h) plus some room, doubled while those slots are full.
 * Filling the park area from its bottom instead would put the library's descriptors
 * where a growing application's next numbers go: an application holding more than
 * three quarters of its limit would get numbers above the library's block, beyond the
 * tables it sized by its own count (redis sizes its event loop to maxclients + 128 and
 * cannot watch a client with a higher number).
 */
int fd_park(int fd)
{
	rlim_t floor, limit, span, start;
	int nfd;

	/* the application may raise its limit later (redis does): read it every time */
	if (fd < 0 || !park_area(&floor, &limit))
		return fd;
	span = (rlim_t)fd_budget_held() + 16 + fd_budget_held() / 16;
	for (;;) {
		start = span < limit - floor ? limit - span : floor;
		if ((rlim_t)fd >= start)
			return fd;
		nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)start);
		if (nfd >= 0) {
			REAL(close)(fd);
			return nfd;
		}
		if (errno != EMFILE || start == floor)
			return fd;
		span *= 2;
	}
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int fd_close_range_sparing(unsigned int first, unsigned int last, int flags, int *keep,
			   size_t n)
{
	unsigned int from = first;
	int rc = 0;

	qsort(keep, n, sizeof(*keep), cmp_int);
	for (size_t i = 0; i < n && from <= last; i++) {
		unsigned int k = (unsigned int)keep[i];

		if (k < from || k > last)
			continue;
		if (k > from && REAL(close_range)(from, k - 1, flags) < 0)
			rc = -1;
		if (k == UINT_MAX)
			return rc;
		from = k + 1;
	}
	if (from <= last && from >= first && REAL(close_range)(from, last, flags) < 0)
		rc = -1;
	return rc;
}
