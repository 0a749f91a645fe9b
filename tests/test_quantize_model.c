/* test_quantize_model.c — model rewriting: each weight type against the F32 model's logits
 * (KL divergence and top-1 agreement), metadata and structure preserved, fallbacks, errors. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sparsekv.h"
#include "support.h"
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_POS 200

static const char *stories(void) {
    return test_model_path("stories260K/stories260K.gguf");
}

/* The first n token ids of reference_logits.json. */
static int32_t *ref_tokens(int n) {
    char *js = test_read_file(test_model_path("stories260K/reference_logits.json"), NULL);
    assert_non_null(js);
    char *p = strstr(js, "\"tokens\"");
    assert_non_null(p);
    p = strchr(p, '[');
    assert_non_null(p);
    p++;
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        assert_true(end != p);
        t[i] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    }
    free(js);
    return t;
}

/* Logits [n, n_vocab] of every position of tokens under the model at path (loaded as
 * skv_model_load does, or unpacked: matrices left in the mapping). */
static float *logits_as(const char *path, bool unpacked, const int32_t *tokens, int n,
                        int *n_vocab) {
    skv_err err = {0};
    skv_model *m = unpacked ? skv_model_load_unpacked(path, &err) : skv_model_load(path, &err);
    if (!m) fprintf(stderr, "%s: %s\n", path, err.msg);
    assert_non_null(m);
    *n_vocab = skv_model_hparams(m)->n_vocab;
    skv_context *ctx = test_context(m, SKV_TYPE_F32, n, 2, 0);
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)*n_vocab);
    assert_non_null(lg);
    test_feed(ctx, tokens, n, SKV_LOGITS_ALL, lg);
    skv_context_free(ctx);
    skv_model_free(m);
    return lg;
}

static float *logits_of(const char *path, const int32_t *tokens, int n, int *n_vocab) {
    return logits_as(path, false, tokens, n, n_vocab);
}

typedef struct cmp {
    double kl_mean, kl_max; /* KL(p_f32 || p_q) in nats, per position */
    double top1;            /* fraction of positions with the same argmax */
    double top1_decisive;   /* the same over positions whose F32 top-2 margin is >= 0.1 */
    int n_decisive;
    double max_abs; /* max |logit difference| */
} cmp;

#define DECISIVE_MARGIN 0.1

/* Float64 log-softmax KL of each row. */
static cmp compare(const float *ref, const float *q, int n, int nv) {
    cmp c = {0, 0, 0, 0, 0, 0};
    int agree_decisive = 0;
    for (int r = 0; r < n; r++) {
        const float *a = ref + (size_t)r * nv, *b = q + (size_t)r * nv;
        int top = test_argmaxf(a, nv);
        double second = -INFINITY;
        for (int i = 0; i < nv; i++)
            if (i != top) second = fmax(second, a[i]);
        if (a[top] - second >= DECISIVE_MARGIN) {
            c.n_decisive++;
            agree_decisive += test_argmaxf(b, nv) == top;
        }
        double ma = a[test_argmaxf(a, nv)], mb = b[test_argmaxf(b, nv)], za = 0, zb = 0;
        for (int i = 0; i < nv; i++) {
            za += exp(a[i] - ma);
            zb += exp(b[i] - mb);
            c.max_abs = fmax(c.max_abs, fabs((double)a[i] - b[i]));
        }
        double kl = 0;
        for (int i = 0; i < nv; i++) {
            double la = a[i] - ma - log(za), lb = b[i] - mb - log(zb);
            kl += exp(la) * (la - lb);
        }
        c.kl_mean += kl / n;
        c.kl_max = fmax(c.kl_max, kl);
        c.top1 += (test_argmaxf(a, nv) == test_argmaxf(b, nv)) / (double)n;
    }
    c.top1_decisive = c.n_decisive ? (double)agree_decisive / c.n_decisive : 1;
    return c;
}

static char *quantize_to(const char *in, skv_type t, int threads, skv_quantize_report *rep) {
    char *out = strdup(test_tmp_path(".gguf"));
    skv_err err = {0};
    skv_status st = skv_quantize_model_ex(in, out, t, threads, rep, &err);
    if (st != SKV_OK) fprintf(stderr, "quantize: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    return out;
}

/* The same with the simple K-quant scales (--simple): for the tests of where weights live, which
 * need valid files, not the best ones (the search is most of this test's time under ASan). */
static char *quantize_simple_to(const char *in, skv_type t, int threads) {
    char *out = strdup(test_tmp_path(".gguf"));
    skv_err err = {0};
    const skv_quantize_opts o = {.type = t, .simple = true, .n_threads = threads};
    skv_status st = skv_quantize_model_opts(in, out, &o, NULL, &err);
    if (st != SKV_OK) fprintf(stderr, "quantize: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    return out;
}

/* stories260K (a real trained model) in every type, over 200 positions of the reference
 * sequence. Every matrix has 64-value rows except ffn_down (172): those stay F16 for the block
 * types, and no matrix has whole 256-value super-blocks, so the K-quants fall back (the 64-wide
 * rows to the 32-block type above: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0; ffn_down to F16):
 * their files must be exactly that type's file's weights (tested as identical logits).
 * Bounds: F16/BF16/Q8_0 change each weight by at most 2^-11 / 2^-8 / 1/254 of its block's max.
 * F16 keeps top-1 >= 98% over all 200 positions (measured 100%). BF16 and Q8_0 move logits of
 * ~13 by up to ~0.05-0.4, and this sampled sequence has 12 positions where the F32 model's top
 * two logits are within 0.1 of each other (near-ties: any 8-bit format flips some; Q8_0 flips 6,
 * all with margins < 0.07: 97.0%; BF16 98.0%), so for them the 98% bar is applied to the
 * decisive positions (top-2 margin >= 0.1 logit, 188 of 200) and all positions must still agree
 * >= 95%; mean KL < 1e-3 nats (measured 6.7e-4 Q8_0, 4.9e-5 BF16, 6.4e-7 F16).
 * Q4_0 has 16 levels per block (rms error ~8.5% of a Gaussian weight's scale), which on a model
 * this small (dim 64, tied 512-token output) moves logits visibly: measured mean KL 0.10 nats,
 * top-1 85.5%. We require KL < 0.25, top-1 >= 80%, and KL > 10x Q8_0's (a broken Q4_0 - wrong
 * nibble order or scale - gives KL well above 1). Q5_0 / Q5_1 (32 levels) lie between: measured
 * KL 0.024 / 0.020, top-1 93.0% / 94.5%; required: above Q8_0's KL, below half Q4_0's, top-1
 * >= 90%. */
static void test_types_on_stories260k(void **state) {
    (void)state;
    int32_t *tok = ref_tokens(N_POS);
    int nv;
    float *base = logits_of(stories(), tok, N_POS, &nv);
    const skv_type types[] = {SKV_TYPE_F32,  SKV_TYPE_F16,  SKV_TYPE_BF16, SKV_TYPE_Q8_0,
                              SKV_TYPE_Q4_0, SKV_TYPE_Q5_0, SKV_TYPE_Q5_1, SKV_TYPE_Q4_K,
                              SKV_TYPE_Q5_K, SKV_TYPE_Q6_K};
    float *keep[SKV_TYPE_COUNT] = {0}; /* the logits of each K-quant's fallback type */
    double kl_q8 = 1, kl_q4 = 0;
    printf("stories260K, %d positions, vs the F32 model:\n", N_POS);
    printf("| type | fallback | mean KL | max KL | top-1 | top-1 decisive | max |dlogit| |\n");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        skv_quantize_report rep;
        char *path = quantize_to(stories(), types[k], 2, &rep);
        int nv2;
        float *lg = logits_of(path, tok, N_POS, &nv2);
        assert_int_equal(nv2, nv);
        cmp c = compare(base, lg, N_POS, nv);
        printf("| %s | %d | %.3g | %.3g | %.1f%% | %.1f%% of %d | %.3g |\n",
               skv_type_name(types[k]), rep.n_fallback, c.kl_mean, c.kl_max, 100 * c.top1,
               100 * c.top1_decisive, c.n_decisive, c.max_abs);
        assert_int_equal(rep.n_tensors, 47);
        switch (types[k]) {
        case SKV_TYPE_F32: /* nothing to convert: the same weights, the same logits */
            assert_int_equal(rep.n_converted, 0);
            assert_int_equal(rep.n_fallback, 0);
            assert_true(c.max_abs == 0);
            break;
        case SKV_TYPE_F16:
        case SKV_TYPE_BF16:
        case SKV_TYPE_Q8_0:
            if (types[k] == SKV_TYPE_F16) assert_true(c.top1 >= 0.98);
            assert_true(c.top1 >= 0.95);
            assert_true(c.n_decisive >= 180);
            assert_true(c.top1_decisive >= 0.98);
            assert_true(c.kl_mean < 1e-3);
            assert_true(c.max_abs > 0); /* something did change */
            if (types[k] == SKV_TYPE_F16) assert_int_equal(rep.n_converted, 36);
            if (types[k] == SKV_TYPE_Q8_0) {
                kl_q8 = c.kl_mean;
                assert_int_equal(rep.n_converted, 31);
                assert_int_equal(rep.n_fallback, 5); /* the five ffn_down */
                assert_int_equal(rep.n_fallback_by_type[SKV_TYPE_F16], 5);
                assert_non_null(strstr(rep.fallback_names, "blk.4.ffn_down.weight"));
                assert_null(strstr(rep.fallback_names, "attn"));
            }
            break;
        case SKV_TYPE_Q4_0:
            assert_true(c.top1 >= 0.80);
            assert_true(c.kl_mean < 0.25);
            assert_true(c.kl_mean > 10 * kl_q8); /* 4 bits lose clearly more than 8 */
            kl_q4 = c.kl_mean;
            break;
        case SKV_TYPE_Q5_0:
        case SKV_TYPE_Q5_1: /* 32 levels a block: between Q8_0's loss and Q4_0's */
            assert_true(c.kl_mean > kl_q8);
            assert_true(c.kl_mean < kl_q4 / 2);
            assert_true(c.top1 >= 0.90);
            break;
        default: { /* K-quants: everything fell back, as for their 32-block type */
            const skv_type fb = types[k] == SKV_TYPE_Q4_K   ? SKV_TYPE_Q5_0
                                : types[k] == SKV_TYPE_Q5_K ? SKV_TYPE_Q5_1
                                                            : SKV_TYPE_Q8_0;
            assert_int_equal(rep.n_fallback, 36);
            assert_int_equal(rep.n_fallback_by_type[fb], 31);
            assert_int_equal(rep.n_fallback_by_type[SKV_TYPE_F16], 5);
            assert_int_equal(rep.n_by_type[fb], 31);
            assert_int_equal(rep.n_converted, 0);
            assert_non_null(keep[fb]);
            assert_memory_equal(lg, keep[fb], sizeof(float) * N_POS * (size_t)nv);
            break;
        }
        }
        if (types[k] == SKV_TYPE_Q8_0 || types[k] == SKV_TYPE_Q5_0 || types[k] == SKV_TYPE_Q5_1) {
            keep[types[k]] = lg;
            lg = NULL;
        }
        free(lg);
        unlink(path);
        free(path);
    }
    for (int t = 0; t < SKV_TYPE_COUNT; t++) free(keep[t]);
    free(base);
    free(tok);
}

/* A random F32 model of dim 256 (4 / 2 heads, tied output) with n_vocab tokens and n_layer
 * layers of n_ff, written to a temporary file (the caller frees the path). */
static char *synth_f32(int n_vocab, int n_layer, int n_ff, uint64_t seed) {
    const skv_synth_shape shape = {"wide", "test", n_vocab, 64,       64,    256, n_layer,
                                   4,      2,      n_ff,    10000.0f, 1e-5f, true};
    char *path = strdup(test_tmp_path(".gguf"));
    skv_synth_params sp = {SKV_TYPE_F32, seed, 0, 2};
    assert_int_equal(skv_synth_write(&shape, &sp, path, NULL), SKV_OK);
    return path;
}

/* Weights of 2 MB and more are copied into 2 MB-aligned memory with huge pages advised (float
 * panels, and the raw rows of quantized matrices, which then leave the file mapping): the
 * logits must be the same bits as with SKV_NO_HUGE (panels in malloc'd memory, quantized rows
 * read from the mapping) and as unpacked (skv_model_load_unpacked: raw rows), and the copy must
 * really be what the model reads. One layer with n_ff 8192: ffn_gate/up/down hold 2M weights
 * (Q8_0 2.1 MB, Q4_K 1.1 MB: ffn_down in K-quants stays mapped, the path below 2 MB, except
 * at the SIMD levels, where Q4_K and Q8_0 (and Q4_0) matrices become k16 records (Q6_K where its
 * kernels are the AVX2 ones: Q6_K 1.7 MB); gate and up are fused into one new block at load, 4.2
 * / 2.2 MB, except quantized ones with SKV_NO_HUGE); the tied 8192 x 256 embedding in Q8_0 (2.2 MB)
 * is copied as the output matrix (or made records), and the embedding rows are then read from that
 * copy (or from the file). */
static void test_huge_page_weights(void **state) {
    (void)state;
    char *f32 = synth_f32(8192, 1, 8192, 5);
    int32_t tok[16];
    for (int i = 0; i < 16; i++) tok[i] = 3 + 509 * i; /* rows all over the embedding */
    const skv_type types[] = {SKV_TYPE_F32,  SKV_TYPE_Q8_0, SKV_TYPE_Q4_K, SKV_TYPE_Q6_K,
                              SKV_TYPE_Q4_0, SKV_TYPE_Q5_0, SKV_TYPE_Q3_K, SKV_TYPE_Q5_K};
    for (size_t k = 0; k < 8; k++) {
        char *path = k == 0 ? strdup(f32) : quantize_simple_to(f32, types[k], 2);
        for (int huge = 1; huge >= 0; huge--) {
            if (huge)
                unsetenv("SKV_NO_HUGE");
            else
                setenv("SKV_NO_HUGE", "1", 1);
            skv_err err = {0};
            skv_model *m = skv_model_load(path, &err);
            assert_non_null(m);
            const skv_weight *down = &m->layers[0].w_down;
            /* Q4_K, Q5_K, Q8_0, Q4_*, Q5_* at the SIMD levels, Q6_K without VNNI: k16 records
             * (skv_k16_wanted); Q3_K records at the SIMD levels whatever SKV_NO_HUGE says (the
             * kernels read Q3_K from records only), else a copy of its Q6_K rows */
            const bool q3rec = types[k] == SKV_TYPE_Q3_K && skv_k16_wanted(SKV_TYPE_Q3_K);
            const skv_type held = q3rec ? SKV_TYPE_Q3_K : skv_type_held(types[k]);
            const bool k16 = q3rec || (skv_k16_wanted(held) && huge);
            const bool big_q = (types[k] == SKV_TYPE_Q8_0 && huge) || held != types[k];
            assert_int_equal(down->type, held);
            assert_int_equal(m->output.type, held);
            assert_int_equal(down->copy != NULL, big_q && !k16);
            if (down->copy) assert_ptr_equal(down->data, down->copy);
            assert_int_equal(m->output.copy != NULL, big_q && !k16);
            if (m->output.copy) {
                assert_ptr_equal(m->tok_embd.data, m->output.copy);
                assert_int_equal(m->tok_embd.type, held);
            }
            assert_int_equal(down->panels != NULL, types[k] == SKV_TYPE_F32);
            if (down->panels) /* malloc's large blocks sit 16 bytes into a page */
                assert_int_equal((uintptr_t)down->panels % ((uintptr_t)2 << 20) == 0, huge);
            /* gate and up fused at load into [gate | up] rows (q, k, v likewise): a new block,
             * panels, k16 records or a copy of the rows, 2 MB-aligned with huge pages; with
             * SKV_NO_HUGE quantized matrices stay in the mapping, unfused, as rows */
            const bool fused = types[k] == SKV_TYPE_F32 || huge || q3rec;
            const skv_weight *gu = &m->layers[0].w_up;
            assert_int_equal(skv_weight_present(&m->layers[0].w_gate), !fused);
            assert_int_equal(skv_weight_present(&m->layers[0].wqkv), fused);
            assert_int_equal(skv_weight_present(&m->layers[0].wq), !fused);
            assert_int_equal(gu->rows, (fused ? 2 : 1) * 8192);
            assert_int_equal(down->k16 != NULL, k16);
            assert_int_equal(gu->k16 != NULL, k16);
            if (fused) {
                const void *blk = gu->panels ? gu->panels : gu->k16 ? gu->k16 : gu->copy;
                assert_non_null(blk);
                if (gu->copy) assert_ptr_equal(gu->data, gu->copy);
                /* (Q3_K's [gate | up] records are 1.9 MB: plain memory) */
                assert_int_equal((uintptr_t)blk % ((uintptr_t)2 << 20) == 0, huge && !q3rec);
            } else if (held != types[k]) {
                assert_non_null(gu->copy); /* rewritten rows, each matrix on its own */
            } else if (types[k] != SKV_TYPE_F32) {
                assert_null(gu->copy); /* the mapped rows */
                assert_non_null(gu->data);
            }
            skv_model_free(m);
        }
        unsetenv("SKV_NO_HUGE");
        int nv;
        float *a = logits_of(path, tok, 16, &nv);
        setenv("SKV_NO_HUGE", "1", 1);
        float *b = logits_of(path, tok, 16, &nv);
        unsetenv("SKV_NO_HUGE");
        assert_memory_equal(a, b, sizeof(float) * 16 * (size_t)nv);
        /* matrices left in the mapping (skv_model_load_unpacked, for `info`): the raw-row paths */
        float *c = logits_as(path, true, tok, 16, &nv);
        assert_memory_equal(a, c, sizeof(float) * 16 * (size_t)nv);
        free(c);
        free(a);
        free(b);
        if (k) unlink(path);
        free(path);
    }
    unlink(f32);
    free(f32);
}

/* Logits [n, n_vocab] of a loaded model. */
static float *logits_with(const skv_model *m, const int32_t *tokens, int n) {
    const int nv = skv_model_hparams(m)->n_vocab;
    skv_context *ctx = test_context(m, SKV_TYPE_F32, n, 2, 0);
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)nv);
    assert_non_null(lg);
    test_feed(ctx, tokens, n, SKV_LOGITS_ALL, lg);
    skv_context_free(ctx);
    return lg;
}

/* Q3_K, which the kernels read from k16 records only. A level without them (skv_kernels_force_ref
 * at load) holds each Q3_K matrix as the Q6_K rows of the same values (model.c's rewrite_rows; the
 * tied embedding is then read from the output's copy, as Q6_K): computed at the SIMD level, those
 * rows must give the same bits as the records (test_k16: records = Q6_K rows), loaded packed, with
 * SKV_NO_HUGE and unpacked. weight_bytes counts the rows held: the file's Q3_K bytes for records,
 * Q6_K's (210 for 110) for rewritten rows. A metadata-only load copies nothing and cannot be run.
 */
static void test_q3_k_load_paths(void **state) {
    (void)state;
    if (!skv_k16_wanted(SKV_TYPE_Q3_K)) skip(); /* no SIMD level: nothing to compare with */
    char *f32 = synth_f32(512, 2, 512, 13);
    skv_quantize_report rep;
    char *q3 = quantize_to(f32, SKV_TYPE_Q3_K, 2, &rep);
    assert_int_equal(rep.n_fallback, 0);
    int32_t tok[24];
    for (int i = 0; i < 24; i++) tok[i] = 3 + 41 * i % 500;
    skv_err err = {0};
    skv_model *m = skv_model_load_meta(q3, &err);
    assert_non_null(m);
    const uint64_t stored = skv_model_weight_bytes(m), norms = 256 * 4 * (1 + 2 * 2);
    assert_null(skv_context_new(m, NULL, &err));
    assert_non_null(strstr(err.msg, "metadata only"));
    skv_model_free(m);
    m = skv_model_load(q3, &err); /* records */
    assert_non_null(m);
    assert_int_equal(m->layers[0].w_down.type, SKV_TYPE_Q3_K);
    assert_non_null(m->layers[0].w_down.k16);
    assert_true(skv_model_weight_bytes(m) == stored);
    float *a = logits_with(m, tok, 24);
    const int nv = skv_model_hparams(m)->n_vocab;
    skv_model_free(m);
    for (int mode = 0; mode < 3; mode++) { /* packed, SKV_NO_HUGE, unpacked */
        if (mode == 1) setenv("SKV_NO_HUGE", "1", 1);
        skv_kernels_force_ref(true);
        m = mode == 2 ? skv_model_load_unpacked(q3, &err) : skv_model_load(q3, &err);
        skv_kernels_force_ref(false);
        unsetenv("SKV_NO_HUGE");
        assert_non_null(m);
        const skv_layer_weights *L = &m->layers[0];
        const skv_weight *w[] = {skv_weight_present(&L->wqkv) ? &L->wqkv : &L->wq, &L->w_down,
                                 &L->w_up, &m->output, &m->tok_embd};
        for (int k = 0; k < 5; k++) {
            assert_int_equal(w[k]->type, SKV_TYPE_Q6_K);
            assert_null(w[k]->k16);
            assert_non_null(w[k]->data);
        }
        assert_ptr_equal(m->tok_embd.data, m->output.copy);
        assert_true(skv_model_weight_bytes(m) == norms + (stored - norms) / 110 * 210);
        float *b = logits_with(m, tok, 24);
        if (memcmp(a, b, sizeof(float) * 24 * (size_t)nv) != 0)
            fail_msg("Q6_K rows loaded in mode %d: other bits than the Q3_K records", mode);
        free(b);
        skv_model_free(m);
    }
    free(a);
    unlink(q3);
    unlink(f32);
    free(q3);
    free(f32);
}

/* IQ4_XS and Q2_K, which the SIMD code reads from records only: a loaded model holds their
 * matrices in records at a SIMD level however it is loaded (packed, SKV_NO_HUGE, unpacked), and
 * the logits are the same bits each way; loaded at the scalar level it keeps the rows (136 / 84
 * bytes), computed by the scalar code, close to the records' logits. Rows of 288 fall back to
 * IQ4_NL / Q4_0 (as llama-quantize does), which load and run in records. */
static void records_only_load_paths(skv_type t) {
    const skv_type fb = t == SKV_TYPE_IQ4_XS ? SKV_TYPE_IQ4_NL : SKV_TYPE_Q4_0;
    if (!skv_k16_wanted(t)) skip(); /* no SIMD level: nothing to compare with */
    char *f32 = synth_f32(512, 2, 512, 17);
    skv_quantize_report rep;
    char *xs = quantize_to(f32, t, 2, &rep);
    assert_int_equal(rep.n_fallback, 0);
    int32_t tok[24];
    for (int i = 0; i < 24; i++) tok[i] = 3 + 43 * i % 500;
    skv_err err = {0};
    skv_model *m = skv_model_load_meta(xs, &err);
    assert_non_null(m);
    const uint64_t stored = skv_model_weight_bytes(m);
    skv_model_free(m);
    float *a = NULL;
    int nv = 0;
    for (int mode = 0; mode < 3; mode++) { /* packed, SKV_NO_HUGE, unpacked */
        if (mode == 1) setenv("SKV_NO_HUGE", "1", 1);
        m = mode == 2 ? skv_model_load_unpacked(xs, &err) : skv_model_load(xs, &err);
        unsetenv("SKV_NO_HUGE");
        assert_non_null(m);
        const skv_layer_weights *L = &m->layers[0];
        const skv_weight *w[] = {skv_weight_present(&L->wqkv) ? &L->wqkv : &L->wq, &L->w_down,
                                 skv_weight_present(&L->w_up) ? &L->w_up : &L->w_gate, &m->output};
        for (int k = 0; k < 4; k++) {
            assert_int_equal(w[k]->type, t);
            assert_non_null(w[k]->k16);
        }
        assert_true(skv_model_weight_bytes(m) == stored); /* the bytes a token reads, as stored */
        float *b = logits_with(m, tok, 24);
        nv = skv_model_hparams(m)->n_vocab;
        if (!a)
            a = b;
        else if (memcmp(a, b, sizeof(float) * 24 * (size_t)nv) != 0)
            fail_msg("%s records loaded in mode %d: other bits than packed", skv_type_name(t),
                     mode);
        if (b != a) free(b);
        skv_model_free(m);
    }
    skv_kernels_force_ref(true);
    m = skv_model_load(xs, &err);
    assert_non_null(m);
    assert_null(m->layers[0].w_down.k16);
    assert_int_equal(m->layers[0].w_down.type, t);
    assert_true(skv_model_weight_bytes(m) == stored);
    float *b = logits_with(m, tok, 24);
    skv_kernels_force_ref(false);
    cmp c = compare(a, b, 24, nv);
    /* measured 1.1e-4 (IQ4_XS), 2.6e-14 (Q2_K): float steps that differ flip some activations'
     * 8-bit rounding, which a random model amplifies (scalar vs SIMD levels of any type: 1e-4 to
     * 7e-4 on stories110m shapes); a misread block gives KL of order 1 (test_matmul checks the
     * products exactly) */
    if (getenv("SKV_TEST_VERBOSE"))
        printf("# %s scalar vs SIMD max KL %.3g\n", skv_type_name(t), c.kl_max);
    if (!(c.kl_max < 2e-3))
        fail_msg("%s scalar rows vs SIMD records: max KL %.3g", skv_type_name(t), c.kl_max);
    free(b);
    skv_model_free(m);
    free(a);
    unlink(xs);
    free(xs);
    unlink(f32);
    free(f32);
    /* rows of 288: the fallback type, in records */
    const skv_synth_shape shape = {"s15-like", "test", 512, 64,       64,    288, 2,
                                   6,          6,      768, 10000.0f, 1e-5f, true};
    char *in = strdup(test_tmp_path(".gguf"));
    skv_synth_params sp = {SKV_TYPE_F32, 3, 0, 2};
    assert_int_equal(skv_synth_write(&shape, &sp, in, NULL), SKV_OK);
    char *out = quantize_to(in, t, 2, &rep);
    assert_int_equal(rep.n_fallback, 1 + 6 * 2); /* token_embd, and 6 per layer */
    assert_int_equal(rep.n_fallback_by_type[fb], rep.n_fallback);
    assert_int_equal(rep.n_by_type[t], 2); /* the ffn_down of 768 */
    m = skv_model_load(out, &err);
    assert_non_null(m);
    assert_int_equal(m->layers[1].w_down.type, t);
    assert_non_null(m->layers[1].w_down.k16);
    assert_int_equal(m->output.type, fb);
    float *lg = logits_with(m, tok, 24);
    for (size_t i = 0; i < 24 * (size_t)skv_model_hparams(m)->n_vocab; i++)
        assert_true(isfinite(lg[i]));
    free(lg);
    skv_model_free(m);
    unlink(out);
    unlink(in);
    free(out);
    free(in);
}

static void test_iq4_xs_load_paths(void **state) {
    (void)state;
    records_only_load_paths(SKV_TYPE_IQ4_XS);
}

static void test_q2_k_load_paths(void **state) {
    (void)state;
    records_only_load_paths(SKV_TYPE_Q2_K);
}

/* A Q4_K_M file fuses q/k/v only in the layers whose attn_v stays Q4_K (the mix gives some
 * layers a Q6_K attn_v), gate/up in every layer: the context's buffers must cover the mix, and
 * prefill logits, and decode logits token by token, must be the same bits as from the
 * unpacked, unfused load. */
static void test_partial_fusion(void **state) {
    (void)state;
    char *f32 = synth_f32(512, 8, 512, 9), *out = strdup(test_tmp_path(".gguf"));
    skv_quantize_opts o = {.mix = SKV_QMIX_Q4_K_M, .n_threads = 2};
    skv_quantize_report rep;
    skv_err err = {0};
    assert_int_equal(skv_quantize_model_opts(f32, out, &o, &rep, &err), SKV_OK);
    skv_model *m = skv_model_load(out, &err);
    assert_non_null(m);
    int n_fused = 0;
    for (int l = 0; l < 8; l++) {
        const skv_layer_weights *L = &m->layers[l];
        const bool fused = skv_weight_present(&L->wqkv);
        n_fused += fused;
        assert_int_equal(skv_weight_present(&L->wv), !fused);
        if (!fused) assert_int_equal(L->wv.type, SKV_TYPE_Q6_K);
        assert_false(skv_weight_present(&L->w_gate));
    }
    assert_true(n_fused > 0 && n_fused < 8);
    skv_model_free(m);
    int32_t tok[24];
    for (int i = 0; i < 24; i++) tok[i] = 1 + 37 * i % 500;
    int nv;
    float *a = logits_of(out, tok, 24, &nv), *b = logits_as(out, true, tok, 24, &nv);
    assert_memory_equal(a, b, sizeof(float) * 24 * (size_t)nv);
    /* decode, token by token (its own attention code): packed as unpacked */
    float *dec[2];
    for (int unpacked = 0; unpacked < 2; unpacked++) {
        m = unpacked ? skv_model_load_unpacked(out, &err) : skv_model_load(out, &err);
        assert_non_null(m);
        skv_context *ctx = test_context(m, SKV_TYPE_F32, 24, 2, 0);
        dec[unpacked] = malloc(sizeof(float) * 24 * (size_t)nv);
        for (int i = 0; i < 24; i++)
            test_feed(ctx, tok + i, 1, SKV_LOGITS_ALL, dec[unpacked] + (size_t)i * nv);
        skv_context_free(ctx);
        skv_model_free(m);
    }
    assert_memory_equal(dec[0], dec[1], sizeof(float) * 24 * (size_t)nv);
    free(dec[0]);
    free(dec[1]);
    free(a);
    free(b);
    unlink(out);
    unlink(f32);
    free(out);
    free(f32);
}

/* K-quants need rows of 256: a synthetic model wide enough for them. More bits, less damage:
 * KL(q8_0) < KL(q6_k) < KL(q5_k) < KL(q4_k) and KL(q8_0) < KL(q5_0) < KL(q4_0), all against the
 * F32 weights they came from. One bit fewer doubles the weight error and so roughly quadruples the
 * KL (measured: 3.6e-4, 3.3e-3, 1.2e-2, 5.4e-2; q4_0 5.0e-2, q5_0 1.4e-2; q3_k 0.16; iq4_nl
 * 4.5e-2 and iq4_xs 4.3e-2, below q4_0: KL(iq4_*) < KL(q4_0) too); a random
 * model is more sensitive than a trained one (flat logits, every layer at unit gain), so top-1
 * means little here. The bounds are ~3x the measured values: a wrong block layout gives KL of
 * order 1. */
static void test_kquants_on_wide_model(void **state) {
    (void)state;
    char *f32 = synth_f32(512, 2, 512, 11);
    int32_t tok[48];
    skv_rng rng;
    skv_rng_seed(&rng, 3);
    for (int i = 0; i < 48; i++) tok[i] = 3 + (int32_t)skv_rng_below(&rng, 509);
    int nv;
    float *base = logits_of(f32, tok, 48, &nv);
    const skv_type types[] = {SKV_TYPE_Q8_0, SKV_TYPE_Q6_K,   SKV_TYPE_Q5_K,  SKV_TYPE_Q4_K,
                              SKV_TYPE_Q4_0, SKV_TYPE_Q5_0,   SKV_TYPE_Q4_1,  SKV_TYPE_Q5_1,
                              SKV_TYPE_Q3_K, SKV_TYPE_IQ4_NL, SKV_TYPE_IQ4_XS};
    double kl[11];
    const double kl_bound[11] = {2e-3, 1e-2, 0.04, 0.15, 0.15, 0.04, 0.15, 0.04, 0.6, 0.15, 0.15};
    printf("synthetic dim-256 model, 48 positions, vs F32:\n");
    for (size_t k = 0; k < 11; k++) {
        skv_quantize_report rep;
        char *path = quantize_to(f32, types[k], 2, &rep);
        assert_int_equal(rep.n_fallback, 0);
        assert_int_equal(rep.n_converted, 1 + 7 * 2);
        int nv2;
        float *lg = logits_of(path, tok, 48, &nv2);
        cmp c = compare(base, lg, 48, nv);
        kl[k] = c.kl_mean;
        printf("  %-6s mean KL %.3g  max KL %.3g  top-1 %.1f%%\n", skv_type_name(types[k]),
               c.kl_mean, c.kl_max, 100 * c.top1);
        assert_true(c.kl_mean > 0);
        assert_true(c.kl_mean < kl_bound[k]);
        free(lg);
        unlink(path);
        free(path);
    }
    assert_true(kl[0] < kl[1]);  /* q8_0 < q6_k */
    assert_true(kl[0] < kl[4]);  /* q8_0 < q4_0 */
    assert_true(kl[1] < kl[2]);  /* q6_k < q5_k */
    assert_true(kl[2] < kl[3]);  /* q5_k < q4_k */
    assert_true(kl[0] < kl[5]);  /* q8_0 < q5_0 */
    assert_true(kl[5] < kl[4]);  /* q5_0 < q4_0 */
    assert_true(kl[0] < kl[7]);  /* q8_0 < q5_1 */
    assert_true(kl[7] < kl[6]);  /* q5_1 < q4_1 */
    assert_true(kl[3] < kl[8]);  /* q4_k < q3_k */
    assert_true(kl[9] < kl[4]);  /* iq4_nl < q4_0: the same bits, a grid fitted to the values */
    assert_true(kl[10] < kl[4]); /* iq4_xs < q4_0, in fewer bits */
    free(base);
    unlink(f32);
    free(f32);
}

/* Rows of 288 (stories15M's dim) are whole 32-blocks but no K-quant super-block: asked for
 * q4_k_m they fall back to the 32-block type above the one the mix asked (Q4_K -> Q5_0, Q6_K ->
 * Q8_0: token_embd as the tied output, and attn_v where the mix gives it more bits), never to
 * F16 (which made a Q8_0 model 1.8x larger). Read back: each tensor's type; a fallback matrix
 * stored in a type no larger (Q4_0 input; Q8_0 input where Q8_0 is the fallback) is copied byte
 * for byte, one stored in F32 or a larger type is the row quantizer's output from its values;
 * the 768-wide ffn_down take the mix's K-quants; a Q8_0 input comes out smaller, and the file
 * loads. */
static void test_kquant_fallback_32_blocks(void **state) {
    (void)state;
    const skv_synth_shape shape = {"s15-like", "test", 512, 64,       64,    288, 2,
                                   6,          6,      768, 10000.0f, 1e-5f, true};
    const skv_type in_types[] = {SKV_TYPE_Q8_0, SKV_TYPE_Q4_0, SKV_TYPE_F32};
    for (size_t k = 0; k < 3; k++) {
        char *in = strdup(test_tmp_path(".gguf")), *out = strdup(test_tmp_path(".gguf"));
        skv_synth_params sp = {in_types[k], 3, 0, 2};
        assert_int_equal(skv_synth_write(&shape, &sp, in, NULL), SKV_OK);
        skv_quantize_opts o = {.mix = SKV_QMIX_Q4_K_M, .n_threads = 2};
        skv_quantize_report rep;
        skv_err err = {0};
        assert_int_equal(skv_quantize_model_opts(in, out, &o, &rep, &err), SKV_OK);
        assert_int_equal(rep.n_fallback, 1 + 6 * 2); /* token_embd, and 6 per layer */
        assert_int_equal(rep.n_by_type[SKV_TYPE_F16], 0);
        assert_int_equal(rep.n_by_type[SKV_TYPE_Q4_K] + rep.n_by_type[SKV_TYPE_Q6_K], 2);
        if (in_types[k] != SKV_TYPE_Q4_0) assert_true(rep.bytes_out < rep.bytes_in);
        skv_gguf *a = skv_gguf_open(in, NULL), *b = skv_gguf_open(out, NULL);
        assert_non_null(a);
        assert_non_null(b);
        int n_fb[SKV_TYPE_COUNT] = {0}, n_q6 = 0;
        for (int64_t i = 0; i < skv_gguf_n_tensors(a); i++) {
            const skv_gguf_tensor *ta = skv_gguf_tensor_at(a, i), *tb = skv_gguf_tensor_at(b, i);
            assert_string_equal(ta->name, tb->name);
            if (ta->n_dims == 1) continue;
            if (ta->ne[0] == 768) { /* ffn_down: the mix's type */
                assert_true(tb->type == SKV_TYPE_Q4_K || tb->type == SKV_TYPE_Q6_K);
                continue;
            }
            assert_int_equal(ta->ne[0], 288);
            const skv_type asked = skv_quant_mix_type(SKV_QMIX_Q4_K_M, ta->name, 2, 1, false);
            assert_true(asked == SKV_TYPE_Q4_K || asked == SKV_TYPE_Q6_K);
            n_q6 += asked == SKV_TYPE_Q6_K;
            skv_type fb = asked == SKV_TYPE_Q4_K ? SKV_TYPE_Q5_0 : SKV_TYPE_Q8_0;
            if (skv_row_bytes(ta->type, 288) <= skv_row_bytes(fb, 288)) fb = ta->type;
            n_fb[fb]++;
            assert_int_equal(tb->type, fb);
            if (ta->type == fb) {
                assert_int_equal(ta->size, tb->size);
                assert_memory_equal(ta->data, tb->data, ta->size);
                continue;
            }
            size_t rb = skv_row_bytes(fb, 288);
            char *row = malloc(rb);
            float *x = malloc(288 * sizeof(float));
            for (int64_t r = 0; r < ta->ne[1]; r++) {
                const size_t ra = skv_row_bytes(ta->type, 288);
                skv_dequantize_row(ta->type, (const char *)ta->data + (size_t)r * ra, x, 288);
                skv_quantize_row(fb, x, row, 288);
                assert_memory_equal(row, (const char *)tb->data + r * (int64_t)rb, rb);
            }
            free(x);
            free(row);
        }
        assert_true(n_q6 >= 1 && n_q6 < rep.n_fallback); /* both rules were exercised */
        for (int t = 0; t < SKV_TYPE_COUNT; t++)
            assert_int_equal(rep.n_fallback_by_type[t], n_fb[t]);
        skv_gguf_close(a);
        skv_gguf_close(b);
        skv_model *m = skv_model_load(out, &err);
        assert_non_null(m);
        skv_model_free(m);
        unlink(in), unlink(out);
        free(in), free(out);
    }
}

/* Metadata copied, tensors in the same order with the same shapes, norms byte-identical, and
 * each Q8_0 block within half a quantization step of the original. */
static void test_structure_preserved(void **state) {
    (void)state;
    skv_quantize_report rep;
    char *path = quantize_to(stories(), SKV_TYPE_Q8_0, 1, &rep);
    skv_gguf *a = skv_gguf_open(stories(), NULL), *b = skv_gguf_open(path, NULL);
    assert_non_null(a);
    assert_non_null(b);
    for (int64_t i = 0; i < skv_gguf_n_kv(a); i++) {
        const char *key = skv_gguf_key(a, i);
        int64_t j = skv_gguf_find_key(b, key);
        assert_true(j >= 0);
        assert_int_equal(skv_gguf_kv_type(a, i), skv_gguf_kv_type(b, j));
        int64_t x, y;
        if (!strcmp(key, "general.file_type")) {
            assert_true(skv_gguf_kv_int(b, j, &y) && y == 7);
        } else if (skv_gguf_kv_type(a, i) == SKV_GGUF_STRING) {
            assert_string_equal(skv_gguf_kv_str(a, i, NULL), skv_gguf_kv_str(b, j, NULL));
        } else if (skv_gguf_kv_type(a, i) == SKV_GGUF_ARRAY) {
            assert_int_equal(skv_gguf_arr_len(a, i), skv_gguf_arr_len(b, j));
        } else if (skv_gguf_kv_int(a, i, &x)) {
            assert_true(skv_gguf_kv_int(b, j, &y) && x == y);
        }
    }
    assert_int_equal(skv_gguf_n_tensors(a), skv_gguf_n_tensors(b));
    for (int64_t i = 0; i < skv_gguf_n_tensors(a); i++) {
        const skv_gguf_tensor *ta = skv_gguf_tensor_at(a, i), *tb = skv_gguf_tensor_at(b, i);
        assert_string_equal(ta->name, tb->name);
        assert_int_equal(ta->n_dims, tb->n_dims);
        assert_memory_equal(ta->ne, tb->ne, sizeof ta->ne);
        if (ta->n_dims == 1) {
            assert_int_equal(tb->type, SKV_TYPE_F32);
            assert_memory_equal(ta->data, tb->data, ta->size);
            continue;
        }
        int64_t cols = ta->ne[0], rows = ta->ne[1];
        assert_int_equal(tb->type, cols % 32 ? SKV_TYPE_F16 : SKV_TYPE_Q8_0);
        float *deq = malloc(sizeof(float) * (size_t)cols);
        size_t rb = skv_row_bytes(tb->type, cols);
        for (int64_t r = 0; r < rows; r++) {
            const float *orig = (const float *)ta->data + r * cols;
            skv_dequantize_row(tb->type, (const char *)tb->data + r * (int64_t)rb, deq, cols);
            for (int64_t b0 = 0; b0 < cols; b0 += 32) {
                int64_t n = SKV_MIN(32, cols - b0);
                double amax = 0;
                for (int64_t i2 = 0; i2 < n; i2++) amax = fmax(amax, fabs(orig[b0 + i2]));
                /* q8_0: half a step of amax/127, plus the f16 rounding of the scale (127 * 2^-12 of
                 * a step at most); f16: relative 2^-11 */
                double tol =
                    tb->type == SKV_TYPE_Q8_0 ? amax / 127 * 0.56 + 1e-7 : amax * 4.9e-4 + 1e-7;
                for (int64_t i2 = 0; i2 < n; i2++)
                    assert_true(fabs(deq[b0 + i2] - orig[b0 + i2]) <= tol);
            }
        }
        free(deq);
    }
    skv_gguf_close(a);
    skv_gguf_close(b);
    unlink(path);
    free(path);
}

/* Same bytes whatever the thread count; the same as a synthetic model written directly in the
 * type; and a quantized model as input (dequantized, then requantized) works. */
static void test_threads_synth_and_requant(void **state) {
    (void)state;
    char *a = quantize_to(stories(), SKV_TYPE_Q4_0, 1, NULL);
    char *b = quantize_to(stories(), SKV_TYPE_Q4_0, 2, NULL);
    size_t na, nb;
    char *da = test_read_file(a, &na), *db = test_read_file(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da), free(db);

    /* q4_0 -> f32: exactly the dequantized q4_0 values */
    char *c = quantize_to(a, SKV_TYPE_F32, 2, NULL);
    skv_gguf *gq = skv_gguf_open(a, NULL), *gf = skv_gguf_open(c, NULL);
    assert_non_null(gq);
    assert_non_null(gf);
    const skv_gguf_tensor *tq =
        skv_gguf_tensor_at(gq, skv_gguf_find_tensor(gq, "blk.2.attn_q.weight"));
    const skv_gguf_tensor *tf =
        skv_gguf_tensor_at(gf, skv_gguf_find_tensor(gf, "blk.2.attn_q.weight"));
    assert_int_equal(tf->type, SKV_TYPE_F32);
    float row[64];
    for (int r = 0; r < 64; r++) {
        skv_dequantize_row(SKV_TYPE_Q4_0, (const char *)tq->data + r * 36, row, 64);
        assert_memory_equal(row, (const float *)tf->data + r * 64, sizeof row);
    }
    skv_gguf_close(gq);
    skv_gguf_close(gf);

    /* synth in q8_0 == synth in f32, then quantized to q8_0 (tensor data) */
    const skv_synth_shape *tiny = skv_synth_preset("tiny");
    char *s32 = strdup(test_tmp_path(".gguf")), *s8 = strdup(test_tmp_path(".gguf"));
    skv_synth_params p = {SKV_TYPE_F32, 77, 0, 2};
    assert_int_equal(skv_synth_write(tiny, &p, s32, NULL), SKV_OK);
    p.type = SKV_TYPE_Q8_0;
    assert_int_equal(skv_synth_write(tiny, &p, s8, NULL), SKV_OK);
    char *q8 = quantize_to(s32, SKV_TYPE_Q8_0, 2, NULL);
    skv_gguf *g1 = skv_gguf_open(s8, NULL), *g2 = skv_gguf_open(q8, NULL);
    assert_non_null(g1);
    assert_non_null(g2);
    assert_int_equal(skv_gguf_n_tensors(g1), skv_gguf_n_tensors(g2));
    for (int64_t i = 0; i < skv_gguf_n_tensors(g1); i++) {
        const skv_gguf_tensor *x = skv_gguf_tensor_at(g1, i), *y = skv_gguf_tensor_at(g2, i);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->size, y->size);
        assert_memory_equal(x->data, y->data, x->size);
    }
    skv_gguf_close(g1);
    skv_gguf_close(g2);
    unlink(a), unlink(b), unlink(c), unlink(s32), unlink(s8), unlink(q8);
    free(a), free(b), free(c), free(s32), free(s8), free(q8);
}

static void test_errors(void **state) {
    (void)state;
    skv_err err = {0};
    char *out = strdup(test_tmp_path(".gguf"));
    assert_int_equal(skv_quantize_model(stories(), out, (skv_type)16, 1, &err), /* IQ2_XXS */
                     SKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "type id 16"));
    /* the caller's mistakes: no such type, a bad thread count */
    assert_int_equal(skv_quantize_model(stories(), out, (skv_type)77, 1, &err),
                     SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_quantize_model(stories(), out, SKV_TYPE_Q8_0, -1, &err),
                     SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_quantize_model(stories(), out, SKV_TYPE_Q8_0, SKV_MAX_THREADS + 1, &err),
                     SKV_ERR_INVALID_ARG);
    assert_true(access(out, F_OK) != 0);
    assert_int_equal(skv_quantize_model("/nonexistent/model.gguf", out, SKV_TYPE_Q8_0, 1, &err),
                     SKV_ERR_IO);
    assert_true(access(out, F_OK) != 0);
    /* a truncated model is rejected, and nothing is written */
    size_t n;
    char *data = test_read_file(stories(), &n);
    assert_non_null(data);
    const char *cut = strdup(test_tmp_path(".gguf"));
    FILE *f = fopen(cut, "wb");
    assert_non_null(f);
    fwrite(data, 1, n / 2, f);
    fclose(f);
    free(data);
    assert_int_equal(skv_quantize_model(cut, out, SKV_TYPE_Q8_0, 1, &err), SKV_ERR_FORMAT);
    assert_true(access(out, F_OK) != 0);
    unlink(cut);
    free((void *)cut);
    assert_int_equal(
        skv_quantize_model(stories(), "/nonexistent-dir/out.gguf", SKV_TYPE_Q8_0, 1, &err),
        SKV_ERR_IO);
    free(out);
}

static void test_command_line(void **state) {
    (void)state;
    char cmd[2048];
    int st;
    char *out = strdup(test_tmp_path(".gguf"));
    snprintf(cmd, sizeof cmd, "%s quantize %s %s q8_0 -t 2 2>&1", test_cli(), stories(), out);
    char *s = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(s, "ffn_down")); /* the f16 fallback is said */
    assert_non_null(strstr(s, "5 matrices cannot take q8_0"));
    assert_non_null(strstr(s, "written in f16 instead"));
    free(s);
    assert_true(access(out, F_OK) == 0);
    /* an existing OUT is refused (exit 2, naming --overwrite) and left as it was */
    size_t n0, n1;
    char *before = test_read_file(out, &n0);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s f16 -t 2 2>&1", test_cli(), stories(), out);
    s = test_run(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(s, "--overwrite"));
    free(s);
    char *after = test_read_file(out, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(after);
    /* the k-quant fallback is said with its types (stories260K in q6_k: 31 q8_0, 5 f16) */
    FILE *junk = fopen(out, "w");
    assert_non_null(junk);
    fputs("not a model", junk);
    fclose(junk);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s q6_k -t 2 --overwrite 2>&1", test_cli(), stories(),
             out);
    s = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(s, "36 matrices cannot take q6_k"));
    assert_non_null(strstr(s, "written in f16 (5), q8_0 (31) instead"));
    assert_non_null(strstr(s, "matrices: 5 f16, 31 q8_0"));
    free(s);
    /* replaced, by what the q8_0 run wrote: no matrix took q6_k (Q8_0 is its fallback), so the
     * file is the same bytes, labelled MOSTLY_Q8_0 as they are (not Q6_K) */
    after = test_read_file(out, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(after);
    free(before);
    unlink(out);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s iq2_xxs 2>/dev/null", test_cli(), stories(), out);
    free(test_run(cmd, &st));
    assert_int_equal(st, 2);
    /* a GGUF no command would read afterwards (another architecture's; no tensors, as a
     * vocabulary-only file) is refused (exit 2), and nothing is written; a file of matrices
     * alone of an architecture sparsekv runs is quantized (test_quant_mix) */
    for (int k = 0; k < 2; k++) {
        char *alien = strdup(test_tmp_path(".gguf"));
        skv_gguf_writer *w = skv_gguf_writer_new();
        static const float m[4] = {1, 2, 3, 4};
        skv_err err = {0};
        assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", k ? "llama" : "gemma"),
                         SKV_OK);
        if (k == 0)
            assert_int_equal(skv_gguf_writer_add_tensor(w, "token_embd.weight", SKV_TYPE_F32, 2,
                                                        (int64_t[]){2, 2}, m),
                             SKV_OK);
        else
            assert_int_equal(skv_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), SKV_OK);
        assert_int_equal(skv_gguf_writer_write(w, alien, &err), SKV_OK);
        skv_gguf_writer_free(w);
        snprintf(cmd, sizeof cmd, "%s quantize %s %s q8_0 2>&1", test_cli(), alien, out);
        char *msg = test_run(cmd, &st);
        assert_int_equal(st, 2);
        assert_non_null(strstr(msg, k ? "vocabulary-only" : "'gemma' is not supported"));
        free(msg);
        assert_true(access(out, F_OK) != 0);
        unlink(alien);
        free(alien);
    }
    snprintf(cmd, sizeof cmd, "%s quantize %s 2>/dev/null", test_cli(), stories());
    free(test_run(cmd, &st));
    assert_int_equal(st, 2);
    /* --simple is for k-quants: refused for a type without them, taken by the q4_k_m mix */
    const char *no_k[] = {"q8_0", "q4_0", "f16", "bf16", "f32"};
    for (int i = 0; i < 5; i++) {
        snprintf(cmd, sizeof cmd, "%s quantize %s %s %s --simple 2>&1", test_cli(), stories(), out,
                 no_k[i]);
        s = test_run(cmd, &st);
        assert_int_equal(st, 2);
        assert_non_null(strstr(s, "--simple only applies to the k-quants"));
        free(s);
        assert_true(access(out, F_OK) != 0);
    }
    snprintf(cmd, sizeof cmd, "%s quantize %s %s q4_k_m --simple -t 1 >/dev/null 2>&1", test_cli(),
             stories(), out);
    free(test_run(cmd, &st));
    assert_int_equal(st, 0);
    unlink(out);
    /* bad input exits 2 (missing, not a GGUF), a failed write 1; nothing is written */
    snprintf(cmd, sizeof cmd, "%s quantize /nonexistent.gguf %s q8_0 2>/dev/null", test_cli(), out);
    free(test_run(cmd, &st));
    assert_int_equal(st, 2);
    assert_true(access(out, F_OK) != 0);
    const char *text = strdup(test_tmp_path(".md"));
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    fputs("# not a model\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s q8_0 2>/dev/null", test_cli(), text, out);
    free(test_run(cmd, &st));
    assert_int_equal(st, 2);
    assert_true(access(out, F_OK) != 0);
    unlink(text);
    free((void *)text);
    /* an OUT in a directory that is not there, or a directory: refused up front, naming it
     * (not the writer's temporary file) */
    snprintf(cmd, sizeof cmd, "%s quantize %s /nonexistent-dir/out.gguf q8_0 2>&1", test_cli(),
             stories());
    s = test_run(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(s, "/nonexistent-dir: No such file or directory"));
    assert_null(strstr(s, ".tmp"));
    free(s);
    snprintf(cmd, sizeof cmd, "%s quantize %s /tmp q8_0 --overwrite 2>&1", test_cli(), stories());
    s = test_run(cmd, &st);
    assert_int_equal(st, 2);
    assert_non_null(strstr(s, "/tmp is a directory"));
    free(s);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_on_stories260k),
        cmocka_unit_test(test_kquants_on_wide_model),
        cmocka_unit_test(test_kquant_fallback_32_blocks),
        cmocka_unit_test(test_huge_page_weights),
        cmocka_unit_test(test_q3_k_load_paths),
        cmocka_unit_test(test_iq4_xs_load_paths),
        cmocka_unit_test(test_q2_k_load_paths),
        cmocka_unit_test(test_partial_fusion),
        cmocka_unit_test(test_structure_preserved),
        cmocka_unit_test(test_threads_synth_and_requant),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
