/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#include "core/base/evlib.h"
#include "core/base/evlib_fds.h"
#include "core/base/log.h"

struct evlib evlib;

/* ASan's dlopen refuses RTLD_DEEPBIND (its interceptors must stay first): sanitizer
 * builds, which run no program that brings its own event library, load without it. */
#if defined(__SANITIZE_ADDRESS__)
#define EVLIB_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL)
#else
#define EVLIB_DLOPEN_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
#endif

static pthread_once_t evlib_once = PTHREAD_ONCE_INIT;
static int evlib_result = -ENOENT;

static void *evlib_sym(void *h, const char *name, bool *ok)
{
	void *p = dlsym(h, name);

	if (!p) {
		log_warn("libevent: no %s in %s: no background negotiation", name,
			 LIBEVENT_CORE_SONAME);
		*ok = false;
	}
	return p;
}

static void evlib_open(void)
{
	/* a copy the program loaded is the program's: its calls are left alone */
	void *program_copy = dlopen(LIBEVENT_CORE_SONAME, RTLD_NOW | RTLD_NOLOAD);
	/* libevent_pthreads first: dlopen brings its libevent_core in the same local
	 * scope, and the second dlopen finds that copy */
	void *th = dlopen(LIBEVENT_PTHREADS_SONAME, EVLIB_DLOPEN_FLAGS);
	void *core = th ? dlopen(LIBEVENT_CORE_SONAME, EVLIB_DLOPEN_FLAGS) : NULL;
	bool ok = true;

	if (!core) {
		log_warn("libevent: %s", dlerror());
		return;
	}
	*(void **)&evlib.base_new = evlib_sym(core, "event_base_new", &ok);
	*(void **)&evlib.base_free = evlib_sym(core, "event_base_free", &ok);
	*(void **)&evlib.base_loop = evlib_sym(core, "event_base_loop", &ok);
	*(void **)&evlib.base_once = evlib_sym(core, "event_base_once", &ok);
	*(void **)&evlib.new_ = evlib_sym(core, "event_new", &ok);
	*(void **)&evlib.free_ = evlib_sym(core, "event_free", &ok);
	*(void **)&evlib.add = evlib_sym(core, "event_add", &ok);
	*(void **)&evlib.del = evlib_sym(core, "event_del", &ok);
	*(void **)&evlib.pending = evlib_sym(core, "event_pending", &ok);
	*(void **)&evlib.set_log_callback = evlib_sym(core, "event_set_log_callback", &ok);
	*(void **)&evlib.use_pthreads = evlib_sym(th, "evthread_use_pthreads", &ok);
	if (!ok)
		return;
	if (program_copy)
		dlclose(program_copy);
	else
		evlib_fds_redirect(core); /* its descriptors out of the program's numbers */
	evlib_result = 0;
}

int evlib_load(void)
{
	pthread_once(&evlib_once, evlib_open);
	return evlib_result;
}
