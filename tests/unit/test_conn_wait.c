/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for a call waiting on a handshake decision (conn_wait_pending, core/conn.c):
 * the socket's timeouts, non-blocking sockets, and the watchdog that resets a
 * connection whose decision never comes. A connection that was never handed to the
 * progress thread is exactly one whose decision never comes, so the watchdog can be
 * made to fire here on purpose; in the library it must never (its log line says why
 * it did).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/config.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "core/log.h"
#include "core/real.h"
#include "core/stats.h"
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
