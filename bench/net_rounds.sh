#!/usr/bin/env bash
# The network rows (weft against Tokio/hyper and Go, 2 executors against 1), measured so that
# the answer is not the machine's drift: each server's echo and HTTP figures, ROUNDS times, the
# servers taking turns within a round (the order rotates by one each round, so no server always
# runs first or right after the same one), each cell the median of its ROUNDS figures with the
# spread beside it, and each ratio the median of the per-round ratios (a round's servers ran
# seconds apart).
#
#   bash bench/net_rounds.sh [ROUNDS [SERVER...]]      (default: 5 weft-1 weft-2)
#
# SERVER is one of
#   weft-1 weft-2     examples/echo.zig under WEFT_EXECUTORS=N; weft-serve --mode single
#                     --executors N
#   tokio-ct tokio-mt2  the Tokio echo server and hyper, current-thread or 2 workers
#   go-1 go-2         the Go echo server and net/http, GOMAXPROCS 1 or 2
#   base-1 base-2     weft-1/2 built from another checkout: WEFT_BASE_DIR=DIR, where DIR has
#                     run `./zigw build install-weft-serve install-example-echo
#                     -Doptimize=ReleaseFast` (a git worktree of the commit before a change)
# The first server named is the baseline of the ratio columns, e.g.
#   2 executors against 1:            bash bench/net_rounds.sh 7
#   against Tokio/hyper and Go:       bash bench/net_rounds.sh 5 tokio-ct weft-1 weft-2 tokio-mt2 go-1 go-2
#   a change's overhead:              WEFT_BASE_DIR=../base bash bench/net_rounds.sh 7 base-1 weft-1
# About 5 s per server per round with the defaults below.
#
# Rows (definitions in docs/BENCHMARKS.md, the harness of bench/peers/run.sh):
#   echo      the Go echo client, 10 connections x ECHO_ROUNDS x 64 B      msgs/s
#   http wrk  wrk -t1 -c50 -d WRK_DURATION, keep-alive                     req/s, p99
#   http ab   ab -n AB_REQUESTS -c 50, no keep-alive                       req/s
# The ratio columns compare every server with the first one named (at or above 1: at least
# as fast; for p99, at or below 1 is better).
#
# Why a script of its own: one run of bench/scheduler.sh or bench/compare.sh measures each
# network row once, and on this VM the same server's rate moves by 5-25 % within minutes,
# more than the differences the targets ask about. Result lines and server logs stay in
# $PEERS_LOG_DIR (default: a new temp dir). Load goes only to 127.0.0.1; every server is
# stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

usage() {
    echo "usage: bash bench/net_rounds.sh [ROUNDS [SERVER...]]   (ROUNDS a positive integer;" >&2
    echo "       SERVER: weft-1 weft-2 base-1 base-2 tokio-ct tokio-mt2 go-1 go-2)" >&2
    exit 2
}

rounds=${1:-5}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || usage
shift $(($# > 0 ? 1 : 0))
servers=("$@")
((${#servers[@]} > 0)) || servers=(weft-1 weft-2)
for server in "${servers[@]}"; do
    case $server in
        weft-1 | weft-2 | tokio-ct | tokio-mt2 | go-1 | go-2) ;;
        base-1 | base-2)
            [[ -x ${WEFT_BASE_DIR:-}/zig-out/bin/weft-serve ]] || {
                echo "net_rounds.sh: $server needs WEFT_BASE_DIR with a built weft-serve" >&2
                exit 2
            }
            ;;
        *) echo "net_rounds.sh: unknown server '$server'" >&2; usage ;;
    esac
done

export WRK_DURATION=${WRK_DURATION:-3s}
export AB_REQUESTS=${AB_REQUESTS:-5000}
export ECHO_ROUNDS=${ECHO_ROUNDS:-20000}

command -v wrk >/dev/null && command -v ab >/dev/null || bash bench/tools.sh >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1
./zigw build install-weft-serve install-example-echo -Doptimize=ReleaseFast >&2 || exit 1

PEERS_NO_MAIN=1 source bench/peers/run.sh
results=$log_dir/net_rounds.txt
: >"$results"
echo "result lines: $results" >&2

# measure <server>: its echo and HTTP result lines.
measure() {
    local server=$1 threads=${1##*-}
    case $server in
        weft-*)
            serve_and_measure echo "$server" \
                env WEFT_EXECUTORS="$threads" zig-out/bin/example-echo --port '{port}'
            serve_and_measure http "$server" \
                zig-out/bin/weft-serve --mode single --executors "$threads" --port '{port}'
            ;;
        base-*)
            serve_and_measure echo "$server" \
                env WEFT_EXECUTORS="$threads" "$WEFT_BASE_DIR/zig-out/bin/example-echo" --port '{port}'
            serve_and_measure http "$server" "$WEFT_BASE_DIR/zig-out/bin/weft-serve" \
                --mode single --executors "$threads" --port '{port}'
            ;;
        tokio-*)
            threads=${threads#mt}
            [[ $threads == ct ]] && threads=1
            serve_and_measure echo "$server" "$bin/peer-tokio" echo_server --port '{port}' --threads "$threads"
            serve_and_measure http "$server" "$bin/peer-tokio" http_server --port '{port}' --threads "$threads"
            ;;
        go-*)
            serve_and_measure echo "$server" "$bin/peer-go" echo_server --port '{port}' --threads "$threads"
            serve_and_measure http "$server" "$bin/peer-go" http_server --port '{port}' --threads "$threads"
            ;;
    esac
}

count=${#servers[@]}
for ((round = 1; round <= rounds; round++)); do
    for ((turn = 0; turn < count; turn++)); do
        server=${servers[$(((round - 1 + turn) % count))]}
        measure "$server" | sed "s/^/round=$round /" | tee -a "$results" >&2
    done
done

# The table: per row and server, the median (min-max) of its rounds, and the median of its
# per-round ratios to the first server.
awk -v rounds="$rounds" -v names="${servers[*]}" '
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
function add(row, value,    key) {
    key = row "|" field("runtime")
    list[key] = list[key] " " value
    at[key "|" field("round")] = value
}
field("status") != "ok" { failed[field("bench") " " field("runtime")]++; next }
field("bench") == "echo" { add("echo msgs/s", field("msgs_per_s")) }
field("bench") == "http" && field("tool") == "wrk" {
    add("http wrk req/s", field("req_per_s"))
    add("http wrk p99 us", field("p99_us"))
}
field("bench") == "http" && field("tool") == "ab" { add("http ab req/s", field("req_per_s")) }
END {
    n = split(names, server, " ")
    header = "| row (median of " rounds ", min-max) |"
    rule = "|---|"
    for (s = 1; s <= n; s++) { header = header " " server[s] " |"; rule = rule "---|" }
    for (s = 2; s <= n; s++) { header = header " " server[s] " / " server[1] " per round (median) |"; rule = rule "---|" }
    print ""
    print header
    print rule
    split("echo msgs/s|http wrk req/s|http wrk p99 us|http ab req/s", rows, "|")
    for (r = 1; r <= 4; r++) {
        line = "| " rows[r] " |"
        for (s = 1; s <= n; s++) {
            key = rows[r] "|" server[s]
            line = line (key in list ? sprintf(" %.0f (%s) |", median(list[key]), spread(list[key])) : " - |")
        }
        base = rows[r] "|" server[1]
        for (s = 2; s <= n; s++) {
            key = rows[r] "|" server[s]; paired = ""; shown = ""
            for (k = 1; k <= rounds; k++) {
                if (!((base "|" k) in at) || !((key "|" k) in at) || at[base "|" k] <= 0) continue
                ratio = at[key "|" k] / at[base "|" k]
                paired = paired " " ratio; shown = shown sprintf(" %.2f", ratio)
            }
            line = line (paired == "" ? " - |" : sprintf("%s (**%.3f**) |", shown, median(paired)))
        }
        print line
    }
    for (k in failed) printf "not ok: %s x%d (see the result lines)\n", k, failed[k]
}' "$results"
echo
echo "WRK_DURATION=$WRK_DURATION AB_REQUESTS=$AB_REQUESTS ECHO_ROUNDS=$ECHO_ROUNDS ROUNDS=$rounds"
