/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/fd_budget.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"

static unsigned held;         /* descriptors the library keeps (atomic) */
static unsigned reserved;     /* descriptors decided upgrades will create (atomic) */
static unsigned app_estimate; /* descriptors the application holds, estimated (atomic) */
static uint64_t last_count_ns; /* when /proc/self/fd was last counted (atomic) */
static void (*pressure_hook)(void); /* atomic */

/* /proc/self/fd is counted at most this often: with tens of thousands of descriptors
 * one count costs milliseconds, and it is only asked for when the estimate refuses. */
#define RECOUNT_INTERVAL_NS 100000000ull

void fd_budget_take(unsigned n)
{
	__atomic_add_fetch(&held, n, __ATOMIC_RELAXED);
}

void fd_budget_give(unsigned n)
{
	__atomic_sub_fetch(&held, n, __ATOMIC_RELAXED);
}

void fd_budget_on_pressure(void (*fn)(void))
{
	__atomic_store_n(&pressure_hook, fn, __ATOMIC_RELAXED);
}

void fd_budget_relieve(void)
{
	void (*hook)(void) = __atomic_load_n(&pressure_hook, __ATOMIC_RELAXED);

	if (hook)
		hook();
}

void fd_budget_reserve(unsigned n)
{
	__atomic_add_fetch(&reserved, n, __ATOMIC_RELAXED);
}

void fd_budget_unreserve(unsigned n)
{
	__atomic_sub_fetch(&reserved, n, __ATOMIC_RELAXED);
}

unsigned fd_budget_held(void)
{
	return __atomic_load_n(&held, __ATOMIC_RELAXED);
}

int fd_budget_reason_for(int err)
{
	if (err < 0)
		err = -err;
	return err == EMFILE || err == ENFILE ? SMC_REASON_FD_LIMIT : SMC_REASON_RESOURCES;
}

/* fs.nr_open caps the table whatever the soft limit says (an infinite limit, or one
 * raised past it by a privileged process). Read once: only root changes it. */
static uint64_t nr_open(void)
{
	static uint64_t cached;
	uint64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	char buf[32];
	ssize_t n;
	int fd;

	if (v)
		return v;
	v = 1048576; /* the kernel's default */
	fd = REAL(open)("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = REAL(read)(fd, buf, sizeof(buf) - 1);
		if (n > 0) {
			buf[n] = '\0';
			if (strtoull(buf, NULL, 10) > 0)
				v = strtoull(buf, NULL, 10);
		}
		REAL(close)(fd);
	}
	__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	return v;
}

/* The limit the kernel applies to the next descriptor, read now: the application may
 * have raised or lowered it since the last decision. 0 when unknown. */
static uint64_t nofile_limit(void)
{
	struct rlimit rl;
	uint64_t cap = nr_open();

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur == RLIM_INFINITY || (uint64_t)rl.rlim_cur > cap)
		return cap;
	return (uint64_t)rl.rlim_cur;
}

/* The descriptors the application holds, exactly: every open one minus the library's
 * and the directory's own. -1 when they cannot be counted (no /proc, or no descriptor
 * left to open it with). */
static long count_app_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	long n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
			n++;
	closedir(d);
	n -= 1 + (long)fd_budget_held();
	return n < 0 ? 0 : n;
}

static bool rule_holds(uint64_t limit, uint64_t app, unsigned n)
{
	uint64_t lib = (uint64_t)fd_budget_held() + n;

	lib += __atomic_load_n(&reserved, __ATOMIC_RELAXED);
	return app < limit && 4 * lib <= limit - app;
}

/*
 * The estimate of the application's descriptors is the highest count seen: each
 * decision raises it to the number of the fd being upgraded plus one (the kernel hands
 * out the lowest free number, so a program's new sockets number about as many as it
 * holds, while the library's sit in the park area above). It overestimates when the
 * program closed descriptors below, or when its numbers reach the park area; so
 * before refusing, the real count is taken from /proc/self/fd (rate-limited), which
 * replaces the estimate.
 */
bool fd_budget_allows(int app_fd, unsigned n)
{
	uint64_t limit = nofile_limit(), now;
	unsigned est = __atomic_load_n(&app_estimate, __ATOMIC_RELAXED);
	void (*hook)(void);
	unsigned before;
	long counted;

	if (limit == 0)
		return false;
	while (app_fd >= 0 && (unsigned)app_fd + 1 > est &&
	       !__atomic_compare_exchange_n(&app_estimate, &est, (unsigned)app_fd + 1, true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	if (app_fd >= 0 && (unsigned)app_fd + 1 > est)
		est = (unsigned)app_fd + 1;
	if (rule_holds(limit, est, n))
		return true;
	now = clock_now_ns();
	if (now - __atomic_load_n(&last_count_ns, __ATOMIC_RELAXED) >= RECOUNT_INTERVAL_NS) {
		__atomic_store_n(&last_count_ns, now, __ATOMIC_RELAXED);
		counted = count_app_fds();
		if (counted >= 0) {
			__atomic_store_n(&app_estimate, (unsigned)counted, __ATOMIC_RELAXED);
			if (rule_holds(limit, (uint64_t)counted, n))
				return true;
			log_debug("fd budget: %u held, %ld of the application's, limit %llu: "
				  "no upgrade", fd_budget_held(), counted,
				  (unsigned long long)limit);
		}
	}
	/* Refused: what the library keeps only as a cache goes back (at every refusal: a
	 * program growing fast makes many within one count's interval, and the hook finds
	 * nothing to do once it has run), and the rule is asked again if it freed any. */
	hook = __atomic_load_n(&pressure_hook, __ATOMIC_RELAXED);
	if (!hook || app_fd < 0)
		return false;
	before = fd_budget_held();
	hook();
	return fd_budget_held() < before &&
	       rule_holds(limit, __atomic_load_n(&app_estimate, __ATOMIC_RELAXED), n);
}
