/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for the short-connection handshake policy (core/negotiate/hs_policy.c). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/negotiate/hs_policy.h"

#define MS 1000000ull
#define SHORT_NS (10 * MS) /* SMC_SHORT_CONN_US=10000 */

static uint64_t key4(const char *ip, uint16_t port)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(port) };

	ck_assert_int_eq(inet_pton(AF_INET, ip, &in.sin_addr), 1);
	return hs_policy_key((struct sockaddr *)&in);
}

static uint64_t key6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };

	ck_assert_int_eq(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
	return hs_policy_key((struct sockaddr *)&in6);
}

/* Request/answer turns of a connection that talks (a keep-alive client). */
#define TURNS 10

/* n SMC connections to k, each `life` long and moving `bytes` in `turns` exchanges,
 * closed one after the other from *now on; each must have been admitted. */
static void run_conns(uint64_t k, int n, uint64_t life, uint64_t bytes, uint32_t turns,
		      uint64_t *now)
{
	for (int i = 0; i < n; i++) {
		ck_assert_msg(hs_policy_admit(k, *now, SHORT_NS), "connection %d not admitted", i);
		*now += life;
		hs_policy_closed(k, life, bytes, turns, *now, SHORT_NS);
	}
}

START_TEST(keys)
{
	struct sockaddr un = { .sa_family = AF_UNIX };

	ck_assert_uint_ne(key4("127.0.0.1", 80), 0);
	ck_assert_uint_eq(key4("127.0.0.1", 80), key4("127.0.0.1", 80));
	ck_assert_uint_ne(key4("127.0.0.1", 80), key4("127.0.0.1", 81));
	ck_assert_uint_ne(key4("127.0.0.1", 80), key4("127.0.0.2", 80));
	/* an IPv4-mapped IPv6 destination is the IPv4 one */
	ck_assert_uint_eq(key6("::ffff:127.0.0.1", 80), key4("127.0.0.1", 80));
	ck_assert_uint_ne(key6("::1", 80), key4("127.0.0.1", 80));
	ck_assert_uint_eq(hs_policy_key(&un), 0);
}
END_TEST

START_TEST(short_run_then_tcp)
{
	uint64_t k = key4("127.0.0.1", 6379), now = 5000 * MS;

	hs_policy_reset();
	run_conns(k, HS_POLICY_SHORT_RUN, 1 * MS, 64, TURNS, &now);
	/* now TCP, and stays so until the probe interval passed */
	ck_assert(!hs_policy_admit(k, now, SHORT_NS));
	ck_assert(!hs_policy_admit(k, now + HS_POLICY_PROBE_NS - 1, SHORT_NS));
	/* other destinations are not affected */
	ck_assert(hs_policy_admit(key4("127.0.0.1", 6380), now, SHORT_NS));
	ck_assert(hs_policy_admit(key4("127.0.0.2", 6379), now, SHORT_NS));
}
END_TEST

START_TEST(one_long_breaks_the_run)
{
	uint64_t k = key4("10.0.0.1", 80), now = 0;

	hs_policy_reset();
	run_conns(k, HS_POLICY_SHORT_RUN - 1, 1 * MS, 64, TURNS, &now);
	run_conns(k, 1, SHORT_NS, 64, TURNS, &now);          /* lived long enough */
	run_conns(k, HS_POLICY_SHORT_RUN - 1, 1 * MS, 64, TURNS, &now);
	ck_assert(hs_policy_admit(k, now, SHORT_NS));
	run_conns(k, 1, 1 * MS, HS_POLICY_LONG_BYTES, TURNS, &now); /* short, but moved much */
	run_conns(k, HS_POLICY_SHORT_RUN - 1, 1 * MS, HS_POLICY_LONG_BYTES - 1, TURNS, &now);
	ck_assert(hs_policy_admit(k, now, SHORT_NS));
}
END_TEST

/* A connection that made few turns is short however slow they were (a loaded server, a
 * client with many connections in flight), within HS_POLICY_FEW_MAX_NS; a third turn, or
 * an idle life beyond that, makes a slow one long. Probes are judged alike. */
START_TEST(few_turns_are_short_however_slow)
{
	uint64_t k = key4("127.0.0.1", 8080), now = 0;

	hs_policy_reset();
	run_conns(k, HS_POLICY_SHORT_RUN - 1, 50 * MS, 1500, 1, &now);
	run_conns(k, 1, 50 * MS, 1500, HS_POLICY_FEW_EXCHANGES + 1, &now); /* breaks the run */
	run_conns(k, HS_POLICY_SHORT_RUN - 1, 50 * MS, 1500, 1, &now);
	run_conns(k, 1, HS_POLICY_FEW_MAX_NS, 1500, 1, &now); /* idle too long: breaks it */
	run_conns(k, HS_POLICY_SHORT_RUN - 1, 50 * MS, 1500, 1, &now);
	ck_assert(hs_policy_admit(k, now, SHORT_NS));
	run_conns(k, 1, 50 * MS, 1500, HS_POLICY_FEW_EXCHANGES, &now);
	ck_assert(!hs_policy_admit(k, now, SHORT_NS));
	now += HS_POLICY_PROBE_NS;
	ck_assert(hs_policy_admit(k, now, SHORT_NS)); /* the probe, slow too */
	hs_policy_closed(k, 80 * MS, 1500, HS_POLICY_FEW_EXCHANGES, now + 80 * MS, SHORT_NS);
	ck_assert(!hs_policy_admit(k, now + 81 * MS, SHORT_NS));
	now += HS_POLICY_PROBE_NS;
	ck_assert(hs_policy_admit(k, now, SHORT_NS));
	hs_policy_closed(k, 80 * MS, 1500, HS_POLICY_FEW_EXCHANGES + 1, now + 80 * MS, SHORT_NS);
	ck_assert(hs_policy_admit(k, now + 81 * MS, SHORT_NS));
	/* quick ones are short whatever their turns */
	run_conns(k, HS_POLICY_SHORT_RUN, 1 * MS, 1500, 100, &now);
	ck_assert(!hs_policy_admit(k, now, SHORT_NS));
}
END_TEST

START_TEST(short_verdict)
{
	/* little data, and quick or few turns not long idle */
	ck_assert(hs_policy_short(1 * MS, 100, 100, SHORT_NS));
	ck_assert(hs_policy_short(HS_POLICY_FEW_MAX_NS - 1, 100, HS_POLICY_FEW_EXCHANGES, SHORT_NS));
	ck_assert(!hs_policy_short(HS_POLICY_FEW_MAX_NS, 100, HS_POLICY_FEW_EXCHANGES, SHORT_NS));
	ck_assert(!hs_policy_short(50 * MS, 100, HS_POLICY_FEW_EXCHANGES + 1, SHORT_NS));
	ck_assert(!hs_policy_short(1 * MS, HS_POLICY_LONG_BYTES, 1, SHORT_NS));
}
END_TEST

START_TEST(probe_once_per_interval)
{
	uint64_t k = key4("127.0.0.1", 11211), now = 1000 * MS, t;

	hs_policy_reset();
	run_conns(k, HS_POLICY_SHORT_RUN, 1 * MS, 10, TURNS, &now);
	t = now + HS_POLICY_PROBE_NS;
	ck_assert(hs_policy_admit(k, t, SHORT_NS));    /* the probe */
	ck_assert(!hs_policy_admit(k, t, SHORT_NS));   /* and only one */
	ck_assert(!hs_policy_admit(k, t + HS_POLICY_PROBE_NS - 1, SHORT_NS));
	/* a short probe keeps TCP; the next probe comes an interval after this one */
	hs_policy_closed(k, 1 * MS, 10, TURNS, t + 1 * MS, SHORT_NS);
	ck_assert(!hs_policy_admit(k, t + 2 * MS, SHORT_NS));
	t += HS_POLICY_PROBE_NS;
	ck_assert(hs_policy_admit(k, t, SHORT_NS));
	/* a long probe gives the destination back to SMC */
	hs_policy_closed(k, 50 * MS, 10, TURNS, t + 50 * MS, SHORT_NS);
	for (int i = 0; i < 10; i++)
		ck_assert(hs_policy_admit(k, t + 51 * MS, SHORT_NS));
}
END_TEST

START_TEST(disabled)
{
	uint64_t k = key4("127.0.0.1", 9000), now = 0;

	hs_policy_reset();
	for (int i = 0; i < 3 * HS_POLICY_SHORT_RUN; i++) {
		ck_assert(hs_policy_admit(k, now, 0));
		hs_policy_closed(k, 1, 1, TURNS, now, 0);
	}
	ck_assert(hs_policy_admit(k, now, SHORT_NS));
}
END_TEST

START_TEST(slot_taken_by_another_destination)
{
	uint64_t a = key4("127.0.0.1", 7000), b = 0, now = 0;

	hs_policy_reset();
	run_conns(a, HS_POLICY_SHORT_RUN, 1 * MS, 1, TURNS, &now);
	ck_assert(!hs_policy_admit(a, now, SHORT_NS));
	/* find a destination that shares a's slot (256 slots) */
	for (uint16_t port = 1; port && !b; port++) {
		uint64_t k = key4("127.0.0.9", port);

		if (k != a && (k & 255) == (a & 255))
			b = k;
	}
	ck_assert_uint_ne(b, 0);
	run_conns(b, 1, 1 * MS, 1, TURNS, &now);
	/* a is forgotten, so it tries SMC again: lossy, never wrong about b */
	ck_assert(hs_policy_admit(a, now, SHORT_NS));
	ck_assert(hs_policy_admit(b, now, SHORT_NS));
	/* a long connection to an unknown destination does not evict anybody */
	run_conns(b, HS_POLICY_SHORT_RUN - 1, 1 * MS, 1, TURNS, &now);
	ck_assert(!hs_policy_admit(b, now, SHORT_NS));
	hs_policy_closed(a, 20 * MS, 1, TURNS, now, SHORT_NS);
	ck_assert(!hs_policy_admit(b, now, SHORT_NS));
}
END_TEST

START_TEST(plain_server_remembered_for_a_probe_interval)
{
	uint64_t k = key4("127.0.0.1", 5432), other = key4("127.0.0.1", 5433);
	uint64_t now = 1000 * MS;

	hs_policy_reset();
	ck_assert(!hs_policy_known_plain(k, now, SHORT_NS));
	hs_policy_peer_plain(k, now, SHORT_NS);
	ck_assert(hs_policy_known_plain(k, now, SHORT_NS));
	ck_assert(hs_policy_known_plain(k, now + HS_POLICY_PROBE_NS - 1, SHORT_NS));
	ck_assert(!hs_policy_known_plain(other, now, SHORT_NS));
	/* then the next connection asks the server again */
	ck_assert(!hs_policy_known_plain(k, now + HS_POLICY_PROBE_NS, SHORT_NS));
	/* its short-connection run is its own matter */
	ck_assert(hs_policy_admit(k, now + HS_POLICY_PROBE_NS, SHORT_NS));
	/* off with the rest of the policy */
	hs_policy_peer_plain(other, now, 0);
	ck_assert(!hs_policy_known_plain(other, now, SHORT_NS));
	hs_policy_peer_plain(other, now, SHORT_NS);
	ck_assert(!hs_policy_known_plain(other, now, 0));
}
END_TEST

static Suite *hs_policy_suite(void)
{
	Suite *s = suite_create("hs_policy");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, keys);
	tcase_add_test(tc, short_run_then_tcp);
	tcase_add_test(tc, one_long_breaks_the_run);
	tcase_add_test(tc, few_turns_are_short_however_slow);
	tcase_add_test(tc, short_verdict);
	tcase_add_test(tc, probe_once_per_interval);
	tcase_add_test(tc, disabled);
	tcase_add_test(tc, slot_taken_by_another_destination);
	tcase_add_test(tc, plain_server_remembered_for_a_probe_interval);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(hs_policy_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
