/* test_model.c — the loader's validation: a real model rewritten with one thing broken at a
 * time must fail with a message that names the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf.h"
#include "sparsekv.h"
#include "support.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct mutation {
    const char *skip_key;    /* metadata key to drop */
    const char *skip_tensor; /* tensor to drop */
    const char *set_key;     /* u32 key to override */
    uint32_t set_value;
    const char *arch;    /* general.architecture override */
    const char *reshape; /* tensor whose ne[0], ne[1] are swapped */
} mutation;

static const char *skip_key_now;
static bool skip_key(const char *key) {
    return skip_key_now && strcmp(key, skip_key_now) == 0;
}

/* Writes a mutated copy of stories260K and tries to load it; returns the load error. */
static skv_err load_mutated(mutation mu) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    skip_key_now = mu.skip_key;
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, skip_key), SKV_OK);
    if (mu.set_key) assert_int_equal(skv_gguf_writer_set_u32(w, mu.set_key, mu.set_value), SKV_OK);
    if (mu.arch) assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", mu.arch), 0);
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        if (mu.skip_tensor && !strcmp(t->name, mu.skip_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (mu.reshape && !strcmp(t->name, mu.reshape)) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data),
                         SKV_OK);
    }
    const char *path = test_tmp_path(".gguf");
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
    memset(&err, 0, sizeof err);
    skv_model *m = skv_model_load(path, &err);
    unlink(path);
    if (m) {
        skv_model_free(m);
        err.status = SKV_OK;
    }
    return err;
}

static void expect(mutation mu, skv_status st, const char *substring) {
    skv_err err = load_mutated(mu);
    if (err.status != st || !strstr(err.msg, substring))
        fprintf(stderr, "  got status %d: %s\n", err.status, err.msg);
    assert_int_equal(err.status, st);
    assert_non_null(strstr(err.msg, substring));
}

static void test_unmodified_copy_loads(void **state) {
    (void)state;
    mutation none = {0};
    assert_int_equal(load_mutated(none).status, SKV_OK);
}

static void test_missing_hparam(void **state) {
    (void)state;
    expect((mutation){.skip_key = "llama.block_count"}, SKV_ERR_FORMAT,
           "missing hyperparameter 'llama.block_count'");
    expect((mutation){.skip_key = "general.architecture"}, SKV_ERR_FORMAT, "general.architecture");
}

static void test_inconsistent_hparams(void **state) {
    (void)state;
    expect((mutation){.set_key = "llama.attention.head_count_kv", .set_value = 3}, SKV_ERR_FORMAT,
           "not a multiple of the kv head count");
    expect((mutation){.set_key = "llama.attention.head_count", .set_value = 7}, SKV_ERR_FORMAT,
           "not a multiple of the head count");
    /* more layers than the file has tensors for */
    expect((mutation){.set_key = "llama.block_count", .set_value = 6}, SKV_ERR_FORMAT,
           "missing tensor 'blk.5.");
}

static void test_wrong_architecture(void **state) {
    (void)state;
    expect(
        (mutation){.arch = "gpt2"}, SKV_ERR_UNSUPPORTED,
        "architecture 'gpt2' is not supported (sparsekv runs llama, qwen2, qwen3, phi3, mistral3)");
    /* a known architecture whose keys are missing (they are read under its prefix) */
    expect((mutation){.arch = "qwen2"}, SKV_ERR_FORMAT,
           "missing hyperparameter 'qwen2.embedding_length'");
}

static void test_missing_or_misshapen_tensor(void **state) {
    (void)state;
    expect((mutation){.skip_tensor = "blk.4.ffn_down.weight"}, SKV_ERR_FORMAT,
           "missing tensor 'blk.4.ffn_down.weight'");
    expect((mutation){.reshape = "blk.2.attn_k.weight"}, SKV_ERR_FORMAT,
           "tensor 'blk.2.attn_k.weight' has shape [32, 64], expected [64, 32]");
    expect((mutation){.skip_tensor = "output_norm.weight"}, SKV_ERR_FORMAT,
           "missing tensor 'output_norm.weight'");
}

static void test_hparams_read(void **state) {
    (void)state;
    skv_err err = {0};
    skv_model *m = skv_model_load(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(m);
    const skv_hparams *hp = skv_model_hparams(m);
    /* the table in ../shared/models/README.md */
    assert_int_equal(hp->n_embd, 64);
    assert_int_equal(hp->n_layer, 5);
    assert_int_equal(hp->n_head, 8);
    assert_int_equal(hp->n_head_kv, 4);
    assert_int_equal(hp->head_dim, 8);
    assert_int_equal(hp->n_ff, 172);
    assert_int_equal(hp->n_vocab, 512);
    assert_int_equal(hp->n_ctx_train, 512);
    assert_true(hp->rope_theta == 10000.0f);
    assert_true(hp->norm_eps == 1e-5f);
    assert_true(hp->tied_output);
    assert_string_equal(hp->arch, "llama");
    assert_int_equal(hp->rope_mode, SKV_ROPE_ADJACENT);
    assert_true(hp->rope_freq_scale == 1.0f);
    assert_false(hp->rope_freq_factors);
    assert_false(hp->qkv_bias);
    assert_false(hp->qk_norm);
    assert_int_equal(skv_model_weight_type(m), SKV_TYPE_F32);
    skv_model_free(m);
}

/* sparsekv.h's convention: given a NULL object, accessors return 0 or NULL, fallible calls
 * SKV_ERR_INVALID_ARG (constructors NULL), skv_context_reset does nothing (an embedder's
 * clean-up path must not crash on what failed to be made). And a context runs at most
 * SKV_MAX_THREADS threads: more is the caller's error, not a lack of memory. */
static void test_null_objects_and_thread_limit(void **state) {
    (void)state;
    skv_err err = {0};
    assert_null(skv_model_hparams(NULL));
    assert_null(skv_model_vocab(NULL));
    assert_true(skv_model_weight_bytes(NULL) == 0);
    assert_null(skv_context_model(NULL));
    assert_int_equal(skv_context_n_past(NULL), 0);
    assert_int_equal(skv_context_n_ctx(NULL), 0);
    assert_int_equal(skv_context_n_threads(NULL), 0);
    assert_null(skv_context_cache(NULL));
    assert_null(skv_context_cache_const(NULL));
    int n = 5;
    assert_null(skv_context_captured_queries(NULL, 0, &n, NULL));
    assert_int_equal(n, 0);
    skv_context_reset(NULL);
    assert_null(skv_context_clone(NULL, &err));
    assert_int_equal(err.status, SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_n_layer(NULL), 0);
    assert_int_equal(skv_cache_n_head_kv(NULL), 0);
    assert_int_equal(skv_cache_head_dim(NULL), 0);
    assert_int_equal(skv_cache_n_past(NULL), 0);
    assert_true(skv_cache_bytes(NULL, -1) == 0);
    assert_true(skv_cache_bytes_allocated(NULL) == 0);
    float logits[2] = {1, 2};
    assert_int_equal(skv_sampler_sample(NULL, logits, 2), -1);

    skv_model *m = skv_model_load(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(m);
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = SKV_MAX_THREADS + 1;
    assert_null(skv_context_new(m, &cp, &err));
    assert_int_equal(err.status, SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "at most 1024 threads"));
    skv_model_free(m);
}

/* skv_context_reserve: the room comes now, the forward calls that fill it do not grow the cache
 * (its allocated bytes stay as they were) and give the same logits as without it */
static void test_context_reserve(void **state) {
    (void)state;
    skv_err err = {0};
    skv_model *m = skv_model_load(test_stories_path(), &err);
    if (!m) skip();
    skv_context_params p = skv_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 1;
    skv_context *a = skv_context_new(m, &p, &err), *b = skv_context_new(m, &p, &err);
    assert_true(a && b);
    assert_int_equal(skv_context_reserve(a, -1, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_context_reserve(NULL, 1, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_context_reserve(a, 40, &err), SKV_OK);
    const uint64_t room = skv_cache_bytes_allocated(skv_context_cache_const(a));
    assert_true(room > 0);
    assert_int_equal(skv_context_reserve(a, 1000, &err), SKV_OK); /* capped at n_ctx */
    const uint64_t full = skv_cache_bytes_allocated(skv_context_cache_const(a));
    assert_true(full > room);
    const int V = skv_model_hparams(m)->n_vocab;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < 64; i++) {
        const int32_t t = 1 + (i * 37) % (V - 1);
        assert_int_equal(skv_forward(a, &t, 1, SKV_LOGITS_LAST, la, &err), SKV_OK);
        assert_int_equal(skv_forward(b, &t, 1, SKV_LOGITS_LAST, lb, &err), SKV_OK);
        assert_memory_equal(la, lb, sizeof(float) * (size_t)V);
        assert_true(skv_cache_bytes_allocated(skv_context_cache_const(a)) == full);
    }
    free(la), free(lb);
    skv_context_free(a), skv_context_free(b);
    skv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unmodified_copy_loads),
        cmocka_unit_test(test_missing_hparam),
        cmocka_unit_test(test_inconsistent_hparams),
        cmocka_unit_test(test_wrong_architecture),
        cmocka_unit_test(test_missing_or_misshapen_tensor),
        cmocka_unit_test(test_hparams_read),
        cmocka_unit_test(test_null_objects_and_thread_limit),
        cmocka_unit_test(test_context_reserve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
