/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Wrappers for calls that make a descriptor the library never tracks: open, openat
 * (and their 64 names), pipe, pipe2. They go straight to libc; only when one fails
 * with EMFILE while the library holds descriptors of its own is it made once more
 * after the library gave some back (core/sock/fd_pressure.c): a server at its limit
 * (nginx opening the file a request names) has the room it has without the library.
 */
#include "preload/wrap.h"

#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>
#include <unistd.h>

/* The mode argument is there only when the flags create a file (open(2)). */
#define OPEN_MODE(flags, mode) \
	do { \
		if (__OPEN_NEEDS_MODE(flags)) { \
			va_list ap_; \
			va_start(ap_, flags); \
			mode = va_arg(ap_, mode_t); \
			va_end(ap_); \
		} \
	} while (0)

SMC_EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	OPEN_MODE(flags, mode);
	return FD_MAKING_CALL(REAL(open)(path, flags, mode));
}

SMC_EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;

	OPEN_MODE(flags, mode);
	return FD_MAKING_CALL(CALL_REAL(open64, path, flags, mode));
}

SMC_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	OPEN_MODE(flags, mode);
	return FD_MAKING_CALL(REAL(openat)(dirfd, path, flags, mode));
}

SMC_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	OPEN_MODE(flags, mode);
	return FD_MAKING_CALL(CALL_REAL(openat64, dirfd, path, flags, mode));
}

SMC_EXPORT int pipe(int fds[2])
{
	return FD_MAKING_CALL(REAL(pipe)(fds));
}

SMC_EXPORT int pipe2(int fds[2], int flags)
{
	return FD_MAKING_CALL(REAL(pipe2)(fds, flags));
}
