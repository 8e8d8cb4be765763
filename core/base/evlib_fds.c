/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libevent's descriptors parked as they are made: see evlib_fds.h. The GOT slots are
 * found from libevent_core's dynamic section (its relocations of the JUMP_SLOT and
 * GLOB_DAT kinds that name a function below); a slot in the object's RELRO range is
 * made writable for the store and read-only again after it, as the loader left it.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/base/evlib_fds.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/log.h"

#if defined(__x86_64__)
#define SLOT_JUMP R_X86_64_JUMP_SLOT
#define SLOT_GLOB R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define SLOT_JUMP R_AARCH64_JUMP_SLOT
#define SLOT_GLOB R_AARCH64_GLOB_DAT
#endif

/* libevent 2.1 makes 4 at a base's start, 5 with a precise timer */
#define NOTED_MAX 8
static int noted[NOTED_MAX];
static unsigned nnoted;
static bool redirected;

/* A descriptor the library's own call into libevent made: parked and noted. */
static int keep(int fd)
{
	if (fd < 0 || !smc_thread_internal)
		return fd;
	fd = fd_park_low(fd);
	if (nnoted < NOTED_MAX)
		noted[nnoted++] = fd;
	return fd;
}

static void keep_pair(int r, int fds[2])
{
	if (r == 0) {
		fds[0] = keep(fds[0]);
		fds[1] = keep(fds[1]);
	}
}

/*
 * Numbers of libevent's descriptors the program took with dup2/dup3 (evlib_fds_move):
 * libevent goes on calling the old number, which now names the program's file, and
 * those calls go to the number its file was moved to. Appended under progress's lock
 * (a pair is complete before the count shows it); read by any thread in libevent.
 */
#define MOVES_MAX 8
static int move_from[MOVES_MAX], move_to[MOVES_MAX];
static unsigned nmoves;

static int moved(int fd)
{
	unsigned n = __atomic_load_n(&nmoves, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++)
		if (move_from[i] == fd)
			return __atomic_load_n(&move_to[i], __ATOMIC_RELAXED);
	return fd;
}

static int (*slot_epoll_create)(int);
static int (*slot_epoll_create1)(int);
static int (*slot_eventfd)(unsigned int, int);
static int (*slot_pipe)(int[2]);
static int (*slot_pipe2)(int[2], int);
static int (*slot_socketpair)(int, int, int, int[2]);
static int (*slot_timerfd_create)(int, int);

static int ev_epoll_create(int size)
{
	return keep(slot_epoll_create(size));
}

static int ev_epoll_create1(int flags)
{
	return keep(slot_epoll_create1(flags));
}

static int ev_eventfd(unsigned int initval, int flags)
{
	return keep(slot_eventfd(initval, flags));
}

static int ev_pipe(int fds[2])
{
	int r = slot_pipe(fds);

	keep_pair(r, fds);
	return r;
}

static int ev_pipe2(int fds[2], int flags)
{
	int r = slot_pipe2(fds, flags);

	keep_pair(r, fds);
	return r;
}

static int ev_socketpair(int domain, int type, int protocol, int fds[2])
{
	int r = slot_socketpair(domain, type, protocol, fds);

	keep_pair(r, fds);
	return r;
}

static int ev_timerfd_create(int clockid, int flags)
{
	return keep(slot_timerfd_create(clockid, flags));
}

static int (*slot_close)(int);
static int (*slot_epoll_ctl)(int, int, int, struct epoll_event *);
static int (*slot_epoll_wait)(int, struct epoll_event *, int, int);
static ssize_t (*slot_read)(int, void *, size_t);
static ssize_t (*slot_write)(int, const void *, size_t);
static int (*slot_fcntl)(int, int, ...);

static int ev_close(int fd)
{
	return slot_close(moved(fd));
}

static int ev_epoll_ctl(int ep, int op, int fd, struct epoll_event *ev)
{
	return slot_epoll_ctl(moved(ep), op, moved(fd), ev);
}

static int ev_epoll_wait(int ep, struct epoll_event *evs, int max, int timeout)
{
	return slot_epoll_wait(moved(ep), evs, max, timeout);
}

static ssize_t ev_read(int fd, void *buf, size_t n)
{
	return slot_read(moved(fd), buf, n);
}

static ssize_t ev_write(int fd, const void *buf, size_t n)
{
	return slot_write(moved(fd), buf, n);
}

/* fcntl's third argument is an int or a pointer, passed the same way on the two ABIs
 * this file redirects for (SLOT_JUMP) */
static int ev_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	unsigned long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	return slot_fcntl(moved(fd), cmd, arg);
}

struct redirect {
	const char *name;
	void **slot_fn; /* where the function the slot held is kept */
	void *ours;
};

static const struct redirect redirects[] = {
	{ "epoll_create", (void **)&slot_epoll_create, (void *)ev_epoll_create },
	{ "epoll_create1", (void **)&slot_epoll_create1, (void *)ev_epoll_create1 },
	{ "eventfd", (void **)&slot_eventfd, (void *)ev_eventfd },
	{ "pipe", (void **)&slot_pipe, (void *)ev_pipe },
	{ "pipe2", (void **)&slot_pipe2, (void *)ev_pipe2 },
	{ "socketpair", (void **)&slot_socketpair, (void *)ev_socketpair },
	{ "timerfd_create", (void **)&slot_timerfd_create, (void *)ev_timerfd_create },
	{ "close", (void **)&slot_close, (void *)ev_close },
	{ "epoll_ctl", (void **)&slot_epoll_ctl, (void *)ev_epoll_ctl },
	{ "epoll_wait", (void **)&slot_epoll_wait, (void *)ev_epoll_wait },
	{ "read", (void **)&slot_read, (void *)ev_read },
	{ "write", (void **)&slot_write, (void *)ev_write },
	{ "fcntl", (void **)&slot_fcntl, (void *)ev_fcntl },
};

#ifdef SLOT_JUMP

/* The page-aligned range the loader made read-only after relocating (PT_GNU_RELRO). */
struct relro {
	uintptr_t base, start, end;
	uintptr_t page;
};

static int find_relro(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct relro *ro = arg;

	(void)size;
	if (info->dlpi_addr != ro->base)
		return 0;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_GNU_RELRO)
			continue;
		ro->start = (info->dlpi_addr + ph->p_vaddr) & ~(ro->page - 1);
		ro->end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(ro->page - 1);
	}
	return 1;
}

static bool slot_store(void **slot, void *v, const struct relro *ro)
{
	uintptr_t pg = (uintptr_t)slot & ~(ro->page - 1);
	bool ro_page = pg >= ro->start && pg < ro->end;

	if (ro_page && mprotect((void *)pg, ro->page, PROT_READ | PROT_WRITE) < 0)
		return false;
	__atomic_store_n(slot, v, __ATOMIC_RELEASE);
	if (ro_page)
		mprotect((void *)pg, ro->page, PROT_READ);
	return true;
}

/* glibc stores the dynamic section's addresses relocated; other loaders leave them
 * relative to the object's base (an object's own addresses are never below it). */
static uintptr_t dyn_addr(uintptr_t base, ElfW(Addr) v)
{
	return v < base ? base + v : v;
}

bool evlib_fds_redirect(void *handle)
{
	struct link_map *lm;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	size_t strsz = 0, sizes[2] = { 0, 0 };
	const ElfW(Rela) *tabs[2] = { NULL, NULL };
	bool rela = true;
	struct relro ro = { 0 };
	unsigned found = 0, stored = 0;

	if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_ld)
		return false;
	ro.base = lm->l_addr;
	ro.page = (uintptr_t)sysconf(_SC_PAGESIZE);
	for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB:
			symtab = (const ElfW(Sym) *)dyn_addr(ro.base, d->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strtab = (const char *)dyn_addr(ro.base, d->d_un.d_ptr);
			break;
		case DT_STRSZ:
			strsz = d->d_un.d_val;
			break;
		case DT_JMPREL:
			tabs[0] = (const ElfW(Rela) *)dyn_addr(ro.base, d->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			sizes[0] = d->d_un.d_val;
			break;
		case DT_PLTREL:
			rela = d->d_un.d_val == DT_RELA;
			break;
		case DT_RELA:
			tabs[1] = (const ElfW(Rela) *)dyn_addr(ro.base, d->d_un.d_ptr);
			break;
		case DT_RELASZ:
			sizes[1] = d->d_un.d_val;
			break;
		}
	}
	if (!symtab || !strtab || !rela || !ro.page)
		return false;
	dl_iterate_phdr(find_relro, &ro);
	for (int t = 0; t < 2; t++) {
		for (size_t i = 0; tabs[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
			const ElfW(Rela) *r = &tabs[t][i];
			unsigned long type = ELF64_R_TYPE(r->r_info);
			ElfW(Word) name;

			if (type != SLOT_JUMP && type != SLOT_GLOB)
				continue;
			name = symtab[ELF64_R_SYM(r->r_info)].st_name;
			if (name >= strsz)
				continue;
			for (size_t k = 0; k < sizeof(redirects) / sizeof(redirects[0]); k++) {
				const struct redirect *x = &redirects[k];
				void **slot = (void **)(ro.base + r->r_offset);
				void *cur;

				if (strcmp(strtab + name, x->name) != 0)
					continue;
				cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
				found++;
				/* bound (RTLD_NOW), and to one function wherever named */
				if (!cur || cur == x->ours ||
				    (*x->slot_fn && *x->slot_fn != cur))
					break;
				*x->slot_fn = cur;
				if (slot_store(slot, x->ours, &ro))
					stored++;
				break;
			}
		}
	}
	redirected = found > 0 && stored == found;
	if (!redirected)
		log_debug("libevent: %u of %u descriptor calls redirected: filling low numbers "
			  "at its start instead", stored, found);
	return redirected;
}

#else

bool evlib_fds_redirect(void *handle)
{
	(void)handle;
	return false;
}

#endif

bool evlib_fds_redirected(void)
{
	return redirected;
}

void evlib_fds_begin(void)
{
	nnoted = 0;
}

size_t evlib_fds_end(int *out, size_t max)
{
	size_t n = nnoted < max ? nnoted : max;

	memcpy(out, noted, n * sizeof(*out));
	nnoted = 0;
	return n;
}

int evlib_fds_move(int from, int to)
{
	unsigned n = __atomic_load_n(&nmoves, __ATOMIC_RELAXED);

	if (!redirected)
		return -1;
	/* a number moved before and taken again: its earlier names follow it */
	for (unsigned i = 0; i < n; i++)
		if (__atomic_load_n(&move_to[i], __ATOMIC_RELAXED) == from)
			__atomic_store_n(&move_to[i], to, __ATOMIC_RELEASE);
	if (n == MOVES_MAX)
		return -1;
	move_from[n] = from;
	move_to[n] = to;
	__atomic_store_n(&nmoves, n + 1, __ATOMIC_RELEASE);
	return 0;
}

void evlib_fds_moves_forget(void)
{
	__atomic_store_n(&nmoves, 0, __ATOMIC_RELEASE);
}
