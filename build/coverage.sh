#!/usr/bin/env bash
# What weft's own test suite reaches, per test run (io_uring, epoll, io_uring with 1 and with 4
# executors): builds the suite with -Dcoverage=true (through LLVM, with a counter on every code
# block), runs it with the counts going to a fresh file (src/std_io/coverage.zig), and prints
# Markdown:
#   - calls per std.Io VTable entry and run, then the entries no test reached;
#   - per file of weft.sync, the lanes and the server, how many of its functions each run
#     reached (the public operations for weft.sync and the lanes, every function for the
#     server, whose phases are functions), then the functions some run did not reach.
# Exits 1 if any VTable entry is unreached. Extra arguments go to `zig build` (e.g.
# -Dtest-filter=fs:).
#
#   bash build/coverage.sh            # the tables docs/COVERAGE.md records
set -euo pipefail
cd "$(dirname "$0")/.."

counts="$(mktemp)"
trap 'rm -f "$counts"' EXIT
# The file is new for every run, so the build does not take the test runs from its cache.
WEFT_COVERAGE_FILE="$counts" ./zigw build test -Dcoverage=true "$@" >&2

# The VTable's entries in the order weft lists them (src/std_io/vtable.zig).
entries="$(sed -nE 's/^ *\.\{ "([A-Za-z]+)", [a-z_]+\.[A-Za-z]+ \},$/\1/p' src/std_io/vtable.zig)"
configs="io_uring-N epoll-N io_uring-1 io_uring-4"

echo "| VTable entry | io_uring | epoll | io_uring, 1 executor | io_uring, 4 executors |"
echo "|---|---|---|---|---|"
unreached=()
for entry in $entries; do
    row="| \`$entry\`"
    total=0
    for config in $configs; do
        n="$(awk -v c="$config" -v e="$entry" '$1 == c && $2 == e { s += $3 } END { print s + 0 }' \
            "$counts")"
        row="$row | $n"
        total=$((total + n))
    done
    echo "$row |"
    if [ "$total" -eq 0 ]; then unreached+=("$entry"); fi
done
count="$(echo "$entries" | wc -w)"
echo
echo "$((count - ${#unreached[@]})) of $count entries reached."
if [ "${#unreached[@]}" -gt 0 ]; then echo "Not reached: ${unreached[*]}"; fi

# The functions each run reached: the names addr2line gives the code blocks it ran, inlined
# callers included, with generic arguments ("(u32)", "((function 'f'))") and the compiler's
# "__anon_N" suffixes left out, as build/functions.zig writes them.
exes="$(awk '$2 == "exe" { print $3 }' "$counts" | sort -u)"
if [ "$(echo "$exes" | wc -w)" -ne 1 ]; then
    echo "coverage: expected the block counts of one test binary, got: $exes" >&2
    exit 1
fi
reached_dir="$(mktemp -d)"
trap 'rm -f "$counts"; rm -rf "$reached_dir"' EXIT
for config in $configs; do
    awk -v c="$config" '$1 == c && $2 == "block" { print "0x" $3 }' "$counts" |
        addr2line -a -f -i -e "$exes" |
        awk '/^0x/ { odd = 1; next } { if (odd) print; odd = !odd }' |
        sed -E ':a; s/\([^()]*\)//g; ta; s/__anon_[0-9]+//g; s/__[0-9]+$//' |
        sort -u >"$reached_dir/$config"
done

# Lists the functions of the given files (build/functions.zig), then a row per file: how many
# of them each run reached. The functions not reached in some run go to $reached_dir/missed.
report() {
    local title="$1" flags="$2"
    shift 2
    echo
    echo "| $title | functions | io_uring | epoll | io_uring, 1 executor | io_uring, 4 executors |"
    echo "|---|---|---|---|---|---|"
    for file in "$@"; do
        # shellcheck disable=SC2086 # $flags is empty or one flag
        ./zigw run build/functions.zig -- $flags src "$file" | sort -u >"$reached_dir/listed"
        local total row
        total="$(wc -l <"$reached_dir/listed")"
        [ "$total" -gt 0 ] || continue
        row="| \`${file#src/}\` | $total"
        for config in $configs; do
            row="$row | $(comm -12 "$reached_dir/listed" "$reached_dir/$config" | wc -l)"
            comm -23 "$reached_dir/listed" "$reached_dir/$config" |
                sed "s/\$/ $config/" >>"$reached_dir/missed"
        done
        echo "$row |"
    done
}
: >"$reached_dir/missed"
sync_files=()
for file in src/sync/*.zig; do
    # The namespace file holds no operations of weft.sync.
    case "$file" in src/sync/root.zig) continue ;; esac
    sync_files+=("$file")
done
report "weft.sync, public operations" --public "${sync_files[@]}"
report "lanes, public operations" --public src/lanes/*.zig
report "server, every function" "" $(find src/server -name '*.zig' | sort)
echo
if [ -s "$reached_dir/missed" ]; then
    echo "Functions some run did not reach (and the runs):"
    echo
    sort "$reached_dir/missed" | awk '
        $1 != name { if (name != "") print "- `" name "`:" runs; name = $1; runs = "" }
        { runs = runs " " $2 }
        END { if (name != "") print "- `" name "`:" runs }'
else
    echo "Every function listed was reached in every run."
fi

if [ "${#unreached[@]}" -gt 0 ]; then exit 1; fi
