#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The man page documents exactly the variables of the table in core/base/config.c:
#  - every name in the smc_cfg_vars[] initializer has an entry (".TP" then ".B NAME")
#    in man/libsmc_preload.7, and the entry shows the table's default;
#  - every SMC_* name the page mentions is in the table (no stale or invented variable);
#  - both man pages render without warnings (when man-db is installed).
# Exit: 0 pass, 1 fail, 77 skip.

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$here/../..}
config_c=$top_srcdir/core/base/config.c
page=$top_srcdir/man/libsmc_preload.7

for f in "$config_c" "$page" "$top_srcdir/man/smc_preload.8"; do
	if [ ! -f "$f" ]; then
		echo "FAIL - $f missing"
		exit 1
	fi
done

failures=0
pass() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; failures=$((failures + 1)); }

# The table initializer: from "smc_cfg_vars[...] = {" to the closing "};".
table=$(sed -n '/smc_cfg_vars\[[A-Z_]*\] *= *{/,/^};/p' "$config_c")
table_names=$(printf '%s\n' "$table" | grep -o '"SMC_[A-Z0-9_]*"' | tr -d '"' | sort -u)
if [ -z "$table_names" ]; then
	echo "FAIL - no SMC_* name found in the smc_cfg_vars[] initializer of $config_c"
	exit 1
fi
echo "table: $(printf '%s\n' "$table_names" | tr '\n' ' ')"

# Entries: a ".B SMC_NAME" line right after ".TP".
entries=$(awk 'prev == ".TP" && $1 == ".B" && $2 ~ /^SMC_/ { print $2 } { prev = $0 }' "$page" | sort)
dups=$(printf '%s\n' "$entries" | uniq -d)
if [ -z "$dups" ]; then pass "no variable has two entries"; else fail "duplicate entries: $dups"; fi

for name in $table_names; do
	if printf '%s\n' "$entries" | grep -qx "$name"; then
		pass "$name has an entry in libsmc_preload.7"
	else
		fail "$name (in core/base/config.c) has no entry in libsmc_preload.7"
	fi
done

# Every SMC_* word of the page (entries, prose, examples) must be a table variable.
# Font escapes (\fB...) are removed first so that \b marks a real word start
# (LIBSMC_PRELOAD is not a variable).
mentioned=$(sed 's/\\-/-/g; s/\\f[BIRP]//g; s/\\f([A-Z][A-Z]//g' "$page" |
	grep -o '\bSMC_[A-Z0-9_]*[A-Z0-9]' | sort -u)
for name in $mentioned; do
	if printf '%s\n' "$table_names" | grep -qx "$name"; then
		:
	else
		fail "libsmc_preload.7 mentions $name, which is not in core/base/config.c"
	fi
done
pass "checked $(printf '%s\n' "$mentioned" | grep -c .) SMC_* names mentioned in the page"

# Defaults: the table line holding the name also holds `.def = "..."`; a non-empty
# default must appear in the entry as a bold word (".B 256k" or ".BR 256k").
for name in $table_names; do
	def=$(printf '%s\n' "$table" | grep "\"$name\"" | sed -n 's/.*\.def = "\([^"]*\)".*/\1/p')
	[ -n "$def" ] || continue
	block=$(awk -v n="$name" '
		prev == ".TP" && $1 == ".B" && $2 == n { on = 1; prev = $0; next }
		on && ($0 == ".TP" || $1 == ".SH" || $1 == ".SS") { on = 0 }
		on { print } { prev = $0 }' "$page" | sed 's/\\-/-/g')
	if printf '%s\n' "$block" | grep -Eq "^\.BR? $def( |$)"; then
		pass "$name entry shows default $def"
	else
		fail "$name entry does not show the table's default $def"
	fi
done

# Rendering.
if command -v man >/dev/null 2>&1; then
	for f in "$page" "$top_srcdir/man/smc_preload.8"; do
		warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
		if [ -z "$warnings" ]; then
			pass "$(basename "$f") renders without warnings"
		else
			fail "$(basename "$f") renders with warnings:"
			printf '%s\n' "$warnings" | sed 's/^/       /'
		fi
	done
else
	echo "skip - man not installed: rendering not checked"
fi

if [ "$failures" -ne 0 ]; then
	echo "$failures check(s) failed"
	exit 1
fi
echo "all checks passed"
exit 0
