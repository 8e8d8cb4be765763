/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A child that shares our memory (clone(CLONE_VM | CLONE_VFORK), not a thread) execs
 * /bin/true with an upgraded connection inherited; the parent then goes on using it.
 * The child's exec must leave the parent's connection, its locks and its state as they
 * were: nothing is carried out of a memory shared with another process.
 *
 *   clone_vm_exec PORT
 *
 * connects to an echo server on 127.0.0.1:PORT, sends and reads one line, clones the
 * child, waits for it, sends and reads a second line: prints "OK" and exits 0, or says
 * what failed and exits 1.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char child_stack[64 * 1024] __attribute__((aligned(16)));

static int child(void *arg)
{
	(void)arg;
	execl("/bin/true", "true", (char *)NULL);
	_exit(127);
}

static int echo(int s, const char *line)
{
	char buf[16];
	size_t n = strlen(line);

	if (send(s, line, n, 0) != (ssize_t)n || recv(s, buf, n, MSG_WAITALL) != (ssize_t)n ||
	    memcmp(buf, line, n) != 0) {
		printf("FAIL echo of %s", line);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int s, st = 0;
	pid_t pid;

	if (argc != 2)
		return 2;
	sa.sin_port = htons((uint16_t)atoi(argv[1]));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect");
		return 1;
	}
	if (echo(s, "first\n") < 0)
		return 1;
	pid = clone(child, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
		    NULL);
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("FAIL the child (status %d)\n", st);
		return 1;
	}
	if (echo(s, "second\n") < 0)
		return 1;
	close(s);
	puts("OK");
	return 0;
}
