/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport: one RC QP per peer (a link), its completion channel, CDC traffic
 * with receive-queue credits, and the publish step (RDMA WRITEs + CDC SEND). See
 * ib_link.h.
 */
#include "core/base/clock.h"
#include "core/ib/ib_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/log.h"
#include "core/base/random.h"
#include "core/base/real.h"
#include "core/base/stats.h"

/* wr_id: kind in the top bits, slot index below */
#define WRID_RECV (1ull << 60)
#define WRID_SEND (2ull << 60)
#define WRID_WRITE (3ull << 60)
#define WRID_PING (4ull << 60)  /* keepalive: the low bits carry its send-queue mark */
#define WRID_KIND(w) ((w) & (0xfull << 60))
#define WRID_SLOT(w) ((uint32_t)(w))
#define WRID_LOW(w) ((w) & ((1ull << 60) - 1))

#define MS 1000000ull /* ns */

#define SQ_MAX 1024u

/* The start PSN: not a secret (the queue pairs are connected to one known peer, which
 * the link's handshake checked): a weak value will do (random.h). */
static uint32_t random_u32(void)
{
	return (uint32_t)random_weak64();
}

/* ------------------------------------------------------------------ creation */

static int post_recv(struct ib_link *l, uint32_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(l->rbuf + (size_t)slot * IB_MSG_SLOT),
		.length = IB_MSG_SLOT,
		.lkey = l->rbuf_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = WRID_RECV | slot, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(l->qp, &wr, &bad);
}

static int alloc_buffers(struct ib_link *l)
{
	size_t rlen = (size_t)l->opts.rq_depth * IB_MSG_SLOT;
	size_t slen = (size_t)l->sq.depth * IB_MSG_SLOT;

	l->rbuf = calloc(1, rlen);
	l->sbuf = calloc(1, slen);
	l->smeta = calloc(l->sq.depth, sizeof(*l->smeta));
	if (!l->rbuf || !l->sbuf || !l->smeta)
		return -ENOMEM;
	l->rbuf_mr = ibv_reg_mr(l->dev->pd, l->rbuf, rlen, IBV_ACCESS_LOCAL_WRITE);
	l->sbuf_mr = ibv_reg_mr(l->dev->pd, l->sbuf, slen, IBV_ACCESS_LOCAL_WRITE);
	if (!l->rbuf_mr || !l->sbuf_mr)
		return errno ? -errno : -ENOMEM;
	return 0;
}

static int create_qp(struct ib_link *l)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = l->cq,
		.recv_cq = l->cq,
		.cap = { .max_send_wr = l->sq.depth, .max_recv_wr = l->opts.rq_depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.qp_context = l, /* async events name the QP */
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = l->dev->port,
		/* the peer RDMA-WRITEs into our RMBs; the RMB's own MR limits where */
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
	};

	l->qp = ibv_create_qp(l->dev->pd, &ia);
	if (!l->qp)
		return errno ? -errno : -ENOMEM;
	return -ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS);
}

int ib_link_create(struct ib_dev *dev, const struct ib_link_opts *o, struct ib_link **out)
{
	struct ib_link *l;
	int rc, fl;

	if (o->rq_depth < CDC_CREDITS_MIN_DEPTH || o->rnr_retry > 7 || o->keepalive_ms == 0 ||
	    o->confirm_timeout_ms == 0)
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->dev = dev;
	l->opts = *o;
	pthread_mutex_init(&l->lock, NULL);
	ib_tokens_init(&l->tokens);
	/* every CDC may need two WRITEs in front of it; outstanding CDCs are bounded by the
	 * peer's credits, which we learn only later: the accounting guards the rest */
	l->sq.depth = 4u * o->rq_depth + 4u;
	if (l->sq.depth > SQ_MAX)
		l->sq.depth = SQ_MAX;
	l->psn = random_u32() & 0xFFFFFF;
	l->mtu = dev->mtu;

	rc = -ENOMEM;
	l->chan = ibv_create_comp_channel(dev->ctx);
	if (!l->chan)
		goto fail;
	fl = REAL(fcntl)(l->chan->fd, F_GETFL);
	if (fl < 0 || REAL(fcntl)(l->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = -errno;
		goto fail;
	}
	l->cq = ibv_create_cq(dev->ctx, (int)(l->sq.depth + o->rq_depth), l, l->chan, 0);
	if (!l->cq)
		goto fail;
	rc = alloc_buffers(l);
	if (rc < 0)
		goto fail;
	rc = create_qp(l);
	if (rc < 0)
		goto fail;
	for (uint32_t i = 0; i < o->rq_depth; i++) {
		rc = post_recv(l, i);
		if (rc < 0)
			goto fail;
	}
	rc = -ibv_req_notify_cq(l->cq, 0);
	if (rc < 0)
		goto fail;
	stats_count_ib(SMC_IB_LINKS, 1);
	*out = l;
	return 0;
fail:
	ib_link_destroy(l);
	return rc;
}

void ib_link_local_params(const struct ib_link *l, struct ib_link_params *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->gid, l->dev->gid, CLC_GID_LEN);
	memcpy(out->mac, l->dev->mac, CLC_MAC_LEN);
	out->qpn = l->qp->qp_num;
	out->psn = l->psn;
	out->mtu = l->dev->mtu;
	out->credits = l->opts.rq_depth;
}

static int send_single(struct ib_link *l, const struct cdc_msg *raw);

int ib_link_connect(struct ib_link *l, const struct ib_link_params *peer, bool server)
{
	uint8_t mtu = ib_mtu_common(l->dev->mtu, peer->mtu);
	struct ibv_qp_attr a;
	int rc;

	if (!mtu || peer->qpn == 0 || peer->qpn > 0xFFFFFF || peer->psn > 0xFFFFFF)
		return -EINVAL;
	rc = cdc_credits_init(&l->cred, peer->credits, l->opts.rq_depth);
	if (rc < 0)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1; /* 0.01 ms: an RNR (never expected) retries quickly */
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)l->dev->gid_index;
	a.ah_attr.grh.hop_limit = l->opts.hop_limit;
	a.ah_attr.port_num = l->dev->port;
	rc = -ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				IBV_QP_MIN_RNR_TIMER);
	if (rc < 0)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = l->psn;
	a.timeout = 15;   /* 4.096 us * 2^15 = 134 ms per try, as kernel SMC-R */
	/* 6, not 7: Soft-RoCE (rdma_rxe) retries forever with 7, so a dead peer would
	 * never show as a failed completion; 7 tries * 134 ms ~= 1 s */
	a.retry_cnt = 6;
	a.rnr_retry = l->opts.rnr_retry;
	a.max_rd_atomic = 1;
	rc = -ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&l->lock);
	l->mtu = mtu;
	l->peer_qpn = peer->qpn;
	l->server = server;
	l->connected = true;
	l->confirm_deadline = clock_now_ns() + l->opts.confirm_timeout_ms * MS;
	if (server) {
		/* the client's QP is in RTS already (it was before its Confirm left): this
		 * credit-only message tells it ours is ready too */
		rc = send_single(l, NULL);
		if (rc == 0) {
			l->cnt.confirms_sent++;
			__atomic_store_n(&l->confirmed, true, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&l->lock);
	return rc;
}

uint32_t ib_link_peer_qpn(struct ib_link *l)
{
	uint32_t qpn;

	pthread_mutex_lock(&l->lock);
	qpn = l->peer_qpn;
	pthread_mutex_unlock(&l->lock);
	return qpn;
}

int ib_link_event_fd(const struct ib_link *l)
{
	return l->chan->fd;
}

bool ib_link_failed(struct ib_link *l)
{
	return __atomic_load_n(&l->failed, __ATOMIC_ACQUIRE);
}

unsigned ib_link_conn_count(struct ib_link *l)
{
	unsigned n;

	pthread_mutex_lock(&l->lock);
	n = l->nconns;
	pthread_mutex_unlock(&l->lock);
	return n;
}

void ib_link_get_counters(struct ib_link *l, struct ib_link_counters *out)
{
	pthread_mutex_lock(&l->lock);
	*out = l->cnt;
	pthread_mutex_unlock(&l->lock);
}

static void free_conn_cb(struct ib_link *l, struct ib_conn *c)
{
	(void)l;
	ib_conn_free(c);
}

void ib_link_destroy(struct ib_link *l)
{
	if (!l)
		return;
	/* the QP first: once it is gone the peer cannot write into an RMB we free */
	if (l->qp)
		ibv_destroy_qp(l->qp);
	for (uint32_t s = 0; s < IB_TOKEN_SLOTS; s++)
		if (l->tokens.key[s])
			free_conn_cb(l, l->tokens.val[s]);
	if (l->cq) {
		if (l->cq_events_unacked)
			ibv_ack_cq_events(l->cq, l->cq_events_unacked);
		ibv_destroy_cq(l->cq);
	}
	if (l->chan)
		ibv_destroy_comp_channel(l->chan);
	if (l->rbuf_mr)
		ibv_dereg_mr(l->rbuf_mr);
	if (l->sbuf_mr)
		ibv_dereg_mr(l->sbuf_mr);
	free(l->rbuf);
	free(l->sbuf);
	free(l->smeta);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

/* ------------------------------------------------------------------ failure */

static void unqueue_pending(struct ib_link *l, struct ib_conn *c);

static void link_fail_locked(struct ib_link *l, const char *why)
{
	struct ib_conn *closed[IB_LINK_MAX_CONNS];
	unsigned nclosed = 0;

	if (l->failed)
		return;
	/* an idle link whose peer went away (its own idle timeout, see ib_lgr_book.h)
	 * costs nobody anything: only a failure that aborts connections is one */
	if (l->nconns) {
		log_warn("ib: link to qpn %u failed: %s", l->peer_qpn, why);
		stats_count_ib(SMC_IB_LINK_FAILURES, 1);
	} else {
		log_debug("ib: idle link to qpn %u ends: %s", l->peer_qpn, why);
	}
	__atomic_store_n(&l->failed, true, __ATOMIC_RELEASE);
	/* nothing will be posted any more: a queued connection must not wait for it */
	while (l->pending)
		unqueue_pending(l, l->pending);
	for (uint32_t s = 0; s < IB_TOKEN_SLOTS; s++) {
		struct ib_conn *c = l->tokens.key[s] ? l->tokens.val[s] : NULL;

		if (!c)
			continue;
		if (c->peer_flags & (CDC_CONN_CLOSED | CDC_WENT_TCP)) {
			/* the peer closed first (TCP's FIN came before the reset), or its stream
			 * goes on over TCP: its data and its end stay readable, and a write
			 * meets the closed peer (or goes over TCP) */
			if (c->notify)
				c->notify(c, IB_EV_RX | IB_EV_TX, c->arg);
		} else if (!c->aborted) {
			__atomic_store_n(&c->aborted, true, __ATOMIC_RELEASE);
			if (c->notify)
				c->notify(c, IB_EV_ERR | IB_EV_RX | IB_EV_TX, c->arg);
		}
		if (c->closed && nclosed < IB_LINK_MAX_CONNS)
			closed[nclosed++] = c;
	}
	/* closed connections waited for their peer or their WRITEs: neither will come.
	 * Reaped after the walk: a deletion moves entries of the token table. */
	for (unsigned i = 0; i < nclosed; i++)
		ib_link_reap_locked(l, closed[i]);
}

void ib_link_fail(struct ib_link *l, const char *why)
{
	pthread_mutex_lock(&l->lock);
	link_fail_locked(l, why);
	pthread_mutex_unlock(&l->lock);
}

void ib_conn_abort_locked(struct ib_conn *c, const char *why, int level)
{
	if (c->aborted)
		return;
	smc_log_at(level, "ib: connection token %#x aborted: %s", c->token, why);
	c->link->cnt.conn_aborts++;
	c->rx_discard = true;
	__atomic_store_n(&c->aborted, true, __ATOMIC_RELEASE);
	c->my_flags |= CDC_CONN_ABORT; /* tell the peer, so it does not wait for us */
	if (c->notify)
		c->notify(c, IB_EV_ERR | IB_EV_RX | IB_EV_TX, c->arg);
	ib_link_flush_locked(c->link, c);
}

/* ------------------------------------------------------------------ sending */

static bool cdc_wanted(const struct ib_conn *c)
{
	if (!c->peer_set || (c->flags_announced & CDC_CONN_CLOSED))
		return false; /* nothing after our close: the peer may have released it */
	if (c->aborted) /* only the abort itself is still worth a message */
		return (c->my_flags & CDC_CONN_ABORT) && !(c->flags_announced & CDC_CONN_ABORT);
	if (c->peer_flags & CDC_WENT_TCP) /* its RMB has no reader: flags only */
		return c->my_flags != c->flags_announced;
	return c->tx_prod != c->tx_sent || c->my_flags != c->flags_announced || c->cons_due ||
	       (c->tx_blocked && !c->blocked_announced);
}

static void queue_pending(struct ib_link *l, struct ib_conn *c)
{
	if (c->queued)
		return;
	c->queued = true;
	c->next_pending = NULL;
	if (l->pending_tail)
		l->pending_tail->next_pending = c;
	else
		l->pending = c;
	l->pending_tail = c;
}

static void unqueue_pending(struct ib_link *l, struct ib_conn *c)
{
	struct ib_conn **pp = &l->pending, *prev = NULL;

	if (!c->queued)
		return;
	while (*pp && *pp != c) {
		prev = *pp;
		pp = &(*pp)->next_pending;
	}
	if (*pp) {
		*pp = c->next_pending;
		if (l->pending_tail == c)
			l->pending_tail = prev;
	}
	c->queued = false;
	c->next_pending = NULL;
}

/* Builds the CDC for c (or a link-level credit update when c is NULL) in a send slot.
 * Takes the credit; the caller has checked cdc_credits_can_send. */
static int prepare_cdc(struct ib_link *l, struct ib_conn *c, struct ibv_send_wr *wr,
		       struct ibv_sge *sge, uint8_t *announce, const struct cdc_msg *raw)
{
	uint32_t slot = (uint32_t)(l->sends_posted % l->sq.depth);
	uint8_t *buf = l->sbuf + (size_t)slot * IB_MSG_SLOT;
	struct cdc_msg m = { 0 };
	int rc;

	if (cdc_credits_take(&l->cred, announce) < 0)
		return -EAGAIN;
	if (raw)
		m = *raw;
	m.credits = *announce;
	if (c) {
		m.seqno = c->seq_out;
		m.token = c->peer_token;
		m.st.prod = c->tx_prod;
		m.st.cons = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
		m.st.flags = c->my_flags | (c->tx_blocked ? CDC_WRITE_BLOCKED : 0);
	}
	rc = cdc_encode(&m, buf);
	if (rc < 0) {
		cdc_credits_untake(&l->cred, *announce);
		return rc;
	}
	l->smeta[slot] = (struct ib_send_meta){ .token = c ? c->token : 0,
						.prod = c ? c->tx_prod : 0 };
	*sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = CDC_MSG_LEN,
				 .lkey = l->sbuf_mr->lkey };
	*wr = (struct ibv_send_wr){ .wr_id = WRID_SEND | slot, .sg_list = sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	return 0;
}

/* The announced state after a successful post. */
static void mark_announced(struct ib_link *l, struct ib_conn *c, uint32_t writes,
			   uint32_t bytes)
{
	smc_cursor cons = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);

	if (cons != c->cons_announced && c->cons_due) {
		l->cnt.cons_updates++;
		stats_count_ib(SMC_IB_CONS_UPDATES, 1);
	}
	c->seq_out++;
	c->tx_sent = c->tx_prod;
	c->cons_announced = cons;
	c->cons_due = false;
	c->flags_announced = c->my_flags;
	c->blocked_announced = c->tx_blocked;
	l->cnt.rdma_writes += writes;
	stats_count_ib(SMC_IB_RDMA_WRITES, writes);
	l->cnt.rdma_bytes += bytes;
}

/* Posts c's new region (WRITEs) and its CDC as one chain. 0, -EAGAIN (no credit or
 * no send-queue room: try again after completions), or a hard error. */
static int post_publish(struct ib_link *l, struct ib_conn *c)
{
	struct ib_piece pc[2];
	int np = c->aborted || (c->peer_flags & CDC_WENT_TCP)
			 ? 0
			 : ib_ring_pieces(c->tx_sent, c->tx_prod, c->tx_size, pc);
	struct ibv_send_wr wr[3], *bad;
	struct ibv_sge sge[3];
	uint32_t bytes = 0;
	uint8_t announce;
	int rc;

	if (!cdc_credits_can_send(&l->cred)) {
		l->cnt.credit_waits++;
		stats_count_ib(SMC_IB_CREDIT_WAITS, 1);
		return -EAGAIN;
	}
	if (!ib_sq_has_room(&l->sq, (uint32_t)np + 1)) {
		l->cnt.sq_waits++;
		return -EAGAIN;
	}
	for (int i = 0; i < np; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)(c->tx + pc[i].off),
					   .length = pc[i].len, .lkey = c->tx_mr->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = WRID_WRITE, .sg_list = &sge[i],
					      .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					      .next = &wr[i + 1] };
		wr[i].wr.rdma.remote_addr = c->peer_vaddr + pc[i].off;
		wr[i].wr.rdma.rkey = c->peer_rkey;
		bytes += pc[i].len;
	}
	rc = prepare_cdc(l, c, &wr[np], &sge[np], &announce, NULL);
	if (rc < 0)
		return rc;
	rc = -ibv_post_send(l->qp, wr, &bad);
	if (rc < 0) {
		cdc_credits_untake(&l->cred, announce);
		return rc;
	}
	l->smeta[l->sends_posted % l->sq.depth].mark = ib_sq_post(&l->sq, (uint32_t)np + 1);
	l->sends_posted++;
	l->cnt.cdc_sent++;
	stats_count_ib(SMC_IB_CDC_SENT, 1);
	mark_announced(l, c, (uint32_t)np, bytes);
	return 0;
}

void ib_link_flush_locked(struct ib_link *l, struct ib_conn *c)
{
	int rc;

	if (l->failed || !l->connected || !cdc_wanted(c))
		return;
	if (c->queued)
		return; /* keep the FIFO order: its turn comes with the next completions */
	if (!l->confirmed) {
		/* the server's QP may not be ready: wait for its confirmation */
		l->cnt.sends_held++;
		queue_pending(l, c);
		return;
	}
	rc = post_publish(l, c);
	if (rc == -EAGAIN)
		queue_pending(l, c);
	else if (rc < 0)
		link_fail_locked(l, "post_send failed");
}

/* Connections that waited for a credit or send-queue room, in order. */
static void flush_pending(struct ib_link *l)
{
	while (l->pending && !l->failed && l->confirmed) {
		struct ib_conn *c = l->pending;
		int rc = cdc_wanted(c) ? post_publish(l, c) : 0;

		if (rc == -EAGAIN)
			return;
		unqueue_pending(l, c);
		if (rc < 0)
			link_fail_locked(l, "post_send failed");
		ib_link_reap_locked(l, c);
	}
}

/* One CDC SEND outside any connection: raw as given, or a credit-only update. */
static int send_single(struct ib_link *l, const struct cdc_msg *raw)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	uint8_t announce;
	int rc;

	if (!ib_sq_has_room(&l->sq, 1))
		return -EAGAIN;
	rc = prepare_cdc(l, NULL, &wr, &sge, &announce, raw);
	if (rc < 0)
		return rc;
	if (ibv_post_send(l->qp, &wr, &bad) != 0) {
		cdc_credits_untake(&l->cred, announce);
		link_fail_locked(l, "post_send failed");
		return -EIO;
	}
	l->smeta[l->sends_posted % l->sq.depth].mark = ib_sq_post(&l->sq, 1);
	l->sends_posted++;
	l->cnt.cdc_sent++;
	stats_count_ib(SMC_IB_CDC_SENT, 1);
	return 0;
}

/* A credit-only message (token 0) when the peer runs low on our receive buffers. */
static void send_credit_update(struct ib_link *l)
{
	if (send_single(l, NULL) == 0)
		l->cnt.credit_updates++;
}

int ib_link_send_raw_cdc(struct ib_link *l, const struct cdc_msg *m)
{
	int rc;

	pthread_mutex_lock(&l->lock);
	if (l->failed || !l->connected)
		rc = -EIO;
	else
		rc = l->confirmed ? send_single(l, m) : -EAGAIN;
	pthread_mutex_unlock(&l->lock);
	return rc;
}

/* ------------------------------------------------------------------ receiving */

static void notify(struct ib_conn *c, unsigned ev)
{
	if (ev && c->notify)
		c->notify(c, ev, c->arg);
}

/* Re-evaluates the window update policy: sets cons_due when a CDC is due. */
static void eval_cons_update(struct ib_conn *c)
{
	smc_cursor cons = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
	int64_t consumed = cursor_diff(cons, c->cons_announced, c->rmb_size);
	int64_t unread = cursor_diff(c->rx_prod_peer, cons, c->rmb_size);

	if (consumed <= 0 || unread < 0)
		return;
	if (cdc_should_send_cons_update(&c->policy, (uint32_t)consumed, c->peer_write_blocked,
					(uint32_t)unread))
		c->cons_due = true;
}

static void conn_on_cdc(struct ib_link *l, struct ib_conn *c, const struct cdc_msg *m)
{
	smc_cursor cons_mine = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
	uint32_t newflags = m->st.flags & CDC_CONN_FLAGS_MASK & ~c->peer_flags;
	unsigned ev = 0;

	if (m->st.flags & CDC_CONN_ABORT) {
		/* Echo the abort: it tells the peer we stopped writing into its RMB, so it
		 * may release it (and we ours once it said the same). */
		c->peer_flags |= CDC_CONN_ABORT;
		if (!c->aborted) {
			__atomic_store_n(&c->aborted, true, __ATOMIC_RELEASE);
			c->my_flags |= CDC_CONN_ABORT;
			notify(c, IB_EV_ERR | IB_EV_RX | IB_EV_TX);
			ib_link_flush_locked(l, c);
		}
		ib_link_reap_locked(l, c);
		return;
	}
	if (c->aborted)
		return;
	/* Data may come before we know the peer's RMB: the server learns it from the
	 * Confirm, and a client on a link already confirmed writes right after sending it.
	 * Our RMB is known, so the producer cursor is checked as always; the peer cannot
	 * have consumed anything of ours yet. */
	if (cdc_validate_peer_prod(m->st.prod, c->rx_prod_peer, cons_mine, c->rmb_size) < 0 ||
	    (c->peer_set ? cdc_validate_peer_cons(m->st.cons, c->tx_cons_peer, c->tx_sent,
						   c->tx_size) < 0
			 : m->st.cons != c->tx_cons_peer)) {
		ib_conn_abort_locked(c, "CDC cursor out of range", SMC_LOG_WARN);
		return;
	}
	/* nothing may arrive after the peer said it stopped writing (or went to TCP) */
	if ((c->peer_flags & (CDC_DONE_WRITING | CDC_CONN_CLOSED | CDC_WENT_TCP)) &&
	    m->st.prod != c->rx_prod_peer) {
		ib_conn_abort_locked(c, "data after done-writing", SMC_LOG_WARN);
		return;
	}
	if (m->st.prod != c->rx_prod_peer)
		ev |= IB_EV_RX;
	if (m->st.cons != c->tx_cons_peer)
		ev |= IB_EV_TX;
	if (newflags)
		ev |= IB_EV_RX | IB_EV_TX;
	__atomic_store_n(&c->rx_prod_peer, m->st.prod, __ATOMIC_RELEASE);
	c->tx_cons_peer = m->st.cons;
	c->peer_flags |= newflags;
	if (newflags & CDC_WENT_TCP) {
		/* the peer reads no more of its RMB: what we produced and did not post goes
		 * over TCP with the rest of the re-send (conn_down.c); if our own flag is not out,
		 * it is not coming, and the peer waits to hear that */
		c->tx_prod = c->tx_sent;
		if (!(c->my_flags & CDC_WENT_TCP))
			c->my_flags |= CDC_TCP_ACK;
		__atomic_store_n(&c->peer_tcp, true, __ATOMIC_RELEASE);
	}
	c->peer_write_blocked = m->st.flags & (CDC_WRITE_BLOCKED | CDC_CONS_UPDATE_REQ);
	if (m->st.flags & CDC_CONS_UPDATE_REQ)
		c->cons_due = cursor_diff(cons_mine, c->cons_announced, c->rmb_size) > 0;
	eval_cons_update(c);
	notify(c, ev);
	ib_link_flush_locked(l, c);
	ib_link_reap_locked(l, c);
}

static void on_recv(struct ib_link *l, const struct ibv_wc *wc)
{
	uint32_t slot = WRID_SLOT(wc->wr_id);
	uint8_t copy[CDC_MSG_LEN];
	struct cdc_msg m;
	struct ib_conn *c;
	bool ok = false;

	if (slot >= l->opts.rq_depth) {
		link_fail_locked(l, "receive completion for an unknown slot");
		return;
	}
	if (wc->opcode == IBV_WC_RECV && wc->byte_len >= CDC_MSG_LEN) {
		memcpy(copy, l->rbuf + (size_t)slot * IB_MSG_SLOT, CDC_MSG_LEN);
		ok = cdc_decode(copy, CDC_MSG_LEN, &m) == 0;
	}
	/* the buffer is ours again at once: repost, count it for the peer */
	if (post_recv(l, slot) < 0) {
		link_fail_locked(l, "post_recv failed");
		return;
	}
	if (cdc_credits_reposted(&l->cred, 1) < 0)
		l->cnt.cdc_bad++;
	if (!ok) {
		l->cnt.cdc_bad++;
		return;
	}
	l->cnt.cdc_recv++;
	if (!l->confirmed) {
		/* the server sends only once its QP is ready: the link is confirmed */
		__atomic_store_n(&l->confirmed, true, __ATOMIC_RELEASE);
		l->cnt.confirms_recv++;
	}
	if (m.credits && cdc_credits_grant(&l->cred, m.credits) < 0)
		l->cnt.cdc_bad++; /* more than its queue holds: ignore the excess claim */
	if (m.token == 0)
		return; /* credit update only */
	c = ib_tokens_find(&l->tokens, m.token);
	if (!c) {
		l->cnt.cdc_unknown++;
		return;
	}
	conn_on_cdc(l, c, &m);
}

static void on_send_done(struct ib_link *l, const struct ibv_wc *wc)
{
	uint32_t slot = WRID_SLOT(wc->wr_id);
	struct ib_send_meta *sm;
	struct ib_conn *c;

	if (slot >= l->sq.depth) {
		link_fail_locked(l, "send completion for an unknown slot");
		return;
	}
	sm = &l->smeta[slot];
	if (ib_sq_complete(&l->sq, sm->mark) < 0) {
		link_fail_locked(l, "send completions out of order");
		return;
	}
	c = sm->token ? ib_tokens_find(&l->tokens, sm->token) : NULL;
	if (!c)
		return;
	if (cursor_diff(sm->prod, c->tx_fin, c->tx_size) > 0) {
		c->tx_fin = sm->prod;
		notify(c, IB_EV_TX);
	}
	ib_link_reap_locked(l, c);
}

static void on_ping_done(struct ib_link *l, const struct ibv_wc *wc)
{
	l->ping_inflight = false;
	if (ib_sq_complete(&l->sq, WRID_LOW(wc->wr_id)) < 0)
		link_fail_locked(l, "send completions out of order");
}

static void on_wc(struct ib_link *l, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status == IBV_WC_RNR_RETRY_EXC_ERR) {
			l->cnt.rnr_errors++;
			stats_count_ib(SMC_IB_RNR, 1);
		} else if (wc->status != IBV_WC_WR_FLUSH_ERR) {
			l->cnt.wc_errors++;
			stats_count_ib(SMC_IB_WC_ERRORS, 1);
		}
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			log_warn("ib: completion error: %s", ibv_wc_status_str(wc->status));
		link_fail_locked(l, ibv_wc_status_str(wc->status));
		return;
	}
	l->activity = true; /* the peer answered: it is alive */
	switch (WRID_KIND(wc->wr_id)) {
	case WRID_RECV: on_recv(l, wc); break;
	case WRID_SEND: on_send_done(l, wc); break;
	case WRID_PING: on_ping_done(l, wc); break;
	default: break; /* WRITEs are unsignalled */
	}
}

static int drain_cq(struct ib_link *l)
{
	struct ibv_wc wc[16];
	int n, total = 0;

	while ((n = ibv_poll_cq(l->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++)
			on_wc(l, &wc[i]);
		total += n;
	}
	if (n < 0)
		link_fail_locked(l, "poll_cq failed");
	return total;
}

int ib_link_process(struct ib_link *l)
{
	struct ibv_cq *cq;
	void *ctx;

	pthread_mutex_lock(&l->lock);
	/* consume the channel's event (if any), re-arm, then poll: a completion that
	 * arrives after the poll raises a new event, none is lost */
	while (ibv_get_cq_event(l->chan, &cq, &ctx) == 0)
		l->cq_events_unacked++;
	if (l->cq_events_unacked >= 64) {
		ibv_ack_cq_events(l->cq, l->cq_events_unacked);
		l->cq_events_unacked = 0;
	}
	drain_cq(l);
	if (ibv_req_notify_cq(l->cq, 0) != 0)
		link_fail_locked(l, "req_notify_cq failed");
	drain_cq(l);
	if (!l->failed) {
		flush_pending(l);
		if (cdc_credits_need_update(&l->cred))
			send_credit_update(l);
	}
	pthread_mutex_unlock(&l->lock);
	return l->failed ? -EIO : 0;
}

/* ------------------------------------------------------------------ timers */

/* A zero-length RDMA WRITE: no receive buffer at the peer (no credit), no rkey check
 * (IBA C9-88: a zero-length RDMA operation needs no valid R_Key), but acknowledged by
 * the peer's QP like any request, or failed after the retries when it is gone. */
static void post_ping(struct ib_link *l, uint64_t now)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_WRITE, .num_sge = 0,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	uint64_t mark;

	if (!ib_sq_has_room(&l->sq, 1))
		return; /* work in flight: its completions tell as much */
	mark = l->sq.posted + 1;
	wr.wr_id = WRID_PING | mark;
	if (ibv_post_send(l->qp, &wr, &bad) != 0) {
		link_fail_locked(l, "post_send (keepalive) failed");
		return;
	}
	ib_sq_post(&l->sq, 1);
	l->ping_inflight = true;
	l->ping_at = now;
	l->cnt.keepalives++;
}

void ib_link_tick(struct ib_link *l, uint64_t now)
{
	pthread_mutex_lock(&l->lock);
	if (l->failed || !l->connected) {
		pthread_mutex_unlock(&l->lock);
		return;
	}
	if (!l->confirmed) {
		if (now >= l->confirm_deadline)
			link_fail_locked(l, "no link confirmation from the server");
	} else if (l->activity || l->last_active == 0) {
		l->activity = false;
		l->last_active = now;
	} else if (!l->ping_inflight) {
		if (now - l->last_active >= l->opts.keepalive_ms * MS)
			post_ping(l, now);
	} else if (now - l->ping_at >= 10 * l->opts.keepalive_ms * MS) {
		/* RC gives up after about 0.5 s; this only guards against a device that
		 * never completes the probe */
		link_fail_locked(l, "keepalive unanswered");
	}
	pthread_mutex_unlock(&l->lock);
}

uint64_t ib_link_next_deadline(struct ib_link *l)
{
	uint64_t t = UINT64_MAX;

	pthread_mutex_lock(&l->lock);
	if (l->failed || !l->connected)
		t = UINT64_MAX;
	else if (!l->confirmed)
		t = l->confirm_deadline;
	else if (l->last_active == 0)
		t = 0; /* start the clock at the next tick */
	else if (l->ping_inflight)
		t = l->ping_at + l->opts.keepalive_ms * MS;
	else
		t = l->last_active + l->opts.keepalive_ms * MS;
	pthread_mutex_unlock(&l->lock);
	return t;
}

/* ------------------------------------------------------------------ exit */

static bool conn_output_pending(const struct ib_conn *c)
{
	if (c->aborted || !c->peer_set ||
	    (c->peer_flags & (CDC_CONN_CLOSED | CDC_CONN_ABORT | CDC_WENT_TCP)))
		return false; /* nobody reads what we would still send */
	return c->tx_prod != c->tx_sent ||
	       (c->my_flags & ~c->flags_announced & (CDC_CONN_CLOSED | CDC_DONE_WRITING));
}

bool ib_link_output_pending(struct ib_link *l, uint64_t *progress)
{
	bool busy = false;

	pthread_mutex_lock(&l->lock);
	*progress += l->sq.done + l->cnt.cdc_recv;
	if (!l->failed && l->connected) {
		busy = l->pending || l->sq.posted != l->sq.done;
		for (uint32_t s = 0; s < IB_TOKEN_SLOTS && !busy; s++)
			busy = l->tokens.key[s] && conn_output_pending(l->tokens.val[s]);
	}
	pthread_mutex_unlock(&l->lock);
	return busy;
}

/* ------------------------------------------------------------------ release */

/* Frees a closed connection once nothing can touch its buffers any more: the peer
 * closed too (it will not write into the RMB) or the link is gone, and every WRITE
 * from the mirror completed, and our own close was announced. */
void ib_link_reap_locked(struct ib_link *l, struct ib_conn *c)
{
	bool peer_done = l->failed || !c->peer_set ||
			 (c->peer_flags & (CDC_CONN_CLOSED | CDC_CONN_ABORT));
	bool announced = l->failed || !c->peer_set || !cdc_wanted(c);

	bool writes_done = l->failed || c->tx_fin == c->tx_sent;

	if (!c->closed || !peer_done || !announced || !writes_done || c->queued)
		return;
	ib_tokens_del(&l->tokens, c->token);
	l->nconns--;
	ib_conn_free(c);
}
