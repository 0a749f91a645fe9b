#!/usr/bin/env bash
# bench/run.sh — what `make bench` runs: measures sparsekv against this machine's ceilings and
# writes bench/results.md.
#
#   bench/run.sh [PATH/TO/sparsekv]
#
# Synthetic models with SmolLM2-135M's exact shapes (random weights: the speed is that of the real
# model) are generated into $SKV_BENCH_DIR (default ${TMPDIR:-/tmp}/sparsekv-bench) and reused
# until the sources that write them change (bench/synth_model.sh). Nothing here is committed (*.gguf is ignored).
# A few minutes on an idle 2-core machine; slower when the machine is shared.
set -euo pipefail

cd "$(dirname "$0")/.."
CLI=${1:-build/sparsekv}
DIR=${SKV_BENCH_DIR:-${TMPDIR:-/tmp}/sparsekv-bench}
OUT=bench/results.md
REPS=${SKV_BENCH_REPS:-3}
THREADS=${SKV_BENCH_THREADS:-1,2}
# SKV_BENCH_QUICK=1: tiny sizes, a smoke test of this script (the targets do not apply)
if [ -n "${SKV_BENCH_QUICK:-}" ]; then PP=64 TG=8 D1=256 D2=512 TGD=8 OUT=$DIR/results-quick.md; else
    PP=512 TG=128 D1=4096 D2=8192 TGD=64; fi
TMAX=${THREADS##*,}
[ -x "$CLI" ] || { echo "bench/run.sh: no CLI at $CLI (run make first)" >&2; exit 1; }
mkdir -p "$DIR"

# shellcheck source=bench/synth_model.sh
. bench/synth_model.sh
model() { synth_model "$CLI" "$DIR" "$1" "$2"; } # preset type -> path

F16=$(model smollm2-135m f16)
Q80=$(model smollm2-135m q8_0)
JSON="$DIR/results.jsonl"
: >"$JSON"
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
t_start=$(date +%s)

run() { # label, then bench arguments
    local label=$1
    shift
    echo "bench: $label" >&2
    "$CLI" bench --json -r "$REPS" "$@" | tee -a "$JSON" >/dev/null
}
# An f16 KV cache, as llama.cpp's default and the side-by-side below.
run "smollm2-135m f16: pp$PP, tg$TG at $THREADS threads" -m "$F16" -p $PP -n $TG -t "$THREADS" \
    --kv-type f16 --roofline
run "smollm2-135m q8_0: pp$PP, tg$TG at $THREADS threads" -m "$Q80" -p $PP -n $TG -t "$THREADS" \
    --kv-type f16 --roofline
run "snapkv compression of a $D1-token cache" -m "$F16" -p 0 -n 16 -t "$TMAX" --depth $D1 \
    --policy snapkv --keep 0.1 --window 32
run "decode at depth $D2, snapkv keep 0.1 vs dense" -m "$F16" -p 0 -n $TGD -t "$TMAX" \
    --depth $D2 --policy snapkv --keep 0.1 --window 32 --roofline
# Where F16 prefill runs on AMX tiles, the same prefill on the FMA code too (SKV_NO_AMX=1): the
# FMA peak bounds only that one.
# The SIMD level the kernels run at (SKV_SIMD=scalar|avx2 forces a lower one), what the CPU has,
# and whether F16/BF16 prefill runs on AMX tiles.
sysjson=$("$CLI" info --system --json 2>/dev/null || echo '{}')
AMX=$(printf '%s' "$sysjson" | grep -c '"amx":true' || true)
if [ "$AMX" = 1 ]; then
    SKV_NO_AMX=1 run "smollm2-135m f16: pp$PP at $TMAX threads on the FMA code (SKV_NO_AMX=1)" \
        -m "$F16" -p $PP -n 0 -t "$TMAX" --kv-type f16 --roofline
fi

# Does compression give memory back? Resident memory before/after compressing a cache.
MEM_BIN=$(dirname "$CLI")/bench_mem_compress
MEM_OUT="$DIR/memory.md"
: >"$MEM_OUT"
if [ -x "$MEM_BIN" ]; then
    echo "bench: resident memory of a $D1-token cache compressed to 10%" >&2
    "$MEM_BIN" "$F16" -c $D1 --keep 0.1 --policy sink_recent -t "$TMAX" >"$MEM_OUT"
fi

load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
elapsed=$(($(date +%s) - t_start))
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || echo "?")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
simd=$(printf '%s' "$sysjson" | sed -n 's/.*"simd":"\([a-z0-9]*\)".*/\1/p')
cpu_simd=$(printf '%s' "$sysjson" | sed -n 's/.*"cpu_simd":"\([a-z0-9]*\)".*/\1/p')
cpu_features=$(printf '%s' "$sysjson" | sed -n 's/.*"cpu_features":"\([^"]*\)".*/\1/p')

awk -v cpu="$cpu" -v cores="$(nproc 2>/dev/null || echo '?')" -v commit="$commit" \
    -v date="$(date -u '+%Y-%m-%d %H:%M UTC')" -v lb="$load_before" -v la="$load_after" \
    -v elapsed="$elapsed" -v tmax="$TMAX" -v reps="$REPS" -v pp="pp$PP" -v tg="tg$TG" \
    -v d1="$D1" -v d2="$D2" -v simd="${simd:-?}" -v cpu_simd="${cpu_simd:-?}" \
    -v cpu_features="${cpu_features:-?}" -v simd_env="${SKV_SIMD:-}" -v amx="$AMX" '
function get(key,   m) { # the value of "key" in the current JSON line ("" when absent)
    if (match($0, "\"" key "\":(\"[^\"]*\"|[-0-9.eE+]+|true|false)")) {
        m = substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
        gsub(/"/, "", m)
        return m
    }
    return ""
}
function f1(x) { return x == "" ? "-" : sprintf("%.1f", x) }
function f2(x) { return x == "" ? "-" : sprintf("%.2f", x) }
function pc(x) { return x == "" ? "-" : sprintf("%.1f%%", x) }
function fx(x) { return x == "" ? "-" : sprintf("%.2fx", x) }
function p0(x) { return x == "" ? "-" : sprintf("%.0f%%", x) }
function check(name, got, op, want, unit,   ok, shown) {
    if (got == "") { ok = "not measured"; shown = "-" }
    else {
        ok = (op == ">=" ? got + 0 >= want + 0 : got + 0 <= want + 0) ? "yes" : "**no**"
        shown = sprintf("%.2f%s", got, unit)
    }
    targets = targets sprintf("| %s | %s | %s %s%s | %s |\n", name, shown, op, want, unit, ok)
}
{
    rec = get("record")
    if (rec == "roofline") {
        if (prev != "roofline") n_roof_runs++
        roof = roof sprintf("| %d | %s | %.1f | %.2f |\n", n_roof_runs, get("threads"),
            get("fma_gflops"), get("read_gbs"))
        impl = get("impl")
    }
    prev = rec
    if (rec == "test") {
        fma_code = amx == 1 && get("amx") == "false" # the SKV_NO_AMX=1 run
        key = get("type") (fma_code ? " fma" : "") " " get("threads") " " get("test")
        rows = rows sprintf("| %s | %s | %s | %s | %s (%s..%s) | %s | %s | %s | %s |\n",
            get("model"), get("type") (fma_code ? " (FMA code)" : ""), get("threads"), get("test"), f2(get("tps_median")),
            f2(get("tps_min")), f2(get("tps_max")), f1(get("gflops")), pc(get("pct_fma")),
            f2(get("gbs")), pc(get("pct_bw")))
        tps[key] = get("tps_median"); pfma[key] = get("pct_fma"); pbw[key] = get("pct_bw")
    } else if (rec == "compress") {
        d = get("depth")
        # tg 0 (bench -n 0): the decode figures are null, which get() reads as ""
        tgn = get("tg") + 0
        comp = comp sprintf("| %s | %s | %s | %s | %s | %s | %.1f -> %.1f MiB | %.2f | %.1f | %.2f%% | %s | %s | %s | %s | %s | %s |\n",
            get("model"), get("type"), get("threads"), d, get("policy"), get("keep") + 0,
            get("kv_bytes_before") / 1048576, get("kv_bytes_after") / 1048576,
            get("prefill_ms") / 1000, get("compress_ms"), get("pct_prefill"),
            tgn > 0 ? "tg" tgn : "-", f2(get("tps_dense")), f2(get("tps_compressed")),
            fx(get("speedup")), fx(get("speedup_predicted")), p0(get("pct_predicted")))
        pct_prefill[d] = get("pct_prefill")
        if (tgn > 0) pct_pred[d] = get("pct_predicted")
    }
}
END {
    print "# sparsekv benchmark results"
    print ""
    printf "Generated by `make bench` (bench/run.sh) on %s, commit %s (its own tables in %d s; the runs side by side with llama.cpp, where given, follow them).\n", date, commit, elapsed
    printf "Machine: %s, %s online cores. Load average before / after: %s / %s%s.\n", cpu, cores, lb, la,
        " (a busy machine lowers both the ceilings and the results; the percentages compare numbers measured in the same run)"
    printf "SIMD level of the kernels: %s%s (the CPU supports up to %s; features: %s).\n", simd,
        simd_env != "" ? " (SKV_SIMD=" simd_env ")" : "", cpu_simd, cpu_features
    if (amx == 1) {
        print "F16 and BF16 prefill ran on AMX-BF16 tiles (`info --system`: amx; F16 as exact bf16 parts,"
        print "summed in float), which the FMA peak does not bound; the row \"f16 (FMA code)\" is the same"
        print "prefill with SKV_NO_AMX=1, the AVX-512 FMA code."
    }
    print ""
    print "Models: synthetic SmolLM2-135M (`sparsekv synth-model --preset smollm2-135m`): the real"
    print "model'"'"'s exact shapes (30 layers, dim 576, 9/3 heads, ffn 1536, vocab 49152, tied output),"
    print "random weights. Each test: median of " reps " runs after a warm-up (min..max in brackets;"
    print "the depth prefill rows are one cold run, the copies of its context decode one untimed token first);"
    print "prefill and decode with an f16 KV cache (the depth and compression rows: f32)."
    print "pp: GFLOP/s = (2 x (layer matrix params x tokens + output matrix params, logits of the last token"
    print "only) + causal attention FLOPs) / time, against the"
    print "float FMA peak (quantized weights multiply in integers: with VNNI, 64 products per instruction,"
    print "so q8_0 can pass 100%). tg: GB/s = (weight bytes + KV bytes read per token) / time per token,"
    print "against the read bandwidth."
    print ""
    print "## Machine ceilings (measured by `sparsekv bench --roofline`, " impl " loops)"
    print ""
    print "Measured at the start of each bench invocation (1: f16 runs, 2: q8_0 runs, 3: depth " d2 ");"
    print "each row of the tables below is compared with the ceilings of its own invocation."
    print ""
    print "| invocation | threads | FMA peak GFLOP/s | read bandwidth GB/s |"
    print "|---:|---:|---:|---:|"
    printf "%s", roof
    print ""
    print "## Prefill and decode"
    print ""
    print "| model | type | threads | test | t/s | GFLOP/s | % FMA peak | GB/s | % read BW |"
    print "|---|---|---:|---|---:|---:|---:|---:|---:|"
    printf "%s", rows
    print ""
    print "## Compressed-cache decode (engine protocol, W = 32)"
    print ""
    print "| model | type | threads | depth | policy | keep | KV before -> after | prefill s | compress ms | % of prefill | decode | dense t/s | compressed t/s | speedup | predicted by bytes | % of predicted |"
    print "|---|---|---:|---:|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"
    printf "%s", comp
    print ""
    print "Predicted speedup = (weight bytes + dense KV bytes) / (weight bytes + kept KV bytes) read per"
    print "decoded token."
    print ""
    check(pp " " tmax "t f16: % of FMA peak" (amx == 1 ? " (AMX tiles)" : ""), pfma["f16 " tmax " " pp], ">=", 70, "%")
    if (amx == 1)
        check(pp " " tmax "t f16 on the FMA code (SKV_NO_AMX=1): % of FMA peak", pfma["f16 fma " tmax " " pp], ">=", 70, "%")
    check(pp " " tmax "t q8_0: % of FMA peak", pfma["q8_0 " tmax " " pp], ">=", 55, "%")
    check(tg " " tmax "t f16: % of read bandwidth", pbw["f16 " tmax " " tg], ">=", 80, "%")
    check(tg " " tmax "t q8_0: % of read bandwidth", pbw["q8_0 " tmax " " tg], ">=", 60, "%")
    if (tps["f16 1 " pp] > 0)
        check(pp " f16 " tmax "t / 1t", tps["f16 " tmax " " pp] / tps["f16 1 " pp], ">=", 1.6, "x")
    if (tps["q8_0 1 " pp] > 0)
        check(pp " q8_0 " tmax "t / 1t", tps["q8_0 " tmax " " pp] / tps["q8_0 1 " pp], ">=", 1.6, "x")
    check("snapkv compression of a " d1 "-token cache, % of its prefill", pct_prefill[d1], "<=", 2, "%")
    check("decode at depth " d2 ", keep 0.1: measured speedup, % of predicted", pct_pred[d2], ">=", 85, "%")
    print "## Targets"
    print ""
    print "| target | measured | goal | met |"
    print "|---|---:|---:|---|"
    printf "%s", targets
}' "$JSON" >"$OUT"

if [ -s "$MEM_OUT" ]; then
    {
        echo
        echo "## Memory given back by compression (build/bench_mem_compress)"
        echo
        echo "Resident memory of the process after prefilling a $D1-token f32 cache, and after"
        echo "compressing it to 10%: the drop should match the KV bytes removed (target >= 80%)."
        echo
        cat "$MEM_OUT"
    } >>"$OUT"
fi

# The targets of a vs_llama.sh table: pp >= 1.1x, tg >= 1.2x (PREFIX names the level). The last
# column is the ratio sparsekv would reach at 100% of the ceiling (llama.cpp's share of it in the
# same rounds): for decode and F16/F32 prefill, where the ceiling binds; quantized prefill
# multiplies in integers and BF16 in vdpbf16ps (two products per lane), and F16/BF16 prefill on
# AMX tiles in neither: all can pass the float FMA peak, so none is given there.
vs_targets() { # prefix table
    awk -F'|' -v pre="$1" -v amx="${AMX:-0}" '/^\| [a-z]/ && $7 ~ /x/ {
        r = $7 + 0; t = $4; gsub(/ /, "", t); m = $2 $3; gsub(/^ +| +$/, "", m)
        ty = $3; gsub(/ /, "", ty); gsub(/  +/, " ", m); goal = (t ~ /^pp/) ? 1.1 : 1.2
        lp = $9 + 0; cap = "-"
        if (lp > 0 && (t ~ /^tg/ || ty == "f32" || (ty == "f16" && !(amx == 1 && pre == ""))))
            cap = sprintf("%.2fx", 100 / lp) # not where F16 prefill ran on AMX tiles
        printf "| %s%s %s: sparsekv / llama.cpp = %.2fx | >= %.1fx | %s | %s |\n", pre, m, t, r,
            goal, (r >= goal) ? "yes" : "**no**", cap }' "$2"
}

# llama_version BIN: the first line of its --version ("version: 0.5.0-dev (build 1, commit ...)")
llama_version() {
    local v
    v=$("$1" --version 2>&1 | head -n 1 | tr -d '\r`') || true
    echo "${v:-unknown (no --version output)}"
}

# Side by side with llama.cpp (make bench LLAMA_BENCH=path/to/llama-bench): the same files, the
# two programs alternating; SKV_VS_* choose the presets and types (bench/vs_llama.sh).
if [ -n "${LLAMA_BENCH:-}" ]; then
    VS_OUT="$DIR/vs_llama.md"
    SKV_VS_THREADS=$TMAX bench/vs_llama.sh "$LLAMA_BENCH" "$CLI" >"$VS_OUT"
    # BF16 weights on the smallest preset (vdpbf16ps on both sides where the CPU has it)
    if [ -z "${SKV_BENCH_QUICK:-}" ]; then
        SKV_VS_THREADS=$TMAX SKV_VS_PRESETS=smollm2-135m SKV_VS_TYPES=bf16 \
            bench/vs_llama.sh "$LLAMA_BENCH" "$CLI" | tail -n +3 >>"$VS_OUT"
    fi
    {
        echo
        echo "## Side by side with llama.cpp ($LLAMA_BENCH)"
        echo
        echo "llama-bench --version: \`$(llama_version "$LLAMA_BENCH")\`."
        echo
        echo "Synthetic models of the presets' real shapes, $TMAX threads, f16 KV cache on both"
        echo "sides; llama-bench and sparsekv bench alternate, ${SKV_VS_ROUNDS:-3} rounds each, medians"
        echo "(min..max). The targets are checked on the ratio of the medians; \"per round\" is the ratio"
        echo "of each round's two runs (seconds apart), median (min..max) over the rounds: how far the"
        echo "cell moves from run to run. \"Of the ceiling\": each program's share of the ceilings that"
        echo "sparsekv bench --roofline measured seconds before it in the same round (pp: float FMA"
        echo "peak, which quantized and BF16 products can pass; tg: read bandwidth), medians over the rounds;"
        echo "the targets' last column is the ratio sparsekv would have at 100% of it. llama.cpp was"
        echo "built for this machine (GGML_NATIVE): at SKV_SIMD below the CPU's level the two do not"
        echo "use the same instructions."
        echo
        cat "$VS_OUT"
        echo
        echo "| target | goal | met | at 100% of the ceiling |"
        echo "|---|---:|---|---:|"
        vs_targets "" "$VS_OUT"
    } >>"$OUT"
    # The same at a depth of 4096 tokens (long contexts are what a compressed cache is for): no
    # target, the smallest preset, 2 rounds (llama-bench prefills the depth before each run).
    if [ -z "${SKV_BENCH_QUICK:-}" ]; then
        VSD_OUT="$DIR/vs_llama_depth.md"
        SKV_VS_THREADS=$TMAX SKV_VS_PRESETS=smollm2-135m SKV_VS_TYPES=f16 SKV_VS_DEPTH=4096 \
            SKV_VS_ROUNDS=2 SKV_VS_TG=64 bench/vs_llama.sh "$LLAMA_BENCH" "$CLI" >"$VSD_OUT"
        {
            echo
            echo "### After 4096 tokens of context (llama-bench -d 4096, sparsekv bench --depth 4096)"
            echo
            echo "f16 KV cache on both sides, each program's default attention (llama.cpp: -fa auto),"
            echo "2 rounds; no target. sparsekv's share of the FMA peak counts the attention FLOPs."
            echo
            cat "$VSD_OUT"
        } >>"$OUT"
    fi
    # On an AVX-512 machine, the AVX2 level too (what an AVX2-only machine would run): against a
    # llama-bench built without AVX-512 (LLAMA_BENCH_AVX2: cmake -DGGML_NATIVE=OFF -DGGML_AVX2=ON
    # -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF), every preset; without one, against the
    # AVX-512 llama.cpp on the smallest preset.
    if [ "${cpu_simd:-}" = avx512 ] && [ -z "${SKV_SIMD:-}" ] && [ -z "${SKV_BENCH_QUICK:-}" ]; then
        VS2_OUT="$DIR/vs_llama_avx2.md"
        if [ -n "${LLAMA_BENCH_AVX2:-}" ]; then
            SKV_SIMD=avx2 SKV_VS_THREADS=$TMAX \
                bench/vs_llama.sh "$LLAMA_BENCH_AVX2" "$CLI" >"$VS2_OUT"
            title="### The AVX2 levels: SKV_SIMD=avx2 against llama.cpp built without AVX-512 ($LLAMA_BENCH_AVX2)"
        else
            SKV_SIMD=avx2 SKV_VS_PRESETS=smollm2-135m SKV_VS_THREADS=$TMAX \
                bench/vs_llama.sh "$LLAMA_BENCH" "$CLI" >"$VS2_OUT"
            title="### The same at SKV_SIMD=avx2 (sparsekv's AVX2 kernels; llama.cpp still AVX-512)"
        fi
        {
            echo
            echo "$title"
            echo
            echo "llama-bench --version: \`$(llama_version "${LLAMA_BENCH_AVX2:-$LLAMA_BENCH}")\`."
            echo
            cat "$VS2_OUT"
            if [ -n "${LLAMA_BENCH_AVX2:-}" ]; then
                echo
                echo "| target | goal | met | at 100% of the ceiling |"
                echo "|---|---:|---|---:|"
                vs_targets "avx2: " "$VS2_OUT"
            fi
        } >>"$OUT"
    fi
fi

cat "$OUT"
echo "bench/run.sh: wrote $OUT (raw results: $JSON)" >&2
