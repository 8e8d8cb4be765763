/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Unit tests for core/ib/ib_lgr_book.c (link-group bookkeeping: lookup, sharing,
 * references, idle expiry, failed links) with a made-up clock and no verbs, and for the
 * registry's answer when the host has no RDMA device.
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/ib/ib_lgr.h"
#include "core/ib/ib_lgr_book.h"
#include "core/ib/ibv_load.h"

#define S 1000000000ull
#define IDLE (10 * S)

static const uint8_t PEER_A[CLC_PEER_ID_LEN] = { 'A', 1, 2, 3, 4, 5, 6, 7 };
static const uint8_t PEER_B[CLC_PEER_ID_LEN] = { 'B', 1, 2, 3, 4, 5, 6, 7 };
static const uint8_t GID_1[CLC_GID_LEN] = { 0xfe, 0x80, [15] = 1 };
static const uint8_t GID_2[CLC_GID_LEN] = { 0xfe, 0x80, [15] = 2 };

static struct ib_lgr_book book;
static struct ib_lgr_entry ent[8];
static int dummy_link[8];

static void setup(void)
{
	ib_lgr_book_init(&book, IDLE, 3); /* three connections per link: room is testable */
	memset(ent, 0, sizeof(ent));
}

static struct ib_lgr_entry *add(int i, const uint8_t *peer, const uint8_t *gid,
				enum ib_lgr_role role)
{
	memcpy(ent[i].peer_id, peer, CLC_PEER_ID_LEN);
	memcpy(ent[i].gid, gid, CLC_GID_LEN);
	ent[i].role = role;
	ent[i].link = &dummy_link[i];
	ib_lgr_book_add(&book, &ent[i]);
	return &ent[i];
}

/* The handshake of one connection on e: the reference becomes a connection. */
static void connection_made(struct ib_lgr_entry *e, uint64_t now)
{
	ib_lgr_book_set_conns(e, e->conns + 1, now);
	ib_lgr_book_unref(e, now);
}

START_TEST(test_server_link_shared_only_once_up)
{
	struct ib_lgr_entry *e = add(0, PEER_A, GID_1, IB_LGR_SERVER);

	ck_assert_uint_eq(book.n, 1);
	ck_assert_uint_eq(e->refs, 1);
	/* first contact in progress: a second proposal must not share it */
	ck_assert_ptr_null(ib_lgr_book_find_server(&book, PEER_A, GID_1));
	ib_lgr_book_up(e, 0x123);
	connection_made(e, 1 * S);
	ck_assert_ptr_eq(ib_lgr_book_find_server(&book, PEER_A, GID_1), e);
	ck_assert_uint_eq(e->refs, 1);
	/* another process on the same host, another host: not this link */
	ck_assert_ptr_null(ib_lgr_book_find_server(&book, PEER_B, GID_1));
	ck_assert_ptr_null(ib_lgr_book_find_server(&book, PEER_A, GID_2));
	/* a client-role link to the same peer is not a server link */
	add(1, PEER_A, GID_1, IB_LGR_CLIENT);
	ib_lgr_book_up(&ent[1], 0x555);
	ib_lgr_book_unref(&ent[1], 1 * S);
	connection_made(e, 2 * S);
	ck_assert_ptr_eq(ib_lgr_book_find_server(&book, PEER_A, GID_1), e);
	ck_assert_uint_eq(e->conns, 2);
}
END_TEST

START_TEST(test_server_link_full_makes_another)
{
	struct ib_lgr_entry *e = add(0, PEER_A, GID_1, IB_LGR_SERVER);

	ib_lgr_book_up(e, 7);
	connection_made(e, S);
	ck_assert_ptr_eq(ib_lgr_book_find_server(&book, PEER_A, GID_1), e); /* 1 conn + 1 ref */
	ck_assert_ptr_eq(ib_lgr_book_find_server(&book, PEER_A, GID_1), e); /* 1 conn + 2 refs */
	/* references count as future connections: max 3 reached */
	ck_assert_ptr_null(ib_lgr_book_find_server(&book, PEER_A, GID_1));
	ib_lgr_book_unref(e, S); /* one handshake failed */
	ck_assert_ptr_eq(ib_lgr_book_find_server(&book, PEER_A, GID_1), e);
}
END_TEST

START_TEST(test_client_lookup_by_server_qpn)
{
	struct ib_lgr_entry *a = add(0, PEER_A, GID_1, IB_LGR_CLIENT);
	struct ib_lgr_entry *b = add(1, PEER_A, GID_1, IB_LGR_CLIENT);

	/* two first contacts raced: two links to one server process */
	ck_assert_ptr_null(ib_lgr_book_find_client(&book, PEER_A, GID_1, 0x10));
	ib_lgr_book_up(a, 0x10);
	ib_lgr_book_up(b, 0x20);
	ib_lgr_book_unref(a, S);
	ib_lgr_book_unref(b, S);
	ck_assert_ptr_eq(ib_lgr_book_find_client(&book, PEER_A, GID_1, 0x20), b);
	ck_assert_ptr_eq(ib_lgr_book_find_client(&book, PEER_A, GID_1, 0x10), a);
	ck_assert_ptr_null(ib_lgr_book_find_client(&book, PEER_A, GID_1, 0x30));
	ck_assert_ptr_null(ib_lgr_book_find_client(&book, PEER_A, GID_1, 0));
	ck_assert_ptr_null(ib_lgr_book_find_client(&book, PEER_B, GID_1, 0x10));
	ck_assert_uint_eq(a->refs, 1);
	ck_assert_uint_eq(a->idle_since, 0);
}
END_TEST

START_TEST(test_idle_expiry_server_and_client)
{
	struct ib_lgr_entry *s = add(0, PEER_A, GID_1, IB_LGR_SERVER);
	struct ib_lgr_entry *c = add(1, PEER_B, GID_2, IB_LGR_CLIENT);

	ib_lgr_book_up(s, 1);
	ib_lgr_book_up(c, 2);
	connection_made(s, 5 * S);
	connection_made(c, 5 * S);
	ck_assert_uint_eq(ib_lgr_book_expiry(&book, s), UINT64_MAX);
	ck_assert(!ib_lgr_book_due(&book, s, 1000 * S));
	/* the last connection goes at t=20 s */
	ib_lgr_book_set_conns(s, 0, 20 * S);
	ib_lgr_book_set_conns(c, 0, 20 * S);
	ck_assert_uint_eq(ib_lgr_book_expiry(&book, s), 30 * S);
	ck_assert_uint_eq(ib_lgr_book_expiry(&book, c), 40 * S); /* client keeps its end longer */
	/* later reports of 0 connections do not restart the clock */
	ib_lgr_book_set_conns(s, 0, 25 * S);
	ck_assert(!ib_lgr_book_due(&book, s, 29 * S));
	ck_assert(ib_lgr_book_due(&book, s, 30 * S));
	ck_assert(!ib_lgr_book_due(&book, c, 39 * S));
	ck_assert(ib_lgr_book_due(&book, c, 40 * S));
	/* reuse before expiry stops the clock; the next idle period starts afresh */
	ck_assert_ptr_eq(ib_lgr_book_find_server(&book, PEER_A, GID_1), s);
	ck_assert_uint_eq(ib_lgr_book_expiry(&book, s), UINT64_MAX);
	connection_made(s, 29 * S);
	ib_lgr_book_set_conns(s, 0, 50 * S);
	ck_assert(!ib_lgr_book_due(&book, s, 59 * S));
	ck_assert(ib_lgr_book_due(&book, s, 60 * S));
	ib_lgr_book_remove(&book, s);
	ib_lgr_book_remove(&book, c);
	ck_assert_uint_eq(book.n, 0);
	ck_assert_ptr_null(book.head);
}
END_TEST

START_TEST(test_failed_and_unused_links_go_at_once)
{
	struct ib_lgr_entry *f = add(0, PEER_A, GID_1, IB_LGR_SERVER);
	struct ib_lgr_entry *p = add(1, PEER_A, GID_1, IB_LGR_SERVER);

	ib_lgr_book_up(f, 1);
	connection_made(f, S);
	connection_made(f, S); /* second connection without a ref: counts too */
	ib_lgr_book_failed(f);
	ck_assert_ptr_null(ib_lgr_book_find_server(&book, PEER_A, GID_1));
	/* its aborted connections are still open: kept */
	ck_assert(!ib_lgr_book_due(&book, f, 100 * S));
	ib_lgr_book_set_conns(f, 1, 101 * S);
	ck_assert(!ib_lgr_book_due(&book, f, 101 * S));
	ib_lgr_book_set_conns(f, 0, 102 * S);
	ck_assert(ib_lgr_book_due(&book, f, 102 * S)); /* no idle wait for a failed link */
	/* a first contact whose handshake failed before the Confirm: never up, goes now */
	ck_assert(!ib_lgr_book_due(&book, p, 102 * S)); /* still referenced */
	ib_lgr_book_unref(p, 103 * S);
	ck_assert(ib_lgr_book_due(&book, p, 103 * S));
	/* an unref below zero is ignored (defensive) */
	ib_lgr_book_unref(p, 104 * S);
	ck_assert_uint_eq(p->refs, 0);
}
END_TEST

START_TEST(test_clock_zero_still_counts_as_idle)
{
	struct ib_lgr_entry *e = add(0, PEER_A, GID_1, IB_LGR_SERVER);

	ib_lgr_book_up(e, 1);
	ib_lgr_book_unref(e, 0); /* idle from t=0: recorded as 1 ns, not "in use" */
	ck_assert_uint_eq(ib_lgr_book_expiry(&book, e), IDLE + 1);
	ck_assert(ib_lgr_book_due(&book, e, IDLE + 1));
}
END_TEST

/* A model check: random operations on three peers, the book compared with a plain
 * recomputation of what must be found and what must expire. */
START_TEST(test_random_model)
{
	uint64_t now = S, seed = 12345;

	for (int i = 0; i < 4; i++) {
		add(i, i % 2 ? PEER_B : PEER_A, GID_1, i < 3 ? IB_LGR_SERVER : IB_LGR_CLIENT);
		ib_lgr_book_up(&ent[i], 100 + (uint32_t)i);
		ib_lgr_book_unref(&ent[i], now);
	}
	for (int step = 0; step < 20000; step++) {
		struct ib_lgr_entry *e;
		unsigned r;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		r = (unsigned)(seed >> 33);
		e = &ent[r % 4];
		now += (r >> 4) % (3 * S);
		switch ((r >> 2) % 4) {
		case 0: {
			const uint8_t *peer = r & 64 ? PEER_B : PEER_A;
			struct ib_lgr_entry *f = ib_lgr_book_find_server(&book, peer, GID_1);

			if (f) {
				ck_assert_int_eq(f->role, IB_LGR_SERVER);
				ck_assert_mem_eq(f->peer_id, peer, CLC_PEER_ID_LEN);
				ck_assert(!f->failed && f->up);
				ck_assert_uint_le(f->conns + f->refs, 3);
				connection_made(f, now);
			}
			break;
		}
		case 1:
			if (e->conns)
				ib_lgr_book_set_conns(e, e->conns - 1, now);
			break;
		case 2:
			if (!e->refs && !e->conns && e->idle_since) {
				uint64_t keep = e->role == IB_LGR_CLIENT ? 2 * IDLE : IDLE;

				ck_assert_int_eq(ib_lgr_book_due(&book, e, now),
						 now >= e->idle_since + keep);
			} else {
				ck_assert(!ib_lgr_book_due(&book, e, now));
			}
			break;
		default:
			ck_assert_uint_eq(e->idle_since == 0, e->refs || e->conns);
			break;
		}
	}
}
END_TEST

/* ------------------------------------------------------------------ registry */

static bool host_has_rdma(void)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *de;
	bool any = false;

	if (!d)
		return false;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			any = true;
	closedir(d);
	return any;
}

START_TEST(test_registry_without_device)
{
	struct clc_smcr_local me;
	struct ib_link *l;
	bool first;

	if (host_has_rdma())
		return; /* the VM test covers the device case */
	config_load(NULL);
	ck_assert_int_eq(ib_lgr_open(), -ENODEV);
	ck_assert_int_eq(ib_lgr_local(&me), -ENODEV);
	ck_assert_int_eq(ib_lgr_get_server(PEER_A, GID_1, &l, &first), -ENODEV);
	ck_assert_uint_eq(ib_lgr_link_count(), 0);
	ck_assert(!ib_lgr_dev_is_open());
	ck_assert_int_eq(ib_lgr_async_fd(), -1);
	ck_assert_uint_eq(ib_lgr_next_deadline(), UINT64_MAX);
	ib_lgr_tick(1);
	ib_lgr_shutdown();
}
END_TEST

/* libibverbs is loaded on first use (core/ib/ibv_load.c): the one installed here (the
 * -dev package's) has every function the library calls, at the version it names. */
START_TEST(test_ibv_load_resolves_every_symbol)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h)
		return; /* no libibverbs at run time: nothing to check */
	dlclose(h);
	ck_assert(ibv_load_always());
	ck_assert(ibv_load_always());
	ck_assert_str_eq(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
}
END_TEST

/* A host without an RDMA device (sysfs says so): nothing of libibverbs is loaded, which
 * would cost a process's first connection ~0.3 ms to learn that there is no device. */
START_TEST(test_ibv_not_loaded_without_device)
{
	struct clc_smcr_local me;

	if (host_has_rdma() || access("/sys/class", F_OK) != 0)
		return; /* the VM test covers the device case; no sysfs: loaded to find out */
	config_load(NULL);
	ck_assert(!ibv_load());
	ck_assert_int_eq(ib_lgr_local(&me), -ENODEV);
	ck_assert_ptr_null(dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD));
	ck_assert_ptr_null(dlopen("libnl-3.so.200", RTLD_NOW | RTLD_NOLOAD));
}
END_TEST

static Suite *ib_lgr_suite(void)
{
	Suite *s = suite_create("ib_lgr");
	TCase *tc = tcase_create("book");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_server_link_shared_only_once_up);
	tcase_add_test(tc, test_server_link_full_makes_another);
	tcase_add_test(tc, test_client_lookup_by_server_qpn);
	tcase_add_test(tc, test_idle_expiry_server_and_client);
	tcase_add_test(tc, test_failed_and_unused_links_go_at_once);
	tcase_add_test(tc, test_clock_zero_still_counts_as_idle);
	tcase_add_test(tc, test_random_model);
	suite_add_tcase(s, tc);
	tc = tcase_create("registry");
	tcase_add_test(tc, test_registry_without_device);
	/* first: the next one loads libibverbs (in this process when CK_FORK=no) */
	tcase_add_test(tc, test_ibv_not_loaded_without_device);
	tcase_add_test(tc, test_ibv_load_resolves_every_symbol);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ib_lgr_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
