#!/usr/bin/env bash
# The scheduler benchmarks, weft against Tokio and Go, in one run by one command:
#
#   bash bench/scheduler.sh
#
# Scenarios (definitions in docs/BENCHMARKS.md and bench/peers/README.md, the same on every side):
#   spawn        1M no-op tasks spawned, run and awaited           ns per spawn
#   spawn_tree   binary tree of 2^20 - 1 tasks, each awaiting two  ns per task
#   pingpong 1   one pair over capacity-1 channels, 1M rounds      ns per round
#   pingpong 100 100 pairs, 1M rounds in all                       ns per round
#                each runtime's own channel (weft.sync.Channel, tokio mpsc, a Go chan); weft
#                also over std.Io.Queue, the portable program (rows "std.Io.Queue")
#   yield        100 tasks x 10,000 yields                         ns per yield
#   chain        100 tasks in a ring, a token round it 10,000 times, each hop one wake-up
#   echo         TCP echo, 10 connections x ECHO_ROUNDS x 64 B     ns per message (wall / msgs)
#   http wrk     HTTP hello, wrk -t1 -c50 -d WRK_DURATION          ns per request (1e9 / req/s)
#   http ab      HTTP hello, ab -n AB_REQUESTS -c 50, no keep-alive  ns per request
# Runtimes (columns):
#   weft-1, weft-2   weft with 1 and 2 executors (bench/*.zig `executors=`; the echo server is
#                    examples/echo.zig under WEFT_EXECUTORS; the HTTP server is
#                    `weft-serve --mode single --executors N`, one runtime, one listener)
#   tokio-ct         Tokio current_thread (hyper on it for HTTP)
#   tokio-mt2        Tokio multi_thread, 2 workers
#   go-1, go-2       Go with GOMAXPROCS 1 and 2
#
# Prints every result line (harness format) on stderr as it comes, then on stdout one markdown
# table: scenario x runtime in ns per operation, with weft's "2 executors / 1 executor" ratio
# (below 1: two executors are faster), and the network rows' own rates. A measurement that did
# not finish shows its status (timeout, lost, failed, crashed) in its cell. Result lines and the
# servers' logs stay in $PEERS_LOG_DIR (default: a new temp dir, named on stderr).
#
# Builds what it needs first: weft's bench programs (`./zigw build install`, always
# ReleaseFast) and examples (`./zigw build examples -Doptimize=ReleaseFast`), the peers
# (bench/peers/build.sh: cargo and go), wrk and ab (bench/tools.sh) if missing.
#
# Bounded: the measurements take about 2 minutes with the defaults (every program has its own
# time limit; the servers get WRK_DURATION=5s of wrk, AB_REQUESTS=5000 and ECHO_ROUNDS=20000
# unless set). The builds come on top: seconds when up to date, but several minutes on a
# loaded machine when weft's sources changed (each example is compiled in ReleaseFast). The
# last line says how long each part took.
# Load goes only to 127.0.0.1; every server is stopped by its PID. The machine's 2 cores are
# shared with the load generators, so the network rows oversubscribe them with 2 executors.
set -uo pipefail
# `producer | collect` fills the cells in this shell, not in a subshell.
shopt -s lastpipe

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

export WRK_DURATION=${WRK_DURATION:-5s}
export AB_REQUESTS=${AB_REQUESTS:-5000}
export ECHO_ROUNDS=${ECHO_ROUNDS:-20000}

# ---------------------------------------------------------------------------------------------
# Build

command -v wrk >/dev/null && command -v ab >/dev/null || bash bench/tools.sh >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1
./zigw build install >&2 || exit 1
./zigw build examples -Doptimize=ReleaseFast >&2 || exit 1

build_s=$SECONDS
PEERS_NO_MAIN=1 source bench/peers/run.sh
results=$log_dir/scheduler-results.txt
: >"$results"
echo "scheduler.sh: result lines in $results, logs in $log_dir" >&2

# ---------------------------------------------------------------------------------------------
# Collecting result lines into cells

rows=(spawn spawn_tree pingpong1 pingpong100 pingpong1_std pingpong100_std yield chain echo
    http_wrk http_ab)
columns=(weft-1 weft-2 tokio-ct tokio-mt2 go-1 go-2)
declare -A label=(
    [spawn]="spawn 1M no-op tasks, ns/spawn"
    [spawn_tree]="spawn tree, 2^20 - 1 tasks, ns/task"
    [pingpong1]="ping-pong, 1 pair, ns/round"
    [pingpong100]="ping-pong, 100 pairs, ns/round"
    [pingpong1_std]="ping-pong, 1 pair, std.Io.Queue, ns/round"
    [pingpong100_std]="ping-pong, 100 pairs, std.Io.Queue, ns/round"
    [yield]="yield storm, 100 x 10k, ns/yield"
    [chain]="chained wake-ups, 100-task ring, ns/wake"
    [echo]="echo, 10 conns x 64 B, ns/msg"
    [http_wrk]="HTTP hello, wrk keep-alive, ns/req"
    [http_ab]="HTTP hello, ab no keep-alive, ns/req"
)
declare -A cell=() rate=()

# field <line> <key>: the value of key=value in the line (empty if absent).
field() {
    local word
    for word in $1; do
        if [[ $word == "$2="* ]]; then
            echo "${word#*=}"
            return
        fi
    done
}

# The table row of a result line, or nothing for a line the table does not show.
row_of() {
    local line=$1 bench
    bench=$(field "$line" bench)
    case $bench in
        spawn) [[ $(field "$line" stack) != dense ]] && echo spawn ;;
        pingpong) # weft's std.Io.Queue lines get rows of their own; peers have no channel=
            if [[ $(field "$line" channel) == std_queue ]]; then
                echo "pingpong$(field "$line" pairs)_std"
            else
                echo "pingpong$(field "$line" pairs)"
            fi
            ;;
        http) echo "http_$(field "$line" tool)" ;;
        spawn_tree | yield | chain | echo) echo "$bench" ;;
    esac
}

# The table column of a result line: weft's executors, or the peer's runtime name.
column_of() {
    local line=$1 runtime
    runtime=$(field "$line" runtime)
    case $runtime in
        weft) echo "weft-$(field "$line" executors)" ;;
        hyper-*) echo "tokio-${runtime#hyper-}" ;;
        *) echo "$runtime" ;;
    esac
}

# The line's figure in ns per operation (1 decimal), or its status when it is not ok.
ns_per_op() {
    local line=$1 status value
    status=$(field "$line" status)
    if [[ $status != ok ]]; then
        echo "$status"
        return
    fi
    case $(field "$line" bench) in
        spawn) value=$(field "$line" ns_per_spawn) ;;
        spawn_tree) value=$(field "$line" ns_per_task) ;;
        pingpong) value=$(field "$line" ns_per_round) ;;
        yield) value=$(field "$line" ns_per_yield) ;;
        chain) value=$(field "$line" ns_per_wake) ;;
        echo) value=$(awk -v w="$(field "$line" wall_ns)" -v m="$(field "$line" msgs)" \
            'BEGIN { if (m > 0) printf "%.1f", w / m }') ;;
        http) value=$(awk -v r="$(field "$line" req_per_s)" \
            'BEGIN { if (r > 0) printf "%.1f", 1e9 / r }') ;;
    esac
    echo "${value:-missing}"
}

# collect: reads result lines on stdin, logs each, and fills the cells of those in the table.
collect() {
    local line row column
    while IFS= read -r line; do
        [[ $line == bench=* ]] || continue
        echo "$line" >>"$results"
        echo "$line" >&2
        row=$(row_of "$line")
        [[ -n $row ]] || continue
        column=$(column_of "$line")
        cell[$row|$column]=$(ns_per_op "$line")
        case $row in
            echo) rate[$row|$column]="$(field "$line" msgs_per_s) msg/s" ;;
            http_wrk)
                rate[$row|$column]="$(field "$line" req_per_s) req/s"
                rate[$row|$column]+=", p99 $(field "$line" p99_us) us"
                ;;
            http_ab) rate[$row|$column]="$(field "$line" req_per_s) req/s" ;;
        esac
    done
}

# ---------------------------------------------------------------------------------------------
# Running every scenario: weft first, then its peers, scenario by scenario

weft_program() { # <name> [args...]: one bench program, which measures 1 and 2 executors
    local name=$1
    shift
    timeout -k 5 180 "zig-out/bin/bench-$name" "$@" ||
        echo "bench=$name runtime=weft status=failed error=program_exit_$?"
}

weft_program spawn | collect
each_runtime spawn 60 spawn | collect
weft_program spawn_tree | collect
each_runtime spawn_tree 60 spawn_tree | collect
weft_program pingpong | collect
each_runtime pingpong 60 pingpong --pairs 1 | collect
each_runtime pingpong 60 pingpong --pairs 100 | collect
weft_program yield | collect
each_runtime yield 60 yield | collect
weft_program chain | collect
each_runtime chain 60 chain | collect

for executors in 1 2; do
    serve_and_measure echo "weft-$executors" \
        env WEFT_EXECUTORS="$executors" zig-out/bin/example-echo --port '{port}' | collect
done
scenario_echo | collect
for executors in 1 2; do
    serve_and_measure http "weft-$executors" \
        zig-out/bin/weft-serve --mode single --executors "$executors" --port '{port}' | collect
done
scenario_http | collect

# ---------------------------------------------------------------------------------------------
# The table

ratio() { # weft-2 / weft-1 of a row, when both are numbers
    awk -v a="${cell[$1|weft-2]:-}" -v b="${cell[$1|weft-1]:-}" 'BEGIN {
        if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-"
    }'
}

echo
echo "| scenario (ns per op) | weft 1 exec | weft 2 exec | weft 2/1 |" \
    "Tokio ct | Tokio mt2 | Go 1 | Go 2 |"
echo "|---|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "${label[$row]}" \
        "${cell[$row|weft-1]:--}" "${cell[$row|weft-2]:--}" "$(ratio "$row")" \
        "${cell[$row|tokio-ct]:--}" "${cell[$row|tokio-mt2]:--}" \
        "${cell[$row|go-1]:--}" "${cell[$row|go-2]:--}"
done
echo
echo "| network rows, rates | $(IFS='|'; echo "${columns[*]}" | sed 's/|/ | /g') |"
echo "|---|---|---|---|---|---|---|"
for row in echo http_wrk http_ab; do
    line="| ${row/_/ } "
    for column in "${columns[@]}"; do line+="| ${rate[$row|$column]:--} "; done
    echo "$line|"
done
echo
echo "WRK_DURATION=$WRK_DURATION AB_REQUESTS=$AB_REQUESTS ECHO_ROUNDS=$ECHO_ROUNDS;" \
    "build ${build_s} s, measurements $((SECONDS - build_s)) s; result lines: $results"
