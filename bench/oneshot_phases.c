/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * oneshot_phases: where a one-shot client process spends its time.
 *
 *   oneshot_phases PORT N CMD [ARGS...]
 *
 * runs CMD N times in a row (CMD is usually `env LD_PRELOAD=... oneshot_phases PORT`,
 * which is then the client: it connects to 127.0.0.1:PORT, sends "PING\r\n" twice and
 * reads each answer, as to a redis-server, and closes) and prints the median of each
 * phase in microseconds: load (fork to the client's main()), connect, the first request
 * and answer, the second and the close, exit (main's return to waitpid()'s), total.
 * The client hands its timestamps to the parent on descriptor 100.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REPORT_FD 100
#define PHASES 6

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int client(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	double t[5];
	char buf[64];
	int s;

	t[0] = now_us();
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		return 1;
	}
	t[1] = now_us();
	if (write(s, "PING\r\n", 6) != 6 || read(s, buf, sizeof(buf)) <= 0)
		return 1;
	t[2] = now_us();
	if (write(s, "PING\r\n", 6) != 6 || read(s, buf, sizeof(buf)) <= 0)
		return 1;
	close(s);
	t[3] = now_us();
	t[4] = now_us();
	return write(REPORT_FD, t, sizeof(t)) == (ssize_t)sizeof(t) ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const char *const names[PHASES] = { "load", "connect", "rtt1", "rtt2+close",
						   "exit", "total" };
	double *v;
	int n;

	if (argc == 2)
		return client(atoi(argv[1]));
	if (argc < 4 || (n = atoi(argv[2])) < 1) {
		fprintf(stderr, "usage: oneshot_phases PORT N CMD [ARGS...]\n");
		return 2;
	}
	v = calloc((size_t)n * PHASES, sizeof(*v));
	if (!v)
		return 2;
	for (int i = 0; i < n; i++) {
		double t0, t5, r[5];
		int p[2], st;
		pid_t pid;

		if (pipe(p) < 0)
			return 2;
		t0 = now_us();
		pid = fork();
		if (pid == 0) {
			close(p[0]);
			dup2(p[1], REPORT_FD);
			execvp(argv[3], argv + 3);
			_exit(127);
		}
		close(p[1]);
		if (pid < 0 || read(p[0], r, sizeof(r)) != (ssize_t)sizeof(r)) {
			fprintf(stderr, "run %d: no timestamps from the client\n", i);
			return 1;
		}
		close(p[0]);
		waitpid(pid, &st, 0);
		t5 = now_us();
		v[i * PHASES + 0] = r[0] - t0;
		v[i * PHASES + 1] = r[1] - r[0];
		v[i * PHASES + 2] = r[2] - r[1];
		v[i * PHASES + 3] = r[3] - r[2];
		v[i * PHASES + 4] = t5 - r[4];
		v[i * PHASES + 5] = t5 - t0;
	}
	for (int k = 0; k < PHASES; k++) {
		double *x = malloc((size_t)n * sizeof(*x));

		if (!x)
			return 2;
		for (int i = 0; i < n; i++)
			x[i] = v[i * PHASES + k];
		qsort(x, (size_t)n, sizeof(*x), cmp_double);
		printf("%s %.0f%s", names[k], x[n / 2], k + 1 < PHASES ? "  " : "\n");
		free(x);
	}
	free(v);
	return 0;
}
