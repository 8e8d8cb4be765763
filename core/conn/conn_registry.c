/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Every live connection of the process, and what happens to them all at once: fork
 * (references, locks, the child's copies), exit and exec (the handshakes still
 * running), and the descriptors they hold.
 */
#include <stdlib.h>
#include <time.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/conn/conn_int.h"
#include "core/conn/transport.h"


struct smc_conn *conn_from_fd(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);
	struct smc_conn *c = NULL;

	if (!e || __atomic_load_n(&e->kind, __ATOMIC_ACQUIRE) != FD_SMC)
		return NULL;
	pthread_mutex_lock(fdtab_lock(fd));
	if (e->kind == FD_SMC) {
		c = e->obj;
		conn_get(c);
	}
	pthread_mutex_unlock(fdtab_lock(fd));
	return c;
}
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

void conn_list_add(struct smc_conn *c)
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

void conn_list_del(struct smc_conn *c)
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
	for (size_t i = 0; i < b.n && conn_negotiate; i++)
		conn_negotiate->decided(b.c[i]);
	for (size_t i = 0; i < b.n; i++) {
		uint8_t w;

		/* the thread ends a decided watch within microseconds: a millisecond's
		 * sleep per look made every short-lived client's exit that much later */
		while ((w = __atomic_load_n(&b.c[i]->hs_watch, __ATOMIC_ACQUIRE)) != HS_WATCH_DONE &&
		       w != HS_WATCH_NONE && clock_now_ns() < until)
			nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 }, NULL);
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

/* The batch's handshakes still running end as TCP, each after waiting up to timeo_ns
 * for its own decision (0: none); the batch's references are dropped. */
static void batch_end_as_tcp(struct conn_batch *b, int64_t timeo_ns)
{
	for (size_t i = 0; i < b->n; i++) {
		struct smc_conn *c = b->c[i];

		if (timeo_ns)
			conn_wait_pending(c, false, timeo_ns);
		pthread_mutex_lock(&c->lock);
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
			conn_fallback_to_tcp(c, SMC_REASON_HANDSHAKE, false);
		pthread_mutex_unlock(&c->lock);
		conn_put(c);
	}
	free(b->c);
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
	batch_end_as_tcp(&b, 0);
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
			conn_fallback_to_tcp(c, SMC_REASON_HANDSHAKE, false);
		pthread_mutex_unlock(&c->lock);
		conn_put(c);
	}
	free(b.c);
	if (exiting)
		undecided_clients_end();
	decided_watches_end();
}

static void take_pending(struct smc_conn *c, void *arg)
{
	if (!c->fork_orphan && __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		batch_add(arg, c);
}

void conn_settle_handshakes(void)
{
	struct conn_batch b = { 0 };

	conn_foreach(take_pending, &b);
	batch_end_as_tcp(&b, (int64_t)smc_cfg.handshake_timeout_ms * 1000000);
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

		/* a process-bound connection stays the parent's (transport.h) */
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE &&
		    !c->tp->process_bound &&
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


/* The progress thread does not survive fork: a connection it still negotiates would
 * stay PENDING forever in the child. Deferred server connections are decided first:
 * one whose client's CLC message is there is decided at once and its handshake is
 * bounded; a client held up may take the thread up to its last deadline tick
 * (progress_server.c), longer than a fork should wait, so the wait here is bounded and the
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
			r = conn_wait(c, 0, true, deadline);
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
 *    lock take them from the shared control block (conn_rx_resync, conn_tx_resync), where a
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
		conn_watch_fd_drop(c); /* the parent's progress thread's */
		c->tp->fork_child(c);
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
