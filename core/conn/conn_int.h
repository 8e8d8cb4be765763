/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What the files of one connection's engine share (conn.c, conn_data.c, conn_wait.c,
 * conn_down.c, conn_registry.c); nothing outside core/conn/ includes it.
 */
#ifndef SMC_CONN_INT_H
#define SMC_CONN_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/conn/conn.h"
#include "core/shm/shm.h"

/* Data the application sent while the handshake ran, staged as TCP would hold it in its
 * send buffer: small, so it always fits an empty ring or a fresh TCP send buffer. */
#define CONN_PENDING_BUF (8u * 1024)

/*
 * A thread cancelled in our sleep (pthread_cancel: ppoll is a cancellation point, as
 * the read or write it stands for) unwinds through none of our returns: what the
 * wait and its callers hold goes with it here, or every later call on the connection
 * would wait for ever on the lock it kept. Every caller holds one reference that it
 * drops after the wait (sock.c's fd lookup, or its own). recv and send sleep without
 * their direction's lock (conn_data.c, wait_unlocked).
 */
struct wait_cancel {
	struct smc_conn *c;
	uint32_t armed;
};

/* The handshakes' side of a connection's life (conn_negotiate_ops_set), NULL until it is
 * installed. */
extern const struct conn_negotiate_ops *conn_negotiate;

static inline int conn_state(struct smc_conn *c)
{
	return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
}

/*
 * Writable, as tcp_poll() says POLLOUT (sk_stream_is_writeable): the free space is at
 * least half of what is still queued, a third of the buffer, and a writer asleep for
 * room is woken only then (sk_stream_write_space). Any free byte would do for a send
 * that does not block, but a program that polls for POLLOUT and then writes blocking
 * (socat) would block on a nearly full ring and stop reading its other side: two relays
 * into each other's full rings (stunnel between two socats) then wait for ever, where
 * TCP made them wait in poll(). A blocking send still goes on with any room
 * (conn_wait.c), as tcp_sendmsg() does once it is woken.
 */
static inline bool conn_room_writable(int64_t room, uint32_t size)
{
	return room > 0 && (uint64_t)room * 3 >= size;
}

static inline uint32_t conn_peer_wflags(struct smc_conn *c)
{
	return __atomic_load_n(&c->rx->wflags, __ATOMIC_ACQUIRE);
}

/* conn.c */
/* A PENDING connection of fd with no resources yet (conn_new makes its doorbells). */
struct smc_conn *conn_alloc(int fd, enum conn_side side);
size_t conn_iov_total(const struct iovec *iov, int iovcnt);
void conn_free(struct smc_conn *c);
void conn_fallback_to_tcp(struct smc_conn *c, enum smc_reason why, bool counted);
void conn_abort_protocol(struct smc_conn *c, const char *what);

/* conn_registry.c */
void conn_list_add(struct smc_conn *c);
void conn_list_del(struct smc_conn *c);

/* conn_data.c */
int64_t conn_rx_used(struct smc_conn *c);
/* The reader's consumer cursor (*cons) and the cursor our room counts from (a pending
 * rewind's lap start, conn_rewind.h). */
smc_cursor conn_tx_cons_base(struct smc_conn *c, smc_cursor *cons);
int64_t conn_tx_free(struct smc_conn *c);
void conn_fork_lock(struct smc_conn *c, int dir);
void conn_fork_unlock(struct smc_conn *c, int dir);
void conn_rx_resync(struct smc_conn *c);
void conn_tx_resync(struct smc_conn *c);
int64_t conn_rx_used_peek(struct smc_conn *c);
int64_t conn_tx_free_peek(struct smc_conn *c);
bool conn_rx_eof(struct smc_conn *c);
bool conn_tx_dead(struct smc_conn *c);
void conn_ring_if_asleep(const uint32_t *sleepers, const uint32_t *seq, uint32_t *rung,
			 int bell);

/* conn_down.c */
bool conn_peer_went_tcp(struct smc_conn *c);
bool conn_side_went_tcp(struct smc_conn *c);
void conn_side_rest_wait(struct smc_conn *c, bool nonblock);
bool conn_fork_lock_rings(struct smc_conn *c, int dir);
bool conn_down_finish(struct smc_conn *c);
bool conn_down_step(struct smc_conn *c, bool tx_locked);
uint32_t conn_aborted_mask(struct smc_conn *c);
uint32_t conn_down_poll_mask(struct smc_conn *c);
ssize_t conn_tcp_tail(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		      int flags, bool send);
ssize_t conn_down_send(struct smc_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		       int flags, bool nonblock, uint64_t deadline);
bool conn_oob_tcp(struct smc_conn *c);
/* A lock held only for a copy is had soon; one held through a sleep in the library is
 * not: false after ~1000 tries. */
bool conn_lock_briefly(pthread_mutex_t *m);

/* conn_wait.c */
void conn_tx_full(struct smc_conn *c);
void conn_wait_cancelled(void *arg);
int conn_wait(struct smc_conn *c, uint32_t events, bool for_handshake, uint64_t deadline);
bool conn_eintr_restarts(int64_t timeo_ns);
uint64_t conn_deadline_from(int64_t timeo_ns);

#endif
