/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The epoll emulation's private objects, shared by its three files (epoll.c's header has
 * the design):
 *   epoll.c      the wait: the ready list, sleeper counts, readiness, epoll_wait and the
 *                kernel's share of a wait (its events, minus our cookie)
 *   epoll_ctl.c  the interest set: slots and shadow entries, watches, fd registrations,
 *                epoll_ctl, and the hand-back of a fallen-back connection to the kernel's set
 *   epoll_set.c  the sets: creation, references, the global list, close and fork
 * Functions that touch a set's lists expect its lock held (ep_lock); ep_get, ep_put and
 * ep_create take the global list lock themselves.
 */
#ifndef SMC_EPOLL_INT_H
#define SMC_EPOLL_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "core/conn/conn.h"
#include "core/readiness/epoll.h"

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

#define EP_MAX_WAIT 3                 /* conn_wait_fds() fills at most 3 */

/* Bits an application may be told about (everything but the behaviour flags). */
#define EV_REPORTABLE (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | \
		       EPOLLWRNORM | EPOLLWRBAND | EPOLLMSG | EPOLLRDHUP)
#define EV_IN_SIDE (EPOLLIN | EPOLLRDNORM | EPOLLRDBAND | EPOLLPRI | EPOLLRDHUP)
#define EV_OUT_SIDE (EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND)

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
	bool orphan;                    /* fd closed under a dup: not in by_fd, see reg_orphan */
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
	int norphans;                   /* registrations whose fd was closed under a dup */
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

extern uint64_t ep_cookie;              /* data of the shadow in application sets */
extern uint8_t ep_owner;                /* this process's owner byte */

/* ---- epoll_set.c: sets ---- */

/* The emulated set of epfd with a reference, or NULL (not emulated, or closed). */
struct smc_epoll *ep_get(int epfd);
/* Emulates epfd (or returns the set another thread made meanwhile), with a reference;
 * NULL with errno. */
struct smc_epoll *ep_create(int epfd);
void ep_put(struct smc_epoll *ep);
void ep_unlock(struct smc_epoll *ep);
/* Wakes the set's waiters: what is EP_KICK_RESCAN or 1 (see the kick values above). */
void ep_kick(struct smc_epoll *ep, uint64_t what);
/* Grows *arr (zero-filled) to hold need elements; false when out of memory. */
bool ep_grow(void **arr, size_t *cap, size_t need, size_t elem);

static inline void ep_lock(struct smc_epoll *ep)
{
	pthread_mutex_lock(&ep->lock);
}

static inline uint64_t slot_data(struct smc_epoll *ep, struct smc_ep_reg *w, unsigned tag)
{
	return ((uint64_t)(ep->slot_gen[w->slot] & DATA_GEN_MASK) << DATA_GEN_SHIFT) |
	       ((uint64_t)w->owner << DATA_OWNER_SHIFT) | ((uint64_t)w->slot << TAG_BITS) | tag;
}

/* The watch an event belongs to, or NULL: stale, or (*foreign) another process's. */
static inline struct smc_ep_reg *slot_lookup(struct smc_epoll *ep, uint64_t data, unsigned *tag,
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

/* ---- epoll.c: the ready list and sleeper counts ---- */

void watch_list(struct smc_epoll *ep, struct smc_ep_reg *w);
void watch_unlist(struct smc_epoll *ep, struct smc_ep_reg *w);
void watch_arm_sync(struct smc_epoll *ep, struct smc_ep_reg *w);
void watch_disarm(struct smc_ep_reg *w);

/* ---- epoll_ctl.c: watches and registrations ---- */

int watch_sync(struct smc_epoll *ep, struct smc_ep_reg *w);
struct smc_ep_reg *watch_find_conn(struct smc_epoll *ep, struct smc_conn *c);
void watch_release(struct smc_epoll *ep, struct smc_ep_reg *w);
void watch_drop_entry(struct smc_epoll *ep, struct smc_ep_reg *w, int fd, unsigned tag);
struct ep_fdreg *reg_find(struct smc_epoll *ep, int fd);
void reg_remove(struct smc_epoll *ep, struct ep_fdreg *r, bool park);
void reg_orphan(struct smc_epoll *ep, struct ep_fdreg *r);
void watch_forget(struct smc_epoll *ep, struct smc_ep_reg *w);
void ep_convert_watch(struct smc_epoll *ep, struct smc_ep_reg *w);

#endif
