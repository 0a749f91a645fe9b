#!/usr/bin/env bash
# Runs every test binary given, counts cmocka's per-test results, and ends with one line
# "N passed, N failed" over all of them. Exit status 1 when anything failed or crashed.
#
#   tests/run.sh [VAR=VALUE] BIN [[VAR=VALUE] BIN]...
#
# VAR=VALUE sets that variable for the one binary after it (the Makefile's second pass of the
# kernel tests with SKV_SIMD=avx2; its line says so). SKV_TEST_JOBS binaries run at once
# (default: the online cores): CI's time is mostly the sanitizer run's single-threaded tests, so
# give the slowest first. Each binary has its own TMPDIR; results are printed in the order given,
# each with its own wall time. A binary running past SKV_TEST_TIMEOUT seconds (default 600) is
# stopped and counted as failed.
set -u
# Tests write their temporary files under TMPDIR: give them one that is removed afterwards.
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/skv_tests.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
jobs=${SKV_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: SKV_TEST_JOBS must be a positive count" >&2; exit 2; }
# A binary that hangs fails instead of holding the suite (a parser loop that never ended ran
# past 600 s); the slowest, test_matmul under ASan, takes under a minute.
limit=${SKV_TEST_TIMEOUT:-600}
[[ $limit =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: SKV_TEST_TIMEOUT must be seconds > 0" >&2; exit 2; }

bins=() envs=() env=""
for a in "$@"; do # a binary's path may hold '=': only NAME=VALUE is an assignment
    if [[ $a =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then env=$a; else bins+=("$a"); envs+=("$env"); env=""; fi
done
[ ${#bins[@]} -gt 0 ] || { echo "run.sh: no test binaries given" >&2; exit 2; }
[ -z "$env" ] || { echo "run.sh: $env is followed by no binary" >&2; exit 2; }

# Binary i: its output in $TMPDIR/i.out, then "exit-status milliseconds" in $TMPDIR/i.done.
start() {
    local i=$1 dir=$TMPDIR/$1
    mkdir -p "$dir"
    (
        t0=$(date +%s%N)
        if [ -n "${envs[$i]}" ]; then
            TMPDIR=$dir timeout -k 10 "$limit" env "${envs[$i]}" "${bins[$i]}" >"$TMPDIR/$i.out" 2>&1
        else
            TMPDIR=$dir timeout -k 10 "$limit" "${bins[$i]}" >"$TMPDIR/$i.out" 2>&1
        fi
        rc=$?
        echo "$rc $((($(date +%s%N) - t0) / 1000000))" >"$TMPDIR/$i.tmp"
        mv "$TMPDIR/$i.tmp" "$TMPDIR/$i.done"
    ) &
}

passed=0; failed=0; skipped=0; crashed=()
report() {
    local i=$1 name out rc ms p f k
    name=$(basename "${bins[$i]}")${envs[$i]:+ (${envs[$i]})}
    read -r rc ms <"$TMPDIR/$i.done"
    out=$(cat "$TMPDIR/$i.out")
    printf '%s\n' "$out" | grep -E '^\[  (FAILED|  ERROR  )|^\[ +(ERROR|FAILED) +\]' | sed "s/^/$name: /"
    # why tests were skipped (support.c's "fixture ... not found"), each reason once
    printf '%s\n' "$out" | grep -E '^\[  SKIP    \] .' | sort -u | sed "s/^/$name: /"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    k=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${k:-0}))
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && [ "$ms" -ge $((limit * 1000)) ]; then
        crashed+=("$name (timed out after $limit s, SKV_TEST_TIMEOUT)"); failed=$((failed + 1))
        printf '%s\n' "$out" | tail -20 | sed "s/^/$name: /"
    elif [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        crashed+=("$name (exit $rc)"); failed=$((failed + 1))
        printf '%s\n' "$out" | tail -20 | sed "s/^/$name: /"
    fi
    # with the wall time: CI must stay under 15 minutes, this says where they go
    printf '%-36s %3s passed %3s failed %5d.%d s%s\n' "$name" "${p:-0}" "${f:-0}" \
        $((ms / 1000)) $((ms % 1000 / 100)) "$([ "${k:-0}" -gt 0 ] && echo " ${k} skipped")"
}

# Running jobs are counted with `jobs -r`, not by wait's returns: bash reaps a job that ended
# before `wait -n`, which then returns 127 at once without one.
n=${#bins[@]} next=0 shown=0
while [ "$shown" -lt "$n" ]; do
    while [ "$next" -lt "$n" ] && [ "$(jobs -rp | wc -l)" -lt "$jobs" ]; do
        start "$next"; next=$((next + 1))
    done
    if [ ! -e "$TMPDIR/$shown.done" ]; then
        if [ -n "$(jobs -rp)" ]; then
            wait -n 2>/dev/null
        elif [ "$next" -ge "$n" ] || [ "$shown" -lt "$next" ]; then
            # nothing runs and its result never came: its subshell was killed
            echo "137 0" >"$TMPDIR/$shown.done"
        fi
    fi
    while [ "$shown" -lt "$n" ] && [ -e "$TMPDIR/$shown.done" ]; do
        report "$shown"; shown=$((shown + 1))
    done
done
wait
[ ${#crashed[@]} -gt 0 ] && echo "crashed: ${crashed[*]}"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped (absent fixtures or CPU features)"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
