/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * One SMC connection as seen by one process: state machine, the shared rings, the
 * doorbells, and the socket semantics (blocking, timeouts, shutdown, close) on top.
 *
 * States:  PENDING --handshake ok--> ACTIVE --close/abort--> CLOSED
 *             \--decline/timeout/TCP data first--> FALLBACK (plain TCP from then on)
 *
 * Doorbells: each side owns two nonblocking eventfds, rx_bell (rung by the peer when data
 * or a close flag arrives) and tx_bell (rung by the peer when it frees room we wait for).
 * The peer rings only while a waiter sleeps (r_sleepers / w_sleepers), and once per
 * sleep (r_seq / w_seq), so a busy connection makes no syscall.
 */
#ifndef SMC_CONN_H
#define SMC_CONN_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/base/stats.h"
#include "core/shm/copy_adapt.h"
#include "core/shm/shm.h"
#include "core/wire/ring.h"

enum conn_state { CONN_PENDING = 0, CONN_ACTIVE, CONN_FALLBACK, CONN_CLOSED };
enum conn_side { CONN_CLIENT = 0, CONN_SERVER = 1 };
/* How far the progress thread has taken a PENDING connection's handshake: only for the
 * report of a wait that never saw a decision (conn_wait.c, the watchdog). */
enum conn_hs_watch { HS_WATCH_NONE = 0, HS_WATCH_QUEUED, HS_WATCH_ARMED, HS_WATCH_DONE };

struct smc_ep_reg;
struct conn_node;
struct smc_pool;
struct conn_ib;
struct conn_transport;
struct hs_flow;

struct smc_conn {
	int fd;                     /* the application's TCP socket (first fd) */
	int fd_refs;                /* fds of this process that refer to it (dup) */
	int dup_fds[7];             /* the other fds (dup) while fd_refs > 1 */
	int ndups;
	int obj_refs;               /* fd_refs + progress thread + waiters holding it */
	pthread_mutex_t lock;       /* state, refs, epoll registrations */
	int state;                  /* enum conn_state, atomic loads */
	enum smc_reason reason;     /* why FALLBACK */
	enum conn_side side;
	enum smc_mode mode;

	/* socket options the core must honour */
	bool nonblock;
	int64_t rcvtimeo_ns, sndtimeo_ns; /* 0 = none */
	bool linger_on; int linger_s;

	/* transport (valid once ACTIVE) */
	struct shm_map map;
	struct shm_dir_ctl *rx, *tx; /* direction we read / write */
	uint8_t *rx_ring, *tx_ring;
	uint32_t rx_size, tx_size;
	size_t reserved;            /* bytes counted against SMC_MEM_CAP (atomic) */
	uint32_t rx_touched;        /* our RMB's pages the peer has written, counted in
				     * `reserved` (shm, conn_data.c rx_count_touched; atomic) */
	const struct conn_transport *tp; /* how the bytes move once ACTIVE (transport.h) */
	struct conn_ib *ib;         /* SMC-R transport (conn_ib.h); NULL for shared memory */
	struct smc_pool *pool;      /* the pool whose slot carries it (pool.h), or NULL: */
	int pool_slot;              /* then map and bells are the slot's; -1 once returned */

	pthread_mutex_t rx_lock, tx_lock; /* one reader / one writer at a time */
	smc_cursor rx_cons;         /* our consumer cursor (authoritative copy) */
	smc_cursor rx_prod_seen;    /* last validated peer producer cursor */
	smc_cursor tx_prod;         /* our producer cursor (authoritative copy) */
	smc_cursor tx_cons_seen;    /* last validated peer consumer cursor */
	struct copy_adapt tx_copy;  /* how we store into the peer's ring (under tx_lock) */
	uint64_t tx_rx_mark;        /* bytes_received as our last send began (tx_lock) */
	uint32_t rung_rx_seq;       /* peer's r_seq we last rang its rx bell for */
	uint32_t rung_tx_seq;       /* peer's w_seq we last rang its tx bell for */
	uint32_t asleep_rx, asleep_tx; /* our sleepers counted in the shared block */
	unsigned bells_undrained;   /* pooled: CONN_BELL_* rung and not read yet (atomic) */
	unsigned fd_reserved;       /* descriptors its handshake may still create, held in
				     * the fd budget until it ends (fd_budget.h; atomic) */

	int rx_bell, tx_bell;           /* ours: we wait on them */
	int peer_rx_bell, peer_tx_bell; /* the peer's: we ring them */

	/* local socket-level state */
	bool shut_rd, shut_wr;
	bool tcp_eof;               /* the TCP socket saw FIN/RST: peer closed or died */
	bool aborted;               /* protocol error or peer abort: ECONNRESET */
	bool fork_shared;           /* another process may drive this side too (fork) */
	unsigned fork_held;         /* the fork (number) that counted a child's holder */
	bool fork_orphan;           /* forked child: PENDING at the fork, decided by the parent */
	bool carried;               /* came into this image across exec (conn_carry.h) */
	bool carry_held;            /* held for an exec that carries it (conn_carry_hold) */
	bool side_rest_waited;      /* conn_down.c, side_rest_wait: done once */
	bool deferred;              /* server, PENDING: negotiated on the progress thread */
	uint8_t hs_watch;           /* enum conn_hs_watch, atomic stores */
	struct hs_flow *bg_flow;    /* server, PENDING: the progress thread's flow that
				     * decides it (progress_server.c), or NULL (under lock) */
	void *bg_pending;           /* client: the progress thread's watch of its
				     * handshake (progress_client.c), or NULL (under lock) */
	bool reset_reported;        /* ECONNRESET reported once (conn_reset_take), atomic */
	bool wrote_past_close;      /* a send after the peer's close was taken (conn_send) */
	/* ... and the reset TCP's peer answers it with is not reported yet: POLLERR, then
	 * EPIPE for SO_ERROR or the next send (tcp_reset in CLOSE_WAIT), atomic */
	bool epipe_owed;

	uint64_t bytes_sent, bytes_received; /* for smcpstat / stats at close */
	/* request/answer turns, for the client's policy (hs_policy.h): a receive that got
	 * data after a send counts one (relaxed: an estimate) */
	uint32_t exchanges;
	bool sent_last;

	/* handshake (client side, while PENDING) */
	bool clc_in_stream;         /* negotiated through the TCP option: the CLC messages
				     * travel on the TCP stream (negotiate.h), set at connect();
				     * its watch's `inband` (progress_client.c) */
	int rdv_listen_fd;          /* per-connection rendezvous listener, -1 when none */
	int watch_fd;               /* the progress thread's descriptor of the socket while
				     * it watches the handshake (conn_watch.c), or -1 */
	uint8_t *pend_buf;          /* sent while PENDING (under tx_lock) */
	size_t pend_len;
	bool pend_full_told;        /* a send found pend_buf full (under tx_lock) */
	uint64_t policy_key;        /* destination for hs_policy.h; 0: not judged */
	uint64_t born_ns;           /* connect() time, clock_now_ns */
	bool policy_first;          /* the process's first connect (hs_history.h), until
				     * its verdict is recorded */
	/* the peer's address once ACTIVE (peer_len 0: not known): a peer's close resets
	 * the TCP channel, after which the kernel has none to give (smc_sock_getpeername) */
	struct sockaddr_in6 peer_sa;
	socklen_t peer_len;

	struct smc_ep_reg *regs;    /* epoll registrations of this connection */
	struct conn_node *reg_node; /* its entry in the process's registry (conn_registry.c) */

	/* the peer went back to TCP (conn_down.c) */
	bool peer_tcp;              /* its SHM_W_TCP was seen (atomic) */
	bool resend_taken;          /* what it did not read is fixed: [resend_at, _end) */
	bool resend_done;           /* and is all on TCP (atomic) */
	bool resend_watched;        /* the progress thread sends the rest (under tx_lock) */
	int resend_fd;              /* its descriptor of the socket, or -1 */
	smc_cursor resend_at, resend_end; /* under tx_lock */
};

/* True when the peer's data path last ran on the CPU we run on now: a spin would only
 * keep it from running. */
bool conn_peer_on_my_cpu(struct smc_conn *c);

/* Readiness bits, TCP's meaning (POLLIN etc. values) */
uint32_t conn_poll_mask(struct smc_conn *c);

/* Lifecycle */
struct smc_conn *conn_new(int fd, enum conn_side side);
/* A connection on slot `slot` of pool p (pool.h); takes the caller's reference to p,
 * or returns NULL (out of memory) and leaves it. conn_activate_pooled then makes it
 * ACTIVE: no handshake, and nobody waits on it yet unless `watched` (below). */
struct smc_conn *conn_new_pooled(int fd, enum conn_side side, struct smc_pool *p, int slot);
/* `watched`: epoll registrations made before connect() follow it (epoll_track.h), and
 * a thread may already wait on them: its bells ring once. */
void conn_activate_pooled(struct smc_conn *c, bool watched);
/* Client: takes a pooled connection's slot back while the server has not claimed it
 * (its connect failed, or it ends unaccepted; server_gone: the pool takes no new
 * offers). true when it did. */
bool conn_pool_withdraw(struct smc_conn *c, bool server_gone);
/* The client's rendezvous listener (rdv_listen_fd): kept, counted (fd_budget.h), and
 * closed (a no-op without one). Under c->lock, or by its last holder. */
void conn_set_rdv(struct smc_conn *c, int fd);
void conn_close_rdv(struct smc_conn *c);
/* The descriptor the progress thread watches c's handshake through (c->watch_fd,
 * conn_watch.c). open: made by the thread that starts the watch, which holds c->fd; 0
 * or -errno. close: takes c->lock and drops it. */
int conn_watch_fd_open(struct smc_conn *c);
/* Opens what every later watch shares (once per process; conn_alloc does it). */
void conn_watch_prepare(void);
void conn_watch_fd_close(struct smc_conn *c);
/* Under c->lock, the program closed its last fd of c while the thread watches c's
 * handshake, or has yet to end a decided watch: the watch lets go of the socket, so
 * that the close ends it now (FIN or reset, its epoll registrations) as without the
 * library. A no-op without a watch. */
void conn_watch_let_go(struct smc_conn *c);
/* Under c->lock, or in a fork's child (whose copy is not the thread's): closes the
 * watch's descriptor of c's socket, if any. */
void conn_watch_fd_drop(struct smc_conn *c);
void conn_get(struct smc_conn *c);
void conn_put(struct smc_conn *c);
/* Resets TCP connection fd (RST to the peer, ECONNRESET to our application) and keeps
 * the descriptor: the application still owns it. */
void conn_tcp_reset(int fd);
/*
 * What a connection's life calls in the handshakes (core/negotiate/hs_conn.c), which sit
 * above conn/ and install this once, from the library's constructor, before any
 * connection exists. Called on the staging, close and exit paths only, never per send
 * or receive. Not installed (a unit test that runs no handshake thread), each call is
 * left out.
 */
struct conn_negotiate_ops {
	/* progress_watch_staging_full (negotiate/progress.h) */
	void (*staging_full)(struct smc_conn *c);
	/* progress_watch_decided */
	void (*decided)(struct smc_conn *c);
	/* progress_flow_refuse: 1, 0 or -ENOENT */
	int (*flow_refuse)(struct smc_conn *c, enum smc_reason why);
	/* hs_policy_closed (negotiate/hs_policy.h) */
	void (*policy_closed)(uint64_t key, uint64_t lifetime_ns, uint64_t bytes,
			      uint32_t exchanges, uint64_t now_ns, uint64_t short_ns);
	/* hs_history_closed (negotiate/hs_history.h), for the process's first connection */
	void (*first_closed)(uint64_t key, uint64_t lifetime_ns, uint64_t bytes,
			     uint32_t exchanges, uint64_t now_ns, uint64_t short_ns);
};
void conn_negotiate_ops_set(const struct conn_negotiate_ops *ops);

/* Transitions; both ring our own bells so every waiter re-evaluates. Activation
 * runs under c->lock in the handshakes, so it does not start the stats server (a
 * thread and a socket): its caller calls statsrv_ensure once it holds no lock. */
void conn_activate(struct smc_conn *c);
/* The verdict on the process's first connection (c->policy_first), at its close or at
 * exit with it still open: recorded once (hs_history.h). */
void conn_first_verdict(struct smc_conn *c, uint64_t now);
/* Keeps the peer's address (c->peer_sa) while the kernel still knows it. */
void conn_note_peer(struct smc_conn *c);
void conn_fallback(struct smc_conn *c, enum smc_reason why);
/* The same for a connection that never was (its connect failed): not counted, as the
 * kernel's refused connect is no connection. */
void conn_fallback_failed(struct smc_conn *c, enum smc_reason why);
/* Waits while the handshake runs: -EAGAIN when nonblock or after timeo_ns (the socket's
 * SO_RCVTIMEO/SO_SNDTIMEO; 0 = none), -EINTR on a signal. A handshake left undecided
 * far past its deadline resets the connection (conn_wait.c: the watchdog). */
int conn_wait_pending(struct smc_conn *c, bool nonblock, int64_t timeo_ns);
/* fork(), in this order (core/sock/init.c, forklock.h):
 *  - conn_fork_settle, holding no lock: decides the server handshakes the progress
 *    thread still runs (it does not survive in the child);
 *  - conn_fork_lock_registry, then conn_fork_lock_conns after the epoll, stripe and
 *    pool locks: the registry and every connection's lock (false when one is busy);
 *  - conn_fork_prepare, under them: every ACTIVE connection of an open fd gains a
 *    holder (it loses it again in conn_fork_failed when the fork failed);
 *  - conn_fork_child in the child. */
void conn_fork_settle(void);
bool conn_fork_lock_registry(void);
bool conn_fork_lock_conns(void);
void conn_fork_prepare(void);
void conn_fork_child(void);
void conn_fork_failed(void);
/* Calls fn for every connection of the process (under the registry lock: fn must not
 * block nor call back into the registry). */
void conn_foreach(void (*fn)(struct smc_conn *c, void *arg), void *arg);
/* The descriptors the connections of the process hold besides the application's (their
 * doorbells, a re-send's socket); free(*out) after. */
size_t conn_own_fds(int **out);
/* The ACTIVE connections for which want(c) holds (want runs under the registry lock),
 * each with a reference (conn_put each, then free the array). *n: how many; a short
 * list when memory ran out. */
struct smc_conn **conn_collect_active(bool (*want)(const struct smc_conn *c), size_t *n);
/* Every handshake under way decided now: by the progress thread, within one handshake
 * timeout each, or here as TCP (sock/table_split.c). */
void conn_settle_handshakes(void);
/* The peer went back to TCP and our re-send of what it had not read is not all out
 * yet (the progress thread sends it, which an exit or exec ends). */
bool conn_resend_pending(const struct smc_conn *c);
/* The connection's TCP socket as the library holds it: the re-send's (or orphan's) own
 * descriptor once there is one (the program's may be closed by then), else the
 * program's. */
static inline int conn_tcp_fd(const struct smc_conn *c)
{
	return c->resend_fd >= 0 ? c->resend_fd : c->fd;
}
/* Sends the rest of that re-send, blocking, until it is out (true) or the socket took
 * nothing for idle_ns. */
bool conn_finish_resend(struct smc_conn *c, uint64_t idle_ns);
/* The end of the image (exit, exec): the connections still negotiating send what they
 * staged over TCP and are plain TCP; at exit (exiting) every client handshake still
 * running ends, its server told. */
void conn_end_handshakes(bool exiting);
/* The application closed its last fd of c in this process. */
void conn_release_fd(struct smc_conn *c);
/* Rings c's own doorbells: every local waiter (a blocked read or write, a poll or
 * epoll watch) looks at the connection again. */
void conn_wake_local(struct smc_conn *c);
/* The connection of fd with a reference (conn_put it), or NULL when fd is not FD_SMC.
 * The only way to reach a connection from an fd number: the lookup and the reference
 * are taken under fd's stripe lock (fdtab.h), which a close() takes to clear the entry
 * before it drops the table's reference, so the connection cannot be freed in between. */
struct smc_conn *conn_from_fd(int fd);
/* Takes an ACTIVE shared-memory connection back to plain TCP in this process, for
 * `why` (SMC_REASON_EXEC), without losing a byte: our producer and consumer cursors
 * and SHM_W_TCP go into the shared block and the peer's bells ring; the peer reads
 * the rest of our stream from its ring, then from TCP, and re-sends over TCP what we
 * did not read. Nothing is waited for: the connection is plain TCP here at once (a
 * new program may take the socket). image_ends: an exec follows, which ends every
 * other thread; a thread asleep in a call on c is then not waited for. Otherwise such
 * a connection is left as it is: -EBUSY. 0, -EINVAL when not ACTIVE, -EOPNOTSUPP over
 * RDMA (the peer's unread data would be in our memory only). */
int conn_downgrade(struct smc_conn *c, enum smc_reason why, bool image_ends);

/* Socket fd's SO_RCVTIMEO or SO_SNDTIMEO (name) as the kernel keeps it, in *ns (0 =
 * none); -1 when the kernel does not answer. */
int conn_timeo_read(int fd, int name, int64_t *ns);

/* Data path: TCP semantics for flags MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT, MSG_NOSIGNAL. */
ssize_t conn_recv(struct smc_conn *c, const struct iovec *iov, int iovcnt, int flags);
ssize_t conn_send(struct smc_conn *c, const struct iovec *iov, int iovcnt, int flags);
/* A send while the handshake runs: staged and flushed to the ring or to TCP when the
 * handshake ends. Bytes staged; 0 when no longer PENDING (dispatch again); -1 when the
 * staging buffer is full (wait for the handshake). */
ssize_t conn_send_pending(struct smc_conn *c, const struct iovec *iov, int iovcnt);
int conn_shutdown(struct smc_conn *c, int how);
/* The reset of an aborted connection, reported once: true for the first caller (its
 * SO_ERROR, recv or send says ECONNRESET), false after (recv sees EOF, send EPIPE). */
bool conn_reset_take(struct smc_conn *c);
/* Bytes readable now (FIONREAD) and bytes written but not yet in the peer's receive
 * buffer (SIOCOUTQ): over shared memory none, the ring is the peer's buffer. */
/* Whether bytes are unread in the ring (ACTIVE): they come before anything the TCP
 * socket holds, an urgent mark included (SIOCATMARK). */
bool conn_rx_ring_unread(struct smc_conn *c);
int conn_rx_available(struct smc_conn *c);
int conn_tx_queued(struct smc_conn *c);

/* Sleeping (used by conn_wait.c's blocking paths and by the poll/select/epoll emulation).
 * events are POLLIN/POLLOUT interest bits. Protocol for a waiter:
 *   1. m = conn_poll_mask(c); if (m & (events|POLLERR|POLLHUP)) -> ready, do not sleep
 *   2. m = conn_prepare_sleep(c, events, drained_bells); if ready -> do not sleep
 *      (drained_bells: CONN_BELL_RX/TX bits of the bells that woke the waiter; they are
 *       read empty here, and rung again when the state is ready so that other waiters on
 *       the same bell do not miss it; then the waiter is armed so the peer rings it, and
 *       the mask is checked once more after a full barrier)
 *   3. sleep in poll/epoll on the fds of conn_wait_fds(); on wake conn_end_sleep(), go
 *      to 1.
 * conn_poll_mask() returns CONN_MASK_FALLBACK when the connection went back to plain
 * TCP: the caller then waits on the socket itself. */
#define CONN_BELL_RX 0x1u
#define CONN_BELL_TX 0x2u
/* A wait ended with these bells (CONN_BELL_*) rung and not yet read. A pooled
 * connection's bells serve the slot's next connection too, which a count left behind
 * would wake for nothing: they are read when the connection ends. */
void conn_note_undrained(struct smc_conn *c, unsigned bells);
#define CONN_MASK_FALLBACK 0x80000000u
uint32_t conn_prepare_sleep(struct smc_conn *c, uint32_t events, unsigned drained_bells,
			    uint32_t *armed);
/* After the sleep that followed conn_prepare_sleep (whatever woke it): the peer stops
 * ringing for this waiter. Pass the events that prepare reported in *armed (a waiter
 * prepared while the handshake ran armed nothing, and must end nothing). */
void conn_end_sleep(struct smc_conn *c, uint32_t events);
/* For a waiter that keeps its sleeper counts across sleeps (the epoll emulation): takes
 * the counts for `events` like conn_prepare_sleep but without asking for a ring (no new
 * sequence, no barrier, no look); released with conn_end_sleep. The waiter must look at
 * the connection again and call conn_rearm before it relies on a ring. Returns what it
 * took (nothing while the handshake runs). */
uint32_t conn_hold_sleep(struct smc_conn *c, uint32_t events);
/* For such a waiter: asks the peer to ring once more for `events` (bumps the sequence),
 * then a full barrier; re-check the state after it. A nonblocking send that finds the
 * ring full does the same for POLLOUT by itself. */
void conn_rearm(struct smc_conn *c, uint32_t events);
/* Fills up to 3 pollfds: rx bell (if POLLIN wanted), tx bell (if POLLOUT wanted) and the
 * TCP socket (POLLIN|POLLRDHUP, until its EOF was seen) which reports a dead peer.
 * Returns how many; tags[i] says which (CONN_BELL_RX, CONN_BELL_TX or CONN_WAIT_TCP). */
#define CONN_WAIT_TCP 0x4u
int conn_wait_fds(struct smc_conn *c, uint32_t events, struct pollfd *out, unsigned *tags);
/* The TCP socket of c reported events: record EOF/RST so conn_poll_mask reflects it. */
void conn_tcp_event(struct smc_conn *c);
/* c is ACTIVE on the rings (not gone back to TCP), its TCP channel looked at for the
 * peer's death (c->aborted). */
bool conn_on_rings(struct smc_conn *c);
/* SO_ERROR of a connection on the rings: the peer's clean close resets the TCP channel
 * (conn_release_fd), so the kernel's pending error is not the program's; its reset is,
 * once (conn_reset_take). False when the kernel's socket answers (not on the rings). */
bool conn_so_error(struct smc_conn *c, int *err);

#endif
