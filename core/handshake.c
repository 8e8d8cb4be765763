/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/clc.h"
#include "core/config.h"
#include "core/conn.h"
#include "core/conn_ib.h"
#include "core/fd_budget.h"
#include "core/fdpark.h"
#include "core/handshake.h"
#include "core/io_uring_watch.h"
#include "core/log.h"
#include "core/negotiate.h"
#include "core/random.h"
#include "core/real.h"
#include "core/rendezvous.h"
#include "core/shm.h"
#include "core/statsrv.h"


void handshake_set_timeouts(int ufd)
{
	struct timeval tv = smc_cfg_handshake_timeout();

	REAL(setsockopt)(ufd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	REAL(setsockopt)(ufd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/*
 * How long a server waits for the client's Proposal inside the application's accept():
 * an event loop's every other client waits with it. The client's progress thread sits
 * in epoll on its name and answers our connect in microseconds; 500 ms leaves a busy
 * host room to schedule it (a few of the scheduler's periods with dozens of runnable
 * threads per CPU) while a client that owns its socket and stays silent holds the loop
 * a quarter of the default handshake timeout instead of all of it. Past it nothing was
 * handed over, so the connection stays TCP (the client sees our close and does too).
 * Never longer than SMC_HANDSHAKE_TIMEOUT_MS.
 */
#define HS_ACCEPT_PROPOSAL_MS 500u

/* Bounds the next read on ufd by the Proposal's wait inside accept(). Not under
 * SMC_TRANSPORT=ib: a client that proposes SMC-R opens its RDMA device and queries its
 * GIDs before its Proposal (conn_ib_local_offer), which can take longer than the whole
 * budget on a slow host; such a server waits as any handshake does. */
static void hs_set_accept_wait(int ufd)
{
	unsigned ms = smc_cfg.handshake_timeout_ms < HS_ACCEPT_PROPOSAL_MS
			      ? smc_cfg.handshake_timeout_ms : HS_ACCEPT_PROPOSAL_MS;
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (conn_ib_wanted())
		return;
	REAL(setsockopt)(ufd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static int hs_send(int ufd, const struct clc_msg *m, const int *fds, int nfds)
{
	uint8_t buf[CLC_MAX_LEN];
	ssize_t n = clc_encode(m, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	return rdv_send(ufd, buf, (size_t)n, fds, nfds);
}

static enum smc_reason reason_from_code(uint32_t code)
{
	if (code == CLC_DECL_PEERDECL)
		return SMC_REASON_PEER_CLOSED; /* the client closed its socket meanwhile */
	if (code == CLC_DECL_SH_FDLIMIT)
		return SMC_REASON_FD_LIMIT;
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
			REAL(close)(fds[i]);
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

	if (n < 0)
		return (int)n;
	r = clc_decode(buf, (size_t)n, m);
	/* an SMC-R Proposal (SMC_TRANSPORT=ib, conn_ib.h) comes without descriptors */
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
	int fl = REAL(fcntl)(fd, F_GETFL);

	if (fl >= 0 && !(fl & O_NONBLOCK))
		REAL(fcntl)(fd, F_SETFL, fl | O_NONBLOCK);
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
		log_warn("fd %d: a process that does not own the server's socket connected to "
			 "our rendezvous name: ignored, waiting for the server", c->fd);
		return CLC_DECL_SH_CRED;
	}
	if (REAL(getsockname)(c->fd, (struct sockaddr *)&local, &llen) < 0 ||
	    REAL(getpeername)(c->fd, (struct sockaddr *)&peer, &plen) < 0 ||
	    clc_sh_set_addrs(p, (struct sockaddr *)&local, llen, (struct sockaddr *)&peer, plen) < 0)
		return CLC_DECL_SYNCERR;
	return 0;
}

/* Our share of the memory cap: the ring we read. 0 or CLC_DECL_MEM. */
static uint32_t client_reserve(struct smc_conn *c, const struct clc_sh_proposal *p)
{
	uint32_t diag = 0;

	pthread_mutex_lock(&c->lock);
	if (shm_reserve(p->s2c_size) < 0)
		diag = CLC_DECL_MEM;
	else
		c->reserved = p->s2c_size;
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
		diag = client_reserve(c, &prop->u.s_prop);
	if (diag)
		return diag;
	if (hs_send(ufd, prop, auth->by_key ? NULL : bells, auth->by_key ? 0 : 2) < 0)
		return CLC_DECL_SYNCERR;
	return 0;
}

int handshake_client(struct smc_conn *c, int ufd, const struct hs_auth *auth)
{
	struct clc_msg prop = { .variant = CLC_SAMEHOST, .type = CLC_PROPOSAL }, acc;
	struct clc_msg conf = { .variant = CLC_SAMEHOST, .type = CLC_CONFIRM };
	struct clc_sh_proposal *p = &prop.u.s_prop;
	int bells[2] = { c->rx_bell, c->tx_bell };
	int in[3] = { -1, -1, -1 }; /* memfd, the server's rx and tx bells */
	struct shm_map map = { 0 };
	enum smc_reason why = SMC_REASON_HANDSHAKE;
	uint32_t diag;
	int r;

	if (conn_ib_wanted() && !auth->by_key)
		return conn_ib_client_rdv(c, ufd);
	handshake_set_timeouts(ufd);
	p->proto = CLC_SAMEHOST_PROTO;
	p->c2s_size = rmb_size_from(smc_cfg.sndbuf);
	p->s2c_size = rmb_size_from(smc_cfg.rcvbuf);
	/* a secret (random.h): without one, no SMC for this connection */
	p->client_token = random_secret64();
	if (!p->client_token) {
		why = SMC_REASON_RESOURCES;
		diag = CLC_DECL_INTERR;
		goto decline;
	}
	diag = client_propose(c, ufd, auth, &prop);
	if (diag == UINT32_MAX) {
		diag = CLC_DECL_PEERDECL; /* the application closed it: nothing to decide */
		goto decline;
	}
	if (diag == CLC_DECL_SYNCERR && auth->by_key)
		goto not_the_server; /* nobody listens on ufd any more */
	/* Any local user can connect to our abstract name (/proc/net/unix lists it) before
	 * the server does: such a process is told nothing, and the server's connection,
	 * queued behind it, is still to come. */
	if (diag == CLC_DECL_SH_CRED)
		goto not_the_server;
	if (diag) {
		why = diag == CLC_DECL_MEM ? SMC_REASON_MEM_CAP : SMC_REASON_HANDSHAKE;
		goto decline;
	}
	r = hs_recv(ufd, &acc, CLC_ACCEPT, in, 3);
	if (r == -EMFILE) {
		/* the Accept's descriptors found no free slot here: declined, whoever sent
		 * it (nothing of ours was handed over), and the server stays TCP too */
		why = SMC_REASON_FD_LIMIT;
		diag = CLC_DECL_SH_FDLIMIT;
		goto decline;
	}
	/* by key, only an Accept with the proof comes from the server: a failure or a
	 * Decline here may be anybody's, and the server will answer on TCP */
	if (auth->by_key && (r < 0 || acc.type != CLC_ACCEPT || acc.u.s_acc.proof != auth->key)) {
		if (r == 0 && acc.type == CLC_ACCEPT)
			log_warn("fd %d: a process that did not read our TCP Proposal answered on "
				 "our rendezvous socket: ignored", c->fd);
		goto not_the_server;
	}
	if (r < 0) {
		/* The server may still send its Accept and then wait for our Confirm: without
		 * a word from us it would take our close for a client that went away after
		 * upgrading and reset a connection we go on with as plain TCP. */
		diag = r == -EAGAIN ? CLC_DECL_TIMEOUT : CLC_DECL_SYNCERR;
		goto decline;
	}
	if (acc.type == CLC_DECLINE) {
		why = reason_from_code(acc.u.s_decl.diag);
		log_debug("fd %d: server declined SMC: %s", c->fd,
			  clc_decline_reason_str(acc.u.s_decl.diag));
		goto fail;
	}
	if (auth->by_key && (diag = client_reserve(c, p)) != 0) {
		why = SMC_REASON_MEM_CAP;
		goto decline;
	}
	diag = clc_sh_check_accept(p, &acc.u.s_acc);
	if (diag) {
		log_warn("fd %d: invalid CLC Accept from the server: staying TCP", c->fd);
		goto decline;
	}
	r = shm_attach(in[0], p->c2s_size, p->s2c_size, &map);
	if (r == -ENOMEM) {
		why = SMC_REASON_RESOURCES; /* no room to map it */
		diag = CLC_DECL_MEM;
		goto decline;
	}
	if (r < 0) {
		log_warn("fd %d: server's RMB region rejected (%s)", c->fd, strerror(-r));
		diag = CLC_DECL_SH_FDS;
		goto decline;
	}
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		shm_detach(&map);
		diag = CLC_DECL_PEERDECL;
		goto decline;
	}
	c->map = map;
	c->peer_rx_bell = bell_take(in[1]);
	c->peer_tx_bell = bell_take(in[2]);
	fd_budget_take(2);
	in[1] = in[2] = -1;
	conn_activate(c);
	pthread_mutex_unlock(&c->lock);
	statsrv_ensure();
	close_fds(in, 1);
	conf.u.s_conf.client_token = p->client_token;
	conf.u.s_conf.server_token = acc.u.s_acc.server_token;
	/* If this is lost the server resets the TCP connection: both see it fail. */
	(void)hs_send(ufd, &conf, auth->by_key ? bells : NULL, auth->by_key ? 2 : 0);
	return 0;
not_the_server:
	close_fds(in, 3);
	return -EACCES;
decline:
	hs_send_decline(ufd, diag);
fail:
	close_fds(in, 3);
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, why);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ------------------------------------------------------------ server */

/*
 * The client takes the connection as upgraded the moment it reads our Accept, and its
 * Confirm follows at once unless its process is held up (a vCPU taken away for seconds
 * on a loaded host, a debugger). Giving up after one handshake timeout would then reset
 * a connection TCP would have served, so the Confirm is waited for while the client
 * lives: its close or exit ends the wait at once (EOF on the rendezvous socket, FIN or
 * RST on the TCP connection), and only a client that keeps both open and never answers
 * is reset, after HS_CONFIRM_TICKS handshake timeouts (the scale of the watchdog a
 * waiting call applies to an undecided handshake, conn.c).
 */
#define HS_CONFIRM_TICKS 15u

/* The TCP peer closed or reset: nobody will send a Confirm. */
static bool tcp_peer_closed(int fd)
{
	char b;
	ssize_t r = REAL(recv)(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int server_recv_confirm(struct smc_conn *c, int ufd, const struct hs_auth *auth,
			       struct clc_msg *conf, int *bells)
{
	for (unsigned tick = 1;; tick++) {
		int r = hs_recv(ufd, conf, CLC_CONFIRM, auth->by_key ? bells : NULL,
				auth->by_key ? 2 : 0);

		if (r != -EAGAIN || tick >= HS_CONFIRM_TICKS || tcp_peer_closed(c->fd))
			return r;
		if (tick == 1)
			log_info("fd %d: no CLC Confirm within %u ms of our Accept: waiting on "
				 "while the client lives", c->fd, smc_cfg.handshake_timeout_ms);
	}
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
	 * doorbells found no free descriptor here) is declined all the same. */
	handshake_set_timeouts(ufd);
	hs_set_accept_wait(ufd);
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

int handshake_server(struct smc_conn *c, int ufd, const struct hs_auth *auth, bool in_accept,
		     enum smc_reason *why)
{
	struct clc_msg prop, acc = { .variant = CLC_SAMEHOST, .type = CLC_ACCEPT }, conf;
	struct clc_sh_proposal *p = &prop.u.s_prop;
	int bells[2] = { -1, -1 }; /* the client's rx and tx bells */
	int nbells = auth->by_key ? 0 : 2; /* with the Proposal; by key with the Confirm */
	uint32_t diag = CLC_DECL_INTERR;
	int memfd, r;
	size_t reserve;

	*why = SMC_REASON_HANDSHAKE;
	handshake_set_timeouts(ufd);
	if (in_accept)
		hs_set_accept_wait(ufd);
	r = hs_recv(ufd, &prop, CLC_PROPOSAL, bells, nbells);
	if (in_accept)
		handshake_set_timeouts(ufd); /* the rest as in any handshake */
	if (r == -EMFILE) {
		/* the client's doorbells found no free slot here */
		*why = SMC_REASON_FD_LIMIT;
		server_refuse(c, ufd, auth, CLC_DECL_SH_FDLIMIT);
		return -ECONNREFUSED;
	}
	if (r < 0) {
		/* EOF: the client went away (it closed or exited) before answering */
		if (r == -ECONNRESET)
			*why = SMC_REASON_PEER_CLOSED;
		if (auth->by_key)
			(void)neg_send_decline(c->fd, CLC_DECL_SYNCERR);
		return -EPROTO;
	}
	if (prop.type == CLC_DECLINE) {
		*why = reason_from_code(prop.u.s_decl.diag);
		log_info("fd %d: client declined SMC: %s", c->fd,
			 clc_decline_reason_str(prop.u.s_decl.diag));
		return -ECONNREFUSED;
	}
	if (io_uring_in_use()) { /* io_uring_watch.h: no new upgrade */
		*why = SMC_REASON_IO_URING;
		close_fds(bells, 2);
		server_refuse(c, ufd, auth, CLC_DECL_MODEUNSUPP);
		return -EPROTO;
	}
	if (prop.variant == CLC_SMCR) {
		if (!auth->by_key)
			return conn_ib_server_rdv(c, ufd, &prop, why);
		server_refuse(c, ufd, auth, CLC_DECL_MODEUNSUPP);
		return -EPROTO;
	}
	if (!server_trusts_proposal(c, auth, p, &diag)) {
		close_fds(bells, 2);
		server_refuse(c, ufd, auth, diag);
		return -EPROTO;
	}
	/* a secret (random.h): without one, no SMC for this connection */
	acc.u.s_acc.server_token = random_secret64();
	if (!acc.u.s_acc.server_token) {
		*why = SMC_REASON_RESOURCES;
		close_fds(bells, 2);
		server_refuse(c, ufd, auth, CLC_DECL_INTERR);
		return -EIO;
	}
	/* the region holds both rings: all of it counts against our cap */
	reserve = (size_t)p->c2s_size + p->s2c_size;
	if (shm_reserve(reserve) < 0) {
		*why = SMC_REASON_MEM_CAP;
		close_fds(bells, 2);
		server_refuse(c, ufd, auth, CLC_DECL_MEM);
		return -ENOMEM;
	}
	c->reserved = reserve;
	/* dir[0] (client->server) is the server's RMB */
	memfd = shm_create(p->c2s_size, p->s2c_size, &c->map);
	if (memfd < 0) {
		*why = fd_budget_reason_for(memfd);
		close_fds(bells, 2);
		server_refuse(c, ufd, auth, *why == SMC_REASON_FD_LIMIT ? CLC_DECL_SH_FDLIMIT
									: CLC_DECL_INTERR);
		return memfd;
	}
	acc.u.s_acc.proto = CLC_SAMEHOST_PROTO;
	acc.u.s_acc.c2s_size = p->c2s_size;
	acc.u.s_acc.s2c_size = p->s2c_size;
	acc.u.s_acc.proof = auth->by_key ? auth->key : 0;
	{
		int out[3] = { memfd, c->rx_bell, c->tx_bell };

		r = hs_send(ufd, &acc, out, 3);
	}
	REAL(close)(memfd);
	if (r < 0) {
		/* the client closed (or exited) while we prepared the Accept */
		if (r == -EPIPE || r == -ECONNRESET)
			*why = SMC_REASON_PEER_CLOSED;
		close_fds(bells, 2);
		if (auth->by_key)
			(void)neg_send_decline(c->fd, CLC_DECL_SYNCERR);
		return -ECONNREFUSED; /* the client never saw the Accept: plain TCP */
	}
	r = server_recv_confirm(c, ufd, auth, &conf, bells);
	if (r == 0 && conf.type == CLC_DECLINE) {
		*why = reason_from_code(conf.u.s_decl.diag);
		log_info("fd %d: client declined SMC after our Accept: %s", c->fd,
			 clc_decline_reason_str(conf.u.s_decl.diag));
		close_fds(bells, 2);
		return -ECONNREFUSED; /* the client stays TCP: so do we */
	}
	if (r == -ECONNRESET) {
		/* EOF: the client closed or exited after our Accept, an ordinary end (a load
		 * generator stopped mid-run), not a protocol error. It may have taken the
		 * connection as upgraded, so it is reset all the same. */
		*why = SMC_REASON_PEER_CLOSED;
		log_info("fd %d: the client went away before its CLC Confirm: resetting the "
			 "connection", c->fd);
		close_fds(bells, 2);
		return -ECONNABORTED;
	}
	if (r < 0 || clc_sh_check_confirm(p, &acc.u.s_acc, &conf.u.s_conf) != 0) {
		log_warn("fd %d: no valid CLC Confirm from the client: resetting the connection",
			 c->fd);
		close_fds(bells, 2);
		return -ECONNABORTED;
	}
	c->peer_rx_bell = bell_take(bells[0]);
	c->peer_tx_bell = bell_take(bells[1]);
	fd_budget_take(2);
	*why = SMC_REASON_NONE;
	return 0;
}
