/* test_contexts_threads.c — several contexts on one model (shared, read-only weights) driven
 * from several threads at once, each thread its own context: prefill, compress (a different
 * policy per thread), decode and greedy generation must give exactly the logits and tokens of
 * the same work done single-threaded, one context after the other. Also built with
 * -fsanitize=thread (`make tsan`) so that a data race on shared state (the model, the kernel
 * dispatch's once-only CPU probe, the policy registry) is reported. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sparsekv.h"
#include "support.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_WORK = 4, N_PROMPT = 48, N_WIN = 8, N_GEN = 12 };

typedef struct work {
    const skv_model *model;
    int id;
    int n_vocab;
    skv_type kv;
    int threads; /* of the context's own pool */
    const char *policy;
    float *logits; /* [N_GEN, n_vocab]: logits before each generated token */
    int32_t gen[N_GEN];
    skv_status st;
    char msg[sizeof(((skv_err *)0)->msg)];
} work;

static void *run_work(void *arg) {
    work *w = arg;
    skv_err err = {0};
    skv_context_params cp = skv_context_default_params();
    cp.kv_type = w->kv;
    cp.n_threads = w->threads;
    cp.n_ctx = N_PROMPT + N_WIN + N_GEN + 4;
    skv_context *ctx = skv_context_new(w->model, &cp, &err);
    if (!ctx) goto fail;
    int32_t toks[N_PROMPT + N_WIN];
    for (int i = 0; i < N_PROMPT + N_WIN; i++) /* a different prompt per work item */
        toks[i] = 3 + (int32_t)((i * 37 + w->id * 101 + 7) % (w->n_vocab - 3));
    float *last = w->logits;
    if (skv_forward(ctx, toks, N_PROMPT, SKV_LOGITS_LAST, last, &err) != SKV_OK) goto fail;
    skv_compress_params p = skv_compress_default_params();
    p.policy = w->policy;
    p.keep_frac = 0.5;
    p.window_tokens = toks + N_PROMPT;
    p.n_window = N_WIN;
    p.seed = 3;
    if (skv_compress(ctx, &p, NULL, &err) != SKV_OK) goto fail;
    int32_t next = toks[N_PROMPT - 1];
    for (int i = 0; i < N_GEN; i++) {
        float *lg = w->logits + (size_t)i * w->n_vocab;
        if (skv_forward(ctx, &next, 1, SKV_LOGITS_LAST, lg, &err) != SKV_OK) goto fail;
        int best = 0;
        for (int v = 1; v < w->n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        w->gen[i] = next = best;
    }
    skv_context_free(ctx);
    w->st = SKV_OK;
    return NULL;
fail:
    w->st = err.status ? err.status : SKV_ERR_INVALID_ARG;
    snprintf(w->msg, sizeof w->msg, "%s", err.msg);
    skv_context_free(ctx);
    return NULL;
}

static void test_contexts_from_threads(void **s) {
    (void)s;
    skv_err err = {0};
    skv_model *m = skv_model_load(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(m);
    int nv = skv_model_hparams(m)->n_vocab;
    const char *pol[N_WORK] = {"sink_recent", "attention", "random", "pyramid"};
    const skv_type kv[N_WORK] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_F32, SKV_TYPE_F16};
    work seq[N_WORK], par[N_WORK];
    for (int r = 0; r < 2; r++) {
        work *w = r ? par : seq;
        for (int i = 0; i < N_WORK; i++) {
            memset(&w[i], 0, sizeof w[i]);
            w[i].model = m;
            w[i].id = i;
            w[i].n_vocab = nv;
            w[i].kv = kv[i];
            w[i].threads = 1 + i % 2; /* pools of 1 and 2 threads */
            w[i].policy = pol[i];
            w[i].logits = malloc((size_t)N_GEN * nv * sizeof(float));
            assert_non_null(w[i].logits);
        }
    }
    for (int i = 0; i < N_WORK; i++) run_work(&seq[i]); /* one after the other, this thread */
    pthread_t th[N_WORK];
    for (int i = 0; i < N_WORK; i++)
        assert_int_equal(pthread_create(&th[i], NULL, run_work, &par[i]), 0);
    for (int i = 0; i < N_WORK; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_WORK; i++) {
        if (seq[i].st || par[i].st) fprintf(stderr, "work %d: %s%s\n", i, seq[i].msg, par[i].msg);
        assert_int_equal(seq[i].st, SKV_OK);
        assert_int_equal(par[i].st, SKV_OK);
        /* Same thread count per context, same inputs: bit-identical, whatever runs beside. */
        assert_memory_equal(seq[i].logits, par[i].logits, (size_t)N_GEN * nv * sizeof(float));
        assert_memory_equal(seq[i].gen, par[i].gen, sizeof seq[i].gen);
    }
    /* The work items really differ (a test that compared equal garbage would pass too). */
    assert_memory_not_equal(seq[0].logits, seq[1].logits, (size_t)nv * sizeof(float));
    for (int i = 0; i < N_WORK; i++) {
        free(seq[i].logits);
        free(par[i].logits);
    }
    skv_model_free(m);
}

/* The SIMD level asked for from several threads at once (the first calls in this process, so
 * they race into the once-only CPU probe): all get the same answer. */
static void *ask_level(void *arg) {
    *(const char **)arg = skv_simd_level();
    return NULL;
}

static void test_simd_level_once(void **s) {
    (void)s;
    pthread_t th[4];
    const char *got[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, ask_level, &got[i]), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 4; i++) assert_string_equal(got[i], skv_simd_level());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_level_once),
        cmocka_unit_test(test_contexts_from_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
