/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Whether the process uses io_uring. An io_uring submission (send, recv, accept,
 * epoll_ctl...) reaches the kernel without passing through any function this library
 * interposes, so on an upgraded connection its data would go to the TCP socket the
 * peer no longer reads, and its readiness registrations would miss the emulation.
 * Once a ring exists no new connection is upgraded (fallback reason "io-uring"), and
 * the connections upgraded before go back to plain TCP (io_uring_note_setup in
 * core/sock/sock.h, conn_downgrade; one that a thread is inside a blocking call on at
 * that moment stays SMC).
 *
 * Seen: io_uring_setup through syscall() (preload/syscall.c), liburing's exported
 * setup functions (preload/io_uring.c), and a ring descriptor inherited across exec
 * (io_uring_fd_is_ring, asked by the walk of inherited fds, sock_accept.c). Not seen:
 * rings set up by an inline system call outside
 * liburing's exported functions (static binaries, Go), or a ring fd received over a
 * unix socket.
 */
#ifndef SMC_IO_URING_WATCH_H
#define SMC_IO_URING_WATCH_H

#include <stdbool.h>

/* True once the process has (or had) an io_uring instance. */
bool io_uring_in_use(void);
/* An io_uring instance was created: from now on io_uring_in_use. true for the first
 * one only, whose caller takes the connections back to TCP (io_uring_note_setup). */
bool io_uring_mark_in_use(void);
/* fd is an io_uring instance (at load, for the descriptors the process started with). */
bool io_uring_fd_is_ring(int fd);

#endif
