/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * CLC handshake messages (RFC 7609 section 3.5 / 4.3): encode, decode, validate. Pure
 * code: no I/O, no allocation.
 *
 * Two variants share the RFC framing
 *     eyecatcher(4) type(1) length(2, whole message) version<<4|flags(1) ... trailer(4)
 *  - CLC_SMCR: SMC-R version 1 as the RFC and the Linux kernel lay it out;
 *  - CLC_SAMEHOST: this project's own messages between two smc-preload processes on one
 *    host. Their eyecatcher is "SMCU" in EBCDIC (0xE2D4C3E4), which no kernel sends or
 *    accepts, so the two can never be confused.
 *
 * Decoding is strict: anything not exactly as encode would have written it is refused,
 * so a decoded message re-encodes to the same bytes. Error codes:
 *   -ENODATA          fewer bytes than the header, or than the header's length field
 *   -EMSGSIZE         length field above CLC_MAX_LEN or below CLC_MIN_LEN, or more bytes
 *                     given than the length field says
 *   -EBADMSG          unknown eyecatcher (head), trailer eyecatcher differs from the head,
 *                     unknown type, or length inconsistent with the type's layout
 *   -EPROTONOSUPPORT  known eyecatcher but unsupported: version, SMC-D, or same-host
 *                     library protocol version
 *   -EPROTO           reserved bits or bytes not zero, flags not allowed for the type
 *   -ERANGE           a field value out of range (see clc_validate)
 * clc_encode additionally returns -ENOSPC when cap is too small, and -EINVAL for an
 * unknown variant/type.
 */
#ifndef SMC_CLC_H
#define SMC_CLC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define CLC_EYECATCHER_SMCR 0xE2D4C3D9u /* "SMCR" in EBCDIC */
#define CLC_EYECATCHER_SMCD 0xE2D4C3C4u /* "SMCD" in EBCDIC (framed and declined, not decoded) */
#define CLC_EYECATCHER_SAMEHOST 0xE2D4C3E4u /* "SMCU" in EBCDIC: smc-preload same host */

enum clc_type { CLC_PROPOSAL = 1, CLC_ACCEPT = 2, CLC_CONFIRM = 3, CLC_DECLINE = 4 };
/* CLC_SMCD is only reported by clc_peek_header / clc_frame (a kernel SMC-D message is
 * framed, consumed and declined); encode and decode know SMCR and SAMEHOST. */
enum clc_variant { CLC_SMCR = 1, CLC_SAMEHOST = 2, CLC_SMCD = 3 };

#define CLC_HDR_LEN 8
#define CLC_TRL_LEN 4
#define CLC_MIN_LEN (CLC_HDR_LEN + CLC_TRL_LEN)
/* Above any message we build; large enough that a stream reader can swallow a longer
 * proposal (e.g. a kernel's SMC v2 one) whole before declining it. */
#define CLC_MAX_LEN 1024

#define CLC_SMCR_VERSION 1     /* header version nibble for SMC-R v1 */
#define CLC_SAMEHOST_VERSION 1 /* header version nibble for the same-host variant */
#define CLC_SAMEHOST_PROTO 4   /* library protocol version in same-host messages (2: rewinds, 3: downgrades, 4: RDMA downgrades) */

/* Low nibble of the version byte. */
#define CLC_FLAG_FIRST_CONTACT 0x08 /* SMC-R Accept/Confirm: new link group */
#define CLC_FLAG_OUT_OF_SYNC 0x08   /* SMC-R Decline: link group out of sync */
#define CLC_PATH_MASK 0x03          /* SMC-R Proposal: which SMC the client offers */
#define CLC_PATH_SMCR 0x00
#define CLC_PATH_SMCB 0x03          /* SMC-R and SMC-D */

/* ------------------------------------------------------------------ SMC-R v1 */

#define CLC_PEER_ID_LEN 8
#define CLC_GID_LEN 16
#define CLC_MAC_LEN 6
#define CLC_MAX_V6_PREFIX 8
#define CLC_MAX_IPAREA_OFFSET 40 /* size of the kernel's SMC-D area in a Proposal */

struct clc_smcr_local {
	uint8_t peer_id[CLC_PEER_ID_LEN]; /* unique system id */
	uint8_t gid[CLC_GID_LEN];         /* RoCE GID of the port */
	uint8_t mac[CLC_MAC_LEN];         /* MAC of the port */
};

struct clc_ipv6_prefix {
	uint8_t prefix[16];
	uint8_t len; /* 0..128 */
};

struct clc_smcr_proposal {
	struct clc_smcr_local lcl;
	/* Bytes between the offset field and the IP prefix area (the kernel puts SMC-D
	 * information there); kept opaque so a message re-encodes identically. */
	uint16_t iparea_offset; /* 0..CLC_MAX_IPAREA_OFFSET */
	uint8_t iparea_gap[CLC_MAX_IPAREA_OFFSET];
	uint8_t ipv4_subnet[4];  /* network order */
	uint8_t ipv4_prefix_len; /* 0..32 */
	uint8_t ipv6_count;      /* 0..CLC_MAX_V6_PREFIX */
	struct clc_ipv6_prefix ipv6[CLC_MAX_V6_PREFIX];
};

/* IB path MTU enum as in the Accept/Confirm. */
enum clc_mtu { CLC_MTU_256 = 1, CLC_MTU_512, CLC_MTU_1024, CLC_MTU_2048, CLC_MTU_4096 };

struct clc_smcr_accept { /* Accept and Confirm have the same layout */
	struct clc_smcr_local lcl;
	uint32_t qpn;              /* 24 bits, != 0 */
	uint32_t rmb_rkey;
	uint8_t rmbe_idx;          /* 1..255: RMBE within the RMB */
	uint32_t rmbe_alert_token;
	uint8_t rmbe_size;         /* compressed: 0..15, see clc_uncompress_rmb_size */
	uint8_t qp_mtu;            /* enum clc_mtu */
	uint64_t rmb_vaddr;
	uint32_t psn;              /* 24 bits: initial packet sequence number */
};

struct clc_smcr_decline {
	uint8_t peer_id[CLC_PEER_ID_LEN];
	uint32_t diag; /* CLC_DECL_* */
};

/* ------------------------------------------------------------------ same host */

#define CLC_SH_RMB_MIN 4096u
#define CLC_SH_RMB_MAX (512u << 20)

struct clc_sh_proposal {
	uint16_t proto;          /* CLC_SAMEHOST_PROTO */
	uint32_t c2s_size;       /* ring the server reads (client -> server) */
	uint32_t s2c_size;       /* ring the client reads (server -> client) */
	uint64_t client_token;   /* != 0 */
	sa_family_t family;      /* AF_INET or AF_INET6 */
	uint8_t client_addr[16]; /* as seen by the client; IPv4 in the first 4 bytes */
	uint8_t server_addr[16];
	uint16_t client_port;    /* host order, != 0 */
	uint16_t server_port;
};

struct clc_sh_accept {
	uint16_t proto;
	uint32_t c2s_size; /* must equal the proposal: see clc_sh_check_accept */
	uint32_t s2c_size;
	uint64_t server_token; /* != 0 */
	uint64_t proof;        /* in-band negotiation: the key of the TCP Proposal; else 0 */
};

struct clc_sh_confirm {
	uint64_t client_token; /* echo of the proposal's */
	uint64_t server_token; /* echo of the accept's */
};

struct clc_sh_decline {
	uint32_t diag; /* CLC_DECL_* */
};

/* ------------------------------------------------------------------ message */

struct clc_msg {
	enum clc_variant variant;
	uint8_t type;  /* enum clc_type */
	uint8_t flags; /* low nibble of the version byte; 0 for the same-host variant */
	union {
		struct clc_smcr_proposal r_prop;
		struct clc_smcr_accept r_acc; /* CLC_ACCEPT and CLC_CONFIRM */
		struct clc_smcr_decline r_decl;
		struct clc_sh_proposal s_prop;
		struct clc_sh_accept s_acc;
		struct clc_sh_confirm s_conf;
		struct clc_sh_decline s_decl;
	} u;
};

/* Decline reasons (peer diagnosis). The SMC-R values are the Linux kernel's, so a
 * kernel peer's reason reads the same; 0x7F...... are this project's own. */
enum clc_decline_reason {
	CLC_DECL_MEM = 0x01010000,        /* insufficient memory (or our memory cap) */
	CLC_DECL_TIMEOUT = 0x02000000,    /* handshake timeout */
	CLC_DECL_TIMEOUT_CL = 0x02010000, /* timeout waiting for confirm link */
	CLC_DECL_TIMEOUT_AL = 0x02020000, /* timeout waiting for add link */
	CLC_DECL_CNFERR = 0x03000000,     /* configuration error */
	CLC_DECL_PEERNOSMC = 0x03010000,  /* peer did not indicate SMC */
	CLC_DECL_IPSEC = 0x03020000,      /* IPsec in use */
	CLC_DECL_NOSMCDEV = 0x03030000,   /* no SMC device */
	CLC_DECL_NOSMCDDEV = 0x03030001,  /* no SMC-D device */
	CLC_DECL_NOSMCRDEV = 0x03030002,  /* no SMC-R device */
	CLC_DECL_MODEUNSUPP = 0x03040000, /* SMC modes do not match */
	CLC_DECL_DIFFPREFIX = 0x03070000, /* IP prefix / subnet mismatch */
	CLC_DECL_VERSMISMAT = 0x030c0000, /* version mismatch */
	CLC_DECL_SYNCERR = 0x04000000,    /* synchronisation error */
	CLC_DECL_PEERDECL = 0x05000000,   /* peer declined during the handshake */
	CLC_DECL_INTERR = 0x09990000,     /* internal error */
	CLC_DECL_SH_ADDR = 0x7F010000,    /* proposal addresses differ from the TCP conn */
	CLC_DECL_SH_CRED = 0x7F020000,    /* peer credentials refused */
	CLC_DECL_SH_SIZE = 0x7F030000,    /* accepted ring sizes differ from the proposal */
	CLC_DECL_SH_TOKEN = 0x7F040000,   /* token mismatch */
	CLC_DECL_SH_FDS = 0x7F050000,     /* ring/doorbell fds missing or invalid */
	CLC_DECL_SH_RDV = 0x7F060000,     /* the client's rendezvous socket is unreachable */
	CLC_DECL_SH_FDLIMIT = 0x7F070000, /* descriptors near RLIMIT_NOFILE (fd_budget.h) */
	CLC_DECL_SH_FORK = 0x7F080000,    /* the server forked before the handshake ended */
};

/* Short text for logs, stats and smcpstat ("memory", "timeout", ...); "unknown" for
 * other values (the top byte's class is used when the exact code is unknown). */
const char *clc_decline_reason_str(uint32_t diag);

/* ------------------------------------------------------------------ codec */

/* Checks every field range and the flags for the type (the rules decode applies).
 * 0, -EINVAL (unknown variant/type), -EPROTO, -ERANGE or -EPROTONOSUPPORT. */
int clc_validate(const struct clc_msg *m);
/* Wire length of m, or a negative errno as clc_validate. */
ssize_t clc_encoded_len(const struct clc_msg *m);
/* Writes m into buf; returns the number of bytes written. */
ssize_t clc_encode(const struct clc_msg *m, uint8_t *buf, size_t cap);
/* Parses exactly one message of exactly len bytes. */
int clc_decode(const uint8_t *buf, size_t len, struct clc_msg *out);
/* From the first bytes of a stream: variant, type and total length of the message.
 * Needs CLC_HDR_LEN bytes (-ENODATA before). Checks eyecatcher, type and length bounds
 * only, so a reader can always consume a whole message before deciding about it. */
int clc_peek_header(const uint8_t *buf, size_t len, enum clc_variant *variant,
		    uint8_t *type, uint16_t *total_len);

/* ------------------------------------------------------------------ stream framing */

/* A whole message as read from a TCP stream, judged only by its frame: a known
 * eyecatcher (SMCR, SMCD or SMCU), a type 1..4, a length field equal to len and within
 * [CLC_MIN_LEN, CLC_MAX_LEN], and a trailer that is an SMCR or SMCD eyecatcher (SMCU:
 * SMCU). Enough to decide what to answer to a peer whose message we do not decode (a
 * kernel's SMC v2 Proposal, an SMC-D Accept). */
struct clc_frame {
	enum clc_variant variant;
	uint8_t type;
	uint8_t version; /* high nibble of byte 7 */
	uint8_t flags;   /* low nibble of byte 7 */
};
/* 0, -ENODATA / -EMSGSIZE (length field differs from len or is out of bounds),
 * -EBADMSG (eyecatcher, type or trailer). */
int clc_frame(const uint8_t *buf, size_t len, struct clc_frame *f);
/* Diagnosis code of a framed SMCR/SMCD Decline (v1 or v2 layout), 0 if too short. */
uint32_t clc_frame_decline_diag(const uint8_t *buf, size_t len);

/* ------------------------------------------------------------------ in-band block
 *
 * smc-preload's in-band Proposal is a valid SMC-R v1 Proposal (so a kernel AF_SMC
 * server parses it and declines, or accepts and receives our Decline). What only
 * another smc-preload reads travels in the area between the fixed part and the IP
 * prefix, which the IP-area offset field skips (the kernel puts SMC-D data there and
 * reads it only when SMC-D is offered, except the SMC v2 extension offset, which stays
 * zero). With an offset of CLC_MAX_IPAREA_OFFSET (40):
 *
 *   gap 0 magic "SMCU" EBCDIC(4)  4 block version(1)  5 flags(1)  6 reserved(4)
 *      10 zero(2): the kernel's v2 extension offset
 *      12 host id(be64)  20 rendezvous name(be64)  28 rendezvous key(be64)
 *      36 reserved(4)
 */
#define CLC_BLOCK_VERSION 2 /* 2: RDMA downgrades (CDC_WENT_TCP) */
#define CLC_BLOCK_RDV_PATH 0x01 /* rendezvous: a path socket under SMC_RDV_DIR (else an
				 * abstract name) */
#define CLC_BLOCK_NO_SHM 0x02   /* the client offers no shared memory (SMC_TRANSPORT=ib):
				 * no rendezvous; rdv_name and rdv_key are zero */
/* Whether the client offers SMC-R is not in the block: the Proposal's own GID field is
 * non-zero then (with the peer id and MAC of its RDMA device, as the kernel sends). */

struct clc_block {
	uint8_t version;
	uint8_t flags;
	uint64_t host_id;  /* same value: same kernel (boot), see negotiate.c */
	uint64_t rdv_name; /* names the client's rendezvous socket */
	uint64_t rdv_key;  /* secret: the server proves it read the Proposal */
};

/* Stores b into an SMC-R Proposal's opaque area (sets iparea_offset). */
void clc_block_put(struct clc_smcr_proposal *p, const struct clc_block *b);
/* 0 when the Proposal carries our block (any version: the caller checks it), -ENOENT
 * when it does not (a kernel's or another implementation's Proposal). */
int clc_block_get(const struct clc_smcr_proposal *p, struct clc_block *b);

/* ------------------------------------------------------------------ helpers */

/* RFC 7609 compressed buffer size: size = 2^(v + 14), v in 0..15 (16 KiB .. 512 MiB).
 * compress rounds up (the smallest v whose size is >= size), capped at 15. */
uint8_t clc_compress_rmb_size(uint32_t size);
/* 0 for v > 15. */
uint32_t clc_uncompress_rmb_size(uint8_t v);
/* Bytes for an enum clc_mtu value, 0 when out of range. */
uint32_t clc_mtu_bytes(uint8_t mtu);
/* Same-host ring size rule: a power of two in [CLC_SH_RMB_MIN, CLC_SH_RMB_MAX]. */
bool clc_sh_rmb_size_valid(uint32_t size);

/* Fill the address part of a same-host proposal from the client's local and peer
 * addresses. IPv4-mapped IPv6 pairs are stored as IPv4. 0 or -EAFNOSUPPORT. */
int clc_sh_set_addrs(struct clc_sh_proposal *p, const struct sockaddr *client,
		     socklen_t client_len, const struct sockaddr *server, socklen_t server_len);
/* Server side: do the proposal's addresses match the accepted connection (peer = the
 * client, local = the server)? IPv4-mapped IPv6 and IPv4 compare equal. */
bool clc_sh_addrs_match(const struct clc_sh_proposal *p, const struct sockaddr *peer,
			socklen_t peer_len, const struct sockaddr *local, socklen_t local_len);
/* Client side: 0 when the accept answers the proposal (same sizes and protocol), else
 * CLC_DECL_SH_SIZE or CLC_DECL_VERSMISMAT as a positive reason to decline with. */
uint32_t clc_sh_check_accept(const struct clc_sh_proposal *p, const struct clc_sh_accept *a);
/* Server side: 0 when the confirm echoes both tokens, else CLC_DECL_SH_TOKEN. */
uint32_t clc_sh_check_confirm(const struct clc_sh_proposal *p, const struct clc_sh_accept *a,
			      const struct clc_sh_confirm *c);

#endif
