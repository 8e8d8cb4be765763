/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for descriptors in messages (core/base/fd_pass.c) over a unix socketpair. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/base/fd_pass.h"

union ctl {
	struct cmsghdr h;
	char space[CMSG_SPACE(sizeof(int) * 4) + CMSG_SPACE(sizeof(struct ucred))];
};

/* Sends one byte with n descriptors of /dev/null on sv[0]; their numbers in sent. */
static void send_fds(int sock, int n, int *sent)
{
	union ctl ctl;
	char b = 'x';
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	for (int i = 0; i < n; i++) {
		sent[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(sent[i], 0);
	}
	fd_pass_pack(&msg, ctl.space, sent, n);
	ck_assert_int_eq(sendmsg(sock, &msg, 0), 1);
	for (int i = 0; i < n; i++)
		close(sent[i]);
}

static bool recv_fds(int sock, int *fds, int *nfds, int maxfds, struct ucred *cred)
{
	union ctl ctl;
	char b;
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
			      .msg_controllen = sizeof(ctl.space) };

	ck_assert_int_eq(recvmsg(sock, &msg, MSG_CMSG_CLOEXEC), 1);
	ck_assert_int_eq(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC), 0);
	return fd_pass_unpack(&msg, fds, nfds, maxfds, cred);
}

START_TEST(descriptors_and_credentials)
{
	int sv[2], sent[3], got[4], n = -1, one = 1;
	struct ucred cred = { 0 };

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	send_fds(sv[0], 3, sent);
	ck_assert(!recv_fds(sv[1], got, &n, 4, &cred));
	ck_assert_int_eq(n, 3);
	for (int i = 0; i < n; i++) {
		ck_assert_int_ge(fcntl(got[i], F_GETFD), 0);
		ck_assert(fcntl(got[i], F_GETFD) & FD_CLOEXEC);
		close(got[i]);
	}
	ck_assert_int_eq(cred.pid, getpid());
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* Descriptors this process holds. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

START_TEST(extra_descriptors_closed)
{
	int sv[2], sent[4], got[4], n = -1, before;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	before = count_fds();
	send_fds(sv[0], 4, sent);
	ck_assert(recv_fds(sv[1], got, &n, 1, NULL));
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(count_fds(), before + 1); /* the three beyond maxfds were closed */
	close(got[0]);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

static Suite *fd_pass_suite(void)
{
	Suite *s = suite_create("fd_pass");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, descriptors_and_credentials);
	tcase_add_test(tc, extra_descriptors_closed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fd_pass_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
