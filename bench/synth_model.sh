# shellcheck shell=bash
# bench/synth_model.sh — sourced by run.sh and vs_llama.sh.
#
#   synth_model CLI DIR PRESET TYPE -> prints DIR/PRESET-TYPE.gguf
#
# A synthetic model of a preset's real shapes (`sparsekv synth-model`, seed 1), generated when
# missing, or when the sources that write it changed since (then written over: --overwrite): a
# hash of them is kept beside the model (PATH.key). The kernels' code does not enter it, so a
# rebuilt CLI reuses the models (the largest take minutes to write). A mix TYPE (q4_k_m, the one
# most downloads use; q3_k_m, q2_k_m) is the f16 model through `sparsekv quantize ... TYPE`.
SKV_SYNTH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
synth_model() {
    local cli=$1 dir=$2 preset=$3 type=$4 f key
    f="$dir/$preset-$type.gguf"
    key=$({
        echo "$preset $type seed 1 ctx 16384"
        (cd "$SKV_SYNTH_ROOT" && cat src/model/synth.c src/model/synth.h src/kernels/quant.c \
            src/gguf.c src/gguf.h src/model/arch.c src/rng.c src/types.c tools/cmd_synth_model.c)
        case $type in *_k_m)
            (cd "$SKV_SYNTH_ROOT" && cat src/model/quantize_model.c tools/cmd_quantize.c) ;;
        esac
    } | sha256sum | cut -d' ' -f1)
    if [ ! -s "$f" ] || [ "$(cat "$f.key" 2>/dev/null)" != "$key" ]; then
        echo "generating $f" >&2
        rm -f "$f.key"
        if [ "${type%_k_m}" != "$type" ]; then
            local src
            src=$(synth_model "$cli" "$dir" "$preset" f16) || return 1
            "$cli" quantize "$src" "$f" "$type" --overwrite >&2 || return 1
        else
            "$cli" synth-model --preset "$preset" --type "$type" --ctx 16384 --seed 1 -o "$f" \
                --overwrite >&2 || return 1
        fi
        echo "$key" >"$f.key" # only after a model was written: a failure leaves no key
    fi
    printf '%s\n' "$f"
}
