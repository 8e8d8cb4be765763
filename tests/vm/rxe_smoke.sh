#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# rxe_smoke.sh: the VM harness gives real verbs. Inside the VM, the Soft-RoCE device
# rxelo is listed and active, and ibv_rc_pingpong moves data between two processes over
# an RC queue pair on it (RoCE v2, the IPv4 GID of 127.0.0.1).

# shellcheck source=tests/vm/vm-lib.sh
. "$(dirname -- "$0")/vm-lib.sh"
vm_enter "$@"

set -u
vm_require_cmd ibv_devices ibv_devinfo ibv_rc_pingpong

devs=$(ibv_devices)
echo "$devs"
grep -qw rxelo <<<"$devs" || vm_fail "ibv_devices does not list rxelo"

info=$(ibv_devinfo -d rxelo -v) || vm_fail "ibv_devinfo -d rxelo failed"
grep -q 'state:.*PORT_ACTIVE' <<<"$info" || vm_fail "rxelo port is not active: $info"
# The GID of 127.0.0.1 (IPv4-mapped); its index depends on the device's GID table.
gid=$(sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::ffff:127\.0\.0\.1,.*/\1/p' <<<"$info" | head -n 1)
[ -n "$gid" ] || vm_fail "no GID for 127.0.0.1 on rxelo: $info"
vm_log "rxelo active, GID index $gid is ::ffff:127.0.0.1"

tmp=$(mktemp -d)
port=$(vm_free_port)
iters=200
size=4096
timeout 120 ibv_rc_pingpong -d rxelo -g "$gid" -p "$port" -n "$iters" -s "$size" \
	>"$tmp/server.log" 2>&1 &
server=$!
# The server listens on its TCP port for the QP parameters exchange; wait for it.
for ((i = 0; i < 300; i++)); do
	[ -n "$(ss -Hltn "sport = :$port")" ] && break
	kill -0 "$server" 2>/dev/null || break
	sleep 0.1
done
timeout 120 ibv_rc_pingpong -d rxelo -g "$gid" -p "$port" -n "$iters" -s "$size" 127.0.0.1 \
	>"$tmp/client.log" 2>&1
crc=$?
wait "$server"
src=$?
echo "---- server"; cat "$tmp/server.log"
echo "---- client"; cat "$tmp/client.log"
[ "$src" = 0 ] || vm_fail "ibv_rc_pingpong server exited with status $src"
[ "$crc" = 0 ] || vm_fail "ibv_rc_pingpong client exited with status $crc"
# Each side reports the bytes it moved: iterations x size, both directions counted.
want=$((iters * size * 2))
for side in server client; do
	grep -q "^$want bytes in" "$tmp/$side.log" ||
		vm_fail "$side did not report $want bytes moved"
done
rm -rf "$tmp"
echo "PASS: $VM_TEST_NAME"
