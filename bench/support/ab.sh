# A/B runs for scripts that compare two builds or two settings of weft side by side (sourced
# by bench/pinned.sh, bench/metrics_cost.sh and bench/against.sh): one child process per cell,
# each result appended to a file as "<label> <mode> <value>", then a Markdown table of medians.

# ab_args <script> <scenarios...> -- "$@": parses the scripts' common arguments
# [ROUNDS [SCENARIO...]] into `rounds` (default 5) and `selected` (default every scenario),
# and defines `wanted <scenario>`; exits 2 with a usage line on anything else.
ab_args() {
    local script=$1 name
    shift
    local all=()
    while (($# > 0)) && [[ $1 != -- ]]; do
        all+=("$1")
        shift
    done
    shift
    local usage="usage: bash bench/$script [ROUNDS [SCENARIO...]]
  ROUNDS    a positive count (default 5)
  SCENARIO  ${all[*]} (default: all)"
    rounds=${1:-5}
    if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
        echo "$usage" >&2
        exit 2
    fi
    shift $(($# > 0 ? 1 : 0))
    selected=("$@")
    ((${#selected[@]} > 0)) || selected=("${all[@]}")
    for name in "${selected[@]}"; do
        if [[ " ${all[*]} " != *" $name "* ]]; then
            echo "$script: unknown scenario '$name'" >&2
            echo "$usage" >&2
            exit 2
        fi
    done
}

wanted() { [[ " ${selected[*]} " == *" $1 "* ]]; }

# ab_scenario <results> <label> <mode> <bin dir> <program> <key> <config words...>: runs
# <bin dir>/bench-<program> --child <config words> (60 s limit) and records its <key>=value.
ab_scenario() {
    local results=$1 label=$2 mode=$3 bin=$4 program=$5 key=$6
    shift 6
    local line value
    line=$(timeout -k 5 60 "$bin/bench-$program" --child "$@" 2>&1 | tail -n 1)
    value=$(grep -o "$key=[0-9.]*" <<<"$line" | cut -d= -f2)
    echo "$label $mode ${value:-failed}" >>"$results"
}

# ab_http <results> <mode> <bin dir> <wrk duration> <weft-serve args...>: weft-serve on a
# random port of 127.0.0.1 under wrk -t1 -c50; records http_req_per_s and http_p99_us.
ab_http() {
    local results=$1 mode=$2 bin=$3 duration=$4
    shift 4
    local port=$((20000 + RANDOM % 20000)) pid out rps p99
    "$bin/weft-serve" "$@" --port "$port" >/dev/null 2>&1 &
    pid=$!
    sleep 0.5
    out=$(timeout -k 5 60 wrk -t1 -c50 -d"$duration" --latency "http://127.0.0.1:$port/" 2>&1)
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rps=$(awk '/Requests\/sec/ { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { v = $2; if (v ~ /ms$/) { sub(/ms/, "", v); v *= 1000 }
        else if (v ~ /us$/) sub(/us/, "", v); else if (v ~ /s$/) { sub(/s/, "", v); v *= 1e6 }
        print v }' <<<"$out")
    # AB_HTTP_NAME names the rows when a script measures more than one server shape.
    echo "${AB_HTTP_NAME:-http}_req_per_s $mode ${rps:-failed}" >>"$results"
    echo "${AB_HTTP_NAME:-http}_p99_us $mode ${p99:-failed}" >>"$results"
}

# ab_table <results> <mode a> <mode b> <labels...>: one row per label recorded, the median of
# each mode and b / a.
ab_table() {
    local results=$1 a=$2 b=$3 label
    shift 3
    echo "| scenario | $a | $b | $b / $a |"
    echo "|---|---|---|---|"
    for label in "$@"; do
        awk -v label="$label" -v a="$a" '
            function median(values, n,    i, j, t) {
                for (i = 2; i <= n; i++)
                    for (j = i; j > 1 && values[j - 1] > values[j]; j--) {
                        t = values[j]; values[j] = values[j - 1]; values[j - 1] = t
                    }
                return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
            }
            $1 == label && $3 ~ /^[0-9.]+$/ {
                if ($2 == a) x[++nx] = $3; else y[++ny] = $3
            }
            END {
                if (nx + ny == 0) exit # not selected
                if (nx == 0 || ny == 0) { printf "| %s | failed | failed | - |\n", label; exit }
                mx = median(x, nx); my = median(y, ny)
                printf "| %s | %.1f | %.1f | %.3f |\n", label, mx, my, my / mx
            }' "$results"
    done
}
