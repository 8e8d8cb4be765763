/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R's CLC exchange (hs_ib.h): the messages, on the rendezvous socket or in-band on
 * the TCP connection; the link and connection they set up are core/ib/conn_ib.c's.
 */
#include "core/negotiate/hs_ib.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/rendezvous.h"
#include "core/conn/conn.h"
#include "core/conn/statsrv.h"
#include "core/ib/conn_ib.h"
#include "core/ib/conn_ib_msg.h"
#include "core/ib/ib_lgr.h"
#include "core/negotiate/handshake.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"

/* ------------------------------------------------------------ messages */

static int rdv_msg_send(int ufd, const struct clc_msg *m, uint8_t credits)
{
	uint8_t buf[CONN_IB_MSG_CAP];
	ssize_t n = conn_ib_msg_encode(m, credits, buf);

	if (n < 0)
		return (int)n;
	return rdv_send(ufd, buf, (size_t)n, NULL, 0);
}

static void rdv_decline(int ufd, uint32_t diag)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_DECLINE };

	m.u.s_decl.diag = diag;
	(void)rdv_msg_send(ufd, &m, 0);
}

static int rdv_msg_recv(int ufd, struct clc_msg *m, uint8_t *credits)
{
	uint8_t buf[CONN_IB_MSG_CAP];
	int fds[1], nfds = 0;
	ssize_t n = rdv_recv(ufd, buf, sizeof(buf), fds, &nfds, 0);

	if (n < 0)
		return (int)n;
	return conn_ib_msg_decode(buf, (size_t)n, m, credits);
}

/* Where a handshake runs: the same-host rendezvous socket (SMCU Declines, datagrams)
 * or, in-band, the TCP connection itself (SMC-R Declines, a byte stream that the
 * application owns after the handshake: negotiate.h frames it). */
struct hs_chan {
	int fd;
	bool tcp;
};

static int chan_send(const struct hs_chan *ch, const struct clc_msg *m, uint8_t credits)
{
	uint8_t buf[CONN_IB_MSG_CAP];
	ssize_t n;

	if (!ch->tcp)
		return rdv_msg_send(ch->fd, m, credits);
	n = conn_ib_msg_encode(m, credits, buf);
	return n < 0 ? (int)n : neg_send_all(ch->fd, buf, (size_t)n);
}

static int chan_recv(const struct hs_chan *ch, struct clc_msg *m, uint8_t *credits)
{
	uint8_t buf[NEG_MSG_CAP];
	size_t len = 0;
	int r;

	if (!ch->tcp)
		return rdv_msg_recv(ch->fd, m, credits);
	r = neg_recv_msg(ch->fd, buf, &len);
	if (r < 0)
		return r;
	r = conn_ib_msg_decode(buf, len, m, credits);
	/* in-band, only SMC-R messages (a kernel would not understand ours) */
	return r < 0 || m->variant == CLC_SMCR ? r : -EBADMSG;
}

static void chan_decline(const struct hs_chan *ch, uint32_t diag)
{
	if (ch->tcp)
		(void)neg_send_decline(ch->fd, diag);
	else
		rdv_decline(ch->fd, diag);
}

static uint32_t decline_diag(const struct clc_msg *m)
{
	return m->variant == CLC_SMCR ? m->u.r_decl.diag : m->u.s_decl.diag;
}

static enum smc_reason reason_of(uint32_t diag)
{
	if (diag == CLC_DECL_MEM)
		return SMC_REASON_MEM_CAP;
	if (diag == CLC_DECL_PEERDECL)
		return SMC_REASON_PEER_CLOSED;
	return SMC_REASON_DECLINED;
}

/* ------------------------------------------------------------ client, same host */

static bool client_still_pending(struct smc_conn *c, bool check_owner, int ufd)
{
	bool ok;

	pthread_mutex_lock(&c->lock);
	ok = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING;
	/* c->fd is the application's: under c->lock it cannot be closed meanwhile */
	if (ok && check_owner && !rdv_peer_owns_tcp_peer(ufd, c->fd)) {
		log_warn("fd %d: the process on our rendezvous name does not own the server's "
			 "socket: staying TCP", c->fd);
		ok = false;
	}
	pthread_mutex_unlock(&c->lock);
	return ok;
}

static void client_fallback(struct smc_conn *c, enum smc_reason why)
{
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, why);
	pthread_mutex_unlock(&c->lock);
}

/* Makes c ACTIVE over RDMA and sends the Confirm; false when the application closed it
 * meanwhile. In-band the Confirm goes out under c->lock: c->fd is the application's. */
static bool client_activate(struct smc_conn *c, const struct hs_chan *ch,
			    struct conn_ib_setup *s, const struct clc_msg *conf)
{
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING) {
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	conn_ib_setup_install(c, s);
	conn_activate(c);
	/* If this is lost the server resets the TCP connection: both see it fail. */
	(void)chan_send(ch, conf, s->mine.credits);
	pthread_mutex_unlock(&c->lock);
	statsrv_ensure();
	return true;
}

/* Declines after the server's Accept and stays TCP. In-band only while c is still
 * PENDING (c->fd is the application's); the rendezvous socket is ours. */
static void client_decline(struct smc_conn *c, const struct hs_chan *ch, uint32_t diag)
{
	bool pending;

	pthread_mutex_lock(&c->lock);
	pending = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING;
	if (pending || !ch->tcp)
		chan_decline(ch, diag);
	if (pending)
		conn_fallback(c, diag == CLC_DECL_MEM ? SMC_REASON_MEM_CAP : SMC_REASON_HANDSHAKE);
	pthread_mutex_unlock(&c->lock);
}

/* The client's steps from the server's answer on: Decline -> TCP; Accept -> link,
 * connection, Confirm -> ACTIVE; anything else is declined. */
static void client_answered(struct smc_conn *c, const struct hs_chan *ch,
			    const struct clc_msg *acc, uint8_t credits)
{
	struct conn_ib_setup s = { 0 };
	struct clc_msg conf;
	uint32_t diag;

	if (acc->type == CLC_DECLINE) {
		diag = decline_diag(acc);
		log_debug("fd %d: server declined SMC-R: %s", c->fd, clc_decline_reason_str(diag));
		client_fallback(c, reason_of(diag));
		return;
	}
	if (acc->variant != CLC_SMCR || acc->type != CLC_ACCEPT) {
		diag = CLC_DECL_SYNCERR;
		goto decline;
	}
	diag = conn_ib_setup_client(c, acc, credits, &s);
	if (diag)
		goto decline;
	conn_ib_setup_params(&s, CLC_CONFIRM, &conf);
	if (!client_activate(c, ch, &s, &conf)) {
		diag = CLC_DECL_PEERDECL;
		goto decline;
	}
	conn_ib_setup_end(&s);
	return;
decline:
	conn_ib_setup_end(&s);
	client_decline(c, ch, diag);
}

int hs_ib_client_rdv(struct smc_conn *c, int ufd)
{
	struct clc_msg prop = { .variant = CLC_SMCR, .type = CLC_PROPOSAL, .flags = CLC_PATH_SMCR };
	const struct hs_chan ch = { .fd = ufd, .tcp = false };
	struct clc_msg acc;
	uint8_t credits = 0;
	int rc;

	handshake_set_timeouts(ufd);
	if (!client_still_pending(c, true, ufd)) {
		rdv_decline(ufd, CLC_DECL_SH_CRED);
		client_fallback(c, SMC_REASON_HANDSHAKE);
		return 0;
	}
	rc = hs_ib_local_offer(&prop.u.r_prop.lcl);
	if (rc < 0) {
		log_debug("fd %d: SMC_TRANSPORT=ib without a usable RDMA device (%s): staying TCP",
			  c->fd, strerror(-rc));
		rdv_decline(ufd, CLC_DECL_NOSMCRDEV);
		client_fallback(c, SMC_REASON_NOT_LOCAL); /* here: no RDMA device */
		return 0;
	}
	if (rdv_msg_send(ufd, &prop, 0) < 0 || rdv_msg_recv(ufd, &acc, &credits) < 0) {
		client_fallback(c, SMC_REASON_HANDSHAKE);
		return 0;
	}
	client_answered(c, &ch, &acc, credits);
	return 0;
}

/* ------------------------------------------------------------ client, in-band */

int hs_ib_local_offer(struct clc_smcr_local *lcl)
{
	int rc = progress_ib_init();

	return rc < 0 ? rc : ib_lgr_local(lcl);
}

int hs_ib_client_inband(struct smc_conn *c, const uint8_t *buf, size_t len)
{
	const struct hs_chan ch = { .fd = c->fd, .tcp = true };
	struct clc_msg acc;
	uint8_t credits = 0;
	int rc = conn_ib_msg_decode(buf, len, &acc, &credits);

	if (rc < 0 || acc.variant != CLC_SMCR || acc.type != CLC_ACCEPT) {
		log_warn("fd %d: malformed SMC-R Accept from the server (%s)", c->fd,
			 strerror(rc < 0 ? -rc : EPROTO));
		return rc < 0 ? rc : -EPROTO;
	}
	client_answered(c, &ch, &acc, credits);
	return 0;
}

/* ------------------------------------------------------------ server, same host */

/* The server's steps after the client's SMC-R Proposal m: Accept, then the Confirm or a
 * Decline. As hs_ib_server_rdv. */
static int server_exchange(struct smc_conn *c, const struct hs_chan *ch,
			   const struct clc_msg *m, enum smc_reason *why)
{
	struct clc_msg acc, conf;
	struct conn_ib_setup s = { 0 };
	uint8_t credits = 0;
	uint32_t diag;
	int rc;

	progress_ib_init();
	rc = conn_ib_setup_server(c, m, &s);
	if (rc < 0)
		goto refuse;
	conn_ib_setup_params(&s, CLC_ACCEPT, &acc);
	if (chan_send(ch, &acc, s.mine.credits) < 0) {
		conn_ib_setup_end(&s);
		/* the client never saw the Accept: plain TCP; in-band part of it may be in
		 * the stream: reset */
		return ch->tcp ? -ECONNABORTED : -ECONNREFUSED;
	}
	rc = chan_recv(ch, &conf, &credits);
	if (rc == 0 && conf.type == CLC_DECLINE) {
		diag = decline_diag(&conf);
		log_info("fd %d: client declined SMC-R after our Accept: %s", c->fd,
			 clc_decline_reason_str(diag));
		*why = reason_of(diag);
		conn_ib_setup_end(&s);
		return -ECONNREFUSED;
	}
	if (rc < 0 || conf.variant != CLC_SMCR || conf.type != CLC_CONFIRM ||
	    conn_ib_setup_confirm(c, &conf, credits, &s) < 0) {
		log_warn("fd %d: no valid SMC-R Confirm from the client (%s): resetting the "
			 "connection", c->fd, rc < 0 ? strerror(-rc) : "invalid");
		conn_ib_setup_end(&s);
		return -ECONNABORTED;
	}
	conn_ib_setup_install(c, &s);
	conn_ib_setup_end(&s);
	*why = SMC_REASON_NONE;
	return 0;
refuse:
	diag = conn_ib_diag_of(rc);
	log_debug("fd %d: no SMC-R for this client (%s): staying TCP", c->fd, strerror(-rc));
	conn_ib_setup_end(&s);
	chan_decline(ch, diag);
	/* SMC_REASON_NOT_LOCAL here: this side has no usable RDMA device */
	*why = diag == CLC_DECL_MEM ? SMC_REASON_MEM_CAP
	       : diag == CLC_DECL_NOSMCRDEV ? SMC_REASON_NOT_LOCAL : SMC_REASON_RESOURCES;
	return -ECONNREFUSED;
}

int hs_ib_server_rdv(struct smc_conn *c, int ufd, const struct clc_msg *m, enum smc_reason *why)
{
	const struct hs_chan ch = { .fd = ufd, .tcp = false };

	*why = SMC_REASON_HANDSHAKE;
	if (smc_cfg.transport == SMC_TRANSPORT_SHM) {
		rdv_decline(ufd, CLC_DECL_MODEUNSUPP);
		*why = SMC_REASON_DECLINED;
		return -ECONNREFUSED;
	}
	if (!rdv_peer_owns_tcp_peer(ufd, c->fd)) {
		log_warn("fd %d: the process on the client's rendezvous name does not own the "
			 "client's socket: staying TCP", c->fd);
		rdv_decline(ufd, CLC_DECL_SH_CRED);
		return -EPROTO;
	}
	return server_exchange(c, &ch, m, why);
}

int hs_ib_server_inband(struct smc_conn *c, const struct clc_msg *m, enum smc_reason *why)
{
	const struct hs_chan ch = { .fd = c->fd, .tcp = true };

	*why = SMC_REASON_HANDSHAKE;
	return server_exchange(c, &ch, m, why);
}
