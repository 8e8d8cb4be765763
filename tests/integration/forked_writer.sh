#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Ring rewinds under a reader that publishes slowly. A Tcl echo server (fileevent,
# nonblocking, 64 KiB reads echoed at once) rewinds its ring to the lap start whenever
# the client has read everything; the client is a Perl program that forks after
# connect(): the child writes 20 MB and half-closes, the parent reads the echo, so the
# parent's reads of the shared ring go through the fork-shared path. Each round first
# runs three concurrent 3 MB echoes from one Python process. The reader publishes its
# cursor at the lap start and then marks the rewind taken; a writer that read the mark
# before the cursor took the skipped end of the lap for unread data, found its room
# negative and aborted ("invalid ring rewind"): the Perl client then hung, the server's
# write failed (1 round in 4 to 10 on the development machine). 20 rounds: every byte
# back, no abort on either side; a client that forked before its handshake finished
# is plain TCP (fork-pending), by design, and only such clients are.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

ROUNDS=${FORKED_WRITER_ROUNDS:-20}

smc_require_cmd tclsh perl python3
smc_init

cat >"$SMC_TMP/server.tcl" <<'TCL'
lassign $argv port n
set done 0
proc echo {c} {
	global done n
	set d [read $c 65536]
	if {[string length $d]} { puts -nonewline $c $d; flush $c }
	if {[eof $c]} {
		fconfigure $c -blocking 1
		close $c
		incr done
		if {$done >= $n} { set ::forever 1 }
	}
}
proc accept {c a p} {
	fconfigure $c -translation binary -blocking 0 -buffering full
	fileevent $c readable [list echo $c]
}
set l [socket -server accept -myaddr 127.0.0.1 $port]
puts "LISTENING"
flush stdout
vwait forever
close $l
TCL

cat >"$SMC_TMP/client.pl" <<'PERL'
use strict;
use IO::Socket::INET;
my ($port, $file) = @ARGV;
open(my $f, '<:raw', $file) or die "open: $!";
local $/;
my $data = <$f>;
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or die "connect: $!";
my $pid = fork() // die "fork: $!";
if ($pid == 0) {
	my $off = 0;
	while ($off < length $data) {
		my $w = syswrite($s, $data, 1 << 20, $off);
		die "write: $!" unless defined $w;
		$off += $w;
	}
	shutdown($s, 1);
	exit 0;
}
my ($got, $buf) = ('', '');
while (1) {
	my $k = sysread($s, $buf, 1 << 20);
	die "read: $!" unless defined $k;
	last if $k == 0;
	$got .= $buf;
}
waitpid($pid, 0);
exit($got eq $data && $? == 0 ? 0 : 1);
PERL

cat >"$SMC_TMP/three.py" <<'PY'
import socket, sys, threading
port, bad = int(sys.argv[1]), []
def one(i):
    d = bytes([65 + i]) * (3000000 + i)
    s = socket.create_connection(("127.0.0.1", port))
    w = threading.Thread(target=lambda: (s.sendall(d), s.shutdown(socket.SHUT_WR)))
    w.start()
    got = bytearray()
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += b
    w.join()
    s.close()
    if bytes(got) != d:
        bad.append(i)
ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
for t in ts:
    t.start()
for t in ts:
    t.join()
sys.exit(1 if bad else 0)
PY
head -c 20000000 /dev/urandom >"$SMC_TMP/data"

srv=$(smc_stats_dir server)
cli=$(smc_stats_dir clients)
for ((r = 1; r <= ROUNDS; r++)); do
	smc_free_port port
	smc_start_server "server-$r" "$srv" tclsh "$SMC_TMP/server.tcl" "$port" 5
	smc_wait_log "server-$r" LISTENING
	smc_run "$cli" python3 "$SMC_TMP/three.py" "$port" || smc_fail "round $r: the three echoes failed"
	for k in 1 2; do
		smc_run "$cli" perl "$SMC_TMP/client.pl" "$port" "$SMC_TMP/data" ||
			smc_fail "round $r: the forking client $k failed (status $?): $(tail -3 "$(smc_server_log "server-$r")")"
	done
	smc_wait_server_exit "server-$r" 20
	smc_assert_eq "round $r: server exit status" "${SMC_SERVER_RC[server-$r]}" 0
done
smc_require_stats "$srv"
smc_log "server: $(smc_stats_summary "$srv")"
smc_log "clients: $(smc_stats_summary "$cli")"
smc_assert_eq "server aborts" "$(smc_stats "$srv" '.events.aborts')" 0
smc_assert_eq "client aborts" "$(smc_stats "$cli" '.events.aborts')" 0
if [ "$SMC_TEST_EXPECT" = shm ]; then
	# A Perl client whose fork came before its handshake finished (a loaded host) stays
	# TCP by design (fork-pending): its 20 MB are then the only bytes not over shm.
	late=$(smc_stats "$cli" '.fallback["fork-pending"] // 0')
	smc_assert_eq "client fallbacks other than fork-pending" \
		"$(smc_stats "$cli" '.connections.tcp')" "$late"
	smc_assert "at most $((ROUNDS / 4)) fork-pending clients, got $late" "$late" -le $((ROUNDS / 4))
	smc_assert_ge "server's bytes over shm" "$(smc_stats "$srv" '.bytes.shm.received')" \
		$((ROUNDS * (2 * 20000000 + 9000003) - late * 20000000))
	smc_assert_ge "server's ring rewinds" "$(smc_stats "$srv" '.events.shm_rewinds')" 1
fi
smc_pass
