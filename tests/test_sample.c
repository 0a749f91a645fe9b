/* test_sample.c — sampling against hand-computed distributions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sparsekv.h"

#include <math.h>
#include <string.h>

static int32_t sample_once(skv_sampler_params p, const float *logits, int n, skv_sampler *s) {
    float tmp[16];
    memcpy(tmp, logits, (size_t)n * sizeof(float));
    (void)p;
    return skv_sampler_sample(s, tmp, n);
}

static void test_greedy_lowest_id_on_ties(void **state) {
    (void)state;
    skv_sampler_params p = skv_sampler_default_params();
    p.temperature = 0;
    skv_sampler *s = skv_sampler_new(&p, NULL);
    float l[] = {1, 3, 2, 3};
    assert_int_equal(sample_once(p, l, 4, s), 1);
    skv_sampler_free(s);
}

static void test_top_k_one_is_greedy(void **state) {
    (void)state;
    skv_sampler_params p = {.temperature = 5.0f, .top_k = 1, .top_p = 1.0f, .seed = 3};
    skv_sampler *s = skv_sampler_new(&p, NULL);
    float l[] = {0.1f, 0.2f, 0.15f};
    for (int i = 0; i < 100; i++) assert_int_equal(sample_once(p, l, 3, s), 1);
    skv_sampler_free(s);
}

/* The softmax takes logit / temperature in double: in float a tiny temperature overflowed it to
 * inf, inf - inf made every weight NaN, and the last (least likely) candidate came out. A +inf
 * logit wins outright. */
static void test_extreme_temperature_and_inf(void **state) {
    (void)state;
    skv_sampler_params p = {.temperature = 1e-39f, .top_k = 0, .top_p = 1.0f, .seed = 1};
    skv_sampler *s = skv_sampler_new(&p, NULL);
    assert_non_null(s);
    float l[] = {10, 1, 0, -5};
    for (int i = 0; i < 20; i++) assert_int_equal(sample_once(p, l, 4, s), 0);
    skv_sampler_free(s);
    p.temperature = 1.0f;
    s = skv_sampler_new(&p, NULL);
    float li[] = {1, INFINITY, 3, 0};
    for (int i = 0; i < 20; i++) assert_int_equal(sample_once(p, li, 4, s), 1);
    skv_sampler_free(s);
    /* a NaN logit ranks as -inf: never drawn while a number is there, greedy or sampled */
    float ln[] = {0, 10, NAN, -5, 3};
    p.temperature = 1.0f;
    s = skv_sampler_new(&p, NULL);
    for (int i = 0; i < 200; i++) assert_int_not_equal(sample_once(p, ln, 5, s), 2);
    skv_sampler_free(s);
    p.temperature = 0;
    s = skv_sampler_new(&p, NULL);
    float lg[] = {NAN, 1, 2};
    assert_int_equal(sample_once(p, lg, 3, s), 2);
    skv_sampler_free(s);
}

/* probabilities 0.5, 0.25, 0.125, 0.125: top_p = 0.7 keeps the first two, renormalized to
 * 2/3 and 1/3. */
static void test_top_p_and_frequencies(void **state) {
    (void)state;
    float l[] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    skv_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 0.7f, .seed = 42};
    skv_sampler *s = skv_sampler_new(&p, NULL);
    int count[4] = {0};
    const int N = 30000;
    for (int i = 0; i < N; i++) count[sample_once(p, l, 4, s)]++;
    assert_int_equal(count[2] + count[3], 0);
    double f0 = (double)count[0] / N; /* expect 2/3, sd ~ 0.0027 */
    assert_true(fabs(f0 - 2.0 / 3.0) < 0.015);
    skv_sampler_free(s);

    p.top_p = 1.0f; /* full distribution: chi-square with 3 dof, generous bound */
    s = skv_sampler_new(&p, NULL);
    memset(count, 0, sizeof count);
    for (int i = 0; i < N; i++) count[sample_once(p, l, 4, s)]++;
    double expect[] = {0.5, 0.25, 0.125, 0.125}, chi = 0;
    for (int i = 0; i < 4; i++) chi += pow(count[i] - N * expect[i], 2) / (N * expect[i]);
    assert_true(chi < 25.0); /* p < 1e-4 under the null */
    skv_sampler_free(s);
}

static void test_seeded_reproducible(void **state) {
    (void)state;
    float l[] = {0, 0.5f, 1, 1.5f, 2, 0.3f};
    skv_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 7};
    skv_sampler *a = skv_sampler_new(&p, NULL), *b = skv_sampler_new(&p, NULL);
    p.seed = 8;
    skv_sampler *c = skv_sampler_new(&p, NULL);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 200; i++) {
        int x = sample_once(p, l, 6, a), y = sample_once(p, l, 6, b), z = sample_once(p, l, 6, c);
        same_ab += x == y;
        same_ac += x == z;
    }
    assert_int_equal(same_ab, 200);
    assert_true(same_ac < 200);
    skv_sampler_free(a);
    skv_sampler_free(b);
    skv_sampler_free(c);
}

static void test_bad_params(void **state) {
    (void)state;
    skv_err err = {0};
    skv_sampler_params p = skv_sampler_default_params();
    p.top_p = 0;
    assert_null(skv_sampler_new(&p, &err));
    assert_non_null(strstr(err.msg, "top_p must be in (0, 1] (1: off), got 0"));
    p = skv_sampler_default_params();
    p.temperature = -1;
    assert_null(skv_sampler_new(&p, &err));
    assert_int_equal(err.status, SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "temperature must be a finite float >= 0 (0: greedy), got -1"));
    p.temperature = INFINITY;
    assert_null(skv_sampler_new(&p, &err));
    assert_non_null(strstr(err.msg, "got inf"));
    p = skv_sampler_default_params();
    p.top_k = -2;
    assert_null(skv_sampler_new(&p, &err));
    assert_non_null(strstr(err.msg, "top_k must be >= 0 (0: off), got -2"));
}

/* top_p reached exactly at a boundary: four equal logits and top_p 0.5 keep the two lowest ids
 * (cumulative mass 0.5 after two; ties in id order), each drawn about half the time */
static void test_top_p_exact_boundary(void **state) {
    (void)state;
    skv_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .seed = 7};
    skv_err err = {0};
    skv_sampler *s = skv_sampler_new(&p, &err);
    assert_non_null(s);
    int count[4] = {0};
    for (int i = 0; i < 2000; i++) {
        float lg[4] = {0, 0, 0, 0};
        int t = skv_sampler_sample(s, lg, 4);
        assert_true(t >= 0 && t < 4);
        count[t]++;
    }
    assert_int_equal(count[2] + count[3], 0);
    assert_true(count[0] > 800 && count[1] > 800);
    skv_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_lowest_id_on_ties),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_top_p_and_frequencies),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_extreme_temperature_and_inf),
        cmocka_unit_test(test_top_p_exact_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
