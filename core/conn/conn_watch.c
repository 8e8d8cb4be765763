/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The descriptor through which the progress thread watches a connection's handshake
 * (c->watch_fd, conn.h): its opening, its release when the program closes the socket,
 * and its close. The watches themselves are core/negotiate/progress_client.c's and
 * progress_server.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>

#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/real.h"
#include "core/conn/conn.h"

/*
 * The progress thread watches a handshake through a descriptor of its own: libevent
 * keys its events by number, and the program may close c->fd while the handshake runs,
 * keeping a dup (c->fd moves to it, and a socket the library opens next, a rendezvous
 * peer, gets the old number: libevent took it for one it already watched, and never
 * told the kernel, so that handshake waited out its timeout) or its last one (the
 * number comes back for the program's next socket). Made by the thread that starts the
 * watch, which holds the fd; closed under c->lock, so a fork sees it open or gone.
 */
static void inert_open(void);
static pthread_once_t inert_once = PTHREAD_ONCE_INIT;

void conn_watch_prepare(void)
{
	pthread_once(&inert_once, inert_open);
}

int conn_watch_fd_open(struct smc_conn *c)
{
	conn_watch_prepare();
	c->watch_fd = fd_park_dup(c->fd);
	if (c->watch_fd < 0)
		return -errno;
	fd_budget_take(1);
	return 0;
}

/* An open file that is nothing (/dev/null), the library's, put in place of a watch's
 * socket when the program closes the socket (conn_watch_let_go). Opened with the
 * process's first connection (conn_watch_prepare), watched or not: whether a handshake
 * is watched depends on timing, and a process's descriptors are then those of its
 * first connection from the start, whatever its later connections do. */
static int inert_fd = -1;

static void inert_open(void)
{
	inert_fd = fd_park_low(REAL(open)("/dev/null", O_RDONLY | O_CLOEXEC));
}

void conn_watch_let_go(struct smc_conn *c)
{
	if (c->watch_fd < 0)
		return;
	/* the number stays ours (libevent still keys the watch's events by it) but no
	 * longer holds the socket, whose end is now the program's close; the kernel
	 * drops the socket's epoll registration with it */
	if (inert_fd < 0 || REAL(dup2)(inert_fd, c->watch_fd) < 0)
		/* no stand-in: the number goes, and the events are left to the watch's end */
		conn_watch_fd_drop(c);
}

void conn_watch_fd_drop(struct smc_conn *c)
{
	if (c->watch_fd >= 0) {
		fd_own_close(c->watch_fd);
		fd_budget_give(1);
	}
	c->watch_fd = -1;
}

void conn_watch_fd_close(struct smc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	conn_watch_fd_drop(c);
	pthread_mutex_unlock(&c->lock);
}
