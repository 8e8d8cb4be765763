/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Where upgraded connections go back to plain TCP (conn_downgrade, the one way back):
 * a new program gets their descriptors, or the process starts using io_uring.
 *
 * The program an exec starts knows nothing of the rings, and with a kernel socket in its hands it reads and writes TCP: every
 * upgraded connection whose descriptor it inherits (no FD_CLOEXEC) goes back to plain
 * TCP first, without losing a byte (conn_downgrade). posix_spawn, system and popen run
 * the new program in a child that never runs our code: the parent does it before
 * them, and for a descriptor a spawn's file actions duplicate, when it is named. A
 * connection still negotiating is decided first (bounded): what it staged must not be
 * left in a buffer the exec discards. io_uring's operations reach the kernel socket
 * without passing through the library: once the process has a ring, every connection
 * it holds goes back.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fd_pass.h"
#include "core/base/fdtab.h"
#include "core/base/io_uring_watch.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"
#include "core/conn/conn.h"
#include "core/conn/conn_orphan.h"
#include "core/conn/transport.h"
#include "core/negotiate/hs_policy.h"
#include "core/negotiate/progress.h"
#include "core/readiness/epoll.h"
#include "core/shm/pool.h"
#include "core/sock/sock.h"

/*
 * A client handshake on the rendezvous ends here at once, as TCP: the connection leaves
 * the rings right after anyway, and waiting for the handshake could mean waiting for a
 * server program that accepts only once this one went on (vsftpd's active-mode data
 * connection: its privileged process connects, passes the socket to the session
 * process, which then announces it on the control connection; the client's FTP program
 * accepts after that announcement). The server gets a Decline however far it got: the
 * Confirm leaves only under c->lock while the connection is PENDING (handshake.c), and
 * the watch ends at once (progress_watch_decided). In band the Proposal may be on the
 * TCP stream already and the answer comes there: that handshake must end by itself.
 */
static bool client_decided_now(struct smc_conn *c, enum smc_reason why)
{
	bool decided = false;

	if (c->side != CONN_CLIENT || c->clc_in_stream || c->fork_orphan)
		return false;
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
		conn_fallback(c, why); /* staged data goes out over TCP */
		decided = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (decided)
		progress_watch_decided(c);
	return decided;
}

/* How often a fork looks again at a handshake it could not end at once. */
#define FORK_RECHECK_NS (10 * 1000000LL)

/*
 * A server connection still negotiating on the progress thread, decided before it
 * leaves this process's hands (a fork, stdio, an exec, a descriptor passed on): while
 * the client can take a Decline, it gets one now and the connection is plain TCP for
 * both (`why`). Once our Accept is out, only the client's Confirm (it answers in
 * microseconds once it has the Accept) or the handshake's own deadline ends it, and that
 * is waited for until `until` (a fork: one handshake timeout past the settle time for
 * all such connections of one fork together, so that clients holding their Confirm
 * back cannot make a fork wait longer than that).
 */
static void settle_pending(struct smc_conn *c, int64_t until, enum smc_reason why)
{
	if (c->fork_orphan || c->side != CONN_SERVER)
		return; /* an earlier fork's (never decided here), or a client's */
	while (progress_flow_refuse(c, why) != 1 &&
	       __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
		int64_t left = until - (int64_t)clock_now_ns();

		/* Past the Accept; or no flow yet, as the progress thread has not taken up
		 * what accept() left it (a busy host delays that by tens of milliseconds);
		 * or an in-band negotiation still reads the client's Proposal, which no
		 * Decline can overtake: its decision is waited for, within the bound. */
		if (left <= 0)
			break;
		conn_wait_pending(c, false, left < FORK_RECHECK_NS ? left : FORK_RECHECK_NS);
	}
}

/* The connection of fd, if it is one, leaves the rings (a no-op for any other fd). */
static void fd_leave_rings(int fd, enum smc_reason why, bool image_ends)
{
	int64_t settle_ns = 4 * (int64_t)smc_cfg.handshake_timeout_ms * 1000000;
	struct smc_conn *c = conn_from_fd(fd);

	if (!c)
		return;
	/* A server's handshake on the progress thread that a signal cut this wait short
	 * for is refused while the client can take a Decline, or waited for past our
	 * Accept (settle_pending): ended here alone, the program's bytes would go over
	 * TCP to a client the thread upgraded (exim fdopen()s the accepted socket at
	 * once, and its children's SIGCHLD came in the wait: its greeting reached such a
	 * client as invalid bytes on the TCP channel). */
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING &&
	    !client_decided_now(c, why)) {
		int64_t until = (int64_t)clock_now_ns() + settle_ns;

		conn_wait_pending(c, false, settle_ns);
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
			settle_pending(c, until, why);
	}
	pthread_mutex_lock(&c->lock);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
		conn_fallback(c, why); /* staged data goes out over TCP */
	pthread_mutex_unlock(&c->lock);
	conn_downgrade(c, why, image_ends);
	conn_put(c);
}

/* The exec ends a process-bound transport (RDMA's QPs): what the kernel closes
 * (FD_CLOEXEC) is closed first, as at exit, and the links drained. */
static bool closed_by_exec(const struct smc_conn *c)
{
	return c->tp->process_bound && !exec_fd_survives(c->fd);
}

/* An epoll set the new program inherits must hold the socket itself, as without the
 * library, not the emulation's entries: the registrations of a connection that went
 * back to TCP move to the kernel's sets now, as the old image's next epoll_wait would
 * have moved them (it may never come). */
static void leave_for_exec(int fd)
{
	struct smc_conn *c;

	fd_leave_rings(fd, SMC_REASON_EXEC, true);
	if (!(c = conn_from_fd(fd)))
		return;
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_FALLBACK)
		epoll_emul_hand_back_conn(c);
	conn_put(c);
}

char *const *smc_sock_before_exec(unsigned how, const char *path, char *const envp[])
{
	bool replaced = how & SMC_EXEC_REPLACES;
	/* a process with no socket of ours has nothing to decide (a shell's exec) */
	bool runs_library = fdtab_next_tracked(0) >= 0 &&
			    exec_image_runs_library(path, how & SMC_EXEC_SEARCH, envp);
	bool carry = replaced && runs_library && exec_carry_possible();
	char *const *env = envp;

	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1))
		if (fdtab_kind(fd) == FD_SMC && exec_fd_survives(fd) &&
		    !(carry && exec_carry_candidate(fd)))
			leave_for_exec(fd);
	exec_listeners_withdraw(runs_library);
	if (replaced) {
		/* before the re-sends are finished: a connection it cannot carry leaves */
		if (carry)
			exec_carry_hold_all(leave_for_exec);
		conn_orphans_settle(CONN_ORPHAN_END_IDLE_NS, false);
		smc_sock_finish_resends();
		smc_sock_drain_rdma(closed_by_exec);
		/* at exit() it would be too late: the image is gone, atexit handlers too */
		stats_before_exec();
		if (carry)
			env = exec_carry_finish(envp, leave_for_exec);
	}
	return env;
}

/* How long a fork waits in all for the handshakes still running to end by themselves
 * (below): a client answers in microseconds. */
#define FORK_SETTLE_NS (200 * 1000000LL)

/*
 * Before fork():
 *  - a connection still negotiating is given until FORK_SETTLE_NS to be decided, then
 *    ended (settle_pending): its handshake runs on this process's progress thread,
 *    which the child does not have, and the child can never learn how it ended. A
 *    child that goes on with the connection (a forking server's handler, ncat's relay)
 *    would have no rings, and one that execs (inetd, xinetd, ncat --exec; FD_CLOEXEC
 *    or not, the child may dup2 it) would take it for TCP while the parent's thread
 *    upgraded it for the peer: the peer's bytes would go into a ring nobody reads;
 *  - an RDMA one whose descriptor a new program may inherit (no FD_CLOEXEC) goes back
 *    to TCP: a child cannot use its parent's QP.
 * A client's own handshake is waited for until FORK_SETTLE_NS too (the server answers
 * in microseconds), then ended as TCP (client_decided_now; in band, where the answer
 * comes on the stream, waited for within the handshake timeout).
 */
void smc_sock_before_fork(void)
{
	int64_t until = (int64_t)clock_now_ns() + FORK_SETTLE_NS;
	int64_t confirm_until = until + (int64_t)smc_cfg.handshake_timeout_ms * 1000000LL;

	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1)) {
		struct smc_conn *c;

		if (fdtab_kind(fd) != FD_SMC)
			continue;
		c = conn_from_fd(fd);
		if (!c)
			continue;
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING) {
			int64_t left = until - (int64_t)clock_now_ns();

			if (left > 0)
				conn_wait_pending(c, false, left);
			if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING)
				settle_pending(c, confirm_until, SMC_REASON_FORK_PENDING);
			/* A client's handshake still running (a loaded host delays the server's
			 * answer): the child could never learn how it ended, and its calls on
			 * the connection would fail. It ends as TCP now, the server told; in
			 * band the answer comes on the stream, so it is waited for within its
			 * own deadline. */
			if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_PENDING &&
			    !client_decided_now(c, SMC_REASON_FORK_PENDING) && c->side == CONN_CLIENT &&
			    !c->fork_orphan &&
			    (left = confirm_until - (int64_t)clock_now_ns()) > 0)
				conn_wait_pending(c, false, left);
		}
		if (c->tp->process_bound && exec_fd_survives(fd) &&
		    __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE)
			fd_leave_rings(fd, SMC_REASON_FORK, false);
		conn_put(c);
	}
}

/*
 * A connection handed to another process over a unix socket (SCM_RIGHTS: Python's
 * multiprocessing.reduction.send_handle, Node's cluster and child.send(), a
 * pre-forked server's acceptor) arrives there as a bare kernel socket: that process
 * reads and writes TCP, and our close of the copy we keep would end the rings under
 * it. Each such connection goes back to TCP before the message leaves. A listener
 * passed on may accept in the other process too: its pools refuse from then on.
 */
static void leave_passed(int fd, void *arg)
{
	(void)arg;
	if (fdtab_kind(fd) == FD_SMC)
		fd_leave_rings(fd, SMC_REASON_FD_PASSED, false);
	else if (fdtab_kind(fd) == FD_LISTEN)
		sock_listener_passed(fd);
}

void smc_sock_before_fd_pass(const struct msghdr *msg)
{
	fd_pass_each(msg, leave_passed, NULL);
}

/*
 * The C library's stdio writes and reads a FILE's descriptor with its own internal
 * system calls, which no wrapper sees: bash's `echo ... >&3` on a /dev/tcp connection
 * (a dup2 onto 1, then stdout), fputs on an fdopen()ed socket, an inetd-style program's
 * stdin and stdout. An upgraded connection that becomes a standard stream or a FILE
 * goes back to TCP first.
 */
void smc_sock_before_stdio(int fd)
{
	struct smc_conn *c;

	if (fdtab_kind(fd) != FD_SMC)
		return;
	fd_leave_rings(fd, SMC_REASON_STDIO, false);
	c = conn_from_fd(fd);
	if (c) {
		smc_sock_release_tcp_conn(c);
		conn_put(c);
	}
}

void smc_sock_before_spawn_dup(int fd)
{
	fd_leave_rings(fd, SMC_REASON_EXEC, false);
	exec_listener_spawn_dup(fd);
}

static bool any_conn(const struct smc_conn *c)
{
	(void)c;
	return true;
}

void smc_sock_downgrade_all(enum smc_reason why)
{
	size_t n;
	/* a connection left out when memory ran out stays upgraded, as before io_uring
	 * was seen */
	struct smc_conn **c = conn_collect_active(any_conn, &n);

	for (size_t i = 0; i < n; i++) {
		if (conn_downgrade(c[i], why, false) == -EBUSY)
			log_warn("fd %d: busy in another thread, stays upgraded (%s)",
				 c[i]->fd, stats_reason_name(why));
		conn_put(c[i]);
	}
	free(c);
}

void io_uring_note_setup(void)
{
	if (!io_uring_mark_in_use())
		return;
	log_info("the process uses io_uring, which bypasses this library: its connections "
		 "go back to TCP, new ones stay TCP");
	/* pooled connections are upgraded before accept() sees them: take no new ones */
	pool_server_retire_all();
	smc_sock_downgrade_all(SMC_REASON_IO_URING);
}
