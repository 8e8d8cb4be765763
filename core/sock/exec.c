/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Listeners that a new program inherits by exec (no FD_CLOEXEC), or that a spawned child
 * gets (posix_spawn, system, popen, a spawn's dup2 file action). For the same-host
 * rendezvous see shut_names below; the rest of this header is the TCP option's.
 *
 * A listener opted in to the SMC TCP option keeps its header-option callbacks for its
 * life: only listen() turns them on. Its SYN-ACKs would go on answering the option in a
 * program without the library (LD_PRELOAD taken out of the environment,
 * systemd-socket-activate without -E LD_PRELOAD, a setuid program), whose accepted
 * connections would then carry the clients' CLC Proposals as data. So each such
 * listener is withdrawn from the option just before (tcpopt_withdraw: the eBPF program
 * answers no SYN-ACK on its port): its new clients get plain TCP, with the option's
 * rule that a server that does not answer it does not run SMC. When the exec fails the
 * listeners answer again; a new image that runs the library adopts the listener and
 * lets it answer again (smc_sock_adopt_inherited). A spawned child runs beside us for as
 * long as it likes: those listeners stay withdrawn, and our own accepts on them are
 * plain TCP from then on (a fallback, never a failure).
 *
 * A withdrawal outlives the program that got the listener (nobody is told when it
 * closes it): a listener of ours that starts listening on a withdrawn port takes the
 * withdrawal out when no other socket listens on that port any more.
 *
 * A connection already established on the listener before the withdrawal was answered
 * with the option; its client proposes in band. A new image with the library negotiates
 * it (adopted listener); one without reads the Proposal as data, and the client resets
 * the connection when no CLC answer comes (docs/design.md, "Listeners across exec").
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/negotiate/tcpopt.h"
#include "core/sock/sock.h"

bool exec_fd_survives(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFD);

	return fl >= 0 && !(fl & FD_CLOEXEC);
}

/* An opted-in listener of ours that the new program gets. */
static bool handed_over(int fd)
{
	return fdtab_kind(fd) == FD_LISTEN && sock_listener_opted_in(fd) && exec_fd_survives(fd);
}

static void withdraw_all(bool withdraw)
{
	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1)) {
		int r;

		if (!handed_over(fd))
			continue;
		r = tcpopt_withdraw(fd, withdraw);
		if (r < 0 && withdraw)
			log_warn("fd %d: the listener cannot be withdrawn from the SMC TCP option "
				 "(%s): a new program without the library would read the "
				 "Proposals of its in-band clients", fd, strerror(-r));
	}
}

/*
 * On the same-host rendezvous a client offers SMC to a port whose listener's name is
 * bound, and then waits for the process that accepts to answer. A listener handed to a
 * program without the library would accept and never answer: every such client would
 * wait out its handshake timeout (nginx's binary upgrade: the new master gets only the
 * environment nginx lets through, without LD_PRELOAD). Its name is shut down instead,
 * for every process holding it (sock_listener_shut_name): their clients of that port go
 * plain TCP at once, for as long as the name lives.
 */
static void shut_names(void)
{
	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1))
		if (fdtab_kind(fd) == FD_LISTEN && exec_fd_survives(fd))
			sock_listener_shut_name(fd);
}

void exec_listeners_withdraw(bool new_image_runs_library)
{
	withdraw_all(true);
	if (!new_image_runs_library)
		shut_names();
}

/* An epoll set that holds one of our connections and that the new program inherits:
 * its kernel set holds the emulation's shadow entries, which mean nothing there. */
bool exec_epoll_inherited(void)
{
	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1))
		if (fdtab_kind(fd) == FD_EPOLL && exec_fd_survives(fd))
			return true;
	return false;
}

void smc_sock_exec_failed(void)
{
	exec_carry_release();
	withdraw_all(false);
}

/* Whether a TCP socket other than inode `self` listens on `port` in this network
 * namespace (/proc/net/tcp and tcp6: "sl local rem st ... inode", st 0A is LISTEN).
 * Unknown counts as yes. */
static bool other_listener_on(unsigned port, unsigned long self)
{
	static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	bool found = false;

	for (size_t i = 0; i < 2 && !found; i++) {
		FILE *f = fopen(tables[i], "re");
		char line[512];

		if (!f)
			return i == 0; /* no IPv6: tcp6 absent */
		while (!found && fgets(line, sizeof(line), f)) {
			char local[64];
			unsigned st, p;
			unsigned long ino;
			const char *colon;

			if (sscanf(line, " %*s %63s %*s %x %*s %*s %*s %*s %*s %lu", local, &st,
				   &ino) != 3 || st != 0x0A)
				continue;
			colon = strrchr(local, ':');
			if (colon && sscanf(colon + 1, "%x", &p) == 1 && p == port && ino != self)
				found = true;
		}
		fclose(f);
	}
	return found;
}

void exec_listener_listening(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct stat st;
	unsigned port;

	if (tcpopt_withdrawn(fd) != 1 || fstat(fd, &st) < 0 ||
	    REAL(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0)
		return;
	port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	if (other_listener_on(port, (unsigned long)st.st_ino)) {
		log_info("fd %d: port %u is withdrawn from the SMC TCP option (a listener on it "
			 "went to a program without the library): this one stays TCP", fd, port);
		return;
	}
	/* the program that got the withdrawn listener has closed it */
	(void)tcpopt_withdraw(fd, false);
}

void exec_listener_spawn_dup(int fd)
{
	if (fdtab_kind(fd) == FD_LISTEN && sock_listener_opted_in(fd) &&
	    tcpopt_withdraw(fd, true) < 0)
		log_warn("fd %d: the listener cannot be withdrawn from the SMC TCP option", fd);
}
