#!/usr/bin/env bash
# Runs every test binary given, counts cmocka's per-test results, and ends with one line
# "N passed, N failed" over all of them. Exit status 1 when anything failed or crashed.
set -u
# Tests write their temporary files under TMPDIR: give them one that is removed afterwards.
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/skv_tests.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
passed=0; failed=0; skipped=0; crashed=()
for t in "$@"; do
    name=$(basename "$t")
    t0=$(date +%s%N)
    out=$("$t" 2>&1); rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    printf '%s\n' "$out" | grep -E '^\[  (FAILED|  ERROR  )|^\[ +(ERROR|FAILED) +\]' | sed "s/^/$name: /"
    # why tests were skipped (support.c's "fixture ... not found"), each reason once
    printf '%s\n' "$out" | grep -E '^\[  SKIP    \] .' | sort -u | sed "s/^/$name: /"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    k=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${k:-0}))
    if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        crashed+=("$name (exit $rc)"); failed=$((failed + 1))
        printf '%s\n' "$out" | tail -20 | sed "s/^/$name: /"
    fi
    # with the wall time: CI must stay under 15 minutes, this says where they go
    printf '%-28s %3s passed %3s failed %5d.%d s%s\n' "$name" "${p:-0}" "${f:-0}" \
        $((ms / 1000)) $((ms % 1000 / 100)) "$([ "${k:-0}" -gt 0 ] && echo " ${k} skipped")"
done
[ ${#crashed[@]} -gt 0 ] && echo "crashed: ${crashed[*]}"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped (absent fixtures or CPU features)"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
