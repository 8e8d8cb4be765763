/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: what a peer sends over the rendezvous and the in-band negotiation
 * (core/base/rendezvous.c, core/negotiate/negotiate.c), through real sockets as in a connection.
 *
 *  - byte 0 bit 0..1: how many descriptors the peer attaches, bits 2..3 how many the
 *    receiver accepts: the rest of the input goes as one seqpacket message through
 *    rdv_send/rdv_recv and then to clc_decode, as handshake.c receives a same-host
 *    message. Descriptors beyond what the receiver accepts must be closed, not leaked.
 *  - the same bytes as a TCP stream to the in-band readers: the server's reading of the
 *    client's first message (neg_server_try_offer, which answers with Declines), the
 *    client's reading of the server's answer (neg_client_answer), and neg_recv_msg until
 *    the stream is used up. None may consume more than the messages it reports.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/rendezvous.h"
#include "core/base/stats.h"
#include "core/negotiate/negotiate.h"
#include "core/wire/clc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The lowest free descriptor number: grows when a descriptor leaks. */
static int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		abort();
	close(fd);
	return fd;
}

/*
 * Whether descriptors were left open since the last call: the lowest free number moved
 * up past one that is not a pipe. The code under test opens sockets and /dev/null here,
 * never pipes; libFuzzer does: printing a newly covered function (NEW_FUNC) starts
 * llvm-symbolizer, whose two pipes stay open in this process.
 */
static bool fds_leaked(int *mark)
{
	int now = lowest_free_fd();
	struct stat st;

	for (int fd = *mark; fd < now; fd++)
		if (fstat(fd, &st) == 0 && !S_ISFIFO(st.st_mode))
			return true;
	*mark = now;
	return false;
}

static void seqpacket(const uint8_t *data, size_t size)
{
	static int sp[2] = { -1, -1 };
	int give = data[0] & 3, accept = (data[0] >> 2) & 3;
	int fds[4], got[4], ngot = 0;
	uint8_t buf[CLC_MAX_LEN];
	struct clc_msg m;
	ssize_t n;

	if (sp[0] < 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		abort();
	for (int i = 0; i < give; i++)
		if ((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
			abort();
	if (size - 1 > sizeof(buf))
		size = sizeof(buf) + 1;
	if (rdv_send(sp[0], data + 1, size - 1, fds, give) < 0)
		abort();
	for (int i = 0; i < give; i++)
		close(fds[i]);
	n = rdv_recv(sp[1], buf, sizeof(buf), got, &ngot, accept);
	if (n >= 0) {
		if ((size_t)n != size - 1 || ngot != give || ngot > accept)
			abort();
		(void)clc_decode(buf, (size_t)n, &m);
	}
	for (int i = 0; i < (n >= 0 ? ngot : 0); i++)
		close(got[i]);
}

/* A connected stream pair holding the input, its sending side shut for writing. */
static void stream_pair(int sv[2], const uint8_t *data, size_t size)
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
	    (size && write(sv[0], data, size) != (ssize_t)size) || shutdown(sv[0], SHUT_WR) < 0)
		abort();
}

static void stream(const uint8_t *data, size_t size)
{
	uint8_t buf[NEG_MSG_CAP];
	int sv[2];

	stream_pair(sv, data, size);
	{
		struct clc_block blk;
		struct clc_msg prop;
		enum smc_reason why;

		(void)neg_server_try_offer(sv[1], false, &blk, &prop, &why);
		(void)neg_server_try_offer(sv[1], true, &blk, &prop, &why);
	}
	close(sv[0]);
	close(sv[1]);

	stream_pair(sv, data, size);
	{
		struct neg_client nc;
		size_t len = 0;
		uint32_t diag;

		memset(&nc, 0, sizeof(nc));
		nc.listen_fd = -1;
		nc.offer_ib = size & 1;
		if (neg_client_answer(sv[1], &nc, true, buf, &len, &diag) == NEG_ANS_IB &&
		    (len > NEG_MSG_CAP || len > size))
			abort();
	}
	close(sv[0]);
	close(sv[1]);

	stream_pair(sv, data, size);
	for (size_t seen = 0;;) {
		size_t len = 0;

		if (neg_recv_msg(sv[1], buf, &len) < 0)
			break;
		seen += len;
		if (len < CLC_MIN_LEN || len > NEG_MSG_CAP || seen > size)
			abort();
	}
	close(sv[0]);
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd_mark = -1;

	if (size < 1)
		return 0;
	if (fd_mark < 0) {
		smc_cfg.handshake_timeout_ms = 0; /* every read takes what is there, no wait */
		seqpacket((const uint8_t *)"", 1); /* the socket pair stays open */
		fd_mark = lowest_free_fd();
	}
	seqpacket(data, size);
	stream(data + 1, size - 1);
	if (fds_leaked(&fd_mark))
		abort();
	return 0;
}
