/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * msgsize: streaming throughput for one write size and one read size per connection,
 * like qperf tcp_bw, used by bench/run for the message-size sweep (seed 000) and for
 * CPU seconds per GiB moved.
 *
 *   msgsize recv [-p PORT]
 *       Reader. Prints "PORT <n>" on stdout once listening (port 0 picks a free one),
 *       then serves connections one at a time until a "quit" header arrives.
 *   msgsize send -p PORT -s SIZE[,SIZE...] [-r equal|BYTES] [-t MS] [-c MS] [-q]
 *       Writer. For each size: connect, send a header (write size, read size), write
 *       SIZE-byte messages for MS milliseconds, shut down the write side, read back
 *       the reader's byte count and elapsed time, print one line:
 *         RESULT size=<w> read=<r> bytes=<n> secs=<s> MBps=<MB/s, 1e6 bytes>
 *       With -c it measures how far apart CPUs 0 and 1 are (c2c_probe.h, for -c's MS)
 *       right before and right after each size, and prints before its RESULT line
 *         PLACEMENT size=<w> c2c_before=<ns> c2c_after=<ns>
 *       (the probe's threads add to the writer's CPU time: not for -q's CPU figure).
 *       With -q it ends with a quit connection; the reader answers with its CPU time
 *       and exits, and the writer prints
 *         CPU writer_s=<s> reader_s=<s> bytes=<total> s_per_GiB=<s>
 *
 * The reader times from its first byte to EOF so the connection setup (the SMC
 * handshake) is not part of the figure. Every message is written completely (partial
 * writes continue) as an application would; the reader uses read(2) with its read size
 * and takes what it gets, which is the pattern that exposes window-update cliffs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "c2c_probe.h"

#define HDR_MAGIC 0x534d4331u /* "SMC1" */
#define QUIT_SIZE 0

struct hdr {
	uint32_t magic;
	uint32_t write_size; /* QUIT_SIZE = quit */
	uint32_t read_size;
	uint32_t pad;
};

struct result {
	uint64_t bytes;
	uint64_t nsecs;
	uint64_t cpu_nsecs; /* only in the answer to quit */
};

static void die(const char *what)
{
	fprintf(stderr, "msgsize: %s: %s\n", what, strerror(errno));
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

/* Writes all of buf; -1 on error (errno set). */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads exactly len bytes; 0 on success, -1 on error or early EOF. */
static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = read(fd, p, len);

		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int listen_on(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	socklen_t salen = sizeof(sa);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind");
	if (listen(fd, 16) < 0)
		die("listen");
	if (getsockname(fd, (struct sockaddr *)&sa, &salen) < 0)
		die("getsockname");
	printf("PORT %d\n", ntohs(sa.sin_port));
	fflush(stdout);
	return fd;
}

static int connect_to(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	return fd;
}

/* Drains one measured stream with read size h->read_size and answers with the count. */
static void serve_stream(int fd, const struct hdr *h)
{
	size_t rsz = h->read_size ? h->read_size : 1;
	char *buf = malloc(rsz);
	struct result res = { 0 };
	uint64_t start = 0;

	if (!buf)
		die("malloc");
	for (;;) {
		ssize_t n = read(fd, buf, rsz);

		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("read stream");
		}
		if (res.bytes == 0)
			start = now_ns();
		res.bytes += (uint64_t)n;
	}
	res.nsecs = res.bytes ? now_ns() - start : 0;
	if (write_all(fd, &res, sizeof(res)) < 0)
		die("write result");
	free(buf);
}

static int run_reader(int port)
{
	int lfd = listen_on(port);

	for (;;) {
		struct hdr h;
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			die("accept");
		}
		if (read_all(fd, &h, sizeof(h)) < 0)
			die("read header");
		if (h.magic != HDR_MAGIC) {
			fprintf(stderr, "msgsize: bad header magic 0x%x\n", h.magic);
			exit(2);
		}
		if (h.write_size == QUIT_SIZE) {
			struct result res = { .cpu_nsecs = cpu_ns_self() };

			if (write_all(fd, &res, sizeof(res)) < 0)
				die("write quit answer");
			close(fd);
			close(lfd);
			return 0;
		}
		serve_stream(fd, &h);
		close(fd);
	}
}

/* One measured connection: returns the reader's figures. */
static struct result stream_once(int port, size_t wsz, size_t rsz, unsigned ms, char *buf)
{
	struct hdr h = { .magic = HDR_MAGIC, .write_size = (uint32_t)wsz,
			 .read_size = (uint32_t)rsz };
	struct result res;
	/* Check the clock about every KiB so tiny writes are not dominated by it. */
	size_t check_every = wsz >= 1024 ? 1 : 1024 / wsz;
	uint64_t deadline = now_ns() + (uint64_t)ms * 1000000ull;
	int fd = connect_to(port);

	if (write_all(fd, &h, sizeof(h)) < 0)
		die("write header");
	for (size_t i = 0;; i++) {
		if (i % check_every == 0 && now_ns() >= deadline)
			break;
		if (write_all(fd, buf, wsz) < 0)
			die("write stream");
	}
	if (shutdown(fd, SHUT_WR) < 0)
		die("shutdown");
	if (read_all(fd, &res, sizeof(res)) < 0)
		die("read result");
	close(fd);
	return res;
}

static uint64_t quit_reader(int port)
{
	struct hdr h = { .magic = HDR_MAGIC, .write_size = QUIT_SIZE };
	struct result res;
	int fd = connect_to(port);

	if (write_all(fd, &h, sizeof(h)) < 0 || read_all(fd, &res, sizeof(res)) < 0)
		die("quit");
	close(fd);
	return res.cpu_nsecs;
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s || v == 0 || v > (1ull << 30)) {
		fprintf(stderr, "msgsize: bad size '%s'\n", s);
		exit(2);
	}
	return (size_t)v;
}

static int run_writer(int port, char *sizes, const char *readmode, unsigned ms,
		      int probe_ms, bool quit)
{
	bool equal = strcmp(readmode, "equal") == 0;
	size_t fixed_read = equal ? 0 : parse_size(readmode);
	uint64_t total = 0;
	char *save = NULL;
	double c2c_before = probe_ms > 0 ? c2c_probe_ns(probe_ms) : 0;

	for (char *tok = strtok_r(sizes, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t wsz = parse_size(tok);
		size_t rsz = equal ? wsz : fixed_read;
		char *buf = malloc(wsz);
		struct result res;

		if (!buf)
			die("malloc");
		memset(buf, 'x', wsz);
		res = stream_once(port, wsz, rsz, ms, buf);
		free(buf);
		total += res.bytes;
		if (probe_ms > 0) {
			double c2c_after = c2c_probe_ns(probe_ms);

			printf("PLACEMENT size=%zu c2c_before=%.0f c2c_after=%.0f\n", wsz,
			       c2c_before, c2c_after);
			c2c_before = c2c_after;
		}
		printf("RESULT size=%zu read=%zu bytes=%" PRIu64 " secs=%.6f MBps=%.2f\n", wsz, rsz,
		       res.bytes, res.nsecs / 1e9,
		       res.nsecs ? (double)res.bytes / (res.nsecs / 1e9) / 1e6 : 0.0);
		fflush(stdout);
	}
	if (quit) {
		uint64_t reader_cpu = quit_reader(port);
		uint64_t writer_cpu = cpu_ns_self();
		double gib = (double)total / (1024.0 * 1024.0 * 1024.0);

		printf("CPU writer_s=%.6f reader_s=%.6f bytes=%" PRIu64 " s_per_GiB=%.6f\n",
		       writer_cpu / 1e9, reader_cpu / 1e9, total,
		       gib > 0 ? (writer_cpu + reader_cpu) / 1e9 / gib : 0.0);
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: msgsize recv [-p PORT]\n"
			"       msgsize send -p PORT -s SIZE[,SIZE..] [-r equal|BYTES] [-t MS] [-c MS]\n"
			"                    [-q]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int port = 0, opt;
	char *sizes = NULL;
	const char *readmode = "equal";
	unsigned ms = 500;
	int probe_ms = 0;
	bool quit = false;

	if (argc < 2)
		usage();
	optind = 2;
	while ((opt = getopt(argc, argv, "p:s:r:t:c:q")) != -1) {
		switch (opt) {
		case 'p': port = atoi(optarg); break;
		case 's': sizes = optarg; break;
		case 'r': readmode = optarg; break;
		case 't': ms = (unsigned)atoi(optarg); break;
		case 'c': probe_ms = atoi(optarg); break;
		case 'q': quit = true; break;
		default: usage();
		}
	}
	if (strcmp(argv[1], "recv") == 0)
		return run_reader(port);
	if (strcmp(argv[1], "send") == 0 && port > 0 && sizes)
		return run_writer(port, sizes, readmode, ms, probe_ms, quit);
	usage();
	return 2;
}
