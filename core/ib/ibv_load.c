/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libibverbs on demand. Linked, libibverbs.so.1 (and with it libnl-3 and libnl-route-3)
 * was loaded into every process under the library at start-up, although only SMC-R uses
 * it and most hosts have no RDMA device: 0.2-0.25 ms of CPU on every exec (500 execs of
 * /bin/true: 640-680 ms with the linked library, 540-560 ms without, 310-340 ms with no
 * preload) and about 15 us on every fork (17 more mappings to copy). So the library does
 * not link it: the device discovery (ib_lgr.c) calls ibv_load(), which dlopen()s it the
 * first time and resolves each function below with dlvsym() at the symbol version the
 * library was built against (the versions `nm -D --undefined-only` showed when it was
 * linked). No libibverbs, or a symbol missing: RDMA is unavailable, as without a device.
 *
 * The functions here have the names and prototypes of libibverbs' own, so the SMC-R
 * code calls them unchanged. They are hidden (-fvisibility=hidden): they interpose
 * nothing of a program that uses libibverbs itself, and the dlopen() finds that
 * program's copy already loaded. Each one calls ibv_load() (once loaded, pthread_once's
 * fast path), so a verb reached first still works; without libibverbs they fail as
 * libibverbs would (NULL, -1, an error number), errno ENOSYS, and never crash.
 *
 * Adding a verb: add it to IBV_SYMS with the version of the symbol the linker would have
 * picked (`objdump -T /usr/lib/x86_64-linux-gnu/libibverbs.so.1 | grep NAME`, the
 * default one: no parentheses) and write its wrapper below. Inline verbs (ibv_post_send,
 * ibv_poll_cq, ibv_req_notify_cq...) go through the context's ops and need nothing.
 */
#include "core/ib/ibv_load.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "core/base/clock.h"
#include "core/base/log.h"

/* verbs.h turns these into inline helpers calling the functions of the same name */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define IBVERBS_SONAME "libibverbs.so.1"

/* name, symbol version */
#define IBV_SYMS(X) \
	X(_ibv_query_gid_table, "IBVERBS_1.11") \
	X(ibv_ack_async_event, "IBVERBS_1.1") \
	X(ibv_ack_cq_events, "IBVERBS_1.1") \
	X(ibv_alloc_pd, "IBVERBS_1.1") \
	X(ibv_close_device, "IBVERBS_1.1") \
	X(ibv_create_comp_channel, "IBVERBS_1.0") \
	X(ibv_create_cq, "IBVERBS_1.1") \
	X(ibv_create_qp, "IBVERBS_1.1") \
	X(ibv_dealloc_pd, "IBVERBS_1.1") \
	X(ibv_dereg_mr, "IBVERBS_1.1") \
	X(ibv_destroy_comp_channel, "IBVERBS_1.0") \
	X(ibv_destroy_cq, "IBVERBS_1.1") \
	X(ibv_destroy_qp, "IBVERBS_1.1") \
	X(ibv_event_type_str, "IBVERBS_1.1") \
	X(ibv_fork_init, "IBVERBS_1.1") \
	X(ibv_free_device_list, "IBVERBS_1.1") \
	X(ibv_get_async_event, "IBVERBS_1.1") \
	X(ibv_get_cq_event, "IBVERBS_1.1") \
	X(ibv_get_device_list, "IBVERBS_1.1") \
	X(ibv_get_device_name, "IBVERBS_1.1") \
	X(ibv_is_fork_initialized, "IBVERBS_1.13") \
	X(ibv_modify_qp, "IBVERBS_1.1") \
	X(ibv_open_device, "IBVERBS_1.1") \
	X(ibv_query_port, "IBVERBS_1.1") \
	X(ibv_reg_mr, "IBVERBS_1.1") \
	X(ibv_wc_status_str, "IBVERBS_1.1")

#define IBV_PTR(name, version) __typeof__(&name) name;
static struct {
	IBV_SYMS(IBV_PTR)
} ibv;

static pthread_once_t ibv_once = PTHREAD_ONCE_INIT;
static bool ibv_ok;

static void ibv_open(void)
{
	void *h = dlopen(IBVERBS_SONAME, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		log_debug("ib: %s: no RDMA", dlerror());
		return;
	}
#define IBV_RESOLVE(name, version) \
	*(void **)&ibv.name = dlvsym(h, #name, version); \
	if (!ibv.name) { \
		log_debug("ib: no %s@%s in %s: no RDMA", #name, version, IBVERBS_SONAME); \
		goto fail; \
	}
	IBV_SYMS(IBV_RESOLVE)
#undef IBV_RESOLVE
	log_debug("ib: %s loaded", IBVERBS_SONAME);
	__atomic_store_n(&ibv_ok, true, __ATOMIC_RELEASE);
	return;
fail:
	memset(&ibv, 0, sizeof(ibv));
	dlclose(h);
}

/*
 * Whether the host has no RDMA device at all, as sysfs tells: libibverbs finds its
 * devices under /sys/class/infiniband_verbs (one uverbsN per device, beside a file
 * abi_version). Loading it and libnl to learn that there are none costs ~0.3 ms of a
 * process's first SMC connection (a one-shot client's), so it is not loaded while
 * there is none. Without sysfs (/sys/class missing) the answer is unknown: loaded.
 */
static bool ibv_host_has_none(void)
{
	DIR *d = opendir("/sys/class/infiniband_verbs");
	struct dirent *e;
	bool none = true;

	if (!d)
		return errno == ENOENT && access("/sys/class", F_OK) == 0;
	while (none && (e = readdir(d)))
		if (strncmp(e->d_name, "uverbs", 6) == 0)
			none = false;
	closedir(d);
	return none;
}

/* A device added later (rdma link add) is found: the look is repeated, at most once
 * in this interval. */
#define IBV_NONE_RECHECK_NS (1000 * 1000 * 1000ull)

bool ibv_load(void)
{
	static uint64_t none_until;
	uint64_t now;

	if (__atomic_load_n(&ibv_ok, __ATOMIC_ACQUIRE))
		return true;
	now = clock_now_ns();
	if (now < __atomic_load_n(&none_until, __ATOMIC_RELAXED))
		return false;
	if (ibv_host_has_none()) {
		__atomic_store_n(&none_until, now + IBV_NONE_RECHECK_NS, __ATOMIC_RELAXED);
		log_debug("ib: no RDMA device in sysfs: libibverbs not loaded");
		return false;
	}
	return ibv_load_always();
}

bool ibv_load_always(void)
{
	pthread_once(&ibv_once, ibv_open);
	return __atomic_load_n(&ibv_ok, __ATOMIC_ACQUIRE);
}

/* The wrappers: the call through the table, or FAIL with errno ENOSYS. */
#define IBV_CALL(fail, name, ...) \
	do { \
		if (!ibv_load()) { \
			errno = ENOSYS; \
			return fail; \
		} \
		return ibv.name(__VA_ARGS__); \
	} while (0)
#define IBV_CALL_VOID(name, ...) \
	do { \
		if (ibv_load()) \
			ibv.name(__VA_ARGS__); \
	} while (0)

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	IBV_CALL(-ENOSYS, _ibv_query_gid_table, context, entries, max_entries, flags,
		 entry_size);
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	IBV_CALL_VOID(ibv_ack_async_event, event);
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	IBV_CALL_VOID(ibv_ack_cq_events, cq, nevents);
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	IBV_CALL(NULL, ibv_alloc_pd, context);
}

int ibv_close_device(struct ibv_context *context)
{
	IBV_CALL(ENOSYS, ibv_close_device, context);
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	IBV_CALL(NULL, ibv_create_comp_channel, context);
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	IBV_CALL(NULL, ibv_create_cq, context, cqe, cq_context, channel, comp_vector);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	IBV_CALL(NULL, ibv_create_qp, pd, qp_init_attr);
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	IBV_CALL(ENOSYS, ibv_dealloc_pd, pd);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	IBV_CALL(ENOSYS, ibv_dereg_mr, mr);
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	IBV_CALL(ENOSYS, ibv_destroy_comp_channel, channel);
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	IBV_CALL(ENOSYS, ibv_destroy_cq, cq);
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	IBV_CALL(ENOSYS, ibv_destroy_qp, qp);
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
	IBV_CALL("unknown", ibv_event_type_str, event);
}

int ibv_fork_init(void)
{
	IBV_CALL(ENOSYS, ibv_fork_init);
}

void ibv_free_device_list(struct ibv_device **list)
{
	IBV_CALL_VOID(ibv_free_device_list, list);
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	IBV_CALL(-1, ibv_get_async_event, context, event);
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	IBV_CALL(-1, ibv_get_cq_event, channel, cq, cq_context);
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	IBV_CALL(NULL, ibv_get_device_list, num_devices);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	IBV_CALL("unknown", ibv_get_device_name, device);
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	IBV_CALL(IBV_FORK_DISABLED, ibv_is_fork_initialized);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	IBV_CALL(ENOSYS, ibv_modify_qp, qp, attr, attr_mask);
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	IBV_CALL(NULL, ibv_open_device, device);
}

int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *port_attr)
{
	IBV_CALL(ENOSYS, ibv_query_port, context, port_num, port_attr);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	IBV_CALL(NULL, ibv_reg_mr, pd, addr, length, access);
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	IBV_CALL("unknown", ibv_wc_status_str, status);
}
