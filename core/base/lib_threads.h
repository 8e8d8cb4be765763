/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's own threads (the progress thread, smcpstat's server), and whether the
 * program still has a thread of its own.
 *
 * glibc ends a process when its last thread ends: main() calls pthread_exit() and the
 * last of the other threads to finish calls exit(0); a seccomp filter's
 * SECCOMP_RET_KILL_THREAD (SECCOMP_RET_KILL, OpenSSH's choice) on a program's only
 * thread ends it with SIGSYS. The library's threads count among glibc's and the
 * kernel's, and block every signal: such a process would live on, and no signal but
 * SIGKILL would end it. The progress thread looks once a second (progress.c) and ends
 * the process as its main thread's end would have.
 */
#ifndef SMC_LIB_THREADS_H
#define SMC_LIB_THREADS_H

#include <stdbool.h>

/* First thing in a thread of the library's, and before it returns. */
void lib_thread_enter(void);
void lib_thread_leave(void);
/* The files the check reads, opened by the thread that starts the progress thread. */
void lib_threads_watch_open(void);
/* A fork's child has none of them. */
void lib_threads_atfork_child(void);
/* True when the main thread has ended and no thread but the library's is left, with
 * *status the main thread's end in wait(2)'s form (0 after pthread_exit()). */
bool lib_threads_program_gone(int *status);
/* Whether the calling thread is the process's only one, the library's counted
 * (/proc/self/status; false when it cannot be read). */
bool lib_threads_caller_alone(void);

#endif
