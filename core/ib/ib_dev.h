/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport: the RDMA device, port and GID the process uses, and its one
 * protection domain (every QP, RMB and send buffer of the process lives in it).
 */
#ifndef SMC_IB_DEV_H
#define SMC_IB_DEV_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include "core/wire/clc.h"

struct ib_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	uint8_t port;
	int gid_index;
	uint8_t gid[CLC_GID_LEN];
	uint8_t mac[CLC_MAC_LEN];  /* of the port's network device (zero when unknown) */
	uint8_t mtu;               /* active path MTU of the port, enum clc_mtu */
	int gid_kind;              /* enum ib_gid_kind */
};

/*
 * Opens the device: want_dev names it (NULL = the first device whose port want_port is
 * ACTIVE); want_gid_index picks the GID (< 0 = automatic, see ib_pick_gid). The caller
 * normally passes smc_cfg.ib_dev, ib_port, ib_gid_index. 0, or:
 *   -ENODEV   no RDMA device (or none with that name / an active port)
 *   -ENOENT   no usable GID (or not the one asked for)
 *   -errno    verbs failures
 */
int ib_dev_open(const char *want_dev, unsigned want_port, int want_gid_index,
		struct ib_dev *out);
void ib_dev_close(struct ib_dev *d);

#endif
