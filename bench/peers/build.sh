#!/usr/bin/env bash
# Builds the peer benchmark programs in release mode into bench/peers/bin/:
#   peer-tokio   Tokio/hyper scenarios (cargo build --release --locked, Cargo.lock checked in)
#   peer-go      Go scenarios and servers (go build, go.mod checked in; standard library only,
#                so there is no go.sum)
#   echo-client  the one echo load generator used against every echo server
# Idempotent and quick when nothing changed (cargo and go skip up-to-date work; binaries are
# copied only when they differ). Not part of CI. Needs cargo and go; $CARGO and $GO override
# where they are looked for.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$here/bin
mkdir -p "$bin"

find_tool() { # <name> <override> <fallback path>
    local name=$1 override=$2 fallback=$3
    if [[ -n $override ]]; then echo "$override"; return; fi
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
    if [[ -x $fallback ]]; then echo "$fallback"; return; fi
    echo "build.sh: $name not found (set \$${name^^})" >&2
    exit 1
}
cargo=$(find_tool cargo "${CARGO:-}" "$HOME/.cargo/bin/cargo")
go=$(find_tool go "${GO:-}" /usr/local/go/bin/go)

echo "build.sh: $("$cargo" --version)" >&2
(cd "$here/tokio" && "$cargo" build --release --locked --quiet)
install -C -m 755 "$here/tokio/target/release/peer-tokio" "$bin/peer-tokio"

echo "build.sh: $("$go" version)" >&2
# GOTOOLCHAIN=local: build with the installed Go, never download another toolchain.
(cd "$here/go" && GOTOOLCHAIN=local "$go" build -trimpath -o "$here/go/bin/" ./cmd/...)
for program in peer-go echo-client; do
    install -C -m 755 "$here/go/bin/$program" "$bin/$program"
done
echo "build.sh: built $bin/{peer-tokio,peer-go,echo-client}" >&2
