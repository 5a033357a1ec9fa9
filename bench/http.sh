#!/usr/bin/env bash
# HTTP hello world: weft-serve in its three shapes against hyper and Go, in one run, with the
# peers' harness (bench/peers/run.sh: wrk -t1 -c50 -d10s keep-alive, then ab -n 10000 -c 50).
# One result line per server and tool on stdout; logs in $PEERS_LOG_DIR or a temp dir.
#
#   bash bench/http.sh            (WRK_DURATION=3s AB_REQUESTS=2000 for a quick look)
#   bash bench/http.sh weft-threaded2 weft-threaded2-shared      only these servers
#
# Servers: weft-single, weft-single2 (one runtime, one listener, 2 executors), weft-threaded2
# (one SO_REUSEPORT listener per thread), weft-threaded2-shared (one listener both threads
# accept on), weft-forked2, hyper-ct,
# hyper-mt2, go-1, go-2. Needs wrk and ab (bench/tools.sh) and the peers' servers
# (bench/peers/build.sh, run here). Load goes only to 127.0.0.1; every server is stopped by
# its PID.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

serve=zig-out/bin/weft-serve
peers=bench/peers/bin
declare -A servers=(
    [weft-single]="$serve --mode single --port {port}"
    [weft-single2]="$serve --mode single --executors 2 --port {port}"
    [weft-threaded2]="$serve --mode threaded --workers 2 --listeners reuse_port --port {port}"
    [weft-threaded2-shared]="$serve --mode threaded --workers 2 --listeners shared --port {port}"
    [weft-forked2]="$serve --mode forked --workers 2 --port {port}"
    [hyper-ct]="$peers/peer-tokio http_server --port {port} --threads 1"
    [hyper-mt2]="$peers/peer-tokio http_server --port {port} --threads 2"
    [go-1]="$peers/peer-go http_server --port {port} --threads 1"
    [go-2]="$peers/peer-go http_server --port {port} --threads 2"
)
order=(weft-single weft-single2 weft-threaded2 weft-threaded2-shared weft-forked2 hyper-ct hyper-mt2
    go-1 go-2)
(($# > 0)) || set -- "${order[@]}"
for name in "$@"; do
    [[ -n ${servers[$name]:-} ]] || { echo "http.sh: unknown server '$name' (known: ${order[*]})" >&2; exit 2; }
done

command -v wrk >/dev/null && command -v ab >/dev/null || bash bench/tools.sh >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1
./zigw build examples -Doptimize=ReleaseFast >&2 || exit 1

PEERS_NO_MAIN=1 source bench/peers/run.sh
echo "http.sh: logs in $log_dir" >&2

for name in "$@"; do
    # Word splitting is wanted: the table holds whole command lines without quoted spaces.
    # shellcheck disable=SC2086
    serve_and_measure http "$name" ${servers[$name]}
done
