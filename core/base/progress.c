/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The progress thread itself (progress.h): its start, the calls other threads hand it,
 * plain fd and timer watches, and fork. What it runs lives with its owners:
 * core/negotiate/progress_client.c (client handshakes), progress_server.c (server
 * handshakes) and progress_ib.c (SMC-R links); core/conn/conn_watch.c has the
 * descriptors a handshake is watched through.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/base/evlib.h"
#include "core/base/evlib_fds.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/lib_threads.h"
#include "core/base/log.h"
#include "core/base/progress.h"
#include "core/base/progress_ev.h"
#include "core/base/real.h"

static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
/* What event_base_new keeps (libevent 2.1, epoll backend, threads enabled): the epoll
 * set, the signal pipe's two ends and the notification eventfd. */
#define PROGRESS_BASE_FDS 4u
static struct event_base *progress_base;
/* its fds, marked the library's (fdpark.h): a program closing all its fds keeps them */
static int progress_base_fd[PROGRESS_BASE_FDS + 2];
static size_t progress_nbase_fds;
static pthread_t progress_thread;
static pid_t progress_pid;

struct event_base *progress_thread_base(void)
{
	return progress_base;
}

/* How often the thread looks whether the program has a thread left (lib_threads.h). */
#define PROGRAM_CHECK_S 1

/* The program's threads are all gone: the process ends as it would have without the
 * library's threads. A main thread killed by a signal: that signal. One that called
 * pthread_exit() (glibc ends it with status 0): glibc's exit(0) after the last thread,
 * atexit handlers and stdio flushed. One that ended with a raw exit system call
 * (status not 0): glibc never counted it out, so it calls no exit(), and the process
 * ends with its last thread's status, a glibc thread's 0. (A last thread that itself
 * ended with a raw exit(n) would have given n: not seen from here.) */
static void program_gone_check(evutil_socket_t fd, short what, void *arg)
{
	int status;

	(void)fd;
	(void)what;
	(void)arg;
	if (!lib_threads_program_gone(&status))
		return;
	log_debug("the program's threads have all ended: the process ends (status %#x)", status);
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		sigset_t one;

		signal(sig, SIG_DFL);
		sigemptyset(&one);
		sigaddset(&one, sig);
		pthread_sigmask(SIG_UNBLOCK, &one, NULL);
		raise(sig);
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		exit(0);
	_exit(0);
}

static void *progress_main(void *arg)
{
	static const struct timeval every = { PROGRAM_CHECK_S, 0 };
	struct event_base *base = arg;
	struct event *check;

	forklock_thread_started();
	lib_thread_enter();
	smc_thread_internal = true;
	check = event_new(base, -1, EV_PERSIST, program_gone_check, NULL);
	if (check)
		event_add(check, &every);
	event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

/* libevent's warnings (an fd the application closed before we registered it) belong in
 * our log, not on the application's stderr. */
static void progress_libevent_log(int severity, const char *msg)
{
	log_debug("libevent (%d): %s", severity, msg);
}

/* fdpark's notice that the program is about to dup2/dup3 onto fd (fd_own_taken):
 * when fd is one of the base's, its file moves to another number, which libevent's
 * calls on fd reach from then on (evlib_fds_move). Without the redirection the number
 * is lost to the base, as it would be to any library the program overwrote. */
static void progress_fd_taken(int fd)
{
	pthread_mutex_lock(&progress_lock);
	for (size_t i = 0; progress_pid == getpid() && i < progress_nbase_fds; i++) {
		if (progress_base_fd[i] != fd)
			continue;
		int to = fd_park_low(REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0));

		if (to >= 0 && evlib_fds_move(fd, to) == 0) {
			progress_base_fd[i] = to;
			log_info("fd %d: the background thread's descriptor moved to %d", fd, to);
		} else {
			if (to >= 0)
				fd_own_close(to);
			log_warn("fd %d: the background thread's descriptor is lost: its "
				 "handshakes and watches may stall", fd);
		}
		break;
	}
	pthread_mutex_unlock(&progress_lock);
}

struct event_base *progress_start(void)
{
	static bool threads_ready;
	struct event_base *base;
	sigset_t all, old;

	pthread_mutex_lock(&progress_lock);
	if (progress_base && progress_pid == getpid()) {
		base = progress_base;
		goto out;
	}
	if (evlib_load() < 0) {
		base = NULL;
		goto out;
	}
	if (!threads_ready) {
		fd_own_taken_notify(progress_fd_taken);
		event_set_log_callback(progress_libevent_log);
		evthread_use_pthreads();
		threads_ready = true;
	}
	/* without the redirection (evlib_fds.h) libevent, loaded privately, makes its fds
	 * without our wrappers: found by what appeared meanwhile (2.1: epoll set,
	 * notification eventfd, signal pipe or socketpair; a timerfd with a precise timer) */
	static const struct fd_own_expect base_fds = {
		.eventpoll = 1, .eventfd = 1, .timerfd = 1, .pipe = 2, .socket = 2,
	};
	struct fd_own_snapshot snap;
	int fds[PROGRESS_BASE_FDS + 2];
	size_t nfds;

	int *fill;
	size_t nfill;

	if (evlib_fds_redirected()) {
		/* its descriptors are parked as it makes them (evlib_fds.h) */
		evlib_fds_begin();
		smc_thread_internal = true;
		base = event_base_new();
		smc_thread_internal = false;
		nfds = evlib_fds_end(fds, PROGRESS_BASE_FDS + 2);
		for (size_t i = 0; !base && i < nfds; i++)
			fd_own_forget(fds[i]); /* a failed start closed them */
	} else {
		fd_own_snapshot(&snap);
		/* above the numbers programs pick themselves (fdpark.h) */
		nfill = fd_low_fill(&fill);
		smc_thread_internal = true;
		base = event_base_new();
		smc_thread_internal = false;
		fd_low_unfill(fill, nfill);
		nfds = fd_own_adopt(&snap, &base_fds, fds, base ? PROGRESS_BASE_FDS + 2 : 0);
	}
	if (!base)
		goto out;
	fd_budget_take(PROGRESS_BASE_FDS);
	lib_threads_watch_open();
	/* The thread must never take the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&progress_thread, NULL, progress_main, base) != 0) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		for (size_t i = 0; i < nfds; i++)
			fd_own_forget(fds[i]); /* libevent closes them */
		event_base_free(base);
		fd_budget_give(PROGRESS_BASE_FDS);
		base = NULL;
		goto out;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	forklock_thread_created();
	pthread_detach(progress_thread);
	progress_base = base;
	memcpy(progress_base_fd, fds, nfds * sizeof(*fds));
	progress_nbase_fds = nfds;
	__atomic_store_n(&progress_pid, getpid(), __ATOMIC_RELEASE);
	log_debug("progress thread started");
out:
	pthread_mutex_unlock(&progress_lock);
	return base;
}

void progress_load(void)
{
	(void)evlib_load();
}

bool progress_running(void)
{
	return __atomic_load_n(&progress_pid, __ATOMIC_ACQUIRE) == getpid();
}

int progress_ensure(void)
{
	if (__atomic_load_n(&progress_pid, __ATOMIC_ACQUIRE) == getpid())
		return 0;
	return progress_start() ? 0 : -ENOMEM;
}

/* Runs fn(arg) on the progress thread as soon as it can (registration callbacks create
 * their events there). 0, or -ENOMEM when the thread or the call could not be had. */
int progress_call_after(event_callback_fn fn, void *arg, unsigned ms)
{
	struct event_base *base = progress_start();
	struct timeval now = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
	bool internal = smc_thread_internal; /* set for good on the progress thread */
	int r;

	if (!base)
		return -ENOMEM;
	/* libevent may touch its epoll set right here, in the application's thread: those
	 * calls must reach the kernel, not our emulation. */
	smc_thread_internal = true;
	r = event_base_once(base, -1, EV_TIMEOUT, fn, arg, &now);
	smc_thread_internal = internal;
	return r < 0 ? -ENOMEM : 0;
}

int progress_call(event_callback_fn fn, void *arg)
{
	return progress_call_after(fn, arg, 0);
}

/* ------------------------------------------------------------ readable fds */

struct fd_watch {
	int fd;
	short what;           /* EV_READ or EV_WRITE */
	struct timeval retry; /* the longest wait, or none (0) */
	void (*cb)(void *arg);
	void *arg;
	struct event *ev;
};

static void on_fd_watch(evutil_socket_t fd, short what, void *arg)
{
	struct fd_watch *w = arg;

	(void)fd;
	(void)what;
	event_free(w->ev);
	w->cb(w->arg);
	free(w);
}

static void fd_watch_register(evutil_socket_t fd, short what, void *arg)
{
	struct fd_watch *w = arg;

	(void)fd;
	(void)what;
	w->ev = event_new(progress_base, w->fd, w->what, on_fd_watch, w);
	if (!w->ev || event_add(w->ev, w->retry.tv_sec || w->retry.tv_usec ? &w->retry : NULL) < 0) {
		if (w->ev)
			event_free(w->ev);
		w->cb(w->arg); /* as if it had become ready: the owner looks now */
		free(w);
	}
}

static int fd_watch_start(int fd, short what, unsigned retry_ms, void (*cb)(void *arg),
			  void *arg)
{
	struct fd_watch *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->what = what;
	w->retry.tv_sec = retry_ms / 1000;
	w->retry.tv_usec = (retry_ms % 1000) * 1000;
	w->cb = cb;
	w->arg = arg;
	if (progress_call(fd_watch_register, w) < 0) {
		free(w);
		return -ENOMEM;
	}
	return 0;
}

int progress_watch_readable(int fd, void (*cb)(void *arg), void *arg)
{
	return fd_watch_start(fd, EV_READ, 0, cb, arg);
}

int progress_watch_writable(int fd, unsigned retry_ms, void (*cb)(void *arg), void *arg)
{
	return fd_watch_start(fd, EV_WRITE, retry_ms, cb, arg);
}

struct timer_call {
	void (*cb)(void *arg);
	void *arg;
};

static void on_timer_call(evutil_socket_t fd, short what, void *arg)
{
	struct timer_call t = *(struct timer_call *)arg;

	(void)fd;
	(void)what;
	free(arg);
	t.cb(t.arg);
}

int progress_after(unsigned ms, void (*cb)(void *arg), void *arg)
{
	struct timer_call *t = malloc(sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->cb = cb;
	t->arg = arg;
	if (progress_call_after(on_timer_call, t, ms) < 0) {
		free(t);
		return -ENOMEM;
	}
	return 0;
}

/* Held while a base and its thread start. ib_watch_lock is not taken: the child drops
 * everything it guards (below). */
bool progress_fork_lock(void)
{
	return forklock_take(&progress_lock) != FORKLOCK_BUSY;
}

void progress_atfork_child(void)
{
	/* The thread is gone; its base may be mid-operation in the parent's image, its
	 * locks held: nothing here touches it again (no event of it is reachable from
	 * what the child keeps), a fresh one starts on next need. */
	progress_base = NULL;
	progress_pid = 0;
	lib_threads_atfork_child();
	/* nor its fds, which would only hold numbers the child's program may want */
	for (size_t i = 0; i < progress_nbase_fds; i++)
		fd_own_close(progress_base_fd[i]);
	progress_nbase_fds = 0;
	evlib_fds_moves_forget();
}
