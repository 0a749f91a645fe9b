#!/usr/bin/env bash
# Sets up sparsekv on a fresh Debian machine and runs the main job: the default evaluation of
# every compression policy on the embedded stories260K model, ending with its summary table.
set -euo pipefail
cd "$(dirname "$0")"

need=()
for p in build-essential libcmocka-dev libpcre2-dev gnuplot-nox; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "installing: ${need[*]}"
    SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

make -j"$(nproc)" all >/dev/null
echo "built build/sparsekv"
if [ ! -f models/stories260K.gguf ]; then
    echo "setup.sh: the embedded default model models/stories260K.gguf is missing from this checkout" >&2
    exit 1
fi
exec build/sparsekv eval --out eval-out "$@"
