#!/usr/bin/env bash
# Issue 4's "2 executors >= 1 executor" on the network rows, measured so that the answer is not
# the machine's drift: weft's echo and HTTP servers with 1 and 2 executors, alternated ROUNDS
# times (order 1,2 then 2,1, so neither side always runs first), each cell the median of its
# ROUNDS figures with the spread beside it.
#
#   bash bench/executors_net.sh [ROUNDS]        (default 5; about 10 s per round)
#
# Rows, per runtime (definitions in docs/BENCHMARKS.md, the same as bench/scheduler.sh):
#   echo      examples/echo.zig under WEFT_EXECUTORS=N, the Go echo client, 10 connections x
#             ECHO_ROUNDS x 64 B                                         msgs/s
#   http wrk  weft-serve --mode single --executors N, wrk -t1 -c50 -d WRK_DURATION  req/s, p99
#   http ab   the same server, ab -n AB_REQUESTS -c 50, no keep-alive     req/s
# The ratio columns are 2 executors / 1 executor: of the medians, and per round (the two
# servers of one round ran seconds apart, so a round's ratio is the least touched by the
# machine's drift) with the median of those. At or above 1, 2 executors did at least as well
# (for p99, at or below 1 is better).
#
# Why a script of its own: one run of bench/scheduler.sh measures each network row once, and
# on this VM the same server's rate moves by 5-25 % within minutes, more than the difference
# being asked about. Result lines and server logs stay in $PEERS_LOG_DIR (default: a new temp
# dir). Load goes only to 127.0.0.1; every server is stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

rounds=${1:-5}
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: bash bench/executors_net.sh [ROUNDS]   (ROUNDS a positive integer)" >&2
    exit 2
fi

export WRK_DURATION=${WRK_DURATION:-3s}
export AB_REQUESTS=${AB_REQUESTS:-5000}
export ECHO_ROUNDS=${ECHO_ROUNDS:-20000}

command -v wrk >/dev/null && command -v ab >/dev/null || bash bench/tools.sh >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1
./zigw build install-weft-serve install-example-echo -Doptimize=ReleaseFast >&2 || exit 1

PEERS_NO_MAIN=1 source bench/peers/run.sh
results=$log_dir/executors_net.txt
: >"$results"
echo "result lines: $results" >&2

for ((round = 1; round <= rounds; round++)); do
    if ((round % 2)); then order="1 2"; else order="2 1"; fi
    for executors in $order; do
        {
            serve_and_measure echo "weft-$executors" \
                env WEFT_EXECUTORS="$executors" zig-out/bin/example-echo --port '{port}'
            serve_and_measure http "weft-$executors" \
                zig-out/bin/weft-serve --mode single --executors "$executors" --port '{port}'
        } | sed "s/^/round=$round /" | tee -a "$results" >&2
    done
done

# The table: medians (and min-max) per row and runtime, from the result lines.
awk '
function field(name,    i) {
    for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2)
    return ""
}
function median(list,    n, values, i, j, t) {
    n = split(list, values, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && values[j - 1] + 0 > values[j] + 0; j--) {
        t = values[j]; values[j] = values[j - 1]; values[j - 1] = t
    }
    if (n % 2) return values[(n + 1) / 2]
    return (values[n / 2] + values[n / 2 + 1]) / 2
}
function spread(list,    n, values, i, lo, hi) {
    n = split(list, values, " ")
    lo = hi = values[1] + 0
    for (i = 2; i <= n; i++) { if (values[i] + 0 < lo) lo = values[i] + 0; if (values[i] + 0 > hi) hi = values[i] + 0 }
    return sprintf("%.0f-%.0f", lo, hi)
}
function add(key, value) {
    list[key] = list[key] " " value; count[key]++
    at[key "|" field("round")] = value
}
field("status") != "ok" { failed[field("bench") " " field("runtime")]++; next }
field("bench") == "echo" { add("echo msgs/s|" field("runtime"), field("msgs_per_s")) }
field("bench") == "http" && field("tool") == "wrk" {
    add("http wrk req/s|" field("runtime"), field("req_per_s"))
    add("http wrk p99 us|" field("runtime"), field("p99_us"))
}
field("bench") == "http" && field("tool") == "ab" { add("http ab req/s|" field("runtime"), field("req_per_s")) }
END {
    print ""
    print "| row (median of " '"$rounds"' ", min-max) | weft 1 executor | weft 2 executors | 2 / 1 | 2 / 1 per round (median) |"
    print "|---|---|---|---|---|"
    split("echo msgs/s|http wrk req/s|http wrk p99 us|http ab req/s", rows, "|")
    for (r = 1; r <= 4; r++) {
        one = rows[r] "|weft-1"; two = rows[r] "|weft-2"
        if (!(one in list) || !(two in list)) { printf "| %s | - | - | - | - |\n", rows[r]; continue }
        m1 = median(list[one]); m2 = median(list[two])
        paired = ""; shown = ""
        for (round = 1; round <= '"$rounds"'; round++) {
            if (!((one "|" round) in at) || !((two "|" round) in at) || at[one "|" round] <= 0) continue
            ratio = at[two "|" round] / at[one "|" round]
            paired = paired " " ratio; shown = shown sprintf(" %.2f", ratio)
        }
        printf "| %s | %.0f (%s, n=%d) | %.0f (%s, n=%d) | %.3f | %s (%.3f) |\n", rows[r], m1,
            spread(list[one]), count[one], m2, spread(list[two]), count[two], (m1 > 0 ? m2 / m1 : 0),
            shown, (paired == "" ? 0 : median(paired))
    }
    for (k in failed) printf "not ok: %s x%d (see the result lines)\n", k, failed[k]
}' "$results"
echo
echo "WRK_DURATION=$WRK_DURATION AB_REQUESTS=$AB_REQUESTS ECHO_ROUNDS=$ECHO_ROUNDS ROUNDS=$rounds"
