/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * RMB ring arithmetic with RFC 7609 cursors. Pure code: no I/O, no allocation.
 *
 * A cursor is RFC 7609's (wrap sequence number, count) pair: count is the byte offset
 * in the ring, in [0, size); wrap counts how often count has wrapped, modulo 2^16.
 * Packed in a uint64_t so it can be published with one atomic store:
 *   bits 0..31 count, bits 32..47 wrap, bits 48..63 zero.
 * The producer cursor says how far the writer has filled the ring, the consumer cursor
 * how far the reader has emptied it; used = prod - cons, free = size - used.
 */
#ifndef SMC_RING_H
#define SMC_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef uint64_t smc_cursor;

static inline smc_cursor cursor_make(uint16_t wrap, uint32_t count)
{
	return ((uint64_t)wrap << 32) | count;
}
static inline uint32_t cursor_count(smc_cursor c) { return (uint32_t)c; }
static inline uint16_t cursor_wrap(smc_cursor c) { return (uint16_t)(c >> 32); }

/* True when c is a possible cursor for a ring of `size` bytes. */
bool cursor_valid(smc_cursor c, uint32_t size);
/* c advanced by n bytes (n <= size) in a ring of `size` bytes. */
smc_cursor cursor_add(smc_cursor c, uint32_t n, uint32_t size);
/* Bytes from `older` to `newer`, or -1 when `newer` is not within [older, older + size]
 * (a cursor that went backwards, or jumped more than a whole ring). Handles the 16-bit
 * wrap counter wrapping. */
int64_t cursor_diff(smc_cursor newer, smc_cursor older, uint32_t size);

/* Bytes readable / writable between a consistent pair of cursors (-1 if inconsistent). */
int64_t ring_used(smc_cursor prod, smc_cursor cons, uint32_t size);
int64_t ring_free(smc_cursor prod, smc_cursor cons, uint32_t size);

/* Copy len bytes into the ring at cursor `at` (splitting at the end of the ring).
 * len <= size. Returns the cursor after the copy. */
smc_cursor ring_copy_in(uint8_t *ring, uint32_t size, smc_cursor at, const void *src,
			size_t len);
/* Copy len bytes out of the ring from cursor `at`. Returns the cursor after the copy. */
smc_cursor ring_copy_out(const uint8_t *ring, uint32_t size, smc_cursor at, void *dst,
			 size_t len);
/* Gather/scatter forms: copy up to len bytes from/to the iovec array, starting `skip`
 * bytes into it. Return the number of bytes copied (min(len, iov bytes - skip)).
 * `stream`: write whole cache lines with non-temporal stores (x86-64; elsewhere the
 * same as false); the caller must ring_stream_fence() before publishing the cursor. */
size_t ring_copy_in_iov(uint8_t *ring, uint32_t size, smc_cursor at,
			const struct iovec *iov, int iovcnt, size_t skip, size_t len, bool stream);
/* Orders earlier non-temporal stores before later stores (sfence on x86-64). */
void ring_stream_fence(void);
/* The iovecs after their first `skip` bytes, into out (room for iovcnt entries);
 * returns how many. */
int iov_tail(const struct iovec *iov, int iovcnt, size_t skip, struct iovec *out);
size_t ring_copy_out_iov(const uint8_t *ring, uint32_t size, smc_cursor at,
			 const struct iovec *iov, int iovcnt, size_t skip, size_t len);

#endif
