/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for the client's end of the same-host handshake (handshake_client,
 * core/negotiate/handshake.c) when the server's Accept does not come in time: the client stays
 * TCP, and says so on the rendezvous socket before it lets go of it. The server may
 * still send its Accept and wait for the Confirm; a close without a Decline would look
 * to it like a client that upgraded and went away, and it would reset the connection
 * the client goes on with as plain TCP. The server here is the test itself on the other
 * end of a unix SEQPACKET pair; the client's checks of who is there pass because the
 * test owns both ends of the TCP connection.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/negotiate/handshake.h"
#include "core/wire/clc.h"
#include "tests/unit/unit_net.h"

/* The next message on sfd (nonblocking: -1 when there is none), its descriptors
 * closed. */
static int recv_msg(int sfd, struct clc_msg *m)
{
	uint8_t buf[CLC_MAX_LEN];
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(sfd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n <= 0)
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int fds[4];

		ck_assert_uint_le(k, 4);
		memcpy(fds, CMSG_DATA(cm), k * sizeof(int));
		for (size_t i = 0; i < k; i++)
			close(fds[i]);
	}
	ck_assert_int_eq(clc_decode(buf, (size_t)n, m), 0);
	return 0;
}

static void setup(void)
{
	real_init();
	smc_log_level = SMC_LOG_WARN;
	smc_cfg.handshake_timeout_ms = 20;
}

/* No Accept within the handshake timeout: the Proposal went out, then a Decline for the
 * timeout, and the connection is plain TCP. */
START_TEST(no_accept_in_time_declines)
{
	struct hs_auth auth = { .by_key = false };
	struct clc_msg m;
	int fds[2], sp[2];
	struct smc_conn *c;

	tcp_pair(fds);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	c = conn_new(fds[0], CONN_CLIENT);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(handshake_client(c, sp[0], &auth), 0);
	ck_assert_int_eq(c->state, CONN_FALLBACK);
	ck_assert_int_eq(c->reason, SMC_REASON_HANDSHAKE);
	ck_assert_int_eq(recv_msg(sp[1], &m), 0);
	ck_assert_int_eq(m.type, CLC_PROPOSAL);
	ck_assert_msg(recv_msg(sp[1], &m) == 0, "the client let go without a word");
	ck_assert_int_eq(m.type, CLC_DECLINE);
	ck_assert_uint_eq(m.u.s_decl.diag, CLC_DECL_TIMEOUT);
	conn_put(c);
	close(sp[0]);
	close(sp[1]);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("handshake_client");
	TCase *tc = tcase_create("no_accept");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, no_accept_in_time_declines);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
