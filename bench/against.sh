#!/usr/bin/env bash
# The headline task and HTTP rows of this working tree against an earlier commit, side by
# side in one run: what a change that should not move performance (a restructuring, a new
# feature off the hot path) is checked with.
#
#   bash bench/against.sh COMMIT [ROUNDS [SCENARIO...]]   (default 5 rounds, every scenario)
#
# Builds COMMIT in a temporary git worktree into zig-out/against/ and this tree into zig-out/,
# both ReleaseFast with their defaults (metrics on where the commit has them). Each scenario
# runs ROUNDS times on each build, the two alternating (and which goes first alternating too);
# each cell is the median, in the scenario's unit (lower is better but for req/s).
#
# Scenarios (definitions in docs/BENCHMARKS.md "The programs"; one child process each):
#   spawn      1M no-op tasks spawned, run and awaited, 1 executor      ns per spawn
#   pingpong   one pair over weft.sync.Channel, 1M rounds, 1 executor   ns per round
#   yield      100 tasks x 10,000 yields, 1 executor                    ns per yield
#   chain      100 tasks in a ring, a token round it 10,000 times       ns per wake
#   http       weft-serve --mode single --executors 1, wrk -t1 -c50 -d WRK_DURATION (3s)
#   http_threaded2  the same with --mode threaded --workers 2 (two runtimes, SO_REUSEPORT)
#   http_forked2    the same with --mode forked --workers 2 (a supervisor, two processes)
# Bounded: each child has a time limit; about 2 minutes with 5 rounds. Load goes only to
# 127.0.0.1 and the server is stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

commit=${1:-}
if [[ -z $commit ]] || ! git rev-parse --verify --quiet "$commit^{commit}" >/dev/null; then
    echo "usage: bash bench/against.sh COMMIT [ROUNDS [SCENARIO...]]" >&2
    echo "  COMMIT  a commit of this repository (a hash, a tag, HEAD~3)" >&2
    exit 2
fi
shift
# shellcheck source=bench/support/ab.sh
source bench/support/ab.sh
ab_args against.sh spawn pingpong yield chain http http_threaded2 http_forked2 -- "$@"
wrk_duration=${WRK_DURATION:-3s}

command -v wrk >/dev/null || bash bench/tools.sh >&2 || exit 1
./zigw version >/dev/null || exit 1 # installs the toolchain the worktree borrows
programs=(install-bench-spawn install-bench-pingpong install-bench-yield install-bench-chain
    install-weft-serve)
base=zig-out/against
worktree=$(mktemp -d)
results=$(mktemp)
trap 'git worktree remove --force "$worktree" 2>/dev/null; rm -rf "$worktree" "$results"' EXIT
git worktree add --quiet --detach "$worktree" "$commit" || exit 1
ln -s "$root/.zig-toolchain" "$worktree/.zig-toolchain"
(cd "$worktree" && ./zigw build "${programs[@]}" -Doptimize=ReleaseFast -p "$root/$base") >&2 ||
    exit 1
./zigw build "${programs[@]}" -Doptimize=ReleaseFast >&2 || exit 1
label=$(git rev-parse --short "$commit")

scenario() { # <label> <program> <metric key> <mode> <config words...>
    local name=$1 program=$2 key=$3 mode=$4 bin=zig-out/bin
    shift 4
    wanted "$name" || return 0
    [[ $mode == "$label" ]] && bin=$base/bin
    ab_scenario "$results" "$name" "$mode" "$bin" "$program" "$key" runtime=weft \
        executors=1 "$@"
}

http() { # <scenario> <mode> <weft-serve args...>
    local name=$1 mode=$2 bin=zig-out/bin
    shift 2
    wanted "$name" || return 0
    [[ $mode == "$label" ]] && bin=$base/bin
    AB_HTTP_NAME=$name ab_http "$results" "$mode" "$bin" "$wrk_duration" "$@"
}

for ((round = 1; round <= rounds; round++)); do
    if ((round % 2)); then modes="$label now"; else modes="now $label"; fi
    for mode in $modes; do
        scenario spawn spawn ns_per_spawn "$mode" stack=default tasks=1000000
        scenario pingpong pingpong ns_per_round "$mode" channel=weft_channel pairs=1 \
            rounds=1000000
        scenario yield yield ns_per_yield "$mode" tasks=100 yields=10000
        scenario chain chain ns_per_wake "$mode" tasks=100 laps=10000
        http http "$mode" --mode single --executors 1
        http http_threaded2 "$mode" --mode threaded --workers 2
        http http_forked2 "$mode" --mode forked --workers 2
    done
    echo "against.sh: round $round of $rounds done" >&2
done

# Medians at COMMIT and now, and now / COMMIT.
ab_table "$results" "$label" now spawn pingpong yield chain http_req_per_s http_p99_us \
    http_threaded2_req_per_s http_threaded2_p99_us http_forked2_req_per_s http_forked2_p99_us
