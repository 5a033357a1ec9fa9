#!/usr/bin/env bash
# What weft.Metrics' counting costs, in instructions: a count that neither a busy machine nor
# this VM's bimodal timings (runs of one build falling 30-50 % apart) can blur.
#
#   bash bench/metrics_instructions.sh
#
# Builds spawn, pingpong, yield, chain and weft-serve ReleaseFast twice, as
# bench/metrics_cost.sh does (counters in: zig-out/; -Dmetrics=false: zig-out/metrics-off/),
# runs each task program in one process under callgrind (valgrind, installed from apt when
# missing) with one executor at two sizes, and prints the instructions per operation of each
# build: the difference between the two runs over the difference of their sizes, so that
# start-up and shutdown cancel out. The HTTP row: weft-serve (one executor) under callgrind
# for 5 s of `wrk -t1 -c50` on 127.0.0.1, its instructions over the requests it served
# (callgrind has no io_uring, so the server runs on epoll there). The wall-clock cost is
# bench/metrics_cost.sh's, on a quiet machine. About 10 minutes with the builds.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! command -v valgrind >/dev/null; then
    sudo=""
    if ((EUID != 0)); then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        valgrind >&2
fi

off=zig-out/metrics-off
for metrics in true false; do
    prefix=zig-out
    [[ $metrics == false ]] && prefix=$off
    ./zigw build install-bench-spawn install-bench-pingpong install-bench-yield \
        install-bench-chain install-weft-serve -Doptimize=ReleaseFast -Dmetrics=$metrics \
        -p "$prefix" >&2
done

# instructions <bin> <program> <config...>: what callgrind counted for one measurement child.
instructions() {
    local bin=$1 program=$2
    shift 2
    timeout 900 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$bin/bench-$program" --child runtime=weft executors=1 "$@" 2>&1 |
        awk '/Collected/ { print $4 }'
}

# row <label> <program> <size key> <small> <large> <operations per unit of size> <config...>:
# instructions per operation.
row() {
    local label=$1 program=$2 key=$3 small=$4 large=$5 scale=$6
    shift 6
    local cells=() per
    for bin in "$off/bin" zig-out/bin; do
        local a b
        a=$(instructions "$bin" "$program" "$@" "$key=$small")
        b=$(instructions "$bin" "$program" "$@" "$key=$large")
        per=$(awk -v a="$a" -v b="$b" -v s="$small" -v l="$large" -v k="$scale" \
            'BEGIN { printf "%.1f", (b - a) / ((l - s) * k) }')
        cells+=("$per")
    done
    awk -v label="$label" -v out="${cells[0]}" -v in_="${cells[1]}" \
        'BEGIN { printf "| %s | %s | %s | %.3f |\n", label, out, in_, in_ / out }'
}

# http_instructions <bin>: instructions per request weft-serve ran under 5 s of wrk.
http_instructions() {
    local bin=$1 port=$((20000 + RANDOM % 20000)) log pid requests total
    log=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin/weft-serve" --mode single \
        --executors 1 --port "$port" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        grep -q listening "$log" && break
        sleep 0.3
    done
    timeout -k 5 60 wrk -t1 -c50 -d5s "http://127.0.0.1:$port/" >/dev/null 2>&1
    kill -INT "$pid"
    wait "$pid" 2>/dev/null || true
    requests=$(grep -o ' requests=[0-9]*' "$log" | head -n 1 | cut -d= -f2)
    total=$(awk '/Collected/ { print $4 }' "$log")
    rm -f "$log"
    awk -v t="$total" -v r="$requests" 'BEGIN { printf "%.1f", t / r }'
}

command -v wrk >/dev/null || bash bench/tools.sh >&2

echo "| instructions per operation, 1 executor | counters out | counters in | in / out |"
echo "|---|---|---|---|"
# 100k and 300k operations each: spawns, rounds, yields of 100 tasks, wakes round a 100-task ring.
row "spawn a no-op task" spawn tasks 100000 300000 1 stack=default
row "ping-pong round" pingpong rounds 100000 300000 1 channel=weft_channel pairs=1
row "yield" yield yields 1000 3000 100 tasks=100
row "chained wake-up" chain laps 1000 3000 100 tasks=100
http_out=$(http_instructions "$off/bin")
http_in=$(http_instructions zig-out/bin)
awk -v out="$http_out" -v in_="$http_in" \
    'BEGIN { printf "| HTTP request (epoll) | %s | %s | %.3f |\n", out, in_, in_ / out }'
