/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Kernel epoll registrations of TCP sockets that may still be upgraded: see
 * epoll_track.h. A small fd-indexed table of lists under one lock; only sockets that
 * have not connected yet are recorded, so the table stays short and plain TCP traffic
 * never touches it (accepted sockets and sockets whose connect went ahead as TCP carry
 * FDF_TCP_FINAL).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/readiness/epoll.h"
#include "core/readiness/epoll_track.h"

struct track_reg {
	int epfd;
	uint32_t events;
	uint64_t data;
	bool forked;        /* made before a fork: the set is shared with another process */
	bool fired;         /* adoption: a one-shot registration the kernel disabled */
	struct track_reg *next;
};

static pthread_mutex_t track_lock = PTHREAD_MUTEX_INITIALIZER;
/* A fork found track_lock held past its patience: no record can be told apart. */
static bool all_forked;
static struct track_reg **track_by_fd;
static size_t track_len;
static int track_count; /* fds with records; atomic reads: the close fast path */

/* Bits the kernel keeps when a one-shot registration fires (fs/eventpoll.c
 * EP_PRIVATE_BITS): a registration showing nothing else is disabled. */
#define EP_PRIVATE (EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE)

bool epoll_track_wanted(int fd)
{
	return fdtab_kind(fd) == FD_TCP && !(fdtab_flags(fd) & FDF_TCP_FINAL);
}

static struct track_reg **slot_of(int fd, bool grow)
{
	if (fd < 0)
		return NULL;
	if ((size_t)fd >= track_len) {
		size_t n = track_len ? track_len : 64;
		struct track_reg **p;

		if (!grow)
			return NULL;
		while (n <= (size_t)fd)
			n *= 2;
		p = realloc(track_by_fd, n * sizeof(*p));
		if (!p)
			return NULL;
		memset(p + track_len, 0, (n - track_len) * sizeof(*p));
		track_by_fd = p;
		track_len = n;
	}
	return &track_by_fd[fd];
}

static struct track_reg *find(struct track_reg *r, int epfd)
{
	while (r && r->epfd != epfd)
		r = r->next;
	return r;
}

static void free_list(struct track_reg *r)
{
	while (r) {
		struct track_reg *next = r->next;

		free(r);
		r = next;
	}
}

/* Records what a successful epoll_ctl did; false when it could not (no memory). */
static bool record(int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct track_reg **head = slot_of(fd, op != EPOLL_CTL_DEL), *r, **pp;

	if (!head)
		return op == EPOLL_CTL_DEL;
	r = find(*head, epfd);
	if (op == EPOLL_CTL_DEL) {
		for (pp = head; *pp; pp = &(*pp)->next) {
			if (*pp == r) {
				*pp = r->next;
				free(r);
				break;
			}
		}
		if (r && !*head)
			track_count--;
		return true;
	}
	/* an ADD that finds a record: the old set behind that number is gone */
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return false;
		r->epfd = epfd;
		if (!*head)
			track_count++;
		r->next = *head;
		*head = r;
	}
	r->events = ev->events;
	r->data = ev->data.u64;
	if (op == EPOLL_CTL_ADD)
		r->forked = false;
	return true;
}

int epoll_track_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	int r = REAL(epoll_ctl)(epfd, op, fd, ev), saved = errno;
	bool ok;

	if (r < 0)
		return r;
	pthread_mutex_lock(&track_lock);
	ok = record(epfd, op, fd, ev);
	pthread_mutex_unlock(&track_lock);
	if (!ok) /* the kernel holds a registration we do not know: it must stay TCP */
		fdtab_flags_set(fd, FDF_TRACK_LOST);
	errno = saved;
	return r;
}

static struct track_reg *take(int fd);

void epoll_track_forget_fd(int fd)
{
	free_list(take(fd));
}

/* The kernel's current events of fd's registration in epfd (/proc/self/fdinfo), or -1
 * when it cannot tell. */
static long kernel_events(int epfd, int fd)
{
	char path[64], buf[4096], *line;
	size_t have = 0;
	long found = -1;
	ssize_t n;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	f = REAL(open)(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -1;
	/* one line per registration: "tfd: %8d events: %8x data: ..." */
	while (found < 0 && (n = REAL(read)(f, buf + have, sizeof(buf) - 1 - have)) > 0) {
		char *end;

		have += (size_t)n;
		buf[have] = '\0';
		line = buf;
		while ((end = strchr(line, '\n'))) {
			int tfd;
			unsigned ev;

			*end = '\0';
			if (sscanf(line, "tfd: %d events: %x", &tfd, &ev) == 2 && tfd == fd) {
				found = ev;
				break;
			}
			line = end + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* a line longer than the buffer: not ours */
	}
	REAL(close)(f);
	return found;
}

/* Another fd with records names the same socket as fd (dup before the registration). */
static bool recorded_under_dup(int fd)
{
	struct stat me, st;

	if (fstat(fd, &me) < 0)
		return true;
	for (size_t i = 0; i < track_len; i++) {
		if ((int)i == fd || !track_by_fd[i])
			continue;
		if (fstat((int)i, &st) < 0 || (st.st_ino == me.st_ino && st.st_dev == me.st_dev))
			return true;
	}
	return false;
}

enum smc_reason epoll_track_check(int fd)
{
	enum smc_reason why = SMC_REASON_NONE;
	struct track_reg **head;

	if (fdtab_flags(fd) & FDF_TRACK_LOST)
		return SMC_REASON_READINESS;
	if (__atomic_load_n(&track_count, __ATOMIC_RELAXED) == 0)
		return SMC_REASON_NONE;
	pthread_mutex_lock(&track_lock);
	head = slot_of(fd, false);
	for (struct track_reg *r = head ? *head : NULL; r && !why; r = r->next) {
		if (r->forked || __atomic_load_n(&all_forked, __ATOMIC_RELAXED))
			why = SMC_REASON_READINESS;
		else if ((r->events & EPOLLONESHOT) && kernel_events(r->epfd, fd) < 0 &&
			 REAL(fcntl)(r->epfd, F_GETFD) >= 0)
			why = SMC_REASON_READINESS; /* a live set whose state we cannot read */
	}
	/* the emulation names a registration by fd number: one made through a dup would
	 * stay with the kernel */
	if (!why && (fdtab_flags(fd) & FDF_DUPED) && recorded_under_dup(fd))
		why = SMC_REASON_READINESS;
	pthread_mutex_unlock(&track_lock);
	return why;
}

/* Puts registration r back into the kernel's set after a failed adoption. */
static void back_to_kernel(int fd, const struct track_reg *r)
{
	struct epoll_event ev = { .events = r->events, .data.u64 = r->data };

	if (REAL(epoll_ctl)(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST)
		log_warn("epoll: fd %d cannot rejoin epoll %d: %d", fd, r->epfd, errno);
}

/* Takes fd's records out of the table. */
static struct track_reg *take(int fd)
{
	struct track_reg **head, *list = NULL;

	if (__atomic_load_n(&track_count, __ATOMIC_RELAXED) == 0)
		return NULL;
	pthread_mutex_lock(&track_lock);
	head = slot_of(fd, false);
	if (head && *head) {
		list = *head;
		*head = NULL;
		track_count--;
	}
	pthread_mutex_unlock(&track_lock);
	return list;
}

static void put_back(int fd, struct track_reg *list);

int epoll_track_adopt(int fd, struct smc_conn *c)
{
	struct track_reg *list = take(fd), *r, **pp, *failed = NULL;
	int saved = errno, n = 0;

	if (!list)
		return 0;

	for (pp = &list; (r = *pp);) {
		struct epoll_event ev = { .events = r->events, .data.u64 = r->data };

		if (r->events & EPOLLONESHOT) {
			long k = kernel_events(r->epfd, fd);

			r->fired = k >= 0 && !((uint32_t)k & ~(uint32_t)EP_PRIVATE);
		}
		/* the kernel says whether the registration still exists (a closed set) */
		if (REAL(epoll_ctl)(r->epfd, EPOLL_CTL_DEL, fd, NULL) < 0) {
			*pp = r->next;
			free(r);
			continue;
		}
		if (epoll_emul_adopt(r->epfd, fd, c, &ev, r->fired) < 0) {
			log_warn("epoll: fd %d cannot move into the emulation of epoll %d: %d",
				 fd, r->epfd, errno);
			failed = r;
			break;
		}
		pp = &r->next;
	}
	if (failed) {
		for (r = list; r; r = r->next) {
			if (r != failed)
				epoll_emul_unadopt(r->epfd, fd);
			back_to_kernel(fd, r);
			if (r == failed)
				break;
		}
	}
	for (r = list; r; r = r->next)
		n++;
	/* the records stay: for epoll_track_undo, or the kernel's registrations again */
	put_back(fd, list);
	errno = saved;
	return failed ? -1 : n;
}

void epoll_track_undo(int fd)
{
	struct track_reg *list = take(fd);
	int saved = errno;

	for (struct track_reg *r = list; r; r = r->next) {
		epoll_emul_unadopt(r->epfd, fd);
		back_to_kernel(fd, r);
	}
	put_back(fd, list);
	errno = saved;
}

static void put_back(int fd, struct track_reg *list)
{
	struct track_reg **head;

	if (!list)
		return;
	pthread_mutex_lock(&track_lock);
	head = slot_of(fd, true);
	if (head && !*head) {
		*head = list;
		track_count++;
		list = NULL;
	}
	pthread_mutex_unlock(&track_lock);
	free_list(list);
}

static void mark_forked(void)
{
	for (size_t i = 0; i < track_len; i++)
		for (struct track_reg *r = track_by_fd[i]; r; r = r->next)
			r->forked = true;
}

/* Whether the forking thread holds track_lock (forklock.h): only then may the fork
 * handlers walk the records; otherwise every record of the process counts as made
 * before a fork. */
static bool fork_walk;

bool epoll_track_fork_lock(void)
{
	enum forklock_result r = forklock_take(&track_lock);

	if (r == FORKLOCK_BUSY)
		return false;
	fork_walk = r == FORKLOCK_TAKEN;
	return true;
}

static void fork_done(void)
{
	if (fork_walk)
		mark_forked();
	else
		__atomic_store_n(&all_forked, true, __ATOMIC_RELAXED);
}

/* forklock_parent / forklock_child release or re-initialise the lock. */
void epoll_track_atfork_parent(void)
{
	fork_done();
}

void epoll_track_atfork_child(void)
{
	fork_done();
}
