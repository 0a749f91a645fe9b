/* cmd_synth_model.c — `sparsekv synth-model`: a random-weight GGUF with a real model's shapes. */
#include "cli.h"
#include "cli_args.h"

#include "gguf.h"
#include "kernels/kernels.h"
#include "model/synth.h"

#include <stdio.h>
#include <string.h>

#define CMD "synth-model"

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv synth-model --preset NAME --type TYPE [--ctx N] [--seed S]\n"
               "                            [-t N] [--vocab VOCAB.gguf] -o FILE.gguf\n"
               "                            [--overwrite]\n"
               "       sparsekv synth-model --list\n"
               "\n"
               "Writes a GGUF with random weights and the exact architecture and tensor\n"
               "shapes of a real model, for benchmarks: same FLOPs and bytes per token,\n"
               "meaningless output.\n"
               "Every matrix element is drawn ~ N(0, 1/fan_in) (deterministic from the seed: the\n"
               "same seed writes a byte-identical file), norms are 1, and the vocabulary is a\n"
               "synthetic SentencePiece one of the preset's size (<unk>, <s>, </s>, byte tokens\n"
               "<0x00>..<0xFF>, then generated pieces), or the real one of --vocab.\n"
               "Memory stays bounded (rows are generated and written a few megabytes at a time).\n"
               "\n"
               "  --preset NAME   shape to imitate (--list shows them).\n"
               "                  qwen2.5-0.5b (qwen2: q/k/v biases, NEOX RoPE),\n"
               "                  qwen3-0.6b (qwen3: q/k norms, head_dim 128),\n"
               "                  llama-3.2-1b (llama with rope_freqs),\n"
               "                  phi-3-mini (phi3: fused projections), phi-3.5-mini and\n"
               "                  phi-4-mini (phi3 with LongRoPE; factors not the published\n"
               "                  ones) are written as their real architecture;\n"
               "                  qwen2.5-0.5b-like is Qwen2.5-0.5B's shapes as a plain llama\n"
               "                  model.\n"
               "  --vocab FILE    take the tokenizer (tokenizer.* metadata) from a vocab-only\n"
               "                  GGUF, e.g. ../shared/models/vocab/ggml-vocab-qwen2.gguf, so\n"
               "                  text in and text out work; the vocabulary size becomes that\n"
               "                  file's\n"
               "  --type TYPE     matrix type: f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0,\n"
               "                  iq4_nl, iq4_xs, q2_k, q3_k, q4_k, q5_k, q6_k\n"
               "                  (a matrix whose rows are not a multiple of the block size is\n"
               "                  written, for a 256-value type when they are a multiple of 32,\n"
               "                  in the 32-block type just above it: q5_0 for q4_k, q5_1 for\n"
               "                  q5_k, q8_0 for q6_k, q4_0 for q2_k and q3_k, iq4_nl for\n"
               "                  iq4_xs; else in f16; norms are always f32)\n"
               "  --ctx N         llama.context_length to write (default: the preset's)\n"
               "  --seed S        random seed (default 1)\n"
               "  -t N            threads (default: all cores)\n"
               "  -o FILE         output path; an existing FILE is refused\n"
               "  --overwrite     replace FILE if it exists\n"
               "  --list          print the presets (takes no other option)\n"
               "\n"
               "exit status: 0 ok, 1 runtime failure (e.g. writing FILE), 2 bad usage or\n"
               "bad input\n");
}

static void list_presets(void) {
    printf("| preset | arch | vocab | dim | layers | heads q/kv | head dim | ffn | ctx (written) | "
           "rope theta | tied | params | note |\n"
           "|---|---|---:|---:|---:|---|---:|---:|---|---:|---|---:|---|\n");
    for (int i = 0; i < skv_synth_n_presets(); i++) {
        const skv_synth_shape *s = skv_synth_preset_at(i);
        printf("| %s | %s | %d | %d | %d | %d/%d | %d | %d | %d (%d) | %g | %s | %.1f M | %s |\n",
               s->name, skv_synth_arch_of(s)->arch ? skv_synth_arch_of(s)->arch : "llama",
               s->n_vocab, s->n_embd, s->n_layer, s->n_head, s->n_head_kv,
               skv_synth_arch_of(s)->head_dim ? skv_synth_arch_of(s)->head_dim
                                              : s->n_embd / s->n_head,
               s->n_ff, s->n_ctx_train, s->n_ctx, s->rope_theta, s->tied ? "yes" : "no",
               (double)skv_synth_n_params(s) / 1e6, s->note);
    }
}

int cmd_synth_model(int argc, char **argv) {
    const char *preset = NULL, *type_name = NULL, *out = NULL, *vocab = NULL;
    long ctx = 0, threads = 0;
    uint64_t seed = 1;
    bool list = false, overwrite = false;
    enum { O_LIST = CLI_LONG, O_PRESET, O_TYPE, O_VOCAB, O_CTX, O_SEED, O_OVERWRITE };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"list", O_LIST, false, NULL, false},
        {"preset", O_PRESET, true, NULL, false},
        {"type", O_TYPE, true, NULL, false},
        {"vocab", O_VOCAB, true, NULL, false},
        {"output", 'o', true, NULL, false},
        {"ctx", O_CTX, true, NULL, false},
        {"seed", O_SEED, true, NULL, false},
        {"threads", 't', true, NULL, false},
        {"overwrite", O_OVERWRITE, false, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, CMD, argc, argv, opts, NULL, NULL)) return 2;
    const char *v;
    for (int key; (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        switch (key) {
        case CLI_FAIL:
            return 2;
        case CLI_OPERAND:
            return cli_args_extra(&args, v), 2;
        case 'h':
            usage(stdout);
            return 0;
        case O_LIST:
            list = true;
            break;
        case O_OVERWRITE:
            overwrite = true;
            break;
        case O_PRESET:
            preset = v;
            break;
        case O_TYPE:
            type_name = v;
            break;
        case O_VOCAB:
            vocab = v;
            break;
        case 'o':
            out = v;
            break;
        case O_CTX:
            if (!cli_parse_int(v, 1, 1 << 24, &ctx)) {
                cli_error(CMD, "--ctx must be an integer in [1, 16777216], not '%s'", v);
                return 2;
            }
            break;
        case O_SEED:
            if (!cli_parse_u64(v, &seed)) {
                cli_error(CMD, "--seed must be a non-negative integer, not '%s'", v);
                return 2;
            }
            break;
        case 't':
            if (!cli_parse_threads(CMD, v, &threads)) {
                return 2;
            }
            break;
        }
    }
    if (list) {
        /* --list writes nothing: an option for the model would be silently ignored */
        const int others[] = {O_PRESET, O_TYPE, O_VOCAB, 'o', O_CTX, O_SEED, 't', O_OVERWRITE};
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
            if (cli_args_given(&args, others[i])) {
                cli_error(CMD, "--list takes no other option (%s given)",
                          cli_args_name(&args, others[i]));
                return 2;
            }
        list_presets();
        return 0;
    }
    if (!preset || !type_name || !out) {
        cli_error(CMD, "--preset, --type and -o are required (see --help)");
        return 2;
    }
    const skv_synth_shape *shape = skv_synth_preset(preset);
    if (!shape) {
        cli_error(CMD, "unknown preset '%s' (--list shows them)", preset);
        return 2;
    }
    skv_type type;
    if (!skv_type_from_name(type_name, &type) || !skv_type_can_quantize(type)) {
        cli_error(CMD,
                  "cannot write weights of type '%s' (f32, f16, bf16, q8_0, q5_1, q5_0, "
                  "q4_1, q4_0, iq4_nl, iq4_xs, q2_k, q3_k, q4_k, q5_k, q6_k)",
                  type_name);
        return 2;
    }
    if (!cli_output_ok(CMD, out, overwrite)) return 2;
    cli_remove_temporaries_on_signal(out);
    /* Say which matrices cannot take the type (their rows are not whole blocks). */
    const skv_synth_arch *sa = skv_synth_arch_of(shape);
    int hd = sa->head_dim > 0 ? sa->head_dim : shape->n_embd / shape->n_head;
    int widths[] = {shape->n_embd, shape->n_head * hd, shape->n_ff};
    for (int i = 0; i < 3; i++) {
        if (skv_matrix_type_for(type, widths[i]) != type && (i == 0 || widths[i] != widths[0]))
            fprintf(stderr,
                    "sparsekv %s: note: matrices with rows of %d values are written in %s (not a "
                    "multiple of %s's block of %d)\n",
                    CMD, widths[i], skv_type_name(skv_matrix_type_for(type, widths[i])),
                    skv_type_name(type), skv_type_block_size(type));
    }
    skv_synth_params p = {type, seed, (int)ctx, (int)threads};
    skv_err err = {0};
    double t0 = skv_time_ms();
    if (skv_synth_write_ex(shape, sa, &p, vocab, out, &err) != SKV_OK) {
        cli_error(CMD, "%s", err.msg);
        return err.status == SKV_ERR_INVALID_ARG || err.status == SKV_ERR_FORMAT ||
                       (vocab && err.status == SKV_ERR_IO)
                   ? 2
                   : 1;
    }
    /* the parameters as written: with --vocab, the embedding (and output) take that file's
     * vocabulary size */
    skv_synth_shape written = *shape;
    skv_gguf *g = vocab ? skv_gguf_open(out, &err) : NULL;
    int64_t te = g ? skv_gguf_find_tensor(g, "token_embd.weight") : -1;
    if (te >= 0) written.n_vocab = (int)skv_gguf_tensor_at(g, te)->ne[1];
    skv_gguf_close(g);
    printf("wrote %s: %s, %s, %.1f M params, seed %llu, context %d, in %.1f s\n", out, shape->name,
           skv_type_name(type), (double)skv_synth_n_params_arch(&written, sa) / 1e6,
           (unsigned long long)seed, ctx > 0 ? (int)ctx : shape->n_ctx, (skv_time_ms() - t0) / 1e3);
    return 0;
}
