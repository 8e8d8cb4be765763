/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Descriptors passed in a message on the library's unix sockets (SCM_RIGHTS): the
 * same-host handshake (rendezvous.h) and the pools' links (pool.h). The caller owns the
 * message and its control buffer, sized for what it accepts: the kernel installs only
 * as many descriptors as that buffer holds (MSG_CTRUNC for the rest), so a peer cannot
 * make a process hold more than its caller asked for.
 */
#ifndef SMC_FD_PASS_H
#define SMC_FD_PASS_H

#include <stdbool.h>
#include <sys/socket.h>

/* Puts nfds descriptors (nfds > 0) in msg's control buffer ctl, which holds at least
 * CMSG_SPACE(sizeof(int) * nfds) bytes and is aligned for a cmsghdr. */
void fd_pass_pack(struct msghdr *msg, void *ctl, const int *fds, int nfds);
/* Calls fn(fd, arg) for each descriptor that msg's SCM_RIGHTS messages carry, in order
 * (a message the library receives, or one a program is about to send). */
void fd_pass_each(const struct msghdr *msg, void (*fn)(int fd, void *arg), void *arg);
/* After recvmsg(msg) with MSG_CMSG_CLOEXEC: the descriptors that came into fds (up to
 * maxfds; *nfds how many), and the sender's credentials into cred when it is not NULL
 * and they came (else left as they are). True when more than maxfds came: those beyond
 * are closed here. Truncation (msg_flags) is the caller's to judge. */
bool fd_pass_unpack(const struct msghdr *msg, int *fds, int *nfds, int maxfds,
		    struct ucred *cred);

#endif
