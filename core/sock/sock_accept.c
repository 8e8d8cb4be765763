/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * listen() and accept() (core/sock/sock.h): a listener's rendezvous name, its pools and
 * TCP_DEFER_ACCEPT; the server's side of every handshake an accepted socket may start
 * with (pool slot, same-host rendezvous, in band, SMC-R), inline or deferred to the
 * progress thread.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdtab.h"
#include "core/base/fd_pass.h"
#include "core/base/fdpark.h"
#include "core/base/io_uring_watch.h"
#include "core/base/log.h"
#include "core/base/progress.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/ib/conn_ib.h"
#include "core/negotiate/hs_ib.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"
#include "core/negotiate/tcpopt.h"
#include "core/readiness/epoll_track.h"
#include "core/shm/pool.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"
#include "core/sock/sock_int.h"

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
int sock_listener_defer_set(int fd, const void *val, socklen_t len, int *r)
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
int sock_listener_defer_get(int fd, void *val, socklen_t *len)
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

/* l holds its rendezvous name now (name: rdv_listener_register's descriptor), and a
 * set of pools for it; refused when l is inherited (listener_track). */
static void listener_name_held(struct smc_listener *l, int name, bool inherited)
{
	fd_budget_take(1);
	l->pools = pool_set_new();
	if (inherited)
		pool_set_refuse(l->pools);
	l->name_fd = name;
}

/* Listening socket fd becomes ours (FD_LISTEN) with its same-host rendezvous name.
 * An inherited (or shared) one serves no pool: who else accepts on it is not known (a
 * process without the library would read a pooled client's bytes as TCP). */
static void listener_track(int fd, bool opted_in, bool inherited)
{
	struct smc_listener *l = calloc(1, sizeof(*l));

	if (!l)
		return;
	l->refs = 1;
	l->opted_in = opted_in;
	l->name_fd = rdv_listener_register(fd);
	l->name_tried_ns = clock_now_ns();
	if (l->name_fd >= 0)
		listener_name_held(l, l->name_fd, inherited);
	if (l->name_fd < 0 && l->name_fd != -EADDRINUSE)
		log_warn("fd %d: no rendezvous for this listener (%s): connections stay TCP",
			 fd, strerror(-l->name_fd));
	/* a listener whose sibling process holds the name upgrades too */
	l->defer_kept = l->name_fd >= 0 || l->name_fd == -EADDRINUSE;
	if (l->defer_kept)
		listener_defer_take(fd, l);
	fdtab_set(fd, FD_LISTEN, l);
}

static bool tcp_stream_socket(int fd);

/*
 * A TCP socket this process did not make, received over a unix socket or inherited
 * before it listened, that the program now makes listen itself: Node's cluster with
 * NODE_CLUSTER_SCHED_POLICY=none hands the bound socket to each worker, which calls
 * listen(). A worker that received it after another's listen() adopts it as a listener
 * (adopt_listener), and its rendezvous name brings clients that offer SMC: this one
 * must answer them too (left untracked, a client whose connection it accepted waited
 * out its handshake timeout, 2 s, with its request staged). Tracked as its own socket
 * from here, whose history (options, bind) the kernel is asked for.
 */
static bool track_foreign_tcp(int fd)
{
	if (fdtab_kind(fd) != FD_NONE || !tcp_stream_socket(fd))
		return false;
	smc_sock_created(fd, AF_INET, SOCK_STREAM, IPPROTO_TCP);
	fdtab_flags_reset(fd, FDF_SOCKOPTS | FDF_BOUND);
	return true;
}

/* The least accept queue an upgrading listener gets from the kernel. Its accept() runs
 * the first steps of each handshake (and may wait a little for a same-host client's
 * answer: accept_defer_flow), so it takes the queue's head more slowly than over TCP:
 * a burst that a listen(fd, 128) queue absorbs over TCP overflowed it, and the dropped
 * SYNs came back after TCP's 1 s retransmission (250 new connections at once to the
 * JDK's HttpServer). The kernel still caps it at net.core.somaxconn. */
#define LISTEN_BACKLOG_MIN 1024

int smc_sock_listen(int fd, int backlog)
{
	bool opted_in = false;
	int r;

	if (sandbox_keeps_off()) /* announces nothing, no call of its own (sandbox_entry.c) */
		return REAL(listen)(fd, backlog);
	/* A socket another process may hold too (received, or made before a fork) serves
	 * no pool: the kernel hands its connections to whichever process accepts first,
	 * and a pooled connection belongs to the process that made the pool (the other
	 * read its client's bytes as TCP, or the client waited for good: Node's cluster
	 * with NODE_CLUSTER_SCHED_POLICY=none, workers forked after bind() that each
	 * listen). Its full handshakes are any accepting process's to answer. */
	bool shared = track_foreign_tcp(fd) || fdtab_born_before_fork(fd);

	/* a process that uses io_uring may accept where we never see it (io_uring_watch.h):
	 * its new listeners announce no SMC, so their clients never wait for it */
	bool announce = smc_enabled() && !io_uring_in_use();

	/* before listen(): the program decides when the socket starts listening */
	if (fdtab_kind(fd) == FD_TCP && announce && tcpopt_available())
		opted_in = tcpopt_opt_in(fd) == 0;
	/* a second listen() on a listener sets its queue again (nginx applies backlog=) */
	if ((fdtab_kind(fd) == FD_TCP || fdtab_kind(fd) == FD_LISTEN) && announce &&
	    backlog < LISTEN_BACKLOG_MIN)
		backlog = LISTEN_BACKLOG_MIN;
	r = REAL(listen)(fd, backlog);
	if (r == 0) /* a listener's readiness stays the kernel's */
		epoll_track_forget_fd(fd);
	if (r < 0 || fdtab_kind(fd) != FD_TCP || !announce)
		return r;
	if (opted_in)
		exec_listener_listening(fd);
	if (shared)
		log_debug("fd %d: listens, and another process may hold it: no pools", fd);
	listener_track(fd, opted_in, shared);
	return r;
}

/* fd is an AF_INET or AF_INET6 TCP stream socket. */
static bool tcp_stream_socket(int fd)
{
	int dom = 0, type = 0, proto = 0;
	socklen_t len = sizeof(dom);

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

/* An inherited socket (fd) that listens for TCP. */
static bool inherited_tcp_listener(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || !v)
		return false;
	return tcp_stream_socket(fd);
}

/*
 * A listener handed over by exec (systemd socket activation, inetd's wait services, a
 * server that re-execs itself, nginx's binary upgrade) is tracked as if this image had
 * called listen(): its rendezvous name is registered again (the old image's went with
 * its descriptors, or a sibling still holds it), and one opted in for the option
 * before the exec (the kernel keeps that) negotiates by it, answering the option again
 * (the old image withdrew it: core/sock/exec.c). Left untracked, its clients
 * would still find a name that a process forked before the exec holds, or one that was
 * there when they connected, and wait their handshake timeout for a server that never
 * comes. A listener made by a process without the library (systemd itself) upgrades
 * over the rendezvous only: with the option set up its clients take the missing option
 * for a peer without SMC.
 */
static void adopt_listener(int fd, const char *how)
{
	bool opted_in;

	if (fdtab_kind(fd) != FD_NONE || !inherited_tcp_listener(fd))
		return;
	/* an entry in the map: opted in before the exec (peer-sent is 0 on a listener).
	 * One that was not cannot be now: the eBPF program prepares a listener for the
	 * option when it starts listening. */
	opted_in = tcpopt_available() && tcpopt_peer_sent(fd) >= 0;
	/* the image before an exec withdrew it (core/sock/exec.c): this one negotiates */
	if (opted_in)
		(void)tcpopt_withdraw(fd, false);
	log_debug("fd %d: %s listener tracked (%s)", fd, how,
		  opted_in ? "SMC option" : "rendezvous only");
	/* its history is not known: ask the kernel for its options */
	fdtab_flags_reset(fd, FDF_SOCKOPTS | FDF_BOUND);
	listener_track(fd, opted_in, true);
}

void smc_sock_adopt_inherited(void)
{
	DIR *d;
	struct dirent *de;

	exec_carry_adopt(); /* with SMC off too: they go back to TCP losslessly */
	if (!smc_enabled())
		return;
	d = opendir("/proc/self/fd");
	if (d) {
		while ((de = readdir(d)) != NULL) {
			char *end;
			long fd = strtol(de->d_name, &end, 10);
			struct stat st;

			if (*end || end == de->d_name || fd < 0 || fd == dirfd(d) ||
			    fd > INT32_MAX || fstat((int)fd, &st) < 0)
				continue;
			/* by its type first: readlink() on /proc costs more than fstat(), and
			 * most descriptors are files, pipes or terminals */
			if (S_ISSOCK(st.st_mode))
				adopt_listener((int)fd, "inherited");
			else if ((st.st_mode & S_IFMT) == 0 && io_uring_fd_is_ring((int)fd))
				io_uring_note_setup(); /* an anonymous inode, of which io_uring's */
		}
		closedir(d);
	}
	/* after the walk, whose cost grows with the table's size */
	fd_park_prepare();
}

static void adopt_received(int fd, void *arg)
{
	(void)arg;
	adopt_listener(fd, "received");
}

/*
 * A listener received from another process over a unix socket (SCM_RIGHTS: Node's
 * child.send('server', srv), a supervisor handing its listeners to workers) is tracked
 * as an inherited one: its clients find the sender's rendezvous name and offer SMC,
 * and this process, which accepts some of their connections, must answer their
 * handshakes (untracked, each such client waited out its handshake timeout). Its pools
 * refuse, as the sender's do from the moment it passed the listener
 * (sock_listener_passed): a pooled connection belongs to the process that made the pool.
 */
void smc_sock_after_fd_receive(const struct msghdr *msg)
{
	if (smc_enabled())
		fd_pass_each(msg, adopt_received, NULL);
}

void sock_listener_passed(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	if (!e)
		return;
	/* under the fd's stripe lock: a concurrent close frees the listener only after
	 * clearing the entry */
	pthread_mutex_lock(fd_lock(fd));
	if (e->kind == FD_LISTEN)
		pool_set_refuse(((struct smc_listener *)e->obj)->pools);
	pthread_mutex_unlock(fd_lock(fd));
}

void sock_listener_shut_name(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	if (!e)
		return;
	pthread_mutex_lock(fd_lock(fd)); /* as in sock_listener_passed */
	if (e->kind == FD_LISTEN && ((struct smc_listener *)e->obj)->name_fd >= 0) {
		log_info("fd %d: the listener goes to a program without the library: its "
			 "clients stay TCP", fd);
		rdv_listener_shut(((struct smc_listener *)e->obj)->name_fd);
	}
	pthread_mutex_unlock(fd_lock(fd));
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
	conn_tcp_reset(fd);
}

/* The peer of an accepted socket closed (FIN or RST already received). */
static bool tcp_peer_gone(int fd)
{
	char b;
	ssize_t r = REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (r < 0)
		fdtab_owe_error(fd, errno); /* a reset taken is the program's */
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
		conn_tcp_reset(c->fd);
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
	sock_load_sockopts(c);
	if (conn_ib_wanted()) {
		/* a client proposing SMC-R opens its device first: its Proposal may take
		 * longer than accept()'s wait, and its exchange blocks (hs_ib.h) */
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

/* In-band SMC-R: the server's side of the exchange on accepted socket nfd (hs_ib.h).
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
	sock_load_sockopts(c);
	r = hs_ib_server_inband(c, prop, why);
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
		r = hs_ib_server_inband(c, prop, &why);
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
	sock_load_sockopts(c);
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

/*
 * A listener whose rendezvous name another process held when this one took it over
 * claims the name once that process is gone: the process that passed it (gunicorn's
 * USR2 and the old master's QUIT, pgbouncer -R) or an exec'd image's sibling. Its
 * clients find no name meanwhile and stay TCP; without the claim they would for good.
 * Tried from accept(), at most once per LISTENER_CLAIM_NS, under the fd's stripe lock
 * (the registration is two system calls).
 */
#define LISTENER_CLAIM_NS 1000000000ull

static void listener_claim_name(int lfd)
{
	struct fd_entry *e = fdtab_peek(lfd);
	struct smc_listener *l;
	uint64_t now;
	int name;

	if (!e)
		return;
	pthread_mutex_lock(fd_lock(lfd));
	l = e->kind == FD_LISTEN ? e->obj : NULL;
	/* the clock only for a listener that waits for its name: accept() is a hot path */
	if (l && l->name_fd == -EADDRINUSE &&
	    (now = clock_now_ns()) - l->name_tried_ns >= LISTENER_CLAIM_NS) {
		l->name_tried_ns = now;
		name = rdv_listener_register(lfd);
		if (name >= 0) {
			/* taken over: who else accepts on it is not known, no pool */
			listener_name_held(l, name, true);
			log_debug("fd %d: the listener's rendezvous name is free again: ours", lfd);
		}
	}
	pthread_mutex_unlock(fd_lock(lfd));
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
	sock_load_sockopts(c);
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
	/* The rendezvous costs a descriptor before even a Decline can go out: without it
	 * the client waits out its handshake timeout with its first bytes staged (a wrk
	 * request 2 s late against nginx at its limit), so at EMFILE the library gives
	 * descriptors back first (fd_pressure.c). */
	ufd = rdv_conn_connect(peer, (struct sockaddr *)&local);
	if (ufd == -EMFILE && smc_sock_fd_pressure(EMFILE))
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

/* What a connection reset at accept (abort_tcp: -1 from the steps above) counts as: a
 * client gone meanwhile, or a failed handshake. It goes to the application as a plain
 * TCP socket that reads ECONNRESET. */
static enum smc_reason reset_reason(enum smc_reason why)
{
	return why == SMC_REASON_PEER_CLOSED ? why : SMC_REASON_HANDSHAKE;
}

/* The end of an accept path's decision r (1: SMC; 0: plain TCP for why; -1: reset, see
 * reset_reason): a TCP socket is counted and tracked, final when it may never be
 * upgraded later. Returns 1 or 0. */
static int accept_settle(int nfd, int r, enum smc_reason why, bool final)
{
	if (r < 0) {
		r = 0;
		why = reset_reason(why);
	}
	if (r == 0) {
		fdtab_set(nfd, FD_TCP, NULL);
		if (final)
			fdtab_flags_set(nfd, FDF_TCP_FINAL);
		stats_conn(SMC_MODE_TCP, why);
	}
	return r;
}

/* A listener of a process that uses io_uring (io_uring_watch.h): a pooled connection
 * whose slot was offered before is served (the client has taken it as upgraded); every
 * other client is declined, in band or on its rendezvous, and stays TCP. */
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
	(void)accept_settle(nfd, r, why, false);
	return nfd;
}

/* Under a seccomp filter (sandbox_entry.c): a pooled connection whose slot was offered
 * before the filter is served (its client has taken it as upgraded); every other one is
 * plain TCP, and the library makes no call of its own for it. */
static int accept_sandboxed(int lfd, int nfd, const struct sockaddr *peer, int flags)
{
	int r = fdtab_kind(lfd) == FD_LISTEN && smc_enabled() ? accept_pooled(lfd, nfd, peer, flags)
							      : 0;

	if (r <= 0) { /* < 0: reset, the slot gone */
		smc_sock_created(nfd, peer->sa_family, SOCK_STREAM, 0);
		fdtab_flags_set(nfd, FDF_TCP_FINAL);
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
	if (nfd < 0) {
		int e = errno;

		if (!smc_sock_fd_pressure(e)) { /* fd_pressure.c */
			errno = e;
			return nfd;
		}
		plen = sizeof(peer);
		nfd = REAL(accept4)(fd, (struct sockaddr *)&peer, &plen, flags);
		if (nfd < 0)
			return nfd;
	}
	/* an accepted socket inherits the listener's timeouts and linger */
	fdtab_flags_reset(nfd, fdtab_flags(fd) & (FDF_SOCKOPTS | FDF_TCP_ONLY));
	copy_addr_out(&peer, plen, addr, len);
	if (sandbox_keeps_off())
		return accept_sandboxed(fd, nfd, (struct sockaddr *)&peer, flags);
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
	listener_claim_name(fd);
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
	if (accept_settle(nfd, r, why, true) && (fdtab_flags(fd) & FDF_TCP_ONLY))
		sock_tcp_only(nfd); /* it inherited the listener's SO_RCVLOWAT */
	return nfd;
}

void sock_listener_put(struct smc_listener *l)
{
	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		pool_set_free(l->pools);
		if (l->name_fd >= 0) {
			fd_own_close(l->name_fd);
			fd_budget_give(1);
		}
		free(l);
	}
}
