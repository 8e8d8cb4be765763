/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A process that puts itself under a seccomp filter (core/base/sandbox.h) may be killed
 * for any system call its own code never makes: a memfd, an eventfd, a unix socket, a
 * bpf() map lookup. Its connections made from then on therefore stay plain TCP, and the
 * library makes no call of its own for them (sock_connect.c, sock_accept.c). Its peers
 * must not wait for an answer it cannot give, so just before the filter goes on its
 * listeners stop announcing SMC, as a listener handed to a program without the library
 * does (exec.c): withdrawn from the TCP option, their rendezvous names shut, the
 * process's pools retired. A client whose SYN-ACK was answered before that proposes in
 * band and resets the connection when no answer comes, as across exec (docs/design.md).
 * Its upgraded connections go back to TCP then too, losslessly (downgrade.c): their
 * waits need calls (poll, ppoll, select) that a filter may not allow, where the
 * program's own blocking reads and writes need none; one busy in another thread at
 * that moment stays upgraded (sandbox.h says how it waits).
 */
#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/negotiate/tcpopt.h"
#include "core/shm/pool.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"

void smc_sock_listeners_shut(const char *before)
{
	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1)) {
		if (fdtab_kind(fd) != FD_LISTEN)
			continue;
		if (sock_listener_opted_in(fd) && tcpopt_withdraw(fd, true) < 0)
			log_warn("fd %d: the listener cannot be withdrawn from the SMC TCP option "
				 "before %s: clients that propose in band will reset their "
				 "connections", fd, before);
		sock_listener_shut_name(fd);
	}
	pool_server_retire_all(); /* every listener's pools, and no new ones */
}

void smc_before_seccomp(void)
{
	smc_before_confinement(); /* with smc_init(): configuration, logging, stats */
	(void)fdtab_capacity();   /* the descriptor table reads /proc on first use */
	if (!smc_enabled())
		return;
	smc_sock_listeners_shut("the seccomp filter");
	smc_sock_downgrade_all(SMC_REASON_SECCOMP);
}
