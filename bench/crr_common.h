/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What bench/crr.c and bench/crr_floor.c share, so that the floor measures the same TCP
 * steps as crr does: the clock, the sockets' I/O timeouts, whole-message reads and
 * writes, and the loopback listener. Header-only: bench/run and bench/crr-floor build
 * each program with `cc file.c`.
 */
#ifndef SMC_BENCH_CRR_COMMON_H
#define SMC_BENCH_CRR_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Every socket gets this receive/send timeout so a lost wakeup shows up as an error
 * (EAGAIN) instead of a hang. */
#define CRR_IO_TIMEOUT_S 5

static inline uint64_t crr_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void crr_set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = CRR_IO_TIMEOUT_S };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Reads exactly len bytes: 1 ok, 0 EOF before len, -1 error. */
static inline int crr_read_full(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);

		if (n == 0)
			return 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)n;
	}
	return 1;
}

/* Writes all len bytes: 0, or -1. */
static inline int crr_write_full(int fd, const char *buf, size_t len)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = write(fd, buf + put, len - put);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		put += (size_t)n;
	}
	return 0;
}

/* A TCP listener on 127.0.0.1:port (0: any free port): its fd, the port it got in
 * *bound; -1 after printing why. */
static inline int crr_listen(int port, int *bound)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	socklen_t salen = sizeof(sa);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return perror("socket"), -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4096) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) {
		perror("bind/listen");
		close(fd);
		return -1;
	}
	*bound = ntohs(sa.sin_port);
	return fd;
}

#endif
