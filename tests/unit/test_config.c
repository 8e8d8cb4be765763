/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Unit tests for core/base/config.c (the SMC_* table and parsers), log_expand_path and the
 * stats JSON summary. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/cpu_cache.h"
#include "core/base/log.h"
#include "core/base/stats.h"
#include "smc_preload.h"

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)

/* Every test starts from an environment without any SMC_* variable, and with an unknown
 * L2 size, so the defaults are the table's on any CPU (the L2 tests set their own). */
static void clear_env(void)
{
	for (size_t i = 0; i < smc_cfg_nvars; i++)
		unsetenv(smc_cfg_vars[i].name);
	config_set_cpu_l2(0);
}

static size_t var_index(const char *name)
{
	for (size_t i = 0; i < smc_cfg_nvars; i++)
		if (strcmp(smc_cfg_vars[i].name, name) == 0)
			return i;
	ck_abort_msg("no variable %s in the table", name);
	return 0;
}

/* Runs config_load() with the error stream captured; returns the text (free it). */
static char *load_capture(int *bad)
{
	char *text = NULL;
	size_t len = 0;
	FILE *err = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(err);
	*bad = config_load(err);
	fclose(err);
	return text;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* ---------------------------------------------------------------- size parser */

static int size_ok(const char *s, unsigned long long expect)
{
	unsigned long long v = 0;
	int rc = config_parse_size(s, 0, ~0ULL, &v);

	return rc == 0 && v == expect;
}

START_TEST(size_plain_and_suffixes)
{
	ck_assert(size_ok("0", 0));
	ck_assert(size_ok("4096", 4096));
	ck_assert(size_ok("16k", 16 * KIB));
	ck_assert(size_ok("16K", 16 * KIB));
	ck_assert(size_ok("3m", 3 * MIB));
	ck_assert(size_ok("3M", 3 * MIB));
	ck_assert(size_ok("2g", 2 * GIB));
	ck_assert(size_ok("2G", 2 * GIB));
	ck_assert(size_ok("007k", 7 * KIB));
	ck_assert(size_ok("18446744073709551615", ~0ULL));
}
END_TEST

START_TEST(size_garbage)
{
	static const char *const bad[] = { "", "abc", "12q", "-1", "1kk", " 5", "5 ", "+5",
					   "1.5k", "k", "1kb", "1KB", "0x10", "1 k", "1t" };
	unsigned long long v = 42;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(config_parse_size(bad[i], 0, ~0ULL, &v) == -1, "\"%s\" accepted",
			      bad[i]);
		ck_assert_int_eq(v, 42); /* untouched on failure */
	}
	ck_assert_int_eq(config_parse_size(NULL, 0, ~0ULL, &v), -1);
}
END_TEST

START_TEST(size_overflow_and_range)
{
	unsigned long long v = 42;

	ck_assert_int_eq(config_parse_size("99999999999999999999g", 0, ~0ULL, &v), -2);
	ck_assert_int_eq(config_parse_size("18446744073709551616", 0, ~0ULL, &v), -2);
	ck_assert_int_eq(config_parse_size("17179869184g", 0, ~0ULL, &v), -2); /* 2^64 */
	ck_assert_int_eq(config_parse_size("16777216t", 0, ~0ULL, &v), -1);     /* garbage first */
	ck_assert_int_eq(config_parse_size("99999999999999999999x", 0, ~0ULL, &v), -1);
	ck_assert_int_eq(config_parse_size("15k", 16 * KIB, 512 * MIB, &v), -2);
	ck_assert_int_eq(config_parse_size("16383", 16 * KIB, 512 * MIB, &v), -2);
	ck_assert_int_eq(config_parse_size("513m", 16 * KIB, 512 * MIB, &v), -2);
	ck_assert_int_eq(config_parse_size("1g", 16 * KIB, 512 * MIB, &v), -2);
	ck_assert_int_eq(v, 42);
	ck_assert_int_eq(config_parse_size("16k", 16 * KIB, 512 * MIB, &v), 0);
	ck_assert_int_eq(v, 16 * KIB);
	ck_assert_int_eq(config_parse_size("512m", 16 * KIB, 512 * MIB, &v), 0);
	ck_assert_int_eq(v, 512 * MIB);
}
END_TEST

/* ---------------------------------------------------------------- uint, bool */

START_TEST(uint_values)
{
	unsigned long long v = 42;

	ck_assert_int_eq(config_parse_uint("0", 0, 100000, &v), 0);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(config_parse_uint("100000", 0, 100000, &v), 0);
	ck_assert_int_eq(v, 100000);
	v = 42;
	ck_assert_int_eq(config_parse_uint("100001", 0, 100000, &v), -2);
	ck_assert_int_eq(config_parse_uint("0", 1, 60000, &v), -2);
	ck_assert_int_eq(config_parse_uint("99999999999999999999", 0, 100000, &v), -2);
	ck_assert_int_eq(config_parse_uint("1k", 0, 100000, &v), -1);
	ck_assert_int_eq(config_parse_uint("", 0, 100000, &v), -1);
	ck_assert_int_eq(config_parse_uint("-0", 0, 100000, &v), -1);
	ck_assert_int_eq(config_parse_uint(" 5", 0, 100000, &v), -1);
	ck_assert_int_eq(v, 42);
}
END_TEST

START_TEST(bool_values)
{
	static const char *const yes[] = { "1", "yes", "true", "on", "YES", "True", "ON" };
	static const char *const no[] = { "0", "no", "false", "off", "NO", "False", "Off" };
	static const char *const bad[] = { "", "2", "y", "n", "yess", " 1", "1 ", "enable" };
	bool b;

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		b = false;
		ck_assert_msg(config_parse_bool(yes[i], &b) == 0 && b, "%s", yes[i]);
	}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		b = true;
		ck_assert_msg(config_parse_bool(no[i], &b) == 0 && !b, "%s", no[i]);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(config_parse_bool(bad[i], &b) == -1, "\"%s\" accepted", bad[i]);
}
END_TEST

/* ---------------------------------------------------------------- the table */

START_TEST(table_is_sane)
{
	ck_assert_uint_eq(smc_cfg_nvars, 19);
	for (size_t i = 0; i < smc_cfg_nvars; i++) {
		const struct smc_cfg_var *v = &smc_cfg_vars[i];

		ck_assert_msg(strncmp(v->name, "SMC_", 4) == 0, "%s", v->name);
		ck_assert_msg(v->doc != NULL && v->doc[0] != '\0', "%s has no doc", v->name);
		ck_assert_msg(strchr(v->doc, '\n') == NULL, "%s doc is not one line", v->name);
		ck_assert_msg(v->def != NULL, "%s has no default", v->name);
		ck_assert_msg(v->store != NULL, "%s has no store", v->name);
		if (v->type == SMC_CFG_ENUM)
			ck_assert_msg(v->choices != NULL && v->choices[0] != NULL, "%s", v->name);
		if (v->type == SMC_CFG_SIZE || v->type == SMC_CFG_UINT)
			ck_assert_msg(v->min <= v->max, "%s", v->name);
		for (size_t j = 0; j < i; j++)
			ck_assert_str_ne(v->name, smc_cfg_vars[j].name);
	}
}
END_TEST

/* What smc_cfg holds before config_load runs (the table's defaults, filled in when the
 * program was loaded) agrees with a load from an empty environment. */
START_TEST(defaults_before_load_match_table)
{
	struct smc_config before = smc_cfg; /* fresh process per test (CK_FORK) */
	int bad = -1;
	char *err = load_capture(&bad);

	ck_assert_int_eq(bad, 0);
	ck_assert_str_eq(err, "");
	ck_assert_uint_eq(before.rcvbuf, smc_cfg.rcvbuf);
	ck_assert_uint_eq(before.sndbuf, smc_cfg.sndbuf);
	ck_assert_int_eq(before.debug, smc_cfg.debug);
	ck_assert_int_eq(before.log_level, smc_cfg.log_level);
	ck_assert_ptr_null(smc_cfg.log_file);
	ck_assert_ptr_null(before.log_file);
	ck_assert_ptr_null(smc_cfg.stats_file);
	ck_assert_ptr_null(before.stats_file);
	ck_assert_uint_eq(before.spin_us, smc_cfg.spin_us);
	ck_assert_uint_eq(before.short_conn_us, smc_cfg.short_conn_us);
	ck_assert_uint_eq(before.pool_slots, smc_cfg.pool_slots);
	ck_assert_uint_eq(before.pool_ring, smc_cfg.pool_ring);
	ck_assert_int_eq(before.copy_store, smc_cfg.copy_store);
	ck_assert_uint_eq(before.mem_cap, smc_cfg.mem_cap);
	ck_assert_uint_eq(before.handshake_timeout_ms, smc_cfg.handshake_timeout_ms);
	ck_assert_int_eq(before.transport, smc_cfg.transport);
	ck_assert_str_eq(before.bpf_dir, smc_cfg.bpf_dir);
	ck_assert_str_eq(before.rdv_dir, smc_cfg.rdv_dir);
	ck_assert_ptr_null(before.ib_dev);
	ck_assert_uint_eq(before.ib_port, smc_cfg.ib_port);
	ck_assert_int_eq(before.ib_gid_index, smc_cfg.ib_gid_index);
	/* and the documented values */
	ck_assert_uint_eq(smc_cfg.rcvbuf, 2 * MIB);
	ck_assert_uint_eq(smc_cfg.sndbuf, 2 * MIB);
	ck_assert_uint_eq(smc_cfg.spin_us, 20);
	ck_assert_uint_eq(smc_cfg.short_conn_us, 10000);
	ck_assert_uint_eq(smc_cfg.pool_slots, 16);
	ck_assert_uint_eq(smc_cfg.pool_ring, 64 * KIB);
	ck_assert_int_eq(smc_cfg.copy_store, -1);
	ck_assert_uint_eq(smc_cfg.mem_cap, 8 * GIB);
	ck_assert_uint_eq(smc_cfg.handshake_timeout_ms, 2000);
	ck_assert_int_eq(smc_cfg.transport, SMC_TRANSPORT_AUTO);
	ck_assert_int_eq(smc_cfg.log_level, SMC_LOG_OFF);
	for (size_t i = 0; i < smc_cfg_nvars; i++)
		ck_assert_int_eq(config_source(i), SMC_CFG_DEFAULT);
	free(err);
}
END_TEST

/* ---------------------------------------------------------------- config_load */

START_TEST(load_good_values)
{
	int bad = -1;
	char *err;

	setenv("SMC_RCVBUF", "1m", 1);
	setenv("SMC_SNDBUF", "64K", 1);
	setenv("SMC_SPIN_US", "0", 1);
	setenv("SMC_MEM_CAP", "64g", 1);
	setenv("SMC_HANDSHAKE_TIMEOUT_MS", "60000", 1);
	setenv("SMC_TRANSPORT", "TCP", 1);
	setenv("SMC_COPY", "Stream", 1);
	setenv("SMC_LOG_FILE", "/tmp/smc-%p.log", 1);
	setenv("SMC_STATS_FILE", "/tmp/stats.json", 1);
	setenv("SMC_POOL_SLOTS", "0", 1);
	setenv("SMC_POOL_RING", "100k", 1);
	err = load_capture(&bad);
	ck_assert_int_eq(bad, 0);
	ck_assert_str_eq(err, "");
	ck_assert_uint_eq(smc_cfg.pool_slots, 0);
	/* a slot's rings are powers of two: rounded down */
	ck_assert_uint_eq(smc_cfg.pool_ring, 64 * KIB);
	ck_assert_uint_eq(smc_cfg.rcvbuf, MIB);
	ck_assert_uint_eq(smc_cfg.sndbuf, 64 * KIB);
	ck_assert_uint_eq(smc_cfg.spin_us, 0);
	ck_assert_uint_eq(smc_cfg.mem_cap, 64 * GIB);
	ck_assert_uint_eq(smc_cfg.handshake_timeout_ms, 60000);
	ck_assert_int_eq(smc_cfg.transport, SMC_TRANSPORT_TCP);
	ck_assert_int_eq(smc_cfg.copy_store, 1);
	ck_assert_str_eq(smc_cfg.log_file, "/tmp/smc-%p.log");
	ck_assert_str_eq(smc_cfg.stats_file, "/tmp/stats.json");
	ck_assert_int_eq(config_source(var_index("SMC_RCVBUF")), SMC_CFG_ENV);
	ck_assert_int_eq(config_source(var_index("SMC_TRANSPORT")), SMC_CFG_ENV);
	ck_assert_int_eq(config_source(var_index("SMC_DEBUG")), SMC_CFG_DEFAULT);
	ck_assert_int_eq(config_source(var_index("SMC_LOG_LEVEL")), SMC_CFG_DEFAULT);
	ck_assert_int_eq(config_source(smc_cfg_nvars + 5), SMC_CFG_DEFAULT);
	free(err);

	/* Loading again with the variables gone goes back to the defaults. */
	clear_env();
	err = load_capture(&bad);
	ck_assert_int_eq(bad, 0);
	ck_assert_uint_eq(smc_cfg.rcvbuf, 2 * MIB);
	ck_assert_int_eq(smc_cfg.transport, SMC_TRANSPORT_AUTO);
	ck_assert_ptr_null(smc_cfg.log_file);
	ck_assert_int_eq(config_source(var_index("SMC_RCVBUF")), SMC_CFG_DEFAULT);
	free(err);
}
END_TEST

/* One bad value: the default stays, exactly one line names the variable. */
static void check_rejected(const char *name, const char *value)
{
	int bad = -1;
	char *err;
	char expect_prefix[256];

	clear_env();
	setenv(name, value, 1);
	err = load_capture(&bad);
	ck_assert_msg(bad == 1, "%s=\"%s\": %d bad values", name, value, bad);
	ck_assert_msg(count_lines(err) == 1, "%s=\"%s\": report is not one line: %s", name,
		      value, err);
	ck_assert_msg(err[strlen(err) - 1] == '\n', "report does not end the line");
	snprintf(expect_prefix, sizeof(expect_prefix), "smc-preload: %s=\"", name);
	ck_assert_msg(strncmp(err, expect_prefix, strlen(expect_prefix)) == 0, "%s", err);
	ck_assert_msg(strstr(err, "using default") != NULL, "%s", err);
	ck_assert_int_eq(config_source(var_index(name)), SMC_CFG_INVALID);
	free(err);
}

START_TEST(bad_values_keep_defaults)
{
	check_rejected("SMC_POOL_SLOTS", "65");
	ck_assert_uint_eq(smc_cfg.pool_slots, 16);
	check_rejected("SMC_POOL_RING", "8k");
	ck_assert_uint_eq(smc_cfg.pool_ring, 64 * KIB);
	check_rejected("SMC_POOL_RING", "2m");
	ck_assert_uint_eq(smc_cfg.pool_ring, 64 * KIB);
	check_rejected("SMC_RCVBUF", "12q");
	ck_assert_uint_eq(smc_cfg.rcvbuf, 2 * MIB);
	check_rejected("SMC_RCVBUF", "");
	ck_assert_uint_eq(smc_cfg.rcvbuf, 2 * MIB);
	check_rejected("SMC_RCVBUF", "8k"); /* below min */
	ck_assert_uint_eq(smc_cfg.rcvbuf, 2 * MIB);
	check_rejected("SMC_SNDBUF", "1g"); /* above max */
	ck_assert_uint_eq(smc_cfg.sndbuf, 2 * MIB);
	check_rejected("SMC_SNDBUF", "99999999999999999999g");
	ck_assert_uint_eq(smc_cfg.sndbuf, 2 * MIB);
	check_rejected("SMC_MEM_CAP", "-1");
	ck_assert_uint_eq(smc_cfg.mem_cap, 8 * GIB);
	check_rejected("SMC_MEM_CAP", "65g");
	ck_assert_uint_eq(smc_cfg.mem_cap, 8 * GIB);
	check_rejected("SMC_SPIN_US", "100001");
	ck_assert_uint_eq(smc_cfg.spin_us, 20);
	check_rejected("SMC_SPIN_US", "1kk");
	ck_assert_uint_eq(smc_cfg.spin_us, 20);
	check_rejected("SMC_HANDSHAKE_TIMEOUT_MS", "0");
	ck_assert_uint_eq(smc_cfg.handshake_timeout_ms, 2000);
	check_rejected("SMC_DEBUG", "maybe");
	ck_assert(!smc_cfg.debug);
	check_rejected("SMC_LOG_LEVEL", "5");
	ck_assert_int_eq(smc_cfg.log_level, SMC_LOG_OFF);
	check_rejected("SMC_LOG_LEVEL", "verbose");
	check_rejected("SMC_TRANSPORT", "3"); /* no numeric form for transports */
	ck_assert_int_eq(smc_cfg.transport, SMC_TRANSPORT_AUTO);
	check_rejected("SMC_TRANSPORT", "rdma");
	check_rejected("SMC_COPY", "2"); /* no numeric form either */
	check_rejected("SMC_COPY", "nt");
	ck_assert_int_eq(smc_cfg.copy_store, -1);
}
END_TEST

START_TEST(bad_value_message_text)
{
	int bad;
	char *err;

	setenv("SMC_RCVBUF", "12q", 1);
	err = load_capture(&bad);
	ck_assert_str_eq(err, "smc-preload: SMC_RCVBUF=\"12q\": not a size; accepted: "
			      "16k..512m (k/m/g suffixes); using default 2m\n");
	free(err);

	clear_env();
	setenv("SMC_SPIN_US", "1000000", 1);
	err = load_capture(&bad);
	ck_assert_str_eq(err, "smc-preload: SMC_SPIN_US=\"1000000\": out of range; accepted: "
			      "0..100000; using default 20\n");
	free(err);

	clear_env();
	setenv("SMC_LOG_LEVEL", "loud", 1);
	err = load_capture(&bad);
	ck_assert_str_eq(err, "smc-preload: SMC_LOG_LEVEL=\"loud\": not a valid value; accepted: "
			      "off|error|warn|info|debug or 0..4; using default off\n");
	free(err);
}
END_TEST

/* A hostile value cannot forge extra lines or run away in length. */
START_TEST(bad_value_is_escaped)
{
	char longval[600];
	int bad;
	char *err;

	check_rejected("SMC_SNDBUF", "1\nsmc-preload: forged\n");
	check_rejected("SMC_SNDBUF", "\"quoted\"\\");
	memset(longval, 'x', sizeof(longval) - 1);
	longval[sizeof(longval) - 1] = '\0';
	check_rejected("SMC_SNDBUF", longval);
	clear_env();
	setenv("SMC_SNDBUF", longval, 1);
	err = load_capture(&bad);
	ck_assert_uint_lt(strlen(err), 300);
	free(err);
}
END_TEST

START_TEST(several_bad_values)
{
	int bad = -1;
	char *err;

	setenv("SMC_RCVBUF", "x", 1);
	setenv("SMC_SNDBUF", "y", 1);
	setenv("SMC_SPIN_US", "5", 1);
	err = load_capture(&bad);
	ck_assert_int_eq(bad, 2);
	ck_assert_int_eq(count_lines(err), 2);
	ck_assert_ptr_nonnull(strstr(err, "SMC_RCVBUF=\"x\""));
	ck_assert_ptr_nonnull(strstr(err, "SMC_SNDBUF=\"y\""));
	ck_assert_uint_eq(smc_cfg.spin_us, 5);
	free(err);
}
END_TEST

START_TEST(enum_values)
{
	static const struct { const char *text; int level; } levels[] = {
		{ "off", SMC_LOG_OFF }, { "error", SMC_LOG_ERR }, { "warn", SMC_LOG_WARN },
		{ "info", SMC_LOG_INFO }, { "debug", SMC_LOG_DEBUG }, { "DEBUG", SMC_LOG_DEBUG },
		{ "0", SMC_LOG_OFF }, { "1", SMC_LOG_ERR }, { "2", SMC_LOG_WARN },
		{ "3", SMC_LOG_INFO }, { "4", SMC_LOG_DEBUG },
	};
	static const struct { const char *text; enum smc_transport_pref t; } transports[] = {
		{ "auto", SMC_TRANSPORT_AUTO }, { "shm", SMC_TRANSPORT_SHM },
		{ "ib", SMC_TRANSPORT_IB }, { "tcp", SMC_TRANSPORT_TCP }, { "Shm", SMC_TRANSPORT_SHM },
	};
	int bad;

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		setenv("SMC_LOG_LEVEL", levels[i].text, 1);
		free(load_capture(&bad));
		ck_assert_int_eq(bad, 0);
		ck_assert_msg(smc_cfg.log_level == levels[i].level, "%s", levels[i].text);
	}
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++) {
		setenv("SMC_TRANSPORT", transports[i].text, 1);
		free(load_capture(&bad));
		ck_assert_int_eq(bad, 0);
		ck_assert_msg(smc_cfg.transport == transports[i].t, "%s", transports[i].text);
	}
}
END_TEST

START_TEST(debug_raises_log_level)
{
	int bad;

	setenv("SMC_DEBUG", "1", 1);
	free(load_capture(&bad));
	ck_assert(smc_cfg.debug);
	ck_assert_int_eq(smc_cfg.log_level, SMC_LOG_DEBUG);

	setenv("SMC_LOG_LEVEL", "error", 1);
	free(load_capture(&bad));
	ck_assert_int_eq(smc_cfg.log_level, SMC_LOG_DEBUG);
	ck_assert_int_eq(config_source(var_index("SMC_LOG_LEVEL")), SMC_CFG_ENV);

	setenv("SMC_DEBUG", "off", 1);
	free(load_capture(&bad));
	ck_assert(!smc_cfg.debug);
	ck_assert_int_eq(smc_cfg.log_level, SMC_LOG_ERR);
}
END_TEST

START_TEST(string_values)
{
	char longpath[5000];
	int bad;
	char *err;

	setenv("SMC_STATS_FILE", "", 1); /* empty = not set */
	free(load_capture(&bad));
	ck_assert_int_eq(bad, 0);
	ck_assert_ptr_null(smc_cfg.stats_file);

	/* The value is copied: changing the environment later does not change it. */
	setenv("SMC_STATS_FILE", "/tmp/a-%p.json", 1);
	free(load_capture(&bad));
	setenv("SMC_STATS_FILE", "/tmp/changed", 1);
	ck_assert_str_eq(smc_cfg.stats_file, "/tmp/a-%p.json");

	memset(longpath, 'p', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	setenv("SMC_LOG_FILE", longpath, 1);
	unsetenv("SMC_STATS_FILE");
	err = load_capture(&bad);
	ck_assert_int_eq(bad, 1);
	ck_assert_ptr_nonnull(strstr(err, "too long"));
	ck_assert_ptr_null(smc_cfg.log_file);
	ck_assert_int_eq(config_source(var_index("SMC_LOG_FILE")), SMC_CFG_INVALID);
	free(err);
}
END_TEST

/* ---------------------------------------------------------------- config_print */

static char *print_capture(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(out);
	config_print(out);
	fclose(out);
	return text;
}

/* The line config_print wrote for `name`, copied into buf. */
static void printed_line(const char *all, const char *name, char *buf, size_t len)
{
	char key[64];
	const char *p, *end;

	snprintf(key, sizeof(key), "%s=", name);
	for (p = all; p != NULL; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, strlen(key)) == 0)
			break;
	ck_assert_msg(p != NULL, "no line for %s", name);
	end = strchr(p, '\n');
	ck_assert_ptr_nonnull(end);
	ck_assert_uint_lt((size_t)(end - p), len);
	memcpy(buf, p, (size_t)(end - p));
	buf[end - p] = '\0';
}

START_TEST(print_lists_every_variable)
{
	char line[512];
	int bad;
	char *out;

	setenv("SMC_RCVBUF", "4m", 1);
	setenv("SMC_SNDBUF", "bogus", 1);
	setenv("SMC_DEBUG", "yes", 1);
	free(load_capture(&bad));
	out = print_capture();
	ck_assert_int_eq(count_lines(out), (int)smc_cfg_nvars);
	for (size_t i = 0; i < smc_cfg_nvars; i++) {
		printed_line(out, smc_cfg_vars[i].name, line, sizeof(line));
		ck_assert_msg(strstr(line, smc_cfg_vars[i].doc) != NULL, "%s", line);
		ck_assert_msg(strstr(line, "  # ") != NULL, "%s", line);
	}
	printed_line(out, "SMC_RCVBUF", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_RCVBUF=4m  (env)  # ", 24) == 0, "%s", line);
	printed_line(out, "SMC_SNDBUF", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_SNDBUF=2m  (invalid, using default)  # ", 43) == 0,
		      "%s", line);
	printed_line(out, "SMC_MEM_CAP", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_MEM_CAP=8g  (default)  # ", 29) == 0, "%s", line);
	printed_line(out, "SMC_DEBUG", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_DEBUG=1  (env)", 18) == 0, "%s", line);
	printed_line(out, "SMC_LOG_LEVEL", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_LOG_LEVEL=debug  (default)", 30) == 0, "%s", line);
	printed_line(out, "SMC_TRANSPORT", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_TRANSPORT=auto  (default)", 29) == 0, "%s", line);
	printed_line(out, "SMC_SPIN_US", line, sizeof(line));
	ck_assert_msg(strncmp(line, "SMC_SPIN_US=20  (default)", 25) == 0, "%s", line);
	free(out);
}
END_TEST

/* Printed values parse back to the same effective configuration. */
START_TEST(print_round_trips)
{
	struct smc_config first;
	char line[512];
	int bad;
	char *out;

	setenv("SMC_RCVBUF", "1536k", 1);  /* 1.5m: printed as k */
	setenv("SMC_SNDBUF", "20000", 1);  /* not a multiple of 1k */
	setenv("SMC_MEM_CAP", "2048m", 1); /* printed as 2g */
	setenv("SMC_TRANSPORT", "ib", 1);
	free(load_capture(&bad));
	first = smc_cfg;
	out = print_capture();
	for (size_t i = 0; i < smc_cfg_nvars; i++) {
		char *eq, *end;

		printed_line(out, smc_cfg_vars[i].name, line, sizeof(line));
		eq = strchr(line, '=');
		end = strstr(line, "  (");
		ck_assert(eq != NULL && end != NULL);
		*end = '\0';
		setenv(smc_cfg_vars[i].name, eq + 1, 1);
	}
	free(out);
	free(load_capture(&bad));
	ck_assert_int_eq(bad, 0);
	ck_assert_uint_eq(smc_cfg.rcvbuf, first.rcvbuf);
	ck_assert_uint_eq(smc_cfg.rcvbuf, 1536 * KIB);
	ck_assert_uint_eq(smc_cfg.sndbuf, 20000);
	ck_assert_uint_eq(smc_cfg.mem_cap, 2 * GIB);
	ck_assert_int_eq(smc_cfg.transport, SMC_TRANSPORT_IB);
	ck_assert_uint_eq(smc_cfg.spin_us, first.spin_us);
	ck_assert_int_eq(smc_cfg.log_level, first.log_level);
}
END_TEST

/* ---------------------------------------------------------------- log_expand_path */

START_TEST(expand_path)
{
	char expect[128];
	char *s;

	snprintf(expect, sizeof(expect), "/tmp/x.%ld.json", (long)getpid());
	s = log_expand_path("/tmp/x.%p.json");
	ck_assert_str_eq(s, expect);
	free(s);
	snprintf(expect, sizeof(expect), "%ld-%ld", (long)getpid(), (long)getpid());
	s = log_expand_path("%p-%p");
	ck_assert_str_eq(s, expect);
	free(s);
	s = log_expand_path("a%%p%x%");
	ck_assert_str_eq(s, "a%p%x%");
	free(s);
	s = log_expand_path("");
	ck_assert_str_eq(s, "");
	free(s);
	ck_assert_ptr_null(log_expand_path(NULL));
}
END_TEST

/* ---------------------------------------------------------------- stats */

static char *read_file(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	ck_assert_msg(f != NULL, "%s not written", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

START_TEST(log_lines_go_to_file)
{
	char dir[] = "/tmp/smc-test-log-XXXXXX";
	char tmpl[128], path[128], expect[256], longmsg[3000];
	const char *text;
	struct stat st;
	int bad;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(tmpl, sizeof(tmpl), "%s/log.%%p", dir);
	snprintf(path, sizeof(path), "%s/log.%ld", dir, (long)getpid());
	setenv("SMC_LOG_FILE", tmpl, 1);
	setenv("SMC_LOG_LEVEL", "info", 1);
	free(load_capture(&bad));
	log_init();
	ck_assert_int_eq(smc_log_level, SMC_LOG_INFO);

	errno = EAGAIN;
	log_info("hello %d", 5);
	ck_assert_int_eq(errno, EAGAIN); /* logging never changes errno */
	log_debug("not at this level");
	log_warn("second\n");
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	log_err("%s", longmsg);

	text = read_file(path);
	snprintf(expect, sizeof(expect), "smc-preload[%ld] INFO: hello 5\n"
		 "smc-preload[%ld] WARN: second\n", (long)getpid(), (long)getpid());
	ck_assert_int_eq(strncmp(text, expect, strlen(expect)), 0);
	text += strlen(expect);
	ck_assert_int_eq(count_lines(text), 1); /* the long line is cut, newline kept */
	ck_assert_uint_lt(strlen(text), 1100);
	ck_assert_ptr_nonnull(strstr(text, "ERROR: mmm"));
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(stats_json_shape)
{
	char dir[] = "/tmp/smc-test-stats-XXXXXX";
	char path[128], expect[1024];
	struct smc_stats_snapshot snap;
	char *json;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/stats.json", dir);

	stats_conn(SMC_MODE_SHM, SMC_REASON_NONE);
	stats_conn(SMC_MODE_SHM, SMC_REASON_NONE);
	stats_conn(SMC_MODE_TCP, SMC_REASON_PEER_NOT_SMC);
	stats_conn(SMC_MODE_TCP, SMC_REASON_MEM_CAP);
	stats_conn(SMC_MODE_TCP, SMC_REASON_MEM_CAP);
	stats_conn(SMC_MODE_MAX, SMC_REASON_NONE); /* ignored */
	stats_bytes(SMC_MODE_SHM, 100, 7);
	stats_bytes(SMC_MODE_SHM, 1, 0);
	stats_bytes(SMC_MODE_TCP, 0, 5);
	stats_count_abort();
	stats_count_wakeup();
	stats_count_wakeup();

	stats_snapshot(&snap);
	ck_assert_uint_eq(snap.conns[SMC_MODE_SHM], 2);
	ck_assert_uint_eq(snap.conns[SMC_MODE_TCP], 3);
	ck_assert_uint_eq(snap.reasons[SMC_REASON_MEM_CAP], 2);
	ck_assert_uint_eq(snap.reasons[SMC_REASON_NONE], 0);
	ck_assert_uint_eq(snap.sent[SMC_MODE_SHM], 101);

	ck_assert_int_eq(stats_write(path), 0);
	json = read_file(path);
	snprintf(expect, sizeof(expect),
		 "{\"version\":1,\"pid\":%ld,\"connections\":{\"shm\":2,\"ib\":0,\"tcp\":3},"
		 "\"fallback\":{\"peer-not-smc\":1,\"mem-cap\":2},"
		 "\"bytes\":{\"shm\":{\"sent\":101,\"received\":7},"
		 "\"ib\":{\"sent\":0,\"received\":0},\"tcp\":{\"sent\":0,\"received\":5}},"
		 "\"events\":{\"aborts\":1,\"wakeups_sent\":2,\"rnr\":0,\"ib_wc_errors\":0,"
		 "\"ib_link_failures\":0,\"ib_links\":0,\"ib_rdma_writes\":0,\"ib_cdc_sent\":0,"
		 "\"ib_cons_updates\":0,\"ib_credit_waits\":0,\"shm_stream_bytes\":0,\"shm_rewinds\":0,\"shm_pooled\":0,\"pool_pending\":0,\"pool_full\":0,\"hs_background\":0,\"downgrades\":0,\"peer_downgrades\":0,\"exec_carried\":0}}\n",
		 (long)getpid());
	ck_assert_str_eq(json, expect);

	/* No temporary file is left next to it. */
	snprintf(expect, sizeof(expect), "%s.tmp.%ld", path, (long)getpid());
	ck_assert_int_ne(access(expect, F_OK), 0);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(stats_empty_fallback_and_at_exit)
{
	char dir[] = "/tmp/smc-test-stats-XXXXXX";
	char tmpl[128], path[128];
	int bad;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(tmpl, sizeof(tmpl), "%s/s.%%p.json", dir);
	snprintf(path, sizeof(path), "%s/s.%ld.json", dir, (long)getpid());
	setenv("SMC_STATS_FILE", tmpl, 1);
	free(load_capture(&bad));
	stats_at_exit();
	ck_assert_ptr_nonnull(strstr(read_file(path), "\"fallback\":{},"));
	unlink(path);
	rmdir(dir);
	ck_assert_int_eq(stats_write("/nonexistent-dir/x.json"), -1);
}
END_TEST

START_TEST(stats_names)
{
	static const char *const expect[SMC_REASON_MAX] = {
		"none", "disabled", "peer-not-smc", "not-local", "handshake-failed", "declined",
		"mem-cap", "resources", "sockopt", "peer-closed", "short-lived", "readiness",
		"io-uring", "fd-limit", "rendezvous-taken", "fork-pending", "exec", "fork", "peer-downgrade",
		"fd-passed", "stdio", "seccomp", "fd-table", "exec-state",
	};

	for (int r = 0; r < SMC_REASON_MAX; r++)
		ck_assert_str_eq(stats_reason_name((enum smc_reason)r), expect[r]);
	ck_assert_str_eq(stats_mode_name(SMC_MODE_TCP), "tcp");
	ck_assert_str_eq(stats_mode_name(SMC_MODE_SHM), "shm");
	ck_assert_str_eq(stats_mode_name(SMC_MODE_IB), "ib");
}
END_TEST

/* ---------------------------------------------------------------- rings and the L2 */

START_TEST(ring_for_l2_rule)
{
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 0), 2 * MIB);   /* unknown */
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, -1), 2 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 256 * KIB), 2 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 1 * MIB), 2 * MIB); /* the project VM */
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 1 * MIB + 1), 4 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 1280 * KIB), 4 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 2 * MIB), 4 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 3 * MIB), 8 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 4 * MIB), 8 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(2 * MIB, 64 * MIB), 8 * MIB); /* at most 8m */
	ck_assert_uint_eq(config_ring_for_l2(16 * KIB, 1 * MIB), 2 * MIB);
	ck_assert_uint_eq(config_ring_for_l2(16 * MIB, 4 * MIB), 16 * MIB); /* never shrinks */
}
END_TEST

/* config_load() for a CPU with l2 bytes of L2 and no SMC_* variable set. */
static void load_for_l2(long l2)
{
	int bad;

	config_set_cpu_l2(l2);
	free(load_capture(&bad));
	ck_assert_int_eq(bad, 0);
}

static void expect_rings_and_cap(size_t rcvbuf, size_t sndbuf, size_t cap)
{
	ck_assert_uint_eq(smc_cfg.rcvbuf, rcvbuf);
	ck_assert_uint_eq(smc_cfg.sndbuf, sndbuf);
	ck_assert_uint_eq(smc_cfg.mem_cap, cap);
}

/* This project's VM: 1 MiB of L2, the table's defaults stand. */
START_TEST(load_l2_within_default)
{
	load_for_l2(1 * MIB);
	expect_rings_and_cap(2 * MIB, 2 * MIB, 8 * GIB);
	ck_assert_int_eq(config_source(var_index("SMC_RCVBUF")), SMC_CFG_DEFAULT);
	ck_assert_int_eq(config_source(var_index("SMC_MEM_CAP")), SMC_CFG_DEFAULT);
}
END_TEST

/* 2 MiB of L2 per core: 4 MiB rings, and the cap doubles with them. */
START_TEST(load_l2_raises_defaults)
{
	char line[512];
	char *out;

	load_for_l2(2 * MIB);
	expect_rings_and_cap(4 * MIB, 4 * MIB, 16 * GIB);
	ck_assert_int_eq(config_source(var_index("SMC_RCVBUF")), SMC_CFG_CPU);
	ck_assert_int_eq(config_source(var_index("SMC_SNDBUF")), SMC_CFG_CPU);
	ck_assert_int_eq(config_source(var_index("SMC_MEM_CAP")), SMC_CFG_CPU);
	out = print_capture();
	printed_line(out, "SMC_RCVBUF", line, sizeof(line));
	ck_assert_msg(strstr(line, "SMC_RCVBUF=4m  (default, raised for this CPU's L2 cache)  # ")
		      == line, "%s", line);
	printed_line(out, "SMC_MEM_CAP", line, sizeof(line));
	ck_assert_msg(strstr(line, "SMC_MEM_CAP=16g  (default, raised") == line, "%s", line);
	free(out);

	/* the largest L2 the rule follows: 8 MiB rings, the cap four times the table's */
	clear_env();
	load_for_l2(4 * MIB);
	expect_rings_and_cap(8 * MIB, 8 * MIB, 32 * GIB);
}
END_TEST

/* What the user set stays; what the user got wrong stays the table default, as the
 * message says. */
START_TEST(load_l2_keeps_env_values)
{
	char *msg;
	int bad;

	config_set_cpu_l2(2 * MIB);
	setenv("SMC_RCVBUF", "1m", 1);
	free(load_capture(&bad));
	ck_assert_uint_eq(smc_cfg.rcvbuf, 1 * MIB);
	ck_assert_int_eq(config_source(var_index("SMC_RCVBUF")), SMC_CFG_ENV);
	ck_assert_uint_eq(smc_cfg.sndbuf, 4 * MIB);
	ck_assert_uint_eq(smc_cfg.mem_cap, 16 * GIB);

	clear_env();
	config_set_cpu_l2(2 * MIB);
	setenv("SMC_MEM_CAP", "1g", 1);
	setenv("SMC_SNDBUF", "12q", 1);
	msg = load_capture(&bad);
	ck_assert_int_eq(bad, 1);
	ck_assert_msg(strstr(msg, "using default 2m") != NULL, "%s", msg);
	free(msg);
	ck_assert_uint_eq(smc_cfg.sndbuf, 2 * MIB);
	ck_assert_int_eq(config_source(var_index("SMC_SNDBUF")), SMC_CFG_INVALID);
	ck_assert_uint_eq(smc_cfg.rcvbuf, 4 * MIB);
	ck_assert_uint_eq(smc_cfg.mem_cap, 1 * GIB);

	/* both rings set: nothing grew, the cap stays the table's */
	clear_env();
	config_set_cpu_l2(2 * MIB);
	setenv("SMC_RCVBUF", "2m", 1);
	setenv("SMC_SNDBUF", "2m", 1);
	free(load_capture(&bad));
	ck_assert_uint_eq(smc_cfg.mem_cap, 8 * GIB);
	ck_assert_int_eq(config_source(var_index("SMC_MEM_CAP")), SMC_CFG_DEFAULT);
}
END_TEST

START_TEST(cache_size_text)
{
	ck_assert_int_eq(cpu_cache_parse_size("1024K\n"), 1048576);
	ck_assert_int_eq(cpu_cache_parse_size("1024K"), 1048576);
	ck_assert_int_eq(cpu_cache_parse_size("2M\n"), 2097152);
	ck_assert_int_eq(cpu_cache_parse_size("512"), 512);
	ck_assert_int_eq(cpu_cache_parse_size(""), -1);
	ck_assert_int_eq(cpu_cache_parse_size("K"), -1);
	ck_assert_int_eq(cpu_cache_parse_size("-1K"), -1);
	ck_assert_int_eq(cpu_cache_parse_size("12X"), -1);
	ck_assert_int_eq(cpu_cache_parse_size("1024K\n\n"), -1);
	ck_assert_int_eq(cpu_cache_parse_size("99999999999999999999999K"), -1);
	ck_assert_int_eq(cpu_cache_parse_size("9999999999999999M"), -1);
}
END_TEST

static void write_text(const char *dir, const char *name, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* A sysfs cache directory: index<i> with level, type and size. */
static void fake_cache(const char *root, int i, const char *level, const char *type,
		       const char *size)
{
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/index%d", root, i);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	write_text(dir, "level", level);
	write_text(dir, "type", type);
	write_text(dir, "size", size);
}

START_TEST(l2_from_sysfs)
{
	char root[] = "/tmp/smc-cache-XXXXXX", other[] = "/tmp/smc-cache-XXXXXX";
	char cmd[128];

	ck_assert_ptr_nonnull(mkdtemp(root));
	fake_cache(root, 0, "1\n", "Data\n", "48K\n");
	fake_cache(root, 1, "1\n", "Instruction\n", "32K\n");
	fake_cache(root, 2, "2\n", "Unified\n", "2048K\n");
	fake_cache(root, 3, "3\n", "Unified\n", "32768K\n");
	ck_assert_int_eq(cpu_l2_from_sysfs(root), 2 * 1024 * 1024);

	/* an instruction-only L2 and an unreadable size do not count; no L2 at all is 0 */
	ck_assert_ptr_nonnull(mkdtemp(other));
	fake_cache(other, 0, "1\n", "Data\n", "32K\n");
	fake_cache(other, 1, "2\n", "Instruction\n", "1024K\n");
	fake_cache(other, 2, "2\n", "Data\n", "lots\n");
	fake_cache(other, 3, "3\n", "Unified\n", "8M\n");
	ck_assert_int_eq(cpu_l2_from_sysfs(other), 0);
	ck_assert_int_eq(cpu_l2_from_sysfs("/nonexistent/smc-cache"), 0);

	snprintf(cmd, sizeof(cmd), "rm -rf %s %s", root, other);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *parse = tcase_create("parse");
	TCase *load = tcase_create("load");
	TCase *other = tcase_create("log+stats");
	TCase *cpu = tcase_create("rings+L2");

	tcase_add_checked_fixture(parse, clear_env, NULL);
	tcase_add_test(parse, size_plain_and_suffixes);
	tcase_add_test(parse, size_garbage);
	tcase_add_test(parse, size_overflow_and_range);
	tcase_add_test(parse, uint_values);
	tcase_add_test(parse, bool_values);
	suite_add_tcase(s, parse);

	tcase_add_checked_fixture(load, clear_env, NULL);
	tcase_add_test(load, table_is_sane);
	tcase_add_test(load, defaults_before_load_match_table);
	tcase_add_test(load, load_good_values);
	tcase_add_test(load, bad_values_keep_defaults);
	tcase_add_test(load, bad_value_message_text);
	tcase_add_test(load, bad_value_is_escaped);
	tcase_add_test(load, several_bad_values);
	tcase_add_test(load, enum_values);
	tcase_add_test(load, debug_raises_log_level);
	tcase_add_test(load, string_values);
	tcase_add_test(load, print_lists_every_variable);
	tcase_add_test(load, print_round_trips);
	suite_add_tcase(s, load);

	tcase_add_checked_fixture(other, clear_env, NULL);
	tcase_add_test(other, expand_path);
	tcase_add_test(other, log_lines_go_to_file);
	tcase_add_test(other, stats_json_shape);
	tcase_add_test(other, stats_empty_fallback_and_at_exit);
	tcase_add_test(other, stats_names);
	suite_add_tcase(s, other);

	tcase_add_checked_fixture(cpu, clear_env, NULL);
	tcase_add_test(cpu, ring_for_l2_rule);
	tcase_add_test(cpu, load_l2_within_default);
	tcase_add_test(cpu, load_l2_raises_defaults);
	tcase_add_test(cpu, load_l2_keeps_env_values);
	tcase_add_test(cpu, cache_size_text);
	tcase_add_test(cpu, l2_from_sysfs);
	suite_add_tcase(s, cpu);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	/* Fork mode (the default) gives every test a pristine smc_cfg and counters. */
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
