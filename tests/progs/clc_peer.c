/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * clc_peer: plays a Linux kernel AF_SMC peer on the wire, without smc.ko, so the
 * library's answers to kernel peers can be checked on any machine with the eBPF program
 * set up (it opts its sockets in for the SMC TCP option through the same map).
 *
 *   clc_peer client HOST PORT v2|v1d|bad   kernel client: sends an SMC v2 Proposal
 *       (SMC-R v1 + SMC-D v2, as __smc_connect builds it), an SMC-D v1 Proposal, or a
 *       malformed one. v2/v1d: expects one v1 Decline of class 0x0303 ("no SMC device"),
 *       then sends REQ and expects RESP over plain TCP. bad: expects the connection reset.
 *   clc_peer server PORT decline|accept    kernel server: reads the client's Proposal
 *       and checks it as the kernel does (smc_clc_msg_prop_valid), then answers with a
 *       v1 Decline (no SMC-R device), or with an SMC-R v1 Accept and expects the client's
 *       Decline; then expects REQ and answers RESP.
 *
 * REQ and RESP are fixed lines. Prints "OK ..." and exits 0, or "ERROR ..." and 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/negotiate/tcpopt.h"
#include "core/wire/clc.h"

#define REQ "clc_peer request\n"
#define RESP "clc_peer response\n"

static void die(const char *fmt, ...)
{
	va_list ap;

	printf("ERROR ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	exit(1);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void send_all(int fd, const void *buf, size_t len)
{
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		die("send: %s", strerror(errno));
}

/* Exactly len bytes; 0 on EOF first, -errno on error. */
static ssize_t recv_all(int fd, void *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t r = recv(fd, (uint8_t *)buf + off, len - off, 0);

		if (r == 0)
			return (ssize_t)off;
		if (r < 0)
			return -errno;
		off += (size_t)r;
	}
	return (ssize_t)off;
}

/* One CLC message, framed as the kernel's smc_clc_wait_msg reads it. */
static size_t recv_clc(int fd, uint8_t *buf)
{
	ssize_t r = recv_all(fd, buf, CLC_HDR_LEN);
	uint16_t len;

	if (r != CLC_HDR_LEN)
		die("no CLC header (%zd)", r);
	len = get16(buf + 5);
	if (len < CLC_MIN_LEN || len > CLC_MAX_LEN)
		die("CLC length %u", len);
	if (recv_all(fd, buf + CLC_HDR_LEN, len - CLC_HDR_LEN) != len - CLC_HDR_LEN)
		die("short CLC message");
	return len;
}

static void expect_line(int fd, const char *want)
{
	char got[64] = "";
	ssize_t r = recv_all(fd, got, strlen(want));

	if (r != (ssize_t)strlen(want) || memcmp(got, want, strlen(want)) != 0)
		die("expected %s got %zd bytes: %.*s", want, r, r > 0 ? (int)r : 0, got);
}

static void opt_in(int fd)
{
	if (!tcpopt_available() || tcpopt_opt_in(fd) < 0)
		die("cannot opt in for the SMC TCP option (is the eBPF program set up?)");
}

static void expect_option(int fd)
{
	if (tcpopt_peer_sent(fd) != 1)
		die("the peer did not send the SMC TCP option");
}

/* An SMC v2 Proposal as a kernel without devices would build it: SMC-R v1 (B) and
 * SMC-D v2, with the SMC-D area, an IPv4 prefix, the v2 and SMC-Dv2 extensions. */
static size_t kernel_v2_proposal(uint8_t *b)
{
	size_t len = 40 + 40 + 8 + 40 + 48 + 4;

	memset(b, 0, len);
	memcpy(b, "\xE2\xD4\xC3\xD9", 4);
	b[4] = CLC_PROPOSAL;
	put16(b + 5, (uint16_t)len);
	b[7] = 0x20 | (1 << 2) | 3; /* version 2, typev2 D, typev1 B */
	put16(b + 38, 40);            /* iparea offset: the SMC-D area */
	put16(b + 40 + 10, 40 - 12 + 8); /* v2 extension after the prefix */
	b[80] = 10, b[81] = 0, b[82] = 0, b[83] = 0, b[84] = 8; /* 10.0.0.0/8 */
	b[88 + 3] = 0x10;           /* release 1 */
	put16(b + 88 + 6, 32);      /* SMC-Dv2 extension right after the v2 one */
	memcpy(b + len - 4, "\xE2\xD4\xC3\xD9", 4);
	return len;
}

/* An SMC-D v1 Proposal (typev1 D: ISM GID and CHID in the SMC-D area). */
static size_t kernel_v1d_proposal(uint8_t *b)
{
	size_t len = 40 + 40 + 8 + 4;

	memset(b, 0, len);
	memcpy(b, "\xE2\xD4\xC3\xD9", 4);
	b[4] = CLC_PROPOSAL;
	put16(b + 5, (uint16_t)len);
	b[7] = 0x10 | 1;
	put16(b + 38, 40);
	memcpy(b + 40, "\x00\x11\x22\x33\x44\x55\x66\x77\x00\x01", 10);
	b[80] = 10, b[84] = 8;
	memcpy(b + len - 4, "\xE2\xD4\xC3\xD9", 4);
	return len;
}

static int run_client(const char *host, int port, const char *mode)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	uint8_t b[CLC_MAX_LEN];
	size_t n;
	uint32_t diag;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = { .tv_sec = 10 };

	if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("socket/address");
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	opt_in(fd);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect: %s", strerror(errno));
	expect_option(fd);
	n = strcmp(mode, "v1d") == 0 ? kernel_v1d_proposal(b) : kernel_v2_proposal(b);
	if (strcmp(mode, "bad") == 0)
		b[n - 1] = 0; /* trailer eyecatcher broken */
	send_all(fd, b, n);
	if (strcmp(mode, "bad") == 0) {
		ssize_t r = recv(fd, b, sizeof(b), 0);

		if (r < 0 && errno == ECONNRESET) {
			printf("OK client mode=bad reset\n");
			return 0;
		}
		die("malformed Proposal: expected a reset, got %zd (%s)", r,
		    r < 0 ? strerror(errno) : "data or EOF");
	}
	n = recv_clc(fd, b);
	if (n != 28 || b[4] != CLC_DECLINE || b[7] >> 4 != 1 ||
	    memcmp(b + n - 4, "\xE2\xD4\xC3\xD9", 4) != 0)
		die("expected a 28-byte v1 SMC-R Decline (type %u len %zu)", b[4], n);
	diag = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
	if (diag >> 16 != 0x0303)
		die("Decline reason 0x%08x, expected 0x0303xxxx", diag);
	send_all(fd, REQ, strlen(REQ));
	expect_line(fd, RESP);
	printf("OK client mode=%s decline=0x%08x\n", mode, diag);
	close(fd);
	return 0;
}

/* What the kernel checks before answering a v1 Proposal. */
static void check_proposal(const uint8_t *b, size_t n)
{
	uint16_t off = get16(b + 38);

	if (memcmp(b, "\xE2\xD4\xC3\xD9", 4) != 0 || b[4] != CLC_PROPOSAL || b[7] >> 4 != 1)
		die("not an SMC-R v1 Proposal");
	if ((b[7] & 3) == 2 || off > 40)
		die("typev1 N or IP area offset %u", off);
	if (n != 40u + off + 8 + 17u * b[40 + off + 7] + 4)
		die("Proposal length %zu does not match its IP area", n);
	if (off == 40 && get16(b + 40 + 10) != 0)
		die("nonzero v2 extension offset in a v1 Proposal");
	if (memcmp(b + n - 4, "\xE2\xD4\xC3\xD9", 4) != 0)
		die("trailer");
}

static int run_server(int port, const char *mode)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct clc_msg m = { .variant = CLC_SMCR };
	uint8_t b[CLC_MAX_LEN];
	size_t n;
	int one = 1, fd, l = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = { .tv_sec = 10 };

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind: %s", strerror(errno));
	opt_in(l);
	if (listen(l, 4) < 0)
		die("listen");
	printf("listening\n");
	fflush(stdout);
	fd = accept(l, NULL, NULL);
	if (fd < 0)
		die("accept");
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	expect_option(fd);
	n = recv_clc(fd, b);
	check_proposal(b, n);
	if (strcmp(mode, "accept") == 0) {
		m.type = CLC_ACCEPT;
		m.flags = CLC_FLAG_FIRST_CONTACT;
		memset(m.u.r_acc.lcl.gid, 0xfe, CLC_GID_LEN);
		m.u.r_acc.qpn = 0x1234;
		m.u.r_acc.rmb_rkey = 0x55;
		m.u.r_acc.rmbe_idx = 1;
		m.u.r_acc.rmbe_alert_token = 7;
		m.u.r_acc.rmbe_size = 2;
		m.u.r_acc.qp_mtu = CLC_MTU_1024;
		m.u.r_acc.rmb_vaddr = 0x10000;
		m.u.r_acc.psn = 0x42;
	} else {
		m.type = CLC_DECLINE;
		m.u.r_decl.diag = CLC_DECL_NOSMCRDEV;
	}
	n = (size_t)clc_encode(&m, b, sizeof(b));
	send_all(fd, b, n);
	if (strcmp(mode, "accept") == 0) {
		n = recv_clc(fd, b);
		if (n != 28 || b[4] != CLC_DECLINE)
			die("expected the client's Decline after our Accept (type %u)", b[4]);
	}
	expect_line(fd, REQ);
	send_all(fd, RESP, strlen(RESP));
	shutdown(fd, SHUT_WR);
	(void)recv(fd, b, 1, 0);
	printf("OK server mode=%s\n", mode);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "client") == 0)
		return run_client(argv[2], atoi(argv[3]), argv[4]);
	if (argc == 4 && strcmp(argv[1], "server") == 0)
		return run_server(atoi(argv[2]), argv[3]);
	fprintf(stderr, "usage: clc_peer client HOST PORT v2|v1d|bad | server PORT decline|accept\n");
	return 2;
}
