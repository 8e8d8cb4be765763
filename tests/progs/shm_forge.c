/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * shm_forge: a hostile peer of a same-host SMC connection, for
 * tests/integration/shm_forge.sh.
 *
 *   shm_forge list
 *   shm_forge warmup HOST PORT      one plain TCP connection (the library bypassed:
 *                                   the victim often starts its progress thread for
 *                                   it) and one upgraded, an echo round through each
 *   shm_forge ATTACK HOST PORT [--bytes N]
 *
 * Runs preloaded, as the client of an echo server that runs preloaded too (the victim).
 * An attack run opens two connections and moves bytes through both, so the library
 * upgrades them: an honest one first, then the attacked one. The shared block of the
 * attacked one is the memfd mapping ("smc-rmb", core/shm/shm.c) that appeared in our own
 * /proc/self/maps with it, its doorbells the eventfds that appeared in /proc/self/fd.
 * The program then writes into that block what no honest peer writes (one attack per
 * run, the table below), makes the victim look (rings the doorbells, or sends through
 * the library when the forged field is one the victim reads only while it writes), and
 * reports:
 *
 *   PORTS honest=P attack=Q          our local ports, as the victim logs its peers
 *   FORGED ATTACK detail             what was written
 *   OUTCOME ATTACK ended how=eof|reset|... after=B / works / open after=B
 *   HONEST ok bytes=N                N bytes echoed through the honest connection and
 *                                    checked, after the attack (or HONEST broken ...)
 *
 * "ended": the attacked connection ended (EOF or an error) within IO_TIMEOUT_S; "open":
 * it did not (what it still carried, after= bytes, was read and dropped); "works": an
 * echo through it after the attack came back intact. Exit status 0 when the run got that far, 2 for a
 * usage error, 3 when a connection was not upgraded or its block not found (nothing
 * was attacked). The verdict on the outcome is the test's: `list` prints, per attack,
 * what the victim must do (its abort counter, SMC_STATS_FILE "events.aborts", and the
 * attacked connection's fate), read from the validation code in core/ (conn.c rx_used,
 * rx_take_rewind, tx_free, rx_eof, tx_dead, conn_tcp_event; cdc.c cdc_validate_*).
 *
 * Fields the victim (the server: dir[0] is what it reads, dir[1] what it writes) reads:
 *   dir[0].prod, skip_seq, skip_at    validated: cursor_valid, not behind, not more
 *                                     than a ring ahead, rewinds only at its cursor
 *   dir[0].wflags                     DONE_WRITING / CLOSED: EOF; ABORT: ECONNRESET
 *   dir[1].cons                       validated: valid, not beyond what it wrote; may
 *                                     go back within a ring (it only costs room)
 *   dir[1].rflags                     CLOSED: EPIPE; ABORT: ECONNRESET
 *   dir[1].skip_done (+ its own skip_seq, skip_at, which we can write too): whether its
 *                                     own rewind is still pending (conn_tx_cons_base)
 *   sleeper counts and sequences, side_cpu, side_refs[1]: when to ring, whether to
 *                                     spin, whether its close is the last holder's
 *   magic, version, ring_size         never read (informational)
 * The attacks cover each check, both sides of its boundary where the boundary is
 * valid (a whole ring ahead, a cursor a little behind), and the unchecked fields.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/shm/shm.h"
#include "core/wire/ring.h"

#define IO_TIMEOUT_S 10
#define ECHO_LEN 4096u
#define DEFAULT_STREAM (4u << 20)
#define MAX_MAPS 64
#define MAX_BELLS 64

static void *libc_fn(const char *name);

/* ------------------------------------------------------------------ the attacks */

enum provoke {
	RING, /* write the doorbells: the victim re-reads what it reads as a reader */
	SEND, /* send bytes through the library: the victim echoes them, so it writes */
};

enum expect { END, WORKS, OPEN };

struct target {
	struct shm_hdr *hdr;
	uint8_t *base;
	size_t len;
	uint32_t size[2];
	uint64_t start, end; /* the mapping, as /proc/self/maps names it */
	int tcp_fd;
};

struct attack {
	const char *name;
	int victim_aborts;   /* the victim's "events.aborts" for this run */
	enum expect expect;  /* what happens to the attacked connection */
	enum provoke provoke;
	const char *why;
	/* writes the forgery, prints its detail into buf; false: could not (refused) */
	bool (*forge)(struct target *t, char *buf, size_t len);
};

static smc_cursor load_cur(uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store_cur(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* A cursor `laps` whole rings ahead of c (same count). */
static smc_cursor laps_ahead(smc_cursor c, unsigned laps)
{
	return cursor_make((uint16_t)(cursor_wrap(c) + laps), cursor_count(c));
}

/* c advanced by n <= size bytes (ring.c has cursor_add, but this program runs under the
 * library and links none of it) */
static smc_cursor fwd(smc_cursor c, uint32_t n, uint32_t size)
{
	uint64_t pos = (uint64_t)cursor_count(c) + n;

	if (pos >= size)
		return cursor_make((uint16_t)(cursor_wrap(c) + 1), (uint32_t)(pos - size));
	return cursor_make(cursor_wrap(c), (uint32_t)pos);
}

static smc_cursor back_by(smc_cursor c, uint32_t n, uint32_t size)
{
	/* n < size: one lap back at most */
	if (cursor_count(c) >= n)
		return cursor_make(cursor_wrap(c), cursor_count(c) - n);
	return cursor_make((uint16_t)(cursor_wrap(c) - 1), size - (n - cursor_count(c)));
}

/* dir[0]: we write, the victim reads */
static bool f_prod_two_laps(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[0].prod);

	store_cur(&t->hdr->dir[0].prod, laps_ahead(p, 2));
	snprintf(b, n, "dir0.prod %#" PRIx64 " -> %#" PRIx64, p, laps_ahead(p, 2));
	return true;
}

static bool f_prod_one_lap_plus(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[0].prod);
	smc_cursor f = fwd(p, t->size[0], t->size[0]);

	f = fwd(f, 1, t->size[0]);
	store_cur(&t->hdr->dir[0].prod, f);
	snprintf(b, n, "dir0.prod %#" PRIx64 " -> %#" PRIx64 " (a ring and a byte ahead)", p, f);
	return true;
}

static bool f_prod_one_lap(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[0].prod);
	smc_cursor f = fwd(p, t->size[0], t->size[0]);

	store_cur(&t->hdr->dir[0].prod, f);
	snprintf(b, n, "dir0.prod %#" PRIx64 " -> %#" PRIx64 " (exactly a ring ahead: valid)", p, f);
	return true;
}

static bool f_prod_back(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[0].prod);
	smc_cursor f = back_by(p, 1, t->size[0]);

	store_cur(&t->hdr->dir[0].prod, f);
	snprintf(b, n, "dir0.prod %#" PRIx64 " -> %#" PRIx64 " (one byte back)", p, f);
	return true;
}

static bool f_prod_reserved(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[0].prod);
	smc_cursor f = fwd(p, 8, t->size[0]) | ((smc_cursor)1 << 48);

	store_cur(&t->hdr->dir[0].prod, f);
	snprintf(b, n, "dir0.prod %#" PRIx64 " -> %#" PRIx64 " (reserved bit 48)", p, f);
	return true;
}

static bool f_prod_count_oob(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[0].prod);
	smc_cursor f = cursor_make(cursor_wrap(p), t->size[0] + 8);

	store_cur(&t->hdr->dir[0].prod, f);
	snprintf(b, n, "dir0.prod %#" PRIx64 " -> %#" PRIx64 " (count beyond the ring)", p, f);
	return true;
}

/* A rewind named at a cursor the victim is not at, with a producer cursor in the lap
 * after it (so the victim does look at the rewind). */
static bool f_rewind_wrong_at(struct target *t, char *b, size_t n)
{
	struct shm_dir_ctl *d = &t->hdr->dir[0];
	smc_cursor p = load_cur(&d->prod), at = back_by(p, 16, t->size[0]);
	smc_cursor next = fwd(p, t->size[0] - cursor_count(p), t->size[0]);

	__atomic_store_n(&d->skip_at, at, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->skip_seq, 1, __ATOMIC_RELAXED);
	store_cur(&d->prod, fwd(next, 8, t->size[0]));
	snprintf(b, n, "dir0 rewind at %#" PRIx64 " (victim at %#" PRIx64 "), prod %#" PRIx64,
		 at, p, fwd(next, 8, t->size[0]));
	return true;
}

/* A rewind at the victim's cursor whose producer cursor stays in the old lap. */
static bool f_rewind_short(struct target *t, char *b, size_t n)
{
	struct shm_dir_ctl *d = &t->hdr->dir[0];
	smc_cursor p = load_cur(&d->prod);

	__atomic_store_n(&d->skip_at, p, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->skip_seq, 1, __ATOMIC_RELAXED);
	store_cur(&d->prod, fwd(p, 8, t->size[0]));
	snprintf(b, n, "dir0 rewind at %#" PRIx64 ", prod %#" PRIx64 " (does not reach the next lap)",
		 p, fwd(p, 8, t->size[0]));
	return true;
}

/* A rewind at the victim's cursor whose producer cursor is a ring past the jump. */
static bool f_rewind_far(struct target *t, char *b, size_t n)
{
	struct shm_dir_ctl *d = &t->hdr->dir[0];
	smc_cursor p = load_cur(&d->prod);
	smc_cursor next = fwd(p, t->size[0] - cursor_count(p), t->size[0]);
	smc_cursor f = fwd(laps_ahead(next, 1), 8, t->size[0]);

	__atomic_store_n(&d->skip_at, p, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->skip_seq, 1, __ATOMIC_RELAXED);
	store_cur(&d->prod, f);
	snprintf(b, n, "dir0 rewind at %#" PRIx64 ", prod %#" PRIx64 " (a ring past the jump)", p, f);
	return true;
}

/* Only the sequence: the rewind is "announced" with a stale skip_at; the next honest
 * producer cursor (our library's send) makes the victim look at it. */
static bool f_rewind_seq_only(struct target *t, char *b, size_t n)
{
	struct shm_dir_ctl *d = &t->hdr->dir[0];

	__atomic_add_fetch(&d->skip_seq, 1, __ATOMIC_RELAXED);
	snprintf(b, n, "dir0.skip_seq %u -> %u, skip_at left at %#" PRIx64,
		 __atomic_load_n(&d->skip_seq, __ATOMIC_RELAXED) - 1,
		 __atomic_load_n(&d->skip_seq, __ATOMIC_RELAXED), d->skip_at);
	return true;
}

/* dir[1]: the victim writes; we (its reader) write cons, rflags, skip_done */
static bool f_cons_ahead(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[1].prod);
	smc_cursor f = fwd(p, 1, t->size[1]);

	store_cur(&t->hdr->dir[1].cons, f);
	snprintf(b, n, "dir1.cons -> %#" PRIx64 " (a byte beyond the victim's prod %#" PRIx64 ")",
		 f, p);
	return true;
}

static bool f_cons_two_laps(struct target *t, char *b, size_t n)
{
	smc_cursor c = load_cur(&t->hdr->dir[1].cons);

	store_cur(&t->hdr->dir[1].cons, laps_ahead(c, 2));
	snprintf(b, n, "dir1.cons %#" PRIx64 " -> %#" PRIx64, c, laps_ahead(c, 2));
	return true;
}

static bool f_cons_back_far(struct target *t, char *b, size_t n)
{
	smc_cursor p = load_cur(&t->hdr->dir[1].prod);
	smc_cursor one = back_by(p, 1, t->size[1]);
	smc_cursor f = cursor_make((uint16_t)(cursor_wrap(one) - 1), cursor_count(one));

	store_cur(&t->hdr->dir[1].cons, f);
	snprintf(b, n, "dir1.cons -> %#" PRIx64 " (a ring and a byte behind the victim's prod %#"
		 PRIx64 ")", f, p);
	return true;
}

static bool f_cons_back_small(struct target *t, char *b, size_t n)
{
	smc_cursor c = load_cur(&t->hdr->dir[1].cons);
	smc_cursor f = back_by(c, 64, t->size[1]);

	store_cur(&t->hdr->dir[1].cons, f);
	snprintf(b, n, "dir1.cons %#" PRIx64 " -> %#" PRIx64 " (64 bytes back: valid, less room)",
		 c, f);
	return true;
}

static bool f_cons_reserved(struct target *t, char *b, size_t n)
{
	smc_cursor c = load_cur(&t->hdr->dir[1].cons);

	smc_cursor f = c | ((smc_cursor)1 << 50);

	store_cur(&t->hdr->dir[1].cons, f);
	snprintf(b, n, "dir1.cons %#" PRIx64 " -> %#" PRIx64 " (reserved bit 50)", c, f);
	return true;
}

/* The victim's own rewind, pending in its view: skip_done one behind its skip_seq and
 * skip_at at our consumer cursor. Its room then counts from the next lap, which its
 * producer cursor has not reached: no room can ever come. */
static bool f_skip_done(struct target *t, char *b, size_t n)
{
	struct shm_dir_ctl *d = &t->hdr->dir[1];
	smc_cursor c = load_cur(&d->cons);
	uint32_t seq = __atomic_load_n(&d->skip_seq, __ATOMIC_RELAXED);

	if (cursor_count(c) == 0) {
		/* a rewind is never at a lap's start (conn_data.c, conn_tx_cons_base) */
		snprintf(b, n, "our cons %#" PRIx64 " is at a lap's start", c);
		return false;
	}
	__atomic_store_n(&d->skip_at, c, __ATOMIC_RELAXED);
	__atomic_store_n(&d->skip_done, seq - 1, __ATOMIC_RELAXED);
	snprintf(b, n, "dir1.skip_done -> %u (skip_seq %u), dir1.skip_at -> %#" PRIx64
		 " (our cons)", seq - 1, seq, c);
	return true;
}

/* The same through the victim's own fields (nothing stops us writing those): its
 * skip_seq one ahead of skip_done, its skip_at at our consumer cursor. */
static bool f_skip_own(struct target *t, char *b, size_t n)
{
	struct shm_dir_ctl *d = &t->hdr->dir[1];
	smc_cursor c = load_cur(&d->cons);
	uint32_t done = __atomic_load_n(&d->skip_done, __ATOMIC_RELAXED);

	if (cursor_count(c) == 0) {
		snprintf(b, n, "our cons %#" PRIx64 " is at a lap's start", c);
		return false;
	}
	__atomic_store_n(&d->skip_at, c, __ATOMIC_RELAXED);
	__atomic_store_n(&d->skip_seq, done + 1, __ATOMIC_RELAXED);
	snprintf(b, n, "dir1.skip_seq -> %u (skip_done %u), dir1.skip_at -> %#" PRIx64
		 " (our cons)", done + 1, done, c);
	return true;
}

/* flags */
static bool f_wflags_reserved(struct target *t, char *b, size_t n)
{
	__atomic_fetch_or(&t->hdr->dir[0].wflags, ~(uint32_t)0xf, __ATOMIC_RELEASE);
	__atomic_fetch_or(&t->hdr->dir[1].rflags, ~(uint32_t)0x3, __ATOMIC_RELEASE);
	snprintf(b, n, "dir0.wflags |= %#x, dir1.rflags |= %#x (unknown bits)", ~0xfu, ~0x3u);
	return true;
}

/* "Gone back to TCP" (a downgrade, conn.c) with a consumer cursor beyond what the victim
 * wrote: the victim would re-send bytes it never had. */
static bool f_tcp_cons_ahead(struct target *t, char *b, size_t n)
{
	smc_cursor c = fwd(load_cur(&t->hdr->dir[1].prod), 4096, t->size[1]);

	store_cur(&t->hdr->dir[1].cons, c);
	__atomic_fetch_or(&t->hdr->dir[0].wflags, SHM_W_TCP, __ATOMIC_RELEASE);
	snprintf(b, n, "dir1.cons = victim's prod + 4096, then dir0.wflags |= TCP");
	return true;
}

static bool f_wflags_abort(struct target *t, char *b, size_t n)
{
	__atomic_fetch_or(&t->hdr->dir[0].wflags, SHM_W_ABORT, __ATOMIC_RELEASE);
	snprintf(b, n, "dir0.wflags |= ABORT");
	return true;
}

static bool f_wflags_all(struct target *t, char *b, size_t n)
{
	__atomic_store_n(&t->hdr->dir[0].wflags, ~0u, __ATOMIC_RELEASE);
	__atomic_store_n(&t->hdr->dir[1].rflags, ~0u, __ATOMIC_RELEASE);
	snprintf(b, n, "dir0.wflags = dir1.rflags = 0xffffffff (close and abort, both ways)");
	return true;
}

/* "Closed" while new data is published after it (a writer never writes after its
 * close): the victim sees the data, then EOF. */
static bool f_closed_then_data(struct target *t, char *b, size_t n)
{
	__atomic_fetch_or(&t->hdr->dir[0].wflags, SHM_W_CLOSED | SHM_W_DONE_WRITING,
			  __ATOMIC_RELEASE);
	snprintf(b, n, "dir0.wflags |= CLOSED|DONE_WRITING, then data through the library");
	return true;
}

static bool f_rflags_abort(struct target *t, char *b, size_t n)
{
	__atomic_fetch_or(&t->hdr->dir[1].rflags, SHM_R_ABORT, __ATOMIC_RELEASE);
	snprintf(b, n, "dir1.rflags |= ABORT");
	return true;
}

static bool f_rflags_closed(struct target *t, char *b, size_t n)
{
	__atomic_fetch_or(&t->hdr->dir[1].rflags, SHM_R_CLOSED, __ATOMIC_RELEASE);
	snprintf(b, n, "dir1.rflags |= CLOSED");
	return true;
}

/* fields nobody validates */
static bool f_magic(struct target *t, char *b, size_t n)
{
	t->hdr->magic = 0xdeadbeefu;
	t->hdr->version = 0xffffffffu;
	t->hdr->ring_size[0] = t->hdr->ring_size[1] = 0xffffffffu;
	snprintf(b, n, "magic, version, ring_size[] trashed");
	return true;
}

static bool f_side_refs(struct target *t, char *b, size_t n)
{
	__atomic_store_n(&t->hdr->side_refs[1], 0u, __ATOMIC_RELEASE);
	snprintf(b, n, "side_refs[1] (the victim's) -> 0");
	return true;
}

static bool f_sleepers(struct target *t, char *b, size_t n)
{
	for (int d = 0; d < 2; d++) {
		__atomic_store_n(&t->hdr->dir[d].r_sleepers, ~0u, __ATOMIC_RELAXED);
		__atomic_store_n(&t->hdr->dir[d].w_sleepers, ~0u, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->hdr->dir[d].r_seq, 12345, __ATOMIC_RELAXED);
		__atomic_add_fetch(&t->hdr->dir[d].w_seq, 54321, __ATOMIC_RELAXED);
	}
	t->hdr->side_cpu[0].cpu = t->hdr->side_cpu[1].cpu;
	snprintf(b, n, "every sleeper count 0xffffffff, sequences moved, side_cpu[0] = side_cpu[1]");
	return true;
}

/* Hole punching: the memfd's size is sealed, its contents are not (core/shm/shm.c). */
static int punch(struct target *t, size_t off, size_t len, const char **via)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/self/map_files/%" PRIx64 "-%" PRIx64, t->start, t->end);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		int r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				  (off_t)len);
		int e = errno;

		close(fd);
		*via = "fallocate";
		return r < 0 ? -e : 0;
	}
	/* no CAP_SYS_ADMIN for map_files: the same hole through the mapping */
	*via = "madvise(MADV_REMOVE)";
	return madvise(t->base + off, len, MADV_REMOVE) < 0 ? -errno : 0;
}

static bool f_punch_hdr(struct target *t, char *b, size_t n)
{
	const char *via;
	int r = punch(t, 0, SHM_HDR_SPACE, &via);

	snprintf(b, n, "header page punched via %s: %s", via, r ? strerror(-r) : "done");
	if (r)
		printf("REFUSED punch-hdr %s: %s\n", via, strerror(-r));
	return r == 0;
}

static bool f_punch_rings(struct target *t, char *b, size_t n)
{
	const char *via;
	int r = punch(t, SHM_HDR_SPACE, t->len - SHM_HDR_SPACE, &via);

	snprintf(b, n, "both rings punched via %s: %s", via, r ? strerror(-r) : "done");
	if (r)
		printf("REFUSED punch-rings %s: %s\n", via, strerror(-r));
	return r == 0;
}

static bool f_tcp_byte(struct target *t, char *b, size_t n)
{
	ssize_t (*libc_send)(int, const void *, size_t, int) =
		(ssize_t (*)(int, const void *, size_t, int))libc_fn("send");
	ssize_t r = libc_send ? libc_send(t->tcp_fd, "X", 1, MSG_NOSIGNAL) : -1;

	snprintf(b, n, "one byte on the TCP channel: %s",
		 r == 1 ? "sent" : libc_send ? strerror(errno) : "libc's send not found");
	return r == 1;
}

static const struct attack attacks[] = {
	{ "prod-two-laps", 1, END, RING, "producer cursor two rings ahead", f_prod_two_laps },
	{ "prod-lap-plus-one", 1, END, RING, "a ring and one byte ahead", f_prod_one_lap_plus },
	{ "prod-one-lap", 0, OPEN, RING, "exactly a ring ahead: valid, the victim echoes stale bytes",
	  f_prod_one_lap },
	{ "prod-back", 1, END, RING, "producer cursor one byte backwards", f_prod_back },
	{ "prod-reserved", 1, END, RING, "reserved cursor bits", f_prod_reserved },
	{ "prod-count-oob", 1, END, RING, "count beyond the ring", f_prod_count_oob },
	{ "rewind-wrong-at", 1, END, RING, "rewind not at the reader's cursor", f_rewind_wrong_at },
	{ "rewind-short", 1, END, RING, "rewind whose cursor stays in the lap", f_rewind_short },
	{ "rewind-far", 1, END, RING, "rewind whose cursor is a ring past the jump", f_rewind_far },
	{ "rewind-seq-only", 1, END, SEND, "rewind sequence bumped with a stale position",
	  f_rewind_seq_only },
	{ "cons-ahead", 1, END, SEND, "consumer cursor beyond what the victim wrote", f_cons_ahead },
	{ "cons-two-laps", 1, END, SEND, "consumer cursor two rings ahead", f_cons_two_laps },
	{ "cons-back-far", 1, END, SEND, "consumer cursor more than a ring behind", f_cons_back_far },
	{ "cons-back-small", 0, WORKS, SEND, "consumer cursor a little back: valid",
	  f_cons_back_small },
	{ "cons-reserved", 1, END, SEND, "reserved consumer cursor bits", f_cons_reserved },
	{ "skip-done", 1, END, SEND, "the victim's own rewind shown pending at our cursor",
	  f_skip_done },
	{ "skip-own", 1, END, SEND, "the same through the victim's own skip fields", f_skip_own },
	{ "flags-reserved", 0, WORKS, SEND, "unknown flag bits (ignored)", f_wflags_reserved },
	{ "tcp-cons-ahead", 1, END, RING, "back to TCP with a consumer cursor beyond the victim's",
	  f_tcp_cons_ahead },
	{ "flags-wabort", 0, END, RING, "writer abort flag", f_wflags_abort },
	{ "flags-all", 0, END, RING, "every flag bit, both directions", f_wflags_all },
	{ "closed-then-data", 0, END, SEND, "data after the close flag", f_closed_then_data },
	{ "flags-rabort", 0, END, SEND, "reader abort flag", f_rflags_abort },
	{ "flags-rclosed", 0, OPEN, SEND,
	  "reader closed flag: the victim's first send after it is taken, as TCP's after the "
	  "peer's close (conn_send), and it waits for the next request", f_rflags_closed },
	{ "magic", 0, WORKS, SEND, "magic/version/sizes (informational)", f_magic },
	{ "side-refs", 0, WORKS, SEND, "the victim's holder count", f_side_refs },
	{ "sleepers", 0, WORKS, SEND, "sleeper counts, sequences, CPU hint", f_sleepers },
	{ "punch-hdr", 1, END, RING, "header page hole-punched (all zero)", f_punch_hdr },
	{ "punch-rings", 0, WORKS, SEND, "ring pages hole-punched", f_punch_rings },
	{ "tcp-byte", 1, END, RING, "a byte on the TCP channel after the upgrade", f_tcp_byte },
};
#define N_ATTACKS (sizeof(attacks) / sizeof(attacks[0]))

static const char *expect_name(enum expect e)
{
	return e == END ? "ended" : e == WORKS ? "works" : "open";
}

/* ------------------------------------------------------------------ payload */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static uint8_t pattern(uint64_t seed, uint64_t off)
{
	return (uint8_t)(splitmix64(seed ^ (off / 8)) >> (8 * (off % 8)));
}

static void fill(uint64_t seed, uint64_t off, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(seed, off + i);
}

/* Offset of the first wrong byte, or -1. */
static int64_t check(uint64_t seed, uint64_t off, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(seed, off + i))
			return (int64_t)(off + i);
	return -1;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int recv_all(int fd, uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return -ENODATA; /* EOF */
		if (r < 0)
			return -errno;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One echo round of ECHO_LEN bytes, checked. 0 or -errno (-EBADMSG: wrong bytes). */
static int echo_round(int fd, uint64_t seed)
{
	uint8_t out[ECHO_LEN], in[ECHO_LEN];
	int r;

	fill(seed, 0, out, sizeof(out));
	r = send_all(fd, out, sizeof(out));
	if (r == 0)
		r = recv_all(fd, in, sizeof(in));
	if (r == 0 && memcmp(in, out, sizeof(in)) != 0)
		r = -EBADMSG;
	return r;
}

struct streamer {
	int fd;
	uint64_t seed, bytes;
	int err;
};

static void *stream_writer(void *arg)
{
	struct streamer *s = arg;
	uint8_t buf[16384];

	for (uint64_t off = 0; off < s->bytes && !s->err;) {
		size_t k = s->bytes - off < sizeof(buf) ? (size_t)(s->bytes - off) : sizeof(buf);

		fill(s->seed, off, buf, k);
		s->err = send_all(s->fd, buf, k);
		off += k;
	}
	return NULL;
}

/* Streams `bytes` through the echo server and checks every byte that comes back. */
static int stream_check(int fd, uint64_t seed, uint64_t bytes, int64_t *bad)
{
	struct streamer s = { .fd = fd, .seed = seed, .bytes = bytes };
	uint8_t buf[16384];
	pthread_t th;
	int err = 0;

	*bad = -1;
	if (pthread_create(&th, NULL, stream_writer, &s) != 0)
		return -EAGAIN;
	for (uint64_t off = 0; off < bytes;) {
		size_t k = bytes - off < sizeof(buf) ? (size_t)(bytes - off) : sizeof(buf);

		err = recv_all(fd, buf, k);
		if (err)
			break;
		*bad = check(seed, off, buf, k);
		if (*bad >= 0) {
			err = -EBADMSG;
			break;
		}
		off += k;
	}
	if (err)
		shutdown(fd, SHUT_RDWR); /* the writer may be blocked on a dead connection */
	pthread_join(th, NULL);
	return err ? err : s.err;
}

/* ------------------------------------------------------------------ finding the block */

struct maps {
	int n;
	uint64_t start[MAX_MAPS], end[MAX_MAPS];
};

static void find_blocks(struct maps *m)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	m->n = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && m->n < MAX_MAPS) {
		uint64_t s, e;

		if (strstr(line, "/memfd:smc-rmb") &&
		    sscanf(line, "%" SCNx64 "-%" SCNx64, &s, &e) == 2) {
			m->start[m->n] = s;
			m->end[m->n++] = e;
		}
	}
	fclose(f);
}

struct fds {
	int n;
	int fd[MAX_BELLS];
};

static void find_eventfds(struct fds *out)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	out->n = 0;
	if (!d)
		return;
	while ((e = readdir(d)) && out->n < MAX_BELLS) {
		char path[300], link[64];
		ssize_t k;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		k = readlink(path, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = 0;
		if (strcmp(link, "anon_inode:[eventfd]") == 0)
			out->fd[out->n++] = atoi(e->d_name);
	}
	closedir(d);
}

static bool in_fds(const struct fds *f, int fd)
{
	for (int i = 0; i < f->n; i++)
		if (f->fd[i] == fd)
			return true;
	return false;
}

/* ------------------------------------------------------------------ main */

static int connect_to(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	struct timeval tv = { IO_TIMEOUT_S, 0 };
	int fd;

	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -1;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
			connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)) {
		fprintf(stderr, "shm_forge: connect %s:%s: %s\n", host, port, strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static int local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static const char *err_name(int err)
{
	switch (err) {
	case 0: return "none";
	case -ENODATA: return "eof";
	case -ECONNRESET: return "reset";
	case -EPIPE: return "epipe";
	case -EAGAIN: return "timeout";
	case -EBADMSG: return "wrong-bytes";
	default: return strerror(-err);
	}
}

/* After the attack: did the connection end? Reads (and drops) whatever still comes
 * until EOF or an error, for at most IO_TIMEOUT_S (SO_RCVTIMEO). */
static const char *await_end(int fd, uint64_t *got)
{
	uint8_t buf[16384];

	*got = 0;
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r > 0) {
			*got += (uint64_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return "eof";
		return errno == EAGAIN || errno == EWOULDBLOCK ? NULL : err_name(-errno);
	}
}

/* libc's own function `name`, past the library (which takes send(), and even
 * syscall(SYS_sendto), for the ring: syscall.sh) */
static void *libc_fn(const char *name)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);

	return libc ? dlsym(libc, name) : NULL;
}

/* A plain TCP connection, the library bypassed: the victim serves it as TCP, often
 * after waiting for its Proposal on its progress thread (which then starts, for good).
 * One echo round through it. 0 or -errno. */
static int plain_round(const char *host, const char *port, uint64_t seed)
{
	int (*p_socket)(int, int, int) = (int (*)(int, int, int))libc_fn("socket");
	int (*p_connect)(int, const struct sockaddr *, socklen_t) =
		(int (*)(int, const struct sockaddr *, socklen_t))libc_fn("connect");
	ssize_t (*p_send)(int, const void *, size_t, int) =
		(ssize_t (*)(int, const void *, size_t, int))libc_fn("send");
	ssize_t (*p_recv)(int, void *, size_t, int) =
		(ssize_t (*)(int, void *, size_t, int))libc_fn("recv");
	int (*p_close)(int) = (int (*)(int))libc_fn("close");
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	struct timeval tv = { IO_TIMEOUT_S, 0 };
	uint8_t out[ECHO_LEN], in[ECHO_LEN];
	size_t got = 0;
	int fd, r = 0;

	if (!p_socket || !p_connect || !p_send || !p_recv || !p_close)
		return -ENOSYS;
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -EHOSTUNREACH;
	fd = p_socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || p_connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		r = -errno;
	freeaddrinfo(ai);
	fill(seed, 0, out, sizeof(out));
	/* setsockopt is not the library's concern for an fd it never saw */
	if (!r && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
		   p_send(fd, out, sizeof(out), MSG_NOSIGNAL) != (ssize_t)sizeof(out)))
		r = -errno;
	while (!r && got < sizeof(in)) {
		ssize_t k = p_recv(fd, in + got, sizeof(in) - got, 0);

		if (k <= 0)
			r = k < 0 ? -errno : -ENODATA;
		else
			got += (size_t)k;
	}
	if (!r && memcmp(in, out, sizeof(in)) != 0)
		r = -EBADMSG;
	if (fd >= 0)
		p_close(fd);
	return r;
}

static void usage(void)
{
	fprintf(stderr, "usage: shm_forge list | warmup HOST PORT | ATTACK HOST PORT [--bytes N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const struct attack *a = NULL;
	uint64_t bytes = DEFAULT_STREAM, seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
	struct maps before, after;
	struct fds bells_before, bells_after;
	struct target t = { 0 };
	char detail[256];
	int hfd, afd, r;
	int64_t bad;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && strcmp(argv[1], "list") == 0) {
		for (size_t i = 0; i < N_ATTACKS; i++)
			printf("%s %d %s\n", attacks[i].name, attacks[i].victim_aborts,
			       expect_name(attacks[i].expect));
		return 0;
	}
	if (argc != 4 && !(argc == 6 && strcmp(argv[4], "--bytes") == 0))
		usage();
	if (argc == 6)
		bytes = strtoull(argv[5], NULL, 0);
	if (strcmp(argv[1], "warmup") == 0) {
		/* the victim's lazily created state comes up: its progress thread (which a
		 * handshake needs only when the Proposal is late, so the plain connection),
		 * then what an upgraded connection sets up */
		r = plain_round(argv[2], argv[3], seed);
		printf("WARMUP plain %s\n", r ? err_name(r) : "ok");
		if (r)
			return 1;
		hfd = connect_to(argv[2], argv[3]);
		r = hfd < 0 ? -ECONNREFUSED : echo_round(hfd, seed);
		printf("WARMUP smc %s\n", r ? err_name(r) : "ok");
		if (hfd >= 0)
			close(hfd);
		return r ? 1 : 0;
	}
	for (size_t i = 0; i < N_ATTACKS; i++)
		if (strcmp(argv[1], attacks[i].name) == 0)
			a = &attacks[i];
	if (!a)
		usage();

	/* the honest connection, upgraded and moving bytes before the attack */
	hfd = connect_to(argv[2], argv[3]);
	if (hfd < 0 || (r = echo_round(hfd, seed)) != 0) {
		printf("ERROR honest connection: %s\n", hfd < 0 ? "connect" : err_name(r));
		return 3;
	}
	find_blocks(&before);
	find_eventfds(&bells_before);
	if (before.n != 1) {
		printf("ERROR %d smc-rmb mappings after the honest connection (not upgraded?)\n",
		       before.n);
		return 3;
	}
	afd = connect_to(argv[2], argv[3]);
	if (afd < 0 || (r = echo_round(afd, seed + 1)) != 0 || (r = echo_round(afd, seed + 2)) != 0) {
		printf("ERROR attacked connection: %s\n", afd < 0 ? "connect" : err_name(r));
		return 3;
	}
	printf("PORTS honest=%d attack=%d\n", local_port(hfd), local_port(afd));
	find_blocks(&after);
	find_eventfds(&bells_after);
	if (after.n != 2) {
		printf("ERROR %d smc-rmb mappings with both connections\n", after.n);
		return 3;
	}
	for (int i = 0; i < after.n; i++)
		if (after.start[i] != before.start[0]) {
			t.start = after.start[i];
			t.end = after.end[i];
		}
	t.base = (uint8_t *)(uintptr_t)t.start;
	t.len = (size_t)(t.end - t.start);
	t.hdr = (struct shm_hdr *)t.base;
	t.size[0] = t.hdr->ring_size[0];
	t.size[1] = t.hdr->ring_size[1];
	t.tcp_fd = afd;
	if (t.hdr->magic != SHM_MAGIC || (size_t)SHM_HDR_SPACE + t.size[0] + t.size[1] > t.len) {
		printf("ERROR the new mapping is not a shared block (magic %#x, %zu bytes)\n",
		       t.hdr->magic, t.len);
		return 3;
	}
	printf("BLOCK %#" PRIx64 "-%#" PRIx64 " rings %u/%u prod0 %#" PRIx64 " cons1 %#" PRIx64 "\n",
	       t.start, t.end, t.size[0], t.size[1], t.hdr->dir[0].prod, t.hdr->dir[1].cons);

	/* the forgery, and the victim's reason to look at it */
	if (!a->forge(&t, detail, sizeof(detail))) {
		printf("FORGED %s refused: %s\n", a->name, detail);
		printf("OUTCOME %s refused\n", a->name);
	} else {
		printf("FORGED %s %s\n", a->name, detail);
		if (a->provoke == RING) {
			for (int i = 0; i < bells_after.n; i++) {
				uint64_t one = 1;

				if (!in_fds(&bells_before, bells_after.fd[i]))
					(void)!write(bells_after.fd[i], &one, sizeof(one));
			}
			if (a->expect == WORKS)
				r = echo_round(afd, seed + 3);
		} else {
			r = echo_round(afd, seed + 3);
		}
		if (a->expect == WORKS) {
			if (r == 0)
				r = echo_round(afd, seed + 4);
			printf("OUTCOME %s %s\n", a->name, r == 0 ? "works" : err_name(r));
		} else {
			uint64_t got;
			const char *how = await_end(afd, &got);

			if (how)
				printf("OUTCOME %s ended how=%s after=%" PRIu64 "\n", a->name, how, got);
			else
				printf("OUTCOME %s open after=%" PRIu64 "\n", a->name, got);
		}
	}
	close(afd);

	/* the honest connection, after it all */
	r = stream_check(hfd, seed + 5, bytes, &bad);
	if (r)
		printf("HONEST broken %s at %" PRId64 "\n", err_name(r), bad);
	else
		printf("HONEST ok bytes=%" PRIu64 "\n", bytes);
	close(hfd);
	return 0;
}
