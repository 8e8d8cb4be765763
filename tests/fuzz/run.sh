#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Runs every libFuzzer harness of tests/fuzz for FUZZ_SECONDS (default 20) from its seed
# corpus (tests/fuzz/corpus/<harness>) and its dictionary (tests/fuzz/dict/<harness>.dict
# when there is one). Fails on the first crash, leak, sanitizer report or timeout; the
# input that caused it is kept (path printed) so it can become a regression seed.
#
# SMC_FUZZERS: the harnesses the build made (set by `make check` / `make fuzz`); empty
# when configure found no clang with -fsanitize=fuzzer: then the test skips.
# FUZZ_WORK: where new inputs and crashes go (default: a temporary directory, removed
# unless something failed). FUZZ_ONLY: run only the harnesses whose name contains it.

set -u

secs=${FUZZ_SECONDS:-20}
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}

if [ -z "${SMC_FUZZERS:-}" ]; then
	echo "SKIP: no libFuzzer harnesses built (configure: clang -fsanitize=fuzzer not found)"
	exit 77
fi

work=${FUZZ_WORK:-}
keep=1
if [ -z "$work" ]; then
	work=$(mktemp -d "${TMPDIR:-/tmp}/smc-fuzz.XXXXXX") || exit 1
	keep=0
fi

# ASan and UBSan stop at the first report; leaks are reported too (detect_leaks).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for f in $SMC_FUZZERS; do
	name=$(basename "$f")
	short=${name#fuzz_}
	case $name in *"${FUZZ_ONLY:-}"*) ;; *) continue ;; esac
	bin=$top_builddir/$f
	seeds=$top_srcdir/tests/fuzz/corpus/$short
	dict=$top_srcdir/tests/fuzz/dict/$short.dict
	if [ ! -x "$bin" ]; then
		echo "FAIL $name: $bin not built"
		failed+=("$name")
		continue
	fi
	mkdir -p "$work/$short/corpus" "$work/$short/crash"
	args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
		-artifact_prefix="$work/$short/crash/")
	[ -f "$dict" ] && args+=(-dict="$dict")
	echo "==== $name: $secs s"
	# New inputs go to the first directory (work); the checked-in seeds are only read.
	"$bin" "${args[@]}" "$work/$short/corpus" "$seeds" >"$work/$short/log" 2>&1
	rc=$?
	# the last status line (cov, ft, corp, exec/s) and the final stats
	grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE|INITED)' "$work/$short/log" | tail -n 1
	grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$work/$short/log"
	if [ "$rc" -ne 0 ]; then
		echo "FAIL $name (exit $rc): log $work/$short/log"
		grep -E 'ERROR|SUMMARY|runtime error|Test unit written|deadly signal' \
			"$work/$short/log" | head -n 20
		failed+=("$name")
		keep=1
	fi
done

if [ "$keep" = 0 ]; then
	rm -rf "$work"
else
	echo "inputs and logs in $work"
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "all harnesses ran ${secs} s each without a crash"
