/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Kernel epoll registrations of TCP sockets that may still become SMC connections.
 *
 * A program may add a socket to an epoll set before it connects it (nginx's upstream
 * connections do). The kernel then watches the TCP socket, which after the upgrade
 * never carries the payload (that goes through the rings): left there, the program
 * would wait forever. So every registration made through epoll_ctl while the socket is
 * FD_TCP without FDF_TCP_FINAL is recorded (epfd, events, data), and when connect()
 * upgrades the socket, epoll_track_adopt() moves each one into the emulation (epoll.h)
 * with the same events and data. What cannot be moved exactly is refused beforehand
 * (epoll_track_check, asked by upgrade_rule.h): the socket then stays TCP.
 *
 * A record can outlive its set (the application closed a kernel-only epoll fd: the
 * library does not watch those closes); the kernel tells at adoption (EPOLL_CTL_DEL
 * fails) and the record is dropped.
 */
#ifndef SMC_EPOLL_TRACK_H
#define SMC_EPOLL_TRACK_H

#include <stdbool.h>
#include <sys/epoll.h>

#include "core/base/stats.h"

struct smc_conn;

/* True when epoll registrations of fd must be recorded (FD_TCP, not final). */
bool epoll_track_wanted(int fd);
/* The real epoll_ctl(epfd, op, fd, ev), recorded when it succeeds. */
int epoll_track_ctl(int epfd, int op, int fd, struct epoll_event *ev);
/* fd is being closed, starts listening or stays TCP for good: drop its records. */
void epoll_track_forget_fd(int fd);
/* SMC_REASON_NONE when every registration of fd can be moved into the emulation,
 * SMC_REASON_READINESS when one cannot: one in a set shared with another process
 * (made before a fork), one made through another fd of the same socket (dup), one
 * that could not be recorded, a one-shot one whose state the kernel does not show. */
enum smc_reason epoll_track_check(int fd);
/* fd is becoming connection c: each registration leaves the kernel's set for the
 * emulation, with its events, data and one-shot state; returns how many moved, or -1
 * when one could not be moved: then every registration is back in the kernel's set as it was (a fired
 * one-shot re-armed) and the socket must stay TCP. The records stay until
 * epoll_track_forget_fd (the upgrade holds) or epoll_track_undo (it did not: the
 * registrations go back to the kernel's sets). */
int epoll_track_adopt(int fd, struct smc_conn *c);
void epoll_track_undo(int fd);
/* fork handlers: records made before a fork name sets both processes share. The lock
 * is taken in forklock.c's order (false when busy). */
bool epoll_track_fork_lock(void);
void epoll_track_atfork_parent(void);
void epoll_track_atfork_child(void);

#endif
