/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <pthread.h>
#include <string.h>

#include "core/base/forklock.h"
#include "core/base/rendezvous.h"
#include "core/negotiate/hs_policy.h"

#define SLOTS 256 /* a power of two */

struct dest {
	uint64_t key;          /* 0: free */
	uint32_t short_run;    /* short SMC connections in a row, saturating */
	uint64_t next_probe_ns; /* TCP mode: when the next connection may try SMC */
	uint64_t plain_until_ns; /* its server answered without SMC: TCP until then */
};

static struct dest table[SLOTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* Held for a table lookup or update only. */
bool hs_policy_fork_lock(void)
{
	return forklock_take(&table_lock) != FORKLOCK_BUSY;
}

static void lock(void)
{
	pthread_mutex_lock(&table_lock);
}

static void unlock(void)
{
	pthread_mutex_unlock(&table_lock);
}

uint64_t hs_policy_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t hs_policy_key(const struct sockaddr *dst)
{
	struct rdv_endpoint ep;
	uint64_t a, b, k;

	if (!rdv_endpoint_from(dst, &ep))
		return 0;
	memcpy(&a, ep.addr, 8);
	memcpy(&b, ep.addr + 8, 8);
	k = hs_policy_mix(hs_policy_mix(a) ^ b ^ ((uint64_t)ep.port << 48));
	return k ? k : 1;
}

static struct dest *slot_of(uint64_t key)
{
	return &table[key & (SLOTS - 1)];
}

/* Slot d now remembers key: what it remembered of another destination is forgotten. */
static void slot_claim(struct dest *d, uint64_t key)
{
	if (d->key == key)
		return;
	memset(d, 0, sizeof(*d));
	d->key = key;
}

bool hs_policy_admit(uint64_t key, uint64_t now_ns, uint64_t short_ns)
{
	struct dest *d;
	bool admit = true;

	if (short_ns == 0 || key == 0)
		return true;
	lock();
	d = slot_of(key);
	if (d->key == key)
		admit = hs_policy_run_admit(d->short_run, &d->next_probe_ns, now_ns);
	unlock();
	return admit;
}

void hs_policy_closed(uint64_t key, uint64_t lifetime_ns, uint64_t bytes, uint32_t exchanges,
		      uint64_t now_ns, uint64_t short_ns)
{
	bool is_short = hs_policy_short(lifetime_ns, bytes, exchanges, short_ns);
	struct dest *d;

	if (short_ns == 0 || key == 0)
		return;
	lock();
	d = slot_of(key);
	if (d->key != key && !is_short) {
		unlock(); /* nothing to remember: unknown destinations try SMC anyway */
		return;
	}
	slot_claim(d, key);
	hs_policy_run_closed(&d->short_run, &d->next_probe_ns, is_short, now_ns);
	unlock();
}

void hs_policy_peer_plain(uint64_t key, uint64_t now_ns, uint64_t short_ns)
{
	struct dest *d;

	if (short_ns == 0 || key == 0)
		return;
	lock();
	d = slot_of(key);
	slot_claim(d, key);
	d->plain_until_ns = now_ns + HS_POLICY_PROBE_NS;
	unlock();
}

bool hs_policy_known_plain(uint64_t key, uint64_t now_ns, uint64_t short_ns)
{
	struct dest *d;
	bool plain = false;

	if (short_ns == 0 || key == 0)
		return false;
	lock();
	d = slot_of(key);
	if (d->key == key && now_ns < d->plain_until_ns)
		plain = true;
	unlock();
	return plain;
}

bool hs_policy_run_admit(uint32_t short_run, uint64_t *next_probe_ns, uint64_t now_ns)
{
	if (short_run < HS_POLICY_SHORT_RUN)
		return true;
	if (now_ns < *next_probe_ns)
		return false;
	*next_probe_ns = now_ns + HS_POLICY_PROBE_NS; /* this one probes */
	return true;
}

void hs_policy_run_closed(uint32_t *short_run, uint64_t *next_probe_ns, bool is_short,
			  uint64_t now_ns)
{
	if (!is_short) {
		*short_run = 0;
	} else if (*short_run < HS_POLICY_SHORT_RUN) {
		if (++*short_run == HS_POLICY_SHORT_RUN)
			*next_probe_ns = now_ns + HS_POLICY_PROBE_NS;
	}
}

bool hs_policy_short(uint64_t lifetime_ns, uint64_t bytes, uint32_t exchanges,
		     uint64_t short_ns)
{
	return bytes < HS_POLICY_LONG_BYTES &&
	       (lifetime_ns < short_ns ||
		(exchanges <= HS_POLICY_FEW_EXCHANGES && lifetime_ns < HS_POLICY_FEW_MAX_NS));
}

void hs_policy_reset(void)
{
	lock();
	memset(table, 0, sizeof(table));
	unlock();
}
