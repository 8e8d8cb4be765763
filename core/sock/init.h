/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef SMC_INIT_H
#define SMC_INIT_H
#include <stdbool.h>
/* Loads configuration, logging, stats-at-exit (core/base/base_init.h) and fork handlers;
 * idempotent, thread safe, cheap after the first call. A process that never creates a
 * TCP socket starts no thread and maps nothing. */
void smc_init(void);
/* True when connections may be upgraded to shared memory (SMC_TRANSPORT auto or shm). */
bool smc_enabled(void);
/* The process is about to confine itself (chroot, pivot_root, a mount namespace,
 * Landlock, a seccomp filter): what the library loads on first need is loaded now,
 * while it can be (core/base/progress.h). */
void smc_before_confinement(void);
/* The process is about to load a seccomp filter: the above, and its listeners stop
 * announcing SMC (core/sock/sandbox_entry.c). */
void smc_before_seccomp(void);
/* Its listeners stop announcing SMC: out of the TCP option, rendezvous names shut,
 * pools retired; `before` names the event for the log. */
void smc_sock_listeners_shut(const char *before);
/* A thread is about to take a descriptor table of its own (core/sock/table_split.c):
 * true when the library's work for the process ends with it; smc_table_split(that)
 * once the split succeeded. */
bool smc_before_table_split(void);
void smc_table_split(bool prepared);
/* A new process that libc's fork() does not make, so neither the fork() wrapper nor
 * the pthread_atfork handlers see it: glibc's clone() and the raw clone and clone3
 * system calls without CLONE_VM (preload/process.c, preload/syscall.c). It gets what
 * fork() gets, in the same order: smc_clone_prepare before the call, in the calling
 * thread; smc_clone_parent after it in the parent (failed: no child was made);
 * smc_clone_child in the child before anything else it runs. */
void smc_clone_prepare(void);
void smc_clone_parent(bool failed);
void smc_clone_child(void);
#endif
