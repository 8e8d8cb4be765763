/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The library's side of the SMC TCP option: the pinned sk_storage map "smc_peer" that
 * bpf/smc_tcpopt.bpf.c reads and writes, keyed by socket fd.
 *
 * The map is looked for where `smc_preload.sh --setup` pins it, SMC_BPF_DIR, and then in
 * the bpf file system that --setup mounts inside the rendezvous directory
 * (SMC_RDV_DIR/bpf, TCPOPT_RDV_SUBDIR). A process whose /sys is not the host's does not
 * see the first: `ip netns exec` mounts a fresh sysfs over /sys, and a container has a
 * mount namespace of its own. It reaches the second through the one bind mount of the
 * rendezvous directory that the path rendezvous between namespaces needs anyway.
 *
 * The map is used through the raw bpf(2) system call, so a preloaded application does
 * not load libbpf. It is opened once per process, lazily; the fd is close-on-exec and
 * parked high (fd_park) so the application's own fd numbers stay as the kernel hands
 * them out. A forked child inherits it. When the application closes our fd behind our
 * back (daemons that close every fd), the first failing map call notices that the fd is
 * no longer the map and opens it again.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <limits.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/base/base_init.h"
#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/forklock.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/rendezvous.h"
#include "core/base/sandbox.h"
#include "core/negotiate/tcpopt.h"

#define TCPOPT_MAP_NAME "smc_peer"
#define TCPOPT_WD_NAME  "smc_withdrawn"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

/* The key of the withdrawn-ports map: the contract with bpf/smc_tcpopt.bpf.c. */
struct wd_key {
	uint64_t netns;
	uint32_t port; /* host byte order */
	uint32_t zero;
};

static pthread_once_t map_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t reopen_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int map_fd = -1;
static _Atomic uint32_t map_id; /* the kernel's id of the map behind map_fd, 0 unknown */
/* the directory map_fd was opened in: the withdrawn-ports map of the same setup is
 * pinned beside it; written once, before map_fd is published */
static char map_dir[PATH_MAX];

/* bpf(2); -errno on failure. */
static int sys_bpf(int cmd, union bpf_attr *attr)
{
	long r = REAL(syscall)(SYS_bpf, (long)cmd, (long)attr, (long)sizeof(*attr));

	return r < 0 ? -errno : (int)r;
}

static uint64_t ptr_u64(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* The id and type of the bpf map behind fd; -errno when fd is not a map. */
static int map_info(int fd, uint32_t *id, uint32_t *type)
{
	struct bpf_map_info info;
	union bpf_attr attr;
	int r;

	memset(&info, 0, sizeof(info));
	memset(&attr, 0, sizeof(attr));
	attr.info.bpf_fd = (uint32_t)fd;
	attr.info.info_len = sizeof(info);
	attr.info.info = ptr_u64(&info);
	r = sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr);
	if (r < 0)
		return r;
	*id = info.id;
	*type = info.type;
	return 0;
}

/* The map pinned at path: a close-on-exec fd, or -errno. */
static int map_get(const char *path)
{
	union bpf_attr attr;
	uint32_t id = 0, type = 0;
	int fd, r;

	memset(&attr, 0, sizeof(attr));
	attr.pathname = ptr_u64(path);
	fd = sys_bpf(BPF_OBJ_GET, &attr); /* bpf fds are always O_CLOEXEC */
	if (fd < 0) {
		log_debug("tcpopt: %s: %s", path, strerror(-fd));
		return fd;
	}
	/* Some other object pinned under our name would take any key: refuse it. An
	 * unknown answer (old kernel, no permission) is not a reason to refuse. */
	r = map_info(fd, &id, &type);
	if (r == 0 && type != BPF_MAP_TYPE_SK_STORAGE) {
		log_warn("tcpopt: %s is not an sk_storage map (type %u); ignored", path, type);
		fd_own_close(fd);
		return -EINVAL;
	}
	atomic_store(&map_id, r == 0 ? id : 0);
	return fd;
}

/* The rendezvous directory's bpf file system: in a usable directory (rendezvous.h), a
 * directory itself (not a symlink) of root's or ours. path: PATH_MAX bytes of room. */
static bool rdv_subdir_usable(char *path)
{
	struct stat st;

	if (!rdv_dir_usable() ||
	    snprintf(path, PATH_MAX, "%s/" TCPOPT_RDV_SUBDIR, smc_cfg.rdv_dir) >= PATH_MAX ||
	    lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return false;
	return st.st_uid == 0 || st.st_uid == geteuid();
}

/* Opens the pinned map, in SMC_BPF_DIR or else in the rendezvous directory's bpf file
 * system: a parked, close-on-exec fd, or -errno (the first place's). */
static int map_open(void)
{
	/* on the heap: the first connect() runs this on the program's stack, which a thread
	 * may have made as small as PTHREAD_STACK_MIN (16 KiB) */
	char *path = malloc(PATH_MAX);
	int fd = -ENAMETOOLONG, r;

	if (!path)
		return -ENOMEM;
	if (sandbox_bpf_refused()) { /* a seccomp filter may kill us for it (sandbox.h) */
		free(path);
		return -EPERM;
	}
	if (snprintf(path, PATH_MAX, "%s/" TCPOPT_MAP_NAME, smc_cfg.bpf_dir) < PATH_MAX)
		fd = map_get(path);
	/* only in a rendezvous directory nobody else controls: another user's would decide
	 * which map (of which setup) we take, through a symlink of theirs */
	if (fd < 0 && smc_cfg.rdv_dir && smc_cfg.rdv_dir[0] == '/' && rdv_subdir_usable(path) &&
	    snprintf(path, PATH_MAX, "%s/" TCPOPT_RDV_SUBDIR "/" TCPOPT_MAP_NAME,
		     smc_cfg.rdv_dir) < PATH_MAX) {
		r = map_get(path);
		if (r >= 0)
			fd = r;
	}
	if (fd < 0) {
		log_debug("tcpopt: no map (no SMC TCP option; run smc_preload.sh --setup)");
		free(path);
		return fd;
	}
	snprintf(map_dir, sizeof(map_dir), "%.*s", (int)(strrchr(path, '/') - path), path);
	fd = fd_park_low(fd);
	fd_budget_take(1);
	log_debug("tcpopt: using %s (fd %d)", path, fd);
	free(path);
	return fd;
}

static void map_open_once(void)
{
	base_init(); /* smc_cfg.bpf_dir, smc_cfg.rdv_dir */
	atomic_store(&map_fd, map_open());
}

bool tcpopt_available(void)
{
	pthread_once(&map_once, map_open_once);
	return atomic_load(&map_fd) >= 0;
}

/* Held while one bpf() call reopens the map. */
bool tcpopt_fork_lock(void)
{
	return forklock_take(&reopen_lock) != FORKLOCK_BUSY;
}

/* After a map call failed with EBADF/EINVAL: is fd still our map? Without an id to
 * compare (the kernel would not tell us at open), assume it is. */
static bool map_fd_lost(int fd)
{
	uint32_t want = atomic_load(&map_id), id = 0, type = 0;

	if (want == 0)
		return false;
	return map_info(fd, &id, &type) < 0 || id != want;
}

/* Replaces a lost map fd (once, whichever thread gets here first). The old number now
 * belongs to the application, or to nobody: it is never closed here. */
static int map_reopen(int lost)
{
	int fd;

	pthread_mutex_lock(&reopen_lock);
	fd = atomic_load(&map_fd);
	if (fd == lost) {
		log_info("tcpopt: map fd %d was closed by the application; opening it again", lost);
		fd_budget_give(1);
		fd = map_open();
		atomic_store(&map_fd, fd);
	}
	pthread_mutex_unlock(&reopen_lock);
	return fd;
}

/* BPF_MAP_UPDATE_ELEM / BPF_MAP_LOOKUP_ELEM with socket fd `sock` as the key. */
static int map_elem(int cmd, int mfd, int sock, uint32_t *value)
{
	union bpf_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (uint32_t)mfd;
	attr.key = ptr_u64(&sock);
	attr.value = ptr_u64(value);
	attr.flags = BPF_ANY;
	return sys_bpf(cmd, &attr);
}

static int map_call(int cmd, int sock, uint32_t *value)
{
	int mfd, r;

	if (sock < 0)
		return -EBADF;
	if (!tcpopt_available())
		return atomic_load(&map_fd); /* why it could not be opened */
	mfd = atomic_load(&map_fd);
	r = map_elem(cmd, mfd, sock, value);
	if ((r == -EBADF || r == -EINVAL) && map_fd_lost(mfd)) {
		mfd = map_reopen(mfd);
		if (mfd < 0)
			return mfd;
		r = map_elem(cmd, mfd, sock, value);
	}
	return r;
}

int tcpopt_opt_in(int fd)
{
	uint32_t v = TCPOPT_WANT;
	int r = map_call(BPF_MAP_UPDATE_ELEM, fd, &v);

	if (r < 0 && r != -ENOENT)
		log_debug("tcpopt: opting in fd %d: %s", fd, strerror(-r));
	return r < 0 ? r : 0;
}

/* The withdrawn-ports key of listening socket fd; -errno when the kernel will not say
 * (SO_NETNS_COOKIE needs Linux 5.14) or fd is not an IP socket. */
static int wd_key_of(int fd, struct wd_key *k)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint64_t cookie = 0;
	socklen_t clen = sizeof(cookie);

	memset(k, 0, sizeof(*k));
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &clen) < 0 ||
	    REAL(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		k->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		k->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		return -EAFNOSUPPORT;
	k->netns = cookie;
	return 0;
}

/* The withdrawn-ports map beside map_fd's, for one call: exec and adoption are rare,
 * and no fd of ours is left open in the application's table. -errno when absent (a
 * setup of an older program). */
static int wd_open(void)
{
	char path[PATH_MAX];
	union bpf_attr attr;
	uint32_t id = 0, type = 0;
	int fd;

	if (!tcpopt_available())
		return -ENOENT;
	if (snprintf(path, sizeof(path), "%s/" TCPOPT_WD_NAME, map_dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	memset(&attr, 0, sizeof(attr));
	attr.pathname = ptr_u64(path);
	fd = sys_bpf(BPF_OBJ_GET, &attr);
	if (fd < 0)
		return fd;
	if (map_info(fd, &id, &type) == 0 && type != BPF_MAP_TYPE_HASH) {
		fd_own_close(fd);
		return -EINVAL;
	}
	return fd;
}

int tcpopt_withdrawn(int fd)
{
	union bpf_attr attr;
	struct wd_key k;
	uint32_t v = 0;
	int mfd, r = wd_key_of(fd, &k);

	if (r < 0)
		return r;
	mfd = wd_open();
	if (mfd < 0)
		return mfd;
	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (uint32_t)mfd;
	attr.key = ptr_u64(&k);
	attr.value = ptr_u64(&v);
	r = sys_bpf(BPF_MAP_LOOKUP_ELEM, &attr);
	fd_own_close(mfd);
	if (r == -ENOENT)
		return 0;
	return r < 0 ? r : 1;
}

int tcpopt_withdraw(int fd, bool withdraw)
{
	union bpf_attr attr;
	struct wd_key k;
	uint32_t one = 1;
	int mfd, r = wd_key_of(fd, &k);

	if (r < 0)
		return r;
	mfd = wd_open();
	if (mfd < 0)
		return mfd;
	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (uint32_t)mfd;
	attr.key = ptr_u64(&k);
	if (withdraw) {
		attr.value = ptr_u64(&one);
		attr.flags = BPF_ANY;
	}
	r = sys_bpf(withdraw ? BPF_MAP_UPDATE_ELEM : BPF_MAP_DELETE_ELEM, &attr);
	fd_own_close(mfd);
	if (r == -ENOENT && !withdraw)
		r = 0;
	log_debug("tcpopt: fd %d (port %u): %s: %s", fd, k.port,
		  withdraw ? "withdrawn from the option" : "answers the option again",
		  r < 0 ? strerror(-r) : "done");
	return r < 0 ? r : 0;
}

int tcpopt_peer_sent(int fd)
{
	uint32_t v = 0;
	int r = map_call(BPF_MAP_LOOKUP_ELEM, fd, &v);

	if (r < 0)
		return r;
	return (v & TCPOPT_PEER_SENT) ? 1 : 0;
}
