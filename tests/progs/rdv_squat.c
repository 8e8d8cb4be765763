/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * rdv_squat: another local user's attack on the same-host rendezvous, for
 * tests/integration/rdv_squat.sh. IPv4 loopback only.
 *
 *   rdv_squat squat SERVER_PORT FIRST_PORT COUNT
 *       Binds, and listens on, the abstract per-connection rendezvous names
 *       ("\0smcp1:c:<client>-<server>", core/base/rendezvous.c) of the connections that
 *       127.0.0.1:P makes to 127.0.0.1:SERVER_PORT, for the COUNT odd ports P from
 *       FIRST_PORT on; accepts whoever connects and never answers. Prints
 *       "OK squatting COUNT" once all are bound; on SIGTERM prints
 *       "RESULT accepted=A bytes=B" (connections accepted, bytes they sent) and exits 0.
 *   rdv_squat connect SERVER_PORT FIRST_PORT COUNT
 *       From each of those COUNT ports in turn: bind, connect, send a 64-byte request,
 *       check the 64-byte response of tests/progs/smc_churn's server, close. Prints
 *       "RESULT ok=N failed=F usec_per_conn=U" and exits 0 only when all N worked (U is
 *       for the log: the test asserts no time).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tests/progs/rdv_names.h"

#define MSG_LEN 64 /* tests/progs/smc_churn.c */
#define MAX_COUNT 256
#define MAX_ACCEPTED 4096

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int squat(uint16_t server_port, uint16_t first, int count)
{
	struct pollfd pfd[MAX_COUNT + MAX_ACCEPTED];
	struct sigaction sa = { .sa_handler = on_term };
	unsigned long accepted = 0, bytes = 0;
	int n = 0;

	sigaction(SIGTERM, &sa, NULL);
	for (int i = 0; i < count; i++) {
		struct sockaddr_un un;
		socklen_t len = rdv_conn_name(&un, (uint16_t)(first + 2 * i), server_port);
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd < 0 || bind(fd, (struct sockaddr *)&un, len) < 0 || listen(fd, 16) < 0) {
			printf("ERROR bind name for port %d: %s\n", first + 2 * i, strerror(errno));
			return 1;
		}
		pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	}
	printf("OK squatting %d\n", count);
	fflush(stdout);
	while (!stop) {
		int r = poll(pfd, (nfds_t)n, 100);

		if (r < 0 && errno != EINTR) {
			printf("ERROR poll: %s\n", strerror(errno));
			return 1;
		}
		for (int i = 0; r > 0 && i < n; i++) {
			char buf[4096];
			ssize_t got;

			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (i < count) {
				int fd = accept4(pfd[i].fd, NULL, NULL,
						 SOCK_CLOEXEC | SOCK_NONBLOCK);

				if (fd < 0)
					continue;
				accepted++;
				if (n == MAX_COUNT + MAX_ACCEPTED) {
					close(fd); /* counted; nothing was read from it */
					continue;
				}
				/* kept open and never answered: the silent holder */
				pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
				continue;
			}
			got = recv(pfd[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (got > 0) {
				bytes += (unsigned long)got;
			} else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
				/* the peer went: stop watching it, keep the slot */
				close(pfd[i].fd);
				pfd[i].fd = -1;
			}
		}
	}
	printf("RESULT accepted=%lu bytes=%lu\n", accepted, bytes);
	return 0;
}

static int one_conn(uint16_t server_port, uint16_t port)
{
	struct sockaddr_in local = { .sin_family = AF_INET, .sin_port = htons(port),
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in srv = { .sin_family = AF_INET, .sin_port = htons(server_port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tmo = { .tv_sec = 10 };
	unsigned char req[MSG_LEN], resp[MSG_LEN];
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t got = 0;

	if (fd < 0)
		return -1;
	for (int i = 0; i < MSG_LEN; i++)
		req[i] = (unsigned char)(port + i * 7);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	if (bind(fd, (struct sockaddr *)&local, sizeof(local)) < 0 ||
	    connect(fd, (struct sockaddr *)&srv, sizeof(srv)) < 0 ||
	    send(fd, req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req)) {
		fprintf(stderr, "port %u: %s\n", port, strerror(errno));
		close(fd);
		return -1;
	}
	while (got < sizeof(resp)) {
		ssize_t r = recv(fd, resp + got, sizeof(resp) - got, 0);

		if (r <= 0) {
			fprintf(stderr, "port %u: %s\n", port, r ? strerror(errno) : "EOF");
			close(fd);
			return -1;
		}
		got += (size_t)r;
	}
	close(fd);
	for (int i = 0; i < MSG_LEN; i++)
		if (resp[i] != (unsigned char)(req[i] ^ 0x5A ^ i)) {
			fprintf(stderr, "port %u: wrong response byte %d\n", port, i);
			return -1;
		}
	return 0;
}

static int connect_all(uint16_t server_port, uint16_t first, int count)
{
	struct timespec t0, t1;
	int ok = 0, failed = 0;
	long long us;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < count; i++) {
		if (one_conn(server_port, (uint16_t)(first + 2 * i)) == 0)
			ok++;
		else
			failed++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	us = (t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000;
	printf("RESULT ok=%d failed=%d usec_per_conn=%lld\n", ok, failed, us / count);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	int server_port, first, count;

	if (argc != 5) {
		fprintf(stderr, "usage: rdv_squat squat|connect SERVER_PORT FIRST_PORT COUNT\n");
		return 2;
	}
	server_port = atoi(argv[2]);
	first = atoi(argv[3]);
	count = atoi(argv[4]);
	if (server_port <= 0 || server_port > 65535 || first <= 0 || !(first & 1) ||
	    count <= 0 || count > MAX_COUNT || first + 2 * (count - 1) > 65535) {
		fprintf(stderr, "rdv_squat: bad ports or count (FIRST_PORT must be odd)\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(argv[1], "squat") == 0)
		return squat((uint16_t)server_port, (uint16_t)first, count);
	if (strcmp(argv[1], "connect") == 0)
		return connect_all((uint16_t)server_port, (uint16_t)first, count);
	fprintf(stderr, "rdv_squat: unknown mode %s\n", argv[1]);
	return 2;
}
