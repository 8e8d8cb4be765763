/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * as_limit: connections opened and kept under a small RLIMIT_AS
 * (tests/integration/as_limit.sh).
 *
 *   as_limit N LIMIT_KIB [ALLOC_KIB]
 *       Sets RLIMIT_AS to LIMIT_KIB (after the start, so the library and libevent are
 *       loaded already), forks an echo server, opens N connections to it one after the
 *       other, each with one 4-byte round trip, and keeps them open until all are done;
 *       then both processes exit normally (exit(), so the library writes its stats).
 *       Prints "RESULT n=<round trips that completed> wanted=N". Exit 0 when all did.
 *       With ALLOC_KIB, while the connections are open, the program also allocates
 *       and touches that much memory of its own, as a program does between requests,
 *       and prints "ALLOC ok" or "ALLOC failed".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int full_io(int fd, char *buf, size_t n, bool out)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = out ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static int serve(int lfd, int n)
{
	int *fds = calloc((size_t)n, sizeof(*fds)), bad = 0;

	for (int i = 0; i < n; i++) {
		char b[4];

		fds[i] = accept(lfd, NULL, NULL);
		if (fds[i] < 0 || full_io(fds[i], b, 4, false) < 0 || full_io(fds[i], b, 4, true) < 0)
			bad++;
	}
	for (int i = 0; i < n; i++) {
		char b;

		/* the client's close */
		if (fds[i] >= 0 && read(fds[i], &b, 1) != 0)
			bad++;
		close(fds[i]);
	}
	free(fds);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	struct rlimit rl;
	int n, lfd, *fds, done = 0, st = 0;
	pid_t pid;

	if ((argc != 3 && argc != 4) || (n = atoi(argv[1])) <= 0 || atol(argv[2]) <= 0) {
		fprintf(stderr, "usage: %s N LIMIT_KIB [ALLOC_KIB]\n", argv[0]);
		return 2;
	}
	rl.rlim_cur = rl.rlim_max = (rlim_t)atol(argv[2]) * 1024;
	if (setrlimit(RLIMIT_AS, &rl) < 0) {
		perror("setrlimit");
		return 2;
	}
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 512) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &al) < 0) {
		perror("listen");
		return 2;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		exit(serve(lfd, n));
	}
	close(lfd);
	fds = calloc((size_t)n, sizeof(*fds));
	for (int i = 0; i < n; i++) {
		char b[4] = { 'p', 'i', 'n', 'g' };

		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    full_io(fds[i], b, 4, true) < 0 || full_io(fds[i], b, 4, false) < 0 ||
		    memcmp(b, "ping", 4) != 0)
			break;
		done++;
	}
	if (argc == 4) {
		size_t len = (size_t)atol(argv[3]) * 1024;
		char *mine = malloc(len);

		if (mine)
			memset(mine, 1, len);
		printf("ALLOC %s\n", mine ? "ok" : "failed");
		free(mine);
	}
	for (int i = 0; i < n; i++)
		if (fds[i] > 0)
			close(fds[i]);
	free(fds);
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		done = -1;
	printf("RESULT n=%d wanted=%d\n", done, n);
	return done == n ? 0 : 1;
}
