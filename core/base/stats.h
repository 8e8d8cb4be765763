/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Process-wide counters and the SMC_STATS_FILE JSON summary written at exit.
 * The JSON shape is documented in include/smc_preload.h and man/libsmc_preload.7;
 * integration tests rely on it.
 */
#ifndef SMC_STATS_H
#define SMC_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum smc_mode { SMC_MODE_TCP = 0, SMC_MODE_SHM, SMC_MODE_IB, SMC_MODE_MAX };

/* Why a TCP connection was not upgraded. Names (stats_reason_name) are stable ABI. */
enum smc_reason {
	SMC_REASON_NONE = 0,        /* upgraded */
	SMC_REASON_DISABLED,        /* SMC_TRANSPORT=tcp */
	SMC_REASON_PEER_NOT_SMC,    /* peer does not run the library (no rendezvous) */
	SMC_REASON_NOT_LOCAL,       /* peer on another host and no RDMA transport */
	SMC_REASON_HANDSHAKE,       /* handshake failed or timed out */
	SMC_REASON_DECLINED,        /* peer sent a Decline */
	SMC_REASON_MEM_CAP,         /* SMC_MEM_CAP reached */
	SMC_REASON_RESOURCES,       /* memfd/mmap/eventfd failed */
	SMC_REASON_SOCKOPT,         /* socket options SMC cannot honour (e.g. MSG_OOB use) */
	SMC_REASON_PEER_CLOSED,     /* the peer closed the connection during the handshake */
	SMC_REASON_SHORT_LIVED,     /* client: this destination's connections close too soon (hs_policy.h) */
	SMC_REASON_READINESS,       /* in a readiness set (epoll...) the emulation cannot take over */
	SMC_REASON_IO_URING,        /* the process uses io_uring, which bypasses the library */
	SMC_REASON_FD_LIMIT,        /* the library's descriptors would crowd RLIMIT_NOFILE */
	SMC_REASON_RDV_TAKEN,       /* the connection's rendezvous name is held by another user */
	SMC_REASON_FORK_PENDING,    /* fork() while its handshake was still running */
	/* an upgraded connection taken back to TCP (conn_downgrade): the reason is the
	 * connection's own (smcpstat), not counted in "fallback" (it was upgraded); EXEC,
	 * FD_PASSED and STDIO are counted there for a connection still negotiating at that
	 * moment, decided as TCP (downgrade.c, fd_leave_rings) */
	SMC_REASON_EXEC,            /* its fd went into a new program (exec, posix_spawn) */
	SMC_REASON_FORK,            /* an RDMA connection a forked child inherits */
	SMC_REASON_PEER_DOWNGRADE,  /* the peer took it back to TCP */
	SMC_REASON_FD_PASSED,       /* its fd went to another process over a unix socket */
	SMC_REASON_STDIO,           /* stdio got it (fdopen, a standard stream), unseen by us */
	SMC_REASON_SECCOMP,         /* the process loaded a seccomp filter (sandbox_entry.c) */
	SMC_REASON_FD_TABLE,        /* a thread took a descriptor table of its own (table_split.c) */
	/* counted: a connection carried across exec whose description the new image
	 * refused (exec_carry.c); it is reset */
	SMC_REASON_EXEC_STATE,
	SMC_REASON_MAX
};

const char *stats_mode_name(enum smc_mode m);
const char *stats_reason_name(enum smc_reason r);

/* A connection was established in mode m (reason only for SMC_MODE_TCP). */
void stats_conn(enum smc_mode m, enum smc_reason r);
/* Payload bytes moved by the application through a connection of mode m. */
void stats_bytes(enum smc_mode m, size_t sent, size_t received);

/* RDMA transport events (the "events" keys of smc_preload.h in brackets). */
enum smc_ib_event {
	SMC_IB_RNR = 0,        /* receiver-not-ready retries exhausted ("rnr") */
	SMC_IB_WC_ERRORS,      /* other failed work completions, flushes excluded */
	SMC_IB_LINK_FAILURES,  /* links (RC QPs) that failed: their connections aborted */
	SMC_IB_LINKS,          /* links created */
	SMC_IB_RDMA_WRITES,    /* RDMA WRITE work requests posted */
	SMC_IB_CDC_SENT,       /* CDC messages (SENDs) posted */
	SMC_IB_CONS_UPDATES,   /* of those, sent for the window update policy */
	SMC_IB_CREDIT_WAITS,   /* publishes that waited for a receive credit */
	SMC_IB_EVENT_MAX
};
void stats_count_ib(enum smc_ib_event e, uint64_t n);

struct smc_stats_snapshot {
	uint64_t conns[SMC_MODE_MAX];
	uint64_t reasons[SMC_REASON_MAX];
	uint64_t sent[SMC_MODE_MAX];
	uint64_t received[SMC_MODE_MAX];
	uint64_t aborts;        /* connections aborted because of bad peer data */
	uint64_t wakeups_sent;  /* doorbells rung towards peers */
	uint64_t stream_bytes;  /* shm payload stored with non-temporal stores */
	uint64_t rewinds;       /* shm messages started at a ring's beginning (conn_data.c) */
	uint64_t pooled;        /* shm connections that ran on a pool slot (pool.h) */
	uint64_t pool_pending;  /* short-lived TCP connections made while their pool was set up */
	uint64_t pool_full;     /* short-lived TCP connections made while every slot was taken */
	uint64_t hs_background; /* server handshakes accept() left to the progress thread */
	uint64_t downgrades;    /* upgraded connections this process took back to TCP */
	uint64_t peer_downgrades; /* upgraded connections whose peer took them back to TCP */
	uint64_t exec_carried;  /* upgraded connections carried into this image across exec */
	uint64_t ib[SMC_IB_EVENT_MAX];
};
void stats_snapshot(struct smc_stats_snapshot *out);
void stats_count_abort(void);
void stats_count_wakeup(void);
/* Bytes written into a peer's ring with non-temporal stores (copy_adapt.h). */
void stats_count_stream(size_t bytes);
void stats_count_rewind(void);
void stats_count_pooled(void);
/* A short-lived connection stayed TCP: its pool not set up yet, or (full) out of slots. */
void stats_count_pool_miss(bool full);
void stats_count_hs_background(void);
/* An upgraded connection went back to TCP mid-stream, taken by us or by the peer. */
void stats_count_downgrade(bool by_peer);
void stats_count_carried(void);
/* The counts the image before an exec left (same process): added to ours. */
void stats_add_snapshot(const struct smc_stats_snapshot *s);

/* Writes the JSON summary to `path` (already %p-expanded); 0 or -1 with errno. */
int stats_write(const char *path);
/* Called at process exit: writes smc_cfg.stats_file if set. */
void stats_at_exit(void);
/* Before an exec: the same, when there is anything to report (a forked child that only
 * execs another program counted nothing and leaves no file). */
void stats_before_exec(void);
/* In a forked child: every counter starts at zero. The counts are per process: a
 * connection is counted by the process that made it (connected or accepted), bytes by
 * the process that moved them, over whichever connection; summing the files of a
 * family of processes counts each connection and each byte once. */
void stats_atfork_child(void);

#endif
