/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The connection engine for the shared-memory transport: state machine, data path,
 * doorbells, close and shutdown with TCP's semantics.
 *
 * Memory ordering: the writer copies payload, then publishes its producer cursor with a
 * release store; the reader loads it with acquire before copying out, then publishes its
 * consumer cursor with release. The sleep/wake handshake is Dekker-style: a waiter stores
 * its armed flag, issues a full fence and re-reads the cursor; the other side stores the
 * cursor, issues a full fence and reads the flag. One of them must see the other.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/conn/conn_orphan.h"
#include "core/conn/conn_rewind.h"
#include "core/ib/conn_ib.h"
#include "core/negotiate/hs_policy.h"
#include "core/negotiate/negotiate.h"
#include "core/negotiate/progress.h"
#include "core/readiness/wait.h"
#include "core/shm/pool.h"
#include "core/wire/cdc.h"

/* ------------------------------------------------------------------ registry */

/* Every live connection of the process, so fork can account the child's references.
 * Doubly linked, each connection pointing at its node: a close unlinks in O(1), where a
 * walk made closing N connections cost O(N^2) under the lock every setup takes. */
static pthread_mutex_t conn_list_lock = PTHREAD_MUTEX_INITIALIZER;
struct conn_node {
	struct smc_conn *c;
	struct conn_node *next;
	struct conn_node **pprev; /* the pointer that points at this node */
};
static struct conn_node *conn_list;

static void conn_list_add(struct smc_conn *c)
{
	struct conn_node *n = malloc(sizeof(*n));

	c->reg_node = n;
	if (!n)
		return;
	n->c = c;
	pthread_mutex_lock(&conn_list_lock);
	n->next = conn_list;
	n->pprev = &conn_list;
	if (conn_list)
		conn_list->pprev = &n->next;
	conn_list = n;
	pthread_mutex_unlock(&conn_list_lock);
}

static void conn_list_del(struct smc_conn *c)
{
	struct conn_node *n = c->reg_node;

	if (!n)
		return;
	pthread_mutex_lock(&conn_list_lock);
	*n->pprev = n->next;
	if (n->next)
		n->next->pprev = n->pprev;
	pthread_mutex_unlock(&conn_list_lock);
	c->reg_node = NULL;
	free(n);
}

void conn_foreach(void (*fn)(struct smc_conn *c, void *arg), void *arg)
{
	struct conn_node *n;

	pthread_mutex_lock(&conn_list_lock);
	for (n = conn_list; n; n = n->next)
		fn(n->c, arg);
	pthread_mutex_unlock(&conn_list_lock);
}

struct conn_batch {
	bool (*want)(const struct smc_conn *c);
	struct smc_conn **c;
	size_t n, cap;
};

/* Under conn_list_lock: a reference to c unless its last one is being dropped (its
 * conn_free waits for the lock to unlink it; a reference taken now would free it a
 * second time). */
static bool conn_get_live(struct smc_conn *c)
{
	int refs = __atomic_load_n(&c->obj_refs, __ATOMIC_RELAXED);

	while (refs > 0 && !__atomic_compare_exchange_n(&c->obj_refs, &refs, refs + 1, true,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		;
	return refs > 0;
}

static void batch_add(struct conn_batch *b, struct smc_conn *c)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		struct smc_conn **m = realloc(b->c, cap * sizeof(*m));

		if (!m)
			return;
		b->c = m;
		b->cap = cap;
	}
	if (conn_get_live(c))
		b->c[b->n++] = c;
}

static void batch_take(struct smc_conn *c, void *arg)
{
	struct conn_batch *b = arg;

	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE && b->want(c))
		batch_add(b, c);
}

struct smc_conn **conn_collect_active(bool (*want)(const struct smc_conn *c), size_t *n)
{
	struct conn_batch b = { .want = want };

	conn_foreach(batch_take, &b);
	*n = b.n;
	return b.c;
}

struct fd_list {
	int *fd;
	size_t n, cap;
};

static void fd_list_add(struct fd_list *l, int fd)
{
	if (fd < 0)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		int *m = realloc(l->fd, cap * sizeof(*m));

		if (!m)
			return;
		l->fd = m;
		l->cap = cap;
	}
	l->fd[l->n++] = fd;
}

static void bells_take(struct smc_conn *c, void *arg)
{
	fd_list_add(arg, c->rx_bell);
	fd_list_add(arg, c->tx_bell);
	fd_list_add(arg, c->peer_rx_bell);
	fd_list_add(arg, c->peer_tx_bell);
	fd_list_add(arg, c->resend_fd);
}

size_t conn_own_fds(int **out)
{
	struct fd_list l = { 0 };

	conn_foreach(bells_take, &l);
	*out = l.fd;
	return l.n;
}

static void fallback_to_tcp(struct smc_conn *c, enum smc_reason why, bool counted);

static void take_staged(struct smc_conn *c, void *arg)
{
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING && c->pend_len &&
	    !c->fork_orphan)
		batch_add(arg, c);
}

static void take_decided_watch(struct smc_conn *c, void *arg)
{
	uint8_t w = __atomic_load_n(&c->hs_watch, __ATOMIC_ACQUIRE);

	if (c->side == CONN_CLIENT && (w == HS_WATCH_QUEUED || w == HS_WATCH_ARMED) &&
	    __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING)
		batch_add(arg, c);
}

/* Bound on the wait below: the progress thread ends a watch in microseconds. */
#define CONN_END_WATCH_NS (200 * 1000000ull)

/* Client handshakes decided (closed, gone TCP) whose watch on the progress thread has not
 * ended yet: a server waiting on our rendezvous gets its Decline when the watch ends
 * (progress_watch_decided); the end of the image would take the rendezvous socket with
 * it first, and the server reset the connection, losing what went over TCP. */
static void decided_watches_end(void)
{
	uint64_t until = clock_now_ns() + CONN_END_WATCH_NS;
	struct conn_batch b = { 0 };

	conn_foreach(take_decided_watch, &b);
	for (size_t i = 0; i < b.n; i++)
		progress_watch_decided(b.c[i]);
	for (size_t i = 0; i < b.n; i++) {
		uint8_t w;

		while ((w = __atomic_load_n(&b.c[i]->hs_watch, __ATOMIC_ACQUIRE)) != HS_WATCH_DONE &&
		       w != HS_WATCH_NONE && clock_now_ns() < until)
			REAL(poll)(NULL, 0, 1);
		conn_put(b.c[i]);
	}
	free(b.c);
}

static void take_undecided_client(struct smc_conn *c, void *arg)
{
	if (c->side == CONN_CLIENT && !c->fork_orphan &&
	    __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		batch_add(arg, c);
}

/* At exit, the client handshakes still running (nothing staged: the program connected
 * and left, or left it open) end as TCP here, and their servers are told by a Decline
 * (progress_watch_decided): the exit would otherwise take the rendezvous socket away,
 * and a server that sent its Accept would reset a connection whose end, as TCP has it,
 * is a FIN. Only at exit: after a failed exec the program goes on, and in band the
 * stream may still carry the server's answer. */
static void undecided_clients_end(void)
{
	struct conn_batch b = { 0 };

	conn_foreach(take_undecided_client, &b);
	for (size_t i = 0; i < b.n; i++) {
		struct smc_conn *c = b.c[i];

		pthread_mutex_lock(&c->lock);
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
			fallback_to_tcp(c, SMC_REASON_HANDSHAKE, false);
		pthread_mutex_unlock(&c->lock);
		conn_put(c);
	}
	free(b.c);
}

/* A connection still negotiating holds what the program sent meanwhile in its staging
 * buffer, which the process takes with it: TCP would have the bytes in the kernel.
 * At the end of the image the handshake is given its time to end; if it does not, they
 * go out over TCP, the connection plain TCP (the last close does the same,
 * conn_release_fd). The connection is not counted among the process's connections:
 * it ended before it became one or the other, as one without staged bytes does. */
void conn_end_handshakes(bool exiting)
{
	struct conn_batch b = { 0 };

	conn_foreach(take_staged, &b); /* allocates nothing when there is none */
	for (size_t i = 0; i < b.n; i++) {
		struct smc_conn *c = b.c[i];

		/* A server that has sent its Accept takes a client that goes away before
		 * its Confirm for one that may have written into the rings, and resets:
		 * the handshake is let finish first (one handshake timeout at most; a
		 * server that answers does so in microseconds), so that the bytes go into
		 * the ring, or over TCP once it is decided so. */
		conn_wait_pending(c, false, (int64_t)smc_cfg.handshake_timeout_ms * 1000000);
		pthread_mutex_lock(&c->lock);
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING && c->pend_len)
			fallback_to_tcp(c, SMC_REASON_HANDSHAKE, false);
		pthread_mutex_unlock(&c->lock);
		conn_put(c);
	}
	free(b.c);
	if (exiting)
		undecided_clients_end();
	decided_watches_end();
}

/* fork: the child holds every connection too. Counted before the fork so that a parent
 * closing its copy right away never signals "closed" to a peer the child still talks to.
 * Under the registry lock and every connection's lock (conn_fork_lock_*): fd_refs and
 * the state are stable, so a connection whose last fd is already closed (its release
 * under way in another thread) gains no holder that nobody would release. */
static unsigned fork_count;   /* forks prepared, under the registry lock */
static bool registry_held;    /* conn_fork_lock_registry took the registry */

static void conn_refs_add(void)
{
	fork_count++;
	for (struct conn_node *n = conn_list; n; n = n->next) {
		struct smc_conn *c = n->c;

		/* an RDMA connection stays the parent's (conn_ib.h) */
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE && !c->ib &&
		    c->fd_refs > 0) {
			__atomic_add_fetch(&c->map.hdr->side_refs[c->side], 1, __ATOMIC_ACQ_REL);
			c->fork_shared = true;
			c->fork_held = fork_count;
		}
	}
}

/* Under conn_list_lock: a server connection still negotiating (on the progress thread:
 * a nonblocking listener's accept(), sock.c), with a reference taken, or NULL. */
static struct smc_conn *conn_pending_server_get(void)
{
	for (struct conn_node *n = conn_list; n; n = n->next) {
		struct smc_conn *c = n->c;

		if (!c->deferred || __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_PENDING)
			continue;
		if (conn_get_live(c))
			return c;
	}
	return NULL;
}

static int conn_wait(struct smc_conn *c, uint32_t events, bool for_handshake,
		     uint64_t deadline, pthread_mutex_t *held);

/* The progress thread does not survive fork: a connection it still negotiates would
 * stay PENDING forever in the child. Deferred server connections are decided first:
 * one whose client's CLC message is there is decided at once and its handshake is
 * bounded; a client held up may take the thread up to its last deadline tick
 * (progress.c), longer than a fork should wait, so the wait here is bounded and the
 * fork goes ahead after it (such a connection is then the watchdog's in the child). */
static void conn_settle_pending_servers(void)
{
	uint64_t deadline = clock_now_ns() + 4 * (uint64_t)smc_cfg.handshake_timeout_ms * 1000000u;

	for (;;) {
		struct smc_conn *c;
		int r = 0;

		pthread_mutex_lock(&conn_list_lock);
		c = conn_pending_server_get();
		pthread_mutex_unlock(&conn_list_lock);
		if (!c)
			return;
		while (r == 0 && __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
			r = conn_wait(c, 0, true, deadline, NULL);
		conn_put(c);
		if (r < 0)
			return; /* a signal, or the deadline: fork anyway */
	}
}

void conn_fork_settle(void)
{
	conn_settle_pending_servers();
}

/* Nobody calls into the registry while holding another of the library's locks. */
bool conn_fork_lock_registry(void)
{
	enum forklock_result r = forklock_take(&conn_list_lock);

	registry_held = r == FORKLOCK_TAKEN;
	return r != FORKLOCK_BUSY;
}

/* c->lock guards state changes, fd counts and epoll links: bounded work (the longest,
 * a handshake's end flushing staged bytes to TCP, waits a handshake timeout a step). */
bool conn_fork_lock_conns(void)
{
	if (!registry_held)
		return true; /* after the patience: the list cannot be walked */
	for (struct conn_node *n = conn_list; n; n = n->next)
		if (forklock_take(&n->c->lock) == FORKLOCK_BUSY)
			return false;
	return true;
}

void conn_fork_prepare(void)
{
	if (registry_held)
		conn_refs_add();
}

/*
 * The child's copy of each connection. Its lock and the registry's were held by the
 * forking thread (forklock.h); rx_lock and tx_lock may have been held by threads that
 * do not exist here, asleep in recv or send, or copying. Re-initialised, and what they
 * guard is sound:
 *  - the cursors (rx_cons, tx_prod and what was seen of the peer's): every ACTIVE
 *    connection is fork_shared now, so the child's first receive and send under the
 *    lock take them from the shared control block (rx_resync, tx_resync), where a
 *    half-done copy had published nothing; the bytes a parent's thread had copied
 *    without publishing stay the parent's to publish;
 *  - the staging buffer of a PENDING connection: pend_len grows only after the copy,
 *    so the child has the bytes of every complete conn_send_pending, and a flush runs
 *    only under c->lock, which no thread held;
 *  - copy_adapt's store choice: statistics of timings, any value is a valid choice;
 *  - the sleeper counts this process keeps (asleep_rx/tx): the parent's threads added
 *    them and take them back from the shared counts; the child's own start at zero
 *    (as epoll.c does for its watches).
 * Per-connection byte counts start at zero (what this process moved: stats.h), and the
 * child does not judge the handshake policy of a connection it did not make.
 * A handshake still running is the parent's progress thread's: the child closes its copy
 * of the connection's rendezvous socket, whose name would otherwise stay taken as long
 * as the child lives, and a later connection that gets the same ports could not bind
 * it (the parent's copy keeps the socket for the handshake). The child can never learn
 * how it ends (the shared memory, if any, comes to the parent), so its copy is an
 * orphan: the bytes staged in it are the parent's, which sends them once (the child's
 * close must not send them again over TCP), and the child's own reads and writes fail
 * with ECONNRESET at once, poll reporting it, rather than wait for ever or be staged
 * and lost; nor does the child's watchdog reset a connection the parent goes on using.
 */
void conn_fork_child(void)
{
	for (struct conn_node *n = conn_list; n; n = n->next) {
		struct smc_conn *c = n->c;

		pthread_mutex_init(&c->rx_lock, NULL);
		pthread_mutex_init(&c->tx_lock, NULL);
		c->asleep_rx = c->asleep_tx = 0;
		c->bytes_sent = c->bytes_received = 0;
		c->exchanges = 0;
		c->tx_rx_mark = 0;
		c->policy_key = 0;
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
			c->fork_orphan = true;
			c->pend_len = 0;
		}
		conn_close_rdv(c);
		progress_watch_fd_drop(c); /* the parent's progress thread's */
		conn_ib_atfork_child(c);
	}
}

/* The fork failed: the holders counted for its child go again. A connection closed and
 * freed meanwhile keeps its extra holder; its TCP end still tells the peer. */
void conn_fork_failed(void)
{
	pthread_mutex_lock(&conn_list_lock);
	for (struct conn_node *n = conn_list; n; n = n->next) {
		struct smc_conn *c = n->c;

		if (c->fork_held == fork_count && fork_count != 0) {
			__atomic_sub_fetch(&c->map.hdr->side_refs[c->side], 1, __ATOMIC_ACQ_REL);
			c->fork_held = 0;
		}
	}
	pthread_mutex_unlock(&conn_list_lock);
}

/* ------------------------------------------------------------------ helpers */

static inline int conn_state(struct smc_conn *c)
{
	return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;

	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* ------------------------------------------------------------------ lifecycle */

static struct smc_conn *conn_alloc(int fd, enum conn_side side)
{
	struct smc_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->fd = fd;
	c->fd_refs = 1;
	c->obj_refs = 1;
	c->side = side;
	c->state = CONN_PENDING;
	c->mode = SMC_MODE_SHM;
	c->rdv_listen_fd = -1;
	c->watch_fd = -1;
	c->pool_slot = -1;
	c->peer_rx_bell = c->peer_tx_bell = -1;
	c->resend_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->rx_lock, NULL);
	pthread_mutex_init(&c->tx_lock, NULL);
	return c;
}

struct smc_conn *conn_new(int fd, enum conn_side side)
{
	struct smc_conn *c = conn_alloc(fd, side);

	if (!c)
		return NULL;
	c->rx_bell = fd_park(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	c->tx_bell = fd_park(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (c->rx_bell < 0 || c->tx_bell < 0) {
		int e = errno;

		if (c->rx_bell >= 0)
			fd_own_close(c->rx_bell);
		if (c->tx_bell >= 0)
			fd_own_close(c->tx_bell);
		pthread_mutex_destroy(&c->lock);
		pthread_mutex_destroy(&c->rx_lock);
		pthread_mutex_destroy(&c->tx_lock);
		free(c);
		errno = e; /* EMFILE/ENFILE: the caller's reason is fd-limit */
		return NULL;
	}
	fd_budget_take(2);
	/* The handshake creates the rest later (on the progress thread, for a client):
	 * reserved now, so that a burst of connects is judged by what it will hold. */
	c->fd_reserved = FD_COST_CONN - 2;
	fd_budget_reserve(c->fd_reserved);
	conn_list_add(c);
	return c;
}

/* The handshake ended (or never will): only what the connection keeps stays counted. */
static void conn_end_reservation(struct smc_conn *c)
{
	unsigned n = __atomic_exchange_n(&c->fd_reserved, 0, __ATOMIC_RELAXED);

	if (n)
		fd_budget_unreserve(n);
}

void conn_set_rdv(struct smc_conn *c, int fd)
{
	c->rdv_listen_fd = fd;
	if (fd >= 0)
		fd_budget_take(1);
}

void conn_close_rdv(struct smc_conn *c)
{
	if (c->rdv_listen_fd < 0)
		return;
	fd_own_close(c->rdv_listen_fd);
	c->rdv_listen_fd = -1;
	fd_budget_give(1);
}

void conn_get(struct smc_conn *c)
{
	__atomic_add_fetch(&c->obj_refs, 1, __ATOMIC_RELAXED);
}

static void conn_free(struct smc_conn *c)
{
	conn_end_reservation(c);
	conn_list_del(c);
	if (c->bytes_sent || c->bytes_received)
		log_debug("conn fd %d closed: sent %llu received %llu", c->fd,
			  (unsigned long long)c->bytes_sent, (unsigned long long)c->bytes_received);
	if (c->pool) {
		/* the doorbells and the memory are the pool's: leave no count on them */
		unsigned undrained = __atomic_load_n(&c->bells_undrained, __ATOMIC_RELAXED);

		if (undrained & CONN_BELL_RX)
			bell_drain(c->rx_bell);
		if (undrained & CONN_BELL_TX)
			bell_drain(c->tx_bell);
		if (c->pool_slot >= 0)
			pool_conn_done(c->pool, c->pool_slot);
		else
			pool_put(c->pool);
		memset(&c->map, 0, sizeof(c->map));
	} else {
		fd_own_close(c->rx_bell);
		fd_own_close(c->tx_bell);
		fd_budget_give(2);
		if (c->peer_rx_bell >= 0) {
			fd_own_close(c->peer_rx_bell);
			fd_budget_give(1);
		}
		if (c->peer_tx_bell >= 0) {
			fd_own_close(c->peer_tx_bell);
			fd_budget_give(1);
		}
	}
	conn_close_rdv(c);
	if (c->resend_fd >= 0) {
		fd_own_close(c->resend_fd);
		fd_budget_give(1);
	}
	if (c->ib)
		conn_ib_free(c);
	shm_detach(&c->map);
	free(c->pend_buf);
	if (__atomic_load_n(&c->reserved, __ATOMIC_RELAXED))
		shm_unreserve(__atomic_load_n(&c->reserved, __ATOMIC_RELAXED));
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->rx_lock);
	pthread_mutex_destroy(&c->tx_lock);
	free(c);
}

void conn_put(struct smc_conn *c)
{
	if (__atomic_sub_fetch(&c->obj_refs, 1, __ATOMIC_ACQ_REL) == 0)
		conn_free(c);
}

void conn_wake_local(struct smc_conn *c)
{
	bell_ring(c->rx_bell);
	bell_ring(c->tx_bell);
}

/* Data the application sent while the handshake ran, staged as TCP would hold it in its
 * send buffer: small, so it always fits an empty ring or a fresh TCP send buffer. */
#define CONN_PENDING_BUF (8u * 1024)

static void ring_if_asleep(const uint32_t *sleepers, const uint32_t *seq, uint32_t *rung,
			   int bell);

/* The staging buffer is used only while PENDING: an idle connection keeps no 8 KiB
 * for the first bytes it sent. With tx_lock held, as the state leaves PENDING. */
static void pending_drop(struct smc_conn *c)
{
	free(c->pend_buf);
	c->pend_buf = NULL;
	c->pend_len = 0;
}

/* With tx_lock held, before the state leaves PENDING: into the (empty) ring. */
static void pending_flush_shm(struct smc_conn *c)
{
	uint32_t n = c->pend_len < c->tx_size ? (uint32_t)c->pend_len : c->tx_size;

	if (!n) {
		pending_drop(c);
		return;
	}
	c->tx_prod = ring_copy_in(c->tx_ring, c->tx_size, c->tx_prod, c->pend_buf, n);
	__atomic_store_n(&c->tx->prod, c->tx_prod, __ATOMIC_RELEASE);
	if (c->ib)
		conn_ib_tx_published(c);
	else
		/* the peer may be active and asleep in its read already: a client's
		 * Confirm leaves before it turns active, and a server finishing in the
		 * background turns active after its client */
		ring_if_asleep(&c->tx->r_sleepers, &c->tx->r_seq, &c->rung_rx_seq,
			       c->peer_rx_bell);
	c->bytes_sent += n;
	stats_bytes(c->mode, n, 0);
	pending_drop(c);
}

/* With tx_lock held, before the state becomes FALLBACK: onto the TCP socket. */
static void pending_flush_tcp(struct smc_conn *c)
{
	size_t off = 0;

	while (off < c->pend_len) {
		ssize_t r = REAL(send)(c->fd, c->pend_buf + off, c->pend_len - off,
				       MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r > 0) {
			off += (size_t)r;
			stats_bytes(SMC_MODE_TCP, (size_t)r, 0);
		} else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd p = { .fd = c->fd, .events = POLLOUT };

			if (REAL(poll)(&p, 1, (int)smc_cfg.handshake_timeout_ms) <= 0)
				break;
		} else {
			break; /* the connection failed: TCP would lose it too */
		}
	}
	pending_drop(c);
}

ssize_t conn_send_pending(struct smc_conn *c, const struct iovec *iov, int iovcnt)
{
	size_t want = iov_total(iov, iovcnt), n;
	bool full;

	if (c->fork_orphan)
		return -1; /* nothing may be staged: see conn_fork_child */
	pthread_mutex_lock(&c->tx_lock);
	if (conn_state(c) != CONN_PENDING || want == 0) {
		pthread_mutex_unlock(&c->tx_lock);
		return 0;
	}
	if (!c->pend_buf)
		c->pend_buf = malloc(CONN_PENDING_BUF);
	n = c->pend_buf ? CONN_PENDING_BUF - c->pend_len : 0;
	if (n > want)
		n = want;
	/* the staging buffer as a ring that never wraps: pend_len + n <= its size */
	if (n)
		ring_copy_in_iov(c->pend_buf, CONN_PENDING_BUF, c->pend_len, iov, iovcnt, 0, n,
				 false);
	c->pend_len += n;
	if (n)
		__atomic_store_n(&c->sent_last, true, __ATOMIC_RELAXED);
	/* the send waits for the handshake from here on: not for long (progress.h) */
	full = (n < want || c->pend_len == CONN_PENDING_BUF) && !c->pend_full_told;
	if (full)
		c->pend_full_told = true;
	pthread_mutex_unlock(&c->tx_lock);
	if (full)
		progress_watch_staging_full(c);
	return n ? (ssize_t)n : -1;
}

/* wake: ring our own bells so that every waiter re-evaluates (nobody waits on a
 * connection that is ACTIVE from its first moment) */
static void conn_go_active(struct smc_conn *c, bool wake)
{
	int rxd = c->side == CONN_CLIENT ? 1 : 0; /* dir[0] is client->server */
	int txd = 1 - rxd;

	if (c->ib) {
		conn_ib_activate(c); /* sets mode */
	} else {
		c->rx = &c->map.hdr->dir[rxd];
		c->tx = &c->map.hdr->dir[txd];
		c->rx_ring = c->map.ring[rxd];
		c->tx_ring = c->map.ring[txd];
		c->rx_size = c->map.size[rxd];
		c->tx_size = c->map.size[txd];
		c->mode = SMC_MODE_SHM;
	}
	c->rx_cons = c->rx_prod_seen = 0;
	c->tx_prod = c->tx_cons_seen = 0;
	pthread_mutex_lock(&c->tx_lock);
	pending_flush_shm(c);
	__atomic_store_n(&c->state, CONN_ACTIVE, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->tx_lock);
	stats_conn(c->mode, SMC_REASON_NONE);
	log_debug("fd %d: %s connection active (%s, rx %u tx %u%s)", c->fd, stats_mode_name(c->mode),
		  c->side == CONN_CLIENT ? "client" : "server", c->rx_size, c->tx_size,
		  c->pool ? ", pooled" : "");
	if (wake)
		conn_wake_local(c);
}

void conn_activate(struct smc_conn *c)
{
	conn_end_reservation(c);
	/* the policy judges how long the connection is used, not how long its handshake
	 * took (a slow one on a busy host would otherwise pass for a long connection) */
	if (c->policy_key)
		c->born_ns = clock_now_ns();
	conn_go_active(c, true);
}

struct smc_conn *conn_new_pooled(int fd, enum conn_side side, struct smc_pool *p, int slot)
{
	struct smc_conn *c = conn_alloc(fd, side);
	int bells[4];

	if (!c)
		return NULL;
	c->pool = p;
	c->pool_slot = slot;
	pool_slot_conn(p, slot, &c->map, bells);
	c->rx_bell = bells[0];
	c->tx_bell = bells[1];
	c->peer_rx_bell = bells[2];
	c->peer_tx_bell = bells[3];
	conn_list_add(c);
	return c;
}

void conn_activate_pooled(struct smc_conn *c, bool watched)
{
	conn_go_active(c, watched);
	stats_count_pooled();
}

/* The TCP connection is established, or was and its peer closed it: a server may still
 * accept it. Not so for one whose connect failed or that was reset. */
static bool tcp_may_be_accepted(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return true;
	return ti.tcpi_state == TCP_ESTABLISHED || ti.tcpi_state == TCP_CLOSE_WAIT;
}

bool conn_pool_withdraw(struct smc_conn *c, bool server_gone)
{
	if (!c->pool || c->pool_slot < 0 ||
	    !pool_client_withdraw(c->pool, c->pool_slot, server_gone))
		return false;
	c->pool_slot = -1;
	return true;
}

static void fallback_to_tcp(struct smc_conn *c, enum smc_reason why, bool counted)
{
	conn_end_reservation(c);
	c->reason = why;
	c->mode = SMC_MODE_TCP;
	pthread_mutex_lock(&c->tx_lock);
	pending_flush_tcp(c);
	__atomic_store_n(&c->state, CONN_FALLBACK, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->tx_lock);
	if (counted)
		stats_conn(SMC_MODE_TCP, why);
	log_debug("fd %d: plain TCP (%s)", c->fd, stats_reason_name(why));
	conn_wake_local(c);
}

void conn_fallback(struct smc_conn *c, enum smc_reason why)
{
	fallback_to_tcp(c, why, true);
}

/* Marks the connection aborted because the peer broke the protocol: the connection
 * ends with ECONNRESET, nothing is read or written outside the rings. */
static void conn_abort_protocol(struct smc_conn *c, const char *what)
{
	bool first = !c->aborted;

	if (first) {
		log_warn("fd %d: peer sent an invalid %s: connection aborted", c->fd, what);
		stats_count_abort();
	}
	c->aborted = true;
	/* readiness hook: epoll sets learn about changes only from the bells */
	if (first)
		conn_wake_local(c);
}

static void rx_publish(struct smc_conn *c, bool last);

/* Before a new producer cursor is validated: when the writer rewound (tx_rewind) at our
 * cursor, ours jumps to the lap start it moved to, and the new cursor counts from there.
 * 0, or -1 (aborted) for a rewind that cannot be: anywhere but at our cursor with
 * everything before it read, or a producer cursor that does not cover the jump. */
static int rx_take_rewind(struct smc_conn *c, smc_cursor prod)
{
	uint32_t seq = __atomic_load_n(&c->rx->skip_seq, __ATOMIC_ACQUIRE);
	smc_cursor at, next;

	if (seq == __atomic_load_n(&c->rx->skip_done, __ATOMIC_RELAXED))
		return 0;
	at = __atomic_load_n(&c->rx->skip_at, __ATOMIC_RELAXED);
	if (conn_rewind_check(at, c->rx_cons, c->rx_prod_seen, prod, c->rx_size, &next) < 0) {
		conn_abort_protocol(c, "ring rewind");
		return -1;
	}
	__atomic_store_n(&c->rx_cons, next, __ATOMIC_RELAXED);
	c->rx_prod_seen = next;
	__atomic_store_n(&c->rx->skip_done, seq, __ATOMIC_RELAXED);
	rx_publish(c, true); /* the writer's view of its room no longer needs the rewind */
	return 0;
}

/*
 * SMC_MEM_CAP counts memory that is used: a connection is admitted for its control
 * page (handshake.c), and its RMB's pages count once the peer has written into them.
 * The writer fills a ring from its start and a rewind goes back to the start, so what
 * it has touched is always a prefix of the ring, up to the furthest producer cursor
 * seen; a new cursor [from, +n) that runs past the end has touched the whole ring.
 * Counted, not checked: the connection is admitted already and its peer may fill its
 * ring as TCP's peer may fill a receive buffer (the cap decides the next admissions).
 * Several threads may look at once: the prefix only grows, by compare-and-swap.
 */
static void rx_count_touched(struct smc_conn *c, smc_cursor from, uint32_t n)
{
	uint64_t end = (uint64_t)cursor_count(from) + n;
	uint32_t want, cur;

	if (c->pool)
		return; /* the pool's region, counted by nobody (pool.h) */
	end = (end + SHM_PAGE - 1) & ~(uint64_t)(SHM_PAGE - 1);
	want = end >= c->rx_size ? c->rx_size : (uint32_t)end;
	cur = __atomic_load_n(&c->rx_touched, __ATOMIC_RELAXED);
	while (want > cur) {
		if (__atomic_compare_exchange_n(&c->rx_touched, &cur, want, true,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			shm_charge(want - cur);
			__atomic_add_fetch(&c->reserved, (size_t)(want - cur), __ATOMIC_RELAXED);
			return;
		}
	}
}

/* Peer's producer cursor, validated. Returns readable bytes (>= 0) or -1 when aborted. */
static int64_t rx_used(struct smc_conn *c)
{
	smc_cursor prod;

	if (c->ib)
		return conn_ib_rx_used(c);
	prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);

	if (prod != c->rx_prod_seen) {
		if (rx_take_rewind(c, prod) < 0)
			return -1;
		if (cdc_validate_peer_prod(prod, c->rx_prod_seen, c->rx_cons, c->rx_size) < 0) {
			conn_abort_protocol(c, "producer cursor");
			return -1;
		}
		rx_count_touched(c, c->rx_prod_seen,
				 (uint32_t)cursor_diff(prod, c->rx_prod_seen, c->rx_size));
		c->rx_prod_seen = prod;
	}
	return ring_used(c->rx_prod_seen, c->rx_cons, c->rx_size);
}

/* The cursor our room counts from, given the reader's cons: while the reader has not
 * jumped our latest rewind, the lap start it moved to (the skipped rest of the lap holds
 * nothing, so it is room as soon as the rewind is published, reader or not). Lockless:
 * everything here is in the shared block. */
static smc_cursor tx_room_base(struct smc_conn *c, smc_cursor cons)
{
	/* skip_at is loaded only while a rewind is pending, as before the check moved */
	if (__atomic_load_n(&c->tx->skip_seq, __ATOMIC_RELAXED) ==
	    __atomic_load_n(&c->tx->skip_done, __ATOMIC_RELAXED))
		return cons;
	return conn_rewind_room_base(true, __atomic_load_n(&c->tx->skip_at, __ATOMIC_RELAXED),
				     cons, c->tx_size);
}

/* Peer's consumer cursor, validated. Returns free bytes (>= 0) or -1 when aborted. */
static int64_t tx_free(struct smc_conn *c)
{
	smc_cursor cons;
	int64_t room;

	if (c->ib)
		return conn_ib_tx_free(c);
	cons = __atomic_load_n(&c->tx->cons, __ATOMIC_ACQUIRE);

	/* Checked against itself, not the last one seen (last_cons = cons): a reader that
	 * jumped a rewind and then read a whole lap moved more than a lap since we last
	 * looked. Going backwards would only cost it room; it must stay within what we
	 * wrote. */
	if (cons != c->tx_cons_seen) {
		if (cdc_validate_peer_cons(cons, cons, c->tx_prod, c->tx_size) < 0) {
			conn_abort_protocol(c, "consumer cursor");
			return -1;
		}
		c->tx_cons_seen = cons;
	}
	room = ring_free(c->tx_prod, tx_room_base(c, c->tx_cons_seen), c->tx_size);
	if (room < 0) {
		/* Our rewind is pending at the reader's cursor, yet its lap start lies
		 * beyond what we wrote: no rewind of ours left it so (we name the cursor we
		 * leave and write from that lap start on), so the reader forged skip_done
		 * or our skip fields. Reporting "no room" instead would never end: the
		 * readiness peek takes the impossible cursor for "writable" so that we meet
		 * it, and pollers and blocking sends would spin on it. */
		conn_abort_protocol(c, "ring rewind");
		return -1;
	}
	return room;
}

static inline uint32_t peer_wflags(struct smc_conn *c)
{
	return __atomic_load_n(&c->rx->wflags, __ATOMIC_ACQUIRE);
}

static inline uint32_t peer_rflags(struct smc_conn *c)
{
	return __atomic_load_n(&c->tx->rflags, __ATOMIC_ACQUIRE);
}

/*
 * After a fork several processes may read from (or write to) this side's rings while one
 * of them leaves for TCP (conn_downgrade at its exec). Each copy is made under the
 * direction's word of the shared block, after checking the side is still on the rings,
 * and the leaver stores its cursors and the flag under both: otherwise a sibling that
 * checked before the flag publishes its cursor after the leaver's, and the peer re-sends
 * over TCP what that sibling already took (ncat -k --exec echoed a first line twice).
 * Nothing waits under it; a holder that died is taken over.
 */
static void fork_lock(struct smc_conn *c, int dir)
{
	uint32_t *w = &c->map.hdr->fork_lock[c->side][dir];
	uint32_t me = (uint32_t)getpid();

	for (unsigned tries = 1;; tries++) {
		uint32_t cur = 0;

		if (__atomic_compare_exchange_n(w, &cur, me, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		if (tries % 1024 == 0 && !sandbox_active() && kill((pid_t)cur, 0) < 0 &&
		    errno == ESRCH)
			__atomic_compare_exchange_n(w, &cur, 0, false, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
		sandbox_yield();
	}
}

static void fork_unlock(struct smc_conn *c, int dir)
{
	__atomic_store_n(&c->map.hdr->fork_lock[c->side][dir], 0, __ATOMIC_RELEASE);
}

/* After a fork, this side of the connection may be driven by several processes in
 * turn (a parent hands a connection to its child, or takes it back): our cursors are
 * then the ones in the shared control block, not our private copies. */
static void rx_resync(struct smc_conn *c)
{
	smc_cursor cons;

	if (!c->fork_shared)
		return;
	cons = __atomic_load_n(&c->rx->cons, __ATOMIC_ACQUIRE);
	if (cons == c->rx_cons)
		return;
	if (!cursor_valid(cons, c->rx_size)) {
		conn_abort_protocol(c, "consumer cursor"); /* the caller meets c->aborted */
		return;
	}
	__atomic_store_n(&c->rx_cons, cons, __ATOMIC_RELAXED);
	c->rx_prod_seen = cons;
}

static void tx_resync(struct smc_conn *c)
{
	smc_cursor prod, cons;
	int64_t used;

	/* not even a load otherwise: cons sits on the reader's line, which every read of
	 * the peer's moves to its CPU (one cache-line round trip per send) */
	if (!c->fork_shared)
		return;
	prod = __atomic_load_n(&c->tx->prod, __ATOMIC_ACQUIRE);
	cons = __atomic_load_n(&c->tx->cons, __ATOMIC_ACQUIRE);
	if (prod == c->tx_prod)
		return;
	used = cursor_diff(prod, tx_room_base(c, cons), c->tx_size);
	if (!cursor_valid(prod, c->tx_size) || used < 0 || used > c->tx_size) {
		conn_abort_protocol(c, "producer cursor"); /* the caller meets c->aborted */
		return;
	}
	__atomic_store_n(&c->tx_prod, prod, __ATOMIC_RELAXED);
	c->tx_cons_seen = cons;
}

/* Readiness checks from any thread, without the reader's or writer's lock: they never
 * abort, an impossible cursor reads as "ready" so that the reader or writer, which
 * validates under its lock, meets it and aborts the connection. */
static int64_t rx_used_peek(struct smc_conn *c)
{
	smc_cursor prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);
	smc_cursor cons = __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED);
	int64_t d = c->ib ? conn_ib_rx_used(c) : cursor_diff(prod, cons, c->rx_size);

	return d < 0 || d > c->rx_size ? 1 : d;
}

static int64_t tx_free_peek(struct smc_conn *c)
{
	smc_cursor cons = __atomic_load_n(&c->tx->cons, __ATOMIC_ACQUIRE);
	smc_cursor prod = __atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED);
	int64_t d = c->ib ? c->tx_size - conn_ib_tx_free(c)
			  : cursor_diff(prod, tx_room_base(c, cons), c->tx_size);

	return d < 0 || d > c->tx_size ? 1 : c->tx_size - d;
}

/* No more data will ever arrive once the ring is drained. */
static bool rx_eof(struct smc_conn *c)
{
	/* over RDMA the TCP channel's end may overtake the last data: the CDCs decide */
	if (c->ib)
		return conn_ib_rx_eof(c);
	if (peer_wflags(c) & (SHM_W_ABORT)) {
		c->aborted = true;
		return true;
	}
	return c->tcp_eof || (peer_wflags(c) & (SHM_W_DONE_WRITING | SHM_W_CLOSED));
}

/* Nothing we write can ever be read. */
static bool tx_dead(struct smc_conn *c)
{
	if (c->ib)
		return conn_ib_tx_dead(c);
	if (peer_rflags(c) & SHM_R_ABORT)
		c->aborted = true;
	return c->tcp_eof || (peer_rflags(c) & (SHM_R_CLOSED | SHM_R_ABORT));
}

/* ------------------------------------------------------------------ downgrade */

/*
 * Downgrade: an upgraded connection goes back to plain TCP mid-stream without losing a
 * byte, because its fd goes into a program that will not know the rings (exec). The
 * side that leaves (conn_downgrade) stores its cursors, then SHM_W_TCP, rings the
 * peer's bells, and is plain TCP at once: it waits for nothing, so a busy or dead peer
 * cannot hold up an exec. The TCP byte stream stands where the upgrade left it (nothing
 * travels on it after the handshake), so it carries on from what the cursors name:
 *   - the leaver's stream: the peer reads what is left in its ring, then the TCP socket;
 *   - the peer's stream: what the leaver did not read, from its cons to our producer
 *     cursor, is still in the ring we map; we send it over TCP before anything else
 *     (resend_*), without blocking, the progress thread sending what the socket does
 *     not take at once, and our later sends follow on TCP.
 * Once both are done the connection is FALLBACK here too (down_finish), and the
 * readiness emulation hands the socket back to the kernel. As TCP sends its queued
 * bytes whatever the program does next, the re-sent bytes go out whatever ours does:
 * every call and readiness check looks, sleepers wake on the bells the leaver rang, and
 * a close leaves the rest to the progress thread. Setting SHM_W_TCP on our own side
 * claims the re-send, so that of several processes holding our side (fork) one sends
 * it; the others, like those of the leaver's side, are plain TCP from then on. When
 * both ends leave at once, the second finds the first's flag: it sends what it owes,
 * and what the first left unread in its ring has no reader any more: reset.
 */

static bool eintr_restarts(int64_t timeo_ns);

#define DOWN_RETRY_MS 20          /* the progress thread looks at least this often */
#define DOWN_SECOND_NS 1000000000ull /* the second of two leavers: its re-send's bound */
#define DOWN_ANSWER_NS 3000000000ull /* over RDMA: the peer's answer to our flag */

static bool peer_went_tcp(struct smc_conn *c)
{
	bool no = false;

	uint32_t wf;

	if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
		return true;
	if (c->ib) {
		smc_cursor cons;

		/* over RDMA the leaver's close follows its flag (conn_downgrade) */
		if (!conn_ib_peer_went_tcp(c, &cons))
			return false;
	} else {
		/* a leaver closes and aborts nothing on the rings after its flag: with
		 * either, the close or abort is what counts */
		wf = peer_wflags(c);
		if ((wf & (SHM_W_TCP | SHM_W_CLOSED | SHM_W_ABORT)) != SHM_W_TCP)
			return false;
	}
	if (__atomic_compare_exchange_n(&c->peer_tcp, &no, true, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		stats_count_downgrade(true);
		log_debug("fd %d: the peer went back to TCP", c->fd);
	}
	return true;
}

/* Another process holding our side took the connection to TCP (a forked sibling that
 * exec'd, or that re-sends for us): plain TCP here too. */
static bool side_went_tcp(struct smc_conn *c)
{
	int st = CONN_ACTIVE;

	if (!c->fork_shared || c->ib || __atomic_load_n(&c->resend_taken, __ATOMIC_ACQUIRE) ||
	    !(__atomic_load_n(&c->tx->wflags, __ATOMIC_ACQUIRE) & SHM_W_TCP))
		return false;
	if (__atomic_compare_exchange_n(&c->state, &st, CONN_FALLBACK, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		c->reason = SMC_REASON_EXEC;
		c->mode = SMC_MODE_TCP;
		log_debug("fd %d: plain TCP (taken back by another process of this side)", c->fd);
		conn_wake_local(c);
	}
	return true;
}

/*
 * A sibling of our side left the rings (side_went_tcp) with bytes in our ring it had not
 * read: the peer re-sends them over TCP as soon as it sees the flag, but they may not be
 * in the socket yet. A readiness call of ours that ran before the sibling left reported
 * them readable (the ring), and TCP never answers a read that follows "readable" with
 * EAGAIN: programs take that for an error (ncat --exec's relay ends the connection, its
 * close then resets it). So the first nonblocking read after the switch waits for them,
 * bounded: the peer's library sends them without waiting for its program, and a peer
 * that died ends the TCP connection, which ends the wait too.
 */
static void side_rest_wait(struct smc_conn *c, bool nonblock)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLRDHUP };
	smc_cursor prod, cons;

	if (!nonblock || c->ib || c->side_rest_waited)
		return;
	c->side_rest_waited = true;
	prod = __atomic_load_n(&c->rx->prod, __ATOMIC_ACQUIRE);
	cons = __atomic_load_n(&c->rx->cons, __ATOMIC_ACQUIRE);
	if (prod == cons)
		return; /* the sibling read all: nothing is owed */
	(void)REAL(poll)(&p, 1, (int)smc_cfg.handshake_timeout_ms);
}

/* fork_lock(dir) when this side is still on the rings (true); false, holding nothing,
 * when a process of our side took it back to TCP. */
static bool fork_lock_rings(struct smc_conn *c, int dir)
{
	fork_lock(c, dir);
	if (!side_went_tcp(c))
		return true;
	fork_unlock(c, dir);
	return false;
}

/* Under tx_lock: fixes what the peer did not read, from its cons (or the lap start of a
 * rewind of ours it has not jumped) to our producer cursor, which moves no more. */
static int resend_take(struct smc_conn *c)
{
	smc_cursor cons, base;
	int64_t used;
	uint32_t had;

	if (c->resend_taken)
		return c->aborted ? -1 : 0;
	if (c->ib) {
		/* the CDC_WENT_TCP's cursor; over RDMA there are no rewinds */
		if (!conn_ib_peer_went_tcp(c, &cons))
			return -1;
		base = cons;
	} else {
		/* stored before the SHM_W_TCP that peer_went_tcp loaded with acquire */
		cons = __atomic_load_n(&c->tx->cons, __ATOMIC_ACQUIRE);
		base = tx_room_base(c, cons);
	}
	used = cursor_diff(c->tx_prod, base, c->tx_size);
	if (cdc_validate_peer_cons(cons, cons, c->tx_prod, c->tx_size) < 0 || used < 0 ||
	    used > c->tx_size) {
		conn_abort_protocol(c, "consumer cursor");
		return -1;
	}
	c->resend_at = base;
	c->resend_end = c->tx_prod;
	/* over RDMA no other process holds our side (a forked child's copy is dead) */
	had = c->ib ? 0 : __atomic_fetch_or(&c->tx->wflags, SHM_W_TCP, __ATOMIC_ACQ_REL);
	if (had & SHM_W_TCP)
		c->resend_at = c->resend_end; /* another process of our side claimed it */
	__atomic_store_n(&c->resend_taken, true, __ATOMIC_RELEASE);
	return 0;
}

/* One send that does not block, with what a seccomp sandbox leaves (sandbox.h). */
static ssize_t tcp_send_now(int fd, const uint8_t *p, size_t n)
{
	struct pollfd pf = { .fd = fd, .events = POLLOUT };

	if (!sandbox_active())
		return REAL(send)(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (REAL(poll)(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT))
		return errno = (pf.revents & (POLLERR | POLLHUP)) ? EPIPE : EAGAIN, -1;
	/* less than the room POLLOUT promises (a third of the send buffer at least) */
	return REAL(write)(fd, p, n < 4096 ? n : 4096);
}

/* Under tx_lock: sends what is left of the re-send over fd without blocking; true when
 * all of it is out, or the socket is gone (nothing left to carry it). */
static bool resend_flush(struct smc_conn *c, int fd)
{
	while (c->resend_at != c->resend_end) {
		uint32_t off = cursor_count(c->resend_at);
		int64_t left = cursor_diff(c->resend_end, c->resend_at, c->tx_size);
		size_t n = (size_t)left < c->tx_size - off ? (size_t)left : c->tx_size - off;
		ssize_t r = tcp_send_now(fd, c->tx_ring + off, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		if (r <= 0) {
			log_debug("fd %d: re-send to a peer gone back to TCP: %s", c->fd,
				  r < 0 ? strerror(errno) : "nothing sent");
			c->resend_at = c->resend_end;
			break;
		}
		c->resend_at = cursor_add(c->resend_at, (uint32_t)r, c->tx_size);
	}
	if (!__atomic_load_n(&c->resend_done, __ATOMIC_RELAXED)) {
		__atomic_store_n(&c->resend_done, true, __ATOMIC_SEQ_CST);
		/* a shutdown(SHUT_WR) the peer knew from our flags it now learns from TCP
		 * (conn_shutdown: one of us sees the other's store) */
		if (__atomic_load_n(&c->shut_wr, __ATOMIC_SEQ_CST))
			REAL(shutdown)(fd, SHUT_WR);
		conn_wake_local(c); /* writers and readiness waited for it */
	}
	return true;
}

/* The peer's stream read up to where it left, ours re-sent: plain TCP from now on.
 * Lockless (the state moves once); true when the connection is FALLBACK. */
static bool down_finish(struct smc_conn *c)
{
	int st = CONN_ACTIVE;

	if (!__atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE) || rx_used_peek(c) != 0)
		return false;
	if (!__atomic_compare_exchange_n(&c->state, &st, CONN_FALLBACK, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return st == CONN_FALLBACK;
	c->reason = SMC_REASON_PEER_DOWNGRADE;
	c->mode = SMC_MODE_TCP;
	log_debug("fd %d: plain TCP (%s)", c->fd, stats_reason_name(c->reason));
	if (c->ib)
		conn_ib_release(c, false); /* CDC_CONN_CLOSED: the leaver may free its RMB */
	conn_wake_local(c);
	return true;
}

static void resend_watch(struct smc_conn *c);

/* Progress thread: the socket takes more (or DOWN_RETRY_MS passed after a busy lock:
 * while the socket is full the thread sleeps, as TCP's queue waits). Also wakes our
 * waiters when a send of ours found the socket full: the readiness emulation watches
 * the TCP socket for input only. */
static void on_resend_writable(void *arg)
{
	struct smc_conn *c = arg;

	if (pthread_mutex_trylock(&c->tx_lock) != 0) {
		/* a sender has it: it sends, or leaves the rest to us again */
		if (progress_watch_writable(c->resend_fd, DOWN_RETRY_MS, on_resend_writable, c) == 0)
			return;
		pthread_mutex_lock(&c->tx_lock);
	}
	if (!c->aborted && !resend_flush(c, c->resend_fd) &&
	    progress_watch_writable(c->resend_fd, 0, on_resend_writable, c) == 0) {
		pthread_mutex_unlock(&c->tx_lock);
		return;
	}
	c->resend_watched = false;
	pthread_mutex_unlock(&c->tx_lock);
	conn_wake_local(c);
	down_finish(c);
	conn_put(c);
}

/* Under tx_lock: the progress thread finishes the re-send (and rings our bells when the
 * socket takes more), over its own descriptor of the socket: the program may close its
 * fds before. */
static void resend_watch(struct smc_conn *c)
{
	if (c->resend_watched)
		return;
	if (c->resend_fd < 0) {
		c->resend_fd = fd_own(REAL(fcntl)(c->fd, F_DUPFD_CLOEXEC, 0));
		if (c->resend_fd < 0) {
			log_warn("fd %d: no descriptor to finish a re-send to the peer: %s", c->fd,
				 strerror(errno));
			return;
		}
		fd_budget_take(1);
	}
	conn_get(c);
	if (progress_watch_writable(c->resend_fd, 0, on_resend_writable, c) < 0) {
		log_warn("fd %d: the progress thread cannot finish a re-send to the peer", c->fd);
		conn_put(c);
		return;
	}
	c->resend_watched = true;
}

/* Takes the re-send and sends what the socket takes now, leaving the rest to the
 * progress thread; true when all of it is out. tx_locked: the caller holds tx_lock;
 * otherwise a busy lock means a sender is at it. */
static bool down_step(struct smc_conn *c, bool tx_locked)
{
	bool done;

	if (__atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE))
		return true;
	if (!tx_locked && pthread_mutex_trylock(&c->tx_lock) != 0)
		return false;
	/* after the program's close (an orphan, below) only that descriptor is ours */
	done = resend_take(c) == 0 && resend_flush(c, conn_tcp_fd(c));
	if (!done && !c->aborted)
		resend_watch(c);
	if (!tx_locked)
		pthread_mutex_unlock(&c->tx_lock);
	return done;
}

bool conn_resend_pending(const struct smc_conn *c)
{
	return __atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE);
}

bool conn_finish_resend(struct smc_conn *c, uint64_t idle_ns)
{
	uint64_t moved_at = clock_now_ns();
	bool done = false;

	pthread_mutex_lock(&c->tx_lock);
	for (;;) {
		/* after the program's close only the progress thread's descriptor is ours */
		int fd = conn_tcp_fd(c);
		smc_cursor at = c->resend_at;
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		if (resend_take(c) < 0 || resend_flush(c, fd)) {
			done = true;
			break;
		}
		if (c->resend_at != at)
			moved_at = clock_now_ns();
		else if (c->aborted || clock_now_ns() - moved_at >= idle_ns)
			break;
		REAL(poll)(&p, 1, 10);
	}
	pthread_mutex_unlock(&c->tx_lock);
	return done;
}

/* A reset connection, as tcp_poll sees it after tcp_reset: shut down both ways, and
 * POLLERR while the error is pending (until reported once, conn_reset_take). */
static uint32_t aborted_mask(struct smc_conn *c)
{
	uint32_t m = POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLHUP | POLLRDHUP;

	return __atomic_load_n(&c->reset_reported, __ATOMIC_ACQUIRE) ? m : m | POLLERR;
}

/* Readiness while the peer's rest is read from the ring and ours re-sent: the ring's
 * data, then the TCP socket's own readiness. */
static uint32_t down_poll_mask(struct smc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLOUT | POLLRDHUP };
	bool sent = down_step(c, false);
	bool rx_left = rx_used_peek(c) != 0;
	uint32_t m = 0;

	if (sent && !rx_left && down_finish(c))
		return CONN_MASK_FALLBACK;
	if (REAL(poll)(&p, 1, 0) != 1)
		p.revents = 0;
	if (rx_left || c->shut_rd)
		m |= POLLIN | POLLRDNORM;
	else
		m |= p.revents & (POLLIN | POLLRDNORM | POLLRDHUP);
	if (sent || c->shut_wr)
		m |= p.revents & (POLLOUT | POLLWRNORM);
	m |= p.revents & (POLLERR | POLLHUP);
	if (c->aborted)
		m |= aborted_mask(c) & ~(uint32_t)POLLRDHUP;
	return m;
}

/* Over the TCP socket, as sock.c's plain calls do it (under a sandbox: read/write). */
static ssize_t tcp_recv_tail(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			     size_t skip, int flags)
{
	struct iovec rest[iovcnt > 0 ? iovcnt : 1];
	int n = iov_tail(iov, iovcnt, skip, rest);
	struct msghdr m = { .msg_iov = rest, .msg_iovlen = (size_t)n };
	ssize_t r;

	if (n == 0)
		return 0;
	if (flags == 0 && sandbox_active())
		r = REAL(readv)(c->fd, rest, n);
	else
		r = REAL(recvmsg)(c->fd, &m, flags);
	if (r > 0 && !(flags & MSG_PEEK))
		stats_bytes(SMC_MODE_TCP, 0, (size_t)r);
	return r;
}

static ssize_t tcp_send_tail(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			     size_t skip, int flags)
{
	struct iovec rest[iovcnt > 0 ? iovcnt : 1];
	int n = iov_tail(iov, iovcnt, skip, rest);
	struct msghdr m = { .msg_iov = rest, .msg_iovlen = (size_t)n };
	ssize_t r;

	if (n == 0)
		return 0;
	if (flags == 0 && sandbox_active())
		r = REAL(writev)(c->fd, rest, n);
	else
		r = REAL(sendmsg)(c->fd, &m, flags);
	if (r > 0)
		stats_bytes(SMC_MODE_TCP, (size_t)r, 0);
	return r;
}

/* Under tx_lock, the peer gone back to TCP: our re-send first, then the data over TCP.
 * Bytes sent (from `skip` on), or -1 with errno. */
static ssize_t down_send(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
			 int flags, bool nonblock, uint64_t deadline)
{
	ssize_t r;

	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		int ms = -1;

		if (resend_take(c) < 0)
			return errno = ECONNRESET, -1;
		if (resend_flush(c, c->fd))
			break;
		if (nonblock) {
			resend_watch(c);
			return errno = EAGAIN, -1;
		}
		if (deadline) {
			uint64_t now = clock_now_ns();

			if (now >= deadline)
				return errno = EAGAIN, -1;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		if (REAL(poll)(&p, 1, ms) < 0 && errno == EINTR && !eintr_restarts(c->sndtimeo_ns))
			return -1;
	}
	r = tcp_send_tail(c, iov, iovcnt, skip, flags | (nonblock ? MSG_DONTWAIT : 0));
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		resend_watch(c); /* rings our bells when the socket takes more */
	return r;
}

/* The second of two ends leaving at once (the peer's SHM_W_TCP came first): what we owe
 * goes out now, bounded; what the peer left in our ring has no reader once we are gone,
 * unless it re-sends it too (rest_resent: over RDMA, when the two flags crossed). */
static void down_leave_second(struct smc_conn *c, bool rest_resent)
{
	uint64_t end = clock_now_ns() + DOWN_SECOND_NS;
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	if (resend_take(c) == 0) {
		while (!resend_flush(c, c->fd) && clock_now_ns() < end) {
			struct pollfd p = { .fd = c->fd, .events = POLLOUT };

			REAL(poll)(&p, 1, 10);
		}
	}
	if ((rest_resent || rx_used(c) == 0) && __atomic_load_n(&c->resend_done, __ATOMIC_ACQUIRE))
		return;
	log_warn("fd %d: both ends left the rings at once, data unread: connection reset", c->fd);
	stats_count_abort();
	REAL(connect)(c->fd, &sa, sizeof(sa)); /* tcp_disconnect: a reset to the peer */
}

/* A lock held only for a copy is had soon; one held through a sleep in the library is
 * not, and is gone without us (an exec ends every other thread). */
static bool lock_briefly(pthread_mutex_t *m)
{
	for (int i = 0; i < 1000; i++) {
		if (pthread_mutex_trylock(m) == 0)
			return true;
		REAL(poll)(NULL, 0, 0);
	}
	return false;
}

/* The leaver's side over RDMA, under both data locks: a CDC carries our cursors and
 * CDC_WENT_TCP (whatever we produced goes in the RMB first), and the peer answers
 * (bounded: DOWN_ANSWER_NS; its progress thread answers, whatever its program does),
 * so that both ends know which of them re-sends. */
static void down_leave_ib(struct smc_conn *c)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	enum conn_ib_leave how = conn_ib_go_tcp(c, DOWN_ANSWER_NS);

	switch (how) {
	case CONN_IB_LEFT:
		if (c->shut_wr)
			REAL(shutdown)(c->fd, SHUT_WR);
		break;
	case CONN_IB_SECOND:
	case CONN_IB_CROSSED:
		/* we re-send the peer's part from its cursor; crossed, it re-sends ours */
		(void)peer_went_tcp(c); /* counts the peer's downgrade */
		down_leave_second(c, how == CONN_IB_CROSSED);
		break;
	case CONN_IB_GONE:
		/* the peer cannot learn where our stream ends, or did not answer with our
		 * bytes unread: TCP must not carry on without them */
		log_warn("fd %d: RDMA connection lost while going back to TCP: reset", c->fd);
		REAL(connect)(c->fd, &sa, sizeof(sa));
		break;
	}
	conn_ib_release(c, false);
}

int conn_downgrade(struct smc_conn *c, enum smc_reason why, bool image_ends)
{
	bool rx_locked, tx_locked, second = false;

	pthread_mutex_lock(&c->lock);
	if (conn_state(c) != CONN_ACTIVE) {
		pthread_mutex_unlock(&c->lock);
		return -EINVAL;
	}
	rx_locked = lock_briefly(&c->rx_lock);
	tx_locked = lock_briefly(&c->tx_lock);
	if (!image_ends && (!rx_locked || !tx_locked)) {
		if (tx_locked)
			pthread_mutex_unlock(&c->tx_lock);
		if (rx_locked)
			pthread_mutex_unlock(&c->rx_lock);
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	if (c->ib) {
		down_leave_ib(c);
	} else {
		/* another process of our side (fork) may have read or written since we
		 * last did: the cursors we leave at are the shared block's */
		if (c->fork_shared) {
			fork_lock(c, 0);
			fork_lock(c, 1);
		}
		rx_resync(c);
		tx_resync(c);
		second = peer_went_tcp(c);
		__atomic_store_n(&c->rx->cons, __atomic_load_n(&c->rx_cons, __ATOMIC_RELAXED),
				 __ATOMIC_RELEASE);
		__atomic_store_n(&c->tx->prod, __atomic_load_n(&c->tx_prod, __ATOMIC_RELAXED),
				 __ATOMIC_RELEASE);
		__atomic_fetch_or(&c->tx->wflags, SHM_W_TCP, __ATOMIC_SEQ_CST);
		if (c->fork_shared) {
			fork_unlock(c, 1);
			fork_unlock(c, 0);
		}
		/* the peer may sleep on either direction, or on an epoll set of both */
		bell_ring_peer(c->peer_rx_bell);
		bell_ring_peer(c->peer_tx_bell);
		if (second)
			down_leave_second(c, false);
		else if (c->shut_wr)
			REAL(shutdown)(c->fd, SHUT_WR);
	}
	c->reason = why;
	c->mode = SMC_MODE_TCP;
	__atomic_store_n(&c->state, CONN_FALLBACK, __ATOMIC_RELEASE);
	if (tx_locked)
		pthread_mutex_unlock(&c->tx_lock);
	if (rx_locked)
		pthread_mutex_unlock(&c->rx_lock);
	pthread_mutex_unlock(&c->lock);
	stats_count_downgrade(false);
	log_debug("fd %d: plain TCP (%s): sent %llu, received %llu over shared memory", c->fd,
		  stats_reason_name(why), (unsigned long long)c->bytes_sent,
		  (unsigned long long)c->bytes_received);
	conn_wake_local(c);
	return 0;
}

/* The program uses urgent data (MSG_OOB), which the rings cannot carry: the
 * connection goes back to TCP (reason sockopt). True when the kernel socket serves
 * the call now: gone back, or the peer went (its urgent byte is in the socket). */
static bool conn_oob_tcp(struct smc_conn *c)
{
	if (peer_went_tcp(c))
		return true;
	return conn_downgrade(c, SMC_REASON_SOCKOPT, false) == 0 ||
	       conn_state(c) == CONN_FALLBACK;
}

/* ------------------------------------------------------------------ readiness */

/* While the handshake runs, a connected socket is writable as TCP's would be: sends are
 * staged until the staging buffer is full (an in-band client waits for the server's
 * accept(), progress.c; a nonblocking listener's accept() hands the server its
 * connection before the client's Proposal arrived, sock.c). Never readable: reads wait
 * for the decision. */
static uint32_t pending_poll_mask(struct smc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLOUT };

	if (__atomic_load_n(&c->pend_len, __ATOMIC_RELAXED) >= CONN_PENDING_BUF)
		return 0;
	if (REAL(poll)(&p, 1, 0) != 1 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)))
		return 0;
	return (p.revents & POLLOUT) ? POLLOUT | POLLWRNORM : 0;
}

uint32_t conn_poll_mask(struct smc_conn *c)
{
	uint32_t m = 0;
	int st = conn_state(c);

	if (st == CONN_FALLBACK)
		return CONN_MASK_FALLBACK;
	if (st == CONN_PENDING && c->fork_orphan)
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR | POLLHUP; /* see below */
	if (st == CONN_PENDING)
		return pending_poll_mask(c);
	if (st != CONN_ACTIVE)
		return 0;
	if (c->aborted)
		return aborted_mask(c);
	if (side_went_tcp(c))
		return CONN_MASK_FALLBACK;
	if (peer_went_tcp(c))
		return down_poll_mask(c);
	if (rx_used_peek(c) != 0 || c->shut_rd)
		m |= POLLIN | POLLRDNORM;
	if (rx_eof(c))
		m |= POLLIN | POLLRDNORM | POLLRDHUP;
	if (c->aborted)
		return aborted_mask(c);
	if (c->shut_wr || tx_dead(c) || tx_free_peek(c) != 0)
		m |= POLLOUT | POLLWRNORM;
	/* tcp_poll(): hang-up once both directions are shut (the peer's end of data and our
	 * shutdown(SHUT_WR)); a peer's close alone is POLLRDHUP, as over TCP until its reset */
	if ((m & POLLRDHUP) && c->shut_wr)
		m |= POLLHUP;
	if (c->aborted)
		m |= POLLERR | POLLHUP;
	return m;
}

/* Counts a sleeper in the shared block so the peer rings (once per sequence). A count
 * the peer scribbled to ~0 would wrap to "nobody sleeps" with ours: then we count twice
 * (sleeper_del gives back one per sleep, so the extra one stays: a spare ring at most). */
static void sleeper_hold(uint32_t *sleepers, uint32_t *mine)
{
	uint32_t add = 1;

	if (__atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST) == 0) {
		__atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
		add = 2;
	}
	__atomic_add_fetch(mine, add, __ATOMIC_RELAXED);
}

/* ... and bumps the sequence so that it rings once for this sleep. */
static void sleeper_add(uint32_t *sleepers, uint32_t *seq, uint32_t *mine)
{
	__atomic_add_fetch(seq, 1, __ATOMIC_SEQ_CST);
	sleeper_hold(sleepers, mine);
}

static void sleeper_del(uint32_t *sleepers, uint32_t *mine)
{
	uint32_t n = __atomic_load_n(mine, __ATOMIC_RELAXED);

	/* only what this process added: the peer could scribble the shared count */
	while (n && !__atomic_compare_exchange_n(mine, &n, n - 1, true, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
		;
	if (n)
		__atomic_sub_fetch(sleepers, 1, __ATOMIC_RELEASE);
}

uint32_t conn_prepare_sleep(struct smc_conn *c, uint32_t events, unsigned drained_bells,
			    uint32_t *armed)
{
	uint32_t m, a = 0;

	if (drained_bells & CONN_BELL_RX)
		bell_drain(c->rx_bell);
	if (drained_bells & CONN_BELL_TX)
		bell_drain(c->tx_bell);
	if (conn_state(c) == CONN_ACTIVE) {
		a = events & (POLLIN | POLLOUT);
		if (events & POLLIN)
			sleeper_add(&c->rx->r_sleepers, &c->rx->r_seq, &c->asleep_rx);
		if (events & POLLOUT)
			sleeper_add(&c->tx->w_sleepers, &c->tx->w_seq, &c->asleep_tx);
	}
	if (armed)
		*armed = a;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	m = conn_poll_mask(c);
	/* Another waiter may sleep on the bell we just emptied: ring it again for the
	 * direction that is ready so that waiter re-evaluates too. */
	if ((drained_bells & CONN_BELL_RX) && (m & (POLLIN | POLLERR | POLLHUP | CONN_MASK_FALLBACK)))
		bell_ring(c->rx_bell);
	if ((drained_bells & CONN_BELL_TX) && (m & (POLLOUT | POLLERR | POLLHUP | CONN_MASK_FALLBACK)))
		bell_ring(c->tx_bell);
	return m;
}

void conn_end_sleep(struct smc_conn *c, uint32_t events)
{
	if (conn_state(c) != CONN_ACTIVE)
		return;
	if (events & POLLIN)
		sleeper_del(&c->rx->r_sleepers, &c->asleep_rx);
	if (events & POLLOUT)
		sleeper_del(&c->tx->w_sleepers, &c->asleep_tx);
}

/* ---- readiness hooks for the epoll emulation (epoll.c owns this region) ---- */

uint32_t conn_hold_sleep(struct smc_conn *c, uint32_t events)
{
	if (conn_state(c) != CONN_ACTIVE)
		return 0;
	if (events & POLLIN)
		sleeper_hold(&c->rx->r_sleepers, &c->asleep_rx);
	if (events & POLLOUT)
		sleeper_hold(&c->tx->w_sleepers, &c->asleep_tx);
	return events & (POLLIN | POLLOUT);
}

void conn_rearm(struct smc_conn *c, uint32_t events)
{
	if (conn_state(c) == CONN_ACTIVE) {
		if (events & POLLIN)
			__atomic_add_fetch(&c->rx->r_seq, 1, __ATOMIC_SEQ_CST);
		if (events & POLLOUT)
			__atomic_add_fetch(&c->tx->w_seq, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* A nonblocking sender found the ring full. Like TCP's SOCK_NOSPACE: a waiter that holds
 * a sleeper count without a fresh sequence (an epoll set's edge-triggered EPOLLOUT) must
 * hear when room comes back, so ask the peer to ring once more; room freed before the
 * peer could see the new sequence is announced on our own bell. */
static void conn_tx_full(struct smc_conn *c)
{
	if (c->ib)
		conn_ib_tx_blocked(c);
	if (!__atomic_load_n(&c->asleep_tx, __ATOMIC_RELAXED))
		return;
	conn_rearm(c, POLLOUT);
	if (tx_free_peek(c) != 0)
		bell_ring(c->tx_bell);
}

/* ---- end of the epoll readiness hooks ---- */

int conn_wait_fds(struct smc_conn *c, uint32_t events, struct pollfd *out, unsigned *tags)
{
	int n = 0;

	if (events & POLLIN || conn_state(c) == CONN_PENDING) {
		out[n] = (struct pollfd){ .fd = c->rx_bell, .events = POLLIN };
		tags[n++] = CONN_BELL_RX;
	}
	if (events & POLLOUT) {
		out[n] = (struct pollfd){ .fd = c->tx_bell, .events = POLLIN };
		tags[n++] = CONN_BELL_TX;
	}
	if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE)) {
		/* the socket carries the peer's data and takes ours (downgrade) */
		short tev = (events & POLLIN ? POLLIN | POLLRDHUP : 0) | (events & POLLOUT ? POLLOUT : 0);

		if (tev) {
			out[n] = (struct pollfd){ .fd = c->fd, .events = tev };
			tags[n++] = CONN_WAIT_TCP;
		}
	} else if (!c->tcp_eof) {
		out[n] = (struct pollfd){ .fd = c->fd, .events = POLLIN | POLLRDHUP };
		tags[n++] = CONN_WAIT_TCP;
	}
	return n;
}

void conn_tcp_event(struct smc_conn *c)
{
	char b;
	ssize_t r;

	if (c->tcp_eof || conn_state(c) != CONN_ACTIVE)
		return;
	/* after a downgrade the socket is the stream itself (conn.c, "Downgrade"): the
	 * peer's flag is stored before its new program can write */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (peer_went_tcp(c) || (c->fork_shared && side_went_tcp(c)))
		return;
	if (sandbox_active()) {
		/* no recv(): a read that cannot block (the channel is readable), and what
		 * it takes is never the application's (anything there ends the connection) */
		if (!sandbox_readable(c->fd))
			return;
		r = REAL(read)(c->fd, &b, 1);
	} else {
		r = REAL(recv)(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	}
	if (r == 0) {
		c->tcp_eof = true;
		/* A FIN with no close flag in the rings: the peer's process ended without
		 * closing (SIGKILL, _exit), and its kernel closed the socket. TCP resets
		 * when such a close leaves received bytes unread; ours were in the ring, so
		 * its kernel saw none: the reset is ours to report (redis-benchmark says
		 * "Connection reset by peer" for a killed server, not "Server closed").
		 * Only once the peer's own bytes are all read: a reset here is reported at
		 * once, where TCP still hands out what arrived before it. */
		if (!c->ib && !(peer_wflags(c) & (SHM_W_CLOSED | SHM_W_DONE_WRITING | SHM_W_TCP)) &&
		    tx_free_peek(c) < c->tx_size && rx_used_peek(c) == 0)
			c->aborted = true;
	} else if (r > 0) {
		/* over RDMA the leaver's first TCP bytes may overtake its CDC_WENT_TCP (two
		 * paths): they wait; the link tells what they are */
		if (c->ib)
			return;
		/* After the upgrade nothing may travel over TCP. */
		conn_abort_protocol(c, "byte on the TCP channel");
		c->tcp_eof = true;
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		/* a peer that closed cleanly resets the TCP channel (see conn_release_fd) */
		c->tcp_eof = true;
		/* over RDMA a dead peer is the link's to report (ib_link.h: keepalive) */
		if (!c->ib && !(peer_wflags(c) & (SHM_W_CLOSED | SHM_W_DONE_WRITING)))
			c->aborted = true;
	}
	if (c->tcp_eof) {
		log_debug("fd %d: TCP channel closed by peer", c->fd);
		conn_wake_local(c);
	}
}

void conn_note_undrained(struct smc_conn *c, unsigned bells)
{
	if (bells && c->pool)
		__atomic_fetch_or(&c->bells_undrained, bells, __ATOMIC_RELAXED);
}

/* Is the wait over? A wait that started PENDING ends with the handshake. */
static bool conn_wait_done(struct smc_conn *c, uint32_t want, bool for_handshake)
{
	if (for_handshake)
		return conn_state(c) != CONN_PENDING;
	/* the callers' loops take a downgrade themselves, under their lock */
	if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
		return true;
	return (conn_poll_mask(c) & want) != 0;
}

#define CONN_SPIN_PAUSES 8

/* Blocks until `events` may be ready (for_handshake: until the connection is no longer
 * PENDING, events 0), the deadline passes (-EAGAIN) or a signal arrives (-EINTR). Spins
 * first: a peer about to answer is much cheaper to catch on the cursors than through a
 * kernel wakeup (shared/recipes/wakeup-cost). The caller says what the wait is for: a
 * caller that saw PENDING may find the handshake decided by the time it gets here, and
 * a wait for a decision that already came must end at once, not wait for events that
 * nobody asked for until the deadline. */
/*
 * A thread cancelled in our sleep (pthread_cancel: ppoll is a cancellation point, as
 * the read or write it stands for) unwinds through none of our returns: what the
 * wait and its callers hold goes with it here, or every later call on the connection
 * would wait for ever on the lock it kept. Every caller holds one reference that it
 * drops after the wait (sock.c's fd lookup, or its own), and `held` is the data lock
 * of recv or send.
 */
struct wait_cancel {
	struct smc_conn *c;
	uint32_t armed;
	pthread_mutex_t *held;
};

static void wait_cancelled(void *arg)
{
	struct wait_cancel *w = arg;

	conn_end_sleep(w->c, w->armed);
	if (w->held)
		pthread_mutex_unlock(w->held);
	conn_put(w->c);
}

static int conn_wait(struct smc_conn *c, uint32_t events, bool for_handshake,
		     uint64_t deadline, pthread_mutex_t *held)
{
	uint32_t want = events | POLLERR | POLLHUP | CONN_MASK_FALLBACK;
	/* a handshake takes two cross-process round trips through the progress thread:
	 * spinning for it only takes a CPU away from that thread */
	uint64_t spin_ns = for_handshake || conn_peer_on_my_cpu(c) ? 0 : wait_spin_budget();
	uint64_t spin_start = clock_now_ns(), spin_end = spin_start + spin_ns;
	unsigned drained = 0;

	/* not spinning goes straight to the sleep: one round of the loop below cost 1.5 us
	 * when it made 64 pauses (23 ns each on the project's EPYC VM), paid by every wait
	 * whose spin the adaptive budget turned off: crr server 18.7 -> 16.7 us of CPU per
	 * cycle, 33.5k -> 37k cycles/s */
	for (unsigned round = 1; spin_ns; round++) {
		/* a look every 8 pauses (~0.2 us here): with 64 (1.5 us) a ping-pong found
		 * its answer 0.75 us late on average; sockperf pp 14 B p50 0.86-1.17 us ->
		 * 0.57, p99 1.7-28 -> 0.7 (both sides changed, alternated runs) */
		for (int i = 0; i < CONN_SPIN_PAUSES; i++)
			wait_cpu_relax();
		if (conn_wait_done(c, want, for_handshake)) {
			wait_spin_outcome(true, clock_now_ns() - spin_start);
			return 0;
		}
		if (clock_now_ns() >= spin_end)
			break;
		/* two cores, two busy processes: let the peer we wait for run (every ~12 us) */
		if (round % (512 / CONN_SPIN_PAUSES) == 0)
			sandbox_yield();
	}
	if (spin_ns)
		wait_spin_outcome(false, spin_ns);

	for (;;) {
		struct pollfd pfd[3];
		unsigned tags[3];
		struct timespec ts, *tsp = NULL;
		uint32_t armed;
		int n, r;

		conn_prepare_sleep(c, events, drained, &armed);
		if (conn_wait_done(c, want, for_handshake)) {
			conn_end_sleep(c, armed);
			return 0;
		}
		drained = 0;
		if (deadline) {
			uint64_t now = clock_now_ns();

			if (now >= deadline) {
				conn_end_sleep(c, armed);
				return -EAGAIN;
			}
			ts.tv_sec = (time_t)((deadline - now) / 1000000000ull);
			ts.tv_nsec = (long)((deadline - now) % 1000000000ull);
			tsp = &ts;
		}
		/* The handshake's end rings the rx bell, always watched then; and as another
		 * waiter (poll on the same socket) may drain that ring first, the wait is
		 * bounded: the handshake itself is. */
		if (for_handshake) {
			static const struct timespec tick = { 0, 10 * 1000 * 1000 };

			if (!tsp || tsp->tv_sec > 0 || tsp->tv_nsec > tick.tv_nsec) {
				ts = tick;
				tsp = &ts;
			}
		}
		n = conn_wait_fds(c, for_handshake ? events | POLLIN : events, pfd, tags);
		{
			struct wait_cancel wc = { .c = c, .armed = armed, .held = held };

			pthread_cleanup_push(wait_cancelled, &wc);
			r = sandbox_ppoll(pfd, (nfds_t)n, tsp, NULL);
			pthread_cleanup_pop(0);
		}
		conn_end_sleep(c, armed);
		if (r < 0)
			return -errno;
		for (int i = 0; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (tags[i] == CONN_WAIT_TCP)
				conn_tcp_event(c);
			else
				drained |= tags[i];
		}
		if (conn_wait_done(c, want, for_handshake)) {
			conn_note_undrained(c, drained);
			return 0;
		}
	}
}

/* A blocking socket call interrupted by a signal: the kernel restarts it when the
 * handler has SA_RESTART and the socket has no timeout (signal(7)). Which signal
 * interrupted our sleep is unknown, so restart only when every caught signal asks for
 * it; an application that relies on EINTR keeps getting it. */
static bool eintr_restarts(int64_t timeo_ns)
{
	if (timeo_ns > 0)
		return false;
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

static uint64_t deadline_from(int64_t timeo_ns)
{
	return timeo_ns > 0 ? clock_now_ns() + (uint64_t)timeo_ns : 0;
}

/*
 * The progress thread decides every handshake within its deadline (a few handshake
 * timeouts at most, see progress.c). Should a decision never come, a call waiting for
 * it must not wait forever: after CONN_PENDING_WATCHDOG_TICKS handshake timeouts of
 * waiting (the TCP connect is over by then), the waiting thread resets the connection
 * itself (the peer may have taken it as upgraded, so plain TCP could mix protocols):
 * the application gets ECONNRESET, as from a peer that died, and the log says so.
 */
#define CONN_PENDING_WATCHDOG_TICKS 15u

static const char *hs_watch_name(uint8_t w)
{
	switch (w) {
	case HS_WATCH_NONE: return "never handed to the progress thread";
	case HS_WATCH_QUEUED: return "queued for the progress thread, never armed";
	case HS_WATCH_ARMED: return "armed on the progress thread";
	case HS_WATCH_DONE: return "released by the progress thread";
	}
	return "?";
}

static void pending_watchdog_reset(struct smc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	if (conn_state(c) == CONN_PENDING) {
		struct fd_entry *e = fdtab_peek(c->fd);
		bool in_table = e && __atomic_load_n(&e->obj, __ATOMIC_ACQUIRE) == (void *)c;

		/* Should never happen: say everything that tells how it did. */
		log_warn("fd %d: handshake still undecided after %u ms: resetting the connection "
			 "(%s side, %s%s, rendezvous fd %d, tcp eof %d, fd refs %d, object refs %d, "
			 "%s the fd table)",
			 c->fd, CONN_PENDING_WATCHDOG_TICKS * smc_cfg.handshake_timeout_ms,
			 c->side == CONN_CLIENT ? "client" : "server",
			 hs_watch_name(__atomic_load_n(&c->hs_watch, __ATOMIC_ACQUIRE)),
			 c->deferred ? ", deferred" : "", c->rdv_listen_fd, c->tcp_eof, c->fd_refs,
			 c->obj_refs, in_table ? "in" : "not in");
		stats_count_abort();
		neg_reset(c->fd);
		conn_fallback(c, SMC_REASON_HANDSHAKE);
	}
	pthread_mutex_unlock(&c->lock);
}

int conn_wait_pending(struct smc_conn *c, bool nonblock, int64_t timeo_ns)
{
	uint64_t deadline = deadline_from(timeo_ns);
	uint64_t watchdog = clock_now_ns() + (uint64_t)CONN_PENDING_WATCHDOG_TICKS *
					       smc_cfg.handshake_timeout_ms * 1000000ull;

	if (c->fork_orphan && conn_state(c) == CONN_PENDING)
		return -ECONNRESET; /* never decided here: see conn_fork_child */
	while (conn_state(c) == CONN_PENDING) {
		uint64_t until = deadline && deadline < watchdog ? deadline : watchdog;
		int r;

		if (nonblock)
			return -EAGAIN;
		r = conn_wait(c, 0, true, until, NULL);
		if (r == -EINTR && eintr_restarts(timeo_ns))
			r = 0;
		if (r == -EAGAIN && conn_state(c) == CONN_PENDING) {
			if (until == deadline)
				return -EAGAIN; /* SO_RCVTIMEO / SO_SNDTIMEO, as TCP */
			pending_watchdog_reset(c);
			r = 0;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* ------------------------------------------------------------------ data path */

static void conn_note_cpu(struct smc_conn *c)
{
	uint32_t *mine = &c->map.hdr->side_cpu[c->side].cpu;
	int cpu = sched_getcpu();

	if (cpu >= 0 && __atomic_load_n(mine, __ATOMIC_RELAXED) != (uint32_t)cpu + 1)
		__atomic_store_n(mine, (uint32_t)cpu + 1, __ATOMIC_RELAXED);
}

bool conn_peer_on_my_cpu(struct smc_conn *c)
{
	int cpu;

	if (conn_state(c) != CONN_ACTIVE)
		return false;
	cpu = sched_getcpu();
	return cpu >= 0 &&
	       __atomic_load_n(&c->map.hdr->side_cpu[1 - c->side].cpu, __ATOMIC_RELAXED) ==
		       (uint32_t)cpu + 1;
}

/* Ring the peer's bell when one of its threads sleeps for what we just did, once per
 * sleep: a busy peer costs no syscall. */
static void ring_if_asleep(const uint32_t *sleepers, const uint32_t *seq, uint32_t *rung,
			   int bell)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(sleepers, __ATOMIC_RELAXED)) {
		uint32_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);

		if (s != *rung) {
			*rung = s;
			bell_ring_peer(bell);
		}
	}
}

/*
 * Publishing in chunks. A copy larger than a chunk publishes its cursor after every
 * chunk, so the peer starts on the first chunk while we still copy the rest: without it
 * a writer that fills the whole free space (writes >= the RMB) and a reader that drains
 * the whole ring (reads >= the RMB) take turns instead of copying at the same time.
 * Measured with bench/msgsize, 64 KiB RMB, reader and writer pinned to the two cores:
 * 7.5 GB/s at 16 KiB writes but 5.7 at 64 KiB, 256 KiB and 4 MiB before; 7.0-8.2 at all
 * four sizes with 16 KiB chunks. 16 KiB: half of a core's L1d, so the reader finds each
 * chunk still in the writer's caches; it beat 8 and 32 KiB chunks for 64 KiB and 1 MiB
 * RMBs in A/B runs on the project's 2-core VM. A cursor store per 16 KiB costs the peer
 * one cache-line transfer.
 */
#define CONN_PUBLISH_CHUNK (16u * 1024)

/* Over RDMA: a quarter of the ring, the window policy's period (cdc.h). */
static size_t ib_publish_chunk(uint32_t ring_size)
{
	size_t q = ring_size / 4;

	return q > CONN_PUBLISH_CHUNK ? q : CONN_PUBLISH_CHUNK;
}

/*
 * Doorbells during a chunked copy. A peer that sleeps on another CPU is rung at the first
 * chunk, so it runs in parallel with the rest of our copy. A peer that last ran on our
 * CPU is rung only at the end of the copy: woken earlier, it would preempt us to copy one
 * chunk and sleep again, one context switch pair per chunk (64 KiB RMB, both processes
 * pinned to one CPU, 64 KiB to 4 MiB writes: 2.3-3.2 GB/s with a bell per chunk, 4.2-4.3
 * without chunks, 3.8-5.1 with this rule). The end of a copy always checks, with the full
 * barrier of the sleep protocol; the checks between chunks are hints (a relaxed load of
 * the sleeper count).
 */
static bool ring_now(struct smc_conn *c, const uint32_t *sleepers, bool last)
{
	return last || (__atomic_load_n(sleepers, __ATOMIC_RELAXED) && !conn_peer_on_my_cpu(c));
}

static void rx_publish(struct smc_conn *c, bool last)
{
	if (c->ib) {
		conn_ib_rx_published(c); /* the transport tells the peer (window policy) */
		return;
	}
	__atomic_store_n(&c->rx->cons, c->rx_cons, __ATOMIC_RELEASE);
	if (ring_now(c, &c->rx->w_sleepers, last))
		ring_if_asleep(&c->rx->w_sleepers, &c->rx->w_seq, &c->rung_tx_seq,
			       c->peer_tx_bell);
}

/*
 * Rewinds. The cursors go round the ring lap after lap, so a request/response connection
 * on a 1 MiB ring touches a new 1 MiB of memory every lap even when each message is
 * 1 KiB: redis-benchmark -c 50 -P 16 wrote, and redis-server read, 50 MiB of rings that
 * were never in a cache, where TCP recycles the same warm buffers (ring_memcpy was 17.5%
 * of redis-server's CPU, most of it in the loads; the kernel's copy 6.2% under TCP). So
 * when we have read from the peer since our last send (request/response traffic), the
 * reader has taken every byte (the ring is empty) and our cursor is at least
 * CONN_REWIND_MIN and twice the message into its lap, the message starts the next lap
 * instead: we name the cursor we leave (skip_at, then skip_seq bumped) and publish our
 * producer cursor as usual; the reader's cursor jumps the empty rest of the lap when it
 * next looks (rx_take_rewind). Until then our room counts from the lap start we moved
 * to (tx_room_base), so a rewind never shrinks the buffer a program may rely on. A
 * ring's warm part stays within CONN_REWIND_MIN plus twice a message; twice, so that a
 * writer streaming messages of half the ring or more, which finds the ring empty only
 * because the reader is faster, keeps going round (a jump costs the reader one more
 * cursor publish). redis-benchmark -c 50 -d 1024 -P 16, pinned, 9 rounds: GET
 * 1.64-1.84 -> 2.15-2.37 M requests/s, SET 1.58-1.81 -> 1.71-2.00 M; 4 KiB and 64 KiB
 * minimums did as well as 16. Not in a one-way stream (no read between our sends): a
 * reader that keeps up empties the ring there too, and a rewind then puts our stores on
 * lines its CPU still holds, dearer than the cold lines further round (~1 KiB messages
 * into a 1 MiB ring read 3/4 at a time: 5.7 -> 4.8 GB/s when every empty ring rewound).
 * Shared memory only (over RDMA the ring follows SMC-R's cursor rules); both peers must
 * speak CLC_SAMEHOST_PROTO 2 or later.
 */
#define CONN_REWIND_MIN (16u * 1024)

/* Before writing n bytes into our empty ring, under tx_lock. */
static void tx_rewind(struct smc_conn *c, size_t n)
{
	uint32_t off = cursor_count(c->tx_prod);
	uint32_t seq = __atomic_load_n(&c->tx->skip_seq, __ATOMIC_RELAXED);

	if (off < CONN_REWIND_MIN || off / 2 < n ||
	    seq != __atomic_load_n(&c->tx->skip_done, __ATOMIC_RELAXED))
		return;
	/* the reader sees both through the release store of prod that follows */
	__atomic_store_n(&c->tx->skip_at, c->tx_prod, __ATOMIC_RELAXED);
	__atomic_store_n(&c->tx->skip_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&c->tx_prod, conn_rewind_lap_after(c->tx_prod, c->tx_size),
			 __ATOMIC_RELAXED);
	stats_count_rewind();
}

static void tx_publish(struct smc_conn *c, bool last)
{
	if (c->ib) {
		conn_ib_tx_published(c); /* RDMA WRITE(s) + CDC */
		return;
	}
	__atomic_store_n(&c->tx->prod, c->tx_prod, __ATOMIC_RELEASE);
	if (ring_now(c, &c->tx->r_sleepers, last))
		ring_if_asleep(&c->tx->r_sleepers, &c->tx->r_seq, &c->rung_rx_seq,
			       c->peer_rx_bell);
}

/* Copies n readable bytes out of the ring into the iovecs (from `skip` bytes on),
 * publishing the consumer cursor chunk by chunk. */
static void rx_copy_publish(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			    size_t skip, size_t n)
{
	/* over RDMA the window policy turns publishes into CDCs (every quarter RMB): a
	 * reader copying a whole RMB publishes as it goes, so the writer refills the
	 * first quarters while it copies the rest instead of both taking turns */
	size_t chunk = c->ib ? ib_publish_chunk(c->rx_size) : CONN_PUBLISH_CHUNK;

	while (n) {
		size_t k = n < chunk ? n : chunk;

		if (iov) /* NULL: MSG_TRUNC, the bytes are dropped (conn_recv) */
			ring_copy_out_iov(c->rx_ring, c->rx_size, c->rx_cons, iov, iovcnt, skip, k);
		__atomic_store_n(&c->rx_cons, cursor_add(c->rx_cons, (uint32_t)k, c->rx_size),
				 __ATOMIC_RELAXED);
		rx_publish(c, k == n);
		skip += k;
		n -= k;
	}
}

/* Copies k bytes from the iovecs into the peer's ring at our producer cursor; over shm
 * with the store kind copy_adapt chose for this stretch of the stream. */
static void tx_copy_in(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t k)
{
	enum copy_store kind = c->ib ? COPY_CACHED
				     : copy_adapt_kind(&c->tx_copy, k, smc_cfg.copy_store);

	ring_copy_in_iov(c->tx_ring, c->tx_size, c->tx_prod, iov, iovcnt, skip, k,
			 kind == COPY_STREAM);
	if (kind == COPY_STREAM) {
		/* the reader must not see the cursor before the lines it covers */
		ring_stream_fence();
		stats_count_stream(k);
	}
}

/* Copies n bytes (n <= free room) from the iovecs into the ring, publishing the producer
 * cursor chunk by chunk. */
static void tx_copy_publish(struct smc_conn *c, const struct iovec *iov, int iovcnt,
			    size_t skip, size_t n)
{
	/* over RDMA a publish is a WRITE and a CDC message: at most one per quarter RMB,
	 * so the reader starts on the first quarter while we copy the rest */
	size_t chunk = c->ib ? ib_publish_chunk(c->tx_size) : CONN_PUBLISH_CHUNK;

	while (n) {
		size_t k = n < chunk ? n : chunk;

		tx_copy_in(c, iov, iovcnt, skip, k);
		__atomic_store_n(&c->tx_prod, cursor_add(c->tx_prod, (uint32_t)k, c->tx_size),
				 __ATOMIC_RELAXED);
		tx_publish(c, k == n);
		skip += k;
		n -= k;
	}
}

/* MSG_PEEK with MSG_WAITALL: TCP waits until the whole length is there (its receive
 * target), unless the stream ends first. Under rx_lock, with `used` bytes in the ring. */
static bool peek_wait_all(struct smc_conn *c, int flags, size_t used, size_t want,
			  bool nonblock)
{
	return (flags & MSG_WAITALL) && used < want && !nonblock && !c->shut_rd &&
	       !c->aborted && !rx_eof(c) && !peer_went_tcp(c);
}

/* Its wait: readiness says "readable" already, so no bell tells of more bytes; a look
 * every millisecond (a rare call, never a spin). 0, or EAGAIN at SO_RCVTIMEO's deadline,
 * EINTR for a signal that does not restart the call. */
static int peek_sleep(struct smc_conn *c, uint64_t deadline)
{
	struct wait_cancel wc = { .c = c, .held = &c->rx_lock }; /* see wait_cancelled */
	int r;

	if (deadline && clock_now_ns() >= deadline)
		return EAGAIN;
	pthread_cleanup_push(wait_cancelled, &wc);
	r = REAL(poll)(NULL, 0, 1);
	pthread_cleanup_pop(0);
	if (r < 0 && errno == EINTR && !eintr_restarts(c->rcvtimeo_ns))
		return EINTR;
	return 0;
}

ssize_t conn_recv(struct smc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	size_t want = iov_total(iov, iovcnt), got = 0;
	bool nonblock = c->nonblock || (flags & MSG_DONTWAIT);
	uint64_t deadline = deadline_from(c->rcvtimeo_ns);
	bool tcp_rest = false; /* the peer's stream goes on over TCP (downgrade) */
	/* MSG_TRUNC: TCP drops (or with MSG_PEEK only counts) the bytes, copying none,
	 * so the buffer may be NULL (tcp_recvmsg) */
	const struct iovec *dst = (flags & MSG_TRUNC) ? NULL : iov;
	int err = 0;

	if (side_went_tcp(c)) {
		side_rest_wait(c, nonblock);
		return tcp_recv_tail(c, iov, iovcnt, 0, flags);
	}
	if (flags & MSG_OOB) {
		/* urgent data has no place in the rings: the connection goes back to TCP
		 * (conn_oob_tcp), whose urgent byte is out of the stream and so not behind
		 * what is left in our ring */
		if (!conn_oob_tcp(c))
			return errno = EINVAL, -1;
		return tcp_recv_tail(c, iov, iovcnt, 0, flags);
	}
	if (want == 0)
		return 0;
	pthread_mutex_lock(&c->rx_lock);
	conn_note_cpu(c);
	rx_resync(c);
	for (;;) {
		int64_t used;

		/* over RDMA what arrived before a reset stays readable (ib_conn_rx_used) */
		if (c->aborted && !(c->ib && rx_used(c) > 0)) {
			/* what this call read is returned first; the reset stays pending for
			 * the next call, as tcp_recvmsg() leaves sk_err when it copied any */
			if (!got)
				err = conn_reset_take(c) ? ECONNRESET : 0; /* then EOF */
			break;
		}
		if (conn_state(c) == CONN_FALLBACK) {
			/* we went back to TCP while this call slept (conn_downgrade) */
			tcp_rest = true;
			break;
		}
		used = rx_used(c);
		if (used < 0)
			continue; /* aborted: reported above */
		if (used > 0) {
			size_t n = (size_t)used < want - got ? (size_t)used : want - got;

			if (flags & MSG_PEEK) {
				if (peek_wait_all(c, flags, (size_t)used, want, nonblock)) {
					err = peek_sleep(c, deadline);
					if (err)
						break;
					continue;
				}
				if (dst)
					ring_copy_out_iov(c->rx_ring, c->rx_size, c->rx_cons, dst,
							  iovcnt, got, n);
				got += n;
				break;
			}
			if (c->fork_shared) {
				if (!fork_lock_rings(c, 0)) {
					tcp_rest = true;
					break;
				}
				rx_resync(c);
				used = rx_used(c);
				if (used <= 0) {
					fork_unlock(c, 0);
					continue;
				}
				n = (size_t)used < want - got ? (size_t)used : want - got;
				rx_copy_publish(c, dst, iovcnt, got, n);
				fork_unlock(c, 0);
			} else {
				rx_copy_publish(c, dst, iovcnt, got, n);
			}
			got += n;
			if (got == want || !(flags & MSG_WAITALL))
				break;
			continue;
		}
		if (!c->shut_rd && peer_went_tcp(c)) {
			/* its last cursor was stored before the flag */
			if (rx_used(c) > 0)
				continue;
			tcp_rest = true;
			break;
		}
		if (c->shut_rd || rx_eof(c)) {
			/* the peer publishes its last cursor before its close flag */
			if (!c->shut_rd && !c->aborted && rx_used(c) > 0)
				continue;
			if (c->aborted && !got)
				err = conn_reset_take(c) ? ECONNRESET : 0;
			break;
		}
		if (nonblock) {
			if (!got)
				err = EAGAIN;
			break;
		}
		err = -conn_wait(c, POLLIN, false, deadline, &c->rx_lock);
		if (err == EINTR && eintr_restarts(c->rcvtimeo_ns))
			err = 0;
		if (err) {
			if (got)
				err = 0;
			break;
		}
	}
	if (got && !(flags & MSG_PEEK)) {
		c->bytes_received += got;
		if (__atomic_load_n(&c->sent_last, __ATOMIC_RELAXED)) {
			__atomic_store_n(&c->sent_last, false, __ATOMIC_RELAXED);
			__atomic_fetch_add(&c->exchanges, 1, __ATOMIC_RELAXED);
		}
		stats_bytes(c->ib ? SMC_MODE_IB : SMC_MODE_SHM, 0, got);
	}
	if (tcp_rest && (!got || ((flags & MSG_WAITALL) && !(flags & MSG_PEEK)))) {
		/* still under rx_lock: a second reader must not pass the ring's rest */
		ssize_t r;

		if (!got && !__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
			side_rest_wait(c, nonblock);
		/* what we owe the peer goes out before we wait on TCP: its answer may be
		 * what our re-send carries (a request it never read from the ring); the
		 * progress thread finishes what the socket does not take at once */
		if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
			(void)down_step(c, false);
		r = tcp_recv_tail(c, iov, iovcnt, got,
					  flags | (nonblock ? MSG_DONTWAIT : 0));

		if (r < 0 && !got)
			err = errno;
		else if (r > 0)
			got += (size_t)r;
		pthread_mutex_unlock(&c->rx_lock);
		if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE)) {
			down_step(c, false);
			down_finish(c);
		}
		if (err && !got) {
			errno = err;
			return -1;
		}
		return (ssize_t)got;
	}
	pthread_mutex_unlock(&c->rx_lock);
	if (err && !got) {
		errno = err;
		return -1;
	}
	return (ssize_t)got;
}

/*
 * As the kernel's TCP: a reset sets sk_err (tcp_reset), and the first call that reports
 * it takes it (sock_error() exchanges sk_err with 0: SO_ERROR, tcp_recvmsg,
 * sk_stream_error); after that the socket is only shut down both ways, so recv reads
 * EOF and send fails with EPIPE and SIGPIPE.
 */
bool conn_reset_take(struct smc_conn *c)
{
	return !__atomic_exchange_n(&c->reset_reported, true, __ATOMIC_ACQ_REL);
}

static void raise_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
}

ssize_t conn_send(struct smc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	size_t want = iov_total(iov, iovcnt), sent = 0;
	bool nonblock = c->nonblock || (flags & MSG_DONTWAIT), full = false;
	uint64_t deadline = deadline_from(c->sndtimeo_ns);
	/* copy_adapt times the shm pipeline when it chooses the store kind itself */
	bool adapt = !c->ib && smc_cfg.copy_store < 0;
	uint64_t t_in = 0, received;
	bool answered; /* we read from the peer since our last send: see tx_rewind */
	ssize_t tcp_sent = 0; /* after a downgrade, over TCP */
	size_t dropped = 0; /* the first send after the peer's close */
	bool tcp_failed = false;
	bool side_left = false; /* another process of our side went back to TCP (fork) */
	int err = 0;

	if (side_went_tcp(c))
		return tcp_send_tail(c, iov, iovcnt, 0, flags);
	/* urgent data has no place in the rings: the connection goes back to TCP
	 * (conn_oob_tcp); the peer gone back already, it follows our re-send (down_send) */
	if ((flags & MSG_OOB) && !peer_went_tcp(c)) {
		if (!conn_oob_tcp(c))
			return errno = EOPNOTSUPP, -1;
		return tcp_send_tail(c, iov, iovcnt, 0, flags);
	}
	pthread_mutex_lock(&c->tx_lock);
	received = __atomic_load_n(&c->bytes_received, __ATOMIC_RELAXED);
	answered = received != c->tx_rx_mark;
	c->tx_rx_mark = received;
	if (adapt)
		t_in = copy_adapt_ticks();
	conn_note_cpu(c);
	tx_resync(c);
	for (;;) {
		int64_t room;

		if (c->aborted) {
			/* reported once, then EPIPE and SIGPIPE (conn_reset_take); after a
			 * partial send the count is returned and the reset stays pending, as
			 * tcp_sendmsg() leaves sk_err when it copied any */
			if (!sent)
				err = conn_reset_take(c) ? ECONNRESET : EPIPE;
			break;
		}
		if ((conn_state(c) == CONN_FALLBACK || side_left) && sent < want) {
			/* we went back to TCP while this call slept (conn_downgrade), or a
			 * process of our side did (fork) */
			tcp_sent = tcp_send_tail(c, iov, iovcnt, sent, flags);
			if (tcp_sent < 0) {
				err = sent ? 0 : errno;
				tcp_failed = true;
				tcp_sent = 0;
			}
			break;
		}
		if (!c->shut_wr && sent < want && peer_went_tcp(c)) {
			tcp_sent = down_send(c, iov, iovcnt, sent, flags, nonblock, deadline);
			if (tcp_sent < 0) {
				/* the kernel raised its own SIGPIPE */
				err = sent ? 0 : errno;
				tcp_failed = true;
				tcp_sent = 0;
			}
			break;
		}
		if (c->shut_wr || tx_dead(c)) {
			if (!sent && want > 0 && !c->shut_wr && !c->aborted && !c->wrote_past_close) {
				/* As TCP after the peer's close: its FIN does not stop our next
				 * send, the reset it answers with does (tcp_reset in
				 * CLOSE_WAIT: EPIPE and SIGPIPE from then on). A peer that
				 * closed with our bytes unread reset at once: ECONNRESET,
				 * without SIGPIPE. */
				int64_t unread_room = tx_free(c);

				c->wrote_past_close = true;
				if (unread_room >= 0 && unread_room < (int64_t)c->tx_size)
					err = ECONNRESET;
				else
					dropped = want;
				break;
			}
			if (!sent)
				err = c->aborted && conn_reset_take(c) ? ECONNRESET : EPIPE;
			break;
		}
		if (sent == want)
			break;
		room = tx_free(c);
		if (room < 0)
			continue;
		if (room > 0) {
			size_t n = (size_t)room < want - sent ? (size_t)room : want - sent;

			if (c->fork_shared) {
				if (!fork_lock_rings(c, 1)) {
					side_left = true;
					continue;
				}
				tx_resync(c);
				room = tx_free(c);
				if (room <= 0) {
					fork_unlock(c, 1);
					continue;
				}
				n = (size_t)room < want - sent ? (size_t)room : want - sent;
			}
			if (!c->ib && room == c->tx_size && answered)
				tx_rewind(c, n);
			tx_copy_publish(c, iov, iovcnt, sent, n);
			if (c->fork_shared)
				fork_unlock(c, 1);
			sent += n;
			continue;
		}
		if (nonblock) {
			if (!sent)
				err = EAGAIN;
			conn_tx_full(c);
			full = true;
			break;
		}
		if (c->ib)
			conn_ib_tx_blocked(c);
		err = -conn_wait(c, POLLOUT, false, deadline, &c->tx_lock);
		if (err == EINTR && eintr_restarts(c->sndtimeo_ns))
			err = 0;
		if (err)
			break;
	}
	if (adapt && conn_state(c) == CONN_ACTIVE)
		copy_adapt_sent(&c->tx_copy, t_in, copy_adapt_ticks(), sent, full,
				copy_adapt_window(c->tx_size));
	pthread_mutex_unlock(&c->tx_lock);
	if (sent) {
		c->bytes_sent += sent;
		__atomic_store_n(&c->sent_last, true, __ATOMIC_RELAXED);
		stats_bytes(c->ib ? SMC_MODE_IB : SMC_MODE_SHM, sent, 0);
	}
	if (sent || tcp_sent) {
		if (tcp_sent)
			down_finish(c);
		return (ssize_t)sent + tcp_sent;
	}
	if (dropped)
		return (ssize_t)dropped;
	if (err == EPIPE && !tcp_failed)
		raise_sigpipe(flags);
	if (!err && want == 0)
		return 0;
	errno = err;
	return -1;
}

int conn_shutdown(struct smc_conn *c, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return errno = EINVAL, -1;
	if (peer_went_tcp(c)) {
		/* the socket is the stream now; our FIN waits for the re-sent bytes */
		if (how != SHUT_WR)
			c->shut_rd = true;
		if (how != SHUT_RD) {
			__atomic_store_n(&c->shut_wr, true, __ATOMIC_SEQ_CST);
			if (__atomic_load_n(&c->resend_done, __ATOMIC_SEQ_CST))
				REAL(shutdown)(c->fd, SHUT_WR);
		}
		if (how != SHUT_WR)
			REAL(shutdown)(c->fd, SHUT_RD);
		conn_wake_local(c);
		return 0;
	}
	if (how != SHUT_WR)
		c->shut_rd = true;
	if (how != SHUT_RD && !c->shut_wr) {
		c->shut_wr = true;
		__atomic_fetch_or(&c->tx->wflags, SHM_W_DONE_WRITING, __ATOMIC_RELEASE);
		if (c->ib)
			conn_ib_shutdown_wr(c);
		bell_ring_peer(c->peer_rx_bell);
	}
	conn_wake_local(c);
	return 0;
}

int conn_rx_available(struct smc_conn *c)
{
	int64_t used;

	if (conn_state(c) != CONN_ACTIVE)
		return 0;
	pthread_mutex_lock(&c->rx_lock);
	rx_resync(c); /* after a fork our cursor may be behind the one in the shared block */
	used = rx_used(c);
	pthread_mutex_unlock(&c->rx_lock);
	if (used == 0 && peer_went_tcp(c)) {
		int n = 0;

		return REAL(ioctl)(c->fd, FIONREAD, &n) == 0 ? n : 0;
	}
	return used > 0 ? (int)used : 0;
}

/* TCP's SIOCOUTQ counts what the peer has not acknowledged, and on one host it
 * acknowledges what is in its receive queue, read or not. Our ring is the peer's
 * receive buffer: once written, nothing is outstanding (the kernel's SMC, smc_ioctl,
 * counts its send buffer's unsent bytes likewise). Over RDMA, what is not yet written
 * into the peer's RMB. */
int conn_tx_queued(struct smc_conn *c)
{
	if (conn_state(c) != CONN_ACTIVE || !c->ib)
		return 0;
	return conn_ib_tx_unwritten(c);
}

void conn_linger_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	REAL(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

/*
 * Orphans (conn_orphan.h): a closed shared-memory connection whose peer has not read all
 * we wrote. What it still owes is the re-send of those bytes should the peer go back to
 * TCP before it reads them (the bytes stay in the ring until then, as a closed TCP
 * socket's stay in its send queue).
 */
int64_t conn_orphan_unread(struct smc_conn *c)
{
	int64_t room;

	if (c->aborted || tx_dead(c))
		return -1;
	if (pthread_mutex_trylock(&c->tx_lock) != 0)
		return 1; /* a thread of ours is still in a call on it: look again later */
	/* another process of our side may have written since we did (fork, vfork): our
	 * producer cursor is the shared block's, or the peer's cons looks impossible */
	tx_resync(c);
	room = c->aborted ? -1 : tx_free(c);
	pthread_mutex_unlock(&c->tx_lock);
	return room < 0 ? -1 : (int64_t)c->tx_size - room;
}

enum conn_orphan_end conn_orphan_step(struct smc_conn *c)
{
	int64_t unread;

	if (peer_went_tcp(c)) {
		/* the peer left the rings: what it did not read goes over TCP, the rest
		 * (if the socket does not take it at once) on the progress thread, and
		 * the socket's last close is then a FIN after it */
		if (pthread_mutex_trylock(&c->tx_lock) != 0)
			return CONN_ORPHAN_KEEP;
		tx_resync(c); /* the re-send ends at the shared block's producer cursor (fork) */
		(void)down_step(c, true);
		pthread_mutex_unlock(&c->tx_lock);
		return CONN_ORPHAN_RESENT;
	}
	unread = conn_orphan_unread(c);
	return unread == 0 || unread < 0 ? CONN_ORPHAN_READ : CONN_ORPHAN_KEEP;
}

/* SO_LINGER with a timeout: close waits until the peer consumed what we wrote. */
static void conn_linger(struct smc_conn *c)
{
	uint64_t deadline = clock_now_ns() + (uint64_t)c->linger_s * 1000000000ull;

	/* conn_wait(POLLOUT) returns as soon as there is any room; the ring draining
	 * completely is not a readiness event, so poll for it at a millisecond pace */
	while (!c->aborted && !tx_dead(c) && tx_free(c) < (int64_t)c->tx_size && clock_now_ns() < deadline)
		REAL(poll)(NULL, 0, 1);
}

/*
 * A server that closes a connection still negotiating, with bytes staged (an inetd
 * daytime service: accept, write a line, close): the bytes must reach the client the
 * way it will read them. While the client can take a Decline it gets one and they go
 * over TCP; once our Accept is out the client may be reading the rings already (its
 * Confirm is on the way), so the close waits for the handshake to end, a handshake
 * timeout at most (the client answers in microseconds), and they go into the ring.
 * Falling back alone there left the client on the rings and the line on TCP, which the
 * client takes for a broken peer (reset, the line lost).
 */
static void server_staged_settle(struct smc_conn *c)
{
	int r = progress_flow_refuse(c, SMC_REASON_HANDSHAKE);

	if (r != 1)
		conn_wait_pending(c, false, (int64_t)smc_cfg.handshake_timeout_ms * 1000000);
}

void conn_release_fd(struct smc_conn *c)
{
	int st;

	if (c->side == CONN_SERVER && !c->fork_orphan && conn_state(c) == CONN_PENDING &&
	    __atomic_load_n(&c->pend_len, __ATOMIC_RELAXED))
		server_staged_settle(c);
	/* one decision under the lock: the handshake may end concurrently */
	pthread_mutex_lock(&c->lock);
	st = conn_state(c);
	if (st == CONN_PENDING) {
		/* Staged data must reach the peer before our FIN: give up SMC for it. */
		if (c->pend_len)
			conn_fallback(c, SMC_REASON_HANDSHAKE);
		else
			__atomic_store_n(&c->state, CONN_CLOSED, __ATOMIC_RELEASE);
		progress_watch_let_go(c);
	}
	pthread_mutex_unlock(&c->lock);
	if (st == CONN_PENDING)
		progress_watch_decided(c);
	if (st == CONN_ACTIVE && c->policy_key) {
		uint64_t now = clock_now_ns();
		uint64_t moved = __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED) +
				 __atomic_load_n(&c->bytes_received, __ATOMIC_RELAXED);

		uint32_t turns = __atomic_load_n(&c->exchanges, __ATOMIC_RELAXED);

		log_debug("fd %d: closed after %llu us, %llu bytes moved in %u exchanges", c->fd,
			  (unsigned long long)((now - c->born_ns) / 1000), (unsigned long long)moved,
			  turns);
		hs_policy_closed(c->policy_key, now - c->born_ns, moved, turns, now,
				 (uint64_t)smc_cfg.short_conn_us * 1000);
	}
	if (st == CONN_ACTIVE && c->pool && c->side == CONN_CLIENT && c->pool_slot >= 0 &&
	    !c->fork_shared && pool_client_unclaimed(c->pool, c->pool_slot) &&
	    (__atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED) == 0 || !tcp_may_be_accepted(c->fd)) &&
	    conn_pool_withdraw(c, false)) {
		/* Closed before the server accepted: with nothing sent, the server will see a
		 * plain TCP connection that closes, so close it as one (FIN, no reset); a
		 * connection the kernel never established (or reset) is never accepted,
		 * so its slot must not wait for the server either. */
		__atomic_store_n(&c->state, CONN_CLOSED, __ATOMIC_RELEASE);
		st = CONN_CLOSED;
	}
	if (st == CONN_ACTIVE && (side_went_tcp(c) || peer_went_tcp(c))) {
		/* plain TCP from here (downgrade): no SMC close and no reset, the FIN is the
		 * kernel's; the progress thread sends what the socket did not take yet of
		 * the re-send, over its own descriptor */
		if (__atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE))
			down_step(c, false);
		conn_wake_local(c);
		return;
	}
	if (st == CONN_ACTIVE) {
		uint32_t left = __atomic_sub_fetch(&c->map.hdr->side_refs[c->side], 1, __ATOMIC_ACQ_REL);

		if (left == 0) {
			if (c->linger_on && c->linger_s == 0) {
				__atomic_fetch_or(&c->tx->wflags, SHM_W_ABORT, __ATOMIC_RELEASE);
				__atomic_fetch_or(&c->rx->rflags, SHM_R_ABORT, __ATOMIC_RELEASE);
			} else {
				if (c->linger_on)
					conn_linger(c);
				__atomic_fetch_or(&c->tx->wflags, SHM_W_CLOSED, __ATOMIC_RELEASE);
				__atomic_fetch_or(&c->rx->rflags, SHM_R_CLOSED, __ATOMIC_RELEASE);
			}
			if (c->ib) {
				conn_ib_release(c, c->linger_on && c->linger_s == 0);
				bell_ring_peer(c->peer_rx_bell);
				bell_ring_peer(c->peer_tx_bell);
			} else {
				/* as for data: only a peer thread asleep on either direction
				 * needs the syscall (every waiter counts as one, see
				 * conn_prepare_sleep) */
				ring_if_asleep(&c->tx->r_sleepers, &c->tx->r_seq, &c->rung_rx_seq,
					       c->peer_rx_bell);
				ring_if_asleep(&c->rx->w_sleepers, &c->rx->w_seq, &c->rung_tx_seq,
					       c->peer_tx_bell);
			}
			/* The TCP channel carried no payload: close it with a reset, so neither
			 * side keeps it in TIME_WAIT (a churning client would run out of the
			 * ports it binds before connect). The peer knows from the flags above
			 * that this is a close, not an abort. Unless the peer has not read all
			 * we wrote: then the socket stays ours until it has (conn_orphan.h). */
			if (c->ib || c->pool || (c->linger_on && c->linger_s == 0) ||
			    !conn_orphan_adopt(c))
				conn_linger_reset(c->fd);
		}
	}
	if (st == CONN_ACTIVE && !c->ib) {
		/* our own threads still waiting on the connection (another dup of the fd) */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->asleep_rx, __ATOMIC_RELAXED))
			bell_ring(c->rx_bell);
		if (__atomic_load_n(&c->asleep_tx, __ATOMIC_RELAXED))
			bell_ring(c->tx_bell);
	} else {
		conn_wake_local(c);
	}
}
