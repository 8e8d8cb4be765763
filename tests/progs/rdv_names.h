/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The abstract per-connection rendezvous name of a loopback connection, spelled as
 * core/base/rendezvous.c spells it, for the test programs that play another user binding
 * or connecting to it (rdv_squat, rdv_attack). Written out here rather than taken
 * from the core: a test that used the library's own spelling would not notice it
 * change.
 */
#ifndef SMC_TESTS_RDV_NAMES_H
#define SMC_TESTS_RDV_NAMES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

static inline size_t rdv_hex_append(char *dst, const uint8_t *src, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		dst[2 * i] = digits[src[i] >> 4];
		dst[2 * i + 1] = digits[src[i] & 15];
	}
	return 2 * n;
}

/* 127.0.0.1:port as the rendezvous spells an endpoint: IPv4-mapped IPv6, then the port,
 * both in hex, network order. */
static inline size_t rdv_loopback_endpoint(char *dst, uint16_t port)
{
	uint8_t a[18] = { [10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1 };

	a[16] = (uint8_t)(port >> 8);
	a[17] = (uint8_t)port;
	return rdv_hex_append(dst, a, sizeof(a));
}

/* The name of the connection from 127.0.0.1:client_port to 127.0.0.1:server_port. */
static inline socklen_t rdv_conn_name(struct sockaddr_un *un, uint16_t client_port,
				      uint16_t server_port)
{
	char *p = un->sun_path + 1; /* abstract: leading NUL */

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	p += sprintf(p, "smcp1:c:");
	p += rdv_loopback_endpoint(p, client_port);
	*p++ = '-';
	p += rdv_loopback_endpoint(p, server_port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - un->sun_path));
}

#endif
