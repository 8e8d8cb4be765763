/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * RLIMIT_FSIZE: a write or a truncate that would take a regular file past it fails with
 * EFBIG and raises SIGXFSZ, whose default action kills the process. OpenSSH's
 * privilege-separated child sets the limit to 0 before its sandbox; any program may set
 * one. The library's own files (SMC_LOG_FILE, SMC_STATS_FILE, the one-shot history) are
 * written only as far as the limit allows: what would not fit is not written.
 */
#ifndef SMC_FSIZE_H
#define SMC_FSIZE_H

#include <stdbool.h>
#include <stdint.h>

/* Whether a regular file may reach `end` bytes under the process's RLIMIT_FSIZE. */
bool fsize_allows(uint64_t end);
/* The same for len more bytes at the end of fd; true for what is not a regular file
 * (a pipe, a terminal: no size to pass). */
bool fsize_allows_append(int fd, uint64_t len);

#endif
