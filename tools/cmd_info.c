/* cmd_info.c — `sparsekv info`: what a model file holds: hparams, tensors, vocabulary. */
#include "cli.h"
#include "cli_args.h"
#include "gguf.h" /* the tensor table comes straight from the file */
#include "kernels/kernels.h"
#include "model/model.h" /* skv_model_load_meta */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv info [MODEL | -m MODEL] [--json]\n"
               "       sparsekv info --system [--json] [MODEL]\n\n"
               "Prints the model's hyperparameters, every tensor with its type, shape and size,\n"
               "and vocabulary facts. --json prints one JSON document instead.\n"
               "--system prints the CPU features seen and the SIMD level the kernels use (the\n"
               "CPU's widest, lowered by SKV_SIMD=scalar|avx2|avx512), and whether F16/BF16\n"
               "prefill runs on AMX tiles (SKV_NO_AMX=1 turns that off) and how decode reads\n"
               "the k16 records of Q4_K, Q5_K, Q8_0, Q4_0/1 and Q5_0/1 (SKV_K16_PREFETCH=0|1);\n"
               "with a MODEL, then the model (with --json one document: the model's, the\n"
               "system's facts under \"system\").\n"
               "A GGUF of an architecture sparsekv does not run, or a vocabulary-only one, is\n"
               "shown as it is: why it cannot run, its metadata (arrays as their type and\n"
               "length) and its tensors (\"runnable\": false in --json); exit status 0. A file\n"
               "that is no GGUF, or a broken model (a hyperparameter missing, a tensor of the\n"
               "wrong shape or of a type sparsekv does not read), exits 2 with the reason.\n");
}

/* general.file_type's name (llama.cpp's llama_ftype numbering); NULL for a number not in it. */
static const char *rope_scaling_name(skv_rope_scaling s) {
    return s == SKV_ROPE_SCALING_LINEAR     ? "linear"
           : s == SKV_ROPE_SCALING_YARN     ? "yarn"
           : s == SKV_ROPE_SCALING_LONGROPE ? "longrope"
                                            : "none";
}

static const char *ftype_name(int64_t ft) {
    static const char *names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",      [3] = "Q4_1",    [7] = "Q8_0",
        [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",     [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M",   [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS",   [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL",   [26] = "IQ3_S",  [27] = "IQ3_M",
        [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS",   [31] = "IQ1_M",  [32] = "BF16",
        [36] = "TQ1_0",   [37] = "TQ2_0",   [38] = "MXFP4_MOE"};
    return ft >= 0 && ft < (int64_t)(sizeof names / sizeof names[0]) ? names[ft] : NULL;
}

/* The matrices' types and how many of each (a mix such as Q4_K_M shows as two), with the file's
 * general.file_type. */
static void print_type_mix(const skv_gguf *g, bool json) {
    int count[SKV_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        if (t->n_dims == 2 && (int)t->type >= 0 && t->type < SKV_TYPE_COUNT) count[t->type]++;
    }
    int64_t ft = -1, k = skv_gguf_find_key(g, "general.file_type");
    if (k >= 0 && !skv_gguf_kv_int(g, k, &ft)) ft = -1;
    const char *ftn = ftype_name(ft);
    printf(json ? "\"matrix_types\":{" : "matrices    ");
    for (int t = 0, n = 0; t < SKV_TYPE_COUNT; t++) {
        if (!count[t]) continue;
        const char *name = skv_type_name((skv_type)t) ? skv_type_name((skv_type)t) : "?";
        printf(json ? "%s\"%s\":%d" : "%s %s x %d", n++ ? "," : "", name, count[t]);
    }
    if (json)
        printf("},\"file_type\":%lld,\"file_type_name\":%s%s%s,", (long long)ft, ftn ? "\"" : "",
               ftn ? ftn : "null", ftn ? "\"" : "");
    else if (ft >= 0)
        printf(" (file type %lld%s%s)\n", (long long)ft, ftn ? ": " : "", ftn ? ftn : "");
    else
        printf("\n");
}

/* `info --system`: the CPU features CPUID reports and the level chosen from them (JSON: an
 * object, with no newline after it). */
static void print_system(bool json) {
    const char *warn = skv_simd_warning();
    const char *env = getenv("SKV_SIMD");
    if (json) {
        printf("{\"cpu_features\":");
        cli_json_string(stdout, skv_simd_cpu_features(), strlen(skv_simd_cpu_features()));
        printf(",\"cpu_simd\":\"%s\",\"simd\":\"%s\",\"amx\":%s,\"k16_prefetch\":%s,"
               "\"k16_ahead\":%d,\"skv_simd_env\":",
               skv_simd_cpu_level(), skv_simd_level(), skv_simd_amx() ? "true" : "false",
               skv_simd_k16_prefetch() ? "true" : "false", skv_simd_k16_ahead());
        if (env)
            cli_json_string(stdout, env, strlen(env));
        else
            printf("null");
        printf(",\"simd_warning\":");
        if (warn)
            cli_json_string(stdout, warn, strlen(warn));
        else
            printf("null");
        printf("}");
        return;
    }
    printf("cpu features %s\n", skv_simd_cpu_features());
    printf("cpu simd     %s (widest level the CPU supports)\n", skv_simd_cpu_level());
    const char *fs = getenv("SKV_FORCE_SCALAR");
    bool forced = fs && fs[0] && strcmp(fs, "0") != 0;
    printf("simd in use  %s%s%s%s%s\n", skv_simd_level(), env ? " (SKV_SIMD=" : "", env ? env : "",
           env ? ")" : "", forced ? " (SKV_FORCE_SCALAR set)" : "");
    if (skv_simd_amx())
        printf("amx          F16/BF16 prefill on AMX-BF16 tiles (SKV_NO_AMX=1: the FMA code)\n");
    else if (!strstr(skv_simd_cpu_features(), "amx-bf16"))
        printf("amx          not used (the CPU has no AMX-BF16 tiles)\n");
    else
        printf("amx          not used (SKV_NO_AMX set, a level below avx512, or the OS does not "
               "grant the tiles)\n");
    if (skv_simd_k16_prefetch())
        printf("k16 decode   Q4_K, Q5_K, Q8_0, Q4_0/1, Q5_0/1 records as 4 streams per thread, %d "
               "bytes ahead "
               "(SKV_K16_PREFETCH=0: one stream)\n",
               skv_simd_k16_ahead());
    else if (strcmp(skv_simd_level(), "scalar") != 0) /* SKV_K16_PREFETCH=0 */
        printf("k16 decode   Q4_K, Q5_K, Q8_0, Q4_0/1, Q5_0/1 records as one stream per thread "
               "(SKV_K16_PREFETCH=1: 4 prefetched streams)\n");
    if (warn) printf("simd note    %s\n", warn);
}

static void shape_str(const skv_gguf_tensor *t, char *buf, size_t n) {
    int off = snprintf(buf, n, "[");
    for (int d = 0; d < t->n_dims && off < (int)n; d++)
        off += snprintf(buf + off, n - (size_t)off, d ? ", %lld" : "%lld", (long long)t->ne[d]);
    snprintf(buf + off, n - (size_t)off, "]");
}

/* The tensor table (a JSON array after "tensors": in json), as the file lists them. */
static void print_tensors(const skv_gguf *g, bool json) {
    char shape[128];
    if (!json && skv_gguf_n_tensors(g) == 0) return; /* a vocabulary-only file */
    if (json)
        printf("\"tensors\":[");
    else
        printf("\n%-32s %-8s %-18s %12s\n", "tensor", "type", "shape", "bytes");
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i); /* a type the reader knows */
        shape_str(t, shape, sizeof shape);
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_string(stdout, t->name, strlen(t->name));
            printf(",\"type\":\"%s\",\"shape\":%s,\"bytes\":%llu}", skv_type_name(t->type), shape,
                   (unsigned long long)t->size);
        } else {
            char e[1024];
            printf("%-32s %-8s %-18s %12llu\n", cli_escape(t->name, e, sizeof e, false),
                   skv_type_name(t->type), shape, (unsigned long long)t->size);
        }
    }
    if (json) printf("]");
}

/* A metadata value as text (JSON when json): scalars as they are, strings escaped (cut at 96
 * bytes in text), arrays as their element type and count (a vocabulary is 150k strings). */
static void print_value(const skv_gguf *g, int64_t i, bool json) {
    const skv_gguf_vtype t = skv_gguf_kv_type(g, i);
    int64_t iv;
    double fv;
    bool bv;
    if (t == SKV_GGUF_STRING) {
        size_t len;
        const char *str = skv_gguf_kv_str(g, i, &len);
        if (json) {
            cli_json_string(stdout, str ? str : "", str ? len : 0);
        } else {
            char e[512], cut[100];
            snprintf(cut, sizeof cut, "%.96s", str ? str : "");
            printf("\"%s\"%s", cli_escape(cut, e, sizeof e, false), len > 96 ? "..." : "");
        }
    } else if (t == SKV_GGUF_ARRAY) {
        if (json)
            printf("{\"array\":\"%s\",\"n\":%llu}", skv_gguf_vtype_name(skv_gguf_arr_type(g, i)),
                   (unsigned long long)skv_gguf_arr_len(g, i));
        else
            printf("[%s x %llu]", skv_gguf_vtype_name(skv_gguf_arr_type(g, i)),
                   (unsigned long long)skv_gguf_arr_len(g, i));
    } else if (t == SKV_GGUF_BOOL && skv_gguf_kv_bool(g, i, &bv)) {
        printf("%s", bv ? "true" : "false");
    } else if ((t == SKV_GGUF_FLOAT32 || t == SKV_GGUF_FLOAT64) && skv_gguf_kv_float(g, i, &fv)) {
        printf(isfinite(fv) || !json ? "%.9g" : "null", fv);
    } else if (skv_gguf_kv_int(g, i, &iv)) {
        printf("%lld", (long long)iv);
    } else { /* a uint64 above INT64_MAX (no getter gives it whole) */
        printf(json ? "null" : "(a u64 above 2^63 - 1)");
    }
}

/* A GGUF that sparsekv cannot run (another architecture, no tensors, a tensor type it does not
 * read) shown as it is: its metadata and tensors. */
static void print_raw(const skv_gguf *g, const char *path, const char *why, bool json,
                      bool system) {
    const char *arch = skv_gguf_get_str(g, "general.architecture");
    int64_t nk = skv_gguf_n_kv(g);
    if (json) {
        printf("{");
        if (system) { /* as a runnable model's document holds it */
            printf("\"system\":");
            print_system(true);
            printf(",");
        }
        printf("\"path\":");
        cli_json_string(stdout, path, strlen(path));
        printf(",\"gguf_version\":%u,\"architecture\":", skv_gguf_version(g));
        if (arch)
            cli_json_string(stdout, arch, strlen(arch));
        else
            printf("null");
        printf(",\"runnable\":false,\"why\":");
        cli_json_string(stdout, why, strlen(why));
        printf(",\"metadata\":{");
        for (int64_t i = 0; i < nk; i++) {
            const char *k = skv_gguf_key(g, i);
            printf("%s", i ? "," : "");
            cli_json_string(stdout, k, strlen(k));
            printf(":");
            print_value(g, i, true);
        }
        printf("},");
    } else {
        char e1[1024], e2[256];
        printf("file         %s (GGUF v%u, %s)\n", cli_escape(path, e1, sizeof e1, false),
               skv_gguf_version(g),
               arch ? cli_escape(arch, e2, sizeof e2, false) : "no architecture");
        printf("runnable     no: %s\n\n", cli_escape(why, e1, sizeof e1, true)); /* a message */
        printf("%-44s %-8s %s\n", "metadata", "type", "value");
        for (int64_t i = 0; i < nk; i++) {
            printf("%-44s %-8s ", cli_escape(skv_gguf_key(g, i), e1, sizeof e1, false),
                   skv_gguf_vtype_name(skv_gguf_kv_type(g, i)));
            print_value(g, i, false);
            printf("\n");
        }
    }
    print_tensors(g, json);
    if (json) printf("}\n");
}

int cmd_info(int argc, char **argv) {
    const char *model_arg = NULL;
    bool json = false, system = false;
    enum { O_JSON = CLI_LONG, O_SYSTEM };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"json", O_JSON, false, NULL, false},
        {"system", O_SYSTEM, false, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, "info", argc, argv, opts, NULL, NULL)) return 2;
    const char *val;
    for (int key; (key = cli_args_next(&args, &val)) != CLI_DONE;) {
        switch (key) {
        case CLI_FAIL:
            return 2;
        case 'h':
            usage(stdout);
            return 0;
        case O_JSON:
            json = true;
            break;
        case O_SYSTEM:
            system = true;
            break;
        case 'm':
        case CLI_OPERAND: /* `info MODEL` = `info -m MODEL` */
            if (model_arg) {
                cli_error("info", "one model at a time (got '%s' and '%s')", model_arg, val);
                return 2;
            }
            model_arg = val;
            break;
        }
    }
    if (system && (!json || !model_arg)) { /* JSON with a model: inside its document */
        print_system(json);
        if (!model_arg) {
            if (json) printf("\n");
            return 0;
        }
        printf("\n");
    }
    const char *path = cli_model_path("info", model_arg);
    if (!path) return 2;
    skv_err err = {0};
    skv_model *model = skv_model_load_meta(path, &err); /* metadata only: no packing */
    if (!model) {
        /* a well-formed GGUF of another architecture, or of a vocabulary alone: shown as it is
         * (a broken model stays refused) */
        skv_gguf *raw = err.status == SKV_ERR_UNSUPPORTED || err.status == SKV_ERR_FORMAT
                            ? skv_gguf_open(path, NULL)
                            : NULL;
        if (raw && (err.status == SKV_ERR_UNSUPPORTED || skv_gguf_n_tensors(raw) == 0)) {
            print_raw(raw, path, err.msg, json, system);
            skv_gguf_close(raw);
            return 0;
        }
        skv_gguf_close(raw);
        cli_error("info", "%s", err.msg);
        return err.status == SKV_ERR_NOMEM ? 1 : 2; /* as cli_load_model_as */
    }
    skv_gguf *g = skv_gguf_open(path, &err);
    if (!g) {
        cli_error("info", "%s", err.msg);
        skv_model_free(model);
        return 1;
    }
    const skv_hparams *hp = skv_model_hparams(model);
    const skv_vocab *v = skv_model_vocab(model);
    if (json) {
        printf("{");
        if (system) {
            printf("\"system\":");
            print_system(true);
            printf(",");
        }
        printf("\"path\":");
        cli_json_string(stdout, path, strlen(path));
        printf(",\"gguf_version\":%u,\"architecture\":\"%s\",\"runnable\":true,\"hparams\":{\"n_"
               "vocab\":%d,"
               "\"n_ctx_train\":%d,\"n_embd\":%d,\"n_layer\":%d,\"n_head\":%d,\"n_head_kv\":%d,"
               "\"head_dim\":%d,\"n_ff\":%d,\"n_rot\":%d,\"rope_theta\":%g,\"norm_eps\":%g,"
               "\"tied_output\":%s,\"rope_mode\":\"%s\",\"rope_freq_scale\":%g,"
               "\"rope_freq_factors\":%s,\"qkv_bias\":%s,\"qk_norm\":%s,"
               "\"rope_scaling\":\"%s\",\"n_ctx_orig\":%d,\"rope_attn_factor\":%g,"
               "\"attn_temp_scale\":%g},",
               skv_gguf_version(g), hp->arch, hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer,
               hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_rot, hp->rope_theta,
               hp->norm_eps, hp->tied_output ? "true" : "false",
               hp->rope_mode == SKV_ROPE_NEOX ? "neox" : "adjacent", hp->rope_freq_scale,
               hp->rope_freq_factors ? "true" : "false", hp->qkv_bias ? "true" : "false",
               hp->qk_norm ? "true" : "false", rope_scaling_name(hp->rope_scaling), hp->n_ctx_orig,
               (double)hp->rope_attn_factor, (double)hp->attn_temp_scale);
        printf("\"weight_type\":\"%s\",\"weight_bytes_per_token\":%llu,",
               skv_type_name(skv_model_weight_type(model)),
               (unsigned long long)skv_model_weight_bytes(model));
        print_type_mix(g, true);
        printf("\"vocab\":{\"model\":\"%s\",\"n_tokens\":%d,\"bos\":%d,\"eos\":%d},",
               skv_vocab_model(v), skv_vocab_n_tokens(v), skv_vocab_bos(v), skv_vocab_eos(v));
        print_tensors(g, true);
        printf("}\n");
    } else {
        /* every string from the file (or its path) goes to the terminal escaped */
        char e1[1024], e2[256], e3[256];
        printf("model        %s (GGUF v%u, %s)\n", cli_escape(path, e1, sizeof e1, false),
               skv_gguf_version(g), cli_escape(hp->arch, e2, sizeof e2, false));
        printf("n_vocab      %d\nn_ctx_train  %d\nn_embd       %d\nn_layer      %d\n"
               "n_head       %d\nn_head_kv    %d (GQA %d:1)\nhead_dim     %d\nn_ff         %d\n"
               "n_rot        %d\nrope_theta   %g\nnorm_eps     %g\noutput       %s\n",
               hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
               hp->n_head / hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_rot, hp->rope_theta,
               hp->norm_eps, hp->tied_output ? "tied to token_embd" : "separate");
        char lin[64] = ""; /* YaRN's factor is on its own line: it scales low frequencies only */
        if (hp->rope_scaling == SKV_ROPE_SCALING_LINEAR)
            snprintf(lin, sizeof lin, ", linear scale %g", (double)hp->rope_freq_scale);
        printf("rope         %s pairs%s%s%s%s%s\n",
               hp->rope_mode == SKV_ROPE_NEOX ? "neox (i, i + n_rot/2)" : "adjacent (2i, 2i+1)",
               hp->rope_freq_factors ? ", rope_freqs factors" : "",
               hp->n_rot < hp->head_dim ? ", partial" : "", lin,
               hp->qkv_bias ? "; q/k/v biases" : "", hp->qk_norm ? "; q/k RMSNorm" : "");
        if (hp->rope_scaling == SKV_ROPE_SCALING_LONGROPE) /* the context's n_ctx chooses */
            printf("rope scaling longrope: short factors for a context of n_ctx up to %d, long "
                   "past it (commands: --ctx N, default the training length %d: %s); cos and "
                   "sin x %g\n",
                   hp->n_ctx_orig, hp->n_ctx_train,
                   hp->n_ctx_train > hp->n_ctx_orig ? "long" : "short",
                   (double)hp->rope_attn_factor);
        else if (hp->rope_scaling == SKV_ROPE_SCALING_YARN) /* betas: the loader's reading */
            printf("rope scaling yarn: factor %g over %d trained positions, betas %g / %g; cos "
                   "and sin x %g\n",
                   1.0 / hp->rope_freq_scale, hp->n_ctx_orig, (double)model->yarn_beta_fast,
                   (double)model->yarn_beta_slow, (double)hp->rope_attn_factor);
        else if (hp->rope_attn_factor != 1.0f)
            printf("rope scaling %s; cos and sin x %g\n", rope_scaling_name(hp->rope_scaling),
                   (double)hp->rope_attn_factor);
        if (hp->attn_temp_scale != 0)
            printf("attention    queries at position p x (1 + %g ln(floor(p / %d) + 1)) (Llama 4's "
                   "temperature)\n",
                   (double)hp->attn_temp_scale, hp->n_ctx_orig);
        printf("weights      mostly %s, %.2f MiB read per token\n",
               skv_type_name(skv_model_weight_type(model)),
               skv_model_weight_bytes(model) / 1048576.0);
        print_type_mix(g, false);
        const char *pre = skv_vocab_pre(v);
        printf("vocab        %s (%s%s%s), %d tokens, bos %d, eos %d\n",
               cli_escape(skv_vocab_model(v), e2, sizeof e2, false),
               strcmp(skv_vocab_model(v), "gpt2") ? "SentencePiece BPE" : "byte-level BPE",
               pre ? ", pre-tokenizer " : "", pre ? cli_escape(pre, e3, sizeof e3, false) : "",
               skv_vocab_n_tokens(v), skv_vocab_bos(v), skv_vocab_eos(v));
        print_tensors(g, false);
    }
    skv_gguf_close(g);
    skv_model_free(model);
    return 0;
}
