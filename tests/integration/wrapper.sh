#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Checks smc_preload.sh: options, exit codes, library lookup, LD_PRELOAD appending,
# exact argument passing, and --print-config through the real library.
# Environment (set by `make check`): top_srcdir, top_builddir, SMC_PRELOAD_LIB.
# Exit: 0 pass, 1 fail, 77 skip.

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$here/../..}
top_builddir=${top_builddir:-$top_srcdir}
lib=${SMC_PRELOAD_LIB:-$top_builddir/.libs/libsmc_preload.so}
wrapper=$top_srcdir/smc_preload.sh

if [ ! -f "$lib" ]; then
	echo "SKIP: library $lib not built"
	exit 77
fi
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib") # absolute, for comparisons
if [ ! -x "$wrapper" ]; then
	echo "FAIL: $wrapper missing or not executable"
	exit 1
fi

# A clean slate: no SMC_* setting or preload from the caller leaks into the checks.
for v in $(compgen -e); do
	case $v in SMC_*) unset "$v" ;; esac
done
unset LD_PRELOAD
export SMC_PRELOAD_LIB=$lib

tmp=$(mktemp -d "${TMPDIR:-/tmp}/smc-wrapper-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

failures=0
pass() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; failures=$((failures + 1)); }

# run NAME CMD...: runs CMD, leaving stdout in $out, stderr in $err, status in $rc.
run() {
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	out=$(cat "$tmp/out")
	err=$(cat "$tmp/err")
}

# expect DESCRIPTION ACTUAL EXPECTED
expect() {
	if [ "$2" = "$3" ]; then
		pass "$1"
	else
		fail "$1"
		printf '       expected: %q\n       actual:   %q\n' "$3" "$2"
		[ -n "$err" ] && printf '       stderr:   %s\n' "$err"
	fi
}

# ------------------------------------------------------------------ info options
version=$(sed -n 's/^AC_INIT(\[[^]]*\], *\[\([^]]*\)\].*/\1/p' "$top_srcdir/configure.ac")
run "$wrapper" --version
expect "--version exits 0" "$rc" 0
expect "--version prints the package version" "$out" "smc-preload ${version:-0.1.0}"

run "$wrapper" -h
expect "-h exits 0" "$rc" 0
case $out in *Usage:*--print-config*) pass "-h prints the usage" ;; *) fail "-h prints the usage" ;; esac

run "$wrapper" --help
expect "--help exits 0" "$rc" 0

# ------------------------------------------------------------------ usage errors
for bad in -x --bogus; do
	run "$wrapper" "$bad" true
	expect "unknown option $bad exits 2" "$rc" 2
	case $err in
	*"unknown option: $bad"*) pass "unknown option $bad is named on stderr" ;;
	*) fail "unknown option $bad is named on stderr (got: $err)" ;;
	esac
	expect "unknown option $bad prints nothing on stdout" "$out" ""
done

run "$wrapper"
expect "no COMMAND exits 2" "$rc" 2
run "$wrapper" -r
expect "-r without SIZE exits 2" "$rc" 2
run "$wrapper" -d --
expect "-- without COMMAND exits 2" "$rc" 2

run env SMC_PRELOAD_LIB="$tmp/nonexistent.so" "$wrapper" true
expect "a missing SMC_PRELOAD_LIB exits 1" "$rc" 1
case $err in *nonexistent.so*) pass "the missing library is named" ;; *) fail "the missing library is named" ;; esac

# ------------------------------------------------------------------ running a command
run "$wrapper" printf '[%s]' 'a b' '' "c'd" '*' $'new\nline' '-d'
expect "arguments are passed exactly" "$out" "[a b][][c'd][*][new
line][-d]"
expect "a plain run prints nothing on stderr" "$err" ""

run "$wrapper" -- printf '%s|' -r -v --
expect "arguments after -- that look like options go to COMMAND" "$out" "-r|-v|--|"

run "$wrapper" sh -c 'exit 3'
expect "the command's exit status is returned" "$rc" 3

run "$wrapper" "$tmp/no-such-command"
expect "a command that does not exist gives 127" "$rc" 127

# shellcheck disable=SC2016 # expanded by the inner shell
show_env='printf "%s|%s|%s|%s" "${SMC_DEBUG-unset}" "${SMC_RCVBUF-unset}" "${SMC_SNDBUF-unset}" "$LD_PRELOAD"'
run "$wrapper" -d -r 1m -t 64k sh -c "$show_env"
expect "-d -r -t set SMC_DEBUG, SMC_RCVBUF, SMC_SNDBUF" "$out" "1|1m|64k|$lib"
run "$wrapper" -dr2m -t128k sh -c "$show_env"
expect "grouped options -dr2m -t128k" "$out" "1|2m|128k|$lib"
run "$wrapper" sh -c "$show_env"
expect "no option sets no variable" "$out" "unset|unset|unset|$lib"

run "$wrapper" -v true
expect "-v exits 0" "$rc" 0
case $err in *"$lib"*) pass "-v names the library on stderr" ;; *) fail "-v names the library on stderr" ;; esac

# ------------------------------------------------------------------ LD_PRELOAD
# A real, harmless library to stand for "something the caller already preloads".
other=""
for d in "/lib/$(uname -m)-linux-gnu" "/usr/lib/$(uname -m)-linux-gnu" /lib64 /usr/lib64 /lib /usr/lib; do
	if [ -f "$d/libm.so.6" ]; then
		other=$d/libm.so.6
		break
	fi
done
if [ -n "$other" ]; then
	run env LD_PRELOAD="$other" "$wrapper" env
	preload=$(printf '%s\n' "$out" | sed -n 's/^LD_PRELOAD=//p')
	expect "LD_PRELOAD is appended to, not replaced" "$preload" "$other $lib"
	expect "no loader error with the appended LD_PRELOAD" "$err" ""
else
	echo "skip - no libm.so.6 found to preset LD_PRELOAD with"
fi
# shellcheck disable=SC2016 # expanded by the inner shell
show_preload='printf %s "$LD_PRELOAD"'
run env LD_PRELOAD="$lib" "$wrapper" sh -c "$show_preload"
expect "the library is not preloaded twice" "$out" "$lib"

(cd "$(dirname "$lib")" && SMC_PRELOAD_LIB=$(basename "$lib") "$wrapper" sh -c "cd / && $show_preload") >"$tmp/out" 2>&1
expect "a relative SMC_PRELOAD_LIB becomes absolute" "$(cat "$tmp/out")" "$lib"

run env SMC_PRINT_CONFIG=1 "$wrapper" sh -c 'echo ran'
expect "a stray SMC_PRINT_CONFIG does not stop the command" "$out" "ran"

# ------------------------------------------------------------------ library lookup
# Build-tree lookup: .libs/libsmc_preload.so next to the script.
mkdir -p "$tmp/tree/.libs" "$tmp/inst/lib"
cp "$wrapper" "$tmp/tree/smc_preload.sh"
cp "$lib" "$tmp/tree/.libs/libsmc_preload.so"
run env -u SMC_PRELOAD_LIB "$tmp/tree/smc_preload.sh" sh -c "$show_preload"
expect "without SMC_PRELOAD_LIB the build tree's library is used" "$out" "$tmp/tree/.libs/libsmc_preload.so"

# Installed lookup: the line `make install` rewrites (same sed as Makefile.am).
n=$(grep -c '^SMC_INSTALLED_LIB=' "$wrapper")
expect "exactly one SMC_INSTALLED_LIB= line" "$n" 1
cp "$wrapper" "$tmp/inst/smc_preload.sh"
cp "$lib" "$tmp/inst/lib/libsmc_preload.so"
sed -i "s|^SMC_INSTALLED_LIB=.*|SMC_INSTALLED_LIB=\"$tmp/inst/lib/libsmc_preload.so\"|" "$tmp/inst/smc_preload.sh"
run env -u SMC_PRELOAD_LIB "$tmp/inst/smc_preload.sh" sh -c "$show_preload"
expect "the installed path is used when nothing else is found" "$out" "$tmp/inst/lib/libsmc_preload.so"

# ------------------------------------------------------------------ --print-config
names=$(sed -n '/smc_cfg_vars\[[A-Z_]*\] *= *{/,/^};/p' "$top_srcdir/core/base/config.c" |
	grep -o '"SMC_[A-Z0-9_]*"' | tr -d '"')
if [ -z "$names" ]; then
	fail "variable names found in core/base/config.c"
else
	run env SMC_SNDBUF=4m SMC_SPIN_US=12q "$wrapper" -r 2m --print-config
	expect "--print-config exits 0 with a bad value set" "$rc" 0
	missing=""
	for name in $names; do
		count=$(printf '%s\n' "$out" | grep -c "^$name=")
		[ "$count" = 1 ] || missing="$missing $name($count)"
	done
	expect "--print-config lists every variable once" "$missing" ""
	expect "--print-config prints one line per variable" \
		"$(printf '%s\n' "$out" | grep -c .)" "$(printf '%s\n' "$names" | grep -c .)"
	line=$(printf '%s\n' "$out" | grep '^SMC_SNDBUF=')
	expect "a variable from the environment shows (env)" "${line%%  #*}" "SMC_SNDBUF=4m  (env)"
	line=$(printf '%s\n' "$out" | grep '^SMC_RCVBUF=')
	expect "-r shows as (env)" "${line%%  #*}" "SMC_RCVBUF=2m  (env)"
	line=$(printf '%s\n' "$out" | grep '^SMC_MEM_CAP=')
	expect "an unset variable shows its default" "${line%%  #*}" "SMC_MEM_CAP=8g  (default)"
	line=$(printf '%s\n' "$out" | grep '^SMC_SPIN_US=')
	expect "a bad value shows the default it falls back to" "${line%%  #*}" \
		"SMC_SPIN_US=20  (invalid, using default)"
	expect "the bad value is reported in one stderr line" \
		"$(printf '%s\n' "$err" | grep -c 'SMC_SPIN_US="12q"')|$(printf '%s\n' "$err" | grep -c .)" "1|1"
fi

# The library prints the table and lets the program run: it never ends a program.
run env SMC_PRINT_CONFIG=1 LD_PRELOAD="$lib" sh -c 'echo ran; exit 3'
expect "SMC_PRINT_CONFIG=1: the program runs on" "$out|$rc" "ran|3"
expect "SMC_PRINT_CONFIG=1: the table is on stderr" \
	"$(printf '%s\n' "$err" | grep -c '^SMC_RCVBUF=')" 1

if [ -n "$other" ]; then
	run env SMC_PRELOAD_LIB="$other" "$wrapper" --print-config
	expect "--print-config with a library that prints nothing exits 1" "$rc" 1
fi

if [ "$failures" -ne 0 ]; then
	echo "$failures check(s) failed"
	exit 1
fi
echo "all checks passed"
exit 0
