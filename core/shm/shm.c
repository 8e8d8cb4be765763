/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/fsize.h"
#include "core/base/real.h"
#include "core/shm/shm.h"

static size_t shm_reserved_bytes;

size_t shm_region_len(uint32_t size0, uint32_t size1)
{
	return (size_t)SHM_HDR_SPACE + size0 + size1;
}

/*
 * RLIMIT_AS counts mappings, not the pages they use: at the default sizes a connection's
 * rings take 4 MiB of the program's address space, and under a tight limit (ulimit -v)
 * the program's own allocations then fail where over TCP they succeed (Python's
 * MemoryError after a few dozen upgraded connections). Rings take at most a quarter of
 * a finite limit (read at the first mapping: programs set it before they serve); past
 * that, connections stay TCP.
 */
static size_t shm_mapped_bytes;

static bool shm_as_take(size_t len)
{
	static size_t budget; /* 0: not read yet; SIZE_MAX: no limit */
	size_t b = __atomic_load_n(&budget, __ATOMIC_RELAXED), cur;

	if (b == 0) {
		struct rlimit rl;

		b = getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
			    ? (size_t)(rl.rlim_cur / 4) + 1
			    : SIZE_MAX;
		__atomic_store_n(&budget, b, __ATOMIC_RELAXED);
	}
	cur = __atomic_load_n(&shm_mapped_bytes, __ATOMIC_RELAXED);
	do {
		if (b != SIZE_MAX && cur + len > b)
			return false;
	} while (!__atomic_compare_exchange_n(&shm_mapped_bytes, &cur, cur + len, true,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return true;
}

static int shm_map_region(int memfd, uint32_t size0, uint32_t size1, struct shm_map *out)
{
	size_t len = shm_region_len(size0, size1);
	void *base;

	if (!shm_as_take(len))
		return -ENOMEM;
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (base == MAP_FAILED) {
		int e = errno;

		__atomic_fetch_sub(&shm_mapped_bytes, len, __ATOMIC_RELAXED);
		return -e;
	}
	out->base = base;
	out->len = len;
	out->hdr = base;
	out->ring[0] = (uint8_t *)base + SHM_HDR_SPACE;
	out->ring[1] = out->ring[0] + size0;
	out->size[0] = size0;
	out->size[1] = size1;
	return 0;
}

int shm_memfd_new(const char *name, size_t len)
{
	int fd, rc;

	/* a memfd is a file: sizing it past RLIMIT_FSIZE would raise SIGXFSZ (fsize.h) */
	if (!fsize_allows(len))
		return -EFBIG;
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* Sealed size: the peer cannot shrink the file under our mapping (SIGBUS). */
	if (ftruncate(fd, (off_t)len) < 0 ||
	    REAL(fcntl)(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = -errno;
		REAL(close)(fd);
		return rc;
	}
	return fd;
}

int shm_memfd_check(int memfd, size_t len)
{
	struct stat st;
	int seals = REAL(fcntl)(memfd, F_GET_SEALS);

	if (seals < 0)
		return -errno;
	if (!(seals & F_SEAL_SHRINK))
		return -EPROTO;
	if (fstat(memfd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size < len)
		return -EPROTO;
	return 0;
}

int shm_create(uint32_t size0, uint32_t size1, struct shm_map *out)
{
	int fd = shm_memfd_new("smc-rmb", shm_region_len(size0, size1));
	int rc;

	_Static_assert(sizeof(struct shm_hdr) <= SHM_HDR_SPACE, "header fits its page");
	if (fd < 0)
		return fd;
	rc = shm_map_region(fd, size0, size1, out);
	if (rc < 0) {
		REAL(close)(fd);
		return rc;
	}
	out->hdr->magic = SHM_MAGIC;
	out->hdr->version = SHM_VERSION;
	out->hdr->ring_size[0] = size0;
	out->hdr->ring_size[1] = size1;
	out->hdr->side_refs[0] = 1;
	out->hdr->side_refs[1] = 1;
	return fd;
}

int shm_attach(int memfd, uint32_t size0, uint32_t size1, struct shm_map *out)
{
	int rc = shm_memfd_check(memfd, shm_region_len(size0, size1));

	if (rc < 0)
		return rc;
	return shm_map_region(memfd, size0, size1, out);
}

void shm_detach(struct shm_map *m)
{
	if (m->base) {
		munmap(m->base, m->len);
		__atomic_fetch_sub(&shm_mapped_bytes, m->len, __ATOMIC_RELAXED);
	}
	memset(m, 0, sizeof(*m));
}

int shm_reserve(size_t bytes)
{
	size_t cur = __atomic_load_n(&shm_reserved_bytes, __ATOMIC_RELAXED);

	do {
		if (cur + bytes > smc_cfg.mem_cap)
			return -ENOMEM;
	} while (!__atomic_compare_exchange_n(&shm_reserved_bytes, &cur, cur + bytes, true,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return 0;
}

void shm_charge(size_t bytes)
{
	__atomic_fetch_add(&shm_reserved_bytes, bytes, __ATOMIC_RELAXED);
}

void shm_unreserve(size_t bytes)
{
	__atomic_fetch_sub(&shm_reserved_bytes, bytes, __ATOMIC_RELAXED);
}
