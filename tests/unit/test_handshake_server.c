/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for the server's end of the same-host handshake (handshake_server,
 * core/negotiate/handshake.c) after its Accept: a client that goes away (closes or exits, as a
 * load generator does when its run ends) and a client that answers with garbage both
 * get the connection reset, but only the garbage is logged as a warning; a client
 * whose Confirm comes late (held up, alive) gets its connection upgraded, one that
 * stays silent for good is reset in the end; inside accept() the client is waited for
 * only a short while (HS_INLINE_WAIT_US), after which the steps go on elsewhere. The client
 * here is the test itself on the other end of a unix SEQPACKET pair, speaking CLC with
 * the library's own encoder; the in-band flavour (struct hs_auth by_key) spares it the
 * address and credential checks, which tests/integration covers.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/negotiate/handshake.h"
#include "core/wire/clc.h"
#include "tests/unit/unit_net.h"

/* handshake_server on its own thread, since the test plays the client meanwhile */
struct server_run {
	struct smc_conn *c;
	int ufd;
	struct hs_auth auth;
	bool in_accept;       /* only the part inside accept(): hs_server_start_inline */
	struct hs_flow f;     /* in_accept: the flow it leaves */
	enum smc_reason why;
	int r;
	pthread_t tid;
	struct log_capture lc; /* what the library logs meanwhile */
};

static void *server_main(void *arg)
{
	struct server_run *s = arg;

	if (s->in_accept)
		s->r = hs_server_start_inline(&s->f, s->c, s->ufd, &s->auth);
	else
		s->r = handshake_server(s->c, s->ufd, &s->auth, &s->why);
	return NULL;
}

/* Sends m, encoded, on cfd without descriptors. */
static void send_clc(int cfd, const struct clc_msg *m)
{
	uint8_t buf[CLC_MAX_LEN];
	ssize_t n = clc_encode(m, buf, sizeof(buf));

	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(send(cfd, buf, (size_t)n, 0), n);
}

/* Sends the client's Proposal (in-band flavour: no descriptors) on cfd. */
static void send_proposal(int cfd)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_PROPOSAL };

	m.u.s_prop.proto = CLC_SAMEHOST_PROTO;
	m.u.s_prop.c2s_size = 65536;
	m.u.s_prop.s2c_size = 65536;
	m.u.s_prop.client_token = 0x1122334455667788ull;
	m.u.s_prop.family = AF_INET;
	m.u.s_prop.client_port = 40001;
	m.u.s_prop.server_port = 40002;
	send_clc(cfd, &m);
}

/* Receives the server's Accept on cfd, closes the descriptors it carries (the region
 * and the server's two doorbells), checks that it is an Accept and returns the server's
 * token. */
static uint64_t recv_accept(int cfd)
{
	uint8_t buf[CLC_MAX_LEN];
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	struct clc_msg m;
	ssize_t n = recvmsg(cfd, &mh, MSG_CMSG_CLOEXEC);

	ck_assert_int_gt(n, 0);
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		int fds[3];
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		ck_assert_int_eq(cm->cmsg_type, SCM_RIGHTS);
		ck_assert_uint_le(k, 3);
		memcpy(fds, CMSG_DATA(cm), k * sizeof(int));
		for (size_t i = 0; i < k; i++)
			close(fds[i]);
	}
	ck_assert_int_eq(clc_decode(buf, (size_t)n, &m), 0);
	ck_assert_int_eq(m.type, CLC_ACCEPT);
	return m.u.s_acc.server_token;
}

/* Sends the client's valid Confirm for server token `token` on cfd with two doorbells
 * (in-band flavour: they travel with the Confirm). */
static void send_confirm(int cfd, uint64_t token)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_CONFIRM };
	uint8_t buf[CLC_MAX_LEN];
	char cbuf[CMSG_SPACE(2 * sizeof(int))] = { 0 };
	struct iovec iov = { buf, 0 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int bells[2] = { eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC) };
	ssize_t n;

	ck_assert_int_ge(bells[0], 0);
	ck_assert_int_ge(bells[1], 0);
	m.u.s_conf.client_token = 0x1122334455667788ull;
	m.u.s_conf.server_token = token;
	n = clc_encode(&m, buf, sizeof(buf));
	ck_assert_int_gt(n, 0);
	iov.iov_len = (size_t)n;
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(bells));
	memcpy(CMSG_DATA(cm), bells, sizeof(bells));
	ck_assert_int_eq(sendmsg(cfd, &mh, 0), n);
	close(bells[0]);
	close(bells[1]);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0)
		;
}

/* Starts handshake_server for a fresh server connection (or, when in_accept, only
 * what runs inside accept()); *cfd is the client's end of the rendezvous pair, fds the TCP pair (fds[1]
 * the server's). What the library logs until server_finish is kept. */
static void server_start_in(struct server_run *s, int fds[2], int *cfd, bool in_accept)
{
	int sp[2];

	tcp_pair(fds);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	memset(s, 0, sizeof(*s));
	s->c = conn_new(fds[1], CONN_SERVER);
	ck_assert_ptr_nonnull(s->c);
	s->ufd = sp[0];
	s->auth.by_key = true;
	s->auth.key = 0xabcdef;
	s->in_accept = in_accept;
	*cfd = sp[1];
	log_capture_begin(&s->lc);
	ck_assert_int_eq(pthread_create(&s->tid, NULL, server_main, s), 0);
}

static void server_start(struct server_run *s, int fds[2], int *cfd)
{
	server_start_in(s, fds, cfd, false);
}

/* Joins the server and puts its log into log[cap]. */
static void server_finish(struct server_run *s, char *log, size_t cap)
{
	ck_assert_int_eq(pthread_join(s->tid, NULL), 0);
	log_capture_end(&s->lc, log, cap);
	close(s->ufd);
}

static void setup(void)
{
	real_init();
	smc_log_level = SMC_LOG_INFO;
	smc_cfg.handshake_timeout_ms = 2000;
}

/* The client closes right after the Accept: the connection is reset (the client may
 * have taken it as upgraded), the reason is the peer's close, and nothing is logged
 * above INFO. */
START_TEST(client_gone_after_accept)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192];

	server_start(&s, fds, &cfd);
	send_proposal(cfd);
	recv_accept(cfd);
	close(cfd);
	server_finish(&s, log, sizeof(log));
	ck_assert_int_eq(s.r, -ECONNABORTED);
	ck_assert_int_eq(s.why, SMC_REASON_PEER_CLOSED);
	ck_assert_msg(strstr(log, "INFO: fd ") &&
		      strstr(log, ": the client went away before its CLC Confirm: resetting the "
				  "connection"), "log: %s", log);
	ck_assert_msg(!strstr(log, "WARN") && !strstr(log, "ERROR"), "log: %s", log);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* The client declines without reading our Accept (its program closed the connection
 * meanwhile) and closes: the kernel reports ECONNRESET on our end before the Decline
 * queued ahead of the close. The Decline is read all the same: the connection stays
 * TCP, not reset. */
START_TEST(decline_with_accept_unread_is_taken)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_DECLINE };
	struct pollfd pfd;
	struct server_run s;
	int fds[2], cfd;
	char log[8192];

	server_start(&s, fds, &cfd);
	send_proposal(cfd);
	pfd = (struct pollfd){ .fd = cfd, .events = POLLIN };
	ck_assert_int_eq(poll(&pfd, 1, 10000), 1); /* the Accept is there, left unread */
	m.u.s_decl.diag = CLC_DECL_PEERDECL;
	send_clc(cfd, &m);
	close(cfd);
	server_finish(&s, log, sizeof(log));
	ck_assert_int_eq(s.r, -ECONNREFUSED); /* not -ECONNABORTED: a reset */
	ck_assert_int_eq(s.why, SMC_REASON_PEER_CLOSED); /* what the Decline's code says */
	ck_assert_msg(strstr(log, ": client declined SMC after our Accept"), "log: %s", log);
	ck_assert_msg(!strstr(log, "went away"), "log: %s", log);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* The client answers the Accept with a Confirm that lacks its doorbells: a protocol
 * error, reset and logged as a warning. */
START_TEST(bad_confirm_is_a_warning)
{
	struct clc_msg conf = { .variant = CLC_SAMEHOST, .type = CLC_CONFIRM };
	struct server_run s;
	int fds[2], cfd;
	char log[8192];

	server_start(&s, fds, &cfd);
	send_proposal(cfd);
	recv_accept(cfd);
	conf.u.s_conf.client_token = 0x1122334455667788ull;
	conf.u.s_conf.server_token = 1;
	send_clc(cfd, &conf);
	server_finish(&s, log, sizeof(log));
	close(cfd);
	ck_assert_int_eq(s.r, -ECONNABORTED);
	ck_assert_int_ne(s.why, SMC_REASON_PEER_CLOSED);
	ck_assert_msg(strstr(log, "WARN: fd ") && strstr(log, ": no valid CLC Confirm from the client"),
		      "log: %s", log);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* The client's Confirm comes five handshake timeouts after the Accept (its process was
 * held up), its sockets open all along: the connection is upgraded, not reset, and the
 * wait is logged at INFO. */
START_TEST(late_confirm_is_taken)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192];
	uint64_t token;

	smc_cfg.handshake_timeout_ms = 20;
	server_start(&s, fds, &cfd);
	send_proposal(cfd);
	token = recv_accept(cfd);
	sleep_ms(5 * 20);
	send_confirm(cfd, token);
	server_finish(&s, log, sizeof(log));
	close(cfd);
	ck_assert_msg(s.r == 0, "handshake_server: %d, log: %s", s.r, log);
	ck_assert_int_eq(s.why, SMC_REASON_NONE);
	ck_assert_msg(strstr(log, "no CLC Confirm within 20 ms of our Accept: waiting on while "
				  "the client lives"), "log: %s", log);
	ck_assert_msg(!strstr(log, "WARN") && !strstr(log, "ERROR"), "log: %s", log);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* A client that keeps both sockets open and never confirms is reset in the end. */
START_TEST(silent_client_is_reset_in_the_end)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192];

	smc_cfg.handshake_timeout_ms = 10;
	server_start(&s, fds, &cfd);
	send_proposal(cfd);
	recv_accept(cfd);
	server_finish(&s, log, sizeof(log));
	close(cfd);
	ck_assert_int_eq(s.r, -ECONNABORTED);
	ck_assert_msg(strstr(log, ": no valid CLC Confirm from the client: resetting"),
		      "log: %s", log);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* The client's TCP socket is gone (closed or its process died) while its rendezvous
 * socket stays open (passed on to another process): no Confirm will come, the
 * connection is reset after the first timeout instead of waiting on. */
START_TEST(client_tcp_gone_ends_the_wait)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192];

	smc_cfg.handshake_timeout_ms = 20;
	server_start(&s, fds, &cfd);
	close(fds[0]);
	send_proposal(cfd);
	recv_accept(cfd);
	server_finish(&s, log, sizeof(log));
	close(cfd);
	ck_assert_int_eq(s.r, -ECONNABORTED);
	ck_assert_msg(!strstr(log, "waiting on while the client lives"), "log: %s", log);
	conn_put(s.c);
	close(fds[1]);
}
END_TEST

/* Inside accept(), a client that sends no Proposal is not waited for (the handshake
 * timeout is a minute here: the test's own timeout ends first): the flow is left
 * waiting for the Proposal, and its deadline step keeps the connection TCP and, by key,
 * the client hears a Decline on TCP. */
START_TEST(silent_client_in_accept_is_not_waited_for)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192], b[64];

	smc_cfg.handshake_timeout_ms = 60000;
	server_start_in(&s, fds, &cfd, true);
	ck_assert_int_eq(pthread_join(s.tid, NULL), 0);
	ck_assert_int_eq(s.r, HS_WAIT);
	ck_assert_int_eq(s.f.phase, HS_PHASE_PROPOSAL);
	ck_assert_int_eq(hs_server_step(&s.f, false), HS_WAIT); /* still nothing */
	ck_assert_int_eq(hs_server_step(&s.f, true), 0);
	log_capture_end(&s.lc, log, sizeof(log));
	close(s.ufd);
	ck_assert_int_eq(s.f.result, -EPROTO);
	ck_assert_int_eq(s.f.why, SMC_REASON_HANDSHAKE);
	ck_assert_int_gt(recv(fds[0], b, sizeof(b), MSG_DONTWAIT), 0); /* the Decline */
	close(cfd);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* Outside accept() (the progress thread's deferred handshake) the Proposal is waited for
 * the whole handshake timeout: one that comes after accept()'s short wait is taken. */
START_TEST(late_proposal_outside_accept_is_taken)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192];

	smc_cfg.handshake_timeout_ms = 2000;
	server_start(&s, fds, &cfd);
	sleep_ms(400);
	send_proposal(cfd);
	send_confirm(cfd, recv_accept(cfd));
	server_finish(&s, log, sizeof(log));
	close(cfd);
	ck_assert_msg(s.r == 0, "handshake_server: %d, log: %s", s.r, log);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* Inside accept() the Confirm is not waited for either: the flow is left waiting for
 * it after our Accept, and a Confirm that comes later completes the upgrade. */
START_TEST(confirm_after_accept_returned_is_taken)
{
	struct server_run s;
	int fds[2], cfd;
	char log[8192];
	uint64_t token;

	smc_cfg.handshake_timeout_ms = 2000;
	server_start_in(&s, fds, &cfd, true);
	send_proposal(cfd);
	token = recv_accept(cfd);
	sleep_ms(50);
	ck_assert_int_eq(pthread_join(s.tid, NULL), 0);
	s.tid = 0;
	ck_assert_int_eq(s.r, HS_WAIT);
	ck_assert_int_eq(s.f.phase, HS_PHASE_CONFIRM);
	ck_assert_int_eq(hs_server_step(&s.f, false), HS_WAIT);
	send_confirm(cfd, token);
	ck_assert_int_eq(hs_server_step(&s.f, false), 0);
	log_capture_end(&s.lc, log, sizeof(log));
	close(s.ufd);
	close(cfd);
	ck_assert_msg(s.f.result == 0, "result: %d, log: %s", s.f.result, log);
	ck_assert_int_eq(s.f.why, SMC_REASON_NONE);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* Inside accept() without a progress thread to hand the rest to
 * (hs_server_finish_inline): a Proposal that comes only at the final look is answered,
 * and the client, committed by our Accept, has its Confirm waited for; the connection
 * kept as TCP instead would be aborted on the client's side by our first byte. */
static void *client_confirms_late(void *arg)
{
	int cfd = *(int *)arg;
	uint64_t token = recv_accept(cfd);

	sleep_ms(100);
	send_confirm(cfd, token);
	return NULL;
}

START_TEST(proposal_at_the_last_look_waits_for_confirm)
{
	struct server_run s;
	int fds[2], cfd, r;
	char log[8192];
	pthread_t client;

	smc_cfg.handshake_timeout_ms = 2000;
	server_start_in(&s, fds, &cfd, true);
	ck_assert_int_eq(pthread_join(s.tid, NULL), 0);
	ck_assert_int_eq(s.r, HS_WAIT);
	ck_assert_int_eq(s.f.phase, HS_PHASE_PROPOSAL);
	send_proposal(cfd);
	ck_assert_int_eq(pthread_create(&client, NULL, client_confirms_late, &cfd), 0);
	r = hs_server_finish_inline(&s.f);
	ck_assert_int_eq(pthread_join(client, NULL), 0);
	log_capture_end(&s.lc, log, sizeof(log));
	close(s.ufd);
	close(cfd);
	ck_assert_msg(r == 0 && s.f.result == 0, "finish: %d, result %d, log: %s", r, s.f.result,
		      log);
	ck_assert_int_eq(s.f.why, SMC_REASON_NONE);
	conn_put(s.c);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("handshake_server");
	TCase *tc = tcase_create("after_accept");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, client_gone_after_accept);
	tcase_add_test(tc, decline_with_accept_unread_is_taken);
	tcase_add_test(tc, bad_confirm_is_a_warning);
	tcase_add_test(tc, late_confirm_is_taken);
	tcase_add_test(tc, silent_client_is_reset_in_the_end);
	tcase_add_test(tc, client_tcp_gone_ends_the_wait);
	tcase_add_test(tc, silent_client_in_accept_is_not_waited_for);
	tcase_add_test(tc, late_proposal_outside_accept_is_taken);
	tcase_add_test(tc, confirm_after_accept_returned_is_taken);
	tcase_add_test(tc, proposal_at_the_last_look_waits_for_confirm);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
