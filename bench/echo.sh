#!/usr/bin/env bash
# TCP echo: weft's examples/echo.zig against the Tokio and Go echo servers, in one run, with
# the peers' harness and its one load generator (bench/peers/go/cmd/echo-client: 10
# connections x 50,000 round trips x 64 bytes, msg/s). One result line per server on stdout;
# logs in $PEERS_LOG_DIR or a temp dir.
#
#   bash bench/echo.sh            (ECHO_ROUNDS=5000 for a quick look)
#
# weft runs one executor (the multi-threaded scheduler is issue 4); the peers run with 1 and
# 2 threads. Load goes only to 127.0.0.1; every server is stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

bash bench/peers/build.sh >&2 || exit 1
./zigw build examples -Doptimize=ReleaseFast >&2 || exit 1

PEERS_NO_MAIN=1 source bench/peers/run.sh
echo "echo.sh: logs in $log_dir" >&2

for backend in io_uring epoll; do
    WEFT_BACKEND=$backend serve_and_measure echo "weft-1-$backend" \
        zig-out/bin/example-echo --port '{port}'
done
scenario_echo
