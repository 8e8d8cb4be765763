/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * seccomp_peer: a peer that puts itself under a strict seccomp filter before it makes
 * its connections, as a sandboxed daemon does (Tor's Sandbox 1, OpenSSH's pre-auth
 * child, a browser's network process), and is killed (SIGSYS) by any other call.
 *
 *   seccomp_peer client PORT N HOW [early]
 *                                    connects N times to 127.0.0.1:PORT after the filter
 *                                    (early: the first before it, half its bytes sent)
 *   seccomp_peer server PORT N HOW   listens on 127.0.0.1:PORT (before the filter), then
 *                                    accepts and echoes N connections, one at a time
 *   HOW: prctl (prctl(PR_SET_SECCOMP), as OpenSSH does), syscall (seccomp(2) through
 *        syscall(), as libseccomp does), or none (no filter: the control)
 *   seccomp_peer exec DENY CMD...    loads a filter that kills the process on the calls
 *                                    DENY names (bpf, memfd: memfd_create) and allows
 *                                    the rest, then execs CMD, which inherits it (as
 *                                    systemd's SystemCallFilter= does)
 *
 * The client sends BYTES of a pattern of its own on each connection, shuts its side down
 * and reads the echo to the end. Exit status 0 when every echo was intact. The filter
 * allows what this program and libc need for that, nothing else: no poll of any kind
 * (its reads and writes block).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BYTES (256 * 1024)

#if defined(__x86_64__)
#define OUR_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OUR_ARCH AUDIT_ARCH_AARCH64
#else
#error "seccomp_peer: x86-64 or aarch64 only"
#endif

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
		  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static struct sock_filter filter[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OUR_ARCH, 1, 0),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	ALLOW(__NR_read), ALLOW(__NR_write), ALLOW(__NR_readv), ALLOW(__NR_writev),
	ALLOW(__NR_recvfrom), ALLOW(__NR_sendto), ALLOW(__NR_socket), ALLOW(__NR_connect),
	ALLOW(__NR_accept), ALLOW(__NR_accept4), ALLOW(__NR_shutdown), ALLOW(__NR_close),
	ALLOW(__NR_exit), ALLOW(__NR_exit_group), ALLOW(__NR_futex), ALLOW(__NR_brk),
	ALLOW(__NR_mmap), ALLOW(__NR_munmap), ALLOW(__NR_mprotect), ALLOW(__NR_madvise),
	ALLOW(__NR_rt_sigreturn), ALLOW(__NR_rt_sigprocmask), ALLOW(__NR_clock_gettime),
	ALLOW(__NR_clock_nanosleep), ALLOW(__NR_nanosleep),
	ALLOW(__NR_getpid), ALLOW(__NR_gettid), ALLOW(__NR_getrandom), ALLOW(__NR_fcntl),
	ALLOW(__NR_restart_syscall),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
};

static struct sock_filter deny_prefix[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OUR_ARCH, 1, 0),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
};

/* Loads a filter that kills on the one call DENY names and allows the rest, and execs
 * cmd under it. */
static int exec_denying(const char *deny, char **cmd)
{
	struct sock_filter insns[8];
	struct sock_fprog prog = { 0, insns };
	long nr = strcmp(deny, "bpf") == 0 ? __NR_bpf : strcmp(deny, "memfd") == 0 ? __NR_memfd_create : -1;
	size_t n = sizeof(deny_prefix) / sizeof(deny_prefix[0]);

	if (nr < 0) {
		fprintf(stderr, "seccomp_peer: DENY is bpf or memfd, not %s\n", deny);
		return 2;
	}
	memcpy(insns, deny_prefix, sizeof(deny_prefix));
	insns[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1);
	insns[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	insns[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	prog.len = (unsigned short)n;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
		perror("seccomp_peer: loading the filter");
		return 1;
	}
	execvp(cmd[0], cmd);
	perror("seccomp_peer: exec");
	return 127;
}

/* After the filter stdio may want an fstat: one write(2) per line instead. */
static void __attribute__((format(printf, 1, 2))) say(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)!write(1, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static int enter_filter(const char *how)
{
	struct sock_fprog prog = { sizeof(filter) / sizeof(filter[0]), filter };

	if (strcmp(how, "none") == 0)
		return 0;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		perror("seccomp_peer: PR_SET_NO_NEW_PRIVS");
		return -1;
	}
	if (strcmp(how, "prctl") == 0) {
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0)
			return 0;
	} else if (strcmp(how, "syscall") == 0) {
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
			return 0;
	} else {
		fprintf(stderr, "seccomp_peer: HOW is prctl, syscall or none, not %s\n", how);
		return -1;
	}
	perror("seccomp_peer: loading the filter");
	return -1;
}

static unsigned char pattern(unsigned conn, size_t i)
{
	return (unsigned char)(conn * 131u + i * 7u + (i >> 11));
}

static int full_write(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* Echoes one connection to its end. */
static int echo(int fd, unsigned char *buf)
{
	for (;;) {
		ssize_t n = read(fd, buf, BYTES);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		if (full_write(fd, buf, (size_t)n) < 0)
			return -1;
	}
}

static int run_server(int port, int count, const char *how, unsigned char *buf)
{
	struct sockaddr_in a = loopback(port);
	int one = 1, bad = 0;
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 16) < 0) {
		perror("seccomp_peer: listen");
		return 1;
	}
	printf("LISTENING port=%d\n", port);
	fflush(stdout);
	if (enter_filter(how) < 0)
		return 1;
	for (int i = 0; i < count; i++) {
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0 || echo(fd, buf) < 0) {
			say("seccomp_peer server: connection %d: %s\n", i, strerror(errno));
			bad++;
		}
		if (fd >= 0)
			close(fd);
	}
	close(lfd);
	say("server: %d connections echoed, %d failed\n", count - bad, bad);
	return bad ? 1 : 0;
}

static int dial(int port)
{
	struct sockaddr_in a = loopback(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Sends BYTES of connection conn's pattern on fd from byte `from` on (the rest went
 * before), shuts its side down, reads the echo to the end and checks it; closes fd. */
static int exchange(int fd, unsigned conn, size_t from, unsigned char *buf)
{
	size_t got = 0;

	if (fd < 0)
		goto fail;
	for (size_t i = 0; i < BYTES; i++)
		buf[i] = pattern(conn, i);
	if (full_write(fd, buf + from, BYTES - from) < 0 || shutdown(fd, SHUT_WR) < 0)
		goto fail;
	memset(buf, 0, BYTES);
	for (;;) {
		ssize_t n = read(fd, buf + got, BYTES - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		if (n == 0 || (got += (size_t)n) == BYTES)
			break;
	}
	close(fd);
	for (size_t i = 0; i < BYTES; i++)
		if (got != BYTES || buf[i] != pattern(conn, i)) {
			say("seccomp_peer client: connection %u: echo wrong (%zu of %d bytes)\n",
			    conn, got, BYTES);
			return -1;
		}
	return 0;
fail:
	say("seccomp_peer client: connection %u: %s\n", conn, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

int main(int argc, char **argv)
{
	static unsigned char buf[BYTES];
	int port, count, bad = 0, early_fd = -1;
	bool early = argc == 6 && strcmp(argv[5], "early") == 0;

	if (argc >= 4 && strcmp(argv[1], "exec") == 0)
		return exec_denying(argv[2], argv + 3);
	if ((argc != 5 && !early) || (strcmp(argv[1], "client") && strcmp(argv[1], "server"))) {
		fprintf(stderr, "usage: seccomp_peer client|server PORT N prctl|syscall|none [early]\n"
				"       seccomp_peer exec bpf|memfd CMD...\n");
		return 2;
	}
	port = atoi(argv[2]);
	count = atoi(argv[3]);
	if (strcmp(argv[1], "server") == 0)
		return run_server(port, count, argv[4], buf);
	if (early) { /* the first connection is made, and half sent, before the filter */
		early_fd = dial(port);
		for (size_t i = 0; i < BYTES / 2; i++)
			buf[i] = pattern(0, i);
		if (early_fd < 0 || full_write(early_fd, buf, BYTES / 2) < 0) {
			perror("seccomp_peer: the early connection");
			return 1;
		}
	}
	if (enter_filter(argv[4]) < 0)
		return 1;
	for (int i = 0; i < count; i++)
		if (exchange(i == 0 && early ? early_fd : dial(port), (unsigned)i,
			     i == 0 && early ? BYTES / 2 : 0, buf) < 0)
			bad++;
	say("client: %d connections intact, %d failed\n", count - bad, bad);
	return bad ? 1 : 0;
}
