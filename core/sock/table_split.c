/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A thread that takes a descriptor table of its own (unshare(CLONE_FILES),
 * close_range(CLOSE_RANGE_UNSHARE)) while other threads share the old one leaves the
 * library's threads on the old table: the progress thread no longer sees the sockets
 * this thread makes (a handshake's watch fails and its first bytes went nowhere), and
 * this thread's copies of the library's descriptors outlive their closing on the other
 * side. As for a seccomp filter (sandbox_entry.c), the library's work for the process
 * ends there: just before the split the handshakes under way are let finish, upgraded
 * connections go back to TCP losslessly and listeners stop announcing SMC; from then on
 * new connections stay plain TCP with no call of the library's (sandbox_keeps_off). A
 * thread alone in its process shares its table with nobody and loses nothing.
 */
#include "core/base/lib_threads.h"
#include "core/base/log.h"
#include "core/base/sandbox.h"
#include "core/conn/conn.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"

bool smc_before_table_split(void)
{
	if (!smc_enabled() || sandbox_keeps_off() || lib_threads_caller_alone())
		return false;
	log_info("a thread takes a descriptor table of its own: the process's connections "
		 "go back to TCP, new ones stay TCP");
	smc_sock_listeners_shut("a descriptor table of its own");
	conn_settle_handshakes();
	smc_sock_downgrade_all(SMC_REASON_FD_TABLE);
	return true;
}

void smc_table_split(bool prepared)
{
	if (prepared)
		sandbox_keep_off();
}
