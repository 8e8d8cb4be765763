#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The boot unit and the tmpfiles.d entry as `make install` puts them (DESTDIR), without
# a running systemd:
#  - `systemd-analyze verify` passes on the installed smc-preload.service (inside a mount
#    namespace whose prefix has the installed tree overlaid, so its ExecStart binary and
#    its man page exist), and the unit is ordered after the bpffs and cgroup mounts;
#  - `systemd-tmpfiles --create` with the installed entry makes the rendezvous directory
#    root's with mode 1733;
#  - the unit's ExecStart line, run as written, sets the option up (twice: a restart),
#    and the installed wrapper's --status then says loaded and attached (exit 0); its
#    ExecStop line removes it and --status says not loaded (exit 3);
#  - --status reports the unit: disabled, then enabled after `systemctl --root enable`
#    (the wants link is there), then disabled again.
# The ExecStart/ExecStop lines run with a pin directory and a rendezvous directory of
# their own (SMC_BPF_DIR, SMC_RDV_DIR), so a setup of the host is left alone.
# Skips (77) when not root (mount namespace, eBPF), without systemd-analyze, overlayfs
# or bpf(2).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

[ "$(id -u)" = 0 ] || smc_skip "needs root (mount namespace, eBPF)"
smc_require_cmd systemd-analyze systemd-tmpfiles systemctl unshare make
command -v bpftool >/dev/null 2>&1 || smc_fail "bpftool is not installed (apt-get install bpftool)"
smc_init
bpftool prog show >/dev/null 2>&1 || smc_skip "bpf(2) is not permitted here"

dest=$SMC_TMP/dest
make -s -C "$top_builddir" install DESTDIR="$dest" >"$SMC_TMP/install.log" 2>&1 ||
	smc_fail "make install DESTDIR=$dest failed: $(tail -n 20 "$SMC_TMP/install.log")"
prefix=$(sed -n 's/^prefix = //p' "$top_builddir/Makefile")
unit=$(cd "$dest" && find . -path '*/systemd/system/smc-preload.service' | sed 's/^\.//')
conf=$(cd "$dest" && find . -path '*/tmpfiles.d/smc-preload.conf' | sed 's/^\.//')
[ -n "$unit" ] || smc_fail "make install put no smc-preload.service under $dest"
[ -n "$conf" ] || smc_fail "make install put no tmpfiles.d/smc-preload.conf under $dest"
smc_log "installed $unit and $conf (prefix $prefix)"

# in_root CMD...: CMD in a mount namespace where $prefix shows the installed tree over
# the real one, as after `make install` without DESTDIR.
in_root() {
	unshare --mount --propagation private -- sh -c '
		mount -t overlay overlay -o "lowerdir=$1$2:$2" "$2" || exit 99
		shift 2
		exec "$@"' sh "$dest" "$prefix" "$@"
}
in_root true || smc_skip "cannot overlay $prefix in a mount namespace (overlayfs?)"

# ------------------------------------------------------------------ the unit file
man_opt=--man=yes
command -v man >/dev/null 2>&1 || { man_opt=--man=no; smc_log "no man(1): Documentation= not checked"; }
in_root env MANPATH="$prefix/share/man" systemd-analyze verify "$man_opt" "$dest$unit" \
	>"$SMC_TMP/verify.log" 2>&1 || smc_fail "systemd-analyze verify: $(cat "$SMC_TMP/verify.log")"
# systemd-analyze also loads the units installed on this machine: a warning about another
# package's unit (Debian's unicorn.service has an Environment= line it ignores) is not ours
grep -Ev '^/[^:]+:[0-9]+: ' "$SMC_TMP/verify.log" >"$SMC_TMP/verify.ours" || true
grep -E '^/[^:]+:[0-9]+: ' "$SMC_TMP/verify.log" | grep -F "/$(basename -- "$unit"):" \
	>>"$SMC_TMP/verify.ours" || true
[ -s "$SMC_TMP/verify.ours" ] && smc_fail "systemd-analyze verify warns: $(cat "$SMC_TMP/verify.ours")"
for dep in sys-fs-bpf.mount sys-fs-cgroup.mount; do
	grep -Eq "^After=.*\b$dep\b" "$dest$unit" || smc_fail "the unit is not ordered after $dep"
done
start=$(sed -n 's/^ExecStart=//p' "$dest$unit")
stop=$(sed -n 's/^ExecStop=//p' "$dest$unit")
smc_assert "one ExecStart line ($start)" "$(grep -c '^ExecStart=' "$dest$unit")" = 1
smc_assert "one ExecStop line ($stop)" "$(grep -c '^ExecStop=' "$dest$unit")" = 1
wrapper=${start%% *}
smc_assert_eq "ExecStart's program" "$wrapper" "$prefix/bin/smc_preload.sh"

# ------------------------------------------------------------------ tmpfiles.d
systemd-tmpfiles --create --root="$SMC_TMP/root" "$dest$conf" ||
	smc_fail "systemd-tmpfiles --create $conf failed"
smc_assert_eq "rendezvous directory made by tmpfiles.d (mode owner)" \
	"$(stat -c '%a %U' "$SMC_TMP/root/run/smc-preload")" "1733 root"

# ------------------------------------------------------------------ ExecStart / ExecStop
export SMC_BPF_DIR=/sys/fs/bpf/smc_preload_unit_$$
export SMC_RDV_DIR=$SMC_TMP/rdv
unset SMC_BPF_OBJ SMC_PRELOAD_LIB
unit_cleanup() {
	local rc=$?
	in_root "$wrapper" --teardown >/dev/null 2>&1
	(exit "$rc")
	_smc_cleanup
}
trap unit_cleanup EXIT

# status WANT-EXIT [ENV...]: the installed wrapper's --status, its exit status checked.
status() {
	local want=$1 rc
	shift
	in_root env "$@" "$wrapper" --status >"$SMC_TMP/status.out" 2>&1
	rc=$?
	cat "$SMC_TMP/status.out"
	smc_assert_eq "--status exit status" "$rc" "$want"
}

for round in start restart; do
	# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
	in_root $start >"$SMC_TMP/$round.log" 2>&1 ||
		smc_fail "ExecStart ($round) failed: $(cat "$SMC_TMP/$round.log")"
	status 0
	grep -q '^SMC TCP option: loaded and attached' "$SMC_TMP/status.out" ||
		smc_fail "--status after ExecStart ($round) does not say loaded and attached"
done
[ -d "$SMC_RDV_DIR" ] || smc_fail "ExecStart made no rendezvous directory $SMC_RDV_DIR"

# the unit as --status reports it, in the installed tree's root
status 0 SMC_UNIT_ROOT="$dest"
grep -q '^  boot  *smc-preload.service is disabled' "$SMC_TMP/status.out" ||
	smc_fail "--status does not report the unit disabled"
systemctl --root="$dest" enable smc-preload.service >"$SMC_TMP/enable.log" 2>&1 ||
	smc_fail "systemctl --root enable failed: $(cat "$SMC_TMP/enable.log")"
[ -L "$dest/etc/systemd/system/multi-user.target.wants/smc-preload.service" ] ||
	smc_fail "enable made no multi-user.target.wants link"
status 0 SMC_UNIT_ROOT="$dest"
grep -q '^  boot  *smc-preload.service is enabled: --setup runs at every boot' \
	"$SMC_TMP/status.out" || smc_fail "--status does not report the unit enabled"
systemctl --root="$dest" disable smc-preload.service >/dev/null 2>&1 ||
	smc_fail "systemctl --root disable failed"

# shellcheck disable=SC2086
in_root $stop >"$SMC_TMP/stop.log" 2>&1 || smc_fail "ExecStop failed: $(cat "$SMC_TMP/stop.log")"
status 3 SMC_UNIT_ROOT="$dest"
grep -q '^SMC TCP option: not loaded' "$SMC_TMP/status.out" ||
	smc_fail "--status after ExecStop does not say not loaded"
grep -q '^  boot  *smc-preload.service is disabled' "$SMC_TMP/status.out" ||
	smc_fail "--status (not loaded) does not report the unit"
[ -e "$SMC_BPF_DIR" ] && smc_fail "ExecStop left $SMC_BPF_DIR"
smc_pass
