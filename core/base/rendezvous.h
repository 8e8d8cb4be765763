/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Same-host rendezvous: zero setup, zero privilege.
 *
 * A preloaded listener binds an abstract unix datagram name derived from its address
 * and port ("is anybody preloaded behind this port?"). A preloaded client that finds
 * it binds its socket, registers an abstract seqpacket listener named after the exact
 * TCP 4-tuple, then connects. The accepting server process, whichever process of a
 * forked family it is, connects to that name and the handshake (CLC messages, memfd
 * and eventfds passed with SCM_RIGHTS) runs over it. Abstract names live in the network
 * namespace, so the rendezvous never crosses one.
 */
#ifndef SMC_RENDEZVOUS_H
#define SMC_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* A TCP endpoint in a canonical form: IPv4 as IPv4-mapped IPv6. */
struct rdv_endpoint {
	uint8_t addr[16];
	uint16_t port; /* host order */
};

/* Fills *ep from an AF_INET or AF_INET6 address; false for any other family. */
bool rdv_endpoint_from(const struct sockaddr *sa, struct rdv_endpoint *ep);

/* Loopback or an address of one of this host's interfaces. */
bool rdv_addr_is_local(const struct sockaddr *sa);
/* fork (forklock.h): takes the local address cache's lock; false when busy. */
bool rdv_fork_lock(void);

/* Listener side: registers the name of listening socket lfd; returns the fd that holds
 * the name (close it to unregister) or -errno. */
int rdv_listener_register(int lfd);
/* The name held by name_fd stops answering, for every process that holds it (forked
 * siblings share the socket): clients of the listener stay TCP from then on. */
void rdv_listener_shut(int name_fd);
/* Client side: is a preloaded listener behind dst (exact address, or a wildcard one)? */
bool rdv_listener_present(const struct sockaddr *dst);

/* Whether a client at endpoint `client` may be waiting on a per-connection rendezvous:
 * only from an odd port. Linux hands out odd ports to bind(port 0), which the client
 * calls before it connects (it must know its port first), and even ones to a connect()
 * of an unbound socket, which every client that does not offer SMC makes: so a server
 * skips the rendezvous lookup, three system calls, for most connections that would
 * stay TCP anyway. A client whose bound port came out even (the odd ones ran out, or the
 * application bound it) does not offer SMC on that connection. */
bool rdv_client_port_may_offer(const struct sockaddr *client);

/* Client side: per-connection seqpacket listener for the 4-tuple (local, peer).
 * -EADDRINUSE: the name is held by a process of another user (or, for a moment too
 * long, by one of ours). */
int rdv_conn_listen(const struct sockaddr *local, const struct sockaddr *peer);
/* Server side: connects to the client's per-connection name for the accepted socket's
 * 4-tuple (peer = client, local = server). -errno when there is none. */
int rdv_conn_connect(const struct sockaddr *peer, const struct sockaddr *local);

/* In-band negotiation (the TCP option): the client's per-connection rendezvous socket is
 * named by a random 64-bit token that travels in its TCP Proposal. With path = true it is
 * "<SMC_RDV_DIR>/c-<token>", reachable from every network namespace that shares the
 * directory (containers); otherwise an abstract name, reachable in this network
 * namespace only. rdv_dir_usable says whether the directory exists and nobody but root
 * or us can replace a socket in it, or it, or anything on the way to it: every
 * component of its path, as written and as resolved, is owned by root or us, and
 * sticky when others may write to it (a warning is logged, once, when it is not). */
bool rdv_dir_usable(void);
/* Client: a parked, nonblocking seqpacket listener for the token (path mode: mode 0666 so
 * a server of any user can connect; the TCP Proposal's key authenticates it). -errno. */
int rdv_token_listen(uint64_t token, bool path);
/* Client: removes the path of a token listener (closing the fd does not). */
void rdv_token_unlink(uint64_t token);
/* Server: connects to the client's token rendezvous. -errno. */
int rdv_token_connect(uint64_t token, bool path);

/* One message with up to `nfds` descriptors attached. */
int rdv_send(int ufd, const void *buf, size_t len, const int *fds, int nfds);
/* Receives one message; fills fds[0..*nfds) (CLOEXEC). Returns its length or -errno;
 * descriptors beyond maxfds are closed and the message rejected; -EMFILE when the
 * kernel dropped its descriptors for want of a free one (the message is lost too). On
 * any error no descriptor is handed over (those that came with it are closed). */
ssize_t rdv_recv(int ufd, void *buf, size_t cap, int *fds, int *nfds, int maxfds);

/* The process on the other end of rendezvous socket ufd (SO_PEERCRED) is root, runs as
 * the user that owns the other end of TCP socket tcp_fd (sock_diag), or holds that
 * socket among its fds. Checked before anything is handed over: abstract names are
 * open to every local user. */
bool rdv_peer_owns_tcp_peer(int ufd, int tcp_fd);
/* The same check for a process known by its credentials (pid 0: unknown, so the
 * socket-among-its-fds case does not apply). */
bool rdv_cred_owns_tcp_peer(uid_t uid, pid_t pid, int tcp_fd);
/* Owner uid of the TCP listener that a connection to dst would reach (sock_diag).
 * 0 or -errno. */
int rdv_listener_owner(const struct sockaddr *dst, uid_t *uid);
/* Sends msg (its name is filled in here) as one datagram to the rendezvous name of the
 * listener behind dst, without waiting. 0 or -errno (-ENOENT: no such listener). */
int rdv_listener_sendmsg(const struct sockaddr *dst, struct msghdr *msg);

#endif
