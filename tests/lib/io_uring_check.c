/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * io_uring_check: a TCP connection whose data goes through io_uring, which no
 * interposed function sees, so the library must keep it plain TCP.
 *
 *   io_uring_check server PORT BYTES RING [ring-after-listen]
 *   io_uring_check client PORT BYTES RING
 *   io_uring_check exec-with-ring PROGRAM ARGS...
 *
 * RING: "raw" sets up a ring with syscall(SYS_io_uring_setup) and moves the data with
 * IORING_OP_SEND / IORING_OP_RECV through syscall(SYS_io_uring_enter) (a minimal SQ/CQ
 * ring of its own); "liburing" the same through liburing (when built with it); "none"
 * uses send()/recv(). The client sends BYTES, the server reads them all and answers
 * BYTES of another pattern, the client reads them; every byte is checked, then both
 * see EOF and exit 0 ("OK role bytes=N ring=RING"). exec-with-ring sets up a raw ring,
 * keeps its descriptor open across exec and runs PROGRAM: a process that starts with a
 * ring. The ring is made first, or with ring-after-listen once the server listens
 * (before it accepts). Exit 77 when the kernel refuses io_uring, 1 on any failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

static const char *role = "?";

static void fail(const char *what)
{
	printf("FAIL %s: %s (errno %d %s)\n", role, what, errno, strerror(errno));
	fflush(stdout);
	exit(1);
}

static void ring_refused(void)
{
	printf("SKIP %s: the kernel refuses io_uring (errno %d %s)\n", role, errno,
	       strerror(errno));
	exit(77);
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

static enum ring_kind kind;
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

static long xfer(bool send, int fd, void *buf, size_t len)
{
	int res = 0;

	switch (kind) {
	case RING_NONE:
		return send ? write(fd, buf, len) : read(fd, buf, len);
	case RING_RAW:
		res = raw_op(&raw, send ? IORING_OP_SEND : IORING_OP_RECV, fd, buf, len);
		break;
	case RING_LIBURING: {
#ifdef HAVE_LIBURING
		struct io_uring_sqe *sqe = io_uring_get_sqe(&uring);
		struct io_uring_cqe *cqe;
		if (!sqe)
			fail("io_uring_get_sqe");
		if (send)
			io_uring_prep_send(sqe, fd, buf, len, 0);
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

static unsigned char pattern(int which, size_t i)
{
	return (unsigned char)(i * 13 + (size_t)which * 77 + (i >> 11));
}

static void send_all(int fd, size_t n, int which)
{
	unsigned char buf[16384];
	size_t done = 0;

	while (done < n) {
		size_t len = n - done < sizeof(buf) ? n - done : sizeof(buf);
		for (size_t i = 0; i < len; i++)
			buf[i] = pattern(which, done + i);
		long w = xfer(true, fd, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			fail("send");
		done += (size_t)w;
	}
}

static void recv_all(int fd, size_t n, int which)
{
	unsigned char buf[16384];
	size_t done = 0;

	while (done < n) {
		size_t len = n - done < sizeof(buf) ? n - done : sizeof(buf);
		long r = xfer(false, fd, buf, len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fail("recv");
		if (r == 0) {
			errno = 0;
			fail("early EOF");
		}
		for (long i = 0; i < r; i++)
			if (buf[i] != pattern(which, done + (size_t)i)) {
				errno = 0;
				fail("received bytes differ from what was sent");
			}
		done += (size_t)r;
	}
}

static void expect_eof(int fd)
{
	char c;
	long r = xfer(false, fd, &c, 1);
	if (r != 0) {
		if (r > 0)
			errno = 0;
		fail("expected EOF");
	}
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
	bool after_listen = argc == 6 && strcmp(argv[5], "ring-after-listen") == 0;
	if ((argc != 5 && !after_listen) || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client PORT BYTES none|raw|liburing "
				"[ring-after-listen]\n"
				"       %s exec-with-ring PROGRAM ARGS...\n", argv[0], argv[0]);
		return 2;
	}
	role = argv[1];
	size_t bytes = strtoul(argv[3], NULL, 0);
	if (strcmp(argv[4], "raw") == 0)
		kind = RING_RAW;
	else if (strcmp(argv[4], "liburing") == 0)
		kind = RING_LIBURING;
	else if (strcmp(argv[4], "none") != 0)
		fail("RING must be none, raw or liburing");
#ifndef HAVE_LIBURING
	if (kind == RING_LIBURING) {
		printf("SKIP %s: built without liburing\n", role);
		return 77;
	}
#endif
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!after_listen)
		ring_setup();

	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd;
	if (strcmp(role, "server") == 0) {
		int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
		if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0)
			fail("listen");
		if (after_listen)
			ring_setup();
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			fail("accept");
		close(lfd);
		recv_all(fd, bytes, 0);
		send_all(fd, bytes, 1);
		shutdown(fd, SHUT_WR);
		expect_eof(fd);
	} else {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			fail("connect");
		send_all(fd, bytes, 0);
		recv_all(fd, bytes, 1);
		expect_eof(fd);
		shutdown(fd, SHUT_WR);
	}
	close(fd);
	printf("OK %s bytes=%zu ring=%s\n", role, bytes, argv[4]);
	return 0;
}
