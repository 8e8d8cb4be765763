/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for the judgement of whether an exec's new program loads the library
 * (core/sock/exec_image.c): a wrong yes would hand a connection's rings to a program
 * that reads the TCP socket. "The library" is this test program's own file here, which
 * LD_PRELOAD names through /proc/self/exe.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/sock/sock.h"

static char dir[64];
static char *const env_us[] = { "PATH=/usr/bin:/bin", "LD_PRELOAD=/proc/self/exe", NULL };
static char *const env_other[] = { "LD_PRELOAD=/bin/true", NULL };
static char *const env_none[] = { "HOME=/", NULL };

static void copy_file(const char *from, const char *to, mode_t mode)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "/bin/cp '%s' '%s'", from, to);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(chmod(to, mode), 0);
}

static const char *in_dir(const char *name)
{
	static char path[4][128];
	static int next;
	char *p = path[next++ % 4];

	snprintf(p, 128, "%s/%s", dir, name);
	return p;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(chmod(path, mode), 0);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/smc-exec-image-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "/bin/rm -rf '%s'", dir);
	(void)system(cmd);
}

START_TEST(dynamic_program_with_our_preload)
{
	ck_assert(exec_image_runs_library("/bin/true", false, env_us));
	/* not when LD_PRELOAD names another file, or nothing */
	ck_assert(!exec_image_runs_library("/bin/true", false, env_other));
	ck_assert(!exec_image_runs_library("/bin/true", false, env_none));
	ck_assert(!exec_image_runs_library("/bin/true", false, NULL));
	ck_assert(!exec_image_runs_library(NULL, false, env_us));
	ck_assert(!exec_image_runs_library("/nonexistent/prog", false, env_us));
}
END_TEST

START_TEST(static_program)
{
	/* Debian's ldconfig is a static-pie binary: ld.so never runs, nor our constructor */
	ck_assert(!exec_image_runs_library("/sbin/ldconfig", false, env_us));
}
END_TEST

START_TEST(foreign_class)
{
	static const unsigned char elf32[64] = { 0x7f, 'E', 'L', 'F', 1, 1, 1 };
	int fd = open(in_dir("elf32"), O_WRONLY | O_CREAT | O_TRUNC, 0755);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, elf32, sizeof(elf32)), (ssize_t)sizeof(elf32));
	close(fd);
	ck_assert(!exec_image_runs_library(in_dir("elf32"), false, env_us));
	/* not executable at all */
	write_file(in_dir("data"), "just text\n", 0644);
	ck_assert(!exec_image_runs_library(in_dir("data"), false, env_us));
}
END_TEST

/* /bin/true patched at `from` (len bytes) into `to`, written as name. */
static void patched_true(const char *name, const void *from, const void *to, size_t len)
{
	FILE *f = fopen("/bin/true", "rb");
	static char buf[1 << 20];
	size_t n;
	char *at;
	int fd;

	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	at = memmem(buf, n, from, len);
	ck_assert_ptr_nonnull(at);
	memcpy(at, to, len);
	fd = open(in_dir(name), O_WRONLY | O_CREAT | O_TRUNC, 0755);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
	close(fd);
}

/* /bin/true with its loader's name changed in place (PT_INTERP): another loader (musl's,
 * say) could not load this library */
START_TEST(another_loader)
{
	patched_true("other-loader", "/ld-linux", "/ld-other", 9);
	ck_assert(!exec_image_runs_library(in_dir("other-loader"), false, env_us));
}
END_TEST

/* A Go program built with cgo is dynamically linked by our loader, but its runtime
 * does socket I/O with its own system calls: known by its "Go" note or its sections. */
START_TEST(go_programs)
{
	/* the GNU build-id note (namesz 4, descsz 20, type 3, "GNU") made a Go one */
	static const unsigned char gnu[16] = { 4, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0 };
	static const unsigned char go[16] = { 3, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, 'G', 'o', 0, 0 };

	patched_true("go-note", gnu, go, sizeof(gnu));
	ck_assert(exec_image_is_go(in_dir("go-note")));
	ck_assert(!exec_image_runs_library(in_dir("go-note"), false, env_us));
	patched_true("go-section", ".note.gnu.build-id", ".note.go.buildid\0\0", 18);
	ck_assert(exec_image_is_go(in_dir("go-section")));
	ck_assert(!exec_image_runs_library(in_dir("go-section"), false, env_us));
	ck_assert(!exec_image_is_go("/bin/true"));
	ck_assert(!exec_image_is_go("/nonexistent/prog"));
}
END_TEST

START_TEST(scripts_follow_their_interpreter)
{
	char text[256];

	write_file(in_dir("sh-script"), "#!/bin/sh\nexit 0\n", 0755);
	ck_assert(exec_image_runs_library(in_dir("sh-script"), false, env_us));
	write_file(in_dir("static-script"), "#! /sbin/ldconfig -p\n", 0755);
	ck_assert(!exec_image_runs_library(in_dir("static-script"), false, env_us));
	/* a script run by a script: followed */
	snprintf(text, sizeof(text), "#!%s\n", in_dir("sh-script"));
	write_file(in_dir("nested"), text, 0755);
	ck_assert(exec_image_runs_library(in_dir("nested"), false, env_us));
	/* a relative interpreter is not judged */
	write_file(in_dir("relative"), "#!sh\n", 0755);
	ck_assert(!exec_image_runs_library(in_dir("relative"), false, env_us));
	/* a loop of scripts ends */
	snprintf(text, sizeof(text), "#!%s\n", in_dir("loop"));
	write_file(in_dir("loop"), text, 0755);
	ck_assert(!exec_image_runs_library(in_dir("loop"), false, env_us));
}
END_TEST

START_TEST(secure_execution)
{
	/* set-user-ID and set-group-ID: ld.so ignores a preload named by a path */
	copy_file("/bin/true", in_dir("suid"), 04755);
	ck_assert(!exec_image_runs_library(in_dir("suid"), false, env_us));
	copy_file("/bin/true", in_dir("sgid"), 02755);
	ck_assert(!exec_image_runs_library(in_dir("sgid"), false, env_us));
	copy_file("/bin/true", in_dir("plain"), 0755);
	ck_assert(exec_image_runs_library(in_dir("plain"), false, env_us));
	/* file capabilities (cap_net_raw, permitted, as ping has): secure execution too */
	{
		/* struct vfs_cap_data, revision 2 */
		uint32_t cap[5] = { 0x02000000u, 1u << 13, 0, 0, 0 };

		if (setxattr(in_dir("plain"), "security.capability", cap, sizeof(cap), 0) == 0)
			ck_assert(!exec_image_runs_library(in_dir("plain"), false, env_us));
	}
}
END_TEST

START_TEST(path_search)
{
	char *const env[] = { "LD_PRELOAD=/proc/self/exe", NULL };
	char path_env[160];

	copy_file("/bin/true", in_dir("found-me"), 0755);
	snprintf(path_env, sizeof(path_env), "/nonexistent:%s", dir);
	ck_assert_int_eq(setenv("PATH", path_env, 1), 0);
	ck_assert(exec_image_runs_library("found-me", true, env));
	ck_assert(!exec_image_runs_library("not-there", true, env));
	/* without the search, a bare name is a file in the working directory */
	ck_assert(!exec_image_runs_library("found-me", false, env));
	/* a name with a slash is never searched */
	ck_assert(exec_image_runs_library(in_dir("found-me"), true, env));
}
END_TEST

START_TEST(execveat_paths)
{
	char buf[64];

	ck_assert_str_eq(exec_image_at(AT_FDCWD, "/bin/true", 0, buf, sizeof(buf)), "/bin/true");
	ck_assert_str_eq(exec_image_at(AT_FDCWD, "true", 0, buf, sizeof(buf)), "true");
	ck_assert_str_eq(exec_image_at(5, "", AT_EMPTY_PATH, buf, sizeof(buf)), "/proc/self/fd/5");
	ck_assert_str_eq(exec_image_at(5, "bin/true", 0, buf, sizeof(buf)), "/proc/self/fd/5/bin/true");
	ck_assert_ptr_null(exec_image_at(5, "", 0, buf, sizeof(buf)));
	ck_assert_ptr_null(exec_image_at(5, NULL, 0, buf, sizeof(buf)));
}
END_TEST

static Suite *exec_image_suite(void)
{
	Suite *s = suite_create("exec_image");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, dynamic_program_with_our_preload);
	tcase_add_test(tc, static_program);
	tcase_add_test(tc, foreign_class);
	tcase_add_test(tc, another_loader);
	tcase_add_test(tc, go_programs);
	tcase_add_test(tc, scripts_follow_their_interpreter);
	tcase_add_test(tc, secure_execution);
	tcase_add_test(tc, path_search);
	tcase_add_test(tc, execveat_paths);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(exec_image_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
