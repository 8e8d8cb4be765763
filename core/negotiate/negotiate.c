/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/fdtab.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/base/real.h"
#include "core/base/rendezvous.h"
#include "core/negotiate/hs_ib.h"
#include "core/negotiate/negotiate.h"
#include "core/wire/ib_proto.h"

_Static_assert(NEG_MSG_CAP >= CLC_MAX_LEN + IB_CREDITS_EXT_LEN, "NEG_MSG_CAP");

/* ------------------------------------------------------------ host identity */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static uint64_t host_id;

static int hex_value(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* boot_id is random per boot and the same in every namespace of that kernel (unlike
 * /etc/machine-id, which a container image brings along): 128 bits folded to 64. */
static void host_id_load(void)
{
	char text[64];
	uint8_t id[16];
	size_t n = 0;
	ssize_t r;
	int fd = REAL(open)("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	r = REAL(read)(fd, text, sizeof(text) - 1);
	REAL(close)(fd);
	if (r <= 0)
		return;
	for (ssize_t i = 0; i < r && n < 32; i++) {
		int v = hex_value(text[i]);

		if (v < 0)
			continue;
		if (n % 2 == 0)
			id[n / 2] = (uint8_t)(v << 4);
		else
			id[n / 2] |= (uint8_t)v;
		n++;
	}
	if (n != 32)
		return;
	for (int i = 0; i < 8; i++)
		host_id = host_id << 8 | (uint8_t)(id[i] ^ id[i + 8]);
}

uint64_t neg_host_id(void)
{
	pthread_once(&host_once, host_id_load);
	return host_id;
}


/* ------------------------------------------------------------ stream I/O */

int neg_send_all(int fd, const uint8_t *buf, size_t len)
{
	int64_t deadline = (int64_t)clock_now_ms() + smc_cfg.handshake_timeout_ms;
	size_t off = 0;

	while (off < len) {
		ssize_t r = REAL(send)(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int64_t left;

		if (r > 0) {
			off += (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		left = deadline - (int64_t)clock_now_ms();
		if (left <= 0 || REAL(poll)(&p, 1, (int)left) < 0)
			return off ? -EPIPE : -ETIMEDOUT;
	}
	return 0;
}

/* Could buf[0..n) be the start of a CLC message? */
static bool clc_prefix(const uint8_t *buf, size_t n)
{
	static const uint8_t eyes[3][4] = {
		{ 0xE2, 0xD4, 0xC3, 0xD9 }, { 0xE2, 0xD4, 0xC3, 0xC4 }, { 0xE2, 0xD4, 0xC3, 0xE4 },
	};

	if (n > 4)
		n = 4;
	for (int i = 0; i < 3; i++)
		if (memcmp(buf, eyes[i], n) == 0)
			return true;
	return false;
}

/* What follows a CLC message in the stream as part of it. */
enum clc_ext {
	EXT_NONE,    /* nothing: a kernel's message, or before any SMC-R offer */
	EXT_CREDITS, /* "CRD"+n after an SMC-R Accept / Confirm (hs_ib.h) */
	EXT_LONE_OK, /* as EXT_CREDITS, but an Accept alone is complete too (a kernel's) */
};

/* Bytes of the message whose header is in buf: total, plus the credits extension when
 * ext asks for it. */
static size_t with_ext(enum clc_variant v, uint8_t type, uint16_t total, enum clc_ext ext)
{
	if (ext != EXT_NONE && v == CLC_SMCR && (type == CLC_ACCEPT || type == CLC_CONFIRM))
		return (size_t)total + IB_CREDITS_EXT_LEN;
	return total;
}

/* One nonblocking step: 1 when one whole CLC message (and its extension, see enum
 * clc_ext) was consumed into buf (NEG_MSG_CAP bytes, *len); 0 when not complete yet
 * (*partial: some of it is there); -EBADMSG when the stream does not start with one
 * (nothing consumed); -EMSGSIZE when its length field is out of bounds; -ECONNRESET on
 * EOF before any byte; another -errno from the socket. */
static int read_clc_step(int fd, uint8_t *buf, size_t *len, bool *partial, enum clc_ext ext)
{
	enum clc_variant v;
	uint8_t type;
	uint16_t total;
	size_t want;
	ssize_t n = REAL(recv)(fd, buf, NEG_MSG_CAP, MSG_PEEK | MSG_DONTWAIT);
	int r;

	*partial = n > 0;
	if (n == 0)
		return -ECONNRESET;
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return 0;
		fdtab_owe_error(fd, errno); /* taken from the program's socket */
		return -errno;
	}
	if (!clc_prefix(buf, (size_t)n))
		return -EBADMSG;
	r = clc_peek_header(buf, (size_t)n, &v, &type, &total);
	if (r == -ENODATA)
		return 0;
	if (r < 0)
		return r;
	want = with_ext(v, type, total, ext);
	if ((size_t)n < want) {
		if (!(ext == EXT_LONE_OK && (size_t)n >= total))
			return 0;
		want = total;
	}
	/* exactly this message: what follows is the application's */
	n = REAL(recv)(fd, buf, want, MSG_DONTWAIT);
	if (n < 0)
		fdtab_owe_error(fd, errno);
	if (n != (ssize_t)want)
		return n < 0 ? -errno : -EPROTO;
	*len = want;
	return 1;
}

/* read_clc_step until a message is complete or the handshake timeout passes. */
static int read_clc_wait(int fd, uint8_t *buf, size_t *len, enum clc_ext ext)
{
	int64_t deadline = (int64_t)clock_now_ms() + smc_cfg.handshake_timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		bool partial;
		int64_t left;
		int r = read_clc_step(fd, buf, len, &partial, ext);

		if (r != 0)
			return r;
		left = deadline - (int64_t)clock_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		/* a partial message keeps the socket readable: the rest is on its way, wait
		 * a millisecond rather than spin */
		if (partial)
			r = REAL(poll)(NULL, 0, 1);
		else
			r = REAL(poll)(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int neg_recv_msg(int fd, uint8_t *buf, size_t *len)
{
	int r = read_clc_wait(fd, buf, len, EXT_CREDITS);

	return r < 0 ? r : 0;
}

/* ------------------------------------------------------------ messages */

static void put_host_id(uint8_t *out)
{
	uint64_t id = neg_host_id();

	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(id >> (56 - 8 * i));
}

int neg_send_decline(int fd, uint32_t diag)
{
	struct clc_msg m = { .variant = CLC_SMCR, .type = CLC_DECLINE };
	uint8_t buf[CLC_MAX_LEN];
	ssize_t n;

	put_host_id(m.u.r_decl.peer_id);
	m.u.r_decl.diag = diag;
	n = clc_encode(&m, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return neg_send_all(fd, buf, (size_t)n);
}

static int prefix_len_of(const struct sockaddr *mask)
{
	const uint8_t *b;
	size_t n;
	int len = 0;

	if (!mask)
		return 0;
	if (mask->sa_family == AF_INET) {
		b = (const uint8_t *)&((const struct sockaddr_in *)mask)->sin_addr;
		n = 4;
	} else if (mask->sa_family == AF_INET6) {
		b = ((const struct sockaddr_in6 *)mask)->sin6_addr.s6_addr;
		n = 16;
	} else {
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		len += __builtin_popcount(b[i]);
	return len;
}

static void mask_prefix(uint8_t *addr, size_t n, int len)
{
	for (size_t i = 0; i < n; i++) {
		int keep = len - (int)(8 * i);

		if (keep <= 0)
			addr[i] = 0;
		else if (keep < 8)
			addr[i] &= (uint8_t)(0xFF << (8 - keep));
	}
}

/* The Proposal's IP area as the kernel fills it: the subnet of our IPv4 address, or
 * up to 8 IPv6 prefixes of the interface that holds our IPv6 address. A kernel server
 * declines when it shares none of them (it would need the same LAN for RDMA). */
static void set_prefixes(int fd, struct clc_smcr_proposal *p)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct ifaddrs *ifa, *i;
	char ifname[IF_NAMESIZE] = "";
	uint8_t v4[4];
	bool is_v4;

	if (REAL(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0 || getifaddrs(&ifa) < 0)
		return;
	is_v4 = ss.ss_family == AF_INET;
	if (is_v4)
		memcpy(v4, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	if (ss.ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr)) {
		memcpy(v4, ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr + 12, 4);
		is_v4 = true;
	}
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (is_v4 && i->ifa_addr->sa_family == AF_INET &&
		    memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr, v4, 4) == 0) {
			p->ipv4_prefix_len = (uint8_t)prefix_len_of(i->ifa_netmask);
			memcpy(p->ipv4_subnet, v4, 4);
			mask_prefix(p->ipv4_subnet, 4, p->ipv4_prefix_len);
			break;
		}
		if (!is_v4 && i->ifa_addr->sa_family == AF_INET6 &&
		    memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
			   &((struct sockaddr_in6 *)&ss)->sin6_addr, 16) == 0)
			snprintf(ifname, sizeof(ifname), "%s", i->ifa_name);
	}
	for (i = ifa; i && ifname[0] && p->ipv6_count < CLC_MAX_V6_PREFIX; i = i->ifa_next) {
		struct clc_ipv6_prefix *x = &p->ipv6[p->ipv6_count];
		const struct in6_addr *a;

		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || strcmp(i->ifa_name, ifname))
			continue;
		a = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		if (IN6_IS_ADDR_LINKLOCAL(a))
			continue;
		memcpy(x->prefix, a->s6_addr, 16);
		x->len = (uint8_t)prefix_len_of(i->ifa_netmask);
		mask_prefix(x->prefix, 16, x->len);
		p->ipv6_count++;
	}
	freeifaddrs(ifa);
}

/* ------------------------------------------------------------ client */

/* Path rendezvous sockets of negotiations in progress, unlinked at exit. A forked
 * child inherits the list: it only unlinks the names its own process created. */
static pthread_mutex_t exit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static struct neg_client *exit_list;

static void exit_unlink_paths(void)
{
	pid_t me = getpid();

	pthread_mutex_lock(&exit_lock);
	for (struct neg_client *nc = exit_list; nc; nc = nc->exit_next)
		if (nc->exit_pid == me && nc->rdv_name)
			rdv_token_unlink(nc->rdv_name);
	pthread_mutex_unlock(&exit_lock);
}

/* Held for a list update only. */
bool neg_fork_lock(void)
{
	return forklock_take(&exit_lock) != FORKLOCK_BUSY;
}

static void exit_register_once(void)
{
	atexit(exit_unlink_paths);
}

static void exit_track(struct neg_client *nc)
{
	pthread_once(&exit_once, exit_register_once);
	pthread_mutex_lock(&exit_lock);
	nc->exit_pid = getpid();
	nc->exit_prev = NULL;
	nc->exit_next = exit_list;
	if (exit_list)
		exit_list->exit_prev = nc;
	exit_list = nc;
	pthread_mutex_unlock(&exit_lock);
}

static void exit_untrack(struct neg_client *nc)
{
	if (!nc->exit_pid)
		return;
	pthread_mutex_lock(&exit_lock);
	if (nc->exit_prev)
		nc->exit_prev->exit_next = nc->exit_next;
	else if (exit_list == nc)
		exit_list = nc->exit_next;
	if (nc->exit_next)
		nc->exit_next->exit_prev = nc->exit_prev;
	nc->exit_prev = nc->exit_next = NULL;
	nc->exit_pid = 0;
	pthread_mutex_unlock(&exit_lock);
}

static int client_rendezvous(struct neg_client *nc)
{
	nc->rdv_name = random_secret64();
	nc->key = random_secret64();
	if (!nc->rdv_name || !nc->key)
		return -EIO;
	/* a directory both namespaces share, else this network namespace only */
	nc->rdv_path = rdv_dir_usable();
	nc->listen_fd = nc->rdv_path ? rdv_token_listen(nc->rdv_name, true) : -1;
	if (nc->listen_fd >= 0)
		exit_track(nc);
	if (nc->listen_fd < 0) {
		if (nc->rdv_path)
			log_debug("rendezvous directory %s not usable (%s): abstract name",
				  smc_cfg.rdv_dir, strerror(-nc->listen_fd));
		nc->rdv_path = false;
		nc->listen_fd = rdv_token_listen(nc->rdv_name, false);
	}
	if (nc->listen_fd < 0) {
		int r = nc->listen_fd;

		nc->listen_fd = -1; /* a descriptor or -1: the caller keeps and closes it */
		return r;
	}
	return 0;
}

/* Our SMC-R identity for the Proposal when we offer SMC-R (SMC_TRANSPORT auto or ib and
 * a usable RDMA device). */
static bool client_ib_offer(int fd, struct clc_smcr_local *lcl)
{
	int r;

	if (smc_cfg.transport == SMC_TRANSPORT_SHM)
		return false;
	r = hs_ib_local_offer(lcl);
	if (r < 0)
		log_debug("fd %d: no usable RDMA device (%s): not offering SMC-R", fd, strerror(-r));
	return r == 0;
}

int neg_client_propose(int fd, struct neg_client *nc, enum smc_reason *why)
{
	struct clc_msg m = { .variant = CLC_SMCR, .type = CLC_PROPOSAL, .flags = CLC_PATH_SMCR };
	struct clc_block b = { .version = CLC_BLOCK_VERSION };
	bool offer_shm = smc_cfg.transport != SMC_TRANSPORT_IB;
	uint8_t buf[CLC_MAX_LEN];
	ssize_t n;
	int r;

	nc->listen_fd = -1;
	nc->rdv_name = nc->key = 0;
	nc->offer_ib = client_ib_offer(fd, &m.u.r_prop.lcl);
	if (!offer_shm && !nc->offer_ib) {
		/* SMC_TRANSPORT=ib and no device: the server waits for a CLC message */
		*why = SMC_REASON_NOT_LOCAL; /* here: no RDMA device */
		return neg_send_decline(fd, CLC_DECL_NOSMCRDEV) < 0 ? -EPIPE : 1;
	}
	if (offer_shm) {
		r = client_rendezvous(nc);
		if (r < 0 && !nc->offer_ib) {
			/* the server waits for a CLC message: a Decline ends it (as a kernel
			 * client that finds no device does) */
			log_debug("fd %d: no rendezvous socket (%s): declining", fd, strerror(-r));
			*why = SMC_REASON_RESOURCES;
			return neg_send_decline(fd, CLC_DECL_INTERR) < 0 ? -EPIPE : 1;
		}
		if (r < 0) {
			nc->rdv_name = nc->key = 0;
			offer_shm = false;
		}
	}
	b.flags = (nc->rdv_path ? CLC_BLOCK_RDV_PATH : 0) | (offer_shm ? 0 : CLC_BLOCK_NO_SHM);
	b.host_id = neg_host_id();
	b.rdv_name = nc->rdv_name;
	b.rdv_key = nc->key;
	/* the SMC-R identity fields: our RDMA device's when we offer SMC-R, else our host
	 * id as the peer id and no GID or MAC */
	if (!nc->offer_ib)
		put_host_id(m.u.r_prop.lcl.peer_id);
	set_prefixes(fd, &m.u.r_prop);
	clc_block_put(&m.u.r_prop, &b);
	n = clc_encode(&m, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return neg_send_all(fd, buf, (size_t)n);
}

void neg_client_cleanup(struct neg_client *nc)
{
	exit_untrack(nc);
	if (nc->rdv_path && nc->rdv_name)
		rdv_token_unlink(nc->rdv_name);
	nc->rdv_name = 0;
}

enum neg_answer neg_client_answer(int fd, const struct neg_client *nc, bool final,
				  uint8_t *buf, size_t *len, uint32_t *diag)
{
	struct clc_frame f;
	bool partial;
	enum clc_ext ext = !nc->offer_ib ? EXT_NONE : final ? EXT_LONE_OK : EXT_CREDITS;
	int r = read_clc_step(fd, buf, len, &partial, ext);
	size_t flen = *len;

	if (r == 0)
		return NEG_ANS_NONE;
	if (r == -EBADMSG || r == -EMSGSIZE || r == -EPROTO)
		return NEG_ANS_BAD;
	if (r < 0)
		return NEG_ANS_CLOSED;
	if (nc->offer_ib && flen > CLC_MIN_LEN && buf[0] == 0xE2 && buf[3] == 0xD9 &&
	    buf[4] == CLC_ACCEPT && flen == (size_t)(buf[5] << 8 | buf[6]) + IB_CREDITS_EXT_LEN)
		flen -= IB_CREDITS_EXT_LEN; /* our server's Accept: the frame without credits */
	if (clc_frame(buf, flen, &f) < 0 || f.variant == CLC_SAMEHOST)
		return NEG_ANS_BAD;
	if (f.type == CLC_DECLINE) {
		*diag = clc_frame_decline_diag(buf, flen);
		return NEG_ANS_DECLINE;
	}
	if (f.type != CLC_ACCEPT)
		return NEG_ANS_BAD;
	if (flen != *len && f.variant == CLC_SMCR)
		return NEG_ANS_IB; /* conn_ib decodes and checks the credits */
	/* A kernel server with an RDMA device accepted our SMC-R offer: we cannot complete
	 * SMC-R with a kernel (tests/vm/README.md). Its listener takes the Decline and falls
	 * back. */
	log_info("fd %d: an SMC-%c server (a kernel?) accepted: declining", fd,
		 f.variant == CLC_SMCD ? 'D' : 'R');
	if (neg_send_decline(fd, f.variant == CLC_SMCD ? CLC_DECL_NOSMCDDEV : CLC_DECL_NOSMCRDEV) < 0)
		return NEG_ANS_BAD;
	return NEG_ANS_ACCEPTED;
}

/* ------------------------------------------------------------ server */

/* What a kernel with no SMC device answers: by the kind of SMC the Proposal offers. */
static uint32_t decline_for(const struct clc_frame *f)
{
	uint8_t v1 = f->flags & CLC_PATH_MASK;

	if (f->version >= 2)
		return CLC_DECL_NOSMCDEV;
	if (v1 == CLC_PATH_SMCR)
		return CLC_DECL_NOSMCRDEV;
	if (v1 == 1)
		return CLC_DECL_NOSMCDDEV;
	return CLC_DECL_NOSMCDEV;
}

static enum neg_offer answer(int fd, uint32_t diag, enum smc_reason why_tcp,
			     enum smc_reason *why)
{
	if (neg_send_decline(fd, diag) < 0)
		return NEG_OFFER_ABORT;
	*why = why_tcp;
	return NEG_OFFER_TCP;
}

static bool all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* Our Proposal (block *blk): the transport by the rules of negotiate.h, or a Decline. */
static enum neg_offer choose_transport(int fd, const struct clc_msg *m,
				       const struct clc_block *blk, enum smc_reason *why)
{
	bool same_host = blk->host_id != 0 && blk->host_id == neg_host_id();
	bool offers_shm = !(blk->flags & CLC_BLOCK_NO_SHM);
	bool offers_ib = !all_zero(m->u.r_prop.lcl.gid, CLC_GID_LEN);
	enum smc_transport_pref t = smc_cfg.transport;

	if (same_host && offers_shm && t != SMC_TRANSPORT_IB)
		return NEG_OFFER_OURS;
	if (offers_ib && t != SMC_TRANSPORT_SHM)
		return NEG_OFFER_IB;
	if (same_host || (offers_ib && t == SMC_TRANSPORT_SHM)) {
		log_debug("fd %d: smc-preload peer offers %s, SMC_TRANSPORT here is %s: declining",
			  fd, offers_shm && offers_ib ? "shm and SMC-R"
			      : offers_shm ? "shm only" : "SMC-R only",
			  t == SMC_TRANSPORT_SHM ? "shm" : t == SMC_TRANSPORT_IB ? "ib" : "auto");
		return answer(fd, CLC_DECL_MODEUNSUPP, SMC_REASON_DECLINED, why);
	}
	log_debug("fd %d: smc-preload peer on another host without an RDMA device: declining",
		  fd);
	return answer(fd, CLC_DECL_NOSMCRDEV, SMC_REASON_NOT_LOCAL, why);
}

/* A framed Proposal: ours (then by the transport rules), or declined. */
static enum neg_offer judge_proposal(int fd, const uint8_t *buf, size_t len,
				     const struct clc_frame *f, struct clc_block *blk,
				     struct clc_msg *m, enum smc_reason *why)
{
	if (f->variant != CLC_SMCR || clc_decode(buf, len, m) < 0 ||
	    clc_block_get(&m->u.r_prop, blk) < 0) {
		log_info("fd %d: SMC v%u Proposal from a peer without smc-preload (a kernel?): "
			 "declining, no SMC device", fd, f->version);
		return answer(fd, decline_for(f), SMC_REASON_NOT_LOCAL, why);
	}
	if (blk->version != CLC_BLOCK_VERSION) {
		log_info("fd %d: smc-preload peer speaks block version %u: declining", fd,
			 blk->version);
		return answer(fd, CLC_DECL_VERSMISMAT, SMC_REASON_HANDSHAKE, why);
	}
	return choose_transport(fd, m, blk, why);
}

/* The client's first CLC message, read (r: as read_clc_step / read_clc_wait) into buf:
 * judged and, unless it is our acceptable Proposal, answered. */
static enum neg_offer server_offer(int fd, int r, const uint8_t *buf, size_t len,
				   struct clc_block *blk, struct clc_msg *prop,
				   enum smc_reason *why)
{
	struct clc_frame f;

	if (r == -EBADMSG) {
		/* The client sent the option but talks without negotiating (it gave up
		 * before proposing): its bytes are the application's. */
		*why = SMC_REASON_PEER_NOT_SMC;
		return NEG_OFFER_TCP;
	}
	if (r == -ECONNRESET) {
		*why = SMC_REASON_PEER_CLOSED;
		return NEG_OFFER_TCP;
	}
	if (r < 0) {
		log_warn("fd %d: no valid CLC message from the client (%s): resetting", fd,
			 strerror(-r));
		return NEG_OFFER_ABORT;
	}
	if (clc_frame(buf, len, &f) < 0 || f.variant == CLC_SAMEHOST ||
	    (f.type != CLC_PROPOSAL && f.type != CLC_DECLINE)) {
		log_warn("fd %d: malformed or unexpected CLC message from the client: resetting",
			 fd);
		return NEG_OFFER_ABORT;
	}
	if (f.type == CLC_DECLINE) {
		log_debug("fd %d: client declined SMC: %s", fd,
			  clc_decline_reason_str(clc_frame_decline_diag(buf, len)));
		*why = SMC_REASON_DECLINED;
		return NEG_OFFER_TCP;
	}
	return judge_proposal(fd, buf, len, &f, blk, prop, why);
}

enum neg_offer neg_server_read_offer(int fd, struct clc_block *blk, struct clc_msg *prop,
				     enum smc_reason *why)
{
	uint8_t buf[NEG_MSG_CAP];
	size_t len = 0;
	int r = read_clc_wait(fd, buf, &len, EXT_NONE);

	return server_offer(fd, r, buf, len, blk, prop, why);
}

enum neg_offer neg_server_try_offer(int fd, bool final, struct clc_block *blk,
				    struct clc_msg *prop, enum smc_reason *why)
{
	uint8_t buf[NEG_MSG_CAP];
	size_t len = 0;
	bool partial;
	int r = read_clc_step(fd, buf, &len, &partial, EXT_NONE);

	if (r == 0 && !final)
		return NEG_OFFER_WAIT;
	return server_offer(fd, r == 0 ? -ETIMEDOUT : r, buf, len, blk, prop, why);
}

int neg_server_rendezvous(int fd, const struct clc_block *blk)
{
	int ufd = rdv_token_connect(blk->rdv_name, (blk->flags & CLC_BLOCK_RDV_PATH) != 0);

	if (ufd == -ECONNREFUSED) {
		log_debug("fd %d: the client no longer listens on its rendezvous socket: declining",
			  fd);
		(void)neg_send_decline(fd, CLC_DECL_SH_RDV);
	} else if (ufd == -EMFILE || ufd == -ENFILE) {
		log_debug("fd %d: no descriptor for the client's rendezvous socket: declining", fd);
		(void)neg_send_decline(fd, CLC_DECL_SH_FDLIMIT);
	} else if (ufd < 0) {
		log_info("fd %d: the client's rendezvous socket is unreachable (%s; %s): "
			 "declining", fd, strerror(-ufd),
			 blk->flags & CLC_BLOCK_RDV_PATH ? "not the same SMC_RDV_DIR?"
							 : "another network namespace?");
		(void)neg_send_decline(fd, CLC_DECL_SH_RDV);
	}
	return ufd;
}
