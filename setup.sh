#!/usr/bin/env bash
# Sets up sparsekv on a fresh Debian machine and runs the main job: the default evaluation of
# every compression policy on the embedded stories260K model, ending with its summary table.
#   ./setup.sh [--test-deps] [EVAL OPTIONS...]
# --test-deps also installs what `make check` needs (clang, valgrind, pytest, NumPy, PyTorch).
# Other options go to `sparsekv eval` (its results go to eval-out/, replaced on each run).
set -euo pipefail
cd "$(dirname "$0")"

pkgs=(build-essential libcmocka-dev libpcre2-dev gnuplot-nox)
if [ "${1:-}" = "--test-deps" ]; then
    shift
    pkgs+=(clang libclang-rt-14-dev valgrind pkg-config python3 python3-numpy python3-pytest
           python3-torch)
fi
need=()
for p in "${pkgs[@]}"; do
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
exec build/sparsekv eval --out eval-out --overwrite "$@"
