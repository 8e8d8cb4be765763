#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Turns bench/run's raw.csv into the table (stdout), results.csv, results.json and the
gnuplot scripts for the message-size sweep. Standard library only.

Verdicts: PASS / MISS against the workload's target; INFO when the workload has no target;
NOISY when a sweep curve's worst drop exceeds the rule but stays within the rounds' own
spread (the size's best round is not below the reference size's worst round), so the
run cannot tell it from noise: not a PASS, not a demonstrated cliff;
the sweep's cliff rule compares sizes measured with the same CPU placement: bench/run
records around every size how far apart CPUs 0 and 1 were (a cache-line round trip, see
bench/c2c_probe.h; a VM's host moves its vCPUs near or far apart for seconds to minutes,
and far apart a shared-memory ring runs 1.5-4x slower), so a round whose placement
changed between two sizes cannot pass for a cliff: the rule is judged on the rounds with
the CPUs near (a size needs PLACED_MIN of them), the far rounds' drop and the all-rounds
drop are reported beside it (see placed_drop);
INVALID when an SMC run moved no bytes over shared memory (the stats file proves it);
ERROR(k/n) when k of n runs of either mode gave no figure (crash, hang, parse failure).
"""
import argparse
import csv
import json
import math
import statistics
import sys

# (workload prefix, metric) -> (better, kind, value)
#   kind "ratio": SMC/TCP ratio compared with value (>= when higher is better, else <=)
#   kind "smc":   the SMC median itself compared with value (<=)
#   kind "smc_min": the SMC median itself compared with value (>=); "N" = the workload's N
#   kind None:    reported, no target
TARGETS = [
    ("sockperf_tp_64000", "MBps", "higher", "ratio", 3.0),
    ("sockperf_pp_14", "p50_us", "lower", "ratio", 0.25),
    ("sockperf_pp_14", "p99_us", "lower", None, None),
    ("redis_c50_d1024_P16", "SET_rps", "higher", "ratio", 1.6),
    ("redis_c50_d1024_P16", "GET_rps", "higher", "ratio", 1.6),
    ("redis_c50_d1024", "SET_rps", "higher", "ratio", 1.6),
    ("redis_c50_d1024", "GET_rps", "higher", "ratio", 1.6),
    ("nginx_wrk_w", "rps", "higher", "ratio", 1.5),
    ("memcached_memcslap", "get_ops", "higher", None, None),
    ("memcached_memcslap", "set_ops", "higher", None, None),
    # every connection upgraded (SMC_SHORT_CONN_US=0): the cost of one SMC setup
    ("crr_upgrade_every_conn", "cycles_per_s", "higher", None, None),
    ("crr_upgrade_every_conn", "errors", "lower", "smc", 0),
    ("crr", "cycles_per_s", "higher", "ratio", 1.0),
    ("crr", "errors", "lower", "smc", 0),
    ("cpu_per_gib_64k", "cpu_s_per_GiB", "lower", "ratio", 0.5),
    ("idle_conns_", "connections_open", "higher", "smc_min", "N"),
    ("idle_conns_", "pss_kib_per_conn_worst_side", "lower", "smc", 64),
    ("idle_conns_", "pss_kib_per_conn_client", "lower", None, None),
    ("idle_conns_", "pss_kib_per_conn_server", "lower", None, None),
    ("idle_conns_", "fds_per_conn", "lower", None, None),
    ("idle_conns_", "process_pairs", "lower", None, None),
    # "without burning CPU when idle": both processes, 10k idle connections, 1 s
    ("idle_conns_", "idle_cpu_pct", "lower", "smc", 1.0),
    # deployed servers (bench/programs.sh): never slower than over TCP
    ("nginx_proxy_keepalive", "rps", "higher", "ratio", 1.0),
    ("apache_ab_keepalive", "rps", "higher", "ratio", 1.0),
    ("apache_ab_conn_per_request", "rps", "higher", "ratio", 1.0),
    ("pgbench_tpcb_c4", "tps", "higher", "ratio", 1.0),
    ("pgbench_select_c4", "tps", "higher", "ratio", 1.0),
    ("node_http_keepalive", "rps", "higher", "ratio", 1.0),
    ("node_http_conn_per_request", "rps", "higher", "ratio", 1.0),
    ("haproxy_http_keepalive", "rps", "higher", "ratio", 1.0),
    ("haproxy_tcp_keepalive", "rps", "higher", "ratio", 1.0),
    ("activate_stream", "MBps", "higher", "ratio", 1.0),
    ("oneshot_redis_cli", "conn_per_s", "higher", "ratio", 1.0),
    ("oneshot_plain_server", "conn_per_s", "higher", "ratio", 1.0),
    # more busy processes than CPUs (bench/run --load)
    ("redis_oversub_4c_2s", "rps", "higher", "ratio", 1.0),
]

# Under a busy loop per CPU (bench/run --load, rows WORKLOAD@LOAD): these targets replace
# the idle ones; every other ratio row must at least not lose against TCP (>= 1x, or
# <= 1x where lower is better). A loaded state not listed has only that floor.
LOAD_TARGETS = {
    "nice0": [
        ("sockperf_tp_64000", "MBps", "higher", "ratio", 3.0),
        ("sockperf_pp_14", "p50_us", "lower", "ratio", 0.10),
        ("redis_c50_d1024_P16", "SET_rps", "higher", "ratio", 1.0),
        ("redis_c50_d1024_P16", "GET_rps", "higher", "ratio", 1.0),
        ("redis_c50_d1024", "SET_rps", "higher", "ratio", 2.0),
        ("redis_c50_d1024", "GET_rps", "higher", "ratio", 2.0),
        ("nginx_wrk_w", "rps", "higher", "ratio", 1.5),
    ],
}

SWEEP_CLIFF = 0.10  # no size may lose more than 10% against the best smaller size
PLACED_MIN = 2  # rounds of one placement a size needs to be judged in that placement
PLACEMENTS = ("near", "far")


def split_load(workload):
    """'redis_c50_d1024@nice0' -> ('redis_c50_d1024', 'nice0'); no tag: 'idle'."""
    base, _, load = workload.partition("@")
    return base, load or "idle"


def target_for(workload, metric):
    base, load = split_load(workload)
    for prefix, m, better, kind, value in TARGETS:
        if base.startswith(prefix) and metric == m:
            if value == "N":  # the N in the workload's name, e.g. idle_conns_10000
                value = int(base[len(prefix):])
            if load != "idle":
                for lp, lm, lb, lk, lv in LOAD_TARGETS.get(load, []):
                    if base.startswith(lp) and metric == lm:
                        return lb, lk, lv
                if kind == "ratio":  # the floor: not worse than TCP
                    return better, kind, 1.0
            return better, kind, value
    return "higher", None, None


def load_raw(path):
    """-> {(workload, metric, mode): [ {round, value, valid, note} ]}"""
    runs = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                value = float(row["value"])
            except ValueError:
                value = math.nan
            runs.setdefault((row["workload"], row["metric"], row["mode"]), []).append({
                "round": int(row["round"]),
                "value": value,
                "valid": row["valid"] == "1" and not math.isnan(value),
                "note": row["note"].strip(),
            })
    return runs


def median(samples):
    vals = [s["value"] for s in samples if s["valid"]]
    return statistics.median(vals) if vals else math.nan


def fmt(v, digits=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.{digits}f}".rstrip("0").rstrip(".")


def failures(samples):
    return sum(1 for s in samples if not s["valid"])


def invalid_notes(samples):
    return sorted({s["note"] for s in samples if not s["valid"] and s["note"] and
                   not s["note"].startswith("no-value")})


def other_notes(samples):
    return sorted({s["note"] for s in samples if s["valid"] and s["note"]})


def judge(better, kind, value, tcp, smc):
    ratio = smc / tcp if tcp and not math.isnan(tcp) and not math.isnan(smc) else math.nan
    if kind is None:
        return ratio, "-", "INFO"
    if kind == "ratio":
        text = (">= " if better == "higher" else "<= ") + f"{value:g}x TCP"
        if math.isnan(ratio):
            return ratio, text, "ERROR"
        ok = ratio >= value if better == "higher" else ratio <= value
    elif kind == "smc_min":
        text = f"SMC >= {value:g}"
        if math.isnan(smc):
            return ratio, text, "ERROR"
        ok = smc >= value
    else:
        text = f"SMC <= {value:g}"
        if math.isnan(smc):
            return ratio, text, "ERROR"
        ok = smc <= value
    return ratio, text, "PASS" if ok else "MISS"


def plain_rows(runs):
    rows = []
    # first-seen order of raw.csv: the order the workloads ran and recorded their metrics
    keys = list(dict.fromkeys((w, m) for (w, m, _) in runs if not w.startswith("sweep_")))
    for workload, metric in keys:
        tcp_s = runs.get((workload, metric, "tcp"), [])
        smc_s = runs.get((workload, metric, "smc"), [])
        better, kind, value = target_for(workload, metric)
        tcp, smc = median(tcp_s), median(smc_s)
        ratio, target, verdict = judge(better, kind, value, tcp, smc)
        bad = invalid_notes(smc_s)
        nfail = failures(tcp_s) + failures(smc_s)
        if bad:
            verdict = "INVALID"
        elif nfail:
            verdict = f"ERROR({nfail}/{len(tcp_s) + len(smc_s)})"
        rows.append({
            "workload": workload, "metric": metric, "better": better,
            "tcp_median": tcp, "smc_median": smc, "ratio": ratio, "target": target,
            "verdict": verdict, "n_tcp": len(tcp_s), "n_smc": len(smc_s),
            "notes": bad + other_notes(smc_s),
        })
    return rows


def placement(runs, workload, size, mode, far_ns):
    """-> {round: "near" | "far" | "moved"} from the probes before and after the size
    (rounds without both probes, or without two CPUs to probe, are left out)"""
    probe = {}
    for when in ("before", "after"):
        probe[when] = {x["round"]: x["value"] for x in
                       runs.get((workload, f"c2c_{when}@{size}", mode), [])
                       if x["valid"] and x["value"] > 0}
    out = {}
    for r in probe["before"].keys() & probe["after"].keys():
        far = [probe[w][r] > far_ns for w in ("before", "after")]
        out[r] = "far" if all(far) else ("near" if not any(far) else "moved")
    return out


def sweep_curves(runs, far_ns):
    """-> list of curves {rmb, read, sizes, tcp[], smc[], samples...}; curve["placed"][p]
    holds the SMC medians and spreads over the rounds of placement p alone"""
    curves = []
    rmbs = sorted({int(w.split("_")[1][3:]) for (w, _, mode) in runs
                   if w.startswith("sweep_") and mode == "smc"})
    for read in ("equal", "large"):
        for rmb in rmbs:
            smc_w = f"sweep_rmb{rmb}_{read}"
            tcp_w = "sweep_rmb0_equal" if read == "equal" else smc_w
            sizes = sorted({int(m.split("@")[1]) for (w, m, mode) in runs
                            if w == smc_w and mode == "smc"})
            if not sizes:
                continue
            curve = {"rmb": rmb, "read": read, "sizes": sizes, "tcp": [], "smc": [],
                     "smc_lo": [], "smc_hi": [],
                     "placed": {p: {"med": [], "lo": [], "hi": []} for p in PLACEMENTS},
                     "placed_rounds": {p: 0 for p in PLACEMENTS + ("moved",)},
                     "fail": 0, "n": 0, "invalid": set(), "notes": set()}
            for size in sizes:
                t = runs.get((tcp_w, f"MBps@{size}", "tcp"), [])
                s = runs.get((smc_w, f"MBps@{size}", "smc"), [])
                curve["tcp"].append(median(t))
                curve["smc"].append(median(s))
                vals = [x["value"] for x in s if x["valid"]]
                curve["smc_lo"].append(min(vals) if vals else math.nan)
                curve["smc_hi"].append(max(vals) if vals else math.nan)
                where = placement(runs, smc_w, size, "smc", far_ns)
                for p in where.values():
                    curve["placed_rounds"][p] += 1
                for p in PLACEMENTS:
                    pv = [x["value"] for x in s if x["valid"] and where.get(x["round"]) == p]
                    ok = len(pv) >= PLACED_MIN
                    curve["placed"][p]["med"].append(statistics.median(pv) if ok else math.nan)
                    curve["placed"][p]["lo"].append(min(pv) if ok else math.nan)
                    curve["placed"][p]["hi"].append(max(pv) if ok else math.nan)
                curve["fail"] += failures(t) + failures(s)
                curve["n"] += len(t) + len(s)
                curve["invalid"].update(invalid_notes(s))
                curve["notes"].update(other_notes(s))
            curves.append(curve)
    return curves


def worst_drop(sizes, values):
    """Largest loss of a size against the best smaller size: (fraction, size)."""
    best, worst = math.nan, (0.0, None)
    for size, v in zip(sizes, values):
        if math.isnan(v):
            continue
        if not math.isnan(best) and best > 0:
            drop = 1.0 - v / best
            if drop > worst[0]:
                worst = (drop, size)
        best = v if math.isnan(best) else max(best, v)
    return worst


def drop_reference(sizes, med, at):
    """Index of the best smaller size, the reference of worst_drop's drop at `at` (the
    first of equals); None when there is none."""
    i = sizes.index(at)
    prior = [j for j, m in enumerate(med[:i]) if not math.isnan(m)]
    return max(prior, key=lambda j: (med[j], -j)) if prior else None


def drop_separated(sizes, med, lo, hi, at):
    """Does the drop at size `at` stand out of the rounds' own spread: is its best round
    below the worst round of the best smaller size (the reference of worst_drop)? A
    cliff like seed 000's (a tenfold loss one byte further) always does; a median that
    moved by noise does not."""
    if at is None:
        return False
    ref = drop_reference(sizes, med, at)
    return ref is not None and hi[sizes.index(at)] < lo[ref]


def human(n):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def sweep_rows(curves):
    rows = []
    for c in curves:
        name = f"sweep rmb={human(c['rmb'])} read={'=write' if c['read'] == 'equal' else '3/4 RMB'}"
        ratios = [(s / t if t and not math.isnan(t) and not math.isnan(s) else math.nan, size)
                  for size, t, s in zip(c["sizes"], c["tcp"], c["smc"])]
        finite = [r for r in ratios if not math.isnan(r[0])]
        min_ratio, min_at = min(finite) if finite else (math.nan, None)
        # a drop beyond the rule counts only when it stands out of the rounds' spread;
        # otherwise it is reported, as NOISY, with the ranges in the sweep table
        smc_drop, smc_at, v2 = cliff_verdict(c["sizes"], c["smc"], c["smc_lo"], c["smc_hi"])
        tcp_drop, tcp_at = worst_drop(c["sizes"], c["tcp"])
        status = None
        if c["invalid"]:
            status = "INVALID"
        elif c["fail"]:
            status = f"ERROR({c['fail']}/{c['n']})"
        v1 = "ERROR" if math.isnan(min_ratio) else ("PASS" if min_ratio >= 1.0 else "MISS")
        placed = placed_drop(c)
        rows.append({
            "workload": name, "metric": f"min SMC/TCP (at {min_at} B)", "better": "higher",
            "tcp_median": math.nan, "smc_median": math.nan, "ratio": min_ratio,
            "target": ">= 1x TCP at every size", "verdict": status or v1,
            "n_tcp": c["n"], "n_smc": c["n"],
            "notes": sorted(c["invalid"]) + sorted(c["notes"]),
        })
        if placed:
            n = c["placed_rounds"]
            counts = (f"size-rounds with the CPUs near {n['near']}, far {n['far']}, moved "
                      f"during the size {n['moved']}")
            for p in PLACEMENTS:
                drop, at, verdict, unjudged = placed[p]
                judged = p == "near"
                rows.append({
                    "workload": name,
                    "metric": f"worst drop vs smaller sizes, CPUs {p} (SMC at {at or '-'} B)",
                    "better": "lower", "tcp_median": math.nan, "smc_median": 100 * drop,
                    "ratio": math.nan,
                    "target": f"SMC <= {100 * SWEEP_CLIFF:g}%" if judged else "-",
                    "verdict": (status or verdict) if judged else "INFO",
                    "n_tcp": c["n"], "n_smc": c["n"],
                    "notes": ([counts] if judged else []) +
                             ([f"{unjudged} of {len(c['sizes'])} sizes had fewer than "
                               f"{PLACED_MIN} rounds with the CPUs {p}"] if unjudged else []),
                })
        rows.append({
            "workload": name,
            "metric": f"worst drop vs smaller sizes{', all rounds' if placed else ''} (SMC at "
                      f"{smc_at or '-'} B, TCP at {tcp_at or '-'} B)",
            "better": "lower", "tcp_median": 100 * tcp_drop, "smc_median": 100 * smc_drop,
            "ratio": math.nan, "target": "-" if placed else f"SMC <= {100 * SWEEP_CLIFF:g}%",
            "verdict": "INFO" if placed else (status or v2), "n_tcp": c["n"], "n_smc": c["n"],
            "notes": [],
        })
    return rows


def cliff_verdict(sizes, med, lo, hi):
    """The 10% rule on one curve of medians with their rounds' spread: (worst drop, at,
    PASS / MISS / NOISY), MISS only for a drop that stands out of the spread."""
    drop, at = worst_drop(sizes, med)
    if drop <= SWEEP_CLIFF:
        return drop, at, "PASS"
    return drop, at, "MISS" if drop_separated(sizes, med, lo, hi, at) else "NOISY"


def placed_drop(c):
    """The cliff rule within each CPU placement: {placement: (drop, at, verdict, sizes
    not judged)}, or None when the curve has no placement probes (the all-rounds rule
    stands). A placement's verdict is PASS only when every size had PLACED_MIN rounds of
    it; a drop beyond the rule that stands out of those rounds' spread is a MISS; what is
    neither is NOISY. bench/run judges the near placement: far apart, the host's
    cross-die latency itself varies by a third between minutes (c2c 340-550 ns), more
    than the rule's 10%, so the far curve is reported beside it."""
    if not any(c["placed_rounds"][p] for p in PLACEMENTS):
        return None
    out = {}
    for p in PLACEMENTS:
        d = c["placed"][p]
        unjudged = sum(1 for m in d["med"] if math.isnan(m))
        drop, at, verdict = cliff_verdict(c["sizes"], d["med"], d["lo"], d["hi"])
        if verdict == "PASS" and unjudged:
            verdict = "NOISY"
        out[p] = (drop, at, verdict, unjudged)
    return out


def print_table(rows, out=sys.stdout):
    head = ["workload", "metric", "better", "TCP median", "SMC median", "SMC/TCP", "target",
            "verdict"]
    body = [[r["workload"], r["metric"], r["better"], fmt(r["tcp_median"]),
             fmt(r["smc_median"]), fmt(r["ratio"], 3) + ("x" if not math.isnan(r["ratio"]) else ""),
             r["target"], r["verdict"]] for r in rows]
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    print(line(head), file=out)
    print(line(["-" * w for w in widths]), file=out)
    for b in body:
        print(line(b), file=out)


def print_load_table(rows, out=sys.stdout):
    """One line per workload and metric: its SMC/TCP ratio idle and under each load,
    with the verdict of each against its target (LOAD_TARGETS)."""
    loads, cells, keys = [], {}, []
    for r in rows:
        base, load = split_load(r["workload"])
        if load not in loads:
            loads.append(load)
        if (base, r["metric"]) not in keys:
            keys.append((base, r["metric"]))
        ratio = r["ratio"]
        text = "-" if math.isnan(ratio) else fmt(ratio, 3) + "x"
        if r["verdict"] not in ("INFO",):
            text += " " + r["verdict"] + (f" ({r['target']})" if r["target"] != "-" else "")
        cells[(base, r["metric"], load)] = text
    head = ["workload", "metric"] + [f"SMC/TCP {l}" for l in loads]
    body = [[b, m] + [cells.get((b, m, l), "") for l in loads] for b, m in keys]
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
    line = lambda c: "  ".join(str(x).ljust(w) for x, w in zip(c, widths)).rstrip()
    print(line(head), file=out)
    print(line(["-" * w for w in widths]), file=out)
    for b in body:
        print(line(b), file=out)


def print_sweep(curves, out=sys.stdout):
    if not curves:
        return
    cols = []
    for c in curves:
        tag = f"{human(c['rmb'])}/{'eq' if c['read'] == 'equal' else 'big'}"
        cols.append((f"TCP {tag}", c["tcp"]))
        cols.append((f"SMC {tag}", c["smc"]))
    sizes = curves[0]["sizes"]
    print("\nmessage-size sweep, medians in MB/s (eq: read size = write size; big: read size"
          " = 3/4 of the RMB)", file=out)
    head = ["size"] + [n for n, _ in cols]
    body = [[str(s)] + [fmt(v[i], 4) for _, v in cols] for i, s in enumerate(sizes)]
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    for cells in [head] + body:
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)), file=out)


def write_plots(curves, outdir):
    if not curves:
        return
    sizes = curves[0]["sizes"]
    columns = []
    with open(f"{outdir}/sweep_medians.dat", "w") as f:
        names = []
        for c in curves:
            for mode in ("tcp", "smc"):
                names.append(f"{mode}_{c['rmb']}_{c['read']}")
                columns.append(c[mode])
        f.write("# size " + " ".join(names) + "\n")
        for i, s in enumerate(sizes):
            vals = ["nan" if math.isnan(col[i]) else f"{col[i]:.2f}" for col in columns]
            f.write(f"{s} " + " ".join(vals) + "\n")
    for read in ("equal", "large"):
        plots, col = [], 2
        seen_tcp = False
        for c in curves:
            for mode in ("tcp", "smc"):
                if c["read"] == read:
                    if mode == "tcp" and read == "equal":
                        # one TCP curve: read size = write size does not depend on the RMB
                        if not seen_tcp:
                            plots.append(f"'sweep_medians.dat' using 1:{col} with linespoints "
                                         f"dt 2 lw 2 lc rgb 'black' title 'TCP loopback'")
                            seen_tcp = True
                    else:
                        label = (f"{'TCP' if mode == 'tcp' else 'SMC'} "
                                 f"RMB {human(c['rmb'])}")
                        # same colour for one RMB size, dashed for TCP
                        color = 1 + sorted({x["rmb"] for x in curves}).index(c["rmb"])
                        style = ("dt 2" if mode == "tcp" else "dt 1") + f" lc {color}"
                        plots.append(f"'sweep_medians.dat' using 1:{col} with linespoints "
                                     f"{style} lw 2 title '{label}'")
                col += 1
        if not plots:
            continue
        title = ("read size = write size" if read == "equal"
                 else "read size = 3/4 of the RMB (> half)")
        with open(f"{outdir}/sweep_{read}.gp", "w") as f:
            f.write(f"""set terminal pngcairo size 1100,650 noenhanced
set output 'sweep_{read}.png'
set datafile missing 'nan'
set logscale x 2
set format x '%.0b%BB'
set xlabel 'write size (bytes)'
set ylabel 'throughput (MB/s, median)'
set title 'smc-preload vs TCP loopback: message-size sweep, {title}'
set key top left
set grid
set arrow from 117964, graph 0 to 117964, graph 1 nohead dt 3 lc rgb 'gray'
plot {', '.join(plots)}
""")


def nan_to_none(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [nan_to_none(v) for v in x]
    if isinstance(x, set):
        return sorted(x)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--machine")
    ap.add_argument("--quick", default="0")
    ap.add_argument("--load-table", action="store_true",
                    help="print only the idle/loaded ratio table (bench/run --load)")
    ap.add_argument("--far-ns", type=float, default=250,
                    help="c2c round trip (ns) above which CPUs 0 and 1 count as far apart")
    args = ap.parse_args()

    runs = load_raw(args.raw)
    curves = sweep_curves(runs, args.far_ns)
    rows = plain_rows(runs) + sweep_rows(curves)
    if args.load_table:
        print_load_table(plain_rows(runs))
        return

    print_table(rows)
    print_sweep(curves)
    notes = [(r["workload"], r["metric"], n) for r in rows for n in r["notes"]]
    if notes:
        print("\nnotes (from the SMC runs' stats files):")
        for w, m, n in notes:
            print(f"  {w} {m}: {n}")
    print("\nlatency and CPU rows: lower is better; SMC/TCP < 1 means SMC is better there.")

    with open(f"{args.out}/results.csv", "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "metric", "better", "tcp_median", "smc_median", "smc_tcp_ratio",
                     "target", "verdict", "n_tcp", "n_smc", "notes"])
        for r in rows:
            wr.writerow([r["workload"], r["metric"], r["better"], r["tcp_median"], r["smc_median"],
                         r["ratio"], r["target"], r["verdict"], r["n_tcp"], r["n_smc"],
                         "; ".join(r["notes"])])
    machine = open(args.machine).read().splitlines() if args.machine else []
    doc = {"machine": machine, "quick": args.quick == "1", "rows": rows,
           "sweep": [{k: c[k] for k in ("rmb", "read", "sizes", "tcp", "smc")} for c in curves]}
    with open(f"{args.out}/results.json", "w") as f:
        json.dump(nan_to_none(doc), f, indent=1)
    write_plots(curves, args.out)


if __name__ == "__main__":
    main()
