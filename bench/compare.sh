#!/usr/bin/env bash
# Runs weft's task benchmarks and the peers' counterparts (Tokio, Go; bench/peers/) back to
# back, so that every figure in a comparison comes from the same run on the same machine.
# One result line per measurement on stdout; build output goes to stderr.
#
# Usage: bench/compare.sh [sleep] [spawn] [pingpong] [sync]      (default: all four)
#
# weft's programs run with `--io both` where std.Io.Threaded finishes within their time bounds
# (sleep), so the Threaded figures come from the same run too.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./zigw build install -Doptimize=ReleaseFast >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1

(($# > 0)) || set -- sleep spawn pingpong sync
for scenario in "$@"; do
    case $scenario in
        sleep) zig-out/bin/bench-sleep --io both ;;
        spawn) zig-out/bin/bench-spawn ;;
        pingpong) zig-out/bin/bench-pingpong ;;
        sync)
            # Its own script: weft and Tokio at 1 and 2 threads, then a side-by-side table.
            bash bench/sync_compare.sh
            continue
            ;;
        *)
            echo "compare.sh: unknown scenario '$scenario' (known: sleep spawn pingpong sync)" >&2
            exit 2
            ;;
    esac
    bash bench/peers/run.sh "$scenario"
done
