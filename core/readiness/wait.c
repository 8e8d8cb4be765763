/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * poll/ppoll/select/pselect emulation, see wait.h.
 *
 * One call goes through these phases until something is ready or the timeout expires:
 *   1. evaluate: SMC entries from connection state, the others with a zero-timeout
 *      real ppoll (skipped when there are none);
 *   2. spin (once per call, up to SMC_SPIN_US) re-evaluating SMC state, with a
 *      zero-timeout real ppoll every few rounds so kernel fds are not starved;
 *   3. prepare: conn_prepare_sleep() on each SMC entry (arms the peer's doorbell and
 *      drains the bells that woke us last round); if that finds readiness, go to 1;
 *   4. sleep in the real ppoll on a temporary array where each SMC entry is replaced by
 *      the connection's wait fds; map bell hits back to their entry for the next
 *      prepare, report TCP socket events to the connection, then go to 1 (kernel
 *      entries keep the answer of this sleep).
 * No lock is held in the kernel. Connections are referenced for the whole call so a
 * concurrent close cannot free them under us.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fdtab.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/base/spin.h"
#include "core/conn/conn.h"
#include "core/readiness/epoll.h"
#include "core/readiness/wait.h"

/* Zero-timeout kernel check every this many looks of a spin. */
#define WAIT_SPIN_KERNEL_EVERY 8
/* Entries handled with stack storage; larger sets allocate. */
#define WAIT_STACK_ENTRIES 32
/* conn_wait_fds() fills at most this many pollfds. */
#define WAIT_FDS_PER_CONN 3
/*
 * How often a call that does not sleep still asks the kernel about its upgraded
 * connections' TCP sockets. A peer killed by a signal leaves no flag in the rings, only
 * its socket's FIN or reset; a sleeping call hears that (the socket is one of its wait
 * fds), but one whose set always has something ready never sleeps (iperf3's server in
 * select() with a data socket at EOF never saw its control connection's client die).
 * Per thread, so the cost is one more ppoll per interval at most.
 */
#define WAIT_TCP_CHECK_NS (10 * 1000000ull)
static __thread uint64_t tcp_checked_ns __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ shared helpers */

uint32_t wait_expand_mask(uint32_t m)
{
	if (m & CONN_MASK_FALLBACK)
		return CONN_MASK_FALLBACK;
	/* tcp_poll() reports the *NORM companions; applications may ask for them only. */
	if (m & POLLIN)
		m |= POLLRDNORM;
	if (m & POLLOUT)
		m |= POLLWRNORM;
	return m;
}

uint32_t wait_conn_mask(struct smc_conn *c)
{
	return wait_expand_mask(conn_poll_mask(c));
}

static uint64_t conn_local_bits(struct smc_conn *c)
{
	uint64_t state = (uint64_t)__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) & 0xf;
	uint64_t bits = state;

	bits |= (uint64_t)__atomic_load_n(&c->tcp_eof, __ATOMIC_RELAXED) << 4;
	bits |= (uint64_t)__atomic_load_n(&c->aborted, __ATOMIC_RELAXED) << 5;
	bits |= (uint64_t)__atomic_load_n(&c->shut_rd, __ATOMIC_RELAXED) << 6;
	bits |= (uint64_t)__atomic_load_n(&c->shut_wr, __ATOMIC_RELAXED) << 7;
	return bits;
}

/* Cursors occupy bits 0..47 (see ring.h); flags and local state go above them. */
uint64_t wait_rx_generation(struct smc_conn *c)
{
	uint64_t gen = conn_local_bits(c) << 56;
	struct shm_dir_ctl *d;

	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_ACTIVE)
		return gen;
	d = __atomic_load_n(&c->rx, __ATOMIC_ACQUIRE);
	if (!d)
		return gen;
	gen |= __atomic_load_n(&d->prod, __ATOMIC_ACQUIRE) & 0xffffffffffffull;
	gen |= (uint64_t)(__atomic_load_n(&d->wflags, __ATOMIC_ACQUIRE) & 0xff) << 48;
	return gen;
}

uint64_t wait_tx_generation(struct smc_conn *c)
{
	uint64_t gen = conn_local_bits(c) << 56;
	struct shm_dir_ctl *d;

	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != CONN_ACTIVE)
		return gen;
	d = __atomic_load_n(&c->tx, __ATOMIC_ACQUIRE);
	if (!d)
		return gen;
	gen |= __atomic_load_n(&d->cons, __ATOMIC_ACQUIRE) & 0xffffffffffffull;
	gen |= (uint64_t)(__atomic_load_n(&d->rflags, __ATOMIC_ACQUIRE) & 0xff) << 48;
	return gen;
}

uint32_t wait_fds_generation(struct smc_conn *c)
{
	uint32_t gen = (uint32_t)__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) & 0xf;

	/* conn_wait_fds() stops listing the TCP socket after its EOF (unless the peer went
	 * back to TCP: then it is the stream), and lists c->fd. */
	gen |= (uint32_t)(__atomic_load_n(&c->tcp_eof, __ATOMIC_RELAXED) &&
			  !__atomic_load_n(&c->peer_tcp, __ATOMIC_RELAXED)) << 4;
	gen |= (uint32_t)__atomic_load_n(&c->fd, __ATOMIC_RELAXED) << 5;
	return gen;
}

uint64_t wait_deadline(const struct timespec *timeout)
{
	uint64_t now, rel;

	if (!timeout)
		return UINT64_MAX;
	if (timeout->tv_sec < 0 || timeout->tv_nsec < 0)
		return 0;
	now = clock_now_ns();
	if ((uint64_t)timeout->tv_sec >= (UINT64_MAX - now) / 1000000000ull)
		return UINT64_MAX;
	rel = (uint64_t)timeout->tv_sec * 1000000000ull + (uint64_t)timeout->tv_nsec;
	return now + rel;
}

const struct timespec *wait_remaining(uint64_t deadline, struct timespec *ts)
{
	uint64_t now, left;

	if (deadline == UINT64_MAX)
		return NULL;
	now = clock_now_ns();
	left = deadline > now ? deadline - now : 0;
	ts->tv_sec = (time_t)(left / 1000000000ull);
	ts->tv_nsec = (long)(left % 1000000000ull);
	return ts;
}

bool wait_poll_involved(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		enum fd_kind k = fds[i].fd >= 0 ? fdtab_kind(fds[i].fd) : FD_NONE;

		if (k == FD_SMC || k == FD_EPOLL)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------------ poll core */

enum entry_kind { ENTRY_KERNEL = 0, ENTRY_SMC, ENTRY_EPOLL };

struct entry {
	enum entry_kind kind;
	struct smc_conn *c;      /* ENTRY_SMC: referenced */
	unsigned drained;        /* bells seen readable while sleeping: drain next prepare */
	short report;            /* revents bits that make this entry count as ready */
	uint32_t armed;          /* what conn_prepare_sleep armed: given back after the sleep */
};

struct poll_call {
	struct pollfd *fds;
	nfds_t n;
	struct entry *ent;
	struct pollfd *work;     /* n entries + wait fds appended while sleeping */
	nfds_t *owner;           /* appended wait fd -> entry index */
	unsigned *tag;           /* appended wait fd -> CONN_BELL_* / CONN_WAIT_TCP */
	nfds_t nkernel;          /* entries the kernel must look at (kernel + epoll) */
	nfds_t nsmc;             /* upgraded connections */
	const sigset_t *mask;
};

static uint32_t poll_interest(short events)
{
	uint32_t want = 0;

	if (events & (POLLIN | POLLRDNORM | POLLRDBAND | POLLPRI | POLLRDHUP))
		want |= POLLIN;
	if (events & (POLLOUT | POLLWRNORM | POLLWRBAND))
		want |= POLLOUT;
	/* POLLHUP and POLLERR are always reported: a waiter for neither data nor room
	 * still hears the peer's close, which the peer rings on the read side only while
	 * someone waits there (conn_release_fd) */
	return want ? want : POLLIN;
}

/* An SMC entry whose connection fell back to TCP is polled as the socket it is. */
static void entry_to_kernel(struct poll_call *pc, nfds_t i)
{
	struct entry *e = &pc->ent[i];

	conn_put(e->c);
	e->c = NULL;
	e->kind = ENTRY_KERNEL;
	pc->nkernel++;
	pc->nsmc--;
}

/* What poll reports for an SMC entry whose connection mask is m. */
static short smc_revents(const struct poll_call *pc, nfds_t i, uint32_t m)
{
	return (short)(m & ((uint32_t)(unsigned short)pc->fds[i].events | POLLERR | POLLHUP));
}

/* Recomputes SMC entries from state; `with_epoll` also asks the emulated epoll sets
 * (costs a syscall each). Returns entries whose revents hit their report mask. */
static int eval_state(struct poll_call *pc, bool with_epoll)
{
	int ready = 0;

	for (nfds_t i = 0; i < pc->n; i++) {
		struct entry *e = &pc->ent[i];
		short rev;

		if (e->kind == ENTRY_SMC) {
			uint32_t m = wait_conn_mask(e->c);

			if (m & CONN_MASK_FALLBACK) {
				entry_to_kernel(pc, i);
				continue;
			}
			pc->fds[i].revents = rev = smc_revents(pc, i, m);
		} else if (e->kind == ENTRY_EPOLL && with_epoll) {
			uint32_t m = epoll_emul_poll_mask(pc->fds[i].fd);

			/* the kernel's half of this entry is merged by eval_kernel */
			pc->fds[i].revents |= (short)(m & (uint32_t)pc->fds[i].events);
			rev = pc->fds[i].revents;
		} else {
			continue;
		}
		if (rev & e->report)
			ready++;
	}
	return ready;
}

/* Counts every ready entry (after eval_state and/or a kernel call filled revents). */
static int count_ready(struct poll_call *pc)
{
	int ready = 0;

	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->fds[i].revents & pc->ent[i].report)
			ready++;
	return ready;
}

/* Builds the kernel view of the set: kernel and epoll entries as they are, SMC entries
 * disabled (fd -1) and, when sleeping, their wait fds appended; when not sleeping, only
 * their TCP sockets, and only when `tcp`. Returns the length. */
static nfds_t build_work(struct poll_call *pc, bool sleeping, bool tcp)
{
	nfds_t len = pc->n;

	for (nfds_t i = 0; i < pc->n; i++) {
		pc->work[i] = pc->fds[i];
		pc->work[i].revents = 0;
		if (pc->ent[i].kind != ENTRY_SMC)
			continue;
		pc->work[i].fd = -1;
		if (!sleeping && !tcp)
			continue;
		struct pollfd wf[WAIT_FDS_PER_CONN];
		unsigned tags[WAIT_FDS_PER_CONN];
		int k = conn_wait_fds(pc->ent[i].c, poll_interest(pc->fds[i].events), wf, tags);

		for (int j = 0; j < k && j < WAIT_FDS_PER_CONN; j++) {
			if (!sleeping && tags[j] != CONN_WAIT_TCP)
				continue;
			pc->work[len] = wf[j];
			pc->work[len].revents = 0;
			pc->owner[len - pc->n] = i;
			pc->tag[len - pc->n] = tags[j];
			len++;
		}
	}
	return len;
}

/* Merges the kernel's answer for kernel/epoll entries into fds[].revents and routes
 * wait-fd hits to their SMC entry. */
static void absorb_work(struct poll_call *pc, nfds_t len)
{
	for (nfds_t i = 0; i < pc->n; i++) {
		if (pc->ent[i].kind == ENTRY_KERNEL)
			pc->fds[i].revents = pc->work[i].revents;
		else if (pc->ent[i].kind == ENTRY_EPOLL)
			pc->fds[i].revents |= pc->work[i].revents;
	}
	for (nfds_t j = pc->n; j < len; j++) {
		short rev = pc->work[j].revents;
		nfds_t i = pc->owner[j - pc->n];
		unsigned tag = pc->tag[j - pc->n];

		if (!rev || pc->ent[i].kind != ENTRY_SMC)
			continue;
		if (tag == CONN_WAIT_TCP)
			conn_tcp_event(pc->ent[i].c);
		else
			pc->ent[i].drained |= tag;
	}
}

/* One real ppoll over the kernel view. Returns -1 on error (errno set). */
static int eval_kernel(struct poll_call *pc, bool sleeping, const struct timespec *timeout)
{
	static const struct timespec zero = { 0, 0 };
	bool tcp = false;
	nfds_t len;
	int r;

	if (!sleeping && pc->nsmc) {
		uint64_t now = clock_now_ns();

		if (now - tcp_checked_ns >= WAIT_TCP_CHECK_NS) {
			tcp_checked_ns = now;
			tcp = true;
		}
	}
	if (!sleeping && pc->nkernel == 0 && !tcp)
		return 0;
	len = build_work(pc, sleeping, tcp);
	r = sandbox_ppoll(pc->work, len, sleeping ? timeout : &zero, pc->mask);
	if (r < 0)
		return -1;
	absorb_work(pc, len);
	return 0;
}

/* conn_prepare_sleep on every SMC entry and epoll entry. True when one became ready. */
static bool prepare_all(struct poll_call *pc)
{
	bool ready = false;

	for (nfds_t i = 0; i < pc->n; i++) {
		struct entry *e = &pc->ent[i];

		if (e->kind == ENTRY_SMC) {
			uint32_t m = conn_prepare_sleep(e->c, poll_interest(pc->fds[i].events),
							e->drained, &e->armed);

			e->drained = 0;
			if (m & CONN_MASK_FALLBACK) {
				entry_to_kernel(pc, i);
				ready = true; /* re-evaluate it as a socket before sleeping */
				continue;
			}
			if (smc_revents(pc, i, wait_expand_mask(m)) & e->report)
				ready = true;
		} else if (e->kind == ENTRY_EPOLL) {
			if (epoll_emul_prepare_sleep(pc->fds[i].fd) & (uint32_t)pc->fds[i].events)
				ready = true;
		}
	}
	return ready;
}

/* The sleep that followed prepare_all is over: the peers stop ringing for us. */
static void end_sleep_all(struct poll_call *pc)
{
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->ent[i].kind == ENTRY_SMC && pc->ent[i].armed) {
			conn_end_sleep(pc->ent[i].c, pc->ent[i].armed);
			pc->ent[i].armed = 0;
		}
}

/* One full evaluation: state + zero-timeout kernel. Returns ready count or -1. */
static int eval_all(struct poll_call *pc)
{
	for (nfds_t i = 0; i < pc->n; i++)
		pc->fds[i].revents = 0;
	eval_state(pc, true);
	if (eval_kernel(pc, false, NULL) < 0)
		return -1;
	return count_ready(pc);
}

/* Spinning helps only while some peer runs on another CPU. */
static bool spin_useful(struct poll_call *pc)
{
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->ent[i].kind == ENTRY_SMC && !conn_peer_on_my_cpu(pc->ent[i].c))
			return true;
	return false;
}

/* A look of the spin: the rings every time, the kernel's entries (zero-timeout) every
 * WAIT_SPIN_KERNEL_EVERY looks, and at once when a ring is ready, to report them too. */
static int spin_look(void *arg, unsigned n)
{
	struct poll_call *pc = arg;
	int r;

	if (n % WAIT_SPIN_KERNEL_EVERY == 0)
		return eval_all(pc);
	r = eval_state(pc, false);
	return r > 0 ? eval_all(pc) : r;
}

static int poll_loop(struct poll_call *pc, const struct timespec *timeout)
{
	uint64_t deadline = wait_deadline(timeout);
	bool spun = spin_ns() == 0;
	struct timespec left;

	for (;;) {
		int r = eval_all(pc);

		if (r != 0)
			return r;
		if (clock_now_ns() >= deadline)
			return 0;
		if (!spun) {
			spun = true;
			r = spin_useful(pc) ? spin_run(spin_look, pc, deadline) : 0;
			if (r != 0)
				return r;
		}
		if (prepare_all(pc)) {
			end_sleep_all(pc);
			continue;
		}
		for (nfds_t i = 0; i < pc->n; i++)
			pc->fds[i].revents = 0;
		r = eval_kernel(pc, true, wait_remaining(deadline, &left));
		end_sleep_all(pc);
		if (r < 0)
			return -1;
		eval_state(pc, true);
		r = count_ready(pc);
		if (r != 0)
			return r;
	}
}

/* Runs the poll core with per-entry report masks (NULL: poll's own rule). */
static int wait_poll_masked(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
			    const sigset_t *mask, const short *report)
{
	struct entry ent_s[WAIT_STACK_ENTRIES];
	struct pollfd work_s[WAIT_STACK_ENTRIES * (1 + WAIT_FDS_PER_CONN)];
	nfds_t owner_s[WAIT_STACK_ENTRIES * WAIT_FDS_PER_CONN];
	unsigned tag_s[WAIT_STACK_ENTRIES * WAIT_FDS_PER_CONN];
	struct poll_call pc = { .fds = fds, .n = n, .mask = mask };
	void *heap = NULL;
	int r, saved;

	if (n > (nfds_t)INT_MAX / (2 * (1 + WAIT_FDS_PER_CONN)) ||
	    (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 ||
			 timeout->tv_nsec >= 1000000000L))) {
		errno = EINVAL;
		return -1;
	}
	if (n <= WAIT_STACK_ENTRIES) {
		pc.ent = ent_s;
		pc.work = work_s;
		pc.owner = owner_s;
		pc.tag = tag_s;
	} else {
		/* one block, strictest alignment first: entries, owners, pollfds, tags */
		size_t nwait = n * WAIT_FDS_PER_CONN;

		heap = malloc(n * sizeof(struct entry) + nwait * sizeof(nfds_t) +
			      (n + nwait) * sizeof(struct pollfd) + nwait * sizeof(unsigned));
		if (!heap) {
			errno = ENOMEM;
			return -1;
		}
		pc.ent = heap;
		pc.owner = (nfds_t *)(pc.ent + n);
		pc.work = (struct pollfd *)(pc.owner + nwait);
		pc.tag = (unsigned *)(pc.work + n + nwait);
	}

	for (nfds_t i = 0; i < n; i++) {
		struct entry *e = &pc.ent[i];
		enum fd_kind k = fds[i].fd >= 0 ? fdtab_kind(fds[i].fd) : FD_NONE;
		struct smc_conn *c = k == FD_SMC ? conn_from_fd(fds[i].fd) : NULL;

		memset(e, 0, sizeof(*e));
		e->report = report ? report[i]
				   : (short)((unsigned short)fds[i].events | POLLERR | POLLHUP | POLLNVAL);
		if (c && !(wait_conn_mask(c) & CONN_MASK_FALLBACK)) {
			e->kind = ENTRY_SMC;
			e->c = c; /* conn_from_fd's reference, dropped at the end of the call */
			pc.nsmc++;
		} else {
			if (c)
				conn_put(c);
			e->kind = k == FD_EPOLL ? ENTRY_EPOLL : ENTRY_KERNEL;
			if (fds[i].fd >= 0)
				pc.nkernel++;
		}
	}

	bool emulated = false;

	for (nfds_t i = 0; i < n; i++)
		emulated |= pc.ent[i].kind != ENTRY_KERNEL;
	if (!emulated && !report) /* every SMC entry fell back to TCP */
		r = sandbox_ppoll(fds, n, timeout, mask);
	else
		r = poll_loop(&pc, timeout);
	saved = errno;
	for (nfds_t i = 0; i < n; i++)
		if (pc.ent[i].kind == ENTRY_SMC) {
			conn_note_undrained(pc.ent[i].c, pc.ent[i].drained);
			conn_put(pc.ent[i].c);
		}
	free(heap);
	errno = saved;
	return r;
}

int wait_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
	      const sigset_t *mask)
{
	return wait_poll_masked(fds, n, timeout, mask, NULL);
}

/* ------------------------------------------------------------------ select */

/* Linux's select() readiness sets (fs/select.c POLLIN_SET etc.). */
#define SEL_IN  (POLLRDNORM | POLLRDBAND | POLLIN | POLLHUP | POLLERR)
#define SEL_OUT (POLLWRBAND | POLLWRNORM | POLLOUT | POLLERR)
#define SEL_EX  (POLLPRI)

/* fd_set as a bit array: FD_ISSET's fortify check would abort beyond FD_SETSIZE, but the
 * kernel accepts larger sets from programs that allocate them. */
#define SEL_BITS (8 * sizeof(unsigned long))
static bool sel_isset(const fd_set *s, int fd)
{
	const unsigned long *w = (const unsigned long *)(const void *)s;

	return s && (w[fd / SEL_BITS] >> (fd % SEL_BITS)) & 1ul;
}
static void sel_set(fd_set *s, int fd)
{
	unsigned long *w = (unsigned long *)(void *)s;

	w[fd / SEL_BITS] |= 1ul << (fd % SEL_BITS);
}
static void sel_zero(fd_set *s, int nfds)
{
	if (s)
		memset(s, 0, ((size_t)nfds + SEL_BITS - 1) / SEL_BITS * sizeof(unsigned long));
}

int wait_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
		const sigset_t *mask)
{
	struct pollfd pfd_s[WAIT_STACK_ENTRIES];
	short rep_s[WAIT_STACK_ENTRIES] = { 0 };
	struct pollfd *pfd = pfd_s;
	short *rep = rep_s;
	nfds_t n = 0;
	int rc, count = 0;

	if (nfds < 0) {
		errno = EINVAL;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++)
		if (sel_isset(r, fd) || sel_isset(w, fd) || sel_isset(e, fd))
			n++;
	if (n > WAIT_STACK_ENTRIES) {
		pfd = malloc(n * (sizeof(*pfd) + sizeof(*rep)));
		if (!pfd) {
			errno = ENOMEM;
			return -1;
		}
		rep = (short *)(pfd + n);
	}
	n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0, report = POLLNVAL;

		if (sel_isset(r, fd)) {
			ev |= POLLIN;
			report |= SEL_IN;
		}
		if (sel_isset(w, fd)) {
			ev |= POLLOUT;
			report |= SEL_OUT;
		}
		if (sel_isset(e, fd)) {
			ev |= POLLPRI;
			report |= SEL_EX;
		}
		if (!ev)
			continue;
		pfd[n] = (struct pollfd){ .fd = fd, .events = ev };
		rep[n++] = report;
	}

	rc = wait_poll_masked(pfd, n, timeout, mask, rep);
	if (rc >= 0) {
		for (nfds_t i = 0; i < n; i++) {
			if (pfd[i].revents & POLLNVAL) {
				errno = EBADF;
				rc = -1;
				goto out;
			}
		}
		sel_zero(r, nfds);
		sel_zero(w, nfds);
		sel_zero(e, nfds);
		for (nfds_t i = 0; i < n; i++) {
			short rev = pfd[i].revents;
			int fd = pfd[i].fd;

			if ((pfd[i].events & POLLIN) && (rev & SEL_IN)) {
				sel_set(r, fd);
				count++;
			}
			if ((pfd[i].events & POLLOUT) && (rev & SEL_OUT)) {
				sel_set(w, fd);
				count++;
			}
			if ((pfd[i].events & POLLPRI) && (rev & SEL_EX)) {
				sel_set(e, fd);
				count++;
			}
		}
		rc = count;
	}
out:
	if (pfd != pfd_s) {
		int saved = errno;

		free(pfd);
		errno = saved;
	}
	return rc;
}
