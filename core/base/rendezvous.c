/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_pass.h"
#include "core/base/fdpark.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/rendezvous.h"

bool rdv_endpoint_from(const struct sockaddr *sa, struct rdv_endpoint *ep)
{
	memset(ep, 0, sizeof(*ep));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		ep->addr[10] = ep->addr[11] = 0xff;
		memcpy(&ep->addr[12], &in->sin_addr, 4);
		ep->port = ntohs(in->sin_port);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		memcpy(ep->addr, &in6->sin6_addr, 16);
		ep->port = ntohs(in6->sin6_port);
		return true;
	}
	return false;
}

static bool endpoint_is_v4(const struct rdv_endpoint *ep)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(ep->addr, mapped, 12) == 0;
}

static size_t hex_append(char *dst, const uint8_t *src, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		dst[2 * i] = digits[src[i] >> 4];
		dst[2 * i + 1] = digits[src[i] & 15];
	}
	return 2 * n;
}

static size_t endpoint_append(char *dst, const struct rdv_endpoint *ep)
{
	uint8_t port[2] = { (uint8_t)(ep->port >> 8), (uint8_t)ep->port };
	size_t n = hex_append(dst, ep->addr, 16);

	return n + hex_append(dst + n, port, 2);
}

/* Abstract address "\0smcp1:<kind>:<endpoints in hex>". */
static socklen_t rdv_name(struct sockaddr_un *un, char kind, const struct rdv_endpoint *a,
			  const struct rdv_endpoint *b)
{
	char *p = un->sun_path;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	p++; /* abstract namespace: leading NUL */
	p += sprintf(p, "smcp1:%c:", kind);
	p += endpoint_append(p, a);
	if (b) {
		*p++ = '-';
		p += endpoint_append(p, b);
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - un->sun_path));
}

/* ------------------------------------------------------------ local addresses */

static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdv_endpoint *local_addrs;
static size_t local_count;
static uint64_t local_loaded_ms;   /* clock_now_ms() of the last load; 0: never */

static void local_addrs_load(void)
{
	struct ifaddrs *ifa, *i;
	size_t n = 0;
	struct rdv_endpoint *v;

	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i; i = i->ifa_next)
		n++;
	v = calloc(n ? n : 1, sizeof(*v));
	if (v) {
		n = 0;
		for (i = ifa; i; i = i->ifa_next)
			if (i->ifa_addr && rdv_endpoint_from(i->ifa_addr, &v[n]))
				n++;
		free(local_addrs);
		local_addrs = v;
		local_count = n;
	}
	freeifaddrs(ifa);
	local_loaded_ms = clock_now_ms();
}

/* Held for a lookup and at most one getifaddrs(). */
bool rdv_fork_lock(void)
{
	return forklock_take(&local_lock) != FORKLOCK_BUSY;
}

static bool local_addrs_contain(const struct rdv_endpoint *ep)
{
	for (size_t i = 0; i < local_count; i++)
		if (memcmp(local_addrs[i].addr, ep->addr, 16) == 0)
			return true;
	return false;
}

bool rdv_addr_is_local(const struct sockaddr *sa)
{
	struct rdv_endpoint ep;
	bool found;

	if (!rdv_endpoint_from(sa, &ep))
		return false;
	if (endpoint_is_v4(&ep) && ep.addr[12] == 127)
		return true;
	if (!endpoint_is_v4(&ep) && memcmp(ep.addr, &in6addr_loopback, 16) == 0)
		return true;
	pthread_mutex_lock(&local_lock);
	found = local_addrs_contain(&ep);
	/* Addresses change rarely; reload at most once a second on a miss. */
	if (!found && (!local_loaded_ms || clock_now_ms() - local_loaded_ms >= 1000)) {
		local_addrs_load();
		found = local_addrs_contain(&ep);
	}
	pthread_mutex_unlock(&local_lock);
	return found;
}

/* ------------------------------------------------------------ names */

int rdv_listener_register(int lfd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct rdv_endpoint ep;
	struct sockaddr_un un;
	socklen_t ulen;
	int fd;

	if (REAL(getsockname)(lfd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (!rdv_endpoint_from((struct sockaddr *)&ss, &ep))
		return -EAFNOSUPPORT;
	ulen = rdv_name(&un, 'l', &ep, NULL);
	fd = REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (REAL(bind)(fd, (struct sockaddr *)&un, ulen) < 0) {
		int e = errno;

		fd_own_close(fd);
		/* EADDRINUSE: a forked sibling already holds the name for this port. */
		return -e;
	}
	return fd_park_low(fd);
}

void rdv_listener_shut(int name_fd)
{
	if (name_fd >= 0)
		(void)REAL(shutdown)(name_fd, SHUT_RD);
}

/*
 * Whether a listener's name is bound and still answers. A listener handed by exec to a
 * program without the library has its name shut down for reading (rdv_listener_shut),
 * which every process holding the name shares: a send to it then fails with EPIPE,
 * where connect() still succeeds. The empty datagram is dropped by whoever reads the
 * name (pool.c); a full queue (EAGAIN: nobody reads it) still answers.
 */
static bool name_bound(int probe, const struct rdv_endpoint *ep, struct sockaddr_un *un,
		       socklen_t *ulen)
{
	*ulen = rdv_name(un, 'l', ep, NULL);
	if (REAL(connect)(probe, (struct sockaddr *)un, *ulen) < 0)
		return false;
	return REAL(send)(probe, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL) == 0 || errno != EPIPE;
}

/* The name of the listener behind dst, exact or wildcard, in *un: false when none. */
static bool listener_name(const struct sockaddr *dst, struct sockaddr_un *un, socklen_t *ulen)
{
	struct rdv_endpoint ep, any;
	bool found;
	int probe;

	if (!rdv_endpoint_from(dst, &ep))
		return false;
	probe = REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (probe < 0)
		return false;
	found = name_bound(probe, &ep, un, ulen);
	if (!found && rdv_addr_is_local(dst)) {
		/* A wildcard listener: 0.0.0.0 for IPv4 peers, :: for both. */
		memset(&any, 0, sizeof(any));
		any.port = ep.port;
		if (endpoint_is_v4(&ep)) {
			any.addr[10] = any.addr[11] = 0xff;
			found = name_bound(probe, &any, un, ulen);
			memset(any.addr, 0, 16);
		}
		if (!found)
			found = name_bound(probe, &any, un, ulen);
	}
	fd_own_close(probe);
	return found;
}

bool rdv_listener_present(const struct sockaddr *dst)
{
	struct sockaddr_un un;
	socklen_t ulen;

	return listener_name(dst, &un, &ulen);
}

int rdv_listener_sendmsg(const struct sockaddr *dst, struct msghdr *msg)
{
	struct sockaddr_un un;
	socklen_t ulen;
	ssize_t r;
	int fd;

	if (!listener_name(dst, &un, &ulen))
		return -ENOENT;
	fd = REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	msg->msg_name = &un;
	msg->msg_namelen = ulen;
	do
		r = REAL(sendmsg)(fd, msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	r = r < 0 ? -errno : 0;
	msg->msg_name = NULL;
	msg->msg_namelen = 0;
	fd_own_close(fd);
	return (int)r;
}

/* How many 1 ms waits for a stale per-connection name of our own to go (see
 * rdv_conn_listen). */
#define RDV_STALE_NAME_TRIES 50

bool rdv_client_port_may_offer(const struct sockaddr *client)
{
	struct rdv_endpoint ep;

	return rdv_endpoint_from(client, &ep) && (ep.port & 1);
}

static int connect_no_wait(const struct sockaddr_un *un, socklen_t ulen);

/* Whether the listener on per-connection name un is known to run as another user than
 * ours (not a name of one of our connections that just closed, see rdv_conn_listen). Its
 * credentials are those of its listen(), known once connected; the probe sends nothing
 * and is closed at once (the holder may still find it in its backlog: the client's
 * progress thread then reads the close). A holder the probe cannot reach (bound but not
 * listening, a full backlog, one going away) is not known to be another user's: the
 * caller waits for it as for a stale name of its own, a bounded wait. */
static bool name_held_by_other_user(const struct sockaddr_un *un, socklen_t ulen)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd = connect_no_wait(un, ulen);
	bool other;

	if (fd < 0)
		return false;
	other = REAL(getsockopt)(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 &&
		cred.uid != geteuid();
	fd_own_close(fd);
	return other;
}

int rdv_conn_listen(const struct sockaddr *local, const struct sockaddr *peer)
{
	struct rdv_endpoint a, b;
	struct sockaddr_un un;
	socklen_t ulen;
	int fd;

	if (!rdv_endpoint_from(local, &a) || !rdv_endpoint_from(peer, &b))
		return -EAFNOSUPPORT;
	ulen = rdv_name(&un, 'c', &a, &b);
	fd = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* The kernel may hand out the local port of a connection that just closed (reset,
	 * no TIME_WAIT) while that connection's name is still being released by its
	 * progress thread: no live connection can hold this exact 4-tuple, so such a holder
	 * is stale and goes within moments. A holder of another user is not one of those
	 * (or not one worth waiting for): it may be squatting names of connections not yet
	 * made, so the connection stays TCP at once. */
	for (int tries = 0; REAL(bind)(fd, (struct sockaddr *)&un, ulen) < 0; tries++) {
		int e = errno;

		/* asked once: each probe stays in the holder's backlog until it closes */
		if (e != EADDRINUSE || tries == RDV_STALE_NAME_TRIES ||
		    (tries == 0 && name_held_by_other_user(&un, ulen))) {
			fd_own_close(fd);
			return -e;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 1000 * 1000 }, NULL);
	}
	/* room for whoever else connects first (the client drops them unanswered, see
	 * handshake.c) without the server's connect finding the backlog full */
	if (REAL(listen)(fd, 64) < 0) {
		int e = errno;

		fd_own_close(fd);
		return -e;
	}
	return fd_park(fd);
}

/* A SEQPACKET connection to un that never waits for room in a backlog: any local user
 * can bind a name or fill a listener's backlog, and a blocking connect() would then hang
 * the accept() or progress thread that joins it without limit. A full backlog fails
 * with -EAGAIN, which the callers treat like an absent name (Decline, TCP). The socket
 * returned is blocking again (the handshake bounds its reads by SO_RCVTIMEO). */
static int connect_no_wait(const struct sockaddr_un *un, socklen_t ulen)
{
	int fd = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int fl, e;

	if (fd < 0)
		return -errno;
	if (REAL(connect)(fd, (const struct sockaddr *)un, ulen) < 0)
		goto fail;
	fl = REAL(fcntl)(fd, F_GETFL);
	if (fl < 0 || REAL(fcntl)(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		goto fail;
	return fd;
fail:
	e = errno == EINPROGRESS ? EAGAIN : errno;
	fd_own_close(fd);
	return -e;
}

/*
 * Any local user can fill a rendezvous listener's backlog (the names are listed in
 * /proc/net/unix), and the listener's owner drains it, dropping whoever is not the
 * peer: a connect that finds it full is tried again for a little while (20 x 100 us,
 * within accept()'s wait for the client, see handshake.c) before the connection goes
 * TCP.
 */
#define RDV_CONNECT_TRIES 20
#define RDV_CONNECT_PAUSE_NS 100000L

static int connect_patient(const struct sockaddr_un *un, socklen_t ulen)
{
	int fd = connect_no_wait(un, ulen);

	for (int i = 1; fd == -EAGAIN && i < RDV_CONNECT_TRIES; i++) {
		struct timespec ts = { 0, RDV_CONNECT_PAUSE_NS };

		nanosleep(&ts, NULL);
		fd = connect_no_wait(un, ulen);
	}
	return fd;
}

int rdv_conn_connect(const struct sockaddr *peer, const struct sockaddr *local)
{
	struct rdv_endpoint a, b;
	struct sockaddr_un un;
	socklen_t ulen;

	if (!rdv_endpoint_from(peer, &a) || !rdv_endpoint_from(local, &b))
		return -EAFNOSUPPORT;
	ulen = rdv_name(&un, 'c', &a, &b);
	return connect_patient(&un, ulen);
}

/* ------------------------------------------------------------ token names */

/* Whether another user could replace directory entry `path` (st: its lstat), or what
 * it leads to: NULL when nobody but root or us can, else why. Its owner must be root or
 * us (the owner of an entry may rename or remove it in a sticky directory, and of a
 * directory, everything in it), and a directory that others may write to must be
 * sticky (or anybody may replace its entries). */
static const char *entry_untrusted(const struct stat *st)
{
	if (st->st_uid != 0 && st->st_uid != geteuid())
		return "is owned by another user";
	if (S_ISDIR(st->st_mode) && (st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return "is writable by others without the sticky bit";
	return NULL;
}

/* Every component of absolute path `path` (which must be a directory), lstat'ed from the
 * root down, in buf (PATH_MAX bytes): NULL when none is replaceable by another user, else
 * why, with the component in bad[]. A symlink on the way is checked as an entry (its owner) and,
 * when it is the last component, so is what it resolves to (resolved by the caller). */
static const char *path_untrusted(const char *path, char *buf, char *bad, size_t badlen)
{
	size_t n = strlen(path);
	struct stat st;

	if (n == 0 || n >= PATH_MAX || path[0] != '/')
		return "is not an absolute path";
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		const char *why;

		if (buf[i] != '/' && buf[i] != 0)
			continue;
		if (buf[i - 1] == '/')
			continue; /* "//" or a trailing "/" */
		buf[i] = 0;
		snprintf(bad, badlen, "%s", buf);
		if (lstat(buf, &st) < 0)
			return "cannot be examined";
		why = entry_untrusted(&st);
		if (why)
			return why;
		buf[i] = path[i];
	}
	return NULL;
}

/* Logged once per process: the directory does not change that often, and a log line per
 * connection would say nothing new. */
static int rdv_dir_warned;

bool rdv_dir_usable(void)
{
	char *bad, *real, *buf;
	const char *why;
	struct stat st;

	if (!smc_cfg.rdv_dir || smc_cfg.rdv_dir[0] != '/' || stat(smc_cfg.rdv_dir, &st) < 0 ||
	    !S_ISDIR(st.st_mode))
		return false;
	/* on the heap: connect() runs this on the program's stack, which a thread may have
	 * made as small as PTHREAD_STACK_MIN (16 KiB) */
	bad = malloc(3 * (size_t)PATH_MAX);
	if (!bad)
		return false; /* abstract names instead */
	real = bad + PATH_MAX;
	buf = real + PATH_MAX;
	/* Another user who can replace the directory, or anything on the way to it (a
	 * symlink of theirs in /tmp, a directory of theirs), could swap in one of their own
	 * between a client's bind and the server's connect: the server would then join, and
	 * prove itself to, their socket. Checked on the path as written and as resolved. */
	why = path_untrusted(smc_cfg.rdv_dir, buf, bad, PATH_MAX);
	if (!why && realpath(smc_cfg.rdv_dir, real) && strcmp(real, smc_cfg.rdv_dir) != 0)
		why = path_untrusted(real, buf, bad, PATH_MAX);
	if (why && !__atomic_exchange_n(&rdv_dir_warned, 1, __ATOMIC_RELAXED))
		log_warn("SMC_RDV_DIR %s not used: %s %s; abstract rendezvous names instead "
			 "(this network namespace only)", smc_cfg.rdv_dir, bad, why);
	free(bad);
	return !why;
}

/* "<dir>/c-<16 hex>" or the abstract "\0smcp1:t:<16 hex>". */
static int token_name(struct sockaddr_un *un, socklen_t *len, uint64_t token, bool path)
{
	uint8_t t[8];
	char hex[17];
	int n;

	for (int i = 0; i < 8; i++)
		t[i] = (uint8_t)(token >> (56 - 8 * i));
	hex[hex_append(hex, t, 8)] = 0;
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (path)
		n = snprintf(un->sun_path, sizeof(un->sun_path), "%s/c-%s", smc_cfg.rdv_dir, hex);
	else
		n = 1 + snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "smcp1:t:%s", hex);
	if (n <= 0 || (size_t)n >= sizeof(un->sun_path))
		return -ENAMETOOLONG;
	/* a path's length includes its terminating NUL; an abstract name has none */
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + (path ? 1 : 0));
	return 0;
}

int rdv_token_listen(uint64_t token, bool path)
{
	struct sockaddr_un un;
	socklen_t ulen;
	int fd, r = token_name(&un, &ulen, token, path);

	if (r < 0)
		return r;
	fd = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (REAL(bind)(fd, (struct sockaddr *)&un, ulen) < 0)
		goto fail;
	/* a server running as another user must be able to connect: the key in the TCP
	 * Proposal, not the file mode, is what makes it prove itself */
	if ((path && chmod(un.sun_path, 0666) < 0) || REAL(listen)(fd, 4) < 0) {
		r = -errno;
		if (path)
			unlink(un.sun_path);
		fd_own_close(fd);
		return r;
	}
	return fd_park(fd);
fail:
	r = -errno;
	fd_own_close(fd);
	return r;
}

void rdv_token_unlink(uint64_t token)
{
	struct sockaddr_un un;
	socklen_t ulen;

	if (token_name(&un, &ulen, token, true) == 0)
		unlink(un.sun_path);
}

int rdv_token_connect(uint64_t token, bool path)
{
	struct sockaddr_un un;
	socklen_t ulen;
	int r = token_name(&un, &ulen, token, path);

	if (r < 0)
		return r;
	if (path && !rdv_dir_usable())
		return -EPERM;
	return connect_patient(&un, ulen);
}

/* ------------------------------------------------------------ messages */

#define RDV_MAX_FDS 4

int rdv_send(int ufd, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * RDV_MAX_FDS)];
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t r;

	if (nfds > RDV_MAX_FDS)
		return -EINVAL;
	if (nfds > 0)
		fd_pass_pack(&msg, ctl.space, fds, nfds);
	do
		r = REAL(sendmsg)(ufd, &msg, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return (size_t)r == len ? 0 : -EPROTO;
}

/* The kernel drops the descriptors of a message (MSG_CTRUNC) it cannot install: tells
 * that apart from a peer that sent more than we take. */
static bool no_fd_free(int any_fd)
{
	int fd = REAL(fcntl)(any_fd, F_DUPFD_CLOEXEC, 0);

	if (fd >= 0) {
		fd_own_close(fd);
		return false;
	}
	return errno == EMFILE || errno == ENFILE;
}

ssize_t rdv_recv(int ufd, void *buf, size_t cap, int *fds, int *nfds, int maxfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * RDV_MAX_FDS)];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.space, .msg_controllen = sizeof(ctl.space) };
	ssize_t r;
	bool bad;

	*nfds = 0;
	do
		r = REAL(recvmsg)(ufd, &msg, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	bad = fd_pass_unpack(&msg, fds, nfds, maxfds, NULL);
	/* An empty message is the end of the stream for a seqpacket socket, whatever came
	 * with it: its descriptors are closed like those of a rejected message. */
	if (bad || r == 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		/* closed here, so no caller may close the numbers again: by then another
		 * thread may hold them (the application's sockets, our own doorbells) */
		for (int i = 0; i < *nfds; i++) {
			fd_own_close(fds[i]);
			fds[i] = -1;
		}
		*nfds = 0;
		if (r == 0 && !bad && !(msg.msg_flags & MSG_CTRUNC))
			return -ECONNRESET;
		return !bad && !(msg.msg_flags & MSG_TRUNC) && no_fd_free(ufd) ? -EMFILE : -EPROTO;
	}
	return r;
}

/* ------------------------------------------------------------ credentials */

/* Owner uid of the TCP socket whose local end is (laddr, lport) and remote end (raddr,
 * rport), through sock_diag (what `ss -e` reads; no privilege needed). */
static int diag_tcp_owner(int family, const uint8_t *laddr, uint16_t lport, const uint8_t *raddr,
			  uint16_t rport, uid_t *uid, unsigned *inode)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	union {
		struct nlmsghdr h;
		char buf[1024];
	} resp;
	size_t alen = family == AF_INET ? 4 : 16;
	struct nlmsghdr *h;
	ssize_t n;
	int nl, rc = -ENOENT;

	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = (uint8_t)family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	req.r.id.idiag_sport = htons(lport);
	req.r.id.idiag_dport = htons(rport);
	memcpy(req.r.id.idiag_src, laddr, alen);
	memcpy(req.r.id.idiag_dst, raddr, alen);
	req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	nl = REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	if (REAL(send)(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req)) {
		rc = -errno;
		goto out;
	}
	n = REAL(recv)(nl, resp.buf, sizeof(resp.buf), 0);
	h = &resp.h;
	if (n > 0 && NLMSG_OK(h, (unsigned)n) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
	    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
		*uid = ((struct inet_diag_msg *)NLMSG_DATA(h))->idiag_uid;
		*inode = ((struct inet_diag_msg *)NLMSG_DATA(h))->idiag_inode;
		rc = 0;
	}
out:
	fd_own_close(nl);
	return rc;
}

static bool pid_holds_socket(pid_t pid, unsigned inode)
{
	char dir[64], path[64 + 256], link[64], want[40];
	struct dirent *d;
	bool found = false;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	snprintf(want, sizeof(want), "socket:[%u]", inode);
	dp = opendir(dir);
	if (!dp)
		return false;
	while (!found && (d = readdir(dp))) {
		ssize_t n;

		if (d->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%.255s", dir, d->d_name) >= (int)sizeof(path))
			continue;
		n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = 0;
			found = strcmp(link, want) == 0;
		}
	}
	closedir(dp);
	return found;
}

bool rdv_cred_owns_tcp_peer(uid_t uid, pid_t pid, int tcp_fd)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	struct rdv_endpoint el, ep;
	uid_t owner;
	unsigned inode = 0;
	int r = -ENOENT;

	if (REAL(getsockname)(tcp_fd, (struct sockaddr *)&l, &ll) < 0 ||
	    REAL(getpeername)(tcp_fd, (struct sockaddr *)&p, &pl) < 0 ||
	    !rdv_endpoint_from((struct sockaddr *)&l, &el) ||
	    !rdv_endpoint_from((struct sockaddr *)&p, &ep))
		return false;
	/* root can take any socket anyway; everyone else must own the peer's socket */
	if (uid == 0)
		return true;
	/* the peer's socket: its local end is our remote end. An IPv4 peer may hold an
	 * AF_INET socket or a dual-stack AF_INET6 one. */
	if (endpoint_is_v4(&ep) && endpoint_is_v4(&el))
		r = diag_tcp_owner(AF_INET, &ep.addr[12], ep.port, &el.addr[12], el.port, &owner,
				   &inode);
	if (r < 0)
		r = diag_tcp_owner(AF_INET6, ep.addr, ep.port, el.addr, el.port, &owner, &inode);
	if (r < 0)
		return false;
	if (owner == uid)
		return true;
	/* A socket created before a privilege drop (nginx's root master accepts for its
	 * workers) keeps its creator's uid: look for it among the peer process's fds,
	 * which we may read only when we may read that process anyway. */
	return pid > 0 && pid_holds_socket(pid, inode);
}

bool rdv_peer_owns_tcp_peer(int ufd, int tcp_fd)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	if (REAL(getsockopt)(ufd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
		return false;
	return rdv_cred_owns_tcp_peer(cred.uid, cred.pid, tcp_fd);
}

int rdv_listener_owner(const struct sockaddr *dst, uid_t *uid)
{
	struct rdv_endpoint ep;
	unsigned inode;
	int r = -ENOENT;

	if (!rdv_endpoint_from(dst, &ep))
		return -EAFNOSUPPORT;
	/* sock_diag looks a 4-tuple up as the kernel does for a segment: with no
	 * connection on it (remote port 0), the listener that would take it */
	if (endpoint_is_v4(&ep))
		r = diag_tcp_owner(AF_INET, &ep.addr[12], ep.port, &ep.addr[12], 0, uid, &inode);
	if (r < 0)
		r = diag_tcp_owner(AF_INET6, ep.addr, ep.port, ep.addr, 0, uid, &inode);
	return r;
}
