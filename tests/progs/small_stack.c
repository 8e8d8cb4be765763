/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * small_stack PORT: a thread made with the smallest stack the C library allows
 * (PTHREAD_STACK_MIN, 16 KiB) connects to 127.0.0.1:PORT, sends 200,000 bytes and reads
 * them back (an echo server), as over TCP: the library's code under connect(), read()
 * and write() runs on that stack too.
 * Exit: 0 the bytes came back intact, 1 not, 2 a setup error (a crash: the signal).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LEN 200000

static int port, result = 2;
static char out[LEN], back[LEN];

static void *run(void *arg)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	size_t sent = 0, got = 0;
	int s;

	(void)arg;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		result = 1;
		return NULL;
	}
	while (got < LEN) {
		ssize_t n;

		if (sent < LEN) {
			n = send(s, out + sent, LEN - sent > 16384 ? 16384 : LEN - sent,
				 MSG_DONTWAIT);
			if (n > 0)
				sent += (size_t)n;
		}
		n = recv(s, back + got, LEN - got, sent < LEN ? MSG_DONTWAIT : 0);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0)
			break;
	}
	close(s);
	result = got == LEN && memcmp(out, back, LEN) == 0 ? 0 : 1;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_attr_t attr;
	pthread_t t;

	if (argc != 2)
		return 2;
	port = atoi(argv[1]);
	for (size_t i = 0; i < LEN; i++)
		out[i] = (char)(i * 5);
	if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN) != 0 ||
	    pthread_create(&t, &attr, run, NULL) != 0)
		return 2;
	pthread_join(t, NULL);
	printf("stack %zu: %s\n", (size_t)PTHREAD_STACK_MIN, result == 0 ? "echo intact" : "FAILED");
	return result;
}
