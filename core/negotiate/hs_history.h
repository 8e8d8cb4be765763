/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * One-shot clients: what the processes of one user learned about a command and a
 * destination.
 *
 * hs_policy.h learns per process, so a client that makes one connection and exits
 * (`redis-cli ping` in a loop, a monitoring check, `logger --tcp`) never learns: each
 * process pays a full handshake, the progress thread's start and the teardown, ~1.5 ms
 * on the project's 2-core machine, for a connection that moves a few bytes, and runs
 * at ~0.7x of TCP's processes per second. Here the first connection of a process leaves
 * its verdict (short or not, as hs_policy.h judges it)
 * in a small table shared by the processes of the same user, keyed by the process's
 * command line and the destination. When the last HS_POLICY_SHORT_RUN first
 * connections of that command to that destination were short, the next process's first
 * connection stays plain TCP (fallback reason "short-lived") without starting anything,
 * except one probe per HS_POLICY_PROBE_NS that tries SMC again; one that is not short
 * gives the command back to SMC.
 *
 * The table is a file of this user's in /dev/shm (mode 0600), read and written with
 * pread/pwrite by the connect() and close() that need it, and kept open by nobody. It
 * is lossy (concurrent writers: last one wins; a slot taken by another key forgets the
 * first) and never trusted beyond the decision: a file that is not ours, not a regular
 * file, or writable by others is ignored, so another user can make us upgrade, which is
 * what happens without the table, and never make our connections fail or wait.
 * SMC_SHORT_CONN_US=0 turns it off, as it does the per-process policy.
 */
#ifndef SMC_HS_HISTORY_H
#define SMC_HS_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

/* True for the first connect() of this program image that reaches the policy, once
 * (a forked child goes on from its parent's count; an exec starts again). */
bool hs_history_first_connect(void);

/* Before that first connect to destination `key` (hs_policy_key): false when the
 * command's recent first connections to it were all short (stay TCP). */
bool hs_history_admit(uint64_t key, uint64_t now_ns, uint64_t short_ns);

/* The first connection's verdict, once it ended (closed, or open at exit). */
void hs_history_closed(uint64_t key, bool is_short, uint64_t now_ns, uint64_t short_ns);

/* Tests: the table's directory (NULL: /dev/shm), and a command line to key by in
 * place of /proc/self/cmdline (NULL: the real one); both forget the first connect. */
void hs_history_set_dir(const char *dir);
void hs_history_set_command(const char *cmd);

#endif
