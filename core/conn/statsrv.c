/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The smcpstat query server: see statsrv.h for the protocol.
 *
 * Started lazily by the first connection that becomes ACTIVE, so a process without SMC
 * connections pays nothing: its socket then, its thread at the first query when the
 * progress thread runs (it watches the socket). One detached thread per process runs a
 * blocking accept loop;
 * a query is answered from a snapshot taken with conn_foreach: under the registry lock
 * the fields are only copied; addresses are looked up, formatted and sent after it.
 *
 * Every socket call goes through REAL(): the server's fds are invisible to the
 * application-facing wrappers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/forklock.h"
#include "core/base/lib_threads.h"
#include "core/base/log.h"
#include "core/base/progress.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"

/* A client that stops reading or never sends its request holds the thread this long. */
#define STATSRV_IO_TIMEOUT_MS 1000
#define STATSRV_STACK_SIZE (256 * 1024)

enum statsrv_state { STATSRV_IDLE = 0, STATSRV_SERVING, STATSRV_FAILED };

static pthread_mutex_t statsrv_lock = PTHREAD_MUTEX_INITIALIZER;
static int statsrv_state;           /* enum statsrv_state, atomic */
static int statsrv_listen_fd = -1;  /* atomic: read by the atfork child handler */
static int statsrv_client_fd = -1;  /* the query being answered, atomic, same reason */

/* ------------------------------------------------------------------ output buffer */

struct outbuf {
	char *data;
	size_t len, cap;
	bool oom;
};

static void ob_reserve(struct outbuf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->oom || b->len + more + 1 <= b->cap)
		return;
	cap = b->cap ? b->cap : 1024;
	while (cap < b->len + more + 1)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p) {
		b->oom = true;
		return;
	}
	b->data = p;
	b->cap = cap;
}

__attribute__((format(printf, 2, 3)))
static void ob_printf(struct outbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	ob_reserve(b, (size_t)n);
	if (b->oom)
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void ob_json_string(struct outbuf *b, const char *s)
{
	ob_printf(b, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			ob_printf(b, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			ob_printf(b, "\\u%04x", ch);
		else
			ob_printf(b, "%c", ch);
	}
	ob_printf(b, "\"");
}

/* ------------------------------------------------------------------ one record */

static const char *state_name(int state)
{
	switch (state) {
	case CONN_PENDING: return "pending";
	case CONN_ACTIVE: return "active";
	case CONN_FALLBACK: return "fallback";
	case CONN_CLOSED: return "closed";
	}
	return "unknown";
}

/* "addr", port for an IPv4/IPv6 socket address; false for anything else. */
static bool format_inet(const struct sockaddr_storage *ss, char *addr, size_t len,
			unsigned *port)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;

		*port = ntohs(sin->sin_port);
		return inet_ntop(AF_INET, &sin->sin_addr, addr, (socklen_t)len) != NULL;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

		*port = ntohs(sin6->sin6_port);
		return inet_ntop(AF_INET6, &sin6->sin6_addr, addr, (socklen_t)len) != NULL;
	}
	return false;
}

/* "<key>_addr":..,"<key>_port":.. from getsockname/getpeername (null when unknown). */
static void ob_address(struct outbuf *b, const char *key, int fd, bool peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char addr[INET6_ADDRSTRLEN];
	unsigned port = 0;
	int r = -1;

	memset(&ss, 0, sizeof(ss));
	if (fd >= 0)
		r = peer ? REAL(getpeername)(fd, (struct sockaddr *)&ss, &len)
			 : REAL(getsockname)(fd, (struct sockaddr *)&ss, &len);
	if (r == 0 && format_inet(&ss, addr, sizeof(addr), &port)) {
		ob_printf(b, ",\"%s_addr\":", key);
		ob_json_string(b, addr);
		ob_printf(b, ",\"%s_port\":%u", key, port);
	} else {
		ob_printf(b, ",\"%s_addr\":null,\"%s_port\":null", key, key);
	}
}

/* What the registry lock protects is copied out; formatting and the address lookups
 * (syscalls) happen after the lock is released, so the lock is held only for copies. */
struct conn_view {
	int fd, state;
	enum conn_side side;
	enum smc_mode mode;
	enum smc_reason reason;
	uint32_t rx_size, tx_size;
	uint64_t bytes_sent, bytes_received;
	bool carried;
};

struct snapshot {
	struct conn_view *v;
	size_t n, cap;
	bool oom;
};

/* conn_foreach callback, under the registry lock: the connection is alive, but its
 * fields may change under us; those a running thread writes are loaded atomically, and
 * a view torn across fields is acceptable for a monitoring tool. */
static void snapshot_conn(struct smc_conn *c, void *arg)
{
	struct snapshot *s = arg;
	struct conn_view *v;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		struct conn_view *nv = s->oom ? NULL : realloc(s->v, cap * sizeof(*nv));

		if (!nv) {
			s->oom = true;
			return;
		}
		s->v = nv;
		s->cap = cap;
	}
	v = &s->v[s->n++];
	v->state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
	/* once the application closed it, the number may already be another socket */
	v->fd = __atomic_load_n(&c->fd_refs, __ATOMIC_RELAXED) > 0 ? c->fd : -1;
	v->side = c->side;
	v->mode = c->mode;
	v->reason = c->reason;
	v->rx_size = v->state == CONN_PENDING ? 0 : c->rx_size;
	v->tx_size = v->state == CONN_PENDING ? 0 : c->tx_size;
	v->bytes_sent = __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED);
	v->bytes_received = __atomic_load_n(&c->bytes_received, __ATOMIC_RELAXED);
	v->carried = c->carried;
}

/* One line of JSON for one connection. */
static void format_view(struct outbuf *b, const struct conn_view *v, long pid,
			const char *comm)
{
	ob_printf(b, "{\"pid\":%ld,\"comm\":", pid);
	ob_json_string(b, comm);
	ob_printf(b, ",\"fd\":%d,\"side\":\"%s\",\"state\":\"%s\",\"mode\":\"%s\",\"reason\":\"%s\"",
		  v->fd, v->side == CONN_SERVER ? "server" : "client", state_name(v->state),
		  stats_mode_name(v->mode), stats_reason_name(v->reason));
	ob_address(b, "local", v->fd, false);
	ob_address(b, "peer", v->fd, true);
	ob_printf(b, ",\"rx_size\":%u,\"tx_size\":%u,\"bytes_sent\":%llu,\"bytes_received\":%llu"
		  ",\"carried\":%s}\n",
		  v->rx_size, v->tx_size, (unsigned long long)v->bytes_sent,
		  (unsigned long long)v->bytes_received, v->carried ? "true" : "false");
}

/* The process name (the main thread's comm), without its newline. */
static void read_comm(char *buf, size_t len)
{
	int fd = REAL(open)("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	ssize_t n = -1;

	if (fd >= 0) {
		n = REAL(read)(fd, buf, len - 1);
		fd_own_close(fd);
	}
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

/* ------------------------------------------------------------------ one query */

static bool peer_allowed(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return false;
	return cred.uid == 0 || cred.uid == geteuid();
}

static void set_io_timeouts(int fd)
{
	struct timeval tv = {
		.tv_sec = STATSRV_IO_TIMEOUT_MS / 1000,
		.tv_usec = (STATSRV_IO_TIMEOUT_MS % 1000) * 1000,
	};

	REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	REAL(setsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static bool read_request(int fd)
{
	char req[64];
	ssize_t n = REAL(recv)(fd, req, sizeof(req) - 1, 0);

	if (n <= 0)
		return false;
	req[n] = '\0';
	return strcmp(req, STATSRV_REQUEST_LIST) == 0;
}

/* Sends each line of the snapshot as one message; stops at the first error (the client
 * went away or stopped reading). */
static void send_lines(int fd, const char *data, size_t len)
{
	const char *p = data, *end = data + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (n && REAL(send)(fd, p, n, MSG_NOSIGNAL) < 0)
			return;
		p += n + 1;
	}
}

static void answer_query(int fd)
{
	struct snapshot s = { 0 };
	struct outbuf out = { 0 };
	long pid = (long)getpid();
	char comm[64];

	set_io_timeouts(fd);
	/* The request is read even from a peer we refuse: closing with it unread would
	 * reset the connection instead of delivering the refusal. */
	if (!read_request(fd))
		return;
	if (!peer_allowed(fd)) {
		static const char refusal[] = "{\"error\":\"permission denied\"}";

		log_debug("statsrv: query from another user refused");
		REAL(send)(fd, refusal, sizeof(refusal) - 1, MSG_NOSIGNAL);
		return;
	}
	conn_foreach(snapshot_conn, &s);
	read_comm(comm, sizeof(comm));
	for (size_t i = 0; i < s.n; i++)
		format_view(&out, &s.v[i], pid, comm);
	if (s.oom || out.oom) {
		static const char oom[] = "{\"error\":\"out of memory\"}";

		REAL(send)(fd, oom, sizeof(oom) - 1, MSG_NOSIGNAL);
	} else if (out.len) {
		send_lines(fd, out.data, out.len);
	}
	free(out.data);
	free(s.v);
}

/* ------------------------------------------------------------------ the thread */

/* The listening fd stopped being ours (the application closed it, e.g. close_range()
 * at daemonization): forget it without closing (the number may be reused by now) and
 * let the next statsrv_ensure() start again. */
static void statsrv_lost(int lfd)
{
	pthread_mutex_lock(&statsrv_lock);
	if (__atomic_load_n(&statsrv_listen_fd, __ATOMIC_RELAXED) == lfd) {
		fd_budget_give(1); /* its number is the application's now */
		__atomic_store_n(&statsrv_listen_fd, -1, __ATOMIC_RELAXED);
		__atomic_store_n(&statsrv_state, STATSRV_IDLE, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&statsrv_lock);
}

static void *statsrv_main(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	forklock_thread_started();
	lib_thread_enter();
	for (;;) {
		/* Waits in poll(), not in accept(): a blocked accept() holds the lowest free
		 * descriptor number reserved until it returns (the kernel takes the number
		 * first), and a program that closed 0 and opens /dev/null must get 0 back. */
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int fd;

		if (REAL(poll)(&pfd, 1, -1) < 0 && errno == EINTR)
			continue;
		fd = REAL(accept4)(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			fd = fd_park(fd); /* held while answering: away from the program's numbers */
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL ||
			    errno == EOPNOTSUPP) {
				log_debug("statsrv: listening socket lost (%s)", strerror(errno));
				statsrv_lost(lfd);
				lib_thread_leave();
				return NULL;
			}
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				struct timespec pause = { .tv_nsec = 100 * 1000 * 1000 };

				nanosleep(&pause, NULL); /* resource shortage: do not spin */
			}
			continue;
		}
		__atomic_store_n(&statsrv_client_fd, fd, __ATOMIC_RELAXED);
		answer_query(fd);
		__atomic_store_n(&statsrv_client_fd, -1, __ATOMIC_RELAXED);
		fd_own_close(fd);
	}
}

/* ------------------------------------------------------------------ start and fork */

/* In a forked child: the thread is gone; the sockets it used are the parent's. Closing
 * them here keeps the parent's name and the parent's current client from being held
 * open by the child. */
void statsrv_atfork_child(void)
{
	int lfd = __atomic_load_n(&statsrv_listen_fd, __ATOMIC_RELAXED);
	int cfd = __atomic_load_n(&statsrv_client_fd, __ATOMIC_RELAXED);

	if (lfd >= 0) {
		fd_own_close(lfd);
		fd_budget_give(1);
	}
	if (cfd >= 0)
		fd_own_close(cfd);
	statsrv_listen_fd = -1;
	statsrv_client_fd = -1;
	statsrv_state = STATSRV_IDLE;
}

/* Held while the server starts (a socket and a thread). */
bool statsrv_fork_lock(void)
{
	return forklock_take(&statsrv_lock) != FORKLOCK_BUSY;
}

/* Binds and listens on "\0smcp1:stat:<pid>"; the fd, or -1. */
static int statsrv_listen(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "%s%ld",
			 STATSRV_NAME_PREFIX, (long)getpid());
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	/* nonblocking: the thread waits in poll() (statsrv_main) */
	int fd = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	/* out of the application's numbers at once, as every fd we keep: another thread
	 * of the program may be opening its next file (fdpark.h) */
	fd = fd_park_low(fd);
	if (REAL(bind)(fd, (struct sockaddr *)&sun, len) < 0 || REAL(listen)(fd, 8) < 0) {
		/* EADDRINUSE: same pid in another pid namespace sharing our network one. */
		log_debug("statsrv: cannot serve @%s: %s", sun.sun_path + 1, strerror(errno));
		fd_own_close(fd);
		return -1;
	}
	return fd;
}

/* The thread with every signal blocked, so it never takes the application's. */
static bool statsrv_spawn(int lfd)
{
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;
	int err;

	if (pthread_attr_init(&attr) != 0)
		return false;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, STATSRV_STACK_SIZE);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&thread, &attr, statsrv_main, (void *)(intptr_t)lfd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err == 0) {
		forklock_thread_created();
		pthread_setname_np(thread, "smcp-stat");
	}
	return err == 0;
}

/* On the progress thread: the first query arrived; its thread serves it and the rest.
 * A thread that cannot be had leaves the name unanswered (smcpstat times out), as when
 * it cannot be served at all. */
static void statsrv_first_query(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	pthread_mutex_lock(&statsrv_lock);
	if (__atomic_load_n(&statsrv_listen_fd, __ATOMIC_RELAXED) == lfd && !statsrv_spawn(lfd))
		log_debug("statsrv: no thread for @%s%ld", STATSRV_NAME_PREFIX, (long)getpid());
	pthread_mutex_unlock(&statsrv_lock);
}

void statsrv_ensure(void)
{
	int lfd;

	if (__builtin_expect(__atomic_load_n(&statsrv_state, __ATOMIC_ACQUIRE) != STATSRV_IDLE, 1))
		return;
	if (sandbox_active()) /* a unix socket and a thread: not under a seccomp filter */
		return;
	pthread_mutex_lock(&statsrv_lock);
	if (__atomic_load_n(&statsrv_state, __ATOMIC_RELAXED) != STATSRV_IDLE)
		goto out;
	lfd = statsrv_listen();
	/* The thread starts at the first query when the progress thread can watch for it:
	 * a thread made and ended for nothing cost every short-lived process with an SMC
	 * connection ~0.1 ms (a one-shot client; a server's backend forked per connection). */
	if (lfd < 0 || (!(progress_running() &&
			  progress_watch_readable(lfd, statsrv_first_query, (void *)(intptr_t)lfd) == 0) &&
			!statsrv_spawn(lfd))) {
		if (lfd >= 0)
			fd_own_close(lfd);
		__atomic_store_n(&statsrv_state, STATSRV_FAILED, __ATOMIC_RELEASE);
		goto out;
	}
	fd_budget_take(1);
	__atomic_store_n(&statsrv_listen_fd, lfd, __ATOMIC_RELAXED);
	__atomic_store_n(&statsrv_state, STATSRV_SERVING, __ATOMIC_RELEASE);
	log_debug("statsrv: serving @%s%ld", STATSRV_NAME_PREFIX, (long)getpid());
out:
	pthread_mutex_unlock(&statsrv_lock);
}
