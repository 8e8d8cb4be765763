/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The core's entry points for the preload layer: decides per socket whether to try SMC,
 * drives the rendezvous, and dispatches I/O to the connection engine or to libc.
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/conn.h"
#include "core/conn_ib.h"
#include "core/epoll.h"
#include "core/epoll_track.h"
#include "core/fd_budget.h"
#include "core/fdpark.h"
#include "core/fdtab.h"
#include "core/forklock.h"
#include "core/handshake.h"
#include "core/hs_policy.h"
#include "core/init.h"
#include "core/io_uring_watch.h"
#include "core/log.h"
#include "core/negotiate.h"
#include "core/pool.h"
#include "core/progress.h"
#include "core/real.h"
#include "core/rendezvous.h"
#include "core/sandbox.h"
#include "core/shm.h"
#include "core/sock.h"
#include "core/stats.h"
#include "core/statsrv.h"
#include "core/tcpopt.h"
#include "core/upgrade_rule.h"
#include "core/wait.h"

struct smc_listener {
	int name_fd; /* holds the rendezvous name; -1 when a sibling process holds it */
	int refs;
	bool opted_in; /* its SYN-ACKs answer the SMC TCP option (tcpopt.h) */
	bool defer_kept; /* TCP_DEFER_ACCEPT is kept out of the kernel (listener_defer_*) */
	int defer_accept; /* then its value as the kernel would report it */
	struct pool_set *pools; /* the pools of its clients (pool.h); NULL without a name */
};

/* Looking up an fd's connection and taking a reference must not interleave with
 * another thread closing that fd (which drops the table's reference): one lock per
 * stripe of fds, held only for the lookup. */
#define FD_STRIPES 64
static pthread_mutex_t fd_stripe[FD_STRIPES] = {
	[0 ... FD_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER
};

static pthread_mutex_t *fd_lock(int fd)
{
	return &fd_stripe[(unsigned)fd % FD_STRIPES];
}

/* Held for a lookup and a reference, never across a wait. */
bool sock_fork_lock(void)
{
	for (int i = 0; i < FD_STRIPES; i++)
		if (forklock_take(&fd_stripe[i]) == FORKLOCK_BUSY)
			return false;
	return true;
}

struct smc_conn *sock_fd_conn(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);
	struct smc_conn *c = NULL;

	if (!e || __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) != FD_SMC)
		return NULL;
	pthread_mutex_lock(fd_lock(fd));
	if (e->kind == FD_SMC) {
		c = e->obj;
		conn_get(c);
	}
	pthread_mutex_unlock(fd_lock(fd));
	return c;
}

/* Reads back one option the core honours (as the kernel stored it: timeouts rounded). */
static void conn_load_sockopt(struct smc_conn *c, int name)
{
	struct timeval tv;
	struct linger lg;
	socklen_t len = sizeof(tv);

	if (name == SO_RCVTIMEO &&
	    REAL(getsockopt)(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0)
		c->rcvtimeo_ns = (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000;
	if (name == SO_SNDTIMEO &&
	    REAL(getsockopt)(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) == 0)
		c->sndtimeo_ns = (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000;
	len = sizeof(lg);
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
static void conn_load_sockopts(struct smc_conn *c)
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
static void sock_tcp_only(int fd)
{
	struct smc_conn *c;

	fdtab_flags_set(fd, FDF_TCP_ONLY);
	c = sock_fd_conn(fd);

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
	fdtab_set(fd, FD_TCP, NULL);
}

void smc_sock_bound(int fd)
{
	if (fdtab_kind(fd) == FD_TCP)
		fdtab_flags_set(fd, FDF_BOUND);
}

/* ------------------------------------------------------------ connect */

static bool addr_is_unspecified(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static uint16_t addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
}

/* The client's half of the 4-tuple must be known before the TCP connection exists, so
 * that the server can find our rendezvous name the moment it accepts: bind an ephemeral
 * port on the address the kernel would pick for a local destination (the destination
 * itself), one that no socket uses. When there is none (TIME_WAIT holds them all: a
 * client that opens plain connections at a high rate), the connection is not offered:
 * sharing a port with SO_REUSEADDR would make connect() fail whenever that port's
 * TIME_WAIT is with the same server, where the kernel's own choice in connect() finds a
 * usable 4-tuple. */
static int bind_local_end(int fd, const struct sockaddr *dst, socklen_t dlen,
			  struct sockaddr_storage *local)
{
	socklen_t len = sizeof(*local);

	/* a socket the application never bound has no port yet: no need to ask */
	if (!(fdtab_flags(fd) & FDF_BOUND))
		goto bind_now;
	if (REAL(getsockname)(fd, (struct sockaddr *)local, &len) < 0)
		return -errno;
	if (addr_port((struct sockaddr *)local) != 0) {
		if (addr_is_unspecified((struct sockaddr *)local)) {
			uint16_t port = addr_port((struct sockaddr *)local);

			memcpy(local, dst, dlen);
			if (local->ss_family == AF_INET)
				((struct sockaddr_in *)local)->sin_port = htons(port);
			else
				((struct sockaddr_in6 *)local)->sin6_port = htons(port);
		}
		return 0;
	}
bind_now:
	memcpy(local, dst, dlen);
	if (local->ss_family == AF_INET)
		((struct sockaddr_in *)local)->sin_port = 0;
	else
		((struct sockaddr_in6 *)local)->sin6_port = 0;
	if (REAL(bind)(fd, (struct sockaddr *)local, dlen) < 0)
		return -errno;
	/* bound now: a second connect() on this socket must ask (above) */
	fdtab_flags_set(fd, FDF_BOUND);
	len = sizeof(*local);
	if (REAL(getsockname)(fd, (struct sockaddr *)local, &len) < 0)
		return -errno;
	return 0;
}

static struct smc_conn *client_conn_new(int fd)
{
	struct smc_conn *c = conn_new(fd, CONN_CLIENT);
	int fl;

	if (!c)
		return NULL;
	fl = REAL(fcntl)(fd, F_GETFL);
	c->nonblock = fl >= 0 && (fl & O_NONBLOCK);
	conn_load_sockopts(c);
	return c;
}

/* Sets up a PENDING client connection for fd. NULL: stay plain TCP for `*why`. */
static struct smc_conn *connect_prepare(int fd, const struct sockaddr *dst, socklen_t dlen,
					enum smc_reason *why)
{
	struct sockaddr_storage local;
	struct smc_conn *c;
	int rfd;

	*why = SMC_REASON_RESOURCES;
	if (bind_local_end(fd, dst, dlen, &local) < 0)
		return NULL;
	if (!rdv_client_port_may_offer((struct sockaddr *)&local)) {
		log_debug("fd %d: bound to an even port: the server would not look for our "
			  "rendezvous, staying TCP", fd);
		return NULL;
	}
	c = client_conn_new(fd);
	if (!c) {
		*why = fd_budget_reason_for(errno);
		return NULL;
	}
	rfd = rdv_conn_listen((struct sockaddr *)&local, dst);
	if (rfd < 0) {
		*why = rfd == -EADDRINUSE ? SMC_REASON_RDV_TAKEN : fd_budget_reason_for(rfd);
		if (rfd == -EADDRINUSE)
			log_warn("fd %d: our rendezvous name is held by another user's process: "
				 "staying TCP", fd);
		conn_put(c);
		return NULL;
	}
	conn_set_rdv(c, rfd);
	fdtab_set(fd, FD_SMC, c);
	return c;
}

/* In-band negotiation: the SYN carries the SMC option; the progress thread takes over
 * once the TCP handshake is done (rdv_listen_fd stays -1 until then). NULL when the
 * socket could not be opted in. */
static struct smc_conn *connect_prepare_inband(int fd, enum smc_reason *why)
{
	struct smc_conn *c;

	*why = SMC_REASON_RESOURCES;
	c = client_conn_new(fd);
	if (!c) {
		*why = fd_budget_reason_for(errno);
		return NULL;
	}
	/* once opted in, the server expects a CLC message from us: nothing may fail after */
	if (tcpopt_opt_in(fd) < 0) {
		conn_put(c);
		return NULL;
	}
	fdtab_set(fd, FD_SMC, c);
	return c;
}

/* A destination hs_policy.h keeps off the handshake: a connection through its pool
 * (pool.h), not yet connected; NULL otherwise, with *admit set when this connection
 * should make the full handshake that carries a pool's setup. */
/* Why a connection that a pool would carry stays TCP for now (statistics). */
enum pool_miss {
	POOL_MISS_NONE = 0,
	POOL_MISS_PENDING, /* the pool was asked for, its answer has not come */
	POOL_MISS_FULL,    /* every slot was taken */
};

static struct smc_conn *connect_pooled(int fd, const struct sockaddr *dst, socklen_t dlen,
				       uint64_t key, uint64_t now, bool *admit, bool *fd_limited,
				       enum pool_miss *miss)
{
	struct sockaddr_storage local;
	struct smc_pool *p;
	struct smc_conn *c;
	int slot, fl;

	/* the fd budget (fd_budget.h): a pooled connection adds no descriptor, but a
	 * library over its share gives its pools back (and this one stays TCP) */
	if (!fd_budget_allows(fd, 0)) {
		*fd_limited = true;
		return NULL;
	}
	switch (pool_client_route(dst, key, &p)) {
	case POOL_ROUTE_FULL:
		*admit = true;
		return NULL;
	case POOL_ROUTE_NONE:
		return NULL;
	case POOL_ROUTE_PENDING:
		*miss = POOL_MISS_PENDING;
		return NULL;
	case POOL_ROUTE_FD_LIMIT:
		*fd_limited = true;
		return NULL;
	case POOL_ROUTE_POOL:
		break;
	}
	/* the slot names our endpoint before the SYN does */
	if (bind_local_end(fd, dst, dlen, &local) < 0) {
		pool_put(p);
		return NULL;
	}
	if ((slot = pool_client_offer(p, (struct sockaddr *)&local)) < 0) {
		*miss = POOL_MISS_FULL;
		pool_put(p);
		return NULL;
	}
	c = conn_new_pooled(fd, CONN_CLIENT, p, slot);
	if (!c) {
		pool_client_withdraw(p, slot, false);
		pool_put(p);
		return NULL;
	}
	fl = REAL(fcntl)(fd, F_GETFL);
	c->nonblock = fl >= 0 && (fl & O_NONBLOCK);
	conn_load_sockopts(c);
	c->policy_key = key;
	c->born_ns = now;
	return c;
}

/* The TCP connection of c is under way but the handshake cannot be: plain TCP. */
static void connect_abandon(struct smc_conn *c, enum smc_reason why)
{
	pthread_mutex_lock(&c->lock);
	conn_close_rdv(c);
	conn_fallback(c, why);
	pthread_mutex_unlock(&c->lock);
}

/*
 * An in-band client that cannot negotiate after its SYN carried the option: a server
 * that answered the option reads our first bytes as CLC, so they must be a Decline
 * (negotiate.h: both ends are plain TCP after it), as the progress thread sends when it
 * has nothing to offer. Whether the server answered is known once the TCP handshake is
 * over: waited for here, at most the handshake timeout (this happens only when the
 * library ran out of resources). A connection whose handshake does not end in time, or
 * whose Decline cannot be sent, is reset: an error for the application rather than its
 * bytes parsed as CLC by the server.
 */
static void connect_inband_decline(int fd)
{
	struct timeval tv = smc_cfg_handshake_timeout();
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int ms = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000), r, sent;

	do
		r = REAL(poll)(&pfd, 1, ms);
	while (r < 0 && errno == EINTR);
	if (r == 1 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)))
		return; /* the connect failed: no stream, its error stays for SO_ERROR */
	sent = r == 1 ? tcpopt_peer_sent(fd) : -ETIMEDOUT;
	if (sent == 0)
		return; /* the server did not answer the option: it expects no CLC */
	if (sent < 0 || neg_send_decline(fd, CLC_DECL_INTERR) < 0) {
		log_debug("fd %d: cannot decline in band after the SMC option: reset", fd);
		neg_reset(fd);
		stats_count_abort();
	}
}

/* connect() of fd went ahead as plain TCP for `why`: counted, and the socket is never
 * upgraded after (its epoll registrations need no record any more). */
static void connect_stays_tcp(int fd, enum smc_reason why)
{
	fdtab_flags_set(fd, FDF_TCP_FINAL);
	epoll_track_forget_fd(fd);
	stats_conn(SMC_MODE_TCP, why);
}

/* connect() of a pooled connection c: ACTIVE from its first byte, or the slot back to
 * the pool when the kernel failed the connect. */
static int connect_pooled_finish(struct smc_conn *c, int fd, const struct sockaddr *addr,
				 socklen_t len)
{
	int r, e, adopted;

	/* before the SYN: the connection carries data through the rings from its first
	 * byte, so its epoll registrations must be the emulation's first, or it stays TCP */
	adopted = epoll_track_adopt(fd, c);
	if (adopted < 0) {
		conn_pool_withdraw(c, false);
		conn_put(c);
		r = REAL(connect)(fd, addr, len);
		e = errno;
		if (r == 0 || e == EINPROGRESS)
			connect_stays_tcp(fd, SMC_REASON_READINESS);
		errno = e;
		return r;
	}
	r = REAL(connect)(fd, addr, len);
	e = errno;
	if (r < 0 && e != EINPROGRESS) {
		epoll_track_undo(fd); /* still a TCP socket, registered in the kernel's sets */
		conn_pool_withdraw(c, e == ECONNREFUSED);
		conn_put(c);
		errno = e;
		return r;
	}
	epoll_track_forget_fd(fd);
	conn_activate_pooled(c, adopted > 0);
	fdtab_set(fd, FD_SMC, c);
	statsrv_ensure();
	errno = e;
	return r;
}

int smc_sock_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	enum smc_reason why = SMC_REASON_DISABLED;
	struct smc_conn *c = NULL;
	enum pool_miss miss = POOL_MISS_NONE;
	bool inband = false; /* c was opted in for the SMC TCP option */
	int r, e;

	/* A connect() on a socket whose connection a first one started (a nonblocking
	 * connect asked again for its result, as APR does: 0, EALREADY or EISCONN) is not
	 * a new connection: no policy sample, no count, no offer on an established one
	 * (FDF_TCP_FINAL, or the socket is FD_SMC already). */
	if (fdtab_kind(fd) != FD_TCP || !addr || len < sizeof(sa_family_t) ||
	    (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
	    len < (addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) ||
	    (fdtab_flags(fd) & FDF_TCP_FINAL))
		return REAL(connect)(fd, addr, len);
	if (smc_enabled() && !addr_is_unspecified(addr) &&
	    (why = upgrade_rule(fd)) == SMC_REASON_NONE) {
		uint64_t key = hs_policy_key(addr), now = clock_now_ns();
		bool admit = hs_policy_admit(key, now, (uint64_t)smc_cfg.short_conn_us * 1000);
		bool fd_limited = false;

		if (!admit)
			c = connect_pooled(fd, addr, len, key, now, &admit, &fd_limited, &miss);
		if (c) {
			return connect_pooled_finish(c, fd, addr, len);
		} else if (!admit) {
			/* a pool would have carried it but for the fd budget (fd_budget.h) */
			why = fd_limited ? SMC_REASON_FD_LIMIT : SMC_REASON_SHORT_LIVED;
		} else if (!fd_budget_allows(fd, FD_COST_CONN)) { /* the fd budget (fd_budget.h) */
			why = SMC_REASON_FD_LIMIT;
		} else {
			if (tcpopt_available())
				inband = (c = connect_prepare_inband(fd, &why)) != NULL;
			if (!c && rdv_listener_present(addr))
				c = connect_prepare(fd, addr, len, &why);
			else if (!c)
				why = rdv_addr_is_local(addr) ? SMC_REASON_PEER_NOT_SMC
							      : SMC_REASON_NOT_LOCAL;
			if (c) {
				c->policy_key = key;
				c->born_ns = now;
			}
		}
	}
	r = REAL(connect)(fd, addr, len);
	e = errno;
	if (c && r < 0 && e != EINPROGRESS) {
		/* No connection: nothing to count, nothing to watch. */
		fdtab_set(fd, FD_TCP, NULL);
		conn_put(c);
	} else if (c && epoll_track_adopt(fd, c) < 0) {
		/* its epoll registrations are the kernel's again: the handshake must not
		 * start (nobody would see the connection's readiness) */
		epoll_track_forget_fd(fd);
		if (inband)
			connect_inband_decline(fd);
		connect_abandon(c, SMC_REASON_READINESS);
	} else if (c && progress_watch_pending(c) < 0) {
		/* Nobody would answer the server: closing our rendezvous name makes it
		 * stay TCP too; in band, our Decline does. */
		epoll_track_forget_fd(fd);
		if (inband)
			connect_inband_decline(fd);
		connect_abandon(c, SMC_REASON_RESOURCES);
	} else if (c) {
		epoll_track_forget_fd(fd);
	} else if (r == 0 || e == EINPROGRESS) {
		connect_stays_tcp(fd, why);
		if (miss != POOL_MISS_NONE)
			stats_count_pool_miss(miss == POOL_MISS_FULL);
	}
	errno = e;
	return r;
}

/* ------------------------------------------------------------ listen / accept */

/*
 * TCP_DEFER_ACCEPT holds a connection back from accept() until its first byte of data
 * arrives (Apache sets it on every listener). A preloaded client sends nothing before
 * its handshake, and the same-host rendezvous (and a pool slot's claim) starts only once
 * the server's process has accepted: each would wait for the other until the client's
 * handshake timeout. So a listener that can upgrade keeps the option out of the kernel
 * and only remembers it for getsockopt, in the kernel's own rounding (the kernel is
 * given the value first and asked for it back). Its connections are then accepted as
 * soon as they are established, which is what the kernel itself does once the deferral
 * period is over: a program that sets the option handles a connection without data.
 */
/* Moves listener fd's TCP_DEFER_ACCEPT from the kernel into l. The caller owns l: not
 * yet in the table, or under the fd's stripe lock. */
static void listener_defer_take(int fd, struct smc_listener *l)
{
	int v = 0, zero = 0;
	socklen_t len = sizeof(v);

	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &v, &len) < 0)
		return;
	l->defer_accept = v;
	if (v != 0)
		(void)REAL(setsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &zero, sizeof(zero));
}

/* The listener of fd when it keeps TCP_DEFER_ACCEPT out of the kernel, else NULL. Its
 * fields are read and written under the fd's stripe lock: the caller takes it (a
 * concurrent close frees the listener only after clearing the entry). */
static struct smc_listener *listener_defer_kept(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	if (!e || e->kind != FD_LISTEN)
		return NULL;
	return ((struct smc_listener *)e->obj)->defer_kept ? e->obj : NULL;
}

/* setsockopt(TCP_DEFER_ACCEPT): on a listener that keeps it, validated and rounded by
 * the kernel, then remembered and cleared again (1); 0: not such a listener. */
static int listener_defer_set(int fd, const void *val, socklen_t len, int *r)
{
	struct smc_listener *l;

	pthread_mutex_lock(fd_lock(fd));
	l = listener_defer_kept(fd);
	if (l) {
		*r = REAL(setsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, val, len);
		if (*r == 0)
			listener_defer_take(fd, l);
	}
	pthread_mutex_unlock(fd_lock(fd));
	return l != NULL;
}

/* getsockopt(TCP_DEFER_ACCEPT): the kernel checks the buffer and sets *len, the value
 * is ours. */
static int listener_defer_get(int fd, void *val, socklen_t *len)
{
	struct smc_listener *l;
	int v = -1;

	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, val, len) < 0)
		return -1;
	pthread_mutex_lock(fd_lock(fd));
	if ((l = listener_defer_kept(fd)))
		v = l->defer_accept;
	pthread_mutex_unlock(fd_lock(fd));
	if (v >= 0 && val)
		memcpy(val, &v, *len < sizeof(v) ? *len : sizeof(v));
	return 0;
}

/* Listening socket fd becomes ours (FD_LISTEN) with its same-host rendezvous name.
 * An inherited one serves no pool: who else accepts on it is not known (a process
 * without the library would read a pooled client's bytes as TCP). */
static void listener_track(int fd, bool opted_in, bool inherited)
{
	struct smc_listener *l = calloc(1, sizeof(*l));

	if (!l)
		return;
	l->refs = 1;
	l->opted_in = opted_in;
	l->name_fd = rdv_listener_register(fd);
	if (l->name_fd >= 0) {
		fd_budget_take(1);
		l->pools = pool_set_new();
		if (inherited)
			pool_set_refuse(l->pools);
	}
	if (l->name_fd < 0 && l->name_fd != -EADDRINUSE)
		log_warn("fd %d: no rendezvous for this listener (%s): connections stay TCP",
			 fd, strerror(-l->name_fd));
	/* a listener whose sibling process holds the name upgrades too */
	l->defer_kept = l->name_fd >= 0 || l->name_fd == -EADDRINUSE;
	if (l->defer_kept)
		listener_defer_take(fd, l);
	fdtab_set(fd, FD_LISTEN, l);
}

int smc_sock_listen(int fd, int backlog)
{
	bool opted_in = false;
	int r;

	/* a process that uses io_uring may accept where we never see it (io_uring_watch.h):
	 * its new listeners announce no SMC, so their clients never wait for it */
	bool announce = smc_enabled() && !io_uring_in_use();

	/* before listen(): the program decides when the socket starts listening */
	if (fdtab_kind(fd) == FD_TCP && announce && tcpopt_available())
		opted_in = tcpopt_opt_in(fd) == 0;
	r = REAL(listen)(fd, backlog);
	if (r == 0) /* a listener's readiness stays the kernel's */
		epoll_track_forget_fd(fd);
	if (r < 0 || fdtab_kind(fd) != FD_TCP || !announce)
		return r;
	if (opted_in)
		exec_listener_listening(fd);
	listener_track(fd, opted_in, false);
	return r;
}

/* An inherited socket (fd) that listens for TCP. */
static bool inherited_tcp_listener(int fd)
{
	int v = 0, dom = 0, type = 0, proto = 0;
	socklen_t len = sizeof(v);

	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || !v)
		return false;
	len = sizeof(dom);
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) < 0 ||
	    (dom != AF_INET && dom != AF_INET6))
		return false;
	len = sizeof(type);
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return false;
	len = sizeof(proto);
	return REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 &&
	       proto == IPPROTO_TCP;
}

/*
 * A listener handed over by exec (systemd socket activation, inetd's wait services, a
 * server that re-execs itself, nginx's binary upgrade) is tracked as if this image had
 * called listen(): its rendezvous name is registered again (the old image's went with
 * its descriptors, or a sibling still holds it), and one opted in for the option
 * before the exec (the kernel keeps that) negotiates by it, answering the option again
 * (the old image withdrew it: core/exec.c). Left untracked, its clients
 * would still find a name that a process forked before the exec holds, or one that was
 * there when they connected, and wait their handshake timeout for a server that never
 * comes. A listener made by a process without the library (systemd itself) upgrades
 * over the rendezvous only: with the option set up its clients take the missing option
 * for a peer without SMC.
 */
void smc_sock_adopt_inherited(void)
{
	DIR *d;
	struct dirent *de;

	if (!smc_enabled())
		return;
	d = opendir("/proc/self/fd");
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		bool opted_in;

		if (*end || end == de->d_name || fd < 0 || fd == dirfd(d) || fd > INT32_MAX)
			continue;
		if (io_uring_fd_is_ring((int)fd)) {
			io_uring_note_setup();
			continue;
		}
		if (fdtab_kind((int)fd) != FD_NONE || !inherited_tcp_listener((int)fd))
			continue;
		/* an entry in the map: opted in before the exec (peer-sent is 0 on a
		 * listener). One that was not cannot be now: the eBPF program prepares a
		 * listener for the option when it starts listening. */
		opted_in = tcpopt_available() && tcpopt_peer_sent((int)fd) >= 0;
		/* the image before the exec withdrew it (core/exec.c): this one negotiates */
		if (opted_in)
			(void)tcpopt_withdraw((int)fd, false);
		log_debug("fd %ld: inherited listener tracked (%s)", fd,
			  opted_in ? "SMC option" : "rendezvous only");
		/* its history is not known: ask the kernel for its options */
		fdtab_flags_reset((int)fd, FDF_SOCKOPTS | FDF_BOUND);
		listener_track((int)fd, opted_in, true);
	}
	closedir(d);
}

static void copy_addr_out(const struct sockaddr_storage *ss, socklen_t sslen,
			  struct sockaddr *addr, socklen_t *len)
{
	if (!addr || !len)
		return;
	memcpy(addr, ss, *len < sslen ? *len : sslen);
	*len = sslen;
}

/* Aborts the TCP connection with a reset: used when a handshake failed after the point
 * where the peer may already consider the connection upgraded. */
/*
 * An accepted connection that cannot be used (a client that may take it as upgraded
 * while this side cannot, a broken CLC exchange) is reset where it stands and still
 * handed to the application: it reads ECONNRESET, as from a client that reset its
 * connection while it waited in the accept queue, which every TCP server handles.
 * accept() failing with ECONNABORTED instead would end servers that take any accept()
 * error as fatal (a Python accept() loop raises ConnectionAbortedError).
 */
static void abort_tcp(int fd)
{
	neg_reset(fd);
}

/* The peer of an accepted socket closed (FIN or RST already received). */
static bool tcp_peer_gone(int fd)
{
	char b;
	ssize_t r = REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Whether listening socket fd was opted in for the TCP option. Under the fd's stripe
 * lock: a concurrent close frees the listener only after clearing the entry. */
bool sock_listener_opted_in(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);
	bool r = false;

	if (!e)
		return false;
	pthread_mutex_lock(fd_lock(fd));
	if (e->kind == FD_LISTEN)
		r = ((struct smc_listener *)e->obj)->opted_in;
	pthread_mutex_unlock(fd_lock(fd));
	return r;
}

/* The end of a server handshake on accepted socket nfd with result r: 0 -> nfd is the
 * ACTIVE connection c (returns 1); -ECONNABORTED -> the client may consider the
 * connection upgraded, so nfd is reset (abort_tcp; returns -1,
 * counted as an abort when count_abort); otherwise plain TCP (returns 0). */
static int accept_finish(struct smc_conn *c, int nfd, int r, bool count_abort)
{
	if (r == 0) {
		fdtab_set(nfd, FD_SMC, c);
		conn_activate(c);
		statsrv_ensure();
		return 1;
	}
	conn_put(c);
	if (r != -ECONNABORTED)
		return 0;
	if (count_abort)
		stats_count_abort();
	abort_tcp(nfd);
	return -1;
}

/* What a server handshake that failed on a connection that stays open (as plain TCP)
 * holds: its rings and their share of the memory cap. */
static void server_release_shm(struct smc_conn *c)
{
	shm_detach(&c->map);
	if (c->reserved) {
		shm_unreserve(c->reserved);
		c->reserved = 0;
	}
}

/* A server handshake of PENDING connection c (the application holds it: under c->lock)
 * ended with r (handshake.h): c is ACTIVE, or FALLBACK, as plain TCP for why or as a
 * reset socket (the client may have taken it as upgraded and may still send CLC bytes,
 * which must never reach the application, so its next call gets ECONNRESET; counted as
 * an abort and handshake-failed, or as peer-closed when the client went away). */
static void server_decided(struct smc_conn *c, int r, enum smc_reason why)
{
	if (r == 0) {
		conn_activate(c);
		return;
	}
	server_release_shm(c);
	if (r == -ECONNABORTED) {
		/* a client that went away is an ordinary end (handshake.c), not an abort */
		if (why != SMC_REASON_PEER_CLOSED) {
			stats_count_abort();
			why = SMC_REASON_HANDSHAKE;
		}
		neg_reset(c->fd);
	}
	conn_fallback(c, why);
}

/* The client did not answer within accept()'s wait: nfd goes to the application
 * PENDING and the progress thread goes on with flow f (which then holds ufd). 1, or 0
 * when the thread cannot take it. */
static int accept_defer_flow(int nfd, struct smc_conn *c, const struct hs_flow *f)
{
	c->deferred = true;
	fdtab_set(nfd, FD_SMC, c);
	if (progress_watch_flow(f, server_decided) < 0) {
		fdtab_set(nfd, FD_TCP, NULL);
		c->deferred = false;
		return 0;
	}
	stats_count_hs_background();
	log_debug("fd %d: the client has not answered yet: the handshake goes on in the "
		  "background", nfd);
	return 1;
}

/* The server's side of the same-host handshake for accepted socket nfd over rendezvous
 * socket ufd (closed here, or handed to the progress thread). 1: nfd is an SMC
 * connection, ACTIVE or still PENDING. 0: plain TCP (*why). -1: nfd was reset
 * (abort_tcp). */
static int accept_handshake(int nfd, int ufd, int flags, const struct hs_auth *auth,
			    enum smc_reason *why)
{
	struct smc_conn *c = NULL;
	struct hs_flow f;
	int r;

	*why = SMC_REASON_FD_LIMIT;
	if (fd_budget_allows(nfd, FD_COST_CONN)) { /* the fd budget (fd_budget.h) */
		c = conn_new(nfd, CONN_SERVER);
		*why = c ? SMC_REASON_NONE : fd_budget_reason_for(errno);
	}
	if (!c) {
		handshake_server_decline(nfd, ufd, auth, *why == SMC_REASON_FD_LIMIT
						     ? CLC_DECL_SH_FDLIMIT : CLC_DECL_INTERR);
		fd_own_close(ufd);
		return 0;
	}
	c->nonblock = (flags & SOCK_NONBLOCK) != 0;
	conn_load_sockopts(c);
	if (conn_ib_wanted()) {
		/* a client proposing SMC-R opens its device first: its Proposal may take
		 * longer than accept()'s wait, and its exchange blocks (conn_ib.h) */
		r = handshake_server(c, ufd, auth, why);
		fd_own_close(ufd);
		return accept_finish(c, nfd, r, false);
	}
	(void)progress_ensure(); /* where the rest goes if the client is slow */
	r = hs_server_start_inline(&f, c, ufd, auth);
	if (r == HS_WAIT && accept_defer_flow(nfd, c, &f) == 1)
		return 1;
	/* no progress thread to go on with it (it could not start: a thread limit, say):
	 * a committed client's Confirm is waited for here rather than the connection reset */
	if (r == HS_WAIT)
		(void)hs_server_finish_inline(&f);
	fd_own_close(ufd);
	*why = f.why;
	return accept_finish(c, nfd, f.result, false);
}

/* An SMC-R Proposal that arrives once the process uses io_uring (io_uring_watch.h) is
 * declined on the TCP connection: true, with *why. The same-host exchange declines in
 * handshake_server. */
static bool ib_declined_for_io_uring(int fd, enum smc_reason *why)
{
	if (!io_uring_in_use())
		return false;
	(void)neg_send_decline(fd, CLC_DECL_MODEUNSUPP);
	*why = SMC_REASON_IO_URING;
	return true;
}

/* In-band SMC-R: the server's side of the exchange on accepted socket nfd (conn_ib.h).
 * Results as accept_handshake. */
static int accept_ib_inband(int nfd, int flags, const struct clc_msg *prop,
			    enum smc_reason *why)
{
	struct smc_conn *c = NULL;
	int r;

	*why = SMC_REASON_FD_LIMIT;
	if (fd_budget_allows(nfd, FD_COST_CONN)) { /* the fd budget (fd_budget.h) */
		c = conn_new(nfd, CONN_SERVER);
		if (!c)
			*why = fd_budget_reason_for(errno);
	}
	if (!c) {
		(void)neg_send_decline(nfd, *why == SMC_REASON_FD_LIMIT ? CLC_DECL_SH_FDLIMIT
								       : CLC_DECL_INTERR);
		return 0;
	}
	c->nonblock = (flags & SOCK_NONBLOCK) != 0;
	conn_load_sockopts(c);
	r = conn_ib_server_inband(c, prop, why);
	return accept_finish(c, nfd, r, true);
}

/* The server's side on deferred connection c (progress thread, under c->lock, PENDING)
 * once the client's CLC message was read (o). Leaves c ACTIVE or FALLBACK
 * (server_decided), or PENDING with the same-host exchange handed to a flow of its
 * own on the thread. */
static void deferred_decide(struct smc_conn *c, enum neg_offer o, const struct clc_block *blk,
			    const struct clc_msg *prop, enum smc_reason why)
{
	struct hs_auth auth = { .by_key = true, .key = blk->rdv_key };
	struct hs_flow f;
	int ufd, r = -ECONNREFUSED;

	switch (o) {
	case NEG_OFFER_TCP:
		break;
	case NEG_OFFER_IB:
		if (ib_declined_for_io_uring(c->fd, &why))
			break;
		log_debug("fd %d: SMC-R Proposal from smc-preload: answering in-band", c->fd);
		r = conn_ib_server_inband(c, prop, &why);
		break;
	case NEG_OFFER_OURS:
		why = SMC_REASON_HANDSHAKE;
		ufd = neg_server_rendezvous(c->fd, blk);
		if (ufd < 0) {
			if (ufd == -ECONNREFUSED || tcp_peer_gone(c->fd))
				why = SMC_REASON_PEER_CLOSED;
			break;
		}
		if (hs_server_start(&f, c, ufd, &auth) == HS_WAIT) {
			if (progress_watch_flow(&f, server_decided) == 0)
				return; /* the flow holds ufd now */
			(void)hs_server_step(&f, true);
		}
		fd_own_close(ufd);
		r = f.result;
		why = f.why;
		break;
	case NEG_OFFER_ABORT:
	case NEG_OFFER_WAIT:
		r = -ECONNABORTED;
		break;
	}
	server_decided(c, r, why);
}

/* progress_server_step for deferred connections. */
static bool deferred_step(struct smc_conn *c, bool final)
{
	enum smc_reason why = SMC_REASON_HANDSHAKE;
	struct clc_block blk = { 0 };
	struct clc_msg prop;
	enum neg_offer o;

	/* c->fd is the application's: under c->lock it cannot be closed meanwhile */
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		return true;
	}
	o = neg_server_try_offer(c->fd, final, &blk, &prop, &why);
	if (o != NEG_OFFER_WAIT)
		deferred_decide(c, o, &blk, &prop, why);
	pthread_mutex_unlock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE)
		statsrv_ensure();
	return o != NEG_OFFER_WAIT;
}

/* The client's CLC message is not complete yet and accept() must not wait for it (a
 * nonblocking listener): nfd goes to the application at once as a PENDING connection
 * (reads wait for the decision, writes are staged; conn.h) and the progress thread
 * negotiates. 1, or 0 when it cannot be deferred (the caller negotiates inline). */
static int accept_inband_defer(int nfd, int flags)
{
	struct smc_conn *c;

	if (!fd_budget_allows(nfd, FD_COST_CONN)) /* the fd budget (fd_budget.h) */
		return 0; /* declined inline (accept_handshake) */
	c = conn_new(nfd, CONN_SERVER);
	if (!c)
		return 0;
	c->nonblock = (flags & SOCK_NONBLOCK) != 0;
	c->deferred = true;
	conn_load_sockopts(c);
	fdtab_set(nfd, FD_SMC, c);
	if (progress_watch_server(c, deferred_step) < 0) {
		fdtab_set(nfd, FD_TCP, NULL);
		conn_put(c);
		return 0;
	}
	log_debug("fd %d: the client's CLC message is still on its way: negotiating in the "
		  "background", nfd);
	return 1;
}

/* Both SYN and SYN-ACK carried the option: the client's CLC message decides. may_defer:
 * accept() must not wait for it (accept_inband_defer). */
static int accept_inband(int nfd, int flags, bool may_defer, enum smc_reason *why)
{
	struct clc_block blk;
	struct clc_msg prop;
	struct hs_auth auth = { .by_key = true };
	enum neg_offer o = NEG_OFFER_WAIT;
	int ufd;

	if (may_defer) {
		o = neg_server_try_offer(nfd, false, &blk, &prop, why);
		if (o == NEG_OFFER_WAIT && accept_inband_defer(nfd, flags) == 1)
			return 1;
	}
	if (o == NEG_OFFER_WAIT)
		o = neg_server_read_offer(nfd, &blk, &prop, why);
	switch (o) {
	case NEG_OFFER_WAIT: /* not from neg_server_read_offer */
	case NEG_OFFER_ABORT:
		stats_count_abort();
		abort_tcp(nfd);
		return -1;
	case NEG_OFFER_TCP:
		return 0;
	case NEG_OFFER_IB:
		if (ib_declined_for_io_uring(nfd, why))
			return 0;
		log_debug("fd %d: SMC-R Proposal from smc-preload: answering in-band", nfd);
		return accept_ib_inband(nfd, flags, &prop, why);
	case NEG_OFFER_OURS:
		break;
	}
	*why = SMC_REASON_HANDSHAKE;
	log_debug("fd %d: CLC Proposal from smc-preload on this host: joining its %s rendezvous",
		  nfd, blk.flags & CLC_BLOCK_RDV_PATH ? "path" : "abstract");
	ufd = neg_server_rendezvous(nfd, &blk);
	if (ufd < 0) {
		/* the client closed or exited after proposing (an exiting process closes
		 * its listener before its TCP FIN goes out) */
		if (ufd == -ECONNREFUSED || tcp_peer_gone(nfd))
			*why = SMC_REASON_PEER_CLOSED;
		else if (ufd == -EMFILE || ufd == -ENFILE)
			*why = SMC_REASON_FD_LIMIT;
		return 0;
	}
	auth.key = blk.rdv_key;
	return accept_handshake(nfd, ufd, flags, &auth, why);
}

/* Answers the pool setup requests waiting for listener lfd (pool.h). */
static void listener_serve_pools(int lfd)
{
	struct fd_entry *e = fdtab_peek(lfd);

	if (!e || smc_cfg.pool_slots == 0)
		return;
	pthread_mutex_lock(fd_lock(lfd));
	if (e->kind == FD_LISTEN) {
		struct smc_listener *l = e->obj;

		pool_set_serve(l->pools, l->name_fd, lfd);
	}
	pthread_mutex_unlock(fd_lock(lfd));
}

/* A connection whose client offered a slot of one of listener lfd's pools (pool.h):
 * 1: nfd is an ACTIVE pooled connection; 0: no pool names it; -1: one did but the
 * connection could not be taken: nfd was reset (abort_tcp). */
static int accept_pooled(int lfd, int nfd, const struct sockaddr *peer, int flags)
{
	struct fd_entry *e = fdtab_peek(lfd);
	struct smc_pool *p = NULL;
	struct smc_conn *c;
	int slot = -1, r = 0;

	if (!e)
		return 0;
	pthread_mutex_lock(fd_lock(lfd));
	if (e->kind == FD_LISTEN)
		r = pool_set_claim(((struct smc_listener *)e->obj)->pools, peer, nfd, &p, &slot);
	pthread_mutex_unlock(fd_lock(lfd));
	if (r == 0)
		return 0;
	c = r > 0 ? conn_new_pooled(nfd, CONN_SERVER, p, slot) : NULL;
	if (!c) {
		if (r > 0)
			pool_slot_abort(p, slot);
		abort_tcp(nfd);
		return -1;
	}
	c->nonblock = (flags & SOCK_NONBLOCK) != 0;
	conn_load_sockopts(c);
	conn_activate_pooled(c, false); /* a new fd: nothing watches it yet */
	fdtab_set(nfd, FD_SMC, c);
	statsrv_ensure();
	return 1;
}

/* No option from the client: a preloaded client without the map (same network
 * namespace) may still wait on the same-host rendezvous. */
static int accept_rendezvous(int lfd, int nfd, const struct sockaddr *peer, int flags,
			     enum smc_reason *why)
{
	static const struct hs_auth by_owner = { .by_key = false };
	struct sockaddr_storage local;
	socklen_t llen = sizeof(local);
	int ufd;

	*why = SMC_REASON_NOT_LOCAL;
	if (!rdv_addr_is_local(peer))
		return 0;
	*why = SMC_REASON_PEER_NOT_SMC;
	if (!rdv_client_port_may_offer(peer) ||
	    REAL(getsockname)(nfd, (struct sockaddr *)&local, &llen) < 0)
		return 0;
	/* a client that asks for a pool makes this connection's handshake (pool.h) */
	listener_serve_pools(lfd);
	ufd = rdv_conn_connect(peer, (struct sockaddr *)&local);
	if (ufd < 0) {
		/* no rendezvous because the client already closed or exited */
		if (tcp_peer_gone(nfd))
			*why = SMC_REASON_PEER_CLOSED;
		else if (ufd == -EMFILE || ufd == -ENFILE)
			*why = SMC_REASON_FD_LIMIT;
		return 0;
	}
	/* Any local user can bind the name of a connection not yet made and then stay
	 * silent: who holds it (the credentials of its listen(), known since our connect)
	 * is checked before anything is read from or sent to it, or every such connection
	 * would cost this accept() a handshake timeout. */
	if (!rdv_peer_owns_tcp_peer(ufd, nfd)) {
		fd_own_close(ufd);
		/* a client that reset its connection meanwhile has no socket left to own
		 * (getpeername fails): gone, not a squatter */
		if (tcp_peer_gone(nfd)) {
			*why = SMC_REASON_PEER_CLOSED;
			return 0;
		}
		log_warn("fd %d: the client's rendezvous name is held by a process that does "
			 "not own the client's socket: staying TCP", nfd);
		*why = SMC_REASON_RDV_TAKEN;
		return 0;
	}
	return accept_handshake(nfd, ufd, flags, &by_owner, why);
}

static bool listener_nonblocking(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

/* Reads the in-band offer of a client we do not negotiate with and declines it, so its
 * CLC bytes never reach the application. 0: plain TCP (*why: `reason`, or what the
 * client's bytes said); -1: nfd was reset (abort_tcp). */
static int accept_decline_inband(int nfd, enum smc_reason reason, enum smc_reason *why)
{
	struct clc_block blk;
	struct clc_msg prop;

	switch (neg_server_read_offer(nfd, &blk, &prop, why)) {
	case NEG_OFFER_TCP:
		return 0;
	case NEG_OFFER_OURS:
	case NEG_OFFER_IB:
		*why = reason;
		if (neg_send_decline(nfd, CLC_DECL_MODEUNSUPP) == 0)
			return 0;
		break;
	case NEG_OFFER_ABORT:
	case NEG_OFFER_WAIT: /* not from neg_server_read_offer */
		break;
	}
	stats_count_abort();
	abort_tcp(nfd);
	return -1;
}

/* The option was answered by a listener we do not know: it was opted in before exec
 * (the kernel keeps the opt-in, our table does not), or SMC_TRANSPORT=tcp here. The
 * client proposes in band either way, and its CLC bytes must not reach the application:
 * negotiate as for our own listeners, or decline. Results as accept_inband. */
static int accept_unknown_listener(int nfd, int flags, enum smc_reason *why)
{
	if (smc_enabled() && !io_uring_in_use()) /* io_uring_watch.h */
		return accept_inband(nfd, flags, false, why);
	return accept_decline_inband(nfd, smc_enabled() ? SMC_REASON_IO_URING : SMC_REASON_DISABLED,
				     why);
}

/* A listener of a process that uses io_uring (io_uring_watch.h): a pooled connection
 * whose slot was offered before is served (the client has taken it as upgraded); every
 * other client is declined, in band or on its rendezvous, and stays TCP. */
/* What a connection reset at accept (abort_tcp: -1 from the steps above) counts as: a
 * client gone meanwhile, or a failed handshake. It goes to the application as a plain
 * TCP socket that reads ECONNRESET. */
static enum smc_reason reset_reason(enum smc_reason why)
{
	return why == SMC_REASON_PEER_CLOSED ? why : SMC_REASON_HANDSHAKE;
}

static int accept_io_uring(int lfd, int nfd, const struct sockaddr *peer, int flags)
{
	enum smc_reason why = SMC_REASON_IO_URING;
	int r = accept_pooled(lfd, nfd, peer, flags);

	/* a same-host client waiting on its rendezvous hears the decline there
	 * (handshake_server), instead of waiting out its handshake timeout */
	if (r == 0 && sock_listener_opted_in(lfd) && tcpopt_peer_sent(nfd) == 1)
		r = accept_decline_inband(nfd, SMC_REASON_IO_URING, &why);
	else if (r == 0)
		r = accept_rendezvous(lfd, nfd, peer, flags, &why);
	if (r < 0) {
		r = 0;
		why = reset_reason(why);
	}
	if (r == 0) {
		fdtab_set(nfd, FD_TCP, NULL);
		stats_conn(SMC_MODE_TCP, why);
	}
	return nfd;
}

int smc_sock_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	enum smc_reason why = smc_enabled() && io_uring_in_use() ? SMC_REASON_IO_URING
								 : SMC_REASON_DISABLED;
	bool opted_in;
	int nfd, r;

	nfd = REAL(accept4)(fd, (struct sockaddr *)&peer, &plen, flags);
	if (nfd < 0)
		return nfd;
	/* an accepted socket inherits the listener's timeouts and linger */
	fdtab_flags_reset(nfd, fdtab_flags(fd) & (FDF_SOCKOPTS | FDF_TCP_ONLY));
	copy_addr_out(&peer, plen, addr, len);
	if (fdtab_kind(fd) == FD_LISTEN && smc_enabled() && io_uring_in_use()) /* io_uring_watch.h */
		return accept_io_uring(fd, nfd, (struct sockaddr *)&peer, flags);
	if (fdtab_kind(fd) != FD_LISTEN || !smc_enabled()) {
		/* only an accepted socket of an opted-in listener has a map entry */
		r = tcpopt_available() && tcpopt_peer_sent(nfd) == 1
			    ? accept_unknown_listener(nfd, flags, &why) : 0;
		if (r < 0) {
			r = 0;
			why = reset_reason(why);
		}
		if (r == 0) {
			smc_sock_created(nfd, peer.ss_family, SOCK_STREAM, 0);
			fdtab_flags_set(nfd, FDF_TCP_FINAL); /* connected: never upgraded */
			stats_conn(SMC_MODE_TCP, why);
		}
		return nfd;
	}
	/* our SYN-ACK answered the option only when the listener was opted in */
	opted_in = sock_listener_opted_in(fd);
	if (opted_in && tcpopt_peer_sent(nfd) == 1) {
		listener_serve_pools(fd);
		r = accept_inband(nfd, flags, listener_nonblocking(fd), &why);
	} else {
		r = accept_pooled(fd, nfd, (struct sockaddr *)&peer, flags);
		if (r == 0)
			r = accept_rendezvous(fd, nfd, (struct sockaddr *)&peer, flags, &why);
		/* a remote peer that did not send the option does not run SMC */
		if (opted_in && why == SMC_REASON_NOT_LOCAL)
			why = SMC_REASON_PEER_NOT_SMC;
	}
	if (r < 0) {
		r = 0;
		why = reset_reason(why);
	}
	if (r == 0) {
		fdtab_set(nfd, FD_TCP, NULL);
		fdtab_flags_set(nfd, FDF_TCP_FINAL);
		stats_conn(SMC_MODE_TCP, why);
	} else if (fdtab_flags(fd) & FDF_TCP_ONLY) {
		sock_tcp_only(nfd); /* it inherited the listener's SO_RCVLOWAT */
	}
	return nfd;
}

/* ------------------------------------------------------------ data */

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
	struct smc_conn *c = sock_fd_conn(fd);
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
	struct smc_conn *c = sock_fd_conn(fd);
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
	struct smc_conn *c = sock_fd_conn(fd);
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
		if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) == 0) {
			pool_set_free(l->pools);
			if (l->name_fd >= 0) {
				fd_own_close(l->name_fd);
				fd_budget_give(1);
			}
			free(l);
		}
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
	struct smc_conn *c = sock_fd_conn(fd);

	if (c) {
		c->nonblock = on;
		conn_put(c);
	}
}

int smc_sock_ioctl(int fd, unsigned long req, void *arg)
{
	struct smc_conn *c = sock_fd_conn(fd);
	int err, r = 0;

	/* SIOCOUTQNSD (not yet sent) counts within SIOCOUTQ: what is unwritten */
	if (c && (req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD) && arg &&
	    conn_ready_for_io(c, MSG_DONTWAIT, 0, &err))
		*(int *)arg = req == FIONREAD ? conn_rx_available(c) : conn_tx_queued(c);
	else
		r = REAL(ioctl)(fd, req, arg);
	err = errno;
	if (c)
		conn_put(c);
	errno = err;
	return r;
}

int smc_sock_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct smc_conn *c;
	int r = 0, err;

	if (level == IPPROTO_TCP && name == TCP_DEFER_ACCEPT && len)
		return listener_defer_get(fd, val, len);
	c = sock_fd_conn(fd);

	if (c && level == SOL_SOCKET && name == SO_ERROR && c->aborted &&
	    __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE && val && len &&
	    *len >= sizeof(int)) {
		*(int *)val = conn_reset_take(c) ? ECONNRESET : 0;
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
	return (name == SO_RCVLOWAT && v > 1) || (name == SO_ZEROCOPY && v != 0);
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
	    listener_defer_set(fd, val, len, &r))
		return r;
	r = REAL(setsockopt)(fd, level, name, val, len);
	if (r == 0 && sockopt_needs_tcp(level, name, val, len))
		sock_tcp_only(fd);
	if (r != 0 || level != SOL_SOCKET ||
	    (name != SO_RCVTIMEO && name != SO_SNDTIMEO && name != SO_LINGER))
		return r;
	fdtab_flags_set(fd, FDF_SOCKOPTS);
	if ((c = sock_fd_conn(fd))) {
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
