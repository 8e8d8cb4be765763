/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * closeall: a program that closes every descriptor it has after its first connection,
 * as daemons and closefrom() do, and then goes on making connections.
 *
 *   closeall server PORT ROUNDS [close]
 *   closeall client PORT ROUNDS MODE
 *
 * Each round is one connection on 127.0.0.1:PORT: the client sends REQ_BYTES, the
 * server reads them all and answers REPLY_BYTES, the client reads them and closes,
 * the server reads its EOF and closes. Every byte is checked.
 *
 * After the first round the client closes all its descriptors from 3 up, by MODE:
 *   range    close_range(3, ~0U, 0)
 *   sysrange syscall(SYS_close_range, 3, ~0U, 0)
 *   proc     close() of every number listed in /proc/self/fd (each must return 0:
 *            without a preloaded library each of them is the program's and open)
 *   loop     close() of 3..1023, errors ignored
 *   from     closefrom(3) (glibc makes the close_range system call itself)
 * and checks that its own descriptors (a pipe made before) are closed. With "close",
 * the server closes every descriptor above its listening socket with close_range
 * after its first round. A later round that takes longer than ROUND_LIMIT_S (a handshake that waited
 * for a library thread whose descriptors were gone took 30 s) fails.
 *
 * Exit status 0 with a line "OK ROLE rounds=N"; any failure: a FAIL line and 1.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define REQ_BYTES (100000 + 17)
#define REPLY_BYTES (150000 + 333)
#define ROUND_LIMIT_S 5.0

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static const char *role;

static void fail(const char *what)
{
	printf("FAIL %s: %s (errno %s)\n", role, what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static unsigned char pattern(size_t i, unsigned salt)
{
	return (unsigned char)((i * 131u + salt) & 0xff);
}

static void send_all(int fd, size_t n, unsigned salt)
{
	unsigned char buf[8192];

	for (size_t off = 0; off < n;) {
		size_t chunk = n - off < sizeof(buf) ? n - off : sizeof(buf);

		for (size_t i = 0; i < chunk; i++)
			buf[i] = pattern(off + i, salt);
		ssize_t w = write(fd, buf, chunk);

		if (w <= 0)
			fail("write");
		off += (size_t)w;
	}
}

static void recv_all(int fd, size_t n, unsigned salt)
{
	unsigned char buf[8192];

	for (size_t off = 0; off < n;) {
		size_t want = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ssize_t r = read(fd, buf, want);

		if (r < 0)
			fail("read");
		if (r == 0) {
			errno = 0;
			fail("early EOF");
		}
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern(off + (size_t)i, salt)) {
				errno = 0;
				fail("payload mismatch");
			}
		off += (size_t)r;
	}
}

static void expect_eof(int fd)
{
	char c;
	ssize_t r = read(fd, &c, 1);

	if (r != 0) {
		errno = r < 0 ? errno : 0;
		fail("no EOF after the payload");
	}
}

static void close_all(const char *mode)
{
	if (!strcmp(mode, "range")) {
		if (close_range(3, ~0U, 0) < 0)
			fail("close_range");
	} else if (!strcmp(mode, "sysrange")) {
		if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
			fail("syscall(SYS_close_range)");
	} else if (!strcmp(mode, "proc")) {
		int fds[4096], n = 0;
		DIR *d = opendir("/proc/self/fd");
		struct dirent *de;

		if (!d)
			fail("opendir /proc/self/fd");
		while ((de = readdir(d)) && n < (int)(sizeof(fds) / sizeof(fds[0]))) {
			int fd = atoi(de->d_name);

			if (de->d_name[0] != '.' && fd > 2 && fd != dirfd(d))
				fds[n++] = fd;
		}
		closedir(d);
		for (int i = 0; i < n; i++)
			if (close(fds[i]) != 0)
				fail("close() of a number /proc/self/fd listed");
	} else if (!strcmp(mode, "loop")) {
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
	} else if (!strcmp(mode, "from")) {
		closefrom(3);
	} else {
		errno = EINVAL;
		fail("unknown mode");
	}
}

static int listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		fail("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0)
		fail("bind/listen");
	return fd;
}

static int connect_to(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		fail("socket");
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		fail("connect");
	return fd;
}

static void server(int port, int rounds, bool close_after_first)
{
	int l = listen_on(port);

	printf("listening\n");
	fflush(stdout);
	for (int r = 1; r <= rounds; r++) {
		int fd = accept(l, NULL, NULL);

		if (fd < 0)
			fail("accept");
		recv_all(fd, REQ_BYTES, (unsigned)r);
		send_all(fd, REPLY_BYTES, (unsigned)r + 1000);
		expect_eof(fd);
		if (close(fd) < 0)
			fail("close");
		if (r == 1 && close_after_first && close_range((unsigned)l + 1, ~0U, 0) < 0)
			fail("close_range above the listener");
	}
	close(l);
	printf("OK server rounds=%d\n", rounds);
}

static void client(int port, int rounds, const char *mode)
{
	for (int r = 1; r <= rounds; r++) {
		double t0 = now_s(), took;
		int fd = connect_to(port);

		send_all(fd, REQ_BYTES, (unsigned)r);
		recv_all(fd, REPLY_BYTES, (unsigned)r + 1000);
		shutdown(fd, SHUT_WR);
		expect_eof(fd);
		if (close(fd) < 0)
			fail("close");
		took = now_s() - t0;
		printf("round %d: %.3f s\n", r, took);
		fflush(stdout);
		if (r > 1 && took > ROUND_LIMIT_S) {
			errno = ETIMEDOUT;
			fail("a connection after closing everything stalled");
		}
		if (r == 1) {
			int p[2];

			if (pipe(p) < 0)
				fail("pipe");
			close_all(mode);
			if (fcntl(p[0], F_GETFD) >= 0 || fcntl(p[1], F_GETFD) >= 0) {
				errno = 0;
				fail("the program's own pipe survived closing everything");
			}
			printf("closed everything (%s)\n", mode);
		}
	}
	printf("OK client rounds=%d\n", rounds);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: closeall server PORT ROUNDS [close] | client PORT ROUNDS MODE\n");
		return 2;
	}
	role = argv[1];
	signal(SIGPIPE, SIG_IGN);
	alarm(120);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(role, "server"))
		server(atoi(argv[2]), atoi(argv[3]), argc >= 5 && !strcmp(argv[4], "close"));
	else if (argc >= 5 && !strcmp(role, "client"))
		client(atoi(argv[2]), atoi(argv[3]), argv[4]);
	else
		return 2;
	return 0;
}
