/* test_eval_passkey.c — the needle-in-a-haystack prompt generator and the exact-match scorer. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eval/eval.h"

#include <stdlib.h>
#include <string.h>

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* filler sentences in hay */
static int sentences(const char *hay) {
    return count(hay, "The grass is green.") + count(hay, "The sky is blue.") +
           count(hay, "The sun is yellow.") + count(hay, "Here we go.") +
           count(hay, "There and back again.");
}

static void test_key(void **state) {
    (void)state;
    char a[16], b[16], c[16];
    skv_passkey_key(0, a);
    skv_passkey_key(0, b);
    skv_passkey_key(1, c);
    assert_string_equal(a, b); /* deterministic */
    assert_string_not_equal(a, c);
    for (uint64_t s = 0; s < 200; s++) {
        skv_passkey_key(s, a);
        assert_int_equal(strlen(a), 5);
        for (int i = 0; i < 5; i++) assert_true(a[i] >= '0' && a[i] <= '9');
        assert_true(a[0] != '0'); /* 10000..99999 */
    }
}

/* Builds a prompt and checks where its needle landed. */
static void check_prompt(const char *key, double depth, int n_filler, int want_before) {
    skv_passkey_prompt p;
    skv_err err = {0};
    assert_int_equal(skv_passkey_make(key, depth, n_filler, &p, &err), SKV_OK);
    assert_int_equal(strlen(p.text), p.len);
    assert_int_equal(p.n_filler, n_filler);
    assert_int_equal(p.n_before, want_before);
    /* the key appears exactly once, inside the needle, at needle_at */
    assert_int_equal(count(p.text, key), 1);
    char needle[64];
    snprintf(needle, sizeof needle, " The pass key is %s. Remember it.", key);
    assert_int_equal(strncmp(p.text + p.needle_at, needle, strlen(needle)), 0);
    /* filler sentences before and after the needle, cycling through the five */
    char *before = strndup(p.text, p.needle_at);
    assert_int_equal(sentences(before), want_before);
    assert_int_equal(sentences(p.text + p.needle_at), n_filler - want_before);
    assert_int_equal(count(p.text, "The grass is green."), (n_filler + 4) / 5);
    free(before);
    /* the question closes the prompt */
    const char *q = SKV_PASSKEY_QUESTION;
    assert_string_equal(p.text + p.len - strlen(q), q);
    skv_passkey_prompt_free(&p);
}

static void test_make(void **state) {
    (void)state;
    check_prompt("12345", 0.5, 20, 10);
    check_prompt("12345", 0.1, 20, 2);
    check_prompt("12345", 0.9, 20, 18);
    check_prompt("54321", 0.0, 7, 0); /* right after the introduction */
    check_prompt("54321", 1.0, 7, 7); /* right before the question */
    check_prompt("54321", 0.5, 5, 2); /* 2.5 rounds half to even */
    check_prompt("54321", 0.3, 5, 2); /* 1.5 rounds to 2 */
    check_prompt("99999", 0.5, 0, 0); /* no filler at all */
    skv_passkey_prompt p;
    skv_err err = {0};
    assert_int_equal(skv_passkey_make("12a45", 0.5, 3, &p, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_passkey_make("12345", 1.5, 3, &p, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_passkey_make("12345", 0.5, -1, &p, &err), SKV_ERR_INVALID_ARG);
}

static void test_score(void **state) {
    (void)state;
    char found[32];
    struct {
        const char *out;
        bool ok;
        const char *found;
    } cases[] = {
        {" 12345.", true, "12345"},
        {"12345", true, "12345"},
        {" 12345. Remember it. 12345 is", true, "12345"},
        {"The pass key is 12345", true, "12345"},
        {" 123456", false, "123456"}, /* a longer number is not the key */
        {" 1234 5", false, "1234"},
        {" 54321 12345", false, "54321"}, /* the first number counts */
        {" twelve thousand", false, ""},
        {"", false, ""},
        {"012345", false, "012345"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool ok =
            skv_passkey_score(cases[i].out, strlen(cases[i].out), "12345", found, sizeof found);
        if (ok != cases[i].ok) fail_msg("case %zu '%s'", i, cases[i].out);
        assert_string_equal(found, cases[i].found);
    }
    /* found is truncated safely */
    char small[4];
    assert_false(skv_passkey_score("1234567", 7, "12345", small, sizeof small));
    assert_string_equal(small, "123");
    /* the length bounds the scan (no NUL needed) */
    assert_true(skv_passkey_score("12345678", 5, "12345", found, sizeof found));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_make),
        cmocka_unit_test(test_score),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
