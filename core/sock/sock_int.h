/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What the socket entry points share across their files: sock.c (creation, data,
 * descriptors, options, readiness), sock_connect.c and sock_accept.c.
 */
#ifndef SMC_SOCK_INT_H
#define SMC_SOCK_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "core/conn/conn.h"

struct pool_set;

struct smc_listener {
	int name_fd; /* holds the rendezvous name; -EADDRINUSE while another process holds
		      * it (listener_claim_name), another -errno when it cannot be had */
	uint64_t name_tried_ns; /* the last claim of the name */
	int refs;
	bool opted_in; /* its SYN-ACKs answer the SMC TCP option (tcpopt.h) */
	bool defer_kept; /* TCP_DEFER_ACCEPT is kept out of the kernel (listener_defer_*) */
	int defer_accept; /* then its value as the kernel would report it */
	struct pool_set *pools; /* the pools of its clients (pool.h); NULL without a name */
};


/* The fd table's stripe lock of fd (fdtab.h). */
static inline pthread_mutex_t *fd_lock(int fd)
{
	return fdtab_lock(fd);
}

/* The options the core honours on c (SO_RCVTIMEO, SO_SNDTIMEO, SO_LINGER), read back
 * from the kernel once the program set any. */
void sock_load_sockopts(struct smc_conn *c);
/* fd is plain TCP from now on for an option the rings cannot honour (sock.c). */
void sock_tcp_only(int fd);
/* TCP_DEFER_ACCEPT on a listener that keeps it out of the kernel (sock_accept.c):
 * set returns 1 with the call's result in *r, 0 when fd is not such a listener; get
 * returns the call's result. */
int sock_listener_defer_set(int fd, const void *val, socklen_t len, int *r);
int sock_listener_defer_get(int fd, void *val, socklen_t *len);
/* Drops a reference to l; the last frees it with its name and pools. */
void sock_listener_put(struct smc_listener *l);

#endif
