/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * smc-preload public interface for tools and tests.
 *
 * Nothing here needs linking: it documents the SMC_STATS_FILE JSON summary, whose shape
 * is a stable interface (tests prove a connection really used SMC by reading it).
 *
 * When SMC_STATS_FILE is set (%p in it is replaced by the pid, %% by %), each process
 * running the library writes at exit() one line of JSON:
 *
 *   {"version":1,"pid":1234,
 *    "connections":{"shm":N,"ib":N,"tcp":N},
 *    "fallback":{"<reason>":N, ...},
 *    "bytes":{"shm":{"sent":N,"received":N},
 *             "ib":{"sent":N,"received":N},
 *             "tcp":{"sent":N,"received":N}},
 *    "events":{"aborts":N,"wakeups_sent":N,"rnr":N,"ib_wc_errors":N,
 *              "ib_link_failures":N,"ib_links":N}}
 *
 *   version      SMC_STATS_VERSION; bumped only when a key changes meaning or goes away
 *                (new keys may appear without a bump: readers must ignore unknown keys).
 *   connections  connections established, per mode: "shm" (same-host shared memory),
 *                "ib" (RDMA), "tcp" (not upgraded: plain TCP).
 *   fallback     why "tcp" connections were not upgraded; only reasons with a non-zero
 *                count appear, so {} means no fallback. Reason names are listed below.
 *   bytes        payload bytes the application sent/received, per mode.
 *   events       "aborts": connections aborted because the peer sent invalid data;
 *                "wakeups_sent": doorbells rung to wake a sleeping peer;
 *                RDMA (SMC-R) only: "rnr": SENDs that found no receive buffer at the
 *                peer until the retries ran out (receive-queue credits keep it 0);
 *                "ib_wc_errors": other failed work completions (flushes of a link
 *                already failed are not counted); "ib_link_failures": links (RC queue
 *                pairs) that failed, each aborting its connections (dead peer, lost
 *                path, QP error, port down); "ib_links": links created.
 *                "shm_stream_bytes": payload written into peers' shared-memory rings
 *                with non-temporal stores (SMC_COPY; the rest went through memcpy);
 *                "shm_rewinds": messages written at the beginning of a peer's
 *                shared-memory ring because it was empty and the writer had read
 *                from that peer since its last send (request/response traffic; keeps
 *                the ring's used part small and warm in the caches);
 *                "downgrades": upgraded connections this process took back to plain
 *                TCP, losslessly, because their fd went into a program exec'd or
 *                spawned; "peer_downgrades": upgraded connections whose peer did so.
 *
 * All numbers are unsigned 64-bit decimal integers. The file is written to a temporary
 * name in the same directory and renamed, so a reader sees a complete file or none.
 * A process that ends without exit() (killed, _exit) writes nothing; one that execs
 * writes its file just before when it counted anything (a new image under the library
 * writes it again at its exit); a forked child that calls exit() writes its own file (use %p to keep them
 * apart).
 *
 * Every number is this process's own: a forked child starts with all of them at zero,
 * nothing of its parent's is copied. A connection is counted (in "connections" and
 * "fallback") by the process that connected or accepted it; bytes are counted by the
 * process that sent or received them, whoever made the connection (a child serving a
 * connection its parent accepted counts the bytes it moves, not the connection);
 * events by the process they happened in. So the sum over the files of a forking
 * server and its children counts each connection and each byte once.
 */
#ifndef SMC_PRELOAD_H
#define SMC_PRELOAD_H

#define SMC_STATS_VERSION 1

/* Top-level keys. */
#define SMC_STATS_KEY_VERSION     "version"
#define SMC_STATS_KEY_PID         "pid"
#define SMC_STATS_KEY_CONNECTIONS "connections"
#define SMC_STATS_KEY_FALLBACK    "fallback"
#define SMC_STATS_KEY_BYTES       "bytes"
#define SMC_STATS_KEY_EVENTS      "events"

/* Keys inside "bytes".<mode>. */
#define SMC_STATS_KEY_SENT        "sent"
#define SMC_STATS_KEY_RECEIVED    "received"

/* Keys inside "events". */
#define SMC_STATS_KEY_ABORTS       "aborts"
#define SMC_STATS_KEY_WAKEUPS_SENT "wakeups_sent"
#define SMC_STATS_KEY_RNR          "rnr"
#define SMC_STATS_KEY_IB_WC_ERRORS "ib_wc_errors"
#define SMC_STATS_KEY_IB_LINK_FAILURES "ib_link_failures"
#define SMC_STATS_KEY_IB_LINKS     "ib_links"
#define SMC_STATS_KEY_IB_RDMA_WRITES "ib_rdma_writes"
#define SMC_STATS_KEY_IB_CDC_SENT  "ib_cdc_sent"
#define SMC_STATS_KEY_IB_CONS_UPDATES "ib_cons_updates"
#define SMC_STATS_KEY_IB_CREDIT_WAITS "ib_credit_waits"
#define SMC_STATS_KEY_SHM_STREAM_BYTES "shm_stream_bytes"
#define SMC_STATS_KEY_SHM_REWINDS  "shm_rewinds"
#define SMC_STATS_KEY_SHM_POOLED   "shm_pooled"
#define SMC_STATS_KEY_POOL_PENDING "pool_pending"
#define SMC_STATS_KEY_POOL_FULL    "pool_full"
#define SMC_STATS_KEY_HS_BACKGROUND "hs_background"
#define SMC_STATS_KEY_DOWNGRADES   "downgrades"
#define SMC_STATS_KEY_PEER_DOWNGRADES "peer_downgrades"
#define SMC_STATS_KEY_EXEC_CARRIED "exec_carried" /* connections carried into the image across exec */

/* Mode names: keys inside "connections" and "bytes". */
#define SMC_STATS_MODE_SHM "shm"
#define SMC_STATS_MODE_IB  "ib"
#define SMC_STATS_MODE_TCP "tcp"

/* Fallback reason names: keys inside "fallback". */
#define SMC_STATS_REASON_NONE          "none"             /* upgraded (never a fallback) */
#define SMC_STATS_REASON_DISABLED      "disabled"         /* SMC_TRANSPORT=tcp */
#define SMC_STATS_REASON_PEER_NOT_SMC  "peer-not-smc"     /* peer does not run SMC */
#define SMC_STATS_REASON_NOT_LOCAL     "not-local"        /* remote peer, no RDMA path */
#define SMC_STATS_REASON_HANDSHAKE     "handshake-failed" /* handshake error or timeout */
#define SMC_STATS_REASON_DECLINED      "declined"         /* peer sent a Decline */
#define SMC_STATS_REASON_MEM_CAP       "mem-cap"          /* SMC_MEM_CAP, or RLIMIT_MEMLOCK (SMC-R) */
#define SMC_STATS_REASON_RESOURCES     "resources"        /* memfd/mmap/eventfd failed */
#define SMC_STATS_REASON_SOCKOPT       "sockopt"          /* options SMC cannot honour */
#define SMC_STATS_REASON_PEER_CLOSED   "peer-closed"      /* peer closed during the handshake */
#define SMC_STATS_REASON_SHORT_LIVED   "short-lived"      /* destination's connections close too soon */
#define SMC_STATS_REASON_READINESS     "readiness"        /* in an epoll/readiness set the library cannot take over */
#define SMC_STATS_REASON_IO_URING      "io-uring"         /* the process uses io_uring */
#define SMC_STATS_REASON_FD_LIMIT      "fd-limit"         /* descriptors near RLIMIT_NOFILE */
#define SMC_STATS_REASON_RDV_TAKEN     "rendezvous-taken" /* another user holds the connection's rendezvous name */
#define SMC_STATS_REASON_FORK_PENDING  "fork-pending"     /* fork() while its handshake was still running */
/* Reasons of a connection taken back to TCP after its upgrade (smcpstat; not in
 * "fallback": the connection counts as upgraded). exec, fd-passed and stdio are
 * counted in "fallback" for a connection whose handshake was still running at that
 * moment: it was decided as plain TCP. */
#define SMC_STATS_REASON_EXEC          "exec"             /* its fd went into a new program */
#define SMC_STATS_REASON_FORK          "fork"             /* an RDMA connection a forked child inherits */
#define SMC_STATS_REASON_PEER_DOWNGRADE "peer-downgrade" /* the peer took it back to TCP */
#define SMC_STATS_REASON_FD_PASSED     "fd-passed"        /* its fd went to another process (SCM_RIGHTS) */
#define SMC_STATS_REASON_STDIO         "stdio"            /* stdio got its fd (fdopen, dup2 onto 0-2) */
#define SMC_STATS_REASON_SECCOMP       "seccomp"          /* its process loaded a seccomp filter */
#define SMC_STATS_REASON_FD_TABLE      "fd-table"         /* a thread took a descriptor table of its own */
/* Counted in "fallback": a connection carried across exec whose description the new
 * image refused; it is reset. */
#define SMC_STATS_REASON_EXEC_STATE    "exec-state"

#endif
