#!/usr/bin/env bash
# fuzz_results_run.sh BINARY [SECONDS] — a bounded libFuzzer run of eval-merge's results.jsonl
# reader (tests/fuzz_results.c). Seeds a temporary corpus with tests/corpus/results/ (real
# result lines of both tasks, the gnuplot-injection lines of issue 12, malformed ones), fuzzes
# for SECONDS (default 20) with a memory limit, and exits nonzero when the fuzzer finds a
# crash, leak, timeout, out-of-memory or a shell escape in plots.gp (reproducers are copied to
# build/fuzz-artifacts/). Run from the repo root.
set -euo pipefail
bin=${1:?usage: tests/fuzz_results_run.sh FUZZ_BINARY [SECONDS]}
secs=${2:-20}
[ -x "$bin" ] || { echo "fuzz_results_run.sh: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d "${TMPDIR:-/tmp}/skv_fuzz_results.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp tests/corpus/results/* "$work/corpus/"

echo "fuzz_results_run.sh: fuzzing $bin for ${secs}s ($(ls "$work/corpus" | wc -l) seeds)"
set +e
"$bin" "$work/corpus" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -timeout=10 -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    >"$work/log" 2>&1
rc=$?
set -e
tail -25 "$work/log"
if [ $rc -ne 0 ] || ls "$work/artifacts" | grep -q .; then
    echo "fuzz_results_run.sh: the fuzzer failed (exit $rc); reproducer(s):" >&2
    mkdir -p build/fuzz-artifacts && cp "$work/artifacts"/* build/fuzz-artifacts/ 2>/dev/null || true
    ls -d build/fuzz-artifacts/* >&2 || true
    exit 1
fi
echo "fuzz_results_run.sh: no crash"
