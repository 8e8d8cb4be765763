/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for rdv_dir_usable (core/base/rendezvous.c): the path rendezvous directory is
 * used only when no other user can replace it, or anything on the way to it. Another
 * user's directory, a symlink of another user's to a good directory (nobody could
 * retarget it between a client's bind and a server's connect), a good directory
 * inside another user's: all refused. A directory of ours, or a sticky world-writable
 * one: used. The cases with another user need root (chown); they are skipped otherwise.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/real.h"
#include "core/base/rendezvous.h"

#define OTHER_UID 65534 /* nobody */

static char top[64];

#define NAME_MAX_LEN 128 /* top, a slash and a short name */

static void use_dir(const char *d)
{
	smc_cfg.rdv_dir = d;
}

static void path_of(char *buf, const char *name)
{
	snprintf(buf, NAME_MAX_LEN, "%s/%.32s", top, name);
}

static void setup(void)
{
	snprintf(top, sizeof(top), "/tmp/test_rdv_dir.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(top));
	ck_assert_int_eq(chmod(top, 0755), 0);
}

static void teardown(void)
{
	char cmd[sizeof(top) + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(own_directory_is_used)
{
	char d[NAME_MAX_LEN];

	path_of(d, "own");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	use_dir(d);
	ck_assert(rdv_dir_usable());
	/* 1733, as smc_preload.sh --setup makes it */
	ck_assert_int_eq(chmod(d, 01733), 0);
	ck_assert(rdv_dir_usable());
}
END_TEST

START_TEST(writable_without_sticky_is_refused)
{
	char d[NAME_MAX_LEN];

	path_of(d, "open");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	ck_assert_int_eq(chmod(d, 0777), 0);
	use_dir(d);
	ck_assert(!rdv_dir_usable());
}
END_TEST

START_TEST(missing_directory_is_not_used)
{
	char d[NAME_MAX_LEN];

	path_of(d, "none");
	use_dir(d);
	ck_assert(!rdv_dir_usable());
}
END_TEST

START_TEST(another_users_directory_is_refused)
{
	char d[NAME_MAX_LEN];

	if (geteuid() != 0)
		return;
	path_of(d, "theirs");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	ck_assert_int_eq(chown(d, OTHER_UID, OTHER_UID), 0);
	use_dir(d);
	ck_assert(!rdv_dir_usable());
}
END_TEST

START_TEST(another_users_symlink_is_refused)
{
	char d[NAME_MAX_LEN], l[2 * NAME_MAX_LEN], sticky[NAME_MAX_LEN];

	if (geteuid() != 0)
		return;
	/* a sticky world-writable parent, as /tmp */
	path_of(sticky, "tmp");
	ck_assert_int_eq(mkdir(sticky, 0755), 0);
	ck_assert_int_eq(chmod(sticky, 01777), 0);
	path_of(d, "good");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	snprintf(l, sizeof(l), "%s/link", sticky);
	ck_assert_int_eq(symlink(d, l), 0);
	ck_assert_int_eq(lchown(l, OTHER_UID, OTHER_UID), 0);
	use_dir(l);
	ck_assert(!rdv_dir_usable());
	/* the same link of ours: what it leads to is checked, and is good */
	ck_assert_int_eq(lchown(l, 0, 0), 0);
	ck_assert(rdv_dir_usable());
}
END_TEST

START_TEST(good_directory_inside_another_users_is_refused)
{
	char d[NAME_MAX_LEN], inner[2 * NAME_MAX_LEN];

	if (geteuid() != 0)
		return;
	path_of(d, "home");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	snprintf(inner, sizeof(inner), "%s/smc", d);
	ck_assert_int_eq(mkdir(inner, 0755), 0);
	use_dir(inner);
	ck_assert(rdv_dir_usable());
	/* its owner could rename our directory away and put one of theirs there */
	ck_assert_int_eq(chown(d, OTHER_UID, OTHER_UID), 0);
	ck_assert(!rdv_dir_usable());
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rdv_dir");
	TCase *tc = tcase_create("usable");
	SRunner *sr;
	int failed;

	real_init();
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, own_directory_is_used);
	tcase_add_test(tc, writable_without_sticky_is_refused);
	tcase_add_test(tc, missing_directory_is_not_used);
	tcase_add_test(tc, another_users_directory_is_refused);
	tcase_add_test(tc, another_users_symlink_is_refused);
	tcase_add_test(tc, good_directory_inside_another_users_is_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
