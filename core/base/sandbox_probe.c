/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A seccomp filter the process inherited: set before the program started (systemd's
 * SystemCallFilter=, a container runtime's profile, bubblewrap), so no wrapper saw it
 * go on (sandbox.h). Its rules cannot be read, and a call it forbids may kill the
 * process with SIGSYS (systemd's default action). So before the library's first call
 * of its own for a connection, the calls it makes are tried in a child that can harm
 * nothing: a clone that shares the memory but not the descriptor table nor the signal
 * handlers, with SIGSYS back to its default, while the calling thread waits for it
 * (CLONE_VFORK). A call the child dies of, or that is refused (EPERM, EACCES, ENOSYS),
 * is one the library must not make: the process is then treated as sandboxed (every
 * new connection plain TCP), or, when only bpf() is refused, just does without the SMC
 * TCP option. Without a filter ("Seccomp: 0" in /proc/self/status) nothing is tried.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"

/* "Seccomp:\t2" in /proc/self/status: a filter is in place. Once (judge), so the
 * buffer is static: the first connect() may run on a 16 KiB thread stack. */
static bool status_says_filtered(void)
{
	static char buf[4096];
	ssize_t n, len = 0;
	int fd = REAL(open)("/proc/self/status", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false; /* no /proc: nothing to go by (a chroot without it) */
	while (len < (ssize_t)sizeof(buf) - 1 &&
	       (n = REAL(read)(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	REAL(close)(fd);
	buf[len] = '\0';
	const char *s = strstr(buf, "\nSeccomp:");
	return s && strtol(s + strlen("\nSeccomp:"), NULL, 10) != 0;
}

/* What a child found. */
struct probe {
	bool bpf;            /* try bpf() alone */
	const char *trying;  /* the call under way: the one a SIGSYS killed the child in */
	const char *refused; /* the first call that was refused */
};

/* A refusal by a filter, as opposed to the call's own answer to its arguments. */
static bool refused(long r)
{
	return r < 0 && (errno == EPERM || errno == EACCES || errno == ENOSYS);
}

#define SYS(...) REAL(syscall)(__VA_ARGS__)
#define TRY(p, name, call) \
	do { \
		(p)->trying = (name); \
		if ((p)->refused == NULL && refused(call)) \
			(p)->refused = (name); \
	} while (0)

/* The kernel's struct sigaction for rt_sigaction (no restorer needed for SIG_DFL). */
struct k_sigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

/* Runs in the child: raw system calls only, on its own stack, writing to *arg (errno
 * is the waiting thread's, which the parent restores). Each call is one the library
 * makes; arguments the kernel rejects once the filter let the call through (a bad
 * descriptor) are enough where no object is needed. */
__attribute__((no_sanitize("address", "undefined")))
static int probe_child(void *arg)
{
	struct probe *p = arg;
	struct k_sigaction dfl = { .handler = SIG_DFL };
	struct timespec zero = { 0, 0 };
	long mfd, efd, ep, u, m;
	int sv[2];

	/* a handler of the program's would run in this child, on the program's memory */
	TRY(p, "rt_sigaction", SYS(SYS_rt_sigaction, SIGSYS, &dfl, NULL, sizeof(dfl.mask)));
	if (p->refused)
		return 1;
	if (p->bpf) {
		TRY(p, "bpf", SYS(SYS_bpf, 1 /* BPF_MAP_LOOKUP_ELEM */, NULL, 0));
		return 0;
	}
	TRY(p, "memfd_create", mfd = SYS(SYS_memfd_create, "smc-probe", MFD_CLOEXEC));
	TRY(p, "ftruncate", SYS(SYS_ftruncate, mfd, 4096));
	TRY(p, "mmap", m = SYS(SYS_mmap, NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0));
	TRY(p, "madvise", SYS(SYS_madvise, m, 4096, MADV_DONTNEED));
	TRY(p, "munmap", SYS(SYS_munmap, m, 4096));
	TRY(p, "eventfd2", efd = SYS(SYS_eventfd2, 0, EFD_CLOEXEC));
	TRY(p, "epoll_create1", ep = SYS(SYS_epoll_create1, EPOLL_CLOEXEC));
	TRY(p, "epoll_ctl", SYS(SYS_epoll_ctl, ep, EPOLL_CTL_DEL, efd, NULL));
	TRY(p, "epoll_pwait", SYS(SYS_epoll_pwait, ep, NULL, 0, 0, NULL, 8));
	TRY(p, "socket", u = SYS(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
	TRY(p, "socket", SYS(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	TRY(p, "bind", SYS(SYS_bind, u, NULL, 0));
	TRY(p, "connect", SYS(SYS_connect, -1, NULL, 0));
	TRY(p, "listen", SYS(SYS_listen, -1, 0));
	TRY(p, "accept4", SYS(SYS_accept4, -1, NULL, NULL, 0));
	TRY(p, "socketpair", SYS(SYS_socketpair, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	TRY(p, "sendmsg", SYS(SYS_sendmsg, -1, NULL, 0));
	TRY(p, "recvmsg", SYS(SYS_recvmsg, -1, NULL, 0));
	TRY(p, "sendto", SYS(SYS_sendto, -1, NULL, 0, 0, NULL, 0));
	TRY(p, "recvfrom", SYS(SYS_recvfrom, -1, NULL, 0, 0, NULL, NULL));
	TRY(p, "getsockopt", SYS(SYS_getsockopt, -1, SOL_SOCKET, SO_TYPE, NULL, NULL));
	TRY(p, "setsockopt", SYS(SYS_setsockopt, -1, SOL_SOCKET, SO_RCVBUF, NULL, 0));
	TRY(p, "getsockname", SYS(SYS_getsockname, -1, NULL, NULL));
	TRY(p, "getpeername", SYS(SYS_getpeername, -1, NULL, NULL));
	TRY(p, "shutdown", SYS(SYS_shutdown, -1, SHUT_RDWR));
	TRY(p, "ioctl", SYS(SYS_ioctl, -1, FIONREAD, NULL));
	TRY(p, "fcntl", SYS(SYS_fcntl, -1, F_GETFD));
	TRY(p, "dup3", SYS(SYS_dup3, -1, -1, 0));
	TRY(p, "ppoll", SYS(SYS_ppoll, NULL, 0, &zero, NULL, 8));
	TRY(p, "pselect6", SYS(SYS_pselect6, 0, NULL, NULL, NULL, &zero, NULL));
	TRY(p, "newfstatat", SYS(SYS_newfstatat, -1, "", NULL, AT_EMPTY_PATH));
	TRY(p, "readlinkat", SYS(SYS_readlinkat, -1, "", NULL, 0));
	TRY(p, "unlinkat", SYS(SYS_unlinkat, -1, "", 0));
	TRY(p, "renameat2", SYS(SYS_renameat2, -1, "", -1, "", 0));
	TRY(p, "mkdirat", SYS(SYS_mkdirat, -1, "", 0700));
	TRY(p, "kill", SYS(SYS_kill, SYS(SYS_getpid), 0));
	TRY(p, "getrandom", SYS(SYS_getrandom, NULL, 0, 0));
	TRY(p, "sched_yield", SYS(SYS_sched_yield));
	/* a thread: glibc tries clone3, and clone when clone3 is ENOSYS */
	p->trying = "clone3";
	if (SYS(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS)
		TRY(p, "clone", SYS(SYS_clone, CLONE_THREAD, NULL, NULL, NULL, 0));
	return 0;
}

/* Runs one probe; the call refused or died of, or NULL. */
static const char *probe_run(bool bpf)
{
	static char stack[16384] __attribute__((aligned(16)));
	struct probe p = { .bpf = bpf };
	int st = 0;
	pid_t pid = REAL(clone)(probe_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK, &p);

	if (pid < 0)
		return "clone";
	if (waitpid(pid, &st, __WCLONE) != pid)
		return p.refused ? p.refused : "waitpid";
	if (WIFSIGNALED(st))
		return p.trying ? p.trying : "rt_sigaction";
	return p.refused;
}

static bool bpf_refused;
static pthread_once_t judge_once = PTHREAD_ONCE_INIT;

static void judge(void)
{
	int saved_errno = errno;
	const char *no;

	if (sandbox_active() || !status_says_filtered())
		return;
	if ((no = probe_run(false)) != NULL) {
		log_info("the seccomp filter this process started under refuses %s: its new "
			 "connections stay TCP", no);
		sandbox_entered();
	} else if (probe_run(true) != NULL) {
		log_info("the seccomp filter this process started under refuses bpf(): no SMC "
			 "TCP option");
		bpf_refused = true;
	}
	errno = saved_errno;
}

static bool kept_off;

void sandbox_keep_off(void)
{
	__atomic_store_n(&kept_off, true, __ATOMIC_RELAXED);
}

bool sandbox_keeps_off(void)
{
	if (__atomic_load_n(&kept_off, __ATOMIC_RELAXED))
		return true;
	pthread_once(&judge_once, judge);
	return sandbox_active();
}

bool sandbox_bpf_refused(void)
{
	pthread_once(&judge_once, judge);
	return sandbox_active() || bpf_refused;
}
