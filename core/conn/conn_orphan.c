/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Orphans (conn_orphan.h): the list, the progress thread's scan and the wait at the
 * end of the image.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/progress.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"
#include "core/conn/conn.h"
#include "core/conn/conn_orphan.h"
#include "core/conn/transport.h"

/* How often the progress thread looks: a peer that goes back to TCP waits at most this
 * long for the first re-sent byte. */
#define ORPHAN_SCAN_MS 10
/* While the process lives, an orphan whose peer neither reads nor closes is given up
 * after this long (TCP gives up an orphan's zero-window probes after minutes too); the
 * peer still reads the bytes from its ring, only a later downgrade would miss them. */
#define ORPHAN_MAX_NS (60ull * 1000000000ull)

struct orphan {
	struct smc_conn *c;
	uint64_t since;
	bool closed; /* the program closed it: a reset ends it, as conn_release_fd's would */
};

static pthread_mutex_t orphan_lock = PTHREAD_MUTEX_INITIALIZER;
static struct orphan *orphans; /* under orphan_lock */
static size_t n_orphans, cap_orphans;
static bool scan_armed;

static void orphan_scan(void *arg);

static bool orphan_add(struct smc_conn *c, bool closed)
{
	int fd;

	/* a seccomp sandbox may refuse the dup and the thread's calls (sandbox.h): the
	 * socket is reset as before */
	if (sandbox_active() || c->resend_fd >= 0 || conn_orphan_unread(c) <= 0 ||
	    !fd_budget_allows(-1, 1))
		return false;
	fd = REAL(fcntl)(c->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return false;
	fd = fd_park(fd);
	pthread_mutex_lock(&orphan_lock);
	if (n_orphans == cap_orphans) {
		size_t cap = cap_orphans ? 2 * cap_orphans : 16;
		struct orphan *m = realloc(orphans, cap * sizeof(*m));

		if (!m)
			goto fail;
		orphans = m;
		cap_orphans = cap;
	}
	if (!scan_armed) {
		if (progress_after(ORPHAN_SCAN_MS, orphan_scan, NULL) < 0)
			goto fail;
		scan_armed = true;
	}
	fd_budget_take(1);
	c->resend_fd = fd;
	conn_get(c);
	orphans[n_orphans++] = (struct orphan){ .c = c, .since = clock_now_ns(), .closed = closed };
	pthread_mutex_unlock(&orphan_lock);
	log_debug("fd %d: %s with bytes the peer has not read: kept until it does", c->fd,
		  closed ? "closed" : "left open at the end of the image");
	return true;
fail:
	pthread_mutex_unlock(&orphan_lock);
	fd_own_close(fd);
	return false;
}

bool conn_orphan_adopt(struct smc_conn *c)
{
	return orphan_add(c, true);
}

/* Not one the exec carries into the new image (conn_carry.h): it stays open there. */
static bool shm_unpooled(const struct smc_conn *c)
{
	return c->tp->orphans && !c->pool && !__atomic_load_n(&c->carry_held, __ATOMIC_ACQUIRE);
}

/* Connections still open when the image ends are closed by the kernel: a FIN, which
 * the peer takes for our close; they owe what a closed one owes. Not one that another
 * process of our side still holds (fork): that one carries on. */
static void adopt_open(void)
{
	size_t n;
	struct smc_conn **v = conn_collect_active(shm_unpooled, &n);

	for (size_t i = 0; i < n; i++) {
		struct smc_conn *c = v[i];

		if (__atomic_load_n(&c->fd_refs, __ATOMIC_RELAXED) > 0 &&
		    __atomic_load_n(&c->map.hdr->side_refs[c->side], __ATOMIC_ACQUIRE) == 1)
			(void)orphan_add(c, false);
		conn_put(c);
	}
	free(v);
}

/* The peer's end of the TCP connection is gone (its process died, its library reset
 * it): nobody is left to read, or to ask for a re-send. */
static bool socket_hung_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return REAL(poll)(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Under orphan_lock: true when orphan i ended (it is no longer in the list). */
static bool orphan_end(size_t i, uint64_t now)
{
	struct smc_conn *c = orphans[i].c;
	enum conn_orphan_end end = conn_orphan_step(c);

	if (end == CONN_ORPHAN_KEEP) {
		if (socket_hung_up(c->resend_fd)) {
			end = CONN_ORPHAN_READ;
		} else if (now - orphans[i].since >= ORPHAN_MAX_NS) {
			log_debug("fd %d: the peer has not read the end of the stream in %llu s: "
				  "its socket is let go", c->fd, ORPHAN_MAX_NS / 1000000000ull);
			end = CONN_ORPHAN_READ;
		} else {
			return false;
		}
	}
	if (end == CONN_ORPHAN_READ && orphans[i].closed)
		conn_linger_reset(c->resend_fd); /* as the close would have (conn_release_fd) */
	orphans[i] = orphans[--n_orphans];
	conn_put(c); /* the socket's last close, unless a re-send still holds it */
	return true;
}

static void scan_locked(uint64_t now)
{
	for (size_t i = 0; i < n_orphans;)
		if (!orphan_end(i, now))
			i++;
}

static void orphan_scan(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&orphan_lock);
	scan_locked(clock_now_ns());
	scan_armed = n_orphans > 0 && progress_after(ORPHAN_SCAN_MS, orphan_scan, NULL) == 0;
	pthread_mutex_unlock(&orphan_lock);
}

struct sock_name {
	struct sockaddr_storage a;
	socklen_t len;
};

static int name_cmp(const void *x, const void *y)
{
	const struct sock_name *p = x, *q = y;

	if (p->len != q->len)
		return p->len < q->len ? -1 : 1;
	return memcmp(&p->a, &q->a, p->len);
}

/* Under orphan_lock, at the end of the image: orphans whose peer is a connection of this
 * very process (a program talking to itself) are not waited for: that peer reads no
 * more once the image ends, and the wait would only delay the exit. Found by the
 * socket names: the peer's local name is ours as seen from the other end. */
static void drop_local_pairs(void)
{
	size_t n, k = 0;
	struct smc_conn **all = conn_collect_active(shm_unpooled, &n);
	struct sock_name *local = n ? calloc(n, sizeof(*local)) : NULL;

	for (size_t i = 0; local && i < n; i++) {
		local[k].len = sizeof(local[k].a);
		if (REAL(getsockname)(conn_tcp_fd(all[i]), (struct sockaddr *)&local[k].a,
				      &local[k].len) == 0 && local[k].len <= sizeof(local[k].a))
			k++;
	}
	if (k)
		qsort(local, k, sizeof(*local), name_cmp);
	for (size_t i = n_orphans; k && i-- > 0;) {
		struct sock_name peer = { .len = sizeof(peer.a) };
		struct smc_conn *c = orphans[i].c;

		if (REAL(getpeername)(c->resend_fd, (struct sockaddr *)&peer.a, &peer.len) < 0 ||
		    peer.len > sizeof(peer.a) || !bsearch(&peer, local, k, sizeof(*local), name_cmp))
			continue;
		orphans[i] = orphans[--n_orphans];
		conn_put(c); /* the kernel's close at the end of the image */
	}
	free(local);
	for (size_t i = 0; i < n; i++)
		conn_put(all[i]);
	free(all);
}

void conn_orphans_settle(uint64_t idle_ns, bool exiting)
{
	uint64_t moved_at = clock_now_ns();
	int64_t last = -1;

	conn_end_handshakes(exiting);
	adopt_open();
	pthread_mutex_lock(&orphan_lock);
	if (n_orphans)
		drop_local_pairs();
	for (;;) {
		uint64_t now = clock_now_ns();
		int64_t unread = 0;

		scan_locked(now);
		if (n_orphans == 0)
			break;
		for (size_t i = 0; i < n_orphans; i++) {
			int64_t u = conn_orphan_unread(orphans[i].c);

			unread += u > 0 ? u : 0;
		}
		if (unread != last) {
			last = unread;
			moved_at = now;
		} else if (now - moved_at >= idle_ns) {
			log_debug("%zu closed connections still unread by their peers: left to them",
				  n_orphans);
			break;
		}
		pthread_mutex_unlock(&orphan_lock);
		REAL(poll)(NULL, 0, 2);
		pthread_mutex_lock(&orphan_lock);
	}
	pthread_mutex_unlock(&orphan_lock);
}

bool conn_orphans_fork_lock(void)
{
	return forklock_take(&orphan_lock) != FORKLOCK_BUSY;
}

void conn_orphans_atfork_child(void)
{
	while (n_orphans > 0) {
		struct smc_conn *c = orphans[--n_orphans].c;

		/* the parent's socket: the child's copy must not hold it open */
		fd_own_close(c->resend_fd);
		c->resend_fd = -1;
		fd_budget_give(1);
		conn_put(c);
	}
	scan_armed = false;
}
