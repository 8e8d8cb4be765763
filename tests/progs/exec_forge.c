/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A description of carried connections (core/sock/exec_carry.h) that the library did
 * not write, handed to a new image under the library: it must be refused or ignored,
 * never used, and must touch nothing it cannot vouch for.
 *
 *   exec_forge forge CASE PORT
 *
 * connects to 127.0.0.1:PORT (a server without the library: plain TCP), forges the
 * description CASE names, puts it in SMC_EXEC_STATE and execs itself in "check" mode,
 * which looks at what the new image's constructor did:
 *   outside   a record whose consumer cursor lies outside its ring: refused, the socket
 *             reset, its doorbells and region closed, the description closed;
 *   stale     valid cursors that are not the ones the side published: the same;
 *   notmemfd  the region named is a pipe: refused, the pipe left open;
 *   badbell   a doorbell named is a pipe: refused, the pipe left open;
 *   otherpid  a description for another process: ignored, nothing closed but it;
 *   byhand    SMC_EXEC_STATE names /dev/null: ignored, /dev/null left open.
 * In the refused cases the socket is reset (the server sees ECONNRESET); in the others
 * it still echoes. Either way SMC_EXEC_STATE is gone from the new image's environment.
 * Prints "CHECK CASE ok" and exits 0, or says what is wrong and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/conn/conn_carry.h"
#include "core/shm/shm.h"
#include "core/sock/exec_carry.h"

#define RING 65536u

extern char **environ;

static void die(const char *what)
{
	fprintf(stderr, "exec_forge: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int inheritable(int fd)
{
	if (fd < 0 || fcntl(fd, F_SETFD, 0) < 0)
		die("descriptor");
	return fd;
}

/* A region as the library makes one: sealed size, the header's magic. */
static int region(smc_cursor client_rx_cons)
{
	size_t len = shm_region_len(RING, RING);
	int fd = memfd_create("smc-rmb", MFD_ALLOW_SEALING);
	struct shm_hdr *h;

	if (fd < 0 || ftruncate(fd, (off_t)len) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		die("region");
	h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		die("mmap");
	h->magic = SHM_MAGIC;
	h->version = SHM_VERSION;
	h->ring_size[0] = h->ring_size[1] = RING;
	h->dir[1].cons = client_rx_cons; /* a client reads dir[1] */
	munmap(h, len);
	return inheritable(fd);
}

static int state(const struct conn_carry *r, int32_t pid)
{
	struct carry_hdr h = { .magic = CARRY_MAGIC, .version = CARRY_VERSION, .pid = pid,
			       .count = 1, .rec_size = sizeof(*r),
			       .stats_size = sizeof(struct smc_stats_snapshot) };
	int fd = memfd_create("smc-exec-state", MFD_ALLOW_SEALING);

	if (fd < 0 || write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h) ||
	    write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		die("state");
	return inheritable(fd);
}

static int forge(const char *self, const char *c, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct conn_carry r;
	int s = socket(AF_INET, SOCK_STREAM, 0), st, pfd[2];
	char args[9][16], var[64];
	char *argv[13];

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	inheritable(s);
	if (pipe(pfd) < 0)
		die("pipe");
	inheritable(pfd[0]);
	memset(&r, 0, sizeof(r));
	for (int i = 0; i < CONN_CARRY_FDS; i++)
		r.fds[i] = -1;
	r.fds[0] = s;
	r.side = CONN_CLIENT;
	r.size[0] = r.size[1] = RING;
	r.rx_bell = inheritable(eventfd(0, EFD_NONBLOCK));
	r.tx_bell = inheritable(eventfd(0, EFD_NONBLOCK));
	r.peer_rx_bell = inheritable(eventfd(0, EFD_NONBLOCK));
	r.peer_tx_bell = inheritable(eventfd(0, EFD_NONBLOCK));
	r.memfd = region(0);
	if (!strcmp(c, "outside")) {
		r.rx_cons = cursor_make(0, RING + 10);
	} else if (!strcmp(c, "stale")) {
		close(r.memfd);
		r.memfd = region(cursor_make(0, 100)); /* published 100, the record says 0 */
	} else if (!strcmp(c, "notmemfd")) {
		close(r.memfd);
		r.memfd = pfd[0];
	} else if (!strcmp(c, "badbell")) {
		close(r.rx_bell);
		r.rx_bell = pfd[0];
	}
	if (!strcmp(c, "byhand"))
		st = inheritable(open("/dev/null", O_RDONLY));
	else
		st = state(&r, !strcmp(c, "otherpid") ? (int32_t)getpid() + 1 : (int32_t)getpid());
	snprintf(var, sizeof(var), CARRY_ENV "=%d", st);
	if (putenv(var) != 0)
		die("putenv");
	snprintf(args[0], 16, "%d", port);
	snprintf(args[1], 16, "%d", s);
	snprintf(args[2], 16, "%d", r.rx_bell);
	snprintf(args[3], 16, "%d", r.tx_bell);
	snprintf(args[4], 16, "%d", r.peer_rx_bell);
	snprintf(args[5], 16, "%d", r.peer_tx_bell);
	snprintf(args[6], 16, "%d", r.memfd);
	snprintf(args[7], 16, "%d", st);
	snprintf(args[8], 16, "%d", pfd[0]);
	argv[0] = (char *)self;
	argv[1] = "check";
	argv[2] = (char *)c;
	for (int i = 0; i < 9; i++)
		argv[3 + i] = args[i];
	argv[12] = NULL;
	execve("/proc/self/exe", argv, environ);
	die("execve");
	return 1;
}

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static int bad;

static void expect(bool ok, const char *c, const char *what)
{
	if (!ok) {
		printf("CHECK %s: %s\n", c, what);
		bad = 1;
	}
}

static int check(char **argv)
{
	const char *c = argv[2];
	int s = atoi(argv[4]), bells[4] = { atoi(argv[5]), atoi(argv[6]), atoi(argv[7]), atoi(argv[8]) };
	int memfd = atoi(argv[9]), st = atoi(argv[10]), pipefd = atoi(argv[11]);
	bool refused = !strcmp(c, "outside") || !strcmp(c, "stale") || !strcmp(c, "notmemfd") ||
		       !strcmp(c, "badbell");
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	expect(getenv(CARRY_ENV) == NULL, c, CARRY_ENV " is still in the environment");
	expect(is_open(s), c, "the socket was closed");
	expect(is_open(pipefd), c, "the pipe was closed");
	expect(!strcmp(c, "byhand") ? is_open(st) : !is_open(st), c,
	       !strcmp(c, "byhand") ? "the descriptor named by hand was closed"
				    : "the description was left open");
	for (int i = 0; i < 4; i++) {
		if (bells[i] == pipefd)
			continue;
		expect(refused ? !is_open(bells[i]) : is_open(bells[i]), c,
		       refused ? "a doorbell of a refused record stayed open"
			       : "a doorbell of an ignored description was closed");
	}
	if (memfd != pipefd)
		expect(refused ? !is_open(memfd) : is_open(memfd), c,
		       refused ? "the region of a refused record stayed open"
			       : "the region of an ignored description was closed");
	if (getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		die("TCP_INFO");
	if (refused) {
		expect(ti.tcpi_state == TCP_CLOSE, c, "the socket of a refused record was not reset");
	} else {
		char buf[8] = { 0 };

		expect(ti.tcpi_state == TCP_ESTABLISHED, c, "the socket is not established");
		expect(send(s, "ping\n", 5, 0) == 5, c, "send");
		expect(recv(s, buf, 5, MSG_WAITALL) == 5 && !memcmp(buf, "ping\n", 5), c,
		       "no echo");
	}
	if (!bad)
		printf("CHECK %s ok\n", c);
	return bad;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 4 && !strcmp(argv[1], "forge"))
		return forge(argv[0], argv[2], atoi(argv[3]));
	if (argc == 12 && !strcmp(argv[1], "check"))
		return check(argv);
	fprintf(stderr, "usage: exec_forge forge CASE PORT\n");
	return 2;
}
