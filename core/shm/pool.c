/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/base/bell.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fd_pass.h"
#include "core/base/fdpark.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/progress.h"
#include "core/base/real.h"
#include "core/base/rendezvous.h"
#include "core/base/stats.h"
#include "core/shm/pool.h"
#include "core/shm/pool_msg.h"

/* A request unanswered this long: the listener's process does not serve pools. */
#define POOL_ANSWER_NS (1000ull * 1000 * 1000)
/* After a refused or failed setup, the destination tries again this much later. */
#define POOL_RETRY_NS  (30ull * 1000 * 1000 * 1000)
/* Destinations with a pool (or a setup under way) per client process. */
#define POOL_DESTS     16
/* Pools per listener: every client process of a server has one. */
#define POOL_SET_MAX   64

struct smc_pool {
	int refs;
	enum pool_side side;
	void *base;
	size_t len;
	uint32_t nslots, ring_size;
	int link;                           /* the socket pair's end: client A, server B */
	int bells[2 * POOL_SLOTS_MAX];      /* ours: slot i rx [2i], tx [2i + 1] */
	int peer_bells[2 * POOL_SLOTS_MAX]; /* the peer's, same order */
	int nbells, npeer_bells;
	uid_t peer_uid;                     /* server: the client process */
	pid_t peer_pid;
	bool peer_trusted;                  /* root, or our own user */
	bool fds_taken;                     /* counted in the fd budget */
	bool dead;                          /* no new connections (atomic) */
	struct pool_set *set;               /* server: the set it is in, or NULL (atomic) */
	struct smc_pool *next;              /* in its pool_set */
};

struct pool_set {
	pthread_mutex_t lock;
	struct smc_pool *pools;
	int count;
	bool refuses; /* pool_set_refuse */
	struct pool_set *next; /* all sets of the process, for fork */
};

/* Descriptors a pool stands for: 4 per slot (both sides' doorbells) and its link. It
 * is created only where the library's descriptor budget allows it (fd_budget.h). */
static unsigned pool_fd_cost(uint32_t nslots)
{
	return 4 * nslots + 1;
}

static bool pool_fds_take(uint32_t nslots)
{
	if (!fd_budget_allows(-1, pool_fd_cost(nslots)))
		return false;
	fd_budget_take(pool_fd_cost(nslots));
	return true;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			fd_own_close(fds[i]);
}

/* ---------------------------------------------------------------- the pool object */

static struct smc_pool *pool_alloc(enum pool_side side, uint32_t nslots, uint32_t ring_size)
{
	struct smc_pool *p;

	if (!pool_fds_take(nslots))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p) {
		fd_budget_give(pool_fd_cost(nslots));
		return NULL;
	}
	p->fds_taken = true;
	p->refs = 1;
	p->side = side;
	p->nslots = nslots;
	p->ring_size = ring_size;
	p->link = -1;
	p->base = MAP_FAILED;
	return p;
}

void pool_get(struct smc_pool *p)
{
	__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
}

void pool_put(struct smc_pool *p)
{
	if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (p->base != MAP_FAILED) {
		munmap(p->base, p->len);
		shm_unreserve(p->len);
	}
	close_fds(p->bells, p->nbells);
	close_fds(p->peer_bells, p->npeer_bells);
	if (p->link >= 0)
		fd_own_close(p->link);
	if (p->fds_taken)
		fd_budget_give(pool_fd_cost(p->nslots));
	free(p);
}

static bool pool_retired(struct smc_pool *p)
{
	return __atomic_load_n(&p->dead, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&((struct pool_hdr *)p->base)->retired, __ATOMIC_ACQUIRE);
}

static void pool_retire(struct smc_pool *p)
{
	__atomic_store_n(&p->dead, true, __ATOMIC_RELEASE);
	__atomic_store_n(&((struct pool_hdr *)p->base)->retired, 1u, __ATOMIC_RELEASE);
}

/* Our doorbells for every slot. 0 or -errno. */
static int pool_make_bells(struct smc_pool *p)
{
	for (uint32_t i = 0; i < 2 * p->nslots; i++) {
		int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

		if (fd < 0)
			return -errno;
		p->bells[p->nbells++] = fd_park(fd);
	}
	return 0;
}

/* Maps a region of p's geometry from memfd (the client's: sealed size checked). */
static int pool_map(struct smc_pool *p, int memfd, bool check)
{
	size_t len = pool_region_len(p->nslots, p->ring_size);
	void *base;

	if (check && shm_memfd_check(memfd, len) < 0)
		return -EPROTO;
	if (shm_reserve(len) < 0)
		return -ENOMEM;
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (base == MAP_FAILED) {
		shm_unreserve(len);
		return -errno;
	}
	p->base = base;
	p->len = len;
	return 0;
}

void pool_slot_conn(struct smc_pool *p, int slot, struct shm_map *map, int bells[4])
{
	pool_slot_map(p->base, p->ring_size, (uint32_t)slot, map);
	bells[0] = p->bells[2 * slot];
	bells[1] = p->bells[2 * slot + 1];
	bells[2] = p->peer_bells[2 * slot];
	bells[3] = p->peer_bells[2 * slot + 1];
}

void pool_conn_done(struct smc_pool *p, int slot)
{
	pool_slot_release(p->base, p->ring_size, (uint32_t)slot, p->side);
	pool_put(p);
}

/* ---------------------------------------------------------------- messages */

struct fd_msg {
	struct msghdr msg;
	struct iovec iov;
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * POOL_MAX_FDS) +
			   CMSG_SPACE(sizeof(struct ucred))];
	} ctl;
};

static void fd_msg_init(struct fd_msg *m, void *buf, size_t len, const int *fds, int nfds)
{
	memset(m, 0, sizeof(*m));
	m->iov.iov_base = buf;
	m->iov.iov_len = len;
	m->msg.msg_iov = &m->iov;
	m->msg.msg_iovlen = 1;
	if (nfds > 0)
		fd_pass_pack(&m->msg, m->ctl.space, fds, nfds);
}

/* Receives one message without waiting: its length, the descriptors (CLOEXEC) and, when
 * cred is not NULL, the sender's kernel-checked credentials (cred->pid 0 when none came).
 * -errno; on a truncated message every descriptor is closed and -EPROTO returned. */
static ssize_t fd_msg_recv(int fd, void *buf, size_t cap, int *fds, int *nfds, struct ucred *cred)
{
	struct fd_msg m;
	ssize_t r;

	fd_msg_init(&m, buf, cap, NULL, 0);
	m.msg.msg_control = m.ctl.space;
	m.msg.msg_controllen = sizeof(m.ctl.space);
	*nfds = 0;
	if (cred)
		memset(cred, 0, sizeof(*cred));
	do
		r = REAL(recvmsg)(fd, &m.msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	/* more than any valid message has: closed */
	(void)fd_pass_unpack(&m.msg, fds, nfds, (int)POOL_MAX_FDS, cred);
	if (m.msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		close_fds(fds, *nfds);
		*nfds = 0;
		return -EPROTO;
	}
	return r;
}

/* ---------------------------------------------------------------- client */

enum dest_state { DEST_EMPTY = 0, DEST_REQUESTED, DEST_READY, DEST_FAILED };

struct pool_dest {
	uint64_t key;
	enum dest_state st;
	uint64_t since_ns;
	struct smc_pool *pool; /* REQUESTED: waiting for the answer; READY: in use */
	bool fd_limited;       /* FAILED: for the descriptor budget (fd_budget.h) */
};

static pthread_mutex_t dests_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_dest dests[POOL_DESTS];

/* A new client pool with its region, doorbells and link; *memfd and *far (the link's
 * other end) go with the request. */
static struct smc_pool *client_pool_new(int *memfd, int *far)
{
	uint32_t n = smc_cfg.pool_slots, ring = (uint32_t)smc_cfg.pool_ring;
	struct smc_pool *p;
	int sv[2], one = 1;

	*memfd = *far = -1;
	if (!pool_geometry_ok(n, ring))
		return NULL;
	p = pool_alloc(POOL_CLIENT, n, ring);
	if (!p)
		return NULL;
	*memfd = shm_memfd_new("smc-pool", pool_region_len(n, ring));
	if (*memfd < 0 || pool_map(p, *memfd, false) < 0)
		goto fail;
	pool_region_init(p->base, n, ring);
	if (pool_make_bells(p) < 0 ||
	    REAL(socketpair)(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		goto fail;
	p->link = fd_park(sv[0]);
	*far = sv[1];
	/* the answer must carry its sender's credentials (checked in client_take_answer) */
	if (REAL(setsockopt)(p->link, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0)
		goto fail;
	return p;
fail:
	if (*memfd >= 0)
		fd_own_close(*memfd);
	if (*far >= 0)
		fd_own_close(*far);
	*memfd = *far = -1;
	pool_put(p);
	return NULL;
}

/* Sends the setup request for dst. A new pool waiting for its answer, or NULL. */
static struct smc_pool *client_request(const struct sockaddr *dst)
{
	struct pool_req req;
	int fds[POOL_MAX_FDS], memfd, far, nfds = 0, r;
	struct smc_pool *p = client_pool_new(&memfd, &far);
	struct fd_msg m;

	if (!p)
		return NULL;
	req = pool_req_make(p->nslots, p->ring_size);
	fds[nfds++] = memfd;
	fds[nfds++] = far;
	for (int i = 0; i < p->nbells; i++)
		fds[nfds++] = p->bells[i];
	fd_msg_init(&m, &req, sizeof(req), fds, nfds);
	r = rdv_listener_sendmsg(dst, &m.msg);
	fd_own_close(memfd);
	fd_own_close(far);
	if (r < 0) {
		log_debug("pool: no setup request sent (%s)", strerror(-r));
		pool_put(p);
		return NULL;
	}
	return p;
}

/* The server's answer to p's request: 1 ready, 0 not yet, -1 refused or not trusted. */
static int client_take_answer(struct smc_pool *p, const struct sockaddr *dst)
{
	struct pool_rep raw, rep;
	struct ucred cred;
	int fds[POOL_MAX_FDS], nfds, d;
	ssize_t r = fd_msg_recv(p->link, &raw, sizeof(raw), fds, &nfds, &cred);
	uid_t owner;

	if (r == -EAGAIN || r == -EWOULDBLOCK)
		return 0;
	d = pool_rep_decode(&raw, r, nfds, p->nslots, &rep);
	if (d < 0) {
		if (d == -ECONNREFUSED)
			log_debug("pool: the server does not serve pools on this listener");
		else
			log_info("pool: no valid answer to the setup request (%zd bytes, %d fds)",
				 r, nfds);
		close_fds(fds, nfds);
		return -1;
	}
	/* Only the listener's owner (or root) may read what we send through the pool. */
	if (cred.pid == 0 ||
	    (cred.uid != 0 && (rdv_listener_owner(dst, &owner) < 0 || owner != cred.uid))) {
		log_warn("pool: the answer came from pid %d (uid %u), not from the listener's "
			 "owner: no pool", (int)cred.pid, (unsigned)cred.uid);
		close_fds(fds, nfds);
		return -1;
	}
	for (int i = 0; i < nfds; i++)
		p->peer_bells[p->npeer_bells++] = fd_park(fds[i]);
	log_debug("pool: ready (%u slots of %u bytes, server pid %d)", p->nslots, p->ring_size,
		  (int)cred.pid);
	return 1;
}

/* The server process still holds the link's other end. Checked before every offer: a
 * server that died (and a new one on the same port, which knows no pool) would leave
 * the connection's data in a slot nobody reads. */
static bool link_alive(int link)
{
	char b;
	ssize_t r = REAL(recv)(link, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

static struct pool_dest *dest_find(uint64_t key)
{
	struct pool_dest *free_slot = NULL;

	for (int i = 0; i < POOL_DESTS; i++) {
		if (dests[i].st != DEST_EMPTY && dests[i].key == key)
			return &dests[i];
		if (!free_slot && dests[i].st == DEST_EMPTY)
			free_slot = &dests[i];
	}
	return free_slot;
}

static void dest_fail(struct pool_dest *d, uint64_t now)
{
	if (d->pool)
		pool_put(d->pool);
	d->pool = NULL;
	d->st = DEST_FAILED;
	d->since_ns = now;
	d->fd_limited = false;
}

/*
 * Descriptor pressure (fd_budget.h): a pool is a cache of 4 descriptors per slot that
 * would otherwise stay for the life of the process, so this process's client pools take
 * no new connection and go away with their last one, and the server drops its side when
 * the link closes. A destination asks for a pool again after POOL_RETRY_NS, if the
 * budget allows one then. Server pools are their clients' to end: one retired by the
 * server could lose a connection its client has offered already.
 */
static void pool_client_reclaim(void)
{
	uint64_t now = clock_now_ns();
	unsigned n = 0;

	pthread_mutex_lock(&dests_lock);
	for (int i = 0; i < POOL_DESTS; i++) {
		struct pool_dest *d = &dests[i];

		if ((d->st == DEST_READY || d->st == DEST_REQUESTED) && d->pool) {
			pool_retire(d->pool);
			dest_fail(d, now);
			d->fd_limited = true;
			n++;
		}
	}
	pthread_mutex_unlock(&dests_lock);
	if (n)
		log_debug("pool: %u client pool(s) retired to give their descriptors back", n);
}

enum pool_route pool_client_route(const struct sockaddr *dst, uint64_t key,
				  struct smc_pool **out)
{
	enum pool_route route = POOL_ROUTE_NONE;
	uint64_t now = clock_now_ns();
	struct pool_dest *d;

	*out = NULL;
	if (!key || smc_cfg.pool_slots == 0)
		return POOL_ROUTE_NONE;
	fd_budget_on_pressure(pool_client_reclaim);
	pthread_mutex_lock(&dests_lock);
	d = dest_find(key);
	if (!d)
		goto out; /* the table is full: the usual way */
	switch (d->st) {
	case DEST_READY:
		if (pool_retired(d->pool) || !link_alive(d->pool->link)) {
			dest_fail(d, now);
			break;
		}
		pool_get(d->pool);
		*out = d->pool;
		route = POOL_ROUTE_POOL;
		break;
	case DEST_REQUESTED: {
		int r = client_take_answer(d->pool, dst);

		if (r > 0) {
			d->st = DEST_READY;
			pool_get(d->pool);
			*out = d->pool;
			route = POOL_ROUTE_POOL;
		} else if (r < 0 || now - d->since_ns > POOL_ANSWER_NS) {
			dest_fail(d, now);
		} else {
			route = POOL_ROUTE_PENDING;
		}
		break;
	}
	case DEST_FAILED:
		if (now - d->since_ns < POOL_RETRY_NS) {
			if (d->fd_limited)
				route = POOL_ROUTE_FD_LIMIT;
			break;
		}
		__attribute__((fallthrough)); /* try again */
	case DEST_EMPTY:
		d->key = key;
		if (!fd_budget_allows(-1, pool_fd_cost((uint32_t)smc_cfg.pool_slots))) {
			dest_fail(d, now);
			d->fd_limited = true;
			route = POOL_ROUTE_FD_LIMIT;
			break;
		}
		d->pool = client_request(dst);
		if (!d->pool) {
			dest_fail(d, now);
			break;
		}
		d->st = DEST_REQUESTED;
		d->since_ns = now;
		route = POOL_ROUTE_FULL;
		break;
	}
out:
	pthread_mutex_unlock(&dests_lock);
	return route;
}

int pool_client_offer(struct smc_pool *p, const struct sockaddr *local)
{
	struct rdv_endpoint ep;

	if (!rdv_endpoint_from(local, &ep))
		return -1;
	return pool_slot_offer(p->base, p->nslots, p->ring_size, &ep);
}

bool pool_client_unclaimed(struct smc_pool *p, int slot)
{
	uint32_t w = pool_slot_word(p->base, p->ring_size, (uint32_t)slot);

	return (w & POOL_ST_MASK) == POOL_ST_OFFERED;
}

bool pool_client_withdraw(struct smc_pool *p, int slot, bool server_gone)
{
	if (server_gone)
		__atomic_store_n(&p->dead, true, __ATOMIC_RELEASE);
	return pool_slot_withdraw(p->base, p->ring_size, (uint32_t)slot);
}

/* ---------------------------------------------------------------- server */

static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_set *sets;
static bool server_refuses; /* under sets_lock: no new pools (io_uring) */

struct pool_set *pool_set_new(void)
{
	struct pool_set *set = calloc(1, sizeof(*set));

	if (!set)
		return NULL;
	pthread_mutex_init(&set->lock, NULL);
	pthread_mutex_lock(&sets_lock);
	set->next = sets;
	sets = set;
	pthread_mutex_unlock(&sets_lock);
	return set;
}

static void set_drop_all(struct pool_set *set)
{
	struct smc_pool *p, *next;

	for (p = set->pools; p; p = next) {
		next = p->next;
		__atomic_store_n(&p->set, NULL, __ATOMIC_RELEASE);
		pool_retire(p);
		/* wakes the link's watch (server_link_closed), which drops its reference */
		REAL(shutdown)(p->link, SHUT_RDWR);
		pool_put(p);
	}
	set->pools = NULL;
	set->count = 0;
}

void pool_set_free(struct pool_set *set)
{
	struct pool_set **pp;

	if (!set)
		return;
	pthread_mutex_lock(&sets_lock);
	for (pp = &sets; *pp; pp = &(*pp)->next)
		if (*pp == set) {
			*pp = set->next;
			break;
		}
	pthread_mutex_lock(&set->lock);
	set_drop_all(set);
	pthread_mutex_unlock(&set->lock);
	pthread_mutex_unlock(&sets_lock);
	pthread_mutex_destroy(&set->lock);
	free(set);
}

/* Under set->lock: takes p out of set; false when it was not in. */
static bool set_unlink(struct pool_set *set, struct smc_pool *p)
{
	for (struct smc_pool **pp = &set->pools; *pp; pp = &(*pp)->next) {
		if (*pp != p)
			continue;
		*pp = p->next;
		set->count--;
		__atomic_store_n(&p->set, NULL, __ATOMIC_RELEASE);
		return true;
	}
	return false;
}

/* On the progress thread: the link of server pool p became readable, i.e. its client
 * exited or closed it (or our listener closed: then p is out of its set already). */
static void server_link_closed(void *arg)
{
	struct smc_pool *p = arg;
	struct pool_set *set;
	bool dropped = false;

	pthread_mutex_lock(&sets_lock);
	set = __atomic_load_n(&p->set, __ATOMIC_ACQUIRE);
	if (set) {
		pthread_mutex_lock(&set->lock);
		dropped = set_unlink(set, p);
		pthread_mutex_unlock(&set->lock);
	}
	pthread_mutex_unlock(&sets_lock);
	if (dropped) {
		log_debug("pool: client pid %d gone", (int)p->peer_pid);
		pool_retire(p);
		pool_put(p); /* the set's */
	}
	pool_put(p); /* the watch's */
}

/* Under set->lock: drops the pools whose client is gone (the link's EOF). */
static void set_sweep(struct pool_set *set)
{
	struct smc_pool **pp = &set->pools;

	while (*pp) {
		struct smc_pool *p = *pp;
		char b;
		ssize_t r = REAL(recv)(p->link, &b, 1, MSG_PEEK | MSG_DONTWAIT);

		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			*pp = p->next;
			set->count--;
			__atomic_store_n(&p->set, NULL, __ATOMIC_RELEASE);
			pool_retire(p);
			pool_put(p);
		} else {
			pp = &p->next;
		}
	}
}

static bool listener_reuseport(int lfd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	return REAL(getsockopt)(lfd, SOL_SOCKET, SO_REUSEPORT, &v, &len) == 0 && v;
}

static void server_answer(int link, enum pool_status st, uint32_t nslots, const int *bells,
			  int nbells)
{
	struct pool_rep rep = pool_rep_make(st, nslots);
	struct fd_msg m;

	fd_msg_init(&m, &rep, sizeof(rep), bells, nbells);
	(void)!REAL(sendmsg)(link, &m.msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* One request: fds[0] memfd, fds[1] the link, then the client's doorbells. Takes the
 * descriptors. A pool for the set, or NULL (refused: answered so when possible). */
static struct smc_pool *server_accept_request(struct pool_set *set, const struct pool_req *req,
					      int *fds, int nfds, bool refuse)
{
	struct smc_pool *p = NULL;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int type = 0, link = fds[1];
	socklen_t tl = sizeof(type);

	if (REAL(getsockopt)(link, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET ||
	    REAL(getsockopt)(link, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
		close_fds(fds, nfds);
		return NULL;
	}
	if (refuse || set->count >= POOL_SET_MAX)
		goto refused;
	p = pool_alloc(POOL_SERVER, req->nslots, req->ring_size);
	if (!p || pool_map(p, fds[0], true) < 0 ||
	    !pool_region_check(p->base, req->nslots, req->ring_size) || pool_make_bells(p) < 0)
		goto refused;
	fd_own_close(fds[0]);
	p->link = fd_park(link);
	for (int i = 2; i < nfds; i++)
		p->peer_bells[p->npeer_bells++] = fd_park(fds[i]);
	p->peer_uid = cred.uid;
	p->peer_pid = cred.pid;
	p->peer_trusted = cred.uid == 0 || cred.uid == geteuid();
	server_answer(p->link, POOL_ANSWER_OK, p->nslots, p->bells, p->nbells);
	log_debug("pool: serving pid %d (uid %u%s): %u slots of %u bytes", (int)cred.pid,
		  (unsigned)cred.uid, p->peer_trusted ? "" : ", checked per connection",
		  p->nslots, p->ring_size);
	return p;
refused:
	server_answer(link, POOL_ANSWER_REFUSED, req->nslots, NULL, 0);
	if (p)
		pool_put(p);
	close_fds(fds, nfds);
	return NULL;
}

/* Under set->lock: no new offers into the set's pools. They stay claimable for the
 * connections already offered. */
static void set_retire_pools(struct pool_set *set)
{
	for (struct smc_pool *p = set->pools; p; p = p->next)
		__atomic_store_n(&((struct pool_hdr *)p->base)->retired, 1u, __ATOMIC_RELEASE);
}

void pool_set_refuse(struct pool_set *set)
{
	if (!set)
		return;
	pthread_mutex_lock(&set->lock);
	set->refuses = true;
	set_retire_pools(set);
	pthread_mutex_unlock(&set->lock);
}

void pool_set_serve(struct pool_set *set, int name_fd, int lfd)
{
	bool refuse;

	if (!set || name_fd < 0)
		return;
	pthread_mutex_lock(&sets_lock);
	refuse = server_refuses;
	pthread_mutex_unlock(&sets_lock);
	refuse = refuse || smc_cfg.pool_slots == 0 || listener_reuseport(lfd);
	pthread_mutex_lock(&set->lock);
	refuse = refuse || set->refuses;
	/* a few per call: each costs the accept that found them */
	for (int k = 0; k < 4; k++) {
		struct pool_req raw, req;
		int fds[POOL_MAX_FDS], nfds;
		ssize_t r = fd_msg_recv(name_fd, &raw, sizeof(raw), fds, &nfds, NULL);
		struct smc_pool *p;

		if (r < 0 && r != -EPROTO)
			break;
		if (r == 0 && nfds == 0)
			continue; /* a client's look whether the name still answers (rendezvous.c) */
		if (pool_req_decode(&raw, r, nfds, &req) < 0) {
			log_info("pool: malformed setup request ignored (%zd bytes, %d fds)", r, nfds);
			close_fds(fds, nfds);
			continue;
		}
		/* room for it: the pools whose client is gone without our watch seeing it */
		set_sweep(set);
		p = server_accept_request(set, &req, fds, nfds, refuse);
		if (p) {
			p->next = set->pools;
			set->pools = p;
			set->count++;
			__atomic_store_n(&p->set, set, __ATOMIC_RELEASE);
			/* the client's exit ends the pool at once (set_sweep is the fallback) */
			pool_get(p);
			if (progress_watch_readable(p->link, server_link_closed, p) < 0)
				pool_put(p);
		}
	}
	pthread_mutex_unlock(&set->lock);
}

void pool_slot_abort(struct smc_pool *p, int slot)
{
	struct shm_map map;
	int bells[4];

	pool_slot_conn(p, slot, &map, bells);
	__atomic_fetch_or(&map.hdr->dir[0].rflags, SHM_R_ABORT, __ATOMIC_RELEASE);
	__atomic_fetch_or(&map.hdr->dir[1].wflags, SHM_W_ABORT, __ATOMIC_RELEASE);
	bell_ring_peer(bells[2]);
	bell_ring_peer(bells[3]);
	stats_count_abort();
	pool_conn_done(p, slot);
}

int pool_set_claim(struct pool_set *set, const struct sockaddr *peer, int tcp_fd,
		   struct smc_pool **out, int *slot)
{
	struct smc_pool *p, *found = NULL;
	struct rdv_endpoint ep;
	int i = -1;

	if (!set || !__atomic_load_n(&set->pools, __ATOMIC_RELAXED) ||
	    !rdv_endpoint_from(peer, &ep))
		return 0;
	pthread_mutex_lock(&set->lock);
	for (p = set->pools; p && !found; p = p->next) {
		if (__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
			continue;
		i = pool_slot_claim(p->base, p->nslots, p->ring_size, &ep);
		if (i >= 0) {
			found = p;
			pool_get(p);
		}
	}
	pthread_mutex_unlock(&set->lock);
	if (!found)
		return 0;
	if (!found->peer_trusted &&
	    !rdv_cred_owns_tcp_peer(found->peer_uid, found->peer_pid, tcp_fd)) {
		log_warn("pool: pid %d named a connection it does not own: connection aborted",
			 (int)found->peer_pid);
		pool_slot_abort(found, i);
		return -1;
	}
	*out = found;
	*slot = i;
	return 1;
}

/* ---------------------------------------------------------------- fork */

/* Under sets_lock: no new offers into the server's pools, no new pools. */
static void server_retire_all_locked(void)
{
	server_refuses = true;
	for (struct pool_set *set = sets; set; set = set->next) {
		pthread_mutex_lock(&set->lock);
		set_retire_pools(set);
		pthread_mutex_unlock(&set->lock);
	}
}

void pool_server_retire_all(void)
{
	pthread_mutex_lock(&sets_lock);
	server_retire_all_locked();
	pthread_mutex_unlock(&sets_lock);
}

static bool sets_held; /* pool_fork_lock took sets_lock: the list may be walked */

/* Each is held for bounded work (a few nonblocking receives at most). */
bool pool_fork_lock(void)
{
	enum forklock_result r;

	sets_held = false;
	if (forklock_take(&dests_lock) == FORKLOCK_BUSY)
		return false;
	r = forklock_take(&sets_lock);
	if (r != FORKLOCK_TAKEN)
		return r == FORKLOCK_SKIPPED;
	sets_held = true;
	for (struct pool_set *set = sets; set; set = set->next)
		if (forklock_take(&set->lock) == FORKLOCK_BUSY)
			return false;
	return true;
}

/* Under pool_fork_lock's locks. */
void pool_atfork_prepare(void)
{
	if (!sets_held)
		return;
	/* Both processes may accept on the listeners open now, and only the pools that
	 * exist now are known to both: no new offers into them, no new pools on them.
	 * They stay claimable for the connections already offered. A listener opened
	 * after the fork is one process's own (a daemon that forks, then listens, as
	 * the Erlang VM does at boot) and serves pools. */
	for (struct pool_set *set = sets; set; set = set->next) {
		set->refuses = true;
		set_retire_pools(set);
	}
}

void pool_atfork_child(void)
{
	/* The parent's setups and pools are its own: start over. The pools our inherited
	 * connections hold stay mapped through their references. */
	memset(dests, 0, sizeof(dests));
}
