#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# smc_preload.sh: run a program with libsmc_preload.so preloaded, so its TCP connections
# to other preloaded processes are upgraded to SMC. Options mirror smc_run's -d/-r/-t;
# they only set environment variables (see libsmc_preload(7)) and exec the command.

# `make install` rewrites this line with the installed library path: keep it one line.
SMC_INSTALLED_LIB="/usr/local/lib/smc-preload/libsmc_preload.so"

SMC_PRELOAD_VERSION="0.1.0"
prog=${0##*/}
verbose=0
print_config=0

usage() {
	cat <<EOF
Usage: $prog [-d] [-r SIZE] [-t SIZE] [-v] [--] COMMAND [ARGS...]
       $prog [-d] [-r SIZE] [-t SIZE] --print-config
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

SIZE: bytes, or with a k, m or g suffix (1k = 1024). Other settings are read
from SMC_* environment variables: see libsmc_preload(7) or --print-config.
Library: \$SMC_PRELOAD_LIB, else the build tree, else $SMC_INSTALLED_LIB.
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

# ------------------------------------------------------------------ options
while [ $# -gt 0 ]; do
	case $1 in
	--) shift; break ;;
	--help) usage; exit 0 ;;
	--version) printf 'smc-preload %s\n' "$SMC_PRELOAD_VERSION"; exit 0 ;;
	--print-config) print_config=1; shift ;;
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
	# The library prints its table from a constructor when SMC_PRINT_CONFIG=1, then
	# exits before /bin/true's main. Bad values are reported on stderr.
	out=$(env SMC_PRINT_CONFIG=1 LD_PRELOAD="$lib" /bin/true) ||
		die "the library failed to print its configuration"
	[ -n "$out" ] || die "$lib printed no configuration (not libsmc_preload.so?)"
	printf '%s\n' "$out"
	exit 0
fi

[ $# -gt 0 ] || die_usage "no COMMAND given"

# A stray SMC_PRINT_CONFIG would make every preloaded program exit at start.
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
