/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Helpers for unit tests that drive core code on real sockets: a loopback TCP pair, and
 * catching what the library logs (it writes to fd 2) while a call runs.
 */
#ifndef SMC_TESTS_UNIT_NET_H
#define SMC_TESTS_UNIT_NET_H

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connected TCP pair over loopback: fds[0] the client, fds[1] the accepted one. */
static inline void tcp_pair(int fds[2])
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fds[0], 0);
	ck_assert_int_eq(connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
	fds[1] = accept(lfd, NULL, NULL);
	ck_assert_int_ge(fds[1], 0);
	close(lfd);
}

/* fd 2 redirected into a temporary file, from log_capture_begin to log_capture_end */
struct log_capture {
	FILE *tmp;
	int saved_stderr;
};

static inline void log_capture_begin(struct log_capture *lc)
{
	lc->tmp = tmpfile();
	ck_assert_ptr_nonnull(lc->tmp);
	lc->saved_stderr = dup(2);
	ck_assert_int_ge(lc->saved_stderr, 0);
	ck_assert_int_eq(dup2(fileno(lc->tmp), 2), 2);
}

/* Restores fd 2 and puts what was logged into log[cap], NUL-terminated. */
static inline void log_capture_end(struct log_capture *lc, char *log, size_t cap)
{
	ssize_t n;

	ck_assert_int_eq(lseek(2, 0, SEEK_SET), 0);
	n = read(2, log, cap - 1);
	ck_assert_int_eq(dup2(lc->saved_stderr, 2), 2);
	close(lc->saved_stderr);
	fclose(lc->tmp);
	ck_assert_int_ge(n, 0);
	log[n] = '\0';
}

#endif
