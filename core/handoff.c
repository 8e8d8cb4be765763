/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Exec hand-off (handoff.h; the protocol and its failure cases are in docs/design.md,
 * "Hand-off across exec").
 *
 * The description memfd (sealed against writes, named "smc-handoff"): a handoff_head,
 * then `count` handoff_rec. Nothing in it is trusted: it is ours only if every check a
 * handshake would make passes, and the shared block's hand-off word for the recorded
 * side holds the record's word (this pid and a random token), which only the image
 * that wrote the description set. A guess that the target runs the library decides
 * between a hand-off and the downgrade of before: a wrong one costs a downgrade (the
 * peer forces it after its bound, or at the first TCP byte), never a byte.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/config.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "core/handoff.h"
#include "core/init.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/random.h"
#include "core/real.h"
#include "core/shm.h"
#include "core/sock.h"
#include "core/stats.h"
#include "core/statsrv.h"

/* ---------------------------------------------------------------- the guess */

/* The file name of this library (dladdr), for LD_PRELOAD's entries. */
static const char *lib_base(void)
{
	static char name[256];
	Dl_info di;

	if (!name[0] && dladdr((void *)lib_base, &di) && di.dli_fname) {
		const char *b = strrchr(di.dli_fname, '/');

		snprintf(name, sizeof(name), "%s", b ? b + 1 : di.dli_fname);
	}
	return name;
}

/* LD_PRELOAD in envp names this library (by its file name: ld.so loads it by path). */
static bool env_preloads_us(char *const envp[])
{
	const char *me = lib_base();
	size_t mlen = strlen(me);

	if (!mlen || !envp)
		return false;
	for (size_t i = 0; envp[i]; i++) {
		const char *v = envp[i];

		if (strncmp(v, "LD_PRELOAD=", 11) != 0)
			continue;
		v += 11;
		while (*v) {
			size_t n = strcspn(v, " :");
			const char *b = v;

			for (size_t k = 0; k < n; k++)
				if (v[k] == '/')
					b = v + k + 1;
			if ((size_t)(v + n - b) == mlen && memcmp(b, me, mlen) == 0)
				return true;
			v += n;
			v += strspn(v, " :");
		}
	}
	return false;
}

/* A program the dynamic loader starts (PT_INTERP), or a #! script, not set-id and
 * without file capabilities (both make the loader ignore LD_PRELOAD: AT_SECURE). */
static bool exe_loads_preload(int fd)
{
	unsigned char b[sizeof(Elf64_Ehdr)];
	Elf64_Ehdr eh;
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & (S_ISUID | S_ISGID)))
		return false;
	if (fgetxattr(fd, "security.capability", NULL, 0) >= 0)
		return false;
	if (pread(fd, b, sizeof(b), 0) < 2)
		return false;
	if (b[0] == '#' && b[1] == '!')
		return true;
	if (pread(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b) || memcmp(b, ELFMAG, SELFMAG) != 0 ||
	    b[EI_CLASS] != ELFCLASS64)
		return false;
	memcpy(&eh, b, sizeof(eh));
	if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 256)
		return false;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) !=
		    (ssize_t)sizeof(ph))
			return false;
		if (ph.p_type == PT_INTERP)
			return true;
	}
	return false;
}

/* The file execvp would run (PATH search, as the shell does). */
static int open_target(int dirfd, const char *path)
{
	const char *p;
	char buf[PATH_MAX];

	if (strchr(path, '/') || dirfd != AT_FDCWD)
		return openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	p = getenv("PATH");
	if (!p)
		p = "/usr/local/bin:/usr/bin:/bin";
	while (*p) {
		size_t n = strcspn(p, ":");
		int fd;

		if (snprintf(buf, sizeof(buf), "%.*s%s%s", (int)n, p, n ? "/" : "", path) <
			    (int)sizeof(buf) &&
		    access(buf, X_OK) == 0 && (fd = open(buf, O_RDONLY | O_CLOEXEC)) >= 0)
			return fd;
		p += n;
		if (*p)
			p++;
	}
	return -1;
}

static bool target_runs_library(int dirfd, const char *path, int exec_fd, char *const envp[])
{
	bool yes;
	int fd;

	if (!env_preloads_us(envp))
		return false;
	if (!path)
		return exec_fd >= 0 && exe_loads_preload(exec_fd);
	fd = open_target(dirfd, path);
	if (fd < 0)
		return false;
	yes = exe_loads_preload(fd);
	REAL(close)(fd);
	return yes;
}

/* ---------------------------------------------------------------- old image */

struct handoff_out {
	struct smc_conn **c;
	struct handoff_rec *rec;
	size_t n, cap;
	int desc;
};

/* Held from handoff_exec_begin to the exec (or its failure): two threads that exec at
 * once do not share it; the exec of the first ends the second. */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handoff_out out = { .desc = -1 };

bool handoff_in_progress(const struct smc_conn *c)
{
	return c->handoff_word != 0;
}

static void set_cloexec(int fd, bool on)
{
	int fl = REAL(fcntl)(fd, F_GETFD);

	if (fl >= 0)
		REAL(fcntl)(fd, F_SETFD, on ? (fl | FD_CLOEXEC) : (fl & ~FD_CLOEXEC));
}

static bool survives_exec(int fd)
{
	int fl = REAL(fcntl)(fd, F_GETFD);

	return fl >= 0 && !(fl & FD_CLOEXEC);
}

static void rec_fds_survive(const struct handoff_rec *r, bool on)
{
	set_cloexec(r->memfd, !on);
	for (int i = 0; i < 4; i++)
		set_cloexec(r->bells[i], !on);
}

static bool out_grow(void)
{
	size_t cap = out.cap ? 2 * out.cap : 16;
	struct smc_conn **c;
	struct handoff_rec *r;

	if (cap > HANDOFF_MAX)
		return false;
	c = realloc(out.c, cap * sizeof(*c));
	if (!c)
		return false;
	out.c = c;
	r = realloc(out.rec, cap * sizeof(*r));
	if (!r)
		return false;
	out.rec = r;
	out.cap = cap;
	return true;
}

/* One connection on fd: handed off (true), or left for the downgrade. */
static bool hand_off(int fd, uint64_t token)
{
	struct smc_conn *c = sock_fd_conn(fd);
	struct handoff_rec *r;
	socklen_t len;
	uint64_t word;

	if (!c)
		return false;
	/* descriptors 0-2 go to stdio, which no wrapper sees (downgrade.c); a connection
	 * with several descriptors would have them all to track */
	if (fd <= 2 || c->fd_refs != 1 || c->memfd < 0 || (out.n == out.cap && !out_grow()))
		goto no;
	r = &out.rec[out.n];
	memset(r, 0, sizeof(*r));
	len = sizeof(r->local);
	if (REAL(getsockname)(fd, (struct sockaddr *)&r->local, &len) < 0)
		goto no;
	len = sizeof(r->peer);
	if (REAL(getpeername)(fd, (struct sockaddr *)&r->peer, &len) < 0)
		goto no;
	word = SHM_HANDOFF_WORD(getpid(), token + out.n);
	if (conn_handoff_leave(c, word, &r->st) < 0)
		goto no;
	r->fd = fd;
	r->memfd = c->memfd;
	r->bells[0] = c->rx_bell;
	r->bells[1] = c->tx_bell;
	r->bells[2] = c->peer_rx_bell;
	r->bells[3] = c->peer_tx_bell;
	r->word = word;
	rec_fds_survive(r, true);
	out.c[out.n++] = c; /* keeps the reference */
	log_debug("fd %d: handed to the new image (word %llx)", fd, (unsigned long long)word);
	return true;
no:
	conn_put(c);
	return false;
}

static void undo_all(void)
{
	stats_count_handoff(STATS_HANDOFF_OUT, -(int)out.n);
	for (size_t i = 0; i < out.n; i++) {
		rec_fds_survive(&out.rec[i], false);
		conn_handoff_undo(out.c[i]);
		conn_put(out.c[i]);
	}
	out.n = 0;
	if (out.desc >= 0)
		REAL(close)(out.desc);
	out.desc = -1;
}

/* The sealed description memfd, not CLOEXEC; -1 when it cannot be made. */
static int write_description(void)
{
	size_t len = sizeof(struct handoff_head) + out.n * sizeof(struct handoff_rec);
	struct handoff_head h = {
		.magic = HANDOFF_MAGIC, .version = HANDOFF_VERSION, .count = (uint32_t)out.n,
		.rec_size = sizeof(struct handoff_rec), .head_size = sizeof(h),
		.pid = (uint32_t)getpid(),
	};
	int fd = memfd_create(HANDOFF_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	stats_snapshot(&h.stats);
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    (out.n && pwrite(fd, out.rec, len - sizeof(h), sizeof(h)) != (ssize_t)(len - sizeof(h))) ||
	    REAL(fcntl)(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		REAL(close)(fd);
		return -1;
	}
	set_cloexec(fd, false);
	return fd;
}

/* A copy of envp without HANDOFF_ENV, plus ours. */
static char **env_with(char *const envp[], int desc)
{
	static char var[64];
	size_t n = 0, k = 0;
	char **env;

	while (envp && envp[n])
		n++;
	env = malloc((n + 2) * sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], HANDOFF_ENV "=", sizeof(HANDOFF_ENV)) != 0)
			env[k++] = envp[i];
	snprintf(var, sizeof(var), HANDOFF_ENV "=%d", desc);
	env[k++] = var;
	env[k] = NULL;
	return env;
}

char **handoff_exec_begin(int dirfd, const char *path, int exec_fd, char *const envp[])
{
	uint64_t token;
	char **env;

	if (!smc_enabled() || !target_runs_library(dirfd, path, exec_fd, envp))
		return NULL;
	pthread_mutex_lock(&out_lock);
	token = random_weak64();
	for (int fd = fdtab_next_tracked(0); fd >= 0; fd = fdtab_next_tracked(fd + 1))
		if (fdtab_kind(fd) == FD_SMC && survives_exec(fd))
			hand_off(fd, token);
	if (out.n == 0) {
		struct smc_stats_snapshot now, zero;

		/* nothing to hand on: no description, as before the hand-off existed */
		stats_snapshot(&now);
		memset(&zero, 0, sizeof(zero));
		if (memcmp(&now, &zero, sizeof(now)) == 0) {
			pthread_mutex_unlock(&out_lock);
			return NULL;
		}
	}
	/* counted before the snapshot the description carries (undone if the exec fails) */
	stats_count_handoff(STATS_HANDOFF_OUT, (int)out.n);
	out.desc = write_description();
	env = out.desc >= 0 ? env_with(envp, out.desc) : NULL;
	if (!env) {
		log_warn("no room for the exec's hand-off: its connections go back to TCP");
		undo_all();
		pthread_mutex_unlock(&out_lock);
		return NULL;
	}
	return env;
}

void handoff_exec_end(char **env)
{
	if (!env)
		return;
	undo_all();
	free(env);
	pthread_mutex_unlock(&out_lock);
}

/* ---------------------------------------------------------------- new image */

static bool is_kind(int fd, const char *what)
{
	char p[64], l[128];
	ssize_t n;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = readlink(p, l, sizeof(l) - 1);
	if (n < 0)
		return false;
	l[n] = 0;
	return strncmp(l, what, strlen(what)) == 0;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return false;
}

/* The recorded socket: a connected TCP socket with the recorded ends, not tracked. */
static bool socket_ok(const struct handoff_rec *r)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int v;
	socklen_t vl = sizeof(v);
	struct stat st;

	if (r->fd <= 2 || fstat(r->fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
	    fdtab_kind(r->fd) != FD_NONE)
		return false;
	if (REAL(getsockopt)(r->fd, SOL_SOCKET, SO_TYPE, &v, &vl) < 0 || v != SOCK_STREAM)
		return false;
	vl = sizeof(v);
	if (REAL(getsockopt)(r->fd, SOL_SOCKET, SO_PROTOCOL, &v, &vl) < 0 || v != IPPROTO_TCP)
		return false;
	if (REAL(getpeername)(r->fd, (struct sockaddr *)&ss, &len) < 0 || !same_addr(&ss, &r->peer))
		return false;
	len = sizeof(ss);
	return REAL(getsockname)(r->fd, (struct sockaddr *)&ss, &len) == 0 &&
	       same_addr(&ss, &r->local);
}

static bool ring_size_ok(uint32_t s)
{
	return s >= 4096 && s <= (1u << 30) && (s & (s - 1)) == 0;
}

/* Cursors within the rings and as the old image published them. */
static bool cursors_ok(const struct conn_handoff_state *st, const struct shm_map *m)
{
	int rxd = st->side == CONN_CLIENT ? 1 : 0, txd = 1 - rxd;
	uint32_t rs = m->size[rxd], ts = m->size[txd];
	int64_t d;

	if (!cursor_valid(st->rx_cons, rs) || !cursor_valid(st->rx_prod_seen, rs) ||
	    !cursor_valid(st->tx_prod, ts) || !cursor_valid(st->tx_cons_seen, ts))
		return false;
	d = cursor_diff(st->rx_prod_seen, st->rx_cons, rs);
	if (d < 0 || d > rs)
		return false;
	d = cursor_diff(st->tx_prod, st->tx_cons_seen, ts);
	if (d < 0 || d > ts)
		return false;
	return __atomic_load_n(&m->hdr->dir[rxd].cons, __ATOMIC_ACQUIRE) == st->rx_cons &&
	       __atomic_load_n(&m->hdr->dir[txd].prod, __ATOMIC_ACQUIRE) == st->tx_prod;
}

enum adopt_result { ADOPTED, LOST, REJECTED };

/* What a rejected record leaves: its side goes to TCP through the shared block when
 * the word there is ours (as the peer's force would), a reset when the socket belongs
 * to a connection nobody hands off (nothing else is safe), else plain TCP (the peer
 * forces at its first byte or bound). Descriptors are closed only once shown ours. */
static void reject(const struct handoff_rec *r, struct shm_map *m, bool memfd_ours,
		   const bool bell_ours[4], bool sock_ours, const char *why)
{
	uint64_t w = r->word;

	log_warn("fd %d: the hand-off inherited from the old image is invalid (%s): not used",
		 r->fd, why);
	stats_count_reason(SMC_REASON_HANDOFF_INVALID);
	if (m->hdr && (r->st.side == CONN_CLIENT || r->st.side == CONN_SERVER)) {
		int side = (int)r->st.side;
		int txd = side == CONN_CLIENT ? 0 : 1;
		uint64_t now = __atomic_load_n(&m->hdr->handoff[side], __ATOMIC_ACQUIRE);

		if (shm_handoff_pending(w) && (uint32_t)(w >> 32) == (uint32_t)getpid() &&
		    __atomic_compare_exchange_n(&m->hdr->handoff[side], &w, SHM_HANDOFF_FORCED,
						false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			__atomic_fetch_or(&m->hdr->dir[txd].wflags, SHM_W_TCP, __ATOMIC_SEQ_CST);
			stats_count_downgrade(false);
			if (bell_ours[2])
				(void)!REAL(write)(r->bells[2], &(uint64_t){ 1 }, 8);
			if (bell_ours[3])
				(void)!REAL(write)(r->bells[3], &(uint64_t){ 1 }, 8);
		} else if (now == 0 && sock_ours) {
			struct sockaddr sa = { .sa_family = AF_UNSPEC };

			log_warn("fd %d: its connection is on the rings of another image: reset",
				 r->fd);
			REAL(connect)(r->fd, &sa, sizeof(sa));
		}
		shm_detach(m);
	}
	if (memfd_ours)
		REAL(close)(r->memfd);
	for (int i = 0; i < 4; i++)
		if (bell_ours[i])
			REAL(close)(r->bells[i]);
}

static enum adopt_result adopt_one(const struct handoff_rec *r)
{
	const struct conn_handoff_state *st = &r->st;
	struct shm_map m = { 0 };
	bool memfd_ours = false, bells_ours[4] = { false }, sock_ours;
	uint64_t w = r->word;
	struct smc_conn *c;
	struct stat sb;
	const char *why = NULL;

	sock_ours = socket_ok(r);
	for (int i = 0; i < 4; i++) {
		bells_ours[i] = r->bells[i] > 2 && r->bells[i] != r->fd &&
				is_kind(r->bells[i], "anon_inode:[eventfd]");
		for (int k = 0; k < i; k++)
			if (r->bells[k] == r->bells[i])
				bells_ours[i] = false;
	}
	memfd_ours = r->memfd > 2 && r->memfd != r->fd && is_kind(r->memfd, "/memfd:smc-rmb");
	for (int i = 0; i < 4; i++)
		if (r->memfd == r->bells[i])
			memfd_ours = false;
	if (!sock_ours)
		why = "not the connected TCP socket recorded";
	else if (!bells_ours[0] || !bells_ours[1] || !bells_ours[2] || !bells_ours[3])
		why = "doorbells";
	else if (!memfd_ours)
		why = "not a ring memfd";
	else if ((st->side != CONN_CLIENT && st->side != CONN_SERVER) ||
		 !ring_size_ok(st->size[0]) || !ring_size_ok(st->size[1]))
		why = "ring sizes";
	else if (fstat(r->memfd, &sb) < 0 ||
		 (size_t)sb.st_size != shm_region_len(st->size[0], st->size[1]))
		why = "memfd size";
	if (!why && shm_attach(r->memfd, st->size[0], st->size[1], &m) < 0)
		why = "memfd seals";
	if (!why && (m.hdr->magic != SHM_MAGIC || m.hdr->version != SHM_VERSION))
		why = "shared block";
	if (!why && (!shm_handoff_pending(w) || (uint32_t)(w >> 32) != (uint32_t)getpid()))
		why = "not this process's";
	if (!why && __atomic_load_n(&m.hdr->handoff[st->side], __ATOMIC_ACQUIRE) != w &&
	    __atomic_load_n(&m.hdr->handoff[st->side], __ATOMIC_ACQUIRE) != SHM_HANDOFF_FORCED)
		why = "the shared block says no hand-off";
	if (!why && !cursors_ok(st, &m))
		why = "cursors";
	if (why) {
		/* a memfd left unmapped is not ours to write into */
		reject(r, &m, memfd_ours, bells_ours, sock_ours, why);
		return REJECTED;
	}
	if (!__atomic_compare_exchange_n(&m.hdr->handoff[st->side], &w, 0, false,
					 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		/* the peer forced it: plain TCP, its re-send comes over the socket */
		log_info("fd %d: the peer took the connection to TCP before this image ran: "
			 "plain TCP", r->fd);
		shm_detach(&m);
		REAL(close)(r->memfd);
		for (int i = 0; i < 4; i++)
			REAL(close)(r->bells[i]);
		stats_count_downgrade(false);
		return LOST;
	}
	c = conn_adopt(r->fd, &m, r->memfd, r->bells, st);
	if (!c) {
		/* claimed, then no memory: the peer re-sends over TCP as after a downgrade */
		int txd = st->side == CONN_CLIENT ? 0 : 1;

		__atomic_store_n(&m.hdr->handoff[st->side], SHM_HANDOFF_FORCED, __ATOMIC_SEQ_CST);
		__atomic_fetch_or(&m.hdr->dir[txd].wflags, SHM_W_TCP, __ATOMIC_SEQ_CST);
		(void)!REAL(write)(r->bells[2], &(uint64_t){ 1 }, 8);
		(void)!REAL(write)(r->bells[3], &(uint64_t){ 1 }, 8);
		shm_detach(&m);
		REAL(close)(r->memfd);
		for (int i = 0; i < 4; i++)
			REAL(close)(r->bells[i]);
		stats_count_downgrade(false);
		return LOST;
	}
	set_cloexec(r->memfd, true);
	for (int i = 0; i < 4; i++)
		set_cloexec(r->bells[i], true);
	fdtab_set(r->fd, FD_SMC, c);
	/* its options are the kernel's to tell (SO_RCVTIMEO...) */
	fdtab_flags_reset(r->fd, FDF_SOCKOPTS | FDF_BOUND);
	/* the peer waits for nothing of ours: no bell (its timer finds the word 0) */
	stats_count_handoff(STATS_HANDOFF_IN, 1);
	log_debug("fd %d: connection taken over from the old image (rx %llu tx %llu)", r->fd,
		  (unsigned long long)st->rx_cons, (unsigned long long)st->tx_prod);
	return ADOPTED;
}

/* The description named by HANDOFF_ENV: fd, when it is a sealed memfd of ours with a
 * header this build writes for this pid; -1 (logged, counted) otherwise. */
static int description(const char *v, struct handoff_head *h)
{
	char *end;
	long fd = strtol(v, &end, 10);
	struct stat st;
	int seals, need = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;

	if (*v == 0 || *end || fd < 3 || fd > INT_MAX || !is_kind((int)fd, "/memfd:" HANDOFF_NAME))
		goto bad;
	seals = REAL(fcntl)((int)fd, F_GET_SEALS);
	if (seals < 0 || (seals & need) != need || fstat((int)fd, &st) < 0 ||
	    pread((int)fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
		goto bad_close;
	if (h->magic != HANDOFF_MAGIC || h->version != HANDOFF_VERSION ||
	    h->head_size != sizeof(*h) || h->rec_size != sizeof(struct handoff_rec) ||
	    h->count > HANDOFF_MAX || h->pid != (uint32_t)getpid() ||
	    (size_t)st.st_size != sizeof(*h) + (size_t)h->count * sizeof(struct handoff_rec))
		goto bad_close;
	return (int)fd;
bad_close:
	REAL(close)((int)fd);
bad:
	log_warn(HANDOFF_ENV "=%s names no hand-off of this process's old image: ignored", v);
	stats_count_reason(SMC_REASON_HANDOFF_INVALID);
	return -1;
}

extern char **environ;

/*
 * The variable, taken out of the environment in place (main's envp is the same array):
 * the next program is not this one's to hand anything (a grandchild). Not getenv and
 * unsetenv: a program may bring its own (bash does, working on shell variables it has
 * not set up before main).
 */
static bool env_take(char *val, size_t len)
{
	const size_t nl = sizeof(HANDOFF_ENV); /* with the '=' */
	bool found = false;
	size_t k = 0;

	for (size_t i = 0; environ && environ[i]; i++) {
		if (strncmp(environ[i], HANDOFF_ENV "=", nl) == 0) {
			if (!found)
				snprintf(val, len, "%s", environ[i] + nl);
			found = true;
			continue;
		}
		environ[k++] = environ[i];
	}
	if (found)
		environ[k] = NULL;
	return found;
}

void handoff_adopt(void)
{
	char v[32];
	struct handoff_head h;
	unsigned in = 0;
	int fd;

	if (!env_take(v, sizeof(v)))
		return;
	fd = description(v, &h);
	if (fd < 0)
		return;
	stats_add_snapshot(&h.stats);
	for (uint32_t i = 0; i < h.count; i++) {
		struct handoff_rec r;

		if (pread(fd, &r, sizeof(r), (off_t)(sizeof(h) + i * sizeof(r))) != (ssize_t)sizeof(r))
			break;
		if (!smc_enabled()) {
			struct shm_map m = { 0 };
			bool none[4] = { false };

			reject(&r, &m, false, none, false, "SMC_TRANSPORT=tcp");
			continue;
		}
		if (adopt_one(&r) == ADOPTED)
			in++;
	}
	REAL(close)(fd);
	log_debug("%u of %u connections taken over from the old image", in, h.count);
	if (in)
		statsrv_ensure(); /* smcpstat lists them, as the old image's */
}

/* ---------------------------------------------------------------- peer */

static void on_peer_bound(void *arg)
{
	struct smc_conn *c = arg;
	uint64_t w = __atomic_load_n(&c->peer_handoff_seen, __ATOMIC_ACQUIRE);

	if (conn_handoff_force(c, w))
		stats_count_handoff(STATS_HANDOFF_FORCED, 1);
	conn_put(c);
}

void handoff_peer_look(struct smc_conn *c)
{
	struct shm_hdr *hdr = c->map.hdr;
	uint64_t w, seen;

	if (!hdr || c->pool)
		return;
	w = __atomic_load_n(&hdr->handoff[1 - (int)c->side], __ATOMIC_ACQUIRE);
	if (__builtin_expect(!shm_handoff_pending(w), 1))
		return;
	seen = __atomic_load_n(&c->peer_handoff_seen, __ATOMIC_ACQUIRE);
	if (seen == w || !__atomic_compare_exchange_n(&c->peer_handoff_seen, &seen, w, false,
						      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	conn_get(c);
	if (progress_after(smc_cfg.handshake_timeout_ms, on_peer_bound, c) < 0) {
		/* no thread to bound it: take no risk, TCP now */
		if (conn_handoff_force(c, w))
			stats_count_handoff(STATS_HANDOFF_FORCED, 1);
		conn_put(c);
	}
}

static bool force_now(struct smc_conn *c)
{
	struct shm_hdr *hdr = c->map.hdr;
	uint64_t w;

	if (!hdr || c->ib || c->pool)
		return false;
	w = __atomic_load_n(&hdr->handoff[1 - (int)c->side], __ATOMIC_ACQUIRE);
	if (!shm_handoff_pending(w))
		return false;
	if (conn_handoff_force(c, w))
		stats_count_handoff(STATS_HANDOFF_FORCED, 1);
	return true;
}

bool handoff_peer_forced_by_tcp(struct smc_conn *c)
{
	return force_now(c);
}

void handoff_peer_on_close(struct smc_conn *c)
{
	(void)force_now(c);
}
