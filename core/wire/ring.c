/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * RMB ring arithmetic (see ring.h for the cursor format).
 *
 * Everything here may be fed values that came from an untrusted peer, so every
 * function stays memory-safe for any input: an out-of-range count is reduced
 * modulo the ring size before it is used as an offset, and a copy longer than
 * the ring just wraps around again instead of running off the end. Callers are
 * still expected to validate cursors first (cursor_valid / cursor_diff, or the
 * cdc_validate_* helpers) and abort the connection on a forged one.
 */
#include "core/wire/ring.h"

#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define CURSOR_HIGH_MASK 0xFFFF000000000000ULL

bool cursor_valid(smc_cursor c, uint32_t size)
{
	return size != 0 && (c & CURSOR_HIGH_MASK) == 0 && cursor_count(c) < size;
}

smc_cursor cursor_add(smc_cursor c, uint32_t n, uint32_t size)
{
	if (size == 0)
		return c;
	/* 64-bit sum: count + n cannot overflow even for count, n near 2^32. */
	uint64_t pos = (uint64_t)cursor_count(c) + n;
	uint16_t wrap = cursor_wrap(c);

	if (pos >= size) {
		/* The common case is at most one wrap (n <= size, count < size). */
		if (pos < 2ULL * size) {
			pos -= size;
			wrap++;
		} else {
			wrap = (uint16_t)(wrap + pos / size);
			pos %= size;
		}
	}
	return cursor_make(wrap, (uint32_t)pos);
}

int64_t cursor_diff(smc_cursor newer, smc_cursor older, uint32_t size)
{
	if (!cursor_valid(newer, size) || !cursor_valid(older, size))
		return -1;

	/* Wrap counters are compared modulo 2^16: 0x0000 is one after 0xFFFF. */
	uint16_t dwrap = (uint16_t)(cursor_wrap(newer) - cursor_wrap(older));
	uint32_t n = cursor_count(newer), o = cursor_count(older);

	if (dwrap == 0)
		return n >= o ? (int64_t)(n - o) : -1;
	if (dwrap == 1)
		/* One wrap apart: at most a whole ring, i.e. n <= o. */
		return n <= o ? (int64_t)size - o + n : -1;
	/* Two or more wraps apart is always more than a ring; anything "behind"
	 * shows up here as a huge dwrap too. */
	return -1;
}

int64_t ring_used(smc_cursor prod, smc_cursor cons, uint32_t size)
{
	return cursor_diff(prod, cons, size);
}

int64_t ring_free(smc_cursor prod, smc_cursor cons, uint32_t size)
{
	int64_t used = cursor_diff(prod, cons, size);

	return used < 0 ? -1 : (int64_t)size - used;
}

/* Offset in the ring for cursor `at`, forced into [0, size). */
static inline uint32_t ring_offset(smc_cursor at, uint32_t size)
{
	uint32_t off = cursor_count(at);

	if (__builtin_expect(off >= size, 0))
		off %= size;
	return off;
}

/* glibc's memcpy through a pointer the compiler cannot see into: given a constant-size
 * memcpy(d, s, 2048) GCC emitted `rep movsq` inline, string-copy microcode that ran a
 * stream at 1.4-2 GB/s instead of 7-8 whenever its cursors fell badly against the
 * buffer (see the pieces below). */
static void *(*volatile ring_libc_memcpy)(void *, const void *, size_t) = memcpy;

#if defined(__x86_64__)
/* Copies the whole 64-byte blocks of n bytes forward in 16-byte moves, with ordinary
 * or non-temporal stores (those need d 16-byte aligned); returns the bytes copied. */
static inline size_t ring_copy_blocks(uint8_t *d, const uint8_t *s, size_t n, bool stream)
{
	size_t done = 0;

	for (; n - done >= 64; done += 64) {
		const __m128i *from = (const __m128i *)(const void *)(s + done);
		__m128i *to = (__m128i *)(void *)(d + done);
		__m128i a = _mm_loadu_si128(from), b = _mm_loadu_si128(from + 1);
		__m128i c = _mm_loadu_si128(from + 2), e = _mm_loadu_si128(from + 3);

		if (stream) {
			_mm_stream_si128(to, a);
			_mm_stream_si128(to + 1, b);
			_mm_stream_si128(to + 2, c);
			_mm_stream_si128(to + 3, e);
		} else {
			_mm_storeu_si128(to, a);
			_mm_storeu_si128(to + 1, b);
			_mm_storeu_si128(to + 2, c);
			_mm_storeu_si128(to + 3, e);
		}
	}
	return done;
}

/*
 * On x86-64 every ring copy, in and out, takes this plain forward loop of 16-byte
 * moves; glibc's memcpy only copies the tail below 64 bytes. A ring copy is paced by
 * cache lines moving between the writer's and the reader's CPUs, and there the loop
 * does better than glibc's memcpy (its AVX-512 variant here, called per 2 KiB piece).
 * bench/msgsize, both processes pinned, SMC_COPY=auto, 8 alternated runs each, GB/s
 * glibc -> loop: 64 KiB RMB, 16 KiB messages 8.8-10.0 -> 9.3-10.4; 128 KiB RMB, 64 KiB
 * messages 8.4-9.8 -> 9.7-11.6, 117964 B 9.1-9.7 -> 10.5-11.2; 1 KiB messages +5%;
 * 1 MiB RMB with 256 KiB and 4 MiB messages the same. sockperf tp (64000 B, 1 MiB RMB,
 * pinned, 16 alternated 2 s runs): mean 12.4 -> 12.8 on near CPUs, 11.2 -> 12.7 in a
 * stretch on far-apart ones. The loop never meets glibc's 4K-aliasing slowdown either
 * (destination 0-255 bytes above the source modulo 4 KiB: 2/3 of its speed), which the
 * sweep's 131072-byte and larger messages hit against page-aligned rings. A 128-byte
 * loop, a 32-byte AVX2 loop and aligned stores (a head block first) did no better.
 */
static void ring_memcpy(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t done = ring_copy_blocks(d, s, len, false);

	if (len > done)
		ring_libc_memcpy(d + done, s + done, len - done);
}
#else
/*
 * Bulk copies in pieces of at most RING_COPY_PIECE bytes. glibc's memcpy switches to
 * `rep movsb` above a few KiB, and on this project's AMD EPYC VMs that path runs at a
 * fraction of the vector loop's speed when source and destination are not mutually
 * aligned: a 64 KiB-RMB stream of 117964-byte messages moved 4.0 GB/s through
 * `rep movsb` and 20 GB/s with it disabled (GLIBC_TUNABLES
 * glibc.cpu.x86_rep_movsb_threshold=1048576). Pieces below the threshold always take
 * the vector loop. (x86-64 builds use the loop above instead; this path is the
 * portable one.)
 */
#define RING_COPY_PIECE 2048

static void ring_memcpy(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	while (len > 0) {
		size_t n = len < RING_COPY_PIECE ? len : RING_COPY_PIECE;

		ring_libc_memcpy(d, s, n);
		d += n;
		s += n;
		len -= n;
	}
}
#endif

#if defined(__x86_64__)
/* Non-temporal stores of whole 64-byte lines: the lines go to memory without being
 * read into this CPU's cache first (no read-for-ownership from the reader's cache).
 * The partial lines at either end take the cached path. SSE2 is part of x86-64. */
static void ring_memcpy_stream(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head = (64 - ((uintptr_t)d & 63)) & 63, done;

	if (len < 64 + head) {
		ring_memcpy(d, s, len);
		return;
	}
	ring_memcpy(d, s, head);
	d += head;
	s += head;
	len -= head;
	done = ring_copy_blocks(d, s, len, true);
	ring_memcpy(d + done, s + done, len - done);
}

void ring_stream_fence(void)
{
	_mm_sfence();
}
#else
static void ring_memcpy_stream(void *dst, const void *src, size_t len)
{
	ring_memcpy(dst, src, len);
}

void ring_stream_fence(void)
{
}
#endif

/* Copy into the ring at offset `off`; returns the offset after the copy. */
static uint32_t copy_in_at(uint8_t *ring, uint32_t size, uint32_t off, const uint8_t *src,
			   size_t len, bool stream)
{
	while (len > 0) {
		size_t chunk = size - off;

		if (chunk > len)
			chunk = len;
		if (stream)
			ring_memcpy_stream(ring + off, src, chunk);
		else
			ring_memcpy(ring + off, src, chunk);
		src += chunk;
		len -= chunk;
		off += (uint32_t)chunk;
		if (off == size)
			off = 0;
	}
	return off;
}

static uint32_t copy_out_at(const uint8_t *ring, uint32_t size, uint32_t off, uint8_t *dst,
			    size_t len)
{
	while (len > 0) {
		size_t chunk = size - off;

		if (chunk > len)
			chunk = len;
		ring_memcpy(dst, ring + off, chunk);
		dst += chunk;
		len -= chunk;
		off += (uint32_t)chunk;
		if (off == size)
			off = 0;
	}
	return off;
}

/* cursor_add for a size_t length (len may exceed the ring in defensive paths). */
static smc_cursor cursor_add_len(smc_cursor at, size_t len, uint32_t size)
{
	while (len > size) {
		at = cursor_add(at, size, size);
		len -= size;
	}
	return cursor_add(at, (uint32_t)len, size);
}

smc_cursor ring_copy_in(uint8_t *ring, uint32_t size, smc_cursor at, const void *src,
			size_t len)
{
	if (size == 0 || len == 0)
		return at;
	copy_in_at(ring, size, ring_offset(at, size), src, len, false);
	return cursor_add_len(at, len, size);
}

smc_cursor ring_copy_out(const uint8_t *ring, uint32_t size, smc_cursor at, void *dst,
			 size_t len)
{
	if (size == 0 || len == 0)
		return at;
	copy_out_at(ring, size, ring_offset(at, size), dst, len);
	return cursor_add_len(at, len, size);
}

/*
 * Walks the iovec array: skips `skip` bytes, then hands out segments until `len`
 * bytes are covered or the array ends. Zero-length entries are stepped over.
 */
struct iov_walk {
	const struct iovec *iov;
	int left;          /* entries not yet consumed, including the current one */
	size_t in_cur;     /* bytes already used from the current entry */
};

static void iov_walk_init(struct iov_walk *w, const struct iovec *iov, int iovcnt, size_t skip)
{
	w->iov = iov;
	w->left = iovcnt > 0 ? iovcnt : 0;
	w->in_cur = 0;
	while (w->left > 0 && skip >= w->iov->iov_len) {
		skip -= w->iov->iov_len;
		w->iov++;
		w->left--;
	}
	if (w->left > 0)
		w->in_cur = skip;
}

/* Next segment of at most `max` bytes; returns its length (0 at the end). */
static size_t iov_walk_next(struct iov_walk *w, size_t max, uint8_t **base)
{
	while (w->left > 0 && w->in_cur == w->iov->iov_len) {
		w->iov++;
		w->left--;
		w->in_cur = 0;
	}
	if (w->left == 0 || max == 0)
		return 0;
	size_t n = w->iov->iov_len - w->in_cur;

	if (n > max)
		n = max;
	*base = (uint8_t *)w->iov->iov_base + w->in_cur;
	w->in_cur += n;
	return n;
}

size_t ring_copy_in_iov(uint8_t *ring, uint32_t size, smc_cursor at,
			const struct iovec *iov, int iovcnt, size_t skip, size_t len, bool stream)
{
	struct iov_walk w;
	size_t done = 0, n;
	uint8_t *seg;

	if (size == 0)
		return 0;
	uint32_t off = ring_offset(at, size);

	iov_walk_init(&w, iov, iovcnt, skip);
	while ((n = iov_walk_next(&w, len - done, &seg)) > 0) {
		off = copy_in_at(ring, size, off, seg, n, stream);
		done += n;
	}
	return done;
}

size_t ring_copy_out_iov(const uint8_t *ring, uint32_t size, smc_cursor at,
			 const struct iovec *iov, int iovcnt, size_t skip, size_t len)
{
	struct iov_walk w;
	size_t done = 0, n;
	uint8_t *seg;

	if (size == 0)
		return 0;
	uint32_t off = ring_offset(at, size);

	iov_walk_init(&w, iov, iovcnt, skip);
	while ((n = iov_walk_next(&w, len - done, &seg)) > 0) {
		off = copy_out_at(ring, size, off, seg, n);
		done += n;
	}
	return done;
}

int iov_tail(const struct iovec *iov, int iovcnt, size_t skip, struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < iovcnt; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		out[n].iov_base = (char *)iov[i].iov_base + skip;
		out[n].iov_len = iov[i].iov_len - skip;
		skip = 0;
		n++;
	}
	return n;
}
