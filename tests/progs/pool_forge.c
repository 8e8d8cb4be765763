/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * pool_forge: a local process that tries to take over another user's TCP connection
 * through a connection pool (core/shm/pool.h), for tests/integration/pool_forge.sh.
 *
 *   pool_forge PORT VICTIM_PORT
 *
 * Not preloaded: it drives the library's pool code directly. It asks the preloaded
 * server on 127.0.0.1:PORT for a pool, as a client of the library would (a request to
 * the listener's rendezvous name, then one connection from an odd port, on whose
 * accept the server answers), then offers a slot naming 127.0.0.1:VICTIM_PORT: the
 * port another process has bound and is about to connect from. A server that trusted
 * the slot would run the victim's connection on our slot; the library's server must
 * instead find that the victim's socket is not ours (sock_diag) and abort that one
 * connection. Prints "OFFERED" once the slot is out, then waits up to 5 s and prints
 * the slot's final word; exit 0 once OFFERED was printed, 1 before.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/real.h"
#include "core/negotiate/hs_policy.h"
#include "core/shm/pool.h"

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* One plain request/response from an odd port: the accept that answers requests. */
static int poke_server(int port)
{
	struct sockaddr_in dst = loopback(port), any = loopback(0);
	char buf[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0), r = -1;
	size_t got = 0;

	memset(buf, 'p', sizeof(buf));
	if (fd < 0 || bind(fd, (struct sockaddr *)&any, sizeof(any)) < 0 ||
	    connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 ||
	    write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
		goto out;
	while (got < sizeof(buf)) {
		ssize_t n = read(fd, buf + got, sizeof(buf) - got);

		if (n <= 0)
			goto out;
		got += (size_t)n;
	}
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	return r;
}

int main(int argc, char **argv)
{
	struct sockaddr_in dst, victim;
	struct smc_pool *p = NULL;
	struct timespec ms10 = { 0, 10 * 1000 * 1000 };
	uint64_t key;
	int slot;

	if (argc != 3) {
		fprintf(stderr, "usage: pool_forge PORT VICTIM_PORT\n");
		return 2;
	}
	real_init();
	config_load(NULL);
	dst = loopback(atoi(argv[1]));
	victim = loopback(atoi(argv[2]));
	key = hs_policy_key((struct sockaddr *)&dst);
	if (pool_client_route((struct sockaddr *)&dst, key, &p) != POOL_ROUTE_FULL) {
		printf("ERROR no pool request sent\n");
		return 1;
	}
	if (poke_server(atoi(argv[1])) < 0) {
		printf("ERROR the request/response to the server failed\n");
		return 1;
	}
	for (int i = 0; i < 100 && !p; i++) {
		if (pool_client_route((struct sockaddr *)&dst, key, &p) == POOL_ROUTE_POOL)
			break;
		nanosleep(&ms10, NULL);
	}
	if (!p) {
		printf("ERROR the server did not answer the pool request\n");
		return 1;
	}
	slot = pool_client_offer(p, (struct sockaddr *)&victim);
	if (slot < 0) {
		printf("ERROR no slot\n");
		return 1;
	}
	printf("OFFERED slot %d for port %s\n", slot, argv[2]);
	fflush(stdout);
	for (int i = 0; i < 500; i++) {
		struct shm_map map;
		int bells[4];

		pool_slot_conn(p, slot, &map, bells);
		if (map.hdr->dir[1].wflags & SHM_W_ABORT)
			break;
		nanosleep(&ms10, NULL);
	}
	{
		struct shm_map map;
		int bells[4];

		pool_slot_conn(p, slot, &map, bells);
		printf("DONE server %s\n",
		       (map.hdr->dir[1].wflags & SHM_W_ABORT) ? "aborted the slot" : "did not abort");
	}
	return 0;
}
