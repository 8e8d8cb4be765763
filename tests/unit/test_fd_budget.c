/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the library's descriptor budget (core/base/fd_budget.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/base/fd_budget.h"
#include "core/base/stats.h"

#define LIMIT 1024

static void set_limit(rlim_t soft)
{
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	ck_assert_msg(rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= soft,
		      "hard RLIMIT_NOFILE below %lu", (unsigned long)soft);
	rl.rlim_cur = soft;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* The rule counts /proc/self/fd at most every 100 ms: past that interval now. */
static void past_recount_interval(void)
{
	struct timespec ts = { 0, 120 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

/* Opens descriptors until the process holds `total` (the test's own included). */
static void hold_fds(int total)
{
	int fd = open("/dev/null", O_RDONLY);

	ck_assert_int_ge(fd, 0);
	while (fd + 1 < total)
		ck_assert_int_ge(fd = dup(fd), 0);
}

START_TEST(plenty_of_room)
{
	set_limit(LIMIT);
	ck_assert(fd_budget_allows(10, FD_COST_CONN));
	ck_assert(fd_budget_allows(-1, 65));
	ck_assert_uint_eq(fd_budget_held(), 0);
}
END_TEST

/* What the library holds counts four times against what the program leaves free. */
START_TEST(held_counts_against_the_free_room)
{
	set_limit(LIMIT);
	fd_budget_take(200);
	ck_assert(fd_budget_allows(10, FD_COST_CONN));
	fd_budget_take(50);
	/* 4 * (250 + 7) > 1024 - 11, and the count of /proc/self/fd agrees */
	ck_assert(!fd_budget_allows(10, FD_COST_CONN));
	past_recount_interval();
	ck_assert(!fd_budget_allows(10, FD_COST_CONN));
	fd_budget_give(50);
	ck_assert(fd_budget_allows(10, FD_COST_CONN));
	fd_budget_give(200);
	ck_assert_uint_eq(fd_budget_held(), 0);
}
END_TEST

/* The program's own descriptors: a high fd number alone refuses until /proc/self/fd is
 * counted, which shows the program holds few; holding them for real refuses. */
START_TEST(program_descriptors)
{
	set_limit(LIMIT);
	/* the estimate (fd 1000: 24 free) refuses, the count finds a handful: allowed */
	ck_assert(fd_budget_allows(1000, FD_COST_CONN));
	hold_fds(1000);
	past_recount_interval();
	ck_assert(!fd_budget_allows(999, FD_COST_CONN));
	/* a pool decision (no socket) sees the same count */
	ck_assert(!fd_budget_allows(-1, FD_COST_CONN));
}
END_TEST

/* The limit is read at each decision: the program may raise or lower it. */
START_TEST(limit_read_each_time)
{
	set_limit(LIMIT);
	fd_budget_take(200);
	ck_assert(fd_budget_allows(10, FD_COST_CONN));
	set_limit(512);
	ck_assert(!fd_budget_allows(10, FD_COST_CONN));
	set_limit(4096);
	ck_assert(fd_budget_allows(10, FD_COST_CONN));
	fd_budget_give(200);
}
END_TEST

static int pressure_calls;

static void on_pressure(void)
{
	pressure_calls++;
}

/* Every refusal for an application socket asks the caches for their descriptors; one
 * for a pool (app_fd -1, made under the pool's own lock) never does. */
START_TEST(pressure_hook)
{
	set_limit(LIMIT);
	fd_budget_on_pressure(on_pressure);
	fd_budget_take(300);
	ck_assert(!fd_budget_allows(-1, FD_COST_CONN));
	ck_assert_int_eq(pressure_calls, 0);
	ck_assert(!fd_budget_allows(10, FD_COST_CONN));
	ck_assert_int_eq(pressure_calls, 1);
	/* also within the interval of the count */
	ck_assert(!fd_budget_allows(10, FD_COST_CONN));
	ck_assert_int_eq(pressure_calls, 2);
	fd_budget_give(300);
	ck_assert(fd_budget_allows(10, FD_COST_CONN));
	ck_assert_int_eq(pressure_calls, 2);
}
END_TEST

START_TEST(reasons)
{
	ck_assert_int_eq(fd_budget_reason_for(-EMFILE), SMC_REASON_FD_LIMIT);
	ck_assert_int_eq(fd_budget_reason_for(ENFILE), SMC_REASON_FD_LIMIT);
	ck_assert_int_eq(fd_budget_reason_for(-ENOMEM), SMC_REASON_RESOURCES);
	ck_assert_int_eq(fd_budget_reason_for(EINVAL), SMC_REASON_RESOURCES);
}
END_TEST

static Suite *fd_budget_suite(void)
{
	Suite *s = suite_create("fd_budget");
	TCase *tc = tcase_create("core");

	/* each test in its own process (the default): the counter starts at zero */
	tcase_add_test(tc, plenty_of_room);
	tcase_add_test(tc, held_counts_against_the_free_room);
	tcase_add_test(tc, program_descriptors);
	tcase_add_test(tc, limit_read_each_time);
	tcase_add_test(tc, pressure_hook);
	tcase_add_test(tc, reasons);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fd_budget_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
