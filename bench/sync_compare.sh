#!/usr/bin/env bash
# The sync/channel rows of weft (bench/sync.zig) and Tokio (bench/peers/tokio/src/sync.rs) in
# one run, 1 and 2 threads each, then a table that puts them side by side:
#
#   row  weft-1  tokio-ct  ratio  weft-2  tokio-mt2  ratio  threads
#
# ns per op; ratio = Tokio / weft (above 1: weft is faster); a row whose check failed shows its
# status (lost, failed, timeout) instead of a number. The `_std` rows (std's Io.RwLock on weft)
# are compared with Tokio's row of the same name without `_std`. The raw result lines come
# first, so a recorded run keeps every field (alloc_bytes, peak_rss_kib, ...).
#
# A row runs for 1 to 60 ms, so one run of it is at the mercy of where the scheduler of either
# runtime happens to place its tasks: with 2 threads some rows are bimodal (all tasks on one
# thread, or spread over both). `--runs N` (default 5) runs both sides N times, alternating,
# and every cell is the median of its N figures; a cell is a status instead if any run of it
# failed. `threads` is how many of weft-2's N runs spread the row's tasks over both threads.
# A second table gives the bytes each side allocated in the timed region (medians too).
#
# Usage: bench/sync_compare.sh [--row NAME] [--runs N]     (default: every row, 5 runs)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

row_args=()
runs=5
while (($# > 0)); do
    case $1 in
        --row)
            [[ -n ${2:-} ]] || { echo "sync_compare.sh: --row needs a name" >&2; exit 2; }
            row_args=(--row "$2")
            shift 2
            ;;
        --runs)
            [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "sync_compare.sh: --runs needs a count" >&2; exit 2; }
            runs=$2
            shift 2
            ;;
        *)
            echo "usage: bench/sync_compare.sh [--row NAME] [--runs N]" >&2
            exit 2
            ;;
    esac
done

./zigw build install -Doptimize=ReleaseFast >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1

lines=$(mktemp -t weft-sync.XXXXXX)
trap 'rm -f "$lines"' EXIT
for ((run = 1; run <= runs; run++)); do
    zig-out/bin/bench-sync "${row_args[@]}" | tee -a "$lines"
    if ((${#row_args[@]} > 0)); then
        peer_row=${row_args[1]%_std}
        for threads in 1 2; do
            label=$( ((threads == 1)) && echo tokio-ct || echo tokio-mt2)
            timeout -k 5 60 bench/peers/bin/peer-tokio "$peer_row" --threads "$threads" 2>/dev/null |
                grep '^bench=' || echo "bench=$peer_row runtime=$label status=failed"
        done | tee -a "$lines"
    else
        bash bench/peers/run.sh sync | tee -a "$lines"
    fi
done

echo
awk '
    # A cell: ns_per_op if the line says status=ok, else its status.
    function cell(line,    n, i, kv, status, ns) {
        n = split(line, fields, " ")
        for (i = 1; i <= n; i++) {
            split(fields[i], kv, "=")
            if (kv[1] == "status") status = kv[2]
            if (kv[1] == "ns_per_op") ns = kv[2]
        }
        return status == "ok" ? ns : status
    }
    function field(line, key,    n, i, kv) {
        n = split(line, fields, " ")
        for (i = 1; i <= n; i++) { split(fields[i], kv, "="); if (kv[1] == key) return kv[2] }
        return "-"
    }
    function ratio(weft, tokio) {
        if (weft !~ /^[0-9.]+$/ || tokio !~ /^[0-9.]+$/ || weft == 0) return "-"
        return sprintf("%.2f", tokio / weft)
    }
    # The median of the figures of a cell, or the first status that was not ok.
    function median(key) { return median_of(figure, count, key) }
    function median_of(figures, counts, key,    n, i, j, v, t) {
        if (key in failed) return failed[key]
        n = counts[key]
        if (n == 0) return ""
        for (i = 1; i <= n; i++) v[i] = figures[key, i]
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
        return n % 2 ? v[(n + 1) / 2] : sprintf("%.1f", (v[n / 2] + v[n / 2 + 1]) / 2)
    }
    /^bench=/ {
        split($1, b, "="); row = b[2]
        runtime = field($0, "runtime")
        if (runtime == "weft") runtime = "weft-" field($0, "executors")
        if (runtime == "weft-2") {
            runs[row]++
            if (field($0, "threads_used") + 0 >= 2) spread[row]++
        }
        if (!(row in seen) && runtime ~ /^weft/) { seen[row] = 1; order[++rows] = row }
        key = row SUBSEP runtime
        value = cell($0)
        if (value ~ /^[0-9.]+$/) figure[key, ++count[key]] = value + 0
        else if (!(key in failed)) failed[key] = value
        bytes = field($0, "alloc_bytes")
        if (bytes ~ /^[0-9]+$/) alloc[key, ++alloc_count[key]] = bytes + 0
    }
    END {
        printf "%-28s %9s %9s %6s %9s %9s %6s %8s\n", "row (ns/op)", "weft-1", "tokio-ct",
            "ratio", "weft-2", "tokio-mt2", "ratio", "threads"
        for (i = 1; i <= rows; i++) {
            row = order[i]; peer = row; sub(/_std$/, "", peer)
            w1 = median(row SUBSEP "weft-1"); t1 = median(peer SUBSEP "tokio-ct")
            w2 = median(row SUBSEP "weft-2"); t2 = median(peer SUBSEP "tokio-mt2")
            printf "%-28s %9s %9s %6s %9s %9s %6s %8s\n", row, w1, t1, ratio(w1, t1),
                w2, t2, ratio(w2, t2), (spread[row] + 0) "/" runs[row]
        }
        printf "\n%-28s %9s %9s %9s %9s\n", "row (bytes allocated)", "weft-1", "tokio-ct",
            "weft-2", "tokio-mt2"
        for (i = 1; i <= rows; i++) {
            row = order[i]; peer = row; sub(/_std$/, "", peer)
            printf "%-28s %9s %9s %9s %9s\n", row, median_of(alloc, alloc_count, row SUBSEP "weft-1"),
                median_of(alloc, alloc_count, peer SUBSEP "tokio-ct"),
                median_of(alloc, alloc_count, row SUBSEP "weft-2"),
                median_of(alloc, alloc_count, peer SUBSEP "tokio-mt2")
        }
    }
' "$lines"
