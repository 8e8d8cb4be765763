/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libevent's own descriptors (its epoll set, signal pipe, notification eventfd), made
 * where the library keeps its own (fdpark.h) rather than at the lowest free numbers,
 * which programs count on.
 *
 * libevent is loaded privately (evlib.h: RTLD_DEEPBIND), so its calls to epoll_create1,
 * eventfd, pipe2, socketpair... go straight to libc, past our wrappers. Once it is
 * loaded, the slots of those functions in its GOT (the table its calls go through) are
 * pointed at functions of ours that make the descriptor with the function the slot held
 * and, when the library's own code calls (smc_thread_internal), park it (fd_park_low)
 * and note it. Called from the program (a program that dlopen()s the same libevent
 * later finds our copy), they are libc's functions, untouched.
 *
 * The same redirection lets libevent's descriptors move when the program takes their
 * number with dup2/dup3 (evlib_fds_move): libevent keys everything by number.
 *
 * Without the redirection (a libevent the program had loaded first, which is the
 * program's to use; an object layout this code does not know) the progress thread's
 * start fills the numbers below 1024 instead (fd_low_fill), which costs ~0.4 ms and
 * works only while the process has one thread.
 */
#ifndef SMC_EVLIB_FDS_H
#define SMC_EVLIB_FDS_H

#include <stdbool.h>
#include <stddef.h>

/* Points libevent's descriptor-making calls at ours. handle: dlopen()'s handle of
 * libevent_core. true when every slot found was redirected (none found is false). */
bool evlib_fds_redirect(void *handle);
/* Whether evlib_fds_redirect succeeded. */
bool evlib_fds_redirected(void);
/* Around a call into libevent that makes its descriptors (event_base_new), with
 * smc_thread_internal set: begin forgets the noted ones, end copies those made since
 * into out[0..max) and returns how many. Under the caller's lock (one at a time). */
void evlib_fds_begin(void);
size_t evlib_fds_end(int *out, size_t max);
/* The program is putting its own file on number `from`, one of libevent's: libevent's
 * calls on `from` go to `to` (a descriptor of the file `from` named) from now on. Its
 * close, epoll_ctl, epoll_wait, read, write and fcntl slots are redirected for this.
 * 0, or -1 when redirection is off or the table is full. Under progress's lock. */
int evlib_fds_move(int from, int to);
/* A fork's child starts a new base: the moves were the parent's. */
void evlib_fds_moves_forget(void);

#endif
