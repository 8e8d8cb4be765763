/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * crr: connect / request / response / close rate, like uperf's TCP_CRR (seed 001).
 *
 *   crr server [-p PORT] [-T THREADS] [-m BYTES]
 *       Prints "PORT <n>" once listening. THREADS threads block in accept() on the
 *       same socket; each connection: read a BYTES request, write a BYTES response,
 *       close (the server closes first, so TIME_WAIT stays on its side). Exits with status 0 on SIGTERM/SIGINT so
 *       atexit handlers (the library's stats file) run.
 *   crr client -p PORT [-c THREADS] [-t MS] [-m BYTES]
 *       THREADS threads loop: socket, connect, write request, read response, read
 *       the server's EOF, close.
 *       Prints "CRR cycles=<n> errors=<n> secs=<s> rate=<cycles/s>" and, when there
 *       were errors, one "ERR <where> <errno name> <count>" line per kind.
 *
 * Every socket gets a 5 s receive/send timeout so a lost wakeup shows up as an error
 * (ETIMEDOUT-like EAGAIN) instead of a hang.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "crr_common.h"

#define MAX_THREADS 64

enum err_where { E_SOCKET, E_CONNECT, E_WRITE, E_READ, E_SHORT, E_DATA, E_WHERE_MAX };
static const char *const where_name[E_WHERE_MAX] = {
	"socket", "connect", "write", "read", "short_read", "bad_data",
};

static int g_port;
static size_t g_msg = 64;
static int g_listen_fd;
static volatile uint64_t g_deadline_ns;

/* Error counts per (where, errno) so the report says what failed, not only how often. */
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long err_count[E_WHERE_MAX][256];

static void count_error(enum err_where w, int err)
{
	pthread_mutex_lock(&err_lock);
	err_count[w][err & 255]++;
	pthread_mutex_unlock(&err_lock);
}

static void *server_thread(void *arg)
{
	char *buf = malloc(g_msg);

	(void)arg;
	if (!buf)
		return NULL;
	for (;;) {
		int fd = accept(g_listen_fd, NULL, NULL);

		if (fd < 0)
			continue;
		crr_set_timeouts(fd);
		/* The response echoes the request so the client can check the bytes. The
		 * server closes first, as an HTTP/1.0 server does: TIME_WAIT then stays on
		 * the server side and the client's ephemeral ports are not used up. */
		if (crr_read_full(fd, buf, g_msg) == 1)
			crr_write_full(fd, buf, g_msg);
		close(fd);
	}
	return NULL;
}

static int run_server(int threads)
{
	pthread_t tid;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by the workers */
	g_listen_fd = crr_listen(g_port, &g_port);
	if (g_listen_fd < 0)
		return 2;
	printf("PORT %d\n", g_port);
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid, NULL, server_thread, NULL) != 0)
			return perror("pthread_create"), 2;
	sigwait(&set, &sig);
	exit(0); /* runs atexit handlers: the stats file */
}

static void *client_thread(void *arg)
{
	uint64_t *cycles = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
	char *req = malloc(g_msg), *resp = malloc(g_msg);

	if (!req || !resp)
		return NULL;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (uint64_t n = 0; crr_now_ns() < g_deadline_ns; n++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		int r;

		if (fd < 0) {
			count_error(E_SOCKET, errno);
			continue;
		}
		crr_set_timeouts(fd);
		memset(req, (int)('a' + n % 26), g_msg);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			count_error(E_CONNECT, errno);
		} else if (crr_write_full(fd, req, g_msg) < 0) {
			count_error(E_WRITE, errno);
		} else if ((r = crr_read_full(fd, resp, g_msg)) != 1) {
			count_error(r == 0 ? E_SHORT : E_READ, r == 0 ? 0 : errno);
		} else if (memcmp(req, resp, g_msg) != 0) {
			count_error(E_DATA, 0);
		} else if ((r = (int)read(fd, resp, 1)) != 0) {
			/* the server's close must arrive as EOF */
			count_error(r < 0 ? E_READ : E_DATA, r < 0 ? errno : 0);
		} else {
			(*cycles)++;
		}
		close(fd);
	}
	free(req);
	free(resp);
	return NULL;
}

static int run_client(int threads, unsigned ms)
{
	pthread_t tid[MAX_THREADS];
	uint64_t cycles[MAX_THREADS] = { 0 }, total = 0, errors = 0;
	uint64_t start = crr_now_ns();
	double secs;

	g_deadline_ns = start + (uint64_t)ms * 1000000ull;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, client_thread, &cycles[i]) != 0)
			return perror("pthread_create"), 2;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		total += cycles[i];
	}
	secs = (crr_now_ns() - start) / 1e9;
	for (int w = 0; w < E_WHERE_MAX; w++)
		for (int e = 0; e < 256; e++)
			errors += err_count[w][e];
	printf("CRR cycles=%llu errors=%llu secs=%.3f rate=%.1f\n", (unsigned long long)total,
	       (unsigned long long)errors, secs, total / secs);
	for (int w = 0; w < E_WHERE_MAX; w++)
		for (int e = 0; e < 256; e++)
			if (err_count[w][e])
				printf("ERR %s %s %lu\n", where_name[w], e ? strerrorname_np(e) : "-",
				       err_count[w][e]);
	return 0;
}

int main(int argc, char **argv)
{
	int opt, threads = 1;
	unsigned ms = 3000;

	if (argc < 2)
		goto usage;
	optind = 2;
	while ((opt = getopt(argc, argv, "p:T:c:t:m:")) != -1) {
		switch (opt) {
		case 'p': g_port = atoi(optarg); break;
		case 'T':
		case 'c': threads = atoi(optarg); break;
		case 't': ms = (unsigned)atoi(optarg); break;
		case 'm': g_msg = (size_t)atol(optarg); break;
		default: goto usage;
		}
	}
	if (threads < 1 || threads > MAX_THREADS || g_msg == 0)
		goto usage;
	if (strcmp(argv[1], "server") == 0)
		return run_server(threads);
	if (strcmp(argv[1], "client") == 0 && g_port > 0)
		return run_client(threads, ms);
usage:
	fprintf(stderr, "usage: crr server [-p PORT] [-T THREADS] [-m BYTES]\n"
			"       crr client -p PORT [-c THREADS] [-t MS] [-m BYTES]\n");
	return 2;
}
