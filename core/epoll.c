/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * epoll emulation for SMC fds, see epoll.h for the model.
 *
 * Objects:
 *   struct smc_epoll   one per application epoll fd that holds SMC fds (FD_EPOLL)
 *   struct smc_ep_reg  a "watch": one connection (or one nested emulated set) in one
 *                      set; owns the shadow entries, a reference and sleeper counts;
 *                      linked from c->regs (under c->lock) so it is found again for
 *                      dup'ed fds
 *   struct ep_fdreg    one application fd registered in the set: events, data, and
 *                      the edge/one-shot bookkeeping
 *
 * Ready list (why this design). epoll_wait must cost O(ready connections), not
 * O(registered): a server with many idle or slow connections otherwise spends its CPU
 * re-reading every connection's shared cursors on every call. Only two things can tell
 * a process which connections changed: a scan of shared memory (the cost we remove) or
 * the kernel. So the kernel's own ready list is the "dirty list":
 *   - each watch holds its sleeper counts for as long as it has enabled registrations
 *     (not only while a thread sleeps), so the peer rings our doorbell after a change;
 *     the peer rings at most once per sequence number (conn.c ring_if_asleep), and we
 *     bump the sequence (conn_rearm) only when a watch leaves our ready list, so a
 *     connection costs at most one ring per "became ready" transition, like a TCP
 *     wakeup, and nothing while it stays ready;
 *   - the doorbells sit in the shadow epoll edge-triggered: every ring queues the
 *     watch once, nothing has to read the eventfd, and the shadow's ready list names
 *     exactly the connections that changed (harvested with one epoll_wait);
 *   - our own ready list holds the watches to evaluate: those harvested, those added or
 *     modified by epoll_ctl (the kernel re-polls on ADD/MOD), and those still ready
 *     after a level-triggered report (the kernel re-queues them too). A watch leaves
 *     the list only after conn_rearm() + a full barrier + one more look found nothing
 *     to report (Dekker with the peer's cursor store + barrier + sequence load), so a
 *     change is either seen by that look or rung by the peer.
 *   - local changes that no peer announces ring our own bells (conn_wake_local in
 *     conn.c: handshake end, fallback, shutdown, TCP EOF, protocol abort); the own
 *     send filling the ring bumps the send sequence (conn_tx_full, TCP's SOCK_NOSPACE)
 *     so an edge-triggered EPOLLOUT hears when room comes back. EPOLLOUT is otherwise
 *     not re-armed while there is room: wakeups for consumed bytes nobody waits for
 *     would cost the peer a syscall per message.
 *   - hot watches: a ring is needed only while a thread sleeps. A watch reported in
 *     the last EP_HOT_WAITS calls stays listed when it has nothing to report, without
 *     a new sequence, and every call looks at it (polls); before a thread sleeps it is
 *     settled like any other (counts held, sequence bumped, one more look) and stays
 *     listed; when the set wakes and no other thread sleeps on it, its hot watches
 *     even give their sleeper counts back (ep_poll_hot: "polled"), so their peers ring
 *     nobody while the set is awake. Taking counts for a listed watch (epoll_ctl ADD)
 *     asks for no ring either, unless a thread sleeps. None of this where a sleeper
 *     could miss it: a set with a thread asleep, shared across fork, or whose own fd is
 *     waited on (poll/select, an outer set) settles every watch as before.
 * A per-process dirty list in shared memory would avoid the peer's eventfd write, but
 * needs a mapping shared by all of a process's peers (a handshake change); the
 * eventfd write is cheaper than the TCP send it replaces.
 *
 * Sets shared across fork: the kernel objects (application set, shadow, bells) are
 * shared, our lists are not. Entries carry an owner byte (per process); a process that
 * harvests an entry of another process, and every forked child's copy of a set, switch
 * the set to "shared" mode: watches never leave the list (every call scans them, the
 * cost of the old design), a harvest of bells kicks the set so the other processes
 * rescan, and sleeps are sliced (EP_SHARED_SLICE_MS) because a kick can be consumed by
 * the process that wrote it. A forked child drops the sleeper counts it inherited (they
 * are the parent's) and takes its own when it evaluates a watch.
 *
 * The cookie. The shadow sits level-triggered in the application's set under a random
 * cookie, and no thread may ever be handed that event: every kernel wait on an
 * application set strips it, emulated or not (a thread may have entered the kernel
 * before another one made the set emulated; the wrappers check what such a wait
 * returns). A wait left with nothing but the cookie goes on in the emulation, which
 * harvests what it announced; the level-triggered shadow keeps announcing it to a
 * wait that returned other events. A set that becomes emulated kicks its shadow at
 * once, so a thread already asleep on it in the kernel, which the emulation does not
 * count as a sleeper and no bell would wake, comes round and sleeps again as one.
 *
 * Registrations made in the kernel's set before the socket became a connection (added
 * before connect()) are moved in by epoll_track.c through epoll_emul_adopt.
 *
 * Shadow entries carry (slot generation, owner, slot index, tag) rather than a pointer:
 * an event that was already queued in the shadow when its watch went away (or that comes
 * from a socket whose fd number was closed under a dup) finds a stale generation and is
 * ignored instead of touching freed memory.
 *
 * epoll_emul_wait (per call):
 *   1. report the listed watches that are ready (LT: while ready; ET: when the state
 *      changed since the last report; ONESHOT: then disabled until MOD); ask the kernel
 *      (zero timeout) for its events; when our cookie was among them, harvest the
 *      shadow into the list and report those too;
 *   2. otherwise spin up to SMC_SPIN_US repeating 1, yielding every few rounds;
 *   3. evaluate the list once more (watches leave it armed), then sleep in the real
 *      epoll_pwait2 on the application's fd; when the cookie fired, harvest and report.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/conn.h"
#include "core/epoll.h"
#include "core/epoll_track.h"
#include "core/fd_budget.h"
#include "core/fdtab.h"
#include "core/forklock.h"
#include "core/log.h"
#include "core/random.h"
#include "core/real.h"
#include "core/sock.h"
#include "core/wait.h"

#define TAG_RX     CONN_BELL_RX  /* 1 */
#define TAG_TX     CONN_BELL_TX  /* 2 */
#define TAG_NESTED 3u
#define TAG_TCP    CONN_WAIT_TCP /* 4 */
#define TAG_BITS   3
#define TAG_MASK   ((1u << TAG_BITS) - 1)
/* Shadow data layout: slot generation (24 bits) | owner (8) | slot (29) | tag (3). */
#define DATA_GEN_SHIFT   40
#define DATA_OWNER_SHIFT 32
#define DATA_GEN_MASK    0xffffffu
/* Shadow data of the set's own eventfd (no slot has this index). */
#define EP_KICK_DATA UINT64_MAX
/* Kick values: 1 = "a registration changed, evaluate the list"; this one = "another
 * waiter harvested what we may need: evaluate every watch". */
#define EP_KICK_RESCAN (1ull << 32)
/* A set shared with another process sleeps at most this long between scans. */
#define EP_SHARED_SLICE_MS 10

#define EP_MAX_WAIT 3                 /* conn_wait_fds() fills at most 3 */
#define EP_DRAIN_BATCH 64
#define EP_SPIN_YIELD_EVERY 8
#define EP_MAX_EVENTS ((int)(INT_MAX / sizeof(struct epoll_event)))

/* Bits an application may be told about (everything but the behaviour flags). */
#define EV_REPORTABLE (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | \
		       EPOLLWRNORM | EPOLLWRBAND | EPOLLMSG | EPOLLRDHUP)
#define EV_IN_SIDE (EPOLLIN | EPOLLRDNORM | EPOLLRDBAND | EPOLLPRI | EPOLLRDHUP)
#define EV_OUT_SIDE (EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND)
/* Linux accepts EPOLLEXCLUSIVE only with these (fs/eventpoll.c EPOLLEXCLUSIVE_OK_BITS). */
#define EV_EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | \
			 EPOLLWRBAND | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | \
			 EPOLLEXCLUSIVE)

struct ep_fdreg;

struct smc_ep_reg {
	struct smc_epoll *ep;
	struct smc_conn *conn;          /* referenced; NULL for a nested set */
	struct smc_epoll *inner;        /* nested emulated set (referenced) or NULL */
	int inner_fd;
	struct smc_ep_reg *conn_next;   /* c->regs chain, under c->lock */
	struct smc_ep_reg *next;        /* ep->watches; ep->dead_watches after release */
	struct smc_ep_reg *rnext, *rprev; /* ep's ready list while `listed` */
	bool listed;
	struct ep_fdreg *fdregs;        /* application fds using this watch */
	uint32_t slot;
	uint8_t owner;                  /* owner byte of its shadow entries */
	/* shadow entries currently installed */
	int nwait;
	int wait_fd[EP_MAX_WAIT];
	unsigned wait_tag[EP_MAX_WAIT];
	uint32_t interest;              /* POLLIN/POLLOUT the entries were chosen for */
	uint32_t fds_gen;
	bool synced;
	uint32_t arm_want;              /* POLLIN/POLLOUT of the enabled registrations */
	uint32_t armed;                 /* sleeper counts held (conn_prepare_sleep) */
	/* last evaluation */
	uint64_t scan;
	uint32_t mask;
	uint64_t rx_gen, tx_gen;
	uint64_t reported;              /* ep->call of the last report */
	uint64_t hot_until;             /* ep->waits up to which it stays listed: hot */
	bool polled;                    /* hot, listed, holding no sleeper counts */
};

struct ep_fdreg {
	int fd;
	uint32_t events;                /* as the application gave them */
	uint64_t data;
	struct smc_ep_reg *w;           /* NULL: detached, see ep_convert_watch() */
	struct ep_fdreg *wnext;         /* w->fdregs chain */
	struct ep_fdreg *next, *prev;   /* every registration of the set */
	bool disabled;                  /* EPOLLONESHOT fired, waiting for MOD */
	uint32_t last;                  /* ET: bits reported last and still set since */
	uint64_t rx_gen, tx_gen;        /* ET: generations at the last report */
};

struct smc_epoll {
	int epfd, shadow;
	int kick;                       /* eventfd in the shadow: wakes sleepers after ctl */
	pthread_mutex_t lock;
	int refs;                       /* global list + callers; under eps_lock */
	bool dead;                      /* application closed epfd */
	bool inherited;                 /* a forked child's copy: the kernel objects are shared */
	bool shared;                    /* another process waits on it too: see the top */
	bool fd_waited;                 /* poll/select or an outer set waited on our fd */
	bool kernel_turn;               /* max == 1: alternate SMC and kernel events */
	uint64_t scan, call;
	uint64_t waits;                 /* epoll_wait calls: the age of hot watches */
	int nlisted;                    /* watches on the ready list */
	struct ep_fdreg *head, *tail;
	struct smc_ep_reg *watches;
	struct smc_ep_reg *rhead, *rtail; /* ready list */
	struct smc_ep_reg *last_reported; /* spin heuristic */
	struct smc_ep_reg *dead_watches; /* released under lock, freed after unlock */
	struct ep_fdreg **by_fd;
	size_t by_fd_len;
	struct smc_ep_reg **slots;
	uint32_t *slot_gen, *free_slots;
	uint32_t nslots, nfree, slots_cap;
	int nentries;                   /* shadow entries, bounds the harvest loop */
	int nsleeping;                  /* threads in the kernel wait on this set */
	struct smc_epoll *gnext, *gprev;
};

static pthread_mutex_t eps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct smc_epoll *eps_head;
static int eps_count;                /* atomic reads: forget_fd's fast path */
static uint64_t ep_cookie;
static uint8_t ep_owner;             /* this process's owner byte */
/* Set (for good) before the first shadow joins an application set: from then on a
 * kernel wait on any set may return our cookie, and every path strips it. */
bool smc_epoll_cookies;
static pthread_once_t ep_cookie_once = PTHREAD_ONCE_INIT;

static void reg_arm_now(struct smc_epoll *ep, struct ep_fdreg *r);
static bool ep_may_poll(struct smc_epoll *ep);
static void watch_disarm(struct smc_ep_reg *w);
static void ep_convert_watch(struct smc_epoll *ep, struct smc_ep_reg *w);

/* ------------------------------------------------------------------ small helpers */

/* Not a secret: the cookie only has to differ from what applications put in their
 * events' data (random.h: a weak value will do). */
static void cookie_init(void)
{
	ep_cookie = random_weak64();
	ep_owner = (uint8_t)(ep_cookie >> 56);
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return true;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return false;
	memset((char *)p + *cap * elem, 0, (ncap - *cap) * elem);
	*arr = p;
	*cap = ncap;
	return true;
}

static uint32_t ev_interest(uint32_t events)
{
	uint32_t want = 0;

	if (events & EV_IN_SIDE)
		want |= POLLIN;
	if (events & EV_OUT_SIDE)
		want |= POLLOUT;
	/* EPOLLHUP and EPOLLERR are always reported: see poll_interest in wait.c */
	return want ? want : POLLIN;
}

static int real_pwait(int epfd, struct epoll_event *ev, int max, const struct timespec *ts,
		      const sigset_t *mask)
{
	int ms;

	if (!smc_real_fns.epoll_pwait2)
		real_init();
	if (smc_real_fns.epoll_pwait2) {
		int r = smc_real_fns.epoll_pwait2(epfd, ev, max, ts, mask);

		if (r >= 0 || errno != ENOSYS)
			return r;
	}
	if (!ts) {
		ms = -1;
	} else if (ts->tv_sec >= INT_MAX / 1000 - 1) {
		ms = INT_MAX;
	} else {
		ms = (int)(ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000);
	}
	return REAL(epoll_pwait)(epfd, ev, max, ms, mask);
}

/* Removes our cookie from a kernel result; says whether it was there. */
static int strip_cookie(struct epoll_event *ev, int n, bool *seen)
{
	int out = 0;

	if (!__atomic_load_n(&smc_epoll_cookies, __ATOMIC_ACQUIRE))
		return n;
	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 == ep_cookie) {
			*seen = true;
			continue;
		}
		ev[out++] = ev[i];
	}
	return out;
}

static void ep_kick(struct smc_epoll *ep, uint64_t what)
{
	if (REAL(write)(ep->kick, &what, sizeof(what)) < 0)
		log_debug("epoll: kick of %d failed: %d", ep->epfd, errno);
}
/* ------------------------------------------------------------------ set lifetime */

static struct smc_epoll *ep_get(int epfd)
{
	struct smc_epoll *ep = NULL;
	struct fd_entry *e;

	if (fdtab_kind(epfd) != FD_EPOLL)
		return NULL;
	pthread_mutex_lock(&eps_lock);
	e = fdtab_peek(epfd);
	if (e && e->kind == FD_EPOLL && e->obj) {
		ep = e->obj;
		if (ep->dead)
			ep = NULL;
		else
			ep->refs++;
	}
	pthread_mutex_unlock(&eps_lock);
	return ep;
}

static void ep_free(struct smc_epoll *ep)
{
	REAL(close)(ep->shadow);
	REAL(close)(ep->kick);
	fd_budget_give(2);
	pthread_mutex_destroy(&ep->lock);
	free(ep->by_fd);
	free(ep->slots);
	free(ep->slot_gen);
	free(ep->free_slots);
	free(ep);
}

static void ep_put(struct smc_epoll *ep)
{
	bool last;

	if (!ep)
		return;
	pthread_mutex_lock(&eps_lock);
	last = --ep->refs == 0;
	pthread_mutex_unlock(&eps_lock);
	if (last)
		ep_free(ep);
}

static void ep_lock(struct smc_epoll *ep)
{
	pthread_mutex_lock(&ep->lock);
}

/* Unlocks, then drops what released watches referenced (a connection's last reference
 * or a nested set may be freed: never under our lock). */
static void ep_unlock(struct smc_epoll *ep)
{
	struct smc_ep_reg *w = ep->dead_watches;

	ep->dead_watches = NULL;
	pthread_mutex_unlock(&ep->lock);
	while (w) {
		struct smc_ep_reg *next = w->next;

		if (w->conn)
			conn_put(w->conn);
		ep_put(w->inner);
		free(w);
		w = next;
	}
}

static struct smc_epoll *ep_create(int epfd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct smc_epoll *ep, *other = NULL;
	struct fd_entry *e;
	int saved;

	pthread_once(&ep_cookie_once, cookie_init);
	/* EBADF before creating the shadow, which could otherwise take epfd's free number */
	if (REAL(fcntl)(epfd, F_GETFD) < 0)
		return NULL;
	ep = calloc(1, sizeof(*ep));
	if (!ep) {
		errno = ENOMEM;
		return NULL;
	}
	ep->epfd = epfd;
	ep->shadow = REAL(epoll_create1)(EPOLL_CLOEXEC);
	ep->kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ev.data.u64 = EP_KICK_DATA;
	if (ep->shadow < 0 || ep->kick < 0 ||
	    REAL(epoll_ctl)(ep->shadow, EPOLL_CTL_ADD, ep->kick, &ev) < 0) {
		saved = errno;
		if (ep->shadow >= 0)
			REAL(close)(ep->shadow);
		if (ep->kick >= 0)
			REAL(close)(ep->kick);
		free(ep);
		errno = saved;
		return NULL;
	}
	/* Also validates epfd the way the kernel would (EBADF, EINVAL if not an epoll). */
	ev.data.u64 = ep_cookie;
	__atomic_store_n(&smc_epoll_cookies, true, __ATOMIC_RELEASE);
	if (REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, ep->shadow, &ev) < 0) {
		saved = errno;
		REAL(close)(ep->shadow);
		REAL(close)(ep->kick);
		free(ep);
		errno = saved;
		return NULL;
	}
	fd_budget_take(2);
	pthread_mutex_init(&ep->lock, NULL);
	ep->refs = 2; /* the global list and the caller */

	pthread_mutex_lock(&eps_lock);
	e = fdtab_peek(epfd);
	if (e && e->kind == FD_EPOLL && e->obj) {
		other = e->obj; /* another thread won the race */
		other->refs++;
	} else {
		fdtab_set(epfd, FD_EPOLL, ep);
		e = fdtab_peek(epfd);
		if (!e || e->kind != FD_EPOLL || e->obj != ep) {
			pthread_mutex_unlock(&eps_lock);
			REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, ep->shadow, NULL);
			ep_free(ep);
			errno = ENOMEM;
			return NULL;
		}
		ep->gnext = eps_head;
		if (eps_head)
			eps_head->gprev = ep;
		eps_head = ep;
		__atomic_add_fetch(&eps_count, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&eps_lock);
	if (other) {
		REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, ep->shadow, NULL);
		ep_free(ep);
		return other;
	}
	/* A thread may sleep in the kernel on this set already, unseen by the emulation
	 * (it entered before the set was ours): the kick wakes it, it finds only our
	 * cookie and continues in the emulated wait, where it counts as a sleeper. */
	ep_kick(ep, 1);
	log_debug("epoll: fd %d emulated (shadow %d)", epfd, ep->shadow);
	return ep;
}

/* ------------------------------------------------------------------ slots and shadow */

static bool slot_alloc(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	uint32_t idx;

	if (ep->nfree) {
		idx = ep->free_slots[--ep->nfree];
	} else {
		if (ep->nslots >= (1u << (DATA_OWNER_SHIFT - TAG_BITS)) - 1)
			return false;
		if (ep->nslots == ep->slots_cap) {
			size_t c1 = ep->slots_cap, c2 = ep->slots_cap, c3 = ep->slots_cap;

			if (!grow((void **)&ep->slots, &c1, ep->nslots + 1, sizeof(*ep->slots)) ||
			    !grow((void **)&ep->slot_gen, &c2, ep->nslots + 1, sizeof(*ep->slot_gen)) ||
			    !grow((void **)&ep->free_slots, &c3, ep->nslots + 1, sizeof(*ep->free_slots)))
				return false; /* the arrays that did grow keep their larger size */
			ep->slots_cap = (uint32_t)(c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3));
		}
		idx = ep->nslots++;
	}
	ep->slots[idx] = w;
	w->slot = idx;
	w->owner = ep_owner;
	return true;
}

static void slot_free(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	ep->slots[w->slot] = NULL;
	ep->slot_gen[w->slot]++;
	ep->free_slots[ep->nfree++] = w->slot;
}

static uint64_t slot_data(struct smc_epoll *ep, struct smc_ep_reg *w, unsigned tag)
{
	return ((uint64_t)(ep->slot_gen[w->slot] & DATA_GEN_MASK) << DATA_GEN_SHIFT) |
	       ((uint64_t)w->owner << DATA_OWNER_SHIFT) | ((uint64_t)w->slot << TAG_BITS) | tag;
}

/* The watch an event belongs to, or NULL: stale, or (*foreign) another process's. */
static struct smc_ep_reg *slot_lookup(struct smc_epoll *ep, uint64_t data, unsigned *tag,
				      bool *foreign)
{
	uint32_t idx = ((uint32_t)data) >> TAG_BITS;
	uint8_t owner = (uint8_t)(data >> DATA_OWNER_SHIFT);
	struct smc_ep_reg *w;

	*tag = (unsigned)data & TAG_MASK;
	w = idx < ep->nslots ? ep->slots[idx] : NULL;
	if (w && (ep->slot_gen[idx] & DATA_GEN_MASK) == (uint32_t)(data >> DATA_GEN_SHIFT) &&
	    w->owner == owner)
		return w;
	if (owner != ep_owner)
		*foreign = true;
	return NULL;
}

/* A forked child shares the shadow with its parent (like the application's epoll fd
 * itself): closing an fd in the child must not remove the parent's entries, so an
 * inherited set never deletes; stale entries are ignored by their slot generation. */
static void shadow_del(struct smc_epoll *ep, int fd)
{
	if (!ep->inherited)
		REAL(epoll_ctl)(ep->shadow, EPOLL_CTL_DEL, fd, NULL);
}

static void watch_clear_shadow(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	for (int i = 0; i < w->nwait; i++)
		shadow_del(ep, w->wait_fd[i]);
	ep->nentries -= w->nwait;
	w->nwait = 0;
}

/* ------------------------------------------------------------------ the ready list */

static void watch_list(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	if (w->listed)
		return;
	w->listed = true;
	ep->nlisted++;
	w->rnext = NULL;
	w->rprev = ep->rtail;
	if (ep->rtail)
		ep->rtail->rnext = w;
	else
		ep->rhead = w;
	ep->rtail = w;
}

static void watch_unlist(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	if (!w->listed)
		return;
	if (w->rprev)
		w->rprev->rnext = w->rnext;
	else
		ep->rhead = w->rnext;
	if (w->rnext)
		w->rnext->rprev = w->rprev;
	else
		ep->rtail = w->rprev;
	w->rnext = w->rprev = NULL;
	w->listed = false;
	ep->nlisted--;
}

static void ep_list_all(struct smc_epoll *ep)
{
	for (struct smc_ep_reg *w = ep->watches; w; w = w->next)
		if (w->fdregs)
			watch_list(ep, w);
}

/* Removes one shadow entry (fd, tag) of w; w is re-synced when next evaluated. */
static void watch_drop_entry(struct smc_epoll *ep, struct smc_ep_reg *w, int fd, unsigned tag)
{
	for (int i = 0; i < w->nwait; i++) {
		if (w->wait_fd[i] != fd || w->wait_tag[i] != tag)
			continue;
		shadow_del(ep, fd);
		w->nwait--;
		w->wait_fd[i] = w->wait_fd[w->nwait];
		w->wait_tag[i] = w->wait_tag[w->nwait];
		ep->nentries--;
		w->synced = false;
		watch_list(ep, w);
		return;
	}
}

/* ------------------------------------------------------------------ sleeper counts */

/* Makes the sleeper counts w holds match its enabled registrations. A new count asks
 * for no ring (conn_hold_sleep): the watch is listed, so it is looked at again, and it
 * leaves the list only through watch_settle, which asks. Asking here made the peer ring
 * once per EPOLL_CTL_ADD: redis-benchmark deletes and adds its fds around every request
 * (ae), and redis-server wrote an eventfd for each of its -P 16 replies. */
static void watch_arm_sync(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	uint32_t drop = w->armed & ~w->arm_want, add = w->arm_want & ~w->armed;

	if (!w->conn)
		return;
	if (w->polled) {
		if (ep_may_poll(ep))
			return; /* it takes its counts when it settles */
		w->polled = false;
		add = w->arm_want & ~w->armed;
	}
	if (drop) {
		conn_end_sleep(w->conn, drop);
		w->armed &= ~drop;
	}
	if (add) {
		w->armed |= conn_hold_sleep(w->conn, add);
		/* a waiter already asleep looks at the list only after a ring */
		if (!ep_may_poll(ep))
			conn_rearm(w->conn, add);
		watch_list(ep, w);
	}
}

static void watch_disarm(struct smc_ep_reg *w)
{
	if (w->conn && w->armed) {
		conn_end_sleep(w->conn, w->armed);
		w->armed = 0;
	}
}

static bool watch_has_entry(const struct smc_ep_reg *w, int fd, unsigned tag)
{
	for (int i = 0; i < w->nwait; i++)
		if (w->wait_fd[i] == fd && w->wait_tag[i] == tag)
			return true;
	return false;
}

/* Adds one shadow entry; -1 (errno) when a doorbell or nested set cannot be watched. */
static int watch_add_entry(struct smc_epoll *ep, struct smc_ep_reg *w, int fd, unsigned tag)
{
	/* doorbells edge-triggered: every ring queues the watch once, and nobody has to
	 * empty the eventfd (see the top) */
	struct epoll_event ev = {
		.events = tag == TAG_NESTED ? EPOLLIN
		       : tag == TAG_TCP ? (EPOLLIN | EPOLLRDHUP | EPOLLET) : (EPOLLIN | EPOLLET),
		.data.u64 = slot_data(ep, w, tag),
	};
	int r = REAL(epoll_ctl)(ep->shadow, EPOLL_CTL_ADD, fd, &ev);

	/* a forked child cannot delete the entries it shares: update them */
	if (r < 0 && errno == EEXIST && ep->inherited)
		r = REAL(epoll_ctl)(ep->shadow, EPOLL_CTL_MOD, fd, &ev);
	if (r == 0 && w->nwait < EP_MAX_WAIT) {
		w->wait_fd[w->nwait] = fd;
		w->wait_tag[w->nwait] = tag;
		w->nwait++;
		ep->nentries++;
		return 0;
	}
	/* the TCP socket is only a liveness hint (it may be closed under a dup) */
	return tag == TAG_TCP ? 0 : -1;
}

/* Makes the shadow entries and sleeper counts of w match its registrations. Entries
 * only grow while the watch lives (a doorbell nobody armed rings rarely, while
 * epoll_ctl costs a syscall): applications that switch between EPOLLIN and EPOLLOUT,
 * re-arm one-shot registrations or DEL and ADD again per request cost none. Returns -1
 * (errno set) when a doorbell or nested set could not be added. */
static int watch_sync(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	struct pollfd want[EP_MAX_WAIT];
	unsigned tags[EP_MAX_WAIT];
	uint32_t interest = w->interest, arm = 0, gen = 0;
	int n = 0, rc = 0, err = 0;

	for (struct ep_fdreg *r = w->fdregs; r; r = r->wnext) {
		interest |= ev_interest(r->events);
		if (!r->disabled)
			arm |= ev_interest(r->events);
	}
	if (w->inner) {
		want[0] = (struct pollfd){ .fd = w->inner_fd, .events = POLLIN };
		tags[0] = TAG_NESTED;
		n = 1;
	} else {
		gen = wait_fds_generation(w->conn);
		n = conn_wait_fds(w->conn, interest, want, tags);
		if (n > EP_MAX_WAIT)
			n = EP_MAX_WAIT;
	}
	w->arm_want = arm;
	w->interest = interest;
	w->fds_gen = gen;
	/* entries the state no longer lists (the TCP socket after EOF, a closed fd) */
	for (int i = 0; i < w->nwait;) {
		bool keep = false;

		for (int j = 0; j < n && !keep; j++)
			keep = want[j].fd == w->wait_fd[i] && tags[j] == w->wait_tag[i];
		if (keep) {
			i++;
			continue;
		}
		shadow_del(ep, w->wait_fd[i]);
		w->nwait--;
		w->wait_fd[i] = w->wait_fd[w->nwait];
		w->wait_tag[i] = w->wait_tag[w->nwait];
		ep->nentries--;
	}
	for (int j = 0; j < n; j++) {
		if (watch_has_entry(w, want[j].fd, tags[j]))
			continue;
		if (watch_add_entry(ep, w, want[j].fd, tags[j]) < 0) {
			err = errno;
			rc = -1;
		}
	}
	w->synced = rc == 0;
	watch_arm_sync(ep, w);
	if (rc < 0)
		errno = err;
	return rc;
}

/* ------------------------------------------------------------------ watches */

static struct smc_ep_reg *watch_find_conn(struct smc_epoll *ep, struct smc_conn *c)
{
	struct smc_ep_reg *w;

	pthread_mutex_lock(&c->lock);
	for (w = c->regs; w; w = w->conn_next)
		if (w->ep == ep)
			break;
	pthread_mutex_unlock(&c->lock);
	return w;
}

static struct smc_ep_reg *watch_find_inner(struct smc_epoll *ep, struct smc_epoll *inner)
{
	for (struct smc_ep_reg *w = ep->watches; w; w = w->next)
		if (w->inner == inner)
			return w;
	return NULL;
}

/* New watch for a connection or a nested set; takes over the caller's inner reference. */
static struct smc_ep_reg *watch_new(struct smc_epoll *ep, struct smc_conn *c,
				    struct smc_epoll *inner, int inner_fd)
{
	struct smc_ep_reg *w = calloc(1, sizeof(*w));

	if (!w || !slot_alloc(ep, w)) {
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	w->ep = ep;
	w->inner = inner;
	w->inner_fd = inner_fd;
	if (c) {
		conn_get(c);
		w->conn = c;
		pthread_mutex_lock(&c->lock);
		w->conn_next = c->regs;
		c->regs = w;
		pthread_mutex_unlock(&c->lock);
	}
	w->next = ep->watches;
	ep->watches = w;
	return w;
}

/* Unlinks w (its fd registrations must be gone or detached); freed after unlock. */
static void watch_release(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	struct smc_ep_reg **pp;

	watch_disarm(w);
	watch_clear_shadow(ep, w);
	watch_unlist(ep, w);
	slot_free(ep, w);
	if (ep->last_reported == w)
		ep->last_reported = NULL;
	for (pp = &ep->watches; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	if (w->conn) {
		pthread_mutex_lock(&w->conn->lock);
		for (pp = &w->conn->regs; *pp; pp = &(*pp)->conn_next) {
			if (*pp == w) {
				*pp = w->conn_next;
				break;
			}
		}
		pthread_mutex_unlock(&w->conn->lock);
	}
	w->next = ep->dead_watches;
	ep->dead_watches = w;
}

/* Connection state (cached per scan) as a poll mask, CONN_MASK_FALLBACK, or for a nested
 * set POLLIN when it has something to report. */
static uint32_t nested_mask(struct smc_ep_reg *w);

static void watch_read_state(struct smc_ep_reg *w)
{
	/* generations first: a change racing with the mask read then shows as an edge at
	 * the next evaluation instead of being lost */
	w->rx_gen = wait_rx_generation(w->conn);
	w->tx_gen = wait_tx_generation(w->conn);
	w->mask = wait_conn_mask(w->conn);
}

static uint32_t watch_eval(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	if (w->scan == ep->scan)
		return w->mask;
	w->scan = ep->scan;
	if (w->inner) {
		w->mask = nested_mask(w);
		w->rx_gen = w->tx_gen = 0;
		return w->mask;
	}
	/* the wait fds follow the state (handshake end, TCP EOF, the tracked fd closed) */
	if (!w->synced || wait_fds_generation(w->conn) != w->fds_gen)
		watch_sync(ep, w);
	else if (w->armed != w->arm_want)
		watch_arm_sync(ep, w);
	watch_read_state(w);
	return w->mask;
}

/* ------------------------------------------------------------------ fd registrations */

static void reg_link_tail(struct smc_epoll *ep, struct ep_fdreg *r)
{
	r->next = NULL;
	r->prev = ep->tail;
	if (ep->tail)
		ep->tail->next = r;
	else
		ep->head = r;
	ep->tail = r;
}

static void reg_unlink(struct smc_epoll *ep, struct ep_fdreg *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		ep->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		ep->tail = r->prev;
	r->next = r->prev = NULL;
}

static struct ep_fdreg *reg_find(struct smc_epoll *ep, int fd)
{
	if (fd < 0 || (size_t)fd >= ep->by_fd_len)
		return NULL;
	return ep->by_fd[fd];
}

static void reg_detach_from_watch(struct ep_fdreg *r)
{
	struct smc_ep_reg *w = r->w;

	if (!w)
		return;
	for (struct ep_fdreg **pp = &w->fdregs; *pp; pp = &(*pp)->wnext) {
		if (*pp == r) {
			*pp = r->wnext;
			break;
		}
	}
	r->w = NULL;
	r->wnext = NULL;
}

/* Drops registration r entirely. When r was the last user of its watch, the watch goes
 * too, or with `park` (EPOLL_CTL_DEL of a connection that stays open) it stays without
 * sleeper counts, keeping its shadow entries for the next ADD: event loops that DEL and
 * ADD around every request (redis-benchmark's ae) then cost no epoll_ctl. A parked
 * watch goes when its fd is closed (ep_forget_in) or the set is. */
static void reg_remove(struct smc_epoll *ep, struct ep_fdreg *r, bool park)
{
	struct smc_ep_reg *w = r->w;

	reg_unlink(ep, r);
	ep->by_fd[r->fd] = NULL;
	reg_detach_from_watch(r);
	free(r);
	if (!w)
		return;
	if (w->fdregs || (park && w->conn)) {
		watch_sync(ep, w);
		if (!w->fdregs)
			watch_unlist(ep, w);
	} else {
		watch_release(ep, w);
	}
}

static void reg_arm(struct ep_fdreg *r, const struct epoll_event *ev)
{
	r->events = ev->events;
	r->data = ev->data.u64;
	r->disabled = false;
	r->last = 0; /* like the kernel's re-poll on ADD/MOD: report what is ready now */
}

/* `fired`: a one-shot registration that already reported (moved from the kernel's set,
 * epoll_track.h): it stays disabled until EPOLL_CTL_MOD, as there. */
static int reg_add(struct smc_epoll *ep, int fd, struct smc_conn *c, struct smc_epoll *inner,
		   const struct epoll_event *ev, bool fired)
{
	size_t cap = ep->by_fd_len;
	struct smc_ep_reg *w;
	struct ep_fdreg *r;
	bool new_watch = false;

	if (!grow((void **)&ep->by_fd, &cap, (size_t)fd + 1, sizeof(*ep->by_fd))) {
		ep_put(inner);
		errno = ENOMEM;
		return -1;
	}
	ep->by_fd_len = cap;
	w = c ? watch_find_conn(ep, c) : watch_find_inner(ep, inner);
	if (w) {
		ep_put(inner); /* the watch already holds one */
	} else {
		w = watch_new(ep, c, inner, fd);
		if (!w) {
			ep_put(inner);
			return -1;
		}
		new_watch = true;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		if (new_watch)
			watch_release(ep, w);
		errno = ENOMEM;
		return -1;
	}
	r->fd = fd;
	reg_arm(r, ev);
	r->disabled = fired && (ev->events & EPOLLONESHOT);
	r->w = w;
	r->wnext = w->fdregs;
	w->fdregs = r;
	reg_link_tail(ep, r);
	ep->by_fd[fd] = r;
	if (watch_sync(ep, w) < 0) {
		int saved = errno;

		reg_remove(ep, r, false);
		errno = saved;
		return -1;
	}
	reg_arm_now(ep, r);
	return 0;
}

/* A registration was added or re-armed: the next evaluation reports what is ready now
 * (the kernel's re-poll). Other threads may already sleep in the kernel on the
 * application's epoll fd (a one-shot MOD from a worker thread is the classic case):
 * Linux wakes them when the new entry is ready, so kick the shadow then. */
static void reg_arm_now(struct smc_epoll *ep, struct ep_fdreg *r)
{
	struct smc_ep_reg *w = r->w;
	uint32_t m;

	if (!w || r->disabled)
		return;
	watch_list(ep, w);
	if (ep->nsleeping <= 0)
		return;
	if (w->inner)
		m = epoll_emul_prepare_sleep(w->inner_fd);
	else
		m = wait_expand_mask(conn_poll_mask(w->conn));
	if ((m & CONN_MASK_FALLBACK) || (m & ((r->events & EV_REPORTABLE) | EPOLLERR | EPOLLHUP)))
		ep_kick(ep, 1);
}

/* The connection of w went back to plain TCP: its registrations move to the kernel's
 * set with the application's events and data. A one-shot registration that already
 * fired stays with us, detached, until the application re-arms or deletes it (the
 * kernel has no way to add an entry in the fired state). */
static void ep_convert_watch(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	int saved = errno;

	while (w->fdregs) {
		struct ep_fdreg *r = w->fdregs;

		reg_detach_from_watch(r);
		if (r->disabled)
			continue;
		struct epoll_event ev = { .events = r->events, .data.u64 = r->data };

		if (REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, r->fd, &ev) < 0 && errno != EEXIST)
			log_warn("epoll: fd %d fell back to TCP but cannot join epoll %d: %d",
				 r->fd, ep->epfd, errno);
		reg_unlink(ep, r);
		ep->by_fd[r->fd] = NULL;
		free(r);
	}
	watch_release(ep, w);
	errno = saved;
}

/* ------------------------------------------------------------------ readiness */

/* Bits registration r would report for connection mask m, or 0. Not consuming, except
 * that an edge registration forgets reported bits that went away (so their return is a
 * new edge). */
static uint32_t reg_bits(struct ep_fdreg *r, struct smc_ep_reg *w, uint32_t m)
{
	uint32_t bits = m & ((r->events & EV_REPORTABLE) | EPOLLERR | EPOLLHUP);
	uint32_t fresh;

	if (!(r->events & EPOLLET))
		return bits;
	fresh = bits & ~r->last;
	r->last &= bits;
	if (!bits)
		return 0;
	if (fresh)
		return bits;
	if ((r->events & EV_IN_SIDE) && w->rx_gen != r->rx_gen)
		return bits;
	if ((r->events & EV_OUT_SIDE) && w->tx_gen != r->tx_gen)
		return bits;
	return 0;
}

static void reg_reported(struct smc_epoll *ep, struct ep_fdreg *r, uint32_t bits)
{
	struct smc_ep_reg *w = r->w;

	if (r->events & EPOLLET) {
		r->last = bits;
		r->rx_gen = w->rx_gen;
		r->tx_gen = w->tx_gen;
	}
	if (r->events & EPOLLONESHOT) {
		r->disabled = true;
		watch_sync(ep, w);
	}
}

/* Some enabled registration of w would report something for mask m. `lt_only`: only a
 * level-triggered one (it stays listed after a report, as the kernel re-queues it). */
static bool watch_reportable(struct smc_ep_reg *w, uint32_t m, bool lt_only)
{
	for (struct ep_fdreg *r = w->fdregs; r; r = r->wnext) {
		if (r->disabled || (lt_only && (r->events & EPOLLET)))
			continue;
		if (reg_bits(r, w, m))
			return true;
	}
	return false;
}

/* Hot watches (see the top): reported within the last EP_HOT_WAITS epoll_wait calls,
 * while the list holds at most EP_HOT_MAX watches (a scan per call stays short).
 * redis-benchmark -c 50 -P 16 (pinned, perf stat, 2 s): the client's eventfd writes to
 * redis-server went from one per request batch to none and its CPU from 1.12-1.14 s to
 * 0.85-0.92 s; 16, 64 and 256 calls did the same there. */
#define EP_HOT_WAITS 64
#define EP_HOT_MAX 256

static bool watch_is_hot(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	return w->conn && ep->nlisted <= EP_HOT_MAX &&
	       __atomic_load_n(&ep->waits, __ATOMIC_RELAXED) <= w->hot_until;
}

/* Only while no thread sleeps on the set in any form: a sleeper hears nothing but rings. */
static bool ep_may_poll(struct smc_epoll *ep)
{
	return !ep->nsleeping && !ep->shared && !ep->fd_waited;
}

static bool watch_stays_hot(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	return ep_may_poll(ep) && watch_is_hot(ep, w);
}

/* w has nothing (more) to report: ask the peer to ring for the next change (the send
 * side only while it is full: room is announced only to a writer that waits for it),
 * then look once more. True when w must stay listed. */
static bool watch_settle(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	uint32_t bump;

	if (w->inner)
		return true; /* nested sets are asked on every evaluation */
	if (w->polled) {
		w->polled = false;
		w->armed |= conn_hold_sleep(w->conn, w->arm_want & ~w->armed);
	}
	bump = w->armed & POLLIN;
	if ((w->armed & POLLOUT) && !(w->mask & POLLOUT))
		bump |= POLLOUT;
	conn_rearm(w->conn, bump);
	watch_read_state(w);
	if (w->mask & CONN_MASK_FALLBACK)
		return true;
	return ep->shared || watch_reportable(w, w->mask, false);
}

/* Fills out[] with up to max events of listed watches and consumes them; watches with
 * nothing to report leave the list armed. Never reports a watch twice in one call. */
static int ep_collect(struct smc_epoll *ep, struct epoll_event *out, int max)
{
	struct smc_ep_reg *w, *next, *last = ep->rtail;
	int n = 0;

	if (max <= 0 || !last)
		return 0;
	ep->scan++;
	for (w = ep->rhead; w && n < max; w = next) {
		bool done = w == last, full = false, any = false;
		uint32_t m;

		next = w->rnext;
		if (w->reported == ep->call) {
			if (done)
				break;
			continue;
		}
		m = watch_eval(ep, w);
		if (m & CONN_MASK_FALLBACK) {
			ep_convert_watch(ep, w);
			if (done)
				break;
			continue;
		}
		for (struct ep_fdreg *r = w->fdregs; r; r = r->wnext) {
			uint32_t bits;

			if (r->disabled)
				continue;
			bits = reg_bits(r, w, m);
			if (!bits)
				continue;
			if (n == max) {
				full = true;
				break;
			}
			out[n].events = bits;
			out[n].data.u64 = r->data;
			n++;
			reg_reported(ep, r, bits);
			any = true;
		}
		if (any) {
			/* round robin, like the kernel re-queues level-triggered items */
			w->reported = ep->call;
			w->hot_until = __atomic_load_n(&ep->waits, __ATOMIC_RELAXED) + EP_HOT_WAITS;
			ep->last_reported = w;
			watch_unlist(ep, w);
			watch_list(ep, w);
		}
		if (!full && !watch_reportable(w, m, true) && !watch_stays_hot(ep, w) &&
		    !watch_settle(ep, w))
			watch_unlist(ep, w);
		if (done)
			break;
	}
	return n;
}

/* True when ep_collect would report something now; listed watches with nothing to
 * report leave the list armed (what a sleep needs). Fallbacks are converted. */
static bool ep_any_ready(struct smc_epoll *ep)
{
	struct smc_ep_reg *w, *next;

	ep->scan++;
	for (w = ep->rhead; w; w = next) {
		uint32_t m;

		next = w->rnext;
		m = watch_eval(ep, w);
		if (m & CONN_MASK_FALLBACK) {
			ep_convert_watch(ep, w);
			continue;
		}
		if (watch_reportable(w, m, false))
			return true;
		if (watch_settle(ep, w)) {
			if (watch_reportable(w, w->mask, false))
				return true;
		} else if (!watch_is_hot(ep, w)) {
			watch_unlist(ep, w);
		}
	}
	return false;
}

/* After a sleep, when no other thread of the set sleeps: hot watches give back their
 * sleeper counts and are polled (evaluated on every call) until they cool down or the
 * set sleeps again. A peer writing to a polled connection sees no sleeper and rings
 * nobody: redis-benchmark -P 16 sleeps every ~25 replies of its 50 connections, and
 * every one of them made redis-server write an eventfd. */
static void ep_poll_hot(struct smc_epoll *ep)
{
	if (!ep_may_poll(ep))
		return;
	for (struct smc_ep_reg *w = ep->rhead; w; w = w->rnext) {
		if (w->polled || !w->conn || !w->armed || !watch_is_hot(ep, w))
			continue;
		conn_end_sleep(w->conn, w->armed);
		w->armed = 0;
		w->polled = true;
	}
}

/* Moves what the shadow queued onto the ready list: rung doorbells, TCP socket events
 * (given to the connection at once), kicks. */
static void ep_harvest(struct smc_epoll *ep)
{
	struct epoll_event buf[EP_DRAIN_BATCH];
	/* nested entries are level-triggered and come back on every call: bound the rounds */
	int rounds = ep->nentries / EP_DRAIN_BATCH + 2;
	bool rescan = false, foreign = false, bells = false;

	while (rounds-- > 0) {
		int k = REAL(epoll_wait)(ep->shadow, buf, EP_DRAIN_BATCH, 0);

		for (int i = 0; i < k; i++) {
			struct smc_ep_reg *w;
			unsigned tag;

			if (buf[i].data.u64 == EP_KICK_DATA) {
				uint64_t v = 0;

				/* reset it; EAGAIN when another harvest got there first */
				if (REAL(read)(ep->kick, &v, sizeof(v)) == (ssize_t)sizeof(v) &&
				    v >= EP_KICK_RESCAN)
					rescan = true;
				continue;
			}
			w = slot_lookup(ep, buf[i].data.u64, &tag, &foreign);
			if (!w)
				continue;
			if (tag == TAG_TCP && w->conn)
				conn_tcp_event(w->conn);
			if (tag != TAG_NESTED)
				bells = true;
			if (w->fdregs) /* a parked watch has nobody to tell */
				watch_list(ep, w);
		}
		if (k < EP_DRAIN_BATCH)
			break;
	}
	if (foreign)
		ep->shared = true;
	if (rescan || foreign)
		ep_list_all(ep);
	/* another process may need what we just took out of the shared shadow */
	if (ep->shared && (bells || foreign))
		ep_kick(ep, EP_KICK_RESCAN);
}

static uint32_t nested_mask(struct smc_ep_reg *w)
{
	struct pollfd p = { .fd = w->inner_fd, .events = POLLIN };

	if (epoll_emul_poll_mask(w->inner_fd) & POLLIN)
		return POLLIN;
	/* the inner set's kernel half: non-SMC fds registered in it */
	if (REAL(poll)(&p, 1, 0) > 0 && (p.revents & POLLIN))
		return POLLIN;
	return 0;
}

/* For poll/select on the set's fd and for an outer set: harvest, then is anything
 * ready? Leaves every quiet watch armed, so the caller may sleep on the fd. */
static uint32_t ep_check_fd(int epfd)
{
	struct smc_epoll *ep = ep_get(epfd);
	bool ready = false;

	if (!ep)
		return 0;
	ep_lock(ep);
	if (!ep->dead) {
		ep->fd_waited = true;
		ep_harvest(ep);
		ready = ep_any_ready(ep);
	}
	ep_unlock(ep);
	ep_put(ep);
	return ready ? POLLIN : 0;
}

uint32_t epoll_emul_poll_mask(int epfd)
{
	return ep_check_fd(epfd);
}

uint32_t epoll_emul_prepare_sleep(int epfd)
{
	return ep_check_fd(epfd);
}

/* ------------------------------------------------------------------ epoll_wait */

#define EP_DEAD (-2)

/* Listed SMC events, the kernel's ready events, then the SMC events the shadow had
 * (harvested when the kernel reported our cookie). With max > 1 one slot is kept for the
 * kernel so level-triggered SMC readiness cannot starve kernel fds; with max == 1 the
 * two take turns. */
static int ep_try(struct smc_epoll *ep, struct epoll_event *ev, int max)
{
	int slots, n, k, more = 0;
	bool seen = false;

	ep_lock(ep);
	if (ep->dead) {
		ep_unlock(ep);
		return EP_DEAD;
	}
	ep->call++;
	if (max > 1)
		slots = max - 1;
	else
		slots = (ep->kernel_turn = !ep->kernel_turn) ? 0 : 1;
	n = ep_collect(ep, ev, slots);
	ep_unlock(ep);
	k = REAL(epoll_wait)(ep->epfd, ev + n, max - n, 0);
	if (k < 0)
		return n > 0 ? n : -1;
	k = strip_cookie(ev + n, k, &seen);
	/* the first pass looked at the whole list unless the slots cut it short */
	if (!seen && n < slots)
		return n + k;
	ep_lock(ep);
	if (!ep->dead) {
		if (seen)
			ep_harvest(ep);
		more = ep_collect(ep, ev + n + k, max - n - k);
	}
	ep_unlock(ep);
	return n + k + more;
}

/* Spinning helps only while the peer runs on another CPU: judged by the connection that
 * reported last (a nested set or no history: assume so). */
static bool ep_spin_useful(struct smc_epoll *ep)
{
	struct smc_ep_reg *w;
	bool useful;

	ep_lock(ep);
	w = ep->last_reported;
	useful = !w || !w->conn || !conn_peer_on_my_cpu(w->conn);
	ep_unlock(ep);
	return useful;
}

static int ep_spin(struct smc_epoll *ep, struct epoll_event *ev, int max, uint64_t deadline)
{
	uint64_t budget = wait_spin_budget(), start = wait_now_ns(), end = start + budget;
	unsigned round = 0;

	if (budget == 0)
		return 0;
	if (end > deadline)
		end = deadline;
	while (wait_now_ns() < end) {
		int n = ep_try(ep, ev, max);

		if (n != 0) {
			wait_spin_outcome(n > 0, wait_now_ns() - start);
			return n;
		}
		if (++round % EP_SPIN_YIELD_EVERY == 0)
			wait_spin_yield();
		else
			wait_cpu_relax();
	}
	wait_spin_outcome(false, budget);
	return 0;
}

/* The sleep's timeout: a shared set wakes up every slice to rescan (see the top). */
static const struct timespec *ep_sleep_time(struct smc_epoll *ep, uint64_t deadline,
					    struct timespec *ts)
{
	const struct timespec *left = wait_remaining(deadline, ts);

	if (!__atomic_load_n(&ep->shared, __ATOMIC_RELAXED))
		return left;
	if (!left || left->tv_sec > 0 || left->tv_nsec > EP_SHARED_SLICE_MS * 1000000L) {
		ts->tv_sec = 0;
		ts->tv_nsec = EP_SHARED_SLICE_MS * 1000000L;
	}
	return ts;
}

/* The set holds no SMC registration: counted as a sleeper (an ADD while we sleep must
 * ask its peer for a ring, see watch_arm_sync), unless one came in meanwhile. */
static bool ep_sleep_alone(struct smc_epoll *ep)
{
	bool alone;

	ep_lock(ep);
	alone = !ep->head;
	if (alone)
		ep->nsleeping++;
	ep_unlock(ep);
	return alone;
}

static int ep_wait(struct smc_epoll *ep, struct epoll_event *ev, int max, uint64_t deadline,
		   const sigset_t *mask)
{
	bool spun = wait_spin_ns() == 0;
	struct timespec left;

	__atomic_add_fetch(&ep->waits, 1, __ATOMIC_RELAXED);
	for (;;) {
		bool seen = false, ready = false, dead;
		int n;

		if (!__atomic_load_n(&ep->head, __ATOMIC_RELAXED) && ep_sleep_alone(ep)) {
			/* no SMC registration left: the kernel alone, minus our cookie */
			n = real_pwait(ep->epfd, ev, max, wait_remaining(deadline, &left), mask);
			ep_lock(ep);
			ep->nsleeping--;
			ep_unlock(ep);
			if (n <= 0)
				return n;
			n = strip_cookie(ev, n, &seen);
			if (seen) { /* a kick or a late bell: consume it */
				ep_lock(ep);
				if (!ep->dead)
					ep_harvest(ep);
				ep_unlock(ep);
			}
			if (n != 0 || wait_now_ns() >= deadline)
				return n;
			continue;
		}
		n = ep_try(ep, ev, max);
		if (n != 0)
			return n;
		if (wait_now_ns() >= deadline)
			return 0;
		if (!spun) {
			spun = true;
			n = ep_spin_useful(ep) ? ep_spin(ep, ev, max, deadline) : 0;
			if (n != 0)
				return n;
		}
		ep_lock(ep);
		dead = ep->dead;
		if (!dead) {
			ready = ep_any_ready(ep);
			if (!ready)
				ep->nsleeping++;
		}
		ep_unlock(ep);
		if (dead)
			return EP_DEAD;
		if (ready)
			continue;
		n = real_pwait(ep->epfd, ev, max, ep_sleep_time(ep, deadline, &left), mask);
		ep_lock(ep);
		ep->nsleeping--;
		if (!ep->dead)
			ep_poll_hot(ep);
		ep_unlock(ep);
		if (n < 0)
			return -1;
		n = strip_cookie(ev, n, &seen);
		ep_lock(ep);
		if (!ep->dead) {
			ep->call++;
			if (seen)
				ep_harvest(ep);
			n += ep_collect(ep, ev + n, max - n);
		}
		ep_unlock(ep);
		if (n != 0)
			return n;
	}
}

/* The emulated wait on ep; EP_DEAD when the set was closed under us. Drops ep. */
static int ep_wait_put(struct smc_epoll *ep, struct epoll_event *ev, int max, uint64_t deadline,
		       const sigset_t *mask)
{
	int r = ep_wait(ep, ev, max, deadline, mask), saved = errno;

	ep_put(ep);
	errno = saved;
	return r;
}

static void ep_nap(uint64_t deadline)
{
	uint64_t left = deadline - wait_now_ns(), slice = EP_SHARED_SLICE_MS * 1000000ull;
	struct timespec ts;

	if (left > slice)
		left = slice;
	ts.tv_sec = (time_t)(left / 1000000000u);
	ts.tv_nsec = (long)(left % 1000000000u);
	nanosleep(&ts, NULL);
}

/* A set the emulation does not hold (yet, or any more): the kernel's wait, minus our
 * cookie. A cookie alone means the set became emulated while we slept (another thread
 * added the first SMC fd, and its kick or a bell woke us): the wait goes on there, so
 * what the cookie announced is harvested, not lost. */
static int kernel_wait(int epfd, struct epoll_event *ev, int max, uint64_t deadline,
		       const sigset_t *mask)
{
	struct timespec left;

	for (;;) {
		struct smc_epoll *ep;
		bool seen = false;
		int n = real_pwait(epfd, ev, max, wait_remaining(deadline, &left), mask);

		if (n <= 0)
			return n;
		n = strip_cookie(ev, n, &seen);
		if (n > 0 || !seen)
			return n;
		ep = ep_get(epfd);
		if (ep) {
			n = ep_wait_put(ep, ev, max, deadline, mask);
			if (n != EP_DEAD)
				return n;
		}
		/* The cookie of a set another process emulates (shared across fork), or of
		 * one being set up or closed here: it stays ready until its owner harvests or
		 * closes it, so nap a slice rather than spin on it. */
		if (wait_now_ns() >= deadline)
			return 0;
		ep_nap(deadline);
	}
}

int epoll_emul_wait(int epfd, struct epoll_event *ev, int max, const struct timespec *timeout,
		    const sigset_t *mask)
{
	uint64_t deadline = wait_deadline(timeout);
	struct smc_epoll *ep;
	int r;

	if (max <= 0 || max > EP_MAX_EVENTS) {
		errno = EINVAL;
		return -1;
	}
	ep = ep_get(epfd);
	if (!ep)
		return kernel_wait(epfd, ev, max, deadline, mask);
	r = ep_wait_put(ep, ev, max, deadline, mask);
	if (r == EP_DEAD) /* closed under us: whatever the kernel says now */
		r = kernel_wait(epfd, ev, max, deadline, mask);
	return r;
}

int epoll_emul_after_kernel(int epfd, struct epoll_event *ev, int n, int max,
			    const struct timespec *timeout, const sigset_t *mask)
{
	bool seen = false;

	n = strip_cookie(ev, n, &seen);
	if (n > 0 || !seen)
		return n;
	/* the caller's start time is unknown: the whole timeout again, at most once per
	 * set that becomes emulated under a sleeper */
	return epoll_emul_wait(epfd, ev, max, timeout, mask);
}

/* ------------------------------------------------------------------ epoll_ctl */

static int fail(int err)
{
	errno = err;
	return -1;
}

/* The checks Linux makes before looking the target up (fs/eventpoll.c). */
static int ctl_check(int epfd, int op, int fd, const struct epoll_event *ev, bool target_epoll)
{
	if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !ev)
		return fail(EFAULT);
	if (epfd == fd)
		return fail(EINVAL);
	if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL)
		return fail(EINVAL);
	if (op != EPOLL_CTL_DEL && (ev->events & EPOLLEXCLUSIVE)) {
		if (op == EPOLL_CTL_MOD || target_epoll || (ev->events & ~EV_EXCLUSIVE_OK))
			return fail(EINVAL);
	}
	return 0;
}

/* op on an fd we already have a registration for. */
static int ctl_registered(struct smc_epoll *ep, struct ep_fdreg *r, int op, int fd,
			  struct epoll_event *ev)
{
	if (ctl_check(ep->epfd, op, fd, ev, r->w && r->w->inner) < 0)
		return -1;
	if (r->w && r->w->conn && (wait_conn_mask(r->w->conn) & CONN_MASK_FALLBACK)) {
		ep_convert_watch(ep, r->w);
		r = reg_find(ep, fd);
		if (!r) /* now a kernel registration */
			return REAL(epoll_ctl)(ep->epfd, op, fd, ev);
	}
	switch (op) {
	case EPOLL_CTL_ADD:
		return fail(EEXIST);
	case EPOLL_CTL_DEL:
		reg_remove(ep, r, true);
		return 0;
	default: /* EPOLL_CTL_MOD */
		if (r->events & EPOLLEXCLUSIVE)
			return fail(EINVAL);
		if (!r->w) { /* detached one-shot of a fallen-back connection */
			reg_remove(ep, r, false);
			return REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, fd, ev);
		}
		reg_arm(r, ev);
		if (watch_sync(ep, r->w) < 0)
			return -1;
		reg_arm_now(ep, r);
		return 0;
	}
}

/* A registration the kernel keeps: recorded when fd may still be upgraded. */
static int kernel_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (epoll_track_wanted(fd))
		return epoll_track_ctl(epfd, op, fd, ev);
	return REAL(epoll_ctl)(epfd, op, fd, ev);
}

static int ctl_add(struct smc_epoll *ep, int epfd, int fd, struct smc_conn *c,
		   struct smc_epoll *inner, struct epoll_event *ev, bool fired);

int epoll_emul_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct smc_epoll *ep = ep_get(epfd), *inner = NULL;
	struct smc_conn *c;
	int rc = 0, saved;

	if (ep) {
		bool handled = false;

		ep_lock(ep);
		if (!ep->dead) {
			struct ep_fdreg *r = reg_find(ep, fd);

			if (r) {
				rc = ctl_registered(ep, r, op, fd, ev);
				handled = true;
			}
		}
		saved = errno;
		ep_unlock(ep);
		if (handled) {
			ep_put(ep);
			errno = saved;
			return rc;
		}
	}

	c = sock_fd_conn(fd);
	if (c && (wait_conn_mask(c) & CONN_MASK_FALLBACK)) {
		conn_put(c);
		c = NULL;
	}
	if (!c && fd != epfd)
		inner = ep_get(fd);
	if ((!c && !inner) || op != EPOLL_CTL_ADD) {
		if (c)
			conn_put(c);
		ep_put(inner);
		ep_put(ep);
		return kernel_ctl(epfd, op, fd, ev);
	}
	rc = ctl_add(ep, epfd, fd, c, inner, ev, false); /* its watch takes its own reference */
	if (c) {
		saved = errno;
		conn_put(c);
		errno = saved;
	}
	return rc;
}

/* Adds fd (connection c, or nested set inner) to the emulation of epfd; consumes the
 * references to ep (may be NULL: the set becomes emulated) and inner. */
static int ctl_add(struct smc_epoll *ep, int epfd, int fd, struct smc_conn *c,
		   struct smc_epoll *inner, struct epoll_event *ev, bool fired)
{
	int rc, saved;

	rc = ctl_check(epfd, EPOLL_CTL_ADD, fd, ev, inner != NULL);
	if (rc == 0 && !ep) {
		ep = ep_create(epfd);
		if (!ep)
			rc = -1;
	}
	if (rc < 0) {
		saved = errno;
		ep_put(inner);
		ep_put(ep);
		errno = saved;
		return -1;
	}
	ep_lock(ep);
	if (ep->dead) {
		ep_put(inner);
		rc = fail(EBADF);
	} else if (reg_find(ep, fd)) {
		ep_put(inner);
		rc = fail(EEXIST);
	} else {
		rc = reg_add(ep, fd, c, inner, ev, fired); /* takes the inner reference */
	}
	saved = errno;
	ep_unlock(ep);
	ep_put(ep);
	errno = saved;
	return rc;
}

int epoll_emul_adopt(int epfd, int fd, struct smc_conn *c, struct epoll_event *ev, bool fired)
{
	return ctl_add(ep_get(epfd), epfd, fd, c, NULL, ev, fired);
}

void epoll_emul_unadopt(int epfd, int fd)
{
	struct smc_epoll *ep = ep_get(epfd);
	struct ep_fdreg *r;

	if (!ep)
		return;
	ep_lock(ep);
	r = ep->dead ? NULL : reg_find(ep, fd);
	if (r)
		reg_remove(ep, r, false);
	ep_unlock(ep);
	ep_put(ep);
}

/* ------------------------------------------------------------------ close and fork */

/* References to every live set, for work that must not hold eps_lock. */
static struct smc_epoll **eps_snapshot(struct smc_epoll **stack, int cap, int *n)
{
	struct smc_epoll **arr = stack;
	int i = 0;

	pthread_mutex_lock(&eps_lock);
	if (eps_count > cap)
		arr = malloc((size_t)eps_count * sizeof(*arr));
	if (arr) {
		for (struct smc_epoll *ep = eps_head; ep; ep = ep->gnext) {
			ep->refs++;
			arr[i++] = ep;
		}
	}
	pthread_mutex_unlock(&eps_lock);
	*n = i;
	return arr;
}

/* The shadow entry for fd's socket must go before fd is closed: a closed fd number
 * can no longer be named in EPOLL_CTL_DEL, and a dup would keep the entry alive. */
static void ep_forget_in(struct smc_epoll *ep, int fd, struct smc_conn *c)
{
	struct smc_ep_reg *w = NULL;
	struct ep_fdreg *r;

	ep_lock(ep);
	if (ep->dead) {
		ep_unlock(ep);
		return;
	}
	r = reg_find(ep, fd);
	if (r) {
		/* the wrapper may have cleared fd's table entry already: find the watch
		 * through the registration, unless the removal releases it anyway */
		w = r->w;
		if (w && w->fdregs == r && !r->wnext)
			w = NULL;
		reg_remove(ep, r, false);
	} else if (c) {
		w = watch_find_conn(ep, c);
		if (w && !w->fdregs) { /* parked by a DEL: goes with the fd */
			watch_release(ep, w);
			w = NULL;
		}
	}
	if (w)
		watch_drop_entry(ep, w, fd, TAG_TCP);
	ep_unlock(ep);
}

void epoll_emul_forget_fd(int fd)
{
	struct smc_epoll *stack[16], **arr;
	struct smc_conn *c;
	int n;

	if (__atomic_load_n(&eps_count, __ATOMIC_ACQUIRE) == 0 || fd < 0)
		return;
	c = sock_fd_conn(fd);
	arr = eps_snapshot(stack, 16, &n);
	for (int i = 0; arr && i < n; i++) {
		ep_forget_in(arr[i], fd, c);
		ep_put(arr[i]);
	}
	if (arr && arr != stack)
		free(arr);
	if (c)
		conn_put(c);
}

void epoll_emul_close_epfd(int epfd)
{
	struct smc_epoll *ep = NULL;
	struct fd_entry *e;

	pthread_mutex_lock(&eps_lock);
	e = fdtab_peek(epfd);
	if (e && e->kind == FD_EPOLL && e->obj) {
		ep = e->obj;
		fdtab_clear(epfd);
		if (ep->gprev)
			ep->gprev->gnext = ep->gnext;
		else
			eps_head = ep->gnext;
		if (ep->gnext)
			ep->gnext->gprev = ep->gprev;
		__atomic_sub_fetch(&eps_count, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&eps_lock);

	if (ep) {
		ep_lock(ep);
		ep->dead = true;
		while (ep->head)
			reg_remove(ep, ep->head, false);
		while (ep->watches) /* detached leftovers cannot exist without regs */
			watch_release(ep, ep->watches);
		ep_unlock(ep);
	}
	/* it may itself be nested in other emulated sets */
	epoll_emul_forget_fd(epfd);
	ep_put(ep); /* the global list's reference; waiters may still hold theirs */
}

/* Epoll sets created before a fork are shared with the child, which may make one of
 * them emulated; the other process must then know the cookie to strip it. So the cookie
 * exists before the first fork (both processes inherit it), and after a fork both
 * strip it from every wait. */
void epoll_emul_atfork_prepare(void)
{
	pthread_once(&ep_cookie_once, cookie_init);
}

void epoll_emul_atfork_parent(void)
{
	__atomic_store_n(&smc_epoll_cookies, true, __ATOMIC_RELEASE);
}

/* Every set is locked only around bounded work on its lists (sleeps happen unlocked),
 * so the child finds them consistent. Sets out of the list (closed, a waiter still
 * holding one) are reachable in the child through nothing: fdtab no longer names them. */
bool epoll_emul_fork_lock(void)
{
	enum forklock_result r = forklock_take(&eps_lock);

	if (r != FORKLOCK_TAKEN)
		return r == FORKLOCK_SKIPPED;
	for (struct smc_epoll *ep = eps_head; ep; ep = ep->gnext)
		if (forklock_take(&ep->lock) == FORKLOCK_BUSY)
			return false;
	return true;
}

void epoll_emul_atfork_child(void)
{
	uint8_t parent = ep_owner;

	__atomic_store_n(&smc_epoll_cookies, true, __ATOMIC_RELEASE);
	/* the locks: forklock_child */
	/* entries this process adds from now on must be told apart from the parent's */
	ep_owner = (uint8_t)(((uint32_t)getpid() * 2654435761u) >> 24);
	if (ep_owner == parent)
		ep_owner++;
	for (struct smc_epoll *ep = eps_head; ep; ep = ep->gnext) {
		ep->inherited = true;
		ep->shared = true;
		ep->nsleeping = 0;
		for (struct smc_ep_reg *w = ep->watches; w; w = w->next) {
			/* the sleeper counts are the parent's: it gives them back, not us; ours
			 * are taken when the watch is next evaluated */
			w->armed = 0;
			w->polled = false;
			if (w->fdregs)
				watch_list(ep, w);
		}
	}
}
