/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's own descriptors (doorbells, rendezvous sockets, shadow epoll sets) live
 * in the application's fd space. Applications size tables by their fd numbers (wrk
 * refuses fds above 10 + 3 * connections, select() stops at 1024), so internal fds are
 * moved to the top of RLIMIT_NOFILE (packed against it, within its top quarter), away
 * from the numbers the application gets from the kernel's lowest-free-fd rule.
 */
#ifndef SMC_FDPARK_H
#define SMC_FDPARK_H

/* Returns fd moved to a high number (CLOEXEC), or fd itself when there is no room. */
int fd_park(int fd);

/* close_range(first, last, flags) except for the descriptors in keep[0..n) (sorted in
 * place): the program's call closes its own descriptors, not the library's. */
int fd_close_range_sparing(unsigned int first, unsigned int last, int flags, int *keep,
			   size_t n);

/* At load, while the process is most likely still single-threaded: grows its fd table
 * to the limit once (see fdpark.c), for limits up to FD_PARK_PREPARE_MAX. */
void fd_park_prepare(void);

#endif
