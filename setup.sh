#!/usr/bin/env bash
# Sets up sparsekv on a fresh Debian machine and runs the main job: the default evaluation of
# every compression policy on the embedded stories260K model, ending with its summary table.
#   ./setup.sh [--test-deps] [EVAL OPTIONS...]
# --test-deps also installs what `make check` needs (clang, valgrind, pytest, NumPy, PyTorch).
# Other options go to `sparsekv eval`; its results go to eval-out/, replaced on each run,
# unless --out DIR (or --resume DIR) is given.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
    sed -n '2,7s/^# \{0,1\}//p' "$0"
    echo "(sparsekv eval --help lists the eval options, once built.)"
}
pkgs=(build-essential libcmocka-dev libpcre2-dev gnuplot-nox)
test_deps=0 own_out=1 own_overwrite=1
args=()
for a in "$@"; do
    case "$a" in
    --test-deps) test_deps=1 ;;
    -h | --help) usage; exit 0 ;;
    *)
        # the caller's own output directory replaces eval-out/ (and is not overwritten unasked)
        case "$a" in --out | --out=* | --resume | --resume=*) own_out=0 own_overwrite=0 ;; esac
        [ "$a" = --overwrite ] && own_overwrite=0
        args+=("$a")
        ;;
    esac
done
if [ "$test_deps" = 1 ]; then
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
own=()
[ "$own_out" = 1 ] && own+=(--out eval-out)
[ "$own_overwrite" = 1 ] && own+=(--overwrite)
exec build/sparsekv eval "${own[@]}" "${args[@]}"
