/* cmd_quantize.c — `sparsekv quantize IN OUT TYPE`: rewrite a model's matrices in a type. */
#include "cli.h"
#include "cli_args.h"

#include "kernels/kernels.h"
#include "model/synth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CMD "quantize"

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv quantize IN.gguf OUT.gguf TYPE [-t N] [--simple] [--overwrite]\n"
               "\n"
               "Rewrites a GGUF model with every 2-D weight matrix (token embedding and output\n"
               "included) in TYPE: f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl, iq4_xs,\n"
               "q2_k, q3_k, q4_k, q5_k or q6_k, or in one of llama-quantize's mixes, each with\n"
               "q6_k for the output matrix (the token embedding when the output is tied to it):\n"
               "q4_k_m, q6_k also for attn_v and ffn_down of the first and last eighth of the\n"
               "layers and of every third layer in between, q5_k for a fused attn_qkv, q4_k for\n"
               "the rest; q3_k_m, attn_v q5_k in layers 0-1 (else q4_k), ffn_down q5_k in the\n"
               "first sixteenth of the layers (else q4_k), attn_output and attn_qkv q4_k, q3_k\n"
               "for the rest; q2_k_m (llama-quantize's Q2_K), attn_output and ffn_down q3_k,\n"
               "attn_v q4_k where the model has 4 or more query heads per kv head (else q3_k),\n"
               "q2_k for the rest.\n"
               "Norms and other 1-D tensors stay as they are (f32); metadata is copied\n"
               "(general.file_type updated). A matrix whose rows are not a multiple of TYPE's\n"
               "block size (32 for q8_0, q5_*, q4_* and iq4_nl, 256 for the k-quants and iq4_xs)\n"
               "is written, when its rows are a multiple of 32, in the 32-block type just above\n"
               "TYPE in bits (as llama-quantize does): q5_0 for q4_k, q5_1 for q5_k, q8_0 for\n"
               "q6_k, q4_0 for q2_k and q3_k, iq4_nl for iq4_xs; else in f16. One already\n"
               "stored in a type no larger than that (q4_0 for q5_0, bf16 for f16) is copied\n"
               "as it is. Those matrices are listed.\n"
               "Tensors are converted from any type sparsekv reads and streamed one at a time,\n"
               "so memory stays small. The k-quants search each sub-block's scale and min for\n"
               "the least rounding error, weighted by the values' magnitude; iq4_nl and iq4_xs\n"
               "(4-bit indices into a fixed grid of 16 values, denser near 0) search each\n"
               "32-value block's scale.\n"
               "\n"
               "  -t N         threads (default: all cores)\n"
               "  --simple     k-quants with the plain min/max scales (faster; for comparisons);\n"
               "               only for the k-quants and their mixes\n"
               "  --overwrite  replace OUT if it exists (without it an existing OUT is refused);\n"
               "               OUT is never IN\n"
               "\n"
               "exit status: 0 ok, 1 runtime failure (e.g. writing OUT), 2 bad usage or\n"
               "bad input (IN missing, unreadable or not a model sparsekv reads; OUT exists,\n"
               "is a directory or is in no directory)\n");
}

/* The types the matrices that fell back were written in: "q8_0", or "q8_0 (35), f16 (2)". */
static void fallback_types(const skv_quantize_report *r, char *buf, size_t size) {
    size_t len = 0;
    int n_types = 0;
    for (int t = 0; t < SKV_TYPE_COUNT; t++) n_types += r->n_fallback_by_type[t] > 0;
    buf[0] = 0;
    for (int t = 0; t < SKV_TYPE_COUNT && len < size; t++) {
        if (r->n_fallback_by_type[t] == 0) continue;
        int n = n_types == 1 ? snprintf(buf, size, "%s", skv_type_name((skv_type)t))
                             : snprintf(buf + len, size - len, "%s%s (%d)", len ? ", " : "",
                                        skv_type_name((skv_type)t), r->n_fallback_by_type[t]);
        if (n < 0) break;
        len += (size_t)n;
    }
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    long threads = 0;
    bool simple = false, overwrite = false;
    enum { O_SIMPLE = CLI_LONG, O_OVERWRITE };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"threads", 't', true, NULL, false},
        {"simple", O_SIMPLE, false, NULL, false},
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
        case 'h':
            usage(stdout);
            return 0;
        case 't':
            if (!cli_parse_threads(CMD, v, &threads)) {
                return 2;
            }
            break;
        case O_SIMPLE:
            simple = true;
            break;
        case O_OVERWRITE:
            overwrite = true;
            break;
        case CLI_OPERAND:
            if (n_pos == 3) {
                cli_error(CMD, "too many arguments (see --help)");
                return 2;
            }
            pos[n_pos++] = v;
            break;
        }
    }
    if (n_pos != 3) {
        cli_error(CMD, "expected IN OUT TYPE (see --help)");
        return 2;
    }
    skv_quantize_opts qo = {.n_threads = (int)threads, .simple = simple};
    qo.mix = skv_quant_mix_from_name(pos[2]);
    if (qo.mix) {
        qo.type = skv_quant_mix_base(qo.mix);
    } else if (!skv_type_from_name(pos[2], &qo.type) || !skv_type_can_quantize(qo.type)) {
        cli_error(CMD,
                  "cannot write weights of type '%s' (f32, f16, bf16, q8_0, q5_1, q5_0, "
                  "q4_1, q4_0, iq4_nl, iq4_xs, q2_k, q3_k, q4_k, q5_k, q6_k, q2_k_m, q3_k_m, "
                  "q4_k_m)",
                  pos[2]);
        return 2;
    }
    skv_type type = qo.type;
    const char *target = qo.mix ? skv_quant_mix_name(qo.mix) : skv_type_name(type);
    if (simple && (skv_type_block_size(type) != SKV_QK_K || type == SKV_TYPE_IQ4_XS)) {
        cli_error(CMD,
                  "--simple only applies to the k-quants (q2_k, q3_k, q4_k, q5_k, q6_k, q2_k_m, "
                  "q3_k_m, q4_k_m), "
                  "not %s",
                  target);
        return 2;
    }
    if (access(pos[0], R_OK) != 0) { /* before the output's checks: the first fault first */
        cli_error(CMD, "cannot open '%s': %s", pos[0], strerror(errno));
        return 2;
    }
    /* IN and OUT naming one file (OUT = IN, a hard link): the library refuses that itself,
     * whatever --overwrite says, with the message that fits */
    if (!cli_same_file(pos[0], pos[1]) && !cli_output_ok(CMD, pos[1], overwrite)) return 2;
    cli_remove_temporaries_on_signal(pos[1]);
    skv_quantize_report rep;
    skv_err err = {0};
    if (skv_quantize_model_opts(pos[0], pos[1], &qo, &rep, &err) != SKV_OK) {
        cli_error(CMD, "%s", err.msg);
        /* a missing, unreadable or malformed IN is bad input; a failed write is a runtime one */
        return err.status == SKV_ERR_INVALID_ARG || rep.bad_input ? 2 : 1;
    }
    char fb[256] = "";
    fallback_types(&rep, fb, sizeof fb);
    if (rep.n_fallback > 0)
        fprintf(stderr,
                "sparsekv %s: note: %d matri%s cannot take %s (rows not a multiple of its block of "
                "%d), written in %s instead: %s\n",
                CMD, rep.n_fallback, rep.n_fallback == 1 ? "x" : "ces", target,
                skv_type_block_size(type), fb, rep.fallback_names);
    printf("wrote %s: %d tensors, %d converted to %s, %d copied, %d fell back%s%s; tensor data "
           "%.2f MiB -> %.2f MiB in %.2f s\n",
           pos[1], rep.n_tensors, rep.n_converted, target, rep.n_unchanged, rep.n_fallback,
           fb[0] ? " to " : "", fb, (double)rep.bytes_in / 1048576.0,
           (double)rep.bytes_out / 1048576.0, rep.ms / 1e3);
    printf("matrices:");
    for (int t = 0, first = 1; t < SKV_TYPE_COUNT; t++)
        if (rep.n_by_type[t] > 0) {
            printf("%s %d %s", first ? "" : ",", rep.n_by_type[t], skv_type_name((skv_type)t));
            first = 0;
        }
    const int k_written = rep.n_by_type[SKV_TYPE_Q4_K] + rep.n_by_type[SKV_TYPE_Q5_K] +
                          rep.n_by_type[SKV_TYPE_Q6_K] + rep.n_by_type[SKV_TYPE_Q3_K] +
                          rep.n_by_type[SKV_TYPE_Q2_K];
    printf("%s\n", simple && k_written ? " (simple k-quant scales)" : "");
    return 0;
}
