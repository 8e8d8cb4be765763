/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R link groups of this process around real links and the device. See ib_lgr.h;
 * the sharing and expiry rules are ib_lgr_book.c's.
 */
#include "core/base/clock.h"
#include "core/ib/ib_lgr.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/base/real.h"
#include "core/ib/ib_int.h"
#include "core/ib/ibv_load.h"

#define MS 1000000ull
#define NEGATIVE_CACHE_NS (5000 * MS) /* retry a failed device open after this */

struct lgr_link {
	struct ib_lgr_entry e; /* e.link is the struct ib_link */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ib_lgr_book book = { .idle_ns = IB_LGR_IDLE_MS_DEFAULT * MS,
				   .max_conns = IB_LINK_MAX_CONNS };
static struct ib_dev dev;
static bool dev_open;
static int dev_err;              /* last failed open, remembered until dev_err_until */
static uint64_t dev_err_until;
static bool fork_init_done;
static uint8_t peer_id[CLC_PEER_ID_LEN];
static bool peer_id_set;
static struct ib_lgr_hooks hooks;
static struct ib_link_opts link_opts = IB_LINK_OPTS_DEFAULT;
static uint64_t last_tick;       /* when ib_lgr_tick last ran */

static struct ib_lgr_entry *entry_of(struct ib_link *l)
{
	return l->lgr;
}

void ib_lgr_set_hooks(const struct ib_lgr_hooks *h)
{
	pthread_mutex_lock(&lock);
	hooks = *h;
	pthread_mutex_unlock(&lock);
}

void ib_lgr_set_idle_timeout_ms(uint32_t ms)
{
	pthread_mutex_lock(&lock);
	book.idle_ns = (uint64_t)ms * MS;
	pthread_mutex_unlock(&lock);
}

void ib_lgr_set_link_opts(const struct ib_link_opts *o)
{
	pthread_mutex_lock(&lock);
	link_opts = *o;
	pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ device */

/* A peer id per process, not per host: links join processes (see ib_lgr_book.h). */
static void draw_peer_id_locked(void)
{
	/* an identity that only has to differ between processes: a weak value will do
	 * (random.h) */
	uint64_t v = random_weak64();

	memcpy(peer_id, &v, sizeof(peer_id) < sizeof(v) ? sizeof(peer_id) : sizeof(v));
	peer_id_set = true;
}

/* Registered memory and fork(): see ib_lgr.h. Before the first registration. */
static void fork_init_locked(void)
{
	int rc;

	if (fork_init_done)
		return;
	fork_init_done = true;
	rc = ibv_fork_init();
	if (rc != 0)
		log_warn("ib: ibv_fork_init: %s", strerror(rc));
	log_debug("ib: fork support: %s",
		  ibv_is_fork_initialized() == IBV_FORK_UNNEEDED ? "kernel copies pinned pages"
		  : ibv_is_fork_initialized() == IBV_FORK_ENABLED ? "MADV_DONTFORK"
								  : "disabled");
}

static int set_nonblock(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFL);

	if (fl < 0 || REAL(fcntl)(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static int open_locked(void)
{
	uint64_t now;
	int rc;

	if (dev_open)
		return 0;
	now = clock_now_ns();
	if (dev_err && now < dev_err_until)
		return dev_err;
	if (!peer_id_set)
		draw_peer_id_locked();
	if (!ibv_load()) {
		rc = -ENODEV; /* no libibverbs (logged): as without a device */
	} else {
		fork_init_locked();
		rc = ib_dev_open(smc_cfg.ib_dev, smc_cfg.ib_port, smc_cfg.ib_gid_index, &dev);
	}
	if (rc == 0) {
		rc = set_nonblock(dev.ctx->async_fd);
		if (rc < 0)
			ib_dev_close(&dev);
	}
	if (rc < 0) {
		dev_err = rc;
		dev_err_until = now + NEGATIVE_CACHE_NS;
		log_debug("ib: no RDMA device: %s", strerror(-rc));
		return rc;
	}
	dev_err = 0;
	dev_open = true;
	if (hooks.dev_opened)
		hooks.dev_opened(dev.ctx->async_fd, hooks.arg);
	return 0;
}

/* The last link went: release the PD and the context (and its fds). */
static void close_dev_locked(void)
{
	if (!dev_open || book.n)
		return;
	if (hooks.dev_closing)
		hooks.dev_closing(dev.ctx->async_fd, hooks.arg);
	ib_dev_close(&dev);
	dev_open = false;
	log_debug("ib: device closed (no link left)");
}

int ib_lgr_open(void)
{
	int rc;

	ibv_load(); /* not under the lock: dlopen takes the loader's */
	pthread_mutex_lock(&lock);
	rc = open_locked();
	pthread_mutex_unlock(&lock);
	return rc;
}

int ib_lgr_local(struct clc_smcr_local *out)
{
	int rc;

	ibv_load(); /* not under the lock: dlopen takes the loader's */
	pthread_mutex_lock(&lock);
	rc = open_locked();
	if (rc == 0) {
		memcpy(out->peer_id, peer_id, CLC_PEER_ID_LEN);
		memcpy(out->gid, dev.gid, CLC_GID_LEN);
		memcpy(out->mac, dev.mac, CLC_MAC_LEN);
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* ------------------------------------------------------------------ links */

static int new_link_locked(const uint8_t *key_peer, const uint8_t *key_gid,
			   enum ib_lgr_role role, struct ib_link **out)
{
	struct lgr_link *ll;
	struct ib_link *l;
	int rc = open_locked();

	if (rc < 0)
		return rc;
	ll = calloc(1, sizeof(*ll));
	if (!ll)
		return -ENOMEM;
	rc = ib_link_create(&dev, &link_opts, &l);
	if (rc < 0) {
		free(ll);
		close_dev_locked();
		return rc;
	}
	memcpy(ll->e.peer_id, key_peer, CLC_PEER_ID_LEN);
	memcpy(ll->e.gid, key_gid, CLC_GID_LEN);
	ll->e.role = role;
	ll->e.link = l;
	l->lgr = &ll->e;
	ib_lgr_book_add(&book, &ll->e);
	if (hooks.link_added)
		hooks.link_added(l, hooks.arg);
	*out = l;
	return 0;
}

int ib_lgr_get_server(const uint8_t *pid, const uint8_t *gid, struct ib_link **out,
		      bool *first_contact)
{
	struct ib_lgr_entry *e;
	int rc = 0;

	ibv_load(); /* not under the lock: dlopen takes the loader's */
	pthread_mutex_lock(&lock);
	e = ib_lgr_book_find_server(&book, pid, gid);
	if (e && ib_link_failed(e->link)) { /* failed since the last tick */
		ib_lgr_book_failed(e);
		ib_lgr_book_unref(e, clock_now_ns());
		e = NULL;
	}
	if (e) {
		*out = e->link;
		*first_contact = false;
	} else {
		rc = new_link_locked(pid, gid, IB_LGR_SERVER, out);
		*first_contact = true;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

int ib_lgr_get_client(const struct ib_link_params *server, bool first_contact,
		      struct ib_link **out)
{
	struct ib_lgr_entry *e;
	int rc = 0;

	ibv_load(); /* not under the lock: dlopen takes the loader's */
	pthread_mutex_lock(&lock);
	if (first_contact) {
		rc = new_link_locked(server->peer_id, server->gid, IB_LGR_CLIENT, out);
	} else {
		e = ib_lgr_book_find_client(&book, server->peer_id, server->gid, server->qpn);
		if (e && ib_link_failed(e->link)) {
			ib_lgr_book_failed(e);
			ib_lgr_book_unref(e, clock_now_ns());
			e = NULL;
		}
		if (e)
			*out = e->link;
		else
			rc = -ENOENT;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

int ib_lgr_connect(struct ib_link *l, const struct ib_link_params *peer, bool server)
{
	int rc = ib_link_connect(l, peer, server);

	if (rc == 0) {
		pthread_mutex_lock(&lock);
		ib_lgr_book_up(entry_of(l), peer->qpn);
		pthread_mutex_unlock(&lock);
	}
	return rc;
}

void ib_lgr_put(struct ib_link *l)
{
	struct ib_lgr_entry *e;
	uint64_t now = clock_now_ns();

	pthread_mutex_lock(&lock);
	e = entry_of(l);
	/* the connection the handshake made (if any) holds the link from now on */
	ib_lgr_book_set_conns(e, ib_link_conn_count(l), now);
	ib_lgr_book_unref(e, now);
	pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ timers */

/* Links to destroy, taken out of the book under the lock. */
struct doomed {
	struct ib_link *l[64];
	unsigned n;
};

static void collect_due_locked(uint64_t now, struct doomed *d)
{
	struct ib_lgr_entry *e = book.head, *next;

	for (; e; e = next) {
		struct ib_link *l = e->link;

		next = e->next;
		ib_link_tick(l, now);
		if (ib_link_failed(l))
			ib_lgr_book_failed(e);
		ib_lgr_book_set_conns(e, ib_link_conn_count(l), now);
		if (d->n < sizeof(d->l) / sizeof(d->l[0]) && ib_lgr_book_due(&book, e, now)) {
			ib_lgr_book_remove(&book, e);
			d->l[d->n++] = l;
		}
	}
}

static void destroy_link(struct ib_link *l)
{
	struct lgr_link *ll = (struct lgr_link *)entry_of(l);
	struct ib_link_counters k;

	ib_link_get_counters(l, &k);
	log_debug("ib: link to qpn %u released (%s; %llu bytes written, %llu keepalives)",
		  ib_link_peer_qpn(l), ib_link_failed(l) ? "failed" : "idle",
		  (unsigned long long)k.rdma_bytes, (unsigned long long)k.keepalives);
	ib_link_destroy(l);
	free(ll);
}

void ib_lgr_tick(uint64_t now)
{
	struct doomed d = { .n = 0 };
	struct ib_lgr_hooks h;

	pthread_mutex_lock(&lock);
	last_tick = now;
	collect_due_locked(now, &d);
	h = hooks;
	pthread_mutex_unlock(&lock);
	if (!d.n)
		return;
	/* outside the lock: destroying a QP waits for its async events to be acked */
	for (unsigned i = 0; i < d.n; i++) {
		if (h.link_removed)
			h.link_removed(d.l[i], h.arg);
		destroy_link(d.l[i]);
	}
	pthread_mutex_lock(&lock);
	close_dev_locked(); /* unless a handshake made a new link meanwhile */
	pthread_mutex_unlock(&lock);
}

uint64_t ib_lgr_next_deadline(void)
{
	uint64_t t = UINT64_MAX;

	pthread_mutex_lock(&lock);
	for (struct ib_lgr_entry *e = book.head; e; e = e->next) {
		uint64_t a = ib_link_next_deadline(e->link), b = ib_lgr_book_expiry(&book, e);

		if (a < t)
			t = a;
		if (b < t)
			t = b;
		/* connections close without telling us: count them again a keepalive
		 * period after the last look */
		if (e->conns || e->refs) {
			uint64_t c = last_tick + link_opts.keepalive_ms * MS;

			if (c < t)
				t = c;
		}
	}
	pthread_mutex_unlock(&lock);
	return t;
}

/* ------------------------------------------------------------------ async events */

int ib_lgr_async_fd(void)
{
	int fd;

	pthread_mutex_lock(&lock);
	fd = dev_open ? dev.ctx->async_fd : -1;
	pthread_mutex_unlock(&lock);
	return fd;
}

static void fail_all_locked(const char *why)
{
	for (struct ib_lgr_entry *e = book.head; e; e = e->next) {
		ib_link_fail(e->link, why);
		ib_lgr_book_failed(e);
	}
}

/* The link whose QP or CQ the event names; NULL when it is gone already. */
static struct ib_lgr_entry *find_by_object_locked(const struct ibv_async_event *ev, bool cq)
{
	for (struct ib_lgr_entry *e = book.head; e; e = e->next) {
		struct ib_link *l = e->link;

		if (cq ? l->cq == ev->element.cq : l->qp == ev->element.qp)
			return e;
	}
	return NULL;
}

static void handle_async_locked(const struct ibv_async_event *ev)
{
	struct ib_lgr_entry *e;

	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PATH_MIG_ERR:
		e = find_by_object_locked(ev, false);
		break;
	case IBV_EVENT_CQ_ERR:
		e = find_by_object_locked(ev, true);
		break;
	case IBV_EVENT_PORT_ERR:
		if (ev->element.port_num == dev.port)
			fail_all_locked(ibv_event_type_str(ev->event_type));
		return;
	case IBV_EVENT_DEVICE_FATAL:
		fail_all_locked(ibv_event_type_str(ev->event_type));
		return;
	default:
		log_debug("ib: async event %s", ibv_event_type_str(ev->event_type));
		return;
	}
	if (e) {
		ib_link_fail(e->link, ibv_event_type_str(ev->event_type));
		ib_lgr_book_failed(e);
	}
}

void ib_lgr_async_process(void)
{
	struct ibv_async_event ev;

	pthread_mutex_lock(&lock);
	/* the fd is nonblocking: the loop ends with EAGAIN */
	while (dev_open && ibv_get_async_event(dev.ctx, &ev) == 0) {
		handle_async_locked(&ev);
		ibv_ack_async_event(&ev);
	}
	pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ lifetime */

void ib_lgr_shutdown(void)
{
	struct ib_lgr_hooks h;
	struct ib_link *l;

	for (;;) {
		pthread_mutex_lock(&lock);
		l = book.head ? book.head->link : NULL;
		if (l)
			ib_lgr_book_remove(&book, entry_of(l));
		h = hooks;
		if (!l)
			close_dev_locked();
		pthread_mutex_unlock(&lock);
		if (!l)
			return;
		if (h.link_removed)
			h.link_removed(l, h.arg);
		destroy_link(l);
	}
}

bool ib_lgr_drain(uint64_t idle_ns, uint64_t max_ns)
{
	uint64_t start = clock_now_ns(), moved_at = start, seen = 0;

	for (;;) {
		uint64_t progress = 0, now;
		bool busy = false;

		pthread_mutex_lock(&lock);
		for (struct ib_lgr_entry *e = book.head; e; e = e->next)
			busy |= ib_link_output_pending(e->link, &progress);
		pthread_mutex_unlock(&lock);
		if (!busy)
			return true;
		now = clock_now_ns();
		if (progress != seen) {
			seen = progress;
			moved_at = now;
		}
		if (now - moved_at > idle_ns || now - start > max_ns)
			return false;
		REAL(poll)(NULL, 0, 1);
	}
}

void ib_lgr_atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	/* the parent's objects stay the parent's: forget them, destroy nothing */
	lock = fresh;
	book.head = NULL;
	book.n = 0;
	memset(&dev, 0, sizeof(dev));
	dev_open = false;
	dev_err = 0;
	draw_peer_id_locked(); /* the hooks stay: base/progress.c restarts its thread */
}

unsigned ib_lgr_link_count(void)
{
	unsigned n;

	pthread_mutex_lock(&lock);
	n = book.n;
	pthread_mutex_unlock(&lock);
	return n;
}

bool ib_lgr_dev_is_open(void)
{
	bool o;

	pthread_mutex_lock(&lock);
	o = dev_open;
	pthread_mutex_unlock(&lock);
	return o;
}
