/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * handoff_static: a statically linked program (the loader never runs, so LD_PRELOAD
 * loads nothing into it) that stands between an exec hand-off and the program it was
 * meant for (tests/integration/exec.sh, handoff_forge.sh). Used as the interpreter of a
 * "#!" script, which the library takes for a program that runs it:
 *
 *   #!/path/handoff_static          the kernel runs: handoff_static SCRIPT PROG ARGS...
 *
 * It execs PROG ARGS... with HANDOFF_STATIC_MODE (from the environment) deciding what:
 *   nopreload   LD_PRELOAD taken out: PROG runs without the library (a setuid-like
 *               program, or a wrapper that drops the variable after the library's
 *               guess): the peer must force the hand-off back to TCP;
 *   cursor      LD_PRELOAD kept, the description rewritten with the first connection's
 *               consumer cursor past the end of its ring;
 *   memfd       the first connection's ring memfd replaced by a memfd of the same name
 *               and size full of garbage;
 *   state       the shared block's hand-off word of the first connection set back to
 *               0, as if nobody handed it off;
 *   garbage     the description replaced by a memfd of the same name full of garbage;
 *   slow        nothing changed, but PROG starts HANDOFF_STATIC_SLEEP_MS (default 3000)
 *               milliseconds late: a new image slower than the peer's bound.
 * Exit status 4 on a setup error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/handoff.h"
#include "core/shm.h"

extern char **environ;

static void die(const char *what)
{
	fprintf(stderr, "handoff_static: %s: %s\n", what, strerror(errno));
	exit(4);
}

/* A sealed memfd named name holding len bytes of buf, not CLOEXEC. */
static int sealed(const char *name, const void *buf, size_t len, int seals)
{
	int fd = memfd_create(name, MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)len) < 0 || pwrite(fd, buf, len, 0) != (ssize_t)len ||
	    fcntl(fd, F_ADD_SEALS, seals) < 0)
		die("memfd");
	return fd;
}

static void tamper(const char *mode)
{
	const char *v = getenv(HANDOFF_ENV);
	int fd = v ? atoi(v) : -1, nfd;
	struct stat st;
	unsigned char *buf;
	struct handoff_rec *r;
	char val[32];

	if (fd < 0 || fstat(fd, &st) < 0)
		die("no hand-off to tamper with");
	buf = malloc((size_t)st.st_size);
	if (!buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
		die("read the description");
	if ((size_t)st.st_size < sizeof(struct handoff_head) + sizeof(*r))
		die("no connection in the description");
	r = (struct handoff_rec *)(buf + sizeof(struct handoff_head));
	if (strcmp(mode, "cursor") == 0) {
		uint32_t size = r->st.size[r->st.side == CONN_CLIENT ? 1 : 0];

		r->st.rx_cons = cursor_make(0, size + 4096);
	} else if (strcmp(mode, "memfd") == 0) {
		size_t len = (size_t)SHM_HDR_SPACE + r->st.size[0] + r->st.size[1];
		unsigned char *junk = malloc(len);

		if (!junk)
			die("malloc");
		memset(junk, 0xa5, len);
		r->memfd = sealed("smc-rmb", junk, len, F_SEAL_SHRINK | F_SEAL_GROW);
	} else if (strcmp(mode, "state") == 0) {
		size_t len = (size_t)SHM_HDR_SPACE + r->st.size[0] + r->st.size[1];
		struct shm_hdr *h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, 0);

		if (h == MAP_FAILED)
			die("mmap");
		__atomic_store_n(&h->handoff[r->st.side], 0, __ATOMIC_SEQ_CST);
		munmap(h, len);
	} else if (strcmp(mode, "garbage") == 0) {
		memset(buf, 0x5a, (size_t)st.st_size);
	} else {
		errno = EINVAL;
		die(mode);
	}
	nfd = sealed(HANDOFF_NAME, buf, (size_t)st.st_size,
		     F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	close(fd);
	snprintf(val, sizeof(val), "%d", nfd);
	setenv(HANDOFF_ENV, val, 1);
}

int main(int argc, char **argv)
{
	const char *mode = getenv("HANDOFF_STATIC_MODE");

	if (argc < 3) {
		fprintf(stderr, "usage: as a #! interpreter: SCRIPT PROG [ARGS...]\n");
		return 4;
	}
	if (!mode || strcmp(mode, "nopreload") == 0) {
		unsetenv("LD_PRELOAD");
	} else if (strcmp(mode, "slow") == 0) {
		const char *ms = getenv("HANDOFF_STATIC_SLEEP_MS");
		long n = ms ? atol(ms) : 3000;
		struct timespec ts = { n / 1000, (n % 1000) * 1000000 };

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	} else {
		tamper(mode);
	}
	execv(argv[2], argv + 2);
	die(argv[2]);
	return 4;
}
