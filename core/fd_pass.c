/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Descriptors in messages (SCM_RIGHTS), see fd_pass.h. */
#include <string.h>

#include "core/fd_pass.h"
#include "core/real.h"

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

bool fd_pass_unpack(const struct msghdr *msg, int *fds, int *nfds, int maxfds,
		    struct ucred *cred)
{
	bool extra = false;

	*nfds = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm;
	     cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET)
			continue;
		if (cm->cmsg_type == SCM_RIGHTS) {
			int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < n; i++) {
				int fd;

				/* CMSG_DATA need not be aligned for an int */
				memcpy(&fd, CMSG_DATA(cm) + (size_t)i * sizeof(int), sizeof(fd));
				if (*nfds < maxfds) {
					fds[(*nfds)++] = fd;
				} else {
					REAL(close)(fd);
					extra = true;
				}
			}
		} else if (cm->cmsg_type == SCM_CREDENTIALS && cred &&
			   cm->cmsg_len >= CMSG_LEN(sizeof(*cred))) {
			memcpy(cred, CMSG_DATA(cm), sizeof(*cred));
		}
	}
	return extra;
}
