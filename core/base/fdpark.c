/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/lib_threads.h"
#include "core/base/log.h"
#include "core/base/real.h"

/* Below this limit there is no park area: a quarter of it would not hold one
 * connection's descriptors. */
#define FD_PARK_MIN_LIMIT 32

/* The park area for the current limit: [*floor, *limit); false when there is none. A
 * program may lower its limit (to 64, say): the area moves down with it, so that the
 * library's descriptors still leave the lowest numbers to the program. */
static bool park_area(rlim_t *floor, rlim_t *limit)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur < FD_PARK_MIN_LIMIT)
		return false;
	*limit = rl.rlim_cur;
	*floor = rl.rlim_cur - rl.rlim_cur / 4;
	return true;
}

/*
 * The first descriptor parked in a process grows its fd table to the park area, and
 * the kernel, when the table is shared by several threads, waits for an RCU grace
 * period to do so: 22 ms measured (strace -tt of the crr client, RLIMIT_NOFILE 20000),
 * every thread of the process stalled, at its first SMC connection. Done at load it
 * costs tens of microseconds, since a process rarely has threads before its
 * constructors run. Kernel memory is 8 bytes per slot, so only up to this many slots:
 * past it (containers with a limit of a million) the first park pays as before.
 */
#define FD_PARK_PREPARE_MAX 65536

/* Below it select() sees descriptors, and programs pick numbers themselves. */
#define FD_LOW_FILL_TOP 1024
/* fd_park_low: the park area starts at least this far above FD_LOW_FILL_TOP. */
#define FD_PARK_LOW_ROOM 256

size_t fd_low_fill(int **fill)
{
	rlim_t floor, limit;
	int top = FD_LOW_FILL_TOP, null, *v;
	size_t n = 0;

	*fill = NULL;
	if (!park_area(&floor, &limit))
		return 0; /* a limit this low: there is no high place to land either */
	if (!lib_threads_caller_alone())
		return 0;
	if (floor < (rlim_t)top)
		top = (int)floor;
	null = REAL(open)("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0)
		return 0;
	v = malloc((size_t)top * sizeof(*v));
	if (!v || null >= top) {
		free(v);
		REAL(close)(null);
		return 0;
	}
	/* ours while they stand: a program closing "everything" meanwhile spares them */
	v[n++] = fd_own(null);
	for (;;) {
		int f = REAL(fcntl)(null, F_DUPFD_CLOEXEC, 0);

		if (f < 0)
			break;
		if (f >= top) {
			REAL(close)(f);
			break;
		}
		v[n++] = fd_own(f);
	}
	*fill = v;
	return n;
}

void fd_low_unfill(int *fill, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fd_own_close(fill[i]);
	free(fill);
}

void fd_park_prepare(void)
{
	rlim_t floor, limit;
	int fd, nfd;

	if (!park_area(&floor, &limit) || limit > FD_PARK_PREPARE_MAX)
		return;
	fd = REAL(open)("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)(limit - 1));
	if (nfd >= 0)
		REAL(close)(nfd);
	REAL(close)(fd);
}

/*
 * Packed at the top: the lowest free number in the top `span` slots, where span is what
 * the library holds (fd_budget.h) plus some room, doubled while those slots are full.
 * Filling the park area from its bottom instead would put the library's descriptors
 * where a growing application's next numbers go: an application holding more than
 * three quarters of its limit would get numbers above the library's block, beyond the
 * tables it sized by its own count (redis sizes its event loop to maxclients + 128 and
 * cannot watch a client with a higher number).
 */
/* A new descriptor of fd's file in the park area (CLOEXEC), or -1 when there is no room
 * there; with keep_parked, fd itself when it already sits there. */
static int park_dup(int fd, bool keep_parked)
{
	rlim_t floor, limit, span, start;
	int nfd;

	/* the application may raise its limit later (redis does): read it every time */
	if (!park_area(&floor, &limit))
		return -1;
	span = (rlim_t)fd_budget_held() + 16 + fd_budget_held() / 16;
	for (;;) {
		start = span < limit - floor ? limit - span : floor;
		if (keep_parked && (rlim_t)fd >= start)
			return fd;
		nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (int)start);
		if (nfd >= 0)
			return nfd;
		if (errno != EMFILE || start == floor)
			return -1;
		span *= 2;
	}
}

int fd_park(int fd)
{
	int nfd;

	if (fd < 0)
		return fd;
	nfd = park_dup(fd, true);
	if (nfd < 0 || nfd == fd)
		return fd_own(fd);
	fd_own_close(fd);
	return fd_own(nfd);
}

int fd_park_low(int fd)
{
	rlim_t floor, limit;
	int nfd;

	if (fd < 0)
		return fd;
	/* a low limit: its park area is below 1024 + FD_PARK_LOW_ROOM, as cheap to copy */
	if (!park_area(&floor, &limit) || floor < FD_LOW_FILL_TOP + FD_PARK_LOW_ROOM)
		return fd_park(fd);
	if (fd >= FD_LOW_FILL_TOP && (rlim_t)fd < floor)
		return fd_own(fd);
	nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, FD_LOW_FILL_TOP);
	if (nfd < 0 || (rlim_t)nfd >= floor) {
		if (nfd >= 0)
			REAL(close)(nfd);
		return fd_park(fd);
	}
	fd_own_close(fd);
	return fd_own(nfd);
}

int fd_park_dup(int fd)
{
	int nfd = park_dup(fd, false);

	if (nfd < 0) /* no room up there: where the kernel puts it */
		nfd = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0);
	return nfd < 0 ? -1 : fd_own(nfd);
}

/*
 * Numbers the program took over with dup2/dup3 (fd_own_taken): the owner still holds
 * the number but the file there is the program's, which our later close must not
 * touch. Rare (the library's fds sit where programs do not dup2 to), so a short list.
 */
#define FD_OWN_TAKEN_MAX 64
static pthread_mutex_t taken_lock = PTHREAD_MUTEX_INITIALIZER;
static int taken[FD_OWN_TAKEN_MAX];
static unsigned ntaken; /* read without the lock as a hint */

/* Removes fd from the taken list; true when it was there. */
static bool taken_drop(int fd)
{
	bool found = false;

	if (!__atomic_load_n(&ntaken, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&taken_lock);
	for (unsigned i = 0; i < ntaken; i++) {
		if (taken[i] == fd) {
			taken[i] = taken[--ntaken];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&taken_lock);
	return found;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* The open fds, sorted (NULL, 0 when /proc is not there or memory runs out). */
static int *list_open_fds(size_t *n)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int *v = NULL, dfd;
	size_t cap = 0;

	*n = 0;
	if (!d)
		return NULL;
	dfd = dirfd(d);
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || end == de->d_name || fd < 0 || fd > INT_MAX || fd == dfd)
			continue;
		if (*n == cap) {
			size_t ncap = cap ? 2 * cap : 64;
			int *m = realloc(v, ncap * sizeof(*v));

			if (!m) {
				free(v);
				closedir(d);
				*n = 0;
				return NULL;
			}
			v = m;
			cap = ncap;
		}
		v[(*n)++] = (int)fd;
	}
	closedir(d);
	qsort(v, *n, sizeof(*v), cmp_int);
	return v;
}

void fd_own_snapshot(struct fd_own_snapshot *s)
{
	s->fd = list_open_fds(&s->n);
}

enum adopt_kind { AK_EVENTPOLL, AK_EVENTFD, AK_TIMERFD, AK_PIPE, AK_SOCKET, AK_N };

static int adopt_kind(int fd)
{
	static const char *const prefix[AK_N] = {
		"anon_inode:[eventpoll]", "anon_inode:[eventfd]", "anon_inode:[timerfd]",
		"pipe:[", "socket:[",
	};
	char path[32], target[64];
	ssize_t len;
	int fl = REAL(fcntl)(fd, F_GETFD);

	if (fl < 0 || !(fl & FD_CLOEXEC) || fdtab_kind(fd) != FD_NONE)
		return -1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	len = readlink(path, target, sizeof(target) - 1);
	if (len <= 0)
		return -1;
	target[len] = '\0';
	for (int k = 0; k < AK_N; k++)
		if (!strncmp(target, prefix[k], strlen(prefix[k])))
			return k;
	return -1;
}

size_t fd_own_adopt(struct fd_own_snapshot *s, const struct fd_own_expect *expect, int *out,
		    size_t max)
{
	const unsigned limit[AK_N] = { expect->eventpoll, expect->eventfd, expect->timerfd,
				       expect->pipe, expect->socket };
	unsigned count[AK_N] = { 0 };
	size_t n, nnew = 0, adopted = 0;
	int *now = list_open_fds(&n);
	int *kind;

	/* without the first list every fd would look new: adopt nothing */
	if (!now || !s->fd) {
		free(now);
		free(s->fd);
		s->fd = NULL;
		return 0;
	}
	kind = malloc(n * sizeof(*kind));
	for (size_t i = 0; kind && i < n; i++) {
		if (bsearch(&now[i], s->fd, s->n, sizeof(*s->fd), cmp_int))
			continue;
		kind[nnew] = adopt_kind(now[i]);
		now[nnew] = now[i];
		if (kind[nnew] >= 0)
			count[kind[nnew]]++;
		nnew++;
	}
	for (size_t i = 0; kind && i < nnew; i++) {
		int k = kind[i];

		if (k < 0 || count[k] > limit[k] || adopted == max)
			continue;
		out[adopted++] = fd_own(now[i]);
	}
	for (int k = 0; k < AK_N; k++)
		if (count[k] > limit[k])
			log_debug("%u new fds of kind %d while a library made its own (%u "
				  "expected): left to the program", count[k], k, limit[k]);
	free(kind);
	free(now);
	free(s->fd);
	s->fd = NULL;
	return adopted;
}

int fd_own(int fd)
{
	if (fd >= 0) {
		/* the kernel gave the number to us again: it is no longer the program's */
		taken_drop(fd);
		fdtab_set(fd, FD_OWN, NULL);
	}
	return fd;
}

void fd_own_forget(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);
	uint8_t own = FD_OWN;

	/* only our mark: the number may already be the program's again (another kind) */
	if (e)
		__atomic_compare_exchange_n(&e->kind, &own, (uint8_t)FD_NONE, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static void (*taken_notify)(int fd);

void fd_own_taken_notify(void (*fn)(int fd))
{
	__atomic_store_n(&taken_notify, fn, __ATOMIC_RELEASE);
}

void fd_own_taken(int fd)
{
	void (*notify)(int) = __atomic_load_n(&taken_notify, __ATOMIC_ACQUIRE);

	if (!fd_is_own(fd))
		return;
	if (notify)
		notify(fd);
	log_info("fd %d: the program put its own file on one of the library's descriptors "
		 "(dup2/dup3)", fd);
	pthread_mutex_lock(&taken_lock);
	if (ntaken < FD_OWN_TAKEN_MAX) {
		taken[ntaken] = fd;
		__atomic_store_n(&ntaken, ntaken + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&taken_lock);
	fd_own_forget(fd);
}

int fd_own_close(int fd)
{
	if (taken_drop(fd))
		return 0; /* the program's file now: its to close */
	/* unmarked first: once closed, the number is the program's next socket() */
	fd_own_forget(fd);
	return REAL(close)(fd);
}

void fd_own_collect(unsigned int first, unsigned int last, int **keep, size_t *n)
{
	size_t cap = *n;

	if (first > INT_MAX)
		return;
	for (int fd = fdtab_next_tracked((int)first); fd >= 0 && (unsigned int)fd <= last;
	     fd = fd == INT_MAX ? -1 : fdtab_next_tracked(fd + 1)) {
		if (!fd_is_own(fd))
			continue;
		if (*n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			int *k = realloc(*keep, ncap * sizeof(**keep));

			if (!k)
				return; /* unspared: as before this registry existed */
			*keep = k;
			cap = ncap;
		}
		(*keep)[(*n)++] = fd;
	}
}


int fd_close_range_sparing(unsigned int first, unsigned int last, int flags, int *keep,
			   size_t n)
{
	unsigned int from = first;
	int rc = 0;

	qsort(keep, n, sizeof(*keep), cmp_int);
	for (size_t i = 0; i < n && from <= last; i++) {
		unsigned int k = (unsigned int)keep[i];

		if (k < from || k > last)
			continue;
		if (k > from && REAL(close_range)(from, k - 1, flags) < 0)
			rc = -1;
		if (k == UINT_MAX)
			return rc;
		from = k + 1;
	}
	if (from <= last && from >= first && REAL(close_range)(from, last, flags) < 0)
		rc = -1;
	return rc;
}
