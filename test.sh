#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# test.sh: install what the tests need (Debian, as root), build with warnings as errors,
# run `make check`, then build with ASan+UBSan and run the unit tests and a subset of the
# integration tests under the sanitizers. Exits non-zero on any failure.
#
#   ./test.sh             everything
#   ./test.sh --quick     unit tests and a few integration tests, no sanitizer pass
#   ./test.sh --no-asan   skip the sanitizer pass
#   ./test.sh --no-install  never call apt-get
#
# Environment passed on to the tests: SMC_TEST_EXPECT=shm|tcp (see
# tests/integration/lib.sh), SMC_TEST_KEEP=1.
#
# Sanitizer pass, what works: the library is built with -fsanitize=address,undefined and
# so needs the ASan runtime loaded before it. Programs built with the sanitizers (unit
# tests, tests/progs/*) have it already. For the others (redis, python3...) the tests put
# the runtime first in LD_PRELOAD (SMC_TEST_PRELOAD_FIRST=libasan.so; smc_preload.sh
# appends the library after it), with ASAN_OPTIONS=detect_leaks=0 (their own leaks are
# not ours) and verify_asan_link_order=0. curl does not start with the ASan runtime
# preloaded, so the tests that need it are not in the sanitizer subset. The subset runs
# smaller payloads and allows more mappings in the churn test (ASan's allocator grows).

set -euo pipefail

cd -- "$(dirname -- "$0")"
top=$PWD

quick=0
asan=1
install=1
for arg in "$@"; do
	case $arg in
	--quick) quick=1; asan=0 ;;
	--no-asan) asan=0 ;;
	--no-install) install=0 ;;
	-h | --help) awk 'NR > 2 && !/^#/ { exit } NR > 3 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
	*) echo "test.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
	esac
done

PACKAGES=(build-essential autoconf automake libtool pkg-config libibverbs-dev librdmacm-dev
	libevent-dev check libbpf-dev clang llvm redis-server redis-tools nginx-light memcached
	libmemcached-tools iperf3 sockperf qperf wrk jq curl python3 procps iproute2 coreutils
	util-linux gnuplot-nox hyperfine bpftool tcpdump apache2 apache2-utils postgresql
	postgresql-contrib haproxy openssh-server openssh-client)
# Node.js's http module (tests/integration/node_http.sh); liburing (tests/progs/io_uring_check)
PACKAGES+=(nodejs liburing-dev)
# h2load, linked with libev (tests/integration/libev.sh)
PACKAGES+=(nghttp2-client)
# socat EXEC, with and without nofork (tests/integration/exec.sh);
# systemd-socket-activate (exec_listener.sh); ncat --exec (exec.sh)
PACKAGES+=(socat systemd ncat)
# libfaketime preloaded beside the library (tests/integration/faketime.sh)
PACKAGES+=(libfaketime)
# a Tcl echo server and a Perl client that forks after connect (forked_writer.sh)
PACKAGES+=(tcl perl)
# an FTP server whose sessions come from the raw clone system call (tests/integration/vsftpd.sh)
PACKAGES+=(vsftpd)
# a SOCKS client library preloaded beside ours, and a SOCKS proxy (proxychains.sh)
PACKAGES+=(proxychains4 microsocks)
# libFuzzer's runtime for tests/fuzz (only a Recommends of clang, which is not installed)
PACKAGES+=(libclang-rt-14-dev)
# The Debian packages (tests/integration/debian_package.sh: dpkg-buildpackage, lintian, a
# clean root made by mmdebstrap), the boot unit (systemd_unit.sh: systemd-analyze),
# smcpstat's JSON schema (smcpstat_json.sh)
PACKAGES+=(debhelper lintian mmdebstrap systemd python3-jsonschema)
# The VM tests (tests/vm/run-vm.sh, run-twovm.sh): qemu boots Debian's kernel with Soft-RoCE
# and smc.ko (the two-VM tests also use socat, python3, tcpdump, redis, iperf3: above).
PACKAGES+=(qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-providers ibverbs-utils)

# Integration tests that run in --quick mode and under the sanitizers.
QUICK_TESTS=(tests/integration/wrapper.sh tests/integration/passthrough.sh
	tests/integration/fallback.sh tests/integration/python_http.sh tests/integration/redis.sh)
# Not under the sanitizers: curl hangs at start-up with the ASan runtime preloaded
# (setlocale lock, with or without our library), which rules out nginx.sh and
# python_http.sh (nginx_proxy.sh runs its servers instrumented, below).
ASAN_TESTS=(tests/integration/fallback.sh tests/integration/stream.sh
	tests/integration/churn.sh tests/integration/churn_tcpopt.sh tests/integration/churn_kill.sh
	tests/integration/peerdeath.sh
	tests/integration/pool.sh tests/integration/pool_forge.sh
	tests/integration/redis.sh
	tests/integration/memcached.sh tests/integration/iperf3.sh
	tests/integration/readiness.sh tests/integration/netns.sh tests/integration/netns_exec.sh
	tests/integration/bpf_setup.sh
	tests/integration/idle_stress.sh tests/integration/syscall.sh tests/integration/sock_semantics.sh
	tests/integration/io_uring.sh
	tests/integration/defer_accept.sh tests/integration/connect_twice.sh
	tests/integration/fd_headroom.sh)
# fork() while threads are busy (locks inherited by children), per-process counts
ASAN_TESTS+=(tests/integration/fork.sh tests/integration/fork_counts.sh)
# children made by clone() and the raw clone system calls (fork handling from a trampoline)
ASAN_TESTS+=(tests/integration/clone.sh)
ASAN_TESTS+=(tests/integration/rdv_squat.sh)
# a peer forging the shared block: a read or write outside a ring is an ASan report
ASAN_TESTS+=(tests/integration/shm_forge.sh)
# downgrades across exec: the peer re-sends from its own mapping of the ring
ASAN_TESTS+=(tests/integration/exec.sh)
# smcpstat's totals and filters (the tool instrumented too)
ASAN_TESTS+=(tests/integration/smcpstat_json.sh)
# descriptors closed under a running handshake: the watch's own descriptor, the Declines
ASAN_TESTS+=(tests/integration/handshake_fd_reuse.sh)
# Not under the sanitizers: the Soft-RoCE tests (ASan inside the emulated VM slows the
# peers enough for an RC retry timeout to fail the link now and then).

failures=()
say() { printf '\n==== %s\n' "$*"; }

# ------------------------------------------------------------------ dependencies

# shellcheck source=tools/apt-install.sh
. "$top/tools/apt-install.sh"
install_packages() {
	if [ "$install" = 0 ]; then
		echo "not installing packages (--no-install)"
		return 0
	fi
	apt_install_missing "${PACKAGES[@]}" ||
		echo "tests that need the missing packages will be skipped or fail"
}

# ------------------------------------------------------------------ build and check

# make_var DIR VAR: the value of a variable of DIR's Makefile.
make_var() {
	# shellcheck disable=SC2016 # $(VAR) is for make
	printf 'print-var:\n\t@echo $(%s)\n' "$2" | make -s -C "$1" -f Makefile -f - print-var
}

# Totals over every `make check` run, from automake's test-suite.log summary.
n_pass=0
n_fail=0
n_skip=0
count_results() {
	local log=$1/test-suite.log v
	[ -f "$log" ] || return 0
	v=$(sed -n 's/^# PASS: *//p' "$log"); n_pass=$((n_pass + ${v:-0}))
	v=$(sed -n 's/^# SKIP: *//p' "$log"); n_skip=$((n_skip + ${v:-0}))
	v=$(sed -n 's/^# FAIL: *//p' "$log"); n_fail=$((n_fail + ${v:-0}))
	v=$(sed -n 's/^# ERROR: *//p' "$log"); n_fail=$((n_fail + ${v:-0}))
}

# run_check DIR LABEL [make args...]: `make check`, printing the logs of failed tests.
run_check() {
	local dir=$1 label=$2
	shift 2
	say "make check ($label)"
	if make -C "$dir" check "$@"; then
		count_results "$dir"
		return 0
	fi
	count_results "$dir"
	failures+=("$label")
	[ -f "$dir/test-suite.log" ] && cat "$dir/test-suite.log"
	return 0
}

configure_and_build() { # DIR CONFIGURE-ARGS...
	local dir=$1
	shift
	say "configure $* in $dir"
	rm -rf "$dir"
	mkdir -p "$dir"
	(cd "$dir" && "$top/configure" "$@")
	say "make in $dir"
	make -C "$dir" -j2
	# Build the test programs too (empty TESTS: nothing runs yet).
	make -C "$dir" -j2 check TESTS= >/dev/null
}

install_packages

say "autoreconf"
autoreconf -fi

start=$SECONDS
configure_and_build build-test --enable-werror
if [ "$quick" = 1 ]; then
	run_check build-test quick TESTS="$(make_var build-test UNIT_TESTS) ${QUICK_TESTS[*]}"
else
	run_check build-test full
fi
echo "first pass: $((SECONDS - start)) s"

if [ "$asan" = 1 ]; then
	start=$SECONDS
	configure_and_build build-asan --enable-sanitizers
	libasan=$(readlink -f "$(gcc -print-file-name=libasan.so)")
	if ! head -c 4 "$libasan" | grep -q ELF; then
		echo "cannot find the ASan runtime (got $libasan)"
		failures+=(asan-runtime)
	else
		export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
		# Unit tests: instrumented programs, leak detection on.
		run_check build-asan asan-unit TESTS="$(make_var build-asan UNIT_TESTS)"
		# Integration subset: smaller payloads, the sanitizers slow everything down.
		ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
			SMC_TEST_PRELOAD_FIRST=$libasan \
			STREAM_BLOCK_BYTES=256m STREAM_EPOLL_BYTES=64m CHURN_CYCLES=5000 \
			CHURN_MAPS_SLACK=128 FORK_COUNT=300 FORK_CHURN=0 \
			run_check build-asan asan-integration TESTS="${ASAN_TESTS[*]}"
		# Both nginx of nginx_proxy.sh instrumented, curl and wrk on the first pass's
		# library (curl does not start with the ASan runtime preloaded, see above).
		ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
			SMC_TEST_PRELOAD_FIRST=$libasan \
			SMC_TEST_CLIENT_LIB=$top/build-test/.libs/libsmc_preload.so \
			PROXY_MAPS_SLACK=128 \
			run_check build-asan asan-nginx-proxy TESTS=tests/integration/nginx_proxy.sh
	fi
	echo "sanitizer pass: $((SECONDS - start)) s"
fi

if [ ${#failures[@]} -gt 0 ]; then
	say "FAILED: ${failures[*]}"
	echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped"
	exit 1
fi
say "all tests passed"
echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped"
