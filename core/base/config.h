/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Every SMC_* environment variable lives in ONE table (config.c): name, type, default,
 * allowed range, one-line doc. The table drives parsing, `smc_preload.sh --print-config`
 * and the man page test. A bad value is reported once on stderr, naming the variable and
 * the accepted range, and the default is kept: never a crash.
 */
#ifndef SMC_CONFIG_H
#define SMC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/time.h>

enum smc_transport_pref {
	SMC_TRANSPORT_AUTO = 0, /* same host -> shm, otherwise ib when available */
	SMC_TRANSPORT_SHM,
	SMC_TRANSPORT_IB,
	SMC_TRANSPORT_TCP,      /* never upgrade: pure pass-through with stats */
};

/* The effective configuration: the table's defaults once the library is loaded (config.c),
 * then what config_load() read from the environment. */
struct smc_config {
	size_t rcvbuf;             /* SMC_RCVBUF: RMB (receive ring) size per connection */
	size_t sndbuf;             /* SMC_SNDBUF: send size = size of the peer RMB we propose */
	bool debug;                /* SMC_DEBUG: same as SMC_LOG_LEVEL=debug */
	int log_level;             /* SMC_LOG_LEVEL: 0 off .. 4 debug */
	const char *log_file;      /* SMC_LOG_FILE, %p -> pid; NULL = stderr */
	const char *stats_file;    /* SMC_STATS_FILE, %p -> pid; NULL = none */
	unsigned spin_us;          /* SMC_SPIN_US: busy-poll bound before sleeping */
	unsigned short_conn_us;    /* SMC_SHORT_CONN_US: hs_policy.h; 0 = off */
	unsigned pool_slots;       /* SMC_POOL_SLOTS: pool.h; 0 = no pools */
	size_t pool_ring;          /* SMC_POOL_RING: ring per direction of a pool slot */
	int copy_store;            /* SMC_COPY: -1 auto, else enum copy_store (copy_adapt.h) */
	size_t mem_cap;            /* SMC_MEM_CAP: all RMBs of this process; past it -> TCP */
	unsigned handshake_timeout_ms; /* SMC_HANDSHAKE_TIMEOUT_MS */
	enum smc_transport_pref transport; /* SMC_TRANSPORT */
	const char *bpf_dir;       /* SMC_BPF_DIR: where --setup pinned the TCP-option map */
	const char *rdv_dir;       /* SMC_RDV_DIR: path rendezvous shared across namespaces */
	const char *ib_dev;        /* SMC_IB_DEV: RDMA device name; NULL = automatic */
	unsigned ib_port;          /* SMC_IB_PORT: port number on that device */
	int ib_gid_index;          /* SMC_IB_GID_INDEX: -1 = automatic (a RoCE v2 GID) */
};

extern struct smc_config smc_cfg;

/* SMC_HANDSHAKE_TIMEOUT_MS as a timeval (socket timeouts, libevent deadlines). */
static inline struct timeval smc_cfg_handshake_timeout(void)
{
	return (struct timeval){
		.tv_sec = smc_cfg.handshake_timeout_ms / 1000,
		.tv_usec = (suseconds_t)(smc_cfg.handshake_timeout_ms % 1000) * 1000,
	};
}

enum smc_cfg_type { SMC_CFG_BOOL, SMC_CFG_UINT, SMC_CFG_SIZE, SMC_CFG_STRING, SMC_CFG_ENUM };

/* SMC_CFG_CPU: a default that config_load() raised for this CPU's L2 cache (the rings
 * and the memory cap; see config_ring_for_l2) */
enum smc_cfg_source { SMC_CFG_DEFAULT = 0, SMC_CFG_ENV, SMC_CFG_INVALID, SMC_CFG_CPU };

struct smc_cfg_var {
	const char *name;           /* "SMC_RCVBUF" */
	enum smc_cfg_type type;
	const char *def;            /* default, as text */
	unsigned long long min, max; /* for UINT and SIZE */
	const char *const *choices; /* for ENUM: NULL-terminated */
	const char *doc;            /* one line */
	void (*store)(const void *value); /* writes the parsed value into smc_cfg */
};

extern const struct smc_cfg_var smc_cfg_vars[];
extern const size_t smc_cfg_nvars;

/* Reads the environment (getenv) into smc_cfg. Reports each bad value once on `err`
 * (stderr when NULL). Returns the number of bad values. Safe to call again. */
int config_load(FILE *err);

/* The default ring for a CPU with l2_bytes of L2 per core: `floor` doubled until it is
 * at least twice the L2 (8 MiB at most); `floor` when the L2 is unknown (<= 0). */
size_t config_ring_for_l2(size_t floor, long l2_bytes);

/* Tests: the L2 size config_load() uses instead of asking the CPU; -1 = ask again. */
void config_set_cpu_l2(long l2_bytes);

/* Where the effective value of variable i came from after config_load(). */
enum smc_cfg_source config_source(size_t i);

/* Parsers shared with tests: 0 on success, -1 on garbage, -2 when out of [min,max]. */
int config_parse_size(const char *s, unsigned long long min, unsigned long long max,
		      unsigned long long *out);
int config_parse_uint(const char *s, unsigned long long min, unsigned long long max,
		      unsigned long long *out);
int config_parse_bool(const char *s, bool *out);

/* For `smc_preload.sh --print-config`: when SMC_PRINT_CONFIG=1, prints the effective
 * configuration on stderr; the program goes on. Called from a constructor in config.c. */
void config_maybe_print(void);

/* `--print-config`: one line per variable: NAME=VALUE (source) # doc */
void config_print(FILE *out);

#endif
