/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * fd_thread_race HOST PORT: one thread opens and closes /dev/null in a loop while the
 * main thread makes the process's first connection (under the library: the one that
 * starts its background thread), exchanges a line on it and closes it. The kernel gives
 * the loop the lowest free number every time; a number from 1024 up (past select()'s
 * FD_SETSIZE) is one it would never get without the library.
 *
 * Output: RESULT highest=N; exit status 0 when N < 1024 and the line came back, 1 when
 * not, 2 on a setup error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile int stop;
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
	int s, ok;

	if (argc != 3 || getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
		fprintf(stderr, "usage: fd_thread_race HOST PORT\n");
		return 2;
	}
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
	usleep(20000);
	stop = 1;
	pthread_join(t, NULL);
	close(s);
	freeaddrinfo(ai);
	printf("RESULT highest=%d echo=%d\n", highest, ok);
	return ok && highest < 1024 ? 0 : 1;
}
