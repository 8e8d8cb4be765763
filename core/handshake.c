/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/clc.h"
#include "core/config.h"
#include "core/conn.h"
#include "core/fdpark.h"
#include "core/handshake.h"
#include "core/log.h"
#include "core/real.h"
#include "core/rendezvous.h"
#include "core/shm.h"


static void hs_set_timeouts(int ufd)
{
	struct timeval tv = {
		.tv_sec = smc_cfg.handshake_timeout_ms / 1000,
		.tv_usec = (smc_cfg.handshake_timeout_ms % 1000) * 1000,
	};

	REAL(setsockopt)(ufd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	REAL(setsockopt)(ufd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
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

static uint64_t random_token(void)
{
	uint64_t t = 0;

	while (t == 0)
		if (getrandom(&t, sizeof(t), 0) != sizeof(t))
			t = (uint64_t)(uintptr_t)&t ^ (uint64_t)getpid() << 32;
	return t;
}

/* ------------------------------------------------------------ client */

void handshake_client(struct smc_conn *c, int ufd)
{
	struct clc_msg prop = { .variant = CLC_SAMEHOST, .type = CLC_PROPOSAL }, acc;
	struct clc_msg conf = { .variant = CLC_SAMEHOST, .type = CLC_CONFIRM };
	struct clc_sh_proposal *p = &prop.u.s_prop;
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);
	int out[2] = { c->rx_bell, c->tx_bell };
	int in[3] = { -1, -1, -1 }; /* memfd, the server's rx and tx bells */
	struct shm_map map = { 0 };
	enum smc_reason why = SMC_REASON_HANDSHAKE;
	uint32_t diag = CLC_DECL_SYNCERR;
	int r;

	hs_set_timeouts(ufd);
	p->proto = CLC_SAMEHOST_PROTO;
	p->c2s_size = rmb_size_from(smc_cfg.sndbuf);
	p->s2c_size = rmb_size_from(smc_cfg.rcvbuf);
	p->client_token = random_token();
	/* c->fd is the application's: under c->lock it cannot be closed (and its number
	 * reused) while we read its addresses and pass it as our proof. */
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		diag = CLC_DECL_PEERDECL;
		goto decline;
	}
	if (!rdv_peer_owns_tcp_peer(ufd, c->fd)) {
		pthread_mutex_unlock(&c->lock);
		log_warn("fd %d: the process on our rendezvous name does not own the server's "
			 "socket: staying TCP", c->fd);
		diag = CLC_DECL_SH_CRED;
		goto decline;
	}
	if (REAL(getsockname)(c->fd, (struct sockaddr *)&local, &llen) < 0 ||
	    REAL(getpeername)(c->fd, (struct sockaddr *)&peer, &plen) < 0 ||
	    clc_sh_set_addrs(p, (struct sockaddr *)&local, llen, (struct sockaddr *)&peer, plen) < 0) {
		pthread_mutex_unlock(&c->lock);
		goto decline;
	}
	if (shm_reserve(p->s2c_size) < 0) {
		pthread_mutex_unlock(&c->lock);
		why = SMC_REASON_MEM_CAP;
		diag = CLC_DECL_MEM;
		goto decline;
	}
	c->reserved = p->s2c_size;
	r = hs_send(ufd, &prop, out, 2);
	pthread_mutex_unlock(&c->lock);
	if (r < 0 || hs_recv(ufd, &acc, CLC_ACCEPT, in, 3) < 0)
		goto fail;
	if (acc.type == CLC_DECLINE) {
		why = reason_from_code(acc.u.s_decl.diag);
		log_debug("fd %d: server declined SMC: %s", c->fd,
			  clc_decline_reason_str(acc.u.s_decl.diag));
		goto fail;
	}
	diag = clc_sh_check_accept(p, &acc.u.s_acc);
	if (diag) {
		log_warn("fd %d: invalid CLC Accept from the server: staying TCP", c->fd);
		goto decline;
	}
	r = shm_attach(in[0], p->c2s_size, p->s2c_size, &map);
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
	in[1] = in[2] = -1;
	conn_activate(c);
	pthread_mutex_unlock(&c->lock);
	close_fds(in, 1);
	conf.u.s_conf.client_token = p->client_token;
	conf.u.s_conf.server_token = acc.u.s_acc.server_token;
	/* If this is lost the server resets the TCP connection: both see it fail. */
	(void)hs_send(ufd, &conf, NULL, 0);
	return;
decline:
	hs_send_decline(ufd, diag);
fail:
	close_fds(in, 3);
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, why);
	pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------ server */

int handshake_server(struct smc_conn *c, int ufd, enum smc_reason *why)
{
	struct clc_msg prop, acc = { .variant = CLC_SAMEHOST, .type = CLC_ACCEPT }, conf;
	struct clc_sh_proposal *p = &prop.u.s_prop;
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);
	int in[2] = { -1, -1 }; /* the client's rx and tx bells */
	int memfd, r;
	size_t reserve;

	*why = SMC_REASON_HANDSHAKE;
	hs_set_timeouts(ufd);
	r = hs_recv(ufd, &prop, CLC_PROPOSAL, in, 2);
	if (r < 0) {
		/* EOF: the client went away (it closed or exited) before answering */
		if (r == -ECONNRESET)
			*why = SMC_REASON_PEER_CLOSED;
		return -EPROTO;
	}
	if (prop.type == CLC_DECLINE) {
		*why = reason_from_code(prop.u.s_decl.diag);
		log_info("fd %d: client declined SMC: %s", c->fd,
			 clc_decline_reason_str(prop.u.s_decl.diag));
		return -ECONNREFUSED;
	}
	if (REAL(getsockname)(c->fd, (struct sockaddr *)&local, &llen) < 0 ||
	    REAL(getpeername)(c->fd, (struct sockaddr *)&peer, &plen) < 0 ||
	    !clc_sh_addrs_match(p, (struct sockaddr *)&peer, plen, (struct sockaddr *)&local, llen)) {
		log_warn("fd %d: invalid CLC Proposal from the client: staying TCP", c->fd);
		close_fds(in, 2);
		hs_send_decline(ufd, CLC_DECL_SH_ADDR);
		return -EPROTO;
	}
	if (!rdv_peer_owns_tcp_peer(ufd, c->fd)) {
		log_warn("fd %d: the process on the client's rendezvous name does not own the "
			 "client's socket: staying TCP", c->fd);
		close_fds(in, 2);
		hs_send_decline(ufd, CLC_DECL_SH_CRED);
		return -EPROTO;
	}
	/* the region holds both rings: all of it counts against our cap */
	reserve = (size_t)p->c2s_size + p->s2c_size;
	if (shm_reserve(reserve) < 0) {
		*why = SMC_REASON_MEM_CAP;
		close_fds(in, 2);
		hs_send_decline(ufd, CLC_DECL_MEM);
		return -ENOMEM;
	}
	c->reserved = reserve;
	/* dir[0] (client->server) is the server's RMB */
	memfd = shm_create(p->c2s_size, p->s2c_size, &c->map);
	if (memfd < 0) {
		*why = SMC_REASON_RESOURCES;
		close_fds(in, 2);
		hs_send_decline(ufd, CLC_DECL_INTERR);
		return memfd;
	}
	c->peer_rx_bell = bell_take(in[0]);
	c->peer_tx_bell = bell_take(in[1]);
	acc.u.s_acc.proto = CLC_SAMEHOST_PROTO;
	acc.u.s_acc.c2s_size = p->c2s_size;
	acc.u.s_acc.s2c_size = p->s2c_size;
	acc.u.s_acc.server_token = random_token();
	{
		int out[3] = { memfd, c->rx_bell, c->tx_bell };

		r = hs_send(ufd, &acc, out, 3);
	}
	REAL(close)(memfd);
	if (r < 0)
		return -ECONNREFUSED; /* the client never saw the Accept: plain TCP */
	r = hs_recv(ufd, &conf, CLC_CONFIRM, NULL, 0);
	if (r == 0 && conf.type == CLC_DECLINE) {
		*why = reason_from_code(conf.u.s_decl.diag);
		log_info("fd %d: client declined SMC after our Accept: %s", c->fd,
			 clc_decline_reason_str(conf.u.s_decl.diag));
		return -ECONNREFUSED; /* the client stays TCP: so do we */
	}
	if (r < 0 || clc_sh_check_confirm(p, &acc.u.s_acc, &conf.u.s_conf) != 0) {
		log_warn("fd %d: no valid CLC Confirm from the client: resetting the connection",
			 c->fd);
		return -ECONNABORTED;
	}
	*why = SMC_REASON_NONE;
	return 0;
}
