/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * sem_check SCENARIO: socket semantics that TCP gives a program and that the rings alone
 * would not, on one connection over 127.0.0.1 between this process (the client) and a
 * forked child (the server). Both ends first exchange a greeting, so that under the
 * library the connection is upgraded before the scenario starts. Without the library
 * it documents what Linux does; preloaded, the library must give the same.
 *
 *   rcvlowat          SO_RCVLOWAT=1000 on an upgraded connection: not readable with 500
 *                     bytes there, readable with 1100, recv returns 1100 at once
 *   rcvlowat_pre      the same, set before connect()
 *   rcvlowat_listener the same, set on the server's listener (the accepted socket
 *                     inherits it) and checked on the server's end
 *   soerror           after a reset: SO_ERROR is ECONNRESET once (then 0), poll's POLLERR
 *                     goes with it, recv reads EOF, send fails with EPIPE and SIGPIPE
 *   reset_recv        after a reset: the first recv fails with ECONNRESET, then EOF;
 *                     send fails with EPIPE (MSG_NOSIGNAL: no SIGPIPE)
 *   outq              SIOCOUTQ/SIOCOUTQNSD are 0 once the bytes are in the peer's
 *                     receive buffer (unread), FIONREAD counts them there
 *   oob               send(MSG_OOB) between two writes: the reader gets the urgent byte
 *                     with recv(MSG_OOB) and the stream without it; SIOCATMARK is 0
 *                     while the bytes before the mark are unread
 *   oob_recv          recv(MSG_OOB) with no urgent data: EINVAL, the stream goes on
 *   async             signal-driven I/O (F_SETOWN, O_ASYNC set with fcntl): SIGIO when
 *                     the peer's data arrives, and the data intact
 *   async_ioctl       the same, O_ASYNC set with ioctl(FIOASYNC)
 *   cancel            a thread blocked in recv() is cancelled (pthread_cancel); the
 *                     socket goes on working: the next recv() gets the peer's data
 *   trunc             recv(NULL, n, MSG_TRUNC) drops n bytes, MSG_PEEK|MSG_TRUNC counts
 *                     without copying; the rest of the stream follows
 *   errqueue          recvmsg(MSG_ERRQUEUE) with stream data waiting: EAGAIN, the data
 *                     stays for recv()
 *   peek_waitall      recv(MSG_PEEK|MSG_WAITALL, 10) with 5 bytes there and 5 more 0.3 s
 *                     later waits for all 10
 *   peek_timeout      recv(MSG_PEEK|MSG_WAITALL, 10) under SO_RCVTIMEO with 5 bytes
 *                     there: the 5 at the timeout
 *   write_after_close the peer close()d and lives on: the first send succeeds; then
 *                     (the peer's reset) poll says POLLERR|POLLHUP and SO_ERROR EPIPE
 *                     once; the second send fails with EPIPE and raises SIGPIPE
 *   unspec            connect(AF_UNSPEC) dissolves the connection; the socket connects
 *                     again to the same server and a round trip works
 *   reset_unaccepted  the server closes its listener with our connection unaccepted
 *                     (the kernel resets it): the first send fails with ECONNRESET, no
 *                     SIGPIPE, as on TCP (the connection never upgrades)
 *   sendfile_sock     sendfile() from a socket: EINVAL, nothing read from it
 *   splice_nb         splice(socket -> pipe, SPLICE_F_NONBLOCK) on a blocking socket
 *                     waits for the peer's data (the flag is the pipe's)
 *   zerocopy          SO_ZEROCOPY and send(MSG_ZEROCOPY): its completion arrives on the
 *                     error queue
 *   pollout           a send side filled until EAGAIN, then 4 KiB of it read by the
 *                     peer: poll() does not say POLLOUT yet (tcp_poll wants a third of
 *                     the buffer free, so that a poll and a blocking write do not
 *                     block); once the peer read everything, it does
 *   second_reader     a thread blocked in recv(): another thread's recv(MSG_DONTWAIT)
 *                     and FIONREAD answer at once (TCP's sleep releases the socket
 *                     lock)
 *   second_writer     the same beside a thread blocked in send() on a full buffer:
 *                     send(MSG_DONTWAIT) and SIOCOUTQ
 *   restart_partial   a signal whose handler has SA_RESTART arrives after 10 of the
 *                     100 bytes of a recv(MSG_WAITALL): it returns 10
 *
 * Prints "ok - ..." or "FAIL - ..." per check; exits 1 if any failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/errqueue.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;
static const char *role = "client";
static volatile sig_atomic_t sigpipes;

static void check(bool ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *name, const char *fmt, ...)
{
	int e = errno;

	if (ok) {
		printf("ok - %s: %s\n", role, name);
	} else {
		va_list ap;

		failures++;
		printf("FAIL - %s: %s: ", role, name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf(" (errno %d %s)\n", e, strerror(e));
	}
	fflush(stdout);
}

static void die(const char *what) __attribute__((noreturn));
static void die(const char *what)
{
	fprintf(stderr, "sem_check %s: %s: %s\n", role, what, strerror(errno));
	exit(2);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* control channel between the two processes (pipes: never upgraded) */
static int ctl_in, ctl_out;

static void ctl_send(char c)
{
	if (write(ctl_out, &c, 1) != 1)
		die("control write");
}

static char ctl_wait(void)
{
	char c;

	if (read(ctl_in, &c, 1) != 1)
		die("control read");
	return c;
}

static void send_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t r = send(fd, buf, n, MSG_NOSIGNAL);

		if (r <= 0)
			die("send");
		buf += r;
		n -= (size_t)r;
	}
}

static void recv_exact(int fd, char *buf, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, buf, n, 0);

		if (r <= 0)
			die(r == 0 ? "recv: early EOF" : "recv");
		buf += r;
		n -= (size_t)r;
	}
}

/* Both ends: one greeting each way (the connection is upgraded under the library).
 * Read without blocking: under SO_RCVLOWAT the kernel wakes a reader only once that
 * many bytes are there (tcp_data_ready), whatever it asked for. */
static void greet(int fd)
{
	long t0 = now_ms();
	size_t got = 0;
	char b[2];

	send_all(fd, "hi", 2);
	while (got < 2) {
		ssize_t r = recv(fd, b + got, 2 - got, MSG_DONTWAIT);

		if (r > 0)
			got += (size_t)r;
		else if (r == 0 || errno != EAGAIN || now_ms() - t0 > 10000)
			die("greeting");
		else
			sleep_ms(2);
	}
}

static void set_lowat(int fd, int v)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) < 0)
		die("SO_RCVLOWAT");
}

static int ioctl_int(int fd, unsigned long req)
{
	int v = -1;

	if (ioctl(fd, req, &v) < 0)
		return -1;
	return v;
}

/* ------------------------------------------------------------ the scenarios */

/* The reader's end under SO_RCVLOWAT=1000 while the writer sends 500, then 600 after
 * ctl 'w' (which the reader sends once it saw 500 bytes not count as readable). */
static void lowat_reader(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char buf[2000];
	long t0;
	ssize_t r;
	int n;

	ctl_send('g');
	/* the 500 bytes are there (FIONREAD) but below the mark: not readable */
	t0 = now_ms();
	while ((n = ioctl_int(fd, FIONREAD)) < 500 && now_ms() - t0 < 5000)
		sleep_ms(5);
	check(n == 500, "lowat: FIONREAD sees the first 500 bytes", "FIONREAD %d", n);
	n = poll(&p, 1, 100);
	check(n == 0, "lowat: not readable with 500 of 1000 bytes", "poll %d revents %#x", n,
	      p.revents);
	ctl_send('w');
	n = poll(&p, 1, 5000);
	check(n == 1 && (p.revents & POLLIN), "lowat: readable with 1100 bytes",
	      "poll %d revents %#x", n, p.revents);
	r = recv(fd, buf, sizeof(buf), 0);
	check(r == 1100, "lowat: recv returns the 1100 bytes at once", "recv %zd", r);
	ctl_send('d');
}

static void lowat_writer(int fd)
{
	static char buf[600];

	memset(buf, 'a', sizeof(buf));
	if (ctl_wait() != 'g')
		die("control");
	send_all(fd, buf, 500);
	if (ctl_wait() != 'w')
		die("control");
	send_all(fd, buf, 600);
	ctl_wait();
}

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

/* The server resets the connection (SO_LINGER 0, close) once the client is ready. */
static void reset_by_server(int fd)
{
	struct linger lg = { 1, 0 };

	ctl_wait();
	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		die("SO_LINGER");
	close(fd);
	ctl_send('r');
}

static void await_reset(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	ctl_send('g');
	ctl_wait();
	check(poll(&p, 1, 5000) == 1 && (p.revents & POLLERR), "reset: POLLERR while pending",
	      "revents %#x", p.revents);
}

static void after_reset(int fd, bool nosignal)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
	char b[8];
	ssize_t r;
	int n;

	n = poll(&p, 1, 0);
	check(n == 1 && !(p.revents & POLLERR) && (p.revents & POLLHUP) && (p.revents & POLLIN),
	      "reset: reported, poll says HUP and IN without ERR", "poll %d revents %#x", n,
	      p.revents);
	r = recv(fd, b, sizeof(b), 0);
	check(r == 0, "reset: reported, recv reads EOF", "recv %zd", r);
	r = recv(fd, b, sizeof(b), 0);
	check(r == 0, "reset: recv reads EOF again", "recv %zd", r);
	sigpipes = 0;
	errno = 0;
	r = send(fd, "x", 1, nosignal ? MSG_NOSIGNAL : 0);
	check(r < 0 && errno == EPIPE, "reset: reported, send fails with EPIPE", "send %zd", r);
	check(sigpipes == (nosignal ? 0 : 1), nosignal ? "reset: no SIGPIPE with MSG_NOSIGNAL"
						       : "reset: send raised SIGPIPE",
	      "%d SIGPIPE", (int)sigpipes);
	errno = 0;
	r = send(fd, "x", 1, MSG_NOSIGNAL);
	check(r < 0 && errno == EPIPE, "reset: send fails with EPIPE again", "send %zd", r);
}

static void client_soerror(int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	await_reset(fd);
	check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == ECONNRESET,
	      "reset: SO_ERROR is ECONNRESET", "SO_ERROR %d", v);
	len = sizeof(v);
	check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0,
	      "reset: SO_ERROR is 0 once read", "SO_ERROR %d", v);
	after_reset(fd, false);
}

static void client_reset_recv(int fd)
{
	char b[8];
	ssize_t r;

	await_reset(fd);
	errno = 0;
	r = recv(fd, b, sizeof(b), 0);
	check(r < 0 && errno == ECONNRESET, "reset: the first recv fails with ECONNRESET",
	      "recv %zd", r);
	after_reset(fd, true);
}

#define OUTQ_BYTES 32768

static void server_outq(int fd)
{
	static char buf[OUTQ_BYTES];
	int n;

	memset(buf, 'q', sizeof(buf));
	send_all(fd, buf, sizeof(buf));
	ctl_wait(); /* the client sees them all in its receive buffer, unread */
	sleep_ms(50); /* loopback ACKs them */
	n = ioctl_int(fd, SIOCOUTQ);
	check(n == 0, "outq: SIOCOUTQ 0 with the bytes in the peer's buffer", "SIOCOUTQ %d", n);
	n = ioctl_int(fd, SIOCOUTQNSD);
	check(n == 0, "outq: SIOCOUTQNSD 0", "SIOCOUTQNSD %d", n);
	ctl_send('d');
	ctl_wait();
}

static void client_outq(int fd)
{
	static char buf[OUTQ_BYTES];
	long t0 = now_ms();
	int n;

	while ((n = ioctl_int(fd, FIONREAD)) < OUTQ_BYTES && now_ms() - t0 < 5000)
		sleep_ms(5);
	check(n == OUTQ_BYTES, "outq: FIONREAD counts the unread bytes", "FIONREAD %d", n);
	n = ioctl_int(fd, SIOCOUTQ);
	check(n == 0, "outq: the reader's SIOCOUTQ is 0", "SIOCOUTQ %d", n);
	ctl_send('c');
	ctl_wait();
	recv_exact(fd, buf, sizeof(buf));
	n = ioctl_int(fd, FIONREAD);
	check(n == 0, "outq: FIONREAD 0 once read", "FIONREAD %d", n);
	ctl_send('d');
}

static void server_oob(int fd)
{
	ssize_t r;

	send_all(fd, "abc", 3);
	r = send(fd, "!", 1, MSG_OOB);
	check(r == 1, "oob: send(MSG_OOB) sends the urgent byte", "send %zd", r);
	send_all(fd, "def", 3);
	ctl_send('s');
	ctl_wait();
}

static void client_oob(int fd)
{
	char b[8] = { 0 };
	long t0;
	ssize_t r;

	ctl_wait();
	/* "abc" came before the mark and is unread: not at the mark yet (telnet and FTP's
	 * ABOR read until it) */
	r = ioctl_int(fd, SIOCATMARK);
	check(r == 0, "oob: SIOCATMARK is 0 while bytes before the mark are unread",
	      "SIOCATMARK %zd", r);
	t0 = now_ms();
	do {
		errno = 0;
		r = recv(fd, b, 1, MSG_OOB);
		if (r < 0 && (errno == EINVAL || errno == EAGAIN) && now_ms() - t0 < 5000)
			sleep_ms(10); /* not arrived yet */
		else
			break;
	} while (true);
	check(r == 1 && b[0] == '!', "oob: recv(MSG_OOB) gets the urgent byte", "recv %zd '%c'",
	      r, b[0]);
	memset(b, 0, sizeof(b));
	recv_exact(fd, b, 6);
	check(memcmp(b, "abcdef", 6) == 0, "oob: the stream without the urgent byte",
	      "read '%.6s'", b);
	ctl_send('d');
}

static void server_oob_recv(int fd)
{
	char b[3];

	ctl_wait();
	send_all(fd, "xyz", 3);
	recv_exact(fd, b, 3);
	check(memcmp(b, "uvw", 3) == 0, "oob_recv: the stream goes on after", "read '%.3s'", b);
}

static void client_oob_recv(int fd)
{
	char b[3];
	ssize_t r;

	errno = 0;
	r = recv(fd, b, 1, MSG_OOB | MSG_DONTWAIT);
	check(r < 0 && errno == EINVAL, "oob_recv: recv(MSG_OOB) without urgent data: EINVAL",
	      "recv %zd", r);
	ctl_send('g');
	recv_exact(fd, b, 3);
	check(memcmp(b, "xyz", 3) == 0, "oob_recv: the stream goes on", "read '%.3s'", b);
	send_all(fd, "uvw", 3);
}

static volatile sig_atomic_t sigio_count;

static void on_sigio(int sig)
{
	(void)sig;
	sigio_count++;
}

static void server_async(int fd)
{
	ctl_wait();
	send_all(fd, "sig", 3);
	ctl_wait();
}

static void client_async(int fd, bool by_ioctl)
{
	struct sigaction act = { .sa_handler = on_sigio };
	int on = 1;
	char b[3];
	long t0;

	sigaction(SIGIO, &act, NULL);
	if (fcntl(fd, F_SETOWN, getpid()) < 0)
		die("F_SETOWN");
	if (by_ioctl ? ioctl(fd, FIOASYNC, &on) < 0
		     : fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) < 0)
		die("O_ASYNC");
	ctl_send('g');
	t0 = now_ms();
	while (!sigio_count && now_ms() - t0 < 5000)
		sleep_ms(10);
	check(sigio_count > 0, "async: SIGIO when the peer's data arrives", "no SIGIO in 5 s");
	recv_exact(fd, b, 3);
	check(memcmp(b, "sig", 3) == 0, "async: the data", "read '%.3s'", b);
	ctl_send('d');
}

static void *blocked_reader(void *arg)
{
	char b;

	(void)!recv(*(int *)arg, &b, 1, 0); /* nothing comes: cancelled in here */
	return NULL;
}

static void server_cancel(int fd)
{
	ctl_wait();
	send_all(fd, "after", 5);
	ctl_wait();
}

static void client_cancel(int fd)
{
	struct timeval tv = { .tv_sec = 5 };
	pthread_t t;
	void *ret = NULL;
	char b[5];
	ssize_t r;

	if (pthread_create(&t, NULL, blocked_reader, &fd) != 0)
		die("pthread_create");
	sleep_ms(300); /* asleep in recv by now */
	pthread_cancel(t);
	pthread_join(t, &ret);
	check(ret == PTHREAD_CANCELED, "cancel: the blocked reader was cancelled", "joined %p",
	      ret);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ctl_send('g');
	r = recv(fd, b, 5, MSG_WAITALL);
	check(r == 5 && memcmp(b, "after", 5) == 0, "cancel: the next recv gets the data",
	      "recv %zd", r);
	ctl_send('d');
}

/* Waits (bounded) until n bytes are readable. */
static void wait_readable(int fd, int n)
{
	long t0 = now_ms();
	int have = 0;

	while (ioctl(fd, FIONREAD, &have) == 0 && have < n && now_ms() - t0 < 5000)
		sleep_ms(5);
}

/* The server's side of most scenarios below: on the client's 'g', what it sends. */
static void server_send_on_go(int fd, const char *what)
{
	ctl_wait();
	send_all(fd, what, strlen(what));
	ctl_wait();
}

static void client_trunc(int fd)
{
	char b[6] = { 0 };
	ssize_t r;

	ctl_send('g');
	wait_readable(fd, 8);
	r = recv(fd, NULL, 3, MSG_TRUNC);
	check(r == 3, "trunc: recv(NULL, 3, MSG_TRUNC) drops 3", "recv %zd", r);
	r = recv(fd, NULL, 2, MSG_PEEK | MSG_TRUNC);
	check(r == 2, "trunc: MSG_PEEK|MSG_TRUNC counts 2", "recv %zd", r);
	recv_exact(fd, b, 5);
	check(memcmp(b, "defgh", 5) == 0, "trunc: the rest of the stream", "read '%.5s'", b);
	ctl_send('d');
}

static void client_errqueue(int fd)
{
	char b[4], ctl[256];
	struct iovec iov = { b, sizeof(b) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			    .msg_controllen = sizeof(ctl) };
	ssize_t r;

	ctl_send('g');
	wait_readable(fd, 4);
	errno = 0;
	r = recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
	check(r < 0 && errno == EAGAIN, "errqueue: MSG_ERRQUEUE is EAGAIN", "recvmsg %zd", r);
	recv_exact(fd, b, 4);
	check(memcmp(b, "data", 4) == 0, "errqueue: the data stays for recv", "read '%.4s'", b);
	ctl_send('d');
}

static void server_peek_waitall(int fd)
{
	ctl_wait();
	send_all(fd, "12345", 5);
	sleep_ms(300);
	send_all(fd, "67890", 5);
	ctl_wait();
}

static void client_peek_waitall(int fd)
{
	char b[10];
	ssize_t r;

	ctl_send('g');
	r = recv(fd, b, 10, MSG_PEEK | MSG_WAITALL);
	check(r == 10 && memcmp(b, "1234567890", 10) == 0,
	      "peek_waitall: MSG_PEEK|MSG_WAITALL waits for all 10", "recv %zd", r);
	recv_exact(fd, b, 10);
	check(memcmp(b, "1234567890", 10) == 0, "peek_waitall: then read", "read '%.10s'", b);
	ctl_send('d');
}

static void server_peek_timeout(int fd)
{
	ctl_wait();
	send_all(fd, "12345", 5);
	ctl_wait();
}

static void client_peek_timeout(int fd)
{
	struct timeval tv = { .tv_usec = 200000 };
	char b[10];
	ssize_t r;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		die("SO_RCVTIMEO");
	ctl_send('g');
	wait_readable(fd, 5);
	r = recv(fd, b, 10, MSG_PEEK | MSG_WAITALL);
	check(r == 5 && memcmp(b, "12345", 5) == 0,
	      "peek_timeout: MSG_PEEK|MSG_WAITALL returns the 5 there at SO_RCVTIMEO", "recv %zd",
	      r);
	recv_exact(fd, b, 5);
	check(memcmp(b, "12345", 5) == 0, "peek_timeout: then read", "read '%.5s'", b);
	ctl_send('d');
}

static void server_close_early(int fd)
{
	close(fd);
	ctl_send('c');
	ctl_wait();
}

static void client_write_after_close(int fd)
{
	ssize_t r;
	int pipes;

	ctl_wait();
	sleep_ms(100); /* the close (TCP: its FIN) has arrived */
	pipes = sigpipes;
	r = send(fd, "x", 1, 0);
	check(r == 1 && sigpipes == pipes, "write_after_close: the first send succeeds",
	      "send %zd, SIGPIPEs %d", r, sigpipes - pipes);
	sleep_ms(100); /* TCP: the peer's reset has arrived */
	{
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
		int v = -1;
		socklen_t len = sizeof(v);

		check(poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP),
		      "write_after_close: then POLLERR|POLLHUP", "revents %#x", (unsigned)p.revents);
		check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == EPIPE,
		      "write_after_close: SO_ERROR is EPIPE", "SO_ERROR %d", v);
		len = sizeof(v);
		check(getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0,
		      "write_after_close: SO_ERROR is 0 once read", "SO_ERROR %d", v);
	}
	errno = 0;
	r = send(fd, "y", 1, 0);
	check(r < 0 && errno == EPIPE && sigpipes == pipes + 1,
	      "write_after_close: the second fails with EPIPE and SIGPIPE", "send %zd, SIGPIPEs %d",
	      r, sigpipes - pipes);
	ctl_send('d');
}

/* The server's second connection (after the client's connect(AF_UNSPEC)): an echo. */
static void server_unspec(int lfd)
{
	char b[4];
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		die("accept");
	recv_exact(fd, b, 4);
	send_all(fd, b, 4);
	ctl_wait();
	close(fd);
}

static void client_unspec(int fd, const struct sockaddr_in *sa)
{
	struct sockaddr u = { .sa_family = AF_UNSPEC };
	char b[4];
	int r;

	r = connect(fd, &u, sizeof(u));
	check(r == 0, "unspec: connect(AF_UNSPEC) dissolves the connection", "connect %d", r);
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	check(r == 0, "unspec: the socket connects again", "connect %d (%s)", r, strerror(errno));
	send_all(fd, "ping", 4);
	recv_exact(fd, b, 4);
	check(memcmp(b, "ping", 4) == 0, "unspec: a round trip on the new connection",
	      "read '%.4s'", b);
	ctl_send('d');
}

static void client_reset_unaccepted(int fd)
{
	ssize_t r;
	int pipes = sigpipes;

	/* preloaded, the handshake is waiting for the server's answer by then: its read
	 * is what meets the reset */
	sleep_ms(300);
	ctl_send('g');
	ctl_wait(); /* the listener is closed: the kernel reset our connection */
	sleep_ms(300);
	errno = 0;
	r = send(fd, "x", 1, 0);
	check(r < 0 && errno == ECONNRESET && sigpipes == pipes,
	      "reset_unaccepted: the first send fails with ECONNRESET, no SIGPIPE",
	      "send %zd (%s), SIGPIPEs %d", r, strerror(errno), sigpipes - pipes);
	ctl_send('d');
}

static void client_sendfile_sock(int fd)
{
	char b[4];
	ssize_t r;

	ctl_send('g');
	wait_readable(fd, 4);
	errno = 0;
	r = sendfile(fd, fd, NULL, 4);
	check(r < 0 && errno == EINVAL, "sendfile_sock: sendfile from a socket is EINVAL",
	      "sendfile %zd", r);
	recv_exact(fd, b, 4);
	check(memcmp(b, "data", 4) == 0, "sendfile_sock: nothing was read from it",
	      "read '%.4s'", b);
	ctl_send('d');
}

static void server_send_late(int fd)
{
	ctl_wait();
	sleep_ms(300);
	send_all(fd, "abc", 3);
	ctl_wait();
}

static void client_splice_nb(int fd)
{
	char b[3];
	int p[2];
	ssize_t r;

	if (pipe(p) < 0)
		die("pipe");
	ctl_send('g');
	r = splice(fd, NULL, p[1], NULL, 3, SPLICE_F_NONBLOCK);
	check(r == 3, "splice_nb: waits for the socket's data", "splice %zd", r);
	if (r == 3 && read(p[0], b, 3) == 3)
		check(memcmp(b, "abc", 3) == 0, "splice_nb: the data", "read '%.3s'", b);
	close(p[0]);
	close(p[1]);
	ctl_send('d');
}

static void server_zerocopy(int fd)
{
	char b[4096];

	recv_exact(fd, b, sizeof(b));
	check(b[0] == 'z' && b[4095] == 'z', "zerocopy: the bytes", "read '%c'", b[0]);
	ctl_wait();
}

static void client_zerocopy(int fd)
{
	static char buf[4096];
	char ctl[256];
	struct msghdr m = { .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct pollfd pf = { .fd = fd, .events = 0 };
	struct cmsghdr *cm;
	bool done = false;
	int one = 1;
	long t0;
	ssize_t r;

	memset(buf, 'z', sizeof(buf));
	if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) < 0)
		die("SO_ZEROCOPY");
	r = send(fd, buf, sizeof(buf), MSG_ZEROCOPY);
	check(r == (ssize_t)sizeof(buf), "zerocopy: send(MSG_ZEROCOPY)", "send %zd", r);
	t0 = now_ms();
	while (!done && now_ms() - t0 < 5000) {
		poll(&pf, 1, 100); /* POLLERR: the error queue has something */
		m.msg_controllen = sizeof(ctl);
		if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			continue;
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			struct sock_extended_err *ee = (void *)CMSG_DATA(cm);

			if (ee->ee_origin == SO_EE_ORIGIN_ZEROCOPY)
				done = true;
		}
	}
	check(done, "zerocopy: the completion on the error queue", "none in 5 s");
	ctl_send('d');
}

/* The peer reads 4 KiB on the first word, then everything until EOF on the second. */
static void server_pollout(int fd)
{
	static char b[65536];
	ssize_t r;

	ctl_wait();
	recv_exact(fd, b, 4096);
	ctl_send('r');
	ctl_wait();
	while ((r = recv(fd, b, sizeof(b), 0)) > 0)
		;
	check(r == 0, "pollout: the stream ends with EOF", "recv %zd", r);
}

static void client_pollout(int fd)
{
	static char buf[65536];
	struct pollfd pf = { .fd = fd, .events = POLLOUT };
	int again = 0, n;

	memset(buf, 'p', sizeof(buf));
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		die("O_NONBLOCK");
	/* full: EAGAIN ten times in a row, 20 ms apart (TCP moves its queue meanwhile) */
	while (again < 10) {
		if (send(fd, buf, sizeof(buf), 0) > 0) {
			again = 0;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			again++;
			sleep_ms(20);
		} else {
			die("send");
		}
	}
	ctl_send('f');
	ctl_wait();
	sleep_ms(200);
	n = poll(&pf, 1, 300);
	check(n == 0, "pollout: not writable with 4 KiB of room", "poll %d revents %#x", n,
	      (unsigned)pf.revents);
	ctl_send('a');
	pf.revents = 0;
	n = poll(&pf, 1, 5000);
	check(n == 1 && (pf.revents & POLLOUT), "pollout: writable once the peer read it all",
	      "poll %d revents %#x", n, (unsigned)pf.revents);
}

/* ------------------------------------------------------------ the pair */

/* Waits for the client's control byte, at most ms; true when it came. */
static bool ctl_wait_for(int ms)
{
	struct pollfd p = { .fd = ctl_in, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return false;
	ctl_wait();
	return true;
}

/* The server for both "second_*" scenarios: on the client's 'g' (or after 3 s, so a
 * library that makes the client's second call wait for the first one's data does not
 * hang the test), "x"; then it reads everything until the client's close. */
static void server_second(int fd)
{
	char b[65536];

	ctl_wait_for(3000);
	send_all(fd, "x", 1);
	while (recv(fd, b, sizeof(b), 0) > 0)
		;
}

static void *blocked_recv_1(void *arg)
{
	static char b;

	return recv(*(int *)arg, &b, 1, 0) == 1 && b == 'x' ? (void *)1 : NULL;
}

/* A thread blocked in recv() does not hold up another thread's nonblocking recv or
 * FIONREAD on the socket: TCP's sleep releases the socket lock (sk_wait_data). */
static void client_second_reader(int fd)
{
	pthread_t t;
	void *ret = NULL;
	long t0, dt;
	ssize_t r;
	int avail = -1, e;
	char b;

	if (pthread_create(&t, NULL, blocked_recv_1, &fd) != 0)
		die("pthread_create");
	sleep_ms(300); /* asleep in recv by now */
	t0 = now_ms();
	r = recv(fd, &b, 1, MSG_DONTWAIT);
	e = errno;
	dt = now_ms() - t0;
	check(r == -1 && e == EAGAIN && dt < 1000,
	      "second reader: recv(MSG_DONTWAIT) beside a blocked reader is EAGAIN at once",
	      "r %zd errno %d after %ld ms", r, e, dt);
	t0 = now_ms();
	r = ioctl(fd, FIONREAD, &avail);
	dt = now_ms() - t0;
	check(r == 0 && avail == 0 && dt < 1000,
	      "second reader: FIONREAD beside a blocked reader answers at once",
	      "r %zd avail %d after %ld ms", r, avail, dt);
	ctl_send('g');
	pthread_join(t, &ret);
	check(ret == (void *)1, "second reader: the blocked reader gets the data", "-");
}

struct blocked_send {
	int fd;
	size_t n;
};

static void *blocked_send_all(void *arg)
{
	struct blocked_send *bs = arg;
	static char b[1 << 20];

	return send(bs->fd, b, bs->n, 0) == (ssize_t)bs->n ? (void *)1 : NULL;
}

/* A thread blocked in send() on a full buffer does not hold up another thread's
 * nonblocking send or SIOCOUTQ: TCP's sleep releases the socket lock
 * (sk_stream_wait_memory). */
static void client_second_writer(int fd)
{
	struct blocked_send bs = { .fd = fd, .n = 1 << 20 };
	static char fillb[65536];
	pthread_t t;
	void *ret = NULL;
	long t0, dt;
	ssize_t r;
	int outq = -1, e;

	while (send(fd, fillb, sizeof(fillb), MSG_DONTWAIT) > 0)
		;
	if (pthread_create(&t, NULL, blocked_send_all, &bs) != 0)
		die("pthread_create");
	sleep_ms(300); /* asleep in send by now */
	t0 = now_ms();
	r = send(fd, "y", 1, MSG_DONTWAIT);
	e = errno;
	dt = now_ms() - t0;
	/* TCP may take the byte (its blocked writer waits for more room than that) */
	check((r == 1 || (r == -1 && e == EAGAIN)) && dt < 1000,
	      "second writer: send(MSG_DONTWAIT) beside a blocked writer answers at once",
	      "r %zd errno %d after %ld ms", r, e, dt);
	t0 = now_ms();
	r = ioctl(fd, SIOCOUTQ, &outq);
	dt = now_ms() - t0;
	check(r == 0 && outq >= 0 && dt < 1000,
	      "second writer: SIOCOUTQ beside a blocked writer answers at once",
	      "r %zd outq %d after %ld ms", r, outq, dt);
	ctl_send('g');
	pthread_join(t, &ret);
	check(ret == (void *)1, "second writer: the blocked send completes", "-");
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* The server of "restart_partial": 10 bytes on 'g', the other 90 after 3 s. */
static void server_restart_partial(int fd)
{
	ctl_wait();
	send_all(fd, "0123456789", 10);
	sleep_ms(3000);
	send_all(fd, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl", 90);
	ctl_wait();
}

/* A signal whose handler has SA_RESTART, after part of a MSG_WAITALL recv arrived:
 * the call returns that part (tcp_recvmsg: copied ? : sock_intr_errno), it is not
 * restarted to wait for the rest. */
static void client_restart_partial(int fd)
{
	struct sigaction act = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval it = { .it_value = { .tv_usec = 300000 } };
	char b[100];
	long t0, dt;
	ssize_t r;

	sigaction(SIGALRM, &act, NULL);
	signal(SIGPIPE, SIG_IGN); /* every handler restarts: the call would be restarted */
	ctl_send('g');
	wait_readable(fd, 10);
	t0 = now_ms();
	setitimer(ITIMER_REAL, &it, NULL);
	r = recv(fd, b, sizeof(b), MSG_WAITALL);
	dt = now_ms() - t0;
	check(r == 10 && dt < 2500,
	      "restart partial: an SA_RESTART signal ends a MSG_WAITALL recv with its part",
	      "recv %zd after %ld ms", r, dt);
	if (r == 10)
		recv_exact(fd, b, 90);
	ctl_send('d');
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t salen = sizeof(sa);
	int c2s[2], s2c[2], port_pipe[2], lfd, fd, status;
	const char *sc = argc == 2 ? argv[1] : "";
	struct sigaction act = { .sa_handler = on_sigpipe };
	pid_t pid;

	if (strcmp(sc, "rcvlowat") && strcmp(sc, "rcvlowat_pre") &&
	    strcmp(sc, "rcvlowat_listener") && strcmp(sc, "soerror") && strcmp(sc, "reset_recv") &&
	    strcmp(sc, "outq") && strcmp(sc, "oob") && strcmp(sc, "oob_recv") &&
	    strcmp(sc, "async") && strcmp(sc, "async_ioctl") && strcmp(sc, "cancel") &&
	    strcmp(sc, "trunc") && strcmp(sc, "errqueue") && strcmp(sc, "peek_waitall") &&
	    strcmp(sc, "peek_timeout") && strcmp(sc, "unspec") &&
	    strcmp(sc, "reset_unaccepted") &&
	    strcmp(sc, "write_after_close") && strcmp(sc, "sendfile_sock") &&
	    strcmp(sc, "splice_nb") && strcmp(sc, "zerocopy") && strcmp(sc, "pollout") &&
	    strcmp(sc, "second_reader") && strcmp(sc, "second_writer") &&
	    strcmp(sc, "restart_partial")) {
		fprintf(stderr, "usage: %s rcvlowat|rcvlowat_pre|rcvlowat_listener|soerror|"
				"reset_recv|outq|oob|oob_recv|async|async_ioctl|cancel|trunc|"
				"errqueue|peek_waitall|peek_timeout|write_after_close|unspec|"
				"reset_unaccepted|sendfile_sock|splice_nb|"
				"zerocopy|pollout|second_reader|second_writer|"
				"restart_partial\n", argv[0]);
		return 2;
	}
	sigaction(SIGPIPE, &act, NULL);
	if (pipe(c2s) < 0 || pipe(s2c) < 0 || pipe(port_pipe) < 0)
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		role = "server";
		ctl_in = c2s[0];
		ctl_out = s2c[1];
		lfd = socket(AF_INET, SOCK_STREAM, 0);
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("bind");
		if (!strcmp(sc, "rcvlowat_listener"))
			set_lowat(lfd, 1000);
		if (listen(lfd, 4) < 0 || getsockname(lfd, (struct sockaddr *)&sa, &salen) < 0)
			die("listen");
		if (write(port_pipe[1], &sa.sin_port, sizeof(sa.sin_port)) != sizeof(sa.sin_port))
			die("port pipe");
		if (!strcmp(sc, "reset_unaccepted")) {
			ctl_wait(); /* the client's connection is in the accept queue */
			close(lfd);
			ctl_send('c');
			ctl_wait();
			exit(failures ? 1 : 0);
		}
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			die("accept");
		if (strcmp(sc, "unspec"))
			close(lfd);
		greet(fd);
		if (!strncmp(sc, "rcvlowat", 8)) {
			if (!strcmp(sc, "rcvlowat_listener"))
				lowat_reader(fd);
			else
				lowat_writer(fd);
		} else if (!strcmp(sc, "soerror") || !strcmp(sc, "reset_recv")) {
			reset_by_server(fd);
			fd = -1;
		} else if (!strcmp(sc, "outq")) {
			server_outq(fd);
		} else if (!strcmp(sc, "oob")) {
			server_oob(fd);
		} else if (!strncmp(sc, "async", 5)) {
			server_async(fd);
		} else if (!strcmp(sc, "cancel")) {
			server_cancel(fd);
		} else if (!strcmp(sc, "trunc")) {
			server_send_on_go(fd, "abcdefgh");
		} else if (!strcmp(sc, "errqueue") || !strcmp(sc, "sendfile_sock")) {
			server_send_on_go(fd, "data");
		} else if (!strcmp(sc, "peek_waitall")) {
			server_peek_waitall(fd);
		} else if (!strcmp(sc, "peek_timeout")) {
			server_peek_timeout(fd);
		} else if (!strcmp(sc, "unspec")) {
			server_unspec(lfd);
		} else if (!strcmp(sc, "write_after_close")) {
			server_close_early(fd);
			fd = -1;
		} else if (!strcmp(sc, "splice_nb")) {
			server_send_late(fd);
		} else if (!strcmp(sc, "zerocopy")) {
			server_zerocopy(fd);
		} else if (!strcmp(sc, "pollout")) {
			server_pollout(fd);
		} else if (!strncmp(sc, "second_", 7)) {
			server_second(fd);
		} else if (!strcmp(sc, "restart_partial")) {
			server_restart_partial(fd);
		} else {
			server_oob_recv(fd);
		}
		if (fd >= 0)
			close(fd);
		exit(failures ? 1 : 0);
	}
	ctl_in = s2c[0];
	ctl_out = c2s[1];
	if (read(port_pipe[0], &sa.sin_port, sizeof(sa.sin_port)) != sizeof(sa.sin_port))
		die("port pipe");
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	if (!strcmp(sc, "rcvlowat_pre"))
		set_lowat(fd, 1000);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	if (!strcmp(sc, "reset_unaccepted")) {
		client_reset_unaccepted(fd);
		goto done;
	}
	greet(fd);
	if (!strcmp(sc, "rcvlowat")) {
		set_lowat(fd, 1000);
		lowat_reader(fd);
	} else if (!strcmp(sc, "rcvlowat_pre")) {
		lowat_reader(fd);
	} else if (!strcmp(sc, "rcvlowat_listener")) {
		lowat_writer(fd);
	} else if (!strcmp(sc, "soerror")) {
		client_soerror(fd);
	} else if (!strcmp(sc, "reset_recv")) {
		client_reset_recv(fd);
	} else if (!strcmp(sc, "outq")) {
		client_outq(fd);
	} else if (!strcmp(sc, "oob")) {
		client_oob(fd);
	} else if (!strncmp(sc, "async", 5)) {
		client_async(fd, !strcmp(sc, "async_ioctl"));
	} else if (!strcmp(sc, "cancel")) {
		client_cancel(fd);
	} else if (!strcmp(sc, "trunc")) {
		client_trunc(fd);
	} else if (!strcmp(sc, "errqueue")) {
		client_errqueue(fd);
	} else if (!strcmp(sc, "peek_waitall")) {
		client_peek_waitall(fd);
	} else if (!strcmp(sc, "peek_timeout")) {
		client_peek_timeout(fd);
	} else if (!strcmp(sc, "unspec")) {
		client_unspec(fd, &sa);
	} else if (!strcmp(sc, "write_after_close")) {
		client_write_after_close(fd);
	} else if (!strcmp(sc, "sendfile_sock")) {
		client_sendfile_sock(fd);
	} else if (!strcmp(sc, "splice_nb")) {
		client_splice_nb(fd);
	} else if (!strcmp(sc, "zerocopy")) {
		client_zerocopy(fd);
	} else if (!strcmp(sc, "pollout")) {
		client_pollout(fd);
	} else if (!strcmp(sc, "second_reader")) {
		client_second_reader(fd);
	} else if (!strcmp(sc, "second_writer")) {
		client_second_writer(fd);
	} else if (!strcmp(sc, "restart_partial")) {
		client_restart_partial(fd);
	} else {
		client_oob_recv(fd);
	}
done:
	close(fd);
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		printf("FAIL - server exited with status %#x\n", status);
		failures++;
	}
	return failures ? 1 : 0;
}
