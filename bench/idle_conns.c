/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * idle_conns: memory (and CPU) per idle connection with N connections open.
 *
 *   idle_conns -n N [-i IDLE_MS] [-p PORT]
 *       Starts itself again as the server (fork + exec of /proc/self/exe, so both sides
 *       are ordinary processes under the same LD_PRELOAD), opens N connections to it,
 *       exchanges one byte each way on every connection (so the connection is fully
 *       established, the SMC handshake included), then measures both processes:
 *       /proc/<pid>/smaps_rollup Pss and Rss, and open fds, before and after; and their
 *       CPU time (utime+stime from /proc/<pid>/stat) over IDLE_MS of doing nothing.
 *       Prints one line (n is how many connections could be opened: when the fd limit
 *       stops it early, the figures are for those):
 *         IDLE n=<n> wanted=<N> client_pss_kib=<per conn> server_pss_kib=<per conn>
 *              client_rss_kib=.. server_rss_kib=.. fds_per_conn=.. idle_cpu_pct=..
 *       (per-connection figures are (after - before) / N for that side; idle_cpu_pct
 *       is both processes together, in percent of one CPU).
 *       PORT is the server's port (0: any; a fixed port outside the ephemeral range
 *       still works when TIME_WAIT sockets have used the ephemeral ports up).
 *   idle_conns server -n N -p PORT (internal)
 *
 * RLIMIT_NOFILE is raised as far as the hard limit allows (root may raise that too).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the library's build passes -D_GNU_SOURCE, bench/run does not */
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct mem {
	long pss_kib, rss_kib, fds;
};

static void die(const char *what)
{
	fprintf(stderr, "idle_conns: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void raise_nofile(long want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if ((long)rl.rlim_max < want) {
		struct rlimit more = { .rlim_cur = (rlim_t)want, .rlim_max = (rlim_t)want };

		if (setrlimit(RLIMIT_NOFILE, &more) == 0)
			return;
	}
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

static long rollup_field(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			v = strtol(line + flen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static long count_fds(pid_t pid)
{
	char path[64];
	long n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2;
}

static struct mem measure(pid_t pid)
{
	struct mem m = { rollup_field(pid, "Pss"), rollup_field(pid, "Rss"), count_fds(pid) };

	return m;
}

/* utime+stime of pid in clock ticks. */
static long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the comm field may contain spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			 &st) != 2)
		return -1;
	return (long long)(ut + st);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int run_server(int n, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	socklen_t salen = sizeof(sa);
	sigset_t set;
	int lfd, sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &salen) < 0)
		die("server listen");
	printf("%d\n", ntohs(sa.sin_port));
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		char c;
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			/* out of fds: keep what is open, the client reports how far it got */
			fprintf(stderr, "idle_conns: server stopped at %d connections: %s\n", i,
				strerror(errno));
			break;
		}
		if (fd < 0)
			die("accept");
		if (read(fd, &c, 1) != 1 || write(fd, &c, 1) != 1)
			die("server ping");
		/* fd stays open: that is the point */
	}
	sigwait(&set, &sig);
	exit(0); /* atexit: stats file */
}

static pid_t start_server(int n, int *port)
{
	int pipefd[2];
	char nbuf[32], pbuf[32], line[32];
	pid_t pid;
	FILE *f;

	if (pipe(pipefd) < 0)
		die("pipe");
	snprintf(nbuf, sizeof(nbuf), "%d", n);
	snprintf(pbuf, sizeof(pbuf), "%d", *port);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		/* A client that crashes must not leave the server holding the caller's pipes. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		close(pipefd[1]);
		execl("/proc/self/exe", "idle_conns", "server", "-n", nbuf, "-p", pbuf, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	f = fdopen(pipefd[0], "r");
	if (!f || !fgets(line, sizeof(line), f))
		die("server did not start");
	fclose(f);
	*port = atoi(line);
	return pid;
}

static int run_client(int wanted, long idle_ms, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct mem cb, sb, ca, sa_;
	long long c0, s0, c1, s1;
	int n = wanted;
	int *fds = calloc((size_t)wanted, sizeof(int));
	int status;
	pid_t srv, self = getpid();

	if (!fds)
		die("calloc");
	srv = start_server(n, &port);
	sleep_ms(100);
	cb = measure(self);
	sb = measure(srv);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	for (int i = 0; i < wanted; i++) {
		struct timeval tv = { .tv_sec = 5 };
		char c = 'x';

		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fds[i] >= 0)
			setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    write(fds[i], &c, 1) != 1 || read(fds[i], &c, 1) != 1) {
			/* Most often EMFILE: the limit of this machine, reported, not fatal. */
			fprintf(stderr, "idle_conns: stopped at %d of %d connections: %s\n", i,
				wanted, strerror(errno));
			if (fds[i] >= 0)
				close(fds[i]);
			n = i;
			break;
		}
	}
	if (n == 0) {
		fprintf(stderr, "idle_conns: no connection could be opened\n");
		kill(srv, SIGKILL);
		return 1;
	}
	sleep_ms(200);
	ca = measure(self);
	sa_ = measure(srv);
	c0 = cpu_ticks(self);
	s0 = cpu_ticks(srv);
	sleep_ms(idle_ms);
	c1 = cpu_ticks(self);
	s1 = cpu_ticks(srv);
	printf("IDLE n=%d wanted=%d client_pss_kib=%.2f server_pss_kib=%.2f client_rss_kib=%.2f "
	       "server_rss_kib=%.2f fds_per_conn=%.2f idle_cpu_pct=%.2f\n",
	       n, wanted, (double)(ca.pss_kib - cb.pss_kib) / n, (double)(sa_.pss_kib - sb.pss_kib) / n,
	       (double)(ca.rss_kib - cb.rss_kib) / n, (double)(sa_.rss_kib - sb.rss_kib) / n,
	       (double)(ca.fds - cb.fds + sa_.fds - sb.fds) / n,
	       100.0 * (double)(c1 - c0 + s1 - s0) / (double)sysconf(_SC_CLK_TCK) /
		       (idle_ms / 1000.0));
	fflush(stdout);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	kill(srv, SIGTERM);
	if (waitpid(srv, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr, "idle_conns: server did not exit cleanly (status 0x%x)\n", status);
	free(fds);
	return 0;
}

int main(int argc, char **argv)
{
	int opt, n = 1000, port = 0;
	long idle_ms = 1000;
	int server = argc > 1 && strcmp(argv[1], "server") == 0;

	optind = server ? 2 : 1;
	while ((opt = getopt(argc, argv, "n:i:p:")) != -1) {
		switch (opt) {
		case 'n': n = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'i': idle_ms = atol(optarg); break;
		default:
			fprintf(stderr, "usage: idle_conns -n N [-i IDLE_MS] [-p PORT]\n");
			return 2;
		}
	}
	if (n < 1 || idle_ms < 1)
		return 2;
	/* Room for the sockets plus whatever the library keeps per connection. */
	raise_nofile((long)n * 6 + 1024);
	return server ? run_server(n, port) : run_client(n, idle_ms, port);
}
