#!/usr/bin/env bash
# valgrind --leak-check=full on `generate` with the default model: no errors, no leaks.
set -eu
cli=${1:?usage: valgrind_generate.sh CLI}
if ! command -v valgrind >/dev/null; then echo "valgrind not installed"; exit 1; fi
model=${SKV_MODELS:-../shared/models}/stories260K/stories260K.gguf
[ -f "$model" ] || model=models/stories260K.gguf  # a plain clone: the repository's copy
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# -t 2: the thread pool is part of what must tear down cleanly.
if valgrind --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all \
        --error-exitcode=99 --log-file="$log" \
        "$cli" generate -m "$model" --temp 0 -n 24 -t 2 --quiet >/dev/null; then
    echo "valgrind generate: clean ($(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log"))"
else
    cat "$log"
    echo "valgrind generate: FAILED"
    exit 1
fi
