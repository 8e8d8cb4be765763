/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The table of real libc functions (see real.h).
 *
 * Resolved with dlsym(RTLD_NEXT) so that we find the definition that our own
 * exported wrappers shadow. pthread_once makes the resolution happen exactly once
 * even when the first callers race (two threads opening their first socket), and it
 * needs no constructor: a wrapper may be reached from another library's constructor
 * before ours has run. Functions the running libc lacks (close_range before glibc
 * 2.34, epoll_pwait2 before 2.35) stay NULL; wrappers report ENOSYS for them.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "core/base/real.h"

struct smc_real smc_real_fns;

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

/* Stores with relaxed atomics: a thread that reads a non-NULL pointer through the
 * REAL() fast path, without going through pthread_once, sees a complete pointer. */
static void real_resolve(void)
{
#define SMC_REAL_RESOLVE(ret, name, args) \
	__atomic_store_n(&smc_real_fns.name, (ret (*) args)dlsym(RTLD_NEXT, #name), \
			 __ATOMIC_RELEASE);
	SMC_REAL_FUNCS(SMC_REAL_RESOLVE)
#undef SMC_REAL_RESOLVE
}

void real_init(void)
{
	pthread_once(&real_once, real_resolve);
}
