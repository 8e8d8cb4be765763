/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * io_uring_check: a TCP connection whose data goes through io_uring, which no
 * interposed function sees, so the library must keep it plain TCP, or take it back
 * to plain TCP when the ring comes after the upgrade.
 *
 *   io_uring_check server PORT BYTES RING [ring-after-listen]
 *   io_uring_check client PORT BYTES RING
 *   io_uring_check server|client PORT BYTES RING midstream|midstream-peer GATE-DIR
 *   io_uring_check exec-with-ring PROGRAM ARGS...
 *
 * RING: "raw" sets up a ring with syscall(SYS_io_uring_setup) and moves the data with
 * IORING_OP_SEND / IORING_OP_RECV through syscall(SYS_io_uring_enter) (a minimal SQ/CQ
 * ring of its own); "liburing" the same through liburing (when built with it); "none"
 * uses send()/recv(). Each side's stream has its byte at offset o a function of o and
 * of the sender (a byte that comes back to its sender, or lands at another offset, is
 * told apart), and every byte received is checked against its offset.
 *
 * Without a mode word: the client sends BYTES, the server reads them all and answers
 * BYTES, the client reads them; then both see EOF and exit 0 ("OK role bytes=N
 * ring=RING"). The ring is made first, or with ring-after-listen once the server
 * listens (before it accepts).
 *
 * midstream: the connection is made with no ring, so it is upgraded. The side given
 * "midstream" reads MID_PRE bytes of the peer's stream and writes MID_PRE of its own
 * with send()/recv(), stops for MID_PAUSE_MS (the peer keeps writing: the ring this
 * side reads from fills with bytes it has not read), makes its ring (RING none: the
 * control, no ring), moves the next BYTES each way through it (one send and one
 * receive in turn on the same socket), then MID_TAIL each way with send()/recv()
 * again, shuts its sending half and reads the end of the stream. The side given
 * "midstream-peer" (RING none) writes its whole stream from a thread while it reads:
 * it reads MID_HOLD_AT bytes, stops reading for MID_HOLD_MS (longer than the other
 * side's pause: the ring it reads from still holds unread bytes when the ring is
 * made), then reads the rest and the end of the stream. Each side's stream is
 * MID_PRE + BYTES + MID_TAIL bytes. Before it the client connects once more for a
 * warm-up (a few bytes each way, closed, its rings gone); then both sides print
 * "READY role pid=P" (to be measured idle) and wait for GATE-DIR/go-ROLE to exist, and
 * "DONE role pid=P" once the connection is closed, then wait for GATE-DIR/end-ROLE
 * before they exit (the test looks at their descriptors and mappings in between);
 * the side that makes the ring prints "RING role pid=P sent=S received=R" just
 * before it makes it. The whole run is bounded by MID_TIMEOUT seconds ("TIMEOUT role
 * phase=... sent=S received=R" on stdout, exit 3).
 *
 * exec-with-ring sets up a raw ring, keeps its descriptor open across exec and runs
 * PROGRAM: a process that starts with a ring.
 *
 * Exit 77 when the kernel refuses io_uring, 3 on a timeout, 1 on any other failure
 * (a "FAIL" line names where both directions stood; a wrong byte is named first by
 * a "MISMATCH" line, with where in either stream the bytes that came belong).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#define CHUNK 16381 /* prime: operations fall across every ring boundary */
#define MID_PRE (256u << 10)
#define MID_TAIL (64u << 10)
#define MID_PAUSE_MS 500
#define MID_HOLD_AT (64u << 10)
#define MID_HOLD_MS 1500
#define MID_TIMEOUT 60
#define LOCATE_LEN 16

static const char *role = "?";
/* what the side is doing, for a timeout's report (string literals only) */
static const char *_Atomic phase = "setup";
static _Atomic uint64_t sent_at, received_at;
static uint8_t tx_tag, rx_tag;
static uint64_t stream_len; /* each way */

static void fail(const char *what)
{
	static atomic_flag failing = ATOMIC_FLAG_INIT;
	int e = errno;

	/* one exit: a second thread that fails waits for the first one's */
	if (atomic_flag_test_and_set(&failing))
		for (;;)
			pause();
	printf("FAIL %s: %s at sent=%" PRIu64 " received=%" PRIu64 " (errno %d %s)\n", role, what,
	       atomic_load(&sent_at), atomic_load(&received_at), e, strerror(e));
	fflush(stdout);
	exit(1);
}

static void ring_refused(void)
{
	printf("SKIP %s: the kernel refuses io_uring (errno %d %s)\n", role, errno,
	       strerror(errno));
	exit(77);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Async-signal-safe: a timeout names where each direction stood. */
static void put_str(char *b, size_t *n, size_t cap, const char *s)
{
	while (*s && *n < cap)
		b[(*n)++] = *s++;
}

static void put_u64(char *b, size_t *n, size_t cap, uint64_t v)
{
	char t[24];
	int k = 0;

	do
		t[k++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (k > 0 && *n < cap)
		b[(*n)++] = t[--k];
}

static void on_alarm(int sig)
{
	char b[256];
	size_t n = 0, cap = sizeof(b) - 1;

	(void)sig;
	put_str(b, &n, cap, "TIMEOUT ");
	put_str(b, &n, cap, role);
	put_str(b, &n, cap, " phase=");
	put_str(b, &n, cap, atomic_load(&phase));
	put_str(b, &n, cap, " sent=");
	put_u64(b, &n, cap, atomic_load(&sent_at));
	put_str(b, &n, cap, " received=");
	put_u64(b, &n, cap, atomic_load(&received_at));
	b[n++] = '\n';
	if (write(STDOUT_FILENO, b, n) < 0)
		_exit(3);
	_exit(3);
}

/* ------------------------------------------------------------------ a raw ring */

struct raw_ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array;
	unsigned *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static int raw_setup(struct raw_ring *r)
{
	struct io_uring_params p;

	memset(&p, 0, sizeof(p));
	r->fd = (int)syscall(SYS_io_uring_setup, 4, &p);
	if (r->fd < 0)
		return -1;
	size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			IORING_OFF_SQ_RING);
	char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			IORING_OFF_CQ_RING);
	r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED)
		fail("mmap of the io_uring rings");
	r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)(sq + p.sq_off.array);
	r->cq_head = (unsigned *)(cq + p.cq_off.head);
	r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

/* One operation, submitted and waited for: its result (bytes or -errno). */
static int raw_op(struct raw_ring *r, uint8_t op, int fd, void *buf, size_t len)
{
	unsigned tail = *r->sq_tail, idx = tail & *r->sq_mask;
	struct io_uring_sqe *sqe = &r->sqes[idx];

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = fd;
	sqe->addr = (uint64_t)(uintptr_t)buf;
	sqe->len = (uint32_t)len;
	r->sq_array[idx] = idx;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	for (;;) {
		long n = syscall(SYS_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0);
		if (n >= 0 || errno != EINTR)
			break;
	}
	unsigned head = *r->cq_head;
	while (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE))
		if (syscall(SYS_io_uring_enter, r->fd, 0, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0 &&
		    errno != EINTR)
			fail("io_uring_enter");
	int res = r->cqes[head & *r->cq_mask].res;
	__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

/* ------------------------------------------------------------------ the transport */

enum ring_kind { RING_NONE, RING_RAW, RING_LIBURING };

static enum ring_kind kind;  /* the ring this side makes */
static enum ring_kind io_by; /* how xfer moves bytes now: RING_NONE or kind */
static struct raw_ring raw;
#ifdef HAVE_LIBURING
static struct io_uring uring;
#endif

static void ring_setup(void)
{
	if (kind == RING_RAW && raw_setup(&raw) < 0)
		ring_refused();
#ifdef HAVE_LIBURING
	if (kind == RING_LIBURING) {
		int r = io_uring_queue_init(4, &uring, 0);
		if (r < 0) {
			errno = -r;
			ring_refused();
		}
	}
#endif
}

static long xfer(bool send_op, int fd, void *buf, size_t len)
{
	int res = 0;

	switch (io_by) {
	case RING_NONE:
		return send_op ? send(fd, buf, len, MSG_NOSIGNAL) : recv(fd, buf, len, 0);
	case RING_RAW:
		res = raw_op(&raw, send_op ? IORING_OP_SEND : IORING_OP_RECV, fd, buf, len);
		break;
	case RING_LIBURING: {
#ifdef HAVE_LIBURING
		struct io_uring_sqe *sqe = io_uring_get_sqe(&uring);
		struct io_uring_cqe *cqe;
		if (!sqe)
			fail("io_uring_get_sqe");
		if (send_op)
			io_uring_prep_send(sqe, fd, buf, len, MSG_NOSIGNAL);
		else
			io_uring_prep_recv(sqe, fd, buf, len, 0);
		if (io_uring_submit_and_wait(&uring, 1) < 0 || io_uring_wait_cqe(&uring, &cqe) < 0)
			fail("io_uring submit/wait");
		res = cqe->res;
		io_uring_cqe_seen(&uring, cqe);
#endif
		break;
	}
	}
	if (res < 0) {
		errno = -res;
		return -1;
	}
	return res;
}

/* ------------------------------------------------------------------ the streams */

static uint8_t pat(uint8_t tag, uint64_t o)
{
	uint64_t x = (o >> 3) * 0x9E3779B97F4A7C15ull ^ (uint64_t)tag * 0xD1B54A32D192ED03ull;

	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 29;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 32;
	return (uint8_t)(x >> ((o & 7) * 8));
}

/* Where in either stream the LEN bytes that came at offset OFF belong, for the report. */
static void locate(const uint8_t *got, size_t len, uint64_t off)
{
	uint8_t tags[2] = { rx_tag, tx_tag };

	if (len > LOCATE_LEN)
		len = LOCATE_LEN;
	if (len < 8) {
		printf("  (too few bytes to tell where they belong)\n");
		return;
	}
	for (int t = 0; t < 2; t++)
		for (uint64_t c = 0; c + len <= stream_len; c++) {
			size_t j = 0;

			while (j < len && pat(tags[t], c + j) == got[j])
				j++;
			if (j == len) {
				printf("  the bytes there are the %s stream's at offset %" PRIu64
				       " (%+" PRId64 ")\n", t == 0 ? "peer's" : "own (echoed)", c,
				       (int64_t)(c - off));
				return;
			}
		}
	printf("  the bytes there belong to neither stream\n");
}

/* Sends the own stream from where it stands up to END, one operation per chunk. */
static bool send_step(int fd, uint64_t end)
{
	uint8_t buf[CHUNK];
	uint64_t pos = atomic_load(&sent_at);
	size_t n = end - pos < CHUNK ? (size_t)(end - pos) : CHUNK;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		buf[i] = pat(tx_tag, pos + i);
	long w = xfer(true, fd, buf, n);
	if (w < 0 && errno == EINTR)
		return true;
	if (w <= 0) {
		if (w == 0)
			errno = 0;
		fail("send");
	}
	atomic_store(&sent_at, pos + (uint64_t)w);
	return true;
}

static void send_to(int fd, uint64_t end)
{
	while (send_step(fd, end))
		;
}

/* One receive of the peer's stream towards END, every byte checked. */
static bool recv_step(int fd, uint64_t end)
{
	uint8_t buf[CHUNK];
	uint64_t pos = atomic_load(&received_at);
	size_t n = end - pos < CHUNK ? (size_t)(end - pos) : CHUNK;

	if (n == 0)
		return false;
	long r = xfer(false, fd, buf, n);
	if (r < 0 && errno == EINTR)
		return true;
	if (r < 0)
		fail("recv");
	if (r == 0) {
		errno = 0;
		fail("early EOF");
	}
	for (long i = 0; i < r; i++)
		if (buf[i] != pat(rx_tag, pos + (uint64_t)i)) {
			printf("MISMATCH %s: byte %" PRIu64 " of the peer's stream is 0x%02x, want "
			       "0x%02x (%s)\n", role, pos + (uint64_t)i, buf[i],
			       pat(rx_tag, pos + (uint64_t)i), atomic_load(&phase));
			locate(buf + i, (size_t)(r - i), pos + (uint64_t)i);
			errno = 0;
			fail("received bytes differ from what was sent");
		}
	atomic_store(&received_at, pos + (uint64_t)r);
	return true;
}

static void recv_to(int fd, uint64_t end)
{
	while (recv_step(fd, end))
		;
}

static void expect_eof(int fd)
{
	char c;
	long r;

	do
		r = xfer(false, fd, &c, 1);
	while (r < 0 && errno == EINTR);
	if (r != 0) {
		if (r > 0)
			errno = 0;
		fail("expected EOF");
	}
}

/* ------------------------------------------------------------------ midstream */

static void wait_gate(const char *dir, const char *what)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s-%s", dir, what, role);
	while (access(path, F_OK) != 0)
		sleep_ms(10);
}

/* The library's rings (memfds and their mappings) of this process. */
static int rings_held(void)
{
	char line[4096], path[64], link[256];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "re");

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "/memfd:") != NULL;
	if (f)
		fclose(f);
	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t l = readlink(path, link, sizeof(link) - 1);
		if (l > 0) {
			link[l] = '\0';
			n += strncmp(link, "/memfd:", 7) == 0;
		}
	}
	return n;
}

/*
 * A short connection before the one under test: the library's per-process
 * descriptors (its progress thread's epoll set and doorbell, its own sockets) come
 * with the first upgraded connection and stay, so the process is measured idle after
 * this one, once its rings are gone.
 */
static void warm_up(int fd)
{
	static const char msg[] = "warm-up";
	char buf[sizeof(msg)];
	size_t got = 0;

	atomic_store(&phase, "warm-up");
	if (send(fd, msg, sizeof(msg), MSG_NOSIGNAL) != (ssize_t)sizeof(msg))
		fail("warm-up send");
	while (got < sizeof(buf)) {
		ssize_t r = recv(fd, buf + got, sizeof(buf) - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = 0;
			fail("warm-up recv");
		}
		got += (size_t)r;
	}
	if (memcmp(buf, msg, sizeof(msg)) != 0) {
		errno = 0;
		fail("warm-up bytes differ");
	}
	if (shutdown(fd, SHUT_WR) < 0)
		fail("warm-up shutdown");
	expect_eof(fd);
	close(fd);
	for (int i = 0; i < 500 && rings_held() > 0; i++)
		sleep_ms(10);
}

/* The side that makes its ring once the connection is upgraded and carries data. */
static void mid_ring_side(int fd)
{
	uint64_t to = stream_len - MID_TAIL;

	atomic_store(&phase, "before the ring");
	recv_to(fd, MID_PRE);
	send_to(fd, MID_PRE);
	sleep_ms(MID_PAUSE_MS);
	printf("RING %s pid=%d sent=%" PRIu64 " received=%" PRIu64 "\n", role, (int)getpid(),
	       atomic_load(&sent_at), atomic_load(&received_at));
	fflush(stdout);
	if (kind != RING_NONE) {
		atomic_store(&phase, "making the ring");
		ring_setup();
		io_by = kind;
	}
	atomic_store(&phase, "through the ring");
	for (bool more = true; more;) {
		more = send_step(fd, to);
		more = recv_step(fd, to) || more;
	}
	io_by = RING_NONE;
	atomic_store(&phase, "after the ring, send/recv");
	send_to(fd, stream_len);
	recv_to(fd, stream_len);
	if (shutdown(fd, SHUT_WR) < 0)
		fail("shutdown");
	atomic_store(&phase, "waiting for the end of the stream");
	expect_eof(fd);
}

static void *mid_writer(void *arg)
{
	int fd = *(int *)arg;

	send_to(fd, stream_len);
	if (shutdown(fd, SHUT_WR) < 0)
		fail("shutdown");
	return NULL;
}

/* The peer: writes its whole stream at once while it reads, with a hold. */
static void mid_peer_side(int fd)
{
	pthread_t t;

	atomic_store(&phase, "peer");
	if (pthread_create(&t, NULL, mid_writer, &fd) != 0)
		fail("pthread_create");
	recv_to(fd, MID_HOLD_AT < stream_len ? MID_HOLD_AT : stream_len);
	sleep_ms(MID_HOLD_MS);
	recv_to(fd, stream_len);
	expect_eof(fd);
	pthread_join(t, NULL);
}

/* ------------------------------------------------------------------ main */

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s server|client PORT BYTES none|raw|liburing "
			"[ring-after-listen | midstream GATE-DIR | midstream-peer GATE-DIR]\n"
			"       %s exec-with-ring PROGRAM ARGS...\n", argv0, argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "exec-with-ring") == 0) {
		role = "exec-with-ring";
		if (raw_setup(&raw) < 0)
			ring_refused();
		if (fcntl(raw.fd, F_SETFD, 0) < 0)
			fail("F_SETFD");
		execvp(argv[2], argv + 2);
		fail("execvp");
	}
	if (argc < 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
		usage(argv[0]);
	const char *mode = argc > 5 ? argv[5] : "", *gate = NULL;
	bool after_listen = false, mid = false, mid_peer = false;
	if (argc == 6 && strcmp(mode, "ring-after-listen") == 0) {
		after_listen = true;
	} else if (argc == 7 && (strcmp(mode, "midstream") == 0 ||
				 strcmp(mode, "midstream-peer") == 0)) {
		mid = true;
		mid_peer = strcmp(mode, "midstream-peer") == 0;
		gate = argv[6];
	} else if (argc != 5) {
		usage(argv[0]);
	}
	role = argv[1];
	tx_tag = strcmp(role, "server") == 0 ? 'S' : 'C';
	rx_tag = tx_tag == 'S' ? 'C' : 'S';
	uint64_t bytes = strtoull(argv[3], NULL, 0);
	if (strcmp(argv[4], "raw") == 0)
		kind = RING_RAW;
	else if (strcmp(argv[4], "liburing") == 0)
		kind = RING_LIBURING;
	else if (strcmp(argv[4], "none") != 0)
		fail("RING must be none, raw or liburing");
	if (mid_peer && kind != RING_NONE)
		fail("the midstream peer makes no ring: RING must be none");
#ifndef HAVE_LIBURING
	if (kind == RING_LIBURING) {
		printf("SKIP %s: built without liburing\n", role);
		return 77;
	}
#endif
	setvbuf(stdout, NULL, _IOLBF, 0);
	stream_len = mid ? MID_PRE + bytes + MID_TAIL : bytes;
	if (mid) {
		struct sigaction sa = { .sa_handler = on_alarm };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		alarm(MID_TIMEOUT);
	} else {
		if (!after_listen)
			ring_setup();
		io_by = kind;
	}

	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd;
	if (strcmp(role, "server") == 0) {
		int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
		if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0)
			fail("listen");
		if (after_listen) {
			ring_setup();
			io_by = kind;
		}
		if (mid) {
			atomic_store(&phase, "accept (warm-up)");
			fd = accept(lfd, NULL, NULL);
			if (fd < 0)
				fail("accept");
			warm_up(fd);
			printf("READY %s pid=%d\n", role, (int)getpid());
			atomic_store(&phase, "waiting for the go gate");
			wait_gate(gate, "go");
		}
		atomic_store(&phase, "accept");
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			fail("accept");
		close(lfd);
	} else {
		if (mid) {
			atomic_store(&phase, "connect (warm-up)");
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
				fail("connect");
			warm_up(fd);
			printf("READY %s pid=%d\n", role, (int)getpid());
			atomic_store(&phase, "waiting for the go gate");
			wait_gate(gate, "go");
		}
		atomic_store(&phase, "connect");
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			fail("connect");
	}
	if (mid_peer) {
		mid_peer_side(fd);
	} else if (mid) {
		mid_ring_side(fd);
	} else if (strcmp(role, "server") == 0) {
		recv_to(fd, bytes);
		send_to(fd, bytes);
		shutdown(fd, SHUT_WR);
		expect_eof(fd);
	} else {
		send_to(fd, bytes);
		recv_to(fd, bytes);
		expect_eof(fd);
		shutdown(fd, SHUT_WR);
	}
	close(fd);
	if (!mid) {
		printf("OK %s bytes=%" PRIu64 " ring=%s\n", role, bytes, argv[4]);
		return 0;
	}
	printf("OK %s bytes=%" PRIu64 " ring=%s %s sent=%" PRIu64 " received=%" PRIu64 "\n", role,
	       stream_len, argv[4], mode, atomic_load(&sent_at), atomic_load(&received_at));
	printf("DONE %s pid=%d\n", role, (int)getpid());
	atomic_store(&phase, "waiting for the end gate");
	wait_gate(gate, "end");
	return 0;
}
