/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Which connections are worth an SMC handshake.
 *
 * Upgrading a connection costs both processes a handshake, two doorbells, a ring
 * mapping and its teardown: ~270 us of CPU more than a TCP connect/close on the
 * project's 2-core machine. A connection that moves a few hundred bytes and closes
 * (HTTP/1.0, connect-per-request clients) never wins that back, so a stream of them is
 * slower under SMC than under TCP. The client learns it per destination (address and
 * port), as the kernel's SMC handshake BPF policies do: after HS_POLICY_SHORT_RUN short
 * SMC connections in a row to one destination, new connections to it stay plain TCP
 * (fallback reason "short-lived"), except one probe per HS_POLICY_PROBE_NS that tries
 * SMC again: one that is not short gives the destination back to SMC.
 *
 * Short: less than HS_POLICY_LONG_BYTES moved and closed within SMC_SHORT_CONN_US, or
 * with at most HS_POLICY_FEW_EXCHANGES request/answer turns within HS_POLICY_FEW_MAX_NS.
 * What a connection saves over TCP grows with its turns (~10-20 us each here, against
 * the handshake's ~270 us), not with the time it waits for them, and time alone
 * misjudges a client that has many connections in flight, or a loaded server: each
 * connection then lives longer than SMC_SHORT_CONN_US (ab -c 50 against Apache: ~8 ms
 * a request over TCP; 100 connections in flight from one event loop: tens of ms), and
 * its full handshakes load both further (0.25-0.5x of TCP). A connection idle for
 * longer than HS_POLICY_FEW_MAX_NS is judged by time alone: a pooled connection a
 * program keeps for later counts as long.
 *
 * Only the client decides: it simply does not offer SMC, and the server sees a client
 * that does not run the library. The table is per process, small and lossy (a slot
 * taken by another destination forgets the first, which then tries SMC again).
 * Pure logic on caller-supplied times, unit-tested in tests/unit/test_hs_policy.c.
 */
#ifndef SMC_HS_POLICY_H
#define SMC_HS_POLICY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define HS_POLICY_SHORT_RUN   4                     /* short SMC connections in a row */
#define HS_POLICY_LONG_BYTES  (512u * 1024)         /* moved more: worth it, however short */
#define HS_POLICY_PROBE_NS    1000000000ull         /* one SMC probe per second */
#define HS_POLICY_FEW_EXCHANGES 2                   /* a request, a redirect or a TLS setup */
#define HS_POLICY_FEW_MAX_NS  1000000000ull         /* few turns count as short within this */

/* 64-bit mix (splitmix64's finaliser): spreads neighbouring keys over a table's slots. */
uint64_t hs_policy_mix(uint64_t x);

/* Nonzero key of destination dst (IPv4-mapped IPv6 equals IPv4); 0 when it has none. */
uint64_t hs_policy_key(const struct sockaddr *dst);

/* Before a connect to destination `key` at time now_ns (CLOCK_MONOTONIC): true to try
 * SMC, false to stay TCP. short_ns 0 disables the policy (always true). */
bool hs_policy_admit(uint64_t key, uint64_t now_ns, uint64_t short_ns);

/* An SMC connection to `key`, open for lifetime_ns, moved `bytes` (both directions) in
 * `exchanges` request/answer turns and closed at now_ns. */
void hs_policy_closed(uint64_t key, uint64_t lifetime_ns, uint64_t bytes, uint32_t exchanges,
		      uint64_t now_ns, uint64_t short_ns);

/* A run of short connections (a destination's here, a command's in hs_history.h).
 * run_admit: whether the next connection tries SMC, claiming the probe when one is due
 * (*next_probe_ns moves on); run_closed: the run after a connection's verdict. */
bool hs_policy_run_admit(uint32_t short_run, uint64_t *next_probe_ns, uint64_t now_ns);
void hs_policy_run_closed(uint32_t *short_run, uint64_t *next_probe_ns, bool is_short,
			  uint64_t now_ns);

/* Whether a connection that ended after lifetime_ns having moved `bytes` in `exchanges`
 * turns was one that SMC does not pay for (short, above). */
bool hs_policy_short(uint64_t lifetime_ns, uint64_t bytes, uint32_t exchanges,
		     uint64_t short_ns);

/*
 * A destination whose server answered without the SMC option (it does not run the
 * library) costs each connection to it the option's opt-in, a connection record with
 * its doorbells and their teardown, some fifteen system calls more than TCP: every
 * connection a program under the wrapper makes to an ordinary server. Its answer is
 * remembered for HS_POLICY_PROBE_NS; connections to it meanwhile go straight to TCP
 * (reason peer-not-smc), and the first one after asks again. Off with short_ns 0, as
 * the rest of the policy.
 */
void hs_policy_peer_plain(uint64_t key, uint64_t now_ns, uint64_t short_ns);
/* Whether connections to `key` go straight to TCP for now (hs_policy_peer_plain). */
bool hs_policy_known_plain(uint64_t key, uint64_t now_ns, uint64_t short_ns);
/* Forgets every destination (tests). */
void hs_policy_reset(void);
/* fork (forklock.h): takes the table's lock; false when busy. */
bool hs_policy_fork_lock(void);

#endif
