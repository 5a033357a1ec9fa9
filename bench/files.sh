#!/usr/bin/env bash
# The file benchmark in one run: bench/files.zig on weft (io_uring, epoll) and on
# std.Io.Threaded, the same rows on Tokio (tokio::fs, multi_thread with 2 workers) and Go (os,
# GOMAXPROCS 2) from bench/peers, and fio --ioengine=io_uring as the device limit of the read
# rows (one thread, iodepth = tasks). Prints the raw result lines, then a Markdown table:
#
#   scenario | tasks | weft io_uring | weft epoll | Threaded | Tokio | Go | fio | ratios
#
# ns per op, lower is better; bold marks the best runtime cell of a row (fio is a limit, not a
# contender); each ratio is the peer's ns/op over weft io_uring's (above 1: weft is faster).
# A cell that failed its check shows its status instead.
#
# Usage: bench/files.sh [--dir PATH] [--scenario NAME]    (default /var/tmp/weft-bench-files)
# The fixtures (1.3 GiB, 110,100 inodes) are made on the first run by bench-files. The whole
# run takes about 2-3 minutes on the 2-core development machine.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dir=/var/tmp/weft-bench-files
scenario_args=()
scenarios="small random_hot seq_cold random_cold write_fsync walk"
while (($# > 0)); do
    case $1 in
        --dir) dir=${2:?--dir needs a path}; shift 2 ;;
        --scenario) scenarios=${2:?--scenario needs a name}; scenario_args=(--scenario "$2"); shift 2 ;;
        *) echo "usage: bench/files.sh [--dir PATH] [--scenario NAME]" >&2; exit 2 ;;
    esac
done
tasks_list="1 8 64"

./zigw build install-bench-files >&2 || exit 1
bash bench/peers/build.sh >&2 || exit 1
command -v fio >/dev/null || { echo "files.sh: fio missing (apt-get install -y fio)" >&2; exit 1; }

lines=$(mktemp -t weft-files.XXXXXX)
trap 'rm -f "$lines"' EXIT

zig-out/bin/bench-files --dir "$dir" "${scenario_args[@]}" | tee -a "$lines"

peer() { # <program> <label> <scenario> <tasks>
    local out
    out=$(timeout -k 5 120 "bench/peers/bin/$1" "files_$3" --threads 2 --tasks "$4" --dir "$dir" \
        2>/dev/null | grep '^bench=')
    echo "${out:-bench=files_$3 runtime=$2 tasks=$4 status=failed}"
}

# fio_row <scenario> <tasks>: the read rows only; one line in the harness's format.
fio_row() {
    local scenario=$1 tasks=$2 file rw bs ios evict=0 out iops bw
    case $scenario in
        random_hot) file=hot-256m rw=randread bs=4k ios=200000 ;;
        random_cold) file=big-1g rw=randread bs=4k ios=10000 evict=1 ;;
        seq_cold) file=big-1g rw=read bs=1m ios=1024 evict=1 ;;
        *) return ;;
    esac
    if ((evict)); then
        dd if="$dir/$file" iflag=nocache count=0 status=none # posix_fadvise(DONTNEED)
    else
        cat "$dir/$file" >/dev/null
    fi
    out=$(timeout -k 5 120 fio --name="$scenario" --filename="$dir/$file" --readonly \
        --rw="$rw" --bs="$bs" --ioengine=io_uring --iodepth="$tasks" --number_ios="$ios" \
        --invalidate=0 --output-format=terse --terse-version=3 2>/dev/null)
    # Terse v3: field 7 read bandwidth (KiB/s), 8 read IOPS.
    iops=$(awk -F';' '{ print $8 }' <<<"$out")
    bw=$(awk -F';' '{ printf "%.1f", $7 / 1024 }' <<<"$out")
    if [[ -z $iops || $iops == 0 ]]; then
        echo "bench=files_$scenario runtime=fio tasks=$tasks status=failed"
        return
    fi
    echo "bench=files_$scenario runtime=fio tasks=$tasks iodepth=$tasks status=ok" \
        "ns_per_op=$(awk -v i="$iops" 'BEGIN { printf "%.1f", 1e9 / i }') mib_per_s=$bw"
}

for scenario in $scenarios; do
    for tasks in $tasks_list; do
        peer peer-tokio tokio-mt2 "$scenario" "$tasks"
        peer peer-go go-2 "$scenario" "$tasks"
        fio_row "$scenario" "$tasks"
    done | tee -a "$lines"
done

echo
echo "files.sh: $(date -u +%Y-%m-%d), $(nproc) CPUs, $(uname -r), dir $dir" \
    "($(stat -f -c %T "$dir"))"
echo
awk '
    function field(line, key,    n, i, kv, f) {
        n = split(line, f, " ")
        for (i = 1; i <= n; i++) { split(f[i], kv, "="); if (kv[1] == key) return kv[2] }
        return ""
    }
    function column(line,    runtime, backend) {
        runtime = field(line, "runtime"); backend = field(line, "backend")
        if (runtime == "weft") return "weft-" backend
        if (runtime ~ /^tokio/) return "tokio"
        if (runtime ~ /^go/) return "go"
        return runtime
    }
    function number(s) { return s ~ /^[0-9.]+$/ }
    function show(s) {
        if (!number(s)) return s
        return s >= 100 ? sprintf("%\047d", s + 0.5) : sprintf("%.1f", s)
    }
    function ratio(peer, weft) {
        if (!number(peer) || !number(weft) || weft == 0) return "-"
        return sprintf("%.2f", peer / weft)
    }
    /^bench=files_/ {
        split($1, b, "="); scenario = substr(b[2], 7)
        tasks = field($0, "tasks")
        key = scenario SUBSEP tasks
        if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
        status = field($0, "status")
        cell[key, column($0)] = status == "ok" ? field($0, "ns_per_op") : status
    }
    END {
        n = split("weft-io_uring weft-epoll threaded tokio go fio", cols, " ")
        print "| scenario | tasks | weft io_uring | weft epoll | Threaded | Tokio | Go | fio |" \
            " Threaded/weft | Tokio/weft | Go/weft | fio/weft |"
        print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (r = 1; r <= rows; r++) {
            key = order[r]; split(key, parts, SUBSEP)
            best = ""
            for (c = 1; c < n; c++) {
                v = cell[key, cols[c]]
                if (number(v) && (best == "" || v + 0 < best + 0)) best = v
            }
            line = "| " parts[1] " | " parts[2] " |"
            for (c = 1; c <= n; c++) {
                v = (key, cols[c]) in cell ? cell[key, cols[c]] : "-"
                s = show(v)
                if (c < n && number(v) && v == best) s = "**" s "**"
                line = line " " s " |"
            }
            w = cell[key, "weft-io_uring"]
            line = line " " ratio(cell[key, "threaded"], w) " | " ratio(cell[key, "tokio"], w) \
                " | " ratio(cell[key, "go"], w) " | " ratio(cell[key, "fio"], w) " |"
            print line
        }
    }
' "$lines"
