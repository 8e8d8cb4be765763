/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for the client's per-connection rendezvous name (rdv_conn_listen,
 * core/base/rendezvous.c) when the name is taken: a name of our own that is being released
 * (a just-closed connection's, same 4-tuple) is waited for and then bound, while one
 * held by a socket that is no connection's (bound, never listened on; another user's
 * holder is the integration test rdv_squat.sh's) is given up, and stays its holder's.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/base/real.h"
#include "core/base/rendezvous.h"

static struct sockaddr_in endpoint(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

struct delayed_close {
	int fd;
	pthread_t tid;
};

static void *close_later(void *arg)
{
	struct delayed_close *d = arg;
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	nanosleep(&ts, NULL);
	close(d->fd);
	return NULL;
}

/* Our own name, released 10 ms later (by a progress thread, in the library): bound. */
START_TEST(own_name_being_released_is_waited_for)
{
	struct sockaddr_in local = endpoint(41001), peer = endpoint(41002);
	struct delayed_close d;
	int fd;

	d.fd = rdv_conn_listen((struct sockaddr *)&local, (struct sockaddr *)&peer);
	ck_assert_int_ge(d.fd, 0);
	ck_assert_int_eq(pthread_create(&d.tid, NULL, close_later, &d), 0);
	fd = rdv_conn_listen((struct sockaddr *)&local, (struct sockaddr *)&peer);
	ck_assert_int_eq(pthread_join(d.tid, NULL), 0);
	ck_assert_msg(fd >= 0, "rdv_conn_listen: %d", fd);
	close(fd);
}
END_TEST

/* The name rdv_conn_listen uses for (local, peer), learnt from a first call, then held
 * by a socket that never listens: whose it is cannot be asked, so it is waited for as a
 * stale name of our own is, then given up. */
START_TEST(foreign_holder_is_given_up)
{
	struct sockaddr_in local = endpoint(41003), peer = endpoint(41004);
	struct sockaddr_un un;
	socklen_t len = sizeof(un);
	int fd = rdv_conn_listen((struct sockaddr *)&local, (struct sockaddr *)&peer), holder, r;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&un, &len), 0);
	close(fd);
	/* the same name held by a socket that never listens */
	holder = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(holder, 0);
	ck_assert_int_eq(bind(holder, (struct sockaddr *)&un, len), 0);
	r = rdv_conn_listen((struct sockaddr *)&local, (struct sockaddr *)&peer);
	ck_assert_int_eq(r, -EADDRINUSE);
	/* still the holder's */
	ck_assert_int_eq(listen(holder, 4), 0);
	close(holder);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rdv_conn");
	TCase *tc = tcase_create("taken_name");
	SRunner *sr;
	int failed;

	real_init();
	tcase_add_test(tc, own_name_being_released_is_waited_for);
	tcase_add_test(tc, foreign_holder_is_given_up);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
