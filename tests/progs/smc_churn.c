/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * smc_churn: connection churn and resource-leak test.
 *
 *   smc_churn server PORT [--bind ADDR] [--mode epoll|thread] [--report] [--count K] [--fork]
 *   smc_churn client HOST PORT [--threads T] [--cycles N] [--warmup W] [--settle]
 *                              [--connect-twice]
 *   both: [--maps-slack M] (default MAPS_SLACK)
 *
 * One cycle: connect, send a 64-byte request, receive the 64-byte response (the request
 * transformed, so it is checked), close. Odd cycles half-close first (shutdown(SHUT_WR))
 * and wait for the server's EOF, even cycles close at once: both endings are common.
 * The server reads the request, writes the response, waits for EOF, closes.
 *
 * Leak accounting, in each process: open fds (/proc/self/fd), memfds among them, memfd
 * mappings and all mappings (/proc/self/maps).
 *  - client: every thread runs W warm-up cycles (so whatever the library sets up lazily,
 *    the progress thread, its fds, per-thread state, a connection pool, exists), all
 *    threads wait on a barrier while the main thread counts; with --settle the warm-up
 *    repeats until two counts in a row agree (a pool is asked for by one connection and set up
 *    when the server accepts it, which a loaded machine may delay past a round); that
 *    count is the baseline. Then the N cycles run (split over the threads), the
 *    threads are joined and the counts are taken again.
 *  - server (--report): SIGUSR1 records the baseline, SIGTERM (or the K-th finished
 *    connection with --count K) prints the final counts; both wait until no connection
 *    is open. The test runs a short client first so the baseline comes after warm-up.
 * Rules: fds, memfds and memfd mappings must come back exactly to the baseline. The total
 * mapping count may grow by at most MAPS_SLACK: glibc malloc arenas and their heaps grow
 * and split mappings, and cached thread stacks come and go; none of that is per
 * connection, whereas one leaked mapping per connection would show up as thousands.
 * The thread-per-connection server adds, on top of that, what its thread churn may
 * legitimately leave behind: glibc caches the stacks of finished threads (2 mappings
 * each: stack and guard page, at most one per thread that was alive at the same time)
 * and creates up to 8 malloc arenas per CPU (2 mappings each: used part and reserve).
 * Under AddressSanitizer its allocator and per-thread state add a few dozen mappings
 * more over a run, hence --maps-slack.
 * Resources freed asynchronously (by a library thread after close) are given up to
 * SETTLE_MS to come back before a leak is declared.
 *
 * --connect-twice: the client connects as APR does (ab, Apache's proxy): a nonblocking
 * connect(), poll for POLLOUT, then connect() again for the result (0 or EISCONN).
 *
 * --fork: right after listening the server forks a child that exits at once (as redis
 * forks to save): a server that forked since it listens serves no connection pool
 * (core/shm/pool.h). --fork-first: the same fork before it listens (as the Erlang VM forks
 * its helper at boot): its listener serves pools.
 *
 * Failed cycles are counted by kind on the client's RESULT line: lost= (the response did
 * not arrive within the socket's SO_RCVTIMEO, IO_TIMEOUT_S), reset= (ECONNRESET or
 * EPIPE at any step) and errors= (every failed cycle, these included). Each of the first
 * MAX_PRINTED_ERRORS is described with what identifies its connection: the client's
 * port, the TCP state, and how long the cycle had run.
 *
 * Exit status 0 only when no cycle failed and nothing leaked.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, ppoll; the build passes -D_GNU_SOURCE */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MSG_LEN 64
#define MAPS_SLACK 16
static long maps_slack = MAPS_SLACK;
/* Extra mappings allowed for thread churn (server thread mode), see above. */
static long thread_slack;
#define SETTLE_MS 2000
/* Warm-up rounds the client runs at most for its counts to settle. */
#define WARMUP_ROUNDS_MAX 20
#define IO_TIMEOUT_S 10
#define MAX_PRINTED_ERRORS 10

/* ------------------------------------------------------------------ resource counts */

struct resources {
	long fds;
	long memfds;
	long memfd_maps;
	long maps;
};

static void count_fds(struct resources *r)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char link[PATH_MAX], target[PATH_MAX];

	r->fds = r->memfds = 0;
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		r->fds++;
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			if (strstr(target, "memfd:"))
				r->memfds++;
		}
	}
	closedir(d);
}

static void count_maps(struct resources *r)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4096];

	r->maps = r->memfd_maps = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		r->maps++;
		if (strstr(line, "/memfd:"))
			r->memfd_maps++;
	}
	fclose(f);
}

static void count_resources(struct resources *r)
{
	count_fds(r);
	count_maps(r);
}

/* The per-connection kinds differ (the mapping count moves with malloc and threads). */
static bool resources_changed(const struct resources *a, const struct resources *b)
{
	return a->fds != b->fds || a->memfds != b->memfds || a->memfd_maps != b->memfd_maps;
}

static bool resources_back(const struct resources *base, const struct resources *now)
{
	return now->fds <= base->fds && now->memfds <= base->memfds &&
	       now->memfd_maps <= base->memfd_maps &&
	       now->maps <= base->maps + maps_slack + thread_slack;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Counts again until they are back to the baseline or SETTLE_MS passed. */
static void count_settled(const struct resources *base, struct resources *now)
{
	for (long waited = 0;; waited += 50) {
		count_resources(now);
		if (resources_back(base, now) || waited >= SETTLE_MS)
			return;
		sleep_ms(50);
	}
}

static void print_resources(const char *who, const char *phase, const struct resources *r)
{
	printf("RESOURCES %s %s fds=%ld memfds=%ld memfd_maps=%ld maps=%ld\n",
	       who, phase, r->fds, r->memfds, r->memfd_maps, r->maps);
}

/* Prints one line per leaked resource kind; true when nothing leaked. */
static bool report_leaks(const char *who, const struct resources *b, const struct resources *a)
{
	bool ok = true;

	if (a->fds > b->fds) {
		printf("LEAK %s fds %ld -> %ld\n", who, b->fds, a->fds);
		ok = false;
	}
	if (a->memfds > b->memfds) {
		printf("LEAK %s memfds %ld -> %ld\n", who, b->memfds, a->memfds);
		ok = false;
	}
	if (a->memfd_maps > b->memfd_maps) {
		printf("LEAK %s memfd mappings %ld -> %ld\n", who, b->memfd_maps, a->memfd_maps);
		ok = false;
	}
	if (a->maps > b->maps + maps_slack + thread_slack) {
		printf("LEAK %s mappings %ld -> %ld (allowed growth %ld + %ld for thread churn)\n",
		       who, b->maps, a->maps, maps_slack, thread_slack);
		ok = false;
	}
	return ok;
}

/* ------------------------------------------------------------------ protocol */

static void make_request(unsigned char *req, uint64_t id)
{
	for (int i = 0; i < MSG_LEN; i++)
		req[i] = (unsigned char)((id >> (8 * (i % 8))) + (unsigned)i * 7u);
}

static void make_response(const unsigned char *req, unsigned char *resp)
{
	for (int i = 0; i < MSG_LEN; i++)
		resp[i] = (unsigned char)(req[i] ^ 0x5A ^ i);
}

/* ------------------------------------------------------------------ client */

struct client_opts {
	const char *host;
	const char *port;
	unsigned threads;
	unsigned long cycles;
	unsigned warmup;
	bool settle;       /* repeat the warm-up until the counts settle */
	bool connect_twice;
};

struct client_shared {
	const struct client_opts *o;
	struct addrinfo *addr;
	pthread_barrier_t warmed_up;
	pthread_barrier_t go;
	bool warm;           /* the baseline is taken: the cycles start (set before go) */
	atomic_ulong errors;
	atomic_ulong lost;   /* no response within IO_TIMEOUT_S */
	atomic_ulong resets; /* ECONNRESET / EPIPE */
	atomic_ulong done;
	atomic_uint printed;
};

struct client_thread {
	struct client_shared *sh;
	unsigned index;
	unsigned long cycles;
	pthread_t tid;
};

static const char *tcp_state_name(int fd)
{
	static const char *const names[] = {
		[TCP_ESTABLISHED] = "ESTABLISHED", [TCP_SYN_SENT] = "SYN_SENT",
		[TCP_SYN_RECV] = "SYN_RECV", [TCP_FIN_WAIT1] = "FIN_WAIT1",
		[TCP_FIN_WAIT2] = "FIN_WAIT2", [TCP_TIME_WAIT] = "TIME_WAIT",
		[TCP_CLOSE] = "CLOSE", [TCP_CLOSE_WAIT] = "CLOSE_WAIT",
		[TCP_LAST_ACK] = "LAST_ACK", [TCP_LISTEN] = "LISTEN", [TCP_CLOSING] = "CLOSING",
	};
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return "?";
	return ti.tcpi_state < sizeof(names) / sizeof(names[0]) && names[ti.tcpi_state]
		       ? names[ti.tcpi_state] : "?";
}

static int local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					      : ((struct sockaddr_in *)&ss)->sin_port);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* A failed cycle: counted by kind and, for the first few, described with what tells its
 * connection apart (port, TCP state, time into the cycle). */
static void client_error(struct client_shared *sh, uint64_t id, const char *what, int err,
			 int fd, const struct timespec *t0)
{
	bool lost = err == EAGAIN || err == EWOULDBLOCK;

	atomic_fetch_add(&sh->errors, 1);
	if (err == ECONNRESET || err == EPIPE)
		atomic_fetch_add(&sh->resets, 1);
	if (lost && strcmp(what, "receive response") == 0)
		atomic_fetch_add(&sh->lost, 1);
	if (atomic_fetch_add(&sh->printed, 1) < MAX_PRINTED_ERRORS)
		printf("ERROR client cycle=%" PRIx64 ": %s%s%s (port %d, tcp %s, %.1f ms into "
		       "the cycle)\n", id, what, err ? ": " : "", err ? strerror(err) : "",
		       local_port(fd), tcp_state_name(fd), ms_since(t0));
}

static bool io_full(int fd, unsigned char *buf, size_t len, bool writing)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = writing ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
				    : recv(fd, buf + done, len - done, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = 0;
			return false;
		}
		done += (size_t)n;
	}
	return true;
}

/* A nonblocking connect(), then connect() again once the socket is writable; the socket
 * is blocking again afterwards. */
static bool connect_twice(int fd, const struct addrinfo *ai)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int fl = fcntl(fd, F_GETFL), r;

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return false;
	r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	if (r < 0 && errno != EINPROGRESS)
		return false;
	if (r < 0) {
		while ((r = poll(&pfd, 1, IO_TIMEOUT_S * 1000)) < 0 && errno == EINTR)
			;
		if (r == 0)
			errno = ETIMEDOUT;
		if (r != 1)
			return false;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EISCONN)
		return false;
	return fcntl(fd, F_SETFL, fl) == 0;
}

/* One connect/request/response/close cycle; errors are counted and described. */
static void client_cycle(struct client_shared *sh, uint64_t id)
{
	const struct addrinfo *ai = sh->addr;
	unsigned char req[MSG_LEN], resp[MSG_LEN], want[MSG_LEN];
	struct timeval tv = { IO_TIMEOUT_S, 0 };
	struct timespec t0;
	int fd;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		client_error(sh, id, "socket", errno, -1, &t0);
		return;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (sh->o->connect_twice ? !connect_twice(fd, ai) : connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		client_error(sh, id, "connect", errno, fd, &t0);
		goto out;
	}
	make_request(req, id);
	if (!io_full(fd, req, MSG_LEN, true)) {
		client_error(sh, id, "send request", errno, fd, &t0);
		goto out;
	}
	if (!io_full(fd, resp, MSG_LEN, false)) {
		client_error(sh, id, errno ? "receive response" : "EOF before full response", errno,
			     fd, &t0);
		goto out;
	}
	make_response(req, want);
	if (memcmp(resp, want, MSG_LEN) != 0) {
		client_error(sh, id, "wrong response bytes", 0, fd, &t0);
		goto out;
	}
	if (id & 1) {
		/* Half close, then the server's close must arrive as EOF. */
		ssize_t n;
		if (shutdown(fd, SHUT_WR) < 0) {
			client_error(sh, id, "shutdown(SHUT_WR)", errno, fd, &t0);
			goto out;
		}
		do
			n = recv(fd, resp, 1, 0);
		while (n < 0 && errno == EINTR);
		if (n != 0)
			client_error(sh, id, n > 0 ? "data instead of EOF" : "waiting for EOF",
				     n > 0 ? 0 : errno, fd, &t0);
	}
out:
	if (close(fd) < 0)
		client_error(sh, id, "close", errno, -1, &t0);
	atomic_fetch_add(&sh->done, 1);
}

static void *client_thread_main(void *arg)
{
	struct client_thread *t = arg;
	struct client_shared *sh = t->sh;
	uint64_t base = (uint64_t)t->index << 32;

	for (unsigned round = 0; !sh->warm; round++) {
		for (unsigned i = 0; i < sh->o->warmup; i++)
			client_cycle(sh, base | (0x80000000u + round * sh->o->warmup + i));
		pthread_barrier_wait(&sh->warmed_up);
		pthread_barrier_wait(&sh->go);
	}
	for (unsigned long i = 0; i < t->cycles; i++)
		client_cycle(sh, base | i);
	return NULL;
}

static struct addrinfo *resolve(const char *host, const char *port, bool passive)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = passive ? AI_PASSIVE : 0 };
	struct addrinfo *res = NULL;
	int err = getaddrinfo(host, port, &hints, &res);

	if (err) {
		fprintf(stderr, "smc_churn: %s:%s: %s\n", host ? host : "*", port, gai_strerror(err));
		return NULL;
	}
	return res;
}

static int run_client(const struct client_opts *o)
{
	struct client_shared sh = { .o = o };
	struct client_thread *th = calloc(o->threads, sizeof(*th));
	struct resources before = { 0 }, after;
	unsigned started = 0;

	sh.addr = resolve(o->host, o->port, false);
	if (!sh.addr || !th)
		return 1;
	pthread_barrier_init(&sh.warmed_up, NULL, o->threads + 1);
	pthread_barrier_init(&sh.go, NULL, o->threads + 1);
	for (unsigned i = 0; i < o->threads; i++) {
		th[i] = (struct client_thread){ .sh = &sh, .index = i,
						.cycles = o->cycles / o->threads +
							  (i < o->cycles % o->threads) };
		int err = pthread_create(&th[i].tid, NULL, client_thread_main, &th[i]);
		if (err) {
			/* The barriers count on every thread: nothing sensible to continue. */
			fprintf(stderr, "smc_churn: pthread_create: %s\n", strerror(err));
			exit(1);
		}
		started++;
	}
	for (unsigned round = 1;; round++) {
		struct resources prev;

		pthread_barrier_wait(&sh.warmed_up);
		prev = before;
		count_resources(&before);
		if (!o->settle || (round > 1 && (!resources_changed(&prev, &before) ||
						 round >= WARMUP_ROUNDS_MAX))) {
			if (round >= WARMUP_ROUNDS_MAX)
				printf("NOTE client: counts still changing after %u warm-up rounds\n",
				       round);
			sh.warm = true;
			break;
		}
		pthread_barrier_wait(&sh.go);
	}
	unsigned long warmup_errors = atomic_load(&sh.errors);
	unsigned warmup_cycles = (unsigned)(atomic_load(&sh.done));
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_barrier_wait(&sh.go);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i].tid, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	count_settled(&before, &after);

	unsigned long errors = atomic_load(&sh.errors);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	print_resources("client", "before", &before);
	print_resources("client", "after", &after);
	printf("RESULT client threads=%u cycles=%lu warmup_cycles=%lu errors=%lu "
	       "(warmup %lu) lost=%lu reset=%lu seconds=%.3f cycles_per_s=%.0f\n",
	       o->threads, o->cycles, (unsigned long)warmup_cycles, errors,
	       warmup_errors, atomic_load(&sh.lost), atomic_load(&sh.resets), secs,
	       secs > 0 ? (double)o->cycles / secs : 0.0);
	bool ok = report_leaks("client", &before, &after) && errors == 0 &&
		  atomic_load(&sh.done) == o->cycles + (unsigned long)warmup_cycles;
	printf("%s client\n", ok ? "OK" : "FAILED");
	freeaddrinfo(sh.addr);
	free(th);
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------------ server */

struct server_opts {
	const char *bind_addr;
	const char *port;
	bool thread_mode;
	bool report;
	bool fork_once;
	bool fork_first;
	unsigned long count;
};

static volatile sig_atomic_t got_term, got_usr1;
static atomic_ulong srv_open, srv_finished, srv_errors, srv_peak_threads;
static atomic_uint srv_printed;

static void on_signal(int sig)
{
	if (sig == SIGTERM || sig == SIGINT)
		got_term = 1;
	else
		got_usr1 = 1;
}

static void server_error(const char *what, int err)
{
	atomic_fetch_add(&srv_errors, 1);
	if (atomic_fetch_add(&srv_printed, 1) < MAX_PRINTED_ERRORS)
		printf("ERROR server: %s%s%s\n", what, err ? ": " : "", err ? strerror(err) : "");
}

static int listen_on(const struct server_opts *o)
{
	struct addrinfo *ai = resolve(o->bind_addr, o->port, true);
	int one = 1;

	if (!ai)
		return -1;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
		fprintf(stderr, "smc_churn: listen on %s:%s: %s\n",
			o->bind_addr ? o->bind_addr : "*", o->port, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

/* Server-side report state: baseline (first report) and the verdict of the last. */
static struct resources srv_base;
static bool srv_have_base, srv_leaked;

static void server_report(bool final)
{
	struct resources now;
	const char *phase = final ? "final" : "baseline";

	if (final && atomic_load(&srv_peak_threads)) {
		long cpus = sysconf(_SC_NPROCESSORS_CONF);
		thread_slack = 2 * (long)atomic_load(&srv_peak_threads) + 2 * 8 * (cpus > 0 ? cpus : 1);
	}
	if (final && srv_have_base)
		count_settled(&srv_base, &now);
	else
		count_resources(&now);
	if (final && !srv_have_base)
		printf("NOTE server: final report without a baseline (no SIGUSR1 before)\n");
	printf("REPORT server phase=%s finished=%lu open=%lu errors=%lu peak_threads=%lu "
	       "maps_allowed_growth=%ld\n", phase, atomic_load(&srv_finished),
	       atomic_load(&srv_open), atomic_load(&srv_errors), atomic_load(&srv_peak_threads),
	       maps_slack + thread_slack);
	print_resources("server", phase, &now);
	if (final && srv_have_base) {
		srv_leaked = !report_leaks("server", &srv_base, &now);
	} else if (!srv_have_base) {
		srv_base = now;
		srv_have_base = true;
	}
	fflush(stdout);
}

/* A report waits until no connection is open, up to this long; then it goes anyway and
 * the open connections count as a failure. */
#define REPORT_WAIT_MS 5000

/* Called from the server loop about every 100 ms and after each event: handles signals
 * and --count. Returns true when the server should stop. */
static bool server_housekeeping(const struct server_opts *o, long *report_waited_ms)
{
	bool want_final = got_term || (o->count && atomic_load(&srv_finished) >= o->count);
	bool want_report = want_final || got_usr1;

	if (!want_report) {
		*report_waited_ms = 0;
		return false;
	}
	if (atomic_load(&srv_open) > 0 && *report_waited_ms < REPORT_WAIT_MS)
		return false; /* caller comes back after the next event or tick */
	if (atomic_load(&srv_open) > 0) {
		printf("ERROR server: %lu connections still open after %d ms\n",
		       atomic_load(&srv_open), REPORT_WAIT_MS);
		atomic_fetch_add(&srv_errors, 1);
	}
	*report_waited_ms = 0;
	if (o->report)
		server_report(want_final);
	got_usr1 = 0;
	return want_final;
}

/* ---- epoll server: one thread, nonblocking sockets, per-connection state machine */

enum conn_phase { READ_REQUEST, WRITE_RESPONSE, WAIT_EOF };

struct srv_conn {
	enum conn_phase phase;
	size_t done;
	unsigned char req[MSG_LEN];
	unsigned char resp[MSG_LEN];
};

struct conn_table {
	struct srv_conn **by_fd;
	size_t size;
};

static struct srv_conn **conn_slot(struct conn_table *t, int fd)
{
	if ((size_t)fd >= t->size) {
		size_t n = t->size ? t->size : 256;
		while (n <= (size_t)fd)
			n *= 2;
		struct srv_conn **p = realloc(t->by_fd, n * sizeof(*p));
		if (!p)
			return NULL;
		memset(p + t->size, 0, (n - t->size) * sizeof(*p));
		t->by_fd = p;
		t->size = n;
	}
	return &t->by_fd[fd];
}

static void epoll_conn_close(struct conn_table *t, int epfd, int fd)
{
	struct srv_conn **slot = conn_slot(t, fd);

	epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	free(*slot);
	*slot = NULL;
	atomic_fetch_sub(&srv_open, 1);
	atomic_fetch_add(&srv_finished, 1);
}

static bool epoll_interest(int epfd, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };

	if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
		return true;
	server_error("epoll_ctl(MOD)", errno);
	return false;
}

/* Advances one connection as far as it goes without blocking; false = close it. */
static bool epoll_conn_step(struct srv_conn *c, int fd, int epfd)
{
	for (;;) {
		ssize_t n;
		switch (c->phase) {
		case READ_REQUEST:
			n = recv(fd, c->req + c->done, MSG_LEN - c->done, 0);
			if (n == 0) {
				server_error("EOF before full request", 0);
				return false;
			}
			break;
		case WRITE_RESPONSE:
			n = send(fd, c->resp + c->done, MSG_LEN - c->done, MSG_NOSIGNAL);
			break;
		default: {
			unsigned char extra;
			n = recv(fd, &extra, 1, 0);
			if (n == 0)
				return false; /* the normal end */
			if (n > 0) {
				server_error("data after the request", 0);
				return false;
			}
			break;
		}
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			if (c->phase != WRITE_RESPONSE)
				return true;
			/* Come back when there is room for the rest of the response. */
			return epoll_interest(epfd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
		}
		/* a connection reset before its request (by its client in the accept queue,
		 * or by the library when its negotiation failed) is TCP's to report, and not
		 * this server's error: the client's side counts what it lost */
		if (n < 0 && errno == ECONNRESET && c->phase == READ_REQUEST && c->done == 0)
			return false;
		if (n < 0) {
			server_error(c->phase == WRITE_RESPONSE ? "send response" : "recv", errno);
			return false;
		}
		c->done += (size_t)n;
		if (c->done < MSG_LEN)
			continue;
		c->done = 0;
		if (c->phase == READ_REQUEST) {
			make_response(c->req, c->resp);
			c->phase = WRITE_RESPONSE;
		} else {
			c->phase = WAIT_EOF;
			if (!epoll_interest(epfd, fd, EPOLLIN | EPOLLRDHUP))
				return false;
		}
	}
}

static void epoll_accept_all(struct conn_table *t, int lfd, int epfd)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				server_error("accept4", errno);
			return;
		}
		struct srv_conn **slot = conn_slot(t, fd);
		struct srv_conn *c = calloc(1, sizeof(*c));
		/* Level-triggered; EPOLLOUT is added only if a response does not fit at once. */
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = fd };
		if (!slot || !c || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			server_error("registering a connection", errno);
			free(c);
			close(fd);
			continue;
		}
		*slot = c;
		atomic_fetch_add(&srv_open, 1);
	}
}

static int run_server_epoll(const struct server_opts *o, int lfd, const sigset_t *waitmask)
{
	struct conn_table table = { 0 };
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
	long waited = 0;

	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) < 0) {
		perror("smc_churn: epoll");
		return 1;
	}
	while (!server_housekeeping(o, &waited)) {
		struct epoll_event evs[64];
		int n = epoll_pwait(epfd, evs, 64, 100, waitmask);
		if (n < 0 && errno != EINTR) {
			server_error("epoll_pwait", errno);
			break;
		}
		if (n <= 0) {
			waited += 100;
			continue;
		}
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == lfd) {
				epoll_accept_all(&table, lfd, epfd);
				continue;
			}
			struct srv_conn **slot = conn_slot(&table, fd);
			if (!slot || !*slot)
				continue;
			if (!epoll_conn_step(*slot, fd, epfd))
				epoll_conn_close(&table, epfd, fd);
		}
	}
	for (size_t fd = 0; fd < table.size; fd++)
		if (table.by_fd[fd])
			epoll_conn_close(&table, epfd, (int)fd);
	free(table.by_fd);
	close(epfd);
	return 0;
}

/* ---- thread server: blocking sockets, one detached thread per connection */

static void *serve_blocking(void *arg)
{
	int fd = (int)(intptr_t)arg;
	unsigned char req[MSG_LEN], resp[MSG_LEN];
	struct timeval tv = { IO_TIMEOUT_S, 0 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!io_full(fd, req, MSG_LEN, false)) {
		/* reset before or during its request: TCP's to report (see epoll_conn_step) */
		if (errno != ECONNRESET)
			server_error(errno ? "recv request" : "EOF before full request", errno);
	} else {
		make_response(req, resp);
		if (!io_full(fd, resp, MSG_LEN, true)) {
			server_error("send response", errno);
		} else {
			ssize_t n;
			do
				n = recv(fd, req, 1, 0);
			while (n < 0 && errno == EINTR);
			if (n != 0)
				server_error(n > 0 ? "data after the request" : "waiting for EOF",
					     n > 0 ? 0 : errno);
		}
	}
	close(fd);
	atomic_fetch_sub(&srv_open, 1);
	atomic_fetch_add(&srv_finished, 1);
	return NULL;
}

static int run_server_threads(const struct server_opts *o, int lfd, const sigset_t *waitmask)
{
	pthread_attr_t attr;
	long waited = 0;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	while (!server_housekeeping(o, &waited)) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		struct timespec tick = { 0, 100 * 1000000L };
		int n = ppoll(&pfd, 1, &tick, waitmask);
		if (n <= 0) {
			if (n < 0 && errno != EINTR)
				server_error("ppoll", errno);
			waited += 100;
			continue;
		}
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				server_error("accept4", errno);
			continue;
		}
		pthread_t tid;
		unsigned long live = atomic_fetch_add(&srv_open, 1) + 1;
		unsigned long peak = atomic_load(&srv_peak_threads);
		while (live > peak && !atomic_compare_exchange_weak(&srv_peak_threads, &peak, live))
			;
		int err = pthread_create(&tid, &attr, serve_blocking, (void *)(intptr_t)fd);
		if (err) {
			server_error("pthread_create", err);
			close(fd);
			atomic_fetch_sub(&srv_open, 1);
		}
	}
	pthread_attr_destroy(&attr);
	/* Threads still serving (only after a report timeout) keep their fds; we exit. */
	return 0;
}

/* A child that exits at once (a save, a helper started at boot): 0, or -1. */
static int fork_child_that_exits(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, NULL, 0) != pid) {
		perror("fork");
		return -1;
	}
	return 0;
}

static int run_server(const struct server_opts *o)
{
	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: waits return EINTR */
	sigset_t block, waitmask;

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	/* Signals are only delivered inside epoll_pwait/ppoll (race-free flag checks), and
	 * never to the connection threads, which inherit the blocked mask. */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &block, &waitmask);
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGINT);
	sigdelset(&waitmask, SIGUSR1);

	if (o->fork_first && fork_child_that_exits() < 0)
		return 1;
	int lfd = listen_on(o);
	if (lfd < 0)
		return 1;
	if (o->fork_once && fork_child_that_exits() < 0)
		return 1;
	printf("LISTENING port=%s mode=%s\n", o->port, o->thread_mode ? "thread" : "epoll");
	int rc = o->thread_mode ? run_server_threads(o, lfd, &waitmask)
				: run_server_epoll(o, lfd, &waitmask);
	close(lfd);
	unsigned long errors = atomic_load(&srv_errors);
	printf("RESULT server connections=%lu errors=%lu\n", atomic_load(&srv_finished), errors);
	bool ok = rc == 0 && errors == 0 && !srv_leaked;
	printf("%s server\n", ok ? "OK" : "FAILED");
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------------ arguments */

static void usage(void)
{
	fprintf(stderr,
		"usage: smc_churn server PORT [--bind ADDR] [--mode epoll|thread] [--report] [--count K]\n"
		"                 [--fork | --fork-first]\n"
		"       smc_churn client HOST PORT [--threads T] [--cycles N] [--warmup W] [--settle]\n"
		"                 [--connect-twice]\n"
		"       both: [--maps-slack M]\n");
	exit(2);
}

static unsigned long parse_ulong(const char *s)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);

	if (errno || end == s || *end || *s == '-')
		usage();
	return v;
}

int main(int argc, char **argv)
{
	struct client_opts co = { .threads = 8, .cycles = 20000, .warmup = 4 };
	struct server_opts so = { 0 };
	bool server;
	int i = 2;

	if (argc < 3)
		usage();
	server = strcmp(argv[1], "server") == 0;
	if (!server && strcmp(argv[1], "client") != 0)
		usage();
	if (server) {
		so.port = argv[i++];
	} else {
		if (argc < 4)
			usage();
		co.host = argv[i++];
		co.port = argv[i++];
	}
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (server && strcmp(a, "--report") == 0) {
			so.report = true;
			continue;
		}
		if (server && strcmp(a, "--fork") == 0) {
			so.fork_once = true;
			continue;
		}
		if (server && strcmp(a, "--fork-first") == 0) {
			so.fork_first = true;
			continue;
		}
		if (!server && strcmp(a, "--connect-twice") == 0) {
			co.connect_twice = true;
			continue;
		}
		if (!server && strcmp(a, "--settle") == 0) {
			co.settle = true;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (strcmp(a, "--maps-slack") == 0)
			maps_slack = (long)parse_ulong(v);
		else if (server && strcmp(a, "--bind") == 0)
			so.bind_addr = v;
		else if (server && strcmp(a, "--mode") == 0 && strcmp(v, "thread") == 0)
			so.thread_mode = true;
		else if (server && strcmp(a, "--mode") == 0 && strcmp(v, "epoll") == 0)
			so.thread_mode = false;
		else if (server && strcmp(a, "--count") == 0)
			so.count = parse_ulong(v);
		else if (!server && strcmp(a, "--threads") == 0)
			co.threads = (unsigned)parse_ulong(v);
		else if (!server && strcmp(a, "--cycles") == 0)
			co.cycles = parse_ulong(v);
		else if (!server && strcmp(a, "--warmup") == 0)
			co.warmup = (unsigned)parse_ulong(v);
		else
			usage();
	}
	if (!server && (co.threads == 0 || co.threads > 1024))
		usage();
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return server ? run_server(&so) : run_client(&co);
}
