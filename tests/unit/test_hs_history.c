/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the one-shot clients' shared history (core/negotiate/hs_history.c). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/negotiate/hs_history.h"
#include "core/negotiate/hs_policy.h"

#define MS 1000000ull
#define SHORT_NS (10 * MS) /* SMC_SHORT_CONN_US=10000 */
#define DEST 0x1234567890abcdefull

static char dir[] = "/tmp/smc-hist-test.XXXXXX";
static char path[sizeof(dir) + 64];

static void setup(void)
{
	ck_assert_ptr_nonnull(mkdtemp(strcpy(dir, "/tmp/smc-hist-test.XXXXXX")));
	snprintf(path, sizeof(path), "%s/smc-preload-hist-%u", dir, (unsigned)geteuid());
	hs_history_set_dir(dir);
	hs_history_set_command("redis-cli ping");
}

static void teardown(void)
{
	unlink(path);
	rmdir(dir);
	hs_history_set_dir(NULL);
	hs_history_set_command(NULL);
}

/* n first connections of n one-shot processes, each with verdict `is_short`, from *now
 * on; each must have been admitted. */
static void processes(int n, bool is_short, uint64_t *now)
{
	for (int i = 0; i < n; i++) {
		ck_assert_msg(hs_history_admit(DEST, *now, SHORT_NS), "process %d not admitted", i);
		*now += MS;
		hs_history_closed(DEST, is_short, *now, SHORT_NS);
	}
}

START_TEST(first_connect_once)
{
	ck_assert(hs_history_first_connect());
	ck_assert(!hs_history_first_connect());
	ck_assert(!hs_history_first_connect());
}
END_TEST

START_TEST(short_run_then_tcp_then_probe)
{
	uint64_t now = 1000 * MS;

	processes(HS_POLICY_SHORT_RUN, true, &now);
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
	ck_assert(!hs_history_admit(DEST, now + HS_POLICY_PROBE_NS / 2, SHORT_NS));
	/* a probe a second later, one only */
	now += HS_POLICY_PROBE_NS;
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
	ck_assert(!hs_history_admit(DEST, now + MS, SHORT_NS));
	/* the probe short again: still TCP */
	hs_history_closed(DEST, true, now + MS, SHORT_NS);
	ck_assert(!hs_history_admit(DEST, now + 2 * MS, SHORT_NS));
	/* a probe that was not short gives the command back to SMC */
	now += 2 * HS_POLICY_PROBE_NS;
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
	hs_history_closed(DEST, false, now + MS, SHORT_NS);
	processes(HS_POLICY_SHORT_RUN - 1, true, &now);
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
}
END_TEST

START_TEST(one_long_breaks_the_run)
{
	uint64_t now = 1000 * MS;

	processes(HS_POLICY_SHORT_RUN - 1, true, &now);
	processes(1, false, &now);
	processes(HS_POLICY_SHORT_RUN - 1, true, &now);
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
}
END_TEST

START_TEST(per_command_and_destination)
{
	uint64_t now = 1000 * MS;

	processes(HS_POLICY_SHORT_RUN, true, &now);
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
	ck_assert(hs_history_admit(DEST + 1, now, SHORT_NS));
	hs_history_set_command("redis-cli --rdb dump.rdb");
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
	hs_history_set_command("redis-cli ping");
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
}
END_TEST

START_TEST(off_with_short_conn_zero)
{
	uint64_t now = 1000 * MS;

	for (int i = 0; i < 2 * HS_POLICY_SHORT_RUN; i++) {
		ck_assert(hs_history_admit(DEST, now, 0));
		hs_history_closed(DEST, true, now + MS, 0);
		now += 2 * MS;
	}
	ck_assert_int_eq(access(path, F_OK), -1); /* nothing was written */
	/* and a table that says TCP is not read */
	processes(HS_POLICY_SHORT_RUN, true, &now);
	ck_assert(hs_history_admit(DEST, now, 0));
}
END_TEST

START_TEST(untrusted_file_ignored)
{
	uint64_t now = 1000 * MS;

	processes(HS_POLICY_SHORT_RUN, true, &now);
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
	/* open to others: anyone could have written it */
	ck_assert_int_eq(chmod(path, 0622), 0);
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
	ck_assert_int_eq(chmod(path, 0600), 0);
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
	if (geteuid() == 0) { /* another user's file under our name */
		ck_assert_int_eq(chown(path, 65534, 65534), 0);
		ck_assert(hs_history_admit(DEST, now, SHORT_NS));
		ck_assert_int_eq(chown(path, 0, 0), 0);
	}
	/* a symbolic link in its place is not followed */
	ck_assert_int_eq(rename(path, "/tmp/smc-hist-test-moved"), 0);
	ck_assert_int_eq(symlink("/tmp/smc-hist-test-moved", path), 0);
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
	hs_history_closed(DEST, true, now, SHORT_NS); /* neither written through */
	unlink(path);
	unlink("/tmp/smc-hist-test-moved");
}
END_TEST

START_TEST(forged_slot_ignored)
{
	uint64_t now = 1000 * MS;
	char junk[4096];
	int fd;

	processes(HS_POLICY_SHORT_RUN, true, &now);
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
	/* every slot scribbled over (a torn write, or our own program's bug) */
	memset(junk, 0x5a, sizeof(junk));
	fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	for (off_t off = 16; off < 16 + 512 * 32; off += (off_t)sizeof(junk))
		ck_assert_int_gt(pwrite(fd, junk, sizeof(junk), off), 0);
	close(fd);
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
	/* a file of the wrong size is not ours either */
	processes(HS_POLICY_SHORT_RUN, true, &now);
	ck_assert(!hs_history_admit(DEST, now, SHORT_NS));
	ck_assert_int_eq(truncate(path, 100), 0);
	ck_assert(hs_history_admit(DEST, now, SHORT_NS));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("hs_history");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, first_connect_once);
	tcase_add_test(tc, short_run_then_tcp_then_probe);
	tcase_add_test(tc, one_long_breaks_the_run);
	tcase_add_test(tc, per_command_and_destination);
	tcase_add_test(tc, off_with_short_conn_zero);
	tcase_add_test(tc, untrusted_file_ignored);
	tcase_add_test(tc, forged_slot_ignored);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
