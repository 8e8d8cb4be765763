/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Descriptors in messages (SCM_RIGHTS), see fd_pass.h. */
#include <string.h>

#include "core/base/fd_pass.h"
#include "core/base/real.h"

void fd_pass_pack(struct msghdr *msg, void *ctl, const int *fds, int nfds)
{
	struct cmsghdr *cm;

	msg->msg_control = ctl;
	msg->msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	memset(ctl, 0, msg->msg_controllen);
	cm = CMSG_FIRSTHDR(msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
}

void fd_pass_each(const struct msghdr *msg, void (*fn)(int fd, void *arg), void *arg)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm;
	     cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		size_t n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			/* CMSG_DATA need not be aligned for an int */
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			fn(fd, arg);
		}
	}
}

struct unpack {
	int *fds, *nfds, maxfds;
	bool extra;
};

static void unpack_one(int fd, void *arg)
{
	struct unpack *u = arg;

	if (*u->nfds < u->maxfds) {
		u->fds[(*u->nfds)++] = fd;
	} else {
		REAL(close)(fd);
		u->extra = true;
	}
}

bool fd_pass_unpack(const struct msghdr *msg, int *fds, int *nfds, int maxfds,
		    struct ucred *cred)
{
	struct unpack u = { .fds = fds, .nfds = nfds, .maxfds = maxfds };

	*nfds = 0;
	fd_pass_each(msg, unpack_one, &u);
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cred && cm;
	     cm = CMSG_NXTHDR((struct msghdr *)msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(*cred)))
			memcpy(cred, CMSG_DATA(cm), sizeof(*cred));
	return u.extra;
}
