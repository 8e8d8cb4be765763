#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# TCP_DEFER_ACCEPT on the listener (Apache sets it on every listener): the kernel holds
# a connection back from accept() until its first data arrives, and a preloaded client
# sends none before its handshake, which the server's process starts only after
# accept(). The connection must upgrade all the same, and getsockopt must report what
# the kernel reports without the library. smc_stream sets the option before listen()
# and again after it; first a run with neither side preloaded gives the kernel's
# values, then server and client under smc_preload.sh, blocking and epoll.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

smc_init
smc_require_built "$SMC_STREAM"

smc_stream_run plain - - 1m --defer-accept 30
want=$(grep '^DEFER_ACCEPT ' "$(smc_server_log server-plain)")
[ -n "$want" ] || smc_fail "smc_stream without the library printed no DEFER_ACCEPT line"
smc_log "without the library: $want"

for mode in block epoll; do
	smc_stream_pair smc_expect_payload "$mode" 64m --mode "$mode" --defer-accept 30
	got=$(grep '^DEFER_ACCEPT ' "$(smc_server_log "server-$mode")")
	smc_assert_eq "TCP_DEFER_ACCEPT reported by getsockopt ($mode)" "$got" "$want"
done
smc_pass
