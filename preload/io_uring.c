/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * liburing's exported ring setup functions. liburing issues its system calls with
 * inline instructions (Debian's liburing2 2.3 imports no libc system call wrapper), so
 * the ring's creation is seen here, at the library's exported entry points, or not at
 * all. Each calls liburing's own function and, when a ring was made, keeps every later
 * connection on TCP (core/base/io_uring_watch.h). Submissions and completions are not
 * interposed: nothing about them can be seen. A program linked with a static liburing
 * never passes through here.
 */
#include "preload/wrap.h"

#include <dlfcn.h>
#include <stddef.h>

#include "core/sock/sock.h" /* io_uring_note_setup */

struct io_uring;
struct io_uring_params;

int io_uring_setup(unsigned int entries, struct io_uring_params *p);
int io_uring_queue_init(unsigned int entries, struct io_uring *ring, unsigned int flags);
int io_uring_queue_init_params(unsigned int entries, struct io_uring *ring,
			       struct io_uring_params *p);
int io_uring_queue_init_mem(unsigned int entries, struct io_uring *ring,
			    struct io_uring_params *p, void *buf, size_t buf_size);

/* liburing's definition of name (resolved at each call: liburing may be dlopen()ed
 * after us), or NULL when no later object defines it. */
#define LIBURING_FN(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

/* liburing's results: >= 0 on success, -errno on failure. */
static int noted(int ret)
{
	if (ret >= 0)
		io_uring_note_setup();
	return ret;
}

SMC_EXPORT int io_uring_setup(unsigned int entries, struct io_uring_params *p)
{
	__typeof__(&io_uring_setup) real = LIBURING_FN(io_uring_setup);
	return real ? noted(real(entries, p)) : -ENOSYS;
}

SMC_EXPORT int io_uring_queue_init(unsigned int entries, struct io_uring *ring, unsigned int flags)
{
	__typeof__(&io_uring_queue_init) real = LIBURING_FN(io_uring_queue_init);
	return real ? noted(real(entries, ring, flags)) : -ENOSYS;
}

SMC_EXPORT int io_uring_queue_init_params(unsigned int entries, struct io_uring *ring,
					  struct io_uring_params *p)
{
	__typeof__(&io_uring_queue_init_params) real = LIBURING_FN(io_uring_queue_init_params);
	return real ? noted(real(entries, ring, p)) : -ENOSYS;
}

SMC_EXPORT int io_uring_queue_init_mem(unsigned int entries, struct io_uring *ring,
				       struct io_uring_params *p, void *buf, size_t buf_size)
{
	__typeof__(&io_uring_queue_init_mem) real = LIBURING_FN(io_uring_queue_init_mem);
	return real ? noted(real(entries, ring, p, buf, buf_size)) : -ENOSYS;
}
