/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Orphans: shared-memory connections the program closed before the peer read all it
 * was sent. A closed TCP socket keeps its unacknowledged bytes and sends them whatever
 * the program does next, even after it exits; here the bytes are in the peer's ring and
 * need nothing from us, unless the peer goes back to TCP before reading them (an exec
 * into a program without the library, fdopen, a descriptor passed on: downgrade.c).
 * Then they must be re-sent over the TCP socket, which the program's close would have
 * reset. So an orphan keeps the socket (a parked duplicate) and a reference until the
 * peer has read everything, closed, gone away or left the rings (then it re-sends, and
 * the socket closes with a FIN after the bytes). The progress thread looks at the
 * orphans every ORPHAN_SCAN_MS while there are any; an exit or exec waits for them,
 * bounded (conn_orphans_settle), as the kernel would keep sending after us.
 */
#ifndef SMC_CONN_ORPHAN_H
#define SMC_CONN_ORPHAN_H

#include <stdbool.h>
#include <stdint.h>

struct smc_conn;

/* conn_release_fd, the last close of an ACTIVE shared-memory connection in the last
 * process of its side, c->fd still open: true when c became an orphan (its socket is
 * kept; the caller must not reset it); false when the peer read everything already or
 * no descriptor may be taken (the caller resets the socket as before). */
bool conn_orphan_adopt(struct smc_conn *c);

/* How long the end of the image waits for a peer that reads nothing: it delays the
 * exit of a program whose peer stopped reading, which TCP would not, so it is short. */
#define CONN_ORPHAN_END_IDLE_NS (2ull * 1000000000ull)

/* At the end of the image (exit, exec; the progress thread goes with it): the
 * connections still open become orphans too (the kernel's close is a FIN), and this
 * waits for all to end: while a peer reads, and idle_ns at most without a peer's
 * progress. exiting: an exit, not an exec (conn_end_handshakes). */
void conn_orphans_settle(uint64_t idle_ns, bool exiting);

/* fork (forklock.h): takes the list's lock; false when busy. */
bool conn_orphans_fork_lock(void);
/* In a forked child: the orphans are the parent's; the child closes its copies. */
void conn_orphans_atfork_child(void);

/* conn.c's part (under nothing; each call takes what it needs) */
enum conn_orphan_end {
	CONN_ORPHAN_KEEP,   /* the peer may still read, or go back to TCP */
	CONN_ORPHAN_READ,   /* read all, closed or gone: reset the socket */
	CONN_ORPHAN_RESENT, /* went back to TCP: re-sent (or the re-send is under way) */
};
enum conn_orphan_end conn_orphan_step(struct smc_conn *c);
/* Bytes the peer has not read, 0 when all, -1 when it never will (closed, aborted). */
int64_t conn_orphan_unread(struct smc_conn *c);
/* SO_LINGER 0: the next last close of fd's socket is a reset. */
void conn_linger_reset(int fd);

#endif
