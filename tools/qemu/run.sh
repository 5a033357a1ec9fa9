#!/usr/bin/env bash
# Builds each probe in this folder for the host and for aarch64-linux, runs the host build
# natively and the aarch64 build under qemu-user, and prints both exit codes. A probe exits 0
# when the kernel feature it checks works; see the comment at the top of each.
set -uo pipefail
cd "$(dirname "$0")/../.."
qemu="${QEMU:-qemu-aarch64-static}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for source in tools/qemu/*.zig; do
    name="$(basename "$source" .zig)"
    ./zigw build-exe -femit-bin="$out/$name-native" "$source" || exit 1
    ./zigw build-exe -target aarch64-linux -femit-bin="$out/$name-aarch64" "$source" || exit 1
    echo "== $name"
    "$out/$name-native"
    native=$?
    "$qemu" "$out/$name-aarch64"
    emulated=$?
    echo "   native exit $native, aarch64 under $qemu exit $emulated"
done
