/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The emulated epoll sets themselves (epoll.c's header has the design): creation (the
 * shadow and its kick eventfd joining the application's set under the cookie),
 * references, the global list that fdtab and close reach them through, an fd or a set
 * being closed, and fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/base/real.h"
#include "core/conn/conn.h"
#include "core/readiness/epoll.h"
#include "core/readiness/epoll_int.h"

static pthread_mutex_t eps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct smc_epoll *eps_head;
static int eps_count;                /* atomic reads: forget_fd's fast path */
uint64_t ep_cookie;
uint8_t ep_owner;
/* Set (for good) before the first shadow joins an application set: from then on a
 * kernel wait on any set may return our cookie, and every path strips it. */
bool smc_epoll_cookies;
static pthread_once_t ep_cookie_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ small helpers */

/* Not a secret: the cookie only has to differ from what applications put in their
 * events' data (random.h: a weak value will do). */
static void cookie_init(void)
{
	ep_cookie = random_weak64();
	ep_owner = (uint8_t)(ep_cookie >> 56);
}

bool ep_grow(void **arr, size_t *cap, size_t need, size_t elem)
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

void ep_kick(struct smc_epoll *ep, uint64_t what)
{
	if (REAL(write)(ep->kick, &what, sizeof(what)) < 0)
		log_debug("epoll: kick of %d failed: %d", ep->epfd, errno);
}

/* ------------------------------------------------------------------ set lifetime */

struct smc_epoll *ep_get(int epfd)
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
	fd_own_close(ep->shadow);
	fd_own_close(ep->kick);
	fd_budget_give(2);
	pthread_mutex_destroy(&ep->lock);
	free(ep->by_fd);
	free(ep->slots);
	free(ep->slot_gen);
	free(ep->free_slots);
	free(ep);
}

void ep_put(struct smc_epoll *ep)
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

/* Unlocks, then drops what released watches referenced (a connection's last reference
 * or a nested set may be freed: never under our lock). */
void ep_unlock(struct smc_epoll *ep)
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

struct smc_epoll *ep_create(int epfd)
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
	/* in an outer set already, which the kernel alone waits on: quiet watches ask
	 * for rings, and an ADD of a ready one kicks (epoll.c, ep_may_poll) */
	ep->fd_waited = fdtab_flags(epfd) & FDF_NESTED;
	/* parked: out of the numbers the program's next accept() or open() would get */
	ep->shadow = fd_park(REAL(epoll_create1)(EPOLL_CLOEXEC));
	ep->kick = fd_park(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	ev.data.u64 = EP_KICK_DATA;
	if (ep->shadow < 0 || ep->kick < 0 ||
	    REAL(epoll_ctl)(ep->shadow, EPOLL_CTL_ADD, ep->kick, &ev) < 0) {
		saved = errno;
		if (ep->shadow >= 0)
			fd_own_close(ep->shadow);
		if (ep->kick >= 0)
			fd_own_close(ep->kick);
		free(ep);
		errno = saved;
		return NULL;
	}
	/* Also validates epfd the way the kernel would (EBADF, EINVAL if not an epoll). */
	ev.data.u64 = ep_cookie;
	__atomic_store_n(&smc_epoll_cookies, true, __ATOMIC_RELEASE);
	if (REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, ep->shadow, &ev) < 0) {
		saved = errno;
		fd_own_close(ep->shadow);
		fd_own_close(ep->kick);
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

/* fd is being closed; c is its connection (NULL for other fds, or when a thread closing
 * the same fd cleared its table entry first), `last` when c has no other fd in this
 * process. The shadow entry for fd's socket must go before fd is closed: a closed fd
 * number can no longer be named in EPOLL_CTL_DEL, and a dup would keep the entry alive.
 * A registration made through fd stays while another fd of c is open (reg_orphan). */
static void ep_forget_in(struct smc_epoll *ep, int fd, struct smc_conn *c, bool last)
{
	struct smc_ep_reg *w = NULL;
	struct ep_fdreg *r;

	ep_lock(ep);
	if (ep->dead) {
		ep_unlock(ep);
		return;
	}
	r = reg_find(ep, fd);
	if (r)
		w = r->w; /* the watch of fd's registration, as c may be unknown */
	else if (c)
		w = watch_find_conn(ep, c);
	if (r && w && w->conn && c && !last) {
		reg_orphan(ep, r);
	} else if (r) {
		/* unless the removal releases it anyway */
		if (w && w->fdregs == r && !r->wnext)
			w = NULL;
		reg_remove(ep, r, false);
	}
	if (w) {
		if (!w->fdregs || (w->conn && c && last))
			watch_forget(ep, w); /* parked by a DEL, or the connection's last fd */
		else
			watch_drop_entry(ep, w, fd, TAG_TCP);
	}
	ep_unlock(ep);
}

static void ep_forget_all(int fd, struct smc_conn *c, bool last)
{
	struct smc_epoll *stack[16], **arr;
	int n;

	arr = eps_snapshot(stack, 16, &n);
	for (int i = 0; arr && i < n; i++) {
		ep_forget_in(arr[i], fd, c, last);
		ep_put(arr[i]);
	}
	if (arr && arr != stack)
		free(arr);
}

void epoll_emul_forget_fd(int fd)
{
	struct smc_conn *c;
	bool last = true;

	if (__atomic_load_n(&eps_count, __ATOMIC_ACQUIRE) == 0 || fd < 0)
		return;
	c = conn_from_fd(fd);
	if (c) {
		pthread_mutex_lock(&c->lock);
		last = c->fd_refs <= 1;
		pthread_mutex_unlock(&c->lock);
	}
	ep_forget_all(fd, c, last);
	if (c)
		conn_put(c);
}

void epoll_emul_forget_conn(struct smc_conn *c)
{
	if (__atomic_load_n(&eps_count, __ATOMIC_ACQUIRE) == 0)
		return;
	ep_forget_all(-1, c, true);
}

/* The hand-back an epoll_wait scan makes when it finds the connection FALLBACK
 * (ep_convert_watch), made now in every set. */
void epoll_emul_hand_back_conn(struct smc_conn *c)
{
	struct smc_epoll *stack[16], **arr;
	int n;

	if (__atomic_load_n(&eps_count, __ATOMIC_ACQUIRE) == 0)
		return;
	arr = eps_snapshot(stack, 16, &n);
	for (int i = 0; arr && i < n; i++) {
		struct smc_epoll *ep = arr[i];
		struct smc_ep_reg *w;

		ep_lock(ep);
		if (!ep->dead && (w = watch_find_conn(ep, c)) != NULL)
			ep_convert_watch(ep, w);
		ep_unlock(ep);
		ep_put(ep);
	}
	if (arr && arr != stack)
		free(arr);
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
