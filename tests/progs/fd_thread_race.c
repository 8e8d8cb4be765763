/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * fd_thread_race HOST PORT: one thread opens and closes /dev/null in a loop while the
 * main thread makes the process's first connection (under the library: the one that
 * starts its background thread), exchanges a line on it and closes it. The kernel gives
 * the loop the lowest free number every time; a number from 1024 up (past select()'s
 * FD_SETSIZE) is one it would never get without the library.
 *
 * While the connection is up it also counts the descriptors from 3 to 1023 that it did
 * not inherit and that are epoll sets, eventfds or pipes, which it makes none of: the
 * library's must sit above them, in a program with threads as in one without.
 *
 * Output: RESULT highest=N echo=E foreign=F; exit status 0 when N < 1024, the line came
 * back and F is 0, 1 when not, 2 on a setup error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile int stop;

/* Open at the start (a make jobserver's pipes, say): not the library's. */
static bool inherited[1024];

/* Descriptors from 3 to 1023 that are epoll sets, eventfds or pipes, and were not open
 * at the start. */
static int foreign_low(void)
{
	char path[64], link[128];
	int n = 0;

	for (int fd = 3; fd < 1024; fd++) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0 || inherited[fd])
			continue;
		link[len] = '\0';
		if (strncmp(link, "anon_inode:", 11) == 0 || strncmp(link, "pipe:", 5) == 0)
			n++;
	}
	return n;
}
static int highest = -1;

static void *open_loop(void *arg)
{
	(void)arg;
	while (!stop) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (fd > highest)
			highest = fd;
		if (fd >= 0)
			close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	char buf[16];
	pthread_t t;
	int s, ok, foreign;

	if (argc != 3 || getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
		fprintf(stderr, "usage: fd_thread_race HOST PORT\n");
		return 2;
	}
	for (int fd = 3; fd < 1024; fd++)
		inherited[fd] = fcntl(fd, F_GETFD) >= 0;
	if (pthread_create(&t, NULL, open_loop, NULL) != 0)
		return 2;
	usleep(20000); /* the loop is running */
	s = socket(ai->ai_family, SOCK_STREAM, 0);
	if (s < 0 || connect(s, ai->ai_addr, ai->ai_addrlen) < 0) {
		perror("connect");
		return 2;
	}
	ok = write(s, "line\n", 5) == 5 && recv(s, buf, 5, MSG_WAITALL) == 5 &&
	     memcmp(buf, "line\n", 5) == 0;
	foreign = foreign_low();
	usleep(20000);
	stop = 1;
	pthread_join(t, NULL);
	close(s);
	freeaddrinfo(ai);
	printf("RESULT highest=%d echo=%d foreign=%d\n", highest, ok, foreign);
	return ok && highest < 1024 && foreign == 0 ? 0 : 1;
}
