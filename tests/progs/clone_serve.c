/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A server that serves each client in a child process made by clone() rather than
 * fork() (as vsftpd does), the parent closing its copy of the connection at once; and
 * its client. tests/integration/clone.sh.
 *
 *   clone_serve serve PORT HOW     HOW: clone   glibc's clone(SIGCHLD), own stack
 *                                       vfork   glibc's clone(CLONE_VFORK | SIGCHLD)
 *                                       raw     syscall(SYS_clone, SIGCHLD, NULL...)
 *                                       clone3  syscall(SYS_clone3) without a stack
 *                                       fork    fork()
 *   clone_serve client HOST PORT N     N connections one after the other
 *
 * On each connection: the client says "hello I", the child answers "220 I"; three
 * lines "line K" answered "ack I K"; the child sends PAYLOAD bytes of a stream seeded
 * by I, the client PAYLOAD bytes seeded by I + 1000, each checks what it got, and the
 * child's verdict comes back as "ok" or "bad". The client exits 0 when every
 * connection was right and prints "clients ok=N".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

#define PAYLOAD (1u << 20)

/* the kernel's struct clone_args as of CLONE_ARGS_SIZE_VER0 */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static volatile sig_atomic_t stop;
static int conn_fd;
static char child_stack[1 << 18] __attribute__((aligned(16)));
static unsigned char buf[1 << 16];

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill(unsigned char *p, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(next(s) >> 24);
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t w = write(fd, c, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_line(int fd, char *line, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r = read(fd, line + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		if (line[n] == '\n') {
			line[n] = 0;
			return 0;
		}
		n++;
	}
	return -1;
}

/* One line to fd, formatted as printf does: 0, or -1 when it could not be written. */
#define SAY(fd, ...) \
	({ char l_[64]; int n_ = snprintf(l_, sizeof(l_), __VA_ARGS__); \
	   write_all((fd), l_, (size_t)n_); })

static int send_stream(int fd, uint64_t seed)
{
	for (size_t done = 0; done < PAYLOAD; done += sizeof(buf)) {
		fill(buf, sizeof(buf), &seed);
		if (write_all(fd, buf, sizeof(buf)) < 0)
			return -1;
	}
	return 0;
}

/* 0 when the next PAYLOAD bytes are the stream seeded by seed. */
static int check_stream(int fd, uint64_t seed)
{
	static unsigned char want[sizeof(buf)];
	size_t done = 0, have = 0;

	while (done < PAYLOAD) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - have);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		have += (size_t)r;
		if (have == sizeof(buf)) {
			fill(want, sizeof(want), &seed);
			if (memcmp(buf, want, sizeof(buf)) != 0)
				return -1;
			done += have;
			have = 0;
		}
	}
	return 0;
}

/* The child's side of one connection: 0 when all went right. */
static int serve(int fd)
{
	char line[64];
	unsigned id, k;

	if (read_line(fd, line, sizeof(line)) < 0 || sscanf(line, "hello %u", &id) != 1)
		return 1;
	if (SAY(fd, "220 %u\n", id) < 0)
		return 1;
	for (unsigned i = 0; i < 3; i++)
		if (read_line(fd, line, sizeof(line)) < 0 || sscanf(line, "line %u", &k) != 1 ||
		    SAY(fd, "ack %u %u\n", id, k) < 0)
			return 1;
	if (send_stream(fd, id + 1) < 0)
		return 1;
	k = check_stream(fd, id + 1001) == 0;
	if (SAY(fd, "%s\n", k ? "ok" : "bad") < 0)
		return 1;
	return k ? 0 : 1;
}

/* The child: its exit() writes its statistics (a return from a clone child would end
 * it with the bare exit system call). */
static int child_main(void *arg)
{
	(void)arg;
	int rc = serve(conn_fd);

	if (rc)
		fprintf(stderr, "child %d: connection failed\n", (int)getpid());
	close(conn_fd);
	exit(rc);
}

static long spawn(const char *how)
{
	if (strcmp(how, "clone") == 0)
		return clone(child_main, child_stack + sizeof(child_stack), SIGCHLD, NULL);
	if (strcmp(how, "vfork") == 0)
		return clone(child_main, child_stack + sizeof(child_stack), CLONE_VFORK | SIGCHLD,
			     NULL);
	if (strcmp(how, "fork") == 0)
		return fork();
	if (strcmp(how, "raw") == 0) {
#if defined(__s390__)
		return syscall(SYS_clone, 0L, (long)SIGCHLD, 0L, 0L, 0L);
#else
		return syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
#endif
	}
	if (strcmp(how, "clone3") == 0) {
		struct clone3_args a = { .exit_signal = SIGCHLD };

		return syscall(SYS_clone3, &a, sizeof(a));
	}
	fprintf(stderr, "unknown HOW %s\n", how);
	exit(2);
}

static int server(int port, const char *how)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sigaction sa = { .sa_handler = on_term };
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	sigaction(SIGTERM, &sa, NULL); /* no SA_RESTART: accept() returns */
	signal(SIGCHLD, SIG_IGN);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 64) < 0) {
		perror("bind/listen");
		return 1;
	}
	while (!stop) {
		long pid;

		conn_fd = accept(l, NULL, NULL);
		if (conn_fd < 0)
			continue;
		pid = spawn(how);
		if (pid == 0)
			child_main(NULL); /* fork, raw, clone3: the child returns here */
		if (pid < 0)
			perror("spawn");
		close(conn_fd);
	}
	close(l);
	return 0;
}

static int client_one(const char *host, int port, unsigned id)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char line[64], want[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;

	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		goto out;
	}
	snprintf(want, sizeof(want), "220 %u", id);
	if (SAY(fd, "hello %u\n", id) < 0 || read_line(fd, line, sizeof(line)) < 0 ||
	    strcmp(line, want) != 0) {
		fprintf(stderr, "client %u: no greeting\n", id);
		goto out;
	}
	for (unsigned k = 0; k < 3; k++) {
		snprintf(want, sizeof(want), "ack %u %u", id, k);
		if (SAY(fd, "line %u\n", k) < 0 || read_line(fd, line, sizeof(line)) < 0 ||
		    strcmp(line, want) != 0) {
			fprintf(stderr, "client %u: line %u not acknowledged\n", id, k);
			goto out;
		}
	}
	if (check_stream(fd, id + 1) < 0) {
		fprintf(stderr, "client %u: payload from the child wrong or short\n", id);
		goto out;
	}
	if (send_stream(fd, id + 1001) < 0 || read_line(fd, line, sizeof(line)) < 0 ||
	    strcmp(line, "ok") != 0) {
		fprintf(stderr, "client %u: the child did not get the payload right\n", id);
		goto out;
	}
	ok = 1;
out:
	close(fd);
	return ok;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "serve") == 0)
		return server(atoi(argv[2]), argv[3]);
	if (argc == 5 && strcmp(argv[1], "client") == 0) {
		unsigned n = (unsigned)atoi(argv[4]), ok = 0;

		for (unsigned i = 0; i < n; i++)
			ok += (unsigned)client_one(argv[2], atoi(argv[3]), i);
		printf("clients ok=%u of %u\n", ok, n);
		return ok == n ? 0 : 1;
	}
	fprintf(stderr, "usage: clone_serve serve PORT clone|vfork|raw|clone3|fork\n"
			"       clone_serve client HOST PORT N\n");
	return 2;
}
