/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/base/fsize.h"

bool fsize_allows(uint64_t end)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_FSIZE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return true;
	return end <= (uint64_t)rl.rlim_cur;
}

bool fsize_allows_append(int fd, uint64_t len)
{
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return true;
	return fsize_allows((uint64_t)st.st_size + len);
}
