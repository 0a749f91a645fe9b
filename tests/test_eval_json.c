/* test_eval_json.c — the JSON reader eval uses for data lines and results.jsonl, and its
 * writers (round trips, escapes, hostile input). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static skv_json *parse(const char *s, skv_err *err) {
    return skv_json_parse(s, strlen(s), err);
}

static void test_values(void **state) {
    (void)state;
    skv_err err = {0};
    skv_json *v =
        parse(" {\"a\": [1, -2.5e2, true, false, null, {}], \"b\": \"x\", \"a\": 3} ", &err);
    assert_non_null(v);
    assert_int_equal(v->type, SKV_JSON_OBJECT);
    assert_int_equal(v->n, 3);
    long l;
    assert_true(skv_json_get_int(v, "a", &l)); /* the last of a repeated name */
    assert_int_equal(l, 3);
    const skv_json *arr = &v->items[0];
    assert_int_equal(arr->type, SKV_JSON_ARRAY);
    assert_int_equal(arr->n, 6);
    assert_true(arr->items[0].number == 1.0);
    assert_true(arr->items[1].number == -250.0);
    assert_true(arr->items[2].type == SKV_JSON_BOOL && arr->items[2].boolean);
    assert_true(arr->items[3].type == SKV_JSON_BOOL && !arr->items[3].boolean);
    assert_int_equal(arr->items[4].type, SKV_JSON_NULL);
    assert_true(arr->items[5].type == SKV_JSON_OBJECT && arr->items[5].n == 0);
    const char *s;
    assert_true(skv_json_get_string(v, "b", &s));
    assert_string_equal(s, "x");
    assert_false(skv_json_get_string(v, "a", &s)); /* wrong type */
    assert_null(skv_json_get(v, "missing"));
    skv_json_free(v);
    /* 1e999 is how infinities are written */
    v = parse("[1e999, -1e999, 0.5]", &err);
    assert_non_null(v);
    assert_true(isinf(v->items[0].number) && v->items[0].number > 0);
    assert_true(isinf(v->items[1].number) && v->items[1].number < 0);
    skv_json_free(v);
}

static void test_escapes(void **state) {
    (void)state;
    skv_err err = {0};
    skv_json *v = parse("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t e\\u00e9 eur\\u20ac "
                        "smile\\ud83d\\ude00 nul\\u0000!\"",
                        &err);
    assert_non_null(v);
    const char want[] = "q\" b\\ s/ \b\f\n\r\t e\xc3\xa9 eur\xe2\x82\xac smile\xf0\x9f\x98\x80 "
                        "nul\0!";
    assert_int_equal(v->str_len, sizeof want - 1);
    assert_memory_equal(v->str, want, sizeof want - 1);
    skv_json_free(v);
    /* raw UTF-8 passes through */
    v = parse("\"caf\xc3\xa9\"", &err);
    assert_non_null(v);
    assert_string_equal(v->str, "caf\xc3\xa9");
    skv_json_free(v);
}

static void test_errors(void **state) {
    (void)state;
    const char *bad[] = {
        "",
        "{",
        "{\"a\" 1}",
        "{\"a\":1,}",
        "[1,]",
        "[1 2]",
        "\"abc",
        "\"a\nb\"",
        "tru",
        "nul",
        "01",
        "1.",
        "-",
        "1e",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\ud83d\"",
        "\"\\ude00\"",
        "\"\\ud83d\\u0041\"",
        "{\"a\":1} x",
        "{a:1}",
        "[1]]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        skv_err err = {0};
        skv_json *v = parse(bad[i], &err);
        if (v) fail_msg("accepted bad JSON #%zu: %s", i, bad[i]);
        assert_int_equal(err.status, SKV_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "at byte"));
    }
    /* nesting is bounded, so hostile input cannot exhaust the stack */
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = 0;
    skv_err err = {0};
    assert_null(parse(deep, &err));
    assert_non_null(strstr(err.msg, "nesting"));
    char ok[140];
    memset(ok, '[', 60);
    memset(ok + 60, ']', 60);
    ok[120] = 0;
    skv_json *v = parse(ok, &err);
    assert_non_null(v);
    skv_json_free(v);
    /* the error names the byte */
    assert_null(parse("{\"a\": tru}", &err));
    assert_non_null(strstr(err.msg, "at byte 7"));
}

static char *capture(void (*fn)(FILE *, const void *), const void *arg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f, arg);
    fclose(f);
    return buf;
}

static void write_str(FILE *f, const void *s) {
    skv_json_write_string(f, s, strlen(s));
}

static void write_dbl(FILE *f, const void *x) {
    skv_json_write_double(f, *(const double *)x);
}

static void test_write_roundtrip(void **state) {
    (void)state;
    const char *strs[] = {"plain", "quote \" back \\ nl \n tab \t cr \r", "ctl \x01\x1f del \x7f",
                          "utf8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        char *out = capture(write_str, strs[i]);
        skv_err err = {0};
        skv_json *v = parse(out, &err);
        assert_non_null(v);
        assert_string_equal(v->str, strs[i]);
        skv_json_free(v);
        free(out);
    }
    /* stray bytes become \u00XX (so the file stays valid UTF-8) */
    char *out = capture(write_str, "a\xff"
                                   "b\xc3");
    assert_string_equal(out, "\"a\\u00ffb\\u00c3\"");
    free(out);
    out = capture(write_str, "\xed\xa0\x80"); /* an encoded surrogate is not valid UTF-8 */
    assert_string_equal(out, "\"\\u00ed\\u00a0\\u0080\"");
    free(out);

    double xs[] = {0.1,           1.0 / 3.0, -2.5,   1e-300,
                   123456789.125, 0.0,       5e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        out = capture(write_dbl, &xs[i]);
        skv_err err = {0};
        skv_json *v = parse(out, &err);
        assert_non_null(v);
        assert_true(v->number == xs[i]); /* the same bits back */
        skv_json_free(v);
        free(out);
    }
    double x = 0.1;
    out = capture(write_dbl, &x);
    assert_string_equal(out, "0.1"); /* shortest form */
    free(out);
    x = INFINITY;
    out = capture(write_dbl, &x);
    assert_string_equal(out, "1e999");
    free(out);
    x = NAN;
    out = capture(write_dbl, &x);
    assert_string_equal(out, "null");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_write_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
