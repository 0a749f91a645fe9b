/* test_eval_data.c — how eval cuts samples into prefix | window | continuation, and the JSONL
 * loader (shapes, line-numbered errors, skipped samples, shards). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eval/eval.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int32_t seq[1000];

static bool cut(int n, double p, double w, double c, int n_ctx, int greedy, skv_eval_sample *s,
                char *why) {
    skv_eval_split sp = {p, w, c, NULL};
    memset(s, 0, sizeof *s);
    return skv_eval_cut(seq, n, &sp, n_ctx, greedy, s, why, 256);
}

static void expect_cut(int n, double p, double w, double c, int n_ctx, int greedy, int T, int W,
                       int C) {
    skv_eval_sample s;
    char why[256];
    if (!cut(n, p, w, c, n_ctx, greedy, &s, why)) fail_msg("refused: %s", why);
    assert_int_equal(s.n_prefix, T);
    assert_int_equal(s.n_window, W);
    assert_int_equal(s.n_cont, C);
    for (int i = 0; i < T + W + C; i++) assert_int_equal(s.tokens[i], seq[i]); /* the first */
    free(s.tokens);
}

static void expect_refused(int n, double p, double w, double c, int n_ctx, int greedy,
                           const char *msg) {
    skv_eval_sample s;
    char why[256];
    assert_false(cut(n, p, w, c, n_ctx, greedy, &s, why));
    if (!strstr(why, msg)) fail_msg("'%s' does not say '%s'", why, msg);
    /* a count the user cannot act on: "prefix -91" */
    for (const char *q = why; *q; q++)
        if (q[0] == '-' && q[1] >= '0' && q[1] <= '9') fail_msg("'%s' has a negative count", why);
}

static void test_cut(void **state) {
    (void)state;
    for (int i = 0; i < 1000; i++) seq[i] = i;
    /* rest | 32 | 64 of 448 tokens in a 512 context: the default */
    expect_cut(448, 0, 32, 64, 512, 32, 352, 32, 64);
    /* rest is bounded by the room beside the greedy run */
    expect_cut(1000, 0, 32, 64, 512, 32, 384, 32, 64);
    /* counts take the first tokens */
    expect_cut(448, 100, 10, 20, 512, 8, 100, 10, 20);
    /* fractions of the tokens: 0.6 / 0.1 / 0.3 of 78 = 46.8, 7.8, 23.4 */
    expect_cut(78, 0.6, 0.1, 0.3, 512, 8, 47, 8, 23);
    /* rounding over by one token: 0.5 / 0.25 / 0.25 of 10 = 5, 2.5 -> 2, 2.5 -> 2 fits; of 6:
     * 3, 1.5 -> 2, 1.5 -> 2 = 7 > 6: the prefix gives one back */
    expect_cut(6, 0.5, 0.25, 0.25, 512, 1, 2, 2, 2);
    expect_refused(20, 0, 8, 16, 512, 8, "too short");
    expect_refused(100, 80, 10, 20, 512, 8, "too short");
    expect_refused(100, 0, 0.001, 20, 512, 8, "too short"); /* window rounds to 0 */
    /* the message names the limit that failed and the options that move it */
    expect_refused(11, 0, 32, 64, 512, 32,
                   "need at least 97 tokens and the sample has 11: lower --window or "
                   "--continuation");
    expect_refused(100, 0, 0.001, 20, 512, 8, "--window 0.001 of the sample's 100 tokens is 0");
    expect_refused(100, 80, 10, 20, 512, 8, "lower --prefix, --window or --continuation");
    /* a short context: --greedy takes the room, not the sample's length (112 tokens) */
    expect_refused(112, 0, 32, 64, 128, 32,
                   "the model's context of 128 leaves 96 beside --greedy 32: lower --greedy, "
                   "--window or --continuation");
    expect_refused(112, 0, 32, 64, 128, 127, "lower --greedy");
    expect_refused(112, 0, 32, 64, 128, 200, "--greedy 200 leaves 0 of the model's context");
    /* T + W + max(C, G) must fit the context */
    expect_refused(500, 400, 32, 64, 480, 8, "too long for the model's context of 480");
    expect_refused(500, 400, 32, 64, 480, 8, "= 496 tokens: lower --prefix, --window or --cont");
    expect_refused(500, 400, 32, 8, 500, 90, "= 522 tokens: lower --prefix, --window or --greedy");
    expect_cut(500, 400, 32, 64, 512 + 8, 70, 400, 32, 64);
}

static const skv_vocab *vocab;
static skv_vocab *own_vocab;

static int setup(void **state) {
    (void)state;
    skv_err err = {0};
    /* llama2.c's tok512.bin, or (a plain clone) the same vocabulary from stories260K.gguf */
    const char *tok = test_fixture_path("stories260K/tok512.bin");
    own_vocab = tok ? skv_vocab_load_llama2c(tok, 512, &err)
                    : skv_vocab_load(test_fixture_path("stories260K/stories260K.gguf"), &err);
    if (!own_vocab) fprintf(stderr, "cannot load the stories260K vocabulary: %s\n", err.msg);
    vocab = own_vocab;
    return vocab ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    skv_vocab_free(own_vocab);
    return 0;
}

static const char *write_file(const char *content) {
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "w");
    fputs(content, f);
    fclose(f);
    return path;
}

static void test_load(void **state) {
    (void)state;
    /* tokens lines (ids used as they are), a blank line, a text line with escapes */
    const char *path = write_file(
        "{\"tokens\": [1, 10, 11, 12, 13, 14, 15, 16, 17, 18]}\n"
        "\n"
        "   \n"
        "{\"tokens\": [1, 20, 21]}\n"
        "{\"text\": \"Lily said \\\"hi\\\" to the dog.\\nThe dog ran\\u0021 Lily was happy.\"}\n"
        "{\"context\": \"Once upon a time\", \"window\": \"there was\", \"continuation\": \"a "
        "cat.\"}\n");
    skv_eval_split sp = {5, 2, 3, NULL};
    skv_eval_dataset ds;
    skv_err err = {0};
    assert_int_equal(skv_eval_load_jsonl(path, vocab, &sp, 512, 2, 0, 0, 1, &ds, &err), SKV_OK);
    assert_int_equal(ds.n_total, 4);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.n_skipped, 1);
    assert_int_equal(ds.n_warnings, 1);
    assert_non_null(strstr(ds.warnings[0], ":4: skipped: sample too short"));
    assert_int_equal(ds.samples[0].index, 0);
    assert_int_equal(ds.samples[0].line, 1);
    assert_int_equal(ds.samples[0].tokens[5], 14);
    assert_int_equal(ds.samples[0].n_cont, 3);
    assert_int_equal(ds.samples[1].index, 2);
    assert_int_equal(ds.samples[1].line, 5);
    assert_int_equal(ds.samples[1].tokens[0], skv_vocab_bos(vocab));
    /* the explicit parts keep their own sizes */
    const skv_eval_sample *e = &ds.samples[2];
    assert_int_equal(e->line, 6);
    int32_t ctx[32], win[32], cont[32];
    int nc = skv_tokenize(vocab, "Once upon a time", 16, true, ctx, 32);
    int nw = skv_tokenize(vocab, "there was", 9, false, win, 32);
    int nn = skv_tokenize(vocab, "a cat.", 6, false, cont, 32);
    assert_int_equal(e->n_prefix, nc);
    assert_int_equal(e->n_window, nw);
    assert_int_equal(e->n_cont, nn);
    assert_memory_equal(e->tokens, ctx, (size_t)nc * sizeof *ctx);
    assert_memory_equal(e->tokens + nc, win, (size_t)nw * sizeof *win);
    assert_memory_equal(e->tokens + nc + nw, cont, (size_t)nn * sizeof *cont);
    skv_eval_dataset_free(&ds);

    /* shard 1 of 2 gets indices 1 and 3; max_samples 2 keeps indices 0 and 1 */
    assert_int_equal(skv_eval_load_jsonl(path, vocab, &sp, 512, 2, 0, 1, 2, &ds, &err), SKV_OK);
    assert_int_equal(ds.n + ds.n_skipped, 2);
    assert_int_equal(ds.samples[0].index, 3);
    skv_eval_dataset_free(&ds);
    assert_int_equal(skv_eval_load_jsonl(path, vocab, &sp, 512, 2, 2, 0, 1, &ds, &err), SKV_OK);
    assert_int_equal(ds.n_total, 2);
    assert_int_equal(ds.n, 1);
    assert_int_equal(ds.n_skipped, 1);
    skv_eval_dataset_free(&ds);
    unlink(path);
}

static void expect_load_error(const char *content, skv_status st, const char *msg) {
    const char *path = write_file(content);
    skv_eval_split sp = {5, 2, 3, NULL};
    skv_eval_dataset ds;
    skv_err err = {0};
    assert_int_equal(skv_eval_load_jsonl(path, vocab, &sp, 512, 2, 0, 0, 1, &ds, &err), st);
    if (!strstr(err.msg, msg)) fail_msg("'%s' does not say '%s'", err.msg, msg);
    assert_non_null(strstr(err.msg, path));
    assert_null(ds.samples);
    unlink(path);
}

static void test_load_errors(void **state) {
    (void)state;
    expect_load_error("{\"tokens\": [1, 2, 3]}\n{\"text\": \"unterminated}\n", SKV_ERR_FORMAT,
                      ":2: bad JSON: at byte");
    expect_load_error("\n\n{\"text\": 5}\n", SKV_ERR_FORMAT, ":3: expected an object");
    expect_load_error("[\"text\"]\n", SKV_ERR_FORMAT, ":1: expected an object");
    expect_load_error("{\"context\": \"a\", \"window\": \"b\"}\n", SKV_ERR_FORMAT,
                      ":1: expected an object");
    expect_load_error("{\"tokens\": [1, 2, 600]}\n", SKV_ERR_FORMAT, ":1: \"tokens\"[2]");
    expect_load_error("{\"tokens\": [1, 2.5]}\n", SKV_ERR_FORMAT, ":1: \"tokens\"[1]");
    expect_load_error("{\"text\": \"\\ud800\"}\n", SKV_ERR_FORMAT, "surrogate");
    skv_eval_split sp = {5, 2, 3, NULL};
    skv_eval_dataset ds;
    skv_err err = {0};
    assert_int_equal(
        skv_eval_load_jsonl("/nonexistent/x.jsonl", vocab, &sp, 512, 2, 0, 0, 1, &ds, &err),
        SKV_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.jsonl"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
