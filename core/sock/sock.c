/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The core's entry points for the preload layer: decides per socket whether to try SMC,
 * drives the rendezvous, and dispatches I/O to the connection engine or to libc. This
 * file: socket creation, data, descriptors (close, dup), options and readiness;
 * connect() is in sock_connect.c, listen() and accept() in sock_accept.c.
 *
 * How two ends find out that both run the library:
 *  - the SMC TCP option (when `smc_preload.sh --setup` pinned its map, tcpopt.h): every
 *    listener and client socket is opted in before listen()/connect(); after the TCP
 *    handshake, both sent it -> in-band CLC on the TCP connection (negotiate.h), else
 *    plain TCP with not one extra byte;
 *  - without the map, the same-host rendezvous (rendezvous.h): a client connecting to a
 *    local address probes for the listener's abstract name first.
 * A server accepts both: an accepted connection whose client sent no option is offered
 * the same-host rendezvous as before.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "core/base/config.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/conn/conn.h"
#include "core/readiness/epoll.h"
#include "core/readiness/epoll_track.h"
#include "core/readiness/wait.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"
#include "core/sock/sock_int.h"

/* Reads back one option the core honours (as the kernel stored it: timeouts rounded). */
static void conn_load_sockopt(struct smc_conn *c, int name)
{
	struct linger lg;
	socklen_t len = sizeof(lg);

	if (name == SO_RCVTIMEO)
		(void)conn_timeo_read(c->fd, SO_RCVTIMEO, &c->rcvtimeo_ns);
	if (name == SO_SNDTIMEO)
		(void)conn_timeo_read(c->fd, SO_SNDTIMEO, &c->sndtimeo_ns);
	if (name == SO_LINGER &&
	    REAL(getsockopt)(c->fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0) {
		c->linger_on = lg.l_onoff != 0;
		c->linger_s = lg.l_linger;
	}
}

/* The value the kernel just accepted, as the kernel keeps it, without asking it back:
 * false for the forms it rounds or clamps in ways not worth copying here (negative
 * values), which conn_load_sockopt then reads back. Timeouts are kept exactly as given:
 * the kernel rounds them up to its clock tick, so ours end up to one tick sooner. */
static bool conn_take_sockopt(struct smc_conn *c, int name, const void *val, socklen_t len)
{
	if (name == SO_LINGER && len >= (socklen_t)sizeof(struct linger)) {
		struct linger lg;

		memcpy(&lg, val, sizeof(lg));
		if (lg.l_linger < 0)
			return false;
		c->linger_on = lg.l_onoff != 0;
		c->linger_s = lg.l_linger;
		return true;
	}
	if ((name == SO_RCVTIMEO || name == SO_SNDTIMEO) &&
	    len >= (socklen_t)sizeof(struct timeval)) {
		struct timeval tv;
		int64_t ns;

		memcpy(&tv, val, sizeof(tv));
		if (tv.tv_sec < 0 || tv.tv_usec < 0 || tv.tv_usec >= 1000000 ||
		    tv.tv_sec > INT64_MAX / 1000000000 - 1)
			return false;
		ns = (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000;
		if (name == SO_RCVTIMEO)
			c->rcvtimeo_ns = ns;
		else
			c->sndtimeo_ns = ns;
		return true;
	}
	return false;
}

/* Only when the application set one of them (on this socket or, accepted, on its
 * listener): otherwise they are the kernel's defaults, which the fresh connection holds
 * already, and the three system calls are saved. */
void sock_load_sockopts(struct smc_conn *c)
{
	if (!(fdtab_flags(c->fd) & FDF_SOCKOPTS))
		return;
	conn_load_sockopt(c, SO_RCVTIMEO);
	conn_load_sockopt(c, SO_SNDTIMEO);
	conn_load_sockopt(c, SO_LINGER);
}

/* fd is plain TCP from now on for an option the rings cannot honour (FDF_TCP_ONLY: a
 * socket not connected yet is never upgraded, a listener's accepted sockets inherit
 * it); its connection, if it is one, is decided first when it still negotiates
 * (bounded), then taken back to TCP without losing a byte (conn_downgrade). */
void sock_tcp_only(int fd)
{
	struct smc_conn *c;

	fdtab_flags_set(fd, FDF_TCP_ONLY);
	c = conn_from_fd(fd);

	if (!c)
		return;
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_wait_pending(c, false, 4 * (int64_t)smc_cfg.handshake_timeout_ms * 1000000);
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, SMC_REASON_SOCKOPT); /* staged data goes out over TCP */
	pthread_mutex_unlock(&c->lock);
	if (conn_downgrade(c, SMC_REASON_SOCKOPT, false) == -EBUSY)
		log_warn("fd %d: busy in another thread, stays upgraded (sockopt)", fd);
	conn_put(c);
}

void smc_sock_created(int fd, int domain, int type, int protocol)
{
	if (fd < 0 || (domain != AF_INET && domain != AF_INET6))
		return;
	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM)
		return;
	if (protocol != 0 && protocol != IPPROTO_TCP)
		return;
	smc_init();
	fdtab_flags_reset(fd, 0);
	fdtab_born_now(fd);
	fdtab_set(fd, FD_TCP, NULL);
}

void smc_sock_bound(int fd)
{
	if (fdtab_kind(fd) == FD_TCP)
		fdtab_flags_set(fd, FDF_BOUND);
}

/* ------------------------------------------------------------ data */

/* The socket error the library took from fd's socket (fdtab_owe_error) goes to the
 * program's next receive or send on the kernel's socket: true with errno set. */
static bool owed_error(int fd)
{
	int e = fdtab_owed_error_take(fd);

	if (e)
		errno = e;
	return e != 0;
}

/* A PENDING connection first finishes its handshake; returns the conn when it is
 * ACTIVE, NULL when the socket is plain TCP (fallback), or sets *err. */
static struct smc_conn *conn_ready_for_io(struct smc_conn *c, int flags, int64_t timeo_ns,
					   int *err)
{
	int st = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);

	*err = 0;
	if (st == CONN_PENDING) {
		int r = conn_wait_pending(c, c->nonblock || (flags & MSG_DONTWAIT), timeo_ns);

		if (r < 0) {
			*err = -r;
			return NULL;
		}
		st = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
	}
	return st == CONN_ACTIVE ? c : NULL;
}

/* One buffer (read, recv, write, send: nearly every call) goes through recv/send, which
 * the kernel serves without copying in a msghdr and an iovec array as recvmsg/sendmsg
 * make it do. Without flags, under a seccomp sandbox, they are read and write (and the
 * vectored forms): such a sandbox may allow only those (sandbox.h; OpenSSH's kills on
 * recvfrom and sendto). */
static ssize_t plain_recv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t r;

	/* the error queue is not where the kernel reports sk_err */
	if (!(flags & MSG_ERRQUEUE) && owed_error(fd))
		return -1;
	if (flags == 0 && sandbox_active())
		r = iovcnt == 1 ? REAL(read)(fd, iov[0].iov_base, iov[0].iov_len)
				: REAL(readv)(fd, iov, iovcnt);
	else
		r = iovcnt == 1 ? REAL(recv)(fd, iov[0].iov_base, iov[0].iov_len, flags)
				: REAL(recvmsg)(fd, &m, flags);

	if (r > 0 && !(flags & MSG_PEEK))
		stats_bytes(SMC_MODE_TCP, 0, (size_t)r);
	return r;
}

static ssize_t plain_send(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t r;

	if (owed_error(fd))
		return -1;
	if (flags == 0 && sandbox_active())
		r = iovcnt == 1 ? REAL(write)(fd, iov[0].iov_base, iov[0].iov_len)
				: REAL(writev)(fd, iov, iovcnt);
	else
		r = iovcnt == 1 ? REAL(send)(fd, iov[0].iov_base, iov[0].iov_len, flags)
				: REAL(sendmsg)(fd, &m, flags);

	if (r > 0)
		stats_bytes(SMC_MODE_TCP, (size_t)r, 0);
	return r;
}

ssize_t smc_sock_recv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct smc_conn *c = conn_from_fd(fd);
	ssize_t r;
	int err;

	if (!c)
		return plain_recv(fd, iov, iovcnt, flags);
	if (flags & MSG_ERRQUEUE) {
		/* the error queue is the kernel socket's own (timestamps, zerocopy
		 * completions, ICMP errors), never the stream */
		conn_put(c);
		return plain_recv(fd, iov, iovcnt, flags);
	}
	if (!conn_ready_for_io(c, flags, c->rcvtimeo_ns, &err)) {
		r = err ? (errno = err, -1) : plain_recv(fd, iov, iovcnt, flags);
	} else {
		r = conn_recv(c, iov, iovcnt, flags);
	}
	err = errno;
	conn_put(c);
	errno = err;
	return r;
}

static ssize_t conn_sock_send(struct smc_conn *c, int fd, const struct iovec *iov, int iovcnt,
			      int flags)
{
	ssize_t staged = 0, r;
	int err;

	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING && !(flags & MSG_OOB)) {
		/* TCP takes data right after connect(): so do we */
		staged = conn_send_pending(c, iov, iovcnt);
		if (staged < 0)
			staged = 0;
		/* a nonblocking send may stop there; a blocking one sends everything */
		if (staged > 0 && (c->nonblock || (flags & MSG_DONTWAIT)))
			return staged;
	}
	if (staged > 0) {
		struct iovec rest[iovcnt > 0 ? iovcnt : 1];
		int n = iov_tail(iov, iovcnt, (size_t)staged, rest);

		if (n == 0)
			return staged;
		r = conn_sock_send(c, fd, rest, n, flags);
		return r < 0 ? staged : staged + r;
	}
	if (!conn_ready_for_io(c, flags, c->sndtimeo_ns, &err)) {
		if (err)
			return errno = err, -1;
		return plain_send(fd, iov, iovcnt, flags);
	}
	return conn_send(c, iov, iovcnt, flags);
}

ssize_t smc_sock_send(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct smc_conn *c = conn_from_fd(fd);
	ssize_t r;
	int err;

	if (!c)
		return plain_send(fd, iov, iovcnt, flags);
	r = conn_sock_send(c, fd, iov, iovcnt, flags);
	err = errno;
	conn_put(c);
	errno = err;
	return r;
}

int smc_sock_shutdown(int fd, int how)
{
	struct smc_conn *c = conn_from_fd(fd);
	int r, err = 0;

	if (!c)
		return REAL(shutdown)(fd, how);
	/* TCP accepts a shutdown right after connect(): wait for the (bounded) handshake
	 * even on a nonblocking socket, so the half close lands after the staged data */
	r = conn_wait_pending(c, false, 0);
	if (r < 0) {
		err = -r;
		r = -1;
	} else if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE) {
		/* Not propagated to TCP: the TCP channel stays open so that its EOF keeps
		 * meaning "the peer closed or died". */
		r = conn_shutdown(c, how);
		err = errno;
	} else {
		r = REAL(shutdown)(fd, how);
		err = errno;
	}
	conn_put(c);
	errno = err;
	return r;
}

/* ------------------------------------------------------------ fd bookkeeping */

static void conn_drop_fd(struct smc_conn *c, int fd)
{
	bool regs;
	int left;

	pthread_mutex_lock(&c->lock);
	left = --c->fd_refs;
	for (int i = 0; i < c->ndups; i++) {
		if (c->dup_fds[i] == fd) {
			c->dup_fds[i] = c->dup_fds[--c->ndups];
			break;
		}
	}
	if (c->fd == fd && left > 0) {
		if (c->ndups > 0) {
			c->fd = c->dup_fds[--c->ndups];
		} else {
			/* more dups than dup_fds holds: find one in the table (rare, slow) */
			for (int f = fdtab_next_tracked(0); f >= 0; f = fdtab_next_tracked(f + 1)) {
				struct fd_entry *e = fdtab_peek(f);

				if (f != fd && e && e->kind == FD_SMC && e->obj == c) {
					c->fd = f;
					break;
				}
			}
		}
	}
	regs = c->regs != NULL;
	pthread_mutex_unlock(&c->lock);
	if (left == 0 && regs)
		epoll_emul_forget_conn(c);
	if (left == 0)
		conn_release_fd(c);
	conn_put(c);
}

static void release_tcp_fd(struct smc_conn *c, int f)
{
	struct fd_entry *e = fdtab_peek(f);
	bool mine;

	if (!e || e->kind != FD_SMC || e->obj != c)
		return;
	pthread_mutex_lock(fd_lock(f));
	mine = e->kind == FD_SMC && e->obj == c;
	if (mine) {
		fdtab_set(f, FD_TCP, NULL);
		fdtab_flags_set(f, FDF_TCP_FINAL);
	}
	pthread_mutex_unlock(fd_lock(f));
	if (mine)
		conn_drop_fd(c, f);
}

/*
 * A connection handed to stdio is plain TCP here from then on (downgrade.c), and the
 * program's FILE closes its descriptors with libc's internal close(), which no wrapper
 * sees: exim's daemon fclose()s both FILEs of every accepted connection after its
 * fork, and kept four eventfds and the connection per mail for ever. Its descriptors
 * become plain TCP sockets to the library now, as if closed and never upgraded; the
 * kernel's FIN still comes with the last real close. Kept while the epoll emulation
 * still holds a registration of it. The same for a connection given back to TCP when
 * the program ran out of descriptors (fd_pressure.c).
 */
void smc_sock_release_tcp_conn(struct smc_conn *c)
{
	int fds[1 + sizeof(c->dup_fds) / sizeof(c->dup_fds[0])], n = 0;
	bool regs, known;

	pthread_mutex_lock(&c->lock);
	regs = c->regs != NULL;
	/* its numbers are c->fd and dup_fds unless it has more dups than that holds */
	known = c->fd_refs <= 1 + c->ndups;
	if (known) {
		fds[n++] = c->fd;
		for (int i = 0; i < c->ndups; i++)
			fds[n++] = c->dup_fds[i];
	}
	pthread_mutex_unlock(&c->lock);
	if (regs || __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_FALLBACK)
		return;
	for (int i = 0; i < n; i++)
		release_tcp_fd(c, fds[i]);
	for (int f = known ? -1 : fdtab_next_tracked(0); f >= 0; f = fdtab_next_tracked(f + 1))
		release_tcp_fd(c, f);
}

void smc_sock_before_close(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);
	void *obj;

	/* the library's own: the program's close leaves it (fdpark.h) */
	if (!e || __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) == FD_OWN)
		return;
	obj = e->obj;
	epoll_track_forget_fd(fd);
	switch (e->kind) {
	case FD_SMC: {
		bool mine;

		epoll_emul_forget_fd(fd);
		/* two threads closing one fd: only one drops the table's reference */
		pthread_mutex_lock(fd_lock(fd));
		mine = e->kind == FD_SMC && e->obj == obj;
		if (mine)
			fdtab_clear(fd);
		pthread_mutex_unlock(fd_lock(fd));
		if (mine)
			conn_drop_fd(obj, fd);
		break;
	}
	case FD_LISTEN: {
		struct smc_listener *l = obj;

		/* listener_opted_in reads l under this lock */
		pthread_mutex_lock(fd_lock(fd));
		fdtab_clear(fd);
		pthread_mutex_unlock(fd_lock(fd));
		sock_listener_put(l);
		break;
	}
	case FD_EPOLL:
		epoll_emul_close_epfd(fd);
		fdtab_clear(fd);
		break;
	default:
		fdtab_clear(fd);
		break;
	}
}

int smc_sock_close_range(unsigned int first, unsigned int last, int flags)
{
	int *keep;
	size_t n = conn_own_fds(&keep);

	fd_own_collect(first, last, &keep, &n);
	int rc = n ? fd_close_range_sparing(first, last, flags, keep, n)
		   : REAL(close_range)(first, last, flags);

	free(keep);
	return rc;
}

void smc_sock_dup(int oldfd, int newfd)
{
	struct fd_entry *e = fdtab_peek(oldfd);

	if (!e || oldfd == newfd)
		return;
	fdtab_flags_reset(newfd, __atomic_load_n(&e->flags, __ATOMIC_RELAXED));
	fdtab_born_copy(oldfd, newfd);
	switch (e->kind) {
	case FD_SMC: {
		struct smc_conn *c;

		/* under oldfd's stripe: a close of oldfd in another thread clears the entry
		 * under it before it drops that fd's count, so c is either still counted
		 * when newfd is added, or no longer in the table */
		pthread_mutex_lock(fd_lock(oldfd));
		c = e->kind == FD_SMC ? e->obj : NULL;
		if (c) {
			pthread_mutex_lock(&c->lock);
			c->fd_refs++;
			if (c->ndups < (int)(sizeof(c->dup_fds) / sizeof(c->dup_fds[0])))
				c->dup_fds[c->ndups++] = newfd;
			pthread_mutex_unlock(&c->lock);
			conn_get(c);
			fdtab_set(newfd, FD_SMC, c);
		}
		pthread_mutex_unlock(fd_lock(oldfd));
		break;
	}
	case FD_LISTEN:
		__atomic_add_fetch(&((struct smc_listener *)e->obj)->refs, 1, __ATOMIC_ACQ_REL);
		fdtab_set(newfd, FD_LISTEN, e->obj);
		break;
	case FD_TCP:
		fdtab_set(newfd, FD_TCP, NULL);
		fdtab_flags_set(oldfd, FDF_DUPED);
		fdtab_flags_set(newfd, FDF_DUPED);
		break;
	default:
		break;
	}
	if (newfd <= STDERR_FILENO)
		smc_sock_before_stdio(newfd); /* a standard stream: stdio's from now on */
}

void smc_sock_set_nonblock(int fd, bool on)
{
	struct smc_conn *c = conn_from_fd(fd);

	if (c) {
		c->nonblock = on;
		conn_put(c);
	}
}

int smc_sock_ioctl(int fd, unsigned long req, void *arg)
{
	struct smc_conn *c = conn_from_fd(fd);
	int err, r = 0;

	/* SIOCOUTQNSD (not yet sent) counts within SIOCOUTQ: what is unwritten */
	if (c && (req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD) && arg &&
	    conn_ready_for_io(c, MSG_DONTWAIT, 0, &err))
		*(int *)arg = req == FIONREAD ? conn_rx_available(c) : conn_tx_queued(c);
	else if (c && req == SIOCATMARK && arg && conn_rx_ring_unread(c))
		*(int *)arg = 0; /* the peer's urgent mark is on TCP, after the ring's bytes */
	else
		r = REAL(ioctl)(fd, req, arg);
	err = errno;
	if (c)
		conn_put(c);
	errno = err;
	return r;
}

int smc_sock_getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	struct smc_conn *c = conn_from_fd(fd);

	/* on the rings still, with the address kept at activation; a peer that died
	 * reset the connection, which then has no peer, as over TCP */
	if (!c || !c->peer_len || !len || !addr || !conn_on_rings(c) || c->aborted) {
		if (c)
			conn_put(c);
		errno = ENOTCONN;
		return -1;
	}
	memcpy(addr, &c->peer_sa, *len < c->peer_len ? *len : c->peer_len);
	*len = c->peer_len;
	conn_put(c);
	return 0;
}

int smc_sock_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct smc_conn *c;
	int r = 0, err, so_error;
	bool asks_so_error;

	if (level == IPPROTO_TCP && name == TCP_DEFER_ACCEPT && len)
		return sock_listener_defer_get(fd, val, len);
	c = conn_from_fd(fd);
	asks_so_error = level == SOL_SOCKET && name == SO_ERROR && val && len &&
			*len >= sizeof(int);

	if (asks_so_error && (!c || __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_ACTIVE) &&
	    (so_error = fdtab_owed_error_take(fd))) {
		/* the kernel's is 0 now: the library's recv() took it (fdtab_owe_error) */
		*(int *)val = so_error;
		*len = sizeof(int);
	} else if (c && asks_so_error && conn_so_error(c, &so_error)) {
		int kernel;
		socklen_t klen = sizeof(kernel);

		(void)REAL(getsockopt)(fd, level, name, &kernel, &klen); /* reported: cleared */
		*(int *)val = so_error;
		*len = sizeof(int);
	} else {
		r = REAL(getsockopt)(fd, level, name, val, len);
	}
	err = errno;
	if (c)
		conn_put(c);
	errno = err;
	return r;
}

/*
 * SO_RCVLOWAT above 1: TCP's readiness and blocking reads then wait for that many bytes
 * (tcp_poll, tcp_recvmsg's target), which the rings' readiness (any byte) does not
 * know. Honouring it would touch every readiness path (poll, select, the epoll
 * emulation, the bells' wake-ups) for an option few programs use; instead the
 * connection goes back to TCP (conn_downgrade, lossless), and a socket or listener
 * that sets it before it connects or accepts is never upgraded (FDF_TCP_ONLY).
 * SO_ZEROCOPY: MSG_ZEROCOPY sends then expect a completion on the socket's error queue
 * (SO_EE_ORIGIN_ZEROCOPY) before they reuse the buffer, which only the kernel's TCP
 * sends; without it a program waits for ever. The same way (accepted sockets inherit
 * it from the listener, as the kernel's sk_clone copies the flag).
 */
static bool sockopt_needs_tcp(int level, int name, const void *val, socklen_t len)
{
	int v;

	if (level != SOL_SOCKET || !val || len < sizeof(int))
		return false;
	v = *(const int *)val;
	/* SO_PEEK_OFF: successive MSG_PEEKs go on from where the last ended (tcp_recvmsg's
	 * peek offset), which the rings' peek does not keep */
	return (name == SO_RCVLOWAT && v > 1) || (name == SO_ZEROCOPY && v != 0) ||
	       (name == SO_PEEK_OFF && v >= 0);
}

/*
 * O_ASYNC (FIOASYNC): the kernel signals the owner (SIGIO, or F_SETSIG's signal) when
 * the TCP socket gets data or room, which the rings never make it do. The connection
 * goes back to TCP as for SO_RCVLOWAT; a socket that asks before it connects is never
 * upgraded. A listener's flag is its own (accept() does not pass O_ASYNC on).
 */
void smc_sock_set_async(int fd)
{
	if (fdtab_kind(fd) != FD_LISTEN)
		sock_tcp_only(fd);
}

int smc_sock_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct smc_conn *c;
	int r;

	if (level == IPPROTO_TCP && name == TCP_DEFER_ACCEPT &&
	    sock_listener_defer_set(fd, val, len, &r))
		return r;
	r = REAL(setsockopt)(fd, level, name, val, len);
	if (r == 0 && sockopt_needs_tcp(level, name, val, len))
		sock_tcp_only(fd);
	if (r == 0 && level == IPPROTO_TCP && (name == TCP_QUICKACK || name == TCP_DEFER_ACCEPT))
		fdtab_flags_set(fd, FDF_ACK_HELD);
	if (r != 0 || level != SOL_SOCKET ||
	    (name != SO_RCVTIMEO && name != SO_SNDTIMEO && name != SO_LINGER))
		return r;
	fdtab_flags_set(fd, FDF_SOCKOPTS);
	if ((c = conn_from_fd(fd))) {
		if (!conn_take_sockopt(c, name, val, len))
			conn_load_sockopt(c, name);
		conn_put(c);
	}
	return r;
}

/* ------------------------------------------------------------ readiness */

bool smc_poll_involved(const struct pollfd *fds, nfds_t n)
{
	return wait_poll_involved(fds, n);
}

int smc_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask)
{
	return wait_poll(fds, n, timeout, mask);
}

int smc_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
	       const sigset_t *mask)
{
	return wait_select(nfds, r, w, e, timeout, mask);
}

int smc_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return epoll_emul_ctl(epfd, op, fd, ev);
}

void smc_epoll_created(int fd)
{
	fdtab_flags_reset(fd, FDF_EPOLL_FD);
}

void smc_epoll_kernel_add(int fd)
{
	if (fdtab_flags(fd) & FDF_EPOLL_FD)
		fdtab_flags_set(fd, FDF_NESTED);
}

int smc_epoll_after_kernel(int epfd, struct epoll_event *ev, int n, int max,
			   const struct timespec *timeout, const sigset_t *mask)
{
	return epoll_emul_after_kernel(epfd, ev, n, max, timeout, mask);
}

int smc_epoll_wait(int epfd, struct epoll_event *ev, int max, const struct timespec *timeout,
		   const sigset_t *mask)
{
	return epoll_emul_wait(epfd, ev, max, timeout, mask);
}
