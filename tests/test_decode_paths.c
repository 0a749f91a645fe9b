/* test_decode_paths.c — decode paths the other suites do not reach:
 *  - split-K decode attention: one decode token over a long cache on several threads (each kv
 *    head's entries cut into one range per thread, partials merged by their log-sum-exp), for
 *    f32, f16 and q8_0 caches, against the scalar one-token path (SKV reference kernels, one
 *    thread: no split) and, for f32, against the independent float64 forward;
 *  - f16 and q8_0 KV caches through compress (every founding policy, original and rerotated
 *    positions) and the decode after it, against the f32 cache on the same path. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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

enum { V = 300 };

/* Real head shapes (head_dim 64, so q8_0 caches work; 3 query heads per kv head), random
 * weights, a context long enough for the split. */
static char *make_model(int n_ctx) {
    return strdup(test_synth_gqa64(n_ctx, 5, 2));
}

static void random_tokens(int32_t *t, int n, uint64_t seed) {
    skv_rng rng;
    skv_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++) t[i] = 3 + (int32_t)skv_rng_below(&rng, V - 3);
}

static const char *kv_name(skv_type t) {
    return t == SKV_TYPE_F32 ? "f32" : t == SKV_TYPE_F16 ? "f16" : "q8_0";
}

/* ---- split-K ------------------------------------------------------------------------------ */

enum { P = 1100, D = 6 }; /* 1100 >= 256 * 4 cached entries: the split is on for 2-4 threads */

/* Prefill P tokens in one batch, then D decode tokens one at a time: logits[D, V]. */
static void run_decode(const skv_model *m, skv_type kv, int threads, const int32_t *toks,
                       float *logits) {
    skv_context *ctx = test_context(m, kv, P + D, threads, 0);
    float *last = malloc(V * sizeof *last);
    test_feed(ctx, toks, P, SKV_LOGITS_LAST, last);
    for (int i = 0; i < D; i++)
        test_feed(ctx, toks + P + i, 1, SKV_LOGITS_LAST, logits + (size_t)i * V);
    free(last);
    skv_context_free(ctx);
}

/* Tolerances. The split changes only the order of the softmax sums (per-range maxima and sums
 * merged by log-sum-exp), and the AVX2 kernels the order of the dot products (and, for q8_0
 * caches, how the query meets the 8-bit keys); the logits here are O(1). Measured max |diff| vs
 * the scalar one-token path: 6e-6 (f32), 7e-5 (f16), 3.5e-4 (q8_0), the same for 2, 3 and 4
 * threads; the tolerances leave 6-15x and still catch a wrong merge (a dropped range or a wrong
 * weight moves logits by ~1e-1). Against float64 (f32 cache): measured 5e-6. */
static double tol_split(skv_type t) {
    return t == SKV_TYPE_F32 ? 1e-4 : t == SKV_TYPE_F16 ? 5e-4 : 2e-3;
}
#define TOL_REF64 1e-4

static void test_split_k_decode(void **s) {
    (void)s;
    char *path = make_model(P + D);
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    assert_non_null(m);
    int32_t toks[P + D];
    random_tokens(toks, P + D, 17);
    float *ref = malloc((size_t)D * V * sizeof *ref), *got = malloc((size_t)D * V * sizeof *got);
    const skv_type kvs[] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_Q8_0};
    double *ref64 = NULL;
    for (int k = 0; k < 3; k++) {
        skv_kernels_force_ref(true); /* the scalar one-token path: reference kernels, 1 thread */
        run_decode(m, kvs[k], 1, toks, ref);
        skv_kernels_force_ref(false);
        if (kvs[k] == SKV_TYPE_F32) {
            ref_model *rm = ref_model_load(path);
            assert_non_null(rm);
            ref64 = malloc((size_t)(P + D) * V * sizeof *ref64);
            ref_forward(rm, toks, P + D, ref64, NULL, NULL);
            ref_model_free(rm);
            double d = 0;
            for (int i = 0; i < D * V; i++) d = fmax(d, fabs(ref[i] - ref64[(size_t)P * V + i]));
            printf("  f32 scalar one-token vs float64: %.3g\n", d);
            assert_true(d <= TOL_REF64);
        }
        for (int th = 2; th <= 4; th++) {
            run_decode(m, kvs[k], th, toks, got);
            double d = test_max_abs_diff(ref, got, (size_t)D * V);
            printf("  %s cache, %d threads (split-K) vs scalar one-token: max |diff| %.3g\n",
                   kv_name(kvs[k]), th, d);
            assert_true(d <= tol_split(kvs[k]));
            if (ref64) {
                double d64 = 0;
                for (int i = 0; i < D * V; i++)
                    d64 = fmax(d64, fabs(got[i] - ref64[(size_t)P * V + i]));
                assert_true(d64 <= TOL_REF64);
            }
        }
        free(ref64);
        ref64 = NULL;
    }
    free(ref);
    free(got);
    skv_model_free(m);
    unlink(path);
    free(path);
}

/* ---- f16 / q8_0 caches through compress, rerotate and decode ------------------------------- */

enum { CP = 160, CW = 16, CD = 8 };

typedef struct run_out {
    float logits[CD * V];
    int32_t *pos; /* every head's kept positions, concatenated */
    int n_pos;
} run_out;

static void run_compressed(const skv_model *m, skv_type kv, const char *policy, double keep,
                           skv_position_mode mode, const int32_t *toks, run_out *o) {
    skv_err err = {0};
    skv_context *ctx = test_context(m, kv, CP + CD + CW, 2, 0);
    float *last = malloc(V * sizeof *last);
    test_feed(ctx, toks, CP, SKV_LOGITS_LAST, last);
    skv_compress_params p = skv_compress_default_params();
    p.policy = policy;
    p.keep_frac = keep;
    p.window_tokens = toks + CP; /* seed protocol: the next CW tokens scored on a copy */
    p.n_window = CW;
    p.seed = 9;
    p.positions = mode;
    skv_status st = skv_compress(ctx, &p, NULL, &err);
    if (st != SKV_OK) fprintf(stderr, "compress %s: %s\n", policy, err.msg);
    assert_int_equal(st, SKV_OK);
    const skv_cache *c = skv_context_cache_const(ctx);
    o->n_pos = 0;
    o->pos = NULL;
    for (int l = 0; l < skv_cache_n_layer(c); l++)
        for (int h = 0; h < skv_cache_n_head_kv(c); h++) {
            int n = skv_cache_head_len(c, l, h);
            o->pos = realloc(o->pos, (size_t)(o->n_pos + n) * sizeof *o->pos);
            memcpy(o->pos + o->n_pos, skv_cache_head_positions(c, l, h),
                   (size_t)n * sizeof(int32_t));
            o->n_pos += n;
        }
    for (int i = 0; i < CD; i++)
        test_feed(ctx, toks + CP + CW + i, 1, SKV_LOGITS_LAST, o->logits + (size_t)i * V);
    free(last);
    skv_context_free(ctx);
}

/* For every policy and both position modes the f16 / q8_0 cache must keep what the f32 cache
 * keeps (sink_recent and random never look at the cache; attention and pyramid score the window
 * against the cached keys, and at this size the quantized keys do not change their choice) and
 * decode to logits within a bound set by the cache type's own error: the max |logit diff| of the
 * same type without compression (keep 1.0, original positions), times 4, plus 2e-3 (rerotation
 * re-quantizes each moved key once more, and a compressed cache averages over fewer entries).
 * Measured (printed): the compressed diffs stay within ~1.5x the uncompressed ones. */
static void test_kv_types_compress(void **s) {
    (void)s;
    char *path = make_model(512);
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    assert_non_null(m);
    int32_t toks[CP + CW + CD];
    random_tokens(toks, CP + CW + CD, 23);
    const char *pol[] = {"sink_recent", "random", "attention", "pyramid"};
    const skv_type kvs[] = {SKV_TYPE_F16, SKV_TYPE_Q8_0};
    run_out *ref = malloc(sizeof *ref), *got = malloc(sizeof *got);
    double base[2];
    for (int k = 0; k < 2; k++) { /* the cache type's own error, uncompressed */
        run_compressed(m, SKV_TYPE_F32, "sink_recent", 1.0, SKV_POSITIONS_ORIGINAL, toks, ref);
        run_compressed(m, kvs[k], "sink_recent", 1.0, SKV_POSITIONS_ORIGINAL, toks, got);
        base[k] = test_max_abs_diff(ref->logits, got->logits, CD * V);
        printf("  %s cache, no compression: max |logit diff| vs f32 %.3g\n", kv_name(kvs[k]),
               base[k]);
        assert_true(base[k] > 0.0); /* the cache type is really in use */
        free(ref->pos);
        free(got->pos);
    }
    for (int pi = 0; pi < 4; pi++)
        for (int mode = 0; mode < 2; mode++) {
            skv_position_mode pm = mode ? SKV_POSITIONS_REROTATE : SKV_POSITIONS_ORIGINAL;
            run_compressed(m, SKV_TYPE_F32, pol[pi], 0.25, pm, toks, ref);
            for (int k = 0; k < 2; k++) {
                run_compressed(m, kvs[k], pol[pi], 0.25, pm, toks, got);
                assert_int_equal(got->n_pos, ref->n_pos);
                assert_memory_equal(got->pos, ref->pos, (size_t)ref->n_pos * sizeof(int32_t));
                double d = test_max_abs_diff(ref->logits, got->logits, CD * V);
                printf("  %-11s %-8s %s cache: max |logit diff| vs f32 %.3g\n", pol[pi],
                       mode ? "rerotate" : "original", kv_name(kvs[k]), d);
                assert_true(d <= 4.0 * base[k] + 2e-3);
                free(got->pos);
            }
            free(ref->pos);
        }
    free(ref);
    free(got);
    skv_model_free(m);
    unlink(path);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_k_decode),
        cmocka_unit_test(test_kv_types_compress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
