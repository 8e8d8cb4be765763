#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The Debian packages, built and used as a user gets them:
#  - `dpkg-buildpackage -us -uc -b` in an unpacked `make distdir` (so the dist is complete
#    enough to build from) makes smc-preload and smc-preload-tools; lintian reports no
#    error and no warning (debian/*.lintian-overrides explain each override);
#  - in a clean Debian root made by mmdebstrap (debootstrap when mmdebstrap is missing)
#    of this host's release, minbase plus the packages' dependencies and redis, kept as
#    a tarball in the build tree and unpacked afresh for each run: dpkg -i installs
#    both; the unit is enabled (its multi-user.target.wants link); the wrapper finds the
#    installed library by itself; redis-server and redis-benchmark under the installed
#    wrapper move their payload over shared memory (SMC_STATS_FILE: shm bytes > 0 in
#    both, no fallback) and the installed smcpstat lists a live connection in mode shm;
#  - dpkg --purge removes every file `dpkg -L` listed, and the root's file list is then
#    the one before the installation (nothing left behind, not even the unit's link).
# Knobs: DEBIAN_PKG_MIRROR (default http://deb.debian.org/debian); the root's tarball is
# $top_builddir/tests/debian-root-RELEASE-HASH.tar (`make clean` removes it).
# Skips (77) when not root, without the Debian tools (debhelper, lintian, mmdebstrap or
# debootstrap), on a host that is not Debian, or when the archive cannot be reached to
# make the root.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname -- "$0")/lib.sh"

: "${DEBIAN_PKG_MIRROR:=http://deb.debian.org/debian}"
[ "$(id -u)" = 0 ] || smc_skip "needs root (chroot, mounts)"
smc_require_cmd dpkg-buildpackage dh lintian unshare chroot make tar
command -v mmdebstrap >/dev/null 2>&1 || command -v debootstrap >/dev/null 2>&1 ||
	smc_skip "neither mmdebstrap nor debootstrap is installed"
release=$(. /etc/os-release 2>/dev/null && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}")
[ -n "$release" ] || smc_skip "not a Debian host (the packages are built for this host's release)"
# building and bootstrapping take minutes on 2 cores
[ "$SMC_TEST_TIMEOUT" -ge 900 ] || SMC_TEST_TIMEOUT=900
smc_init

# archive_reachable: can the root be made? (asked before the build when no root of this
# release is kept, so that a machine without the archive skips at once)
archive_reachable() {
	local host=${DEBIAN_PKG_MIRROR#*://}
	host=${host%%/*}
	timeout 20 bash -c ': <>"/dev/tcp/$1/80"' sh "$host" 2>/dev/null ||
		smc_skip "cannot reach $host to make a $release root (no network to the archive)"
}
compgen -G "$top_builddir/tests/debian-root-$release-*.tar" >/dev/null || archive_reachable

# ------------------------------------------------------------------ build
version=$(sed -n 's/^VERSION = //p' "$top_builddir/Makefile")
src=$SMC_TMP/build/smc-preload-$version
t0=$SECONDS
mkdir -p "$SMC_TMP/build" && make -s -C "$top_builddir" distdir distdir="$src" >"$SMC_TMP/distdir.log" 2>&1 ||
	smc_fail "make distdir failed: $(tail -n 20 "$SMC_TMP/distdir.log")"
(cd "$src" && DEB_BUILD_OPTIONS=parallel=2 dpkg-buildpackage -us -uc -b) \
	>"$SMC_TMP/dpkg-buildpackage.log" 2>&1 ||
	smc_fail "dpkg-buildpackage failed: $(tail -n 40 "$SMC_TMP/dpkg-buildpackage.log")"
debs=()
for p in smc-preload smc-preload-tools; do
	f=$(ls "$SMC_TMP/build/${p}_${version}_"*.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || smc_fail "dpkg-buildpackage made no $p package"
	debs+=("$f")
done
smc_log "built ${debs[*]##*/} in $((SECONDS - t0)) s"

t0=$SECONDS
lintian --fail-on error,warning "$SMC_TMP/build/"*.changes >"$SMC_TMP/lintian.log" 2>&1
rc=$?
grep -v '^running with root privileges' "$SMC_TMP/lintian.log"
[ "$rc" = 0 ] || smc_fail "lintian: errors or warnings (exit $rc)"
grep -Eq '^[EW]: ' "$SMC_TMP/lintian.log" && smc_fail "lintian reports errors or warnings"
smc_log "lintian clean in $((SECONDS - t0)) s"

# ------------------------------------------------------------------ the root
# The packages' dependencies (first alternative, no version) and what the test runs.
deps=$(for f in "${debs[@]}"; do dpkg-deb -f "$f" Depends; echo ,; done |
	tr ',' '\n' | sed 's/|.*//; s/(.*//; s/:any//; s/[[:space:]]//g' | grep . |
	grep -Ev '^smc-preload' | sort -u | tr '\n' ,)
include=${deps}redis-server,redis-tools
tarball=$top_builddir/tests/debian-root-$release-$(printf '%s %s' "$include" "$DEBIAN_PKG_MIRROR" |
	sha256sum | cut -c1-12).tar
if [ ! -s "$tarball" ]; then
	archive_reachable
	t0=$SECONDS
	mkdir -p "$top_builddir/tests"
	if command -v mmdebstrap >/dev/null 2>&1; then
		mmdebstrap --variant=minbase --format=tar --include="$include" "$release" "$tarball.part" \
			"$DEBIAN_PKG_MIRROR" >"$SMC_TMP/bootstrap.log" 2>&1
	else
		mkdir -p "$SMC_TMP/boot" &&
			debootstrap --variant=minbase --include="${include%,}" "$release" \
				"$SMC_TMP/boot" "$DEBIAN_PKG_MIRROR" >"$SMC_TMP/bootstrap.log" 2>&1 &&
			tar -C "$SMC_TMP/boot" -cf "$tarball.part" . && rm -rf "$SMC_TMP/boot"
	fi || smc_fail "making the $release root failed: $(tail -n 20 "$SMC_TMP/bootstrap.log")"
	mv "$tarball.part" "$tarball"
	smc_log "made the $release root ($include) in $((SECONDS - t0)) s: $tarball"
else
	smc_log "reusing the $release root $tarball"
fi
root=$SMC_TMP/root
mkdir -p "$root" && tar -C "$root" -xf "$tarball" || smc_fail "cannot unpack $tarball"

# in_chroot CMD...: CMD in the root, in a mount namespace of its own with /proc and /dev
# (not /sys: the host's eBPF setup stays out of the test, which needs none), with the
# environment of a login (none of make check's SMC_* variables).
in_chroot() {
	unshare --mount --propagation private -- sh -c '
		mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" || exit 99
		r=$1
		shift
		exec chroot "$r" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
			"$@"' sh "$root" "$@"
}

# The root's files, but those that change without any package (logs, dpkg's database,
# caches, /tmp, the mount points).
snapshot() {
	(cd "$root" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./sys -o -path ./tmp \
		-o -path ./run -o -path ./var/log -o -path ./var/lib/dpkg -o -path ./var/cache \) \
		-prune -o -print) | sort
}
snapshot >"$SMC_TMP/files-before"

# ------------------------------------------------------------------ install
cp "${debs[@]}" "$root/tmp/" || smc_hard_error "cannot copy the packages into the root"
in_chroot sh -c 'dpkg -i /tmp/*.deb' >"$SMC_TMP/install.log" 2>&1 ||
	smc_fail "dpkg -i failed: $(cat "$SMC_TMP/install.log")"
in_chroot dpkg -L smc-preload smc-preload-tools >"$SMC_TMP/dpkg-L" ||
	smc_fail "dpkg -L failed"
listed=0
while read -r f; do
	[ -e "$root$f" ] || [ -L "$root$f" ] || smc_fail "$f listed by dpkg -L is not installed"
	listed=$((listed + 1))
done <"$SMC_TMP/dpkg-L"
smc_log "installed: $listed paths"
[ -L "$root/etc/systemd/system/multi-user.target.wants/smc-preload.service" ] ||
	smc_fail "the unit is not enabled after installation (no multi-user.target.wants link)"
in_chroot smc_preload.sh --print-config >"$SMC_TMP/config.out" 2>&1 ||
	smc_fail "the installed wrapper does not find the installed library: $(cat "$SMC_TMP/config.out")"

# ------------------------------------------------------------------ redis in the root
smc_free_port port
cat >"$root/tmp/redis-run.sh" <<'SH'
#!/bin/sh
# runs in the root: redis-server and redis-benchmark under the installed wrapper
port=$1
mkdir -p /tmp/stats-server /tmp/stats-client
SMC_STATS_FILE=/tmp/stats-server/%p.json smc_preload.sh redis-server --port "$port" \
	--bind 127.0.0.1 --save '' --appendonly no --daemonize no >/tmp/redis.log 2>&1 &
srv=$!
i=0
# its log, not a probe: a connection refused before it listens would count as a fallback
until grep -q 'Ready to accept connections' /tmp/redis.log; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || { echo "redis-server does not start"; cat /tmp/redis.log; exit 1; }
	sleep 0.1
done
SMC_STATS_FILE=/tmp/stats-client/%p.json smc_preload.sh redis-benchmark -p "$port" \
	-c 20 -n 20000 -d 512 -t set,get -q || exit 1
SMC_STATS_FILE=/tmp/stats-client/%p.json smc_preload.sh redis-cli -p "$port" -r -1 -i 0.2 \
	ping >/dev/null &
cli=$!
i=0
until smcpstat -j -t -m shm -p redis-cli >/tmp/smcpstat.json &&
	grep -q '"shm":1' /tmp/smcpstat.json; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || break
	sleep 0.1
done
kill "$cli"
kill "$srv"
wait
SH
in_chroot timeout -k 5 120 sh /tmp/redis-run.sh "$port" >"$SMC_TMP/redis-run.log" 2>&1 ||
	smc_fail "redis under the installed wrapper failed: $(cat "$SMC_TMP/redis-run.log")"
cat "$SMC_TMP/redis-run.log"
for side in server client; do
	dir=$root/tmp/stats-$side
	smc_require_stats "$dir"
	smc_log "stats $side: $(smc_stats_summary "$dir")"
	smc_assert_ge "shm bytes of redis $side" \
		"$(smc_stats "$dir" '.bytes.shm.sent + .bytes.shm.received')" 1
	# peer-closed: a client closed before its handshake ended (redis-benchmark frees the
	# clients still connecting when its requests are done), as over TCP
	smc_assert_eq "fallback connections of redis $side" \
		"$(smc_stats "$dir" '[.fallback | del(.["peer-closed"]) | .[]] | add // 0')" 0
done
jq -e '.totals.connections.shm == 1 and (.connections[0].comm == "redis-cli")' \
	"$root/tmp/smcpstat.json" >/dev/null ||
	smc_fail "the installed smcpstat does not list the live redis-cli connection: $(cat "$root/tmp/smcpstat.json")"

# ------------------------------------------------------------------ purge
rm -rf "$root"/tmp/*
in_chroot dpkg --purge smc-preload-tools smc-preload >"$SMC_TMP/purge.log" 2>&1 ||
	smc_fail "dpkg --purge failed: $(cat "$SMC_TMP/purge.log")"
# dpkg -L's files must be gone; its directories are shared with other packages (the
# comparison below finds any of the packages' own left behind)
while read -r f; do
	if [ ! -d "$root$f" ] && { [ -e "$root$f" ] || [ -L "$root$f" ]; }; then
		smc_fail "$f (dpkg -L) is still there after the purge"
	fi
done <"$SMC_TMP/dpkg-L"
snapshot >"$SMC_TMP/files-after"
diff "$SMC_TMP/files-before" "$SMC_TMP/files-after" >"$SMC_TMP/files.diff" ||
	smc_fail "the purge left the root changed: $(cat "$SMC_TMP/files.diff")"
smc_pass
