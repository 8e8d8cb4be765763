/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * syscall_check: TCP connections driven only through raw syscall(), as programs that
 * bypass libc's named functions do (libuv closes with syscall(SYS_close)).
 *
 *   syscall_check server PORT ROUNDS [libc-setup]
 *   syscall_check client PORT ROUNDS [libc-setup]
 *
 * Each round is one connection on 127.0.0.1:PORT, made with SYS_socket, SYS_connect
 * and SYS_accept4, or with libc's socket(), connect() and accept4() ("libc-setup", as
 * libuv does: only its close is a raw one). The client sends REQ_BYTES (SYS_write, then SYS_sendto) and waits
 * for one acknowledgement byte; the server reads them (SYS_read), checks that a
 * nonblocking read on a SYS_dup of the socket, made nonblocking with SYS_fcntl, finds
 * nothing (EAGAIN), acknowledges, reads the client's EOF after its SYS_shutdown, moves
 * the socket to a high number with SYS_dup2, closes the other two numbers (SYS_close)
 * and answers REPLY_BYTES over the third (SYS_write, SYS_sendto) before closing it;
 * the client reads (SYS_recvfrom) until EOF and closes. Every byte is checked.
 *
 * After each close both sides wait until the library has let go of the connection: no
 * memfd mapping left in /proc/self/maps and, from the second round on, as many open
 * descriptors as after the first (the first connection starts the library's lazily
 * made parts). Then each prints "idle pid N" and waits for SIGTERM (smcpstat must list
 * nothing meanwhile), and exits 0 through exit(), so the stats file is written.
 * Any failure: a FAIL line and exit status 1.
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

#define REQ_WRITE 65536   /* of the request, sent with SYS_write */
#define REQ_BYTES (REQ_WRITE + 1000)
#define REPLY_WRITE 100000
#define REPLY_BYTES (REPLY_WRITE + 3333)
#define HIGH_FD 200
#define RELEASE_WAIT_MS 5000

static const char *role = "?";
static bool libc_setup;

static void fail(const char *what)
{
	printf("FAIL %s: %s (errno %d %s)\n", role, what, errno, strerror(errno));
	fflush(stdout);
	exit(1);
}

/* Byte i of stream `which` (a request or a reply) of round r. */
static unsigned char pattern(int which, int r, size_t i)
{
	return (unsigned char)(i * 31 + (size_t)r * 7 + (size_t)which * 101 + (i >> 9));
}

static void fill(unsigned char *buf, size_t n, int which, int r)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pattern(which, r, i);
}

static void check_bytes(const unsigned char *buf, size_t n, int which, int r)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pattern(which, r, i)) {
			errno = 0;
			fail("received bytes differ from what was sent");
		}
}

/* Sends buf[0..n) with SYS_write (sendto: SYS_sendto without an address). */
static void send_all(int fd, const unsigned char *buf, size_t n, bool sendto)
{
	size_t done = 0;
	while (done < n) {
		long w = sendto ? syscall(SYS_sendto, fd, buf + done, n - done, 0, NULL, 0)
				: syscall(SYS_write, fd, buf + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			fail(sendto ? "SYS_sendto" : "SYS_write");
		done += (size_t)w;
	}
}

/* Reads exactly n bytes (recvfrom: SYS_recvfrom, else SYS_read). */
static void recv_exact(int fd, unsigned char *buf, size_t n, bool recvfrom)
{
	size_t done = 0;
	while (done < n) {
		long r = recvfrom ? syscall(SYS_recvfrom, fd, buf + done, n - done, 0, NULL, NULL)
				  : syscall(SYS_read, fd, buf + done, n - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			errno = 0;
			fail("early EOF");
		}
		if (r < 0)
			fail(recvfrom ? "SYS_recvfrom" : "SYS_read");
		done += (size_t)r;
	}
}

static void expect_eof(int fd, bool recvfrom)
{
	char c;
	long r = recvfrom ? syscall(SYS_recvfrom, fd, &c, 1, 0, NULL, NULL)
			  : syscall(SYS_read, fd, &c, 1);
	if (r != 0) {
		if (r > 0)
			errno = 0;
		fail("expected EOF");
	}
}

static void raw_close(int fd)
{
	if (syscall(SYS_close, fd) != 0)
		fail("SYS_close");
}

/* ------------------------------------------------------------------ resources */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		fail("opendir /proc/self/fd");
	while ((de = readdir(d)))
		if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
			n++;
	closedir(d);
	return n - 1; /* the directory's own */
}

static int count_memfd_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		fail("fopen /proc/self/maps");
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "/memfd:"))
			n++;
	fclose(f);
	return n;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Waits until no memfd mapping is left and the fd count is back to baseline (or, for
 * the baseline itself, baseline < 0: until it stays the same for STABLE_MS, as the
 * library may close a connection's last descriptors a moment after its mapping);
 * returns the fd count. Fewer fds than the baseline is no leak. */
#define STABLE_MS 100
static int wait_released(int round, int baseline)
{
	int fds = -1, maps = -1, last = -1, same_ms = 0;

	for (int waited = 0; waited <= RELEASE_WAIT_MS; waited += 10) {
		fds = count_fds();
		maps = count_memfd_maps();
		same_ms = fds == last ? same_ms + 10 : 0;
		last = fds;
		if (maps == 0 && baseline >= 0 && fds <= baseline)
			return fds;
		if (maps == 0 && baseline < 0 && same_ms >= STABLE_MS)
			return fds;
		sleep_ms(10);
	}
	printf("FAIL %s: round %d: after SYS_close %d memfd mapping(s) left, %d fds open "
	       "(baseline %d)\n", role, round, maps, fds, baseline);
	fflush(stdout);
	exit(1);
}

/* ------------------------------------------------------------------ the two sides */

static void server_round(int lfd, int r, unsigned char *buf)
{
	int fd = libc_setup ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC)
			    : (int)syscall(SYS_accept4, lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		fail("SYS_accept4");

	recv_exact(fd, buf, REQ_BYTES, false);
	check_bytes(buf, REQ_BYTES, 0, r);

	int d = (int)syscall(SYS_dup, fd);
	if (d < 0)
		fail("SYS_dup");
	long fl = syscall(SYS_fcntl, d, F_GETFL);
	if (fl < 0 || (fl & O_NONBLOCK))
		fail("SYS_fcntl F_GETFL (blocking socket expected)");
	if (syscall(SYS_fcntl, d, F_SETFL, fl | O_NONBLOCK) != 0)
		fail("SYS_fcntl F_SETFL O_NONBLOCK");
	char c;
	errno = 0;
	if (syscall(SYS_read, d, &c, 1) != -1 || errno != EAGAIN)
		fail("nonblocking SYS_read without data: expected EAGAIN");
	if (syscall(SYS_fcntl, d, F_SETFL, fl) != 0)
		fail("SYS_fcntl F_SETFL (back to blocking)");

	send_all(d, (const unsigned char *)"A", 1, false);
	expect_eof(fd, false);

	if (syscall(SYS_dup2, d, HIGH_FD) != HIGH_FD)
		fail("SYS_dup2");
	raw_close(fd);
	raw_close(d);
	fill(buf, REPLY_BYTES, 1, r);
	send_all(HIGH_FD, buf, REPLY_WRITE, false);
	send_all(HIGH_FD, buf + REPLY_WRITE, REPLY_BYTES - REPLY_WRITE, true);
	raw_close(HIGH_FD);
}

static void client_round(const struct sockaddr_in *sa, int r, unsigned char *buf)
{
	int fd = libc_setup ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)
			    : (int)syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fail("socket");
	if ((libc_setup ? connect(fd, (const struct sockaddr *)sa, sizeof(*sa))
			: syscall(SYS_connect, fd, sa, sizeof(*sa))) != 0)
		fail("connect");

	fill(buf, REQ_BYTES, 0, r);
	send_all(fd, buf, REQ_WRITE, false);
	send_all(fd, buf + REQ_WRITE, REQ_BYTES - REQ_WRITE, true);
	unsigned char ack;
	recv_exact(fd, &ack, 1, true);
	if (ack != 'A') {
		errno = 0;
		fail("wrong acknowledgement byte");
	}
	if (syscall(SYS_shutdown, fd, SHUT_WR) != 0)
		fail("SYS_shutdown");

	recv_exact(fd, buf, REPLY_BYTES, true);
	check_bytes(buf, REPLY_BYTES, 1, r);
	expect_eof(fd, true);
	raw_close(fd);
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    (argc == 5 && strcmp(argv[4], "libc-setup"))) {
		fprintf(stderr, "usage: %s server|client PORT ROUNDS [libc-setup]\n", argv[0]);
		return 2;
	}
	libc_setup = argc == 5;
	role = argv[1];
	bool server = strcmp(role, "server") == 0;
	int rounds = atoi(argv[3]);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	unsigned char *buf = malloc(REPLY_BYTES > REQ_BYTES ? REPLY_BYTES : REQ_BYTES);
	if (!buf || rounds < 2)
		fail("setup (ROUNDS must be at least 2)");
	signal(SIGTERM, on_term);
	setvbuf(stdout, NULL, _IOLBF, 0);

	int lfd = -1;
	if (server) {
		int one = 1;
		lfd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
		if (lfd < 0 || syscall(SYS_setsockopt, lfd, SOL_SOCKET, SO_REUSEADDR, &one,
				       sizeof(one)) != 0)
			fail("listening socket");
		if (syscall(SYS_bind, lfd, &sa, sizeof(sa)) != 0 || syscall(SYS_listen, lfd, 16) != 0)
			fail("SYS_bind / SYS_listen");
	}

	int baseline = -1;
	for (int r = 0; r < rounds; r++) {
		if (server)
			server_round(lfd, r, buf);
		else
			client_round(&sa, r, buf);
		int fds = wait_released(r, baseline);
		if (r == 0)
			baseline = fds;
	}
	if (server)
		raw_close(lfd);
	printf("OK %s rounds=%d fds=%d memfd_maps=%d\n", role, rounds, count_fds(),
	       count_memfd_maps());
	printf("idle pid %d\n", (int)getpid());
	for (int i = 0; i < 1200 && !stop; i++)
		sleep_ms(100);
	free(buf);
	exit(stop ? 0 : 1);
}
