/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* One-shot clients' shared history (hs_history.h). */
#include "core/negotiate/hs_history.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/fsize.h"
#include "core/base/real.h"
#include "core/negotiate/hs_policy.h"

#define HIST_MAGIC 0x534d43486973740aull /* "SMCHist\n" */
#define HIST_SLOTS 512                   /* a power of two */
#define CMDLINE_MAX 4096

struct hist_slot {
	uint64_t key;           /* command and destination; 0: free */
	uint64_t next_probe_ns; /* while short: when a first connection may try SMC */
	uint32_t short_run;     /* short first connections in a row, saturating */
	uint32_t pad;
	uint64_t check;         /* of the fields above: a torn or forged slot is ignored */
};

struct hist_head {
	uint64_t magic;
	uint32_t slots, slot_size;
};

#define HIST_SIZE (sizeof(struct hist_head) + HIST_SLOTS * sizeof(struct hist_slot))

static const char *hist_dir = "/dev/shm";
static const char *test_command;
static bool first_done;
static uint64_t command_hash; /* 0: not read yet */
static pthread_mutex_t command_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)p[i];
		h *= 0x100000001b3ull;
	}
	return hs_policy_mix(h);
}

/* The command line, arguments included: `curl URL1` and `curl URL2` to one server are
 * different habits, and so are `redis-cli ping` and `redis-cli --rdb f`. 0: unknown. */
static uint64_t command(void)
{
	char buf[CMDLINE_MAX];
	ssize_t n = 0;
	uint64_t h;
	int fd;

	h = __atomic_load_n(&command_hash, __ATOMIC_ACQUIRE);
	if (h)
		return h;
	pthread_mutex_lock(&command_lock);
	if (test_command) {
		n = (ssize_t)strlen(test_command);
		memcpy(buf, test_command, (size_t)n);
	} else if ((fd = REAL(open)("/proc/self/cmdline", O_RDONLY | O_CLOEXEC)) >= 0) {
		n = REAL(read)(fd, buf, sizeof(buf));
		REAL(close)(fd);
	}
	h = n > 0 ? hash_bytes(buf, (size_t)n) : 0;
	if (h)
		__atomic_store_n(&command_hash, h, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&command_lock);
	return h;
}

static uint64_t slot_check(const struct hist_slot *s)
{
	uint64_t rest = s->next_probe_ns ^ ((uint64_t)s->short_run << 32) ^ HIST_MAGIC;

	return hs_policy_mix(s->key ^ hs_policy_mix(rest));
}

/* The table's file, opened for this one look or update; -1 when there is none or it
 * is not safe to believe (not ours, not a regular file, open to others). */
static int hist_open(bool create)
{
	struct hist_head head = { HIST_MAGIC, HIST_SLOTS, sizeof(struct hist_slot) }, seen;
	char path[PATH_MAX];
	struct stat st;
	int fd, flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;

	if (snprintf(path, sizeof(path), "%s/smc-preload-hist-%u", hist_dir,
		     (unsigned)geteuid()) >= (int)sizeof(path))
		return -1;
	fd = REAL(open)(path, flags);
	/* creating it or writing a slot past RLIMIT_FSIZE would raise SIGXFSZ (fsize.h) */
	if (!fsize_allows(HIST_SIZE))
		return -1;
	if (fd < 0 && create) {
		fd = REAL(open)(path, flags | O_CREAT | O_EXCL, 0600);
		if (fd >= 0 && (ftruncate(fd, (off_t)HIST_SIZE) < 0 ||
				pwrite(fd, &head, sizeof(head), 0) != (ssize_t)sizeof(head))) {
			REAL(close)(fd);
			unlink(path);
			return -1;
		}
	}
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077) || st.st_size != (off_t)HIST_SIZE ||
	    pread(fd, &seen, sizeof(seen), 0) != (ssize_t)sizeof(seen) ||
	    memcmp(&seen, &head, sizeof(head)) != 0) {
		REAL(close)(fd);
		return -1;
	}
	return fd;
}

static off_t slot_offset(uint64_t key)
{
	return (off_t)(sizeof(struct hist_head) + (key & (HIST_SLOTS - 1)) * sizeof(struct hist_slot));
}

/* Reads key's slot; false when it holds another key or fails its check. */
static bool slot_read(int fd, uint64_t key, struct hist_slot *s)
{
	return pread(fd, s, sizeof(*s), slot_offset(key)) == (ssize_t)sizeof(*s) &&
	       s->key == key && s->check == slot_check(s);
}

static void slot_write(int fd, struct hist_slot *s)
{
	s->pad = 0;
	s->check = slot_check(s);
	(void)!pwrite(fd, s, sizeof(*s), slot_offset(s->key));
}

static uint64_t hist_key(uint64_t dest)
{
	uint64_t cmd = command(), k;

	if (!cmd || !dest)
		return 0;
	k = hs_policy_mix(cmd ^ hs_policy_mix(dest));
	return k ? k : 1;
}

bool hs_history_first_connect(void)
{
	return !__atomic_exchange_n(&first_done, true, __ATOMIC_ACQ_REL);
}

bool hs_history_admit(uint64_t dest, uint64_t now_ns, uint64_t short_ns)
{
	struct hist_slot s;
	uint64_t key;
	bool admit = true;
	int fd;

	if (short_ns == 0 || (key = hist_key(dest)) == 0 || (fd = hist_open(false)) < 0)
		return true;
	if (slot_read(fd, key, &s)) {
		uint64_t probe = s.next_probe_ns;

		admit = hs_policy_run_admit(s.short_run, &s.next_probe_ns, now_ns);
		if (s.next_probe_ns != probe)
			slot_write(fd, &s); /* this one probes */
	}
	REAL(close)(fd);
	return admit;
}

void hs_history_closed(uint64_t dest, bool is_short, uint64_t now_ns, uint64_t short_ns)
{
	struct hist_slot s;
	uint64_t key;
	int fd;

	if (short_ns == 0 || (key = hist_key(dest)) == 0 || (fd = hist_open(is_short)) < 0)
		return; /* nothing to forget in a table that is not there */
	if (!slot_read(fd, key, &s)) {
		if (!is_short) {
			REAL(close)(fd);
			return; /* unknown commands try SMC anyway */
		}
		s = (struct hist_slot){ .key = key };
	}
	hs_policy_run_closed(&s.short_run, &s.next_probe_ns, is_short, now_ns);
	slot_write(fd, &s);
	REAL(close)(fd);
}

void hs_history_set_dir(const char *dir)
{
	hist_dir = dir ? dir : "/dev/shm";
	__atomic_store_n(&first_done, false, __ATOMIC_RELEASE);
}

void hs_history_set_command(const char *cmd)
{
	pthread_mutex_lock(&command_lock);
	test_command = cmd;
	__atomic_store_n(&command_hash, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&command_lock);
	__atomic_store_n(&first_done, false, __ATOMIC_RELEASE);
}
