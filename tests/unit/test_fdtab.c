/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the fd table (core/base/fdtab.c). */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "core/base/fdtab.h"


#define CHUNK 4096 /* entries per chunk in fdtab.c; tests only rely on it for placement */

static void *tag(uintptr_t v)
{
	return (void *)(v * 16 + 8);
}

START_TEST(capacity_covers_hard_limit)
{
	struct rlimit rl;
	int cap = fdtab_capacity();

	ck_assert_int_ge(cap, 1024);
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= INT_MAX)
		ck_assert_int_ge(cap, (int)rl.rlim_max);
}
END_TEST

START_TEST(set_get_clear)
{
	ck_assert_int_eq(fdtab_kind(7), FD_NONE);
	fdtab_set(7, FD_SMC, tag(7));
	ck_assert_int_eq(fdtab_kind(7), FD_SMC);
	struct fd_entry *e = fdtab_peek(7);
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_eq(e->obj, tag(7));
	ck_assert_ptr_eq(fdtab_get(7), e);

	fdtab_set(7, FD_LISTEN, tag(8));
	ck_assert_int_eq(fdtab_kind(7), FD_LISTEN);
	ck_assert_ptr_eq(fdtab_peek(7)->obj, tag(8));

	fdtab_clear(7);
	ck_assert_int_eq(fdtab_kind(7), FD_NONE);
	ck_assert_ptr_null(fdtab_peek(7)->obj);
	/* Neighbours untouched. */
	ck_assert_int_eq(fdtab_kind(6), FD_NONE);
	ck_assert_int_eq(fdtab_kind(8), FD_NONE);
}
END_TEST

START_TEST(fd_zero)
{
	fdtab_set(0, FD_TCP, tag(1));
	ck_assert_int_eq(fdtab_kind(0), FD_TCP);
	ck_assert_ptr_eq(fdtab_peek(0)->obj, tag(1));
	ck_assert_int_eq(fdtab_kind(1), FD_NONE);
	fdtab_clear(0);
	ck_assert_int_eq(fdtab_kind(0), FD_NONE);
}
END_TEST

START_TEST(peek_never_allocates)
{
	int cap = fdtab_capacity();
	int fd = cap > 3 * CHUNK ? 2 * CHUNK + 5 : cap - 1;

	/* A chunk nobody set: peek says "unknown" and get creates it. */
	ck_assert_ptr_null(fdtab_peek(fd));
	ck_assert_int_eq(fdtab_kind(fd), FD_NONE);
	ck_assert_ptr_nonnull(fdtab_get(fd));
	ck_assert_ptr_nonnull(fdtab_peek(fd));
	ck_assert_int_eq(fdtab_kind(fd), FD_NONE);
	/* Clearing an fd in a missing chunk is harmless. */
	fdtab_clear(cap > 5 * CHUNK ? 4 * CHUNK : 0);
}
END_TEST

START_TEST(large_fds)
{
	struct rlimit rl;

	/* Raise the soft limit as far as the hard limit allows, as a server would. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	int cap = fdtab_capacity();
	if (cap > 100000) {
		fdtab_set(100000, FD_SMC, tag(100000));
		ck_assert_int_eq(fdtab_kind(100000), FD_SMC);
		ck_assert_ptr_eq(fdtab_peek(100000)->obj, tag(100000));
		ck_assert_int_eq(fdtab_kind(99999), FD_NONE);
		ck_assert_int_eq(fdtab_kind(100001), FD_NONE);
		fdtab_clear(100000);
	}
	/* The last valid fd. */
	fdtab_set(cap - 1, FD_EPOLL, tag(3));
	ck_assert_int_eq(fdtab_kind(cap - 1), FD_EPOLL);
	ck_assert_ptr_eq(fdtab_peek(cap - 1)->obj, tag(3));
	fdtab_clear(cap - 1);
	ck_assert_int_eq(fdtab_kind(cap - 1), FD_NONE);
}
END_TEST

START_TEST(out_of_range)
{
	int cap = fdtab_capacity();

	ck_assert_ptr_null(fdtab_peek(-1));
	ck_assert_ptr_null(fdtab_get(-1));
	ck_assert_ptr_null(fdtab_peek(INT_MIN));
	ck_assert_ptr_null(fdtab_get(cap));
	ck_assert_ptr_null(fdtab_peek(cap));
	ck_assert_ptr_null(fdtab_get(INT_MAX));
	ck_assert_int_eq(fdtab_kind(-1), FD_NONE);
	ck_assert_int_eq(fdtab_kind(cap), FD_NONE);
	/* Setting or clearing out of range is ignored, not a crash. */
	fdtab_set(-1, FD_SMC, tag(1));
	fdtab_set(cap, FD_SMC, tag(1));
	fdtab_clear(-1);
	fdtab_clear(cap);
	ck_assert_int_eq(fdtab_kind(cap), FD_NONE);
}
END_TEST

START_TEST(next_tracked)
{
	int cap = fdtab_capacity();
	int far = cap > 20 * CHUNK ? 17 * CHUNK + 3 : cap - 1;

	ck_assert_int_eq(fdtab_next_tracked(0), -1);
	fdtab_set(10, FD_TCP, NULL);
	fdtab_set(CHUNK + 1, FD_SMC, NULL);
	fdtab_set(far, FD_LISTEN, NULL);
	ck_assert_int_eq(fdtab_next_tracked(0), 10);
	ck_assert_int_eq(fdtab_next_tracked(10), 10);
	ck_assert_int_eq(fdtab_next_tracked(11), CHUNK + 1);
	ck_assert_int_eq(fdtab_next_tracked(CHUNK + 2), far);
	ck_assert_int_eq(fdtab_next_tracked(far + 1), -1);
	ck_assert_int_eq(fdtab_next_tracked(-5), -1);
	ck_assert_int_eq(fdtab_next_tracked(INT_MAX), -1);
	fdtab_clear(CHUNK + 1);
	ck_assert_int_eq(fdtab_next_tracked(11), far);
	fdtab_clear(10);
	fdtab_clear(far);
	ck_assert_int_eq(fdtab_next_tracked(0), -1);
}
END_TEST

/* ---------------------------------------------------------------- concurrency */

#define THREADS 4
#define ROUNDS 64

static pthread_barrier_t start_line;
static int round_base[ROUNDS];

struct setter {
	int id;
};

/* Each thread sets every THREADS-th fd of a chunk nobody has touched yet, all threads
 * starting together, so they race to allocate the same chunk. */
static void *set_interleaved(void *arg)
{
	const struct setter *s = arg;

	for (int r = 0; r < ROUNDS; r++) {
		pthread_barrier_wait(&start_line);
		for (int i = s->id; i < CHUNK; i += THREADS) {
			int fd = round_base[r] + i;
			fdtab_set(fd, FD_SMC, tag((uintptr_t)fd));
		}
	}
	return NULL;
}

START_TEST(concurrent_sets_same_new_chunk)
{
	int cap = fdtab_capacity();
	int rounds = 0;
	/* Chunks 32.. are used by no other test (with CK_FORK=no all tests share one
	 * table); a small table falls back to chunks 1... */
	int first = cap >= (32 + ROUNDS) * CHUNK ? 32 : 1;

	for (int r = 0; r < ROUNDS; r++) {
		round_base[r] = (first + r) * CHUNK;
		if (round_base[r] + CHUNK <= cap)
			rounds = r + 1;
	}
	ck_assert_int_ge(rounds, 1);
	for (int r = rounds; r < ROUNDS; r++)
		round_base[r] = 0; /* small tables: repeat on chunk 0 */
	if (first == 32)
		for (int r = 0; r < rounds; r++)
			ck_assert_ptr_null(fdtab_peek(round_base[r]));

	pthread_t tid[THREADS];
	struct setter setters[THREADS];
	ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, THREADS), 0);
	for (int t = 0; t < THREADS; t++) {
		setters[t].id = t;
		ck_assert_int_eq(pthread_create(&tid[t], NULL, set_interleaved, &setters[t]), 0);
	}
	for (int t = 0; t < THREADS; t++)
		pthread_join(tid[t], NULL);
	pthread_barrier_destroy(&start_line);

	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < CHUNK; i++) {
			int fd = round_base[r] + i;
			ck_assert_msg(fdtab_kind(fd) == FD_SMC, "fd %d lost its kind", fd);
			ck_assert_msg(fdtab_peek(fd)->obj == tag((uintptr_t)fd), "fd %d lost its obj", fd);
		}
	}
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < CHUNK; i++)
			fdtab_clear(round_base[r] + i);
}
END_TEST

static Suite *fdtab_suite(void)
{
	Suite *s = suite_create("fdtab");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, capacity_covers_hard_limit);
	tcase_add_test(tc, set_get_clear);
	tcase_add_test(tc, fd_zero);
	tcase_add_test(tc, peek_never_allocates);
	tcase_add_test(tc, large_fds);
	tcase_add_test(tc, out_of_range);
	tcase_add_test(tc, next_tracked);
	tcase_add_test(tc, concurrent_sets_same_new_chunk);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fdtab_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
