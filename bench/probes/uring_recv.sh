#!/usr/bin/env bash
# Runs bench/probes/uring_recv.zig (a bare io_uring hello responder, no runtime) in each receive
# mode, ROUNDS times in turns, under `wrk -t1 -c50 -d DURATION`, and prints per mode the median
# req/s, the responder's CPU per request (its utime + stime from /proc over the wrk run) and
# wrk's own CPU per request. The questions it answers for weft's HTTP server: would a multishot
# receive from a provided buffer ring serve loopback HTTP with less CPU per request than one
# recv per request? And how far above hyper can any server get, when wrk shares the machine?
#
#   bash bench/probes/uring_recv.sh [ROUNDS [MODE...]]   (default 4 single pollfirst multishot;
#                                                          DURATION=3s)
#
# MODE is a receive mode of the probe (single, pollfirst, multishot), or a real server for
# comparison in the same turns: hyper-ct (bench/peers' hyper, current thread) or weft-1
# (weft-serve --mode single --executors 1).
#
# Load goes only to 127.0.0.1; every responder is stopped by its PID.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
usage() {
    echo "usage: bash bench/probes/uring_recv.sh [ROUNDS [MODE...]]   (MODE: single pollfirst" >&2
    echo "       multishot hyper-ct weft-1)" >&2
    exit 2
}
rounds=${1:-4}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || usage
shift $(($# > 0 ? 1 : 0))
modes=("$@")
((${#modes[@]} > 0)) || modes=(single pollfirst multishot)
for mode in "${modes[@]}"; do
    case $mode in
        single | pollfirst | multishot) ;;
        hyper-ct) bash bench/peers/build.sh >&2 || exit 1 ;;
        weft-1) ./zigw build install-weft-serve -Doptimize=ReleaseFast >&2 || exit 1 ;;
        *) echo "uring_recv.sh: unknown mode '$mode'" >&2; usage ;;
    esac
done
duration=${DURATION:-3s}
command -v wrk >/dev/null || bash bench/tools.sh >&2 || exit 1
bin=$(mktemp -d -t weft-probe.XXXXXX)/uring_recv
./zigw build-exe -OReleaseFast bench/probes/uring_recv.zig -femit-bin="$bin" >&2 || exit 1
ticks=$(getconf CLK_TCK)
results=$(mktemp -t weft-probe-results.XXXXXX)

for ((round = 1; round <= rounds; round++)); do
    for ((turn = 0; turn < ${#modes[@]}; turn++)); do
        mode=${modes[$(((round - 1 + turn) % ${#modes[@]}))]}
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        case $mode in
            hyper-ct) bench/peers/bin/peer-tokio http_server --port "$port" --threads 1 >>"$results.log" 2>&1 & ;;
            weft-1) zig-out/bin/weft-serve --mode single --executors 1 --port "$port" >>"$results.log" 2>&1 & ;;
            *) "$bin" "$mode" "$port" 2>>"$results.log" & ;;
        esac
        pid=$!
        sleep 0.3
        cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        # wrk's user + system seconds, from bash's `time` (TIMEFORMAT) on stderr.
        out=$( { TIMEFORMAT='wrk_cpu_s %U %S'; time wrk -t1 -c50 -d"$duration" "http://127.0.0.1:$port/"; } 2>&1)
        cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        kill "$pid"
        wait "$pid" 2>/dev/null
        requests=$(awk '/requests in/ {print $1}' <<<"$out")
        rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        us_per_request=$(awk -v t=$((cpu1 - cpu0)) -v r="$requests" -v hz="$ticks" 'BEGIN { printf "%.2f", t * 1e6 / hz / r }')
        wrk_us_per_request=$(awk -v r="$requests" '/^wrk_cpu_s/ { printf "%.2f", ($2 + $3) * 1e6 / r }' <<<"$out")
        echo "$mode $rate $us_per_request $wrk_us_per_request" | tee -a "$results" >&2
    done
done

awk -v order="${modes[*]}" '
function median(list,    n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
BEGIN { n = split(order, m, " ") }
{
    rate[$1] = rate[$1] " " $2; cpu[$1] = cpu[$1] " " $3; wrk[$1] = wrk[$1] " " $4
    round = int((NR - 1) / n); in_round[round, $1] = $2
}
END {
    # The ratio is the median over rounds of mode / first mode: the modes of a round ran
    # seconds apart, so the drift of this machine (5-25 % over minutes) mostly cancels.
    print "| mode | req/s (median) | / " m[1] " (per-round median) | server CPU µs per request (median) | wrk CPU µs per request (median) |"
    print "|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
        ratios = ""
        for (r = 0; r <= round; r++) ratios = ratios " " in_round[r, m[i]] / in_round[r, m[1]]
        printf "| %s | %.0f | %.3f | %.2f | %.2f |\n", m[i], median(rate[m[i]]), median(ratios), median(cpu[m[i]]), median(wrk[m[i]])
    }
}' "$results"
echo "ROUNDS=$rounds DURATION=$duration"
