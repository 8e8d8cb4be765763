/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * confine_connect MODE PORT: confines the process, then connects to 127.0.0.1:PORT,
 * sends 64 KiB and reads them back (an echo server), as a privilege-separated daemon's
 * session process does its first connection after it locked itself in.
 *   mountns   a mount namespace of its own, a tmpfs over the directory of the C
 *             library (where libevent lies too): no new shared object can be loaded
 *   landlock  a Landlock domain that allows no file to be read
 * Exit: 0 the bytes came back intact, 1 not, 77 the confinement is not available here
 * (no Landlock in this kernel), 2 a setup error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <linux/landlock.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LEN 65536

static int confine_mountns(void)
{
	Dl_info info;
	char path[PATH_MAX], *dir;

	if (!dladdr((void *)printf, &info) || !info.dli_fname || !realpath(info.dli_fname, path))
		return 2;
	dir = dirname(path);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, NULL) < 0) {
		perror("mount namespace");
		return 2;
	}
	return 0;
}

static int confine_landlock(void)
{
#ifdef SYS_landlock_create_ruleset
	struct landlock_ruleset_attr attr = { .handled_access_fs = LANDLOCK_ACCESS_FS_READ_FILE };
	long fd = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);

	if (fd < 0)
		return errno == ENOSYS || errno == EOPNOTSUPP ? 77 : 2;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    syscall(SYS_landlock_restrict_self, fd, 0) < 0) {
		perror("landlock");
		return 2;
	}
	close((int)fd);
	return 0;
#else
	return 77;
#endif
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	static char out[LEN], back[LEN];
	size_t got = 0;
	int s, r;

	if (argc != 3) {
		fprintf(stderr, "usage: confine_connect mountns|landlock PORT\n");
		return 2;
	}
	for (size_t i = 0; i < LEN; i++)
		out[i] = (char)(i * 7 + 3);
	r = strcmp(argv[1], "mountns") == 0 ? confine_mountns() : confine_landlock();
	if (r)
		return r;
	a.sin_port = htons((uint16_t)atoi(argv[2]));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		return 1;
	}
	if (write(s, out, LEN) != LEN)
		return 1;
	while (got < LEN) {
		ssize_t n = read(s, back + got, LEN - got);

		if (n <= 0)
			return 1;
		got += (size_t)n;
	}
	close(s);
	return memcmp(out, back, LEN) != 0;
}
