/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The SMC TCP option (RFC 7609: kind 254, length 6, ExID 0xE2D4C3D9 in SYN and SYN-ACK)
 * through the sock_ops program that `smc_preload.sh --setup` loads and pins under
 * smc_cfg.bpf_dir (bpf/smc_tcpopt.bpf.c). The program only touches sockets that were
 * opted in through its sk_storage map "smc_peer" (key: socket fd, value bits below), so
 * every other socket of the host is untouched.
 *
 * --setup pins the map a second time in a bpf file system mounted at
 * SMC_RDV_DIR/TCPOPT_RDV_SUBDIR, for processes that do not see the host's /sys (network
 * namespaces entered with `ip netns exec`, containers that bind-mount the rendezvous
 * directory); the library opens whichever it finds first, SMC_BPF_DIR before it.
 */
#ifndef SMC_TCPOPT_H
#define SMC_TCPOPT_H

#include <stdbool.h>

/* The rendezvous directory's bpf mount, a name smc_preload.sh shares. */
#define TCPOPT_RDV_SUBDIR "bpf"

/* Bits of the map value. */
#define TCPOPT_PEER_SENT 1u /* set by the program: the peer's SYN / SYN-ACK carried it */
#define TCPOPT_WANT      2u /* set by the library: send the option on this socket */

/* Opens the pinned map once (thread-safe, lazily); false when it is absent or not
 * usable by this process. The map fd is close-on-exec and parked out of the
 * application's way. */
bool tcpopt_available(void);
/* fork (forklock.h): takes the map reopen lock; false when busy. */
bool tcpopt_fork_lock(void);

/* Marks socket fd so its SYN (connect) or SYN-ACK (listen) carries the option; call
 * before connect() or listen(). 0, or -errno (-ENOENT: no map). */
int tcpopt_opt_in(int fd);

/* Withdraws listening socket fd from the option (withdraw), or lets it answer again:
 * the eBPF program answers no SYN-ACK on a withdrawn port (its network namespace and
 * local port, so every listener on that port), and counts no accepted socket of it as
 * having got the option. 0, or -errno (no map, a setup without the withdrawn-ports map,
 * a kernel older than 5.14). */
int tcpopt_withdraw(int fd, bool withdraw);
/* 1 when fd's port is withdrawn, 0 when not, -errno when unknown. */
int tcpopt_withdrawn(int fd);

/* After the TCP handshake: 1 when the peer sent the option, 0 when it did not, -errno
 * when unknown (no map, not opted in). */
int tcpopt_peer_sent(int fd);

#endif
