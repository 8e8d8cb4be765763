/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * fake_l2: an LD_PRELOAD shim for tests/integration/ring_size.sh. sysconf() answers
 * _SC_LEVEL2_CACHE_SIZE with SMC_TEST_FAKE_L2 (bytes) when that is set, so the ring
 * default the library derives from the L2 size can be tested for CPUs this machine is
 * not; every other question goes to libc.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((visibility("default"))) long sysconf(int name)
{
	long (*libc_sysconf)(int);
	const char *fake = getenv("SMC_TEST_FAKE_L2");

	if (name == _SC_LEVEL2_CACHE_SIZE && fake != NULL)
		return strtol(fake, NULL, 10);
	*(void **)&libc_sysconf = dlsym(RTLD_NEXT, "sysconf");
	return libc_sysconf ? libc_sysconf(name) : -1;
}
