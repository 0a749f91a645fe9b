/* quantize_model.c — rewrites a GGUF model with its 2-D weight matrices in another type.
 * Norms (1-D) and matrices already in the type (or, for a matrix that cannot take it, in a type
 * no larger than its fallback) are copied from the input mapping; the others are
 * converted row by row (dequantize -> quantize) in parallel and streamed to the output, so memory
 * stays at a few megabytes whatever the model size. */
#include "arch.h"
#include "kernels/kernels.h"
#include "synth.h"
#include "threads.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct requant_ctx {
    const skv_stream_tensor *out; /* [n] */
    const skv_gguf_tensor **in;   /* [n] */
    skv_pool *pool;
    float *scratch; /* [n_threads, max_cols] */
    int64_t max_cols;
    int64_t ti, row0, n_rows;
    void *dst;
    bool simple;
} requant_ctx;

static void requant_task(void *arg, int ith, int nth) {
    requant_ctx *c = arg;
    const skv_gguf_tensor *src = c->in[c->ti];
    const skv_stream_tensor *dt = &c->out[c->ti];
    int64_t cols = src->ne[0];
    size_t srb = skv_row_bytes(src->type, cols), drb = skv_row_bytes(dt->type, cols);
    float *row = c->scratch + (size_t)ith * (size_t)c->max_cols;
    int64_t a = c->n_rows * ith / nth, b = c->n_rows * (ith + 1) / nth;
    for (int64_t r = a; r < b; r++) {
        const char *in = (const char *)src->data + (size_t)(c->row0 + r) * srb;
        skv_dequantize_row(src->type, in, row, cols);
        if (c->simple)
            skv_quantize_row_simple(dt->type, row, (char *)c->dst + (size_t)r * drb, cols);
        else
            skv_quantize_row(dt->type, row, (char *)c->dst + (size_t)r * drb, cols);
    }
}

static skv_status requant_fill(void *ctx, int64_t ti, int64_t row0, int64_t n_rows, void *dst,
                               skv_err *err) {
    requant_ctx *c = ctx;
    c->ti = ti;
    c->row0 = row0;
    c->n_rows = n_rows;
    c->dst = dst;
    skv_pool_run(c->pool, requant_task, c);
    return SKV_OK;
}

static void note_fallback(skv_quantize_report *r, const char *name) {
    size_t len = strlen(r->fallback_names), cap = sizeof r->fallback_names;
    if (len + 4 >= cap) return; /* already truncated */
    int n = snprintf(r->fallback_names + len, cap - len, "%s%s", len ? ", " : "", name);
    if (n < 0 || (size_t)n >= cap - len) strcpy(r->fallback_names + cap - 4, "...");
}

bool skv_quant_mix_more_bits(int layer, int n_layer) {
    if (layer < 0 || layer >= n_layer) return false;
    int first = n_layer / 8, last = 7 * n_layer / 8;
    if (layer < first || layer >= last) return true;
    return (layer - first) % 3 == 2;
}

/* "blk.N.rest": N, and rest in *rest; -1 if name is not a layer tensor. */
static int layer_of(const char *name, const char **rest) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    long v = 0;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9' && v < 1000000) v = v * 10 + (*p++ - '0');
    if (*p != '.') return -1;
    *rest = p + 1;
    return (int)v;
}

/* The mixes: the name the CLI takes, llama.cpp's file type, the K type most matrices get. */
typedef struct mix_row {
    skv_quant_mix mix;
    const char *name;
    uint32_t ftype;
    skv_type base;
} mix_row;
static const mix_row mixes[] = {
    {SKV_QMIX_Q4_K_M, "q4_k_m", 15, SKV_TYPE_Q4_K},
    {SKV_QMIX_Q2_K_M, "q2_k_m", 10, SKV_TYPE_Q2_K},
    {SKV_QMIX_Q3_K_M, "q3_k_m", 12, SKV_TYPE_Q3_K},
};

static const mix_row *mix_find(skv_quant_mix mix) {
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (mixes[i].mix == mix) return &mixes[i];
    return NULL;
}

uint32_t skv_quant_mix_ftype(skv_quant_mix mix) {
    const mix_row *r = mix_find(mix);
    return r ? r->ftype : 0u;
}

skv_type skv_quant_mix_base(skv_quant_mix mix) {
    const mix_row *r = mix_find(mix);
    return r ? r->base : SKV_TYPE_COUNT;
}

const char *skv_quant_mix_name(skv_quant_mix mix) {
    const mix_row *r = mix_find(mix);
    return r ? r->name : NULL;
}

skv_quant_mix skv_quant_mix_from_name(const char *name) {
    for (size_t i = 0; name && i < sizeof mixes / sizeof mixes[0]; i++)
        if (!strcasecmp(mixes[i].name, name)) return mixes[i].mix;
    return SKV_QMIX_NONE;
}

skv_type skv_quant_mix_type(skv_quant_mix mix, const char *name, int n_layer, int n_gqa,
                            bool has_output) {
    if (!mix_find(mix)) return SKV_TYPE_COUNT;
    if (!strcmp(name, "output.weight") || (!has_output && !strcmp(name, "token_embd.weight")))
        return SKV_TYPE_Q6_K;
    const char *rest = NULL;
    int layer = layer_of(name, &rest);
    if (mix == SKV_QMIX_Q2_K_M) {
        if (layer >= 0 && !strcmp(rest, "attn_v.weight"))
            return n_gqa >= 4 ? SKV_TYPE_Q4_K : SKV_TYPE_Q3_K;
        if (layer >= 0 && (!strcmp(rest, "ffn_down.weight") || !strcmp(rest, "attn_output.weight")))
            return SKV_TYPE_Q3_K;
        return SKV_TYPE_Q2_K;
    }
    if (mix == SKV_QMIX_Q3_K_M) {
        if (layer >= 0 && !strcmp(rest, "attn_v.weight"))
            return layer < 2 ? SKV_TYPE_Q5_K : SKV_TYPE_Q4_K;
        if (layer >= 0 && !strcmp(rest, "ffn_down.weight"))
            return layer < n_layer / 16 ? SKV_TYPE_Q5_K : SKV_TYPE_Q4_K;
        if (layer >= 0 && (!strcmp(rest, "attn_output.weight") || !strcmp(rest, "attn_qkv.weight")))
            return SKV_TYPE_Q4_K;
        return SKV_TYPE_Q3_K;
    }
    if (layer >= 0 && !strcmp(rest, "attn_qkv.weight")) return SKV_TYPE_Q5_K;
    if (layer >= 0 && (!strcmp(rest, "attn_v.weight") || !strcmp(rest, "ffn_down.weight")))
        return skv_quant_mix_more_bits(layer, n_layer) ? SKV_TYPE_Q6_K : SKV_TYPE_Q4_K;
    return SKV_TYPE_Q4_K;
}

/* Query heads per kv head from the file's metadata (1 when it does not say). */
static int file_n_gqa(const skv_gguf *g) {
    const char *arch = skv_gguf_get_str(g, "general.architecture");
    char key[96];
    int64_t nh = 0, nkv = 0, i;
    snprintf(key, sizeof key, "%.60s.attention.head_count", arch ? arch : "llama");
    if ((i = skv_gguf_find_key(g, key)) >= 0) skv_gguf_kv_int(g, i, &nh);
    snprintf(key, sizeof key, "%.60s.attention.head_count_kv", arch ? arch : "llama");
    if ((i = skv_gguf_find_key(g, key)) >= 0) skv_gguf_kv_int(g, i, &nkv);
    if (nkv <= 0) nkv = nh; /* llama's default: as many kv heads as heads */
    return nh > 0 && nkv > 0 ? (int)(nh / nkv) : 1;
}

skv_status skv_quantize_model_ex(const char *in_path, const char *out_path, skv_type type,
                                 int n_threads, skv_quantize_report *report, skv_err *err) {
    skv_quantize_opts o = {.type = type, .n_threads = n_threads};
    return skv_quantize_model_opts(in_path, out_path, &o, report, err);
}

skv_status skv_quantize_model_opts(const char *in_path, const char *out_path,
                                   const skv_quantize_opts *opts, skv_quantize_report *report,
                                   skv_err *err) {
    skv_quant_mix mix = opts ? opts->mix : SKV_QMIX_NONE;
    skv_type type = mix ? skv_quant_mix_base(mix) : opts ? opts->type : SKV_TYPE_COUNT;
    int n_threads = opts ? opts->n_threads : 0;
    skv_quantize_report rep_local;
    skv_quantize_report *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    double t0 = skv_time_ms();
    if (!in_path || !out_path)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "quantize: missing input or output path");
    if (mix != SKV_QMIX_NONE && !mix_find(mix))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown quantization mix %d", (int)mix);
    if (!opts) return skv_err_set(err, SKV_ERR_INVALID_ARG, "quantize: no options given");
    if ((unsigned)type >= SKV_TYPE_COUNT)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "quantize: %d is not a ggml type id",
                           (int)type);
    if (!skv_type_can_quantize(type)) {
        if (skv_type_name(type))
            return skv_err_set(err, SKV_ERR_UNSUPPORTED, "cannot write weights of type %s",
                               skv_type_name(type));
        return skv_err_set(err, SKV_ERR_UNSUPPORTED, "cannot write weights of type id %d",
                           (int)type);
    }
    if (n_threads < 0 || n_threads > SKV_MAX_THREADS)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "quantize: %d threads (0 for all cores, at most %d)", n_threads,
                           SKV_MAX_THREADS);

    skv_gguf *g = skv_gguf_open(in_path, err);
    if (!g) {
        rep->bad_input = !err || err->status != SKV_ERR_NOMEM;
        return err ? err->status : SKV_ERR_FORMAT;
    }
    int64_t n = skv_gguf_n_tensors(g);
    skv_status st = SKV_OK;
    /* a file no command would read afterwards: another architecture's, or one without weights (a
     * vocabulary-only GGUF), refused as loading refuses it; a file of matrices alone (an
     * architecture sparsekv runs) is quantized */
    const char *arch = skv_gguf_get_str(g, "general.architecture");
    if (arch && !skv_arch_require(arch, err)) {
        rep->bad_input = true;
        skv_gguf_close(g);
        return SKV_ERR_UNSUPPORTED;
    }
    if (n == 0) {
        rep->bad_input = true;
        st = skv_err_set(err, SKV_ERR_FORMAT, "the file holds no tensors%s: nothing to quantize",
                         skv_gguf_find_key(g, "tokenizer.ggml.model") >= 0
                             ? " (a vocabulary-only GGUF, not a model)"
                             : "");
        skv_gguf_close(g);
        return st;
    }
    skv_stream_tensor *out = calloc((size_t)(n > 0 ? n : 1), sizeof *out);
    const skv_gguf_tensor **in = calloc((size_t)(n > 0 ? n : 1), sizeof *in);
    skv_gguf_writer *w = skv_gguf_writer_new();
    requant_ctx rc = {0};
    if (!out || !in || !w) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    bool any_fill = false, has_output = false;
    const int n_gqa = file_n_gqa(g);
    int n_layer = 0;
    for (int64_t i = 0; i < n; i++) { /* what the mix needs: the layer count, a separate output */
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        const char *rest;
        int l = layer_of(t->name, &rest);
        if (l >= 0 && l + 1 > n_layer) n_layer = l + 1;
        if (!strcmp(t->name, "output.weight")) has_output = true;
    }
    for (int64_t i = 0; i < n; i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        in[i] = t;
        out[i].name = t->name;
        out[i].n_dims = t->n_dims;
        memcpy(out[i].ne, t->ne, sizeof out[i].ne);
        out[i].type = t->type;
        out[i].data = t->data;
        rep->bytes_in += t->size;
        if (t->n_dims != 2) { /* norms and anything that is not a matrix: as is */
            rep->n_unchanged++;
            continue;
        }
        if (!skv_type_supported(t->type)) {
            rep->bad_input = true;
            st = skv_err_set(err, SKV_ERR_UNSUPPORTED,
                             "tensor '%s' is stored in type id %d, which sparsekv cannot read",
                             t->name, (int)t->type);
            goto done;
        }
        skv_type asked = mix ? skv_quant_mix_type(mix, t->name, n_layer, n_gqa, has_output) : type;
        skv_type want = skv_matrix_type_for(asked, t->ne[0]);
        /* A fallback never grows a matrix: one stored no larger (Q4_0 against Q5_0, BF16
         * against F16) is copied as it is, losslessly. */
        if (want != asked && skv_row_bytes(t->type, t->ne[0]) <= skv_row_bytes(want, t->ne[0]))
            want = t->type;
        rep->n_by_type[want]++;
        if (want != asked) {
            rep->n_fallback++;
            rep->n_fallback_by_type[want]++;
            note_fallback(rep, t->name);
        }
        if (want == t->type) {
            if (want == asked) rep->n_unchanged++;
            continue;
        }
        if (want == asked) rep->n_converted++;
        out[i].type = want;
        out[i].data = NULL;
        rc.max_cols = SKV_MAX(rc.max_cols, t->ne[0]);
        any_fill = true;
    }
    rep->n_tensors = (int)n;

    if ((st = skv_gguf_writer_copy_kv(w, g, NULL)) != SKV_OK ||
        (st = skv_gguf_writer_set_u32(
             w, "general.file_type",
             skv_ftype_label(type, skv_quant_mix_ftype(mix), rep->n_by_type))) != SKV_OK) {
        skv_err_set(err, st, "cannot copy the metadata of '%s'", in_path);
        goto done;
    }
    if (any_fill) {
        rc.pool = skv_pool_new(n_threads);
        int nth = rc.pool ? skv_pool_size(rc.pool) : 0;
        rc.scratch = nth > 0 ? malloc((size_t)nth * (size_t)rc.max_cols * sizeof(float)) : NULL;
        if (!rc.pool || !rc.scratch) {
            st = skv_err_set(err, SKV_ERR_NOMEM, "cannot start %d worker threads", n_threads);
            goto done;
        }
    }
    rc.out = out;
    rc.in = in;
    rc.simple = opts && opts->simple;
    st = skv_gguf_write_streamed(w, out, n, requant_fill, &rc, out_path, err);
    if (st == SKV_OK) {
        for (int64_t i = 0; i < n; i++) {
            uint64_t rows = 1;
            for (int d = 1; d < out[i].n_dims; d++) rows *= (uint64_t)out[i].ne[d];
            rep->bytes_out += rows * skv_row_bytes(out[i].type, out[i].ne[0]);
        }
    }
done:
    skv_pool_free(rc.pool);
    free(rc.scratch);
    skv_gguf_writer_free(w);
    free(in);
    free(out);
    skv_gguf_close(g);
    rep->ms = skv_time_ms() - t0;
    return st;
}

skv_status skv_quantize_model(const char *in_path, const char *out_path, skv_type type,
                              int n_threads, skv_err *err) {
    return skv_quantize_model_ex(in_path, out_path, type, n_threads, NULL, err);
}
