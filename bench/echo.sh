#!/usr/bin/env bash
# TCP echo: weft's examples/echo.zig against the Tokio and Go echo servers, in one run, with
# the peers' harness and its one load generator (bench/peers/go/cmd/echo-client: 10
# connections x 50,000 round trips x 64 bytes, msg/s). One result line per server on stdout;
# logs in $PEERS_LOG_DIR or a temp dir.
#
#   bash bench/echo.sh            (ECHO_ROUNDS=5000 for a quick look)
#
# weft runs with 1 executor (io_uring, epoll) and 2 (io_uring), set by WEFT_EXECUTORS; the
# peers with 1 and 2 threads. Load goes only to 127.0.0.1; every server is stopped by its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

bash bench/peers/build.sh >&2 || exit 1
./zigw build examples -Doptimize=ReleaseFast >&2 || exit 1

PEERS_NO_MAIN=1 source bench/peers/run.sh
echo "echo.sh: logs in $log_dir" >&2

for config in "1 io_uring" "1 epoll" "2 io_uring"; do
    read -r executors backend <<<"$config"
    WEFT_EXECUTORS=$executors WEFT_BACKEND=$backend serve_and_measure echo \
        "weft-$executors-$backend" zig-out/bin/example-echo --port '{port}'
done
scenario_echo
