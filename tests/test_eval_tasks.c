/* test_eval_tasks.c — the kv and multikey prompt generators (eval/tasks.c), parsed back
 * independently, and their data sets on the retrieval model's character vocabulary (built here
 * by hand: <unk>, <s>, </s>, 256 byte tokens, ' ', '!'..'~'), where a prompt of L bytes is
 * exactly L + 2 tokens (BOS, the dummy-prefix space, one token per byte). */
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

static const char kv_intro[] = "Here is a list of keys and values. Remember them.";

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static bool is_value(const char *v) {
    if (strlen(v) != 5 || v[0] == '0') return false;
    for (int i = 0; i < 5; i++)
        if (v[i] < '0' || v[i] > '9') return false;
    return true;
}

static void check_kv(uint64_t sample, double depth, int n) {
    char answer[16];
    char *t = skv_task_prompt(SKV_TASK_KV, sample, depth, n, answer);
    assert_non_null(t);
    assert_int_equal(strncmp(t, kv_intro, strlen(kv_intro)), 0);
    const char *p = t + strlen(kv_intro);
    char keys[64][4], vals[64][6];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        /* " abc: 12345." */
        assert_int_equal(p[0], ' ');
        for (int c = 1; c <= 3; c++) assert_true(p[c] >= 'a' && p[c] <= 'z');
        assert_int_equal(p[4], ':');
        assert_int_equal(p[5], ' ');
        assert_int_equal(p[11], '.');
        memcpy(keys[i], p + 1, 3);
        keys[i][3] = 0;
        memcpy(vals[i], p + 6, 5);
        vals[i][5] = 0;
        assert_true(is_value(vals[i]));
        for (int j = 0; j < i; j++) assert_string_not_equal(keys[j], keys[i]);
        p += 12;
    }
    int asked = (int)skv_round_half_even(depth * (n - 1));
    char q[96];
    snprintf(q, sizeof q, " What is the value of %s? The value of %s is", keys[asked], keys[asked]);
    assert_string_equal(p, q);
    assert_string_equal(answer, vals[asked]);
    free(t);
}

static void test_kv_prompt(void **state) {
    (void)state;
    check_kv(0, 0.0, 1);
    check_kv(3, 0.5, 9); /* asked pair 4 */
    check_kv(7, 0.1, 40);
    check_kv(7, 0.9, 40);
    check_kv(11, 1.0, 64);
    /* deterministic, and different samples differ */
    char a1[16], a2[16], b[16];
    char *x = skv_task_prompt(SKV_TASK_KV, 5, 0.5, 20, a1);
    char *y = skv_task_prompt(SKV_TASK_KV, 5, 0.5, 20, a2);
    char *z = skv_task_prompt(SKV_TASK_KV, 6, 0.5, 20, b);
    assert_string_equal(x, y);
    assert_string_equal(a1, a2);
    assert_string_not_equal(x, z);
    free(x);
    free(y);
    free(z);
}

static const char *const fillers[5] = {" The grass is green.", " The sky is blue.",
                                       " The sun is yellow.", " Here we go.",
                                       " There and back again."};

static void check_multikey(uint64_t sample, double depth, int n_filler) {
    char answer[16];
    char *t = skv_task_prompt(SKV_TASK_MULTIKEY, sample, depth, n_filler, answer);
    assert_non_null(t);
    /* the needles, and the question's " The magic number for NAME is" */
    assert_int_equal(count(t, " The magic number for "), SKV_MULTIKEY_NEEDLES + 1);
    assert_int_equal(count(t, "What is the magic number for "), 1);
    /* the question names one needle; its value is the answer */
    const char *q = strstr(t, " What is the magic number for ");
    char name[32];
    assert_int_equal(sscanf(q, " What is the magic number for %31[a-z]?", name), 1);
    char needle[96];
    snprintf(needle, sizeof needle, " The magic number for %s is %s.", name, answer);
    assert_int_equal(count(t, needle), 1);
    assert_true(is_value(answer));
    char tail[128];
    snprintf(tail, sizeof tail, " What is the magic number for %s? The magic number for %s is",
             name, name);
    assert_string_equal(q, tail);
    /* the asked needle sits after round_half_even(depth * n) filler sentences */
    const char *at = strstr(t, needle);
    int before = 0;
    for (const char *p = t; p < at;) {
        int hit = 0;
        for (int f = 0; f < 5 && !hit; f++)
            if (!strncmp(p, fillers[f], strlen(fillers[f]))) hit = (int)strlen(fillers[f]);
        if (hit) {
            before++;
            p += hit;
        } else {
            p++;
        }
    }
    assert_int_equal(before, (int)skv_round_half_even(depth * n_filler));
    /* all the filler, in order */
    int total = 0;
    for (int f = 0; f < 5; f++) total += count(t, fillers[f]);
    assert_int_equal(total, n_filler);
    free(t);
}

static void test_multikey_prompt(void **state) {
    (void)state;
    for (uint64_t s = 0; s < 20; s++) {
        check_multikey(s, 0.0, 10);
        check_multikey(s, 0.3, 17);
        check_multikey(s, 1.0, 23);
    }
}

/* The character vocabulary of the retrieval model as a llama2.c tokenizer.bin. */
static const char *write_char_vocab(void) {
    bbuf b = {0};
    uint32_t maxlen = 6;
    bbuf_put(&b, &maxlen, 4);
    const char *special[3] = {"<unk>", "\n<s>\n", "\n</s>\n"};
    char piece[16];
    float score = 0.0f;
    for (int i = 0; i < 3 + 256 + 95; i++) {
        const char *s = piece;
        if (i < 3)
            s = special[i];
        else if (i < 259)
            snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else
            piece[0] = (char)(' ' + (i - 259)), piece[1] = 0;
        uint32_t len = (uint32_t)strlen(s);
        bbuf_put(&b, &score, 4);
        bbuf_put(&b, &len, 4);
        bbuf_put(&b, s, len);
    }
    const char *path = test_tmp_path(".bin");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    free(b.p);
    return path;
}

static void check_dataset(skv_vocab *v, skv_eval_task_kind kind) {
    const double depths[3] = {0.1, 0.5, 0.9};
    skv_eval_dataset ds;
    skv_err err = {0};
    const int budget = kind == SKV_TASK_KV ? 300 : 500, window = 32;
    skv_status st = skv_eval_task_dataset(v, kind, 4, depths, 3, budget, window, 0, 1, &ds, &err);
    if (st) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    assert_int_equal(ds.n, 12);
    assert_int_equal(ds.n_total, 12);
    for (int i = 0; i < ds.n; i++) {
        const skv_eval_sample *s = &ds.samples[i];
        assert_int_equal(s->index, i / 3);
        assert_int_equal(s->depth_index, i % 3);
        assert_int_equal(s->n_window, window);
        int n = s->n_prefix + s->n_window;
        assert_true(n <= budget);
        /* the largest prompt that fits: one more pair (12 bytes) or filler sentence (<= 22
         * bytes) would not */
        assert_true(n > budget - (kind == SKV_TASK_KV ? 12 : 22));
        assert_int_equal(s->tokens[0], 1);   /* BOS */
        assert_int_equal(s->tokens[1], 259); /* the dummy-prefix space */
        /* tokens spell the prompt with the sample's key as its answer */
        char answer[16];
        int size = kind == SKV_TASK_KV ? (n - 2 - (int)strlen(kv_intro) - 46) / 12 : -1;
        if (kind == SKV_TASK_KV) {
            char *t = skv_task_prompt(kind, (uint64_t)s->index, s->depth, size, answer);
            assert_non_null(t);
            assert_int_equal((int)strlen(t) + 2, n);
            for (int k = 0; k < n - 2; k++)
                assert_int_equal(s->tokens[k + 2], t[k] == ' ' ? 259 : 260 + t[k] - '!');
            assert_string_equal(answer, s->key);
            free(t);
        }
        assert_true(is_value(s->key));
    }
    skv_eval_dataset_free(&ds);
    /* sharding keeps the samples i % 2 == 1 */
    assert_int_equal(skv_eval_task_dataset(v, kind, 4, depths, 3, budget, window, 1, 2, &ds, &err),
                     SKV_OK);
    assert_int_equal(ds.n, 6);
    for (int i = 0; i < ds.n; i++) assert_int_equal(ds.samples[i].index % 2, 1);
    skv_eval_dataset_free(&ds);
    /* a budget below the shortest prompt is an error, not a crash */
    assert_int_not_equal(skv_eval_task_dataset(v, kind, 2, depths, 1, 70, 32, 0, 1, &ds, &err),
                         SKV_OK);
}

static void test_datasets(void **state) {
    (void)state;
    skv_err err = {0};
    skv_vocab *v = skv_vocab_load_llama2c(write_char_vocab(), 0, &err);
    assert_non_null(v);
    check_dataset(v, SKV_TASK_KV);
    check_dataset(v, SKV_TASK_MULTIKEY);
    skv_vocab_free(v);
}

/* Rows, summary, run.json and the figure name the task that ran (they used to say "passkey"
 * for kv and multikey), and eval-merge reads them back. */
static void test_results_name_the_task(void **state) {
    (void)state;
    const char *tasks[] = {"kv", "multikey"};
    for (int t = 0; t < 2; t++) {
        char dir[256], merged[300], cmd[4096];
        snprintf(dir, sizeof dir, "%s", test_tmp_path(".d"));
        snprintf(merged, sizeof merged, "%s.m", dir);
        snprintf(cmd, sizeof cmd,
                 "%s eval -m models/retrieval.gguf --task %s --samples 1 --depths 0.5 "
                 "--policies sink_recent --keep 0.25 --out %s --quiet >/dev/null 2>&1 && "
                 "%s eval-merge %s --out %s >/dev/null 2>&1 && "
                 "head -c 40 %s/results.jsonl && echo && sed -n 2p %s/summary.csv && "
                 "sed -n 2p %s/summary.csv && grep -c '\"task\":\"%s\"' %s/run.json && "
                 "grep -m1 'multiplot title' %s/plots.gp",
                 test_cli(), tasks[t], dir, test_cli(), dir, merged, dir, dir, merged, tasks[t],
                 dir, dir);
        int status = -1;
        char *out = test_run(cmd, &status);
        assert_int_equal(status, 0);
        char want[64];
        snprintf(want, sizeof want, "{\"task\":\"%s\"", tasks[t]);
        assert_non_null(strstr(out, want));
        snprintf(want, sizeof want, "\n%s,seed,original,sink_recent,", tasks[t]);
        const char *first = strstr(out, want);
        assert_non_null(first);
        assert_non_null(strstr(first + 1, want)); /* the merged summary too */
        snprintf(want, sizeof want, "'%s task: exact-match accuracy", tasks[t]);
        assert_non_null(strstr(out, want));
        assert_null(strstr(out, "passkey"));
        free(out);
        snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, merged);
        assert_int_equal(system(cmd), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_prompt),
        cmocka_unit_test(test_multikey_prompt),
        cmocka_unit_test(test_datasets),
        cmocka_unit_test(test_results_name_the_task),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
