#!/usr/bin/env bash
# What weft.Metrics' counting costs, by one command:
#
#   bash bench/metrics_cost.sh [ROUNDS [SCENARIO...]]   (default 5 rounds, every scenario)
#
# Builds the five benchmarks and weft-serve twice, ReleaseFast: as they are (counters on, the
# default) into zig-out/, and with -Dmetrics=false (every counter compiled out) into
# zig-out/metrics-off/. Each scenario runs ROUNDS times on each build, the two alternating (and
# which goes first alternating too); each cell is the median, in the scenario's unit (lower is
# better but for req/s). The rows where counting happens most: one executor, so every spawn,
# switch, poll and timer is counted on the path measured.
#
# Scenarios (definitions in docs/BENCHMARKS.md "The programs"; one child process each):
#   spawn      1M no-op tasks spawned, run and awaited            ns per spawn
#   pingpong   one pair over weft.sync.Channel, 1M rounds         ns per round
#   yield      100 tasks x 10,000 yields                          ns per yield
#   chain      100 tasks in a ring, a token round it 10,000 times ns per wake
#   lane       a weft.Lane named "bench" (so reported, and timing every job for its
#              histograms), 2 workers, one fiber calling a no-op job 10,000 times in turn:
#              bench-lane's roundtrip_ok with named=1, the median of 10 iterations  ns per call
#   lane_unnamed  the same lane unnamed (not reported, no clock read)  ns per call
#              Both lane rows are bimodal on a loaded machine: a call either finds a worker
#              still polling (about 2 us) or wakes a parked one (20-30 us), whatever the build.
#   http       weft-serve --mode single --executors 1, wrk -t1 -c50 -d WRK_DURATION (3s)
# Bounded: each child has a time limit; about 2 minutes with 5 rounds. Load goes only to
# 127.0.0.1 and the server is stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

# shellcheck source=bench/support/ab.sh
source bench/support/ab.sh
ab_args metrics_cost.sh spawn pingpong yield chain lane lane_unnamed http -- "$@"
wrk_duration=${WRK_DURATION:-3s}

command -v wrk >/dev/null || bash bench/tools.sh >&2 || exit 1
off=zig-out/metrics-off
for metrics in true false; do
    prefix=zig-out
    [[ $metrics == false ]] && prefix=$off
    # Only the programs measured: a ReleaseFast build of every benchmark takes many minutes.
    ./zigw build install-bench-spawn install-bench-pingpong install-bench-yield \
        install-bench-chain install-bench-lane install-weft-serve -Doptimize=ReleaseFast \
        -Dmetrics=$metrics -p "$prefix" >&2 || exit 1
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT

scenario() { # <label> <program> <metric key> <mode> <config words...>
    local label=$1 program=$2 key=$3 mode=$4 bin=zig-out/bin
    shift 4
    wanted "$label" || return 0
    [[ $mode == off ]] && bin=$off/bin
    ab_scenario "$results" "$label" "$mode" "$bin" "$program" "$key" runtime=weft \
        executors=1 "$@"
}

http() { # <mode>
    local bin=zig-out/bin
    wanted http || return 0
    [[ $1 == off ]] && bin=$off/bin
    ab_http "$results" "$1" "$bin" "$wrk_duration" --mode single --executors 1
}

for ((round = 1; round <= rounds; round++)); do
    if ((round % 2)); then modes="off on"; else modes="on off"; fi
    for mode in $modes; do
        scenario spawn spawn ns_per_spawn "$mode" stack=default tasks=1000000
        scenario pingpong pingpong ns_per_round "$mode" channel=weft_channel pairs=1 \
            rounds=1000000
        scenario yield yield ns_per_yield "$mode" tasks=100 yields=10000
        scenario chain chain ns_per_wake "$mode" tasks=100 laps=10000
        scenario lane lane ns_per_job "$mode" via=lane row=roundtrip_ok rounds=10000 \
            iterations=10 lane_threads=2 named=1
        scenario lane_unnamed lane ns_per_job "$mode" via=lane row=roundtrip_ok rounds=10000 \
            iterations=10 lane_threads=2
        http "$mode"
    done
    echo "metrics_cost.sh: round $round of $rounds done" >&2
done

# Medians with the counters compiled out ("off") and in ("on"), and on / off.
ab_table "$results" off on spawn pingpong yield chain lane lane_unnamed http_req_per_s \
    http_p99_us
