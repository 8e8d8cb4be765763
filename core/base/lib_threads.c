/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The library's threads, and the program's end without them: see lib_threads.h. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

void lib_threads_atfork_child(void)
{
	memset(tids, 0, sizeof(tids));
}

static bool is_lib_thread(pid_t tid)
{
	for (int i = 0; i < LIB_THREADS_MAX; i++)
		if (__atomic_load_n(&tids[i], __ATOMIC_ACQUIRE) == tid)
			return true;
	return false;
}

/* A thread's state letter from /proc/self/task/TID/stat, and with code, its exit code
 * (field 52, wait(2)'s form); '?' when unreadable. */
static char task_state(pid_t tid, int *code)
{
	char path[64], buf[1024];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	fd = REAL(open)(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	/* the name in parentheses may hold anything: the fields start after the last ')' */
	char *p = strrchr(buf, ')');

	if (!p || p[1] != ' ' || !p[2])
		return '?';
	p += 2;
	char state = *p;

	if (code) {
		/* state is field 3: field 52 is 49 fields further */
		for (int f = 3; f < 52 && p; f++) {
			p = strchr(p, ' ');
			if (p)
				p++;
		}
		*code = p ? atoi(p) : 0;
	}
	return state;
}

static bool ended(char state)
{
	return state == 'Z' || state == 'X' || state == '?';
}

bool lib_threads_program_gone(int *status)
{
	pid_t pid = getpid();
	bool alive = false;
	struct dirent *e;
	DIR *d;

	if (!ended(task_state(pid, NULL)))
		return false; /* the common case: one read a second */
	d = opendir("/proc/self/task");
	if (!d)
		return false;
	while (!alive && (e = readdir(d)) != NULL) {
		pid_t tid = (pid_t)atoi(e->d_name);

		if (tid > 0 && tid != pid && !is_lib_thread(tid) && !ended(task_state(tid, NULL)))
			alive = true;
	}
	closedir(d);
	if (alive)
		return false;
	*status = 0;
	return task_state(pid, status) != '?';
}
