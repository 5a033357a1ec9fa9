#!/usr/bin/env bash
# Runs bench/probes/uring_recv.zig (a bare io_uring hello responder, no runtime) in each receive
# mode, ROUNDS times in turns, under `wrk -t1 -c50 -d DURATION`, and prints per mode the
# median req/s and the responder's CPU per request (its utime + stime from /proc over the wrk
# run). The question it answers for issue 3: would a multishot receive from a provided buffer
# ring serve loopback HTTP with less CPU per request than one recv per request?
#
#   bash bench/probes/uring_recv.sh [ROUNDS]     (default 4; DURATION=3s)
#
# Load goes only to 127.0.0.1; every responder is stopped by its PID.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
rounds=${1:-4}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: bash bench/probes/uring_recv.sh [ROUNDS]" >&2; exit 2; }
duration=${DURATION:-3s}
command -v wrk >/dev/null || bash bench/tools.sh >&2 || exit 1
bin=$(mktemp -d -t weft-probe.XXXXXX)/uring_recv
./zigw build-exe -OReleaseFast bench/probes/uring_recv.zig -femit-bin="$bin" >&2 || exit 1
ticks=$(getconf CLK_TCK)
modes=(single pollfirst multishot)
results=$(mktemp -t weft-probe-results.XXXXXX)

for ((round = 1; round <= rounds; round++)); do
    for ((turn = 0; turn < ${#modes[@]}; turn++)); do
        mode=${modes[$(((round - 1 + turn) % ${#modes[@]}))]}
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        "$bin" "$mode" "$port" 2>>"$results.log" &
        pid=$!
        sleep 0.3
        cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        out=$(wrk -t1 -c50 -d"$duration" "http://127.0.0.1:$port/" 2>&1)
        cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        kill "$pid"
        wait "$pid" 2>/dev/null
        requests=$(awk '/requests in/ {print $1}' <<<"$out")
        rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        us_per_request=$(awk -v t=$((cpu1 - cpu0)) -v r="$requests" -v hz="$ticks" 'BEGIN { printf "%.2f", t * 1e6 / hz / r }')
        echo "$mode $rate $us_per_request" | tee -a "$results" >&2
    done
done

awk '
function median(list,    n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
{ rate[$1] = rate[$1] " " $2; cpu[$1] = cpu[$1] " " $3 }
END {
    print "| receive | req/s (median) | CPU µs per request (median) |"
    print "|---|---|---|"
    split("single pollfirst multishot", m, " ")
    for (i = 1; i <= 3; i++) printf "| %s | %.0f | %.2f |\n", m[i], median(rate[m[i]]), median(cpu[m[i]])
}' "$results"
echo "ROUNDS=$rounds DURATION=$duration"
