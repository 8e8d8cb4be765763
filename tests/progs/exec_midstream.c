/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * exec_midstream: a connection handed to a new program image by exec in the middle of
 * a stream both ways (tests/integration/exec.sh).
 *
 *   exec_midstream server PORT [OPTIONS]   listens on 127.0.0.1:PORT, serves one client
 *   exec_midstream client PORT [OPTIONS]   connects to 127.0.0.1:PORT
 *
 * Each side sends BYTES of a stream whose byte at offset o is a function of o and of
 * the sender (server and client streams differ, so a byte that comes back to its own
 * sender is told apart), and checks every byte it receives against its offset; then
 * it shuts its sending half and must read exactly BYTES and then the end of the
 * stream.
 *
 * The side given --exec MODE (either one) reads FIRST_READ bytes, writes FIRST_WRITE
 * bytes, stops reading for PAUSE_MS (its peer keeps writing and fills the ring it
 * reads from), clears FD_CLOEXEC on the connection and hands it to a new image of
 * this program in the "continue" role, which goes on from the offsets reached both
 * ways over the inherited descriptor. MODE:
 *   none        no exec: the same image continues (the control run)
 *   keep        execv(): the environment is kept, the new image runs under the library
 *   nopreload   execve() with LD_PRELOAD taken out of the environment
 *   empty       execve() with an empty environment (as a setuid program's is cleaned)
 *   fexecve     fexecve() of /proc/self/exe, the environment kept
 *   spawn       posix_spawn() of the new image; the parent closes its copy of the
 *               connection and waits for the child, and exits with its status
 *   system      system("exec NEW-IMAGE..."): through /bin/sh, the parent waits
 *   fork-exec   fork(), the child execv()s the new image, the parent closes its copy
 *               and waits (inetd, sshd)
 *   fork        fork(), the child goes on in the same image (no exec: a backend per
 *               connection), the parent closes its copy and waits
 * The other side (the peer) writes its whole stream at once from a thread while it
 * reads: it reads HOLD_AT bytes, then stops reading for HOLD_MS (longer than the exec
 * side's pause, so the ring it reads from still holds unread bytes when the exec
 * happens), then reads the rest.
 *
 * OPTIONS: --exec MODE, --bytes N (default 8m), --first-read N (100k), --first-write N
 * (300k), --pause-ms MS (500), --hold-at N (64k), --hold-ms MS (1500), --timeout S (60:
 * the whole run of this side, the continuing image included, SIGALRM ends it).
 * Sizes take k, m and g suffixes.
 *
 * Output (stdout): "EXEC ROLE pid=P mode=M fd=F sent=S received=R" before the exec;
 * "CONTINUE ROLE pid=P preloaded=yes|no sockets=N eventfds=N memfds=N memfd_maps=N" from
 * the new image before it touches the connection (descriptors and mappings it was
 * given); "OK ROLE pid=P sent=N received=N" at the end; the peer then
 * "RESOURCES ROLE pid=P memfds=N memfd_maps=N" once its connection is closed (the
 * library's rings must be gone within 5 s). On stderr a mismatch names the first
 * wrong offset, the byte got and the one expected, and where in either stream the
 * bytes that came would belong.
 * Exit status: 0 pass, 1 data mismatch, 2 I/O error or early end of the stream, 3
 * timeout, 4 usage or setup error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CHUNK 65521 /* prime: writes and reads fall across every ring boundary */
#define LOCATE_SPAN (32ull << 20)
#define LOCATE_LEN 32

enum { X_OK_ = 0, X_MISMATCH = 1, X_IO = 2, X_TIMEOUT = 3, X_USAGE = 4 };

static const char *role = "?";
static uint8_t tx_tag, rx_tag;
static _Atomic uint64_t sent_at, received_at;
static char self_exe[4096];

static uint8_t pat(uint8_t tag, uint64_t o)
{
	uint64_t x = (o >> 3) * 0x9E3779B97F4A7C15ull ^ (uint64_t)tag * 0xD1B54A32D192ED03ull;

	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 29;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 32;
	return (uint8_t)(x >> ((o & 7) * 8));
}

static void fill(uint8_t *buf, uint8_t tag, uint64_t off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pat(tag, off + i);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Async-signal-safe: a timeout names where each direction stood. */
static void put_u64(char *p, size_t *n, uint64_t v)
{
	char t[24];
	int k = 0;

	do
		t[k++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (k > 0)
		p[(*n)++] = t[--k];
}

static void on_alarm(int sig)
{
	char b[200];
	size_t n = 0;
	const char *s;

	(void)sig;
	for (s = "TIMEOUT "; *s; s++)
		b[n++] = *s;
	for (s = role; *s && n < 40; s++)
		b[n++] = *s;
	for (s = " sent="; *s; s++)
		b[n++] = *s;
	put_u64(b, &n, atomic_load(&sent_at));
	for (s = " received="; *s; s++)
		b[n++] = *s;
	put_u64(b, &n, atomic_load(&received_at));
	b[n++] = '\n';
	if (write(STDERR_FILENO, b, n) < 0)
		_exit(X_TIMEOUT);
	_exit(X_TIMEOUT);
}

static void arm_timeout(unsigned secs)
{
	struct sigaction sa = { .sa_handler = on_alarm };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	alarm(secs);
}

/* ------------------------------------------------------------------ the streams */

/* Where in either stream the LEN bytes that came at offset OFF belong, for the report. */
static void locate(const uint8_t *got, size_t len, uint64_t off)
{
	uint8_t tags[2] = { rx_tag, tx_tag };
	uint64_t lo = off > LOCATE_SPAN ? off - LOCATE_SPAN : 0;

	if (len > LOCATE_LEN)
		len = LOCATE_LEN;
	if (len < 8) {
		fprintf(stderr, "  (too few bytes to tell where they belong)\n");
		return;
	}
	for (int t = 0; t < 2; t++)
		for (uint64_t c = lo; c < off + LOCATE_SPAN; c++) {
			size_t j = 0;

			while (j < len && pat(tags[t], c + j) == got[j])
				j++;
			if (j == len) {
				fprintf(stderr, "  the bytes there are the %s stream's at offset %" PRIu64
					" (%+" PRId64 ")\n", t == 0 ? "peer's" : "own (echoed)", c,
					(int64_t)(c - off));
				return;
			}
		}
	fprintf(stderr, "  the bytes there belong to neither stream within %llu MiB\n",
		LOCATE_SPAN >> 20);
}

/* Sends the own stream from where it stands (sent_at) up to END. */
static int send_range(int fd, uint64_t end)
{
	static _Thread_local uint8_t buf[CHUNK];

	while (atomic_load(&sent_at) < end) {
		uint64_t pos = atomic_load(&sent_at);
		size_t n = end - pos < CHUNK ? (size_t)(end - pos) : CHUNK;
		size_t done = 0;

		fill(buf, tx_tag, pos, n);
		while (done < n) {
			ssize_t w = send(fd, buf + done, n - done, MSG_NOSIGNAL);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				fprintf(stderr, "ERROR %s: send at offset %" PRIu64 " of %" PRIu64
					": %s\n", role, pos + done, end,
					w < 0 ? strerror(errno) : "returned 0");
				return X_IO;
			}
			done += (size_t)w;
			atomic_store(&sent_at, pos + done);
		}
	}
	return X_OK_;
}

/* Receives and checks the peer's stream up to END; with EXPECT_EOF the end of the
 * stream must follow. */
static int recv_range(int fd, uint64_t end, bool expect_eof)
{
	static _Thread_local uint8_t buf[CHUNK];

	for (;;) {
		uint64_t pos = atomic_load(&received_at);
		size_t want = end - pos < CHUNK ? (size_t)(end - pos) : CHUNK;
		ssize_t r;

		if (pos == end && !expect_eof)
			return X_OK_;
		if (want == 0)
			want = 1;
		r = recv(fd, buf, want, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "ERROR %s: recv at offset %" PRIu64 " of %" PRIu64 ": %s\n",
				role, pos, end, strerror(errno));
			return X_IO;
		}
		if (r == 0) {
			if (pos == end)
				return X_OK_;
			fprintf(stderr, "ERROR %s: end of stream at offset %" PRIu64 " of %" PRIu64
				"\n", role, pos, end);
			return X_IO;
		}
		if (pos == end) {
			fprintf(stderr, "ERROR %s: %zd bytes after the end of the stream (%" PRIu64
				")\n", role, r, end);
			locate(buf, (size_t)r, pos);
			return X_MISMATCH;
		}
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pat(rx_tag, pos + (uint64_t)i)) {
				fprintf(stderr, "MISMATCH %s: at offset %" PRIu64 ": got 0x%02x, want "
					"0x%02x\n", role, pos + (uint64_t)i, buf[i],
					pat(rx_tag, pos + (uint64_t)i));
				locate(buf + i, (size_t)(r - i), pos + (uint64_t)i);
				return X_MISMATCH;
			}
		atomic_store(&received_at, pos + (uint64_t)r);
	}
}

struct writer {
	int fd;
	uint64_t end;
	int rc;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	w->rc = send_range(w->fd, w->end);
	if (w->rc == X_OK_ && shutdown(w->fd, SHUT_WR) < 0) {
		fprintf(stderr, "ERROR %s: shutdown: %s\n", role, strerror(errno));
		w->rc = X_IO;
	}
	return NULL;
}

/* ------------------------------------------------------------------ resources */

struct res {
	int sockets, eventfds, memfds, memfd_maps;
};

static struct res resources(void)
{
	struct res r = { 0 };
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	FILE *f;
	char line[4096];

	while (d && (e = readdir(d)) != NULL) {
		char path[300], link[300];
		ssize_t n;

		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = '\0';
		r.sockets += strncmp(link, "socket:", 7) == 0;
		r.eventfds += strcmp(link, "anon_inode:[eventfd]") == 0;
		r.memfds += strncmp(link, "/memfd:", 7) == 0;
	}
	if (d)
		closedir(d);
	f = fopen("/proc/self/maps", "re");
	while (f && fgets(line, sizeof(line), f))
		r.memfd_maps += strstr(line, "/memfd:") != NULL;
	if (f)
		fclose(f);
	return r;
}

static bool preloaded(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4096];
	bool yes = false;

	while (f && !yes && fgets(line, sizeof(line), f))
		yes = strstr(line, "libsmc_preload") != NULL;
	if (f)
		fclose(f);
	return yes;
}

/* ------------------------------------------------------------------ the two sides */

/* Both directions from where they stand to BYTES, the end of the stream after it. */
static int finish(int fd, uint64_t bytes)
{
	struct writer w = { .fd = fd, .end = bytes };
	pthread_t t;
	int rc;

	if (pthread_create(&t, NULL, writer_main, &w) != 0) {
		fprintf(stderr, "ERROR %s: pthread_create\n", role);
		return X_USAGE;
	}
	rc = recv_range(fd, bytes, true);
	if (rc != X_OK_) {
		/* the writer may be stuck on a peer that stopped reading */
		fflush(stderr);
		_exit(rc);
	}
	pthread_join(t, NULL);
	if (w.rc != X_OK_)
		return w.rc;
	printf("OK %s pid=%d sent=%" PRIu64 " received=%" PRIu64 "\n", role, (int)getpid(),
	       atomic_load(&sent_at), atomic_load(&received_at));
	fflush(stdout);
	return X_OK_;
}

static int run_continue(int fd, uint64_t bytes)
{
	struct res r = resources();
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);

	printf("CONTINUE %s pid=%d preloaded=%s sockets=%d eventfds=%d memfds=%d memfd_maps=%d\n",
	       role, (int)getpid(), preloaded() ? "yes" : "no", r.sockets, r.eventfds, r.memfds,
	       r.memfd_maps);
	fflush(stdout);
	if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0) {
		fprintf(stderr, "ERROR %s: the inherited fd %d is not a connected socket: %s\n",
			role, fd, strerror(errno));
		return X_IO;
	}
	return finish(fd, bytes);
}

struct opts {
	const char *exec_mode;
	uint64_t bytes, first_read, first_write, hold_at;
	long pause_ms, hold_ms;
	unsigned timeout;
};

static int peer_side(int fd, const struct opts *o)
{
	struct writer w = { .fd = fd, .end = o->bytes };
	pthread_t t;
	struct res r;
	int rc, i;

	if (pthread_create(&t, NULL, writer_main, &w) != 0) {
		fprintf(stderr, "ERROR %s: pthread_create\n", role);
		return X_USAGE;
	}
	rc = recv_range(fd, o->hold_at < o->bytes ? o->hold_at : o->bytes, false);
	if (rc == X_OK_) {
		sleep_ms(o->hold_ms);
		rc = recv_range(fd, o->bytes, true);
	}
	if (rc != X_OK_) {
		fflush(stderr);
		_exit(rc);
	}
	pthread_join(t, NULL);
	if (w.rc != X_OK_)
		return w.rc;
	printf("OK %s pid=%d sent=%" PRIu64 " received=%" PRIu64 "\n", role, (int)getpid(),
	       atomic_load(&sent_at), atomic_load(&received_at));
	close(fd);
	/* the library frees a closed connection's rings a little after the close */
	for (i = 0; i < 50; i++) {
		r = resources();
		if (r.memfds == 0 && r.memfd_maps == 0)
			break;
		sleep_ms(100);
	}
	printf("RESOURCES %s pid=%d memfds=%d memfd_maps=%d\n", role, (int)getpid(), r.memfds,
	       r.memfd_maps);
	fflush(stdout);
	return X_OK_;
}

/* The environment without LD_PRELOAD. */
static char **env_without_preload(void)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	env[k] = NULL;
	return env;
}

static int exec_side(int fd, const struct opts *o)
{
	char a_fd[16], a_sent[24], a_recv[24], a_bytes[24], a_timeout[16];
	char *argv[10];
	char *empty_env[] = { NULL };
	unsigned left;
	int rc, status;
	pid_t pid;

	rc = recv_range(fd, o->first_read, false);
	if (rc == X_OK_)
		rc = send_range(fd, o->first_write);
	if (rc != X_OK_)
		return rc;
	/* the peer keeps writing: the ring this side reads from fills up */
	sleep_ms(o->pause_ms);
	if (strcmp(o->exec_mode, "none") == 0)
		return finish(fd, o->bytes);

	if (fcntl(fd, F_SETFD, 0) < 0) {
		fprintf(stderr, "ERROR %s: clearing FD_CLOEXEC: %s\n", role, strerror(errno));
		return X_USAGE;
	}
	left = alarm(0);
	snprintf(a_fd, sizeof(a_fd), "%d", fd);
	snprintf(a_sent, sizeof(a_sent), "%" PRIu64, atomic_load(&sent_at));
	snprintf(a_recv, sizeof(a_recv), "%" PRIu64, atomic_load(&received_at));
	snprintf(a_bytes, sizeof(a_bytes), "%" PRIu64, o->bytes);
	snprintf(a_timeout, sizeof(a_timeout), "%u", left ? left : 1);
	argv[0] = self_exe;
	argv[1] = "continue";
	argv[2] = (char *)role;
	argv[3] = a_fd;
	argv[4] = a_sent;
	argv[5] = a_recv;
	argv[6] = a_bytes;
	argv[7] = a_timeout;
	argv[8] = NULL;
	printf("EXEC %s pid=%d mode=%s fd=%d sent=%s received=%s\n", role, (int)getpid(),
	       o->exec_mode, fd, a_sent, a_recv);
	fflush(stdout);

	if (strcmp(o->exec_mode, "keep") == 0) {
		execv(self_exe, argv);
	} else if (strcmp(o->exec_mode, "nopreload") == 0) {
		char **env = env_without_preload();

		if (env)
			execve(self_exe, argv, env);
	} else if (strcmp(o->exec_mode, "empty") == 0) {
		execve(self_exe, argv, empty_env);
	} else if (strcmp(o->exec_mode, "fexecve") == 0) {
		int efd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

		if (efd >= 0)
			fexecve(efd, argv, environ);
	} else if (strcmp(o->exec_mode, "spawn") == 0) {
		int err = posix_spawn(&pid, self_exe, NULL, NULL, argv, environ);

		if (err != 0) {
			fprintf(stderr, "ERROR %s: posix_spawn: %s\n", role, strerror(err));
			return X_USAGE;
		}
		/* as an inetd-style server does: the child has the connection now */
		close(fd);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return WIFEXITED(status) ? WEXITSTATUS(status) : X_IO;
	} else if (strcmp(o->exec_mode, "fork-exec") == 0 || strcmp(o->exec_mode, "fork") == 0) {
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "ERROR %s: fork: %s\n", role, strerror(errno));
			return X_USAGE;
		}
		if (pid == 0) {
			if (strcmp(o->exec_mode, "fork") == 0) {
				arm_timeout(left ? left : 1);
				exit(finish(fd, o->bytes));
			}
			execv(self_exe, argv);
			fprintf(stderr, "ERROR %s: execv: %s\n", role, strerror(errno));
			_exit(X_USAGE);
		}
		close(fd);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return WIFEXITED(status) ? WEXITSTATUS(status) : X_IO;
	} else if (strcmp(o->exec_mode, "system") == 0) {
		char cmd[8192];

		snprintf(cmd, sizeof(cmd), "exec '%s' continue %s %s %s %s %s %s", self_exe, role,
			 a_fd, a_sent, a_recv, a_bytes, a_timeout);
		status = system(cmd);
		return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : X_IO;
	} else {
		fprintf(stderr, "ERROR: unknown exec mode '%s'\n", o->exec_mode);
		return X_USAGE;
	}
	fprintf(stderr, "ERROR %s: exec (%s): %s\n", role, o->exec_mode, strerror(errno));
	return X_USAGE;
}

/* ------------------------------------------------------------------ main */

static uint64_t size_arg(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (end == s || *end) {
		fprintf(stderr, "bad size '%s'\n", s);
		exit(X_USAGE);
	}
	return v;
}

static void usage(void)
{
	fprintf(stderr, "usage: exec_midstream server|client PORT [--exec none|keep|nopreload|"
		"empty|fexecve|spawn|system|fork-exec|fork] [--bytes N] [--first-read N] [--first-write N]\n"
		"       [--pause-ms MS] [--hold-at N] [--hold-ms MS] [--timeout S]\n");
	exit(X_USAGE);
}

static void set_role(const char *r)
{
	if (strcmp(r, "server") == 0) {
		role = "server";
		tx_tag = 'S';
		rx_tag = 'C';
	} else if (strcmp(r, "client") == 0) {
		role = "client";
		tx_tag = 'C';
		rx_tag = 'S';
	} else {
		usage();
	}
}

int main(int argc, char **argv)
{
	struct opts o = { .bytes = 8u << 20, .first_read = 100u << 10, .first_write = 300u << 10,
			  .hold_at = 64u << 10, .pause_ms = 500, .hold_ms = 1500, .timeout = 60 };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	ssize_t n;
	int fd, one = 1, rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return X_USAGE;
	self_exe[n] = '\0';
	if (argc < 3)
		usage();

	if (strcmp(argv[1], "continue") == 0) {
		/* continue ROLE FD SENT RECEIVED BYTES TIMEOUT */
		if (argc != 8)
			usage();
		set_role(argv[2]);
		atomic_store(&sent_at, size_arg(argv[4]));
		atomic_store(&received_at, size_arg(argv[5]));
		arm_timeout((unsigned)atoi(argv[7]));
		return run_continue(atoi(argv[3]), size_arg(argv[6]));
	}

	set_role(argv[1]);
	a.sin_port = htons((uint16_t)atoi(argv[2]));
	for (int i = 3; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		i++;
		if (strcmp(k, "--exec") == 0)
			o.exec_mode = v;
		else if (strcmp(k, "--bytes") == 0)
			o.bytes = size_arg(v);
		else if (strcmp(k, "--first-read") == 0)
			o.first_read = size_arg(v);
		else if (strcmp(k, "--first-write") == 0)
			o.first_write = size_arg(v);
		else if (strcmp(k, "--pause-ms") == 0)
			o.pause_ms = atol(v);
		else if (strcmp(k, "--hold-at") == 0)
			o.hold_at = size_arg(v);
		else if (strcmp(k, "--hold-ms") == 0)
			o.hold_ms = atol(v);
		else if (strcmp(k, "--timeout") == 0)
			o.timeout = (unsigned)atoi(v);
		else
			usage();
	}
	if (o.exec_mode && (o.first_read > o.bytes || o.first_write > o.bytes)) {
		fprintf(stderr, "--first-read and --first-write must not exceed --bytes\n");
		return X_USAGE;
	}
	arm_timeout(o.timeout);

	if (strcmp(role, "server") == 0) {
		int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 8) < 0) {
			fprintf(stderr, "ERROR server: listen on port %s: %s\n", argv[2],
				strerror(errno));
			return X_USAGE;
		}
		fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			fprintf(stderr, "ERROR server: accept: %s\n", strerror(errno));
			return X_USAGE;
		}
		close(lfd);
	} else {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			fprintf(stderr, "ERROR client: connect to port %s: %s\n", argv[2],
				strerror(errno));
			return X_USAGE;
		}
	}
	rc = o.exec_mode ? exec_side(fd, &o) : peer_side(fd, &o);
	fflush(stdout);
	return rc;
}
