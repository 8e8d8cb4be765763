/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * readiness_check: TCP readiness semantics of poll, ppoll, select, pselect, epoll_wait,
 * epoll_pwait and epoll_pwait2 on a TCP connection over 127.0.0.1.
 *
 * Without the library it documents what Linux does; under LD_PRELOAD with both ends
 * upgraded it checks that the emulation keeps those semantics. The "driver" end runs
 * the checks; the "peer" end sends, reads, shuts down and closes on request. By default
 * both ends live in this process; with --fork the peer is a child process (the two ends
 * are then two processes, as in real deployments).
 *
 * Prints one line per check ("ok - ..." or "FAIL - ...") and exits 1 if any failed.
 * No check depends on timing: waits that must succeed use generous timeouts, and
 * "nothing is ready" is checked with zero or short timeouts after the state is settled.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LONG_MS 10000   /* a wait that must succeed */
#define SHORT_MS 50     /* a wait that must time out */
#define LATER_MS 100    /* delay before a peer's deferred action */

static int failures, checks;
static bool plain_peer; /* --plain-peer: no connection of the run may be upgraded */

static void check(bool ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *name, const char *fmt, ...)
{
	checks++;
	if (ok) {
		printf("ok - %s\n", name);
	} else {
		va_list ap;

		failures++;
		printf("FAIL - %s: ", name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf(" (errno %d %s)\n", errno, strerror(errno));
	}
	fflush(stdout);
}

static void die(const char *what) __attribute__((noreturn));
static void die(const char *what)
{
	fprintf(stderr, "readiness_check: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* ------------------------------------------------------------------ the peer */

enum peer_op { P_ACCEPT = 1, P_SEND, P_SEND_LATER, P_READN, P_READN_LATER, P_SHUTWR,
	       P_CLOSE, P_EXIT,
	       /* two connections: accept keeping the previous one as the "other", send on
		* the other; later send on the other, then at once on the current one */
	       P_ACCEPT_KEEP, P_SEND_OTHER, P_SEND_BOTH_LATER };

struct peer_cmd {
	int op;
	long arg;
};

struct peer {
	bool forked;
	int ctl;               /* forked: control socket to the child */
	pid_t pid;
	int lfd;               /* listening socket (in-process, or the child's) */
	int fd;                /* accepted socket (in-process, or the child's) */
	int other;             /* the one before it, kept by P_ACCEPT_KEEP */
	pthread_t later;       /* in-process deferred action */
	bool later_running;
	struct peer_cmd later_cmd;
};

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static long send_pattern(int fd, long n)
{
	char buf[4096];
	long done = 0;

	memset(buf, 'p', sizeof(buf));
	while (done < n) {
		size_t chunk = (size_t)(n - done) < sizeof(buf) ? (size_t)(n - done) : sizeof(buf);
		ssize_t w = send(fd, buf, chunk, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += w;
	}
	return done;
}

static long read_exactly(int fd, long n)
{
	char buf[65536];
	long done = 0;

	while (done < n) {
		size_t chunk = (size_t)(n - done) < sizeof(buf) ? (size_t)(n - done) : sizeof(buf);
		ssize_t r = read(fd, buf, chunk);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : done;
		done += r;
	}
	return done;
}

/* Executes one command on the peer's socket; returns a result or -errno. */
static long peer_exec(struct peer *p, const struct peer_cmd *c)
{
	switch (c->op) {
	case P_ACCEPT:
		if (p->fd >= 0)
			close(p->fd);
		p->fd = accept(p->lfd, NULL, NULL);
		return p->fd < 0 ? -errno : 0;
	case P_ACCEPT_KEEP:
		if (p->other >= 0)
			close(p->other);
		p->other = p->fd;
		p->fd = accept(p->lfd, NULL, NULL);
		return p->fd < 0 ? -errno : 0;
	case P_SEND:
	case P_SEND_LATER:
		return send_pattern(p->fd, c->arg);
	case P_SEND_OTHER:
		return send_pattern(p->other, c->arg);
	case P_SEND_BOTH_LATER: {
		long r = send_pattern(p->other, c->arg);

		return r < 0 ? r : send_pattern(p->fd, c->arg);
	}
	case P_READN:
	case P_READN_LATER:
		return read_exactly(p->fd, c->arg);
	case P_SHUTWR:
		return shutdown(p->fd, SHUT_WR) < 0 ? -errno : 0;
	case P_CLOSE: {
		int r = close(p->fd);

		p->fd = -1;
		return r < 0 ? -errno : 0;
	}
	default:
		return -EINVAL;
	}
}

static bool is_later(int op)
{
	return op == P_SEND_LATER || op == P_READN_LATER || op == P_SEND_BOTH_LATER;
}

static void child_loop(struct peer *p)
{
	struct peer_cmd c;

	while (read(p->ctl, &c, sizeof(c)) == (ssize_t)sizeof(c) && c.op != P_EXIT) {
		long r = 0;

		if (is_later(c.op)) {
			/* acknowledge first: the driver then waits for the effect */
			if (write(p->ctl, &r, sizeof(r)) != (ssize_t)sizeof(r))
				break;
			sleep_ms(LATER_MS);
			peer_exec(p, &c);
			continue;
		}
		r = peer_exec(p, &c);
		if (write(p->ctl, &r, sizeof(r)) != (ssize_t)sizeof(r))
			break;
	}
	exit(0); /* exit, not _exit: the library writes its stats file at exit */
}

static void *later_thread(void *arg)
{
	struct peer *p = arg;

	sleep_ms(LATER_MS);
	peer_exec(p, &p->later_cmd);
	return NULL;
}

static void peer_join(struct peer *p)
{
	if (p->later_running) {
		pthread_join(p->later, NULL);
		p->later_running = false;
	}
}

static long peer(struct peer *p, int op, long arg)
{
	struct peer_cmd c = { .op = op, .arg = arg };
	long r;

	if (p->forked) {
		if (write(p->ctl, &c, sizeof(c)) != (ssize_t)sizeof(c) ||
		    read(p->ctl, &r, sizeof(r)) != (ssize_t)sizeof(r))
			die("peer control");
		return r;
	}
	peer_join(p);
	if (is_later(op)) {
		p->later_cmd = c;
		if (pthread_create(&p->later, NULL, later_thread, p) != 0)
			die("pthread_create");
		p->later_running = true;
		return 0;
	}
	return peer_exec(p, &c);
}

static void listen_loopback(struct peer *p, struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int one = 1;

	p->lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (p->lfd < 0)
		die("socket");
	setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(p->lfd, (struct sockaddr *)addr, sizeof(*addr)) < 0 || listen(p->lfd, 16) < 0 ||
	    getsockname(p->lfd, (struct sockaddr *)addr, &len) < 0)
		die("listen");
}

/* --plain-peer: the child re-executes this program without LD_PRELOAD, so the driver's
 * library meets a peer that does not speak SMC (every connection falls back to TCP). */
static void exec_plain_peer(const char *self, int ctl)
{
	char arg[16];

	snprintf(arg, sizeof(arg), "%d", ctl);
	if (fcntl(ctl, F_SETFD, 0) < 0)
		die("fcntl");
	unsetenv("LD_PRELOAD");
	execl("/proc/self/exe", self, "--peer-child", arg, (char *)NULL);
	die("exec");
}

/* Entry point of the re-executed plain peer. */
static void run_peer_child(int ctl)
{
	struct peer p = { .forked = true, .ctl = ctl, .fd = -1, .other = -1 };
	struct sockaddr_in addr;

	listen_loopback(&p, &addr);
	if (write(ctl, &addr, sizeof(addr)) != (ssize_t)sizeof(addr))
		die("peer address");
	child_loop(&p);
}

static void peer_start(struct peer *p, bool forked, bool plain, const char *self,
		       struct sockaddr_in *addr)
{
	int sv[2];

	memset(p, 0, sizeof(*p));
	p->fd = -1;
	p->other = -1;
	p->lfd = -1;
	p->forked = forked;
	if (!forked || !plain)
		listen_loopback(p, addr);
	if (!forked)
		return;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair");
	fflush(stdout);
	p->pid = fork();
	if (p->pid < 0)
		die("fork");
	if (p->pid == 0) {
		close(sv[0]);
		if (plain)
			exec_plain_peer(self, sv[1]);
		p->ctl = sv[1];
		child_loop(p);
	}
	close(sv[1]);
	if (p->lfd >= 0)
		close(p->lfd);
	p->lfd = -1;
	p->ctl = sv[0];
	if (plain && read(p->ctl, addr, sizeof(*addr)) != (ssize_t)sizeof(*addr))
		die("plain peer address");
}

static void peer_stop(struct peer *p)
{
	if (p->forked) {
		struct peer_cmd c = { .op = P_EXIT };
		int st;

		if (write(p->ctl, &c, sizeof(c)) < 0)
			perror("peer exit");
		waitpid(p->pid, &st, 0);
		close(p->ctl);
		return;
	}
	peer_join(p);
	if (p->fd >= 0)
		close(p->fd);
	if (p->other >= 0)
		close(p->other);
	close(p->lfd);
}

/* ------------------------------------------------------------------ driver helpers */

static struct peer P;
static struct sockaddr_in peer_addr;

/* Nonblocking connect, peer accept (`accept_op`), wait for completion, then one byte
 * each way so the connection is fully established (and, under the library, upgraded)
 * before checks. */
static int new_conn_by(int accept_op)
{
	struct pollfd pfd;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
	socklen_t len = sizeof(err);
	char b;

	if (fd < 0)
		die("socket");
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	if (peer(&P, accept_op, 0) < 0)
		die("accept");
	pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
	if (poll(&pfd, 1, LONG_MS) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 ||
	    err != 0)
		die("connect completion");
	if (send(fd, "s", 1, 0) != 1 || peer(&P, P_READN, 1) != 1 || peer(&P, P_SEND, 1) != 1)
		die("sync");
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (poll(&pfd, 1, LONG_MS) != 1 || read(fd, &b, 1) != 1)
		die("sync read");
	return fd;
}

static int new_conn(void)
{
	return new_conn_by(P_ACCEPT);
}

/* Reads everything available now (fd is nonblocking). */
static long drain(int fd)
{
	char buf[65536];
	long total = 0;
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0)
		total += r;
	return total;
}

/* Writes until EAGAIN; returns the bytes written. */
static long fill(int fd)
{
	static char buf[65536];
	long total = 0;
	ssize_t w;

	for (;;) {
		w = send(fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			total += w;
			continue;
		}
		if (w < 0 && errno == EAGAIN) {
			/* the kernel may accept more once in-flight segments are acked: insist a
			 * little so "full" really means full */
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			if (poll(&pfd, 1, SHORT_MS) == 1 && (pfd.revents & POLLOUT))
				continue;
			break;
		}
		break;
	}
	return total;
}

static short poll1(int fd, short events, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int r = poll(&pfd, 1, ms);

	return r < 0 ? -1 : r == 0 ? 0 : pfd.revents;
}

/* epoll_wait that looks for the event carrying `data`; returns its events or 0. */
static uint32_t ep_events_for(int epfd, uint64_t data, int ms, int *count)
{
	struct epoll_event ev[16];
	int n = epoll_wait(epfd, ev, 16, ms);

	if (count)
		*count = n;
	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 == data)
			return ev[i].events;
	return 0;
}

static int ep_add(int epfd, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int ep_mod(int epfd, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	return epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}

static int new_epoll(void)
{
	int epfd = epoll_create1(EPOLL_CLOEXEC);

	if (epfd < 0)
		die("epoll_create1");
	return epfd;
}

/* ------------------------------------------------------------------ checks: poll family */

static void test_poll_basic(void)
{
	int fd = new_conn();
	struct pollfd pfd[3];
	struct timespec ts0 = { 0, 0 }, tsl = { LONG_MS / 1000, 0 };
	sigset_t empty;
	short rev;

	rev = poll1(fd, POLLIN | POLLOUT, 0);
	check(rev == (POLLOUT), "poll: idle connection is writable, not readable", "revents %#x", rev);
	rev = poll1(fd, POLLIN, SHORT_MS);
	check(rev == 0, "poll: times out when nothing to read", "revents %#x", rev);

	peer(&P, P_SEND, 10);
	rev = poll1(fd, POLLIN | POLLOUT, LONG_MS);
	check(rev == (POLLIN | POLLOUT), "poll: readable after peer sent", "revents %#x", rev);
	rev = poll1(fd, POLLRDNORM | POLLWRNORM, 0);
	check(rev == (POLLRDNORM | POLLWRNORM), "poll: RDNORM/WRNORM companions", "revents %#x", rev);

	pfd[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	sigemptyset(&empty);
	check(ppoll(pfd, 1, &ts0, &empty) == 1 && pfd[0].revents == POLLIN,
	      "ppoll: readable, zero timeout and signal mask", "revents %#x", pfd[0].revents);

	/* partial read keeps it readable (level) */
	char b[4];
	check(read(fd, b, 4) == 4 && poll1(fd, POLLIN, 0) == POLLIN,
	      "poll: still readable after a partial read", "-");
	check(drain(fd) == 6 && poll1(fd, POLLIN, 0) == 0, "poll: not readable once drained", "-");

	/* the sleeping path: nothing ready when we start */
	peer(&P, P_SEND_LATER, 3);
	rev = poll1(fd, POLLIN, LONG_MS);
	check(rev == POLLIN, "poll: wakes up when data arrives while sleeping", "revents %#x", rev);
	drain(fd);
	peer(&P, P_SEND_LATER, 3);
	pfd[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	check(ppoll(pfd, 1, &tsl, NULL) == 1 && pfd[0].revents == POLLIN,
	      "ppoll: wakes up when data arrives while sleeping", "revents %#x", pfd[0].revents);
	drain(fd);

	/* negative fds are ignored; a closed fd is POLLNVAL; others keep their kernel answer */
	int pp[2];

	if (pipe(pp) < 0)
		die("pipe");
	int closed = dup(pp[0]);

	close(closed);
	pfd[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = -1, .events = POLLIN };
	pfd[2] = (struct pollfd){ .fd = closed, .events = POLLIN };
	int r = poll(pfd, 3, 0);

	check(r == 1 && pfd[0].revents == 0 && pfd[1].revents == 0 && pfd[2].revents == POLLNVAL,
	      "poll: negative fd ignored, closed fd POLLNVAL", "r %d revents %#x %#x %#x", r,
	      pfd[0].revents, pfd[1].revents, pfd[2].revents);

	pfd[1] = (struct pollfd){ .fd = pp[0], .events = POLLIN };
	pfd[2] = (struct pollfd){ .fd = pp[1], .events = POLLOUT };
	if (write(pp[1], "x", 1) != 1)
		die("write pipe");
	r = poll(pfd, 3, LONG_MS);
	check(r == 2 && pfd[0].revents == 0 && pfd[1].revents == POLLIN && pfd[2].revents == POLLOUT,
	      "poll: socket mixed with a pipe", "r %d revents %#x %#x %#x", r, pfd[0].revents,
	      pfd[1].revents, pfd[2].revents);
	char c;
	if (read(pp[0], &c, 1) != 1)
		die("read pipe");

	/* a kernel fd wakes a sleeping poll that also waits on the socket */
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	struct itimerspec its = { .it_value = { 0, LATER_MS * 1000000L } };

	timerfd_settime(tfd, 0, &its, NULL);
	pfd[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = tfd, .events = POLLIN };
	r = poll(pfd, 2, LONG_MS);
	check(r == 1 && pfd[0].revents == 0 && pfd[1].revents == POLLIN,
	      "poll: timerfd wakes a poll sleeping on the socket", "r %d revents %#x %#x", r,
	      pfd[0].revents, pfd[1].revents);
	close(tfd);
	close(pp[0]);
	close(pp[1]);
	close(fd);
}

static void test_select(void)
{
	int fd = new_conn();
	fd_set r, w, e;
	struct timeval tv0 = { 0, 0 }, tvs = { 0, SHORT_MS * 1000 }, tvl = { LONG_MS / 1000, 0 };
	struct timespec ts0 = { 0, 0 }, tsl = { LONG_MS / 1000, 0 };
	sigset_t empty;
	int n;

	sigemptyset(&empty);
	FD_ZERO(&r); FD_ZERO(&w); FD_SET(fd, &r); FD_SET(fd, &w);
	n = select(fd + 1, &r, &w, NULL, &tv0);
	check(n == 1 && !FD_ISSET(fd, &r) && FD_ISSET(fd, &w), "select: idle: writable only",
	      "n %d", n);
	FD_ZERO(&r); FD_SET(fd, &r);
	n = select(fd + 1, &r, NULL, NULL, &tvs);
	check(n == 0 && !FD_ISSET(fd, &r), "select: times out, set cleared", "n %d", n);

	peer(&P, P_SEND, 5);
	FD_ZERO(&r); FD_ZERO(&w); FD_SET(fd, &r); FD_SET(fd, &w);
	n = select(fd + 1, &r, &w, NULL, &tvl);
	check(n == 2 && FD_ISSET(fd, &r) && FD_ISSET(fd, &w), "select: readable and writable",
	      "n %d", n);
	FD_ZERO(&r); FD_ZERO(&e); FD_SET(fd, &r); FD_SET(fd, &e);
	n = pselect(fd + 1, &r, NULL, &e, &ts0, &empty);
	check(n == 1 && FD_ISSET(fd, &r) && !FD_ISSET(fd, &e),
	      "pselect: readable, no exception for normal data", "n %d", n);
	drain(fd);

	peer(&P, P_SEND_LATER, 2);
	FD_ZERO(&r); FD_SET(fd, &r);
	n = select(fd + 1, &r, NULL, NULL, &tvl);
	check(n == 1 && FD_ISSET(fd, &r), "select: wakes up when data arrives", "n %d", n);
	drain(fd);
	peer(&P, P_SEND_LATER, 2);
	FD_ZERO(&r); FD_SET(fd, &r);
	n = pselect(fd + 1, &r, NULL, NULL, &tsl, &empty);
	check(n == 1 && FD_ISSET(fd, &r), "pselect: wakes up when data arrives", "n %d", n);
	drain(fd);

	int pp[2];

	if (pipe(pp) < 0)
		die("pipe");
	int closed = dup(pp[0]);

	close(closed);
	int maxfd = fd > closed ? fd : closed;

	FD_ZERO(&r); FD_SET(fd, &r); FD_SET(closed, &r);
	tv0 = (struct timeval){ 0, 0 };
	n = select(maxfd + 1, &r, NULL, NULL, &tv0);
	check(n == -1 && errno == EBADF, "select: closed fd in the set is EBADF", "n %d", n);
	close(pp[0]);
	close(pp[1]);
	close(fd);
}

/* ------------------------------------------------------------------ checks: epoll */

static void test_epoll_lt_et(void)
{
	int fd = new_conn(), ep = new_epoll(), n;
	uint32_t ev;

	check(ep_add(ep, fd, EPOLLIN, 1) == 0, "epoll: ADD", "-");
	ev = ep_events_for(ep, 1, 0, &n);
	check(n == 0, "epoll LT: idle connection not reported for EPOLLIN", "n %d", n);
	ev = ep_events_for(ep, 1, SHORT_MS, &n);
	check(n == 0, "epoll LT: times out", "n %d", n);
	peer(&P, P_SEND, 10);
	ev = ep_events_for(ep, 1, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "epoll LT: EPOLLIN after peer sent", "n %d ev %#x", n, ev);
	ev = ep_events_for(ep, 1, 0, &n);
	check(n == 1 && ev == EPOLLIN, "epoll LT: reported again while unread", "n %d ev %#x", n, ev);
	char b[4];
	if (read(fd, b, 4) != 4)
		die("read");
	ev = ep_events_for(ep, 1, 0, &n);
	check(n == 1 && ev == EPOLLIN, "epoll LT: reported after a partial read", "n %d", n);
	drain(fd);
	ev = ep_events_for(ep, 1, 0, &n);
	check(n == 0, "epoll LT: not reported once drained", "n %d", n);

	check(ep_mod(ep, fd, EPOLLIN | EPOLLOUT, 2) == 0, "epoll: MOD", "-");
	ev = ep_events_for(ep, 2, 0, &n);
	check(n == 1 && ev == EPOLLOUT, "epoll LT: EPOLLOUT while there is room", "ev %#x", ev);

	/* edge triggered */
	check(ep_mod(ep, fd, EPOLLIN | EPOLLET, 3) == 0, "epoll: MOD to EPOLLET", "-");
	ev = ep_events_for(ep, 3, 0, &n);
	check(n == 0, "epoll ET: nothing when idle", "n %d", n);
	peer(&P, P_SEND, 10);
	ev = ep_events_for(ep, 3, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "epoll ET: EPOLLIN on new data", "n %d ev %#x", n, ev);
	ev = ep_events_for(ep, 3, 0, &n);
	check(n == 0, "epoll ET: no second report without new data", "n %d", n);
	if (read(fd, b, 4) != 4)
		die("read");
	ev = ep_events_for(ep, 3, 0, &n);
	check(n == 0, "epoll ET: no report after a partial read", "n %d", n);
	peer(&P, P_SEND, 1);
	ev = ep_events_for(ep, 3, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "epoll ET: new data is a new edge (unread data left)",
	      "n %d ev %#x", n, ev);
	drain(fd);
	peer(&P, P_SEND_LATER, 5);
	ev = ep_events_for(ep, 3, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "epoll ET: wakes up a sleeping epoll_wait", "n %d", n);
	drain(fd);

	check(ep_mod(ep, fd, EPOLLIN | EPOLLOUT | EPOLLET, 4) == 0, "epoll: MOD to IN|OUT|ET", "-");
	ev = ep_events_for(ep, 4, 0, &n);
	check(n == 1 && ev == EPOLLOUT, "epoll ET: MOD reports current EPOLLOUT once", "ev %#x", ev);
	ev = ep_events_for(ep, 4, 0, &n);
	check(n == 0, "epoll ET: EPOLLOUT not repeated", "n %d", n);
	peer(&P, P_SEND, 3);
	ev = ep_events_for(ep, 4, LONG_MS, &n);
	check(n == 1 && ev == (EPOLLIN | EPOLLOUT), "epoll ET: data edge reports IN|OUT",
	      "ev %#x", ev);
	drain(fd);

	/* one-shot */
	check(ep_mod(ep, fd, EPOLLIN | EPOLLONESHOT, 5) == 0, "epoll: MOD to ONESHOT", "-");
	peer(&P, P_SEND, 2);
	ev = ep_events_for(ep, 5, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "epoll ONESHOT: first report", "n %d ev %#x", n, ev);
	peer(&P, P_SEND, 2);
	ev = ep_events_for(ep, 5, SHORT_MS, &n);
	check(n == 0, "epoll ONESHOT: disabled after one report", "n %d", n);
	check(ep_mod(ep, fd, EPOLLIN | EPOLLONESHOT, 6) == 0, "epoll ONESHOT: re-arm with MOD", "-");
	ev = ep_events_for(ep, 6, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "epoll ONESHOT: re-armed reports pending data", "n %d", n);
	drain(fd);

	check(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == 0, "epoll: DEL", "-");
	peer(&P, P_SEND, 2);
	if (poll1(fd, POLLIN, LONG_MS) != POLLIN)
		die("poll after DEL");
	ev = ep_events_for(ep, 6, 0, &n);
	check(n == 0, "epoll: DEL'ed fd not reported", "n %d", n);
	drain(fd);
	close(ep);
	close(fd);
}

static void test_epoll_pwait(void)
{
	int fd = new_conn(), ep = new_epoll(), n;
	struct epoll_event ev[4];
	struct timespec ts0 = { 0, 0 }, tsl = { LONG_MS / 1000, 0 };
	sigset_t empty;

	sigemptyset(&empty);
	ep_add(ep, fd, EPOLLIN, 7);
	n = epoll_pwait(ep, ev, 4, 0, &empty);
	check(n == 0, "epoll_pwait: idle returns 0", "n %d", n);
	n = epoll_pwait2(ep, ev, 4, &ts0, NULL);
	check(n == 0, "epoll_pwait2: zero timespec returns 0", "n %d", n);
	peer(&P, P_SEND_LATER, 4);
	n = epoll_pwait(ep, ev, 4, LONG_MS, &empty);
	check(n == 1 && ev[0].data.u64 == 7 && ev[0].events == EPOLLIN,
	      "epoll_pwait: wakes up with the registration's data", "n %d", n);
	drain(fd);
	peer(&P, P_SEND_LATER, 4);
	n = epoll_pwait2(ep, ev, 4, &tsl, &empty);
	check(n == 1 && ev[0].data.u64 == 7, "epoll_pwait2: wakes up", "n %d", n);
	drain(fd);
	close(ep);
	close(fd);
}

static void test_epoll_out(void)
{
	int fd = new_conn(), ep = new_epoll(), n;
	uint32_t ev;
	long filled;
	fd_set w;
	struct timeval tv0 = { 0, 0 };

	ep_add(ep, fd, EPOLLOUT, 8);
	ev = ep_events_for(ep, 8, 0, &n);
	check(n == 1 && ev == EPOLLOUT, "EPOLLOUT: present while there is room", "ev %#x", ev);
	filled = fill(fd);
	check(filled > 0, "EPOLLOUT: filled the send side until EAGAIN", "filled %ld", filled);
	ev = ep_events_for(ep, 8, 0, &n);
	check(n == 0, "EPOLLOUT: absent while full and the peer does not read", "n %d ev %#x", n, ev);
	check(poll1(fd, POLLOUT, 0) == 0, "POLLOUT: absent while full", "-");
	FD_ZERO(&w); FD_SET(fd, &w);
	check(select(fd + 1, NULL, &w, NULL, &tv0) == 0, "select: not writable while full", "-");

	/* the sleeping path for room: the peer reads everything a little later */
	peer(&P, P_READN_LATER, filled);
	ev = ep_events_for(ep, 8, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "EPOLLOUT: wakes up when the peer frees room", "n %d", n);
	peer(&P, P_SEND, 0); /* round trip: the peer finished reading */

	/* edge triggered EPOLLOUT: a new edge after EAGAIN once room comes back */
	ep_mod(ep, fd, EPOLLOUT | EPOLLET, 9);
	ev = ep_events_for(ep, 9, 0, &n);
	check(n == 1 && ev == EPOLLOUT, "EPOLLOUT ET: reported after MOD", "ev %#x", ev);
	filled = fill(fd);
	ev = ep_events_for(ep, 9, 0, &n);
	check(n == 0, "EPOLLOUT ET: nothing while full", "n %d", n);
	peer(&P, P_READN_LATER, filled);
	ev = ep_events_for(ep, 9, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "EPOLLOUT ET: new edge when room comes back", "n %d", n);
	peer(&P, P_SEND, 0);

	/* poll sleeping for POLLOUT */
	filled = fill(fd);
	peer(&P, P_READN_LATER, filled);
	check(poll1(fd, POLLOUT, LONG_MS) == POLLOUT, "POLLOUT: poll wakes when room comes back", "-");
	peer(&P, P_SEND, 0);
	close(ep);
	close(fd);
}

static void test_epoll_hup(void)
{
	int fd = new_conn(), ep = new_epoll(), n;
	uint32_t ev;
	short rev;

	ep_add(ep, fd, EPOLLIN | EPOLLRDHUP, 10);
	peer(&P, P_SHUTWR, 0);
	ev = ep_events_for(ep, 10, LONG_MS, &n);
	check(n == 1 && ev == (EPOLLIN | EPOLLRDHUP), "EPOLLRDHUP: on peer shutdown(SHUT_WR)",
	      "n %d ev %#x", n, ev);
	rev = poll1(fd, POLLIN | POLLRDHUP | POLLOUT, 0);
	check(rev == (POLLIN | POLLRDHUP | POLLOUT), "POLLRDHUP: on peer shutdown, still writable",
	      "revents %#x", rev);
	char b;
	check(read(fd, &b, 1) == 0, "read: EOF after peer shutdown", "-");
	/* the half-closed connection still carries data the other way */
	check(send(fd, "abc", 3, 0) == 3 && peer(&P, P_READN, 3) == 3,
	      "send: works after the peer's shutdown(SHUT_WR)", "-");

	/* registration without events still gets EPOLLHUP */
	int ep2 = new_epoll();

	ep_add(ep2, fd, 0, 11);
	peer(&P, P_CLOSE, 0);
	shutdown(fd, SHUT_WR);
	ev = ep_events_for(ep, 10, LONG_MS, &n);
	check(n == 1 && (ev & EPOLLHUP) && (ev & EPOLLIN) && (ev & EPOLLRDHUP),
	      "EPOLLHUP: peer closed and we shut down writing", "n %d ev %#x", n, ev);
	ev = ep_events_for(ep2, 11, LONG_MS, &n);
	check(n == 1 && (ev & EPOLLHUP) && !(ev & EPOLLIN),
	      "EPOLLHUP: reported with an empty event mask", "n %d ev %#x", n, ev);
	rev = poll1(fd, POLLIN, 0);
	check(rev & POLLHUP, "POLLHUP: reported by poll", "revents %#x", rev);
	close(ep2);
	close(ep);
	close(fd);
}

/* tcp_poll() reports EPOLLHUP only once both directions are shut: a peer's close alone
 * shuts ours for reading, and we may still write until its reset comes back. A relay that
 * stops reading at POLLHUP (stunnel) would leave the peer's last bytes unread. */
static void test_peer_close_no_hup(void)
{
	int fd = new_conn(), ep = new_epoll(), n;
	uint32_t ev;
	short rev;

	ep_add(ep, fd, EPOLLIN | EPOLLRDHUP, 12);
	peer(&P, P_CLOSE, 0);
	ev = ep_events_for(ep, 12, LONG_MS, &n);
	check(n == 1 && ev == (EPOLLIN | EPOLLRDHUP), "EPOLLRDHUP without EPOLLHUP: on peer close",
	      "n %d ev %#x", n, ev);
	rev = poll1(fd, POLLIN | POLLRDHUP | POLLOUT, 0);
	check(rev == (POLLIN | POLLRDHUP | POLLOUT), "POLLHUP: not on the peer's close alone",
	      "revents %#x", rev);
	close(ep);
	close(fd);
}

static void test_epoll_sets(void)
{
	int fd = new_conn(), ep1 = new_epoll(), ep2 = new_epoll(), n1, n2;
	uint32_t e1, e2;

	ep_add(ep1, fd, EPOLLIN | EPOLLET, 21);
	ep_add(ep2, fd, EPOLLIN, 22);
	peer(&P, P_SEND, 6);
	e1 = ep_events_for(ep1, 21, LONG_MS, &n1);
	e2 = ep_events_for(ep2, 22, LONG_MS, &n2);
	check(n1 == 1 && e1 == EPOLLIN && n2 == 1 && e2 == EPOLLIN,
	      "two epoll sets: both report the same fd", "%d %#x %d %#x", n1, e1, n2, e2);
	e1 = ep_events_for(ep1, 21, 0, &n1);
	e2 = ep_events_for(ep2, 22, 0, &n2);
	check(n1 == 0 && n2 == 1, "two epoll sets: ET in one, LT in the other", "%d %d", n1, n2);
	drain(fd);
	peer(&P, P_SEND_LATER, 6);
	e2 = ep_events_for(ep2, 22, LONG_MS, &n2);
	e1 = ep_events_for(ep1, 21, LONG_MS, &n1);
	check(n1 == 1 && n2 == 1, "two epoll sets: both woken by one arrival", "%d %d", n1, n2);
	drain(fd);

	/* nested: ep2 inside an outer set; poll on an epoll fd */
	int outer = new_epoll();

	check(ep_add(outer, ep2, EPOLLIN, 23) == 0, "nested epoll: ADD epoll fd to another", "-");
	e1 = ep_events_for(outer, 23, 0, &n1);
	check(n1 == 0, "nested epoll: idle inner set not reported", "n %d", n1);
	check(poll1(ep2, POLLIN, 0) == 0, "poll on epoll fd: idle", "-");
	peer(&P, P_SEND, 3);
	e1 = ep_events_for(outer, 23, LONG_MS, &n1);
	check(n1 == 1 && e1 == EPOLLIN, "nested epoll: inner readiness reported", "n %d ev %#x", n1,
	      e1);
	check(poll1(ep2, POLLIN, 0) == POLLIN, "poll on epoll fd: readable", "-");
	e2 = ep_events_for(ep2, 22, 0, &n2);
	check(n2 == 1 && e2 == EPOLLIN, "nested epoll: inner set reports the socket", "n %d", n2);
	drain(fd);
	e1 = ep_events_for(outer, 23, 0, &n1);
	check(n1 == 0, "nested epoll: not reported once drained", "n %d", n1);
	peer(&P, P_SEND_LATER, 3);
	e1 = ep_events_for(outer, 23, LONG_MS, &n1);
	check(n1 == 1 && e1 == EPOLLIN, "nested epoll: sleeping outer set woken", "n %d", n1);
	drain(fd);
	check(ep_add(ep2, outer, EPOLLIN, 24) == -1 && errno == ELOOP,
	      "nested epoll: a loop is refused with ELOOP", "-");
	close(outer);

	/* close removes the fd from every set */
	peer(&P, P_SEND, 2);
	if (poll1(fd, POLLIN, LONG_MS) != POLLIN)
		die("poll");
	close(fd);
	e1 = ep_events_for(ep1, 21, 0, &n1);
	e2 = ep_events_for(ep2, 22, 0, &n2);
	check(n1 == 0 && n2 == 0, "close: fd leaves every epoll set", "%d %d", n1, n2);
	close(ep1);
	close(ep2);
}

static void test_epoll_mixed(void)
{
	int fd = new_conn(), ep = new_epoll(), pp[2], efd, tfd, n;
	struct epoll_event ev[8];
	uint64_t one = 1, got = 0;
	struct itimerspec its = { .it_value = { 0, LATER_MS * 1000000L } };

	if (pipe(pp) < 0)
		die("pipe");
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (efd < 0 || tfd < 0)
		die("eventfd/timerfd");
	ep_add(ep, fd, EPOLLIN, 31);
	ep_add(ep, pp[0], EPOLLIN, 32);
	ep_add(ep, efd, EPOLLIN, 33);
	ep_add(ep, tfd, EPOLLIN, 34);
	n = epoll_wait(ep, ev, 8, 0);
	check(n == 0, "mixed set: nothing ready", "n %d", n);

	if (write(pp[1], "x", 1) != 1 || write(efd, &one, sizeof(one)) != sizeof(one))
		die("write");
	peer(&P, P_SEND, 1);
	if (poll1(fd, POLLIN, LONG_MS) != POLLIN)
		die("poll");
	n = epoll_wait(ep, ev, 8, LONG_MS);
	unsigned seen = 0;

	for (int i = 0; i < n; i++)
		if (ev[i].events == EPOLLIN && ev[i].data.u64 >= 31 && ev[i].data.u64 <= 34)
			seen |= 1u << (ev[i].data.u64 - 31);
	check(n == 3 && seen == 0x7, "mixed set: socket, pipe and eventfd reported together",
	      "n %d seen %#x", n, seen);

	/* max events smaller than the ready count: everyone gets its turn */
	unsigned turns = 0;

	for (int i = 0; i < 6; i++) {
		n = epoll_wait(ep, ev, 1, 0);
		if (n == 1)
			turns |= 1u << (ev[0].data.u64 - 31);
	}
	check(turns == 0x7, "mixed set: maxevents 1 rotates over ready fds", "turns %#x", turns);

	char c;
	if (read(pp[0], &c, 1) != 1 || read(efd, &got, sizeof(got)) != sizeof(got))
		die("read");
	drain(fd);
	n = epoll_wait(ep, ev, 8, 0);
	check(n == 0, "mixed set: all drained", "n %d", n);

	timerfd_settime(tfd, 0, &its, NULL);
	n = epoll_wait(ep, ev, 8, LONG_MS);
	check(n == 1 && ev[0].data.u64 == 34, "mixed set: timerfd wakes a sleeping epoll_wait",
	      "n %d", n);
	if (read(tfd, &got, sizeof(got)) != sizeof(got))
		die("read timerfd");
	peer(&P, P_SEND_LATER, 1);
	n = epoll_wait(ep, ev, 8, LONG_MS);
	check(n == 1 && ev[0].data.u64 == 31, "mixed set: socket wakes a sleeping epoll_wait",
	      "n %d", n);
	drain(fd);
	close(tfd);
	close(efd);
	close(pp[0]);
	close(pp[1]);
	close(ep);
	close(fd);
}

static void test_epoll_ctl_errors(void)
{
	int fd = new_conn(), ep = new_epoll(), pp[2], r;
	struct epoll_event ev = { .events = EPOLLIN };

	if (pipe(pp) < 0)
		die("pipe");
	check(ep_add(ep, fd, EPOLLIN, 1) == 0, "epoll_ctl: ADD", "-");
	r = ep_add(ep, fd, EPOLLIN, 1);
	check(r == -1 && errno == EEXIST, "epoll_ctl: second ADD is EEXIST", "r %d", r);
	check(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == 0, "epoll_ctl: DEL", "-");
	r = epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	check(r == -1 && errno == ENOENT, "epoll_ctl: DEL of unregistered fd is ENOENT", "r %d", r);
	r = ep_mod(ep, fd, EPOLLIN, 1);
	check(r == -1 && errno == ENOENT, "epoll_ctl: MOD of unregistered fd is ENOENT", "r %d", r);
	r = ep_add(pp[0], fd, EPOLLIN, 1);
	check(r == -1 && errno == EINVAL, "epoll_ctl: epfd that is not epoll is EINVAL", "r %d", r);
	int closed = dup(pp[0]);

	close(closed);
	r = ep_add(closed, fd, EPOLLIN, 1);
	check(r == -1 && errno == EBADF, "epoll_ctl: closed epfd is EBADF", "r %d", r);
	r = ep_add(ep, fd, EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, 1);
	check(r == -1 && errno == EINVAL, "epoll_ctl: EXCLUSIVE with ONESHOT is EINVAL", "r %d", r);
	check(ep_add(ep, fd, EPOLLIN | EPOLLEXCLUSIVE, 1) == 0, "epoll_ctl: ADD with EXCLUSIVE", "-");
	r = ep_mod(ep, fd, EPOLLIN, 2);
	check(r == -1 && errno == EINVAL, "epoll_ctl: MOD of an EXCLUSIVE entry is EINVAL", "r %d", r);
	peer(&P, P_SEND, 1);
	uint32_t e = ep_events_for(ep, 1, LONG_MS, &r);
	check(r == 1 && e == EPOLLIN, "epoll: EXCLUSIVE entry still reports", "r %d", r);
	drain(fd);
	r = epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev);
	check(r == -1 && errno == EINVAL, "epoll_ctl: adding an epoll fd to itself is EINVAL", "-");
	close(pp[0]);
	close(pp[1]);
	close(ep);
	close(fd);
}

static volatile sig_atomic_t got_alarm;

static void on_alarm(int sig)
{
	(void)sig;
	got_alarm = 1;
}

static void arm_alarm(void)
{
	struct itimerval it = { .it_value = { 0, LATER_MS * 1000 } };

	got_alarm = 0;
	setitimer(ITIMER_REAL, &it, NULL);
}

static void test_eintr(void)
{
	int fd = new_conn(), ep = new_epoll(), r;
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART */
	struct epoll_event ev[2];
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	struct timespec tsl = { LONG_MS / 1000, 0 };
	sigset_t block, unblocked;
	fd_set rs;

	sigaction(SIGALRM, &sa, NULL);
	ep_add(ep, fd, EPOLLIN, 1);
	arm_alarm();
	r = epoll_wait(ep, ev, 2, LONG_MS);
	check(r == -1 && errno == EINTR && got_alarm, "epoll_wait: EINTR on a signal", "r %d", r);
	arm_alarm();
	r = poll(&pfd, 1, LONG_MS);
	check(r == -1 && errno == EINTR && got_alarm, "poll: EINTR on a signal", "r %d", r);
	arm_alarm();
	FD_ZERO(&rs); FD_SET(fd, &rs);
	r = select(fd + 1, &rs, NULL, NULL, &(struct timeval){ LONG_MS / 1000, 0 });
	check(r == -1 && errno == EINTR && got_alarm, "select: EINTR on a signal", "r %d", r);

	/* the signal mask argument: SIGALRM blocked in the thread, unblocked during the call */
	sigemptyset(&block);
	sigaddset(&block, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &block, NULL);
	pthread_sigmask(SIG_BLOCK, NULL, &unblocked);
	sigdelset(&unblocked, SIGALRM);
	arm_alarm();
	r = epoll_pwait(ep, ev, 2, LONG_MS, &unblocked);
	check(r == -1 && errno == EINTR && got_alarm, "epoll_pwait: mask lets the signal in", "r %d", r);
	arm_alarm();
	r = epoll_pwait2(ep, ev, 2, &tsl, &unblocked);
	check(r == -1 && errno == EINTR && got_alarm, "epoll_pwait2: mask lets the signal in", "r %d", r);
	arm_alarm();
	r = ppoll(&pfd, 1, &tsl, &unblocked);
	check(r == -1 && errno == EINTR && got_alarm, "ppoll: mask lets the signal in", "r %d", r);
	arm_alarm();
	FD_ZERO(&rs); FD_SET(fd, &rs);
	r = pselect(fd + 1, &rs, NULL, NULL, &tsl, &unblocked);
	check(r == -1 && errno == EINTR && got_alarm, "pselect: mask lets the signal in", "r %d", r);
	pthread_sigmask(SIG_UNBLOCK, &block, NULL);
	signal(SIGALRM, SIG_DFL);
	close(ep);
	close(fd);
}

/* ------------------------------------------------------------------ checks: threads */

struct waiter {
	pthread_t t;
	int epfd, n;
	struct epoll_event ev[4];
	bool timed_out;                 /* slept the whole LONG_MS: nothing woke it */
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	uint64_t t0 = mono_ms();

	w->n = epoll_wait(w->epfd, w->ev, 4, LONG_MS);
	/* an epoll_wait that missed its wakeup still reports the event at its timeout */
	w->timed_out = mono_ms() - t0 >= LONG_MS;
	return NULL;
}

static void waiter_start(struct waiter *w, int epfd)
{
	w->epfd = epfd;
	w->n = -2;
	if (pthread_create(&w->t, NULL, waiter_main, w) != 0)
		die("pthread_create");
	sleep_ms(SHORT_MS); /* most likely asleep by now; if not, the check only tests less */
}

static int waiter_join(struct waiter *w, uint64_t want)
{
	pthread_join(w->t, NULL);
	if (w->timed_out)
		return -3;
	if (w->n == 1 && w->ev[0].data.u64 != want)
		return -4; /* an event nobody registered */
	return w->n == 1 ? 1 : w->n;
}

/* Changes made by one thread while another sleeps in epoll_wait on the same set. */
static void test_epoll_threads(void)
{
	int fd = new_conn(), ep = new_epoll(), pp[2], r;
	struct waiter w;

	if (pipe(pp) < 0)
		die("pipe");
	ep_add(ep, pp[0], EPOLLIN, 40); /* never ready: keeps the set non-empty */

	peer(&P, P_SEND, 2);
	if (poll1(fd, POLLIN, LONG_MS) != POLLIN)
		die("poll");
	waiter_start(&w, ep);
	ep_add(ep, fd, EPOLLIN | EPOLLONESHOT, 41);
	r = waiter_join(&w, 41);
	check(r == 1, "threads: ADD of a ready fd wakes a sleeping epoll_wait", "r %d", r);

	/* one-shot fired; data keeps arriving while disabled; a MOD re-arms it */
	peer(&P, P_SEND, 2);
	if (poll1(fd, POLLIN, LONG_MS) != POLLIN)
		die("poll");
	waiter_start(&w, ep);
	ep_mod(ep, fd, EPOLLIN | EPOLLONESHOT, 42);
	r = waiter_join(&w, 42);
	check(r == 1, "threads: ONESHOT re-armed by MOD wakes a sleeping epoll_wait", "r %d", r);
	drain(fd);

	/* added while idle by another thread: a later arrival must wake the sleeper */
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	waiter_start(&w, ep);
	ep_add(ep, fd, EPOLLIN, 43);
	peer(&P, P_SEND_LATER, 2);
	r = waiter_join(&w, 43);
	check(r == 1, "threads: fd added during a sleep reports later data", "r %d", r);
	drain(fd);
	close(pp[0]);
	close(pp[1]);
	close(ep);
	close(fd);
}

/* A connection whose data woke the set is polled afterwards (it holds no sleeper
 * count, so its peer rings nobody) until the set sleeps again: a second thread that goes
 * to sleep on the set, and a poll() on the set's fd, must still hear its next data. */
static void test_epoll_polled(void)
{
	int fd = new_conn(), ep = new_epoll(), r;
	struct pollfd pfd;
	struct waiter w;
	uint32_t got;
	uint64_t t0;

	ep_add(ep, fd, EPOLLIN, 50);
	for (int i = 0; i < 2; i++) {
		peer(&P, P_SEND_LATER, 2);
		t0 = mono_ms();
		got = ep_events_for(ep, 50, LONG_MS, NULL);
		check((got & EPOLLIN) && mono_ms() - t0 < LONG_MS, "polled: later data wakes epoll_wait",
		      "events %#x", got);
		drain(fd);
	}
	waiter_start(&w, ep);
	peer(&P, P_SEND_LATER, 2);
	r = waiter_join(&w, 50);
	check(r == 1, "polled: a thread asleep on the set hears the polled connection", "r %d", r);
	drain(fd);

	/* the waiter woke last: the watch is polled again; now poll() the set's fd */
	pfd = (struct pollfd){ .fd = ep, .events = POLLIN };
	peer(&P, P_SEND_LATER, 2);
	t0 = mono_ms();
	r = poll(&pfd, 1, LONG_MS);
	check(r == 1 && (pfd.revents & POLLIN) && mono_ms() - t0 < LONG_MS,
	      "polled: poll() on the set's fd hears it", "r %d revents %#x", r, pfd.revents);
	got = ep_events_for(ep, 50, 0, NULL);
	check(got & EPOLLIN, "polled: epoll_wait after poll() reports it", "events %#x", got);
	drain(fd);
	close(ep);
	close(fd);
}

/* Reports of `want` (bit i: data base + i, fds[i]) from epoll_wait calls on ep until all
 * came or LONG_MS passed; any call may sleep. Drains the fds it reports. */
static unsigned ep_collect_bits(int ep, uint64_t base, unsigned want, int *fds)
{
	unsigned got = 0;
	uint64_t t0 = mono_ms();

	while ((got & want) != want && mono_ms() - t0 < LONG_MS) {
		struct epoll_event ev[4];
		int n = epoll_wait(ep, ev, 4, (int)(LONG_MS - (mono_ms() - t0)));

		for (int i = 0; i < n; i++) {
			uint64_t k = ev[i].data.u64 - base;

			/* another set's sleeper may be waiting for the others' data */
			if (k < 8 && (want & (1u << k)) && (ev[i].events & EPOLLIN)) {
				got |= 1u << k;
				drain(fds[k]);
			}
		}
	}
	return got;
}

struct set_waiter {
	pthread_t t;
	int ep;
	uint64_t base;
	unsigned want, got;
	int *fds;
};

static void *set_waiter_main(void *arg)
{
	struct set_waiter *w = arg;

	w->got = ep_collect_bits(w->ep, w->base, w->want, w->fds);
	return NULL;
}

/*
 * Several connections of one peer thread in a sleeping set: data sent on two of them at
 * once (by one peer thread) reports both, whether the second had been reported before
 * (hot, listed) or not; and a connection that is also in a second set wakes that set's
 * sleeper too. A peer that rang the set once for the first connection must not take that
 * ring for the second's (a per-set ring dedupe, tried and taken out again, failed the
 * last check when it skipped the second ring without looking for a second set).
 */
static void test_epoll_two_conns(void)
{
	int fds[2], ep = new_epoll(), ep2 = new_epoll();
	struct set_waiter w2 = { .ep = ep2, .base = 80, .want = 2, .fds = fds };
	unsigned got;

	fds[0] = new_conn();             /* the peer's "other" after the next accept */
	fds[1] = new_conn_by(P_ACCEPT_KEEP);
	ep_add(ep, fds[0], EPOLLIN, 70);
	ep_add(ep, fds[1], EPOLLIN, 71);
	/* fds[0] reported a few times (under the library: hot, listed), fds[1] never */
	for (int i = 0; i < 3; i++) {
		peer(&P, P_SEND_OTHER, 2);
		got = ep_collect_bits(ep, 70, 1, fds);
		if (got != 1)
			die("two conns: setup");
	}
	peer(&P, P_SEND_BOTH_LATER, 2);
	got = ep_collect_bits(ep, 70, 3, fds);
	check(got == 3, "two conns: a connection never reported, after one that was, is reported",
	      "got %#x", got);
	/* now both were reported */
	for (int i = 0; i < 3; i++) {
		peer(&P, P_SEND_BOTH_LATER, 2);
		got = ep_collect_bits(ep, 70, 3, fds);
		check(got == 3, "two conns: data on both connections of a sleeping set reports both",
		      "got %#x", got);
	}

	/* fds[1] joins a second set, whose thread goes to sleep first */
	ep_add(ep2, fds[1], EPOLLIN, 81);
	peer(&P, P_SEND_BOTH_LATER, 2);
	got = ep_collect_bits(ep, 70, 3, fds);
	check(got == 3, "two conns: with one connection in two sets, both reported", "got %#x", got);
	for (int i = 0; i < 2; i++) {
		w2.got = 0;
		if (pthread_create(&w2.t, NULL, set_waiter_main, &w2) != 0)
			die("pthread_create");
		sleep_ms(SHORT_MS);
		peer(&P, P_SEND_BOTH_LATER, 2);
		got = ep_collect_bits(ep, 70, 1, fds); /* fds[1]'s data may go to either set */
		pthread_join(w2.t, NULL);
		check(w2.got == 2,
		      "two conns: a connection in two sets wakes the second set's sleeper",
		      "got %#x", w2.got);
		drain(fds[1]);
	}
	close(ep2);
	close(ep);
	close(fds[0]);
	close(fds[1]);
}

/* The peer accepts connecting socket fd, and a byte from it (read here) ends the
 * handshake on both sides before anything is checked: the peer's accept() may return
 * while the handshake still runs (core/negotiate/handshake.h), and its end then brings EPOLLOUT
 * again, as TCP's write space does. What epoll reports afterwards is the current state,
 * for the kernel's TCP as for the library. */
static void accepted(int fd)
{
	if (peer(&P, P_ACCEPT, 0) < 0)
		die("accept");
	peer(&P, P_SEND, 1);
	if (!(poll1(fd, POLLIN, LONG_MS) & POLLIN) || drain(fd) != 1)
		die("the peer's first byte");
}

/* A nonblocking connect registered for EPOLLOUT before the peer accepted. */
static void test_epoll_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), ep = new_epoll(), n, err = 0;
	socklen_t len = sizeof(err);
	uint32_t ev;

	if (fd < 0)
		die("socket");
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	check(ep_add(ep, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, 50) == 0,
	      "connect: ADD while connecting", "-");
	accepted(fd);
	ev = ep_events_for(ep, 50, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "connect: EPOLLOUT when the connection is up",
	      "n %d ev %#x", n, ev);
	check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0,
	      "connect: SO_ERROR 0", "err %d", err);
	peer(&P, P_SEND, 4);
	ev = ep_events_for(ep, 50, LONG_MS, &n);
	check(n == 1 && (ev & EPOLLIN), "connect: then EPOLLIN on data", "n %d ev %#x", n, ev);
	check(drain(fd) == 4, "connect: data arrives", "-");
	check(send(fd, "ping", 4, 0) == 4 && peer(&P, P_READN, 4) == 4, "connect: data leaves", "-");
	close(ep);
	close(fd);
}

/* ------------------------------------------------------------------ added before connect */

/* A nonblocking socket added to ep (events, data) BEFORE connect(), as nginx does with
 * its upstream connections; returns it connected and accepted by the peer. */
static int preconnect(int ep, uint32_t events, uint64_t data)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (fd < 0)
		die("socket");
	if (ep_add(ep, fd, events, data) < 0)
		die("epoll_ctl ADD before connect");
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	accepted(fd);
	return fd;
}

/* Payload both ways, then the peer's FIN: EPOLLIN|EPOLLRDHUP and read() == 0. */
static void preconnect_traffic(const char *mode, int ep, int fd, uint64_t data)
{
	char name[96], b;
	uint32_t ev;
	int n;

	peer(&P, P_SEND, 5);
	ev = ep_events_for(ep, data, LONG_MS, &n);
	snprintf(name, sizeof(name), "preconnect %s: EPOLLIN on data", mode);
	check(n == 1 && (ev & EPOLLIN), name, "n %d ev %#x", n, ev);
	snprintf(name, sizeof(name), "preconnect %s: data arrives", mode);
	check(drain(fd) == 5, name, "-");
	snprintf(name, sizeof(name), "preconnect %s: data leaves", mode);
	check(send(fd, "hello", 5, 0) == 5 && peer(&P, P_READN, 5) == 5, name, "-");
	peer(&P, P_SHUTWR, 0);
	ev = ep_events_for(ep, data, LONG_MS, &n);
	snprintf(name, sizeof(name), "preconnect %s: EPOLLIN|EPOLLRDHUP on the peer's FIN", mode);
	check(n == 1 && (ev & (EPOLLIN | EPOLLRDHUP)) == (EPOLLIN | EPOLLRDHUP), name,
	      "n %d ev %#x", n, ev);
	snprintf(name, sizeof(name), "preconnect %s: read() returns 0 at EOF", mode);
	check(read(fd, &b, 1) == 0, name, "-");
}

static void test_epoll_preconnect(void)
{
	int ep, fd, n, ep2, ep3;
	uint32_t ev;

	/* level-triggered: EPOLLOUT once connected, and again while there is room */
	ep = new_epoll();
	fd = preconnect(ep, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 70);
	ev = ep_events_for(ep, 70, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect LT: EPOLLOUT when the connection is up",
	      "n %d ev %#x", n, ev);
	ev = ep_events_for(ep, 70, SHORT_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect LT: EPOLLOUT again (level)", "n %d ev %#x", n, ev);
	ep_mod(ep, fd, EPOLLIN | EPOLLRDHUP, 70);
	preconnect_traffic("LT", ep, fd, 70);
	close(fd);
	close(ep);

	/* edge-triggered: the connect completion is reported once */
	ep = new_epoll();
	fd = preconnect(ep, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, 71);
	ev = ep_events_for(ep, 71, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect ET: EPOLLOUT when the connection is up",
	      "n %d ev %#x", n, ev);
	ev = ep_events_for(ep, 71, SHORT_MS, &n);
	check(n == 0, "preconnect ET: EPOLLOUT reported once", "n %d ev %#x", n, ev);
	preconnect_traffic("ET", ep, fd, 71);
	close(fd);
	close(ep);

	/* one-shot: the completion fires it; data then waits for a MOD */
	ep = new_epoll();
	fd = preconnect(ep, EPOLLIN | EPOLLOUT | EPOLLONESHOT, 72);
	ev = ep_events_for(ep, 72, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect ONESHOT: EPOLLOUT when the connection is up",
	      "n %d ev %#x", n, ev);
	peer(&P, P_SEND, 3);
	if (poll1(fd, POLLIN, LONG_MS) != (POLLIN | POLLOUT) && poll1(fd, POLLIN, 0) != POLLIN)
		die("poll");
	ev = ep_events_for(ep, 72, SHORT_MS, &n);
	check(n == 0, "preconnect ONESHOT: disabled after it fired", "n %d ev %#x", n, ev);
	ep_mod(ep, fd, EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, 72);
	ev = ep_events_for(ep, 72, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "preconnect ONESHOT: MOD re-arms it", "n %d ev %#x", n, ev);
	check(drain(fd) == 3, "preconnect ONESHOT: data arrives", "-");
	ep_mod(ep, fd, EPOLLIN | EPOLLRDHUP, 72);
	preconnect_traffic("ONESHOT", ep, fd, 72);
	close(fd);
	close(ep);

	/* EPOLLOUT for the connect, then MOD to EPOLLIN (the usual client state machine) */
	ep = new_epoll();
	fd = preconnect(ep, EPOLLOUT, 73);
	ev = ep_events_for(ep, 73, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect OUT->IN: EPOLLOUT when the connection is up",
	      "n %d ev %#x", n, ev);
	ep_mod(ep, fd, EPOLLIN | EPOLLRDHUP, 73);
	ev = ep_events_for(ep, 73, SHORT_MS, &n);
	check(n == 0, "preconnect OUT->IN: nothing before data", "n %d ev %#x", n, ev);
	preconnect_traffic("OUT->IN", ep, fd, 73);
	close(fd);
	close(ep);

	/* a one-shot registration that fired before connect() (an unconnected socket is
	 * writable and hung up) stays disabled across the upgrade */
	ep = new_epoll();
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket");
	ep_add(ep, fd, EPOLLOUT | EPOLLONESHOT, 74);
	ev = ep_events_for(ep, 74, 0, &n);
	check(n == 1 && (ev & EPOLLOUT), "preconnect fired ONESHOT: fires before connect",
	      "n %d ev %#x", n, ev);
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	accepted(fd);
	if (poll1(fd, POLLOUT, LONG_MS) != POLLOUT)
		die("poll");
	ev = ep_events_for(ep, 74, SHORT_MS, &n);
	check(n == 0, "preconnect fired ONESHOT: still disabled after connect", "n %d ev %#x", n, ev);
	ep_mod(ep, fd, EPOLLIN | EPOLLRDHUP, 74);
	preconnect_traffic("fired ONESHOT", ep, fd, 74);
	close(fd);
	close(ep);

	/* MOD before connect() (the record follows it), and DEL before connect() (no
	 * registration left: the set stays quiet until an ADD after the connect) */
	ep = new_epoll();
	ep2 = new_epoll();
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket");
	ep_add(ep, fd, EPOLLIN, 78);
	ep_mod(ep, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, 79);
	ep_add(ep2, fd, EPOLLIN | EPOLLOUT, 78);
	epoll_ctl(ep2, EPOLL_CTL_DEL, fd, NULL);
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	accepted(fd);
	ev = ep_events_for(ep, 79, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect MOD: EPOLLOUT with the new data", "n %d ev %#x", n, ev);
	ev = ep_events_for(ep2, 78, SHORT_MS, &n);
	check(n == 0, "preconnect DEL: nothing in the set it left", "n %d ev %#x", n, ev);
	ep_add(ep2, fd, EPOLLOUT, 77);
	ev = ep_events_for(ep2, 77, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect DEL: ADD after connect() works", "n %d ev %#x", n, ev);
	close(ep2);
	preconnect_traffic("MOD", ep, fd, 79);
	close(fd);
	close(ep);

	/* one socket in two sets (LT and ET), and in a third set closed before connect() */
	ep = new_epoll();
	ep2 = new_epoll();
	ep3 = new_epoll();
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket");
	ep_add(ep, fd, EPOLLIN | EPOLLOUT, 75);
	ep_add(ep2, fd, EPOLLIN | EPOLLOUT | EPOLLET, 76);
	ep_add(ep3, fd, EPOLLIN | EPOLLOUT, 77);
	close(ep3);
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	accepted(fd);
	ev = ep_events_for(ep, 75, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect two sets: EPOLLOUT in the LT one", "n %d ev %#x", n, ev);
	ev = ep_events_for(ep2, 76, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect two sets: EPOLLOUT in the ET one", "n %d ev %#x", n, ev);
	peer(&P, P_SEND, 2);
	ev = ep_events_for(ep2, 76, LONG_MS, &n);
	check(n == 1 && (ev & EPOLLIN), "preconnect two sets: EPOLLIN in the ET one", "n %d ev %#x", n, ev);
	ev = ep_events_for(ep, 75, LONG_MS, &n);
	check(n == 1 && ev == (EPOLLIN | EPOLLOUT), "preconnect two sets: EPOLLIN in the LT one",
	      "n %d ev %#x", n, ev);
	check(drain(fd) == 2, "preconnect two sets: data arrives", "-");
	check(send(fd, "ab", 2, 0) == 2 && peer(&P, P_READN, 2) == 2, "preconnect two sets: data leaves", "-");
	close(fd);
	close(ep2);
	close(ep);
}

/* Registrations the emulation cannot take over: the socket stays TCP (run alone, with
 * --only preconnect_fallback: its connections are not upgraded). */
static void test_epoll_preconnect_fallback(void)
{
	int ep = new_epoll(), fd, dupfd, n, st = 0;
	uint32_t ev;
	pid_t pid;

	/* registered through a dup of the socket */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0 || (dupfd = dup(fd)) < 0)
		die("socket/dup");
	ep_add(ep, dupfd, EPOLLIN | EPOLLOUT | EPOLLET, 80);
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	accepted(fd);
	ev = ep_events_for(ep, 80, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect dup: EPOLLOUT through the dup", "n %d ev %#x", n, ev);
	peer(&P, P_SEND, 4);
	ev = ep_events_for(ep, 80, LONG_MS, &n);
	check(n == 1 && (ev & EPOLLIN), "preconnect dup: EPOLLIN through the dup", "n %d ev %#x", n, ev);
	check(drain(dupfd) == 4, "preconnect dup: data arrives", "-");
	check(send(fd, "abcd", 4, 0) == 4 && peer(&P, P_READN, 4) == 4, "preconnect dup: data leaves", "-");
	close(dupfd);
	close(fd);

	/* registered in a set that a forked child shares */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket");
	ep_add(ep, fd, EPOLLIN | EPOLLOUT | EPOLLET, 81);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		sleep_ms(LATER_MS);
		_exit(0);
	}
	if (connect(fd, (struct sockaddr *)&peer_addr, sizeof(peer_addr)) < 0 &&
	    errno != EINPROGRESS)
		die("connect");
	accepted(fd);
	ev = ep_events_for(ep, 81, LONG_MS, &n);
	check(n == 1 && ev == EPOLLOUT, "preconnect fork: EPOLLOUT", "n %d ev %#x", n, ev);
	peer(&P, P_SEND, 4);
	ev = ep_events_for(ep, 81, LONG_MS, &n);
	check(n == 1 && (ev & EPOLLIN), "preconnect fork: EPOLLIN", "n %d ev %#x", n, ev);
	check(drain(fd) == 4, "preconnect fork: data arrives", "-");
	check(send(fd, "abcd", 4, 0) == 4 && peer(&P, P_READN, 4) == 4, "preconnect fork: data leaves", "-");
	waitpid(pid, &st, 0);
	close(fd);
	close(ep);
}

/* ------------------------------------------------------------------ the first SMC fd */

#define RACE_ROUNDS 40
enum { RACE_PIPE = 90, RACE_CONN = 91, RACE_INNER = 92 };

struct racer {
	pthread_t t;
	int ep, inner;     /* inner: an epoll set inside ep (nested rounds), or -1 */
	int how;           /* 0 epoll_wait, 1 epoll_pwait, 2 epoll_pwait2 */
	int bogus;         /* events whose data was never registered */
	bool got_conn;     /* the connection's EPOLLIN was reported */
	uint64_t bad;
};

static int race_wait(int how, int ep, struct epoll_event *ev, int max, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	sigset_t none;

	sigemptyset(&none);
	if (how == 1)
		return epoll_pwait(ep, ev, max, ms, &none);
	if (how == 2) {
		int r = epoll_pwait2(ep, ev, max, &ts, &none);

		if (!(r < 0 && errno == ENOSYS))
			return r;
	}
	return epoll_wait(ep, ev, max, ms);
}

static void *racer_main(void *arg)
{
	struct racer *r = arg;
	uint64_t end = mono_ms() + LONG_MS;

	while (!r->got_conn && mono_ms() < end) {
		struct epoll_event ev[8];
		int n = race_wait(r->how, r->ep, ev, 8, LONG_MS);

		for (int i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;

			if (d == RACE_CONN && (ev[i].events & EPOLLIN)) {
				r->got_conn = true;
			} else if (d == RACE_INNER && r->inner >= 0) {
				struct epoll_event iev[8];
				int k = epoll_wait(r->inner, iev, 8, 0);

				for (int j = 0; j < k; j++) {
					if (iev[j].data.u64 == RACE_CONN && (iev[j].events & EPOLLIN))
						r->got_conn = true;
					else if (iev[j].data.u64 != RACE_CONN)
						r->bogus++, r->bad = iev[j].data.u64;
				}
			} else if (d != RACE_CONN && d != RACE_PIPE) {
				r->bogus++;
				r->bad = d;
			}
		}
	}
	return NULL;
}

/* A thread sleeps in epoll_wait on a set holding only a pipe while another thread adds
 * the set's first connection (Apache's listener thread), or adds a socket and then
 * connects it (the registration moves into the emulation under the sleeper): the
 * sleeper must never be handed an event nobody registered, and must hear the
 * connection's data. */
static void test_epoll_first_conn_race(void)
{
	int bogus = 0, missed = 0, pp[2], conns[RACE_ROUNDS];
	uint64_t bad = 0;

	if (pipe(pp) < 0)
		die("pipe");
	for (int round = 0; round < RACE_ROUNDS; round++) {
		bool nested = round % 4 == 3, pre = round % 4 == 1;
		struct racer r = { .ep = new_epoll(), .inner = -1, .how = round % 3 };
		int fd = pre ? -1 : new_conn(), target;

		ep_add(r.ep, pp[0], EPOLLIN, RACE_PIPE);
		if (nested) {
			r.inner = new_epoll();
			ep_add(r.ep, r.inner, EPOLLIN, RACE_INNER);
		}
		target = nested ? r.inner : r.ep;
		if (pthread_create(&r.t, NULL, racer_main, &r) != 0)
			die("pthread_create");
		sleep_ms(1 + round % 3); /* the racer is (most likely) asleep in the kernel */
		if (pre)
			fd = preconnect(target, EPOLLIN | EPOLLOUT | EPOLLET, RACE_CONN);
		else
			ep_add(target, fd, EPOLLIN | (round % 2 ? EPOLLET : 0), RACE_CONN);
		if (pre && poll1(fd, POLLOUT, LONG_MS) != POLLOUT)
			die("poll");
		peer(&P, P_SEND, 1);
		pthread_join(r.t, NULL);
		bogus += r.bogus;
		if (r.bogus)
			bad = r.bad;
		if (!r.got_conn) {
			missed++;
			printf("# first conn race: round %d missed (%s, %s, wait %d)\n", round,
			       pre ? "connected after the ADD" : "added connected",
			       nested ? "nested" : round % 2 ? "edge" : "level", r.how);
		}
		conns[round] = fd;
		if (r.inner >= 0)
			close(r.inner);
		close(r.ep);
	}
	/* closed together, and not at once (readiness.sh runs this with
	 * SMC_SHORT_CONN_US=0, where every connection is upgraded anyway) */
	sleep_ms(SHORT_MS);
	for (int round = 0; round < RACE_ROUNDS; round++)
		close(conns[round]);
	close(pp[0]);
	close(pp[1]);
	check(bogus == 0, "first conn race: no event nobody registered",
	      "%d bogus events, e.g. data %#llx", bogus, (unsigned long long)bad);
	check(missed == 0, "first conn race: the connection's data is reported",
	      "%d of %d rounds missed it", missed, RACE_ROUNDS);
}

/* A set nested in an outer set that only the kernel waits on (the outer holds nothing
 * of ours): a thread sleeps on the outer set while connections are added to the inner
 * one (the first made it emulated, and left it again before the thread slept), the
 * second while it sleeps, and the second's peer sends. Linux wakes the outer set's sleeper; the emulation must ask the
 * second connection's peer for a ring, since no wait of its own looks at the inner set. */
static void test_epoll_nested_kernel(void)
{
	int outer = new_epoll(), inner = new_epoll(), first, second;
	struct racer r = { .ep = outer, .inner = inner, .how = 0 };

	ep_add(outer, inner, EPOLLIN, RACE_INNER);
	first = new_conn();
	ep_add(inner, first, EPOLLIN, RACE_PIPE); /* the inner set becomes emulated */
	/* out again: its peer closes it at the next accept, and its end of stream would
	 * wake the sleeper by itself */
	if (epoll_ctl(inner, EPOLL_CTL_DEL, first, NULL) < 0)
		die("epoll_ctl DEL");
	if (pthread_create(&r.t, NULL, racer_main, &r) != 0)
		die("pthread_create");
	sleep_ms(SHORT_MS); /* the racer asleep in the kernel on the outer set */
	second = new_conn();
	ep_add(inner, second, EPOLLIN, RACE_CONN);
	sleep_ms(SHORT_MS);
	peer(&P, P_SEND, 1);
	pthread_join(r.t, NULL);
	check(r.got_conn, "nested kernel: data on a connection added under the sleeper wakes it",
	      "no EPOLLIN in %d ms", LONG_MS);
	check(r.bogus == 0, "nested kernel: no event nobody registered", "%d", r.bogus);
	close(second);
	close(first);
	close(inner);
	close(outer);
}

/* One thread closes a connection's fd while another polls it and adds it to (and
 * removes it from) an epoll set in a loop: the lookups of the fd's connection must hold
 * it against the close (under ASan a use after free aborts the run). The waiter sees
 * the fd open (nothing ready, the peer sends nothing) and then closed, never anything
 * else. Every connection is upgraded (readiness.sh: SMC_SHORT_CONN_US=0). */
#define CLOSE_RACE_ROUNDS 60

struct close_racer {
	pthread_t t;
	int fd, ep;
	int stop;          /* atomic: the main thread closed fd and saw it closed */
	int odd;           /* answers that are neither "open, nothing ready" nor "closed" */
	int what;          /* the last of them: 1000 + revents, or 2000/3000 + errno */
	bool saw_closed;
};

static void *close_racer_main(void *arg)
{
	struct close_racer *r = arg;
	struct epoll_event ev = { .events = EPOLLIN };

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
		int n = poll(&pfd, 1, 0);

		if (n == 1 && pfd.revents == POLLNVAL)
			r->saw_closed = true;
		else if (n != 0)
			r->odd++, r->what = 1000 + pfd.revents;
		if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->fd, &ev) == 0) {
			(void)epoll_wait(r->ep, &ev, 1, 0);
			/* ENOENT: the close took the registration out of the set before the
			 * fd number was gone (the library forgets an fd before the real
			 * close) */
			if (epoll_ctl(r->ep, EPOLL_CTL_DEL, r->fd, NULL) < 0 && errno != EBADF &&
			    errno != ENOENT)
				r->odd++, r->what = 2000 + errno;
		} else if (errno == EBADF) {
			r->saw_closed = true;
		} else {
			r->odd++, r->what = 3000 + errno;
		}
	}
	return NULL;
}

static void test_close_race(void)
{
	int odd = 0, unseen = 0, what = 0;

	for (int round = 0; round < CLOSE_RACE_ROUNDS; round++) {
		struct close_racer r = { .fd = new_conn(), .ep = new_epoll() };
		struct pollfd pfd;

		if (pthread_create(&r.t, NULL, close_racer_main, &r) != 0)
			die("pthread_create");
		sleep_ms(12 + round % 5);
		close(r.fd);
		/* the racer stops once it has met the closed fd (or after LONG_MS) */
		for (uint64_t end = mono_ms() + LONG_MS; mono_ms() < end;) {
			pfd = (struct pollfd){ .fd = r.fd, .events = POLLIN };
			if (poll(&pfd, 1, 0) != 1 || pfd.revents != POLLNVAL)
				break; /* the number was reused: stop now */
			sleep_ms(1);
			if (__atomic_load_n(&r.saw_closed, __ATOMIC_RELAXED))
				break;
		}
		__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
		pthread_join(r.t, NULL);
		odd += r.odd;
		if (r.odd)
			what = r.what;
		unseen += !r.saw_closed;
		close(r.ep);
	}
	check(odd == 0, "close race: the waiter sees the fd open and idle, then closed",
	      "%d other answers, e.g. %d", odd, what);
	check(unseen == 0, "close race: the waiter sees the close",
	      "%d of %d rounds never saw it", unseen, CLOSE_RACE_ROUNDS);
}

/* A set created before a fork is shared with the child; the child adds an upgraded
 * connection of its own (both ends in the child) and makes it ready: the parent,
 * asleep on the same set, must never be handed the library's event for it. */
static void test_epoll_fork_shared_set(void)
{
	int ep = new_epoll(), pp[2], bogus = 0, n, st = 0;
	uint64_t end, bad = 0;
	uint32_t ev;
	pid_t pid;

	if (plain_peer) { /* the child's connection would be upgraded */
		printf("# skipped: the child's own connection runs the library at both ends\n");
		close(ep);
		return;
	}
	if (pipe(pp) < 0)
		die("pipe");
	ep_add(ep, pp[0], EPOLLIN, RACE_PIPE);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct peer own;
		struct sockaddr_in addr;
		int c, a;

		memset(&own, 0, sizeof(own));
		listen_loopback(&own, &addr);
		c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (c < 0 || (connect(c, (struct sockaddr *)&addr, sizeof(addr)) < 0 &&
			      errno != EINPROGRESS))
			_exit(3);
		a = accept(own.lfd, NULL, NULL);
		if (a < 0 || poll1(c, POLLOUT, LONG_MS) != POLLOUT)
			_exit(3);
		ep_add(ep, c, EPOLLIN, RACE_CONN);
		if (write(a, "x", 1) != 1)
			_exit(3);
		sleep_ms(LATER_MS); /* ready, not harvested: the parent sleeps meanwhile */
		ep_events_for(ep, RACE_CONN, LONG_MS, NULL);
		close(c);
		close(a);
		close(own.lfd);
		_exit(0); /* no stats file: it would count the parent's connections again */
	}
	end = mono_ms() + 3 * LATER_MS;
	while (mono_ms() < end) {
		struct epoll_event evs[8];
		int k = epoll_wait(ep, evs, 8, LATER_MS);

		for (int i = 0; i < k; i++) {
			if (evs[i].data.u64 != RACE_PIPE && evs[i].data.u64 != RACE_CONN) {
				bogus++;
				bad = evs[i].data.u64;
			}
		}
	}
	waitpid(pid, &st, 0);
	check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork shared set: the child's connection works",
	      "status %#x", st);
	check(bogus == 0, "fork shared set: no event nobody registered",
	      "%d bogus events, e.g. data %#llx", bogus, (unsigned long long)bad);
	if (write(pp[1], "p", 1) != 1)
		die("write");
	ev = ep_events_for(ep, RACE_PIPE, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "fork shared set: the parent's own fds still reported",
	      "n %d ev %#x", n, ev);
	close(pp[0]);
	close(pp[1]);
	close(ep);
}

/* A forked child that closes its copies must not disturb the parent's epoll set. */
static void test_epoll_fork(void)
{
	int fd = new_conn(), ep = new_epoll(), n, st = 0;
	uint32_t ev;
	pid_t pid;

	ep_add(ep, fd, EPOLLIN, 60);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(ep);
		close(fd);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	peer(&P, P_SEND_LATER, 3);
	ev = ep_events_for(ep, 60, LONG_MS, &n);
	check(n == 1 && ev == EPOLLIN, "fork: child closing its copies leaves the parent's set working",
	      "n %d ev %#x", n, ev);
	check(drain(fd) == 3, "fork: data still flows in the parent", "-");
	check(send(fd, "abc", 3, 0) == 3 && peer(&P, P_READN, 3) == 3,
	      "fork: data still leaves the parent", "-");
	close(ep);
	close(fd);
}

/* Data of the events epoll_wait reports now (up to 8), or -1 for none: bit (data - base). */
static unsigned ep_data_bits(int ep, uint64_t base, int ms, int *count)
{
	struct epoll_event ev[8];
	int n = epoll_wait(ep, ev, 8, ms);
	unsigned bits = 0;

	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 >= base && ev[i].data.u64 < base + 32)
			bits |= 1u << (ev[i].data.u64 - base);
	*count = n;
	return bits;
}

/* Sends fd over a unix socket and closes what arrives (the connection goes back to TCP
 * under the library: its fd reached another process, as far as it can tell). */
static void pass_fd(int fd)
{
	char ctl[CMSG_SPACE(sizeof(int))], b = 'f';
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			    .msg_controllen = sizeof(ctl) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	int sp[2], got;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		die("socketpair");
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	if (sendmsg(sp[0], &m, 0) != 1)
		die("sendmsg SCM_RIGHTS");
	m.msg_controllen = sizeof(ctl);
	if (recvmsg(sp[1], &m, 0) != 1 || !(cm = CMSG_FIRSTHDR(&m)) || cm->cmsg_type != SCM_RIGHTS)
		die("recvmsg SCM_RIGHTS");
	memcpy(&got, CMSG_DATA(cm), sizeof(int));
	close(got);
	close(sp[0]);
	close(sp[1]);
}

/* An epoll registration belongs to the open file: Linux keys it by (file, fd number) and
 * removes it when the file is released (eventpoll_release), so closing the registered
 * number while a dup stays open leaves it reporting with its data; epoll_ctl by the
 * closed number is EBADF, and the number reused for the same file names it again. */
static void test_epoll_dup_close(void)
{
	int fd = new_conn(), ep = new_epoll(), ep2 = new_epoll(), d, n, r, old;
	unsigned bits;

	/* a dup registered, then closed */
	d = dup(fd);
	ep_add(ep, d, EPOLLIN, 71);
	close(d);
	peer(&P, P_SEND, 1);
	bits = ep_data_bits(ep, 70, LONG_MS, &n);
	check(n == 1 && bits == 1u << 1, "dup close: a closed dup's registration still reports",
	      "n %d data bits %#x", n, bits);
	r = epoll_ctl(ep, EPOLL_CTL_DEL, d, NULL);
	check(r == -1 && errno == EBADF, "dup close: DEL by the closed number is EBADF",
	      "r %d errno %d", r, errno);
	check(ep_add(ep, fd, EPOLLIN, 72) == 0,
	      "dup close: the open number is a registration of its own", "-");
	bits = ep_data_bits(ep, 70, LONG_MS, &n);
	check(n == 2 && bits == (1u << 1 | 1u << 2), "dup close: both registrations report",
	      "n %d data bits %#x", n, bits);
	drain(fd);
	bits = ep_data_bits(ep, 70, 0, &n);
	check(n == 0, "dup close: nothing once drained", "n %d", n);

	/* the registered fd closed, its dup stays */
	ep_add(ep2, fd, EPOLLIN | EPOLLET, 73);
	old = fd;
	fd = dup(old);
	close(old);
	peer(&P, P_SEND_LATER, 2);
	bits = ep_data_bits(ep2, 70, LONG_MS, &n);
	check(n == 1 && bits == 1u << 3,
	      "dup close: the registered fd closed, a sleeping wait is woken for it",
	      "n %d data bits %#x", n, bits);
	bits = ep_data_bits(ep2, 70, 0, &n);
	check(n == 0, "dup close: still edge-triggered", "n %d", n);
	/* the number again, for the same file: the same registration */
	if (dup2(fd, old) != old)
		die("dup2");
	r = ep_add(ep2, old, EPOLLIN, 74);
	check(r == -1 && errno == EEXIST, "dup close: the number reused by a dup is EEXIST",
	      "r %d errno %d", r, errno);
	check(ep_mod(ep2, old, EPOLLIN, 75) == 0, "dup close: ... and MOD reaches it", "-");
	bits = ep_data_bits(ep2, 70, LONG_MS, &n);
	check(n == 1 && bits == 1u << 5, "dup close: the modified registration reports",
	      "n %d data bits %#x", n, bits);
	close(old);

	/* the last fd: every registration goes (undrained data would report otherwise) */
	close(fd);
	bits = ep_data_bits(ep, 70, 0, &n);
	check(n == 0, "dup close: the last close removes the registrations", "n %d", n);
	bits = ep_data_bits(ep2, 70, 0, &n);
	check(n == 0, "dup close: ... from every set", "n %d", n);

	/* the registered fd closed, then the connection goes back to TCP: the kernel's set
	 * takes the registration over */
	fd = new_conn();
	ep_add(ep, fd, EPOLLIN, 76);
	old = fd;
	fd = fcntl(old, F_DUPFD_CLOEXEC, old + 1);
	close(old);
	pass_fd(fd);
	peer(&P, P_SEND, 3);
	bits = ep_data_bits(ep, 70, LONG_MS, &n);
	check(n == 1 && bits == 1u << 6,
	      "dup close: after a fallback to TCP the closed fd's registration reports",
	      "n %d data bits %#x", n, bits);
	r = epoll_ctl(ep, EPOLL_CTL_DEL, old, NULL);
	check(r == -1 && errno == EBADF,
	      "dup close: after the fallback, DEL by the closed number is EBADF",
	      "r %d errno %d", r, errno);
	check(drain(fd) == 3, "dup close: the data arrives after the fallback", "-");
	peer(&P, P_SEND, 1);
	bits = ep_data_bits(ep, 70, LONG_MS, &n);
	check(n == 1 && bits == 1u << 6, "dup close: ... and keeps reporting",
	      "n %d data bits %#x", n, bits);
	close(fd);
	bits = ep_data_bits(ep, 70, 0, &n);
	check(n == 0, "dup close: after the fallback, the last close removes it", "n %d", n);
	close(ep);
	close(ep2);
}

static const struct {
	const char *name;
	void (*fn)(void);
} groups[] = {
	{ "poll", test_poll_basic },
	{ "select", test_select },
	{ "epoll_lt_et", test_epoll_lt_et },
	{ "epoll_pwait", test_epoll_pwait },
	{ "epoll_out", test_epoll_out },
	{ "epoll_hup", test_epoll_hup },
	{ "peer_close_no_hup", test_peer_close_no_hup },
	{ "epoll_sets", test_epoll_sets },
	{ "epoll_mixed", test_epoll_mixed },
	{ "epoll_ctl_errors", test_epoll_ctl_errors },
	{ "eintr", test_eintr },
	{ "epoll_threads", test_epoll_threads },
	{ "epoll_polled", test_epoll_polled },
	{ "epoll_two_conns", test_epoll_two_conns },
	{ "epoll_connect", test_epoll_connect },
	{ "epoll_fork", test_epoll_fork },
	{ "epoll_preconnect", test_epoll_preconnect },
	{ "epoll_first_conn_race", test_epoll_first_conn_race },
	{ "epoll_nested_kernel", test_epoll_nested_kernel },
	{ "epoll_fork_shared_set", test_epoll_fork_shared_set },
	{ "close_race", test_close_race },
	{ "epoll_dup_close", test_epoll_dup_close },
	/* only when asked for by name (--only): its connections stay TCP */
	{ "preconnect_fallback", test_epoll_preconnect_fallback },
};
#define GROUPS_BY_DEFAULT (sizeof(groups) / sizeof(groups[0]) - 1)

int main(int argc, char **argv)
{
	bool forked = false, plain = false;
	const char *only = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--fork")) {
			forked = true;
		} else if (!strcmp(argv[i], "--plain-peer")) {
			forked = plain = plain_peer = true;
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else if (!strcmp(argv[i], "--peer-child") && i + 1 < argc) {
			run_peer_child(atoi(argv[i + 1]));
		} else {
			fprintf(stderr, "usage: %s [--fork | --plain-peer] [--only NAME]\n"
				"  --fork        the peer end runs in a child process\n"
				"  --plain-peer  ... re-executed without LD_PRELOAD (TCP fallback)\n"
				"  --only NAME   run the check groups whose name contains NAME\n",
				argv[0]);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	peer_start(&P, forked, plain, argv[0], &peer_addr);
	printf("# readiness_check: peer %s, port %d\n",
	       plain ? "in a child process without LD_PRELOAD" :
	       forked ? "in a child process" : "in-process", ntohs(peer_addr.sin_port));

	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		if (only ? !strstr(groups[i].name, only) : i >= GROUPS_BY_DEFAULT)
			continue;
		printf("# %s\n", groups[i].name);
		groups[i].fn();
	}

	peer_stop(&P);
	printf("# %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
