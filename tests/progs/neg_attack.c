/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * neg_attack: misbehaving peers of the in-band negotiation (SMC TCP option), for
 * tests/integration/negotiate_robust.sh. Opts its TCP sockets in through the same map
 * as the library (the eBPF program must be set up).
 *
 *   neg_attack jam HOST PORT SECS   a local user's trap for the server's rendezvous
 *       step: binds an abstract rendezvous name, fills its backlog, and sends a Proposal
 *       naming it. A server that cannot join must answer with a Decline on TCP (it must
 *       not block in connect()): prints "OK declined <diag>" and exits 0 when the
 *       Decline arrives within SECS, else "ERROR ..." and 1.
 *   neg_attack hold HOST PORT N SECS   N connections that carry the option and then
 *       send nothing (a client that never proposes); holds them SECS seconds. Prints
 *       "OK held N" once all are connected.
 *   neg_attack late HOST PORT MS   a client that carries the option and is held up
 *       (its process stalled) MS milliseconds before it talks, then talks plain TCP
 *       ("ping\n") without proposing: the server must still be there for it. Prints
 *       "OK answered" when "pong\n" comes back, else "ERROR ..." and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/negotiate/negotiate.h"
#include "core/negotiate/tcpopt.h"
#include "core/wire/clc.h"

static int tcp_opted(const char *host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

	if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		printf("ERROR socket or address %s\n", host);
		exit(1);
	}
	r = tcpopt_opt_in(fd);
	if (r < 0) {
		printf("ERROR opting in: %s\n", strerror(-r));
		exit(1);
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		printf("ERROR connect: %s\n", strerror(errno));
		exit(1);
	}
	return fd;
}

/* An abstract rendezvous name with its backlog full: a blocking connect() to it would
 * wait until somebody accepts, which never happens. */
static void jam_name(uint64_t token)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int n = 1 + snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "smcp1:t:%016llx",
			     (unsigned long long)token);
	socklen_t ul = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n);
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), filled = 0;

	if (l < 0 || bind(l, (struct sockaddr *)&un, ul) < 0 || listen(l, 0) < 0) {
		printf("ERROR rendezvous name: %s\n", strerror(errno));
		exit(1);
	}
	for (int i = 0; i < 16; i++) {
		int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (c < 0 || connect(c, (struct sockaddr *)&un, ul) < 0) {
			if (c >= 0)
				close(c);
			break;
		}
		filled++;
	}
	if (filled == 0) {
		printf("ERROR could not fill the backlog\n");
		exit(1);
	}
}

static int run_jam(const char *host, int port, int secs)
{
	uint64_t token = 0x6a616d0000000000ull | (uint64_t)getpid();
	struct clc_msg m = { .variant = CLC_SMCR, .type = CLC_PROPOSAL, .flags = CLC_PATH_SMCR };
	struct clc_block b = { .version = CLC_BLOCK_VERSION };
	uint8_t buf[CLC_MAX_LEN];
	struct clc_frame f;
	struct pollfd p;
	ssize_t len, got = 0;
	int fd;

	jam_name(token);
	b.host_id = neg_host_id();
	b.rdv_name = token;
	b.rdv_key = 42;
	clc_block_put(&m.u.r_prop, &b);
	len = clc_encode(&m, buf, sizeof(buf));
	fd = tcp_opted(host, port);
	if (len < 0 || tcpopt_peer_sent(fd) != 1) {
		printf("ERROR the server did not answer the option\n");
		return 1;
	}
	if (send(fd, buf, (size_t)len, MSG_NOSIGNAL) != len) {
		printf("ERROR sending the Proposal: %s\n", strerror(errno));
		return 1;
	}
	/* the Decline: one CLC message, read whole */
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	while (got < CLC_MIN_LEN || clc_frame(buf, (size_t)got, &f) < 0) {
		ssize_t n;

		if (poll(&p, 1, secs * 1000) != 1) {
			printf("ERROR no answer to the Proposal within %d s (server blocked?)\n",
			       secs);
			return 1;
		}
		n = recv(fd, buf + got, sizeof(buf) - (size_t)got, 0);
		if (n <= 0) {
			printf("ERROR connection ended before an answer (%zd, %s)\n", n,
			       strerror(errno));
			return 1;
		}
		got += n;
	}
	if (f.type != CLC_DECLINE) {
		printf("ERROR answer of type %u, not a Decline\n", f.type);
		return 1;
	}
	printf("OK declined %08x\n", clc_frame_decline_diag(buf, (size_t)got));
	return 0;
}

static int run_hold(const char *host, int port, int n, int secs)
{
	for (int i = 0; i < n; i++) {
		int fd = tcp_opted(host, port);

		if (tcpopt_peer_sent(fd) != 1) {
			printf("ERROR the server did not answer the option\n");
			return 1;
		}
	}
	printf("OK held %d\n", n);
	fflush(stdout);
	sleep((unsigned)secs);
	return 0;
}

static int run_late(const char *host, int port, int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	struct pollfd p;
	char buf[16];
	ssize_t got = 0;
	int fd = tcp_opted(host, port);

	if (tcpopt_peer_sent(fd) != 1) {
		printf("ERROR the server did not answer the option\n");
		return 1;
	}
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	if (send(fd, "ping\n", 5, MSG_NOSIGNAL) != 5) {
		printf("ERROR sending: %s\n", strerror(errno));
		return 1;
	}
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	while (got < 5) {
		ssize_t n;

		if (poll(&p, 1, 10000) != 1) {
			printf("ERROR no answer within 10 s\n");
			return 1;
		}
		n = recv(fd, buf + got, sizeof(buf) - (size_t)got, 0);
		if (n <= 0) {
			printf("ERROR connection ended before the answer (%zd, %s)\n", n,
			       n < 0 ? strerror(errno) : "EOF");
			return 1;
		}
		got += n;
	}
	if (got != 5 || memcmp(buf, "pong\n", 5) != 0) {
		printf("ERROR wrong answer (%zd bytes)\n", got);
		return 1;
	}
	printf("OK answered\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && strcmp(argv[1], "jam") == 0)
		return run_jam(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 6 && strcmp(argv[1], "hold") == 0)
		return run_hold(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	if (argc == 5 && strcmp(argv[1], "late") == 0)
		return run_late(argv[2], atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: neg_attack jam HOST PORT SECS | hold HOST PORT N SECS | "
		"late HOST PORT MS\n");
	return 2;
}
