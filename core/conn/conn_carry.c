/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * One connection's side of a hand-off across exec (conn_carry.h). Nothing moves on the
 * wire: the peer goes on writing into our ring and ringing our doorbells, which are the
 * same kernel objects in the new image, and reads what we write after it. The only
 * state that is not in the shared block or the kernel is our side's cursors and
 * counts, which the record carries.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/fd_budget.h"
#include "core/base/fdtab.h"
#include "core/base/fdpark.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/conn/conn_carry.h"
#include "core/conn/conn_int.h"
#include "core/conn/transport.h"
#include "core/wire/clc.h"

bool conn_carry_hold(struct smc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	if (conn_state(c) != CONN_ACTIVE || c->tp != &conn_transport_shm || c->pool ||
	    c->fork_orphan || c->aborted || c->tcp_eof ||
	    __atomic_load_n(&c->peer_tcp, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&c->resend_taken, __ATOMIC_ACQUIRE) ||
	    (conn_peer_wflags(c) & (SHM_W_TCP | SHM_W_ABORT)) ||
	    (__atomic_load_n(&c->tx->wflags, __ATOMIC_ACQUIRE) & SHM_W_TCP)) {
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	if (!conn_lock_briefly(&c->rx_lock)) {
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	if (!conn_lock_briefly(&c->tx_lock)) {
		pthread_mutex_unlock(&c->rx_lock);
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	__atomic_store_n(&c->carry_held, true, __ATOMIC_RELEASE);
	return true;
}

void conn_carry_unhold(struct smc_conn *c)
{
	__atomic_store_n(&c->carry_held, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->tx_lock);
	pthread_mutex_unlock(&c->rx_lock);
	pthread_mutex_unlock(&c->lock);
}

int conn_carry_region_fd(struct smc_conn *c)
{
	char path[64];
	uintptr_t start = (uintptr_t)c->map.base;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", (unsigned long)start,
		 (unsigned long)(start + c->map.len));
	fd = REAL(open)(path, O_RDWR);
	return fd < 0 ? -errno : fd;
}

void conn_carry_out(struct smc_conn *c, struct conn_carry *out, int memfd)
{
	out->memfd = memfd;
	out->rx_bell = c->rx_bell;
	out->tx_bell = c->tx_bell;
	out->peer_rx_bell = c->peer_rx_bell;
	out->peer_tx_bell = c->peer_tx_bell;
	out->side = (uint8_t)c->side;
	out->shut_rd = c->shut_rd;
	out->shut_wr = c->shut_wr;
	out->fork_shared = c->fork_shared;
	out->size[0] = c->map.size[0];
	out->size[1] = c->map.size[1];
	/* No copy runs under the hold: what we read and wrote is all published, which is
	 * what the new image checks the record against. A side shared with another
	 * process (fork) publishes its cursors with every copy, and that process may move
	 * them on meanwhile: ours may be behind, and the new image reads them from the
	 * shared block, as every copy of such a side does (conn_rx_resync). */
	if (!c->fork_shared) {
		__atomic_store_n(&c->rx->cons, c->rx_cons, __ATOMIC_RELEASE);
		__atomic_store_n(&c->tx->prod, c->tx_prod, __ATOMIC_RELEASE);
	}
	out->rx_cons = c->rx_cons;
	out->rx_prod_seen = c->rx_prod_seen;
	out->tx_prod = c->tx_prod;
	out->tx_cons_seen = c->tx_cons_seen;
	out->rung_rx_seq = c->rung_rx_seq;
	out->rung_tx_seq = c->rung_tx_seq;
	out->asleep_rx = __atomic_load_n(&c->asleep_rx, __ATOMIC_RELAXED);
	out->asleep_tx = __atomic_load_n(&c->asleep_tx, __ATOMIC_RELAXED);
	out->rx_touched = __atomic_load_n(&c->rx_touched, __ATOMIC_RELAXED);
	out->exchanges = c->exchanges;
	out->bytes_sent = c->bytes_sent;
	out->bytes_received = c->bytes_received;
}

/* ------------------------------------------------------------------ the new image */

static bool is_eventfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	return strcmp(link, "anon_inode:[eventfd]") == 0;
}

/* A TCP socket that is not listening: connected, or closed since (the peer's close and
 * ours may both have come before the new image: its reads see the end of the stream
 * then, or what the peer left in the ring first); *ino: its inode. */
static bool is_tcp_socket(int fd, ino_t *ino)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int type = 0, proto = 0, listening = 1;
	socklen_t ol = sizeof(int);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	*ino = st.st_ino;
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &ol) < 0 || type != SOCK_STREAM)
		return false;
	ol = sizeof(int);
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &ol) < 0 || proto != IPPROTO_TCP)
		return false;
	ol = sizeof(int);
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) < 0 || listening)
		return false;
	if (REAL(getpeername)(fd, (struct sockaddr *)&ss, &len) == 0)
		return true;
	return REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE;
}

/* Every descriptor the record names: distinct and of its kind. */
static const char *check_fds(const struct conn_carry *in, int *nfds)
{
	int all[CONN_CARRY_FDS + 5], n = 0, napp = 0;
	ino_t ino0 = 0;

	for (int i = 0; i < CONN_CARRY_FDS && in->fds[i] >= 0; i++, napp++) {
		ino_t ino;

		if (in->fds[i] <= STDERR_FILENO || !is_tcp_socket(in->fds[i], &ino))
			return "a descriptor is not a TCP connection";
		if (i == 0)
			ino0 = ino;
		else if (ino != ino0)
			return "the descriptors are not one socket";
		all[n++] = in->fds[i];
	}
	if (napp == 0)
		return "no descriptor";
	if (!is_eventfd(in->rx_bell) || !is_eventfd(in->tx_bell) || !is_eventfd(in->peer_rx_bell) ||
	    !is_eventfd(in->peer_tx_bell))
		return "a doorbell is not an eventfd";
	all[n++] = in->rx_bell;
	all[n++] = in->tx_bell;
	all[n++] = in->peer_rx_bell;
	all[n++] = in->peer_tx_bell;
	all[n++] = in->memfd;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (all[i] == all[j])
				return "a descriptor is named twice";
	*nfds = napp;
	return NULL;
}

static bool is_memfd(int fd)
{
	return REAL(fcntl)(fd, F_GET_SEALS) >= 0;
}

void conn_carry_drop(const struct conn_carry *r)
{
	int32_t bells[4] = { r->rx_bell, r->tx_bell, r->peer_rx_bell, r->peer_tx_bell };
	struct stat st;

	if (r->fds[0] > STDERR_FILENO && fdtab_kind(r->fds[0]) == FD_NONE &&
	    fstat(r->fds[0], &st) == 0 && S_ISSOCK(st.st_mode))
		conn_tcp_reset(r->fds[0]);
	for (int i = 0; i < 4; i++)
		if (bells[i] > STDERR_FILENO && fdtab_kind(bells[i]) == FD_NONE && is_eventfd(bells[i]))
			REAL(close)(bells[i]);
	if (r->memfd > STDERR_FILENO && fdtab_kind(r->memfd) == FD_NONE && is_memfd(r->memfd))
		REAL(close)(r->memfd);
}

/* The cursors are a consistent pair for each ring, and the ones this side publishes
 * are the record's (a stale record, from before the last read or write, is not). */
static const char *check_cursors(const struct conn_carry *in, const struct shm_map *m)
{
	int rxd = in->side == CONN_CLIENT ? 1 : 0, txd = 1 - rxd;
	uint32_t rs = m->size[rxd], ts = m->size[txd];

	if (!cursor_valid(in->rx_cons, rs) || !cursor_valid(in->rx_prod_seen, rs) ||
	    ring_used(in->rx_prod_seen, in->rx_cons, rs) < 0 ||
	    !cursor_valid(in->tx_prod, ts) || !cursor_valid(in->tx_cons_seen, ts) ||
	    ring_used(in->tx_prod, in->tx_cons_seen, ts) < 0 || in->rx_touched > rs)
		return "a cursor outside its ring";
	if (in->fork_shared)
		return NULL; /* resynchronised from the shared block before each copy */
	if (__atomic_load_n(&m->hdr->dir[rxd].cons, __ATOMIC_ACQUIRE) != in->rx_cons ||
	    __atomic_load_n(&m->hdr->dir[txd].prod, __ATOMIC_ACQUIRE) != in->tx_prod)
		return "a stale record: the cursors are not the ones this side published";
	return NULL;
}

/* The exec ended the old image's sleepers: their counts leave the shared block, so
 * that the peer does not ring for nobody (never below zero: the block is the peer's
 * to write too). */
static void drop_sleepers(uint32_t *counter, uint32_t n)
{
	uint32_t cur = __atomic_load_n(counter, __ATOMIC_RELAXED);

	while (n && !__atomic_compare_exchange_n(counter, &cur, cur >= n ? cur - n : 0, true,
						 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		;
}

/* A descriptor the library keeps: marked its own, close-on-exec again. */
static int keep_own(int fd)
{
	REAL(fcntl)(fd, F_SETFD, FD_CLOEXEC);
	return fd_own(fd);
}

struct smc_conn *conn_carry_in(const struct conn_carry *in, const char **why)
{
	struct shm_map map = { 0 };
	struct smc_conn *c;
	int nfds = 0, r;

	if (in->side > CONN_SERVER) {
		*why = "bad side";
		return NULL;
	}
	if (!clc_sh_rmb_size_valid(in->size[0]) || !clc_sh_rmb_size_valid(in->size[1])) {
		*why = "bad ring size";
		return NULL;
	}
	if ((*why = check_fds(in, &nfds)) != NULL)
		return NULL;
	r = shm_attach(in->memfd, in->size[0], in->size[1], &map);
	if (r < 0) {
		*why = "the region is not a sealed memfd of its size";
		return NULL;
	}
	if (map.hdr->magic != SHM_MAGIC || map.hdr->version != SHM_VERSION) {
		*why = "the region is not a connection's";
		shm_detach(&map);
		return NULL;
	}
	if ((*why = check_cursors(in, &map)) != NULL) {
		shm_detach(&map);
		return NULL;
	}
	c = conn_alloc(in->fds[0], (enum conn_side)in->side);
	if (!c) {
		*why = "out of memory";
		shm_detach(&map);
		return NULL;
	}
	REAL(close)(in->memfd); /* mapped */
	c->map = map;
	c->tp->activate(c);
	c->rx_cons = in->rx_cons;
	c->rx_prod_seen = in->rx_prod_seen;
	c->tx_prod = in->tx_prod;
	c->tx_cons_seen = in->tx_cons_seen;
	c->rung_rx_seq = in->rung_rx_seq;
	c->rung_tx_seq = in->rung_tx_seq;
	drop_sleepers(&c->rx->r_sleepers, in->asleep_rx);
	drop_sleepers(&c->tx->w_sleepers, in->asleep_tx);
	c->rx_bell = keep_own(in->rx_bell);
	c->tx_bell = keep_own(in->tx_bell);
	c->peer_rx_bell = keep_own(in->peer_rx_bell);
	c->peer_tx_bell = keep_own(in->peer_tx_bell);
	fd_budget_take(4);
	c->shut_rd = in->shut_rd;
	c->shut_wr = in->shut_wr;
	c->fork_shared = in->fork_shared;
	c->rx_touched = in->rx_touched;
	c->reserved = SHM_HDR_SPACE + in->rx_touched;
	shm_charge(c->reserved);
	c->exchanges = in->exchanges;
	c->bytes_sent = in->bytes_sent;
	c->bytes_received = in->bytes_received;
	c->nonblock = (REAL(fcntl)(c->fd, F_GETFL) & O_NONBLOCK) != 0;
	c->fd_refs = c->obj_refs = nfds;
	for (int i = 1; i < nfds; i++)
		c->dup_fds[c->ndups++] = in->fds[i];
	c->carried = true;
	conn_note_peer(c);
	__atomic_store_n(&c->state, CONN_ACTIVE, __ATOMIC_RELEASE);
	conn_list_add(c);
	return c;
}
