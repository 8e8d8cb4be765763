/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The library's threads, and the program's end without them: see lib_threads.h. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/lib_threads.h"
#include "core/base/real.h"

#define LIB_THREADS_MAX 8
static pid_t tids[LIB_THREADS_MAX]; /* 0: free */

void lib_thread_enter(void)
{
	pid_t self = gettid();

	for (int i = 0; i < LIB_THREADS_MAX; i++) {
		pid_t free_slot = 0;

		if (__atomic_compare_exchange_n(&tids[i], &free_slot, self, false,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return;
	}
	/* more than the table holds: that thread counts as the program's, which only keeps
	 * the process alive as before */
}

void lib_thread_leave(void)
{
	pid_t self = gettid();

	for (int i = 0; i < LIB_THREADS_MAX; i++)
		if (__atomic_load_n(&tids[i], __ATOMIC_ACQUIRE) == self)
			__atomic_store_n(&tids[i], 0, __ATOMIC_RELEASE);
}

/*
 * The main thread's stat and the process's status are read through descriptors opened
 * once, when the progress thread starts (in the thread that starts it), and parked: a
 * file the progress thread opened every second would take the lowest free number for a
 * moment, the one a program's thread just closed and may be polling, or counts on
 * getting back at its next open() (a daemon's close(0) then open("/dev/null")). A
 * proc file read again from offset 0 is generated again.
 */
static int main_stat_fd = -1, status_fd = -1;

static int open_parked(const char *path)
{
	int fd = REAL(open)(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	fd = fd_park(fd);
	if (fd >= 0)
		fd_budget_take(1);
	return fd;
}

static void close_parked(int *fd)
{
	if (*fd < 0)
		return;
	fd_own_close(*fd);
	fd_budget_give(1);
	*fd = -1;
}

void lib_threads_watch_open(void)
{
	char path[64];

	if (main_stat_fd < 0) {
		snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)getpid());
		main_stat_fd = open_parked(path);
	}
	if (status_fd < 0)
		status_fd = open_parked("/proc/self/status");
}

void lib_threads_atfork_child(void)
{
	memset(tids, 0, sizeof(tids));
	/* the parent's task and status: the child's progress thread opens its own */
	close_parked(&main_stat_fd);
	close_parked(&status_fd);
}

/* fd's content from its start, NUL-terminated; the length, or -1. */
static ssize_t read_all(int fd, char *buf, size_t size)
{
	ssize_t n;

	if (fd < 0)
		return -1;
	n = pread(fd, buf, size - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* The main thread's state letter (its stat file, field 3) and its exit code (field 52,
 * wait(2)'s form); '?' when it cannot be read, or the descriptor no longer names that
 * file (the program dup2'ed its own onto the number: fd_own_taken). */
static char main_state(int *code)
{
	char buf[1024], *p;
	int pid = 0;

	if (read_all(main_stat_fd, buf, sizeof(buf)) < 0 || sscanf(buf, "%d (", &pid) != 1 ||
	    pid != (int)getpid())
		return '?';
	/* the name in parentheses may hold anything: the fields start after the last ')' */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return '?';
	p += 2;
	char state = *p;

	/* state is field 3: field 52 is 49 fields further */
	for (int f = 3; f < 52 && p; f++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	*code = p ? atoi(p) : 0;
	return state;
}

/* The process's thread count (status "Threads:"), the ended main thread included while
 * others live (it stays a zombie until the last one ends); -1 when unreadable. */
/* The Threads: line of a read of /proc/self/status; -1 when it has none. */
static int status_threads(const char *buf)
{
	const char *t = strstr(buf, "\nThreads:");
	int n = -1;

	if (!t || sscanf(t, "\nThreads: %d", &n) != 1)
		return -1;
	return n;
}

static int thread_count(void)
{
	char buf[4096], *t;
	int tgid = 0;

	if (read_all(status_fd, buf, sizeof(buf)) < 0)
		return -1;
	t = strstr(buf, "\nTgid:");
	if (!t || sscanf(t, "\nTgid: %d", &tgid) != 1 || tgid != (int)getpid())
		return -1;
	return status_threads(buf);
}

/* The library's threads that still run (a registered one ends by lib_thread_leave; one
 * killed by a filter's SECCOMP_RET_KILL_THREAD is no longer found by tgkill). */
static int lib_threads_alive(void)
{
	pid_t pid = getpid();
	int n = 0;

	for (int i = 0; i < LIB_THREADS_MAX; i++) {
		pid_t tid = __atomic_load_n(&tids[i], __ATOMIC_ACQUIRE);

		if (tid && syscall(SYS_tgkill, pid, tid, 0) == 0)
			n++;
	}
	return n;
}

static bool ended(char state)
{
	return state == 'Z' || state == 'X';
}

bool lib_threads_program_gone(int *status)
{
	int threads;

	if (!ended(main_state(status)))
		return false; /* the common case: one read a second */
	threads = thread_count();
	/* the main thread's zombie and the library's: nobody of the program's is left */
	return threads >= 0 && threads == 1 + lib_threads_alive();
}

bool lib_threads_caller_alone(void)
{
	char buf[4096];
	int fd = REAL(open)("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read_all(fd, buf, sizeof(buf));
	REAL(close)(fd);
	return n > 0 && status_threads(buf) == 1;
}
