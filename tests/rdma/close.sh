#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# A close over SMC-R loses nothing that write() accepted, as TCP's FIN does not, when the
# writer's process ends at once: socat copies a file into the connection and exits right
# after its close(); a python writer ends with os._exit() without closing (the kernel's
# exit closes the socket); and a writer that shuts down, then reads the reader's answer.
# A delay on lo (netem) makes the RDMA path slower than the process's exit, as a real
# network between two hosts does. Every byte is checked by sha256 on the reader's side,
# and the stats must show the payload over "ib".
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/ib-lib.sh"

: "${RDMA_CLOSE_BYTES:=8m}"
: "${RDMA_CLOSE_NETEM:=delay 20ms rate 40mbit}"

smc_init
smc_require_cmd socat
N=$(smc_bytes_of "$RDMA_CLOSE_BYTES")
head -c "$N" /dev/urandom >"$SMC_TMP/in"
want=$(sha256sum <"$SMC_TMP/in" | cut -d' ' -f1)
if tc qdisc add dev lo root netem $RDMA_CLOSE_NETEM 2>"$SMC_TMP/tc.err"; then
	smc_log "lo: netem $RDMA_CLOSE_NETEM"
else
	smc_log "no netem on lo ($(cat "$SMC_TMP/tc.err")): the race is less likely"
fi

# A reader slower than the network (as a loaded host is): it still has most of an RMB
# to read when the writer's process is gone.
SLOW_READER=$top_srcdir/tests/progs/slow_reader.py

# one_way LABEL fast|slow WRITER...: a reader (socat, or the slow python one) stores
# what arrives; WRITER (its @PORT@ replaced by the reader's port) sends $SMC_TMP/in and
# ends.
one_way() {
	local label=$1 speed=$2 port srv cli got
	shift 2
	smc_free_port port
	srv=$(smc_stats_dir "reader-$label")
	cli=$(smc_stats_dir "writer-$label")
	rm -f "$SMC_TMP/out"
	if [ "$speed" = slow ]; then
		smc_start_server "reader-$label" "$srv" python3 "$SLOW_READER" "$SMC_TMP/out" "$port"
	else
		smc_start_server "reader-$label" "$srv" socat -u \
			"TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" "CREATE:$SMC_TMP/out"
	fi
	smc_wait_port "reader-$label" "$port" 60
	smc_log "$label: $N bytes"
	smc_run "$cli" "${@//@PORT@/$port}" || smc_fail "$label: writer failed (status $?)"
	smc_wait_server_exit "reader-$label" 60
	got=$(sha256sum <"$SMC_TMP/out" | cut -d' ' -f1)
	smc_assert_eq "$label: reader exit status" "${SMC_SERVER_RC[reader-$label]}" 0
	smc_assert_eq "$label: bytes received" "$(stat -c %s "$SMC_TMP/out")" "$N"
	smc_assert_eq "$label: sha256 of what arrived" "$got" "$want"
	ib_expect_payload "$srv" "$N" "reader ($label)"
	ib_expect_payload "$cli" "$N" "writer ($label)"
}

one_way socat-close fast socat -u "OPEN:$SMC_TMP/in" TCP:127.0.0.1:@PORT@
one_way socat-close-slow slow socat -u "OPEN:$SMC_TMP/in" TCP:127.0.0.1:@PORT@
# exit() with the connection open: the kernel closes it after the atexit handlers
one_way exit-unclosed-slow slow python3 -c '
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
s.sendall(open(sys.argv[1], "rb").read())
s.detach()
sys.exit(0)' "$SMC_TMP/in" @PORT@
smc_pass
