#!/usr/bin/env bash
# The sync/channel rows of weft (bench/sync.zig) and Tokio (bench/peers/tokio/src/sync.rs) in
# one run, 1 and 2 threads each, then a table that puts them side by side:
#
#   row  weft-1  tokio-ct  ratio  weft-2  tokio-mt2  ratio  threads_used(weft-2)
#
# ns per op; ratio = Tokio / weft (above 1: weft is faster); a row whose check failed shows its
# status (lost, failed, timeout) instead of a number. The `_std` rows (std's Io.RwLock on weft)
# are compared with Tokio's row of the same name without `_std`. The raw result lines come
# first, so a recorded run keeps every field (alloc_bytes, peak_rss_kib, ...).
#
# Usage: bench/sync_compare.sh [--row NAME]       (default: every row)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

row_args=()
if [[ ${1:-} == --row ]]; then
    [[ -n ${2:-} ]] || { echo "sync_compare.sh: --row needs a name" >&2; exit 2; }
    row_args=(--row "$2")
fi

./zigw build install -Doptimize=ReleaseFast >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1

lines=$(mktemp -t weft-sync.XXXXXX)
trap 'rm -f "$lines"' EXIT
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
    /^bench=/ {
        split($1, b, "="); row = b[2]
        runtime = field($0, "runtime")
        if (runtime == "weft") runtime = "weft-" field($0, "executors")
        if (runtime == "weft-2") spread[row] = field($0, "threads_used")
        if (!(row in seen) && runtime ~ /^weft/) { seen[row] = 1; order[++rows] = row }
        result[row, runtime] = cell($0)
    }
    END {
        printf "%-28s %9s %9s %6s %9s %9s %6s %8s\n", "row (ns/op)", "weft-1", "tokio-ct",
            "ratio", "weft-2", "tokio-mt2", "ratio", "threads"
        for (i = 1; i <= rows; i++) {
            row = order[i]; peer = row; sub(/_std$/, "", peer)
            w1 = result[row, "weft-1"]; t1 = result[peer, "tokio-ct"]
            w2 = result[row, "weft-2"]; t2 = result[peer, "tokio-mt2"]
            printf "%-28s %9s %9s %6s %9s %9s %6s %8s\n", row, w1, t1, ratio(w1, t1),
                w2, t2, ratio(w2, t2), spread[row]
        }
    }
' "$lines"
