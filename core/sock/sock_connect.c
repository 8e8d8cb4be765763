/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * connect() of a TCP socket (core/sock/sock.h): the pooled path, the same-host rendezvous
 * or the SMC TCP option, or plain TCP; the handshake then runs on the progress thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/negotiate/hs_history.h"
#include "core/negotiate/hs_policy.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/tcpopt.h"
#include "core/negotiate/upgrade_rule.h"
#include "core/readiness/epoll_track.h"
#include "core/shm/pool.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"
#include "core/sock/sock_int.h"

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

/* How long connections are not offered after a bind found the odd ports all taken
 * (below): a second lets TIME_WAIT give some back, and costs a client one slow bind
 * per second. */
#define PORTS_SCARCE_NS 1000000000ull

/* Until when (clock_now_ns) binding an ephemeral port is not tried (atomic). */
static uint64_t ports_scarce_until;

static void ports_scarce_mark(int fd, uint64_t now)
{
	__atomic_store_n(&ports_scarce_until, now + PORTS_SCARCE_NS, __ATOMIC_RELAXED);
	log_debug("fd %d: no free odd ephemeral port (TIME_WAIT holds them): connections "
		  "are not offered for %llu ms", fd, PORTS_SCARCE_NS / 1000000ull);
}

/* The client's half of the 4-tuple must be known before the TCP connection exists, so
 * that the server can find our rendezvous name the moment it accepts: bind an ephemeral
 * port on the address the kernel would pick for a local destination (the destination
 * itself), one that no socket uses. When there is none (TIME_WAIT holds them all: a
 * client that opens plain connections at a high rate), the connection is not offered:
 * sharing a port with SO_REUSEADDR would make connect() fail whenever that port's
 * TIME_WAIT is with the same server, where the kernel's own choice in connect() finds a
 * usable 4-tuple.
 * The kernel hands bind() odd ports and connect() even ones (inet_csk_find_open_port):
 * a bind that comes back with an even port, or none, has scanned every odd port of the
 * range in vain, milliseconds of CPU, where connect() reuses a TIME_WAIT port at once
 * (tcp_tw_reuse, loopback). So for PORTS_SCARCE_NS after one, no socket is bound and
 * connect() picks the port as without the library (reason "resources"). */
static int bind_local_end(int fd, const struct sockaddr *dst, socklen_t dlen,
			  struct sockaddr_storage *local)
{
	socklen_t len = sizeof(*local);
	uint64_t now;

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
	now = clock_now_ns();
	if (now < __atomic_load_n(&ports_scarce_until, __ATOMIC_RELAXED))
		return -EADDRNOTAVAIL;
	memcpy(local, dst, dlen);
	if (local->ss_family == AF_INET)
		((struct sockaddr_in *)local)->sin_port = 0;
	else
		((struct sockaddr_in6 *)local)->sin6_port = 0;
	if (REAL(bind)(fd, (struct sockaddr *)local, dlen) < 0) {
		int e = errno;

		if (e == EADDRINUSE || e == EADDRNOTAVAIL)
			ports_scarce_mark(fd, now);
		return -e;
	}
	/* bound now: a second connect() on this socket must ask (above) */
	fdtab_flags_set(fd, FDF_BOUND);
	len = sizeof(*local);
	if (REAL(getsockname)(fd, (struct sockaddr *)local, &len) < 0)
		return -errno;
	if (!(addr_port((struct sockaddr *)local) & 1))
		ports_scarce_mark(fd, now);
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
	sock_load_sockopts(c);
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
	c->clc_in_stream = true;
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
	sock_load_sockopts(c);
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
		conn_tcp_reset(fd);
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

/*
 * Where a nonblocking connect() that returned EINPROGRESS stands, from TCP_INFO (which
 * leaves the error for the program's SO_ERROR); -1 when the kernel does not say. On
 * loopback the TCP handshake is over by the time connect() returns, so:
 *  - TCP_CLOSE: the SYN was answered by a reset (it cannot have been established and
 *    closed since). No connection to count, as a blocking connect's ECONNREFUSED is
 *    not: a client that retries a local port nobody listens on (ZeroMQ's reconnects)
 *    is not counted once per attempt;
 *  - TCP_SYN_SENT: the server's listener dropped the SYN (its accept queue full), or
 *    softirq work was deferred: the answer comes with the SYN's retransmission.
 */
static int connect_tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	return REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 ? ti.tcpi_state : -1;
}

/*
 * In band, whether the TCP handshake is over and the server's SYN-ACK carried no SMC
 * option (false also when either is not known yet). A blocking connect() returns with
 * the handshake over; a nonblocking one to a local server has it over too
 * (connect_tcp_state). A server without the option makes the connection plain TCP in
 * connect() itself, as the progress thread would once the socket is writable: the
 * first connection of a process to an ordinary server starts no thread and fills no
 * descriptor numbers (a one-shot client of it pays nothing for the library).
 */
static bool connect_peer_answered_tcp(int fd, bool connected)
{
	return (connected || connect_tcp_state(fd) == TCP_ESTABLISHED) &&
	       tcpopt_peer_sent(fd) == 0;
}

/*
 * Whether fd still holds the socket this connect() started with. A library preloaded
 * after ours that wraps connect() too may swap the socket while it connects:
 * proxychains connects a socket of its own to its proxy, speaks SOCKS on it and dup2()s
 * it over the program's descriptor. Our connection went with the old socket's close;
 * the new one carries another protocol's bytes first and is not ours to negotiate.
 * kind: what fd was in the table before the connect (FD_TCP for a pooled connection,
 * which enters the table after it; FD_SMC with c for the others).
 */
static bool connect_same_socket(int fd, struct smc_conn *c, enum fd_kind kind)
{
	struct smc_conn *now;

	if (kind == FD_TCP)
		return fdtab_kind(fd) == FD_TCP;
	now = conn_from_fd(fd);
	if (now)
		conn_put(now);
	return now == c;
}

/*
 * TCP_QUICKACK 0 before connect() makes the kernel hold the handshake's last ACK for the
 * program's first data (tcp_rcv_synsent_state_process: pingpong mode, up to the 200 ms
 * delayed-ACK timer), and so does TCP_DEFER_ACCEPT on a connecting socket; the server's
 * kernel queues the connection for accept() only when that ACK comes. Over TCP the
 * first request carries it; an upgraded connection's first data goes through the rings,
 * and the server's accept() (which the rendezvous handshake, or a pooled slot's first
 * answer, waits for) came 200 ms late: haproxy sets TCP_QUICKACK 0 on its health checks,
 * which then timed out. Such a connect() leaves pingpong mode first, which the kernel
 * also leaves when it sends a held ACK (tcp_enter_quickack_mode), so the socket reads
 * back as over TCP; a deferral is lifted for the connect() and given back after it (on
 * loopback the handshake is over by then). The connect()'s result and errno are the
 * kernel's.
 */
static int connect_ack_at_once(int fd, const struct sockaddr *addr, socklen_t len)
{
	int v = 1, zero = 0, defer = 0, r, e;
	socklen_t vlen = sizeof(v);

	if (!(fdtab_flags(fd) & FDF_ACK_HELD))
		return REAL(connect)(fd, addr, len);
	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_QUICKACK, &v, &vlen) == 0 && !v) {
		v = 1;
		REAL(setsockopt)(fd, IPPROTO_TCP, TCP_QUICKACK, &v, sizeof(v));
	}
	vlen = sizeof(defer);
	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, &vlen) < 0 ||
	    (defer && REAL(setsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &zero, sizeof(zero)) < 0))
		defer = 0;
	r = REAL(connect)(fd, addr, len);
	e = errno;
	if (defer)
		REAL(setsockopt)(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer));
	errno = e;
	return r;
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
	r = connect_ack_at_once(fd, addr, len);
	e = errno;
	if (!connect_same_socket(fd, c, FD_TCP)) {
		log_debug("fd %d: its socket was replaced during connect(): not ours", fd);
		epoll_track_forget_fd(fd);
		conn_pool_withdraw(c, false);
		conn_put(c);
		errno = e;
		return r;
	}
	if (r < 0 && e != EINPROGRESS) {
		epoll_track_undo(fd); /* still a TCP socket, registered in the kernel's sets */
		conn_pool_withdraw(c, e == ECONNREFUSED);
		conn_put(c);
		errno = e;
		return r;
	}
	if (r < 0 && connect_tcp_state(fd) == TCP_SYN_SENT && conn_pool_withdraw(c, false)) {
		/* A SYN the server's full accept queue dropped waits for its retransmission
		 * (a second): over TCP the program meanwhile sees no POLLOUT and a repeated
		 * connect() says EALREADY, but a pooled connection is writable at once (ab
		 * then took EALREADY for a failed connect). The server cannot have accepted
		 * it, so the slot is given back and the connection goes on as TCP. */
		epoll_track_undo(fd);
		conn_put(c);
		connect_stays_tcp(fd, SMC_REASON_SHORT_LIVED);
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

	/* connect(AF_UNSPEC) dissolves the connection (tcp_disconnect: a reset to the peer,
	 * and the socket may connect again). The kernel can only do that to a socket that
	 * carries the stream: a connection on the rings goes back to TCP first, and the
	 * socket stays plain TCP after (its next connect() too). */
	if (addr && len >= sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC &&
	    fdtab_kind(fd) == FD_SMC)
		sock_tcp_only(fd);

	/* A connect() on a socket whose connection a first one started (a nonblocking
	 * connect asked again for its result, as APR does: 0, EALREADY or EISCONN) is not
	 * a new connection: no policy sample, no count, no offer on an established one
	 * (FDF_TCP_FINAL, or the socket is FD_SMC already). */
	if (fdtab_kind(fd) != FD_TCP || !addr || len < sizeof(sa_family_t) ||
	    (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
	    len < (addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) ||
	    (fdtab_flags(fd) & FDF_TCP_FINAL))
		return REAL(connect)(fd, addr, len);
	if (sandbox_keeps_off()) { /* no call of the library's own (sandbox_entry.c) */
		fdtab_flags_set(fd, FDF_TCP_FINAL);
		return REAL(connect)(fd, addr, len);
	}
	if (smc_enabled() && !addr_is_unspecified(addr) &&
	    (why = upgrade_rule(fd)) == SMC_REASON_NONE) {
		uint64_t key = hs_policy_key(addr), now = clock_now_ns();
		uint64_t short_ns = (uint64_t)smc_cfg.short_conn_us * 1000;
		/* its server answered without the option a moment ago (hs_policy.h) */
		bool plain = hs_policy_known_plain(key, now, short_ns);
		bool first = !plain && hs_history_first_connect();
		bool admit = !plain && hs_policy_admit(key, now, short_ns);
		bool fd_limited = false;

		if (plain) {
			why = SMC_REASON_PEER_NOT_SMC;
		} else if (admit && first && !hs_history_admit(key, now, short_ns)) {
			/* a command whose processes connect once and briefly: no handshake,
			 * no thread (hs_history.h) */
			admit = false;
			first = false;
		} else if (!admit) {
			c = connect_pooled(fd, addr, len, key, now, &admit, &fd_limited, &miss);
		}
		if (c) {
			return connect_pooled_finish(c, fd, addr, len);
		} else if (!admit) {
			/* a pool would have carried it but for the fd budget (fd_budget.h) */
			if (!plain)
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
				c->policy_first = first;
			}
		}
	}
	if (c)
		conn_get(c); /* ours through the connect: the table's goes if the socket does */
	if (c && !inband) /* in band, the CLC Proposal carries the ACK */
		r = connect_ack_at_once(fd, addr, len);
	else
		r = REAL(connect)(fd, addr, len);
	e = errno;
	if (c && !connect_same_socket(fd, c, FD_SMC)) {
		log_debug("fd %d: its socket was replaced during connect(): not ours", fd);
		conn_put(c);
		errno = e;
		return r;
	}
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
	} else if (c && inband && connect_peer_answered_tcp(fd, r == 0)) {
		/* decided here: no progress thread for a client of a plain TCP server */
		epoll_track_forget_fd(fd);
		hs_policy_peer_plain(c->policy_key, clock_now_ns(),
				     (uint64_t)smc_cfg.short_conn_us * 1000);
		connect_abandon(c, SMC_REASON_PEER_NOT_SMC);
	} else if (c && progress_watch_pending(c) < 0) {
		/* Nobody would answer the server: closing our rendezvous name makes it
		 * stay TCP too; in band, our Decline does. */
		epoll_track_forget_fd(fd);
		if (inband)
			connect_inband_decline(fd);
		connect_abandon(c, SMC_REASON_RESOURCES);
	} else if (c) {
		epoll_track_forget_fd(fd);
	} else if (r == 0 || (e == EINPROGRESS && connect_tcp_state(fd) != TCP_CLOSE)) {
		connect_stays_tcp(fd, why);
		if (miss != POOL_MISS_NONE)
			stats_count_pool_miss(miss == POOL_MISS_FULL);
	}
	if (c)
		conn_put(c);
	errno = e;
	return r;
}
