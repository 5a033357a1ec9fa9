#!/usr/bin/env bash
# Pinned mode against work stealing, weft with 2 executors, by one command:
#
#   bash bench/pinned.sh [ROUNDS [SCENARIO...]]   (default 5 rounds, every scenario)
#
# `weft.Runtime.Options.pinned = true` gives each task a home executor when it is spawned
# (round robin) and never moves it; the default scheduler steals and migrates. Each scenario
# runs ROUNDS times in each mode, the two modes alternating (and which goes first alternating
# too), so that the machine's drift hits both alike; each cell is the median, in the
# scenario's own unit (lower is better but for HTTP, where it is req/s).
#
# Scenarios (definitions in docs/BENCHMARKS.md "The programs"; one child process each):
#   spawn        1M no-op tasks spawned, run and awaited           ns per spawn
#   spawn_tree   binary tree of 2^20 - 1 tasks, each awaiting two  ns per task
#   pingpong 1   one pair over weft.sync.Channel, 1M rounds        ns per round
#   pingpong 100 100 pairs, 1M rounds in all                       ns per round
#   yield        100 tasks x 10,000 yields                         ns per yield
#   chain        100 tasks in a ring, a token round it 10,000 times ns per wake
#   http         weft-serve --mode single --executors 2, wrk -t1 -c50 -d WRK_DURATION (3s)
#                (wrk shares the 2 cores)                          req/s and p99
#
# Builds what it needs first (`./zigw build install`, whose bench programs are ReleaseFast, and
# weft-serve in ReleaseFast; wrk from bench/tools.sh).
# Bounded: each child has a time limit; about 2 minutes with 5 rounds. Load goes only to
# 127.0.0.1 and the server is stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

usage="usage: bash bench/pinned.sh [ROUNDS [SCENARIO...]]
  ROUNDS    a positive count (default 5)
  SCENARIO  spawn spawn_tree pingpong_1 pingpong_100 yield chain http (default: all)"
rounds=${1:-5}
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "$usage" >&2
    exit 2
fi
shift $(($# > 0 ? 1 : 0))
all=(spawn spawn_tree pingpong_1 pingpong_100 yield chain http)
selected=("$@")
((${#selected[@]} > 0)) || selected=("${all[@]}")
for name in "${selected[@]}"; do
    if [[ " ${all[*]} " != *" $name "* ]]; then
        echo "pinned.sh: unknown scenario '$name'" >&2
        echo "$usage" >&2
        exit 2
    fi
done
wanted() { [[ " ${selected[*]} " == *" $1 "* ]]; }
wrk_duration=${WRK_DURATION:-3s}

command -v wrk >/dev/null || bash bench/tools.sh >&2 || exit 1
./zigw build install >&2 || exit 1
./zigw build install-weft-serve -Doptimize=ReleaseFast >&2 || exit 1

results=$(mktemp)
trap 'rm -f "$results"' EXIT

# scenario <label> <program> <metric key> <config words...>: one child, one "label mode value".
scenario() {
    local label=$1 program=$2 key=$3 mode=$4
    shift 4
    local pinned=0 line value
    wanted "$label" || return 0
    [[ $mode == pinned ]] && pinned=1
    line=$(timeout -k 5 60 "zig-out/bin/bench-$program" --child runtime=weft executors=2 \
        pinned=$pinned "$@" 2>&1 | tail -n 1)
    value=$(grep -o "$key=[0-9.]*" <<<"$line" | cut -d= -f2)
    echo "$label $mode ${value:-failed}" >>"$results"
}

http() { # <mode>: weft-serve under wrk; records req/s and p99 (us)
    local mode=$1 port=$((20000 + RANDOM % 20000)) pid out rps p99
    wanted http || return 0
    zig-out/bin/weft-serve --mode single --executors 2 --scheduling "$mode" \
        --port "$port" >/dev/null 2>&1 &
    pid=$!
    sleep 0.5
    out=$(timeout -k 5 60 wrk -t1 -c50 -d"$wrk_duration" --latency "http://127.0.0.1:$port/" 2>&1)
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rps=$(awk '/Requests\/sec/ { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { v = $2; if (v ~ /ms$/) { sub(/ms/, "", v); v *= 1000 }
        else if (v ~ /us$/) sub(/us/, "", v); else if (v ~ /s$/) { sub(/s/, "", v); v *= 1e6 }
        print v }' <<<"$out")
    echo "http_req_per_s $mode ${rps:-failed}" >>"$results"
    echo "http_p99_us $mode ${p99:-failed}" >>"$results"
}

for ((round = 1; round <= rounds; round++)); do
    if ((round % 2)); then modes="stealing pinned"; else modes="pinned stealing"; fi
    for mode in $modes; do
        scenario spawn spawn ns_per_spawn "$mode" stack=default tasks=1000000
        scenario spawn_tree spawn_tree ns_per_task "$mode" depth=20
        scenario pingpong_1 pingpong ns_per_round "$mode" channel=weft_channel pairs=1 \
            rounds=1000000
        scenario pingpong_100 pingpong ns_per_round "$mode" channel=weft_channel pairs=100 \
            rounds=1000000
        scenario yield yield ns_per_yield "$mode" tasks=100 yields=10000
        scenario chain chain ns_per_wake "$mode" tasks=100 laps=10000
        http "$mode"
    done
    echo "pinned.sh: round $round of $rounds done" >&2
done

# The table: median per scenario and mode, and pinned / stealing.
echo "| scenario (2 executors) | stealing | pinned | pinned / stealing |"
echo "|---|---|---|---|"
for label in spawn spawn_tree pingpong_1 pingpong_100 yield chain http_req_per_s http_p99_us; do
    awk -v label="$label" '
        function median(values, n,    i, j, t) {
            for (i = 2; i <= n; i++)
                for (j = i; j > 1 && values[j - 1] > values[j]; j--) {
                    t = values[j]; values[j] = values[j - 1]; values[j - 1] = t
                }
            return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
        }
        $1 == label && $3 ~ /^[0-9.]+$/ {
            if ($2 == "stealing") s[++ns] = $3; else p[++np] = $3
        }
        END {
            if (ns + np == 0) exit # not selected
            if (ns == 0 || np == 0) { printf "| %s | failed | failed | - |\n", label; exit }
            ms = median(s, ns); mp = median(p, np)
            printf "| %s | %.1f | %.1f | %.2f |\n", label, ms, mp, mp / ms
        }' "$results"
done
