/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * fd_headroom: a program that grows its descriptors up to its limit while it keeps
 * connections open, for the rule of core/base/fd_budget.h.
 *
 *   fd_headroom server PORT [--bind ADDR]
 *   fd_headroom client HOST PORT --limit L [--margin M] [--every K] [--window W]
 *
 * The server echoes every byte it reads on every connection (poll loop) and closes a
 * connection at its EOF; SIGTERM ends it.
 *
 * The client sets its soft RLIMIT_NOFILE to L, then opens descriptors until it holds
 * L - M of its own (the ones it had at start included): every K-th is a connection to
 * the server (a 64-byte echo checked on it), the others plain sockets (socket(), never
 * connected). At most W connections stay open: the oldest is checked once more and
 * closed when a new one opens. Whatever it opens must succeed: an EMFILE on the way is
 * reported (`early=1`). Then it opens plain sockets until the kernel refuses one and
 * reports how many descriptors of its own it held then (`max=`): over TCP that is the
 * limit; under the library it may be less by what the library holds at that moment.
 * Finally every connection is checked and everything closed; the process's descriptor
 * count (/proc/self/fd) must come back to what it was after a first warm-up connection
 * (whatever the library creates lazily exists by then).
 *
 * Output: RESULT limit=L target=T reached=R early=0|1 max=X conns=C
 * Exit status 0 when the target was reached without EMFILE, every echo matched and no
 * descriptor was left behind.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG_LEN 64
#define MAX_WINDOW 64
#define SETTLE_MS 2000

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
			n++;
	closedir(d);
	return n - 1; /* the directory's own */
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ server */

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int serve(const char *port, const char *bind_addr)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *ai;
	struct pollfd *pfd;
	int lfd, one = 1, n = 1, cap = 1024;

	signal(SIGTERM, on_term);
	signal(SIGPIPE, SIG_IGN);
	if (getaddrinfo(bind_addr, port, &hints, &ai) != 0)
		return 2;
	lfd = socket(ai->ai_family, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(lfd, 128) < 0) {
		perror("server: listen");
		return 2;
	}
	freeaddrinfo(ai);
	pfd = calloc((size_t)cap, sizeof(*pfd));
	if (!pfd)
		return 2;
	pfd[0].fd = lfd;
	pfd[0].events = POLLIN;
	while (!stop) {
		if (poll(pfd, (nfds_t)n, 200) < 0) {
			if (errno == EINTR)
				continue;
			perror("server: poll");
			return 2;
		}
		for (int i = n - 1; i >= 1; i--) {
			char buf[4096];
			ssize_t r;

			if (!pfd[i].revents)
				continue;
			r = read(pfd[i].fd, buf, sizeof(buf));
			if (r > 0 && write(pfd[i].fd, buf, (size_t)r) == r)
				continue;
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			close(pfd[i].fd);
			pfd[i] = pfd[--n];
		}
		if (pfd[0].revents & POLLIN) {
			int cfd = accept(lfd, NULL, NULL);

			if (cfd < 0) {
				fprintf(stderr, "server: accept: %s\n", strerror(errno));
				continue;
			}
			if (n == cap) {
				fprintf(stderr, "server: too many connections\n");
				close(cfd);
				continue;
			}
			pfd[n].fd = cfd;
			pfd[n].events = POLLIN;
			pfd[n].revents = 0;
			n++;
		}
	}
	for (int i = 0; i < n; i++)
		close(pfd[i].fd);
	free(pfd);
	return 0;
}

/* ------------------------------------------------------------------ client */

static struct addrinfo *dst;
static unsigned seq;

/* A 64-byte echo on fd: 0, or -1 with a message. */
static int echo_check(int fd)
{
	char out[MSG_LEN], in[MSG_LEN];
	size_t got = 0;

	for (int i = 0; i < MSG_LEN; i++)
		out[i] = (char)('a' + (seq + (unsigned)i) % 26);
	seq++;
	if (send(fd, out, sizeof(out), MSG_NOSIGNAL) != (ssize_t)sizeof(out)) {
		fprintf(stderr, "client: send: %s\n", strerror(errno));
		return -1;
	}
	while (got < sizeof(in)) {
		ssize_t r = recv(fd, in + got, sizeof(in) - got, 0);

		if (r <= 0) {
			fprintf(stderr, "client: recv: %s\n", r == 0 ? "EOF" : strerror(errno));
			return -1;
		}
		got += (size_t)r;
	}
	if (memcmp(in, out, sizeof(in)) != 0) {
		fprintf(stderr, "client: echo differs\n");
		return -1;
	}
	return 0;
}

/* A checked connection, or -1 with errno (EMFILE when the kernel refused the socket). */
static int conn_open(void)
{
	int fd = socket(dst->ai_family, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, dst->ai_addr, dst->ai_addrlen) < 0) {
		int e = errno;

		fprintf(stderr, "client: connect: %s\n", strerror(e));
		close(fd);
		errno = e == EMFILE ? EMFILE : EIO;
		return -1;
	}
	if (echo_check(fd) < 0) {
		close(fd);
		errno = EIO;
		return -1;
	}
	return fd;
}

struct opts {
	long limit, margin, every, window;
};

static int client(const char *host, const char *port, const struct opts *o)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct rlimit rl;
	int *fds, nfds = 0, win[MAX_WINDOW], nwin = 0, conns = 0, fd, start, baseline, now;
	long target, held, max_held;
	bool early = false, failed = false;

	if (getaddrinfo(host, port, &hints, &dst) != 0) {
		fprintf(stderr, "client: cannot resolve %s\n", host);
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || (rlim_t)o->limit > rl.rlim_max) {
		fprintf(stderr, "client: the hard limit is below %ld\n", o->limit);
		return 2;
	}
	start = count_fds();
	/* warm-up: whatever the library creates at its first connection */
	fd = conn_open();
	if (fd < 0)
		return 2;
	close(fd);
	sleep_ms(100);
	baseline = count_fds();
	rl.rlim_cur = (rlim_t)o->limit;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		perror("client: setrlimit");
		return 2;
	}
	fds = calloc((size_t)o->limit, sizeof(*fds));
	if (!fds)
		return 2;
	/* the program's own descriptors: those it had at start and those it opened */
	target = o->limit - o->margin;
	held = start;
	for (long i = 1; held < target; i++) {
		if (i % o->every == 0) {
			fd = conn_open();
			if (fd < 0) {
				if (errno == EMFILE)
					early = true;
				else
					failed = true;
				break;
			}
			conns++;
			held++;
			if (nwin == o->window) {
				if (echo_check(win[0]) < 0)
					failed = true;
				close(win[0]);
				held--;
				memmove(win, win + 1, sizeof(win[0]) * (size_t)(nwin - 1));
				nwin--;
			}
			win[nwin++] = fd;
		} else {
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (fd < 0) {
				fprintf(stderr, "client: socket at %ld of %ld: %s\n", held, o->limit,
					strerror(errno));
				early = errno == EMFILE;
				failed = !early;
				break;
			}
			fds[nfds++] = fd;
			held++;
		}
	}
	if (early)
		fprintf(stderr, "client: EMFILE with %ld descriptors of its own, target %ld\n",
			held, target);
	/* and on to the limit */
	max_held = held;
	while (!early && nfds < o->limit && (fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0) {
		fds[nfds++] = fd;
		max_held++;
	}
	for (int i = 0; i < nwin; i++) {
		if (echo_check(win[i]) < 0)
			failed = true;
		close(win[i]);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	free(fds);
	for (int waited = 0; (now = count_fds()) != baseline && waited < SETTLE_MS; waited += 50)
		sleep_ms(50);
	if (now != baseline) {
		fprintf(stderr, "client: LEAK %d descriptors open, %d after the warm-up\n", now,
			baseline);
		failed = true;
	}
	printf("RESULT limit=%ld target=%ld reached=%ld early=%d max=%ld conns=%d\n", o->limit,
	       target, early ? held : (held < target ? held : target), early ? 1 : 0, max_held,
	       conns);
	freeaddrinfo(dst);
	return early || failed || held < target ? 1 : 0;
}

static long opt_long(int argc, char **argv, const char *name, long def)
{
	for (int i = 0; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return strtol(argv[i + 1], NULL, 10);
	return def;
}

int main(int argc, char **argv)
{
	struct opts o;

	if (argc >= 3 && strcmp(argv[1], "server") == 0) {
		const char *addr = "127.0.0.1";

		for (int i = 3; i + 1 < argc; i++)
			if (strcmp(argv[i], "--bind") == 0)
				addr = argv[i + 1];
		return serve(argv[2], addr);
	}
	if (argc >= 4 && strcmp(argv[1], "client") == 0) {
		o.limit = opt_long(argc, argv, "--limit", 0);
		o.margin = opt_long(argc, argv, "--margin", 32);
		o.every = opt_long(argc, argv, "--every", 4);
		o.window = opt_long(argc, argv, "--window", 4);
		if (o.limit < 64 || o.margin < 0 || o.margin >= o.limit || o.every < 1 ||
		    o.window < 1 || o.window > MAX_WINDOW) {
			fprintf(stderr, "client: bad options\n");
			return 2;
		}
		return client(argv[2], argv[3], &o);
	}
	fprintf(stderr, "usage: fd_headroom server PORT [--bind ADDR]\n"
			"       fd_headroom client HOST PORT --limit L [--margin M] [--every K] "
			"[--window W]\n");
	return 2;
}
