#!/usr/bin/env bash
# Which std.Io VTable entries weft's own test suite reaches, per test run (io_uring, epoll,
# io_uring with 1 and with 4 executors): builds the suite with -Dcoverage=true, runs it with
# the counts going to a fresh file (src/std_io/coverage.zig), and prints a Markdown table of
# calls per entry and run, then the entries no test reached. Exits 1 if any entry is
# unreached. Extra arguments go to `zig build` (e.g. -Dtest-filter=fs:).
#
#   bash build/coverage.sh            # the table docs/COVERAGE.md records
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
if [ "${#unreached[@]}" -gt 0 ]; then
    echo "Not reached: ${unreached[*]}"
    exit 1
fi
