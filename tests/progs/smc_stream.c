/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * smc_stream: data-integrity test over one TCP (or SMC) connection.
 *
 *   smc_stream server PORT [--bind ADDR] [--mode block|epoll] [--et] [--count K]
 *                     [--defer-accept SECS]
 *   smc_stream client HOST PORT --bytes N [--mode block|epoll] [--et] [--seed S]
 *
 * Both directions run at once: each side sends N bytes and receives N bytes. Write and
 * read sizes are random, log-uniform from 1 byte to --max-io (default 4 MiB). The payload
 * is a position-addressed pseudo-random stream (splitmix64 of the 8-byte word index), so
 * the receiver regenerates and checks every byte whatever the segmentation was, and
 * reports the offset of the first wrong byte. After its N bytes a side shuts down its
 * write half; the receiver requires EOF exactly at N.
 *
 * Modes: "block" uses a reader and a writer thread on the same blocking socket, cycling
 * through read/recv/readv/recv(MSG_WAITALL) and write/send/writev so every entry point is
 * exercised. "epoll" uses one thread, a nonblocking socket and epoll with
 * EPOLLIN|EPOLLOUT, level-triggered (one call per event, relying on the level being
 * re-reported) or, with --et, edge-triggered (drain until EAGAIN).
 *
 * The client sends a 24-byte header first (magic, N, seed) so the server needs no
 * arguments beyond its port. Client->server data uses the seed, server->client uses the
 * seed xor a constant, so a reflected stream cannot pass for the right one.
 *
 * Output: "OK bytes_sent=.. bytes_received=.." and exit 0, or one line
 * "ERROR t=<CLOCK_REALTIME seconds> ..." (the time the failure was seen, so a test can
 * measure how fast a peer's death surfaced) and exit 1. The server prints one line per
 * connection and exits non-zero if any connection failed.
 *
 * --defer-accept SECS: the listener gets TCP_DEFER_ACCEPT, SECS before listen() and
 * 2 * SECS after it (Apache's order); the server prints the values getsockopt reports
 * right after each, "DEFER_ACCEPT listen=A set=B", for a test to compare with a run
 * without the library (the kernel rounds them to its SYN-ACK retransmission times). A
 * client takes the option and ignores it, so one set of arguments serves both sides.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the build passes -D_GNU_SOURCE; this is for standalone builds */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR_MAGIC "SMCSTRM1"
#define HDR_LEN 24
#define REVERSE_SEED_XOR 0xA5A5F00DCAFEBEEFull
#define DEFAULT_MAX_IO (4u << 20)

enum io_mode { MODE_BLOCK, MODE_EPOLL };

struct options {
	bool server;
	const char *host;
	const char *bind_addr;
	const char *port;
	uint64_t bytes;
	uint64_t seed;
	size_t max_io;
	enum io_mode mode;
	bool edge_triggered;
	unsigned count;
	int defer_accept; /* seconds, 0: not set */
};

/* ------------------------------------------------------------------ payload pattern */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* The 8 bytes of stream word w, least significant byte first (endian-independent). */
static uint64_t pattern_word(uint64_t seed, uint64_t w)
{
	return splitmix64(seed ^ (w * 0xD6E8FEB86659FD93ull));
}

static unsigned char pattern_byte(uint64_t seed, uint64_t off)
{
	return (unsigned char)(pattern_word(seed, off >> 3) >> (8 * (off & 7)));
}

static void store_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t load_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Writes stream bytes [off, off+len) of `seed` into buf. */
static void pattern_fill(uint64_t seed, uint64_t off, unsigned char *buf, size_t len)
{
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		buf[i] = pattern_byte(seed, off + i);
	for (; i + 8 <= len; i += 8)
		store_le64(buf + i, pattern_word(seed, (off + i) >> 3));
	for (; i < len; i++)
		buf[i] = pattern_byte(seed, off + i);
}

/* Index of the first byte of buf that differs from stream bytes [off, off+len), or -1. */
static ssize_t pattern_check(uint64_t seed, uint64_t off, const unsigned char *buf, size_t len)
{
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		if (buf[i] != pattern_byte(seed, off + i))
			return (ssize_t)i;
	for (; i + 8 <= len; i += 8)
		if (load_le64(buf + i) != pattern_word(seed, (off + i) >> 3))
			break;
	for (; i < len; i++)
		if (buf[i] != pattern_byte(seed, off + i))
			return (ssize_t)i;
	return -1;
}

/* ------------------------------------------------------------------ random sizes */

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
	r->s += 0x9E3779B97F4A7C15ull;
	return splitmix64(r->s);
}

/* Log-uniform in [1, max]: a random power-of-two bucket, then uniform inside it. */
static size_t random_io_size(struct rng *r, size_t max)
{
	unsigned buckets = 0;

	while (buckets < 63 && (2ull << buckets) <= max)
		buckets++;
	uint64_t v = rng_next(r);
	unsigned k = (unsigned)(v % (buckets + 1));
	uint64_t lo = 1ull << k;
	uint64_t size = lo + (rng_next(r) % lo);

	return size > max ? max : (size_t)size;
}

/* ------------------------------------------------------------------ reporting */

static double now_realtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One connection's shared state; failures are reported once (the first one is the cause). */
struct conn {
	int fd;
	const char *side;
	unsigned index;
	uint64_t bytes;
	uint64_t send_seed;
	uint64_t recv_seed;
	size_t max_io;
	atomic_bool failed;
	uint64_t sent;
	uint64_t received;
	unsigned char *wbuf;
	unsigned char *rbuf;
};

static void conn_fail(struct conn *c, const char *fmt, ...)
{
	if (atomic_exchange(&c->failed, true))
		return;
	double t = now_realtime();
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	printf("ERROR t=%.6f %s conn=%u: %s\n", t, c->side, c->index, msg);
	fflush(stdout);
	/* Unblocks the other thread of this connection, which may sit in read or write. */
	shutdown(c->fd, SHUT_RDWR);
}

/* ------------------------------------------------------------------ blocking mode */

static ssize_t write_some(int fd, const unsigned char *p, size_t len, unsigned turn)
{
	struct iovec iov[2];
	size_t half = len / 2;

	switch (turn % 3) {
	case 0:
		return write(fd, p, len);
	case 1:
		return send(fd, p, len, MSG_NOSIGNAL);
	default:
		iov[0] = (struct iovec){ (void *)p, half };
		iov[1] = (struct iovec){ (void *)(p + half), len - half };
		return writev(fd, iov, 2);
	}
}

static ssize_t read_some(int fd, unsigned char *p, size_t len, unsigned turn)
{
	struct iovec iov[2];
	size_t half = len / 2;

	switch (turn % 4) {
	case 0:
		return read(fd, p, len);
	case 1:
		return recv(fd, p, len, 0);
	case 2:
		if (half == 0)
			return read(fd, p, len);
		iov[0] = (struct iovec){ p, half };
		iov[1] = (struct iovec){ p + half, len - half };
		return readv(fd, iov, 2);
	default:
		/* Never asks beyond the end of the stream, so it cannot wait for bytes that
		 * will not come. */
		return recv(fd, p, len, MSG_WAITALL);
	}
}

static void *block_writer(void *arg)
{
	struct conn *c = arg;
	struct rng r = { c->send_seed ^ 0x1111 };
	unsigned turn = 0;

	while (c->sent < c->bytes && !atomic_load(&c->failed)) {
		size_t len = random_io_size(&r, c->max_io);

		if (len > c->bytes - c->sent)
			len = (size_t)(c->bytes - c->sent);
		pattern_fill(c->send_seed, c->sent, c->wbuf, len);
		size_t done = 0;
		while (done < len) {
			ssize_t n = write_some(c->fd, c->wbuf + done, len - done, turn++);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				conn_fail(c, "write failed after %" PRIu64 " of %" PRIu64 " bytes: %s",
					  c->sent + done, c->bytes, n < 0 ? strerror(errno) : "returned 0");
				return NULL;
			}
			done += (size_t)n;
		}
		c->sent += len;
	}
	if (!atomic_load(&c->failed) && shutdown(c->fd, SHUT_WR) < 0)
		conn_fail(c, "shutdown(SHUT_WR): %s", strerror(errno));
	return NULL;
}

/* Checks n freshly received bytes at c->received; false (and reported) on mismatch. */
static bool check_received(struct conn *c, const unsigned char *buf, size_t n)
{
	ssize_t bad = pattern_check(c->recv_seed, c->received, buf, n);

	if (bad < 0)
		return true;
	uint64_t off = c->received + (uint64_t)bad;
	conn_fail(c, "data mismatch at stream offset %" PRIu64 ": got 0x%02x, expected 0x%02x",
		  off, buf[bad], pattern_byte(c->recv_seed, off));
	return false;
}

static void *block_reader(void *arg)
{
	struct conn *c = arg;
	struct rng r = { c->recv_seed ^ 0x2222 };
	unsigned turn = 0;

	while (c->received < c->bytes && !atomic_load(&c->failed)) {
		size_t len = random_io_size(&r, c->max_io);

		if (len > c->bytes - c->received)
			len = (size_t)(c->bytes - c->received);
		ssize_t n = read_some(c->fd, c->rbuf, len, turn++);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			conn_fail(c, "read failed after %" PRIu64 " of %" PRIu64 " bytes: %s",
				  c->received, c->bytes, strerror(errno));
			return NULL;
		}
		if (n == 0) {
			conn_fail(c, "unexpected EOF after %" PRIu64 " of %" PRIu64 " bytes",
				  c->received, c->bytes);
			return NULL;
		}
		if (!check_received(c, c->rbuf, (size_t)n))
			return NULL;
		c->received += (uint64_t)n;
	}
	if (atomic_load(&c->failed))
		return NULL;
	/* The peer shut down its write half after exactly N bytes: the next read is EOF. */
	for (;;) {
		ssize_t n = read(c->fd, c->rbuf, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			conn_fail(c, "read at end of stream: %s (expected EOF)", strerror(errno));
		else if (n > 0)
			conn_fail(c, "extra data after the expected %" PRIu64 " bytes", c->bytes);
		break;
	}
	return NULL;
}

static void run_block(struct conn *c)
{
	pthread_t reader, writer;
	int err;

	err = pthread_create(&reader, NULL, block_reader, c);
	if (err) {
		conn_fail(c, "pthread_create: %s", strerror(err));
		return;
	}
	err = pthread_create(&writer, NULL, block_writer, c);
	if (err) {
		conn_fail(c, "pthread_create: %s", strerror(err));
		pthread_join(reader, NULL);
		return;
	}
	pthread_join(writer, NULL);
	pthread_join(reader, NULL);
}

/* ------------------------------------------------------------------ epoll mode */

struct epoll_state {
	struct rng wr, rr;
	size_t chunk_len;   /* current write chunk: stream bytes [sent, sent+chunk_len) */
	size_t chunk_done;  /* of which already written */
	bool write_done;    /* all N sent and SHUT_WR issued */
	bool eof_seen;
};

/* One nonblocking write step. Returns 1 progress, 0 would block, -1 failed. */
static int epoll_write_step(struct conn *c, struct epoll_state *s)
{
	if (s->chunk_done == s->chunk_len) {
		c->sent += s->chunk_len;
		s->chunk_len = s->chunk_done = 0;
		if (c->sent == c->bytes) {
			if (shutdown(c->fd, SHUT_WR) < 0) {
				conn_fail(c, "shutdown(SHUT_WR): %s", strerror(errno));
				return -1;
			}
			s->write_done = true;
			return 0;
		}
		size_t len = random_io_size(&s->wr, c->max_io);
		if (len > c->bytes - c->sent)
			len = (size_t)(c->bytes - c->sent);
		pattern_fill(c->send_seed, c->sent, c->wbuf, len);
		s->chunk_len = len;
	}
	ssize_t n = send(c->fd, c->wbuf + s->chunk_done, s->chunk_len - s->chunk_done, MSG_NOSIGNAL);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n <= 0) {
		conn_fail(c, "send failed after %" PRIu64 " of %" PRIu64 " bytes: %s",
			  c->sent + s->chunk_done, c->bytes, n < 0 ? strerror(errno) : "returned 0");
		return -1;
	}
	s->chunk_done += (size_t)n;
	return 1;
}

/* One nonblocking read step. Returns 1 progress, 0 would block, -1 failed. */
static int epoll_read_step(struct conn *c, struct epoll_state *s)
{
	size_t len = 1; /* past N only EOF may come: ask for one byte to catch extra data */

	if (c->received < c->bytes) {
		len = random_io_size(&s->rr, c->max_io);
		if (len > c->bytes - c->received)
			len = (size_t)(c->bytes - c->received);
	}
	ssize_t n = read(c->fd, c->rbuf, len);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n < 0) {
		conn_fail(c, "read failed after %" PRIu64 " of %" PRIu64 " bytes: %s",
			  c->received, c->bytes, strerror(errno));
		return -1;
	}
	if (n == 0) {
		if (c->received < c->bytes) {
			conn_fail(c, "unexpected EOF after %" PRIu64 " of %" PRIu64 " bytes",
				  c->received, c->bytes);
			return -1;
		}
		s->eof_seen = true;
		return 0;
	}
	if (c->received == c->bytes) {
		conn_fail(c, "extra data after the expected %" PRIu64 " bytes", c->bytes);
		return -1;
	}
	if (!check_received(c, c->rbuf, (size_t)n))
		return -1;
	c->received += (uint64_t)n;
	return 1;
}

/* Level-triggered interest update (errors and hangups are always reported). */
static int epoll_update_interest(struct conn *c, int epfd, bool want_in, bool want_out)
{
	struct epoll_event ev = { .events = 0, .data.fd = c->fd };

	if (want_in)
		ev.events |= EPOLLIN | EPOLLRDHUP;
	if (want_out)
		ev.events |= EPOLLOUT;
	return epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void run_epoll(struct conn *c, bool et)
{
	struct epoll_state s = { .wr = { c->send_seed ^ 0x3333 }, .rr = { c->recv_seed ^ 0x4444 } };
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | (et ? EPOLLET : 0),
				  .data.fd = c->fd };
	bool want_in = true, want_out = true;

	if (epfd < 0 || fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
		conn_fail(c, "epoll setup: %s", strerror(errno));
		goto out;
	}
	while (!(s.write_done && s.eof_seen) && !atomic_load(&c->failed)) {
		struct epoll_event got;
		int n = epoll_wait(epfd, &got, 1, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			conn_fail(c, "epoll_wait: %s", strerror(errno));
			break;
		}
		if (n == 0)
			continue;
		if (got.events & EPOLLERR) {
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
			conn_fail(c, "EPOLLERR after %" PRIu64 " sent, %" PRIu64 " received: %s",
				  c->sent + s.chunk_done, c->received,
				  soerr ? strerror(soerr) : "no SO_ERROR");
			break;
		}
		if (got.events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
			int r;
			/* Level-triggered: one read, the level brings us back. Edge: drain. */
			do
				r = epoll_read_step(c, &s);
			while (et && r > 0);
			if (r < 0)
				break;
		}
		if ((got.events & EPOLLOUT) && !s.write_done) {
			int w;
			do
				w = epoll_write_step(c, &s);
			while (et && w > 0);
			if (w < 0)
				break;
		}
		/* Level-triggered EPOLLOUT after the last byte, or EPOLLIN after EOF, would
		 * spin: drop what is finished. Edge-triggered needs no change. */
		if (!et && ((s.write_done && want_out) || (s.eof_seen && want_in))) {
			want_out = !s.write_done;
			want_in = !s.eof_seen;
			if (epoll_update_interest(c, epfd, want_in, want_out) < 0) {
				conn_fail(c, "epoll_ctl(MOD): %s", strerror(errno));
				break;
			}
		}
	}
out:
	if (epfd >= 0)
		close(epfd);
}

/* ------------------------------------------------------------------ one connection */

static bool run_conn(struct conn *c, const struct options *o)
{
	double t0 = now_monotonic();

	c->wbuf = malloc(c->max_io);
	c->rbuf = malloc(c->max_io);
	if (!c->wbuf || !c->rbuf) {
		conn_fail(c, "out of memory");
	} else if (o->mode == MODE_BLOCK) {
		run_block(c);
	} else {
		run_epoll(c, o->edge_triggered);
	}
	free(c->wbuf);
	free(c->rbuf);
	if (atomic_load(&c->failed))
		return false;
	double secs = now_monotonic() - t0;
	printf("OK %s conn=%u bytes_sent=%" PRIu64 " bytes_received=%" PRIu64
	       " seconds=%.3f MiB/s_each_way=%.1f\n",
	       c->side, c->index, c->sent, c->received, secs,
	       secs > 0 ? (double)c->bytes / (1 << 20) / secs : 0.0);
	fflush(stdout);
	return true;
}

static bool read_full(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(fd, (char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

static bool write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

/* ------------------------------------------------------------------ server and client */

static struct addrinfo *resolve(const char *host, const char *port, bool passive)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = passive ? AI_PASSIVE : 0 };
	struct addrinfo *res = NULL;
	int err = getaddrinfo(host, port, &hints, &res);

	if (err) {
		fprintf(stderr, "smc_stream: %s:%s: %s\n", host ? host : "*", port, gai_strerror(err));
		return NULL;
	}
	return res;
}

/* Listening socket fd: prints its TCP_DEFER_ACCEPT, sets it to `secs`, prints it again. */
static bool report_defer_accept(int fd, int secs)
{
	int at_listen = -1, now = -1;
	socklen_t len = sizeof(at_listen);

	if (getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &at_listen, &len) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs)) < 0)
		return false;
	len = sizeof(now);
	if (getsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &now, &len) < 0)
		return false;
	printf("DEFER_ACCEPT listen=%d set=%d\n", at_listen, now);
	return true;
}

static int listen_on(const struct options *o)
{
	struct addrinfo *ai = resolve(o->bind_addr, o->port, true);
	int one = 1;

	if (!ai)
		return -1;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int secs = o->defer_accept, after = 2 * o->defer_accept;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (secs && setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs)) < 0) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0 ||
	    (secs && !report_defer_accept(fd, after))) {
		fprintf(stderr, "smc_stream: listen on %s:%s: %s\n",
			o->bind_addr ? o->bind_addr : "*", o->port, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static bool serve_one(int lfd, unsigned index, const struct options *o)
{
	struct conn c = { .side = "server", .index = index, .max_io = o->max_io };
	unsigned char hdr[HDR_LEN];

	c.fd = accept(lfd, NULL, NULL);
	if (c.fd < 0) {
		conn_fail(&c, "accept: %s", strerror(errno));
		return false;
	}
	if (!read_full(c.fd, hdr, sizeof(hdr)) || memcmp(hdr, HDR_MAGIC, 8) != 0) {
		conn_fail(&c, "bad or missing header from client");
		close(c.fd);
		return false;
	}
	c.bytes = load_le64(hdr + 8);
	c.recv_seed = load_le64(hdr + 16);
	c.send_seed = c.recv_seed ^ REVERSE_SEED_XOR;
	bool ok = run_conn(&c, o);
	close(c.fd);
	return ok;
}

static int run_server(const struct options *o)
{
	int lfd = listen_on(o);
	unsigned failures = 0;

	if (lfd < 0)
		return 1;
	for (unsigned i = 0; i < o->count; i++)
		if (!serve_one(lfd, i, o))
			failures++;
	close(lfd);
	if (failures)
		printf("FAILED %u of %u connections\n", failures, o->count);
	return failures ? 1 : 0;
}

static int connect_to(const struct options *o)
{
	struct addrinfo *ai = resolve(o->host, o->port, false);
	int fd = -1;

	if (!ai)
		return -1;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		fprintf(stderr, "smc_stream: connect %s:%s: %s\n", o->host, o->port, strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static int run_client(const struct options *o)
{
	struct conn c = { .side = "client", .bytes = o->bytes, .max_io = o->max_io,
			  .send_seed = o->seed, .recv_seed = o->seed ^ REVERSE_SEED_XOR };
	unsigned char hdr[HDR_LEN];

	c.fd = connect_to(o);
	if (c.fd < 0)
		return 1;
	memcpy(hdr, HDR_MAGIC, 8);
	store_le64(hdr + 8, o->bytes);
	store_le64(hdr + 16, o->seed);
	if (!write_full(c.fd, hdr, sizeof(hdr))) {
		conn_fail(&c, "sending header: %s", strerror(errno));
		close(c.fd);
		return 1;
	}
	bool ok = run_conn(&c, o);
	close(c.fd);
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------------ arguments */

static void usage(void)
{
	fprintf(stderr,
		"usage: smc_stream server PORT [--bind ADDR] [--mode block|epoll] [--et] [--count K]\n"
		"                         [--defer-accept SECS]\n"
		"       smc_stream client HOST PORT --bytes N [--mode block|epoll] [--et] [--seed S]\n"
		"       common: [--max-io SIZE] (default 4m); sizes accept k, m, g suffixes\n");
	exit(2);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	unsigned shift = 0;

	if (errno || end == s || *s == '-')
		usage();
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		usage();
	return (uint64_t)v << shift;
}

static void parse_args(int argc, char **argv, struct options *o)
{
	int i = 2;

	if (argc < 3)
		usage();
	if (strcmp(argv[1], "server") == 0) {
		o->server = true;
		o->port = argv[i++];
	} else if (strcmp(argv[1], "client") == 0) {
		if (argc < 4)
			usage();
		o->host = argv[i++];
		o->port = argv[i++];
	} else {
		usage();
	}
	for (; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--et") == 0) {
			o->edge_triggered = true;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (strcmp(a, "--bytes") == 0)
			o->bytes = parse_size(v);
		else if (strcmp(a, "--seed") == 0)
			o->seed = parse_size(v);
		else if (strcmp(a, "--max-io") == 0)
			o->max_io = (size_t)parse_size(v);
		else if (strcmp(a, "--count") == 0)
			o->count = (unsigned)parse_size(v);
		else if (strcmp(a, "--bind") == 0)
			o->bind_addr = v;
		else if (strcmp(a, "--defer-accept") == 0)
			o->defer_accept = (int)parse_size(v);
		else if (strcmp(a, "--mode") == 0 && strcmp(v, "block") == 0)
			o->mode = MODE_BLOCK;
		else if (strcmp(a, "--mode") == 0 && strcmp(v, "epoll") == 0)
			o->mode = MODE_EPOLL;
		else
			usage();
	}
	if (o->max_io == 0 || o->count == 0 || (!o->server && o->bytes == 0) ||
	    o->defer_accept < 0 || o->defer_accept > 3600)
		usage();
	if (o->edge_triggered && o->mode != MODE_EPOLL)
		usage();
}

int main(int argc, char **argv)
{
	struct options o = { .max_io = DEFAULT_MAX_IO, .count = 1, .seed = 1, .mode = MODE_BLOCK };

	parse_args(argc, argv, &o);
	/* A dead peer must show up as EPIPE in the output, not kill us silently. */
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return o.server ? run_server(&o) : run_client(&o);
}
