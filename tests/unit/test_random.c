/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the random values (core/base/random.c), through its source seam. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "core/base/random.h"

static int calls;

static ssize_t source_fails(void *buf, size_t len, unsigned int flags)
{
	(void)buf;
	(void)len;
	(void)flags;
	calls++;
	errno = ENOSYS;
	return -1;
}

static ssize_t source_zeros(void *buf, size_t len, unsigned int flags)
{
	(void)flags;
	calls++;
	memset(buf, 0, len);
	return (ssize_t)len;
}

/* One byte per call, interrupted every other call: a cut read must be read on. */
static ssize_t source_trickle(void *buf, size_t len, unsigned int flags)
{
	(void)flags;
	(void)len;
	if (calls++ % 2 == 0) {
		errno = EINTR;
		return -1;
	}
	*(uint8_t *)buf = (uint8_t)(0xa0 + calls);
	return 1;
}

START_TEST(secret_fails_closed)
{
	uint8_t buf[16];

	random_set_source(source_fails);
	ck_assert_int_eq(random_secret(buf, sizeof(buf)), -ENOSYS);
	ck_assert_uint_eq(random_secret64(), 0);
	random_set_source(NULL);
}
END_TEST

START_TEST(secret_never_zero)
{
	random_set_source(source_zeros);
	calls = 0;
	ck_assert_uint_eq(random_secret64(), 0);
	ck_assert_int_gt(calls, 1); /* asked again before it gave up */
	random_set_source(NULL);
}
END_TEST

START_TEST(secret_reads_on)
{
	uint8_t buf[4];

	random_set_source(source_trickle);
	calls = 0;
	ck_assert_int_eq(random_secret(buf, sizeof(buf)), 0);
	ck_assert_int_eq(calls, 8);
	ck_assert_uint_eq(buf[0], 0xa2);
	ck_assert_uint_eq(buf[3], 0xa8);
	random_set_source(NULL);
}
END_TEST

START_TEST(weak_tolerates_failure)
{
	uint64_t a, b;

	random_set_source(source_fails);
	a = random_weak64();
	b = random_weak64();
	random_set_source(NULL);
	ck_assert_uint_ne(a, 0);
	ck_assert_uint_ne(a, b); /* the clock moved */
}
END_TEST

START_TEST(kernel_source)
{
	uint64_t a = random_secret64(), b = random_secret64();

	ck_assert_uint_ne(a, 0);
	ck_assert_uint_ne(a, b);
	ck_assert_uint_ne(random_weak64(), 0);
}
END_TEST

static Suite *random_suite(void)
{
	Suite *s = suite_create("random");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, secret_fails_closed);
	tcase_add_test(tc, secret_never_zero);
	tcase_add_test(tc, secret_reads_on);
	tcase_add_test(tc, weak_tolerates_failure);
	tcase_add_test(tc, kernel_source);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(random_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
