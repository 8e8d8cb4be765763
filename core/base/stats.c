/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Process-wide counters and the SMC_STATS_FILE JSON summary.
 *
 * Counters are plain uint64_t updated with relaxed atomics: they are statistics, no
 * other memory is published through them, and a relaxed add is the cheapest way for
 * many threads to count without a lock. The JSON shape is documented (and its key
 * names defined) in include/smc_preload.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/fsize.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/base/stats.h"
#include "smc_preload.h"

static uint64_t conns[SMC_MODE_MAX];
static uint64_t reasons[SMC_REASON_MAX];
static uint64_t bytes_sent[SMC_MODE_MAX];
static uint64_t bytes_received[SMC_MODE_MAX];
static uint64_t aborts;
static uint64_t wakeups_sent;
static uint64_t stream_bytes;
static uint64_t rewinds;
static uint64_t pooled;
static uint64_t pool_pending;
static uint64_t pool_full;
static uint64_t hs_background;
static uint64_t downgrades, peer_downgrades;
static uint64_t exec_carried;
static uint64_t ib_events[SMC_IB_EVENT_MAX];

static const char *const ib_event_names[SMC_IB_EVENT_MAX] = {
	[SMC_IB_RNR] = SMC_STATS_KEY_RNR,
	[SMC_IB_WC_ERRORS] = SMC_STATS_KEY_IB_WC_ERRORS,
	[SMC_IB_LINK_FAILURES] = SMC_STATS_KEY_IB_LINK_FAILURES,
	[SMC_IB_LINKS] = SMC_STATS_KEY_IB_LINKS,
	[SMC_IB_RDMA_WRITES] = SMC_STATS_KEY_IB_RDMA_WRITES,
	[SMC_IB_CDC_SENT] = SMC_STATS_KEY_IB_CDC_SENT,
	[SMC_IB_CONS_UPDATES] = SMC_STATS_KEY_IB_CONS_UPDATES,
	[SMC_IB_CREDIT_WAITS] = SMC_STATS_KEY_IB_CREDIT_WAITS,
};

static const char *const mode_names[SMC_MODE_MAX] = {
	[SMC_MODE_TCP] = SMC_STATS_MODE_TCP,
	[SMC_MODE_SHM] = SMC_STATS_MODE_SHM,
	[SMC_MODE_IB] = SMC_STATS_MODE_IB,
};

static const char *const reason_names[SMC_REASON_MAX] = {
	[SMC_REASON_NONE] = SMC_STATS_REASON_NONE,
	[SMC_REASON_DISABLED] = SMC_STATS_REASON_DISABLED,
	[SMC_REASON_PEER_NOT_SMC] = SMC_STATS_REASON_PEER_NOT_SMC,
	[SMC_REASON_NOT_LOCAL] = SMC_STATS_REASON_NOT_LOCAL,
	[SMC_REASON_HANDSHAKE] = SMC_STATS_REASON_HANDSHAKE,
	[SMC_REASON_DECLINED] = SMC_STATS_REASON_DECLINED,
	[SMC_REASON_MEM_CAP] = SMC_STATS_REASON_MEM_CAP,
	[SMC_REASON_RESOURCES] = SMC_STATS_REASON_RESOURCES,
	[SMC_REASON_SOCKOPT] = SMC_STATS_REASON_SOCKOPT,
	[SMC_REASON_PEER_CLOSED] = SMC_STATS_REASON_PEER_CLOSED,
	[SMC_REASON_SHORT_LIVED] = SMC_STATS_REASON_SHORT_LIVED,
	[SMC_REASON_READINESS] = SMC_STATS_REASON_READINESS,
	[SMC_REASON_IO_URING] = SMC_STATS_REASON_IO_URING,
	[SMC_REASON_FD_LIMIT] = SMC_STATS_REASON_FD_LIMIT,
	[SMC_REASON_RDV_TAKEN] = SMC_STATS_REASON_RDV_TAKEN,
	[SMC_REASON_EXEC] = SMC_STATS_REASON_EXEC,
	[SMC_REASON_FORK] = SMC_STATS_REASON_FORK,
	[SMC_REASON_FORK_PENDING] = SMC_STATS_REASON_FORK_PENDING,
	[SMC_REASON_PEER_DOWNGRADE] = SMC_STATS_REASON_PEER_DOWNGRADE,
	[SMC_REASON_FD_PASSED] = SMC_STATS_REASON_FD_PASSED,
	[SMC_REASON_STDIO] = SMC_STATS_REASON_STDIO,
	[SMC_REASON_SECCOMP] = SMC_STATS_REASON_SECCOMP,
	[SMC_REASON_FD_TABLE] = SMC_STATS_REASON_FD_TABLE,
	[SMC_REASON_EXEC_STATE] = SMC_STATS_REASON_EXEC_STATE,
};

/* Order of modes in the JSON objects, as documented. */
static const enum smc_mode json_mode_order[SMC_MODE_MAX] = { SMC_MODE_SHM, SMC_MODE_IB,
							      SMC_MODE_TCP };

const char *stats_mode_name(enum smc_mode m)
{
	return (unsigned)m < SMC_MODE_MAX ? mode_names[m] : "unknown";
}

const char *stats_reason_name(enum smc_reason r)
{
	return (unsigned)r < SMC_REASON_MAX ? reason_names[r] : "unknown";
}

static void count(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static uint64_t load(const uint64_t *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void stats_conn(enum smc_mode m, enum smc_reason r)
{
	if ((unsigned)m >= SMC_MODE_MAX)
		return;
	count(&conns[m], 1);
	/* Reasons explain fallbacks; an upgraded connection has none to count. */
	if (m == SMC_MODE_TCP && (unsigned)r < SMC_REASON_MAX)
		count(&reasons[r], 1);
}

void stats_bytes(enum smc_mode m, size_t sent, size_t received)
{
	if ((unsigned)m >= SMC_MODE_MAX)
		return;
	if (sent != 0)
		count(&bytes_sent[m], sent);
	if (received != 0)
		count(&bytes_received[m], received);
}

void stats_count_abort(void)
{
	count(&aborts, 1);
}

void stats_count_wakeup(void)
{
	count(&wakeups_sent, 1);
}

void stats_count_stream(size_t bytes)
{
	count(&stream_bytes, bytes);
}

void stats_count_rewind(void)
{
	count(&rewinds, 1);
}

void stats_count_pooled(void)
{
	count(&pooled, 1);
}

void stats_count_pool_miss(bool full)
{
	count(full ? &pool_full : &pool_pending, 1);
}

void stats_count_hs_background(void)
{
	count(&hs_background, 1);
}

void stats_count_downgrade(bool by_peer)
{
	count(by_peer ? &peer_downgrades : &downgrades, 1);
}

void stats_count_carried(void)
{
	count(&exec_carried, 1);
}

void stats_add_snapshot(const struct smc_stats_snapshot *s)
{
	for (int m = 0; m < SMC_MODE_MAX; m++) {
		count(&conns[m], s->conns[m]);
		count(&bytes_sent[m], s->sent[m]);
		count(&bytes_received[m], s->received[m]);
	}
	for (int r = 0; r < SMC_REASON_MAX; r++)
		count(&reasons[r], s->reasons[r]);
	count(&aborts, s->aborts);
	count(&wakeups_sent, s->wakeups_sent);
	count(&stream_bytes, s->stream_bytes);
	count(&rewinds, s->rewinds);
	count(&pooled, s->pooled);
	count(&pool_pending, s->pool_pending);
	count(&pool_full, s->pool_full);
	count(&hs_background, s->hs_background);
	count(&downgrades, s->downgrades);
	count(&peer_downgrades, s->peer_downgrades);
	count(&exec_carried, s->exec_carried);
	for (int e = 0; e < SMC_IB_EVENT_MAX; e++)
		count(&ib_events[e], s->ib[e]);
}

void stats_count_ib(enum smc_ib_event e, uint64_t n)
{
	if ((unsigned)e < SMC_IB_EVENT_MAX)
		count(&ib_events[e], n);
}

void stats_atfork_child(void)
{
	/* the only thread of the child: nobody counts concurrently */
	memset(conns, 0, sizeof(conns));
	memset(reasons, 0, sizeof(reasons));
	memset(bytes_sent, 0, sizeof(bytes_sent));
	memset(bytes_received, 0, sizeof(bytes_received));
	memset(ib_events, 0, sizeof(ib_events));
	aborts = wakeups_sent = stream_bytes = rewinds = pooled = pool_pending = pool_full = 0;
	hs_background = downgrades = peer_downgrades = exec_carried = 0;
}

void stats_snapshot(struct smc_stats_snapshot *out)
{
	for (int m = 0; m < SMC_MODE_MAX; m++) {
		out->conns[m] = load(&conns[m]);
		out->sent[m] = load(&bytes_sent[m]);
		out->received[m] = load(&bytes_received[m]);
	}
	for (int r = 0; r < SMC_REASON_MAX; r++)
		out->reasons[r] = load(&reasons[r]);
	out->aborts = load(&aborts);
	out->wakeups_sent = load(&wakeups_sent);
	out->stream_bytes = load(&stream_bytes);
	out->rewinds = load(&rewinds);
	out->pooled = load(&pooled);
	out->pool_pending = load(&pool_pending);
	out->pool_full = load(&pool_full);
	out->hs_background = load(&hs_background);
	out->downgrades = load(&downgrades);
	out->peer_downgrades = load(&peer_downgrades);
	out->exec_carried = load(&exec_carried);
	for (int e = 0; e < SMC_IB_EVENT_MAX; e++)
		out->ib[e] = load(&ib_events[e]);
}

/* Appends to a fixed buffer; remembers overflow instead of failing at each call. */
struct json_buf {
	char data[2048];
	size_t len;
	bool overflow;
};

__attribute__((format(printf, 2, 3)))
static void jb_printf(struct json_buf *jb, const char *fmt, ...)
{
	size_t room = sizeof(jb->data) - jb->len;
	va_list ap;
	int n;

	if (jb->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(jb->data + jb->len, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room)
		jb->overflow = true;
	else
		jb->len += (size_t)n;
}

static void stats_format_json(struct json_buf *jb, const struct smc_stats_snapshot *s)
{
	const char *sep = "";

	jb_printf(jb, "{\"%s\":%d,\"%s\":%ld", SMC_STATS_KEY_VERSION, SMC_STATS_VERSION,
		  SMC_STATS_KEY_PID, (long)getpid());

	jb_printf(jb, ",\"%s\":{", SMC_STATS_KEY_CONNECTIONS);
	for (int i = 0; i < SMC_MODE_MAX; i++) {
		enum smc_mode m = json_mode_order[i];

		jb_printf(jb, "%s\"%s\":%llu", i ? "," : "", mode_names[m],
			  (unsigned long long)s->conns[m]);
	}

	jb_printf(jb, "},\"%s\":{", SMC_STATS_KEY_FALLBACK);
	/* "none" means upgraded: never a fallback, even if a caller counted it so. */
	for (int r = SMC_REASON_NONE + 1; r < SMC_REASON_MAX; r++) {
		if (s->reasons[r] == 0)
			continue;
		jb_printf(jb, "%s\"%s\":%llu", sep, reason_names[r],
			  (unsigned long long)s->reasons[r]);
		sep = ",";
	}

	jb_printf(jb, "},\"%s\":{", SMC_STATS_KEY_BYTES);
	for (int i = 0; i < SMC_MODE_MAX; i++) {
		enum smc_mode m = json_mode_order[i];

		jb_printf(jb, "%s\"%s\":{\"%s\":%llu,\"%s\":%llu}", i ? "," : "", mode_names[m],
			  SMC_STATS_KEY_SENT, (unsigned long long)s->sent[m],
			  SMC_STATS_KEY_RECEIVED, (unsigned long long)s->received[m]);
	}

	jb_printf(jb, "},\"%s\":{\"%s\":%llu,\"%s\":%llu", SMC_STATS_KEY_EVENTS,
		  SMC_STATS_KEY_ABORTS, (unsigned long long)s->aborts,
		  SMC_STATS_KEY_WAKEUPS_SENT, (unsigned long long)s->wakeups_sent);
	for (int e = 0; e < SMC_IB_EVENT_MAX; e++)
		jb_printf(jb, ",\"%s\":%llu", ib_event_names[e], (unsigned long long)s->ib[e]);
	jb_printf(jb, ",\"%s\":%llu,\"%s\":%llu,\"%s\":%llu,\"%s\":%llu,\"%s\":%llu,\"%s\":%llu",
		  SMC_STATS_KEY_SHM_STREAM_BYTES, (unsigned long long)s->stream_bytes,
		  SMC_STATS_KEY_SHM_REWINDS, (unsigned long long)s->rewinds,
		  SMC_STATS_KEY_SHM_POOLED, (unsigned long long)s->pooled,
		  SMC_STATS_KEY_POOL_PENDING, (unsigned long long)s->pool_pending,
		  SMC_STATS_KEY_POOL_FULL, (unsigned long long)s->pool_full,
		  SMC_STATS_KEY_HS_BACKGROUND, (unsigned long long)s->hs_background);
	jb_printf(jb, ",\"%s\":%llu,\"%s\":%llu,\"%s\":%llu", SMC_STATS_KEY_DOWNGRADES,
		  (unsigned long long)s->downgrades, SMC_STATS_KEY_PEER_DOWNGRADES,
		  (unsigned long long)s->peer_downgrades, SMC_STATS_KEY_EXEC_CARRIED,
		  (unsigned long long)s->exec_carried);
	jb_printf(jb, "}}\n");
}

static int write_all(int fd, const char *buf, size_t len)
{
	if (!fsize_allows_append(fd, len)) /* SIGXFSZ otherwise (fsize.h) */
		return errno = EFBIG, -1;
	while (len > 0) {
		ssize_t n = REAL(write)(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int stats_write(const char *path)
{
	struct smc_stats_snapshot snap;
	struct json_buf jb = { .len = 0, .overflow = false };
	char tmp[PATH_MAX];
	int fd, n, saved;

	stats_snapshot(&snap);
	stats_format_json(&jb, &snap);
	if (jb.overflow) {
		errno = EOVERFLOW;
		return -1;
	}
	/* Same directory as the target, so rename() is atomic: readers never see half. */
	n = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = REAL(open)(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (write_all(fd, jb.data, jb.len) < 0) {
		saved = errno;
		REAL(close)(fd);
		unlink(tmp);
		errno = saved;
		return -1;
	}
	if (REAL(close)(fd) < 0 || rename(tmp, path) < 0) {
		saved = errno;
		unlink(tmp);
		errno = saved;
		return -1;
	}
	return 0;
}

static bool stats_all_zero(void)
{
	struct smc_stats_snapshot snap, zero;

	stats_snapshot(&snap);
	memset(&zero, 0, sizeof(zero));
	return memcmp(&snap, &zero, sizeof(snap)) == 0;
}

void stats_at_exit(void)
{
	int saved_errno = errno;
	char *path;

	/* a sandboxed process may open no file, and a write may exceed its RLIMIT_FSIZE
	 * (sandbox.h): its counts are not written */
	if (smc_cfg.stats_file == NULL || sandbox_active())
		return;
	path = log_expand_path(smc_cfg.stats_file);
	if (path == NULL) {
		smc_log(SMC_LOG_ERR, "cannot expand SMC_STATS_FILE (out of memory)");
		return;
	}
	/* A program exec'd by a process that wrote its counts before the exec (same pid,
	 * stats_before_exec: a forked child that handed its connection over) keeps them
	 * when it counted nothing itself: /bin/true must not erase a downgrade. */
	if (stats_all_zero() && access(path, F_OK) == 0) {
		free(path);
		errno = saved_errno;
		return;
	}
	if (stats_write(path) < 0)
		smc_log(SMC_LOG_ERR, "cannot write SMC_STATS_FILE %s: %s", path, strerror(errno));
	else
		log_debug("stats written to %s", path);
	free(path);
	errno = saved_errno;
}

void stats_before_exec(void)
{
	if (!stats_all_zero())
		stats_at_exit();
}
