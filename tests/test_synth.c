/* test_synth.c — synthetic models: shapes, metadata, vocabulary, determinism, loadability. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "kernels/kernels.h"
#include "ref_forward.h"
#include "sparsekv.h"
#include "support.h"
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A small GQA shape with an untied output, written through the parameters API. */
static const skv_synth_shape small = {"small", "test", 300, 64,      48,    64,   3,
                                      8,       2,      96,  5000.0f, 2e-6f, false};

static char *write_model(const skv_synth_shape *s, skv_type type, uint64_t seed, int n_ctx) {
    char *path = strdup(test_tmp_path(".gguf"));
    skv_synth_params p = {type, seed, n_ctx, 2};
    skv_err err = {0};
    skv_status st = skv_synth_write(s, &p, path, &err);
    if (st != SKV_OK) fprintf(stderr, "synth_write: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    return path;
}

static int64_t get_int(const skv_gguf *g, const char *key) {
    int64_t v = -1;
    assert_true(skv_gguf_get_int(g, key, &v));
    return v;
}

static double get_float(const skv_gguf *g, const char *key) {
    double v = -1;
    assert_true(skv_gguf_get_float(g, key, &v));
    return v;
}

static void expect_tensor(const skv_gguf *g, const char *name, skv_type type, int n_dims,
                          int64_t ne0, int64_t ne1) {
    int64_t i = skv_gguf_find_tensor(g, name);
    if (i < 0) fprintf(stderr, "missing tensor %s\n", name);
    assert_true(i >= 0);
    const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, n_dims);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1);
}

/* Every hparam, tensor shape and vocabulary entry of a written shape, checked against the shape
 * (an independent restatement of the llama GGUF layout). */
static void check_file(const char *path, const skv_synth_shape *s, skv_type type, uint32_t ftype,
                       int n_ctx) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(path, &err);
    if (!g) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(g);
    assert_string_equal(skv_gguf_get_str(g, "general.architecture"), "llama");
    assert_string_equal(skv_gguf_get_str(g, "tokenizer.ggml.model"), "llama");
    assert_int_equal(get_int(g, "llama.context_length"), n_ctx);
    assert_int_equal(get_int(g, "llama.embedding_length"), s->n_embd);
    assert_int_equal(get_int(g, "llama.feed_forward_length"), s->n_ff);
    assert_int_equal(get_int(g, "llama.block_count"), s->n_layer);
    assert_int_equal(get_int(g, "llama.attention.head_count"), s->n_head);
    assert_int_equal(get_int(g, "llama.attention.head_count_kv"), s->n_head_kv);
    assert_int_equal(get_int(g, "llama.rope.dimension_count"), s->n_embd / s->n_head);
    assert_int_equal(get_int(g, "llama.vocab_size"), s->n_vocab);
    assert_true(fabs(get_float(g, "llama.rope.freq_base") - s->rope_theta) <= 1e-6 * s->rope_theta);
    assert_true(fabs(get_float(g, "llama.attention.layer_norm_rms_epsilon") - s->norm_eps) <=
                1e-6 * s->norm_eps);
    assert_int_equal(get_int(g, "general.file_type"), ftype);
    assert_int_equal(get_int(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(get_int(g, "tokenizer.ggml.eos_token_id"), 2);
    assert_int_equal(get_int(g, "tokenizer.ggml.unknown_token_id"), 0);

    int64_t kt = skv_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t ks = skv_gguf_find_key(g, "tokenizer.ggml.scores");
    int64_t ky = skv_gguf_find_key(g, "tokenizer.ggml.token_type");
    assert_true(kt >= 0 && ks >= 0 && ky >= 0);
    assert_int_equal(skv_gguf_arr_len(g, kt), s->n_vocab);
    assert_int_equal(skv_gguf_arr_len(g, ks), s->n_vocab);
    assert_int_equal(skv_gguf_arr_len(g, ky), s->n_vocab);
    assert_string_equal(skv_gguf_arr_str(g, kt, 0, NULL), "<unk>");
    assert_string_equal(skv_gguf_arr_str(g, kt, 1, NULL), "<s>");
    assert_string_equal(skv_gguf_arr_str(g, kt, 2, NULL), "</s>");
    assert_string_equal(skv_gguf_arr_str(g, kt, 3, NULL), "<0x00>");
    assert_string_equal(skv_gguf_arr_str(g, kt, 3 + 0x41, NULL), "<0x41>");
    assert_string_equal(skv_gguf_arr_str(g, kt, 258, NULL), "<0xFF>");
    assert_string_equal(skv_gguf_arr_str(g, kt, 259, NULL), "\xe2\x96\x81"); /* U+2581 */
    int64_t ty;
    assert_true(skv_gguf_arr_int(g, ky, 0, &ty) && ty == 2);
    assert_true(skv_gguf_arr_int(g, ky, 1, &ty) && ty == 3);
    assert_true(skv_gguf_arr_int(g, ky, 100, &ty) && ty == 6);
    assert_true(skv_gguf_arr_int(g, ky, s->n_vocab - 1, &ty) && ty == 1);
    /* pieces are unique (a tokenizer needs that) */
    for (int64_t i = 259; i + 1 < s->n_vocab && i < 2000; i++)
        assert_string_not_equal(skv_gguf_arr_str(g, kt, i, NULL),
                                skv_gguf_arr_str(g, kt, i + 1, NULL));

    int64_t e = s->n_embd, hd = s->n_embd / s->n_head, q = s->n_head * hd, kv = s->n_head_kv * hd;
    skv_type me = skv_matrix_type_for(type, e), mf = skv_matrix_type_for(type, s->n_ff);
    assert_int_equal(skv_gguf_n_tensors(g), 2 + 9 * s->n_layer + (s->tied ? 0 : 1));
    expect_tensor(g, "token_embd.weight", me, 2, e, s->n_vocab);
    expect_tensor(g, "output_norm.weight", SKV_TYPE_F32, 1, e, 1);
    if (s->tied)
        assert_true(skv_gguf_find_tensor(g, "output.weight") < 0);
    else
        expect_tensor(g, "output.weight", me, 2, e, s->n_vocab);
    for (int l = 0; l < s->n_layer; l++) {
        char nm[64];
#define T(x) (snprintf(nm, sizeof nm, "blk.%d." x, l), nm)
        expect_tensor(g, T("attn_norm.weight"), SKV_TYPE_F32, 1, e, 1);
        expect_tensor(g, T("attn_q.weight"), me, 2, e, q);
        expect_tensor(g, T("attn_k.weight"), me, 2, e, kv);
        expect_tensor(g, T("attn_v.weight"), me, 2, e, kv);
        expect_tensor(g, T("attn_output.weight"), skv_matrix_type_for(type, q), 2, q, e);
        expect_tensor(g, T("ffn_norm.weight"), SKV_TYPE_F32, 1, e, 1);
        expect_tensor(g, T("ffn_gate.weight"), me, 2, e, s->n_ff);
        expect_tensor(g, T("ffn_up.weight"), me, 2, e, s->n_ff);
        expect_tensor(g, T("ffn_down.weight"), mf, 2, s->n_ff, e);
#undef T
    }
    /* norms are exactly 1 */
    const skv_gguf_tensor *n =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "blk.0.ffn_norm.weight"));
    for (int64_t i = 0; i < e; i++) assert_true(((const float *)n->data)[i] == 1.0f);
    skv_gguf_close(g);
}

static void test_small_shape_f32(void **state) {
    (void)state;
    char *path = write_model(&small, SKV_TYPE_F32, 7, 0);
    check_file(path, &small, SKV_TYPE_F32, 0 /* llama.cpp's ALL_F32 */, small.n_ctx);

    /* weights: mean ~0 and std ~1/sqrt(fan_in) per matrix (thousands of samples: 5% slack) */
    skv_gguf *g = skv_gguf_open(path, NULL);
    assert_non_null(g);
    const char *names[] = {"token_embd.weight", "blk.1.attn_k.weight", "blk.2.ffn_down.weight",
                           "output.weight"};
    for (size_t k = 0; k < 4; k++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, names[k]));
        const float *w = t->data;
        int64_t n = t->ne[0] * t->ne[1];
        double s1 = 0, s2 = 0, amax = 0;
        for (int64_t i = 0; i < n; i++) {
            s1 += w[i];
            s2 += (double)w[i] * w[i];
            amax = fmax(amax, fabs(w[i]));
        }
        double mean = s1 / n, sd = sqrt(s2 / n - mean * mean), want = 1.0 / sqrt((double)t->ne[0]);
        assert_true(fabs(sd / want - 1) < 0.05);
        assert_true(fabs(mean) < 0.05 * want);
        assert_true(amax <= 2 * sqrt(3.0) * want + 1e-6); /* Irwin-Hall of 4 is bounded */
    }
    /* different rows and different tensors are different draws */
    const skv_gguf_tensor *a =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "blk.0.attn_k.weight"));
    const skv_gguf_tensor *b =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "blk.0.attn_v.weight"));
    assert_true(memcmp(a->data, b->data, a->size) != 0);
    assert_true(memcmp(a->data, (const char *)a->data + 64 * 4, 64 * 4) != 0);
    skv_gguf_close(g);
    unlink(path);
    free(path);
}

/* A real preset written in full (stories15m: 15M params) with its metadata checked, plus the
 * preset table against the published numbers of the models they imitate. */
static void test_real_preset(void **state) {
    (void)state;
    const skv_synth_shape *s = skv_synth_preset("stories15m");
    assert_non_null(s);
    char *path = write_model(s, SKV_TYPE_Q8_0, 1, 0);
    check_file(path, s, SKV_TYPE_Q8_0, 7 /* MOSTLY_Q8_0 */, 256);
    unlink(path);
    free(path);

    struct {
        const char *name;
        int vocab, dim, layers, heads, kv, ff, ctx_train;
        float theta;
        bool tied;
        double params_m; /* published parameter counts (millions), within 2% */
    } want[] = {
        {"stories15m", 32000, 288, 6, 6, 6, 768, 256, 10000, true, 15.2},
        {"smollm2-135m", 49152, 576, 30, 9, 3, 1536, 8192, 100000, true, 134.5},
        {"qwen2.5-0.5b-like", 151936, 896, 24, 14, 2, 4864, 32768, 1e6, true, 494.0},
        {"llama-3.2-1b", 128256, 2048, 16, 32, 8, 8192, 131072, 500000, true, 1235.8},
        {"qwen2.5-0.5b", 151936, 896, 24, 14, 2, 4864, 32768, 1e6, true, 494.0},
        {"qwen3-0.6b", 151936, 1024, 28, 16, 8, 3072, 40960, 1e6, true, 596.0},
        {"phi-3-mini", 32064, 3072, 32, 32, 32, 8192, 4096, 10000, false, 3821.0},
        {"phi-3.5-mini", 32064, 3072, 32, 32, 32, 8192, 131072, 10000, false, 3821.0},
        {"phi-4-mini", 200064, 3072, 32, 24, 8, 8192, 131072, 10000, true, 3840.0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const skv_synth_shape *p = skv_synth_preset(want[i].name);
        assert_non_null(p);
        assert_int_equal(p->n_vocab, want[i].vocab);
        assert_int_equal(p->n_embd, want[i].dim);
        assert_int_equal(p->n_layer, want[i].layers);
        assert_int_equal(p->n_head, want[i].heads);
        assert_int_equal(p->n_head_kv, want[i].kv);
        assert_int_equal(p->n_ff, want[i].ff);
        assert_int_equal(p->n_ctx_train, want[i].ctx_train);
        assert_true(p->n_ctx <= p->n_ctx_train);
        assert_true(p->rope_theta == want[i].theta);
        assert_int_equal(p->tied, want[i].tied);
        double m = (double)skv_synth_n_params(p) / 1e6;
        if (fabs(m / want[i].params_m - 1) > 0.02)
            fprintf(stderr, "%s: %.1f M params, published %.1f M\n", want[i].name, m,
                    want[i].params_m);
        assert_true(fabs(m / want[i].params_m - 1) <= 0.02);
    }
    assert_non_null(skv_synth_preset("SmolLM2-135M")); /* case-insensitive */
    assert_null(skv_synth_preset("gpt-5"));
}

static void test_deterministic(void **state) {
    (void)state;
    char *a = write_model(&small, SKV_TYPE_Q8_0, 42, 0);
    char *b = write_model(&small, SKV_TYPE_Q8_0, 42, 0);
    char *c = write_model(&small, SKV_TYPE_Q8_0, 43, 0);
    size_t na, nb, nc;
    char *da = test_read_file(a, &na), *db = test_read_file(b, &nb), *dc = test_read_file(c, &nc);
    assert_non_null(da);
    assert_non_null(db);
    assert_non_null(dc);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    assert_true(na != nc || memcmp(da, dc, na) != 0);
    /* the thread count does not change a byte */
    char *d = strdup(test_tmp_path(".gguf"));
    skv_synth_params p = {SKV_TYPE_Q8_0, 42, 0, 1};
    assert_int_equal(skv_synth_write(&small, &p, d, NULL), SKV_OK);
    size_t nd;
    char *dd = test_read_file(d, &nd);
    assert_non_null(dd);
    assert_int_equal(nd, na);
    assert_memory_equal(da, dd, na);
    free(da), free(db), free(dc), free(dd);
    unlink(a), unlink(b), unlink(c), unlink(d);
    free(a), free(b), free(c), free(d);
}

/* The same seed gives the same underlying floats in every type: a type's matrices are the F32
 * model's matrices quantized row by row. */
static void test_types_share_weights(void **state) {
    (void)state;
    char *f = write_model(&small, SKV_TYPE_F32, 5, 0);
    skv_type types[] = {SKV_TYPE_F16, SKV_TYPE_BF16, SKV_TYPE_Q4_0, SKV_TYPE_Q4_K};
    skv_gguf *gf = skv_gguf_open(f, NULL);
    assert_non_null(gf);
    for (size_t k = 0; k < 4; k++) {
        char *q = write_model(&small, types[k], 5, 0);
        skv_gguf *gq = skv_gguf_open(q, NULL);
        assert_non_null(gq);
        const skv_gguf_tensor *tf =
            skv_gguf_tensor_at(gf, skv_gguf_find_tensor(gf, "blk.2.attn_q.weight"));
        const skv_gguf_tensor *tq =
            skv_gguf_tensor_at(gq, skv_gguf_find_tensor(gq, "blk.2.attn_q.weight"));
        skv_type tt = skv_matrix_type_for(types[k], 64); /* q4_k: 64 is no whole block -> q8_0 */
        assert_int_equal(tq->type, tt);
        size_t rb = skv_row_bytes(tt, 64);
        void *row = malloc(rb);
        for (int64_t r = 0; r < tf->ne[1]; r++) {
            skv_quantize_row(tt, (const float *)tf->data + r * 64, row, 64);
            assert_memory_equal(row, (const char *)tq->data + r * rb, rb);
        }
        free(row);
        skv_gguf_close(gq);
        unlink(q);
        free(q);
    }
    skv_gguf_close(gf);
    unlink(f);
    free(f);
}

static void test_loads_and_runs(void **state) {
    (void)state;
    char *path = write_model(&small, SKV_TYPE_Q8_0, 3, 96);
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(m);
    const skv_hparams *hp = skv_model_hparams(m);
    assert_int_equal(hp->n_vocab, small.n_vocab);
    assert_int_equal(hp->n_ctx_train, 96);
    assert_int_equal(hp->n_embd, 64);
    assert_int_equal(hp->n_layer, 3);
    assert_int_equal(hp->n_head, 8);
    assert_int_equal(hp->n_head_kv, 2);
    assert_int_equal(hp->head_dim, 8);
    assert_int_equal(hp->n_ff, 96);
    assert_int_equal(hp->n_rot, 8);
    assert_true(hp->rope_theta == 5000.0f);
    assert_true(hp->norm_eps == 2e-6f);
    assert_false(hp->tied_output);
    assert_int_equal(skv_model_weight_type(m), SKV_TYPE_Q8_0);

    /* the synthetic vocabulary tokenizes text: pieces and byte fallback round-trip */
    const skv_vocab *v = skv_model_vocab(m);
    const char *text = "hello world, 42 {}";
    int32_t toks[64];
    int n = skv_tokenize(v, text, strlen(text), true, toks, 64);
    assert_true(n > 1 && toks[0] == 1);
    char buf[128];
    int nb = skv_detokenize(v, toks, n, false, buf, sizeof buf);
    assert_int_equal(nb, (int)strlen(text));
    assert_memory_equal(buf, text, (size_t)nb);

    skv_context_params cp = skv_context_default_params();
    cp.n_threads = 2;
    skv_context *ctx = skv_context_new(m, &cp, &err);
    assert_non_null(ctx);
    int32_t in[40];
    for (int i = 0; i < 40; i++) in[i] = (int32_t)((i * 37 + 11) % small.n_vocab);
    float *logits = malloc(sizeof(float) * 40 * (size_t)small.n_vocab);
    assert_int_equal(skv_forward(ctx, in, 40, SKV_LOGITS_ALL, logits, &err), SKV_OK);
    double s2 = 0;
    for (int i = 0; i < 40 * small.n_vocab; i++) {
        assert_true(isfinite(logits[i]));
        s2 += (double)logits[i] * logits[i];
    }
    /* not degenerate: the logits spread (unit-scale weights give O(1) logits) */
    double rms = sqrt(s2 / (40.0 * small.n_vocab));
    assert_true(rms > 0.05 && rms < 100);
    free(logits);
    skv_context_free(ctx);
    skv_model_free(m);
    unlink(path);
    free(path);
}

static void test_kquant_fallback_and_errors(void **state) {
    (void)state;
    /* The fallback rule: a k-quant's rows must be whole super-blocks of 256, else the type of
     * 32-blocks nearest above it in bits a weight takes rows of whole 32-blocks (llama-quantize
     * v0.5.0's choice: Q4_K 4.5 -> Q5_0 5.5, Q5_K 5.5 -> Q5_1 6, Q6_K 6.6 -> Q8_0 8.5, Q3_K 3.4
     * and Q2_K 2.6 -> Q4_0 4.5, IQ4_XS -> IQ4_NL) and F16 the rest (F32 stays F32); no F16 for
     * what a 32-block type can hold. */
    const skv_type kq[] = {SKV_TYPE_Q4_K, SKV_TYPE_Q5_K, SKV_TYPE_Q6_K,
                           SKV_TYPE_Q3_K, SKV_TYPE_Q2_K, SKV_TYPE_IQ4_XS};
    const skv_type fb[] = {SKV_TYPE_Q5_0, SKV_TYPE_Q5_1, SKV_TYPE_Q8_0,
                           SKV_TYPE_Q4_0, SKV_TYPE_Q4_0, SKV_TYPE_IQ4_NL};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(skv_matrix_type_for(kq[i], 512), kq[i]);
        assert_int_equal(skv_matrix_type_for(kq[i], 288), fb[i]);
        assert_int_equal(skv_matrix_type_for(kq[i], 64), fb[i]);
        assert_int_equal(skv_matrix_type_for(kq[i], 172), SKV_TYPE_F16);
        /* more bytes than asked (the fallback never loses precision to save them) */
        assert_true(skv_row_bytes(fb[i], 288 * 8) > skv_row_bytes(kq[i], 288 * 8));
    }
    assert_int_equal(skv_matrix_type_for(SKV_TYPE_Q8_0, 288), SKV_TYPE_Q8_0);
    assert_int_equal(skv_matrix_type_for(SKV_TYPE_Q8_0, 172), SKV_TYPE_F16);
    assert_int_equal(skv_matrix_type_for(SKV_TYPE_Q4_0, 100), SKV_TYPE_F16);
    assert_int_equal(skv_matrix_type_for(SKV_TYPE_F32, 7), SKV_TYPE_F32);
    assert_int_equal(skv_matrix_type_for(SKV_TYPE_BF16, 7), SKV_TYPE_BF16);
    /* q4_k needs rows of 256: the 64-wide matrices fall back to q5_0, none is lost */
    char *path = write_model(&small, SKV_TYPE_Q4_K, 1, 0);
    /* and the file is labelled what its matrices are (MOSTLY_Q5_0, 8), not Q4_K_S (14) */
    check_file(path, &small, SKV_TYPE_Q4_K, 8, small.n_ctx);
    skv_gguf *g = skv_gguf_open(path, NULL);
    assert_non_null(g);
    const skv_gguf_tensor *tq =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "blk.0.attn_q.weight"));
    assert_int_equal(tq->type, SKV_TYPE_Q5_0);
    skv_gguf_close(g);
    unlink(path);
    free(path);

    skv_err err = {0};
    skv_synth_params p = {SKV_TYPE_F32, 1, 0, 1};
    skv_synth_shape bad = small;
    bad.n_head = 7; /* 64 does not split into 7 heads */
    const char *out = test_tmp_path(".gguf");
    assert_int_equal(skv_synth_write(&bad, &p, out, &err), SKV_ERR_INVALID_ARG);
    assert_true(strstr(err.msg, "heads") != NULL);
    bad = small;
    bad.n_vocab = 100; /* no room for the byte tokens */
    assert_int_equal(skv_synth_write(&bad, &p, out, &err), SKV_ERR_INVALID_ARG);
    p.type = (skv_type)16; /* IQ2_XXS: not a type sparsekv writes */
    assert_int_equal(skv_synth_write(&small, &p, out, &err), SKV_ERR_UNSUPPORTED);
    assert_true(access(out, F_OK) != 0);
    p.type = SKV_TYPE_F32;
    assert_int_equal(skv_synth_write(&small, &p, "/nonexistent-dir/x.gguf", &err), SKV_ERR_IO);
}

static void test_command_line(void **state) {
    (void)state;
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "%s synth-model --list", test_cli());
    char *out = test_run(cmd, &st);
    assert_non_null(out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "smollm2-135m"));
    assert_non_null(strstr(out, "llama-3.2-1b"));
    free(out);
    const char *path = test_tmp_path(".gguf");
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type q8_0 --seed 9 -o %s", test_cli(),
             path);
    out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    free(out);
    skv_gguf *g = skv_gguf_open(path, NULL);
    assert_non_null(g);
    int64_t seed = 0;
    assert_true(skv_gguf_get_int(g, "sparsekv.synth.seed", &seed) && seed == 9);
    skv_gguf_close(g);
    unlink(path);
    snprintf(cmd, sizeof cmd, "%s synth-model --preset nope --type q8_0 -o %s 2>/dev/null",
             test_cli(), path);
    free(test_run(cmd, &st));
    assert_int_equal(st, 2);
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type iq2_xxs -o %s 2>/dev/null",
             test_cli(), path);
    free(test_run(cmd, &st));
    assert_int_equal(st, 2);
    assert_true(access(path, F_OK) != 0);
    /* --list writes nothing: options for a model are refused with it, in either order */
    const char *with_list[] = {"--list --preset tiny", "--preset tiny --list",
                               "--list -o x.gguf",     "--list --type f32",
                               "--list --seed 3",      "--list --overwrite"};
    for (size_t i = 0; i < sizeof with_list / sizeof with_list[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s synth-model %s 2>&1", test_cli(), with_list[i]);
        out = test_run(cmd, &st);
        assert_int_equal(st, 2);
        assert_non_null(strstr(out, "--list takes no other option"));
        assert_null(strstr(out, "smollm2-135m"));
        free(out);
    }
    /* an existing output (the embedded default model, say) is refused without --overwrite,
     * and left as it was */
    const char *old = "not a model\n";
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(old, f);
    fclose(f);
    out = test_cli_expect(2, "synth-model --preset tiny --type f32 -o %s 2>&1", path);
    assert_non_null(strstr(out, "exists"));
    assert_non_null(strstr(out, "--overwrite"));
    free(out);
    size_t n = 0;
    char *kept = test_read_file(path, &n);
    assert_int_equal(n, strlen(old));
    assert_memory_equal(kept, old, n);
    free(kept);
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type f32 -o %s --overwrite",
             test_cli(), path);
    free(test_run(cmd, &st));
    assert_int_equal(st, 0);
    g = skv_gguf_open(path, NULL);
    assert_non_null(g);
    skv_gguf_close(g);
    unlink(path);
}

/* The real families at small sizes: each architecture's options written as the real files
 * have them (checked tensor by tensor), loaded as that architecture, and run: the engine
 * against the float64 reference, which reads the file on its own. */
static void test_architectures(void **state) {
    (void)state;
    const skv_synth_shape s = {"arch-small", "test",   300,   64,  64, 64, 2, 4, 2,
                               96,           10000.0f, 1e-6f, true};
    const struct {
        skv_synth_arch a;
        const char *probe; /* a tensor only this architecture has */
        int64_t ne0, ne1;
    } cases[] = {
        {{.rope_freqs = true}, "rope_freqs.weight", 8, 1},
        {{.arch = "qwen2", .qkv_bias = true}, "blk.1.attn_k.bias", 32, 1},
        {{.arch = "qwen3", .head_dim = 32, .qk_norm = true}, "blk.0.attn_q.weight", 64, 128},
        {{.arch = "phi3", .fused = true}, "blk.1.attn_qkv.weight", 64, 64 + 2 * 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = strdup(test_tmp_path(".gguf"));
        skv_synth_params p = {SKV_TYPE_F32, 5, 0, 2};
        skv_err err = {0};
        assert_int_equal(skv_synth_write_ex(&s, &cases[i].a, &p, NULL, path, &err), SKV_OK);
        skv_gguf *g = skv_gguf_open(path, &err);
        assert_non_null(g);
        const char *arch = cases[i].a.arch ? cases[i].a.arch : "llama";
        assert_string_equal(skv_gguf_get_str(g, "general.architecture"), arch);
        expect_tensor(g, cases[i].probe, SKV_TYPE_F32, cases[i].ne1 == 1 ? 1 : 2, cases[i].ne0,
                      cases[i].ne1);
        skv_gguf_close(g);
        skv_model *m = skv_model_load(path, &err);
        if (!m) fprintf(stderr, "%s: %s\n", arch, err.msg);
        assert_non_null(m);
        const skv_hparams *hp = skv_model_hparams(m);
        assert_string_equal(hp->arch, arch);
        assert_int_equal(hp->head_dim, cases[i].a.head_dim ? cases[i].a.head_dim : 16);
        assert_int_equal(hp->qkv_bias, cases[i].a.qkv_bias);
        assert_int_equal(hp->qk_norm, cases[i].a.qk_norm);
        assert_int_equal(hp->rope_freq_factors, cases[i].a.rope_freqs);
        assert_int_equal(hp->rope_mode, cases[i].a.arch ? SKV_ROPE_NEOX : SKV_ROPE_ADJACENT);
        const int n = 20, V = hp->n_vocab;
        int32_t toks[20];
        for (int t = 0; t < n; t++) toks[t] = (int32_t)((t * 37 + 11) % V);
        float *got = malloc((size_t)n * V * sizeof(float));
        double *ref = malloc((size_t)n * V * sizeof(double));
        skv_context *ctx = skv_context_new(m, NULL, &err);
        assert_non_null(ctx);
        assert_int_equal(skv_forward(ctx, toks, n, SKV_LOGITS_ALL, got, &err), SKV_OK);
        ref_model *rm = ref_model_load(path);
        ref_forward(rm, toks, n, ref, NULL, NULL);
        double worst = 0, spread = 0;
        for (size_t k = 0; k < (size_t)n * V; k++) {
            worst = fmax(worst, fabs(got[k] - ref[k]));
            spread = fmax(spread, fabs(ref[k]));
        }
        assert_true(spread > 0.1); /* the model computes something */
        assert_true(worst < 1e-4);
        ref_model_free(rm);
        skv_context_free(ctx);
        skv_model_free(m);
        free(got);
        free(ref);
        unlink(path);
        free(path);
    }
    /* a shape whose options the architecture does not have is refused */
    skv_synth_arch bad = {.arch = "qwen2"}; /* no biases */
    skv_synth_params p = {SKV_TYPE_F32, 5, 0, 1};
    skv_err err = {0};
    assert_int_equal(skv_synth_write_ex(&s, &bad, &p, NULL, test_tmp_path(".gguf"), &err),
                     SKV_ERR_INVALID_ARG);
    /* the preset table says what each family is */
    assert_string_equal(skv_synth_arch_of(skv_synth_preset("qwen3-0.6b"))->arch, "qwen3");
    assert_int_equal(skv_synth_arch_of(skv_synth_preset("qwen3-0.6b"))->head_dim, 128);
    assert_true(skv_synth_arch_of(skv_synth_preset("llama-3.2-1b"))->rope_freqs);
    assert_true(skv_synth_arch_of(skv_synth_preset("phi-3-mini"))->fused);
    /* LongRoPE presets: the Phi-4-mini one turns 96 of its 128 dimensions */
    assert_true(skv_synth_arch_of(skv_synth_preset("phi-3.5-mini"))->longrope);
    assert_int_equal(skv_synth_arch_of(skv_synth_preset("phi-4-mini"))->n_rot, 96);
    assert_true(skv_synth_arch_of(skv_synth_preset("qwen2.5-0.5b"))->qkv_bias);
    assert_null(skv_synth_arch_of(&s)->arch);
}

/* Llama 3.1+ frequency factors: 1 for short wavelengths, 32 for long ones, in between a smooth
 * band (values from the published rule, worked by hand for theta 500000 and head_dim 64). */
static void test_llama3_rope_freqs(void **state) {
    (void)state;
    float f[32];
    skv_synth_llama3_rope_freqs(f, 64, 500000.0f);
    assert_true(f[0] == 1.0f);   /* wavelength 2 pi */
    assert_true(f[31] == 32.0f); /* wavelength 2 pi 500000^(62/64) >> 8192 */
    for (int i = 1; i < 32; i++) assert_true(f[i] >= f[i - 1]);
    /* i = 13: wavelength 2 pi 500000^(26/64) = 1298.3 < 2048: unchanged */
    assert_true(f[13] == 1.0f);
    /* i = 16: wavelength 2 pi 500000^(1/2) = 4442.9; smooth = (8192/4442.9 - 1) / 3 = 0.28128;
     * factor = 1 / ((1 - 0.28128) / 32 + 0.28128) = 3.2923 */
    assert_float_equal(f[16], 3.2923, 2e-4);
}

/* --vocab: a real tokenizer in a synthetic model, so text goes in and comes out. */
static void test_real_vocab(void **state) {
    (void)state;
    const skv_synth_shape s = {"vocab-small", "test", 300, 64, 64, 64, 1, 4, 2, 64,
                               1e6f,          1e-6f,  true};
    skv_synth_arch a = {.arch = "qwen2", .qkv_bias = true};
    char vocab[4096], phi3[4096]; /* fixtures first: a skip must not leak */
    snprintf(vocab, sizeof vocab, "%s", test_model_path("vocab/ggml-vocab-qwen2.gguf"));
    snprintf(phi3, sizeof phi3, "%s", test_model_path("archs/phi3-tiny.gguf"));
    char *path = strdup(test_tmp_path(".gguf"));
    skv_synth_params p = {SKV_TYPE_Q8_0, 5, 0, 2};
    skv_err err = {0};
    assert_int_equal(skv_synth_write_ex(&s, &a, &p, vocab, path, &err), SKV_OK);
    skv_model *m = skv_model_load(path, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(m);
    assert_int_equal(skv_model_hparams(m)->n_vocab, 151936);
    const skv_vocab *v = skv_model_vocab(m);
    const char *text = "Hello world, 42 apples!";
    int32_t toks[64];
    int n = skv_tokenize(v, text, strlen(text), false, toks, 64);
    assert_true(n > 1 && n < 20);
    char buf[128];
    int nb = skv_detokenize(v, toks, n, false, buf, sizeof buf);
    assert_int_equal(nb, (int)strlen(text));
    assert_memory_equal(buf, text, strlen(text));
    skv_model_free(m);
    unlink(path);
    /* the CLI takes --vocab; a file without tokens is refused with exit 2 */
    char cmd[10000];
    int st;
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type q8_0 --vocab %s -o %s 2>&1",
             test_cli(), phi3, path);
    free(test_run(cmd, &st));
    assert_int_equal(st, 0); /* phi3-tiny holds a tokenizer: 1004 tokens */
    m = skv_model_load(path, &err);
    assert_non_null(m);
    assert_int_equal(skv_model_hparams(m)->n_vocab, 1004);
    skv_model_free(m);
    unlink(path);
    /* the parameters it reports are the file's: the embedding (and output) of the vocabulary
     * taken, 151936 rows of Qwen2's, not the preset's 512 */
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type q8_0 --vocab %s -o %s",
             test_cli(), vocab, path);
    char *said = test_run(cmd, &st);
    assert_int_equal(st, 0);
    skv_synth_shape tiny = *skv_synth_preset("tiny");
    tiny.n_vocab = 151936;
    char want[64];
    snprintf(want, sizeof want, ", %.1f M params,", (double)skv_synth_n_params(&tiny) / 1e6);
    if (!strstr(said, want)) fail_msg("'%s' not in: %s", want, said);
    free(said);
    unlink(path);
    const char *notok = test_tmp_path(".json"); /* a file that is not a GGUF */
    FILE *nf = fopen(notok, "w");
    assert_non_null(nf);
    fputs("{\"tokens\": [1, 2, 3]}\n", nf);
    fclose(nf);
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type q8_0 --vocab %s -o %s 2>&1",
             test_cli(), notok, path);
    char *out = test_run(cmd, &st);
    assert_int_equal(st, 2);
    free(out);
    assert_true(access(path, F_OK) != 0);
    free(path);
}

/* general.file_type for a file of one weight type: llama.cpp's llama_ftype numbers (ALL_F32 0,
 * MOSTLY_F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q2_K 10, Q3_K_S 11, Q4_K_S 14, Q5_K_S 16,
 * Q6_K 18, IQ4_NL 25, IQ4_XS 30, BF16 32),
 * which it shows as the file's type. */
static void test_ftype_numbers(void **state) {
    (void)state;
    const struct {
        skv_type t;
        uint32_t ftype;
    } want[] = {{SKV_TYPE_F32, 0},     {SKV_TYPE_F16, 1},     {SKV_TYPE_Q4_0, 2},
                {SKV_TYPE_Q4_1, 3},    {SKV_TYPE_Q8_0, 7},    {SKV_TYPE_Q5_0, 8},
                {SKV_TYPE_Q5_1, 9},    {SKV_TYPE_Q4_K, 14},   {SKV_TYPE_Q5_K, 16},
                {SKV_TYPE_Q6_K, 18},   {SKV_TYPE_BF16, 32},   {SKV_TYPE_Q3_K, 11},
                {SKV_TYPE_IQ4_NL, 25}, {SKV_TYPE_IQ4_XS, 30}, {SKV_TYPE_Q2_K, 10}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_int_equal(skv_ftype_of(want[i].t), want[i].ftype);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ftype_numbers),
        cmocka_unit_test(test_small_shape_f32),
        cmocka_unit_test(test_real_preset),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_types_share_weights),
        cmocka_unit_test(test_loads_and_runs),
        cmocka_unit_test(test_kquant_fallback_and_errors),
        cmocka_unit_test(test_command_line),
        cmocka_unit_test(test_architectures),
        cmocka_unit_test(test_llama3_rope_freqs),
        cmocka_unit_test(test_real_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
