/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * passthrough_check: exercises every call smc-preload interposes, over real TCP
 * loopback (and UDP, unix sockets, pipes, files) and on error paths, and compares
 * results and errno with what Linux TCP does. One line per check ("ok   name" or
 * "FAIL name: detail"); exit status 1 if any check failed.
 *
 * The output of a passing run does not depend on fd numbers, ports, pids or timing,
 * so tests/integration/passthrough.sh can require identical output with and without
 * LD_PRELOAD. No check asserts a duration: timeouts are only checked to expire.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* glibc's fortify entry points, called directly so the check does not depend on the
 * build's -D_FORTIFY_SOURCE. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t n, size_t buflen, int flags,
		       __SOCKADDR_ARG addr, socklen_t *restrict addrlen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		const sigset_t *mask, size_t fdslen);

/* ------------------------------------------------------------------ reporting */

static int failures;
static int checks;
static const char *volatile current_section = "start";

/* A broken interposer can make a blocking call hang forever: report where, and stop. */
#define WATCHDOG_SECONDS 60

static void *watchdog(void *arg)
{
	int last = -1, idle = 0;

	(void)arg;
	while (idle < WATCHDOG_SECONDS) {
		sleep(1);
		int now = __atomic_load_n(&checks, __ATOMIC_RELAXED);
		idle = now == last ? idle + 1 : 0;
		last = now;
	}
	printf("FAIL watchdog: no check finished for %d s, in section %s\n", WATCHDOG_SECONDS,
	       current_section);
	fflush(stdout);
	_exit(3);
}

static void report(bool ok, const char *name, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void report(bool ok, const char *name, int line, const char *fmt, ...)
{
	__atomic_add_fetch(&checks, 1, __ATOMIC_RELAXED);
	if (ok) {
		printf("ok   %s\n", name);
	} else {
		va_list ap;
		failures++;
		printf("FAIL %s (line %d): ", name, line);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
}

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "?";
}

/* A condition; on failure shows errno as it was right after the condition. */
#define CHECK(name, cond) do { \
	bool ok_ = (cond); int e_ = errno; \
	report(ok_, name, __LINE__, "%s is false (errno %s)", #cond, errname(e_)); \
} while (0)

/* expr must fail with -1 and errno want. */
#define CHECK_ERR(name, expr, want) do { \
	errno = 0; long r_ = (long)(expr); int e_ = errno; \
	report(r_ == -1 && e_ == (want), name, __LINE__, "returned %ld errno %s, want -1 %s", \
	       r_, errname(e_), errname(want)); \
} while (0)

/* expr must return exactly want. */
#define CHECK_RET(name, expr, want) do { \
	errno = 0; long r_ = (long)(expr); int e_ = errno; \
	report(r_ == (long)(want), name, __LINE__, "returned %ld (errno %s), want %ld", \
	       r_, errname(e_), (long)(want)); \
} while (0)

/* ------------------------------------------------------------------ helpers */

static void die(const char *what)
{
	printf("FAIL setup: %s: %s\n", what, errname(errno));
	exit(2);
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A listening TCP socket on 127.0.0.1 with a kernel-chosen port. */
static int listener(struct sockaddr_in *addr, int type_flags)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(AF_INET, SOCK_STREAM | type_flags, 0);

	*addr = loopback(0);
	if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)addr, &len) < 0)
		die("listener");
	return fd;
}

/* A connected TCP pair over loopback: *cli connected, *srv accepted. */
static void tcp_pair(int *cli, int *srv)
{
	struct sockaddr_in addr;
	int lfd = listener(&addr, 0);

	*cli = socket(AF_INET, SOCK_STREAM, 0);
	if (*cli < 0 || connect(*cli, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		die("connect");
	*srv = accept(lfd, NULL, NULL);
	if (*srv < 0)
		die("accept");
	close(lfd);
}

static void close_pair(int a, int b)
{
	close(a);
	close(b);
}

/* A port nothing listens on: bound, then closed. */
static uint16_t unused_port(void)
{
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		die("unused_port");
	close(fd);
	return ntohs(a.sin_port);
}

static bool wait_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static bool write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* Reads exactly n bytes (blocking). */
static bool read_exact(int fd, void *buf, size_t n)
{
	char *p = buf;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

static bool fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* Helper threads block every signal, so the SIGALRM/SIGUSR1 the checks send always
 * interrupt the main thread. */
static void spawn_thread(pthread_t *tid, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	if (pthread_create(tid, NULL, fn, arg) != 0)
		die("pthread_create");
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* A one-shot delayed writer, for data that must arrive while the caller blocks. */
struct delayed_write {
	int fd;
	int delay_ms;
	const char *data;
	size_t len;
	pthread_t tid;
};

static void *delayed_write_run(void *arg)
{
	struct delayed_write *dw = arg;
	usleep((useconds_t)dw->delay_ms * 1000);
	write_all(dw->fd, dw->data, dw->len);
	return NULL;
}

static void delayed_write_start(struct delayed_write *dw, int fd, int delay_ms, const char *data)
{
	dw->fd = fd;
	dw->delay_ms = delay_ms;
	dw->data = data;
	dw->len = strlen(data);
	spawn_thread(&dw->tid, delayed_write_run, dw);
}

static void delayed_write_join(struct delayed_write *dw)
{
	pthread_join(dw->tid, NULL);
}

static void on_alarm(int sig)
{
	(void)sig;
}

static void set_alarm_handler(bool restart)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = restart ? SA_RESTART : 0 };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
}

static void arm_timer_ms(int ms)
{
	struct itimerval it = { .it_value = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 } };
	setitimer(ITIMER_REAL, &it, NULL);
}

/* ------------------------------------------------------------------ error paths */

static void check_bad_fds(void)
{
	char buf[8] = { 0 };
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct sockaddr_in a = loopback(9);
	socklen_t len = sizeof(a);
	int one = 1;
	struct epoll_event ev = { .events = EPOLLIN };
	const int bad = 987654; /* far above any fd in use, below no limit we rely on */

	CHECK_ERR("ebadf read", read(-1, buf, 1), EBADF);
	CHECK_ERR("ebadf read high", read(bad, buf, 1), EBADF);
	CHECK_ERR("ebadf write", write(-1, "x", 1), EBADF);
	CHECK_ERR("ebadf readv", readv(-1, &iov, 1), EBADF);
	CHECK_ERR("ebadf writev", writev(-1, &iov, 1), EBADF);
	CHECK_ERR("ebadf recv", recv(-1, buf, 1, 0), EBADF);
	CHECK_ERR("ebadf recvfrom", recvfrom(-1, buf, 1, 0, NULL, NULL), EBADF);
	CHECK_ERR("ebadf recvmsg", recvmsg(-1, &msg, 0), EBADF);
	CHECK_ERR("ebadf send", send(-1, "x", 1, 0), EBADF);
	CHECK_ERR("ebadf sendto", sendto(-1, "x", 1, 0, NULL, 0), EBADF);
	CHECK_ERR("ebadf sendmsg", sendmsg(-1, &msg, 0), EBADF);
	CHECK_ERR("ebadf close", close(-1), EBADF);
	CHECK_ERR("ebadf close high", close(bad), EBADF);
	CHECK_ERR("ebadf shutdown", shutdown(-1, SHUT_RDWR), EBADF);
	CHECK_ERR("ebadf connect", connect(-1, (struct sockaddr *)&a, sizeof(a)), EBADF);
	CHECK_ERR("ebadf bind", bind(-1, (struct sockaddr *)&a, sizeof(a)), EBADF);
	CHECK_ERR("ebadf listen", listen(-1, 1), EBADF);
	CHECK_ERR("ebadf accept", accept(-1, NULL, NULL), EBADF);
	CHECK_ERR("ebadf accept4", accept4(-1, NULL, NULL, 0), EBADF);
	CHECK_ERR("ebadf getsockopt", getsockopt(-1, SOL_SOCKET, SO_TYPE, &one, &len), EBADF);
	CHECK_ERR("ebadf setsockopt", setsockopt(-1, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), EBADF);
	CHECK_ERR("ebadf getsockname", getsockname(-1, (struct sockaddr *)&a, &len), EBADF);
	CHECK_ERR("ebadf getpeername", getpeername(-1, (struct sockaddr *)&a, &len), EBADF);
	CHECK_ERR("ebadf dup", dup(-1), EBADF);
	CHECK_ERR("ebadf dup2", dup2(-1, 100), EBADF);
	CHECK_ERR("ebadf dup3", dup3(-1, 100, 0), EBADF);
	CHECK_ERR("ebadf fcntl", fcntl(-1, F_GETFL), EBADF);
	CHECK_ERR("ebadf ioctl", ioctl(-1, FIONREAD, &one), EBADF);
	CHECK_ERR("ebadf epoll_ctl", epoll_ctl(-1, EPOLL_CTL_ADD, 0, &ev), EBADF);
	CHECK_ERR("ebadf epoll_wait", epoll_wait(-1, &ev, 1, 0), EBADF);
	CHECK_ERR("ebadf sendfile out", sendfile(-1, 0, NULL, 1), EBADF);
}

static void check_socket_errors(void)
{
	int pfd[2];
	char buf[4];
	int one = 1;
	socklen_t len = sizeof(one);

	CHECK_ERR("socket bad type", socket(AF_INET, 12345, 0), EINVAL);
	CHECK_ERR("socket bad family", socket(12345, SOCK_STREAM, 0), EAFNOSUPPORT);
	CHECK_ERR("socket bad protocol", socket(AF_INET, SOCK_STREAM, IPPROTO_UDP), EPROTONOSUPPORT);
	CHECK_ERR("socketpair inet", socketpair(AF_INET, SOCK_STREAM, 0, pfd), EOPNOTSUPP);

	if (pipe(pfd) < 0)
		die("pipe");
	CHECK_ERR("enotsock recv", recv(pfd[0], buf, 1, MSG_DONTWAIT), ENOTSOCK);
	CHECK_ERR("enotsock send", send(pfd[1], "x", 1, 0), ENOTSOCK);
	CHECK_ERR("enotsock shutdown", shutdown(pfd[0], SHUT_RD), ENOTSOCK);
	CHECK_ERR("enotsock getsockopt", getsockopt(pfd[0], SOL_SOCKET, SO_TYPE, &one, &len), ENOTSOCK);
	CHECK_ERR("enotsock listen", listen(pfd[0], 1), ENOTSOCK);
	CHECK_ERR("enotsock connect", connect(pfd[0], NULL, 0), ENOTSOCK);
	close_pair(pfd[0], pfd[1]);

	int udp = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK_ERR("listen udp", listen(udp, 1), EOPNOTSUPP);
	close(udp);

	int tcp = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	CHECK_ERR("accept not listening", accept(tcp, NULL, NULL), EINVAL);
	CHECK_ERR("read unconnected", read(tcp, buf, 1), ENOTCONN);
	CHECK_ERR("recv unconnected", recv(tcp, buf, 1, 0), ENOTCONN);
	CHECK_ERR("send unconnected", send(tcp, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_ERR("getpeername unconnected", getpeername(tcp, (struct sockaddr *)&a, &alen), ENOTCONN);
	CHECK_ERR("shutdown unconnected", shutdown(tcp, SHUT_RDWR), ENOTCONN);
	CHECK_ERR("shutdown bad how", shutdown(tcp, 7), EINVAL);
	close(tcp);

	struct sockaddr_in laddr;
	int lfd = listener(&laddr, 0);
	int other = socket(AF_INET, SOCK_STREAM, 0);
	CHECK_ERR("bind in use", bind(other, (struct sockaddr *)&laddr, sizeof(laddr)), EADDRINUSE);
	close(other);
	close(lfd);

	struct sockaddr_in refused = loopback(unused_port());
	int c = socket(AF_INET, SOCK_STREAM, 0);
	CHECK_ERR("connect refused", connect(c, (struct sockaddr *)&refused, sizeof(refused)), ECONNREFUSED);
	close(c);
}

/* ------------------------------------------------------------------ connection setup */

static bool same_addr(const struct sockaddr_in *x, const struct sockaddr_in *y)
{
	return x->sin_family == y->sin_family && x->sin_port == y->sin_port &&
	       x->sin_addr.s_addr == y->sin_addr.s_addr;
}

static void check_connect_accept(void)
{
	struct sockaddr_in laddr, peer, cname, cpeer, sname, speer;
	socklen_t plen = sizeof(peer), len = sizeof(cname);
	int lfd = listener(&laddr, 0);
	int cli = socket(AF_INET, SOCK_STREAM, 0);

	CHECK_RET("connect", connect(cli, (struct sockaddr *)&laddr, sizeof(laddr)), 0);
	int srv = accept(lfd, (struct sockaddr *)&peer, &plen);
	CHECK("accept", srv >= 0);
	CHECK("accept addrlen", plen == sizeof(struct sockaddr_in));
	CHECK_RET("getsockname cli", getsockname(cli, (struct sockaddr *)&cname, &len), 0);
	len = sizeof(cpeer);
	CHECK_RET("getpeername cli", getpeername(cli, (struct sockaddr *)&cpeer, &len), 0);
	len = sizeof(sname);
	CHECK_RET("getsockname srv", getsockname(srv, (struct sockaddr *)&sname, &len), 0);
	len = sizeof(speer);
	CHECK_RET("getpeername srv", getpeername(srv, (struct sockaddr *)&speer, &len), 0);
	CHECK("names match", same_addr(&cname, &speer) && same_addr(&cpeer, &sname) &&
			     same_addr(&peer, &cname) && same_addr(&cpeer, &laddr));
	CHECK_ERR("connect again", connect(cli, (struct sockaddr *)&laddr, sizeof(laddr)), EISCONN);
	close_pair(cli, srv);

	/* accept4 flags; accept on an empty nonblocking listener. */
	cli = socket(AF_INET, SOCK_STREAM, 0);
	connect(cli, (struct sockaddr *)&laddr, sizeof(laddr));
	srv = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	CHECK("accept4", srv >= 0);
	CHECK("accept4 nonblock", (fcntl(srv, F_GETFL) & O_NONBLOCK) != 0);
	CHECK("accept4 cloexec", (fcntl(srv, F_GETFD) & FD_CLOEXEC) != 0);
	CHECK_ERR("accept4 bad flags", accept4(lfd, NULL, NULL, 0x7fff0000), EINVAL);
	close_pair(cli, srv);
	fcntl(lfd, F_SETFL, O_NONBLOCK);
	CHECK_ERR("accept empty nonblock", accept(lfd, NULL, NULL), EAGAIN);
	close(lfd);

	/* SOCK_NONBLOCK listener from socket() flags. */
	lfd = listener(&laddr, SOCK_NONBLOCK);
	CHECK_ERR("accept4 empty nonblock", accept4(lfd, NULL, NULL, 0), EAGAIN);
	close(lfd);
}

static void check_nonblocking_connect(void)
{
	struct sockaddr_in laddr;
	int lfd = listener(&laddr, 0);
	int cli = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int err = -1;
	socklen_t len = sizeof(err);

	errno = 0;
	int r = connect(cli, (struct sockaddr *)&laddr, sizeof(laddr));
	CHECK("nonblock connect einprogress", r == 0 || (r == -1 && errno == EINPROGRESS));
	struct pollfd p = { .fd = cli, .events = POLLOUT };
	CHECK("nonblock connect pollout", poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT));
	CHECK_RET("nonblock connect so_error", getsockopt(cli, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	CHECK("nonblock connect so_error 0", err == 0);
	/* Linux: the first connect() after completion reports success, the next EISCONN. */
	CHECK_RET("nonblock connect again", connect(cli, (struct sockaddr *)&laddr, sizeof(laddr)), 0);
	CHECK_ERR("nonblock connect third", connect(cli, (struct sockaddr *)&laddr, sizeof(laddr)), EISCONN);
	int srv = accept(lfd, NULL, NULL);
	CHECK("nonblock connect accept", srv >= 0);
	CHECK_RET("nonblock connect write", write(cli, "nb", 2), 2);
	char buf[2];
	CHECK("nonblock connect data", read_exact(srv, buf, 2) && memcmp(buf, "nb", 2) == 0);
	close_pair(cli, srv);
	close(lfd);

	struct sockaddr_in refused = loopback(unused_port());
	cli = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	errno = 0;
	r = connect(cli, (struct sockaddr *)&refused, sizeof(refused));
	bool pending = r == -1 && errno == EINPROGRESS;
	CHECK("nonblock refused start", pending || (r == -1 && errno == ECONNREFUSED));
	if (pending) {
		p.fd = cli;
		p.events = POLLOUT;
		poll(&p, 1, 5000);
		err = 0;
		len = sizeof(err);
		getsockopt(cli, SOL_SOCKET, SO_ERROR, &err, &len);
		CHECK("nonblock refused so_error", err == ECONNREFUSED);
	} else {
		CHECK("nonblock refused so_error", true);
	}
	close(cli);
}

/* ------------------------------------------------------------------ data path */

static void check_basic_io(void)
{
	int cli, srv;
	char buf[64];

	tcp_pair(&cli, &srv);
	CHECK_RET("write", write(cli, "hello", 5), 5);
	CHECK("read", read_exact(srv, buf, 5) && memcmp(buf, "hello", 5) == 0);
	CHECK_RET("send", send(srv, "world", 5, 0), 5);
	CHECK("recv ready", wait_readable(cli, 5000));
	CHECK_RET("recv", recv(cli, buf, sizeof(buf), 0), 5);
	CHECK("recv data", memcmp(buf, "world", 5) == 0);
	CHECK_RET("write zero", write(cli, buf, 0), 0);
	CHECK_RET("send zero", send(cli, buf, 0, 0), 0);

	/* MSG_PEEK leaves the data for the next read. */
	write_all(cli, "peekaboo", 8);
	wait_readable(srv, 5000);
	memset(buf, 0, sizeof(buf));
	CHECK_RET("peek", recv(srv, buf, 4, MSG_PEEK), 4);
	CHECK("peek data", memcmp(buf, "peek", 4) == 0);
	CHECK_RET("peek again", recv(srv, buf, sizeof(buf), MSG_PEEK), 8);
	CHECK_RET("after peek", recv(srv, buf, sizeof(buf), 0), 8);
	CHECK("after peek data", memcmp(buf, "peekaboo", 8) == 0);

	/* Empty socket: EAGAIN without blocking. */
	CHECK_ERR("dontwait eagain", recv(srv, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	int fl = fcntl(srv, F_GETFL);
	CHECK("getfl rdwr", fl >= 0 && (fl & O_ACCMODE) == O_RDWR && !(fl & O_NONBLOCK));
	CHECK_RET("setfl nonblock", fcntl(srv, F_SETFL, fl | O_NONBLOCK), 0);
	CHECK("getfl nonblock", (fcntl(srv, F_GETFL) & O_NONBLOCK) != 0);
	CHECK_ERR("nonblock read eagain", read(srv, buf, sizeof(buf)), EAGAIN);
	CHECK_ERR("nonblock recvfrom eagain", recvfrom(srv, buf, 1, 0, NULL, NULL), EAGAIN);
	CHECK_RET("setfl block", fcntl(srv, F_SETFL, fl), 0);
	int on = 1;
	CHECK_RET("fionbio on", ioctl(srv, FIONBIO, &on), 0);
	CHECK("fionbio getfl", (fcntl(srv, F_GETFL) & O_NONBLOCK) != 0);
	CHECK_ERR("fionbio read eagain", read(srv, buf, sizeof(buf)), EAGAIN);
	on = 0;
	CHECK_RET("fionbio off", ioctl(srv, FIONBIO, &on), 0);
	CHECK("fionbio off getfl", (fcntl(srv, F_GETFL) & O_NONBLOCK) == 0);

	/* FIONREAD / SIOCINQ / SIOCOUTQ. */
	int n = -1;
	CHECK_RET("fionread empty", ioctl(srv, FIONREAD, &n), 0);
	CHECK("fionread empty value", n == 0);
	write_all(cli, "seven!!", 7);
	wait_readable(srv, 5000);
	CHECK_RET("fionread", ioctl(srv, FIONREAD, &n), 0);
	CHECK("fionread value", n == 7);
	CHECK_RET("siocinq", ioctl(srv, SIOCINQ, &n), 0);
	CHECK("siocinq value", n == 7);
	CHECK_RET("siocoutq", ioctl(cli, SIOCOUTQ, &n), 0);
	CHECK("siocoutq value", n >= 0 && n <= 7);
	CHECK_ERR("ioctl tcgets on socket", ioctl(srv, TCGETS, buf), ENOTTY);
	read_exact(srv, buf, 7);

	/* SO_RCVTIMEO: a blocking read times out with EAGAIN. */
	struct timeval tv = { .tv_sec = 0, .tv_usec = 30000 };
	CHECK_RET("so_rcvtimeo set", setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	CHECK_ERR("so_rcvtimeo expires", recv(srv, buf, sizeof(buf), 0), EAGAIN);
	tv.tv_usec = 0;
	setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	close_pair(cli, srv);
}

/* Hidden from the compiler, which rightly warns about these deliberate misuses. */
static volatile int negative_count = -1;
static volatile int huge_count = 5000;
/* More entries than UIO_MAXIOV (1024), all valid memory. */
static struct iovec many_iov[5000];

static void check_vectors(void)
{
	int cli, srv;
	char a[4], b[5], c[3], all[12];

	tcp_pair(&cli, &srv);
	struct iovec wv[3] = { { "abc", 3 }, { "defgh", 5 }, { "ijkl", 4 } };
	CHECK_RET("writev", writev(cli, wv, 3), 12);
	wait_readable(srv, 5000);
	struct iovec rv[3] = { { a, sizeof(a) }, { b, sizeof(b) }, { c, sizeof(c) } };
	CHECK_RET("readv", readv(srv, rv, 3), 12);
	CHECK("readv data", memcmp(a, "abcd", 4) == 0 && memcmp(b, "efghi", 5) == 0 &&
			    memcmp(c, "jkl", 3) == 0);
	CHECK_ERR("readv negative count", readv(srv, rv, negative_count), EINVAL);
	CHECK_ERR("writev too many", writev(cli, many_iov, huge_count), EINVAL);
	CHECK_RET("writev zero", writev(cli, wv, 0), 0);

	/* sendmsg/recvmsg with iov arrays; what TCP leaves in the msghdr. */
	struct msghdr sm = { .msg_iov = wv, .msg_iovlen = 3 };
	CHECK_RET("sendmsg", sendmsg(cli, &sm, 0), 12);
	wait_readable(srv, 5000);
	struct sockaddr_storage from;
	char ctl[64];
	struct msghdr rm = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = rv,
			     .msg_iovlen = 3, .msg_control = ctl, .msg_controllen = sizeof(ctl),
			     .msg_flags = 0x7777 };
	CHECK_RET("recvmsg", recvmsg(srv, &rm, 0), 12);
	CHECK("recvmsg data", memcmp(a, "abcd", 4) == 0 && memcmp(c, "jkl", 3) == 0);
	CHECK("recvmsg namelen 0", rm.msg_namelen == 0);
	CHECK("recvmsg controllen 0", rm.msg_controllen == 0);
	CHECK("recvmsg flags 0", rm.msg_flags == 0);

	write_all(cli, "xyz", 3);
	wait_readable(srv, 5000);
	struct msghdr rm2 = { .msg_name = NULL, .msg_namelen = 77, .msg_iov = rv, .msg_iovlen = 1,
			      .msg_flags = 0x7777 };
	CHECK_RET("recvmsg no name", recvmsg(srv, &rm2, 0), 3);
	CHECK("recvmsg no name namelen kept", rm2.msg_namelen == 77);
	CHECK("recvmsg no name flags 0", rm2.msg_flags == 0);

	struct msghdr big = { .msg_iov = many_iov, .msg_iovlen = 5000 };
	CHECK_ERR("sendmsg too many iov", sendmsg(cli, &big, 0), EMSGSIZE);
	CHECK_ERR("recvmsg too many iov", recvmsg(srv, &big, MSG_DONTWAIT), EMSGSIZE);

	/* recvfrom on a stream socket: no address, addrlen set to 0. */
	write_all(cli, "from", 4);
	wait_readable(srv, 5000);
	socklen_t flen = sizeof(from);
	memset(&from, 0xaa, sizeof(from));
	CHECK_RET("recvfrom", recvfrom(srv, all, sizeof(all), 0, (struct sockaddr *)&from, &flen), 4);
	CHECK("recvfrom addrlen 0", flen == 0);
	CHECK("recvfrom addr untouched", ((unsigned char *)&from)[0] == 0xaa);

	/* sendto on a connected stream ignores the destination, but not a bad length. */
	struct sockaddr_in elsewhere = loopback(1);
	CHECK_RET("sendto connected", sendto(cli, "to", 2, 0, (struct sockaddr *)&elsewhere,
					     sizeof(elsewhere)), 2);
	CHECK_ERR("sendto bad addrlen", sendto(cli, "to", 2, 0, (struct sockaddr *)&elsewhere, 200),
		  EINVAL);
	CHECK("sendto data", read_exact(srv, all, 2) && memcmp(all, "to", 2) == 0);

	/* sendmmsg/recvmmsg on a stream socket. */
	struct mmsghdr mm[2] = { { .msg_hdr = { .msg_iov = &wv[0], .msg_iovlen = 1 } },
				 { .msg_hdr = { .msg_iov = &wv[1], .msg_iovlen = 1 } } };
	CHECK_RET("sendmmsg tcp", sendmmsg(cli, mm, 2, 0), 2);
	CHECK("sendmmsg tcp lens", mm[0].msg_len == 3 && mm[1].msg_len == 5);
	CHECK("sendmmsg tcp data", read_exact(srv, all, 8) && memcmp(all, "abcdefgh", 8) == 0);
	write_all(cli, "0123456789", 10);
	wait_readable(srv, 5000);
	usleep(20000);
	struct iovec r1 = { all, sizeof(all) }, r2 = { b, sizeof(b) };
	struct mmsghdr rmm[2] = { { .msg_hdr = { .msg_iov = &r1, .msg_iovlen = 1 } },
				  { .msg_hdr = { .msg_iov = &r2, .msg_iovlen = 1 } } };
	CHECK_RET("recvmmsg tcp waitforone", recvmmsg(srv, rmm, 2, MSG_WAITFORONE, NULL), 1);
	CHECK("recvmmsg tcp len", rmm[0].msg_len == 10 && memcmp(all, "0123456789", 10) == 0);
	CHECK_ERR("recvmmsg tcp empty", recvmmsg(srv, rmm, 2, MSG_DONTWAIT, NULL), EAGAIN);
	close_pair(cli, srv);
}

static void *bulk_writer(void *arg)
{
	int fd = *(int *)arg;
	static unsigned char chunk[65536];
	size_t total = 4u << 20;

	for (size_t off = 0; off < total; off += sizeof(chunk)) {
		for (size_t i = 0; i < sizeof(chunk); i++)
			chunk[i] = (unsigned char)((off + i) * 7 + 3);
		if (!write_all(fd, chunk, sizeof(chunk)))
			break;
	}
	shutdown(fd, SHUT_WR);
	return NULL;
}

static void check_bulk_and_eof(void)
{
	int cli, srv;
	pthread_t tid;
	unsigned char buf[50000];
	size_t got = 0;
	bool pattern_ok = true;

	tcp_pair(&cli, &srv);
	spawn_thread(&tid, bulk_writer, &cli);
	for (;;) {
		ssize_t r = read(srv, buf, sizeof(buf));
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != (unsigned char)((got + (size_t)i) * 7 + 3))
				pattern_ok = false;
		got += (size_t)r;
	}
	pthread_join(tid, NULL);
	CHECK("bulk 4MiB length", got == (4u << 20));
	CHECK("bulk 4MiB pattern", pattern_ok);
	CHECK_RET("eof read", read(srv, buf, 1), 0);
	CHECK_RET("eof recv", recv(srv, buf, 1, 0), 0);
	/* Half close: the other direction still works. */
	CHECK_RET("half close write back", write(srv, "back", 4), 4);
	CHECK("half close read back", read_exact(cli, buf, 4) && memcmp(buf, "back", 4) == 0);
	CHECK_ERR("write after shut_wr", send(cli, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_ERR("write after shut_wr sigpipe ignored", write(cli, "x", 1), EPIPE);
	CHECK_RET("shutdown rd", shutdown(srv, SHUT_RD), 0);
	CHECK_RET("read after shut_rd", recv(srv, buf, 1, 0), 0);
	close_pair(cli, srv);
}

static void check_waitall_and_signals(void)
{
	int cli, srv;
	char buf[16];
	struct delayed_write dw;

	tcp_pair(&cli, &srv);
	write_all(cli, "first-", 6);
	delayed_write_start(&dw, cli, 50, "second");
	CHECK_RET("msg_waitall", recv(srv, buf, 12, MSG_WAITALL), 12);
	CHECK("msg_waitall data", memcmp(buf, "first-second", 12) == 0);
	delayed_write_join(&dw);

	/* A signal without SA_RESTART interrupts a blocking receive. */
	set_alarm_handler(false);
	arm_timer_ms(50);
	CHECK_ERR("recv eintr", recv(srv, buf, sizeof(buf), 0), EINTR);
	arm_timer_ms(50);
	CHECK_ERR("read eintr", read(srv, buf, sizeof(buf)), EINTR);

	/* With SA_RESTART the receive resumes and gets the data written later. */
	set_alarm_handler(true);
	arm_timer_ms(30);
	delayed_write_start(&dw, cli, 150, "late");
	CHECK_RET("recv sa_restart", recv(srv, buf, sizeof(buf), 0), 4);
	delayed_write_join(&dw);
	signal(SIGALRM, SIG_DFL);
	close_pair(cli, srv);
}

static void check_sockopts(void)
{
	int cli, srv, v = -1;
	socklen_t len = sizeof(v);

	tcp_pair(&cli, &srv);
	int one = 1;
	CHECK_RET("setsockopt nodelay", setsockopt(cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	CHECK_RET("getsockopt nodelay", getsockopt(cli, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	CHECK("nodelay value", v == 1 && len == sizeof(int));
	len = sizeof(v);
	CHECK_RET("getsockopt so_type", getsockopt(cli, SOL_SOCKET, SO_TYPE, &v, &len), 0);
	CHECK("so_type stream", v == SOCK_STREAM);
	len = sizeof(v);
	CHECK_RET("getsockopt so_domain", getsockopt(cli, SOL_SOCKET, SO_DOMAIN, &v, &len), 0);
	CHECK("so_domain inet", v == AF_INET);
	len = sizeof(v);
	CHECK_RET("getsockopt so_error", getsockopt(cli, SOL_SOCKET, SO_ERROR, &v, &len), 0);
	CHECK("so_error 0", v == 0);
	len = sizeof(v);
	CHECK_ERR("getsockopt bad option", getsockopt(cli, SOL_SOCKET, 9999, &v, &len), ENOPROTOOPT);
	CHECK_ERR("setsockopt short", setsockopt(cli, SOL_SOCKET, SO_RCVBUF, &one, 1), EINVAL);
	int size = 65536;
	CHECK_RET("setsockopt sndbuf", setsockopt(cli, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
	len = sizeof(v);
	getsockopt(cli, SOL_SOCKET, SO_SNDBUF, &v, &len);
	CHECK("sndbuf doubled", v == 2 * size);
	close_pair(cli, srv);
}

/* ------------------------------------------------------------------ sendfile, splice */

static int make_file(size_t size)
{
	char path[] = "/tmp/passthrough_check.XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		die("mkstemp");
	unlink(path);
	for (size_t i = 0; i < size; i++) {
		unsigned char ch = (unsigned char)(i * 13 + 1);
		if (write(fd, &ch, 1) != 1)
			die("write file");
	}
	lseek(fd, 0, SEEK_SET);
	return fd;
}

static bool file_bytes_match(const unsigned char *buf, size_t n, size_t file_off)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != (unsigned char)((file_off + i) * 13 + 1))
			return false;
	return true;
}

static void check_sendfile(void)
{
	int cli, srv;
	static unsigned char buf[40000];
	int file = make_file(65536);

	tcp_pair(&cli, &srv);
	off_t off = 100;
	CHECK_RET("sendfile offset", sendfile(cli, file, &off, 30000), 30000);
	CHECK("sendfile offset advanced", off == 30100);
	CHECK("sendfile file pos kept", lseek(file, 0, SEEK_CUR) == 0);
	CHECK("sendfile data", read_exact(srv, buf, 30000) && file_bytes_match(buf, 30000, 100));

	CHECK_RET("sendfile no offset", sendfile(cli, file, NULL, 1000), 1000);
	CHECK("sendfile no offset pos", lseek(file, 0, SEEK_CUR) == 1000);
	CHECK("sendfile no offset data", read_exact(srv, buf, 1000) && file_bytes_match(buf, 1000, 0));

	off64_t off64 = 65000;
	CHECK_RET("sendfile64 to eof", sendfile64(cli, file, &off64, 5000), 536);
	CHECK("sendfile64 offset", off64 == 65536);
	CHECK("sendfile64 data", read_exact(srv, buf, 536) && file_bytes_match(buf, 536, 65000));
	off = 70000;
	CHECK_RET("sendfile past eof", sendfile(cli, file, &off, 10), 0);
	CHECK_RET("sendfile zero", sendfile(cli, file, NULL, 0), 0);
	CHECK_ERR("sendfile bad in_fd", sendfile(cli, -1, NULL, 10), EBADF);
	off = -1;
	CHECK_ERR("sendfile negative offset", sendfile(cli, file, &off, 10), EINVAL);
	int wronly = open("/dev/null", O_WRONLY);
	CHECK_ERR("sendfile in_fd write-only", sendfile(cli, wronly, NULL, 10), EBADF);
	close(wronly);

	/* splice: pipe -> socket and socket -> pipe. */
	int p[2];
	if (pipe(p) < 0)
		die("pipe");
	write_all(p[1], "spliced", 7);
	CHECK_RET("splice pipe to socket", splice(p[0], NULL, cli, NULL, 7, 0), 7);
	wait_readable(srv, 5000);
	CHECK_RET("splice socket to pipe", splice(srv, NULL, p[1], NULL, 7, 0), 7);
	CHECK("splice data", read_exact(p[0], buf, 7) && memcmp(buf, "spliced", 7) == 0);
	CHECK_ERR("splice no pipe", splice(srv, NULL, cli, NULL, 7, SPLICE_F_NONBLOCK), EINVAL);
	close_pair(p[0], p[1]);
	close_pair(cli, srv);
	close(file);
}

/* ------------------------------------------------------------------ fd management */

static bool roundtrip(int wfd, int rfd, const char *msg)
{
	char buf[32];
	size_t n = strlen(msg);
	return write_all(wfd, msg, n) && read_exact(rfd, buf, n) && memcmp(buf, msg, n) == 0;
}

static void check_dup(void)
{
	int cli, srv, cli2, srv2;
	char buf[8];

	tcp_pair(&cli, &srv);
	int d = dup(cli);
	CHECK("dup", d >= 0);
	CHECK("dup write", roundtrip(d, srv, "viadup"));
	CHECK_RET("dup close original", close(cli), 0);
	CHECK("dup still works", roundtrip(d, srv, "still"));
	CHECK("dup reverse", roundtrip(srv, d, "back"));
	CHECK_RET("dup close last", close(d), 0);
	CHECK_RET("dup peer eof", read(srv, buf, 1), 0);
	close(srv);

	/* dup2 onto another live connection: that connection's last ref goes away. */
	tcp_pair(&cli, &srv);
	tcp_pair(&cli2, &srv2);
	CHECK_RET("dup2", dup2(cli, cli2), cli2);
	CHECK_RET("dup2 replaced peer eof", read(srv2, buf, 1), 0);
	CHECK("dup2 target works", roundtrip(cli2, srv, "dup2"));
	CHECK_RET("dup2 same fd", dup2(cli, cli), cli);
	CHECK("dup2 same fd works", roundtrip(cli, srv, "same"));
	/* A failing dup2 must leave the target untouched. */
	CHECK_ERR("dup2 bad old", dup2(-1, cli2), EBADF);
	CHECK("dup2 bad old keeps target", roundtrip(cli2, srv, "kept"));
	CHECK_ERR("dup2 bad new", dup2(cli, -1), EBADF);
	close(srv2);

	/* dup3 */
	tcp_pair(&cli2, &srv2);
	CHECK_RET("dup3 cloexec", dup3(cli, cli2, O_CLOEXEC), cli2);
	CHECK("dup3 cloexec flag", (fcntl(cli2, F_GETFD) & FD_CLOEXEC) != 0);
	CHECK_RET("dup3 replaced peer eof", read(srv2, buf, 1), 0);
	CHECK("dup3 target works", roundtrip(cli2, srv, "dup3"));
	CHECK_ERR("dup3 same fd", dup3(cli, cli, 0), EINVAL);
	CHECK_ERR("dup3 bad flags", dup3(cli, cli2, 0x4), EINVAL);
	CHECK("dup3 bad flags keeps target", roundtrip(cli2, srv, "kept3"));
	close(srv2);
	close(cli2);

	/* fcntl F_DUPFD / F_DUPFD_CLOEXEC */
	int f = fcntl(cli, F_DUPFD, 500);
	CHECK("f_dupfd min", f >= 500);
	CHECK("f_dupfd no cloexec", (fcntl(f, F_GETFD) & FD_CLOEXEC) == 0);
	CHECK("f_dupfd works", roundtrip(f, srv, "fdup"));
	int g = fcntl(cli, F_DUPFD_CLOEXEC, 510);
	CHECK("f_dupfd_cloexec min", g >= 510);
	CHECK("f_dupfd_cloexec flag", (fcntl(g, F_GETFD) & FD_CLOEXEC) != 0);
	CHECK("f_dupfd_cloexec works", roundtrip(g, srv, "fdup2"));
	int g64 = fcntl64(cli, F_DUPFD_CLOEXEC, 520);
	CHECK("fcntl64 dupfd", g64 >= 520);
	CHECK("fcntl64 dupfd works", roundtrip(g64, srv, "f64"));
	CHECK_ERR("f_dupfd negative", fcntl(cli, F_DUPFD, -1), EINVAL);
	close(f);
	close(g);
	close(g64);

	/* Other fcntl argument types: int, none, struct flock *, f_owner_ex *. */
	CHECK_RET("f_setfd", fcntl(cli, F_SETFD, FD_CLOEXEC), 0);
	CHECK_RET("f_getfd", fcntl(cli, F_GETFD), FD_CLOEXEC);
	CHECK_RET("f_setown", fcntl(cli, F_SETOWN, getpid()), 0);
	CHECK_RET("f_getown", fcntl(cli, F_GETOWN), getpid());
	struct f_owner_ex owner = { 0 };
	CHECK_RET("f_getown_ex", fcntl(cli, F_GETOWN_EX, &owner), 0);
	CHECK("f_getown_ex value", owner.type == F_OWNER_PID && owner.pid == getpid());
	int file = make_file(16);
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4 };
	CHECK_RET("f_setlk", fcntl(file, F_SETLK, &lk), 0);
	lk.l_type = F_RDLCK;
	CHECK_RET("f_ofd_getlk", fcntl(file, F_OFD_GETLK, &lk), 0);
	CHECK("f_ofd_getlk sees lock", lk.l_type == F_WRLCK);
	struct flock lk64 = { .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4 };
	CHECK_RET("fcntl64 f_setlk", fcntl64(file, F_SETLK, &lk64), 0);
	close(file);
	int p[2];
	if (pipe(p) < 0)
		die("pipe");
	CHECK_RET("f_setpipe_sz", fcntl(p[0], F_SETPIPE_SZ, 131072), 131072);
	CHECK_RET("f_getpipe_sz", fcntl(p[0], F_GETPIPE_SZ), 131072);
	close_pair(p[0], p[1]);
	CHECK_ERR("fcntl bad cmd", fcntl(cli, 99999), EINVAL);
	close_pair(cli, srv);
}

static void check_close_range(void)
{
	int cli, srv;
	char buf[4];

	tcp_pair(&cli, &srv);
	for (int fd = 600; fd <= 603; fd++)
		if (dup2(cli, fd) != fd)
			die("dup2 600");
	CHECK_RET("close_range", close_range(600, 602, 0), 0);
	CHECK("close_range closed", !fd_is_open(600) && !fd_is_open(601) && !fd_is_open(602));
	CHECK("close_range kept", fd_is_open(603));
	CHECK_RET("close_range cloexec", close_range(603, 603, CLOSE_RANGE_CLOEXEC), 0);
	CHECK("close_range cloexec open", fd_is_open(603));
	CHECK("close_range cloexec flag", (fcntl(603, F_GETFD) & FD_CLOEXEC) != 0);
	CHECK("close_range cloexec works", roundtrip(603, srv, "cre"));
	CHECK_ERR("close_range first > last", close_range(603, 600, 0), EINVAL);
	CHECK("close_range einval keeps", fd_is_open(603) && roundtrip(603, srv, "ein"));
	CHECK_ERR("close_range bad flags", close_range(603, 603, 0x100), EINVAL);
	CHECK("close_range bad flags keeps", roundtrip(603, srv, "bad"));
	CHECK_RET("close_range empty range", close_range(700, 800, 0), 0);
	close(cli);
	/* Closing the last reference through close_range ends the connection. */
	CHECK_RET("close_range last ref", close_range(603, ~0U, 0), 0);
	CHECK_RET("close_range peer eof", read(srv, buf, 1), 0);
	close(srv);
}

/* ------------------------------------------------------------------ readiness */

static void check_poll(void)
{
	int cli, srv;
	char buf[8];

	tcp_pair(&cli, &srv);
	struct pollfd p[2] = { { .fd = srv, .events = POLLIN }, { .fd = cli, .events = POLLOUT } };
	CHECK_RET("poll timeout", poll(p, 1, 30), 0);
	CHECK("poll timeout revents", p[0].revents == 0);
	CHECK_RET("poll pollout", poll(&p[1], 1, 1000), 1);
	CHECK("poll pollout revents", p[1].revents == POLLOUT);
	write_all(cli, "data", 4);
	CHECK_RET("poll pollin", poll(p, 2, 5000), 2);
	CHECK("poll pollin revents", p[0].revents == POLLIN && p[1].revents == POLLOUT);
	struct pollfd bad = { .fd = 987654, .events = POLLIN };
	CHECK_RET("poll bad fd", poll(&bad, 1, 0), 1);
	CHECK("poll bad fd pollnval", bad.revents == POLLNVAL);
	struct pollfd neg = { .fd = -1, .events = POLLIN };
	CHECK_RET("poll negative fd ignored", poll(&neg, 1, 0), 0);
	CHECK_RET("poll no fds", poll(NULL, 0, 10), 0);

	struct timespec ts = { .tv_sec = 0, .tv_nsec = 30000000 };
	CHECK_RET("ppoll ready", ppoll(p, 1, &ts, NULL), 1);
	CHECK("ppoll timeout not written", ts.tv_sec == 0 && ts.tv_nsec == 30000000);
	read_exact(srv, buf, 4);
	CHECK_RET("ppoll timeout", ppoll(p, 1, &ts, NULL), 0);
	CHECK("ppoll timeout kept", ts.tv_sec == 0 && ts.tv_nsec == 30000000);
	sigset_t empty;
	sigemptyset(&empty);
	CHECK_RET("ppoll sigmask timeout", ppoll(p, 1, &ts, &empty), 0);
	struct timespec badts = { .tv_sec = 0, .tv_nsec = 2000000000 };
	CHECK_ERR("ppoll bad timespec", ppoll(p, 1, &badts, NULL), EINVAL);

	/* ppoll with a mask unblocking a signal that is pending: EINTR. */
	sigset_t blocked, old;
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGUSR1);
	sigprocmask(SIG_BLOCK, &blocked, &old);
	struct sigaction sa = { .sa_handler = on_alarm };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	CHECK_ERR("ppoll sigmask eintr", ppoll(p, 1, NULL, &empty), EINTR);
	sigprocmask(SIG_SETMASK, &old, NULL);

	write_all(cli, "more", 4);
	wait_readable(srv, 5000);
	CHECK_RET("poll hup-free ready", poll(p, 1, 0), 1);
	read_exact(srv, buf, 4);
	shutdown(cli, SHUT_WR);
	CHECK_RET("poll rdhup", poll(&(struct pollfd){ .fd = srv, .events = POLLIN | POLLRDHUP }, 1, 5000), 1);
	close_pair(cli, srv);
}

static void check_select(void)
{
	int cli, srv;
	char buf[8];
	fd_set r, w;

	tcp_pair(&cli, &srv);
	int nfds = (srv > cli ? srv : cli) + 1;
	FD_ZERO(&r);
	FD_SET(srv, &r);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 30000 };
	CHECK_RET("select timeout", select(nfds, &r, NULL, NULL, &tv), 0);
	CHECK("select timeout clears set", !FD_ISSET(srv, &r));
	CHECK("select timeout tv zeroed", tv.tv_sec == 0 && tv.tv_usec == 0);

	write_all(cli, "sel", 3);
	FD_ZERO(&r);
	FD_SET(srv, &r);
	FD_ZERO(&w);
	FD_SET(cli, &w);
	tv.tv_sec = 5;
	tv.tv_usec = 0;
	CHECK_RET("select ready", select(nfds, &r, &w, NULL, &tv), 2);
	CHECK("select ready sets", FD_ISSET(srv, &r) && FD_ISSET(cli, &w));
	CHECK("select tv remaining", tv.tv_sec < 5 || (tv.tv_sec == 5 && tv.tv_usec == 0));
	CHECK("select tv valid", tv.tv_sec >= 0 && tv.tv_usec >= 0 && tv.tv_usec < 1000000);
	FD_ZERO(&r);
	FD_SET(srv, &r);
	tv.tv_sec = 0;
	tv.tv_usec = 0;
	CHECK_RET("select zero timeout ready", select(nfds, &r, NULL, NULL, &tv), 1);
	read_exact(srv, buf, 3);
	FD_ZERO(&r);
	FD_SET(srv, &r);
	CHECK_RET("select zero timeout", select(nfds, &r, NULL, NULL, &tv), 0);
	tv.tv_usec = -1;
	CHECK_ERR("select bad timeval", select(nfds, &r, NULL, NULL, &tv), EINVAL);
	FD_ZERO(&r);
	FD_SET(1000, &r);
	tv.tv_sec = 0;
	tv.tv_usec = 0;
	CHECK_ERR("select bad fd", select(1001, &r, NULL, NULL, &tv), EBADF);
	CHECK_ERR("select negative nfds", select(-1, NULL, NULL, NULL, &tv), EINVAL);

	struct timespec ts = { .tv_sec = 0, .tv_nsec = 30000000 };
	FD_ZERO(&r);
	FD_SET(srv, &r);
	CHECK_RET("pselect timeout", pselect(nfds, &r, NULL, NULL, &ts, NULL), 0);
	CHECK("pselect timeout kept", ts.tv_sec == 0 && ts.tv_nsec == 30000000);
	write_all(cli, "ps", 2);
	FD_ZERO(&r);
	FD_SET(srv, &r);
	ts.tv_sec = 5;
	sigset_t empty;
	sigemptyset(&empty);
	CHECK_RET("pselect ready", pselect(nfds, &r, NULL, NULL, &ts, &empty), 1);
	CHECK("pselect ready set", FD_ISSET(srv, &r));
	close_pair(cli, srv);
}

static void check_epoll(void)
{
	int cli, srv, cli2, srv2;
	char buf[8];
	struct epoll_event ev, out[4];

	tcp_pair(&cli, &srv);
	CHECK_ERR("epoll_create zero", epoll_create(0), EINVAL);
	int legacy = epoll_create(1);
	CHECK("epoll_create", legacy >= 0);
	close(legacy);
	CHECK_ERR("epoll_create1 bad flags", epoll_create1(0x1), EINVAL);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK("epoll_create1", ep >= 0);
	CHECK("epoll_create1 cloexec", (fcntl(ep, F_GETFD) & FD_CLOEXEC) != 0);

	ev.events = EPOLLIN;
	ev.data.u64 = 0x1234;
	CHECK_RET("epoll_ctl add", epoll_ctl(ep, EPOLL_CTL_ADD, srv, &ev), 0);
	CHECK_ERR("epoll_ctl add again", epoll_ctl(ep, EPOLL_CTL_ADD, srv, &ev), EEXIST);
	CHECK_ERR("epoll_ctl mod missing", epoll_ctl(ep, EPOLL_CTL_MOD, cli, &ev), ENOENT);
	CHECK_ERR("epoll_ctl not epoll", epoll_ctl(srv, EPOLL_CTL_ADD, cli, &ev), EINVAL);
	CHECK_ERR("epoll_ctl self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev), EINVAL);
	CHECK_ERR("epoll_ctl bad fd", epoll_ctl(ep, EPOLL_CTL_ADD, 987654, &ev), EBADF);
	int file = make_file(4);
	CHECK_ERR("epoll_ctl regular file", epoll_ctl(ep, EPOLL_CTL_ADD, file, &ev), EPERM);
	close(file);

	CHECK_RET("epoll_wait timeout", epoll_wait(ep, out, 4, 30), 0);
	CHECK_ERR("epoll_wait bad max", epoll_wait(ep, out, 0, 0), EINVAL);
	write_all(cli, "ep", 2);
	CHECK_RET("epoll_wait ready", epoll_wait(ep, out, 4, 5000), 1);
	CHECK("epoll_wait event", out[0].events == EPOLLIN && out[0].data.u64 == 0x1234);
	CHECK_RET("epoll_wait level again", epoll_wait(ep, out, 4, 0), 1);
	read_exact(srv, buf, 2);
	CHECK_RET("epoll_wait drained", epoll_wait(ep, out, 4, 0), 0);

	/* Edge triggered: reported once per arrival. */
	ev.events = EPOLLIN | EPOLLET;
	ev.data.u64 = 0x55;
	CHECK_RET("epoll_ctl mod et", epoll_ctl(ep, EPOLL_CTL_MOD, srv, &ev), 0);
	write_all(cli, "e1", 2);
	CHECK_RET("epoll et first", epoll_wait(ep, out, 4, 5000), 1);
	CHECK("epoll et data", out[0].data.u64 == 0x55);
	CHECK_RET("epoll et not again", epoll_wait(ep, out, 4, 30), 0);
	write_all(cli, "e2", 2);
	CHECK_RET("epoll et new data", epoll_wait(ep, out, 4, 5000), 1);
	read_exact(srv, buf, 4);

	/* One shot: disarmed after one report, re-armed by MOD. */
	ev.events = EPOLLIN | EPOLLONESHOT;
	CHECK_RET("epoll_ctl mod oneshot", epoll_ctl(ep, EPOLL_CTL_MOD, srv, &ev), 0);
	write_all(cli, "o", 1);
	CHECK_RET("epoll oneshot first", epoll_wait(ep, out, 4, 5000), 1);
	CHECK_RET("epoll oneshot disarmed", epoll_wait(ep, out, 4, 30), 0);
	CHECK_RET("epoll oneshot rearm", epoll_ctl(ep, EPOLL_CTL_MOD, srv, &ev), 0);
	CHECK_RET("epoll oneshot again", epoll_wait(ep, out, 4, 5000), 1);
	read_exact(srv, buf, 1);

	/* epoll_pwait / epoll_pwait2 and EPOLLOUT. */
	sigset_t empty;
	sigemptyset(&empty);
	ev.events = EPOLLIN;
	epoll_ctl(ep, EPOLL_CTL_MOD, srv, &ev);
	CHECK_RET("epoll_pwait timeout", epoll_pwait(ep, out, 4, 30, &empty), 0);
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 30000000 };
	errno = 0;
	int r = epoll_pwait2(ep, out, 4, &ts, NULL);
	CHECK("epoll_pwait2 timeout", r == 0 || (r == -1 && errno == ENOSYS));
	ev.events = EPOLLOUT;
	ev.data.u64 = 0x99;
	CHECK_RET("epoll_ctl add out", epoll_ctl(ep, EPOLL_CTL_ADD, cli, &ev), 0);
	CHECK_RET("epoll_pwait pollout", epoll_pwait(ep, out, 4, 5000, NULL), 1);
	CHECK("epoll_pwait pollout event", out[0].events == EPOLLOUT && out[0].data.u64 == 0x99);
	write_all(cli, "b", 1);
	wait_readable(srv, 5000);
	ts.tv_sec = 5;
	r = epoll_pwait2(ep, out, 4, &ts, &empty);
	CHECK("epoll_pwait2 ready", r == 2 || (r == -1 && errno == ENOSYS));
	read_exact(srv, buf, 1);
	CHECK_RET("epoll_ctl del", epoll_ctl(ep, EPOLL_CTL_DEL, cli, NULL), 0);
	CHECK_ERR("epoll_ctl del again", epoll_ctl(ep, EPOLL_CTL_DEL, cli, NULL), ENOENT);

	/* EPOLLRDHUP / EPOLLHUP. */
	ev.events = EPOLLIN | EPOLLRDHUP;
	ev.data.u64 = 0x77;
	epoll_ctl(ep, EPOLL_CTL_MOD, srv, &ev);
	shutdown(cli, SHUT_WR);
	CHECK_RET("epoll rdhup", epoll_wait(ep, out, 4, 5000), 1);
	CHECK("epoll rdhup events", out[0].events == (EPOLLIN | EPOLLRDHUP));

	/* A closed fd leaves the set. */
	tcp_pair(&cli2, &srv2);
	ev.events = EPOLLIN;
	ev.data.u64 = 0x42;
	epoll_ctl(ep, EPOLL_CTL_ADD, srv2, &ev);
	epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL);
	close(srv2);
	write_all(cli2, "gone", 4);
	CHECK_RET("epoll closed fd removed", epoll_wait(ep, out, 4, 30), 0);
	close(cli2);

	close(ep);
	close_pair(cli, srv);
}

/* ------------------------------------------------------------------ UDP, unix */

static void check_udp_mmsg(void)
{
	int rx = socket(AF_INET, SOCK_DGRAM, 0);
	int tx = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in ra = loopback(0), ta = loopback(0);
	socklen_t len = sizeof(ra);

	if (bind(rx, (struct sockaddr *)&ra, sizeof(ra)) < 0 ||
	    getsockname(rx, (struct sockaddr *)&ra, &len) < 0 ||
	    bind(tx, (struct sockaddr *)&ta, sizeof(ta)) < 0 ||
	    getsockname(tx, (struct sockaddr *)&ta, &len) < 0 ||
	    connect(tx, (struct sockaddr *)&ra, sizeof(ra)) < 0)
		die("udp setup");

	struct iovec siov[3] = { { "a", 1 }, { "bb", 2 }, { "ccc", 3 } };
	struct mmsghdr smm[3];
	memset(smm, 0, sizeof(smm));
	for (int i = 0; i < 3; i++) {
		smm[i].msg_hdr.msg_iov = &siov[i];
		smm[i].msg_hdr.msg_iovlen = 1;
	}
	CHECK_RET("sendmmsg udp", sendmmsg(tx, smm, 3, 0), 3);
	CHECK("sendmmsg udp lens", smm[0].msg_len == 1 && smm[1].msg_len == 2 && smm[2].msg_len == 3);

	char bufs[3][8];
	struct iovec riov[3];
	struct sockaddr_in from[3];
	struct mmsghdr rmm[3];
	memset(rmm, 0, sizeof(rmm));
	for (int i = 0; i < 3; i++) {
		riov[i].iov_base = bufs[i];
		riov[i].iov_len = sizeof(bufs[i]);
		rmm[i].msg_hdr.msg_iov = &riov[i];
		rmm[i].msg_hdr.msg_iovlen = 1;
		rmm[i].msg_hdr.msg_name = &from[i];
		rmm[i].msg_hdr.msg_namelen = sizeof(from[i]);
	}
	CHECK_RET("recvmmsg udp", recvmmsg(rx, rmm, 3, 0, NULL), 3);
	CHECK("recvmmsg udp lens", rmm[0].msg_len == 1 && rmm[1].msg_len == 2 && rmm[2].msg_len == 3);
	CHECK("recvmmsg udp data", memcmp(bufs[2], "ccc", 3) == 0);
	CHECK("recvmmsg udp source", rmm[0].msg_hdr.msg_namelen == sizeof(struct sockaddr_in) &&
				     same_addr(&from[0], &ta));
	CHECK_ERR("recvmmsg udp empty", recvmmsg(rx, rmm, 3, MSG_DONTWAIT, NULL), EAGAIN);
	struct timespec to = { .tv_sec = 0, .tv_nsec = 1000000 };
	CHECK_ERR("recvmmsg udp empty timeout", recvmmsg(rx, rmm, 3, MSG_DONTWAIT, &to), EAGAIN);

	/* recvfrom / recvmsg on UDP report the source. */
	send(tx, "dgram", 5, 0);
	struct sockaddr_in src;
	socklen_t slen = sizeof(src);
	char buf[16];
	CHECK_RET("recvfrom udp", recvfrom(rx, buf, sizeof(buf), 0, (struct sockaddr *)&src, &slen), 5);
	CHECK("recvfrom udp source", slen == sizeof(src) && same_addr(&src, &ta));
	send(tx, "truncated", 9, 0);
	struct iovec iv = { buf, 4 };
	struct msghdr m = { .msg_iov = &iv, .msg_iovlen = 1 };
	CHECK_RET("recvmsg udp trunc", recvmsg(rx, &m, 0), 4);
	CHECK("recvmsg udp msg_trunc", m.msg_flags == MSG_TRUNC);
	CHECK_RET("sendto udp", sendto(rx, "back", 4, 0, (struct sockaddr *)&ta, sizeof(ta)), 4);
	CHECK_RET("recv udp", recv(tx, buf, sizeof(buf), 0), 4);
	close_pair(rx, tx);
}

static void check_socketpair(void)
{
	int sv[2];
	char buf[8];

	CHECK_RET("socketpair", socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	CHECK("socketpair cloexec", (fcntl(sv[0], F_GETFD) & FD_CLOEXEC) != 0);
	CHECK("socketpair a to b", roundtrip(sv[0], sv[1], "unix"));
	CHECK("socketpair b to a", roundtrip(sv[1], sv[0], "xinu"));
	CHECK_RET("socketpair send", send(sv[0], "s", 1, 0), 1);
	CHECK_RET("socketpair recv", recv(sv[1], buf, sizeof(buf), 0), 1);
	int d = dup(sv[0]);
	CHECK("socketpair dup", roundtrip(d, sv[1], "dup"));
	close(d);
	CHECK_RET("socketpair shutdown", shutdown(sv[0], SHUT_WR), 0);
	CHECK_RET("socketpair eof", read(sv[1], buf, 1), 0);
	close_pair(sv[0], sv[1]);

	CHECK_RET("socketpair dgram", socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
	send(sv[0], "d1", 2, 0);
	send(sv[0], "d22", 3, 0);
	CHECK_RET("socketpair dgram 1", recv(sv[1], buf, sizeof(buf), 0), 2);
	CHECK_RET("socketpair dgram 2", recv(sv[1], buf, sizeof(buf), 0), 3);
	close_pair(sv[0], sv[1]);
}

/* ------------------------------------------------------------------ processes */

static int exit_status(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -1;
}

static void check_fork(void)
{
	int cli, srv;
	char buf[8];

	tcp_pair(&cli, &srv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(srv);
		bool ok = write_all(cli, "child", 5) && read_exact(cli, buf, 6) &&
			  memcmp(buf, "parent", 6) == 0;
		_exit(ok ? 0 : 1);
	}
	CHECK("fork", pid > 0);
	CHECK("fork child data", read_exact(srv, buf, 5) && memcmp(buf, "child", 5) == 0);
	CHECK("fork parent reply", write_all(srv, "parent", 6));
	CHECK_RET("fork child exit", exit_status(pid), 0);
	/* The child's exit closed only its copy of cli. */
	CHECK("fork parent copy alive", roundtrip(cli, srv, "alive"));

	/* A child that opens and uses its own connection. */
	struct sockaddr_in laddr;
	int lfd = listener(&laddr, 0);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		bool ok = c >= 0 && connect(c, (struct sockaddr *)&laddr, sizeof(laddr)) == 0 &&
			  write_all(c, "own", 3) && read_exact(c, buf, 2) && memcmp(buf, "ok", 2) == 0;
		_exit(ok ? 0 : 1);
	}
	int a = accept(lfd, NULL, NULL);
	CHECK("fork child connects", a >= 0 && read_exact(a, buf, 3) && memcmp(buf, "own", 3) == 0);
	write_all(a, "ok", 2);
	CHECK_RET("fork child own socket exit", exit_status(pid), 0);
	close(a);
	close(lfd);

	/* vfork: the child may only _exit or exec. */
	fflush(stdout);
	pid = vfork();
	if (pid == 0)
		_exit(7);
	CHECK_RET("vfork _exit", exit_status(pid), 7);
	fflush(stdout);
	pid = vfork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", "exit 3", (char *)NULL);
		_exit(127);
	}
	CHECK_RET("vfork exec", exit_status(pid), 3);

	/* daemon(): the grandchild writes on the inherited socket. */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		if (daemon(1, 1) == 0) {
			write_all(cli, "daemon", 6);
			_exit(0);
		}
		_exit(1);
	}
	CHECK_RET("daemon parent exit", exit_status(pid), 0);
	CHECK("daemon child writes", read_exact(srv, buf, 6) && memcmp(buf, "daemon", 6) == 0);
	close_pair(cli, srv);
}

/* ------------------------------------------------------------------ fortify, aliases */

/* Runs fn in a child with stderr silenced; true when the child died of SIGABRT. */
static bool aborts_in_child(void (*fn)(void))
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		setenv("LIBC_FATAL_STDERR_", "1", 1);
		fn();
		_exit(0);
	}
	return exit_status(pid) == 128 + SIGABRT;
}

static int fortify_fd = -1;
/* Hidden from the compiler, which would otherwise reject the deliberate overflows. */
static volatile size_t overflow_len = 8;
static volatile nfds_t overflow_nfds = 2;
static volatile long fortify_sink;

static void overflow_read_chk(void)
{
	char small[4];
	fortify_sink = __read_chk(fortify_fd, small, overflow_len, sizeof(small));
}

static void overflow_recv_chk(void)
{
	char small[4];
	fortify_sink = __recv_chk(fortify_fd, small, overflow_len, sizeof(small), MSG_DONTWAIT);
}

static void overflow_recvfrom_chk(void)
{
	char small[4];
	fortify_sink = __recvfrom_chk(fortify_fd, small, overflow_len, sizeof(small), MSG_DONTWAIT,
				      NULL, NULL);
}

static void overflow_poll_chk(void)
{
	struct pollfd p[1] = { { .fd = fortify_fd, .events = POLLIN } };
	fortify_sink = __poll_chk(p, overflow_nfds, 0, sizeof(p));
}

static void overflow_ppoll_chk(void)
{
	struct pollfd p[1] = { { .fd = fortify_fd, .events = POLLIN } };
	struct timespec ts = { 0, 0 };
	fortify_sink = __ppoll_chk(p, overflow_nfds, &ts, NULL, sizeof(p));
}

static void check_fortify(void)
{
	int cli, srv;
	char buf[8];
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);

	tcp_pair(&cli, &srv);
	fortify_fd = srv;
	write_all(cli, "abcdef", 6);
	wait_readable(srv, 5000);
	CHECK_RET("__read_chk", __read_chk(srv, buf, 2, sizeof(buf)), 2);
	CHECK_RET("__recv_chk", __recv_chk(srv, buf, 2, sizeof(buf), 0), 2);
	CHECK_RET("__recvfrom_chk", __recvfrom_chk(srv, buf, 2, sizeof(buf), 0,
						   (struct sockaddr *)&from, &flen), 2);
	CHECK("__recvfrom_chk addrlen", flen == 0);
	CHECK("__chk data", memcmp(buf, "ef", 2) == 0);
	struct pollfd p[2] = { { .fd = srv, .events = POLLIN }, { .fd = cli, .events = POLLOUT } };
	CHECK_RET("__poll_chk", __poll_chk(p, 2, 0, sizeof(p)), 1);
	struct timespec ts = { 0, 0 };
	CHECK_RET("__ppoll_chk", __ppoll_chk(p, 2, &ts, NULL, sizeof(p)), 1);
	CHECK_ERR("__read_chk ebadf", __read_chk(-1, buf, 1, sizeof(buf)), EBADF);
	CHECK("__read_chk overflow aborts", aborts_in_child(overflow_read_chk));
	CHECK("__recv_chk overflow aborts", aborts_in_child(overflow_recv_chk));
	CHECK("__recvfrom_chk overflow aborts", aborts_in_child(overflow_recvfrom_chk));
	CHECK("__poll_chk overflow aborts", aborts_in_child(overflow_poll_chk));
	CHECK("__ppoll_chk overflow aborts", aborts_in_child(overflow_ppoll_chk));
	close_pair(cli, srv);
}

/* glibc exports some calls under a second public name at the same address; a preload
 * library must interpose both or programs linked to the second name bypass it. */
static void check_aliases(void)
{
	static const char *const pairs[][2] = {
		{ "__close", "close" }, { "__read", "read" }, { "__write", "write" },
		{ "__send", "send" }, { "__connect", "connect" }, { "__poll", "poll" },
		{ "__select", "select" }, { "__fcntl", "fcntl" }, { "__dup2", "dup2" },
		{ "__fork", "fork" }, { "__vfork", "vfork" },
	};
	char name[64];

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		void *alias = dlsym(RTLD_DEFAULT, pairs[i][0]);
		void *plain = dlsym(RTLD_DEFAULT, pairs[i][1]);
		snprintf(name, sizeof(name), "alias %s", pairs[i][0]);
		CHECK(name, alias != NULL && alias == plain);
	}

	int (*alias_close)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "__close");
	ssize_t (*alias_write)(int, const void *, size_t) =
		(ssize_t (*)(int, const void *, size_t))dlsym(RTLD_DEFAULT, "__write");
	int cli, srv;
	char buf[4];
	tcp_pair(&cli, &srv);
	CHECK("alias __write works", alias_write && alias_write(cli, "al", 2) == 2 &&
				     read_exact(srv, buf, 2));
	CHECK("alias __close works", alias_close && alias_close(cli) == 0);
	CHECK_RET("alias __close peer eof", read(srv, buf, 1), 0);
	close(srv);
}

/* ------------------------------------------------------------------ raw syscall() */

/* The kernel's sigset_t is 8 bytes on Linux's 64-bit ABIs (_NSIG / 8). */
#define KSIGSET_SIZE (_NSIG / 8)

/* Raw system calls keep the kernel's contract: ppoll and pselect6 write the unslept
 * time back (0 after a timeout), signal masks come with the kernel's size. */
static void check_raw_syscall(void)
{
	int cli, srv, n = -1;
	char buf[8];
	sigset_t empty;
	sigemptyset(&empty);

	tcp_pair(&cli, &srv);
	CHECK_RET("SYS_write", syscall(SYS_write, cli, "raw", 3), 3);
	CHECK_RET("SYS_ioctl FIONREAD", wait_readable(srv, 5000) ? syscall(SYS_ioctl, srv, FIONREAD, &n) : -1, 0);
	CHECK("SYS_ioctl FIONREAD count", n == 3);
	CHECK_RET("SYS_read", syscall(SYS_read, srv, buf, sizeof(buf)), 3);
	CHECK("SYS_read bytes", memcmp(buf, "raw", 3) == 0);
	CHECK_ERR("SYS_read bad fd", syscall(SYS_read, 987654, buf, 1), EBADF);
	CHECK_ERR("SYS_recvfrom bad fd", syscall(SYS_recvfrom, 987654, buf, 1, 0, NULL, NULL), EBADF);
	CHECK_ERR("SYS_read nonblocking empty", syscall(SYS_recvfrom, srv, buf, 1, MSG_DONTWAIT, NULL, NULL), EAGAIN);
	CHECK_RET("SYS_fcntl F_GETFL", syscall(SYS_fcntl, srv, F_GETFL) & O_NONBLOCK, 0);
	CHECK_RET("SYS_getpid passes through", syscall(SYS_getpid), getpid());
	CHECK_ERR("unknown system call number", syscall(100000, 1, 2, 3, 4, 5, 6), ENOSYS);

	struct pollfd p = { .fd = srv, .events = POLLIN };
	struct timespec ts = { 0, 30000000 };
	CHECK_RET("SYS_ppoll timeout", syscall(SYS_ppoll, &p, 1, &ts, NULL, 0), 0);
	CHECK("SYS_ppoll timeout written back as 0", ts.tv_sec == 0 && ts.tv_nsec == 0);
	ts = (struct timespec){ 0, 30000000 };
	CHECK_ERR("SYS_ppoll libc-sized mask", syscall(SYS_ppoll, &p, 1, &ts, &empty, sizeof(empty)), EINVAL);
	CHECK_RET("SYS_ppoll kernel-sized mask", syscall(SYS_ppoll, &p, 1, &ts, &empty, KSIGSET_SIZE), 0);
	ts = (struct timespec){ 0, 2000000000 };
	CHECK_ERR("SYS_ppoll bad timespec", syscall(SYS_ppoll, &p, 1, &ts, NULL, 0), EINVAL);
	ts = (struct timespec){ 5, 0 };
	CHECK_RET("SYS_sendto", syscall(SYS_sendto, cli, "r2", 2, 0, NULL, 0), 2);
	CHECK_RET("SYS_ppoll ready", syscall(SYS_ppoll, &p, 1, &ts, NULL, 0), 1);
	CHECK("SYS_ppoll ready: time left written back", ts.tv_sec <= 5 && (ts.tv_sec > 0 || ts.tv_nsec > 0));

	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(srv, &rd);
	ts = (struct timespec){ 0, 30000000 };
	CHECK_RET("SYS_pselect6 ready", syscall(SYS_pselect6, srv + 1, &rd, NULL, NULL, &ts, NULL), 1);
	CHECK_RET("SYS_recvfrom", syscall(SYS_recvfrom, srv, buf, sizeof(buf), 0, NULL, NULL), 2);
	FD_ZERO(&rd);
	FD_SET(srv, &rd);
	ts = (struct timespec){ 0, 30000000 };
	struct { const void *ss; size_t len; } mask = { &empty, KSIGSET_SIZE };
	CHECK_RET("SYS_pselect6 timeout", syscall(SYS_pselect6, srv + 1, &rd, NULL, NULL, &ts, &mask), 0);
	CHECK("SYS_pselect6 timeout written back as 0", ts.tv_sec == 0 && ts.tv_nsec == 0);
	CHECK("SYS_pselect6 timeout clears the set", !FD_ISSET(srv, &rd));
	mask.len = sizeof(empty);
	FD_SET(srv, &rd);
	ts = (struct timespec){ 0, 30000000 };
	CHECK_ERR("SYS_pselect6 libc-sized mask", syscall(SYS_pselect6, srv + 1, &rd, NULL, NULL, &ts, &mask), EINVAL);

	int ep = (int)syscall(SYS_epoll_create1, 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 77 }, out[2];
	CHECK_RET("SYS_epoll_ctl add", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, srv, &ev), 0);
	CHECK_RET("SYS_epoll_pwait timeout", syscall(SYS_epoll_pwait, ep, out, 2, 30, &empty, KSIGSET_SIZE), 0);
	CHECK_ERR("SYS_epoll_pwait libc-sized mask", syscall(SYS_epoll_pwait, ep, out, 2, 30, &empty, sizeof(empty)), EINVAL);
	CHECK_RET("SYS_write again", syscall(SYS_write, cli, "r3", 2), 2);
	CHECK_RET("SYS_epoll_wait ready", syscall(SYS_epoll_wait, ep, out, 2, 5000), 1);
	CHECK("SYS_epoll_wait event", out[0].events == EPOLLIN && out[0].data.u64 == 77);
#ifdef SYS_epoll_pwait2
	ts = (struct timespec){ 0, 0 };
	CHECK_RET("SYS_epoll_pwait2 ready", syscall(SYS_epoll_pwait2, ep, out, 2, &ts, NULL, 0), 1);
#endif
	CHECK_RET("SYS_close epoll", syscall(SYS_close, ep), 0);
	CHECK_RET("SYS_read r3", syscall(SYS_read, srv, buf, 2), 2);

	int d = (int)syscall(SYS_dup, cli);
	CHECK("SYS_dup", d >= 0);
	CHECK_RET("SYS_close the dup", syscall(SYS_close, d), 0);
	CHECK_RET("SYS_write after closing the dup", syscall(SYS_write, cli, "r4", 2), 2);
	CHECK_RET("SYS_read after closing the dup", syscall(SYS_read, srv, buf, 2), 2);
	CHECK_RET("SYS_close", syscall(SYS_close, cli), 0);
	CHECK_RET("SYS_read eof after SYS_close", syscall(SYS_read, srv, buf, 1), 0);
	CHECK_ERR("SYS_close twice", syscall(SYS_close, cli), EBADF);
	CHECK_RET("SYS_close peer", syscall(SYS_close, srv), 0);
}

int main(void)
{
	static const struct {
		const char *name;
		void (*run)(void);
	} sections[] = {
		{ "bad_fds", check_bad_fds },
		{ "socket_errors", check_socket_errors },
		{ "connect_accept", check_connect_accept },
		{ "nonblocking_connect", check_nonblocking_connect },
		{ "basic_io", check_basic_io },
		{ "vectors", check_vectors },
		{ "bulk_and_eof", check_bulk_and_eof },
		{ "waitall_and_signals", check_waitall_and_signals },
		{ "sockopts", check_sockopts },
		{ "sendfile", check_sendfile },
		{ "dup", check_dup },
		{ "close_range", check_close_range },
		{ "poll", check_poll },
		{ "select", check_select },
		{ "epoll", check_epoll },
		{ "udp_mmsg", check_udp_mmsg },
		{ "socketpair", check_socketpair },
		{ "fork", check_fork },
		{ "fortify", check_fortify },
		{ "aliases", check_aliases },
		{ "raw_syscall", check_raw_syscall },
	};
	pthread_t dog;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	spawn_thread(&dog, watchdog, NULL);

	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
		current_section = sections[i].name;
		sections[i].run();
	}

	printf("%d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
