/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * tcpopt_check: drives core/negotiate/tcpopt.c against the program that `smc_preload.sh --setup`
 * loaded. For each CASE it makes a listener and a client on loopback, opts in the
 * sockets the case names, connects, exchanges a few bytes both ways (segments after the
 * handshake, for the packet capture of tests/integration/bpf_setup.sh), and checks
 * tcpopt_peer_sent() on the client and on the accepted socket:
 *
 *   none       neither opted in     client -ENOENT  server -ENOENT
 *   listener   listener only        client -ENOENT  server 0
 *   client     client only          client 0        server -ENOENT
 *   both       both                 client 1        server 1
 *   fork       "both" in a child forked after the parent opened the map
 *   closed     "both" after every fd above 2 was closed (the map fd with them)
 *
 * A SYN-ACK carries the option only from an opted-in listener and only when the SYN
 * carried it; the accepted socket inherits the listener's opt-in (and nothing when the
 * listener did not opt in: the program leaves such sockets alone).
 *
 * One line per case:
 *   CASE port=LISTEN_PORT cport=CLIENT_PORT client=V server=V ok|FAIL
 * (V is 1, 0 or -ERRNO_NAME). --no-map expects the map to be absent: every
 * call answers -ENOENT and the connections work all the same.
 * Exit: 0 all as expected, 1 a mismatch, 2 usage, 3 map missing (without --no-map).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/negotiate/tcpopt.h"

struct expect {
	const char *name;
	bool listener_in, client_in;
	int client, server;
};

static const struct expect cases[] = {
	{ "none",     false, false, -ENOENT, -ENOENT },
	{ "listener", true,  false, -ENOENT, 0 },
	{ "client",   false, true,  0,       -ENOENT },
	{ "both",     true,  true,  1,       1 },
};

static bool no_map;
static bool ipv6;

static const char *value_str(int v, char *buf, size_t len)
{
	if (v >= 0)
		snprintf(buf, len, "%d", v);
	else if (v == -ENOENT)
		snprintf(buf, len, "-ENOENT");
	else
		snprintf(buf, len, "-%s", strerror(-v));
	return buf;
}

static int die_errno(const char *what)
{
	fprintf(stderr, "tcpopt_check: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int make_listener(struct sockaddr_storage *addr, socklen_t *len)
{
	int one = 1, fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die_errno("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(addr, 0, sizeof(*addr));
	if (ipv6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)addr;

		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		*len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)addr;

		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*a);
	}
	if (bind(fd, (struct sockaddr *)addr, *len) < 0)
		die_errno("bind");
	if (getsockname(fd, (struct sockaddr *)addr, len) < 0)
		die_errno("getsockname");
	return fd;
}

static int port_of(int fd)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		return -1;
	if (a.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
	return ntohs(((struct sockaddr_in *)&a)->sin_port);
}

/* Opts fd in when asked; with the map there this must succeed, without it the answer
 * must be -ENOENT. */
static bool opt_in(int fd, bool want, const char *who)
{
	int r;

	if (!want)
		return true;
	r = tcpopt_opt_in(fd);
	if (no_map ? r == -ENOENT : r == 0)
		return true;
	fprintf(stderr, "tcpopt_check: opting in the %s: %s\n", who, strerror(-r));
	return false;
}

/* One byte each way and an orderly close, so non-SYN segments are on the wire too. */
static bool exchange(int c, int s)
{
	char b = 0;

	return write(c, "q", 1) == 1 && read(s, &b, 1) == 1 && b == 'q' &&
	       write(s, "r", 1) == 1 && read(c, &b, 1) == 1 && b == 'r' &&
	       shutdown(c, SHUT_WR) == 0 && read(s, &b, 1) == 0;
}

static bool run_case(const struct expect *e, const char *label)
{
	struct sockaddr_storage addr;
	socklen_t len;
	char b1[64], b2[64];
	int l, c, s, vc, vs;
	int want_c = no_map ? -ENOENT : e->client, want_s = no_map ? -ENOENT : e->server;
	bool ok;

	l = make_listener(&addr, &len);
	ok = opt_in(l, e->listener_in, "listener");
	if (listen(l, 4) < 0)
		die_errno("listen");
	c = socket(addr.ss_family, SOCK_STREAM, 0);
	if (c < 0)
		die_errno("socket");
	ok &= opt_in(c, e->client_in, "client");
	if (connect(c, (struct sockaddr *)&addr, len) < 0)
		die_errno("connect");
	s = accept(l, NULL, NULL);
	if (s < 0)
		die_errno("accept");
	vc = tcpopt_peer_sent(c);
	vs = tcpopt_peer_sent(s);
	if (!exchange(c, s)) {
		fprintf(stderr, "tcpopt_check: %s: data exchange failed\n", label);
		ok = false;
	}
	ok &= vc == want_c && vs == want_s;
	printf("%s port=%d cport=%d client=%s server=%s %s\n", label, port_of(l), port_of(c),
	       value_str(vc, b1, sizeof(b1)), value_str(vs, b2, sizeof(b2)), ok ? "ok" : "FAIL");
	fflush(stdout);
	close(s);
	close(c);
	close(l);
	return ok;
}

/* "both" in a child, with the map fd the parent opened. */
static bool run_forked(void)
{
	int status;
	pid_t pid;

	tcpopt_available();
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die_errno("fork");
	if (pid == 0)
		_exit(run_case(&cases[3], "fork") ? 0 : 1);
	if (waitpid(pid, &status, 0) < 0)
		die_errno("waitpid");
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* "both" after the application closed every fd but stdio, the map's among them. */
static bool run_closed(void)
{
	tcpopt_available();
	if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0) {
		for (int fd = 3; fd < 65536; fd++)
			close(fd);
	}
	return run_case(&cases[3], "closed");
}

static bool run_named(const char *name)
{
	if (strcmp(name, "fork") == 0)
		return run_forked();
	if (strcmp(name, "closed") == 0)
		return run_closed();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (strcmp(name, cases[i].name) == 0)
			return run_case(&cases[i], cases[i].name);
	fprintf(stderr, "tcpopt_check: unknown case %s\n", name);
	exit(2);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tcpopt_check [-6] [--no-map] CASE...\n"
		   "CASE: none listener client both fork closed, or all (the first four)\n");
}

int main(int argc, char **argv)
{
	bool ok = true;
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--no-map") == 0)
			no_map = true;
		else if (strcmp(argv[i], "-6") == 0)
			ipv6 = true;
		else if (strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (i == argc) {
		usage(stderr);
		return 2;
	}
	if (tcpopt_available() == no_map) {
		fprintf(stderr, "tcpopt_check: the map is %s\n",
			no_map ? "there (expected none)" : "missing or not usable");
		return no_map ? 1 : 3;
	}
	for (; i < argc; i++) {
		if (strcmp(argv[i], "all") == 0) {
			for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
				ok &= run_case(&cases[k], cases[k].name);
		} else {
			ok &= run_named(argv[i]);
		}
	}
	return ok ? 0 : 1;
}
