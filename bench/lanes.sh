#!/usr/bin/env bash
# The blocking-lane benchmarks (swift-io's set), every runtime in one run, then a table.
#
#   bash bench/lanes.sh                 (ITERATIONS=10 ROUNDS=10000 RUNS=3 by default)
#
# Builds weft (ReleaseFast) and the peers (bench/peers/build.sh), then runs every row of
# bench/lane.zig (weft's `Lane`, `Lane.Sharded`, `Runtime.compute` and the same std.Io program
# on std.Io.Threaded with `io.concurrent`) and of bench/peers/tokio/src/lane.rs (Tokio's
# `spawn_blocking` on a multi_thread runtime with one worker per CPU, like weft's default
# executors). The rows and their definitions are in bench/lane.zig's header. Prints every
# result line, then the table: per row its median iteration (ns per call for the round trips,
# overhead per call for `sequential`, wall time per iteration for the rest; lower is better),
# the ratios weft Lane / Tokio and Sharded / Lane, and the targets checked (a trivial round
# trip <= 1.5 us and <= Tokio's spawn_blocking; Sharded faster than one Lane under contention).
# A row whose jobs were lost or returned a wrong result shows FAIL.
#
# Each program runs in a process of its own, and some rows settle per process into one of two
# speeds (the 1000:1 row: 15 or 20 ms, as the executors' idle search happens to line up with
# the lane's completions), so one process per cell decides a comparison by chance. The whole
# set therefore runs RUNS times, weft's and Tokio's alternating, and each cell is the median
# of its RUNS per-process medians.
#
# The figures move with whatever else runs on the machine: the load average is printed
# before and after; compare lines from the same run only.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

iterations=${ITERATIONS:-10}
rounds=${ROUNDS:-10000}
runs=${RUNS:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "lanes.sh: RUNS must be a count" >&2; exit 2; }
workers=$(nproc)
rows=(roundtrip_ok roundtrip_error sequential concurrent contention_10 contention_100 contention_1000)

./zigw build install -Doptimize=ReleaseFast >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1

lines=$(mktemp -t weft-lanes.XXXXXX)
trap 'rm -f "$lines"' EXIT
echo "lanes.sh: loadavg before $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((run = 1; run <= runs; run++)); do
    zig-out/bin/bench-lane --iterations "$iterations" --rounds "$rounds" | tee -a "$lines"
    for row in "${rows[@]}"; do
        out=$(timeout -k 5 120 bench/peers/bin/peer-tokio "lane_$row" --threads "$workers" \
            --iterations "$iterations" --rounds "$rounds")
        rc=$?
        if [[ -z $out ]]; then out="bench=lane_$row runtime=tokio via=spawn_blocking status=failed exit=$rc"; fi
        echo "$out" | tee -a "$lines"
    done
done
echo "lanes.sh: loadavg after $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo
awk -v order="${rows[*]}" '
function field(line, key,    n, i, parts, kv) {
    n = split(line, parts, " ")
    for (i = 1; i <= n; i++) {
        split(parts[i], kv, "=")
        if (kv[1] == key) return substr(parts[i], length(key) + 2)
    }
    return ""
}
function show(v, unit) {
    if (v == "") return "-"
    if (v == "FAIL") return "FAIL"
    return unit == "ms" ? sprintf("%.2f ms", v / 1e6) : sprintf("%.0f ns", v)
}
function ratio(a, b) {
    return (a == "" || b == "" || a == "FAIL" || b == "FAIL" || b <= 0) ? "-" : sprintf("%.2f", a / b)
}
{
    row = substr(field($0, "bench"), 6)
    via = field($0, "via")
    unit[row] = (row ~ /^roundtrip/ || row == "sequential") ? "ns" : "ms"
    key = row ~ /^roundtrip/ ? "ns_per_job" : row == "sequential" ? "overhead_ns" : "wall_ns"
    if (field($0, "status") != "ok") failed[row, via] = 1
    else figure[row, via, ++count[row, via]] = field($0, key) + 0
}
END {
    # Each cell: the median of its runs, FAIL if any run failed.
    for (cell in count) {
        if (cell in failed) continue
        n = count[cell]
        for (i = 1; i <= n; i++) v[i] = figure[cell, i]
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
        value[cell] = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    for (cell in failed) value[cell] = "FAIL"
    fmt = "| %-16s | %-22s | %11s | %11s | %11s | %11s | %11s | %10s | %13s |\n"
    printf fmt, "row", "metric (median)", "weft Lane", "weft Sharded", "weft compute", \
        "Tokio", "Threaded", "Lane/Tokio", "Sharded/Lane"
    printf "|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "---", "---", "---", "---", "---", "---", "---", "---", "---"
    n = split(order, rows, " ")
    for (i = 1; i <= n; i++) {
        r = rows[i]
        metric = r ~ /^roundtrip/ ? "per call" : r == "sequential" ? "overhead per call" : "wall per iteration"
        printf fmt, r, metric, show(value[r, "lane"], unit[r]), show(value[r, "sharded"], unit[r]), \
            show(value[r, "compute"], unit[r]), show(value[r, "spawn_blocking"], unit[r]), \
            show(value[r, "concurrent"], unit[r]), ratio(value[r, "lane"], value[r, "spawn_blocking"]), \
            ratio(value[r, "sharded"], value[r, "lane"])
    }
    print ""
    rt = value["roundtrip_ok", "lane"]; tk = value["roundtrip_ok", "spawn_blocking"]
    ok = (rt != "FAIL" && rt != "" && rt + 0 <= 1500)
    printf "target: trivial round trip <= 1.5 us: %s (%s)\n", ok ? "met" : "NOT met", show(rt, "ns")
    ok = (rt != "FAIL" && tk != "FAIL" && rt != "" && tk != "" && rt + 0 <= tk + 0)
    printf "target: trivial round trip <= Tokio spawn_blocking: %s (%s vs %s)\n", ok ? "met" : "NOT met", show(rt, "ns"), show(tk, "ns")
    split("contention_100 contention_1000", cs, " ")
    for (j = 1; j <= 2; j++) {
        s = value[cs[j], "sharded"]; l = value[cs[j], "lane"]
        ok = (s != "FAIL" && l != "FAIL" && s != "" && l != "" && s + 0 < l + 0)
        printf "target: sharded beats single at %s: %s (%s vs %s)\n", cs[j], ok ? "met" : "NOT met", show(s, "ms"), show(l, "ms")
    }
}' "$lines"
