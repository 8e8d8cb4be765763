/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the registry of the library's own fds (core/base/fdpark.h). */
#include <check.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/base/fdpark.h"
#include "core/base/fdtab.h"

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static bool has(const int *v, size_t n, int fd)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == fd)
			return true;
	return false;
}

START_TEST(park_marks_close_unmarks)
{
	int fd = fd_park(eventfd(0, EFD_CLOEXEC));

	ck_assert_int_ge(fd, 0);
	ck_assert(fd_is_own(fd));
	ck_assert_int_eq(fd_own_close(fd), 0);
	ck_assert(!fd_is_own(fd));
	ck_assert(!is_open(fd));
}
END_TEST

START_TEST(park_dup_keeps_the_original)
{
	int fd = eventfd(0, EFD_CLOEXEC), d;
	uint64_t v = 7, got = 0;
	struct rlimit rl;

	fdtab_set(fd, FD_TCP, NULL);
	d = fd_park_dup(fd);
	ck_assert_int_ge(d, 0);
	ck_assert_int_ne(d, fd);
	/* the same file, a descriptor of the library's, closed on exec */
	ck_assert_int_eq(write(fd, &v, sizeof(v)), sizeof(v));
	ck_assert_int_eq(read(d, &got, sizeof(got)), sizeof(got));
	ck_assert_uint_eq(got, 7);
	ck_assert(fd_is_own(d));
	ck_assert(fcntl(d, F_GETFD) & FD_CLOEXEC);
	ck_assert_int_eq(fdtab_kind(fd), FD_TCP);
	/* parked in the top quarter of the limit, where the program's numbers do not go */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= 256) {
		int d2 = fd_park_dup(d); /* of one parked already: parked too, a new one */

		ck_assert_int_ge(d, (int)(rl.rlim_cur - rl.rlim_cur / 4));
		ck_assert_int_ne(d2, d);
		ck_assert_int_ge(d2, (int)(rl.rlim_cur - rl.rlim_cur / 4));
		ck_assert_int_eq(fd_own_close(d2), 0);
	}
	ck_assert_int_eq(fd_own_close(d), 0);
	ck_assert(is_open(fd));
	fdtab_clear(fd);
	close(fd);
	ck_assert_int_eq(fd_park_dup(fd), -1);
}
END_TEST

START_TEST(forget_leaves_other_kinds)
{
	int fd = eventfd(0, EFD_CLOEXEC);

	/* the number is the program's (another kind) when our unmark comes late */
	fdtab_set(fd, FD_TCP, NULL);
	fd_own_forget(fd);
	ck_assert_int_eq(fdtab_kind(fd), FD_TCP);
	fdtab_clear(fd);
	close(fd);
}
END_TEST

START_TEST(collect_in_range)
{
	int a = fd_own(eventfd(0, EFD_CLOEXEC)), b = fd_own(eventfd(0, EFD_CLOEXEC));
	int plain = eventfd(0, EFD_CLOEXEC);
	int *keep = NULL;
	size_t n = 0;

	ck_assert_int_lt(a, b);
	fd_own_collect(0, ~0U, &keep, &n);
	ck_assert(has(keep, n, a) && has(keep, n, b) && !has(keep, n, plain));
	free(keep);
	keep = NULL;
	n = 0;
	fd_own_collect((unsigned)a + 1, ~0U, &keep, &n);
	ck_assert(!has(keep, n, a) && has(keep, n, b));
	free(keep);
	fd_own_close(a);
	fd_own_close(b);
	close(plain);
}
END_TEST

START_TEST(taken_by_the_program)
{
	int own = fd_own(eventfd(0, EFD_CLOEXEC));
	int prog = eventfd(0, 0);

	/* the program dup2s its file onto our number: ours goes, the program's stays */
	fd_own_taken(own);
	ck_assert(!fd_is_own(own));
	ck_assert_int_eq(dup2(prog, own), own);
	ck_assert_int_eq(fd_own_close(own), 0);
	ck_assert(is_open(own)); /* the program's, not closed by our late close */
	close(own);
	/* the number made ours again later is closed by its owner as usual */
	ck_assert_int_eq(fd_own(dup2(prog, own)), own);
	ck_assert_int_eq(fd_own_close(own), 0);
	ck_assert(!is_open(own));
	close(prog);
}
END_TEST

START_TEST(adopt_what_appeared)
{
	const struct fd_own_expect expect = { .eventpoll = 1, .eventfd = 1, .pipe = 2 };
	struct fd_own_snapshot s;
	int out[8], p[2], q[2], ev;
	size_t n;

	fd_own_snapshot(&s);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ev = eventfd(0, EFD_CLOEXEC);
	ck_assert_int_eq(pipe(q), 0); /* not close-on-exec: no library's */
	n = fd_own_adopt(&s, &expect, out, 8);
	ck_assert_uint_eq(n, 3);
	ck_assert(has(out, n, p[0]) && has(out, n, p[1]) && has(out, n, ev));
	ck_assert(fd_is_own(p[0]) && fd_is_own(p[1]) && fd_is_own(ev));
	ck_assert(!fd_is_own(q[0]) && !fd_is_own(q[1]));
	for (size_t i = 0; i < n; i++)
		fd_own_close(out[i]);
	close(q[0]);
	close(q[1]);
}
END_TEST

START_TEST(adopt_nothing_ambiguous)
{
	const struct fd_own_expect expect = { .eventfd = 1 };
	struct fd_own_snapshot s;
	int out[8], a, b;

	/* two where the library makes one: another thread made one of them */
	fd_own_snapshot(&s);
	a = eventfd(0, EFD_CLOEXEC);
	b = eventfd(0, EFD_CLOEXEC);
	ck_assert_uint_eq(fd_own_adopt(&s, &expect, out, 8), 0);
	ck_assert(!fd_is_own(a) && !fd_is_own(b));
	close(a);
	close(b);
}
END_TEST

static Suite *fd_own_suite(void)
{
	Suite *s = suite_create("fd_own");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, park_marks_close_unmarks);
	tcase_add_test(tc, park_dup_keeps_the_original);
	tcase_add_test(tc, forget_leaves_other_kinds);
	tcase_add_test(tc, collect_in_range);
	tcase_add_test(tc, taken_by_the_program);
	tcase_add_test(tc, adopt_what_appeared);
	tcase_add_test(tc, adopt_nothing_ambiguous);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fd_own_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
