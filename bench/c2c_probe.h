/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * How far apart CPUs 0 and 1 are: the round trip of one cache line between two threads
 * pinned to them, in ns. On a VM the host may move the two vCPUs onto cores that share
 * no cache (another die or socket): the round trip goes from ~60-120 ns to ~340-420 ns on
 * the project's machine, and a shared-memory ring between the two CPUs runs 1.5-4x slower
 * while it lasts (seconds to minutes). Used by bench/c2c and by msgsize's -c, so that the
 * sweep can tell such stretches from the library's own behaviour.
 *
 * c2c_probe_ns(ms) runs both ends in threads of their own (the caller's affinity is left
 * alone) and returns the mean round trip over `ms` milliseconds, 0 when there are fewer
 * than two CPUs to pin to.
 */
#ifndef BENCH_C2C_PROBE_H
#define BENCH_C2C_PROBE_H

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <time.h>

struct c2c_probe {
	_Alignas(64) volatile long ball;
	_Alignas(64) volatile int done;
	_Alignas(64) int ms;
	int pinned[2];
	double ns;
};

static int c2c_pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static double c2c_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* CPU 1: answers every odd value with the next even one. */
static void *c2c_responder(void *arg)
{
	struct c2c_probe *p = arg;

	p->pinned[1] = c2c_pin(1) == 0;
	for (long v = 1; !p->done; v += 2) {
		while (p->ball != v && !p->done)
			;
		p->ball = v + 1;
	}
	return NULL;
}

/* CPU 0: serves the ball and times the answers. */
static void *c2c_server(void *arg)
{
	struct c2c_probe *p = arg;
	pthread_t responder;
	long trips = 0, v = 0;
	double start, end;

	p->pinned[0] = c2c_pin(0) == 0;
	if (!p->pinned[0] || pthread_create(&responder, NULL, c2c_responder, p) != 0)
		return NULL;
	start = c2c_now_ns();
	end = start + p->ms * 1e6;
	while (c2c_now_ns() < end) {
		for (int i = 0; i < 1000; i++) {
			p->ball = v + 1;
			while (p->ball != v + 2)
				;
			v += 2;
		}
		trips += 1000;
	}
	end = c2c_now_ns();
	p->done = 1;
	pthread_join(responder, NULL);
	if (p->pinned[1])
		p->ns = (end - start) / trips;
	return NULL;
}

static double c2c_probe_ns(int ms)
{
	struct c2c_probe p = { .ms = ms };
	pthread_t server;

	if (ms <= 0 || pthread_create(&server, NULL, c2c_server, &p) != 0)
		return 0;
	pthread_join(server, NULL);
	return p.ns;
}

#endif
