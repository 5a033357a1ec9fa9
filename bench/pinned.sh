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

# shellcheck source=bench/support/ab.sh
source bench/support/ab.sh
ab_args pinned.sh spawn spawn_tree pingpong_1 pingpong_100 yield chain http -- "$@"
wrk_duration=${WRK_DURATION:-3s}

command -v wrk >/dev/null || bash bench/tools.sh >&2 || exit 1
./zigw build install >&2 || exit 1
./zigw build install-weft-serve -Doptimize=ReleaseFast >&2 || exit 1

results=$(mktemp)
trap 'rm -f "$results"' EXIT

# scenario <label> <program> <metric key> <mode> <config words...>: one child.
scenario() {
    local label=$1 program=$2 key=$3 mode=$4 pinned=0
    shift 4
    wanted "$label" || return 0
    [[ $mode == pinned ]] && pinned=1
    ab_scenario "$results" "$label" "$mode" zig-out/bin "$program" "$key" runtime=weft \
        executors=2 pinned=$pinned "$@"
}

http() { # <mode>
    wanted http || return 0
    ab_http "$results" "$1" zig-out/bin "$wrk_duration" --mode single --executors 2 \
        --scheduling "$1"
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
ab_table "$results" stealing pinned spawn spawn_tree pingpong_1 pingpong_100 yield chain \
    http_req_per_s http_p99_us
