/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fdtab.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/io_uring_watch.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/base/real.h"
#include "core/base/rendezvous.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/ib/conn_ib.h"
#include "core/negotiate/handshake.h"
#include "core/negotiate/hs_ib.h"
#include "core/negotiate/negotiate.h"
#include "core/shm/shm.h"
#include "core/wire/clc.h"


void handshake_set_timeouts(int ufd)
{
	struct timeval tv = smc_cfg_handshake_timeout();

	REAL(setsockopt)(ufd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	REAL(setsockopt)(ufd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/*
 * How long a server's accept() waits for the client's next message before the rest of the
 * handshake goes to the progress thread (the connection then reaches the application
 * PENDING: its reads wait for the decision, its writes are staged, conn.h). An event
 * loop's every other client waits with accept(), and any local user can open a
 * connection whose rendezvous it answers slowly or never: a silent peer costs this much
 * and no more. The client's progress thread answers in microseconds on an idle host.
 */
#define HS_INLINE_WAIT_US 2000u

/* The Confirm is waited for while the client lives (see hs_flow_deadline). */
#define HS_CONFIRM_TICKS 15u

static void fd_nonblock(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFL);

	if (fl >= 0 && !(fl & O_NONBLOCK))
		REAL(fcntl)(fd, F_SETFL, fl | O_NONBLOCK);
}

static void fd_block(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFL);

	if (fl >= 0 && (fl & O_NONBLOCK))
		REAL(fcntl)(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* The rendezvous socket is nonblocking (hs_flow): a message that finds no room waits
 * for it, bounded by the handshake timeout as a blocking send was (a lost Confirm
 * would get the connection reset). */
static int hs_send(int ufd, const struct clc_msg *m, const int *fds, int nfds)
{
	uint8_t buf[CLC_MAX_LEN];
	ssize_t n = clc_encode(m, buf, sizeof(buf));
	int r;

	if (n < 0)
		return (int)n;
	r = rdv_send(ufd, buf, (size_t)n, fds, nfds);
	if (r == -EAGAIN) {
		struct pollfd pfd = { .fd = ufd, .events = POLLOUT };

		if (REAL(poll)(&pfd, 1, (int)smc_cfg.handshake_timeout_ms) == 1)
			r = rdv_send(ufd, buf, (size_t)n, fds, nfds);
	}
	if (r < 0)
		log_debug("rendezvous fd %d: sending a CLC message failed: %s", ufd, strerror(-r));
	return r;
}

static enum smc_reason reason_from_code(uint32_t code)
{
	if (code == CLC_DECL_PEERDECL)
		return SMC_REASON_PEER_CLOSED; /* the client closed its socket meanwhile */
	if (code == CLC_DECL_SH_FDLIMIT)
		return SMC_REASON_FD_LIMIT;
	if (code == CLC_DECL_SH_FORK)
		return SMC_REASON_FORK_PENDING;
	return code == CLC_DECL_MEM ? SMC_REASON_MEM_CAP : SMC_REASON_DECLINED;
}

static void hs_send_decline(int ufd, uint32_t diag)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_DECLINE };

	m.u.s_decl.diag = diag;
	(void)hs_send(ufd, &m, NULL, 0);
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		if (fds[i] >= 0)
			fd_own_close(fds[i]);
		fds[i] = -1;
	}
}

/* Receives one same-host message: a Decline (no descriptors) or `want_type` with
 * exactly `want_fds` descriptors. 0, or -errno (malformed, wrong type, wrong fds). */
static int hs_recv(int ufd, struct clc_msg *m, uint8_t want_type, int *fds, int want_fds)
{
	uint8_t buf[CLC_MAX_LEN];
	int nfds = 0, r;
	ssize_t n = rdv_recv(ufd, buf, sizeof(buf), fds, &nfds, want_fds);

	/* A peer that closes its end with a message of ours unread (a client that declines
	 * without reading our Accept) leaves ECONNRESET on our socket, which the kernel
	 * reports before the messages queued ahead of the close (unix_release_sock sets
	 * it; the datagram receive path reads the error first). Read, it is gone: what
	 * the peer sent last (its Decline) comes next, or the end. */
	if (n == -ECONNRESET)
		n = rdv_recv(ufd, buf, sizeof(buf), fds, &nfds, want_fds);
	if (n < 0)
		return (int)n;
	r = clc_decode(buf, (size_t)n, m);
	/* an SMC-R Proposal (SMC_TRANSPORT=ib, hs_ib.h) comes without descriptors */
	if (r == 0 && m->variant == CLC_SMCR && m->type == CLC_PROPOSAL &&
	    want_type == CLC_PROPOSAL)
		return nfds == 0 ? 0 : (close_fds(fds, nfds), -EPROTO);
	if (r == 0 && (m->variant != CLC_SAMEHOST ||
		       (m->type != CLC_DECLINE && m->type != want_type)))
		r = -EPROTO;
	if (r == 0 && nfds != (m->type == CLC_DECLINE ? 0 : want_fds))
		r = -EPROTO;
	if (r < 0)
		close_fds(fds, nfds);
	return r;
}

/* A doorbell received from the peer, kept out of the application's fd range and made
 * nonblocking: a peer passing a pipe that fills up must not block our writes. */
static int bell_take(int fd)
{
	fd_nonblock(fd);
	return fd_park(fd);
}

/* Ring sizes are powers of two (RFC 7609 compresses them that way). */
static uint32_t rmb_size_from(size_t want)
{
	uint32_t s = CLC_SH_RMB_MIN;

	while (s < want && s < CLC_SH_RMB_MAX)
		s <<= 1;
	return s;
}


/* ------------------------------------------------------------ client */

/* Fills the Proposal's addresses; under c->lock with the state PENDING. By key the
 * server proves itself in its Accept, before we hand anything over or decide anything;
 * otherwise its owner is checked here. 0 or the reason to decline with. */
static uint32_t client_prepare(struct smc_conn *c, int ufd, const struct hs_auth *auth,
			       struct clc_sh_proposal *p)
{
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);

	if (!auth->by_key && !rdv_peer_owns_tcp_peer(ufd, c->fd)) {
		log_info("fd %d: a process that does not own the server's socket connected to "
			 "our rendezvous name: ignored, waiting for the server", c->fd);
		return CLC_DECL_SH_CRED;
	}
	if (REAL(getsockname)(c->fd, (struct sockaddr *)&local, &llen) < 0 ||
	    REAL(getpeername)(c->fd, (struct sockaddr *)&peer, &plen) < 0 ||
	    clc_sh_set_addrs(p, (struct sockaddr *)&local, llen, (struct sockaddr *)&peer, plen) < 0)
		return CLC_DECL_SYNCERR;
	return 0;
}

/* Admission against the memory cap: the control page, which every connection uses; its
 * RMB's pages count as the server writes into them (shm.h). 0 or CLC_DECL_MEM. */
static uint32_t client_reserve(struct smc_conn *c)
{
	uint32_t diag = 0;

	pthread_mutex_lock(&c->lock);
	if (shm_reserve(SHM_HDR_SPACE) < 0)
		diag = CLC_DECL_MEM;
	else
		c->reserved = SHM_HDR_SPACE;
	pthread_mutex_unlock(&c->lock);
	return diag;
}

/* Sends the Proposal (with our doorbells unless by key). 0, a reason to decline with,
 * or UINT32_MAX when the application closed the connection meanwhile. */
static uint32_t client_propose(struct smc_conn *c, int ufd, const struct hs_auth *auth,
			       struct clc_msg *prop)
{
	int bells[2] = { c->rx_bell, c->tx_bell };
	uint32_t diag;

	/* c->fd is the application's: under c->lock it cannot be closed (and its number
	 * reused) while we read its addresses and its owner. */
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		return UINT32_MAX;
	}
	diag = client_prepare(c, ufd, auth, &prop->u.s_prop);
	pthread_mutex_unlock(&c->lock);
	if (!diag && !auth->by_key)
		diag = client_reserve(c);
	if (diag)
		return diag;
	if (hs_send(ufd, prop, auth->by_key ? NULL : bells, auth->by_key ? 0 : 2) < 0)
		return CLC_DECL_SYNCERR;
	return 0;
}

void hs_flow_init(struct hs_flow *f, struct smc_conn *c, int ufd, const struct hs_auth *auth)
{
	memset(f, 0, sizeof(*f));
	f->c = c;
	f->ufd = ufd;
	f->auth = *auth;
	f->bells[0] = f->bells[1] = -1;
	f->in[0] = f->in[1] = f->in[2] = -1;
	f->why = SMC_REASON_HANDSHAKE;
	f->result = -EPROTO;
}

void hs_flow_abandon(struct hs_flow *f)
{
	close_fds(f->bells, 2);
	close_fds(f->in, 3);
}

bool hs_flow_deadline(struct hs_flow *f)
{
	bool last = ++f->ticks >= (f->phase == HS_PHASE_CONFIRM ? HS_CONFIRM_TICKS : 1u);

	if (f->ticks == 1 && !last)
		log_info("fd %d: no CLC Confirm within %u ms of our Accept: waiting on while the "
			 "client lives", f->c->fd, smc_cfg.handshake_timeout_ms);
	return last;
}

/* Waits up to ms for ufd to become readable (data, EOF or an error): false when not. */
static bool hs_wait_readable(int ufd, unsigned ms)
{
	struct pollfd pfd = { .fd = ufd, .events = POLLIN };
	int r;

	do
		r = REAL(poll)(&pfd, 1, (int)ms);
	while (r < 0 && errno == EINTR);
	return r != 0;
}

/* The client's end when nothing more will be exchanged: c stays TCP for why (unless
 * something decided first). */
static int client_fail(struct hs_flow *f, enum smc_reason why)
{
	struct smc_conn *c = f->c;

	close_fds(f->in, 3);
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, why);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int client_decline(struct hs_flow *f, uint32_t diag, enum smc_reason why)
{
	hs_send_decline(f->ufd, diag);
	return client_fail(f, why);
}

int hs_client_refuse_now(struct hs_flow *f, enum smc_reason why, uint32_t diag)
{
	return client_decline(f, diag, why);
}

int hs_client_start(struct hs_flow *f, struct smc_conn *c, int ufd, const struct hs_auth *auth)
{
	struct clc_sh_proposal *p = &f->prop.u.s_prop;
	uint32_t diag;

	hs_flow_init(f, c, ufd, auth);
	f->phase = HS_PHASE_ACCEPT;
	if (conn_ib_wanted() && !auth->by_key)
		return hs_ib_client_rdv(c, ufd); /* SMC-R: its own exchange, blocking */
	handshake_set_timeouts(ufd);
	fd_nonblock(ufd);
	f->prop.variant = CLC_SAMEHOST;
	f->prop.type = CLC_PROPOSAL;
	p->proto = CLC_SAMEHOST_PROTO;
	p->c2s_size = rmb_size_from(smc_cfg.sndbuf);
	p->s2c_size = rmb_size_from(smc_cfg.rcvbuf);
	/* a secret (random.h): without one, no SMC for this connection */
	p->client_token = random_secret64();
	if (!p->client_token)
		return client_decline(f, CLC_DECL_INTERR, SMC_REASON_RESOURCES);
	diag = client_propose(c, ufd, auth, &f->prop);
	if (diag == UINT32_MAX) /* the application closed it: nothing to decide */
		return client_decline(f, CLC_DECL_PEERDECL, SMC_REASON_HANDSHAKE);
	if (diag == CLC_DECL_SYNCERR && auth->by_key)
		return -EACCES; /* nobody listens on ufd any more */
	/* Any local user can connect to our abstract name (/proc/net/unix lists it) before
	 * the server does: such a process is told nothing, and the server's connection,
	 * queued behind it, is still to come. */
	if (diag == CLC_DECL_SH_CRED)
		return -EACCES;
	if (diag)
		return client_decline(f, diag, diag == CLC_DECL_MEM ? SMC_REASON_MEM_CAP
								    : SMC_REASON_HANDSHAKE);
	return HS_WAIT;
}

int hs_client_step(struct hs_flow *f, bool final)
{
	struct smc_conn *c = f->c;
	const struct hs_auth *auth = &f->auth;
	struct clc_sh_proposal *p = &f->prop.u.s_prop;
	struct clc_msg acc, conf = { .variant = CLC_SAMEHOST, .type = CLC_CONFIRM };
	int bells[2] = { c->rx_bell, c->tx_bell };
	int *in = f->in; /* memfd, the server's rx and tx bells */
	struct shm_map map = { 0 };
	uint32_t diag;
	int r;

	r = hs_recv(f->ufd, &acc, CLC_ACCEPT, in, 3);
	if (r == -EAGAIN && !final)
		return HS_WAIT;
	if (r == -EMFILE)
		/* the Accept's descriptors found no free slot here: declined, whoever sent
		 * it (nothing of ours was handed over), and the server stays TCP too */
		return client_decline(f, CLC_DECL_SH_FDLIMIT, SMC_REASON_FD_LIMIT);
	/* by key, only an Accept with the proof comes from the server: a failure or a
	 * Decline here may be anybody's, and the server will answer on TCP */
	if (auth->by_key && (r < 0 || acc.type != CLC_ACCEPT || acc.u.s_acc.proof != auth->key)) {
		if (r == 0 && acc.type == CLC_ACCEPT)
			log_warn("fd %d: a process that did not read our TCP Proposal answered on "
				 "our rendezvous socket: ignored", c->fd);
		close_fds(in, 3);
		return -EACCES;
	}
	if (r < 0)
		/* The server may still send its Accept and then wait for our Confirm: without
		 * a word from us it would take our close for a client that went away after
		 * upgrading and reset a connection we go on with as plain TCP. */
		return client_decline(f, r == -EAGAIN ? CLC_DECL_TIMEOUT : CLC_DECL_SYNCERR,
				      SMC_REASON_HANDSHAKE);
	if (acc.type == CLC_DECLINE) {
		log_debug("fd %d: server declined SMC: %s", c->fd,
			  clc_decline_reason_str(acc.u.s_decl.diag));
		return client_fail(f, reason_from_code(acc.u.s_decl.diag));
	}
	if (auth->by_key && (diag = client_reserve(c)) != 0)
		return client_decline(f, diag, SMC_REASON_MEM_CAP);
	diag = clc_sh_check_accept(p, &acc.u.s_acc);
	if (diag) {
		log_warn("fd %d: invalid CLC Accept from the server: staying TCP", c->fd);
		return client_decline(f, diag, SMC_REASON_HANDSHAKE);
	}
	r = shm_attach(in[0], p->c2s_size, p->s2c_size, &map);
	if (r == 0)
		close_fds(in, 1); /* mapped: the number goes back before the program sees the
				   * connection active and opens its next file */
	if (r == -ENOMEM) /* no room to map it */
		return client_decline(f, CLC_DECL_MEM, SMC_REASON_RESOURCES);
	if (r < 0) {
		log_warn("fd %d: server's RMB region rejected (%s)", c->fd, strerror(-r));
		return client_decline(f, CLC_DECL_SH_FDS, SMC_REASON_HANDSHAKE);
	}
	/* before the program can see the connection active and open its next file: the
	 * stats server's socket is made once, at a low number for a moment */
	statsrv_ensure();
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		shm_detach(&map);
		return client_decline(f, CLC_DECL_PEERDECL, SMC_REASON_HANDSHAKE);
	}
	c->map = map;
	c->peer_rx_bell = bell_take(in[1]);
	c->peer_tx_bell = bell_take(in[2]);
	fd_budget_take(2);
	in[1] = in[2] = -1;
	conf.u.s_conf.client_token = p->client_token;
	conf.u.s_conf.server_token = acc.u.s_acc.server_token;
	/* The Confirm leaves before the connection turns active: once it is active the
	 * program may hand it to a new image (exec right after a nonblocking connect),
	 * which closes this rendezvous socket, and a server still waiting for the Confirm
	 * would take that for a client gone and reset the connection. If it is lost the
	 * server resets the TCP connection: both see it fail. */
	(void)hs_send(f->ufd, &conf, auth->by_key ? bells : NULL, auth->by_key ? 2 : 0);
	conn_activate(c);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int handshake_client(struct smc_conn *c, int ufd, const struct hs_auth *auth)
{
	struct hs_flow f;
	int r = hs_client_start(&f, c, ufd, auth);

	while (r == HS_WAIT)
		r = hs_client_step(&f, !hs_wait_readable(ufd, smc_cfg.handshake_timeout_ms));
	hs_flow_abandon(&f);
	return r;
}

/* ------------------------------------------------------------ server */

/*
 * The client takes the connection as upgraded the moment it reads our Accept, and its
 * Confirm follows at once unless its process is held up (a vCPU taken away for seconds
 * on a loaded host, a debugger). Giving up after one handshake timeout would then reset
 * a connection TCP would have served, so the Confirm is waited for while the client
 * lives: its close or exit ends the wait at once (EOF on the rendezvous socket, FIN or
 * RST on the TCP connection, looked at each step), and only a client that keeps both
 * open and never answers is reset, after HS_CONFIRM_TICKS handshake timeouts (the scale
 * of the watchdog a waiting call applies to an undecided handshake, conn.c).
 */

/* The TCP peer closed or reset: nobody will send a Confirm. */
static bool tcp_peer_closed(int fd)
{
	char b;
	ssize_t r = REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (r < 0)
		fdtab_owe_error(fd, errno); /* a reset taken is the program's */
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void handshake_server_decline(int tcp_fd, int ufd, const struct hs_auth *auth, uint32_t diag)
{
	struct clc_msg prop;
	int bells[2] = { -1, -1 };

	if (auth->by_key) {
		(void)neg_send_decline(tcp_fd, diag);
		return;
	}
	/* the Proposal first: a Decline before it would end the client's send, not its
	 * handshake; its doorbells are closed unused. One that could not be read (its
	 * doorbells found no free descriptor here) is declined all the same; one that does
	 * not come within accept()'s wait is answered by our close (the client stays TCP). */
	handshake_set_timeouts(ufd);
	fd_nonblock(ufd);
	if (!hs_wait_readable(ufd, HS_INLINE_WAIT_US / 1000u))
		return;
	if (hs_recv(ufd, &prop, CLC_PROPOSAL, bells, 2) == 0 && prop.type == CLC_DECLINE)
		return;
	close_fds(bells, 2);
	hs_send_decline(ufd, diag);
}

/* Before our Accept, a client negotiating by key trusts nothing that arrives on the
 * rendezvous socket: refusals go on the TCP connection, where it listens too. */
static void server_refuse(struct smc_conn *c, int ufd, const struct hs_auth *auth, uint32_t diag)
{
	if (auth->by_key)
		(void)neg_send_decline(c->fd, diag);
	else
		hs_send_decline(ufd, diag);
}

/* The Proposal came from the client: under abstract names by its addresses (its owner
 * was checked before, see handshake_server); by key, by the name the TCP Proposal gave
 * (rdv_token_listen). */
static bool server_trusts_proposal(struct smc_conn *c, const struct hs_auth *auth,
				   const struct clc_sh_proposal *p, uint32_t *diag)
{
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);

	if (auth->by_key)
		return true;
	if (REAL(getsockname)(c->fd, (struct sockaddr *)&local, &llen) < 0 ||
	    REAL(getpeername)(c->fd, (struct sockaddr *)&peer, &plen) < 0 ||
	    !clc_sh_addrs_match(p, (struct sockaddr *)&peer, plen, (struct sockaddr *)&local, llen)) {
		log_warn("fd %d: invalid CLC Proposal from the client: staying TCP", c->fd);
		*diag = CLC_DECL_SH_ADDR;
		return false;
	}
	return true;
}

/* The server's handshake ends with result r (f->why set). */
static int server_done(struct hs_flow *f, int r)
{
	if (r != 0)
		close_fds(f->bells, 2);
	f->result = r;
	return 0;
}

/* A refusal before our Accept: r, with why and the Decline for diag. */
static int server_refused(struct hs_flow *f, int r, enum smc_reason why, uint32_t diag)
{
	f->why = why;
	server_refuse(f->c, f->ufd, &f->auth, diag);
	return server_done(f, r);
}

static int server_on_confirm(struct hs_flow *f, bool final);

/* Waits for the Proposal, answers it with our Accept (then waits for the Confirm) or a
 * Decline. */
static int server_on_proposal(struct hs_flow *f, bool final)
{
	struct smc_conn *c = f->c;
	const struct hs_auth *auth = &f->auth;
	struct clc_msg acc = { .variant = CLC_SAMEHOST, .type = CLC_ACCEPT };
	struct clc_sh_proposal *p = &f->prop.u.s_prop;
	int nbells = auth->by_key ? 0 : 2; /* with the Proposal; by key with the Confirm */
	uint32_t diag = CLC_DECL_INTERR;
	int memfd, r;
	size_t reserve;

	r = hs_recv(f->ufd, &f->prop, CLC_PROPOSAL, f->bells, nbells);
	if (r == -EAGAIN && !final)
		return HS_WAIT;
	if (r == -EMFILE) /* the client's doorbells found no free slot here */
		return server_refused(f, -ECONNREFUSED, SMC_REASON_FD_LIMIT, CLC_DECL_SH_FDLIMIT);
	if (r < 0) {
		/* EOF: the client went away (it closed or exited) before answering; a
		 * timeout: it never did (the connection stays TCP) */
		if (r == -ECONNRESET)
			f->why = SMC_REASON_PEER_CLOSED;
		if (auth->by_key)
			(void)neg_send_decline(c->fd, CLC_DECL_SYNCERR);
		else if (r == -EAGAIN)
			hs_send_decline(f->ufd, CLC_DECL_TIMEOUT);
		return server_done(f, -EPROTO);
	}
	if (f->prop.type == CLC_DECLINE) {
		f->why = reason_from_code(f->prop.u.s_decl.diag);
		log_info("fd %d: client declined SMC: %s", c->fd,
			 clc_decline_reason_str(f->prop.u.s_decl.diag));
		return server_done(f, -ECONNREFUSED);
	}
	if (io_uring_in_use()) /* io_uring_watch.h: no new upgrade */
		return server_refused(f, -EPROTO, SMC_REASON_IO_URING, CLC_DECL_MODEUNSUPP);
	if (f->prop.variant == CLC_SMCR) {
		if (auth->by_key)
			return server_refused(f, -EPROTO, SMC_REASON_HANDSHAKE, CLC_DECL_MODEUNSUPP);
		fd_block(f->ufd); /* its own exchange, bounded by the socket's timeouts */
		return server_done(f, hs_ib_server_rdv(c, f->ufd, &f->prop, &f->why));
	}
	if (!server_trusts_proposal(c, auth, p, &diag))
		return server_refused(f, -EPROTO, SMC_REASON_HANDSHAKE, diag);
	/* a secret (random.h): without one, no SMC for this connection */
	acc.u.s_acc.server_token = random_secret64();
	if (!acc.u.s_acc.server_token)
		return server_refused(f, -EIO, SMC_REASON_RESOURCES, CLC_DECL_INTERR);
	/* admitted for the control page; our RMB counts as the client fills it (shm.h) */
	reserve = SHM_HDR_SPACE;
	if (shm_reserve(reserve) < 0)
		return server_refused(f, -ENOMEM, SMC_REASON_MEM_CAP, CLC_DECL_MEM);
	c->reserved = reserve;
	/* dir[0] (client->server) is the server's RMB */
	memfd = shm_create(p->c2s_size, p->s2c_size, &c->map);
	if (memfd < 0) {
		enum smc_reason why = fd_budget_reason_for(memfd);

		return server_refused(f, memfd, why, why == SMC_REASON_FD_LIMIT ? CLC_DECL_SH_FDLIMIT
										: CLC_DECL_INTERR);
	}
	acc.u.s_acc.proto = CLC_SAMEHOST_PROTO;
	acc.u.s_acc.c2s_size = p->c2s_size;
	acc.u.s_acc.s2c_size = p->s2c_size;
	acc.u.s_acc.proof = auth->by_key ? auth->key : 0;
	{
		int out[3] = { memfd, c->rx_bell, c->tx_bell };

		r = hs_send(f->ufd, &acc, out, 3);
	}
	fd_own_close(memfd);
	if (r < 0) {
		/* the client closed (or exited) while we prepared the Accept */
		if (r == -EPIPE || r == -ECONNRESET)
			f->why = SMC_REASON_PEER_CLOSED;
		if (auth->by_key)
			(void)neg_send_decline(c->fd, CLC_DECL_SYNCERR);
		return server_done(f, -ECONNREFUSED); /* the client never saw it: plain TCP */
	}
	f->acc = acc;
	f->phase = HS_PHASE_CONFIRM;
	f->ticks = 0;
	return server_on_confirm(f, false);
}

/* Waits for the Confirm: our Accept is out, so from here the only way back is a reset
 * (-ECONNABORTED). */
static int server_on_confirm(struct hs_flow *f, bool final)
{
	struct smc_conn *c = f->c;
	const struct hs_auth *auth = &f->auth;
	struct clc_msg conf;
	int r = hs_recv(f->ufd, &conf, CLC_CONFIRM, auth->by_key ? f->bells : NULL,
			auth->by_key ? 2 : 0);

	if (r == -EAGAIN && !final) {
		if (!tcp_peer_closed(c->fd))
			return HS_WAIT;
		r = -ECONNRESET; /* its TCP end closed first: it went away, as at EOF */
	}
	f->why = SMC_REASON_HANDSHAKE;
	if (r == 0 && conf.type == CLC_DECLINE) {
		f->why = reason_from_code(conf.u.s_decl.diag);
		log_info("fd %d: client declined SMC after our Accept: %s", c->fd,
			 clc_decline_reason_str(conf.u.s_decl.diag));
		return server_done(f, -ECONNREFUSED); /* the client stays TCP: so do we */
	}
	if (r == -ECONNRESET) {
		/* EOF: the client closed or exited after our Accept, an ordinary end (a load
		 * generator stopped mid-run), not a protocol error. It may have taken the
		 * connection as upgraded, so it is reset all the same. */
		f->why = SMC_REASON_PEER_CLOSED;
		log_info("fd %d: the client went away before its CLC Confirm: resetting the "
			 "connection", c->fd);
		return server_done(f, -ECONNABORTED);
	}
	if (r < 0 || clc_sh_check_confirm(&f->prop.u.s_prop, &f->acc.u.s_acc, &conf.u.s_conf) != 0) {
		log_warn("fd %d: no valid CLC Confirm from the client: resetting the connection",
			 c->fd);
		return server_done(f, -ECONNABORTED);
	}
	c->peer_rx_bell = bell_take(f->bells[0]);
	c->peer_tx_bell = bell_take(f->bells[1]);
	f->bells[0] = f->bells[1] = -1;
	fd_budget_take(2);
	f->why = SMC_REASON_NONE;
	return server_done(f, 0);
}

int hs_server_start(struct hs_flow *f, struct smc_conn *c, int ufd, const struct hs_auth *auth)
{
	hs_flow_init(f, c, ufd, auth);
	f->phase = HS_PHASE_PROPOSAL;
	handshake_set_timeouts(ufd);
	fd_nonblock(ufd);
	return hs_server_step(f, false);
}

int hs_server_step(struct hs_flow *f, bool final)
{
	if (f->phase == HS_PHASE_PROPOSAL)
		return server_on_proposal(f, final);
	return server_on_confirm(f, final);
}

int hs_server_refuse_now(struct hs_flow *f, enum smc_reason why, uint32_t diag)
{
	if (f->phase != HS_PHASE_PROPOSAL)
		return HS_WAIT;
	log_debug("fd %d: the handshake ends unfinished: plain TCP (%s)", f->c->fd,
		  stats_reason_name(why));
	return server_refused(f, -ECONNREFUSED, why, diag);
}

void handshake_client_decline(int ufd, uint32_t diag)
{
	handshake_set_timeouts(ufd);
	fd_nonblock(ufd);
	hs_send_decline(ufd, diag);
}

int hs_server_start_inline(struct hs_flow *f, struct smc_conn *c, int ufd,
			   const struct hs_auth *auth)
{
	uint64_t until = clock_now_us() + HS_INLINE_WAIT_US;
	int r = hs_server_start(f, c, ufd, auth);

	while (r == HS_WAIT) {
		uint64_t now = clock_now_us();
		struct pollfd pfd = { .fd = ufd, .events = POLLIN };

		if (now >= until)
			break;
		/* poll's milliseconds would round a 2 ms budget to nothing or double it */
		if (REAL(ppoll)(&pfd, 1, &(struct timespec){ 0, (long)(until - now) * 1000 },
				NULL) == 0)
			break;
		r = hs_server_step(f, false);
	}
	return r;
}

int hs_server_finish_inline(struct hs_flow *f)
{
	uint64_t until = clock_now_ms() + smc_cfg.handshake_timeout_ms;
	int r = HS_WAIT, phase;

	for (;;) {
		while (r == HS_WAIT && f->phase == HS_PHASE_CONFIRM) {
			uint64_t now = clock_now_ms();

			if (now >= until || !hs_wait_readable(f->ufd, (unsigned)(until - now)))
				break;
			r = hs_server_step(f, false);
		}
		if (r != HS_WAIT)
			return r;
		phase = f->phase;
		r = hs_server_step(f, true);
		/* The last look found the Proposal, which came just now, and answered it:
		 * the client is committed from our Accept on, so its Confirm is waited for
		 * as above (a connection kept TCP here would reach a client that took it as
		 * upgraded: its first byte aborts the connection there). */
		if (r != HS_WAIT || phase == HS_PHASE_CONFIRM)
			return r;
		until = clock_now_ms() + smc_cfg.handshake_timeout_ms;
	}
}

int handshake_server(struct smc_conn *c, int ufd, const struct hs_auth *auth,
		     enum smc_reason *why)
{
	struct hs_flow f;
	int r = hs_server_start(&f, c, ufd, auth);

	while (r == HS_WAIT)
		r = hs_server_step(&f, !hs_wait_readable(ufd, smc_cfg.handshake_timeout_ms) &&
					       hs_flow_deadline(&f));
	*why = f.why;
	return f.result;
}
