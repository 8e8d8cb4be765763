/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The connection engine over SMC-R: see conn_ib.h.
 */
#include "core/ib/conn_ib.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/conn/conn.h"
#include "core/conn/transport.h"
#include "core/ib/ib_lgr.h"
#include "core/ib/ib_link.h"
#include "core/shm/shm.h"
#include "core/wire/ib_proto.h"

/* Largest peer RMB we register a mirror for (SMC_MEM_CAP bounds the total anyway). */
#define CONN_IB_MAX_PEER_RMB (64u << 20)

struct conn_ib {
	struct smc_conn *c;
	struct ib_conn *ic;
	struct shm_hdr *hdr;     /* private: sleeper counts and sequences only */
	/* ic may be freed by the progress thread once closed: the data path holds this
	 * for reading while it uses ic, the close for writing. */
	pthread_rwlock_t use;
	bool closed;             /* ic handed back (ib_conn_close) */
	bool orphan;             /* forked child: the verbs objects are the parent's */
	smc_cursor cons_told;    /* c->rx_cons the transport knows */
	smc_cursor prod_told;    /* c->tx_prod the transport knows */
};

/* ------------------------------------------------------------ wakeups */

/* Progress thread, link lock held: wake our own waiters (only sleepers: a busy
 * connection costs no syscall). The waiter counts itself, issues a full fence and then
 * reads the transport state under the link lock, so one of the two sees the other. */
static void on_ib_event(struct ib_conn *ic, unsigned ev, void *arg)
{
	struct conn_ib *ci = arg;
	struct smc_conn *c = ci->c;

	(void)ic;
	/* The epoll emulation's edge generations (wait.c) read the peer's cursors in the
	 * control block: over RDMA they count the transport's events instead (conn.c
	 * reads its cursors from the transport, never from there). */
	if (ev & (IB_EV_RX | IB_EV_ERR))
		__atomic_add_fetch(&ci->hdr->dir[0].prod, 1, __ATOMIC_RELEASE);
	if (ev & (IB_EV_TX | IB_EV_ERR))
		__atomic_add_fetch(&ci->hdr->dir[1].cons, 1, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (ev & IB_EV_ERR) {
		bell_ring(c->rx_bell);
		bell_ring(c->tx_bell);
		return;
	}
	if ((ev & IB_EV_RX) && __atomic_load_n(&ci->hdr->dir[0].r_sleepers, __ATOMIC_RELAXED))
		bell_ring(c->rx_bell);
	if ((ev & IB_EV_TX) && __atomic_load_n(&ci->hdr->dir[1].w_sleepers, __ATOMIC_RELAXED))
		bell_ring(c->tx_bell);
}

static struct conn_ib *ci_new(struct smc_conn *c)
{
	struct conn_ib *ci = calloc(1, sizeof(*ci));

	if (!ci)
		return NULL;
	if (posix_memalign((void **)&ci->hdr, 64, sizeof(*ci->hdr)) != 0) {
		free(ci);
		return NULL;
	}
	memset(ci->hdr, 0, sizeof(*ci->hdr));
	ci->c = c;
	pthread_rwlock_init(&ci->use, NULL);
	return ci;
}

static void ci_free(struct conn_ib *ci)
{
	pthread_rwlock_destroy(&ci->use);
	free(ci->hdr);
	free(ci);
}

/* ------------------------------------------------------------ data path */

static void conn_ib_activate(struct smc_conn *c)
{
	struct conn_ib *ci = c->ib;

	ci->hdr->side_refs[c->side] = 1;
	c->map.hdr = ci->hdr; /* side_cpu, side_refs; map.base stays NULL: nothing mapped */
	c->rx = &ci->hdr->dir[0];
	c->tx = &ci->hdr->dir[1];
	c->rx_ring = ib_conn_rx_ring(ci->ic);
	c->rx_size = ib_conn_rx_size(ci->ic);
	c->tx_ring = ib_conn_tx_ring(ci->ic);
	c->tx_size = ib_conn_tx_size(ci->ic);
	ci->cons_told = ci->prod_told = 0;
	c->mode = SMC_MODE_IB;
}

/* Takes the use lock; false (and the connection reads as aborted) when ic is gone. */
static bool ci_enter(struct smc_conn *c)
{
	struct conn_ib *ci = c->ib;

	pthread_rwlock_rdlock(&ci->use);
	if (ci->closed || ci->orphan) {
		pthread_rwlock_unlock(&ci->use);
		c->aborted = true;
		return false;
	}
	return true;
}

static void ci_leave(struct smc_conn *c)
{
	pthread_rwlock_unlock(&c->ib->use);
}

static int64_t aborted_if_neg(struct smc_conn *c, int64_t v)
{
	if (v < 0)
		c->aborted = true;
	return v;
}

static int64_t conn_ib_rx_used(struct smc_conn *c)
{
	int64_t v;

	if (!ci_enter(c))
		return -1;
	v = ib_conn_rx_used(c->ib->ic);
	ci_leave(c);
	return aborted_if_neg(c, v);
}

static int64_t conn_ib_tx_free(struct smc_conn *c)
{
	int64_t v;

	if (!ci_enter(c))
		return -1;
	v = ib_conn_tx_free(c->ib->ic);
	ci_leave(c);
	return aborted_if_neg(c, v);
}

static int conn_ib_tx_unwritten(struct smc_conn *c)
{
	struct conn_ib *ci = c->ib;
	int64_t untold, v;

	if (!ci_enter(c))
		return 0;
	untold = cursor_diff(__atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED), ci->prod_told,
			     c->tx_size);
	v = ib_conn_tx_unwritten(ci->ic) + (untold > 0 ? untold : 0);
	ci_leave(c);
	return (int)v;
}

static void ib_rx_published(struct smc_conn *c)
{
	struct conn_ib *ci = c->ib;
	smc_cursor cons = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
	int64_t n = cursor_diff(cons, ci->cons_told, c->rx_size);

	if (n <= 0 || !ci_enter(c))
		return;
	ib_conn_rx_consumed(ci->ic, (uint32_t)n);
	ci->cons_told = cons;
	ci_leave(c);
}

static void ib_tx_published(struct smc_conn *c)
{
	struct conn_ib *ci = c->ib;
	smc_cursor prod = __atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED);
	int64_t n = cursor_diff(prod, ci->prod_told, c->tx_size);

	if (n <= 0 || !ci_enter(c))
		return;
	ib_conn_tx_produced(ci->ic, (uint32_t)n);
	ci->prod_told = prod;
	ci_leave(c);
}

static void conn_ib_tx_blocked(struct smc_conn *c)
{
	if (!ci_enter(c))
		return;
	ib_conn_tx_blocked(c->ib->ic);
	ci_leave(c);
}

static bool conn_ib_rx_eof(struct smc_conn *c)
{
	bool eof, ab;

	if (!ci_enter(c))
		return true;
	eof = ib_conn_rx_eof(c->ib->ic);
	ab = ib_conn_aborted(c->ib->ic);
	ci_leave(c);
	if (ab)
		c->aborted = true;
	return eof;
}

static bool conn_ib_tx_dead(struct smc_conn *c)
{
	bool dead, ab;

	if (!ci_enter(c))
		return true;
	dead = ib_conn_tx_dead(c->ib->ic);
	ab = ib_conn_aborted(c->ib->ic);
	ci_leave(c);
	if (ab)
		c->aborted = true;
	return dead;
}

static void conn_ib_shutdown_wr(struct smc_conn *c)
{
	if (!ci_enter(c))
		return;
	ib_conn_shutdown_wr(c->ib->ic);
	ci_leave(c);
}

/* conn_downgrade's leave (ib_conn_go_tcp): announces our consumer cursor and the end of
 * our RDMA stream, then waits up to wait_ns for the peer's answer. */
static enum conn_leave conn_ib_go_tcp(struct smc_conn *c, uint64_t wait_ns)
{
	enum ib_tcp_answer a;
	uint64_t t0;

	ib_rx_published(c); /* the cursor the CDC carries is the one we stopped at */
	if (!ci_enter(c))
		return CONN_GONE;
	a = ib_conn_go_tcp(c->ib->ic);
	t0 = clock_now_ns();
	while (a == IB_TCP_ANNOUNCED) {
		bool final;
		enum ib_tcp_answer b;

		final = clock_now_ns() - t0 >= wait_ns;
		b = ib_conn_tcp_answer(c->ib->ic, final);
		if (b != IB_TCP_WAITING) {
			a = b;
			break;
		}
		REAL(poll)(NULL, 0, 1);
	}
	ci_leave(c);
	switch (a) {
	case IB_TCP_PEER_FIRST:
		return CONN_SECOND;
	case IB_TCP_CROSSED:
		return CONN_CROSSED;
	case IB_TCP_GONE:
		return CONN_GONE;
	default:
		return CONN_LEFT;
	}
}

/* The peer went back to TCP: *peer_cons is where our re-send starts. */
static bool conn_ib_peer_went_tcp(struct smc_conn *c, smc_cursor *peer_cons)
{
	bool went;

	if (!ci_enter(c))
		return false;
	went = ib_conn_peer_went_tcp(c->ib->ic, peer_cons);
	ci_leave(c);
	return went;
}

static void ci_close(struct conn_ib *ci, bool abort)
{
	pthread_rwlock_wrlock(&ci->use);
	if (!ci->closed && !ci->orphan && ci->ic)
		ib_conn_close(ci->ic, abort);
	ci->closed = true;
	pthread_rwlock_unlock(&ci->use);
}

/* The last fd of this process closed, or the connection went back to TCP. */
static void conn_ib_release(struct smc_conn *c, bool abort)
{
	ci_close(c->ib, abort);
}

static void conn_ib_free(struct smc_conn *c)
{
	struct conn_ib *ci = c->ib;

	if (!ci)
		return;
	ci_close(ci, true);
	memset(&c->map, 0, sizeof(c->map));
	c->rx = c->tx = NULL;
	c->ib = NULL;
	c->tp = &conn_transport_shm;
	ci_free(ci);
}

/* In a forked child: every RDMA connection is unusable there (ib_lgr.h). */
static void conn_ib_atfork_child(struct smc_conn *c)
{
	if (!c->ib)
		return;
	c->ib->orphan = true;
	pthread_rwlock_init(&c->ib->use, NULL);
	c->aborted = true;
}

/* Nothing in the shared sense: an abort over RDMA reaches the peer as the link's (the
 * TCP channel's reset follows at close). */
static void ib_abort(struct smc_conn *c)
{
	(void)c;
}

/* CDC_CONN_CLOSED (or the abort), and our own sleepers: the peer's bells are not ours */
static void ib_closed(struct smc_conn *c, bool abort)
{
	conn_ib_release(c, abort);
	bell_ring_peer(c->peer_rx_bell);
	bell_ring_peer(c->peer_tx_bell);
}

/* the sleeper counts of the private control block are the notify callback's: ring both */
static void ib_wake_own(struct smc_conn *c)
{
	conn_wake_local(c);
}

static bool ib_peer_went_tcp(struct smc_conn *c)
{
	smc_cursor cons;

	/* the leaver's close follows its flag (conn_downgrade) */
	return conn_ib_peer_went_tcp(c, &cons);
}

/* the CDC_WENT_TCP's cursor; over RDMA there are no rewinds */
static bool ib_resend_from(struct smc_conn *c, smc_cursor *cons, smc_cursor *base)
{
	if (!conn_ib_peer_went_tcp(c, cons))
		return false;
	*base = *cons;
	return true;
}

/* The peer's answer to our CDC_WENT_TCP: its progress thread answers, whatever its
 * program does. */
#define IB_LEAVE_ANSWER_NS 3000000000ull

/* A CDC carries our cursors and CDC_WENT_TCP (whatever we produced goes in the RMB
 * first), and the peer answers, so that both ends know which of them re-sends. */
static enum conn_leave ib_leave(struct smc_conn *c)
{
	return conn_ib_go_tcp(c, IB_LEAVE_ANSWER_NS);
}

/* The readiness peeks (transport.h): an impossible count reads as ready. */
static int64_t ib_rx_used_peek(struct smc_conn *c)
{
	int64_t d = conn_ib_rx_used(c);

	return d < 0 || d > c->rx_size ? 1 : d;
}

static int64_t ib_tx_free_peek(struct smc_conn *c)
{
	int64_t d = c->tx_size - conn_ib_tx_free(c);

	return d < 0 || d > c->tx_size ? c->tx_size : c->tx_size - d;
}

/* the window policy decides when the peer hears (cdc.h): not the end of a copy */
static void ib_rx_published_at(struct smc_conn *c, bool last)
{
	(void)last;
	ib_rx_published(c);
}

/* RDMA WRITE(s), then a CDC */
static void ib_tx_published_at(struct smc_conn *c, bool last)
{
	(void)last;
	ib_tx_published(c);
}

/* A quarter of the ring, the window policy's period (cdc.h): the reader starts on the
 * first quarter while the writer copies the rest, at one WRITE and CDC per quarter. */
static size_t ib_publish_chunk(uint32_t ring_size)
{
	size_t q = ring_size / 4;

	return q > CONN_PUBLISH_CHUNK ? q : CONN_PUBLISH_CHUNK;
}

const struct conn_transport conn_transport_ib = {
	.mode = SMC_MODE_IB,
	.store_kinds = false,     /* the NIC reads the registered buffer */
	.tcp_ordered = false,
	.process_bound = true,
	.orphans = false,       /* the link drains at exit (exit_drain.c) */
	.activate = conn_ib_activate,
	.rx_used = conn_ib_rx_used,
	.tx_free = conn_ib_tx_free,
	.rx_used_peek = ib_rx_used_peek,
	.tx_free_peek = ib_tx_free_peek,
	.rx_published = ib_rx_published_at,
	.tx_published = ib_tx_published_at,
	.tx_rewind = NULL,        /* SMC-R's cursors only go forward (RFC 7609) */
	.publish_chunk = ib_publish_chunk,
	.tx_blocked = conn_ib_tx_blocked,
	.rx_eof = conn_ib_rx_eof,
	.tx_dead = conn_ib_tx_dead,
	.shutdown_wr = conn_ib_shutdown_wr,
	.tx_unwritten = conn_ib_tx_unwritten,
	.free = conn_ib_free,
	.abort = ib_abort,
	.closed = ib_closed,
	.wake_own = ib_wake_own,
	.release = conn_ib_release,
	.fork_child = conn_ib_atfork_child,
	.peer_went_tcp = ib_peer_went_tcp,
	.resend_from = ib_resend_from,
	.leave = ib_leave,
};

/* ------------------------------------------------------------ setting one up */

bool conn_ib_wanted(void)
{
	return smc_cfg.transport == SMC_TRANSPORT_IB;
}

/* RFC 7609 sizes: powers of two from 16 KiB. */
static uint32_t rmb_size_for(size_t want)
{
	uint32_t s = clc_uncompress_rmb_size(0);

	while (s < want && s < CONN_IB_MAX_PEER_RMB)
		s <<= 1;
	return s;
}

uint32_t conn_ib_diag_of(int rc)
{
	if (rc == -ENODEV)
		return CLC_DECL_NOSMCRDEV;
	if (rc == -ENOBUFS || rc == -ENOMEM)
		return CLC_DECL_MEM;
	if (rc == -ENOENT)
		return CLC_DECL_SYNCERR;
	return CLC_DECL_INTERR;
}

void conn_ib_setup_end(struct conn_ib_setup *s)
{
	if (s->ci) {
		if (s->ci->ic)
			ib_conn_close(s->ci->ic, true);
		ci_free(s->ci);
		s->ci = NULL;
	}
	if (s->link)
		ib_lgr_put(s->link);
	s->link = NULL;
}

/* Creates the connection on s->link and fills our parameters. 0 or -errno. */
static int setup_conn(struct smc_conn *c, struct conn_ib_setup *s)
{
	struct clc_smcr_local me;
	int rc;

	rc = ib_lgr_local(&me);
	if (rc < 0)
		return rc;
	s->ci = ci_new(c);
	if (!s->ci)
		return -ENOMEM;
	rc = ib_conn_create(s->link, rmb_size_for(smc_cfg.rcvbuf), on_ib_event, s->ci,
			    &s->ci->ic);
	if (rc < 0) {
		s->ci->ic = NULL;
		return rc;
	}
	ib_link_local_params(s->link, &s->mine);
	memcpy(s->mine.peer_id, me.peer_id, CLC_PEER_ID_LEN);
	ib_conn_local_rmb(s->ci->ic, &s->rmb);
	return 0;
}

void conn_ib_setup_params(const struct conn_ib_setup *s, uint8_t type, struct clc_msg *m)
{
	memset(m, 0, sizeof(*m));
	ib_params_to_clc(&s->mine, &s->rmb, type, s->first, m);
}

uint32_t conn_ib_setup_client(struct smc_conn *c, const struct clc_msg *acc, uint8_t credits,
			      struct conn_ib_setup *s)
{
	struct ib_link_params peer;
	struct ib_rmb_params prmb;
	uint32_t diag = ib_params_from_clc(acc, CONN_IB_MAX_PEER_RMB, &peer, &prmb);
	int rc;

	if (diag) {
		log_warn("fd %d: invalid SMC-R Accept: %s", c->fd, clc_decline_reason_str(diag));
		return diag;
	}
	peer.credits = credits;
	s->first = (acc->flags & CLC_FLAG_FIRST_CONTACT) != 0;
	rc = ib_lgr_get_client(&peer, s->first, &s->link);
	if (rc < 0) {
		s->link = NULL;
		return conn_ib_diag_of(rc);
	}
	if (s->first && (rc = ib_lgr_connect(s->link, &peer, false)) < 0) {
		log_warn("fd %d: SMC-R link setup failed: %s", c->fd, strerror(-rc));
		return rc == -EINVAL ? CLC_DECL_CNFERR : CLC_DECL_INTERR;
	}
	rc = setup_conn(c, s);
	if (rc == 0)
		rc = ib_conn_set_peer(s->ci->ic, &prmb);
	return rc < 0 ? conn_ib_diag_of(rc) : 0;
}

int conn_ib_setup_server(struct smc_conn *c, const struct clc_msg *m, struct conn_ib_setup *s)
{
	int rc = ib_lgr_get_server(m->u.r_prop.lcl.peer_id, m->u.r_prop.lcl.gid, &s->link,
				   &s->first);

	if (rc < 0) {
		s->link = NULL;
		return rc;
	}
	return setup_conn(c, s);
}

int conn_ib_setup_confirm(struct smc_conn *c, const struct clc_msg *conf, uint8_t credits,
			  struct conn_ib_setup *s)
{
	struct ib_link_params peer;
	struct ib_rmb_params prmb;
	uint32_t diag = ib_params_from_clc(conf, CONN_IB_MAX_PEER_RMB, &peer, &prmb);
	bool first = (conf->flags & CLC_FLAG_FIRST_CONTACT) != 0;
	int rc;

	if (diag || first != s->first) {
		log_warn("fd %d: invalid SMC-R Confirm (%s)", c->fd,
			 diag ? clc_decline_reason_str(diag) : "first contact differs");
		return -EPROTO;
	}
	peer.credits = credits;
	if (s->first && (rc = ib_lgr_connect(s->link, &peer, true)) < 0)
		return rc;
	return ib_conn_set_peer(s->ci->ic, &prmb);
}

void conn_ib_setup_install(struct smc_conn *c, struct conn_ib_setup *s)
{
	c->ib = s->ci;
	c->tp = &conn_transport_ib;
	s->ci = NULL;
}
