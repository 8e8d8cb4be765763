/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * SMC-R link groups of this process: the RDMA device (opened on first need), the links
 * (one RC QP each, ib_link.h) to peer processes, their sharing by connections, their
 * timers and their release. The bookkeeping rules are in ib_lgr_book.h.
 *
 * Threads and locks. Every function here is thread-safe (one registry mutex). Lock
 * order: registry -> link (ib_link's mutex) -> nothing: the connection notify callback
 * (ib_link.h) may run under both, so it must only ring doorbells, never call into
 * ib_lgr_* or take a lock held around ib_* calls. ib_lgr_tick, ib_lgr_async_process and
 * ib_link_process run on one thread, the progress thread, which also owns the hooks'
 * removal side (below).
 *
 * Resources: a link is destroyed (QP, CQ, completion channel, receive/control buffers,
 * the MRs of connections still registered) when nothing holds it and its idle time ran
 * out; the device (PD, context, async fd) is closed when its last link went, and opened
 * again by the next SMC-R handshake. ib_lgr_shutdown releases everything at exit.
 *
 * fork(): ibv_fork_init() runs before the device is first opened. On kernels that copy
 * pinned pages at fork (Linux >= 5.13, rdma-core reports IBV_FORK_UNNEEDED) it is a
 * no-op; on older ones registered memory is excluded from the child (MADV_DONTFORK),
 * without which the parent's first write after fork() would move a page away from the
 * one the device reads or writes. Either way the child cannot use the parent's verbs
 * objects: ib_lgr_atfork_child forgets them (without destroying anything: that would
 * destroy the parent's QPs), and the child's RDMA connections inherited from the parent
 * are not usable there (the connection engine must treat them as reset in the child).
 */
#ifndef SMC_IB_LGR_H
#define SMC_IB_LGR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ib/ib_lgr_book.h"
#include "core/ib/ib_link.h"

#define IB_LGR_IDLE_MS_DEFAULT 10000u

/* Where the progress thread learns about fds to watch. */
struct ib_lgr_hooks {
	/* A link was created (on the thread creating it, registry lock held): watch
	 * ib_link_event_fd(l) for reading and call ib_link_process(l) then. */
	void (*link_added)(struct ib_link *l, void *arg);
	/* On the thread of ib_lgr_tick/ib_lgr_shutdown, before the link is destroyed: stop
	 * watching its fd. */
	void (*link_removed)(struct ib_link *l, void *arg);
	/* The device was opened (any thread, lock held): watch async_fd for reading and
	 * call ib_lgr_async_process then. */
	void (*dev_opened)(int async_fd, void *arg);
	/* Before the device is closed (thread of ib_lgr_tick/ib_lgr_shutdown). */
	void (*dev_closing)(int async_fd, void *arg);
	void *arg;
};
void ib_lgr_set_hooks(const struct ib_lgr_hooks *h);

/* Opens the device if needed (smc_cfg.ib_dev / ib_port / ib_gid_index). 0, -ENODEV (no
 * RDMA device: do not offer SMC-R; decline an SMC-R Proposal with CLC_DECL_NOSMCRDEV),
 * or -errno. A failure is remembered for a few seconds, so that a host without RDMA
 * does not search for a device at every connection. */
int ib_lgr_open(void);
/* This side's SMC-R identity for a Proposal/Accept/Confirm: the process's peer id and
 * the device's GID and MAC. Opens the device like ib_lgr_open. */
int ib_lgr_local(struct clc_smcr_local *out);

/*
 * Server, on an SMC-R Proposal from (peer_id, gid): a shareable link to that peer
 * process (*first_contact false), else a new one (true: its parameters go into the
 * Accept with CLC_FLAG_FIRST_CONTACT). Holds a reference until ib_lgr_put.
 */
int ib_lgr_get_server(const uint8_t *peer_id, const uint8_t *gid, struct ib_link **out,
		      bool *first_contact);
/*
 * Client, on the server's Accept (params from ib_params_from_clc): first_contact makes a
 * new link (connect it with ib_lgr_connect before sending the Confirm); otherwise the
 * link the Accept names (server peer id, GID and QP number): -ENOENT when there is none
 * (decline with CLC_DECL_SYNCERR). Holds a reference until ib_lgr_put.
 */
int ib_lgr_get_client(const struct ib_link_params *server, bool first_contact,
		      struct ib_link **out);
/* First contact: ib_link_connect (server true on the server, after the Confirm), then
 * the link may be shared. Errors as ib_link_connect's. */
int ib_lgr_connect(struct ib_link *l, const struct ib_link_params *peer, bool server);
/* The handshake is over (its connection, if any, now holds the link). */
void ib_lgr_put(struct ib_link *l);

/* Progress thread: link timers (keepalive, confirmation timeout), teardown of idle and
 * failed links, device close. now_ns: CLOCK_MONOTONIC. */
void ib_lgr_tick(uint64_t now_ns);
/* When ib_lgr_tick has work next (UINT64_MAX: no link). At most keepalive_ms ahead
 * while a link exists. */
uint64_t ib_lgr_next_deadline(void);
/* The device's async event fd (nonblocking), -1 when the device is closed. */
int ib_lgr_async_fd(void);
/* Progress thread, when the async fd is readable: a QP/CQ error fails that link, a port
 * or device error every link (their connections are aborted with IB_EV_ERR). */
void ib_lgr_async_process(void);

/* At exit (after the progress thread stopped): destroys every link and closes the
 * device. Connections still open are freed with their link: call it last. */
void ib_lgr_shutdown(void);
/* At exit: waits until no link has output pending (ib_link_output_pending), as long as
 * completions keep coming within idle_ns, and at most max_ns. The progress thread
 * handles the completions meanwhile. false when it gave up. */
bool ib_lgr_drain(uint64_t idle_ns, uint64_t max_ns);
/* In the child after fork(): forget the parent's links and device (not destroyed: they
 * are the parent's), draw a new peer id. */
void ib_lgr_atfork_child(void);

/* Introspection and knobs for tests and tools. */
unsigned ib_lgr_link_count(void);
bool ib_lgr_dev_is_open(void);
/* Idle time before teardown of an unused link (default IB_LGR_IDLE_MS_DEFAULT). */
void ib_lgr_set_idle_timeout_ms(uint32_t ms);
/* Options of links created from now on (default IB_LINK_OPTS_DEFAULT). */
void ib_lgr_set_link_opts(const struct ib_link_opts *o);

#endif
