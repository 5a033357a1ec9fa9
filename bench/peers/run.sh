#!/usr/bin/env bash
# Runs the peer benchmarks (Tokio/hyper and Go) and prints one result line per measurement on
# stdout, in the format of weft's harness:
#
#   bench=<name> runtime=<rt> <config...> status=ok|lost|failed|timeout|crashed <results...> peak_rss_kib=<n>
#
# Usage: bench/peers/run.sh [scenario...]     (default: all, in this order)
#   sleep spawn pingpong yield spawn_tree chain sync lane echo http
#
# Builds first (build.sh, quick when up to date). Build messages and server logs go to stderr
# or to $PEERS_LOG_DIR, so stdout holds only result lines. Every program runs under a time
# limit; load goes only to 127.0.0.1. Sizes can be lowered for a quick look:
#   SLEEP_TASKS="10000"  ECHO_ROUNDS=5000  WRK_DURATION=3s  AB_REQUESTS=2000
#
# To compare another server (weft's), call serve_and_measure with its command line, writing
# {port} where the port goes, e.g. in a script that sources this one with PEERS_NO_MAIN=1:
#   serve_and_measure http weft-1 zig-out/bin/weft-http --port {port} --executors 1
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$here/bin
log_dir=${PEERS_LOG_DIR:-$(mktemp -d -t weft-peers.XXXXXX)}
mkdir -p "$log_dir"

SLEEP_TASKS=${SLEEP_TASKS:-"10000 100000 1000000"}
ECHO_CONNS=${ECHO_CONNS:-10}
ECHO_ROUNDS=${ECHO_ROUNDS:-50000}
ECHO_SIZE=${ECHO_SIZE:-64}
ECHO_TIMEOUT_S=${ECHO_TIMEOUT_S:-60}
WRK_DURATION=${WRK_DURATION:-10s}
WRK_CONNS=${WRK_CONNS:-50}
AB_REQUESTS=${AB_REQUESTS:-10000}
AB_CONNS=${AB_CONNS:-50}

# ---------------------------------------------------------------------------------------------
# Running one program

# run_one <bench> <runtime> <limit_s> <command...>
# Runs the command under a time limit and prints its result line; if it printed none, prints a
# line saying how it ended (timeout, crash, failure).
run_one() {
    local bench=$1 runtime=$2 limit=$3
    shift 3
    local out rc line
    out=$(timeout -k 5 "$limit" "$@" 2>>"$log_dir/stderr.log")
    rc=$?
    line=$(grep '^bench=' <<<"$out" | tail -n 1)
    if [[ -n $line ]]; then
        echo "$line"
    elif ((rc == 124 || rc == 137)); then
        echo "bench=$bench runtime=$runtime status=timeout timeout_s=$limit"
    elif ((rc > 128)); then
        echo "bench=$bench runtime=$runtime status=crashed signal=SIG$(kill -l $((rc - 128)))"
    else
        echo "bench=$bench runtime=$runtime status=failed exit=$rc"
    fi
}

# each_runtime <bench> <limit_s> <scenario args...>: tokio-ct, tokio-mt2, go-1, go-2.
each_runtime() {
    local bench=$1 limit=$2
    shift 2
    run_one "$bench" tokio-ct "$limit" "$bin/peer-tokio" "$@" --threads 1
    run_one "$bench" tokio-mt2 "$limit" "$bin/peer-tokio" "$@" --threads 2
    run_one "$bench" go-1 "$limit" "$bin/peer-go" "$@" --threads 1
    run_one "$bench" go-2 "$limit" "$bin/peer-go" "$@" --threads 2
}

# ---------------------------------------------------------------------------------------------
# Servers

# A port on 127.0.0.1 that nothing listens on (probed with a connect; racy, but each server is
# started right after and fails loudly if the port was taken meanwhile). Taken below the
# kernel's ephemeral range: after a load run, thousands of client sockets sit in TIME_WAIT on
# ephemeral ports, and a listener cannot bind over them (they lack SO_REUSEADDR).
free_port() {
    local port tries low=32768
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    ((low > 12000)) || low=32768
    for ((tries = 0; tries < 200; tries++)); do
        port=$((10000 + RANDOM % (low - 10000)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# wait_listening <pid> <port>: until the port accepts a connection (10 s at most) while the
# server process is alive.
wait_listening() {
    local pid=$1 port=$2 tries
    for ((tries = 0; tries < 100; tries++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

# VmHWM of a live process, in KiB.
peak_rss_of() {
    awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

# Convert wrk's latency ("159.00us", "1.21ms", "2.00s") to microseconds.
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) u = n; else if (v ~ /ms$/) u = n * 1000; else if (v ~ /s$/) u = n * 1000000; else u = n
        printf "%.1f", u
    }'
}

# measure_wrk <name> <port>: wrk -t1 -c50 -d10s --latency (keep-alive).
measure_wrk() {
    local name=$1 port=$2 out rc rps p50 p99 requests errors status=ok
    out=$(timeout -k 5 60 wrk -t1 -c"$WRK_CONNS" -d"$WRK_DURATION" --latency --timeout 2s \
        "http://127.0.0.1:$port/" 2>&1)
    rc=$?
    echo "$out" >>"$log_dir/wrk-$name.log"
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    p50=$(awk '$1 == "50%" { print $2; exit }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2; exit }' <<<"$out")
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    # Socket errors (connect, read, write, timeout) plus non-2xx/3xx responses.
    errors=$(awk '/Socket errors:/ { gsub(",", ""); s += $4 + $6 + $8 + $10 }
                  /Non-2xx or 3xx responses:/ { s += $NF } END { print s + 0 }' <<<"$out")
    if ((rc != 0)) || [[ -z $rps || -z $p50 || -z $p99 ]]; then
        status="failed exit=$rc"
    elif ((errors > 0)); then
        status=failed
    fi
    echo "bench=http runtime=$name tool=wrk wrk_threads=1 conns=$WRK_CONNS duration=$WRK_DURATION keepalive=1" \
        "status=$status req_per_s=${rps:-0} p50_us=$(to_us "${p50:-0}") p99_us=$(to_us "${p99:-0}")" \
        "requests=${requests:-0} errors=$errors"
}

# measure_ab <name> <port>: ab -n 10000 -c 50 (HTTP/1.0, a new connection per request).
# ab's percentiles have a resolution of 1 ms.
measure_ab() {
    local name=$1 port=$2 out rc rps p50 p99 complete failed non2xx status=ok
    out=$(timeout -k 5 120 ab -q -n "$AB_REQUESTS" -c "$AB_CONNS" -s 10 "http://127.0.0.1:$port/" 2>&1)
    rc=$?
    echo "$out" >>"$log_dir/ab-$name.log"
    rps=$(awk '/^Requests per second:/ { print $4 }' <<<"$out")
    p50=$(awk '$1 == "50%" { print $2; exit }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2; exit }' <<<"$out")
    complete=$(awk '/^Complete requests:/ { print $3 }' <<<"$out")
    failed=$(awk '/^Failed requests:/ { print $3 }' <<<"$out")
    non2xx=$(awk '/^Non-2xx responses:/ { print $3 }' <<<"$out")
    if ((rc != 0)) || [[ -z $rps ]]; then
        status="failed exit=$rc"
    elif ((${failed:-0} > 0 || ${non2xx:-0} > 0 || ${complete:-0} != AB_REQUESTS)); then
        status=failed
    fi
    echo "bench=http runtime=$name tool=ab requests=$AB_REQUESTS conns=$AB_CONNS keepalive=0" \
        "status=$status req_per_s=${rps:-0} p50_us=$(( ${p50:-0} * 1000 )).0 p99_us=$(( ${p99:-0} * 1000 )).0" \
        "complete=${complete:-0} failed=$(( ${failed:-0} + ${non2xx:-0} ))"
}

# measure_echo <name> <port>: the Go echo client, 10 connections × 50k round trips × 64 B.
measure_echo() {
    local name=$1 port=$2
    run_one echo "$name" $((ECHO_TIMEOUT_S + 15)) "$bin/echo-client" --port "$port" --label "$name" \
        --conns "$ECHO_CONNS" --rounds "$ECHO_ROUNDS" --size "$ECHO_SIZE" --timeout "${ECHO_TIMEOUT_S}s"
}

# serve_and_measure <kind> <name> <command...>
# kind: http (wrk, then ab), echo (the Go echo client), or any <kind> for which the sourcing
# script defines measure_<kind> <name> <port> <server pid>. Starts the server command with every
# "{port}" in its arguments replaced by a free port on 127.0.0.1, waits until it listens, runs
# the load, appends the server's peak RSS (VmHWM, read before it is stopped) to every line as
# peak_rss_kib, then stops the server (SIGTERM, SIGKILL after 2 s).
serve_and_measure() {
    local kind=$1 name=$2
    shift 2
    local port args=() arg pid lines rss
    port=$(free_port) || { echo "bench=$kind runtime=$name status=failed error=no_free_port"; return; }
    for arg in "$@"; do args+=("${arg//\{port\}/$port}"); done
    "${args[@]}" >>"$log_dir/server-$name.log" 2>&1 &
    pid=$!
    if ! wait_listening "$pid" "$port"; then
        echo "bench=$kind runtime=$name status=failed error=server_did_not_listen port=$port"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        return
    fi
    case $kind in
        http) lines=$(measure_wrk "$name" "$port"; measure_ab "$name" "$port") ;;
        echo) lines=$(measure_echo "$name" "$port") ;;
        *)
            if declare -F "measure_$kind" >/dev/null; then
                lines=$("measure_$kind" "$name" "$port" "$pid")
            else
                lines="bench=$kind runtime=$name status=failed error=unknown_kind"
            fi
            ;;
    esac
    rss=$(peak_rss_of "$pid")
    if ! kill -0 "$pid" 2>/dev/null; then
        lines=${lines//status=ok/status=crashed error=server_exited}
    fi
    while IFS= read -r line; do echo "$line peak_rss_kib=${rss:-0}"; done <<<"$lines"
    kill -TERM "$pid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# ---------------------------------------------------------------------------------------------
# Scenarios

scenario_sleep() {
    local tasks
    for tasks in $SLEEP_TASKS; do each_runtime sleep 60 sleep --tasks "$tasks"; done
}
scenario_spawn() { each_runtime spawn 60 spawn; }
scenario_pingpong() {
    each_runtime pingpong 60 pingpong --pairs 1
    each_runtime pingpong 60 pingpong --pairs 100
}
scenario_yield() { each_runtime yield 60 yield; }
scenario_spawn_tree() { each_runtime spawn_tree 60 spawn_tree; }
scenario_chain() { each_runtime chain 60 chain; }
scenario_sync() {
    local row threads
    for row in $("$bin/peer-tokio" list); do
        for threads in 1 2; do
            run_one "$row" "$( ((threads == 1)) && echo tokio-ct || echo tokio-mt$threads)" 60 \
                "$bin/peer-tokio" "$row" --threads "$threads"
        done
    done
}
scenario_lane() {
    # The rows of bench/lane.zig, on a multi_thread runtime of one worker per CPU (bench/lanes.sh
    # runs them next to weft's and prints the table).
    local row
    for row in roundtrip_ok roundtrip_error sequential concurrent contention_10 contention_100 \
        contention_1000; do
        run_one "lane_$row" "tokio-mt$(nproc)" 120 "$bin/peer-tokio" "lane_$row" --threads "$(nproc)"
    done
}
scenario_echo() {
    serve_and_measure echo tokio-ct "$bin/peer-tokio" echo_server --port '{port}' --threads 1
    serve_and_measure echo tokio-mt2 "$bin/peer-tokio" echo_server --port '{port}' --threads 2
    serve_and_measure echo go-1 "$bin/peer-go" echo_server --port '{port}' --threads 1
    serve_and_measure echo go-2 "$bin/peer-go" echo_server --port '{port}' --threads 2
}
scenario_http() {
    command -v wrk >/dev/null && command -v ab >/dev/null || bash "$here/../tools.sh" >&2
    serve_and_measure http hyper-ct "$bin/peer-tokio" http_server --port '{port}' --threads 1
    serve_and_measure http hyper-mt2 "$bin/peer-tokio" http_server --port '{port}' --threads 2
    serve_and_measure http go-1 "$bin/peer-go" http_server --port '{port}' --threads 1
    serve_and_measure http go-2 "$bin/peer-go" http_server --port '{port}' --threads 2
}

all_scenarios=(sleep spawn pingpong yield spawn_tree chain sync lane echo http)

main() {
    local scenario
    (($# > 0)) || set -- "${all_scenarios[@]}"
    for scenario in "$@"; do
        if ! declare -F "scenario_$scenario" >/dev/null; then
            echo "run.sh: unknown scenario '$scenario' (known: ${all_scenarios[*]})" >&2
            exit 2
        fi
    done
    bash "$here/build.sh" >&2 || exit 1
    echo "run.sh: logs in $log_dir" >&2
    for scenario in "$@"; do "scenario_$scenario"; done
}

if [[ -z ${PEERS_NO_MAIN:-} ]]; then main "$@"; fi
