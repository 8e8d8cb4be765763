/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * L2 size for the ring default. Runs from the library's constructor, so it allocates
 * nothing (no stdio) and reads files through the real read/close.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/base/cpu_cache.h"
#include "core/base/real.h"

long cpu_cache_parse_size(const char *text)
{
	long v = 0;
	const char *p = text;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (LONG_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	if (*p == 'K' || *p == 'k') {
		if (v > LONG_MAX / 1024)
			return -1;
		v *= 1024, p++;
	} else if (*p == 'M' || *p == 'm') {
		if (v > LONG_MAX / (1024 * 1024))
			return -1;
		v *= 1024 * 1024, p++;
	}
	if (*p == '\n')
		p++;
	return *p == '\0' ? v : -1;
}

/* Reads a small sysfs file into buf as a string; -1 when it cannot. */
static int read_small_file(const char *path, char *buf, size_t len)
{
	int fd = REAL(open)(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = REAL(read)(fd, buf, len - 1);
	REAL(close)(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

long cpu_l2_from_sysfs(const char *cache_dir)
{
	char path[PATH_MAX], text[32];

	/* index0.. are numbered without gaps; 16 is far past any CPU's cache count */
	for (int i = 0; i < 16; i++) {
		long size;

		snprintf(path, sizeof(path), "%s/index%d/level", cache_dir, i);
		if (read_small_file(path, text, sizeof(text)) < 0)
			break;
		if (strcmp(text, "2\n") != 0 && strcmp(text, "2") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/index%d/type", cache_dir, i);
		if (read_small_file(path, text, sizeof(text)) == 0 &&
		    strncmp(text, "Instruction", 11) == 0)
			continue;
		snprintf(path, sizeof(path), "%s/index%d/size", cache_dir, i);
		if (read_small_file(path, text, sizeof(text)) < 0)
			continue;
		size = cpu_cache_parse_size(text);
		if (size > 0)
			return size;
	}
	return 0;
}

long cpu_l2_bytes(void)
{
	long v = sysconf(_SC_LEVEL2_CACHE_SIZE); /* x86: glibc reads CPUID */

	if (v > 0)
		return v;
	/* other architectures: glibc may not know; the kernel's view does */
	return cpu_l2_from_sysfs("/sys/devices/system/cpu/cpu0/cache");
}
