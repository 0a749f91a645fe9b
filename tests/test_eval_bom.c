/* test_eval_bom.c — a UTF-8 byte order mark at the start of a --data JSONL file is accepted and
 * skipped (issue 12; Windows editors write one); anywhere else it is still bad JSON. */
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

static const char *write_file(const char *text) {
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_bom(void **state) {
    (void)state;
    skv_err err = {0};
    skv_model *m = skv_model_load(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(m);
    const skv_vocab *vocab = skv_model_vocab(m);
    skv_eval_split sp = {5, 2, 3, NULL};
    skv_eval_dataset ds;
    const char *path =
        write_file("\xef\xbb\xbf{\"tokens\": [1, 10, 11, 12, 13, 14, 15, 16, 17, 18]}\n"
                   "{\"tokens\": [1, 20, 21, 22, 23, 24, 25, 26, 27, 28]}\n");
    assert_int_equal(skv_eval_load_jsonl(path, vocab, &sp, 512, 2, 0, 0, 1, &ds, &err), SKV_OK);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.samples[0].line, 1);
    assert_int_equal(ds.samples[0].tokens[0], 1);
    assert_int_equal(ds.samples[0].tokens[5], 14);
    assert_int_equal(ds.samples[1].tokens[9], 28);
    skv_eval_dataset_free(&ds);
    unlink(path);
    /* a BOM that is not at the start of the file is no JSON */
    path = write_file("{\"tokens\": [1, 10, 11, 12, 13, 14, 15, 16, 17, 18]}\n"
                      "\xef\xbb\xbf{\"tokens\": [1, 20, 21, 22, 23, 24, 25, 26, 27, 28]}\n");
    assert_int_equal(skv_eval_load_jsonl(path, vocab, &sp, 512, 2, 0, 0, 1, &ds, &err),
                     SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, ":2: bad JSON"));
    unlink(path);
    skv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
