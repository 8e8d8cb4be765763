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
 *
 * fd_thread_race quiet: no loop; a connection to itself (its accept starts the
 * library's thread), and with it up the main thread closes its lowest free number and
 * looks at it for 2.5 s, which no thread of the library may take meanwhile (it opened
 * a proc file once a second there, and a thread polling a number it had just closed
 * saw a readable file). Output: RESULT echo=E fd=N taken=T looks=L; exit status 0 when the
 * line came back both ways and T is 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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

/* How often, in 2.5 s, the lowest free number was open. */
static long watch_lowest(int *n, long *looks)
{
	struct timespec now, end;
	long taken = 0;

	*n = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (*n < 0 || close(*n) < 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += 2;
	end.tv_nsec += 500000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	*looks = 0;
	do {
		for (int i = 0; i < 1000; i++, ++*looks)
			taken += fcntl(*n, F_GETFD) >= 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec < end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
	return taken;
}

/* Both ends in this process: the accepting side starts the library's thread. */
static int quiet_main(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	long taken, looks = 0;
	char buf[8];
	int l = socket(AF_INET, SOCK_STREAM, 0), c, s, ok, n = -1;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &alen) < 0 ||
	    (c = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(c, (struct sockaddr *)&a, sizeof(a)) < 0 || (s = accept(l, NULL, NULL)) < 0) {
		perror("setup");
		return 2;
	}
	ok = write(c, "line\n", 5) == 5 && recv(s, buf, 5, MSG_WAITALL) == 5 &&
	     write(s, buf, 5) == 5 && recv(c, buf, 5, MSG_WAITALL) == 5 &&
	     memcmp(buf, "line\n", 5) == 0;
	taken = watch_lowest(&n, &looks);
	close(c);
	close(s);
	close(l);
	printf("RESULT echo=%d fd=%d taken=%ld looks=%ld\n", ok, n, taken, looks);
	return ok && taken == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	char buf[16];
	pthread_t t;
	int s, ok, foreign;

	if (argc == 2 && strcmp(argv[1], "quiet") == 0)
		return quiet_main();
	if (argc != 3 || getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
		fprintf(stderr, "usage: fd_thread_race HOST PORT | fd_thread_race quiet\n");
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
