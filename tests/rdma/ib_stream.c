/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * ib_stream: the SMC-R data path on real verbs, between two processes.
 *
 *   ib_stream -s PORT [options]          server
 *   ib_stream -c HOST:PORT [options]     client (same options)
 *     -n CONNS   connections sharing the one link (default 4)
 *     -b BYTES   bytes per connection and direction (default 8M; K/M suffixes)
 *     -r BYTES   RMB size per connection (default 64K; power of two >= 16K)
 *     -q DEPTH   receive queue depth = initial credits (default 16)
 *     -m BYTES   largest write/read chunk (default: the RMB size)
 *     -S SEED    data seed (default 1)
 *     -C         constant chunk size (-m) instead of random sizes: bulk throughput
 *     -F         client forges bad CDCs first: one with an unknown token and one with
 *                a producer cursor beyond connection 0's ring. The server must drop the
 *                first, abort connection 0 only, and every other connection must
 *                still deliver its data intact.
 *     -W MS      server: wait MS after the first Confirm before bringing its QP up. The
 *                client streams at once (use -n 1): its sends must wait for the link
 *                confirmation (counted as held), none may hit the unready QP.
 *     -I MS      link idle timeout; after the streams both sides close every connection
 *                and wait until the registry released the link (after at least MS) and
 *                closed the device.
 *     -K busy|idle  this side dies by SIGKILL: "busy" once half of connection 0's bytes
 *                arrived, "idle" after the streams ended (connections left open).
 *     -E busy|idle  the peer dies so: every connection here must end aborted (not hang),
 *                with the data before it intact; prints the time from the streams' end
 *                (idle) to the last abort.
 *
 * Connections are made one after the other through the link-group registry
 * (core/ib/ib_lgr.c), as the library's handshake will: the client sends its SMC-R identity
 * (peer id, GID), the server finds or creates a link and answers with an SMC-R CLC Accept
 * (first contact for the first connection only: every later one must share the link),
 * the client answers with a Confirm; both carry the initial receive credits after them.
 * Then every connection streams in both directions at once:
 * a writer thread copies random-size chunks of a seeded pseudo-random stream into the
 * send mirrors (RDMA WRITE + CDC), a reader thread reads random-size chunks from the
 * RMBs and compares every byte with the stream it expects, and a progress thread
 * handles completions through the completion channel fd. At the end both sides swap
 * their per-connection byte counts and checksums over TCP and compare.
 *
 * Exit 0 only when: all bytes arrived and matched, the checksums agree, the link
 * counted zero RNR and zero failed completions, no CDC was malformed or unknown
 * (except the forged ones with -F), and the bytes written by RDMA equal the bytes sent.
 * One result line "RESULT ..." gives bytes, seconds and MB/s.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/stats.h"
#include "core/ib/ib_lgr.h"

#define MAX_CONNS 64
#define STALL_S 60

struct opts {
	bool server;
	const char *host;
	const char *port;
	int nconns;
	uint64_t bytes;
	uint32_t rmb;
	uint8_t rq_depth;
	uint32_t max_chunk;
	uint64_t seed;
	bool forge;
	bool constant;
	unsigned wait_ms;   /* -W */
	unsigned idle_ms;   /* -I */
	const char *die;    /* -K */
	const char *expect_death; /* -E */
};

struct sconn {
	struct ib_conn *ic;
	int idx;
	uint64_t sent, recvd;
	uint64_t tx_sum1, tx_sum2, rx_sum1, rx_sum2;
	uint64_t tx_rng, rx_rng;
	bool tx_done, rx_done, blocked_said, aborted;
};

/* A thread's wakeup: rung by the notify callback only while the thread sleeps. */
struct bell {
	int fd;
	int sleeping;
};

static struct opts o = { .nconns = 4, .bytes = 8u << 20, .rmb = 64u << 10, .rq_depth = 16,
			 .seed = 1 };
static struct sconn conns[MAX_CONNS];
static struct ib_link *link_;
static struct bell rx_bell = { -1, 0 }, tx_bell = { -1, 0 };
static int stop_fd = -1;
static volatile int failed;

/* fds the progress thread watches, kept by the registry's hooks */
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ib_link *watched[MAX_CONNS];
static int nwatched;
static int async_fd = -1;

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "ib_stream[%s]: ", o.server ? "server" : "client");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "ib_stream[%s]: FAIL: ", o.server ? "server" : "client");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	failed = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ data */

static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Stream byte p of (connection, direction): any chunking gives the same bytes. */
static uint64_t stream_seed(int conn, bool server_to_client)
{
	return mix64(o.seed * 1000003u + (uint64_t)conn * 2 + server_to_client);
}

static void stream_fill(uint64_t seed, uint64_t pos, uint8_t *dst, size_t len)
{
	while (len) {
		uint64_t w = mix64(seed ^ (pos / 8));
		unsigned k = pos % 8;

		if (k == 0 && len >= 8) { /* whole words: the VM runs emulated, bytes are dear */
			uint8_t b[8];

			for (int i = 0; i < 8; i++)
				b[i] = (uint8_t)(w >> (8 * i));
			memcpy(dst, b, 8);
			dst += 8;
			pos += 8;
			len -= 8;
			continue;
		}
		for (; k < 8 && len; k++, len--, pos++)
			*dst++ = (uint8_t)(w >> (8 * k));
	}
}

static void sum_bytes(const uint8_t *p, size_t n, uint64_t *s1, uint64_t *s2)
{
	uint64_t a = *s1, b = *s2;

	for (size_t i = 0; i < n; i++) {
		a += p[i];
		b += a;
	}
	*s1 = a;
	*s2 = b;
}

/* Random chunk sizes over several orders of magnitude, so that some reads and writes
 * are tiny, some cross the ring's end, some take most of the ring (-C: always the
 * largest, for a bulk throughput figure). */
static uint32_t chunk_size(uint64_t *rng)
{
	if (o.constant)
		return o.max_chunk;
	uint64_t r = mix64((*rng)++);
	uint32_t limit = 1u << (r % 19);

	if (limit > o.max_chunk)
		limit = o.max_chunk;
	return 1 + (uint32_t)((r >> 8) % limit);
}

/* ------------------------------------------------------------------ wakeups */

static void bell_ring(struct bell *b)
{
	uint64_t one = 1;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&b->sleeping, __ATOMIC_RELAXED))
		if (write(b->fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			fail("eventfd write: %s", strerror(errno));
}

/* Sleep after a pass that made no progress; `recheck` repeats the pass's test with the
 * flag up, so a notify between the pass and the sleep is not lost. */
static void bell_wait(struct bell *b, bool (*recheck)(void))
{
	struct pollfd p = { .fd = b->fd, .events = POLLIN };
	uint64_t v;

	__atomic_store_n(&b->sleeping, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!recheck())
		poll(&p, 1, 1000);
	__atomic_store_n(&b->sleeping, 0, __ATOMIC_RELAXED);
	if (read(b->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		fail("eventfd read: %s", strerror(errno));
}

static void on_conn_event(struct ib_conn *c, unsigned ev, void *arg)
{
	(void)c;
	(void)arg;
	if (ev & (IB_EV_RX | IB_EV_ERR))
		bell_ring(&rx_bell);
	if (ev & (IB_EV_TX | IB_EV_ERR))
		bell_ring(&tx_bell);
}

/* ------------------------------------------------------------------ threads */

static bool expect_abort(int i)
{
	return (o.forge && i == 0) || o.expect_death;
}

static bool conn_lost(struct sconn *s)
{
	if (!ib_conn_aborted(s->ic))
		return false;
	if (!s->aborted && !expect_abort(s->idx))
		fail("connection %d aborted", s->idx);
	s->aborted = true;
	return true;
}

static bool tx_ready(void)
{
	for (int i = 0; i < o.nconns; i++)
		if (!conns[i].tx_done && ib_conn_tx_free(conns[i].ic) != 0)
			return true;
	return false;
}

/* One pass over the connections; true when it moved something. */
static bool tx_pass(uint8_t *buf)
{
	bool progress = false;

	for (int i = 0; i < o.nconns; i++) {
		struct sconn *s = &conns[i];
		int64_t room;

		if (s->tx_done)
			continue;
		if (s->sent == o.bytes) {
			ib_conn_shutdown_wr(s->ic);
			s->tx_done = progress = true;
			continue;
		}
		room = ib_conn_tx_free(s->ic);
		if (room < 0 && conn_lost(s)) {
			s->tx_done = progress = true;
			continue;
		}
		if (room <= 0) {
			if (!s->blocked_said)
				ib_conn_tx_blocked(s->ic);
			s->blocked_said = true;
			continue;
		}
		uint32_t n = chunk_size(&s->tx_rng);

		if (n > room)
			n = (uint32_t)room;
		if (n > o.bytes - s->sent)
			n = (uint32_t)(o.bytes - s->sent);
		stream_fill(stream_seed(i, o.server), s->sent, buf, n);
		sum_bytes(buf, n, &s->tx_sum1, &s->tx_sum2);
		ring_copy_in(ib_conn_tx_ring(s->ic), ib_conn_tx_size(s->ic), ib_conn_tx_prod(s->ic),
			     buf, n);
		ib_conn_tx_produced(s->ic, n);
		s->sent += n;
		s->blocked_said = false;
		progress = true;
	}
	return progress;
}

static bool all_tx_done(void)
{
	for (int i = 0; i < o.nconns; i++)
		if (!conns[i].tx_done)
			return false;
	return true;
}

static void *writer(void *arg)
{
	uint8_t *buf = malloc(o.max_chunk);
	double last = now_s();

	(void)arg;
	while (!all_tx_done() && !failed) {
		if (tx_pass(buf)) {
			last = now_s();
			continue;
		}
		if (now_s() - last > STALL_S) {
			fail("writer stalled for %d s", STALL_S);
			break;
		}
		bell_wait(&tx_bell, tx_ready);
	}
	free(buf);
	return NULL;
}

static bool rx_ready(void)
{
	for (int i = 0; i < o.nconns; i++)
		if (!conns[i].rx_done &&
		    (ib_conn_rx_used(conns[i].ic) != 0 || ib_conn_rx_eof(conns[i].ic)))
			return true;
	return false;
}

static void rx_one(struct sconn *s, uint8_t *buf, uint8_t *want, int64_t used)
{
	uint32_t n = chunk_size(&s->rx_rng);

	if (n > used)
		n = (uint32_t)used;
	ring_copy_out(ib_conn_rx_ring(s->ic), ib_conn_rx_size(s->ic), ib_conn_rx_cons(s->ic),
		      buf, n);
	stream_fill(stream_seed(s->idx, !o.server), s->recvd, want, n);
	if (memcmp(buf, want, n) != 0) {
		for (uint32_t k = 0; k < n; k++)
			if (buf[k] != want[k]) {
				fail("connection %d: byte %" PRIu64 " is %#x, expected %#x", s->idx,
				     s->recvd + k, buf[k], want[k]);
				break;
			}
	}
	sum_bytes(buf, n, &s->rx_sum1, &s->rx_sum2);
	s->recvd += n;
	ib_conn_rx_consumed(s->ic, n);
	if (o.die && !strcmp(o.die, "busy") && s->idx == 0 && s->recvd >= o.bytes / 2) {
		fprintf(stderr, "ib_stream[%s]: dying mid-stream (SIGKILL)\n",
			o.server ? "server" : "client");
		raise(SIGKILL);
	}
}

static bool rx_pass(uint8_t *buf, uint8_t *want)
{
	bool progress = false;

	for (int i = 0; i < o.nconns; i++) {
		struct sconn *s = &conns[i];
		int64_t used;

		if (s->rx_done)
			continue;
		used = ib_conn_rx_used(s->ic);
		if (used < 0 && conn_lost(s)) {
			s->rx_done = progress = true;
			continue;
		}
		if (used > 0) {
			rx_one(s, buf, want, used);
			progress = true;
			continue;
		}
		/* eof is read before the cursor: data announced before the flag is seen */
		if (ib_conn_rx_eof(s->ic) && ib_conn_rx_used(s->ic) == 0) {
			if (!conn_lost(s) && s->recvd != o.bytes)
				fail("connection %d: eof after %" PRIu64 " of %" PRIu64 " bytes",
				     i, s->recvd, o.bytes);
			s->rx_done = progress = true;
		}
	}
	return progress;
}

static bool all_rx_done(void)
{
	for (int i = 0; i < o.nconns; i++)
		if (!conns[i].rx_done)
			return false;
	return true;
}

static void *reader(void *arg)
{
	uint8_t *buf = malloc(o.max_chunk), *want = malloc(o.max_chunk);
	double last = now_s();

	(void)arg;
	while (!all_rx_done() && !failed) {
		if (rx_pass(buf, want)) {
			last = now_s();
			continue;
		}
		if (now_s() - last > STALL_S) {
			fail("reader stalled for %d s", STALL_S);
			break;
		}
		bell_wait(&rx_bell, rx_ready);
	}
	free(buf);
	free(want);
	return NULL;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The registry's hooks: what the library's progress thread does with libevent. */
static void hook_link_added(struct ib_link *l, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&watch_lock);
	if (nwatched < MAX_CONNS)
		watched[nwatched++] = l;
	pthread_mutex_unlock(&watch_lock);
}

static void hook_link_removed(struct ib_link *l, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&watch_lock);
	for (int i = 0; i < nwatched; i++)
		if (watched[i] == l)
			watched[i] = watched[--nwatched];
	pthread_mutex_unlock(&watch_lock);
}

static void hook_dev_opened(int fd, void *arg)
{
	(void)arg;
	__atomic_store_n(&async_fd, fd, __ATOMIC_RELEASE);
}

static void hook_dev_closing(int fd, void *arg)
{
	(void)arg;
	(void)fd;
	__atomic_store_n(&async_fd, -1, __ATOMIC_RELEASE);
}

/* Completions, async events and the registry's timers, as the library's progress
 * thread will drive them. */
static void *progress(void *arg)
{
	struct pollfd p[MAX_CONNS + 2];
	struct ib_link *ls[MAX_CONNS];

	(void)arg;
	for (;;) {
		uint64_t now = mono_ns(), next = ib_lgr_next_deadline();
		int n = 0, timeout = 1000;

		if (next <= now)
			timeout = 0;
		else if (next - now < 1000000000ull)
			timeout = (int)((next - now) / 1000000) + 1;
		p[n++] = (struct pollfd){ .fd = stop_fd, .events = POLLIN };
		p[n++] = (struct pollfd){ .fd = __atomic_load_n(&async_fd, __ATOMIC_ACQUIRE),
					  .events = POLLIN };
		pthread_mutex_lock(&watch_lock);
		for (int i = 0; i < nwatched; i++) {
			ls[i] = watched[i];
			p[n++] = (struct pollfd){ .fd = ib_link_event_fd(ls[i]), .events = POLLIN };
		}
		pthread_mutex_unlock(&watch_lock);
		if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (p[0].revents)
			break;
		if (p[1].revents)
			ib_lgr_async_process();
		for (int i = 2; i < n; i++)
			if (p[i].revents)
				ib_link_process(ls[i - 2]);
		if (mono_ns() >= ib_lgr_next_deadline())
			ib_lgr_tick(mono_ns());
	}
	return NULL;
}

/* ------------------------------------------------------------------ TCP channel */

static void xwrite(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0)
			die("control write: %s", n < 0 ? strerror(errno) : "closed");
		p += n;
		len -= (size_t)n;
	}
}

static void xread(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n <= 0)
			die("control read: %s", n < 0 ? strerror(errno) : "peer closed");
		p += n;
		len -= (size_t)n;
	}
}

static int tcp_channel(void)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = o.server ? AI_PASSIVE : 0 };
	struct addrinfo *ai;
	int fd, one = 1, rc;

	rc = getaddrinfo(o.host, o.port, &hints, &ai);
	if (rc)
		die("getaddrinfo: %s", gai_strerror(rc));
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (o.server) {
		int lfd = fd;

		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(lfd, 1) < 0)
			die("bind/listen: %s", strerror(errno));
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			die("accept: %s", strerror(errno));
		close(lfd);
	} else {
		for (int tries = 0; connect(fd, ai->ai_addr, ai->ai_addrlen) < 0; tries++) {
			if (tries > 300)
				die("connect: %s", strerror(errno));
			usleep(100000);
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	freeaddrinfo(ai);
	return fd;
}

/* One CLC Accept/Confirm plus the credits extension. */
static void send_params(int fd, const struct ib_link_params *l, const struct ib_rmb_params *r,
			bool first)
{
	struct clc_msg m;
	uint8_t buf[CLC_MAX_LEN + IB_CREDITS_EXT_LEN];
	ssize_t n;

	ib_params_to_clc(l, r, o.server ? CLC_ACCEPT : CLC_CONFIRM, first, &m);
	n = clc_encode(&m, buf, CLC_MAX_LEN);
	if (n < 0)
		die("clc_encode: %s", strerror((int)-n));
	ib_link_credits_encode(l->credits, buf + n);
	xwrite(fd, buf, (size_t)n + IB_CREDITS_EXT_LEN);
}

static void recv_params(int fd, struct ib_link_params *l, struct ib_rmb_params *r,
			bool *first)
{
	uint8_t buf[CLC_MAX_LEN], ext[IB_CREDITS_EXT_LEN];
	enum clc_variant var;
	uint16_t total;
	uint8_t type;
	struct clc_msg m;
	uint32_t decl;
	int rc;

	xread(fd, buf, CLC_HDR_LEN);
	rc = clc_peek_header(buf, CLC_HDR_LEN, &var, &type, &total);
	if (rc < 0)
		die("peer CLC header: %s", strerror(-rc));
	xread(fd, buf + CLC_HDR_LEN, total - CLC_HDR_LEN);
	rc = clc_decode(buf, total, &m);
	if (rc < 0)
		die("peer CLC: %s", strerror(-rc));
	if (m.type != (o.server ? CLC_CONFIRM : CLC_ACCEPT))
		die("peer CLC: unexpected type %u", m.type);
	*first = m.flags & CLC_FLAG_FIRST_CONTACT;
	decl = ib_params_from_clc(&m, 1u << 24, l, r);
	if (decl)
		die("peer parameters refused: %s", clc_decline_reason_str(decl));
	xread(fd, ext, sizeof(ext));
	rc = ib_link_credits_decode(ext, &l->credits);
	if (rc < 0)
		die("peer credits: %s", strerror(-rc));
}

/* ------------------------------------------------------------------ main */

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end == 'G' || *end == 'g')
		v <<= 30;
	return v;
}

static void parse_args(int argc, char **argv)
{
	int opt;

	while ((opt = getopt(argc, argv, "s:c:n:b:r:q:m:S:FCW:I:K:E:")) != -1) {
		switch (opt) {
		case 's': o.server = true; o.port = optarg; o.host = "127.0.0.1"; break;
		case 'c': {
			char *colon = strrchr(optarg, ':');

			if (!colon)
				die("-c HOST:PORT");
			*colon = 0;
			o.host = optarg;
			o.port = colon + 1;
			break;
		}
		case 'n': o.nconns = atoi(optarg); break;
		case 'b': o.bytes = parse_size(optarg); break;
		case 'r': o.rmb = (uint32_t)parse_size(optarg); break;
		case 'q': o.rq_depth = (uint8_t)atoi(optarg); break;
		case 'm': o.max_chunk = (uint32_t)parse_size(optarg); break;
		case 'S': o.seed = strtoull(optarg, NULL, 0); break;
		case 'F': o.forge = true; break;
		case 'C': o.constant = true; break;
		case 'W': o.wait_ms = (unsigned)atoi(optarg); break;
		case 'I': o.idle_ms = (unsigned)atoi(optarg); break;
		case 'K': o.die = optarg; break;
		case 'E': o.expect_death = optarg; break;
		default: die("bad option (see the comment at the top of ib_stream.c)");
		}
	}
	if (!o.port || o.nconns < 1 || o.nconns > MAX_CONNS || o.bytes == 0)
		die("need -s PORT or -c HOST:PORT, 1..%d connections, -b > 0", MAX_CONNS);
	if (!o.max_chunk)
		o.max_chunk = o.rmb; /* the ring limits each step anyway */
}

/* The client's bad input (-F): an unknown token, then a producer cursor past the end
 * of connection 0's ring on the server. */
static void forge_cdcs(const struct ib_rmb_params *peer0)
{
	struct cdc_msg m = { 0 };

	m.token = peer0->token ^ 0x5A5A5A5Au;
	if (m.token == 0)
		m.token = 1;
	while (ib_link_send_raw_cdc(link_, &m) == -EAGAIN)
		usleep(1000);
	m.token = peer0->token;
	m.st.prod = cursor_make(0, peer0->size + 5); /* count beyond the ring */
	while (ib_link_send_raw_cdc(link_, &m) == -EAGAIN)
		usleep(1000);
}

struct summary {
	uint64_t recvd[MAX_CONNS], sent[MAX_CONNS];
	uint64_t tx_sum1[MAX_CONNS], tx_sum2[MAX_CONNS], rx_sum1[MAX_CONNS], rx_sum2[MAX_CONNS];
	uint8_t aborted[MAX_CONNS];
};

static void check_against_peer(const struct summary *mine, const struct summary *peer)
{
	for (int i = 0; i < o.nconns; i++) {
		if (expect_abort(i)) {
			if (!mine->aborted[i] || !peer->aborted[i])
				fail("connection %d was not aborted on both sides", i);
			continue;
		}
		if (mine->aborted[i])
			continue; /* reported already */
		if (mine->recvd[i] != peer->sent[i] || mine->rx_sum1[i] != peer->tx_sum1[i] ||
		    mine->rx_sum2[i] != peer->tx_sum2[i])
			fail("connection %d: received %" PRIu64 " bytes (sum %016" PRIx64
			     "), peer sent %" PRIu64 " (sum %016" PRIx64 ")", i, mine->recvd[i],
			     mine->rx_sum2[i], peer->sent[i], peer->tx_sum2[i]);
	}
}

static void check_counters(const struct ib_link_counters *k, uint64_t sent_total)
{
	uint64_t want_unknown = o.forge && o.server ? 1 : 0;
	uint64_t want_aborts = o.forge && o.server ? 1 : 0;

	if (k->rnr_errors)
		fail("%" PRIu64 " RNR completions", k->rnr_errors);
	if (k->wc_errors)
		fail("%" PRIu64 " failed completions", k->wc_errors);
	if (k->cdc_bad)
		fail("%" PRIu64 " malformed CDCs", k->cdc_bad);
	if (k->cdc_unknown != want_unknown)
		fail("%" PRIu64 " CDCs for unknown tokens, expected %" PRIu64, k->cdc_unknown,
		     want_unknown);
	if (k->conn_aborts != want_aborts)
		fail("%" PRIu64 " connections aborted for protocol errors, expected %" PRIu64,
		     k->conn_aborts, want_aborts);
	if (!o.forge && k->rdma_bytes != sent_total)
		fail("RDMA wrote %" PRIu64 " bytes, the writer produced %" PRIu64, k->rdma_bytes,
		     sent_total);
	if (k->rdma_bytes == 0)
		fail("no byte moved by RDMA");
}

static struct ib_rmb_params peer_rmb0; /* the server's RMB of connection 0 (-F) */

/* One connection through the registry, as the library's handshake will make it. */
static void setup_conn(int fd, struct sconn *sc, struct ib_link **link_out, bool *first_out)
{
	struct ib_link_params mine, peer;
	struct ib_rmb_params rmb, prmb;
	struct clc_smcr_local me, them;
	struct ib_link *l;
	bool first, peer_first;
	int rc;

	rc = ib_lgr_local(&me);
	if (rc < 0)
		die("ib_lgr_local: %s", strerror(-rc));
	if (!o.server) {
		xwrite(fd, &me, sizeof(me)); /* what its Proposal would carry */
		recv_params(fd, &peer, &prmb, &first);
		rc = ib_lgr_get_client(&peer, first, &l);
		if (rc < 0)
			die("ib_lgr_get_client: %s", strerror(-rc));
		if (first) {
			rc = ib_lgr_connect(l, &peer, false);
			if (rc < 0)
				die("ib_lgr_connect: %s", strerror(-rc));
		}
	} else {
		xread(fd, &them, sizeof(them));
		rc = ib_lgr_get_server(them.peer_id, them.gid, &l, &first);
		if (rc < 0)
			die("ib_lgr_get_server: %s", strerror(-rc));
	}
	rc = ib_conn_create(l, o.rmb, on_conn_event, sc, &sc->ic);
	if (rc < 0)
		die("ib_conn_create: %s", strerror(-rc));
	ib_link_local_params(l, &mine);
	memcpy(mine.peer_id, me.peer_id, CLC_PEER_ID_LEN);
	ib_conn_local_rmb(sc->ic, &rmb);
	if (!o.server) {
		rc = ib_conn_set_peer(sc->ic, &prmb);
		if (rc < 0)
			die("ib_conn_set_peer: %s", strerror(-rc));
		send_params(fd, &mine, &rmb, first);
	} else {
		send_params(fd, &mine, &rmb, first);
		recv_params(fd, &peer, &prmb, &peer_first);
		if (peer_first != first)
			die("Confirm: first contact %d, Accept said %d", peer_first, first);
		if (first) {
			if (o.wait_ms)
				usleep(o.wait_ms * 1000u);
			rc = ib_lgr_connect(l, &peer, true);
			if (rc < 0)
				die("ib_lgr_connect: %s", strerror(-rc));
		}
		rc = ib_conn_set_peer(sc->ic, &prmb);
		if (rc < 0)
			die("ib_conn_set_peer: %s", strerror(-rc));
	}
	if (sc->idx == 0)
		peer_rmb0 = prmb;
	ib_lgr_put(l);
	*link_out = l;
	*first_out = first;
}

/* Every connection after the first must share the first one's link. */
static void setup(int fd)
{
	for (int i = 0; i < o.nconns; i++) {
		struct ib_link *l;
		bool first;

		conns[i].idx = i;
		conns[i].tx_rng = mix64(o.seed + 77 + (uint64_t)i * 2 + o.server);
		conns[i].rx_rng = mix64(o.seed + 99 + (uint64_t)i * 2 + o.server);
		setup_conn(fd, &conns[i], &l, &first);
		if (i == 0)
			link_ = l;
		if (first != (i == 0))
			fail("connection %d: first contact %d", i, first);
		if (l != link_)
			fail("connection %d: not on the first connection's link", i);
	}
	if (ib_lgr_link_count() != 1)
		fail("%u links in the registry, expected 1", ib_lgr_link_count());
	if (o.forge && !o.server)
		forge_cdcs(&peer_rmb0);
}

static void close_all(void)
{
	for (int i = 0; i < o.nconns; i++)
		ib_conn_close(conns[i].ic, false);
}

/* Waits until the link has no connection left (their closes crossed). */
static void wait_conns_released(void)
{
	double t0 = now_s();

	while (ib_link_conn_count(link_) != 0) {
		if (now_s() - t0 > 30) {
			fail("%u connections not released after close", ib_link_conn_count(link_));
			return;
		}
		usleep(1000);
	}
}

/* -I: the registry releases the idle link no earlier than the timeout after the closes,
 * then the device. Returns the seconds it took. */
static double wait_link_released(double t_close)
{
	while (ib_lgr_link_count() != 0 || ib_lgr_dev_is_open()) {
		if (now_s() - t_close > 60) {
			fail("link/device not released 60 s after the last close (%u links)",
			     ib_lgr_link_count());
			break;
		}
		usleep(10000);
	}
	if (now_s() - t_close < o.idle_ms / 1000.0)
		fail("link released %.3f s after the closes, before the idle timeout %u ms",
		     now_s() - t_close, o.idle_ms);
	return now_s() - t_close;
}

static bool all_aborted(void)
{
	for (int i = 0; i < o.nconns; i++)
		if (!ib_conn_aborted(conns[i].ic))
			return false;
	return true;
}

static void check_link_stats(bool expect_failure)
{
	struct smc_stats_snapshot snap;

	stats_snapshot(&snap);
	if (snap.ib[SMC_IB_RNR])
		fail("stats: %" PRIu64 " RNR", snap.ib[SMC_IB_RNR]);
	if (snap.ib[SMC_IB_LINKS] != 1)
		fail("stats: %" PRIu64 " links created, expected 1", snap.ib[SMC_IB_LINKS]);
	if (expect_failure ? snap.ib[SMC_IB_LINK_FAILURES] != 1 : snap.ib[SMC_IB_LINK_FAILURES] != 0)
		fail("stats: %" PRIu64 " link failures, expected %d", snap.ib[SMC_IB_LINK_FAILURES],
		     expect_failure);
}

/* -E: the peer died. Every connection must be aborted (ECONNRESET for the application)
 * and the failed link released once they are closed. */
static int survive_peer_death(double t_end)
{
	struct ib_link_counters k;
	double t0 = now_s();

	while (!all_aborted()) {
		if (now_s() - t0 > 60) {
			fail("connections not aborted 60 s after the peer's death");
			break;
		}
		usleep(10000);
	}
	double detect = now_s() - t_end;
	uint64_t recvd = 0;

	for (int i = 0; i < o.nconns; i++)
		recvd += conns[i].recvd;
	ib_link_get_counters(link_, &k);
	if (k.rnr_errors)
		fail("%" PRIu64 " RNR completions", k.rnr_errors);
	if (!ib_link_failed(link_))
		fail("the link did not fail");
	check_link_stats(true);
	close_all();
	/* a failed link goes as soon as its connections are closed */
	t0 = now_s();
	while (ib_lgr_link_count() != 0) {
		if (now_s() - t0 > 30) {
			fail("failed link not released after its connections closed");
			break;
		}
		usleep(10000);
	}
	printf("RESULT side=%s peer_death=%s all_aborted=%d bytes_received=%" PRIu64
	       " aborted_after_s=%.2f keepalives=%" PRIu64 " wc_errors=%" PRIu64
	       " links_left=%u status=%s\n", o.server ? "server" : "client", o.expect_death,
	       all_aborted(), recvd, detect, k.keepalives, k.wc_errors, ib_lgr_link_count(),
	       failed ? "FAIL" : "ok");
	fflush(stdout);
	return failed ? 1 : 0;
}

static void print_result(const struct ib_link_counters *k, uint64_t moved, double secs,
			 double released_s)
{
	printf("RESULT side=%s conns=%d bytes_moved=%" PRIu64 " seconds=%.3f MBps=%.1f"
	       " rdma_bytes=%" PRIu64 " rdma_writes=%" PRIu64 " cdc_sent=%" PRIu64
	       " cdc_recv=%" PRIu64 " cons_updates=%" PRIu64 " credit_updates=%" PRIu64
	       " credit_waits=%" PRIu64 " sq_waits=%" PRIu64 " rnr=%" PRIu64
	       " wc_errors=%" PRIu64 " cdc_bad=%" PRIu64 " cdc_unknown=%" PRIu64
	       " conn_aborts=%" PRIu64 " confirms=%" PRIu64 "/%" PRIu64 " sends_held=%" PRIu64
	       " keepalives=%" PRIu64 " link_released_s=%.2f status=%s\n",
	       o.server ? "server" : "client", o.nconns, moved, secs, moved / secs / 1e6,
	       k->rdma_bytes, k->rdma_writes, k->cdc_sent, k->cdc_recv, k->cons_updates,
	       k->credit_updates, k->credit_waits, k->sq_waits, k->rnr_errors, k->wc_errors,
	       k->cdc_bad, k->cdc_unknown, k->conn_aborts, k->confirms_sent, k->confirms_recv,
	       k->sends_held, k->keepalives, released_s, failed ? "FAIL" : "ok");
	fflush(stdout);
}

static void check_confirmation(const struct ib_link_counters *k)
{
	if (o.server ? k->confirms_sent != 1 || k->confirms_recv != 0
		     : k->confirms_recv != 1 || k->confirms_sent != 0)
		fail("link confirmations sent/received %" PRIu64 "/%" PRIu64, k->confirms_sent,
		     k->confirms_recv);
	if (o.wait_ms && !o.server && k->sends_held == 0)
		fail("the server waited %u ms before RTS, yet no send waited for it", o.wait_ms);
}

int main(int argc, char **argv)
{
	struct ib_lgr_hooks hooks = { .link_added = hook_link_added,
				      .link_removed = hook_link_removed,
				      .dev_opened = hook_dev_opened,
				      .dev_closing = hook_dev_closing };
	struct ib_link_opts lo = IB_LINK_OPTS_DEFAULT;
	pthread_t tw, tr, tp;
	struct summary mine = { 0 }, peer;
	struct ib_link_counters k;
	uint64_t sent_total = 0, moved = 0;
	double t0, secs, t_close, released_s = 0;
	int fd, rc;

	parse_args(argc, argv);
	config_load(NULL);
	ib_lgr_set_hooks(&hooks);
	lo.rq_depth = o.rq_depth;
	lo.rnr_retry = 0; /* an RNR, should credits ever fail, is an error we count */
	ib_lgr_set_link_opts(&lo);
	if (o.idle_ms)
		ib_lgr_set_idle_timeout_ms(o.idle_ms);
	rc = ib_lgr_open();
	if (rc < 0)
		die("no RDMA device: %s", strerror(-rc));
	rx_bell.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tx_bell.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_create(&tp, NULL, progress, NULL);
	fd = tcp_channel();
	setup(fd);
	fprintf(stderr, "ib_stream[%s]: %d connections, %" PRIu64 " bytes each way each, RMB %u,"
		" credits %u\n", o.server ? "server" : "client", o.nconns, o.bytes, o.rmb,
		o.rq_depth);

	t0 = now_s();
	pthread_create(&tw, NULL, writer, NULL);
	pthread_create(&tr, NULL, reader, NULL);
	pthread_join(tw, NULL);
	pthread_join(tr, NULL);
	secs = now_s() - t0;
	if (o.die && !strcmp(o.die, "idle")) {
		sleep(2); /* let the last messages land at the peer */
		fprintf(stderr, "ib_stream[%s]: dying with idle connections (SIGKILL)\n",
			o.server ? "server" : "client");
		raise(SIGKILL);
	}
	if (o.expect_death)
		return survive_peer_death(now_s());

	for (int i = 0; i < o.nconns; i++) {
		mine.sent[i] = conns[i].sent;
		mine.recvd[i] = conns[i].recvd;
		mine.tx_sum1[i] = conns[i].tx_sum1;
		mine.tx_sum2[i] = conns[i].tx_sum2;
		mine.rx_sum1[i] = conns[i].rx_sum1;
		mine.rx_sum2[i] = conns[i].rx_sum2;
		mine.aborted[i] = conns[i].aborted;
		sent_total += conns[i].sent;
		moved += conns[i].sent + conns[i].recvd;
	}
	t_close = now_s();
	close_all();
	wait_conns_released();
	/* everything is flushed now; the link lives on (idle) for at least idle_ms */
	ib_link_get_counters(link_, &k);
	if (o.idle_ms)
		released_s = wait_link_released(t_close);
	xwrite(fd, &mine, sizeof(mine));
	xread(fd, &peer, sizeof(peer));
	check_against_peer(&mine, &peer);
	check_counters(&k, sent_total);
	check_confirmation(&k);
	check_link_stats(false);
	print_result(&k, moved, secs, released_s);
	/* both sides done with the link before either destroys its QP */
	xwrite(fd, "D", 1);
	char c;
	xread(fd, &c, 1);
	uint64_t one = 1;
	if (write(stop_fd, &one, sizeof(one)) < 0)
		die("eventfd: %s", strerror(errno));
	pthread_join(tp, NULL);
	ib_lgr_shutdown();
	if (ib_lgr_dev_is_open() || ib_lgr_link_count())
		fail("resources left after ib_lgr_shutdown");
	close(fd);
	return failed ? 1 : 0;
}
