/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * smc_fork: fork() while threads are busy on upgraded connections, and per-process
 * counts after fork.
 *
 *   smc_fork storm [--forks N] [--no-churn]
 *     One process, both ends of every connection (a loopback listener of its own).
 *     Threads keep busy until the forks are done:
 *       stream   blocking send() of a byte stream whose every byte is a function of its
 *                position, read by
 *       reader   nonblocking recv() + epoll_wait() on the other end: checks every byte;
 *       ping     blocking send() then blocking recv() of an echo, against
 *       pong     blocking recv() then send();
 *       dup      dup() of an SMC fd, dup2() of another one onto the copy, close();
 *       churn    connect, one byte each way with the accept thread, close (handshakes
 *                on the progress thread, the lock the child would inherit held);
 *     (--no-churn: no churn and accept threads, so no thread allocates memory: GCC 12's
 *     AddressSanitizer runtime does not hold its allocator across fork, and a child can
 *     find its lock held by a thread that allocated at the fork)
 *     while the main thread forks N times. Each child, under alarm(): closes its copies
 *     of the stream and ping connections (a prefork server's child does), dup()s an
 *     SMC fd of a spare connection, dup2()s /dev/null onto the copy, closes it, sends
 *     8 tagged bytes and recv(MSG_DONTWAIT)s (EAGAIN) on that connection, adds it to a
 *     new epoll set and waits for EPOLLOUT, and _exit(0)s. The parent waits for each
 *     child with a deadline (a hang or a crash fails), and reads the child's 8 bytes
 *     at the other end of the spare connection.
 *     At the end: the stream arrived intact and whole (every byte checked, the count
 *     equal), the echoes matched, no fd, memfd or memfd mapping was left behind.
 *
 *   smc_fork counts HOST PORT --conns N --child-conns M --bytes K
 *     N connections to a sink server (smc_fork sink), each used once the sink's first
 *     byte arrived (the handshake is over), P bytes sent on each; then a child
 *     makes M connections and sends K bytes over them, plus J bytes over one of the
 *     parent's connections, and exit()s (its stats are written); then the parent
 *     closes its connections and exit()s. Prints the pids and byte counts for the test
 *     to compare with the two processes' SMC_STATS_FILE.
 *
 *   smc_fork orphan
 *     A connection whose handshake cannot end before the fork (its listener, in this
 *     process, accepts only after): staged bytes, then a fork. The fork ends the
 *     handshake as TCP (fork-pending): the child's send goes out after the parent's
 *     staged bytes, as over TCP, its poll reports it writable at once, and its close
 *     leaves the connection to the parent; after the child, the parent accepts and the
 *     server end reads the parent's bytes exactly once, then the child's.
 *
 *   smc_fork sink PORT
 *     Accepts every connection, sends it one byte and reads it to its end (a thread
 *     each), until SIGTERM.
 *
 * Exit status 0 only when every check passed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define CHILD_ALARM_S 10      /* a child that takes longer is killed by SIGALRM */
#define CHILD_WAIT_MS 20000   /* the parent's deadline for one child */
#define PING_LEN 64
#define STREAM_CHUNK 16384
#define SETTLE_MS 2000
#define IO_TIMEOUT_MS 10000

static atomic_bool stop;       /* every thread but the churn's client */
static atomic_bool stop_churn; /* first: its server half must outlive it */
static atomic_int failures;

#define FAIL(...) do { fprintf(stderr, "FAIL " __VA_ARGS__); fputc('\n', stderr); \
		       atomic_fetch_add(&failures, 1); } while (0)

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ sockets */

static int listen_any(uint16_t port, uint16_t *bound)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		close(fd);
		return -1;
	}
	if (bound)
		*bound = ntohs(a.sin_port);
	return fd;
}

static int connect_to(const char *host, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A connected pair through listener lfd: client end *c, server end *s. */
static int make_pair(int lfd, uint16_t port, int *c, int *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pollfd p;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
	socklen_t elen = sizeof(err);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS)
		goto fail;
	*s = accept(lfd, NULL, NULL);
	if (*s < 0)
		goto fail;
	p = (struct pollfd){ .fd = fd, .events = POLLOUT };
	if (poll(&p, 1, IO_TIMEOUT_MS) != 1 ||
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0) {
		close(*s);
		goto fail;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	*c = fd;
	return 0;
fail:
	close(fd);
	return -1;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? 0 : -1;
		p += n;
		len -= (size_t)n;
	}
	return 1;
}

/* ------------------------------------------------------------------ resources */

struct resources {
	long fds, memfds, memfd_maps;
};

static void count_resources(struct resources *r)
{
	char path[300], target[256], line[512];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	FILE *f;

	r->fds = r->memfds = r->memfd_maps = 0;
	if (d) {
		while ((e = readdir(d))) {
			ssize_t n;

			if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
				continue;
			r->fds++;
			snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
			n = readlink(path, target, sizeof(target) - 1);
			if (n > 0) {
				target[n] = 0;
				if (strstr(target, "memfd:"))
					r->memfds++;
			}
		}
		closedir(d);
	}
	f = fopen("/proc/self/maps", "re");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (strstr(line, "/memfd:"))
				r->memfd_maps++;
		fclose(f);
	}
}

/* Back to the baseline, given SETTLE_MS for what a library thread frees after close. */
static bool resources_settle(const struct resources *base, struct resources *now)
{
	uint64_t end = now_ms() + SETTLE_MS;

	for (;;) {
		count_resources(now);
		if (now->fds <= base->fds && now->memfds <= base->memfds &&
		    now->memfd_maps <= base->memfd_maps)
			return true;
		if (now_ms() >= end)
			return false;
		sleep_ms(20);
	}
}

/* ------------------------------------------------------------------ storm: threads */

struct pair { int c, s; };

static struct pair stream_pair, ping_pair, spare_pair;
static int listen_fd;
static uint16_t listen_port;
static uint64_t stream_sent, stream_received;
static uint64_t pings, churns, dups;

static inline uint8_t stream_byte(uint64_t pos)
{
	uint64_t x = pos * 0x9e3779b97f4a7c15ull;

	return (uint8_t)(x >> 56 ^ pos);
}

static void *stream_writer(void *arg)
{
	static uint8_t buf[STREAM_CHUNK];

	(void)arg;
	while (!atomic_load(&stop)) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = stream_byte(stream_sent + i);
		if (send_all(stream_pair.c, buf, sizeof(buf)) < 0) {
			FAIL("stream: send after %llu bytes: %s", (unsigned long long)stream_sent,
			     strerror(errno));
			break;
		}
		stream_sent += sizeof(buf);
	}
	shutdown(stream_pair.c, SHUT_WR);
	return NULL;
}

static void *stream_reader(void *arg)
{
	static uint8_t buf[STREAM_CHUNK * 2];
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = stream_pair.s };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	(void)arg;
	fcntl(stream_pair.s, F_SETFL, fcntl(stream_pair.s, F_GETFL) | O_NONBLOCK);
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, stream_pair.s, &ev) < 0) {
		FAIL("reader: epoll: %s", strerror(errno));
		return NULL;
	}
	for (;;) {
		ssize_t n = recv(stream_pair.s, buf, sizeof(buf), 0);

		if (n > 0) {
			for (ssize_t i = 0; i < n; i++) {
				if (buf[i] != stream_byte(stream_received + (uint64_t)i)) {
					FAIL("stream: byte %llu is %u, expected %u",
					     (unsigned long long)(stream_received + (uint64_t)i),
					     buf[i], stream_byte(stream_received + (uint64_t)i));
					close(ep);
					return NULL;
				}
			}
			stream_received += (uint64_t)n;
			continue;
		}
		if (n == 0)
			break;
		if (errno != EAGAIN && errno != EINTR) {
			FAIL("stream: recv: %s", strerror(errno));
			break;
		}
		if (epoll_wait(ep, &ev, 1, IO_TIMEOUT_MS) == 0) {
			FAIL("stream: nothing for %d ms after %llu bytes", IO_TIMEOUT_MS,
			     (unsigned long long)stream_received);
			break;
		}
	}
	close(ep);
	return NULL;
}

static void *ping_thread(void *arg)
{
	uint8_t out[PING_LEN], in[PING_LEN];

	(void)arg;
	while (!atomic_load(&stop)) {
		for (int i = 0; i < PING_LEN; i++)
			out[i] = (uint8_t)(pings + (uint64_t)i);
		if (send_all(ping_pair.c, out, sizeof(out)) < 0 ||
		    recv_all(ping_pair.c, in, sizeof(in)) != 1) {
			FAIL("ping %llu: %s", (unsigned long long)pings, strerror(errno));
			break;
		}
		for (int i = 0; i < PING_LEN; i++)
			if ((in[i] ^ out[i]) != 0xff) {
				FAIL("ping %llu: wrong echo", (unsigned long long)pings);
				return NULL;
			}
		pings++;
	}
	shutdown(ping_pair.c, SHUT_WR);
	return NULL;
}

static void *pong_thread(void *arg)
{
	uint8_t b[PING_LEN];

	(void)arg;
	for (;;) {
		int r = recv_all(ping_pair.s, b, sizeof(b));

		if (r == 0)
			break;
		if (r < 0) {
			FAIL("pong: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < PING_LEN; i++)
			b[i] = (uint8_t)~b[i];
		if (send_all(ping_pair.s, b, sizeof(b)) < 0) {
			FAIL("pong: send: %s", strerror(errno));
			break;
		}
	}
	return NULL;
}

static void *dup_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		int d = dup(stream_pair.c), d2;

		if (d < 0) {
			FAIL("dup: %s", strerror(errno));
			break;
		}
		d2 = dup2(ping_pair.s, d); /* closes the copy of one connection, copies another */
		if (d2 != d) {
			FAIL("dup2: %s", strerror(errno));
			close(d);
			break;
		}
		close(d2);
		dups++;
	}
	return NULL;
}

/* The server half of the churn: one byte back, then close. */
static void *accept_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct pollfd p = { .fd = listen_fd, .events = POLLIN };
		char b;
		int fd;

		if (poll(&p, 1, 100) != 1)
			continue;
		fd = accept(listen_fd, NULL, NULL);
		if (fd < 0)
			continue;
		if (recv_all(fd, &b, 1) != 1 || send_all(fd, &b, 1) < 0)
			FAIL("churn server: %s", strerror(errno));
		close(fd);
	}
	return NULL;
}

static void *churn_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_churn)) {
		int fd = connect_to("127.0.0.1", listen_port), k = -1;
		char b = 'x', r = 0;

		if (fd < 0) {
			FAIL("churn connect: %s", strerror(errno));
			break;
		}
		if (send_all(fd, &b, 1) < 0 || (k = recv_all(fd, &r, 1)) != 1 || r != b) {
			FAIL("churn %llu: no echo (%s)", (unsigned long long)churns,
			     k == 0 ? "EOF" : strerror(errno));
			close(fd);
			break;
		}
		close(fd);
		churns++;
	}
	return NULL;
}

/* ------------------------------------------------------------------ storm: children */

static void child_main(int i, int devnull)
{
	struct epoll_event ev = { .events = EPOLLOUT };
	char tag[8], b;
	int d, ep;

	alarm(CHILD_ALARM_S);
	/* a prefork child drops the connections it does not serve */
	close(stream_pair.c);
	close(stream_pair.s);
	close(ping_pair.c);
	close(ping_pair.s);
	d = dup(spare_pair.c);
	if (d < 0)
		_exit(10);
	if (dup2(devnull, d) != d) /* onto an SMC fd */
		_exit(11);
	if (close(d) < 0)
		_exit(12);
	snprintf(tag, sizeof(tag), "%07u", (unsigned)i % 10000000u);
	if (send(spare_pair.c, tag, 8, MSG_DONTWAIT | MSG_NOSIGNAL) != 8)
		_exit(13);
	if (recv(spare_pair.c, &b, 1, MSG_DONTWAIT) != -1 || (errno != EAGAIN && errno != EWOULDBLOCK))
		_exit(14);
	ep = epoll_create1(0);
	ev.data.fd = spare_pair.c;
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, spare_pair.c, &ev) < 0)
		_exit(15);
	if (epoll_wait(ep, &ev, 1, 5000) != 1 || !(ev.events & EPOLLOUT))
		_exit(16);
	_exit(0);
}

/* The child's 8 bytes at the spare connection's other end. */
static bool read_child_tag(int i)
{
	char want[8], got[8];
	size_t have = 0;
	uint64_t end = now_ms() + IO_TIMEOUT_MS;

	snprintf(want, sizeof(want), "%07u", (unsigned)i % 10000000u);
	while (have < sizeof(got)) {
		struct pollfd p = { .fd = spare_pair.s, .events = POLLIN };
		ssize_t n;

		if (now_ms() >= end || poll(&p, 1, 100) < 0)
			break;
		n = recv(spare_pair.s, got + have, sizeof(got) - have, MSG_DONTWAIT);
		if (n > 0)
			have += (size_t)n;
		else if (n == 0)
			break;
	}
	if (have != sizeof(got) || memcmp(got, want, sizeof(got)) != 0) {
		FAIL("child %d: its 8 bytes did not arrive (%zu bytes)", i, have);
		return false;
	}
	return true;
}

static bool wait_child(pid_t pid, int i)
{
	uint64_t end = now_ms() + CHILD_WAIT_MS;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			FAIL("child %d: waitpid: %s", i, strerror(errno));
			return false;
		}
		if (now_ms() >= end) {
			char path[64], wchan[64] = "?";
			FILE *f;

			snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
			f = fopen(path, "re");
			if (f) {
				if (!fgets(wchan, sizeof(wchan), f))
					strcpy(wchan, "?");
				fclose(f);
			}
			FAIL("child %d (pid %d) hangs after %d ms (wchan %s)", i, (int)pid,
			     CHILD_WAIT_MS, wchan);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return false;
		}
		sleep_ms(1);
	}
	if (WIFSIGNALED(st)) {
		FAIL("child %d: killed by signal %d%s", i, WTERMSIG(st),
		     WTERMSIG(st) == SIGALRM ? " (its alarm: it hung)" : "");
		return false;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		FAIL("child %d: exit status %d (see child_main)", i, WEXITSTATUS(st));
		return false;
	}
	return true;
}

static int storm(long forks, bool churn)
{
	pthread_t th[7];
	void *(*fns[7])(void *) = { stream_writer, stream_reader, ping_thread, pong_thread,
				    dup_thread, accept_thread, churn_thread };
	struct resources base, now;
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	uint64_t t0;
	long done = 0;

	listen_fd = listen_any(0, &listen_port);
	if (listen_fd < 0 || devnull < 0 ||
	    make_pair(listen_fd, listen_port, &stream_pair.c, &stream_pair.s) < 0 ||
	    make_pair(listen_fd, listen_port, &ping_pair.c, &ping_pair.s) < 0 ||
	    make_pair(listen_fd, listen_port, &spare_pair.c, &spare_pair.s) < 0) {
		fprintf(stderr, "FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	/* whatever the library sets up lazily exists before the baseline */
	{
		char b = 0;

		if (send_all(spare_pair.c, &b, 1) < 0 || recv_all(spare_pair.s, &b, 1) != 1) {
			fprintf(stderr, "FAIL setup: spare connection: %s\n", strerror(errno));
			return 1;
		}
	}
	for (int i = 0; i < (churn ? 7 : 5); i++)
		if (pthread_create(&th[i], NULL, fns[i], NULL) != 0) {
			fprintf(stderr, "FAIL pthread_create\n");
			return 1;
		}
	sleep_ms(100); /* every thread busy, a few churn handshakes done */
	count_resources(&base);
	t0 = now_ms();
	for (long i = 0; i < forks && atomic_load(&failures) == 0; i++) {
		pid_t pid = fork();

		if (pid == 0)
			child_main((int)i, devnull);
		if (pid < 0) {
			FAIL("fork %ld: %s", i, strerror(errno));
			break;
		}
		if (!wait_child(pid, (int)i) || !read_child_tag((int)i))
			break;
		done++;
	}
	printf("FORKS %ld of %ld in %llu ms\n", done, forks, (unsigned long long)(now_ms() - t0));
	atomic_store(&stop_churn, true);
	if (churn)
		pthread_join(th[6], NULL);
	atomic_store(&stop, true);
	for (int i = 0; i < (churn ? 6 : 5); i++)
		pthread_join(th[i], NULL);
	printf("STREAM sent=%llu received=%llu PINGS %llu CHURNS %llu DUPS %llu\n",
	       (unsigned long long)stream_sent, (unsigned long long)stream_received,
	       (unsigned long long)pings, (unsigned long long)churns, (unsigned long long)dups);
	if (stream_received != stream_sent)
		FAIL("stream: %llu bytes sent, %llu received", (unsigned long long)stream_sent,
		     (unsigned long long)stream_received);
	if (done != forks)
		FAIL("%ld of %ld forks completed", done, forks);
	if (!resources_settle(&base, &now))
		FAIL("LEAK fds %ld -> %ld, memfds %ld -> %ld, memfd mappings %ld -> %ld", base.fds,
		     now.fds, base.memfds, now.memfds, base.memfd_maps, now.memfd_maps);
	close(stream_pair.c);
	close(stream_pair.s);
	close(ping_pair.c);
	close(ping_pair.s);
	close(spare_pair.c);
	close(spare_pair.s);
	close(listen_fd);
	close(devnull);
	if (atomic_load(&failures))
		return 1;
	printf("OK storm\n");
	return 0;
}

/* ------------------------------------------------------------------ counts */

#define PARENT_BYTES_EACH 1000  /* P: sent by the parent on each of its connections */
#define CHILD_INHERITED_BYTES 777 /* J: sent by the child on an inherited connection */

static int send_pattern(int fd, size_t n)
{
	char buf[4096];

	memset(buf, 'p', sizeof(buf));
	while (n > 0) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);

		if (send_all(fd, buf, k) < 0)
			return -1;
		n -= k;
	}
	return 0;
}

/* A connection to the sink, its handshake over: the sink's first byte has arrived. */
static int sink_connect(const char *host, uint16_t port)
{
	int fd = connect_to(host, port);
	char b;

	if (fd >= 0 && recv_all(fd, &b, 1) != 1) {
		close(fd);
		return -1;
	}
	return fd;
}

static int counts(const char *host, uint16_t port, int n, int m, long k)
{
	int *fds = calloc((size_t)n, sizeof(int)), st;
	pid_t child;

	if (!fds || n < 1 || m < 1)
		return 2;
	for (int i = 0; i < n; i++) {
		fds[i] = sink_connect(host, port);
		if (fds[i] < 0 || send_pattern(fds[i], PARENT_BYTES_EACH) < 0) {
			fprintf(stderr, "FAIL parent connection %d: %s\n", i, strerror(errno));
			return 1;
		}
	}
	fflush(stdout);
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		int rc = 0;

		alarm(CHILD_ALARM_S * 3);
		for (int i = 0; i < m; i++) {
			int fd = sink_connect(host, port);
			long share = k / m + (i < k % m ? 1 : 0);

			if (fd < 0 || send_pattern(fd, (size_t)share) < 0) {
				fprintf(stderr, "FAIL child connection %d: %s\n", i, strerror(errno));
				rc = 1;
			}
			if (fd >= 0)
				close(fd);
		}
		/* an inherited connection: its bytes are the child's, the connection not */
		if (send_pattern(fds[0], CHILD_INHERITED_BYTES) < 0) {
			fprintf(stderr, "FAIL child on the inherited connection: %s\n", strerror(errno));
			rc = 1;
		}
		printf("CHILD pid=%d conns=%d bytes=%ld\n", (int)getpid(), m,
		       k + CHILD_INHERITED_BYTES);
		exit(rc); /* exit(), not _exit(): the stats file is written */
	}
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL child status %d\n", st);
		return 1;
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
	printf("PARENT pid=%d conns=%d bytes=%ld\n", (int)getpid(), n,
	       (long)n * PARENT_BYTES_EACH);
	return 0;
}

/* ------------------------------------------------------------------ sink */

static void *sink_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[65536] = { 0 };

	if (send_all(fd, buf, 1) < 0) { /* the client knows the handshake is over */
		close(fd);
		return NULL;
	}
	while (recv(fd, buf, sizeof(buf), 0) > 0)
		;
	close(fd);
	return NULL;
}

static volatile sig_atomic_t sink_stop;

static void on_term(int sig)
{
	(void)sig;
	sink_stop = 1;
}

static int sink(uint16_t port)
{
	struct sigaction sa = { .sa_handler = on_term };
	int lfd = listen_any(port, NULL);

	if (lfd < 0) {
		perror("listen");
		return 1;
	}
	sigaction(SIGTERM, &sa, NULL);
	printf("LISTENING %u\n", port);
	fflush(stdout);
	while (!sink_stop) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		pthread_t t;
		int fd;

		if (poll(&p, 1, 100) != 1)
			continue;
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (pthread_create(&t, NULL, sink_conn, (void *)(intptr_t)fd) != 0)
			close(fd);
		else
			pthread_detach(t);
	}
	close(lfd);
	sleep_ms(200); /* the last readers finish */
	return 0;
}

/* ------------------------------------------------------------------ orphan */

static int orphan(void)
{
	static const char staged[] = "staged by the parent before the fork";
	char buf[256];
	uint16_t port;
	int lfd = listen_any(0, &port), c, s, st, n = 0;
	pid_t child;

	if (lfd < 0 || (c = connect_to("127.0.0.1", port)) < 0) {
		fprintf(stderr, "FAIL orphan setup: %s\n", strerror(errno));
		return 1;
	}
	if (send_all(c, staged, sizeof(staged)) < 0) {
		fprintf(stderr, "FAIL orphan: staging send: %s\n", strerror(errno));
		return 1;
	}
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		struct pollfd p = { .fd = c, .events = POLLOUT };

		alarm(CHILD_ALARM_S);
		if (send(c, "x", 1, MSG_NOSIGNAL) != 1)
			_exit(20); /* refused, or staged where nobody sends it */
		if (poll(&p, 1, 5000) != 1 || !(p.revents & POLLOUT))
			_exit(22); /* poll must not wait for a decision */
		close(c);
		_exit(0);
	}
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "FAIL orphan child: status %d (see orphan())\n",
			WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
		return 1;
	}
	s = accept(lfd, NULL, NULL);
	if (s < 0)
		return 1;
	shutdown(c, SHUT_WR);
	for (;;) {
		ssize_t k = recv(s, buf + n, sizeof(buf) - (size_t)n, 0);

		if (k <= 0)
			break;
		n += (int)k;
		if (n == (int)sizeof(buf))
			break;
	}
	if (n != (int)sizeof(staged) + 1 || memcmp(buf, staged, sizeof(staged)) != 0 ||
	    buf[sizeof(staged)] != 'x') {
		fprintf(stderr, "FAIL orphan: the server end read %d bytes, not the %zu staged "
			"once and the child's one\n", n, sizeof(staged));
		return 1;
	}
	close(s);
	close(c);
	close(lfd);
	printf("OK orphan\n");
	return 0;
}

/* ------------------------------------------------------------------ main */

static long arg_long(int argc, char **argv, const char *name, long def)
{
	for (int i = 0; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return strtol(argv[i + 1], NULL, 10);
	return def;
}

static bool arg_flag(int argc, char **argv, const char *name)
{
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && strcmp(argv[1], "storm") == 0)
		return storm(arg_long(argc, argv, "--forks", 1000), !arg_flag(argc, argv, "--no-churn"));
	if (argc >= 4 && strcmp(argv[1], "counts") == 0)
		return counts(argv[2], (uint16_t)atoi(argv[3]), (int)arg_long(argc, argv, "--conns", 4),
			      (int)arg_long(argc, argv, "--child-conns", 3),
			      arg_long(argc, argv, "--bytes", 100000));
	if (argc >= 2 && strcmp(argv[1], "orphan") == 0)
		return orphan();
	if (argc >= 3 && strcmp(argv[1], "sink") == 0)
		return sink((uint16_t)atoi(argv[2]));
	fprintf(stderr, "usage: smc_fork storm [--forks N] [--no-churn] | counts HOST PORT [--conns N] "
		"[--child-conns M] [--bytes K] | orphan | sink PORT\n");
	return 2;
}
