#!/usr/bin/env bash
# The CPU-isolation scenario (bench/cpu_isolation.zig): /heavy (~6 ms of SHA-256) and /light
# under a bounded load, heavy work inline on weft's executor, on weft's CPU lane, and on
# std.Io.Threaded; then the CPU lane again at nice 0 (no lowered priority), for comparison.
# One result line per variant on stdout; the load average before each run on stderr, since
# other processes on the machine change these figures more than anything else.
#
#   bash bench/cpu_isolation.sh            (SECONDS_PER_RUN=5 by default)
#
# Load goes only to 127.0.0.1; the server and its clients live in one child process per
# variant, which the harness kills if it overruns.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

seconds=${SECONDS_PER_RUN:-5}
./zigw build install -Doptimize=ReleaseFast >&2 || exit 1
echo "cpu_isolation.sh: loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >&2
zig-out/bin/bench-cpu_isolation --seconds "$seconds"
echo "cpu_isolation.sh: loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >&2
zig-out/bin/bench-cpu_isolation --seconds "$seconds" --only lane --nice 0
