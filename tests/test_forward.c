/* test_forward.c — the engine against independent references: the published stories260K
 * greedy text and logits, a naive float64 forward (tests/ref_forward.c), and itself
 * (batched vs token by token, 1 vs 2 threads, f16 cache). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ref_forward.h"
#include "model/synth.h"
#include "sparsekv.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Published with the model (../shared/models/README.md): greedy from BOS. It is exactly 120
 * generated tokens (the "-n 100" yields its first 100 tokens, a prefix: tested too). */
static const char *REFERENCE_TEXT =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
    "She said, \"I want to play with your ball, but";

#define TOL_PUBLISHED 1e-4 /* the float64 reference logits shipped with the model */
#define TOL_REF64     1e-4 /* our own float64 forward */
#define TOL_BATCH     1e-5 /* batched prefill vs token-by-token decode */
#define TOL_THREADS   1e-5 /* 1 vs 2 threads */
/* batched vs token-by-token with an f16 cache when the two use different attention kernels:
 * a 1e-7 difference in a layer's output can flip the f16 rounding of a later layer's K or V
 * (a step of ~1e-3 relative), so the bound is that of f16 storage, not of float arithmetic */
#define TOL_BATCH_F16 1e-3

static skv_model *model;

static int setup(void **state) {
    (void)state;
    skv_err err = {0};
    model = skv_model_load(test_stories_path(), &err);
    if (!model) fprintf(stderr, "load failed: %s\n", err.msg);
    return model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    skv_model_free(model);
    return 0;
}

/* The 256 token ids of reference_logits.json; in a plain clone (no fixture) BOS and 255 fixed
 * pseudo-random ids instead, enough for the tests that compare two computations (only
 * test_published_logits needs the published ones, and skips without them). */
static int load_reference_tokens(int32_t *out, int max) {
    const char *path = test_fixture_path("stories260K/reference_logits.json");
    if (!path) {
        int n = max < 256 ? max : 256, V = skv_model_hparams(model)->n_vocab;
        uint32_t r = 12345;
        for (int i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            out[i] = i == 0 ? 1 : 3 + (int32_t)((r >> 8) % (uint32_t)(V - 3));
        }
        return n;
    }
    char *json = test_read_file(path, NULL);
    assert_non_null(json);
    char *p = strchr(json, '[');
    int n = 0;
    while (p && *p && *p != ']' && n < max) {
        p++;
        while (*p == ' ' || *p == '\n' || *p == ',') p++;
        if (*p < '0' || *p > '9') break;
        out[n++] = (int32_t)strtol(p, &p, 10);
    }
    free(json);
    return n;
}

static float *engine_logits(const int32_t *toks, int n, int threads, skv_type kv, bool batched) {
    skv_context *ctx = test_context(model, kv, 0, threads, 0);
    int V = skv_model_hparams(model)->n_vocab;
    float *logits = malloc((size_t)n * V * sizeof(float));
    if (batched) {
        test_feed(ctx, toks, n, SKV_LOGITS_ALL, logits);
    } else {
        for (int i = 0; i < n; i++)
            test_feed(ctx, toks + i, 1, SKV_LOGITS_LAST, logits + (size_t)i * V);
    }
    assert_int_equal(skv_context_n_past(ctx), n);
    skv_context_free(ctx);
    return logits;
}

static void test_published_logits(void **state) {
    (void)state;
    test_model_path("stories260K/reference_logits.json"); /* skips without it */
    int32_t toks[300];
    int n = load_reference_tokens(toks, 300);
    assert_int_equal(n, 256);
    size_t size;
    float *ref = test_read_file(test_model_path("stories260K/reference_logits.f32"), &size);
    assert_non_null(ref);
    int V = skv_model_hparams(model)->n_vocab;
    assert_int_equal(size, (size_t)n * V * sizeof(float));
    float *got = engine_logits(toks, n, 2, SKV_TYPE_F32, true);
    double diff = test_max_abs_diff(got, ref, (size_t)n * V);
    printf("  max |engine - published| = %.3g\n", diff);
    assert_true(diff <= TOL_PUBLISHED);
    free(got);
    free(ref);
}

static void test_float64_reference(void **state) {
    (void)state;
    int32_t toks[300];
    int n = load_reference_tokens(toks, 300); /* 256 >= 200 tokens */
    ref_model *rm = ref_model_load(test_model_path("stories260K/stories260K.gguf"));
    assert_non_null(rm);
    int V = ref_model_n_vocab(rm);
    double *ref = malloc((size_t)n * V * sizeof(double));
    ref_forward(rm, toks, n, ref, NULL, NULL);
    float *got = engine_logits(toks, n, 2, SKV_TYPE_F32, true);
    double m = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) m = fmax(m, fabs(got[i] - ref[i]));
    printf("  max |engine - float64 reference| = %.3g over %d positions\n", m, n);
    assert_true(m <= TOL_REF64);
    free(ref);
    free(got);
    ref_model_free(rm);
}

static void test_batched_equals_sequential(void **state) {
    (void)state;
    int32_t toks[300];
    int n = load_reference_tokens(toks, 300);
    int V = skv_model_hparams(model)->n_vocab;
    float *a = engine_logits(toks, n, 2, SKV_TYPE_F32, true);
    float *b = engine_logits(toks, n, 2, SKV_TYPE_F32, false);
    double diff = test_max_abs_diff(a, b, (size_t)n * V);
    printf("  max |batched - sequential| = %.3g\n", diff);
    assert_true(diff <= TOL_BATCH);
    free(a);
    free(b);
}

static void test_threads_agree(void **state) {
    (void)state;
    int32_t toks[300];
    int n = load_reference_tokens(toks, 300);
    int V = skv_model_hparams(model)->n_vocab;
    float *a = engine_logits(toks, n, 1, SKV_TYPE_F32, true);
    float *b = engine_logits(toks, n, 2, SKV_TYPE_F32, true);
    float *c = engine_logits(toks, n, 3, SKV_TYPE_F32, true);
    assert_true(test_max_abs_diff(a, b, (size_t)n * V) <= TOL_THREADS);
    assert_true(test_max_abs_diff(a, c, (size_t)n * V) <= TOL_THREADS);
    free(a);
    free(b);
    free(c);
}

/* A reset context keeps its cache's memory (heads of different lengths and shifted rotations
 * after a compression among it) and then computes a new prompt exactly as a fresh context. */
static void test_reset_reuses_cache(void **state) {
    (void)state;
    int32_t toks[300];
    const int n = load_reference_tokens(toks, 300), n2 = n / 2;
    const int V = skv_model_hparams(model)->n_vocab;
    skv_err err = {0};
    skv_context *used = test_context(model, SKV_TYPE_F16, 0, 2, 0);
    test_feed(used, toks, n, SKV_LOGITS_NONE, NULL);
    skv_compress_params cp = skv_compress_default_params();
    cp.keep_frac = 0.3;
    cp.positions = SKV_POSITIONS_REROTATE;
    assert_int_equal(skv_compress(used, &cp, NULL, &err), SKV_OK);
    test_feed(used, toks, 3, SKV_LOGITS_NONE, NULL); /* decoded after it: shifted rotations */
    const uint64_t held = skv_cache_bytes_allocated(skv_context_cache(used));
    assert_true(held > 0);
    skv_context_reset(used);
    assert_int_equal(skv_context_n_past(used), 0);
    assert_int_equal(skv_cache_bytes(skv_context_cache(used), -1), 0);
    assert_int_equal(skv_cache_bytes_allocated(skv_context_cache(used)), held);
    assert_int_equal(skv_cache_position_mode(skv_context_cache(used)), SKV_POSITIONS_ORIGINAL);

    skv_context *fresh = test_context(model, SKV_TYPE_F16, 0, 2, 0);
    float *a = malloc((size_t)n2 * V * sizeof(float)), *b = malloc((size_t)n2 * V * sizeof(float));
    const int32_t *prompt = toks + n - n2; /* another prompt than the first */
    test_feed(used, prompt, n2, SKV_LOGITS_ALL, a);
    test_feed(fresh, prompt, n2, SKV_LOGITS_ALL, b);
    assert_memory_equal(a, b, (size_t)n2 * V * sizeof(float));
    test_feed(used, toks, 1, SKV_LOGITS_LAST, a); /* and a decode step after it */
    test_feed(fresh, toks, 1, SKV_LOGITS_LAST, b);
    assert_memory_equal(a, b, (size_t)V * sizeof(float));
    skv_context_reset(used); /* and it can be compressed again, as a fresh prefill */
    test_feed(used, prompt, n2, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_compress(used, &cp, NULL, &err), SKV_OK);
    free(a);
    free(b);
    skv_context_free(fresh);
    skv_context_free(used);
}

static void test_f16_cache_close(void **state) {
    (void)state;
    int32_t toks[300];
    int n = load_reference_tokens(toks, 300);
    int V = skv_model_hparams(model)->n_vocab;
    float *a = engine_logits(toks, n, 2, SKV_TYPE_F32, true);
    float *b = engine_logits(toks, n, 2, SKV_TYPE_F16, true);
    double diff = test_max_abs_diff(a, b, (size_t)n * V);
    printf("  max |f16 cache - f32 cache| = %.3g\n", diff);
    assert_true(diff > 0);    /* the cache really is stored in f16 */
    assert_true(diff < 0.05); /* ... and only rounding separates them */
    free(a);
    free(b);
}

/* Greedy generation from BOS alone reproduces the published text. */
static void test_greedy_reference_text(void **state) {
    (void)state;
    skv_err err = {0};
    skv_context *ctx = skv_context_new(model, NULL, &err);
    assert_non_null(ctx);
    const skv_vocab *v = skv_model_vocab(model);
    int V = skv_model_hparams(model)->n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t tok = skv_vocab_bos(v), out[120];
    for (int i = 0; i < 120; i++) {
        assert_int_equal(skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, logits, &err), SKV_OK);
        int best = 0;
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[best]) best = j;
        out[i] = tok = best;
    }
    char text[2048];
    int len = skv_detokenize(v, out, 120, true, text, sizeof text - 1);
    assert_true(len > 0);
    text[len] = 0;
    assert_string_equal(text, REFERENCE_TEXT);
    free(logits);
    skv_context_free(ctx);
}

static void test_cli_generate_reference(void **state) {
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s generate --temp 0 -n 120 --quiet -m %s", test_cli(),
             test_model_path("stories260K/stories260K.gguf"));
    int status;
    char *out = test_run(cmd, &status);
    assert_non_null(out);
    assert_int_equal(status, 0);
    char want[2048];
    snprintf(want, sizeof want, "%s\n", REFERENCE_TEXT);
    assert_string_equal(out, want);
    free(out);

    /* -n 100: the first 100 tokens, word for word a prefix of the reference */
    snprintf(cmd, sizeof cmd, "%s generate --temp 0 -n 100 --quiet -m %s", test_cli(),
             test_model_path("stories260K/stories260K.gguf"));
    out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    size_t len = strlen(out);
    assert_true(len > 200 && out[len - 1] == '\n');
    assert_int_equal(strncmp(out, REFERENCE_TEXT, len - 1), 0);
    assert_non_null(strstr(out, "didn't know w"));
    free(out);
}

/* A model with real head shapes (head_dim 64, 3 query heads per kv head), where prefill
 * attention runs on the blocked kernel (src/kernels/attn_prefill.c) and decode on the per-token
 * one: both against the float64 reference and against each other, for f32 and f16 caches. */
static void test_blocked_prefill_attention(void **state) {
    (void)state;
    const char *path = test_synth_gqa64(512, 11, 1);
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    assert_non_null(m);
    ref_model *rm = ref_model_load(path);
    assert_non_null(rm);
    enum { N = 300 };
    const int V = 300;
    int32_t toks[N];
    skv_rng rng;
    skv_rng_seed(&rng, 3);
    for (int i = 0; i < N; i++) toks[i] = 3 + (int32_t)skv_rng_below(&rng, V - 3);
    double *ref = malloc((size_t)N * V * sizeof(double));
    ref_forward(rm, toks, N, ref, NULL, NULL);
    float *a = malloc((size_t)N * V * sizeof(float)), *b = malloc((size_t)N * V * sizeof(float));
    skv_type kv[2] = {SKV_TYPE_F32, SKV_TYPE_F16};
    for (int t = 0; t < 2; t++) {
        skv_context *ctx = test_context(m, kv[t], 0, 2, 0);
        test_feed(ctx, toks, N, SKV_LOGITS_ALL, a);
        skv_context_free(ctx);
        ctx = test_context(m, kv[t], 0, 2, 0);
        for (int i = 0; i < N; i++) test_feed(ctx, toks + i, 1, SKV_LOGITS_LAST, b + (size_t)i * V);
        skv_context_free(ctx);
        double d_seq = test_max_abs_diff(a, b, (size_t)N * V), d_ref = 0;
        for (size_t i = 0; i < (size_t)N * V; i++) d_ref = fmax(d_ref, fabs(a[i] - ref[i]));
        printf("  %s cache: max |batched - sequential| = %.3g, max |batched - float64| = %.3g\n",
               kv[t] == SKV_TYPE_F32 ? "f32" : "f16", d_seq, d_ref);
        if (kv[t] == SKV_TYPE_F32) {
            assert_true(d_seq <= TOL_BATCH);
            assert_true(d_ref <= TOL_REF64);
        } else {
            assert_true(d_seq <= TOL_BATCH_F16);
        }
    }
    free(a);
    free(b);
    free(ref);
    ref_model_free(rm);
    skv_model_free(m);
    unlink(path);
}

/* generate --policy: keep 1.0 changes nothing; a real compression still generates, and bad
 * policy options are usage errors (exit 2, nothing on stdout). */
static void test_cli_generate_policy(void **state) {
    (void)state;
    const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to play";
    char cmd[1024];
    int status;
    snprintf(cmd, sizeof cmd, "%s generate --temp 0 -n 40 --quiet -m %s -p '%s'", test_cli(),
             test_model_path("stories260K/stories260K.gguf"), prompt);
    char *dense = test_run(cmd, &status);
    assert_int_equal(status, 0);
    const char *policies[] = {"streaming", "random", "snapkv --window 4", "pyramid --window 4"};
    for (int p = 0; p < 4; p++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate --temp 0 -n 40 --quiet -m %s -p '%s' --policy %s --keep 1.0",
                 test_cli(), test_model_path("stories260K/stories260K.gguf"), prompt, policies[p]);
        char *same = test_run(cmd, &status);
        assert_int_equal(status, 0);
        if (p < 3) assert_string_equal(same, dense); /* pyramid at 1.0 is not the full cache */
        free(same);
    }
    snprintf(cmd, sizeof cmd,
             "%s generate --temp 0 -n 40 --quiet -m %s -p '%s' --policy snapkv --keep 0.3 "
             "--window 4 --protocol engine --positions rerotate",
             test_cli(), test_model_path("stories260K/stories260K.gguf"), prompt);
    char *out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    assert_int_equal(strncmp(out, prompt, strlen(prompt)), 0);
    assert_true(strlen(out) > strlen(prompt) + 20);
    free(out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hi --policy nope --keep 0.5 2>/dev/null",
             test_cli(), test_model_path("stories260K/stories260K.gguf"));
    out = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_string_equal(out, "");
    free(out);
    free(dense);
}

static void test_forward_errors(void **state) {
    (void)state;
    skv_context_params cp = skv_context_default_params();
    cp.n_ctx = 8;
    skv_err err = {0};
    skv_context *ctx = skv_context_new(model, &cp, &err);
    assert_non_null(ctx);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t bad = 100000;
    assert_int_equal(skv_forward(ctx, &bad, 1, SKV_LOGITS_NONE, NULL, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(skv_forward(ctx, toks, 9, SKV_LOGITS_NONE, NULL, &err), SKV_ERR_STATE);
    assert_non_null(strstr(err.msg, "context full"));
    assert_int_equal(skv_context_n_past(ctx), 0); /* nothing was appended */
    assert_int_equal(skv_forward(ctx, toks, 8, SKV_LOGITS_NONE, NULL, &err), SKV_OK);
    assert_int_equal(skv_forward(ctx, toks, 1, SKV_LOGITS_NONE, NULL, &err), SKV_ERR_STATE);
    skv_context_free(ctx);

    cp.n_ctx = 0;
    cp.kv_type = SKV_TYPE_Q8_0; /* head_dim 8 is not a multiple of the q8_0 block */
    assert_null(skv_context_new(model, &cp, &err));
    assert_non_null(strstr(err.msg, "multiple of 32"));
}

static void test_load_errors(void **state) {
    (void)state;
    skv_err err = {0};
    assert_null(skv_model_load("/nonexistent/model.gguf", &err));
    assert_true(err.status == SKV_ERR_IO);
    /* the llama2.c checkpoint is not a GGUF file */
    assert_null(skv_model_load(test_model_path("stories260K/stories260K.bin"), &err));
    assert_true(err.status == SKV_ERR_FORMAT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_logits),
        cmocka_unit_test(test_float64_reference),
        cmocka_unit_test(test_batched_equals_sequential),
        cmocka_unit_test(test_threads_agree),
        cmocka_unit_test(test_f16_cache_close),
        cmocka_unit_test(test_reset_reuses_cache),
        cmocka_unit_test(test_greedy_reference_text),
        cmocka_unit_test(test_cli_generate_reference),
        cmocka_unit_test(test_blocked_prefill_attention),
        cmocka_unit_test(test_cli_generate_policy),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
