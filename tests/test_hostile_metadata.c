/* test_hostile_metadata.c — a well-formed model that lies or is broken in its numbers: a claimed
 * context of 2^28 tokens must not make the default eval generate 234M-token samples, and NaN
 * weights must stop generate/logits/eval with "non-finite logits at position N" (exit 1) instead
 * of printing garbage or blaming the engine. Each file is stories260K rewritten with one change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gguf.h"
#include "sparsekv.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *changed_key;
static bool skip_changed(const char *key) {
    return changed_key && strcmp(key, changed_key) == 0;
}

/* stories260K with key (a u32) set to value and/or tensor nan_tensor's first element NaN. */
static const char *rewrite(const char *key, uint32_t value, const char *nan_tensor) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_non_null(w);
    changed_key = key;
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, skip_changed), SKV_OK);
    if (key) assert_int_equal(skv_gguf_writer_set_u32(w, key, value), SKV_OK);
    void *copy = NULL;
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        const void *data = t->data;
        if (nan_tensor && strcmp(t->name, nan_tensor) == 0) {
            assert_int_equal(t->type, SKV_TYPE_F32);
            copy = malloc(t->size);
            assert_non_null(copy);
            memcpy(copy, t->data, t->size);
            ((float *)copy)[0] = NAN;
            data = copy;
        }
        assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data),
                         SKV_OK);
    }
    static char path[512];
    snprintf(path, sizeof path, "%s", test_tmp_path(".gguf"));
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
    free(copy);
    return path;
}

static void test_huge_context_is_bounded(void **state) {
    (void)state;
    const char *path = rewrite("llama.context_length", 1u << 28, NULL);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", test_tmp_path(".d"));
    /* Without the bound this generates 8 samples of 234,881,024 tokens (and fails to allocate
     * or runs for days); with it the samples are at most 3584 tokens (7/8 of 4096). */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 300 %s eval -m %s --policies sink_recent --keep 0.5 --samples 1 --out %s "
             "2>&1",
             test_cli(), path, dir);
    int status = -1;
    char *out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "generated samples are 3584 (--data for longer"));
    assert_non_null(strstr(out, "of 3584 tokens"));
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unlink(path);
}

static void test_nan_weights_are_reported(void **state) {
    (void)state;
    const char *path = rewrite(NULL, 0, "blk.2.ffn_norm.weight");
    /* The library says where it happened. */
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    assert_non_null(m);
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = 1;
    skv_context *ctx = skv_context_new(m, &cp, &err);
    assert_non_null(ctx);
    int32_t toks[3] = {1, 403, 407};
    float *logits = malloc(3 * sizeof(float) * (size_t)skv_model_hparams(m)->n_vocab);
    assert_non_null(logits);
    assert_int_equal(skv_forward(ctx, toks, 3, SKV_LOGITS_ALL, logits, &err), SKV_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "non-finite logits at position 0"));
    /* a prefill without logits says it too, from the hidden state (it said SKV_OK) */
    skv_context_reset(ctx);
    assert_int_equal(skv_forward(ctx, toks, 3, SKV_LOGITS_NONE, NULL, &err), SKV_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "non-finite hidden state at position 0"));
    free(logits);
    skv_context_free(ctx);
    skv_model_free(m);

    /* Every command that computes logits exits 1 with that sentence. */
    char f32[600], ev[600];
    snprintf(f32, sizeof f32, "%s", test_tmp_path(".f32"));
    snprintf(ev, sizeof ev, "%s", test_tmp_path(".ev"));
    const char *cmds[] = {"generate -n 4 --temp 0", "logits -p 'Once upon' -o",
                          "eval --policies sink_recent --keep 0.5 --samples 1 --out",
                          "bench -p 16 -n 4 -t 1"};
    const char *outs[] = {"", f32, ev, ""}; /* each command's output path, if any */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "%s %s %s -m %s 2>&1", test_cli(), cmds[i], outs[i], path);
        int status = -1;
        char *out = test_run(cmd, &status);
        if (status != 1 || !strstr(out, "non-finite logits at position"))
            fail_msg("'%s' gave exit %d and:\n%s", cmds[i], status, out);
        free(out);
    }
    char rm[1300];
    snprintf(rm, sizeof rm, "rm -rf '%s' '%s'", f32, ev);
    assert_int_equal(system(rm), 0);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_context_is_bounded),
        cmocka_unit_test(test_nan_weights_are_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
