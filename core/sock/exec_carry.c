/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Upgraded connections carried across exec into a program that loads this library
 * (exec_image.c says whether it will): each keeps its rings and doorbells, and the new
 * image goes on where the old one stopped, with no handshake and no byte lost.
 *
 * The old image holds every carried connection still (conn_carry_hold: no cursor moves
 * until the exec), makes the descriptors the new image needs inheritable (its region,
 * opened through /proc/self/map_files, and the four doorbells), and describes them in
 * one sealed memfd named by SMC_EXEC_STATE in the new environment, with the process's
 * counters, so that the stats of a process span its images. The new image's
 * constructor takes the variable out of its environment, checks the description
 * (written by this process, for this build, sealed) and each connection (conn_carry_in:
 * the descriptors are what they are said to be, the cursors those this side published)
 * and enters them in its tables. A connection it refuses is reset, as TCP resets a
 * connection whose state is lost, never used.
 *
 * A connection that cannot be carried goes back to TCP before the exec as before
 * (downgrade.c): one on a standard stream (stdio in either image reads it unseen), on
 * a pool slot or over RDMA, one with a thread in a copy, and every one when the region
 * cannot be reopened (/proc/self/map_files needs CAP_CHECKPOINT_RESTORE or
 * CAP_SYS_ADMIN: a process without them takes its connections to TCP).
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/fdtab.h"
#include "core/base/fsize.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"
#include "core/conn/conn_carry.h"
#include "core/sock/exec_carry.h"
#include "core/conn/transport.h"
#include "core/sock/init.h"
#include "core/sock/sock.h"
#include "core/sock/sock_int.h"

/* What an exec that may still fail holds (one exec at a time: the exec family runs in
 * one thread, and a second exec racing it in another would replace the same image). */
static struct {
	struct smc_conn **conns;
	struct conn_carry *recs;
	size_t n;
	int state_fd;
	char **env, *var; /* the new environment, and its entry that names state_fd */
} held = { .state_fd = -1 };

/* The process whose memory this image is: set at load and in a fork's child. A child
 * made by clone(CLONE_VM) without a thread shares our memory, locks and connections
 * with its parent, which goes on using them after the child's exec: it carries nothing
 * (a raw clone without CLONE_VM runs no pthread_atfork handler either, and only loses
 * the carry). */
static pid_t image_pid;
static pthread_once_t image_once = PTHREAD_ONCE_INIT;

static void image_forked(void)
{
	image_pid = getpid();
}

static void image_track(void)
{
	(void)pthread_atfork(NULL, NULL, image_forked);
}

bool exec_carry_possible(void)
{
	return image_pid == getpid();
}

static void set_cloexec(int fd, bool on)
{
	REAL(fcntl)(fd, F_SETFD, on ? FD_CLOEXEC : 0);
}

bool exec_carry_candidate(int fd)
{
	struct smc_conn *c = conn_from_fd(fd);
	bool yes;

	if (!c)
		return false;
	yes = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_ACTIVE && !c->tp->process_bound &&
	      !c->pool;
	conn_put(c);
	return yes;
}

static bool already_held(struct smc_conn *c)
{
	for (size_t i = 0; i < held.n; i++)
		if (held.conns[i] == c)
			return true;
	return false;
}

/* The numbers of c that the new program gets; false when one of them is a standard
 * stream, or c has more than the record or the connection can name. */
static bool surviving_fds(struct smc_conn *c, int32_t *out)
{
	int fds[1 + sizeof(c->dup_fds) / sizeof(c->dup_fds[0])], n = 0, k = 0;

	if (c->fd_refs > 1 + c->ndups)
		return false;
	fds[n++] = c->fd;
	for (int i = 0; i < c->ndups; i++)
		fds[n++] = c->dup_fds[i];
	for (int i = 0; i < CONN_CARRY_FDS; i++)
		out[i] = -1;
	for (int i = 0; i < n; i++) {
		if (!exec_fd_survives(fds[i]))
			continue;
		if (fds[i] <= STDERR_FILENO || k == CONN_CARRY_FDS)
			return false;
		out[k++] = fds[i];
	}
	return k > 0;
}

static void bells_inherited(const struct conn_carry *r, bool on)
{
	set_cloexec(r->rx_bell, !on);
	set_cloexec(r->tx_bell, !on);
	set_cloexec(r->peer_rx_bell, !on);
	set_cloexec(r->peer_tx_bell, !on);
}

/* Holds c for the exec and records it; false: c goes back to TCP instead. epoll_kept:
 * an epoll set with one of our connections goes into the new program. */
static bool hold_one(struct smc_conn *c, bool epoll_kept)
{
	struct conn_carry rec;
	void *nc, *nr;
	int memfd;

	memset(&rec, 0, sizeof(rec));
	if (!conn_carry_hold(c))
		return false;
	/* its numbers under its lock; in an epoll set the new program inherits, the new
	 * image's emulation would not know the registration (it goes back to TCP, and the
	 * kernel's set takes the socket) */
	if (!surviving_fds(c, rec.fds) || (c->regs && epoll_kept)) {
		conn_carry_unhold(c);
		return false;
	}
	memfd = conn_carry_region_fd(c);
	if (memfd < 0) {
		static bool told;

		if (!told)
			log_info("the rings cannot be reopened for the new program (%s): its "
				 "connections go back to TCP", strerror(-memfd));
		told = true;
		conn_carry_unhold(c);
		return false;
	}
	nc = realloc(held.conns, (held.n + 1) * sizeof(*held.conns));
	if (nc)
		held.conns = nc;
	nr = nc ? realloc(held.recs, (held.n + 1) * sizeof(*held.recs)) : NULL;
	if (nr)
		held.recs = nr;
	if (!nc || !nr) {
		REAL(close)(memfd);
		conn_carry_unhold(c);
		return false;
	}
	conn_carry_out(c, &rec, memfd);
	bells_inherited(&rec, true);
	conn_get(c);
	held.conns[held.n] = c;
	held.recs[held.n++] = rec;
	return true;
}

void exec_carry_hold_all(void (*leave)(int fd))
{
	bool epoll_kept = exec_epoll_inherited();

	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1)) {
		struct smc_conn *c;

		if (fdtab_kind(fd) != FD_SMC || !exec_fd_survives(fd) || !(c = conn_from_fd(fd)))
			continue;
		if (!already_held(c) && !hold_one(c, epoll_kept))
			leave(fd);
		conn_put(c);
	}
}

/* The sealed description of what is held: its descriptor, inherited, or -1. */
static int write_state(void)
{
	struct carry_hdr h = {
		.magic = CARRY_MAGIC, .version = CARRY_VERSION, .pid = (int32_t)getpid(),
		.count = (uint32_t)held.n, .rec_size = sizeof(struct conn_carry),
		.stats_size = sizeof(struct smc_stats_snapshot),
	};
	size_t len = held.n * sizeof(struct conn_carry);
	int fd;

	/* writing the memfd past RLIMIT_FSIZE would raise SIGXFSZ (fsize.h) */
	if (!fsize_allows(sizeof(h) + len))
		return -1;
	fd = memfd_create("smc-exec-state", MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	stats_snapshot(&h.stats);
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    pwrite(fd, held.recs, len, sizeof(h)) != (ssize_t)len ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		REAL(close)(fd);
		return -1;
	}
	return fd;
}

/* envp without any SMC_EXEC_STATE, and ours at its end. */
static char **env_with_state(char *const envp[], int fd)
{
	size_t n = 0, k = 0;
	char **env, *var;

	for (char *const *e = envp; e && *e; e++)
		n++;
	env = malloc((n + 2) * sizeof(*env));
	if (!env || asprintf(&var, CARRY_ENV "=%d", fd) < 0) {
		free(env);
		return NULL;
	}
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, CARRY_ENV "=", sizeof(CARRY_ENV)) != 0)
			env[k++] = *e;
	env[k++] = var;
	env[k] = NULL;
	held.var = var;
	return env;
}

char *const *exec_carry_finish(char *const envp[], void (*leave)(int fd))
{
	if (held.n == 0)
		return envp;
	held.state_fd = write_state();
	held.env = held.state_fd >= 0 ? env_with_state(envp, held.state_fd) : NULL;
	if (held.env) {
		log_debug("%zu connection(s) carried into the new program (" CARRY_ENV "=%d)",
			  held.n, held.state_fd);
		return held.env;
	}
	/* no description: every held connection goes back to TCP after all */
	log_warn("cannot describe the connections for the new program (%s): they go back to TCP",
		 strerror(errno));
	{
		size_t n = held.n;
		int *fds = malloc(n * sizeof(*fds));

		for (size_t i = 0; fds && i < n; i++)
			fds[i] = held.recs[i].fds[0];
		exec_carry_release();
		for (size_t i = 0; fds && i < n; i++)
			leave(fds[i]);
		free(fds);
	}
	return envp;
}

void exec_carry_release(void)
{
	for (size_t i = 0; i < held.n; i++) {
		bells_inherited(&held.recs[i], false);
		REAL(close)(held.recs[i].memfd);
		conn_carry_unhold(held.conns[i]);
		conn_put(held.conns[i]);
	}
	if (held.state_fd >= 0)
		REAL(close)(held.state_fd);
	free(held.env);
	free(held.var);
	free(held.conns);
	free(held.recs);
	held.conns = NULL;
	held.recs = NULL;
	held.n = 0;
	held.state_fd = -1;
	held.env = NULL;
	held.var = NULL;
}

/* ------------------------------------------------------------------ the new image */

/* A refused record: the socket is reset (its peer's bytes in the ring cannot reach the
 * program any more), its other descriptors closed where they are what it says. */
static void refuse(const struct conn_carry *r, const char *why)
{
	log_warn("fd %d: the connection carried across exec is refused (%s): reset", r->fds[0], why);
	conn_carry_drop(r);
	stats_conn(SMC_MODE_TCP, SMC_REASON_EXEC_STATE);
	stats_count_abort();
}

/* No descriptor of r is taken by an earlier record already. */
static bool fds_untaken(const struct conn_carry *r)
{
	int32_t bells[4] = { r->rx_bell, r->tx_bell, r->peer_rx_bell, r->peer_tx_bell };

	for (int i = 0; i < CONN_CARRY_FDS && r->fds[i] >= 0; i++)
		if (fdtab_kind(r->fds[i]) != FD_NONE)
			return false;
	for (int i = 0; i < 4; i++)
		if (bells[i] < 0 || fdtab_kind(bells[i]) != FD_NONE)
			return false;
	return r->memfd >= 0 && fdtab_kind(r->memfd) == FD_NONE;
}

static void adopt(const struct conn_carry *r, bool keep)
{
	const char *why = "a descriptor is named by another record";
	struct smc_conn *c = fds_untaken(r) ? conn_carry_in(r, &why) : NULL;

	if (!c) {
		refuse(r, why);
		return;
	}
	for (int i = 0; i < CONN_CARRY_FDS && r->fds[i] >= 0; i++) {
		fdtab_set(r->fds[i], FD_SMC, c);
		fdtab_flags_set(r->fds[i], FDF_SOCKOPTS); /* its history is not known */
	}
	sock_load_sockopts(c);
	stats_count_carried();
	log_debug("fd %d: connection carried across exec (%s, sent %llu, received %llu)", c->fd,
		  c->side == CONN_CLIENT ? "client" : "server", (unsigned long long)c->bytes_sent,
		  (unsigned long long)c->bytes_received);
	if (!keep)
		/* SMC_TRANSPORT=tcp in the new program, or a Go program (the old image
		 * judged it wrong): it goes back to TCP, losslessly */
		(void)conn_downgrade(c, smc_enabled() ? SMC_REASON_EXEC : SMC_REASON_DISABLED, false);
}

/* The description fd names, checked: ours (sealed, this process, this layout). */
static const char *read_header(int fd, struct carry_hdr *h, bool *ours)
{
	struct stat st;
	int seals = REAL(fcntl)(fd, F_GET_SEALS);

	*ours = false;
	if (seals < 0 || fstat(fd, &st) < 0 || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
	    h->magic != CARRY_MAGIC)
		return "not a description written by this library";
	if (h->version != CARRY_VERSION || h->rec_size != sizeof(struct conn_carry) ||
	    h->stats_size != sizeof(struct smc_stats_snapshot))
		return "written by another version of the library";
	*ours = true;
	if (h->pid != (int32_t)getpid())
		return "written for another process";
	if ((seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW)) !=
	    (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW))
		return "not sealed";
	if (h->count == 0 || h->count > CARRY_MAX ||
	    (uint64_t)st.st_size != sizeof(*h) + (uint64_t)h->count * sizeof(struct conn_carry))
		return "its size does not match its count";
	return NULL;
}

void exec_carry_adopt(void)
{
	const char *v = getenv(CARRY_ENV), *why;
	struct carry_hdr h;
	char *end;
	long fd;
	bool ours, keep;

	image_pid = getpid();
	pthread_once(&image_once, image_track);
	if (!v)
		return;
	fd = strtol(v, &end, 10);
	if (*end || end == v || fd <= STDERR_FILENO || fd > INT32_MAX) {
		log_warn(CARRY_ENV "=%s: not a descriptor: ignored", v);
		unsetenv(CARRY_ENV);
		return;
	}
	unsetenv(CARRY_ENV); /* for this image alone: its own children must not read it */
	why = read_header((int)fd, &h, &ours);
	if (why) {
		log_warn(CARRY_ENV "=%ld: %s: ignored", fd, why);
		if (ours)
			REAL(close)((int)fd);
		return;
	}
	stats_add_snapshot(&h.stats);
	/* its runtime reads and writes sockets past our wrappers */
	keep = smc_enabled() && !exec_image_is_go("/proc/self/exe");
	for (uint32_t i = 0; i < h.count; i++) {
		struct conn_carry r;

		if (pread((int)fd, &r, sizeof(r), (off_t)(sizeof(h) + (size_t)i * sizeof(r))) !=
		    (ssize_t)sizeof(r))
			break;
		adopt(&r, keep);
	}
	REAL(close)((int)fd);
}
