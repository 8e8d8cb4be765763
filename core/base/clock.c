/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Where the library's clock is read (clock.h). */
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/base/clock.h"

clock_read_fn clock_read;

static int clock_read_syscall(clockid_t id, struct timespec *ts)
{
	return (int)syscall(SYS_clock_gettime, id, ts);
}

/* The C library lists the vDSO among the loaded objects under its soname; the entry
 * point's name differs per architecture (the kernel's vdso.lds files). */
static clock_read_fn vdso_clock(void)
{
	static const char *const names[] = { "__vdso_clock_gettime", "__kernel_clock_gettime" };
	void *h = dlopen("linux-vdso.so.1", RTLD_NOLOAD | RTLD_LAZY);
	void *f = NULL;

	if (!h)
		return NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !f; i++)
		f = dlsym(h, names[i]);
	dlclose(h);
	return (clock_read_fn)f;
}

clock_read_fn clock_resolve(void)
{
	clock_read_fn f = vdso_clock();
	struct timespec ts;

	if (!f || f(CLOCK_MONOTONIC, &ts) != 0)
		f = clock_read_syscall;
	__atomic_store_n(&clock_read, f, __ATOMIC_RELAXED);
	return f;
}
