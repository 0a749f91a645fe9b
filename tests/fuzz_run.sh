#!/usr/bin/env bash
# fuzz_run.sh BINARY [SECONDS] — a bounded libFuzzer run of the GGUF reader (tests/fuzz_gguf.c).
# Seeds a temporary corpus with small valid GGUF files (plus the repository's stories260K.gguf when
# present), fuzzes for SECONDS (default 30) with a memory limit, and exits nonzero when the
# fuzzer finds a crash, leak, timeout or out-of-memory (reproducers are copied to
# build/fuzz-artifacts/). Run from the repo root.
set -euo pipefail
bin=${1:?usage: tests/fuzz_run.sh FUZZ_BINARY [SECONDS]}
secs=${2:-30}
[ -x "$bin" ] || { echo "fuzz_run.sh: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d "${TMPDIR:-/tmp}/skv_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"

# Seeds: hand-built little-endian GGUFs (v3 and v2, scalars, strings, nested arrays, tensors).
PY3=$(command -v python3 || true)
[ -n "$PY3" ] || { echo "fuzz_run.sh: no python3; seeding with the shared model only"; PY3=true; }
"$PY3" - "$work/corpus" <<'PY'
import struct, sys, os
out = sys.argv[1]
def s(x): return struct.pack('<Q', len(x)) + x
def kv(k, t, payload): return s(k) + struct.pack('<I', t) + payload
def gguf(version, kvs, tensors, align=32):
    # tensors: (name, type, dims, data)
    head = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    infos, data, off = b'', b'', 0
    for name, ty, dims, blob in tensors:
        infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        infos += struct.pack('<IQ', ty, off)
        data += blob + b'\0' * ((-len(blob)) % align)
        off += len(blob) + ((-len(blob)) % align)
    body = head + infos
    return body + b'\0' * ((-len(body)) % align) + data
nested = struct.pack('<IQ', 9, 2) + struct.pack('<IQ', 4, 2) + struct.pack('<II', 1, 2) \
    + struct.pack('<IQ', 8, 1) + s(b'deep')
kvs = [kv(b'general.architecture', 8, s(b'llama')), kv(b'u8', 0, b'\x07'), kv(b'i16', 3, b'\xff\xff'),
       kv(b'f32', 6, struct.pack('<f', 1.5)), kv(b'bool', 7, b'\x01'), kv(b'u64', 10, struct.pack('<Q', 9)),
       kv(b'f64', 12, struct.pack('<d', -2.0)), kv(b'nested', 9, nested),
       kv(b'strs', 9, struct.pack('<IQ', 8, 2) + s(b'a\0b') + s(b''))]
tensors = [(b'w.f32', 0, [4, 2], bytes(32)), (b'w.q8_0', 8, [32], bytes(34)),
           (b'w.f16', 1, [2, 2, 2], bytes(16)), (b'w.q4_k', 12, [256], bytes(144))]
files = {
    'v3_full.gguf': gguf(3, kvs, tensors),
    'v2_full.gguf': gguf(2, kvs, tensors),
    'kv_only.gguf': gguf(3, kvs, []),
    'align64.gguf': gguf(3, [kv(b'general.alignment', 4, struct.pack('<I', 64))],
                         [(b'a', 30, [8], bytes(16)), (b'b', 2, [32], bytes(18))], 64),
    'empty.gguf': gguf(3, [], []),
}
for name, blob in files.items():
    open(os.path.join(out, name), 'wb').write(blob)
PY
model=models/stories260K.gguf  # the embedded default (also ../shared/models/stories260K/)
[ -f "$model" ] && cp "$model" "$work/corpus/"

echo "fuzz_run.sh: fuzzing $bin for ${secs}s ($(ls "$work/corpus" | wc -l) seeds)"
set +e
"$bin" "$work/corpus" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -timeout=10 -max_len=1200000 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    >"$work/log" 2>&1
rc=$?
set -e
tail -25 "$work/log"
if [ $rc -ne 0 ] || ls "$work/artifacts" | grep -q .; then
    echo "fuzz_run.sh: the fuzzer failed (exit $rc); reproducer(s):" >&2
    mkdir -p build/fuzz-artifacts && cp "$work/artifacts"/* build/fuzz-artifacts/ 2>/dev/null || true
    ls -d build/fuzz-artifacts/* >&2 || true
    exit 1
fi
echo "fuzz_run.sh: no crash"
