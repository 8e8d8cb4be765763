/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for a call waiting on a handshake decision (conn_wait_pending, core/conn/conn_wait.c):
 * the socket's timeouts, non-blocking sockets, and the watchdog that resets a
 * connection whose decision never comes. A connection that was never handed to the
 * progress thread is exactly one whose decision never comes, so the watchdog can be
 * made to fire here on purpose; in the library it must never (its log line says why
 * it did). And a decision that comes while the call is on its way into its wait ends
 * that wait at once.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/shm/shm.h"
#include "tests/unit/unit_net.h"

#define MS 1000000ll

/* A PENDING connection object on one end of a fresh loopback pair: the client's end
 * for CONN_CLIENT, the accepted one for CONN_SERVER. */
static struct smc_conn *pending_conn(int fds[2], enum conn_side side)
{
	struct smc_conn *c;

	tcp_pair(fds);
	c = conn_new(fds[side == CONN_CLIENT ? 0 : 1], side);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* conn_wait_pending(c, blocking, timeo_ns) with everything the library logs meanwhile
 * (it writes to fd 2) caught in log[cap]; returns the wait's result. */
static int wait_logged(struct smc_conn *c, int64_t timeo_ns, char *log, size_t cap)
{
	struct log_capture lc;
	int r;

	log_capture_begin(&lc);
	r = conn_wait_pending(c, false, timeo_ns);
	log_capture_end(&lc, log, cap);
	return r;
}

static void setup(void)
{
	real_init();
	smc_log_level = SMC_LOG_WARN;
	smc_cfg.handshake_timeout_ms = 20; /* the watchdog: 15 of them, 300 ms */
}

START_TEST(nonblocking_gets_eagain)
{
	int fds[2];
	struct smc_conn *c = pending_conn(fds, CONN_CLIENT);

	ck_assert_int_eq(conn_wait_pending(c, true, 0), -EAGAIN);
	ck_assert_int_eq(c->state, CONN_PENDING);
}
END_TEST

/* SO_RCVTIMEO / SO_SNDTIMEO shorter than the watchdog: EAGAIN at expiry, as TCP gives,
 * and the connection is left to its handshake. */
START_TEST(socket_timeout_gets_eagain)
{
	int fds[2];
	struct smc_conn *c = pending_conn(fds, CONN_CLIENT);
	char log[8192];

	ck_assert_int_eq(wait_logged(c, 50 * MS, log, sizeof(log)), -EAGAIN);
	ck_assert_int_eq(c->state, CONN_PENDING);
	ck_assert_msg(log[0] == '\0', "unexpected log: %s", log);
}
END_TEST

/* No decision ever comes: the waiting call resets the connection itself, the
 * application's next TCP call sees plain TCP (ECONNRESET from the reset), the peer gets
 * the reset, and the log says what state the connection was found in. */
START_TEST(watchdog_resets_undecided)
{
	int fds[2];
	struct smc_conn *c = pending_conn(fds, CONN_CLIENT);
	char log[8192], b;

	fdtab_set(fds[0], FD_SMC, c);
	ck_assert_int_eq(wait_logged(c, 0, log, sizeof(log)), 0);
	ck_assert_int_eq(c->state, CONN_FALLBACK);
	ck_assert_int_eq(c->reason, SMC_REASON_HANDSHAKE);
	ck_assert_msg(strstr(log, "handshake still undecided after 300 ms: resetting") != NULL,
		      "log: %s", log);
	ck_assert_msg(strstr(log, "(client side, never handed to the progress thread, "
				  "rendezvous fd -1, tcp eof 0, fd refs 1, object refs 1, "
				  "in the fd table)") != NULL, "log: %s", log);
	ck_assert_int_eq(recv(fds[1], &b, 1, 0), -1);
	ck_assert_int_eq(errno, ECONNRESET);
}
END_TEST

/* A socket timeout longer than the watchdog does not hold the watchdog back; a deferred
 * server connection not in the fd table is reported as such. */
START_TEST(watchdog_before_long_socket_timeout)
{
	int fds[2];
	struct smc_conn *c = pending_conn(fds, CONN_SERVER);
	char log[8192];

	c->deferred = true;
	ck_assert_int_eq(wait_logged(c, 5000 * MS, log, sizeof(log)), 0);
	ck_assert_int_eq(c->state, CONN_FALLBACK);
	ck_assert_msg(strstr(log, "(server side, never handed to the progress thread, deferred, "
				  "rendezvous fd -1, tcp eof 0, fd refs 1, object refs 1, "
				  "not in the fd table)") != NULL, "log: %s", log);
}
END_TEST

/* The progress thread's side of the race below: round after round, activates the
 * round's connection a few pauses after the waiting call set out. */
struct activator {
	pthread_t tid;
	struct smc_conn *_Atomic conn; /* this round's connection, NULL when done */
	atomic_uint round;             /* set by the waiter as it calls the wait */
	atomic_uint done;              /* the last round activated */
	atomic_bool stop;
};

static inline void pause_cpu(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

#define RACE_ROUNDS 10000u
#define RACE_MAX_PAUSES 16u /* activation 0..15 pauses after the call: around its entry */

static void *activator_main(void *arg)
{
	struct activator *a = arg;
	unsigned seen = 0;

	while (!atomic_load(&a->stop)) {
		unsigned r = atomic_load(&a->round);

		if (r == seen) {
			pause_cpu(); /* spinning: the round is caught at once */
			continue;
		}
		seen = r;
		for (unsigned i = 0; i < r % RACE_MAX_PAUSES; i++)
			pause_cpu();
		conn_activate(atomic_load(&a->conn));
		atomic_store(&a->done, r);
	}
	return NULL;
}

/* A connection whose handshake is decided (here: ACTIVE) just as a recv or send calls
 * the wait for it: the call saw PENDING, the wait finds the decision. That wait must end
 * at once, whatever moment the decision came at; one that took the connection for ACTIVE
 * and waited for no event until SO_RCVTIMEO expired lost a response the peer had already
 * written (the churn test's client saw EAGAIN after 10 s about twice in a million
 * cycles). Each round races the activation against the call's entry at another
 * offset; the socket timeout only bounds a round that loses. */
START_TEST(decision_while_entering_the_wait_ends_it)
{
	struct activator a = { 0 };
	int fds[2];

	tcp_pair(fds);
	ck_assert_int_eq(pthread_create(&a.tid, NULL, activator_main, &a), 0);
	for (unsigned round = 1; round <= RACE_ROUNDS; round++) {
		struct smc_conn *c = conn_new(fds[0], CONN_CLIENT);
		int memfd, r;

		ck_assert_ptr_nonnull(c);
		memfd = shm_create(16384, 16384, &c->map);
		ck_assert_int_ge(memfd, 0);
		close(memfd);
		atomic_store(&a.conn, c);
		atomic_store(&a.round, round);
		r = conn_wait_pending(c, false, 1000 * MS);
		ck_assert_msg(r == 0, "round %u: the wait returned %d with the connection %s",
			      round, r, c->state == CONN_ACTIVE ? "ACTIVE" : "not ACTIVE");
		while (atomic_load(&a.done) != round)
			sched_yield();
		ck_assert_int_eq(c->state, CONN_ACTIVE);
		conn_put(c);
	}
	atomic_store(&a.stop, true);
	pthread_join(a.tid, NULL);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

static Suite *conn_wait_suite(void)
{
	Suite *s = suite_create("conn_wait");
	TCase *tc = tcase_create("pending");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, nonblocking_gets_eagain);
	tcase_add_test(tc, socket_timeout_gets_eagain);
	tcase_add_test(tc, watchdog_resets_undecided);
	tcase_add_test(tc, watchdog_before_long_socket_timeout);
	suite_add_tcase(s, tc);
	/* 10,000 rounds of two threads: minutes on a loaded machine under the sanitizers */
	tc = tcase_create("racing");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, decision_while_entering_the_wait_ends_it);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(conn_wait_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
