/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * crr_floor: what a connect/request/response/close cycle could cost if an SMC connection
 * between two processes that already know each other needed no per-connection
 * handshake. Not the library: a measurement of a design (README, "crr"), run by
 * bench/crr-floor side by side with bench/crr over plain TCP.
 *
 * It keeps what the library must keep: the real TCP socket of every connection (TCP
 * handshake, accept, close), the application's two SO_RCVTIMEO/SO_SNDTIMEO calls per
 * socket, and a doorbell the application could poll (an eventfd waited on with ppoll
 * together with the TCP socket, as the library's blocking reads do). What the design
 * removes is everything the library does per connection today: the per-connection
 * rendezvous socket, the three handshake messages, the progress-thread wake-ups, a
 * memfd, mmap and munmap, four eventfds. Instead:
 *
 *   - once per process pair (here: when the client starts) the server hands the client
 *     a pool over a unix socket: one memfd (a port directory and one slot per client
 *     thread, each slot a 64-byte request and response area) and two eventfds per
 *     slot; that unix connection stays open;
 *   - a client thread checks that the server's end of that connection is still open (a
 *     MSG_PEEK recv: a server that died and a new one on its port must not get pool
 *     connections), binds a port (bind, getsockname), writes its slot number into the
 *     directory entry for that port, connects, writes the request into its slot and
 *     rings the server's bell if a server thread sleeps on that slot;
 *   - the server accepts and takes the directory entry of the peer's port, written
 *     before the SYN: no entry means a plain TCP client, served over TCP. With an entry
 *     it reads the request, writes the response (which also stands for its close),
 *     rings back, closes;
 *   - both close with SO_LINGER 0 (-C rst, what the library does for an SMC connection
 *     whose close went through shared memory: no FIN exchange, no TIME_WAIT), or with a
 *     normal close (-C fin).
 *
 * -m PCT makes that share of the client's connections plain TCP (the server tells them
 * apart as above); -P PROCS runs the server as PROCS processes that accept on one
 * listener and share the pool, inherited across fork() as nginx's workers would; -A
 * makes the server ask sock_diag who owns the peer's TCP socket before it trusts a
 * directory entry (any process can write any port into its own pool's directory, so a
 * server must do that, or get the same proof from the SYN through the TCP option,
 * whenever the pool's client is another user).
 * Limits, on purpose: one client process per server; slots are per client thread (one
 * connection at a time each), so there is no slot allocator.
 *
 *   crr_floor server [-p PORT] [-T THREADS] [-P PROCS] [-w bell|futex] [-C rst|fin] [-A]
 *       Prints "PORT <n>" once listening; runs until SIGTERM/SIGINT.
 *   crr_floor client -p PORT [-c THREADS] [-t MS] [-m PCT] [-w bell|futex] [-C rst|fin]
 *       Prints "CRR cycles=<n> errors=<n> secs=<s> rate=<cycles/s>" as bench/crr does.
 * -w futex waits on a futex in the slot instead of the eventfd (not pollable, so not a
 * design the library could use for an application's fd; for comparison).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/futex.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "crr_common.h"

#define MSG 64
#define MAX_THREADS 32

/* One direction of a slot: the writer bumps seq after the bytes; the reader sets
 * sleeping before it sleeps, so the writer rings only then. */
struct slot_dir {
	_Atomic uint32_t seq;
	_Atomic uint32_t sleeping;
	char data[MSG];
} __attribute__((aligned(64)));

struct slot {
	struct slot_dir req, resp;
	uint32_t server_seen; /* the server's: last request seq it answered */
};

struct pool {
	_Atomic uint32_t dir[65536]; /* client port -> slot + 1, 0 = none */
	struct slot slot[MAX_THREADS];
};

static struct pool *g_pool;
static int g_bell_req[MAX_THREADS], g_bell_resp[MAX_THREADS];
static int g_port, g_listen_fd;
static int g_link = -1;   /* client: the unix connection the pool came over */
static int g_plain_pct;   /* client: share of connections that stay plain TCP */
static bool g_futex, g_fin;
static bool g_owner_check; /* server: -A */
static volatile uint64_t g_deadline_ns;
static _Atomic unsigned long g_errors;

static void close_conn(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	if (!g_fin)
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* Waits until d->seq differs from old; 0, or -1 after the I/O timeout. */
static int dir_wait(struct slot_dir *d, uint32_t old, int bell, int tcp_fd)
{
	int rc = 0;

	if (atomic_load(&d->seq) != old)
		return 0;
	atomic_store(&d->sleeping, 1);
	while (atomic_load(&d->seq) == old) {
		if (g_futex) {
			struct timespec to = { .tv_sec = CRR_IO_TIMEOUT_S };

			if (syscall(SYS_futex, &d->seq, FUTEX_WAIT, old, &to, NULL, 0) < 0 &&
			    errno == ETIMEDOUT) {
				rc = -1;
				break;
			}
		} else {
			/* the TCP socket only reports a dead peer, as in the library */
			struct pollfd pfd[2] = { { bell, POLLIN, 0 },
						 { tcp_fd, POLLIN | POLLRDHUP, 0 } };
			struct timespec to = { .tv_sec = CRR_IO_TIMEOUT_S };
			uint64_t v;
			int n = ppoll(pfd, 2, &to, NULL);

			if (n == 0) {
				rc = -1;
				break;
			}
			if (pfd[1].revents && atomic_load(&d->seq) == old) {
				rc = -1; /* the peer closed before it wrote */
				break;
			}
			if (read(bell, &v, sizeof(v)) < 0 && errno != EAGAIN)
				rc = -1;
		}
	}
	atomic_store(&d->sleeping, 0);
	return rc;
}

static void dir_post(struct slot_dir *d, uint32_t seq, int bell)
{
	uint64_t one = 1;

	atomic_store(&d->seq, seq);
	if (!atomic_load(&d->sleeping))
		return;
	if (g_futex)
		syscall(SYS_futex, &d->seq, FUTEX_WAKE, 1, NULL, NULL, 0);
	else if (write(bell, &one, sizeof(one)) < 0)
		atomic_fetch_add(&g_errors, 1);
}

/* -A: who owns the TCP peer's socket (sock_diag, over this thread's netlink socket
 * nl): what a server must check before it trusts a directory entry when the pool's
 * client runs as another user, since any process may write any port into its own
 * pool's directory. 0 with *uid, or -1. */
static int peer_owner(int nl, int fd, uid_t *uid)
{
	struct sockaddr_in l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	union {
		struct nlmsghdr h;
		char buf[1024];
	} resp;
	ssize_t n;

	if (getsockname(fd, (struct sockaddr *)&l, &ll) < 0 ||
	    getpeername(fd, (struct sockaddr *)&p, &pl) < 0)
		return -1;
	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = AF_INET;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	/* the peer's socket: its source is our destination */
	req.r.id.idiag_sport = p.sin_port;
	req.r.id.idiag_dport = l.sin_port;
	memcpy(req.r.id.idiag_src, &p.sin_addr, 4);
	memcpy(req.r.id.idiag_dst, &l.sin_addr, 4);
	req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if (send(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req))
		return -1;
	n = recv(nl, resp.buf, sizeof(resp.buf), 0);
	if (n <= 0 || !NLMSG_OK(&resp.h, (unsigned)n) || resp.h.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
	    resp.h.nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
		return -1;
	*uid = ((struct inet_diag_msg *)NLMSG_DATA(&resp.h))->idiag_uid;
	return 0;
}

/* The slot a connection from client port `port` uses, or -1: plain TCP. The client
 * wrote the entry before its SYN, so there is nothing to wait for. */
static int dir_claim(uint16_t port)
{
	return (int)atomic_exchange(&g_pool->dir[port], 0) - 1;
}

static void serve_plain(int fd)
{
	char buf[MSG];

	if (crr_read_full(fd, buf, MSG) == 1)
		crr_write_full(fd, buf, MSG);
	close(fd); /* a normal close, as bench/crr's server */
}

static void *server_thread(void *arg)
{
	int nl = g_owner_check ? socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG) : -1;

	(void)arg;
	if (g_owner_check && nl < 0) {
		perror("crr_floor: netlink");
		exit(2);
	}
	for (;;) {
		struct sockaddr_in peer;
		socklen_t len = sizeof(peer);
		int fd = accept(g_listen_fd, (struct sockaddr *)&peer, &len);
		uint32_t q;
		struct slot *sl;
		int s;

		if (fd < 0)
			continue;
		crr_set_timeouts(fd);
		s = dir_claim(ntohs(peer.sin_port));
		if (s < 0) {
			serve_plain(fd);
			continue;
		}
		if (s >= MAX_THREADS) {
			close_conn(fd);
			continue;
		}
		if (g_owner_check) {
			uid_t uid;

			/* here the pool's uid is ours: the test of a real server would be
			 * against the uid its pool came with (SO_PEERCRED) */
			if (peer_owner(nl, fd, &uid) < 0 || uid != getuid()) {
				atomic_fetch_add(&g_errors, 1);
				close_conn(fd);
				continue;
			}
		}
		sl = &g_pool->slot[s];
		if (dir_wait(&sl->req, sl->server_seen, g_bell_req[s], fd) == 0) {
			q = atomic_load(&sl->req.seq);
			sl->server_seen = q;
			memcpy(sl->resp.data, sl->req.data, MSG);
			dir_post(&sl->resp, q, g_bell_resp[s]);
		}
		close_conn(fd);
	}
	return NULL;
}

/* One plain TCP cycle, as bench/crr's client: 0 or -1. */
static int cycle_plain(int fd, const struct sockaddr_in *sa, char c)
{
	char req[MSG], resp[MSG];

	memset(req, c, MSG);
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 ||
	    crr_write_full(fd, req, MSG) < 0 || crr_read_full(fd, resp, MSG) != 1 ||
	    memcmp(req, resp, MSG) != 0 || read(fd, resp, 1) != 0)
		return -1;
	return 0;
}

/* The server process is still there: its end of the pool's unix connection is open (a
 * server that died and a new one on the same port must not get pool connections). */
static bool link_alive(void)
{
	char b;

	return recv(g_link, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

static void *client_thread(void *arg)
{
	uint32_t s = (uint32_t)(uintptr_t)arg;
	struct slot *sl = &g_pool->slot[s];
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
	char resp[MSG];
	uint64_t n, cycles = 0;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (n = 0; crr_now_ns() < g_deadline_ns; n++) {
		struct sockaddr_in me;
		socklen_t len = sizeof(me);
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		uint32_t old, q;

		if (fd < 0) {
			atomic_fetch_add(&g_errors, 1);
			continue;
		}
		crr_set_timeouts(fd);
		if ((int)(n % 100) < g_plain_pct) {
			if (cycle_plain(fd, &sa, (char)('a' + n % 26)) < 0)
				atomic_fetch_add(&g_errors, 1);
			else
				cycles++;
			close(fd);
			continue;
		}
		if (!link_alive()) {
			fprintf(stderr, "crr_floor: the server's end of the pool is gone\n");
			exit(1);
		}
		/* the port must be known before the SYN: bind first (the library does the
		 * same for the connections it offers SMC on) */
		me = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr = sa.sin_addr };
		if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0 ||
		    getsockname(fd, (struct sockaddr *)&me, &len) < 0) {
			atomic_fetch_add(&g_errors, 1);
			close(fd);
			continue;
		}
		atomic_store(&g_pool->dir[ntohs(me.sin_port)], s + 1);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			atomic_store(&g_pool->dir[ntohs(me.sin_port)], 0);
			atomic_fetch_add(&g_errors, 1);
			close(fd);
			continue;
		}
		old = atomic_load(&sl->resp.seq);
		q = atomic_load(&sl->req.seq) + 1;
		memset(sl->req.data, (int)('a' + n % 26), MSG);
		dir_post(&sl->req, q, g_bell_req[s]);
		if (dir_wait(&sl->resp, old, g_bell_resp[s], fd) < 0) {
			atomic_fetch_add(&g_errors, 1);
		} else {
			memcpy(resp, sl->resp.data, MSG);
			if (resp[0] != (char)('a' + n % 26) || resp[MSG - 1] != resp[0])
				atomic_fetch_add(&g_errors, 1);
			else
				cycles++;
		}
		close_conn(fd);
	}
	return (void *)(uintptr_t)cycles;
}

static void pool_name(struct sockaddr_un *ua, socklen_t *len)
{
	memset(ua, 0, sizeof(*ua));
	ua->sun_family = AF_UNIX;
	/* abstract: nothing to clean up */
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			   (size_t)snprintf(ua->sun_path + 1, sizeof(ua->sun_path) - 1,
					    "crr_floor.%d", g_port));
}

/* The pool: memfd first, then the request bells, then the response bells. */
static int send_pool(int sock, int memfd)
{
	int fds[1 + 2 * MAX_THREADS];
	char cbuf[CMSG_SPACE(sizeof(fds))];
	char byte = 'P';
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	fds[0] = memfd;
	memcpy(fds + 1, g_bell_req, sizeof(g_bell_req));
	memcpy(fds + 1 + MAX_THREADS, g_bell_resp, sizeof(g_bell_resp));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

static int recv_pool(int sock)
{
	int fds[1 + 2 * MAX_THREADS];
	char cbuf[CMSG_SPACE(sizeof(fds))];
	char byte;
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1 || (mh.msg_flags & MSG_CTRUNC))
		return -1;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(fds)))
		return -1;
	memcpy(fds, CMSG_DATA(cm), sizeof(fds));
	memcpy(g_bell_req, fds + 1, sizeof(g_bell_req));
	memcpy(g_bell_resp, fds + 1 + MAX_THREADS, sizeof(g_bell_resp));
	g_pool = mmap(NULL, sizeof(*g_pool), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	close(fds[0]);
	return g_pool == MAP_FAILED ? -1 : 0;
}

static int g_memfd;

/* Hands every client process that asks the pool (one is expected). */
static void *pool_thread(void *arg)
{
	int usock = (int)(intptr_t)arg;

	for (;;) {
		int c = accept4(usock, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0)
			continue;
		/* kept open: its EOF tells the client the server is gone */
		if (send_pool(c, g_memfd) < 0) {
			perror("crr_floor: sending the pool");
			close(c);
		}
	}
	return NULL;
}

static int run_server(int threads, int procs)
{
	pid_t parent = getpid();
	socklen_t ulen;
	struct sockaddr_un ua;
	pthread_t tid;
	sigset_t set;
	int memfd, usock, sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	memfd = memfd_create("crr_floor", MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, sizeof(*g_pool)) < 0)
		return perror("memfd"), 2;
	g_pool = mmap(NULL, sizeof(*g_pool), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (g_pool == MAP_FAILED)
		return perror("mmap"), 2;
	g_memfd = memfd;
	for (int i = 0; i < MAX_THREADS; i++) {
		g_bell_req[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		g_bell_resp[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (g_bell_req[i] < 0 || g_bell_resp[i] < 0)
			return perror("eventfd"), 2;
	}
	g_listen_fd = crr_listen(g_port, &g_port);
	if (g_listen_fd < 0)
		return 2;
	pool_name(&ua, &ulen);
	usock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (usock < 0 || bind(usock, (struct sockaddr *)&ua, ulen) < 0 || listen(usock, 4) < 0)
		return perror("pool socket"), 2;
	/* like nginx's workers: every process accepts on the listener and shares the pool
	 * and the bells, inherited across fork() */
	for (int p = 1; p < procs; p++) {
		pid_t pid = fork();

		if (pid < 0)
			return perror("fork"), 2;
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(usock);
			break;
		}
	}
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid, NULL, server_thread, NULL) != 0)
			return perror("pthread_create"), 2;
	if (getpid() != parent) {
		sigwait(&set, &sig); /* the parent's death kills us */
		exit(0);
	}
	if (pthread_create(&tid, NULL, pool_thread, (void *)(intptr_t)usock) != 0)
		return perror("pthread_create"), 2;
	printf("PORT %d\n", g_port);
	fflush(stdout);
	sigwait(&set, &sig);
	exit(0);
}

static int run_client(int threads, int ms)
{
	struct sockaddr_un ua;
	socklen_t ulen;
	pthread_t tid[MAX_THREADS];
	uint64_t cycles = 0, t0;
	int usock;

	pool_name(&ua, &ulen);
	usock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (usock < 0 || connect(usock, (struct sockaddr *)&ua, ulen) < 0 || recv_pool(usock) < 0)
		return perror("crr_floor: getting the pool"), 2;
	g_link = usock;
	t0 = crr_now_ns();
	g_deadline_ns = t0 + (uint64_t)ms * 1000000ull;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, client_thread, (void *)(uintptr_t)i) != 0)
			return perror("pthread_create"), 2;
	for (int i = 0; i < threads; i++) {
		void *r;

		pthread_join(tid[i], &r);
		cycles += (uintptr_t)r;
	}
	double secs = (double)(crr_now_ns() - t0) / 1e9;
	printf("CRR cycles=%llu errors=%lu secs=%.3f rate=%.1f\n", (unsigned long long)cycles,
	       atomic_load(&g_errors), secs, (double)cycles / secs);
	return atomic_load(&g_errors) ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: crr_floor server [-p PORT] [-T THREADS] [-P PROCS] [-w bell|futex] [-C rst|fin] [-A]\n"
			"       crr_floor client -p PORT [-c THREADS] [-t MS] [-m PLAIN%%] [-w bell|futex] [-C rst|fin]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int threads = 1, ms = 3000, procs = 1, opt;
	bool server;

	if (argc < 2)
		usage();
	server = strcmp(argv[1], "server") == 0;
	if (!server && strcmp(argv[1], "client") != 0)
		usage();
	optind = 2;
	while ((opt = getopt(argc, argv, "p:T:P:c:t:m:w:C:A")) != -1) {
		switch (opt) {
		case 'p': g_port = atoi(optarg); break;
		case 'T': case 'c': threads = atoi(optarg); break;
		case 't': ms = atoi(optarg); break;
		case 'P': procs = atoi(optarg); break;
		case 'm': g_plain_pct = atoi(optarg); break;
		case 'A': g_owner_check = true; break;
		case 'w':
			if (strcmp(optarg, "futex") != 0 && strcmp(optarg, "bell") != 0)
				usage();
			g_futex = strcmp(optarg, "futex") == 0;
			break;
		case 'C':
			if (strcmp(optarg, "fin") != 0 && strcmp(optarg, "rst") != 0)
				usage();
			g_fin = strcmp(optarg, "fin") == 0;
			break;
		default: usage();
		}
	}
	if (threads < 1 || threads > MAX_THREADS || ms < 1 || procs < 1 || procs > 64 ||
	    g_plain_pct < 0 || g_plain_pct > 100 || (!server && g_port <= 0))
		usage();
	return server ? run_server(threads, procs) : run_client(threads, ms);
}
