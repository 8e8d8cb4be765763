/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/fdpark.h"
#include "core/real.h"

/* The start of the park area for the current limit; 0 when there is none. */
static rlim_t park_low(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur < 256)
		return 0;
	return rl.rlim_cur - rl.rlim_cur / 4;
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
	rlim_t low = park_low();
	int fd, nfd;

	if (low == 0 || low > FD_PARK_PREPARE_MAX)
		return;
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)low);
	if (nfd >= 0)
		REAL(close)(nfd);
	REAL(close)(fd);
}

int fd_park(int fd)
{
	rlim_t low;
	int nfd;

	/* the application may raise its limit later (redis does): read it every time */
	low = fd < 0 ? 0 : park_low();
	if (low == 0)
		return fd;
	if ((rlim_t)fd >= low)
		return fd;
	nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)low);
	if (nfd < 0)
		return fd;
	REAL(close)(fd);
	return nfd;
}
