/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Random values, from the kernel's source (getrandom). Two kinds:
 *  - secrets (handshake tokens and keys, RMB tokens: values a peer or another local
 *    process must not guess): fail closed. When the kernel's source fails there is no
 *    weak substitute; the caller leaves that connection on TCP (or declines) instead.
 *  - values that only have to differ (a cookie no application will use by chance, a
 *    per-process identity, a start sequence number): tolerate a weak value made of the
 *    clock, the pid and an address when the source fails. A caller says so by its call.
 */
#ifndef SMC_RANDOM_H
#define SMC_RANDOM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* len secret bytes into buf: 0, or -errno when the source failed (buf is then
 * unusable). */
int random_secret(void *buf, size_t len);
/* A 64-bit secret, never 0; 0 when the source failed. */
uint64_t random_secret64(void);
/* 64 bits that need not be secret, never 0: the source's, else a weak value. */
uint64_t random_weak64(void);

/* Test seam: the source, getrandom(2)'s contract; NULL restores getrandom. */
typedef ssize_t (*random_source_fn)(void *buf, size_t len, unsigned int flags);
void random_set_source(random_source_fn fn);

#endif
