#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# bench/analyze.py's message-size sweep verdicts, on made-up raw.csv files:
#  - a drop that all rounds show, with the CPUs near apart throughout, is a MISS;
#  - a drop that only comes from rounds whose CPUs went far apart (bench/c2c_probe.h)
#    between two sizes is not a cliff: the rule, judged on the near rounds, passes; the
#    far rounds' and all rounds' drops are still reported (INFO);
#  - a round whose placement changed during a size counts in neither placement;
#  - sizes without two near rounds leave the rule unjudged (NOISY), not passed;
#  - without placement probes (older raw.csv files) the all-rounds rule stands.
# Exit: 0 pass, 1 fail, 77 skip.

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$here/../..}
analyze=$top_srcdir/bench/analyze.py

command -v python3 >/dev/null || { echo "SKIP - python3 missing"; exit 77; }
[ -f "$analyze" ] || { echo "FAIL - $analyze missing"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failures=0
pass() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; failures=$((failures + 1)); }

# raw NAME: writes $work/NAME/raw.csv from lines "round size smc_MBps c2c_before
# c2c_after" on stdin ('-' for no probe); TCP gets 100 MB/s at every size, every round
raw() {
	mkdir -p "$work/$1"
	{
		echo "workload,metric,mode,round,value,valid,note"
		while read -r r size v before after; do
			echo "sweep_rmb65536_large,MBps@$size,smc,$r,$v,1,\"\""
			echo "sweep_rmb65536_large,MBps@$size,tcp,$r,100,1,\"\""
			[ "$before" = - ] && continue
			echo "sweep_rmb65536_large,c2c_before@$size,smc,$r,$before,1,\"\""
			echo "sweep_rmb65536_large,c2c_after@$size,smc,$r,$after,1,\"\""
		done
	} >"$work/$1/raw.csv"
}

# verdict NAME PATTERN: the verdict of the table row matching PATTERN
verdict() {
	python3 "$analyze" --raw "$work/$1/raw.csv" --out "$work/$1" --far-ns 250 \
		>"$work/$1/table.txt" || { echo "ANALYZE-FAILED"; return; }
	grep -E "^sweep rmb=64K .*$2" "$work/$1/table.txt" | awk '{print $NF}'
}

expect() { # NAME PATTERN WANT WHAT
	local got
	got=$(verdict "$1" "$2")
	if [ "$got" = "$3" ]; then
		pass "$4 ($got)"
	else
		fail "$4: '$got', expected $3"
		cat "$work/$1/table.txt"
	fi
}

# 1. a real cliff: size 4 loses 40% in every round, CPUs near throughout
cliff_rows='1 1 1000 80 90
1 2 2000 90 80
1 3 3000 80 85
1 4 1800 85 90
2 1 1010 70 80
2 2 2010 80 70
2 3 3010 70 75
2 4 1810 75 80
3 1 990 90 95
3 2 1990 95 90
3 3 2990 90 85
3 4 1790 85 95'
raw cliff <<<"$cliff_rows"
expect cliff "CPUs near" MISS "a drop in every near round is a cliff"

# 2. rounds 2 and 3 had the CPUs moved far apart from size 3 on: the all-rounds medians
#    drop 40% at size 3, but near rounds (1 and 4) and far rounds each rise with the size
raw moved <<'EOF'
1 1 1000 80 90
1 2 2000 90 80
1 3 3000 80 85
1 4 3100 85 90
2 1 1010 70 80
2 2 2010 80 70
2 3 1200 400 410
2 4 1250 410 420
3 1 990 90 95
3 2 1990 95 90
3 3 1210 390 400
3 4 1260 400 380
4 1 1020 75 85
4 2 2020 85 75
4 3 3020 75 80
4 4 3120 80 85
EOF
expect moved "CPUs near" PASS "a drop from the host's placement alone is no cliff"
expect moved "all rounds" INFO "the all-rounds drop is still reported"
expect moved "CPUs far" INFO "the far rounds' drop is reported, not judged"
if grep -q "size-rounds with the CPUs near 12, far 4, moved during the size 0" \
	"$work/moved/table.txt"; then
	pass "the placements are counted per size and round"
else
	fail "placement counts"
	cat "$work/moved/table.txt"
fi

# 3. the same cliff as 1, but round 3's placement changed during size 4 (near before,
#    far after): size 4 keeps two near rounds, still a cliff
raw changed <<<"$(sed 's/^3 4 1790 85 95$/3 4 900 85 400/' <<<"$cliff_rows")"
expect changed "CPUs near" MISS "a round that changed placement during a size leaves the others judged"
if grep -q "moved during the size 1" "$work/changed/table.txt"; then
	pass "a change during a size is counted as such"
else
	fail "changed-placement count"
	cat "$work/changed/table.txt"
fi

# 4. rounds 2 and 3 far apart throughout, round 1 near: one near round per size is too
#    few to judge
raw fewnear <<'EOF'
1 1 1000 80 90
1 2 2000 90 80
1 3 3000 80 85
2 1 300 400 410
2 2 600 410 420
2 3 900 420 400
3 1 310 390 400
3 2 610 400 380
3 3 910 380 390
EOF
expect fewnear "CPUs near" NOISY "sizes without two near rounds are not judged"

# 5. no probes (a raw.csv from before them): the all-rounds rule, as before
raw noprobe <<'EOF'
1 1 1000 - -
1 2 2000 - -
1 3 1200 - -
2 1 1010 - -
2 2 2010 - -
2 3 1210 - -
3 1 990 - -
3 2 1990 - -
3 3 1190 - -
EOF
expect noprobe "worst drop vs smaller sizes \(" MISS "without probes the all-rounds drop is judged"

[ "$failures" -eq 0 ] || exit 1
exit 0
