#!/usr/bin/env bash
# fuzz_model_run.sh BINARY [SECONDS] — a bounded libFuzzer run of model and vocabulary loading
# (tests/fuzz_model.c). Seeds a temporary corpus with the embedded stories260K and any file in
# tests/corpus/model/ (hand-made hostile models), mutates with the dictionary
# tests/corpus/model/model.dict (architecture, RoPE and tokenizer keys), fuzzes for SECONDS
# (default 20) and exits nonzero when the fuzzer finds a crash, leak, timeout or out-of-memory
# (reproducers are copied to build/fuzz-artifacts/). Run from the repo root.
set -euo pipefail
bin=${1:?usage: tests/fuzz_model_run.sh FUZZ_BINARY [SECONDS]}
secs=${2:-20}
[ -x "$bin" ] || { echo "fuzz_model_run.sh: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d "${TMPDIR:-/tmp}/skv_fuzz_model.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp models/stories260K.gguf "$work/corpus/"
find tests/corpus/model -name '*.gguf' -exec cp {} "$work/corpus/" \;

echo "fuzz_model_run.sh: fuzzing $bin for ${secs}s ($(ls "$work/corpus" | wc -l) seeds)"
set +e
"$bin" "$work/corpus" -dict=tests/corpus/model/model.dict -max_total_time="$secs" \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=20 -max_len=1200000 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$work/log" 2>&1
rc=$?
set -e
tail -25 "$work/log"
if [ $rc -ne 0 ] || ls "$work/artifacts" | grep -q .; then
    echo "fuzz_model_run.sh: the fuzzer failed (exit $rc); reproducer(s):" >&2
    mkdir -p build/fuzz-artifacts && cp "$work/artifacts"/* build/fuzz-artifacts/ 2>/dev/null || true
    ls -d build/fuzz-artifacts/* >&2 || true
    exit 1
fi
echo "fuzz_model_run.sh: no crash"
