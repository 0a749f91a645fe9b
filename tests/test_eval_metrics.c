/* test_eval_metrics.c — eval's per-token metrics and statistics against hand-computed values. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eval/eval.h"

#include <math.h>
#include <string.h>

#define NEAR(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

static void test_log_softmax(void **state) {
    (void)state;
    float u[4] = {1, 1, 1, 1};
    double out[4];
    skv_eval_log_softmax(u, 4, out);
    for (int i = 0; i < 4; i++) NEAR(out[i], -log(4.0), 1e-15);
    /* -inf logits are probability 0, the rest renormalize */
    float m[3] = {0, 0, -INFINITY};
    skv_eval_log_softmax(m, 3, out);
    NEAR(out[0], -log(2.0), 1e-15);
    NEAR(out[1], -log(2.0), 1e-15);
    assert_true(isinf(out[2]) && out[2] < 0);
    /* large logits do not overflow: softmax(1000, 1000 + ln 3) = (1/4, 3/4) */
    float big[2] = {1000.0f, 1000.0f + (float)log(3.0)};
    skv_eval_log_softmax(big, 2, out);
    double q0 = 1.0 / (1.0 + exp((double)big[1] - (double)big[0]));
    NEAR(out[0], log(q0), 1e-12);
    NEAR(q0, 0.25, 1e-4); /* float spacing at 1000 is 6e-5 */
    /* no finite logit: no distribution */
    float bad[2] = {-INFINITY, -INFINITY};
    skv_eval_log_softmax(bad, 2, out);
    assert_true(isnan(out[0]) && isnan(out[1]));
}

static void test_kl(void **state) {
    (void)state;
    /* P = (1/2, 1/2), Q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln (2/3) = 1/2 ln (4/3) */
    double lp[2] = {log(0.5), log(0.5)}, lq[2] = {log(0.25), log(0.75)};
    NEAR(skv_eval_kl(lp, lq, 2), 0.5 * log(4.0 / 3.0), 1e-15);
    NEAR(0.5 * log(4.0 / 3.0), 0.14384103622589045, 1e-16);
    /* KL(Q || P) = 1/4 ln (1/2) + 3/4 ln (3/2) */
    NEAR(skv_eval_kl(lq, lp, 2), 0.25 * log(0.5) + 0.75 * log(1.5), 1e-15);
    /* identical distributions: exactly 0 */
    assert_true(skv_eval_kl(lq, lq, 2) == 0.0);
    /* p_i = 0 contributes nothing: P = (1, 0), Q = (1/2, 1/2) -> ln 2 */
    double p1[2] = {0.0, -INFINITY};
    NEAR(skv_eval_kl(p1, lp, 2), log(2.0), 1e-15);
    /* p_i > 0 where q_i = 0: infinite */
    double q1[2] = {0.0, -INFINITY};
    double kl = skv_eval_kl(lp, q1, 2);
    assert_true(isinf(kl) && kl > 0);
}

static void test_argmax(void **state) {
    (void)state;
    float a[5] = {1, 3, 3, 2, 3};
    assert_int_equal(skv_eval_argmax(a, 5), 1); /* lowest id on ties */
    float b[3] = {NAN, -1, -1};
    assert_int_equal(skv_eval_argmax(b, 3), 1); /* NaN never wins */
    float c[2] = {-INFINITY, -5};
    assert_int_equal(skv_eval_argmax(c, 2), 1);
    assert_int_equal(skv_eval_argmax(a, 0), -1);
}

static void test_percentile(void **state) {
    (void)state;
    double v[4] = {1, 2, 3, 4};
    NEAR(skv_eval_percentile(v, 4, 0.5), 2.5, 1e-15);
    NEAR(skv_eval_percentile(v, 4, 0.9), 3.7, 1e-15);   /* position 2.7 */
    NEAR(skv_eval_percentile(v, 4, 0.99), 3.97, 1e-15); /* position 2.97 */
    NEAR(skv_eval_percentile(v, 4, 0.0), 1, 0);
    NEAR(skv_eval_percentile(v, 4, 1.0), 4, 0);
    double one[1] = {7};
    NEAR(skv_eval_percentile(one, 1, 0.9), 7, 0);
    double odd[3] = {1, 5, 9};
    NEAR(skv_eval_percentile(odd, 3, 0.5), 5, 0);
}

/* Three positions over a 2-token vocabulary, every value derived by hand:
 *   row 0: P = (1/2, 1/2)  Q = (1/4, 3/4)  KL = 1/2 ln(4/3)            argmax 0 vs 1
 *   row 1: P = (1/2, 1/2)  Q = (1/2, 1/2)  KL = 0                       argmax 0 vs 0
 *   row 2: P = (3/4, 1/4)  Q = (1/2, 1/2)  KL = 3/4 ln(3/2) - 1/4 ln 2   argmax 0 vs 0
 * targets (1, 0, 1): NLL_ref = (ln 2 + ln 2 + ln 4) / 3 = ln 16 / 3, PPL_ref = 16^(1/3)
 *                    NLL_cmp = (ln 4/3 + ln 2 + ln 2) / 3 = ln(16/3) / 3 */
static void test_compare(void **state) {
    (void)state;
    float l3 = (float)log(3.0);
    float ref[6] = {0, 0, 0, 0, l3, 0};
    float cmp[6] = {0, l3, 0, 0, 0, 0};
    int32_t targets[3] = {1, 0, 1};
    skv_eval_lm_metrics m;
    skv_err err = {0};
    assert_int_equal(skv_eval_compare(ref, cmp, targets, 3, 2, &m, &err), SKV_OK);
    double k0 = 0.5 * log(4.0 / 3.0), k2 = 0.75 * log(1.5) - 0.25 * log(2.0);
    double tol = 1e-7; /* ln 3 rounded to float */
    assert_int_equal(m.n_tokens, 3);
    NEAR(m.kl_mean, (k0 + k2) / 3, tol);
    NEAR(m.kl_median, k2, tol); /* sorted: 0, k2, k0 */
    NEAR(m.kl_p90, k2 + 0.8 * (k0 - k2), tol);
    NEAR(m.kl_p99, k2 + 0.98 * (k0 - k2), tol);
    NEAR(m.kl_max, k0, tol);
    assert_int_equal(m.n_same_top, 2);
    NEAR(m.top1, 2.0 / 3.0, 1e-15);
    NEAR(m.nll_ref, log(16.0) / 3, tol);
    NEAR(m.nll_cmp, log(16.0 / 3.0) / 3, tol);
    NEAR(m.ppl_ref, cbrt(16.0), 1e-6);
    NEAR(m.ppl_cmp, cbrt(16.0 / 3.0), 1e-6);
    NEAR(m.ln_ppl_ratio, log(m.ppl_cmp / m.ppl_ref), 1e-12);
    NEAR(m.ln_ppl_ratio, -log(3.0) / 3, tol);

    /* the same logits on both sides: every difference is exactly zero */
    assert_int_equal(skv_eval_compare(ref, ref, targets, 3, 2, &m, &err), SKV_OK);
    assert_true(m.kl_mean == 0.0 && m.kl_max == 0.0 && m.ln_ppl_ratio == 0.0);
    assert_int_equal(m.n_same_top, 3);

    /* a target outside the vocabulary is refused with a message */
    int32_t bad[3] = {1, 2, 0};
    assert_int_equal(skv_eval_compare(ref, cmp, bad, 3, 2, &m, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
}

static void test_t975(void **state) {
    (void)state;
    /* published two-sided 95% critical values of Student's t */
    NEAR(skv_eval_t975(1), 12.7062, 1e-4);
    NEAR(skv_eval_t975(2), 4.3027, 1e-4);
    NEAR(skv_eval_t975(7), 2.3646, 1e-4);
    NEAR(skv_eval_t975(30), 2.0423, 1e-4);
    NEAR(skv_eval_t975(40), 2.0211, 1e-4);
    NEAR(skv_eval_t975(60), 2.0003, 1e-4);
    NEAR(skv_eval_t975(120), 1.9799, 1e-4);
    NEAR(skv_eval_t975(1000000), 1.95996, 1e-5);
    /* the expansion's claimed error (< 1e-7) against quantiles computed to 10 digits by the
     * incomplete beta function (mpmath), where the tables above round to 4 */
    NEAR(skv_eval_t975(31), 2.0395134464, 1e-7);
    NEAR(skv_eval_t975(40), 2.0210753903, 1e-7);
    NEAR(skv_eval_t975(60), 2.0002978220, 1e-7);
    NEAR(skv_eval_t975(120), 1.9799304051, 1e-7);
    /* continuous across the table's end */
    assert_true(skv_eval_t975(31) < skv_eval_t975(30) && skv_eval_t975(31) > 2.03);
    assert_true(isnan(skv_eval_t975(0)));
}

static void test_stat(void **state) {
    (void)state;
    double x[4] = {1, 2, 3, 4};
    skv_eval_stat s = skv_eval_stat_of(x, 4);
    assert_int_equal(s.n, 4);
    NEAR(s.mean, 2.5, 1e-15);
    NEAR(s.sd, sqrt(5.0 / 3.0), 1e-15);
    NEAR(s.ci95, 3.182446305 * sqrt(5.0 / 3.0) / 2.0, 1e-9);
    skv_eval_stat one = skv_eval_stat_of(x, 1);
    NEAR(one.mean, 1, 0);
    assert_true(isnan(one.sd) && isnan(one.ci95));
    double same[3] = {0.5, 0.5, 0.5};
    skv_eval_stat z = skv_eval_stat_of(same, 3);
    assert_true(z.sd == 0.0 && z.ci95 == 0.0);
}

/* Pooled figures, by hand: 3 of 4 tokens agree, p = 0.75, its error sqrt(0.75 * 0.25 / 3) =
 * 0.25; PPL = exp(summed NLL / tokens); nothing defined without a token, no error with one. */
static void test_pool(void **state) {
    (void)state;
    skv_eval_pooled p = skv_eval_pool(4, 3, 4 * log(2.0), 4 * log(3.0));
    assert_true(fabs(p.same_top_p - 0.75) < 1e-15 && fabs(p.same_top_unc - 0.25) < 1e-15);
    assert_true(fabs(p.ppl_ref - 2.0) < 1e-14 && fabs(p.ppl_cmp - 3.0) < 1e-14);
    p = skv_eval_pool(1, 1, 0, 0);
    assert_true(p.same_top_p == 1.0 && isnan(p.same_top_unc) && p.ppl_ref == 1.0);
    p = skv_eval_pool(0, 0, 0, 0);
    assert_true(isnan(p.same_top_p) && isnan(p.ppl_ref) && isnan(p.ppl_cmp));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_softmax), cmocka_unit_test(test_kl),
        cmocka_unit_test(test_argmax),      cmocka_unit_test(test_percentile),
        cmocka_unit_test(test_compare),     cmocka_unit_test(test_t975),
        cmocka_unit_test(test_stat),        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
