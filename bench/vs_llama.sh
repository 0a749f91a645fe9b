#!/usr/bin/env bash
# bench/vs_llama.sh — sparsekv against llama.cpp's llama-bench, side by side on the same GGUF
# files, the two programs alternating (so that a machine getting busier or cooler hurts both):
#
#   bench/vs_llama.sh LLAMA_BENCH [PATH/TO/sparsekv] > table.md
#
# For each preset x type (synthetic models of real shapes, generated with `sparsekv synth-model`
# into $SKV_BENCH_DIR and reused), ROUNDS rounds of: llama-bench -p PP -n TG -r 1 and
# sparsekv bench -p PP -n TG -r 1 (each does one warm-up first), in alternating order. Both use
# an f16 KV cache (llama-bench's default) and THREADS threads. The table gives each side's median
# t/s over the rounds (min..max), the ratio of the medians (what bench/run.sh checks against the
# targets), and the ratio within each round (the two runs of a round are seconds apart, so a
# minute when the machine is slower or faster moves both): median (min..max) over the rounds,
# which says how far a cell moves from run to run. sparsekv runs with --roofline, so each round
# also measures the machine's ceilings (FMA peak, read bandwidth) seconds before the two runs:
# "of the ceiling" gives both programs' share of it (pp: of the float FMA peak, which quantized
# and BF16 (vdpbf16ps) products can pass; tg: of the read bandwidth, llama.cpp's bytes taken as sparsekv's for the
# same file), medians over the rounds. A tg row where llama.cpp already reads at 90% of the
# ceiling leaves room for 1.11x at most.
#
# Environment: SKV_VS_PRESETS (default "smollm2-135m qwen2.5-0.5b llama-3.2-1b"),
# SKV_VS_TYPES (default "f16 q8_0 q4_k q4_k_m"; a mix, q4_k_m, q3_k_m or q2_k_m: the f16 model quantized
# to it),
# SKV_VS_ROUNDS (3), SKV_VS_THREADS (2), SKV_VS_PP (512), SKV_VS_TG (128), SKV_BENCH_DIR,
# SKV_VS_DEPTH (0; D > 0: both tests after D tokens of context, llama-bench -d D and sparsekv
# bench --depth D, each with its program's default attention: llama.cpp's -fa auto).
# Progress goes to stderr, the markdown table to stdout.
set -euo pipefail

LLAMA=${1:?usage: bench/vs_llama.sh LLAMA_BENCH [sparsekv]}
CLI=${2:-build/sparsekv}
DIR=${SKV_BENCH_DIR:-${TMPDIR:-/tmp}/sparsekv-bench}
PRESETS=${SKV_VS_PRESETS:-smollm2-135m qwen2.5-0.5b llama-3.2-1b}
TYPES=${SKV_VS_TYPES:-f16 q8_0 q4_k q4_k_m}
ROUNDS=${SKV_VS_ROUNDS:-3}
T=${SKV_VS_THREADS:-2}
PP=${SKV_VS_PP:-512}
TG=${SKV_VS_TG:-128}
D=${SKV_VS_DEPTH:-0}
[ -x "$LLAMA" ] || { echo "bench/vs_llama.sh: no llama-bench at $LLAMA" >&2; exit 1; }
[ -x "$CLI" ] || { echo "bench/vs_llama.sh: no sparsekv at $CLI (run make first)" >&2; exit 1; }
mkdir -p "$DIR"
# shellcheck source=bench/synth_model.sh
. "$(dirname "$0")/synth_model.sh"

# t/s of one test from one JSON line per test: llama-bench's jsonl ("n_prompt", "n_gen",
# "avg_ts") or sparsekv's ("test": "ppN"/"tgN", "tps_median").
llama_tps() { # file test(pp|tg)
    awk -v want="$2" '
        { np = $0; sub(/.*"n_prompt": */, "", np); sub(/[^0-9].*/, "", np)
          ng = $0; sub(/.*"n_gen": */, "", ng); sub(/[^0-9].*/, "", ng)
          ts = $0; sub(/.*"avg_ts": */, "", ts); sub(/[^0-9.eE+-].*/, "", ts)
          if ((want == "pp" && np > 0 && ng == 0) || (want == "tg" && ng > 0 && np == 0)) print ts }' "$1"
}
skv_tps() { # file test(pp|tg)
    awk -v want="$2" '/"record":"test"/ {
          t = $0; sub(/.*"test":"/, "", t); sub(/".*/, "", t)
          ts = $0; sub(/.*"tps_median":/, "", ts); sub(/[^0-9.eE+-].*/, "", ts)
          if (substr(t, 1, 2) == want) print ts }' "$1"
}

skv_pct() { # file test(pp|tg): sparsekv's share of the ceiling (pct_fma / pct_bw) per run
    awk -v want="$2" '/"record":"test"/ {
          t = $0; sub(/.*"test":"/, "", t); sub(/".*/, "", t)
          key = want == "pp" ? "pct_fma" : "pct_bw"
          if (substr(t, 1, 2) != want || index($0, "\"" key "\":") == 0) next
          p = $0; sub(".*\"" key "\":", "", p); sub(/[^0-9.eE+-].*/, "", p); print p }' "$1"
}

stats() { # values on stdin -> "median min max" (or "- - -")
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "- - -"; exit }
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.2f %.2f %.2f\n", m, v[1], v[NR] }'
}

echo "| model | type | test | llama.cpp t/s | sparsekv t/s | sparsekv / llama.cpp | per round | of the ceiling: llama.cpp / sparsekv |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for preset in $PRESETS; do
    for type in $TYPES; do
        f=$(synth_model "$CLI" "$DIR" "$preset" "$type")
        lj="$DIR/vs-llama.jsonl" sj="$DIR/vs-skv.jsonl"
        : >"$lj"
        : >"$sj"
        for r in $(seq 1 "$ROUNDS"); do
            echo "vs llama.cpp: $preset $type round $r/$ROUNDS" >&2
            l() { "$LLAMA" -m "$f" -p "$PP" -n "$TG" -t "$T" $([ "$D" -gt 0 ] && echo "-d $D") -r 1 -o jsonl >>"$lj" 2>/dev/null ||
                echo "llama-bench failed on $f" >&2; }
            s() { "$CLI" bench -m "$f" -p "$PP" -n "$TG" -t "$T" -r 1 --kv-type f16 --roofline --json \
                $([ "$D" -gt 0 ] && echo "--depth $D") >>"$sj"; }
            if [ $((r % 2)) = 1 ]; then l; s; else s; l; fi
        done
        for test in pp tg; do
            n=$([ $test = pp ] && echo "$PP" || echo "$TG")
            read -r lm lmin lmax < <(llama_tps "$lj" $test | stats)
            read -r sm smin smax < <(skv_tps "$sj" $test | stats)
            ratio=$(awk -v a="$sm" -v b="$lm" 'BEGIN { print (a == "-" || b == "-" || b == 0) ? "-" : sprintf("%.2fx", a / b) }')
            # round r's two runs are line r of each file (a failed run leaves the pairs unmatched)
            read -r rm rmin rmax < <(
                if [ "$(llama_tps "$lj" $test | wc -l)" = "$(skv_tps "$sj" $test | wc -l)" ]; then
                    paste <(llama_tps "$lj" $test) <(skv_tps "$sj" $test) |
                        awk '$1 > 0 { print $2 / $1 }'
                fi | stats)
            rr=$([ "$rm" = - ] && echo - || echo "${rm}x (${rmin}..${rmax})")
            # llama.cpp's share of the round's ceiling: sparsekv's share x the two runs' t/s ratio
            read -r pl _ _ < <(
                nl=$(llama_tps "$lj" $test | wc -l)
                if [ "$nl" = "$(skv_tps "$sj" $test | wc -l)" ] &&
                    [ "$nl" = "$(skv_pct "$sj" $test | wc -l)" ]; then
                    paste <(llama_tps "$lj" $test) <(skv_tps "$sj" $test) <(skv_pct "$sj" $test) |
                        awk '$2 > 0 { print $3 * $1 / $2 }'
                fi | stats)
            read -r ps _ _ < <(skv_pct "$sj" $test | stats)
            pc=$(awk -v a="$pl" -v b="$ps" 'BEGIN {
                if (a == "-" || b == "-") print "-"; else printf "%.0f%% / %.0f%%", a, b }')
            echo "| $preset | $type | $test$n$([ "$D" -gt 0 ] && echo "@d$D") | $lm ($lmin..$lmax) | $sm ($smin..$smax) | $ratio | $rr | $pc |"
        done
    done
done
