/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The SMC_* variable table and its parser.
 *
 * smc_cfg_vars[] below is the single list of every variable the library reads. It drives
 * config_load(), config_print() (`smc_preload.sh --print-config`) and the man page test
 * (tests/integration/manpage.sh greps the names out of the initializer).
 *
 * Value syntax:
 *   size  decimal digits with an optional k, m or g suffix (case-insensitive, binary
 *         multiples: 1k = 1024). No sign, no blanks, no "b"/"kb" forms: "256k", "1G", "4096".
 *   uint  decimal digits only.
 *   bool  1/0, yes/no, true/false, on/off (case-insensitive).
 *   enum  one of the choices (case-insensitive); when the entry's max is non-zero the
 *         choice may also be given by its index 0..max (SMC_LOG_LEVEL=4 means debug).
 *   string any text shorter than SMC_CFG_STRING_MAX; empty means "not set".
 *
 * Robustness: nothing here allocates. The table is the only place a default is written:
 * smc_cfg gets the table's defaults from this file's constructor (config_defaults), which
 * runs when the library is loaded, and config_load() applies them first as well, so a
 * wrapper that another library's constructor reaches before ours still sees them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/config.h"
#include "core/base/cpu_cache.h"
#include "core/base/log.h"

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)

/* Longest accepted string value (paths), terminating NUL included. */
#define SMC_CFG_STRING_MAX 4096

/* Zero until config_defaults() (below) fills in the table's defaults. */
struct smc_config smc_cfg;

/* Index of each variable; the designated initializers below keep the table and the
 * effective-value printer (config_value_text) in step. */
enum cfg_index {
	CFG_RCVBUF,
	CFG_SNDBUF,
	CFG_DEBUG,
	CFG_LOG_LEVEL,
	CFG_LOG_FILE,
	CFG_STATS_FILE,
	CFG_SPIN_US,
	CFG_SHORT_CONN_US,
	CFG_POOL_SLOTS,
	CFG_POOL_RING,
	CFG_COPY,
	CFG_MEM_CAP,
	CFG_HANDSHAKE_TIMEOUT_MS,
	CFG_TRANSPORT,
	CFG_BPF_DIR,
	CFG_RDV_DIR,
	CFG_IB_DEV,
	CFG_IB_PORT,
	CFG_IB_GID_INDEX,
	CFG_NVARS
};

/* Enum choice lists: the index of a word is the value stored. */
static const char *const log_level_choices[] = { "off", "error", "warn", "info", "debug", NULL };
static const char *const transport_choices[] = { "auto", "shm", "ib", "tcp", NULL };
static const char *const copy_choices[] = { "auto", "cache", "stream", NULL };
_Static_assert(SMC_LOG_OFF == 0 && SMC_LOG_ERR == 1 && SMC_LOG_WARN == 2 &&
	       SMC_LOG_INFO == 3 && SMC_LOG_DEBUG == 4, "log_level_choices order");
_Static_assert(SMC_TRANSPORT_AUTO == 0 && SMC_TRANSPORT_SHM == 1 && SMC_TRANSPORT_IB == 2 &&
	       SMC_TRANSPORT_TCP == 3, "transport_choices order");

/* String values are copied here so the application changing its environment later
 * cannot pull the memory from under us. */
static char log_file_buf[SMC_CFG_STRING_MAX];
static char stats_file_buf[SMC_CFG_STRING_MAX];
static char bpf_dir_buf[SMC_CFG_STRING_MAX];
static char rdv_dir_buf[SMC_CFG_STRING_MAX];
static char ib_dev_buf[SMC_CFG_STRING_MAX];

/* Store functions: `value` points to an unsigned long long (size, uint), a bool, an int
 * (enum: choice index) or a const char * (string; NULL = not set). */
static void store_rcvbuf(const void *v) { smc_cfg.rcvbuf = (size_t)*(const unsigned long long *)v; }
static void store_sndbuf(const void *v) { smc_cfg.sndbuf = (size_t)*(const unsigned long long *)v; }
static void store_debug(const void *v) { smc_cfg.debug = *(const bool *)v; }
static void store_log_level(const void *v) { smc_cfg.log_level = *(const int *)v; }
static void store_spin_us(const void *v) { smc_cfg.spin_us = (unsigned)*(const unsigned long long *)v; }
static void store_short_conn_us(const void *v) { smc_cfg.short_conn_us = (unsigned)*(const unsigned long long *)v; }
static void store_pool_slots(const void *v) { smc_cfg.pool_slots = (unsigned)*(const unsigned long long *)v; }
/* a slot's rings are powers of two: rounded down */
static void store_pool_ring(const void *v)
{
	unsigned long long x = *(const unsigned long long *)v;

	while (x & (x - 1))
		x &= x - 1;
	smc_cfg.pool_ring = (size_t)x;
}
/* choice 0 (auto) is -1: copy_adapt_kind's "not fixed"; cache 0, stream 1 */
static void store_copy(const void *v) { smc_cfg.copy_store = *(const int *)v - 1; }
static void store_mem_cap(const void *v) { smc_cfg.mem_cap = (size_t)*(const unsigned long long *)v; }
static void store_transport(const void *v)
{
	smc_cfg.transport = (enum smc_transport_pref)*(const int *)v;
}
static void store_handshake_timeout(const void *v)
{
	smc_cfg.handshake_timeout_ms = (unsigned)*(const unsigned long long *)v;
}

static const char *copy_string(char *buf, const char *s)
{
	if (s == NULL || *s == '\0')
		return NULL;
	/* Length was checked against SMC_CFG_STRING_MAX before store. */
	memcpy(buf, s, strlen(s) + 1);
	return buf;
}

static void store_log_file(const void *v)
{
	smc_cfg.log_file = copy_string(log_file_buf, *(const char *const *)v);
}

static void store_stats_file(const void *v)
{
	smc_cfg.stats_file = copy_string(stats_file_buf, *(const char *const *)v);
}

/* An empty directory value keeps the default: these are never "off". */
static void store_bpf_dir(const void *v)
{
	const char *s = copy_string(bpf_dir_buf, *(const char *const *)v);

	smc_cfg.bpf_dir = s ? s : smc_cfg_vars[CFG_BPF_DIR].def;
}

static void store_rdv_dir(const void *v)
{
	const char *s = copy_string(rdv_dir_buf, *(const char *const *)v);

	smc_cfg.rdv_dir = s ? s : smc_cfg_vars[CFG_RDV_DIR].def;
}

static void store_ib_dev(const void *v)
{
	smc_cfg.ib_dev = copy_string(ib_dev_buf, *(const char *const *)v);
}

static void store_ib_port(const void *v) { smc_cfg.ib_port = (unsigned)*(const unsigned long long *)v; }

/* GID indexes are 0..255; the table's extra value 256 means "choose automatically". */
static void store_ib_gid_index(const void *v)
{
	unsigned long long x = *(const unsigned long long *)v;

	smc_cfg.ib_gid_index = x > 255 ? -1 : (int)x;
}

const struct smc_cfg_var smc_cfg_vars[CFG_NVARS] = {
	[CFG_RCVBUF] = {
		.name = "SMC_RCVBUF", .type = SMC_CFG_SIZE, .def = "2m",
		.min = 16 * KIB, .max = 512 * MIB,
		.doc = "receive buffer (RMB) size per connection, as smc_run -r",
		.store = store_rcvbuf,
	},
	[CFG_SNDBUF] = {
		.name = "SMC_SNDBUF", .type = SMC_CFG_SIZE, .def = "2m",
		.min = 16 * KIB, .max = 512 * MIB,
		.doc = "send buffer size: the RMB size proposed to the peer, as smc_run -t",
		.store = store_sndbuf,
	},
	[CFG_DEBUG] = {
		.name = "SMC_DEBUG", .type = SMC_CFG_BOOL, .def = "0",
		.doc = "1 = log at debug level (as smc_run -d); overrides a lower SMC_LOG_LEVEL",
		.store = store_debug,
	},
	[CFG_LOG_LEVEL] = {
		.name = "SMC_LOG_LEVEL", .type = SMC_CFG_ENUM, .def = "off",
		.max = 4, .choices = log_level_choices,
		.doc = "log verbosity: off, error, warn, info, debug (or 0-4)",
		.store = store_log_level,
	},
	[CFG_LOG_FILE] = {
		.name = "SMC_LOG_FILE", .type = SMC_CFG_STRING, .def = "",
		.doc = "log file (appended to), %p = pid; empty = stderr",
		.store = store_log_file,
	},
	[CFG_STATS_FILE] = {
		.name = "SMC_STATS_FILE", .type = SMC_CFG_STRING, .def = "",
		.doc = "JSON summary written at exit, %p = pid; empty = none",
		.store = store_stats_file,
	},
	[CFG_SPIN_US] = {
		.name = "SMC_SPIN_US", .type = SMC_CFG_UINT, .def = "20",
		.min = 0, .max = 100000,
		.doc = "busy-poll bound in microseconds before a waiting call sleeps",
		.store = store_spin_us,
	},
	[CFG_SHORT_CONN_US] = {
		.name = "SMC_SHORT_CONN_US", .type = SMC_CFG_UINT, .def = "10000",
		.min = 0, .max = 60000000,
		.doc = "SMC connections to a destination that keep closing sooner are left TCP; 0 = off",
		.store = store_short_conn_us,
	},
	[CFG_POOL_SLOTS] = {
		.name = "SMC_POOL_SLOTS", .type = SMC_CFG_UINT, .def = "16",
		.min = 0, .max = 64,
		.doc = "slots of a pool for connections to short-lived destinations (pool.h); 0 = no pools",
		.store = store_pool_slots,
	},
	[CFG_POOL_RING] = {
		.name = "SMC_POOL_RING", .type = SMC_CFG_SIZE, .def = "64k",
		.min = 16 * KIB, .max = 1 * MIB,
		.doc = "ring size per direction of a pool slot (rounded down to a power of two)",
		.store = store_pool_ring,
	},
	[CFG_COPY] = {
		.name = "SMC_COPY", .type = SMC_CFG_ENUM, .def = "auto",
		.choices = copy_choices,
		.doc = "shm writes: auto (measure, pick), cache (memcpy) or stream (non-temporal stores)",
		.store = store_copy,
	},
	[CFG_MEM_CAP] = {
		.name = "SMC_MEM_CAP", .type = SMC_CFG_SIZE, .def = "8g",
		.min = 1 * MIB, .max = 64 * GIB,
		.doc = "RMB memory of the whole process; past it new connections stay TCP",
		.store = store_mem_cap,
	},
	[CFG_HANDSHAKE_TIMEOUT_MS] = {
		.name = "SMC_HANDSHAKE_TIMEOUT_MS", .type = SMC_CFG_UINT, .def = "2000",
		.min = 1, .max = 60000,
		.doc = "SMC handshake timeout in milliseconds; on expiry the connection stays TCP",
		.store = store_handshake_timeout,
	},
	[CFG_TRANSPORT] = {
		.name = "SMC_TRANSPORT", .type = SMC_CFG_ENUM, .def = "auto",
		.choices = transport_choices,
		.doc = "auto (shm on one host, else ib), shm, ib, or tcp = never upgrade",
		.store = store_transport,
	},
	[CFG_BPF_DIR] = {
		.name = "SMC_BPF_DIR", .type = SMC_CFG_STRING, .def = "/sys/fs/bpf/smc_preload",
		.doc = "bpffs directory where smc_preload.sh --setup pinned the TCP-option program and map",
		.store = store_bpf_dir,
	},
	[CFG_RDV_DIR] = {
		.name = "SMC_RDV_DIR", .type = SMC_CFG_STRING, .def = "/run/smc-preload",
		.doc = "directory shared by all network namespaces for the path-based rendezvous",
		.store = store_rdv_dir,
	},
	[CFG_IB_DEV] = {
		.name = "SMC_IB_DEV", .type = SMC_CFG_STRING, .def = "",
		.doc = "RDMA device for SMC-R (e.g. rxe0); empty = the first active RoCE device",
		.store = store_ib_dev,
	},
	[CFG_IB_PORT] = {
		.name = "SMC_IB_PORT", .type = SMC_CFG_UINT, .def = "1",
		.min = 1, .max = 255,
		.doc = "port number on the RDMA device",
		.store = store_ib_port,
	},
	[CFG_IB_GID_INDEX] = {
		.name = "SMC_IB_GID_INDEX", .type = SMC_CFG_UINT, .def = "256",
		.min = 0, .max = 256,
		.doc = "GID table index; 256 = automatic (the first RoCE v2 GID of the port)",
		.store = store_ib_gid_index,
	},
};

const size_t smc_cfg_nvars = CFG_NVARS;

static enum smc_cfg_source cfg_source[CFG_NVARS];

/* Set by config_load(); lets the --print-config hook reuse a load done by smc_init()
 * (which the library's constructor may have run first) instead of reporting bad values
 * a second time. */
static bool config_loaded;

enum smc_cfg_source config_source(size_t i)
{
	return i < CFG_NVARS ? cfg_source[i] : SMC_CFG_DEFAULT;
}

/* ------------------------------------------------------------------ parsers */

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Decimal digits only (no sign, no blanks, no locale): consumes every leading digit.
 * Returns false when there is none. *overflow tells the value did not fit. */
static bool parse_digits(const char **sp, unsigned long long *out, bool *overflow)
{
	const char *s = *sp;
	unsigned long long v = 0;

	*overflow = false;
	if (!is_digit(*s))
		return false;
	for (; is_digit(*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (~0ULL - d) / 10)
			*overflow = true;
		else
			v = v * 10 + d;
	}
	*sp = s;
	*out = v;
	return true;
}

/* A number too large for 64 bits is "out of range" (-2), not garbage: the text was a
 * number, just not one we accept. Trailing garbage is checked first. */
int config_parse_size(const char *s, unsigned long long min, unsigned long long max,
		      unsigned long long *out)
{
	unsigned long long v, mult = 1;
	const char *p = s;
	bool overflow;

	if (s == NULL || !parse_digits(&p, &v, &overflow))
		return -1;
	switch (*p) {
	case 'k': case 'K': mult = KIB; p++; break;
	case 'm': case 'M': mult = MIB; p++; break;
	case 'g': case 'G': mult = GIB; p++; break;
	default: break;
	}
	if (*p != '\0')
		return -1;
	if (overflow || v > ~0ULL / mult)
		return -2;
	v *= mult;
	if (v < min || v > max)
		return -2;
	*out = v;
	return 0;
}

int config_parse_uint(const char *s, unsigned long long min, unsigned long long max,
		      unsigned long long *out)
{
	unsigned long long v;
	const char *p = s;
	bool overflow;

	if (s == NULL || !parse_digits(&p, &v, &overflow) || *p != '\0')
		return -1;
	if (overflow || v < min || v > max)
		return -2;
	*out = v;
	return 0;
}

int config_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };

	if (s == NULL)
		return -1;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

/* Choice index for `s`, by word or (when var->max > 0) by number 0..max. */
static int parse_enum(const struct smc_cfg_var *var, const char *s, int *out)
{
	unsigned long long n;

	for (int i = 0; var->choices[i] != NULL; i++) {
		if (strcasecmp(s, var->choices[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	if (var->max > 0 && config_parse_uint(s, 0, var->max, &n) == 0) {
		*out = (int)n;
		return 0;
	}
	return -1;
}

/* ------------------------------------------------------------------ loading */

/* A parsed value of any type, handed to var->store. */
union cfg_value {
	unsigned long long num;
	bool flag;
	int index;
	const char *str;
};

/* Parses `text` for `var`; returns 0 or -1/-2 like the parsers, and -3 for a string
 * that does not fit. */
static int parse_value(const struct smc_cfg_var *var, const char *text, union cfg_value *v)
{
	switch (var->type) {
	case SMC_CFG_SIZE:
		return config_parse_size(text, var->min, var->max, &v->num);
	case SMC_CFG_UINT:
		return config_parse_uint(text, var->min, var->max, &v->num);
	case SMC_CFG_BOOL:
		return config_parse_bool(text, &v->flag);
	case SMC_CFG_ENUM:
		return parse_enum(var, text, &v->index);
	case SMC_CFG_STRING:
		if (strlen(text) >= SMC_CFG_STRING_MAX)
			return -3;
		v->str = text;
		return 0;
	}
	return -1;
}

static void store_value(const struct smc_cfg_var *var, const union cfg_value *v)
{
	switch (var->type) {
	case SMC_CFG_SIZE:
	case SMC_CFG_UINT:
		var->store(&v->num);
		break;
	case SMC_CFG_BOOL:
		var->store(&v->flag);
		break;
	case SMC_CFG_ENUM:
		var->store(&v->index);
		break;
	case SMC_CFG_STRING:
		var->store(&v->str);
		break;
	}
}

/* Formats a size the way the parser reads it back: the largest exact suffix. */
static void format_size(char *buf, size_t len, unsigned long long v)
{
	if (v != 0 && v % GIB == 0)
		snprintf(buf, len, "%llug", v / GIB);
	else if (v != 0 && v % MIB == 0)
		snprintf(buf, len, "%llum", v / MIB);
	else if (v != 0 && v % KIB == 0)
		snprintf(buf, len, "%lluk", v / KIB);
	else
		snprintf(buf, len, "%llu", v);
}

/* What a variable accepts, for error messages: "16k..512m (k/m/g suffixes)". */
static void format_accepted(char *buf, size_t len, const struct smc_cfg_var *var)
{
	char lo[32], hi[32];
	size_t off = 0;

	switch (var->type) {
	case SMC_CFG_SIZE:
		format_size(lo, sizeof(lo), var->min);
		format_size(hi, sizeof(hi), var->max);
		snprintf(buf, len, "%s..%s (k/m/g suffixes)", lo, hi);
		return;
	case SMC_CFG_UINT:
		snprintf(buf, len, "%llu..%llu", var->min, var->max);
		return;
	case SMC_CFG_BOOL:
		snprintf(buf, len, "1/0, yes/no, true/false, on/off");
		return;
	case SMC_CFG_STRING:
		snprintf(buf, len, "a path shorter than %d bytes", SMC_CFG_STRING_MAX);
		return;
	case SMC_CFG_ENUM:
		buf[0] = '\0';
		for (int i = 0; var->choices[i] != NULL && off < len; i++)
			off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "|" : "",
						var->choices[i]);
		if (var->max > 0 && off < len)
			snprintf(buf + off, len - off, " or 0..%llu", var->max);
		return;
	}
	buf[0] = '\0';
}

static const char *problem_text(const struct smc_cfg_var *var, int rc)
{
	if (rc == -2)
		return "out of range";
	if (rc == -3)
		return "too long";
	switch (var->type) {
	case SMC_CFG_SIZE: return "not a size";
	case SMC_CFG_UINT: return "not a number";
	case SMC_CFG_BOOL: return "not a boolean";
	default: return "not a valid value";
	}
}

/* Copies `s` for display on one line: at most 64 characters, anything that is not
 * printable ASCII (or is a quote/backslash) as \xNN, so a hostile value cannot forge
 * extra log lines. */
static void quote_for_message(char *buf, size_t len, const char *s)
{
	size_t off = 0, shown = 0;

	for (; *s != '\0' && off + 8 < len; s++, shown++) {
		unsigned char c = (unsigned char)*s;

		if (shown == 64) {
			off += (size_t)snprintf(buf + off, len - off, "...");
			break;
		}
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			buf[off++] = (char)c;
		else
			off += (size_t)snprintf(buf + off, len - off, "\\x%02x", c);
	}
	buf[off] = '\0';
}

static void report_bad_value(FILE *err, const struct smc_cfg_var *var, const char *text,
			     int rc)
{
	char shown[300], accepted[160], line[640];
	const char *def = var->def[0] != '\0' ? var->def : "(none)";

	quote_for_message(shown, sizeof(shown), text);
	format_accepted(accepted, sizeof(accepted), var);
	/* One buffer, one fputs: the report stays one line even with other writers. */
	snprintf(line, sizeof(line), "smc-preload: %s=\"%s\": %s; accepted: %s; using default %s\n",
		 var->name, shown, problem_text(var, rc), accepted, def);
	fputs(line, err);
	fflush(err);
}

/* The table's own defaults always parse; a unit test guards this. */
static void apply_default(const struct smc_cfg_var *var)
{
	union cfg_value v;

	if (parse_value(var, var->def, &v) == 0)
		store_value(var, &v);
}

static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static void apply_defaults(void)
{
	for (size_t i = 0; i < CFG_NVARS; i++)
		apply_default(&smc_cfg_vars[i]);
}

/* Fills smc_cfg from the table when the library (or a test program) is loaded, before
 * any environment is read. Once only: a config_load() that got here first (a wrapper
 * reached from an earlier constructor) must not have its values reset. */
__attribute__((constructor)) static void config_defaults(void)
{
	pthread_once(&defaults_once, apply_defaults);
}

/*
 * Rings larger than a core's L2 cache. On this project's VM (1 MiB of L2 per core) a
 * stream through a ring of 1 MiB or less ran at 10-14 GB/s and through one of 2 MiB or
 * more at 26-33 (sockperf tp, msgsize, iperf3): a ring that fits in L2 keeps the lines
 * the writer comes back to in the reader's cache, so every store first takes its line
 * back from the other core. The table's 2m is twice that L2; on a CPU with more L2 per
 * core the default grows to the smallest power of two (RMB sizes are) of at least twice
 * its L2, up to CONFIG_RING_FIT_MAX, and SMC_MEM_CAP's default by the same factor, so a
 * process still holds as many shared-memory connections. Measured on one CPU only; the
 * rule's factor of two is the margin that was measured there (1x slow, 2x and 4x fast).
 * Only values left at their default follow it; a value from the environment is kept.
 */
#define CONFIG_RING_FIT_MAX (8 * MIB)

size_t config_ring_for_l2(size_t floor, long l2_bytes)
{
	size_t ring = floor;

	if (l2_bytes <= 0)
		return floor;
	while (ring < 2 * (size_t)l2_bytes && ring < CONFIG_RING_FIT_MAX)
		ring *= 2;
	return ring;
}

/* -1: ask the CPU (cpu_l2_bytes); tests set a value */
static long cpu_l2_override = -1;

void config_set_cpu_l2(long l2_bytes)
{
	cpu_l2_override = l2_bytes;
}

/* Raises a ring left at its table default to the size for this CPU's L2; returns the
 * factor it grew by (1: unchanged). */
static size_t fit_ring(enum cfg_index i, size_t *ring, long l2)
{
	size_t fit, factor;

	if (cfg_source[i] != SMC_CFG_DEFAULT)
		return 1;
	fit = config_ring_for_l2(*ring, l2);
	factor = fit / *ring;
	if (factor > 1) {
		*ring = fit;
		cfg_source[i] = SMC_CFG_CPU;
	}
	return factor;
}

static void fit_rings_to_cpu(void)
{
	long l2 = cpu_l2_override >= 0 ? cpu_l2_override : cpu_l2_bytes();
	size_t rcv = fit_ring(CFG_RCVBUF, &smc_cfg.rcvbuf, l2);
	size_t snd = fit_ring(CFG_SNDBUF, &smc_cfg.sndbuf, l2);
	size_t factor = rcv > snd ? rcv : snd;

	if (factor == 1 || cfg_source[CFG_MEM_CAP] != SMC_CFG_DEFAULT)
		return;
	/* the cap grows as the default rings did: the same number of connections */
	smc_cfg.mem_cap *= factor;
	if (smc_cfg.mem_cap > smc_cfg_vars[CFG_MEM_CAP].max)
		smc_cfg.mem_cap = smc_cfg_vars[CFG_MEM_CAP].max;
	cfg_source[CFG_MEM_CAP] = SMC_CFG_CPU;
}

int config_load(FILE *err)
{
	int bad = 0;

	if (err == NULL)
		err = stderr;
	pthread_once(&defaults_once, apply_defaults);
	for (size_t i = 0; i < CFG_NVARS; i++) {
		const struct smc_cfg_var *var = &smc_cfg_vars[i];
		const char *text = getenv(var->name);
		union cfg_value v;
		int rc;

		apply_default(var);
		cfg_source[i] = SMC_CFG_DEFAULT;
		if (text == NULL)
			continue;
		rc = parse_value(var, text, &v);
		if (rc != 0) {
			report_bad_value(err, var, text, rc);
			cfg_source[i] = SMC_CFG_INVALID;
			bad++;
			continue;
		}
		store_value(var, &v);
		cfg_source[i] = SMC_CFG_ENV;
	}
	fit_rings_to_cpu();
	if (smc_cfg.debug && smc_cfg.log_level < SMC_LOG_DEBUG)
		smc_cfg.log_level = SMC_LOG_DEBUG;
	config_loaded = true;
	return bad;
}

/* ------------------------------------------------------------------ printing */

static const char *choice_name(const struct smc_cfg_var *var, int index)
{
	for (int i = 0; var->choices[i] != NULL; i++)
		if (i == index)
			return var->choices[i];
	return "?";
}

/* The effective value of variable i, read back from smc_cfg. */
static void config_value_text(enum cfg_index i, char *buf, size_t len)
{
	const struct smc_cfg_var *var = &smc_cfg_vars[i];

	switch (i) {
	case CFG_RCVBUF: format_size(buf, len, smc_cfg.rcvbuf); break;
	case CFG_SNDBUF: format_size(buf, len, smc_cfg.sndbuf); break;
	case CFG_DEBUG: snprintf(buf, len, "%d", smc_cfg.debug ? 1 : 0); break;
	case CFG_LOG_LEVEL: snprintf(buf, len, "%s", choice_name(var, smc_cfg.log_level)); break;
	case CFG_LOG_FILE: snprintf(buf, len, "%s", smc_cfg.log_file ? smc_cfg.log_file : ""); break;
	case CFG_STATS_FILE:
		snprintf(buf, len, "%s", smc_cfg.stats_file ? smc_cfg.stats_file : "");
		break;
	case CFG_SPIN_US: snprintf(buf, len, "%u", smc_cfg.spin_us); break;
	case CFG_SHORT_CONN_US: snprintf(buf, len, "%u", smc_cfg.short_conn_us); break;
	case CFG_POOL_SLOTS: snprintf(buf, len, "%u", smc_cfg.pool_slots); break;
	case CFG_POOL_RING: format_size(buf, len, smc_cfg.pool_ring); break;
	case CFG_COPY: snprintf(buf, len, "%s", choice_name(var, smc_cfg.copy_store + 1)); break;
	case CFG_MEM_CAP: format_size(buf, len, smc_cfg.mem_cap); break;
	case CFG_HANDSHAKE_TIMEOUT_MS: snprintf(buf, len, "%u", smc_cfg.handshake_timeout_ms); break;
	case CFG_TRANSPORT: snprintf(buf, len, "%s", choice_name(var, (int)smc_cfg.transport)); break;
	case CFG_BPF_DIR: snprintf(buf, len, "%s", smc_cfg.bpf_dir); break;
	case CFG_RDV_DIR: snprintf(buf, len, "%s", smc_cfg.rdv_dir); break;
	case CFG_IB_DEV: snprintf(buf, len, "%s", smc_cfg.ib_dev ? smc_cfg.ib_dev : ""); break;
	case CFG_IB_PORT: snprintf(buf, len, "%u", smc_cfg.ib_port); break;
	case CFG_IB_GID_INDEX:
		snprintf(buf, len, "%d", smc_cfg.ib_gid_index < 0 ? 256 : smc_cfg.ib_gid_index);
		break;
	case CFG_NVARS: buf[0] = '\0'; break;
	}
}

static const char *source_text(enum smc_cfg_source s)
{
	switch (s) {
	case SMC_CFG_ENV: return "env";
	case SMC_CFG_INVALID: return "invalid, using default";
	case SMC_CFG_CPU: return "default, raised for this CPU's L2 cache";
	case SMC_CFG_DEFAULT: break;
	}
	return "default";
}

void config_print(FILE *out)
{
	char value[SMC_CFG_STRING_MAX];

	for (size_t i = 0; i < CFG_NVARS; i++) {
		config_value_text((enum cfg_index)i, value, sizeof(value));
		fprintf(out, "%s=%s  (%s)  # %s\n", smc_cfg_vars[i].name, value,
			source_text(cfg_source[i]), smc_cfg_vars[i].doc);
	}
	fflush(out);
}

/*
 * `smc_preload.sh --print-config` runs /bin/true with the library preloaded and
 * SMC_PRINT_CONFIG=1: this file's constructor reports bad values, then prints the table,
 * both on stderr where the library's other reports go, and the program runs on (a
 * library never ends the program it is loaded into); the wrapper puts the table's lines
 * on its stdout. It runs from a constructor so it works whether or not something else
 * calls smc_init() at load time; the table is loaded only once. Only the exact value "1"
 * prints, and the wrapper unsets the variable for the commands it runs.
 */
void config_maybe_print(void)
{
	const char *v = getenv("SMC_PRINT_CONFIG");

	if (v == NULL || strcmp(v, "1") != 0)
		return;
	if (!config_loaded)
		config_load(stderr);
	config_print(stderr);
}

__attribute__((constructor)) static void config_print_hook(void)
{
	config_maybe_print();
}
