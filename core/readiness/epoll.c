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
 *     the peer rings at most once per sequence number (conn_data.c, conn_ring_if_asleep), and we
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
 *     waited on (poll/select, an outer set of ours, or one of the kernel's that it was
 *     added to: FDF_NESTED) settles every watch as before.
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
 *
 * The files: this one has the wait (the ready list, sleeper counts, readiness, the
 * epoll_wait loop and the kernel's share of a wait); epoll_ctl.c the interest set (slots,
 * shadow entries, watches, registrations, epoll_ctl, the hand-back of a connection that
 * fell back to TCP); epoll_set.c the sets themselves (creation, references, the global
 * list, close, fork). epoll_int.h holds the objects they share.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/spin.h"
#include "core/conn/conn.h"
#include "core/readiness/epoll.h"
#include "core/readiness/epoll_int.h"
#include "core/readiness/wait.h"

/* A set shared with another process sleeps at most this long between scans. */
#define EP_SHARED_SLICE_MS 10

#define EP_DRAIN_BATCH 64
#define EP_MAX_EVENTS ((int)(INT_MAX / sizeof(struct epoll_event)))

static bool ep_may_poll(struct smc_epoll *ep);

/* ------------------------------------------------------------------ the kernel's events */

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

/* ------------------------------------------------------------------ the ready list */

void watch_list(struct smc_epoll *ep, struct smc_ep_reg *w)
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

void watch_unlist(struct smc_epoll *ep, struct smc_ep_reg *w)
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

/* ------------------------------------------------------------------ sleeper counts */

/* Makes the sleeper counts w holds match its enabled registrations. A new count asks
 * for no ring (conn_hold_sleep): the watch is listed, so it is looked at again, and it
 * leaves the list only through watch_settle, which asks. Asking here made the peer ring
 * once per EPOLL_CTL_ADD: redis-benchmark deletes and adds its fds around every request
 * (ae), and redis-server wrote an eventfd for each of its -P 16 replies. */
void watch_arm_sync(struct smc_epoll *ep, struct smc_ep_reg *w)
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

void watch_disarm(struct smc_ep_reg *w)
{
	if (w->conn && w->armed) {
		conn_end_sleep(w->conn, w->armed);
		w->armed = 0;
	}
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

struct ep_spin_look {
	struct smc_epoll *ep;
	struct epoll_event *ev;
	int max;
};

static int ep_spin_look(void *arg, unsigned n)
{
	struct ep_spin_look *l = arg;

	(void)n;
	return ep_try(l->ep, l->ev, l->max);
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
	bool spun = spin_ns() == 0;
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
			if (n != 0 || clock_now_ns() >= deadline)
				return n;
			continue;
		}
		n = ep_try(ep, ev, max);
		if (n != 0)
			return n;
		if (clock_now_ns() >= deadline)
			return 0;
		if (!spun) {
			struct ep_spin_look look = { ep, ev, max };

			spun = true;
			n = ep_spin_useful(ep) ? spin_run(ep_spin_look, &look, deadline) : 0;
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
	uint64_t left = deadline - clock_now_ns(), slice = EP_SHARED_SLICE_MS * 1000000ull;
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
		if (clock_now_ns() >= deadline)
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
