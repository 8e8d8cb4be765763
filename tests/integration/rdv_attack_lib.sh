# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Shared by the cross-user rendezvous attack tests (rdv_hold.sh, rdv_flood.sh,
# rdv_path_attack.sh), sourced after lib.sh: user nobody attacks (tests/progs/rdv_attack,
# without the library) while a preloaded root client (rdv_attack legit) makes short
# connections to a preloaded root server; what each legitimate connection took is
# compared with a run of the same client without the attack.

# the attacker: uid nobody, no library, no groups
ATTACK=$top_builddir/tests/progs/rdv_attack
smc_require_built "$ATTACK"
as_nobody=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
# The assertion on the delay an attack adds per legitimate connection: the handshake's
# target is < 5 ms; 10x that leaves a loaded host room (BRIEF: a generous bound), and
# an attack that holds a handshake for one of the library's waits (500 ms, seconds)
# stays far above it.
ATTACK_MAX_MEDIAN_ADDED_MS=${ATTACK_MAX_MEDIAN_ADDED_MS:-50}
# "affected": a connection that took more than this much longer than the baseline median
ATTACK_AFFECTED_MS=${ATTACK_AFFECTED_MS:-5}
# where each attack's summary line goes (printed together at the end)
ATTACK_REPORT=$SMC_TMP/attack-report.txt
: >"$ATTACK_REPORT"

# Every attacker started, ended at exit whatever the outcome (a failed assertion exits
# with attackers still running).
ATTACK_PIDS=()
attack_cleanup() {
	local p
	for p in "${ATTACK_PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${ATTACK_PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	return 0
}
# lib.sh's cleanup reads the exit status first: keep it for it (rdv_path_attack.sh
# replaces this trap with one that calls attack_cleanup too)
trap '_rc=$?; attack_cleanup; (exit $_rc); _smc_cleanup' EXIT

# attack_legit NAME PORT COUNT: COUNT preloaded connections; their latencies (us, one a
# line) in $SMC_TMP/lat-NAME, stats in the stats directory "NAME". Fails unless every
# connection got its exact response.
attack_legit() {
	local name=$1 port=$2 count=$3 out dir
	dir=$(smc_stats_dir "$name")
	out=$(smc_run "$dir" "$ATTACK" legit "$port" "$count" 2>&1) ||
		smc_fail "$name: legitimate connections failed: $(echo "$out" | grep -v '^LAT' | head -20)"
	echo "$out" | sed -n 's/^LAT //p' >"$SMC_TMP/lat-$name"
	smc_log "$name: $(echo "$out" | grep '^RESULT')"
	smc_require_stats "$dir"
	smc_log "stats $name: $(smc_stats_summary "$dir")"
	# every connection accounted for: upgraded or TCP, none aborted
	smc_assert_eq "$name: shm + tcp connections" \
		$(($(smc_stats "$dir" '.connections.shm // 0') + $(smc_stats "$dir" '.connections.tcp // 0'))) \
		"$count"
	smc_assert_eq "$name: aborts" "$(smc_stats "$dir" '.events.aborts // 0')" 0
}

# attack_delay NAME BASELINE ATTACKED TRIES: the summary of the delay the attack added to
# each connection of run ATTACKED over run BASELINE's median; appended to the report and
# kept in ATTACK_MEDIAN_ADDED_MS for attack_assert_delay.
attack_delay() {
	local name=$1 base=$2 run=$3 tries=$4 line
	sort -n "$SMC_TMP/lat-$run" >"$SMC_TMP/lat-$run.sorted"
	line=$(sort -n "$SMC_TMP/lat-$base" | awk -v name="$name" -v tries="$tries" \
		-v aff="$ATTACK_AFFECTED_MS" -v runf="$SMC_TMP/lat-$run.sorted" '
		{ b[NR] = $1 }
		END {
			bm = b[int((NR + 1) / 2)]
			n = 0
			while ((getline v < runf) > 0) a[++n] = v + 0
			affected = 0
			for (i = 1; i <= n; i++) if (a[i] - bm > aff * 1000) affected++
			med = a[int((n + 1) / 2)] - bm
			worst = a[n] - bm
			printf "%s: tries=%s connections=%d affected=%d baseline_median_ms=%.3f " \
			       "median_added_ms=%.3f worst_added_ms=%.3f\n", name, tries, n, affected,
			       bm / 1000, med / 1000, worst / 1000
		}')
	echo "$line" >>"$ATTACK_REPORT"
	smc_log "DELAY $line"
	ATTACK_MEDIAN_ADDED_MS=$(echo "$line" | sed -n 's/.*median_added_ms=\([-0-9.]*\).*/\1/p')
}

# attack_start NAME ARGS...: starts rdv_attack ARGS as nobody in the background (pid in
# ATTACK_PID, output in $SMC_TMP/NAME.log) and waits for its "OK" line.
attack_start() {
	local name=$1 i
	shift
	: >"$SMC_TMP/$name.log"
	"${as_nobody[@]}" "$ATTACK" "$@" >"$SMC_TMP/$name.log" 2>&1 &
	ATTACK_PID=$!
	ATTACK_PIDS+=("$ATTACK_PID")
	for ((i = 0; i < 100; i++)); do
		grep -q '^OK' "$SMC_TMP/$name.log" && return 0
		kill -0 "$ATTACK_PID" 2>/dev/null || break
		sleep 0.1
	done
	smc_fail "$name: the attacker did not start: $(cat "$SMC_TMP/$name.log")"
}

# attack_stop NAME: ends the attacker (SIGTERM) and sets ATTACK_RESULT to its RESULT line.
attack_stop() {
	local name=$1
	local p left=()
	kill -TERM "$ATTACK_PID" 2>/dev/null
	wait "$ATTACK_PID"
	for p in "${ATTACK_PIDS[@]}"; do
		[ "$p" = "$ATTACK_PID" ] || left+=("$p")
	done
	ATTACK_PIDS=("${left[@]}")
	ATTACK_RESULT=$(grep '^RESULT' "$SMC_TMP/$name.log")
	[ -n "$ATTACK_RESULT" ] || smc_fail "$name: no result from the attacker: $(cat "$SMC_TMP/$name.log")"
	smc_log "$name: attacker $ATTACK_RESULT"
}

# attack_field KEY: the value of KEY=... in ATTACK_RESULT.
attack_field() {
	echo "$ATTACK_RESULT" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"
}

# attack_assert_delay NAME: the bound on the median added delay, checked last (after the
# outcome assertions and the report): the numbers are logged whatever it says.
attack_assert_delay() {
	smc_log "attack report:"
	sed 's/^/    /' "$ATTACK_REPORT"
	awk -v r="$ATTACK_REPORT" -v max="$ATTACK_MAX_MEDIAN_ADDED_MS" 'BEGIN {
		bad = 0
		while ((getline l < r) > 0) {
			m = l; sub(/.*median_added_ms=/, "", m); sub(/ .*/, "", m)
			if (m + 0 >= max) { print "over the bound (" max " ms): " l; bad = 1 }
		}
		exit bad }' ||
		smc_fail "an attack added more than ${ATTACK_MAX_MEDIAN_ADDED_MS} ms (median) per legitimate connection"
}
