/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for libevent's descriptors parked as they are made (core/base/evlib_fds.h). */
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "core/base/evlib.h"
#include "core/base/evlib_fds.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"

#define FDS_MAX 8

/* A limit whose park area starts above 1024 + 256 where the hard limit allows, so that
 * fd_park_low puts the library's long-lived descriptors from 1024 up; returns the
 * lowest number a parked descriptor may have (the park area's start below that). */
static int raise_limit(void)
{
	struct rlimit rl;
	rlim_t floor;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= 4096) {
		rl.rlim_cur = 4096;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	floor = rl.rlim_cur - rl.rlim_cur / 4;
	return floor >= 1024 + 256 ? 1024 : (int)floor;
}

static int lowest_free(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	close(fd);
	return fd;
}

static bool is_epoll_set(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	return strcmp(link, "anon_inode:[eventpoll]") == 0;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	*(bool *)arg = true;
}

/* The library's own call: every descriptor the base is made with is parked (from 1024 up),
 * marked the library's, and noted; the numbers the program gets next are unchanged. */
START_TEST(library_base_is_parked)
{
	int fds[FDS_MAX], low, parked_from;
	struct event_base *base;
	size_t n;

	parked_from = raise_limit();
	ck_assert_int_eq(evlib_load(), 0);
	ck_assert(evlib_fds_redirected());
	low = lowest_free();
	evlib_fds_begin();
	smc_thread_internal = true;
	base = event_base_new();
	smc_thread_internal = false;
	n = evlib_fds_end(fds, FDS_MAX);
	ck_assert_ptr_nonnull(base);
	/* libevent 2.1: the epoll set and the signal socketpair at least */
	ck_assert_uint_ge(n, 3);
	for (size_t i = 0; i < n; i++) {
		ck_assert_int_ge(fds[i], parked_from);
		ck_assert(fd_is_own(fds[i]));
	}
	ck_assert_int_eq(lowest_free(), low);
	/* and the base works with them: a timer fires through its epoll set */
	struct timeval tv = { 0, 1000 };
	bool fired = false;

	ck_assert_int_eq(event_base_once(base, -1, EV_TIMEOUT, on_timer, &fired, &tv), 0);
	ck_assert_int_eq(event_base_loop(base, EVLOOP_ONCE), 0);
	ck_assert(fired);
	/* libevent closes them itself */
	for (size_t i = 0; i < n; i++)
		fd_own_forget(fds[i]);
	event_base_free(base);
}
END_TEST

/* The program's call into the same copy: libc's functions, untouched. */
START_TEST(program_base_is_untouched)
{
	int fds[FDS_MAX], low;
	struct event_base *base;

	raise_limit();
	ck_assert_int_eq(evlib_load(), 0);
	low = lowest_free();
	evlib_fds_begin();
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	ck_assert_uint_eq(evlib_fds_end(fds, FDS_MAX), 0);
	/* its epoll set took the lowest free number, as without the library */
	ck_assert(is_epoll_set(low));
	ck_assert(!fd_is_own(low));
	event_base_free(base);
	ck_assert_int_eq(lowest_free(), low);
}
END_TEST

/* A libevent the program loaded before the library's first need is the program's: no
 * slot of it is redirected (the progress thread's start fills low numbers instead). */
START_TEST(program_copy_left_alone)
{
	const char *fork_mode = getenv("CK_FORK");
	void *mine;

	if (fork_mode && strcmp(fork_mode, "no") == 0)
		return; /* evlib_load ran in this process already */
	mine = dlopen(LIBEVENT_CORE_SONAME, RTLD_NOW | RTLD_GLOBAL);
	ck_assert_ptr_nonnull(mine);
	ck_assert_int_eq(evlib_load(), 0);
	ck_assert(!evlib_fds_redirected());
}
END_TEST

static Suite *evlib_fds_suite(void)
{
	Suite *s = suite_create("evlib_fds");
	TCase *tc = tcase_create("core");

	/* first: the others load the library's copy (in this process when CK_FORK=no) */
	tcase_add_test(tc, program_copy_left_alone);
	tcase_add_test(tc, library_base_is_parked);
	tcase_add_test(tc, program_base_is_untouched);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(evlib_fds_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
