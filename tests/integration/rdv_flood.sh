#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Another local user floods the same-host rendezvous (abstract names, no TCP option):
# user nobody reads /proc/net/unix as fast as it can and connects to every rendezvous
# name it finds ("@smcp1:c:" per-connection names of the client, the smcpstat names
# "@smcp1:stat:"), as many times as their backlog takes, sending garbage, and sends
# garbage datagrams to the listeners' pool setup names ("@smcp1:l:", read inside the
# server's accept()). Meanwhile a preloaded root client makes short connections to a
# preloaded root event-loop server (tests/progs/smc_churn, epoll). Asserted: every
# legitimate connection works (its exact response, no abort); the attacker receives no
# descriptor and no byte of the legitimate payload (a client that finds it on its name
# first may answer with a Decline: counted and reported); the server holds no more
# descriptors, memfds or mappings than before; and, last, the median delay added per
# legitimate connection is under ATTACK_MAX_MEDIAN_ADDED_MS (rdv_attack_lib.sh). How many
# legitimate connections the flood turned into TCP is reported ("downgraded"). Then
# nobody connects first, once, to each client's name while the server is held up: every
# connection must still be upgraded, the connector told nothing.
# Skips (77) without root or without a user nobody.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
# shellcheck disable=SC2034 # read by lib.sh
SMC_TEST_KEEP_TRANSPORT=1
SMC_TEST_EXPECT=shm
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (an attacker of another user)"
id -u nobody >/dev/null 2>&1 || smc_skip "no user nobody"
smc_require_cmd setpriv
smc_init
smc_require_built "$SMC_CHURN"
. "$(dirname -- "$0")/rdv_attack_lib.sh"
# every connection makes the full handshake, however short (libsmc_preload(7))
export SMC_SHORT_CONN_US=0
# the same-host rendezvous, never the TCP option, even where the host (or a concurrent
# test) has it set up: no map where the library looks for one
export SMC_BPF_DIR=/sys/fs/bpf/smc-rdv-attack-none-$$ SMC_RDV_DIR=$SMC_TMP/no-rdv-dir
LEGIT=${FLOOD_LEGIT:-50}

smc_free_port PORT
SRV_STATS=$(smc_stats_dir server)
smc_start_server server "$SRV_STATS" "$SMC_CHURN" server "$PORT" --bind 127.0.0.1 --mode epoll
smc_wait_port server "$PORT"
srv_pid=${SMC_SERVER_PID[server]}

attack_legit warmup "$PORT" 3
sleep 0.5
base=$(smc_proc_resources "$srv_pid")
attack_legit baseline "$PORT" "$LEGIT"

attack_start flood flood - 600
attack_legit flooded "$PORT" "$LEGIT"
attack_stop flood
attack_delay "flood/abstract names" baseline flooded "$(attack_field connects)"
smc_log "flood: $(attack_field names) names seen, $(attack_field connects) connections," \
	"$(attack_field refused) refused, $(attack_field datagrams) datagrams," \
	"$(attack_field msgs) messages received"
smc_assert_ge "flood: rendezvous names the attacker found" "$(attack_field names)" 1
smc_assert_eq "flood: descriptors the attacker received" "$(attack_field fds)" 0
smc_assert_eq "flood: legitimate payload the attacker saw" "$(attack_field marker)" 0
FLOODED_STATS=$(smc_stats_dir flooded)
echo "flood/abstract names: downgraded=$(smc_stats "$FLOODED_STATS" '.connections.tcp // 0') of $LEGIT" \
	"($(smc_stats "$FLOODED_STATS" '.fallback // {}' | tr -d ' \n'))" >>"$ATTACK_REPORT"

# Connecting first: nobody connects once to each per-connection name it finds, before
# the server does, while a silent holder (rdv_hold.sh) keeps the server's accept() busy
# for 500 ms at a time so the names live long enough to be found. The client must take
# such a connector for what it is (it does not own the server's socket), tell it
# nothing, and wait for the server: every connection upgraded, no message for the
# connector. (The delays here are the holder's, measured in rdv_hold.sh.)
attack_start first-holder hold "$PORT" 600 1 20 silent
holder_pid=$ATTACK_PID
attack_start first-connector watch - 600 silent
attack_legit connector-first "$PORT" 20
attack_stop first-connector
smc_assert_ge "connector: names it connected to first" "$(attack_field connected)" 1
smc_assert_eq "connector: messages it received" "$(attack_field msgs)" 0
smc_assert_eq "connector: descriptors it received" "$(attack_field fds)" 0
ATTACK_PID=$holder_pid
attack_stop first-holder
smc_assert_eq "connector-first: shm connections" \
	"$(smc_stats "$(smc_stats_dir connector-first)" '.connections.shm // 0')" 20

attack_legit after "$PORT" 3
smc_assert_eq "after the flood: shm connections" \
	"$(smc_stats "$(smc_stats_dir after)" '.connections.shm // 0')" 3
smc_expect_resources server "$srv_pid" "$base" 20
smc_stop_server server
smc_require_stats "$SRV_STATS"
smc_log "stats server: $(smc_stats_summary "$SRV_STATS")"
smc_assert_eq "server: aborts" "$(smc_stats "$SRV_STATS" '.events.aborts // 0')" 0
# (its exit status counts the holder's connections, reset before a request, as errors:
# not asserted)

attack_assert_delay
smc_pass
