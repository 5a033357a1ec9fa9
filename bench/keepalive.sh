#!/usr/bin/env bash
# 10,000 concurrent keep-alive connections held open and served (bench/keepalive.zig, the
# client), against weft-serve and the peers' hyper and Go servers, one after another. One
# result line per server on stdout: the client's (open time, per-round time, failures, the
# server's peak RSS) with the harness's peak_rss_kib (the same VmHWM) appended.
#
#   bash bench/keepalive.sh                        every server below
#   bash bench/keepalive.sh weft-single go-1       only these
#   KEEPALIVE_CONNS=2000 bash bench/keepalive.sh   fewer connections
#
# Each side needs one fd per connection: the client and weft-serve raise their soft
# RLIMIT_NOFILE to the hard limit (Go does the same by itself; Tokio does not, so the script
# raises the shell's soft limit first); the client fails with error=fd_limit when the hard
# limit is too low. weft-forked2 is left out: its pid is the supervisor's, whose RSS says
# nothing about the workers. Load goes only to 127.0.0.1.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

KEEPALIVE_CONNS=${KEEPALIVE_CONNS:-10000}
KEEPALIVE_ROUNDS=${KEEPALIVE_ROUNDS:-3}
serve=zig-out/bin/weft-serve
peers=bench/peers/bin
declare -A servers=(
    [weft-single]="$serve --mode single --connections $KEEPALIVE_CONNS --port {port}"
    [weft-threaded2]="$serve --mode threaded --workers 2 --connections $KEEPALIVE_CONNS --port {port}"
    [hyper-ct]="$peers/peer-tokio http_server --port {port} --threads 1"
    [hyper-mt2]="$peers/peer-tokio http_server --port {port} --threads 2"
    [go-1]="$peers/peer-go http_server --port {port} --threads 1"
    [go-2]="$peers/peer-go http_server --port {port} --threads 2"
)
order=(weft-single weft-threaded2 hyper-ct hyper-mt2 go-1 go-2)
(($# > 0)) || set -- "${order[@]}"
for name in "$@"; do
    [[ -n ${servers[$name]:-} ]] || { echo "keepalive.sh: unknown server '$name' (known: ${order[*]})" >&2; exit 2; }
done

ulimit -S -n "$(ulimit -H -n)" || exit 1
bash bench/peers/build.sh >&2 || exit 1
# The client is a bench program: `install` builds it (ReleaseFast) without running every bench.
./zigw build examples -Doptimize=ReleaseFast >&2 || exit 1
./zigw build install >&2 || exit 1

PEERS_NO_MAIN=1 source bench/peers/run.sh
echo "keepalive.sh: logs in $log_dir, fd limit $(ulimit -S -n)" >&2

measure_keepalive() {
    local name=$1 port=$2 pid=$3
    run_one keepalive "$name" 120 zig-out/bin/bench-keepalive --port "$port" --pid "$pid" \
        --label "$name" --conns "$KEEPALIVE_CONNS" --rounds "$KEEPALIVE_ROUNDS" --timeout-s 90
}

for name in "$@"; do
    # shellcheck disable=SC2086
    serve_and_measure keepalive "$name" ${servers[$name]}
done
