/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The interest set of an emulated epoll (epoll.c's header has the design): epoll_ctl with
 * the kernel's checks and errors, the application's fd registrations, the watches they
 * share per connection (or nested set), the slots that name a watch in its shadow
 * entries, and the shadow entries themselves (doorbells, the TCP socket, a nested set's
 * fd). A connection that fell back to TCP is handed back here: its registrations move to
 * the kernel's set.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "core/base/log.h"
#include "core/base/real.h"
#include "core/conn/conn.h"
#include "core/readiness/epoll.h"
#include "core/readiness/epoll_int.h"
#include "core/readiness/epoll_track.h"
#include "core/readiness/wait.h"

/* Linux accepts EPOLLEXCLUSIVE only with these (fs/eventpoll.c EPOLLEXCLUSIVE_OK_BITS). */
#define EV_EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | \
			 EPOLLWRBAND | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | \
			 EPOLLEXCLUSIVE)

static void reg_arm_now(struct smc_epoll *ep, struct ep_fdreg *r);

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

/* ------------------------------------------------------------------ slots and shadow entries */

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
			size_t need = (size_t)ep->nslots + 1;

			if (!ep_grow((void **)&ep->slots, &c1, need, sizeof(*ep->slots)) ||
			    !ep_grow((void **)&ep->slot_gen, &c2, need, sizeof(*ep->slot_gen)) ||
			    !ep_grow((void **)&ep->free_slots, &c3, need, sizeof(*ep->free_slots)))
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

/* Removes one shadow entry (fd, tag) of w; w is re-synced when next evaluated. */
void watch_drop_entry(struct smc_epoll *ep, struct smc_ep_reg *w, int fd, unsigned tag)
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
int watch_sync(struct smc_epoll *ep, struct smc_ep_reg *w)
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

struct smc_ep_reg *watch_find_conn(struct smc_epoll *ep, struct smc_conn *c)
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
void watch_release(struct smc_epoll *ep, struct smc_ep_reg *w)
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

struct ep_fdreg *reg_find(struct smc_epoll *ep, int fd)
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
void reg_remove(struct smc_epoll *ep, struct ep_fdreg *r, bool park)
{
	struct smc_ep_reg *w = r->w;

	reg_unlink(ep, r);
	if (ep->by_fd[r->fd] == r) /* an orphan's number may name another registration */
		ep->by_fd[r->fd] = NULL;
	if (r->orphan)
		ep->norphans--;
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

/* The application closed r's fd while another fd of the connection stays open. Linux
 * keys an epoll entry by (open file, fd number) and removes it only when the file is
 * released (eventpoll_release() from __fput), so the entry goes on reporting with its
 * data although its number is closed; epoll_ctl by that number then fails with EBADF
 * (or names whatever the number is reused for). r stays on its watch, out of by_fd,
 * until the connection's last fd is closed (ep_forget_in) or the set is. */
void reg_orphan(struct smc_epoll *ep, struct ep_fdreg *r)
{
	ep->by_fd[r->fd] = NULL;
	r->orphan = true;
	ep->norphans++;
}

/* fd, a number of connection c, may be an orphan's number again (dup2 onto it, or a dup
 * that got the lowest free number): Linux finds that entry by (file, fd), so do we. */
static struct ep_fdreg *reg_revive(struct smc_epoll *ep, int fd, struct smc_conn *c)
{
	struct smc_ep_reg *w;

	if (!ep->norphans || reg_find(ep, fd))
		return NULL;
	w = watch_find_conn(ep, c);
	for (struct ep_fdreg *r = w ? w->fdregs : NULL; r; r = r->wnext) {
		if (r->orphan && r->fd == fd) {
			r->orphan = false;
			ep->norphans--;
			ep->by_fd[fd] = r; /* by_fd held it before: long enough */
			return r;
		}
	}
	return NULL;
}

/* w's connection has no fd left in this process: its registrations go, as Linux drops a
 * file's entries when the file is released. w is released with the last one. */
void watch_forget(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	if (!w->fdregs) {
		watch_release(ep, w);
		return;
	}
	while (w->fdregs->wnext)
		reg_remove(ep, w->fdregs, false);
	reg_remove(ep, w->fdregs, false);
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

	if (!ep_grow((void **)&ep->by_fd, &cap, (size_t)fd + 1, sizeof(*ep->by_fd))) {
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
 * application's epoll fd (a one-shot MOD from a worker thread is the classic case), or
 * on an outer set that holds it (fd_waited): Linux wakes them when the new entry is
 * ready, so kick the shadow then. */
static void reg_arm_now(struct smc_epoll *ep, struct ep_fdreg *r)
{
	struct smc_ep_reg *w = r->w;
	uint32_t m;

	if (!w || r->disabled)
		return;
	watch_list(ep, w);
	if (ep->nsleeping <= 0 && !ep->fd_waited)
		return;
	if (w->inner)
		m = epoll_emul_prepare_sleep(w->inner_fd);
	else
		m = wait_expand_mask(conn_poll_mask(w->conn));
	if ((m & CONN_MASK_FALLBACK) || (m & ((r->events & EV_REPORTABLE) | EPOLLERR | EPOLLHUP)))
		ep_kick(ep, 1);
}

/* An orphan (reg_orphan) joins the kernel's set the way Linux holds it: an entry made
 * through a number closed again at once, which lives as long as the socket does and
 * which no number of the application names. The orphan's own number when it is free (so
 * the entry reads as Linux's would in /proc/self/fdinfo), a higher one otherwise. */
static int kernel_add_orphan(struct smc_epoll *ep, struct smc_conn *c, int fd,
			     struct epoll_event *ev)
{
	int cfd, tmp, rc, saved;

	pthread_mutex_lock(&c->lock);
	cfd = c->fd_refs > 0 ? c->fd : -1;
	pthread_mutex_unlock(&c->lock);
	if (cfd < 0) {
		errno = EBADF;
		return -1;
	}
	tmp = REAL(fcntl)(cfd, F_DUPFD_CLOEXEC, fd);
	if (tmp < 0)
		return -1;
	rc = REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, tmp, ev);
	saved = errno;
	REAL(close)(tmp);
	errno = saved;
	return rc;
}

/* The connection of w went back to plain TCP: its registrations move to the kernel's
 * set with the application's events and data. A one-shot registration that already
 * fired stays with us, detached, until the application re-arms or deletes it (the
 * kernel has no way to add an entry in the fired state); a detached orphan goes (no
 * number can re-arm it). */
void ep_convert_watch(struct smc_epoll *ep, struct smc_ep_reg *w)
{
	int saved = errno;

	while (w->fdregs) {
		struct ep_fdreg *r = w->fdregs;
		struct epoll_event ev = { .events = r->events, .data.u64 = r->data };
		int rc;

		reg_detach_from_watch(r);
		if (r->disabled && !r->orphan)
			continue;
		if (r->disabled)
			rc = 0;
		else if (r->orphan)
			rc = kernel_add_orphan(ep, w->conn, r->fd, &ev);
		else
			rc = REAL(epoll_ctl)(ep->epfd, EPOLL_CTL_ADD, r->fd, &ev);
		if (rc < 0 && errno != EEXIST)
			log_warn("epoll: fd %d fell back to TCP but cannot join epoll %d: %d",
				 r->fd, ep->epfd, errno);
		reg_unlink(ep, r);
		if (ep->by_fd[r->fd] == r)
			ep->by_fd[r->fd] = NULL;
		if (r->orphan)
			ep->norphans--;
		free(r);
	}
	watch_release(ep, w);
	errno = saved;
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

	c = conn_from_fd(fd);
	if (c && ep && __atomic_load_n(&ep->norphans, __ATOMIC_RELAXED)) {
		struct ep_fdreg *r = NULL;

		ep_lock(ep);
		if (!ep->dead)
			r = reg_revive(ep, fd, c);
		if (r)
			rc = ctl_registered(ep, r, op, fd, ev);
		saved = errno;
		ep_unlock(ep);
		if (r) {
			conn_put(c);
			ep_put(ep);
			errno = saved;
			return rc;
		}
	}
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
