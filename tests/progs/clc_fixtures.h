/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Valid CLC messages of both variants, one copy for the tests that need well-formed
 * input: tests/unit/test_clc.c round-trips and mutates them, tests/fuzz/gen_seeds.c
 * writes them (encoded) as the fuzz harnesses' seeds. Every one passes clc_validate;
 * the SMC-R Accept/Confirm also passes ib_params_from_clc (gen_seeds checks it).
 * Header-only (static inline) so each test links only what it already links.
 */
#ifndef SMC_TESTS_CLC_FIXTURES_H
#define SMC_TESTS_CLC_FIXTURES_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/wire/clc.h"

/* p[i] = start + i: distinct bytes, so a field written at the wrong place shows */
static inline void clc_fx_fill(uint8_t *p, size_t n, uint8_t start)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(start + i);
}

/* An SMC-R Proposal with v6 IPv6 prefixes and a gap of `gap` bytes before the IP area;
 * with_gid: the kernel's kind, with a GID and MAC (without: a same-host proposal that
 * only carries the rendezvous block, clc_block_put). */
static inline struct clc_msg clc_fx_r_proposal(unsigned v6, uint16_t gap, bool with_gid)
{
	struct clc_msg m = { .variant = CLC_SMCR, .type = CLC_PROPOSAL, .flags = CLC_PATH_SMCR };
	struct clc_smcr_proposal *p = &m.u.r_prop;

	clc_fx_fill(p->lcl.peer_id, sizeof(p->lcl.peer_id), 0x10);
	if (with_gid) {
		clc_fx_fill(p->lcl.gid, sizeof(p->lcl.gid), 0x20);
		clc_fx_fill(p->lcl.mac, sizeof(p->lcl.mac), 0x40);
	}
	p->iparea_offset = gap;
	clc_fx_fill(p->iparea_gap, gap, 0x90);
	memcpy(p->ipv4_subnet, (uint8_t[]){ 192, 168, 7, 0 }, 4);
	p->ipv4_prefix_len = 24;
	p->ipv6_count = (uint8_t)v6;
	for (unsigned i = 0; i < v6; i++) {
		clc_fx_fill(p->ipv6[i].prefix, 16, (uint8_t)(0xA0 + i));
		p->ipv6[i].len = (uint8_t)(64 + i);
	}
	return m;
}

/* An SMC-R Accept or Confirm (type), first contact: a 64 KiB RMB, QP 0x123456. */
static inline struct clc_msg clc_fx_r_accept(uint8_t type)
{
	struct clc_msg m = { .variant = CLC_SMCR, .type = type, .flags = CLC_FLAG_FIRST_CONTACT };
	struct clc_smcr_accept *a = &m.u.r_acc;

	clc_fx_fill(a->lcl.peer_id, sizeof(a->lcl.peer_id), 0x11);
	clc_fx_fill(a->lcl.gid, sizeof(a->lcl.gid), 0x21);
	clc_fx_fill(a->lcl.mac, sizeof(a->lcl.mac), 0x41);
	a->qpn = 0x123456;
	a->rmb_rkey = 0xCAFEBABE;
	a->rmbe_idx = 1;
	a->rmbe_alert_token = 0x0BADF00D;
	a->rmbe_size = clc_compress_rmb_size(65536);
	a->qp_mtu = CLC_MTU_1024;
	a->rmb_vaddr = 0x0001020304050607ULL;
	a->psn = 0xABCDEF;
	return m;
}

static inline struct clc_msg clc_fx_r_decline(void)
{
	struct clc_msg m = { .variant = CLC_SMCR, .type = CLC_DECLINE };

	clc_fx_fill(m.u.r_decl.peer_id, CLC_PEER_ID_LEN, 0x70);
	m.u.r_decl.diag = CLC_DECL_NOSMCRDEV;
	return m;
}

static inline struct clc_msg clc_fx_sh_proposal(sa_family_t family)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_PROPOSAL };
	struct clc_sh_proposal *p = &m.u.s_prop;

	p->proto = CLC_SAMEHOST_PROTO;
	p->c2s_size = 1u << 16;
	p->s2c_size = 1u << 20;
	p->client_token = 0x1122334455667788ULL;
	p->family = family;
	if (family == AF_INET) {
		memcpy(p->client_addr, (uint8_t[]){ 127, 0, 0, 1 }, 4);
		memcpy(p->server_addr, (uint8_t[]){ 127, 0, 0, 2 }, 4);
	} else {
		clc_fx_fill(p->client_addr, 16, 0x30);
		clc_fx_fill(p->server_addr, 16, 0x50);
	}
	p->client_port = 40000;
	p->server_port = 6379;
	return m;
}

static inline struct clc_msg clc_fx_sh_accept(void)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_ACCEPT };

	m.u.s_acc.proto = CLC_SAMEHOST_PROTO;
	m.u.s_acc.c2s_size = 1u << 16;
	m.u.s_acc.s2c_size = 1u << 20;
	m.u.s_acc.server_token = 0x99AABBCCDDEEFF01ULL;
	m.u.s_acc.proof = 0x0BADC0DE12345678ULL;
	return m;
}

static inline struct clc_msg clc_fx_sh_confirm(void)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_CONFIRM };

	m.u.s_conf.client_token = 0x1122334455667788ULL;
	m.u.s_conf.server_token = 0x99AABBCCDDEEFF01ULL;
	return m;
}

static inline struct clc_msg clc_fx_sh_decline(void)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_DECLINE };

	m.u.s_decl.diag = CLC_DECL_SH_ADDR;
	return m;
}

#endif
