/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * c2c: how far apart CPUs 0 and 1 are, as the round trip of one cache line between two
 * threads pinned to them (ns). On a VM the host may move the two vCPUs onto cores that
 * share no cache (another die or socket): the round trip goes from ~60 ns to ~340 ns on
 * the project's machine, and a shared-memory ring between the two CPUs runs ~6x slower
 * while it lasts. bench/run measures it around each message-size sweep curve so that
 * such rounds can be told from the library's own behaviour.
 *
 *   c2c [MS]   prints the mean round trip in ns over MS milliseconds (default 100);
 *              0 when there are fewer than two CPUs to pin to.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) volatile long ball;
static _Alignas(64) volatile int done;

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Answers every odd value with the next even one. */
static void *responder(void *arg)
{
	(void)arg;
	pin(1);
	for (long v = 1; !done; v += 2) {
		while (ball != v && !done)
			;
		ball = v + 1;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int ms = argc > 1 ? atoi(argv[1]) : 100;
	pthread_t t;
	long trips = 0, v = 0;
	double start, end;

	if (ms <= 0 || pin(0) != 0 || pthread_create(&t, NULL, responder, NULL) != 0) {
		puts("0");
		return 0;
	}
	start = now_ns();
	end = start + ms * 1e6;
	while (now_ns() < end) {
		for (int i = 0; i < 1000; i++) {
			ball = v + 1;
			while (ball != v + 2)
				;
			v += 2;
		}
		trips += 1000;
	}
	end = now_ns();
	done = 1;
	pthread_join(t, NULL);
	printf("%.0f\n", (end - start) / trips);
	return 0;
}
