/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Random values, see random.h. */
#include <errno.h>
#include <stdint.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/random.h"

/* A source that keeps answering 0 is broken: a secret of 0 means "none" to callers. */
#define RANDOM_ZERO_TRIES 4

static random_source_fn random_source = getrandom;

void random_set_source(random_source_fn fn)
{
	random_source = fn ? fn : getrandom;
}

/* flags 0: blocks until the kernel's pool is initialised (only ever early at boot). A
 * signal may cut a read short: read on (getrandom returns at most what was asked). */
static int random_fill(void *buf, size_t len, unsigned int flags)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t r = random_source(p, len, flags);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 && errno ? -errno : -EIO;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

int random_secret(void *buf, size_t len)
{
	return random_fill(buf, len, 0);
}

uint64_t random_secret64(void)
{
	uint64_t v = 0;

	for (int i = 0; i < RANDOM_ZERO_TRIES && v == 0; i++)
		if (random_secret(&v, sizeof(v)) < 0)
			return 0;
	return v;
}

uint64_t random_weak64(void)
{
	uint64_t v = 0;

	/* nonblocking: at load, early in boot, a weak value beats waiting for the pool */
	if (random_fill(&v, sizeof(v), GRND_NONBLOCK) == 0 && v != 0)
		return v;
	v = clock_now_ns() ^
	    ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
	/* one multiply mixes the low bits into all of them (Knuth's golden ratio) */
	v *= 0x9e3779b97f4a7c15ull;
	return v ? v : 0x534d4372616e64ull;
}
