/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R transport: device, port and GID selection, one protection domain. See ib_dev.h.
 */
#include "core/ib/ib_dev.h"

#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/fdtab.h"
#include "core/base/log.h"
#include "core/wire/ib_proto.h"

#define MAX_GIDS 256

static enum ib_gid_kind gid_kind(uint32_t verbs_type)
{
	switch (verbs_type) {
	case IBV_GID_TYPE_ROCE_V2: return IB_GID_ROCE_V2;
	case IBV_GID_TYPE_ROCE_V1: return IB_GID_ROCE_V1;
	default: return IB_GID_IB;
	}
}

static bool port_active(struct ibv_context *ctx, unsigned port, struct ibv_port_attr *pa)
{
	return ibv_query_port(ctx, (uint8_t)port, pa) == 0 && pa->state == IBV_PORT_ACTIVE;
}

/* MAC of the network device behind a RoCE GID, from sysfs: the CLC carries it. */
static void read_mac(uint32_t ifindex, uint8_t mac[CLC_MAC_LEN])
{
	char ifname[IF_NAMESIZE], path[64 + IF_NAMESIZE];
	unsigned b[CLC_MAC_LEN];
	FILE *f;

	memset(mac, 0, CLC_MAC_LEN);
	if (!ifindex || !if_indextoname(ifindex, ifname))
		return;
	snprintf(path, sizeof(path), "/sys/class/net/%s/address", ifname);
	f = fopen(path, "re");
	if (!f)
		return;
	if (fscanf(f, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) == 6)
		for (int i = 0; i < CLC_MAC_LEN; i++)
			mac[i] = (uint8_t)b[i];
	fclose(f);
}

/* Chooses the GID on d->ctx/d->port and fills gid, gid_index, gid_kind, mac. */
static int choose_gid(struct ib_dev *d, int want_index)
{
	struct ibv_gid_entry *ent = calloc(MAX_GIDS, sizeof(*ent));
	struct ib_gid_cand *cand = calloc(MAX_GIDS, sizeof(*cand));
	ssize_t n;
	size_t m = 0;
	int pick, rc = 0;

	if (!ent || !cand) {
		rc = -ENOMEM;
		goto out;
	}
	n = ibv_query_gid_table(d->ctx, ent, MAX_GIDS, 0);
	if (n < 0) {
		rc = (int)n;
		goto out;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (ent[i].port_num != d->port)
			continue;
		cand[m].index = (int)ent[i].gid_index;
		cand[m].kind = gid_kind(ent[i].gid_type);
		memcpy(cand[m].gid, ent[i].gid.raw, 16);
		m++;
	}
	pick = ib_pick_gid(cand, m, want_index);
	if (pick < 0) {
		rc = pick;
		goto out;
	}
	d->gid_index = cand[pick].index;
	d->gid_kind = cand[pick].kind;
	memcpy(d->gid, cand[pick].gid, CLC_GID_LEN);
	for (ssize_t i = 0; i < n; i++)
		if (ent[i].port_num == d->port && (int)ent[i].gid_index == d->gid_index)
			read_mac(ent[i].ndev_ifindex, d->mac);
out:
	free(ent);
	free(cand);
	return rc;
}

/* Opens the wanted device (by name, or the first with an active want_port). */
static int open_ctx(const char *want_dev, unsigned want_port, struct ib_dev *d)
{
	int num = 0, rc = -ENODEV;
	struct ibv_device **list = ibv_get_device_list(&num);

	if (!list)
		return -ENODEV;
	for (int i = 0; i < num && rc != 0; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_port_attr pa;
		struct ibv_context *ctx;

		if (want_dev && strcmp(want_dev, name) != 0)
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx)
			continue;
		if (!port_active(ctx, want_port, &pa)) {
			ibv_close_device(ctx);
			continue;
		}
		d->ctx = ctx;
		d->port = (uint8_t)want_port;
		d->mtu = (uint8_t)pa.active_mtu; /* enum ibv_mtu == enum clc_mtu */
		snprintf(d->name, sizeof(d->name), "%s", name);
		rc = 0;
	}
	ibv_free_device_list(list);
	return rc;
}

int ib_dev_open(const char *want_dev, unsigned want_port, int want_gid_index,
		struct ib_dev *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (want_port == 0 || want_port > 255)
		return -ENODEV;
	{
		/* libibverbs opens device files through our wrappers, maybe under the link
		 * group's lock: no EMFILE there may send connections back to TCP
		 * (core/sock/fd_pressure.c) */
		bool internal = smc_thread_internal;

		smc_thread_internal = true;
		rc = open_ctx(want_dev, want_port, out);
		smc_thread_internal = internal;
	}
	if (rc < 0)
		return rc;
	rc = choose_gid(out, want_gid_index);
	if (rc < 0)
		goto fail;
	out->pd = ibv_alloc_pd(out->ctx);
	if (!out->pd) {
		rc = -errno ? -errno : -ENOMEM;
		goto fail;
	}
	log_debug("ib: device %s port %u gid index %d mtu %u", out->name, out->port,
		  out->gid_index, clc_mtu_bytes(out->mtu));
	return 0;
fail:
	ibv_close_device(out->ctx);
	memset(out, 0, sizeof(*out));
	return rc;
}

void ib_dev_close(struct ib_dev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	memset(d, 0, sizeof(*d));
}
