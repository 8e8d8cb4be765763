/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * fd -> (kind, object) table, see fdtab.h.
 *
 * Two levels: a top-level array of chunk pointers, and chunks of FDTAB_CHUNK entries
 * allocated the first time an fd in their range is set. Both levels come from mmap,
 * not malloc: the table is reached from inside close()/dup2() wrappers that may run in
 * a forked child or under an application's malloc that itself does I/O, and untouched
 * pages of an anonymous mapping cost nothing.
 *
 * Capacity: the largest fd the process could ever hold. RLIMIT_NOFILE's hard limit is
 * only a floor, because a privileged process (redis, nginx as root) may raise it after
 * we have sized the table, so the kernel's ceiling fs.nr_open is used when readable.
 * With the default nr_open (1048576) the top level is 256 pointers.
 *
 * Concurrency: chunk installation is a CAS on the top-level slot (the loser unmaps its
 * chunk and uses the winner's), lookups are two acquire loads and never lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/real.h"

__thread bool smc_thread_internal __attribute__((tls_model("initial-exec")));

pthread_mutex_t fdtab_stripe[FDTAB_STRIPES] = {
	[0 ... FDTAB_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER
};

bool fdtab_fork_lock(void)
{
	for (int i = 0; i < FDTAB_STRIPES; i++)
		if (forklock_take(&fdtab_stripe[i]) == FORKLOCK_BUSY)
			return false;
	return true;
}


#define FDTAB_CHUNK_SHIFT 12
#define FDTAB_CHUNK (1 << FDTAB_CHUNK_SHIFT) /* entries per chunk: 64 KiB on LP64 */
#define FDTAB_MIN_CAPACITY 1024

static struct fd_entry **fdtab_top;   /* NULL until fdtab_setup() ran successfully */
static int fdtab_cap = FDTAB_MIN_CAPACITY;
static pthread_once_t fdtab_once = PTHREAD_ONCE_INIT;

static long read_nr_open(void)
{
	char buf[32];
	long val = -1;
	int fd = REAL(open)("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	ssize_t n = REAL(read)(fd, buf, sizeof(buf) - 1);
	if (n > 0) {
		buf[n] = '\0';
		val = strtol(buf, NULL, 10);
	}
	REAL(close)(fd);
	return val;
}

static int compute_capacity(void)
{
	struct rlimit rl;
	unsigned long long cap = FDTAB_MIN_CAPACITY;
	long nr_open = read_nr_open();

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max > cap)
		cap = rl.rlim_max;
	if (nr_open > 0 && (unsigned long long)nr_open > cap)
		cap = (unsigned long long)nr_open;
	if (cap > INT_MAX)
		cap = INT_MAX;
	return (int)cap;
}

static void *map_zeroed(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static size_t top_slots(void)
{
	return ((size_t)fdtab_cap + FDTAB_CHUNK - 1) >> FDTAB_CHUNK_SHIFT;
}

static void fdtab_setup(void)
{
	fdtab_cap = compute_capacity();
	struct fd_entry **top = map_zeroed(top_slots() * sizeof(*top));
	if (!top) {
		/* Out of address space: the table stays empty and every fd is FD_NONE. */
		return;
	}
	__atomic_store_n(&fdtab_top, top, __ATOMIC_RELEASE);
}

static struct fd_entry **top_table(void)
{
	struct fd_entry **top = __atomic_load_n(&fdtab_top, __ATOMIC_ACQUIRE);
	if (__builtin_expect(top != NULL, 1))
		return top;
	pthread_once(&fdtab_once, fdtab_setup);
	return __atomic_load_n(&fdtab_top, __ATOMIC_ACQUIRE);
}

int fdtab_capacity(void)
{
	top_table();
	return fdtab_cap;
}

struct fd_entry *fdtab_peek(int fd)
{
	struct fd_entry **top = __atomic_load_n(&fdtab_top, __ATOMIC_ACQUIRE);

	/* fdtab_cap is final once top is published (release/acquire pair above). */
	if (!top || fd < 0 || fd >= fdtab_cap)
		return NULL;
	struct fd_entry *chunk = __atomic_load_n(&top[fd >> FDTAB_CHUNK_SHIFT], __ATOMIC_ACQUIRE);
	return chunk ? &chunk[fd & (FDTAB_CHUNK - 1)] : NULL;
}

static struct fd_entry *install_chunk(struct fd_entry **slot)
{
	struct fd_entry *fresh = map_zeroed(FDTAB_CHUNK * sizeof(*fresh));
	struct fd_entry *expected = NULL;

	if (!fresh)
		return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (__atomic_compare_exchange_n(slot, &expected, fresh, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return fresh;
	/* Another thread installed this chunk first; its entries are the live ones. */
	munmap(fresh, FDTAB_CHUNK * sizeof(*fresh));
	return expected;
}

struct fd_entry *fdtab_get(int fd)
{
	struct fd_entry **top = top_table();

	if (!top || fd < 0 || fd >= fdtab_cap)
		return NULL;
	struct fd_entry **slot = &top[fd >> FDTAB_CHUNK_SHIFT];
	struct fd_entry *chunk = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!chunk)
		chunk = install_chunk(slot);
	return chunk ? &chunk[fd & (FDTAB_CHUNK - 1)] : NULL;
}

void fdtab_set(int fd, enum fd_kind kind, void *obj)
{
	struct fd_entry *e = fdtab_get(fd);

	if (!e)
		return;
	/* obj first: a reader that sees the new kind (acquire) also sees its object. */
	__atomic_store_n(&e->obj, obj, __ATOMIC_RELAXED);
	__atomic_store_n(&e->kind, (uint8_t)kind, __ATOMIC_RELEASE);
}

void fdtab_clear(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	if (!e)
		return;
	__atomic_store_n(&e->kind, (uint8_t)FD_NONE, __ATOMIC_RELEASE);
	__atomic_store_n(&e->obj, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&e->flags, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->owed_err, 0, __ATOMIC_RELAXED);
}

unsigned fdtab_flags(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	return e ? __atomic_load_n(&e->flags, __ATOMIC_RELAXED) : 0;
}

void fdtab_flags_set(int fd, unsigned flags)
{
	struct fd_entry *e = fdtab_get(fd);

	if (e)
		__atomic_fetch_or(&e->flags, (uint16_t)flags, __ATOMIC_RELAXED);
}

void fdtab_flags_reset(int fd, unsigned flags)
{
	struct fd_entry *e = fdtab_get(fd);

	if (!e)
		return;
	__atomic_store_n(&e->flags, (uint16_t)flags, __ATOMIC_RELAXED);
	__atomic_store_n(&e->owed_err, 0, __ATOMIC_RELAXED);
}

void fdtab_owe_error(int fd, int err)
{
	struct fd_entry *e;

	/* not a socket's pending error: nothing was taken from the kernel */
	if (err <= 0 || err > UINT8_MAX || err == EAGAIN || err == EWOULDBLOCK || err == EINTR ||
	    err == EBADF || err == ENOTSOCK || err == EFAULT || err == EINVAL || err == ENOMEM ||
	    err == ENOTCONN)
		return;
	if ((e = fdtab_peek(fd)))
		__atomic_store_n(&e->owed_err, (uint8_t)err, __ATOMIC_RELAXED);
}

int fdtab_owed_error_take(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	if (!e || !__atomic_load_n(&e->owed_err, __ATOMIC_RELAXED))
		return 0;
	return __atomic_exchange_n(&e->owed_err, 0, __ATOMIC_RELAXED);
}

static uint32_t fork_generation;

void fdtab_fork_happened(void)
{
	__atomic_add_fetch(&fork_generation, 1, __ATOMIC_RELAXED);
}

void fdtab_born_now(int fd)
{
	struct fd_entry *e = fdtab_get(fd);

	if (e)
		__atomic_store_n(&e->born, __atomic_load_n(&fork_generation, __ATOMIC_RELAXED),
				 __ATOMIC_RELAXED);
}

void fdtab_born_copy(int from, int to)
{
	struct fd_entry *a = fdtab_peek(from), *b = fdtab_get(to);

	if (a && b)
		__atomic_store_n(&b->born, __atomic_load_n(&a->born, __ATOMIC_RELAXED),
				 __ATOMIC_RELAXED);
}

bool fdtab_born_before_fork(int fd)
{
	struct fd_entry *e = fdtab_peek(fd);

	return e && __atomic_load_n(&e->born, __ATOMIC_RELAXED) !=
			    __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
}

int fdtab_next_tracked(int from)
{
	struct fd_entry **top = __atomic_load_n(&fdtab_top, __ATOMIC_ACQUIRE);

	if (!top || from < 0)
		return -1;
	/* long: stepping past the last chunk must not overflow when fdtab_cap is INT_MAX. */
	for (long fd = from; fd < fdtab_cap;) {
		struct fd_entry *chunk =
			__atomic_load_n(&top[fd >> FDTAB_CHUNK_SHIFT], __ATOMIC_ACQUIRE);
		if (!chunk) {
			/* Skip the whole unallocated chunk. */
			fd = ((fd >> FDTAB_CHUNK_SHIFT) + 1) << FDTAB_CHUNK_SHIFT;
			continue;
		}
		if (__atomic_load_n(&chunk[fd & (FDTAB_CHUNK - 1)].kind, __ATOMIC_ACQUIRE) != FD_NONE)
			return (int)fd;
		fd++;
	}
	return -1;
}
