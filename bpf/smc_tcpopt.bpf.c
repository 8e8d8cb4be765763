/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The SMC TCP option (RFC 7609: kind 254, length 6, ExID 0xE2D4C3D9) in SYN and SYN-ACK,
 * for the sockets smc-preload opts in, and nothing else.
 *
 * `smc_preload.sh --setup` loads this sock_ops program, pins it ("smc_tcpopt") and its
 * map ("smc_peer") and attaches it at the cgroup-v2 root. The library writes
 * TCPOPT_WANT into the map (key: socket fd) before connect() or listen():
 *
 *   connect(): the SYN carries the option;
 *   listen():  a SYN-ACK carries it when the SYN carried it and the listener's port is
 *              not withdrawn (below);
 *   after the three-way handshake the program sets TCPOPT_PEER_SENT on the socket
 *   (client: the SYN-ACK carried it; accepted socket: the SYN carried it and the port
 *   is not withdrawn).
 *
 * A listener handed by exec to a program that may not run the library must stop
 * answering the option, or that program reads its clients' CLC Proposals as data. Only
 * listen() can turn a listener's callbacks on or off, and a SYN-ACK's callbacks see
 * neither the listener nor its storage (the kernel passes the request socket, and the
 * context gives a program no pointer to it), only the connection's addresses. So the
 * library withdraws a listener by its port: before such an exec it puts (network
 * namespace cookie, local port) into the hash map "smc_withdrawn", and takes it out
 * again when the exec fails or when the new image, preloaded, adopts the listener.
 * Every listener on a withdrawn port answers without the option: its clients stay TCP.
 *
 * The accepted socket inherits the listener's value (BPF_F_CLONE), so TCPOPT_WANT on it
 * says "our SYN-ACK answered with the option". Header-option callbacks are turned on per
 * socket and off again once the connection is established: segments after the handshake
 * are never touched, and neither is any socket that was not opted in.
 *
 * The value bits are the contract with core/negotiate/tcpopt.h.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define TCPOPT_PEER_SENT 1u /* the peer's SYN / SYN-ACK carried the option */
#define TCPOPT_WANT      2u /* written by the library: send the option */
/* internal: header-option callbacks were already on (another program wants them), so
 * do not turn them off after the handshake */
#define TCPOPT_KEEP_CB   0x100u

#define SMC_OPT_KIND 254
#define SMC_OPT_LEN  6

/* from <netinet/tcp.h> and the kernel's tcp flags; not in the uapi headers */
#define SOL_TCP       6
#define TCP_SAVE_SYN  27
#define TCPHDR_SYN    0x02
#define TCPHDR_ACK    0x10

#define HDR_OPT_CB_FLAGS BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG

char _license[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	/* sk_storage requires NO_PREALLOC; CLONE copies a listener's value into each
	 * socket it accepts */
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, __u32);
} smc_peer SEC(".maps");

/* The key of "smc_withdrawn"; the contract with core/negotiate/tcpopt.c. */
struct smc_port_key {
	__u64 netns;  /* the network namespace's cookie (SO_NETNS_COOKIE) */
	__u32 port;   /* the local port, host byte order */
	__u32 zero;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct smc_port_key);
	__type(value, __u32);
} smc_withdrawn SEC(".maps");

struct smc_opt {
	__u8 kind;
	__u8 len;
	__u8 exid[4];
} __attribute__((packed));

/* Field by field: an initializer would become a constant in .rodata, i.e. a second
 * map to load and pin for six bytes. */
static __always_inline void smc_opt_init(struct smc_opt *o)
{
	o->kind = SMC_OPT_KIND;
	o->len = SMC_OPT_LEN;
	o->exid[0] = 0xE2;
	o->exid[1] = 0xD4;
	o->exid[2] = 0xC3;
	o->exid[3] = 0xD9;
}

/* The value of a full socket, or NULL (request sockets and time-wait sockets have no
 * storage). The verifier wants sk loaded and NULL-checked before the helper call. */
static __always_inline __u32 *peer_value(struct bpf_sock_ops *skops, __u64 flags)
{
	struct bpf_sock *sk = skops->sk;

	if (!sk)
		return 0;
	return bpf_sk_storage_get(&smc_peer, sk, 0, flags);
}

/* Did the packet (BPF_LOAD_HDR_OPT_TCP_SYN: the SYN received or saved) carry the SMC
 * option? bpf_load_hdr_opt searches by kind and by the leading bytes of the data, so
 * the ExID is what it matches. */
static __always_inline int packet_has_smc_opt(struct bpf_sock_ops *skops, __u64 flags)
{
	struct smc_opt o;

	smc_opt_init(&o);
	return bpf_load_hdr_opt(skops, &o, sizeof(o), flags) == SMC_OPT_LEN;
}

/* connect() / listen() of a socket: turn on the header-option callbacks when the
 * library opted it in. */
static __always_inline void on_connect_or_listen(struct bpf_sock_ops *skops, int listen)
{
	__u32 *v = peer_value(skops, 0);
	int one = 1;

	if (!v || !(*v & TCPOPT_WANT))
		return;
	if (skops->bpf_sock_ops_cb_flags & HDR_OPT_CB_FLAGS)
		*v |= TCPOPT_KEEP_CB;
	/* the accepted socket reads the SYN's options after the handshake: keep it (the
	 * kernel keeps the saved headers, about 100 bytes, until the socket closes) */
	if (listen)
		bpf_setsockopt(skops, SOL_TCP, TCP_SAVE_SYN, &one, sizeof(one));
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | HDR_OPT_CB_FLAGS);
}

/* Whether the library withdrew the option from the listeners of this connection's local
 * port (in its network namespace). */
static __always_inline int port_withdrawn(struct bpf_sock_ops *skops)
{
	struct smc_port_key k = {
		.netns = bpf_get_netns_cookie(skops),
		.port = skops->local_port,
	};

	return bpf_map_lookup_elem(&smc_withdrawn, &k) != 0;
}

/* Whether the outgoing segment gets the option: only a SYN, and a SYN-ACK only when the
 * SYN carried it, the port is not withdrawn, and the SYN-ACK is not a SYN cookie one
 * (with a cookie the accepted socket would not know the SYN had it, and the two ends
 * would disagree). */
static __always_inline int segment_wants_opt(struct bpf_sock_ops *skops)
{
	__u32 f = skops->skb_tcp_flags;

	if (!(f & TCPHDR_SYN))
		return 0;
	if (!(f & TCPHDR_ACK))
		return 1;
	if (skops->args[0] == BPF_WRITE_HDR_TCP_SYNACK_COOKIE)
		return 0;
	return packet_has_smc_opt(skops, BPF_LOAD_HDR_OPT_TCP_SYN) && !port_withdrawn(skops);
}

static __always_inline void write_opt(struct bpf_sock_ops *skops)
{
	struct smc_opt o;

	smc_opt_init(&o);
	bpf_store_hdr_opt(skops, &o, sizeof(o), 0);
}

/* After the handshake: record whether the peer sent the option, and stop the
 * header-option callbacks (data segments never carry it; the MSS stays the kernel's). */
static __always_inline void on_established(struct bpf_sock_ops *skops, int passive)
{
	__u64 syn = passive ? BPF_LOAD_HDR_OPT_TCP_SYN : 0;
	__u32 *v = peer_value(skops, 0);

	/* not opted in: a client that did not ask, or an accepted socket of a listener
	 * that did not (its SYN was not saved either; and the peer got no option back) */
	if (!v)
		return;
	/* passive: our SYN-ACK answered it only on a port not withdrawn (a withdrawal in
	 * the round trip between SYN-ACK and ACK is the one case where the two can
	 * differ: docs/design.md) */
	if (packet_has_smc_opt(skops, syn) && (!passive || !port_withdrawn(skops)))
		*v |= TCPOPT_PEER_SENT;
	if (!(*v & TCPOPT_KEEP_CB) && (skops->bpf_sock_ops_cb_flags & HDR_OPT_CB_FLAGS))
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags & ~HDR_OPT_CB_FLAGS);
}

SEC("sockops")
int smc_tcpopt(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		on_connect_or_listen(skops, 0);
		break;
	case BPF_SOCK_OPS_TCP_LISTEN_CB:
		on_connect_or_listen(skops, 1);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		if (segment_wants_opt(skops))
			bpf_reserve_hdr_opt(skops, SMC_OPT_LEN, 0);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		if (segment_wants_opt(skops))
			write_opt(skops);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		on_established(skops, 0);
		break;
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		on_established(skops, 1);
		break;
	}
	return 1;
}
