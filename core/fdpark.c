/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <fcntl.h>
#include <sys/resource.h>

#include "core/fdpark.h"
#include "core/real.h"

int fd_park(int fd)
{
	struct rlimit rl;
	rlim_t low;
	int nfd;

	if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur < 256)
		return fd;
	/* the application may raise its limit later (redis does): read it every time */
	low = rl.rlim_cur - rl.rlim_cur / 4;
	if ((rlim_t)fd >= low)
		return fd;
	nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)low);
	if (nfd < 0)
		return fd;
	REAL(close)(fd);
	return nfd;
}
