#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# smc_preload.sh: run a program with libsmc_preload.so preloaded, so its TCP connections
# to other preloaded processes are upgraded to SMC. Options mirror smc_run's -d/-r/-t;
# they only set environment variables (see libsmc_preload(7)) and exec the command.
# --setup / --teardown / --status manage the eBPF program that puts the SMC TCP option
# on the wire (bpf/smc_tcpopt.bpf.c); see smc_preload(8).

# `make install` rewrites this line with the installed library path: keep it one line.
SMC_INSTALLED_LIB="/usr/local/lib/smc-preload/libsmc_preload.so"
# The same for the eBPF object that --setup loads.
SMC_INSTALLED_BPF_OBJ="/usr/local/lib/smc-preload/smc_tcpopt.bpf.o"

SMC_PRELOAD_VERSION="0.1.0"
prog=${0##*/}
verbose=0
print_config=0
action=run

usage() {
	cat <<EOF
Usage: $prog [-d] [-r SIZE] [-t SIZE] [-v] [--] COMMAND [ARGS...]
       $prog [-d] [-r SIZE] [-t SIZE] --print-config
       $prog [-v] --setup | --teardown | --status
       $prog -h | --help | --version

Run COMMAND with libsmc_preload.so preloaded: its TCP connections to other
processes that run the library use SMC (shared memory on one host, RDMA across
hosts); connections to anyone else stay plain TCP.

  -d              debug logging (SMC_DEBUG=1)
  -r SIZE         receive buffer (RMB) size per connection (SMC_RCVBUF), e.g. 1m
  -t SIZE         send buffer size (SMC_SNDBUF), e.g. 256k
  -v              say on stderr what is being run
  -h, --help      this help
  --print-config  show every SMC_* variable with its effective value and exit
  --version       show the version and exit
  --setup         (root, once per boot) load, pin and attach the eBPF program
                  that puts the SMC TCP option on the wire; idempotent
  --teardown      (root) detach and unpin it; idempotent
  --status        is it loaded and attached, and does smc-preload.service set
                  it up at boot? exit 0 loaded, 3 not set up, 4 set up partly

SIZE: bytes, or with a k, m or g suffix (1k = 1024). Other settings are read
from SMC_* environment variables: see libsmc_preload(7) or --print-config.
Library: \$SMC_PRELOAD_LIB, else the build tree, else $SMC_INSTALLED_LIB.
eBPF object: \$SMC_BPF_OBJ, else the build tree, else $SMC_INSTALLED_BPF_OBJ;
pinned under \$SMC_BPF_DIR (default /sys/fs/bpf/smc_preload), the map again
under \$SMC_RDV_DIR/bpf (default /run/smc-preload/bpf) for ip netns exec and
containers (bind-mount /run/smc-preload into them).
EOF
}

die_usage() {
	printf '%s: %s\n' "$prog" "$1" >&2
	printf "Try '%s -h' for more information.\n" "$prog" >&2
	exit 2
}

die() {
	printf '%s: %s\n' "$prog" "$1" >&2
	exit 1
}

warn() {
	printf '%s: warning: %s\n' "$prog" "$1" >&2
}

say() {
	[ "$verbose" = 1 ] && printf '%s: %s\n' "$prog" "$*" >&2
	return 0
}

# Sets an SMC_* variable from an option; the library validates the value and reports a
# bad one itself (naming the variable and the accepted range).
set_var() {
	[ -n "$2" ] || die_usage "option $3 needs a non-empty SIZE"
	export "$1=$2"
	say "$1=$2"
}

# ------------------------------------------------------------------ the TCP option (eBPF)
# Names shared with the library (core/negotiate/tcpopt.c) and the program (bpf/smc_tcpopt.bpf.c).
bpf_init_paths() {
	bpf_dir=${SMC_BPF_DIR:-/sys/fs/bpf/smc_preload}
	rdv_dir=${SMC_RDV_DIR:-/run/smc-preload}
	case $bpf_dir in /?*) ;; *) die "SMC_BPF_DIR=$bpf_dir: not an absolute path" ;; esac
	case $rdv_dir in /?*) ;; *) die "SMC_RDV_DIR=$rdv_dir: not an absolute path" ;; esac
	bpf_dir=${bpf_dir%/}
	rdv_dir=${rdv_dir%/}
	prog_pin=$bpf_dir/smc_tcpopt
	map_pin=$bpf_dir/smc_peer
	# the ports whose listeners the library withdrew from the option (core/negotiate/tcpopt.c)
	wd_pin=$bpf_dir/smc_withdrawn
	# the maps' second pins, for processes that do not see this /sys (TCPOPT_RDV_SUBDIR)
	rdv_bpf=$rdv_dir/bpf
	rdv_map_pin=$rdv_bpf/smc_peer
	rdv_wd_pin=$rdv_bpf/smc_withdrawn
}

find_bpf_obj() {
	local here
	if [ -n "${SMC_BPF_OBJ:-}" ]; then
		bpf_obj=$SMC_BPF_OBJ
		[ -f "$bpf_obj" ] || die "SMC_BPF_OBJ=$bpf_obj: no such file"
		return
	fi
	here=$(dirname -- "$0")
	if [ -f "$here/bpf/smc_tcpopt.bpf.o" ]; then
		bpf_obj=$here/bpf/smc_tcpopt.bpf.o
		return
	fi
	bpf_obj=$SMC_INSTALLED_BPF_OBJ
	[ -f "$bpf_obj" ] || die "eBPF object not found: $bpf_obj (set SMC_BPF_OBJ)"
}

fs_type() {
	stat -fc %T -- "$1" 2>/dev/null
}

need_root() {
	[ "$(id -u)" = 0 ] && return 0
	die "$1 needs root: it loads an eBPF program and attaches it to the cgroup-v2 root.
Run it as root once per boot; applications then need no privilege. Without it the
library still works, without the TCP option (same-host rendezvous, else plain TCP)."
}

need_bpftool() {
	command -v bpftool >/dev/null 2>&1 ||
		die "bpftool not found (Debian: apt-get install bpftool)"
}

# Sets cg to the root of the cgroup-v2 hierarchy where it is mounted, or fails.
find_cgroup2() {
	if [ "$(fs_type /sys/fs/cgroup)" = cgroup2fs ]; then
		cg=/sys/fs/cgroup
		return 0
	fi
	cg=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
	[ -n "$cg" ]
}

# Mounts the cgroup-v2 hierarchy when no mount shows it (a system with cgroup v1 only):
# where systemd's hybrid layout has it, else under /run.
mount_cgroup2() {
	local m
	for m in /sys/fs/cgroup/unified /run/smc-preload-cgroup2; do
		if mkdir -p "$m" 2>/dev/null && mount -t cgroup2 cgroup2 "$m" 2>/dev/null; then
			say "mounted cgroup2 at $m"
			cg=$m
			return 0
		fi
	done
	die "no cgroup-v2 hierarchy is mounted and mounting one failed"
}

# The id of the pinned program / map: "" when not pinned (or not readable).
pinned_prog_id() {
	bpftool prog show pinned "$prog_pin" 2>/dev/null | sed -n '1s/^\([0-9][0-9]*\):.*/\1/p'
}

pinned_map_id() { # [PIN]
	bpftool map show pinned "${1:-$map_pin}" 2>/dev/null |
		sed -n '1s/^\([0-9][0-9]*\):.*/\1/p'
}

# The ids of the maps the pinned program uses, space separated.
prog_map_ids() {
	bpftool prog show pinned "$prog_pin" 2>/dev/null |
		sed -n 's/.*map_ids \([0-9,]*\).*/\1/p' | tr ',' ' '
}

# Is program id $1 attached to cgroup $cg for sock_ops? (bpftool names the attach type
# "sock_ops" or "cgroup_sock_ops" depending on its version.)
prog_attached() {
	bpftool cgroup show "$cg" 2>/dev/null |
		awk -v id="$1" '$1 == id && $2 ~ /sock_ops$/ { found = 1 } END { exit !found }'
}

# Do the pinned program and map belong together? (A half-finished earlier run may have
# left only one of them, or a map of another load under the name.)
pins_consistent() {
	local pid mid
	pid=$(pinned_prog_id)
	mid=$(pinned_map_id)
	[ -n "$pid" ] && [ -n "$mid" ] || return 1
	case " $(prog_map_ids) " in *" $mid "*) return 0 ;; esac
	return 1
}

# Every directory from the bpf file system's root down to $bpf_dir must be searchable by
# others, or unprivileged applications cannot open the map (systemd mounts /sys/fs/bpf
# with mode 0700). Only the search bit is added: nobody can list the directories.
open_bpf_path() {
	local d=$bpf_dir perms
	while [ "$d" != / ] && [ "$(fs_type "$d")" = bpf_fs ]; do
		perms=$(stat -c %A -- "$d")
		case ${perms:9:1} in
		x | t) ;;
		*)
			chmod o+x -- "$d" || die "cannot make $d searchable for unprivileged users"
			say "made $d searchable (o+x) so unprivileged applications reach the map" ;;
		esac
		d=$(dirname -- "$d")
	done
}

# The sock_ops programs attached to $cg that use map id $1 (a program whose pin was
# removed by hand is still attached, and still ours: it uses our map).
progs_using_map() {
	local id
	for id in $(bpftool cgroup show "$cg" 2>/dev/null | awk '$2 ~ /sock_ops$/ { print $1 }'); do
		case " $(bpftool prog show id "$id" 2>/dev/null |
			sed -n 's/.*map_ids \([0-9,]*\).*/\1/p' | tr ',' ' ') " in
		*" $1 "*) echo "$id" ;;
		esac
	done
}

# The map's second place: a bpf file system of its own mounted inside the rendezvous
# directory, holding only the map (core/negotiate/tcpopt.c looks there when $map_pin is not
# visible). `ip netns exec` mounts a fresh sysfs over /sys and a container brings its
# own, so neither sees $bpf_dir; both keep the rendezvous directory, the container
# through the one bind mount that the rendezvous between namespaces needs anyway. The
# mount is root's with mode 0755 (nobody else can pin, create or remove anything in
# it), nosuid, nodev and noexec. A failure here leaves the host's setup working, so it is
# a warning: only processes without the host's /sys then go without the option.
rdv_map_expose() { # rdv_map_expose MAP-ID
	local mid=$1
	if [ "$(fs_type "$rdv_bpf")" != bpf_fs ]; then
		# the rendezvous directory is writable by all: an entry of that name that is
		# not root's own directory is someone else's, and is left alone
		if [ -L "$rdv_bpf" ] || { [ -e "$rdv_bpf" ] && [ ! -d "$rdv_bpf" ]; }; then
			warn "$rdv_bpf exists and is not a directory: the map is not exposed there"
			return 0
		fi
		mkdir -p -- "$rdv_bpf" || { warn "cannot create $rdv_bpf"; return 0; }
		if [ -L "$rdv_bpf" ] || [ "$(stat -c %u -- "$rdv_bpf")" != 0 ]; then
			warn "$rdv_bpf is not root's: the map is not exposed there"
			return 0
		fi
		if ! { chmod 0755 -- "$rdv_bpf" &&
			mount -t bpf -o mode=0755,nosuid,nodev,noexec bpf "$rdv_bpf"; }; then
			warn "cannot mount a bpf file system at $rdv_bpf: processes that do not see $bpf_dir (ip netns exec, containers) get no TCP option"
			return 0
		fi
		say "mounted a bpf file system at $rdv_bpf"
	fi
	if [ "$(pinned_map_id "$rdv_map_pin")" != "$mid" ]; then
		rm -f -- "$rdv_map_pin"
		bpftool map pin id "$mid" "$rdv_map_pin" || {
			warn "cannot pin map $mid at $rdv_map_pin"
			return 0
		}
		say "pinned map $mid at $rdv_map_pin too"
	fi
	chmod 0666 -- "$rdv_map_pin" || warn "cannot set the mode of $rdv_map_pin"
	mid=$(pinned_map_id "$wd_pin")
	if [ -n "$mid" ] && [ "$(pinned_map_id "$rdv_wd_pin")" != "$mid" ]; then
		rm -f -- "$rdv_wd_pin"
		bpftool map pin id "$mid" "$rdv_wd_pin" ||
			warn "cannot pin map $mid at $rdv_wd_pin"
	fi
	[ ! -e "$rdv_wd_pin" ] || chmod 0666 -- "$rdv_wd_pin" ||
		warn "cannot set the mode of $rdv_wd_pin"
	return 0
}

# Removes the second pin, then the mount. The pin first: a mount namespace copied while
# the mount was there (a process under `ip netns exec`, a container) keeps its copy of
# the mount after the umount here, but the file system is the same, so the unlinked pin
# is gone there too and nobody opts sockets in to a map whose program is detached.
rdv_map_remove() {
	[ "$(fs_type "$rdv_bpf")" = bpf_fs ] || return 0
	rm -f -- "$rdv_map_pin" "$rdv_wd_pin" || die "cannot remove $rdv_map_pin"
	umount -- "$rdv_bpf" 2>/dev/null || umount -l -- "$rdv_bpf" ||
		die "cannot unmount $rdv_bpf"
	rmdir -- "$rdv_bpf" 2>/dev/null
	say "unmounted $rdv_bpf"
	return 0
}

# Detaches our program (the pinned one, and any attached program using the pinned map)
# and removes our two pins, and the map's second pin with its mount; anything else in the
# directory stays, and so does the directory unless it is empty.
bpf_unpin_all() {
	local pid mid id ids=""
	pid=$(pinned_prog_id)
	mid=$(pinned_map_id)
	if find_cgroup2; then
		[ -n "$pid" ] && prog_attached "$pid" && ids=$pid
		[ -n "$mid" ] && ids="$ids $(progs_using_map "$mid")"
	fi
	# shellcheck disable=SC2086 # ids: numbers, split on purpose
	for id in $(printf '%s\n' $ids | sort -u); do
		bpftool cgroup detach "$cg" sock_ops id "$id" ||
			die "cannot detach program $id from $cg"
		say "detached program $id from $cg"
	done
	rdv_map_remove
	rm -f -- "$prog_pin" "$map_pin" "$wd_pin" || die "cannot remove the pins under $bpf_dir"
	rmdir -- "$bpf_dir" 2>/dev/null
	return 0
}

# Removes the rendezvous sockets of clients that exited in the middle of a negotiation
# (a live one is unlinked within seconds: the client gives up after 10 handshake
# timeouts). Another network namespace's sockets are not in our /proc/net/unix: age
# is what tells a stale one.
rdv_sweep() {
	[ -d "$rdv_dir" ] && [ ! -L "$rdv_dir" ] || return 0
	find "$rdv_dir" -maxdepth 1 -type s -name 'c-*' -mmin +10 -delete 2>/dev/null
	return 0
}

# One --setup / --teardown at a time.
bpf_lock() {
	exec 9>>/run/smc_preload.lock || die "cannot open /run/smc_preload.lock"
	flock 9 || die "cannot lock /run/smc_preload.lock"
}

do_setup() {
	local pid
	need_root --setup
	need_bpftool
	bpf_init_paths
	find_bpf_obj
	bpf_lock
	if [ "$(fs_type /sys/fs/bpf)" != bpf_fs ]; then
		mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf ||
			die "cannot mount the bpf file system at /sys/fs/bpf"
		say "mounted the bpf file system at /sys/fs/bpf"
	fi
	if ! mkdir -p -- "$bpf_dir"; then
		case ${bpf_dir#/sys/fs/bpf} in
		*.*) die "cannot create $bpf_dir: names on the bpf file system may not contain a dot" ;;
		esac
		die "cannot create $bpf_dir"
	fi
	[ "$(fs_type "$bpf_dir")" = bpf_fs ] || die "$bpf_dir is not on a bpf file system"
	find_cgroup2 || mount_cgroup2

	if [ -e "$prog_pin" ] || [ -e "$map_pin" ]; then
		if pins_consistent; then
			say "already loaded: $prog_pin"
		else
			say "removing a partial setup under $bpf_dir"
			bpf_unpin_all
			mkdir -p -- "$bpf_dir" || die "cannot create $bpf_dir"
		fi
	fi
	if [ ! -e "$prog_pin" ]; then
		bpftool prog load "$bpf_obj" "$prog_pin" type sockops pinmaps "$bpf_dir" ||
			die "cannot load $bpf_obj (needs a kernel >= 5.10 with BPF sock_ops header options)"
		say "loaded $bpf_obj, pinned under $bpf_dir"
	fi
	pid=$(pinned_prog_id)
	[ -n "$pid" ] || die "the program pinned at $prog_pin cannot be read back"
	if prog_attached "$pid"; then
		say "program $pid already attached to $cg"
	else
		# multi: other programs attached to the root (and below it) keep running
		# pins without an attached program would make every preloaded socket wait
		# for an option that never comes: no pins then (the library falls back to
		# the rendezvous, or TCP)
		if ! bpftool cgroup attach "$cg" sock_ops id "$pid" multi; then
			bpf_unpin_all
			die "cannot attach program $pid to $cg (pins under $bpf_dir removed)"
		fi
		say "attached program $pid to $cg (sock_ops, multi)"
	fi
	chmod 0755 -- "$bpf_dir" && chmod 0600 -- "$prog_pin" && chmod 0666 -- "$map_pin" ||
		die "cannot set the modes under $bpf_dir"
	# a program of an older setup has no such map: its listeners cannot be withdrawn
	[ ! -e "$wd_pin" ] || chmod 0666 -- "$wd_pin" || die "cannot set the mode of $wd_pin"
	open_bpf_path
	if [ -L "$rdv_dir" ] || { [ -e "$rdv_dir" ] && [ ! -d "$rdv_dir" ]; }; then
		die "$rdv_dir exists and is not a directory"
	fi
	# 1733: anyone may create a rendezvous socket, nobody but its owner remove it
	# (sticky), and nobody but root list the names of the negotiations in progress
	mkdir -p -- "$rdv_dir" && chmod 1733 -- "$rdv_dir" || die "cannot create $rdv_dir"
	rdv_sweep
	rdv_map_expose "$(pinned_map_id)"
	printf '%s: SMC TCP option set up: program %s attached to %s, map %s\n' \
		"$prog" "$prog_pin" "$cg" "$map_pin"
}

do_teardown() {
	need_root --teardown
	need_bpftool
	bpf_init_paths
	bpf_lock
	if [ ! -e "$prog_pin" ] && [ ! -e "$map_pin" ]; then
		rdv_map_remove
		printf '%s: SMC TCP option: nothing set up under %s\n' "$prog" "$bpf_dir"
		return 0
	fi
	bpf_unpin_all
	rdv_sweep
	printf '%s: SMC TCP option removed from %s\n' "$prog" "$bpf_dir"
}

map_access() { # [PIN]
	local mode unpriv
	mode=$(stat -c %a -- "${1:-$map_pin}" 2>/dev/null)
	unpriv=$(cat /proc/sys/kernel/unprivileged_bpf_disabled 2>/dev/null)
	printf 'mode %s, kernel.unprivileged_bpf_disabled=%s' "${mode:-?}" "${unpriv:-?}"
}

# The lines of --status about the map's second pin and the one a library started here
# would open (core/negotiate/tcpopt.c: $map_pin, else $rdv_map_pin).
status_map_places() {
	local id
	if [ -e "$rdv_map_pin" ]; then
		id=$(pinned_map_id "$rdv_map_pin")
		printf '  map        %s (for ip netns exec and containers: %s%s)\n' "$rdv_map_pin" \
			"${id:+id $id, }" "$(map_access "$rdv_map_pin")"
	else
		printf '  map        %s missing (processes that do not see %s get no TCP option)\n' \
			"$rdv_map_pin" "$bpf_dir"
	fi
	if [ -e "$map_pin" ]; then
		printf '  used here  %s\n' "$map_pin"
	elif [ -e "$rdv_map_pin" ]; then
		printf '  used here  %s\n' "$rdv_map_pin"
	else
		printf '  used here  none\n'
	fi
}

# --status where only the map's second pin is visible: a network namespace entered with
# `ip netns exec`, a container. The attachment is seen from where --setup ran (this
# /sys has no cgroup-v2 root of the host's); here, as root, only that a loaded program
# uses the map.
status_rdv_only() {
	local mid id found=0
	if [ "$(id -u)" = 0 ] && command -v bpftool >/dev/null 2>&1; then
		mid=$(pinned_map_id "$rdv_map_pin")
		for id in $(bpftool prog show 2>/dev/null | sed -n 's/^\([0-9][0-9]*\): sock_ops .*/\1/p'); do
			case " $(bpftool prog show id "$id" 2>/dev/null |
				sed -n 's/.*map_ids \([0-9,]*\).*/\1/p' | tr ',' ' ') " in
			*" $mid "*) found=1 ;;
			esac
		done
		if [ "$found" = 0 ]; then
			printf 'SMC TCP option: set up partly: %s (map %s) is used by no loaded program; run --setup or --teardown where it was set up\n' \
				"$rdv_map_pin" "${mid:-unreadable}"
			exit 4
		fi
	fi
	printf 'SMC TCP option: loaded (%s is not visible here; the map is reached through the rendezvous directory; the attachment is checked where --setup ran)\n' "$bpf_dir"
	status_map_places
	exit 0
}

# The last line of --status: does the systemd unit repeat --setup at every boot?
# (systemctl reads the unit files, so this works without a running systemd too;
# SMC_UNIT_ROOT asks about the system installed under another root, an image.)
status_unit() {
	local unit=smc-preload.service state
	if ! command -v systemctl >/dev/null 2>&1; then
		printf '  boot       no systemctl: nothing runs --setup at boot\n'
		return 0
	fi
	state=$(systemctl ${SMC_UNIT_ROOT:+--root="$SMC_UNIT_ROOT"} is-enabled "$unit" 2>/dev/null)
	case $state in
	enabled | enabled-runtime)
		printf '  boot       %s is %s: --setup runs at every boot\n' "$unit" "$state" ;;
	"" | not-found)
		printf '  boot       %s is not installed: nothing runs --setup at boot\n' "$unit" ;;
	*)
		printf '  boot       %s is %s: nothing runs --setup at boot (systemctl enable %s)\n' \
			"$unit" "$state" "$unit" ;;
	esac
}

# Exit 0: loaded and attached; 3: nothing set up; 4: set up partly, or not attached.
# The state of the boot unit follows, whatever the exit status.
do_status() {
	local rc
	(status_option)
	rc=$?
	status_unit
	exit "$rc"
}

status_option() {
	local pid mid
	bpf_init_paths
	if [ ! -e "$prog_pin" ] && [ ! -e "$map_pin" ]; then
		[ -e "$rdv_map_pin" ] && status_rdv_only
		printf 'SMC TCP option: not loaded (nothing pinned under %s or %s)\n' "$bpf_dir" "$rdv_bpf"
		exit 3
	fi
	if [ "$(id -u)" != 0 ] || ! command -v bpftool >/dev/null 2>&1; then
		# Without root (or bpftool) only the pins can be seen, not the attachment.
		if [ -e "$prog_pin" ] && [ -e "$map_pin" ]; then
			printf 'SMC TCP option: loaded (pinned under %s; the attachment is only checked as root with bpftool)\n' "$bpf_dir"
			printf '  map        %s (%s)\n' "$map_pin" "$(map_access)"
			status_map_places
			exit 0
		fi
		printf 'SMC TCP option: set up partly under %s; run --setup or --teardown as root\n' "$bpf_dir"
		exit 4
	fi
	pid=$(pinned_prog_id)
	mid=$(pinned_map_id)
	if ! pins_consistent; then
		printf 'SMC TCP option: set up partly under %s (program %s, map %s); run --setup or --teardown\n' \
			"$bpf_dir" "${pid:-missing}" "${mid:-missing}"
		exit 4
	fi
	if ! find_cgroup2 || ! prog_attached "$pid"; then
		printf 'SMC TCP option: loaded under %s but not attached to the cgroup-v2 root; run --setup\n' "$bpf_dir"
		exit 4
	fi
	printf 'SMC TCP option: loaded and attached\n'
	printf '  program    %s (id %s), sock_ops at %s\n' "$prog_pin" "$pid" "$cg"
	printf '  map        %s (id %s, %s)\n' "$map_pin" "$mid" "$(map_access)"
	status_map_places
	if [ -d "$rdv_dir" ]; then
		printf '  rendezvous %s (mode %s)\n' "$rdv_dir" "$(stat -c %a -- "$rdv_dir")"
	else
		printf '  rendezvous %s missing\n' "$rdv_dir"
	fi
	exit 0
}

# ------------------------------------------------------------------ options
while [ $# -gt 0 ]; do
	case $1 in
	--) shift; break ;;
	--help) usage; exit 0 ;;
	--version) printf 'smc-preload %s\n' "$SMC_PRELOAD_VERSION"; exit 0 ;;
	--print-config) print_config=1; shift ;;
	--setup) action=setup; shift ;;
	--teardown) action=teardown; shift ;;
	--status) action=status; shift ;;
	--*) die_usage "unknown option: $1" ;;
	-r | -t)
		[ $# -ge 2 ] || die_usage "option $1 needs a SIZE"
		if [ "$1" = -r ]; then set_var SMC_RCVBUF "$2" -r; else set_var SMC_SNDBUF "$2" -t; fi
		shift 2 ;;
	-r?*) set_var SMC_RCVBUF "${1#-r}" -r; shift ;;
	-t?*) set_var SMC_SNDBUF "${1#-t}" -t; shift ;;
	-d | -v | -h | -[dvh]?*)
		# A single flag, or a cluster such as -dv or -dr1m: take the first letter and
		# put the rest back as its own option.
		flag=${1:1:1}
		rest=${1:2}
		shift
		[ -n "$rest" ] && set -- "-$rest" "$@"
		case $flag in
		d) export SMC_DEBUG=1; say "SMC_DEBUG=1" ;;
		v) verbose=1 ;;
		h) usage; exit 0 ;;
		esac ;;
	-?*) die_usage "unknown option: $1" ;;
	*) break ;;
	esac
done

if [ "$action" != run ]; then
	[ $# -eq 0 ] || die_usage "--$action takes no COMMAND"
	[ "$print_config" = 0 ] || die_usage "--$action and --print-config exclude each other"
	"do_$action"
	exit 0
fi

# ------------------------------------------------------------------ the library
find_library() {
	local here
	if [ -n "${SMC_PRELOAD_LIB:-}" ]; then
		lib=$SMC_PRELOAD_LIB
		[ -f "$lib" ] || die "SMC_PRELOAD_LIB=$lib: no such file"
		return
	fi
	here=$(dirname -- "$0")
	if [ -f "$here/.libs/libsmc_preload.so" ]; then
		lib=$here/.libs/libsmc_preload.so
		return
	fi
	lib=$SMC_INSTALLED_LIB
	[ -f "$lib" ] || die "library not found: $lib (set SMC_PRELOAD_LIB)"
}

find_library
# The dynamic loader resolves LD_PRELOAD entries from the program's working directory,
# which the program may change: always hand it an absolute path.
case $lib in
/*) ;;
*) lib=$PWD/$lib ;;
esac
case $lib in
*[[:space:]:]*) die "library path contains a blank or ':' and cannot be preloaded: $lib" ;;
esac
say "library $lib"

if [ "$print_config" = 1 ]; then
	[ $# -eq 0 ] || die_usage "--print-config takes no COMMAND"
	# The library's constructor prints its table on stderr when SMC_PRINT_CONFIG=1, after
	# the report of any bad value, and /bin/true runs on. The table's lines (NAME=...)
	# go to our stdout, everything else stays on stderr.
	all=$(env SMC_PRINT_CONFIG=1 LD_PRELOAD="$lib" /bin/true 2>&1) ||
		die "the library failed to print its configuration"
	out=$(printf '%s\n' "$all" | grep '^SMC_[A-Z0-9_]*=')
	rest=$(printf '%s\n' "$all" | grep -v '^SMC_[A-Z0-9_]*=')
	[ -z "$rest" ] || printf '%s\n' "$rest" >&2
	[ -n "$out" ] || die "$lib printed no configuration (not libsmc_preload.so?)"
	printf '%s\n' "$out"
	exit 0
fi

[ $# -gt 0 ] || die_usage "no COMMAND given"

# A stray SMC_PRINT_CONFIG would make every preloaded program print the table on stderr.
unset SMC_PRINT_CONFIG

# Keep whatever the caller already preloads; add the library once, at the end.
case " ${LD_PRELOAD:-} " in
*" $lib "*) ;;
*) LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD }$lib ;;
esac
export LD_PRELOAD
say "LD_PRELOAD=$LD_PRELOAD"
if [ "$verbose" = 1 ]; then
	say "exec $(printf '%q ' "$@")"
fi
exec "$@"
