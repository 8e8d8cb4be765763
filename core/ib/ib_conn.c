/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport: one connection's RMB and send mirror, and the reader/writer calls
 * the connection engine makes. See ib_link.h.
 */
#include "core/ib/ib_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/base/log.h"
#include "core/base/random.h"
#include "core/shm/shm.h"

#define RMB_ALIGN 4096u

/* Random, so a peer cannot guess another connection's token: a secret (random.h), 0
 * when the source failed. */
static uint32_t new_token(const struct ib_link *l)
{
	for (;;) {
		uint32_t t = 0;

		if (random_secret(&t, sizeof(t)) < 0)
			return 0;
		if (t != 0 && !ib_tokens_find(&l->tokens, t))
			return t;
	}
}

static bool size_ok(uint32_t size)
{
	return size >= clc_uncompress_rmb_size(0) && size <= clc_uncompress_rmb_size(15) &&
	       (size & (size - 1)) == 0;
}

static void *alloc_ring(uint32_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, RMB_ALIGN, size) != 0)
		return NULL;
	memset(p, 0, size);
	return p;
}

/*
 * A registration that fails for lack of lockable memory declines this connection (it
 * stays TCP, fallback reason mem-cap) and, with the same limit, the ones after it: said
 * once per process, with the limit, since RLIMIT_MEMLOCK (8 MiB for Debian's users, and
 * each connection pins its RMB plus a send buffer of the peer's) is the usual cause.
 */
static void warn_reg_failed(size_t bytes, int err)
{
	static bool warned;
	struct rlimit rl;

	if (err != ENOMEM && err != EAGAIN && err != EPERM)
		return;
	if (__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		return;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		log_warn("cannot register %zu bytes of RDMA memory (%s; RLIMIT_MEMLOCK %llu "
			 "bytes): connections that need more stay TCP; raise the limit "
			 "(ulimit -l) or lower SMC_RCVBUF/SMC_SNDBUF", bytes, strerror(err),
			 (unsigned long long)rl.rlim_cur);
	else
		log_warn("cannot register %zu bytes of RDMA memory (%s): connections that "
			 "need more stay TCP", bytes, strerror(err));
}

int ib_conn_create(struct ib_link *l, uint32_t rmb_size, ib_conn_notify_fn notify,
		   void *arg, struct ib_conn **out)
{
	struct ib_conn *c;
	int rc;

	if (!size_ok(rmb_size))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	/* one cap for every ring of the process, same-host or RDMA */
	if (shm_reserve(rmb_size) < 0) {
		free(c);
		return -ENOBUFS;
	}
	c->reserved = rmb_size;
	c->link = l;
	c->notify = notify;
	c->arg = arg;
	c->rmb_size = rmb_size;
	c->rmb = alloc_ring(rmb_size);
	if (!c->rmb) {
		ib_conn_free(c);
		return -ENOMEM;
	}
	c->rmb_mr = ibv_reg_mr(l->dev->pd, c->rmb, rmb_size,
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!c->rmb_mr) {
		rc = errno ? -errno : -ENOMEM;
		warn_reg_failed(rmb_size, -rc);
		ib_conn_free(c);
		return rc;
	}
	cdc_policy_init(&c->policy, rmb_size);
	pthread_mutex_lock(&l->lock);
	c->token = new_token(l);
	rc = l->failed || !c->token ? -EIO : ib_tokens_add(&l->tokens, c->token, c);
	if (rc == 0)
		l->nconns++;
	pthread_mutex_unlock(&l->lock);
	if (rc < 0) {
		ib_conn_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void ib_conn_local_rmb(const struct ib_conn *c, struct ib_rmb_params *out)
{
	out->token = c->token;
	out->rkey = c->rmb_mr->rkey;
	out->vaddr = (uintptr_t)c->rmb;
	out->size = c->rmb_size;
}

int ib_conn_set_peer(struct ib_conn *c, const struct ib_rmb_params *peer)
{
	struct ib_link *l = c->link;
	uint8_t *tx;
	struct ibv_mr *mr;

	if (c->peer_set || peer->token == 0 || !size_ok(peer->size))
		return -EINVAL;
	if (shm_reserve(peer->size) < 0)
		return -ENOBUFS;
	tx = alloc_ring(peer->size);
	if (!tx) {
		shm_unreserve(peer->size);
		return -ENOMEM;
	}
	/* the WRITEs read the mirror: local access is all it needs */
	mr = ibv_reg_mr(l->dev->pd, tx, peer->size, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		int rc = errno ? -errno : -ENOMEM;

		warn_reg_failed(peer->size, -rc);
		free(tx);
		shm_unreserve(peer->size);
		return rc;
	}
	pthread_mutex_lock(&l->lock);
	c->reserved += peer->size;
	c->tx = tx;
	c->tx_mr = mr;
	c->tx_size = peer->size;
	c->peer_token = peer->token;
	c->peer_rkey = peer->rkey;
	c->peer_vaddr = peer->vaddr;
	c->peer_set = true;
	/* the peer may have written already: a window update may be due */
	ib_link_flush_locked(l, c);
	pthread_mutex_unlock(&l->lock);
	return 0;
}

void ib_conn_free(struct ib_conn *c)
{
	if (c->rmb_mr)
		ibv_dereg_mr(c->rmb_mr);
	if (c->tx_mr)
		ibv_dereg_mr(c->tx_mr);
	free(c->rmb);
	free(c->tx);
	if (c->reserved)
		shm_unreserve(c->reserved);
	free(c);
}

/* ------------------------------------------------------------------ reader */

uint8_t *ib_conn_rx_ring(const struct ib_conn *c) { return c->rmb; }
uint32_t ib_conn_rx_size(const struct ib_conn *c) { return c->rmb_size; }

smc_cursor ib_conn_rx_cons(const struct ib_conn *c)
{
	return __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
}

int64_t ib_conn_rx_used(struct ib_conn *c)
{
	smc_cursor prod = __atomic_load_n(&c->rx_prod_peer, __ATOMIC_ACQUIRE);

	/* As TCP keeps what arrived before a reset readable, a peer's abort or a failed
	 * link leaves the data announced before it; an abort of ours (the peer broke the
	 * protocol) does not: the RMB may hold anything. rx_prod_peer no longer moves. */
	if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE) &&
	    __atomic_load_n(&c->rx_discard, __ATOMIC_RELAXED))
		return -1;
	/* validated against our consumer cursor when it arrived */
	return ring_used(prod, __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED), c->rmb_size);
}

void ib_conn_rx_consumed(struct ib_conn *c, uint32_t n)
{
	struct ib_link *l = c->link;
	smc_cursor cons, prod;
	int64_t consumed, unread;

	if (n == 0)
		return;
	pthread_mutex_lock(&l->lock);
	cons = cursor_add(c->rx_cons, n, c->rmb_size);
	__atomic_store_n(&c->rx_cons, cons, __ATOMIC_RELEASE);
	prod = c->rx_prod_peer;
	consumed = cursor_diff(cons, c->cons_announced, c->rmb_size);
	unread = cursor_diff(prod, cons, c->rmb_size);
	if (consumed > 0 && unread >= 0 &&
	    cdc_should_send_cons_update(&c->policy, (uint32_t)consumed, c->peer_write_blocked,
					(uint32_t)unread))
		c->cons_due = true;
	ib_link_flush_locked(l, c);
	pthread_mutex_unlock(&l->lock);
}

bool ib_conn_rx_eof(struct ib_conn *c)
{
	bool eof;

	pthread_mutex_lock(&c->link->lock);
	eof = c->aborted || (c->peer_flags & (CDC_DONE_WRITING | CDC_CONN_CLOSED));
	pthread_mutex_unlock(&c->link->lock);
	return eof;
}

/* ------------------------------------------------------------------ writer */

uint8_t *ib_conn_tx_ring(const struct ib_conn *c) { return c->tx; }
uint32_t ib_conn_tx_size(const struct ib_conn *c) { return c->tx_size; }

smc_cursor ib_conn_tx_prod(const struct ib_conn *c)
{
	return c->tx_prod; /* the writer's own cursor */
}

int64_t ib_conn_tx_free(struct ib_conn *c)
{
	struct ib_link *l = c->link;
	int64_t room;

	pthread_mutex_lock(&l->lock);
	if (c->aborted || !c->peer_set) {
		room = -1;
	} else if (c->peer_flags & CDC_CONN_CLOSED) {
		room = 0;
	} else {
		int64_t by_peer = cursor_diff(c->tx_prod, c->tx_cons_peer, c->tx_size);
		int64_t by_fin = cursor_diff(c->tx_prod, c->tx_fin, c->tx_size);
		int64_t used = by_peer > by_fin ? by_peer : by_fin;

		room = used < 0 ? 0 : (int64_t)c->tx_size - used;
	}
	pthread_mutex_unlock(&l->lock);
	return room;
}

int64_t ib_conn_tx_unwritten(struct ib_conn *c)
{
	struct ib_link *l = c->link;
	int64_t n;

	pthread_mutex_lock(&l->lock);
	n = cursor_diff(c->tx_prod, c->tx_fin, c->tx_size);
	pthread_mutex_unlock(&l->lock);
	return n > 0 ? n : 0;
}

void ib_conn_tx_produced(struct ib_conn *c, uint32_t n)
{
	struct ib_link *l = c->link;

	pthread_mutex_lock(&l->lock);
	if (c->peer_flags & CDC_WENT_TCP) {
		/* a writer that raced the peer's flag: its bytes are re-sent over TCP */
		pthread_mutex_unlock(&l->lock);
		return;
	}
	c->tx_prod = cursor_add(c->tx_prod, n, c->tx_size);
	c->tx_blocked = false;
	ib_link_flush_locked(l, c);
	pthread_mutex_unlock(&l->lock);
}

void ib_conn_tx_blocked(struct ib_conn *c)
{
	struct ib_link *l = c->link;

	pthread_mutex_lock(&l->lock);
	c->tx_blocked = true;
	ib_link_flush_locked(l, c);
	pthread_mutex_unlock(&l->lock);
}

bool ib_conn_tx_dead(struct ib_conn *c)
{
	bool dead;

	pthread_mutex_lock(&c->link->lock);
	dead = c->aborted || (c->peer_flags & CDC_CONN_CLOSED);
	pthread_mutex_unlock(&c->link->lock);
	return dead;
}

/* ------------------------------------------------------------------ state */

bool ib_conn_aborted(struct ib_conn *c)
{
	return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE);
}

void ib_conn_shutdown_wr(struct ib_conn *c)
{
	struct ib_link *l = c->link;

	pthread_mutex_lock(&l->lock);
	c->my_flags |= CDC_DONE_WRITING;
	ib_link_flush_locked(l, c);
	pthread_mutex_unlock(&l->lock);
}

enum ib_tcp_answer ib_conn_go_tcp(struct ib_conn *c)
{
	struct ib_link *l = c->link;
	enum ib_tcp_answer a = IB_TCP_ANNOUNCED;

	pthread_mutex_lock(&l->lock);
	if (c->aborted || l->failed)
		a = IB_TCP_GONE;
	else if (c->peer_flags & CDC_WENT_TCP)
		a = IB_TCP_PEER_FIRST;
	else
		c->my_flags |= CDC_WENT_TCP;
	ib_link_flush_locked(l, c);
	pthread_mutex_unlock(&l->lock);
	return a;
}

enum ib_tcp_answer ib_conn_tcp_answer(struct ib_conn *c, bool final)
{
	struct ib_link *l = c->link;
	enum ib_tcp_answer a = IB_TCP_WAITING;

	pthread_mutex_lock(&l->lock);
	if (c->aborted || l->failed)
		a = IB_TCP_GONE;
	else if (c->peer_flags & CDC_WENT_TCP)
		a = IB_TCP_CROSSED;
	else if (c->peer_flags & CDC_TCP_ACK)
		a = IB_TCP_ACKED;
	else if (final && c->tx_cons_peer == c->tx_sent)
		a = IB_TCP_ACKED; /* silent, but it had read all we wrote: nothing at stake */
	else if (final)
		a = IB_TCP_GONE;
	pthread_mutex_unlock(&l->lock);
	return a;
}

bool ib_conn_peer_went_tcp(struct ib_conn *c, smc_cursor *peer_cons)
{
	if (!__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&c->link->lock);
	*peer_cons = c->tx_cons_peer;
	pthread_mutex_unlock(&c->link->lock);
	return true;
}

void ib_conn_close(struct ib_conn *c, bool abort)
{
	struct ib_link *l = c->link;

	pthread_mutex_lock(&l->lock);
	c->notify = NULL; /* the owner is gone */
	c->closed = true;
	c->my_flags |= CDC_CONN_CLOSED | CDC_DONE_WRITING;
	if (abort)
		ib_conn_abort_locked(c, "closed with abort", SMC_LOG_DEBUG);
	else
		ib_link_flush_locked(l, c);
	ib_link_reap_locked(l, c);
	pthread_mutex_unlock(&l->lock);
}
