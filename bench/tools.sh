#!/usr/bin/env bash
# Installs the load and timing tools the peer benchmarks use: wrk (HTTP keep-alive load),
# ab from apache2-utils (HTTP without keep-alive, `ab -n 10000 -c 50`) and hyperfine.
# Idempotent: a tool already on PATH is left alone, and `apt-get update` runs at most once,
# only when something is missing. Not part of CI.
set -euo pipefail

declare -A package_of=([wrk]=wrk [ab]=apache2-utils [hyperfine]=hyperfine)
missing=()
for tool in wrk ab hyperfine; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("${package_of[$tool]}")
done

if ((${#missing[@]} == 0)); then
    echo "tools.sh: wrk, ab and hyperfine already installed"
    exit 0
fi

sudo=""
if ((EUID != 0)); then sudo="sudo"; fi
echo "tools.sh: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
for tool in wrk ab hyperfine; do
    command -v "$tool" >/dev/null 2>&1 || { echo "tools.sh: $tool still missing" >&2; exit 1; }
done
