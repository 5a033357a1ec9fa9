#!/usr/bin/env bash
# weft's mutation harness: applies each deliberate bug of tools/mutate/catalog.txt, one at a
# time, in a scratch git worktree of HEAD, runs the smallest test selection that should catch
# it, and prints one line per mutation: caught (a test failed, named), timeout (a test failed
# only at its time limit: a hang that does not name its cause), survived (the selection
# passed: a property no test checks), hang (the selection ran past its own limit), or stale
# (the catalog's text is not in the file once, or the change does not compile: fix the
# entry). Ends with the catch rate.
#
#   bash tools/mutate/run.sh [NAME...]        (every mutation when no NAME is given)
#
# Each mutation rebuilds the Debug test binary (seconds: the self-hosted backend) and runs its
# selection with a limit of MUTATE_TIMEOUT seconds (default 300), each test with
# MUTATE_TEST_TIMEOUT (default 30). Not in .ci/run's time budget: run it by hand after changing a tested property,
# and record the rate in docs/COVERAGE.md.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
catalog=tools/mutate/catalog.txt
limit=${MUTATE_TIMEOUT:-300}
# A test that only fails at this limit is reported apart: a hang that does not name its cause.
test_limit=${MUTATE_TEST_TIMEOUT:-30}
wanted=("$@")

./zigw version >/dev/null || exit 1 # installs the toolchain the worktree borrows
worktree=$(mktemp -d)
log=$(mktemp)
trap 'git worktree remove --force "$worktree" 2>/dev/null; rm -rf "$worktree" "$log"' EXIT
git worktree add --quiet --detach "$worktree" HEAD || exit 1
ln -s "$root/.zig-toolchain" "$worktree/.zig-toolchain"

caught=0
survived=0
hung=0
timeouts=0
stale=0

# is_wanted NAME: whether NAME was asked for (everything when nothing was).
is_wanted() {
    ((${#wanted[@]} == 0)) && return 0
    local w
    for w in "${wanted[@]}"; do [[ $w == "$1" ]] && return 0; done
    return 1
}

# mutate: applies, runs and judges the entry held in the variables below, then restores.
mutate() {
    is_wanted "$name" || return 0
    local target="$worktree/$file" occurrences
    occurrences=$(grep -cF -- "$old" "$target" 2>/dev/null || true)
    if [[ $occurrences != 1 ]]; then
        printf '%-36s stale     (%s occurrences of its text in %s)\n' "$name" "${occurrences:-0}" "$file"
        stale=$((stale + 1))
        return 0
    fi
    local original
    original=$(cat "$target"; printf x)
    original=${original%x}
    printf '%s' "${original/"$old"/"$new"}" >"$target"
    local args=(build test "-Dtest-run=$run" --summary line --test-timeout "${test_limit}s") f
    for f in "${filters[@]}"; do args+=("-Dtest-filter=$f"); done
    local start=$SECONDS rc
    (cd "$worktree" && timeout --kill-after=10 "$limit" ./zigw "${args[@]}") >"$log" 2>&1
    rc=$?
    printf '%s' "$original" >"$target"
    local seconds=$((SECONDS - start)) failed
    failed=$(grep -E "^error: '.*' (failed|terminated|timed out)" "$log" | head -n 1 |
        sed -E "s/^error: '(.*)' (failed|terminated|timed out).*/\1/")
    if ((rc == 124 || rc == 137)); then
        printf '%-36s hang      (%d s) %s\n' "$name" "$seconds" "$property"
        hung=$((hung + 1))
    elif ((rc != 0)) && grep -qE "^error: '.*' timed out" "$log"; then
        printf '%-36s timeout   (%d s) %s timed out: a hang, not named\n' "$name" "$seconds" \
            "$failed"
        timeouts=$((timeouts + 1))
    elif ((rc != 0)) && [[ -n $failed ]]; then
        printf '%-36s caught    (%d s) by %s\n' "$name" "$seconds" "$failed"
        caught=$((caught + 1))
    elif ((rc != 0)) && grep -q "compile test .* error" "$log"; then
        # Not a bug a test could catch: fix the entry.
        printf '%-36s stale     (%d s) does not compile: %s\n' "$name" "$seconds" \
            "$(grep -m 1 -E ': error: ' "$log" | cut -c 1-120)"
        stale=$((stale + 1))
    elif ((rc != 0)); then
        # No test named: the runner crashed.
        printf '%-36s caught    (%d s) by a crash: %s\n' "$name" "$seconds" \
            "$(grep -m 1 -E 'error' "$log" | cut -c 1-120)"
        caught=$((caught + 1))
    else
        printf '%-36s SURVIVED  (%d s) %s\n' "$name" "$seconds" "$property"
        survived=$((survived + 1))
    fi
}

name="" file="" property="" run="io_uring" old="" new=""
filters=()
flush() {
    [[ -n $name ]] && mutate
    name="" file="" property="" run="io_uring" old="" new=""
    filters=()
}
while IFS= read -r line || [[ -n $line ]]; do
    [[ $line == \#* ]] && continue
    if [[ -z $line ]]; then
        flush
        continue
    fi
    key=${line%%: *}
    value=${line#*: }
    case $key in
        name) name=$value ;;
        file) file=$value ;;
        function) ;;
        property) property=$value ;;
        run) run=$value ;;
        filter) filters+=("$value") ;;
        old) old=$value ;;
        new) new=$value ;;
        *) echo "mutate: unknown key '$key' in $catalog" >&2 ;;
    esac
done <"$catalog"
flush

total=$((caught + timeouts + survived + hung))
echo "mutate: $caught caught by name, $timeouts caught only by a test's timeout," \
    "$survived survived, $hung hung, $stale stale, of $((total + stale))"
((survived + hung + stale == 0))
