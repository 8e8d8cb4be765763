/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The libevent functions the progress thread uses, from a copy of libevent the library
 * loads for itself (dlopen, RTLD_LOCAL, and RTLD_DEEPBIND outside sanitizer builds),
 * never through the global namespace: a program linked with libev, which exports
 * libevent's names for its compatibility layer (h2load, nghttpx, shadowsocks-libev),
 * would otherwise have our event_add run libev's code on libevent's structures, and
 * libevent's own calls between its functions land there too (hence DEEPBIND).
 *
 * Include it after <event2/event.h> and <event2/thread.h>, in progress.c and, through
 * progress_ev.h, the files whose events run on the progress thread: the macros below
 * send each call through the table.
 */
#ifndef SMC_EVLIB_H
#define SMC_EVLIB_H

#include <event2/event.h>
#include <event2/thread.h>

struct evlib {
	struct event_base *(*base_new)(void);
	void (*base_free)(struct event_base *);
	int (*base_loop)(struct event_base *, int);
	int (*base_once)(struct event_base *, evutil_socket_t, short, event_callback_fn, void *,
			 const struct timeval *);
	struct event *(*new_)(struct event_base *, evutil_socket_t, short, event_callback_fn,
			      void *);
	void (*free_)(struct event *);
	int (*add)(struct event *, const struct timeval *);
	int (*del)(struct event *);
	int (*pending)(const struct event *, short, struct timeval *);
	void (*set_log_callback)(event_log_cb);
	int (*use_pthreads)(void);
};

extern struct evlib evlib;

/* Loads libevent and fills evlib once (any thread): 0, or -ENOENT when it cannot (the
 * reason is logged once; the progress thread then does not start). */
int evlib_load(void);

#define event_base_new()          evlib.base_new()
#define event_base_free(b)        evlib.base_free(b)
#define event_base_loop(b, f)     evlib.base_loop(b, f)
#define event_base_once(b, fd, w, cb, a, tv) evlib.base_once(b, fd, w, cb, a, tv)
#define event_new(b, fd, w, cb, a) evlib.new_(b, fd, w, cb, a)
#define event_free(e)             evlib.free_(e)
#define event_add(e, tv)          evlib.add(e, tv)
#define event_del(e)              evlib.del(e)
#define event_pending(e, w, tv)   evlib.pending(e, w, tv)
#define event_set_log_callback(f) evlib.set_log_callback(f)
#define evthread_use_pthreads()   evlib.use_pthreads()

#endif
