/* test_policies.c — the pure parts of compression (policies.h): keep, PyramidKV budgets, the
 * sink_recent / random / window scorers, pooling, top-k selection, the registry and the RNG.
 * Every expectation is derived by hand from docs/SPEC.md (the derivation sits next to it). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "policies.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Runs a policy's score + top-k on a row of T positions, as compress.c does for one head. */
static int select_row(const double *score, int T, int keep, int32_t *out) {
    uint64_t *scratch = malloc((size_t)T * sizeof *scratch);
    assert_non_null(scratch);
    int n = skv_select_topk(score, T, keep, out, scratch);
    free(scratch);
    return n;
}

static void assert_positions(const int32_t *got, int n_got, const int32_t *want, int n_want) {
    assert_int_equal(n_got, n_want);
    for (int i = 0; i < n_want; i++) assert_int_equal(got[i], want[i]);
}

static int sink_recent(int T, int keep, int sinks, int32_t *out) {
    double *s = malloc((size_t)T * sizeof *s);
    assert_non_null(s);
    skv_score_sink_recent_row(s, T, sinks);
    int n = select_row(s, T, keep, out);
    free(s);
    return n;
}

static int random_sel(int T, int keep, uint64_t seed, int32_t *out) {
    double *s = malloc((size_t)T * sizeof *s);
    int32_t *perm = malloc((size_t)T * sizeof *perm);
    assert_non_null(s);
    assert_non_null(perm);
    skv_score_random_row(s, T, seed, perm);
    int n = select_row(s, T, keep, out);
    free(s);
    free(perm);
    return n;
}

/* ---- keep ------------------------------------------------------------------------------------ */

static void test_keep(void **state) {
    (void)state;
    assert_int_equal(skv_policy_keep(0.5, 5), 2);  /* round(2.5) = 2 (half to even) */
    assert_int_equal(skv_policy_keep(0.5, 7), 4);  /* round(3.5) = 4 */
    assert_int_equal(skv_policy_keep(0.75, 2), 2); /* round(1.5) = 2 */
    assert_int_equal(skv_policy_keep(0.25, 2), 1); /* round(0.5) = 0 -> max(1, .) */
    assert_int_equal(skv_policy_keep(0.1, 3), 1);  /* round(0.3) = 0 -> 1 */
    assert_int_equal(skv_policy_keep(0.3, 10), 3); /* 3.0000000000000004 */
    assert_int_equal(skv_policy_keep(1.0, 10), 10);
    assert_int_equal(skv_policy_keep(1.0, 1), 1);
    assert_int_equal(skv_policy_keep(0.01, 1), 1);
    assert_int_equal(skv_policy_keep(0.2, 1000), 200);
}

/* ---- PyramidKV budgets ----------------------------------------------------------------------- */

static void check_pyramid(int keep, int L, int window, const int *want) {
    int got[16];
    skv_err err = {0};
    assert_int_equal(skv_pyramid_budgets(keep, L, window, 20, got, &err), SKV_OK);
    for (int l = 0; l < L; l++) assert_int_equal(got[l], want[l]);
}

static void test_pyramid_budgets(void **state) {
    (void)state;
    /* keep 100, L 4, window 32: base 68, mn max(68/20, 1) = 3, mx 133, steps 130/3 = 43,
     * b = [133, 90, 47, 4] + 32 = [165, 122, 79, 36] (sum 402), scale 400/402:
     * 164.18 121.39 78.61 35.82 -> [164, 121, 79, 36] */
    check_pyramid(100, 4, 32, (const int[]){164, 121, 79, 36});
    /* banker's rounding: keep 5, L 4, window 0: base 5, mn 1, mx 9, steps 8/3 = 2,
     * b = [9, 7, 5, 3] (sum 24), scale 20/24: 7.5 5.83 4.17 2.5 -> [8, 6, 4, 2]
     * (7.5 rounds up to the even 8, 2.5 down to the even 2) */
    check_pyramid(5, 4, 0, (const int[]){8, 6, 4, 2});
    /* keep 11, L 5, window 3: base 8, mn 1, mx 15, steps 14/4 = 3, b = [15 12 9 6 3] + 3 =
     * [18 15 12 9 6] (sum 60), scale 55/60: 16.5 13.75 11 8.25 5.5 -> [16, 14, 11, 8, 6] */
    check_pyramid(11, 5, 3, (const int[]){16, 14, 11, 8, 6});
    /* L = 1: keep 10, window 4: base 6, mn 1, mx 11, steps 10/max(0, 1) = 10, b = [15],
     * scale 10/15 -> [10] */
    check_pyramid(10, 1, 4, (const int[]){10});
    /* keep < window: keep 5, L 3, window 32: base max(-27, 1) = 1, mn 1, mx 1, steps 0,
     * b = [33, 33, 33], scale 15/99 -> [5, 5, 5] */
    check_pyramid(5, 3, 32, (const int[]){5, 5, 5});
    /* keep 1: every budget 33 * 5/165 = 1 */
    check_pyramid(1, 5, 32, (const int[]){1, 1, 1, 1, 1});
    /* beta bites: keep 100, L 2, window 0: base 100, mn 5, mx 195, steps 190, b = [195, 5],
     * scale 200/200 -> [195, 5] */
    check_pyramid(100, 2, 0, (const int[]){195, 5});
    /* layer 0 gets the most, budgets never increase with depth, total preserved +- rounding */
    int b[32];
    assert_int_equal(skv_pyramid_budgets(512, 32, 32, 20, b, NULL), SKV_OK);
    long sum = 0;
    for (int l = 0; l < 32; l++) {
        sum += b[l];
        if (l) assert_true(b[l] <= b[l - 1]);
    }
    assert_true(labs(sum - 512L * 32) <= 16);

    skv_err err = {0};
    assert_int_equal(skv_pyramid_budgets(0, 4, 32, 20, b, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "keep"));
    assert_int_equal(skv_pyramid_budgets(10, 0, 32, 20, b, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_pyramid_budgets(10, 4, -1, 20, b, &err), SKV_ERR_INVALID_ARG);
}

/* ---- sink_recent ----------------------------------------------------------------------------- */

static void test_sink_recent(void **state) {
    (void)state;
    int32_t out[64];
    /* first 4 + last 2 */
    assert_positions(out, sink_recent(10, 6, 4, out), (const int32_t[]){0, 1, 2, 3, 8, 9}, 6);
    /* keep < sinks: s = min(4, 2) = 2, nothing recent */
    assert_positions(out, sink_recent(10, 2, 4, out), (const int32_t[]){0, 1}, 2);
    /* keep >= T: everything */
    assert_positions(out, sink_recent(5, 5, 4, out), (const int32_t[]){0, 1, 2, 3, 4}, 5);
    assert_positions(out, sink_recent(5, 9, 4, out), (const int32_t[]){0, 1, 2, 3, 4}, 5);
    /* no sinks: pure recency */
    assert_positions(out, sink_recent(10, 3, 0, out), (const int32_t[]){7, 8, 9}, 3);
    /* sinks beyond T */
    assert_positions(out, sink_recent(3, 2, 5, out), (const int32_t[]){0, 1}, 2);
    /* sinks and recent meet: first 4 + last 1 */
    assert_positions(out, sink_recent(6, 5, 4, out), (const int32_t[]){0, 1, 2, 3, 5}, 5);
    /* T = 1 */
    assert_positions(out, sink_recent(1, 1, 4, out), (const int32_t[]){0}, 1);
    /* keep = 1 with sinks: the first position */
    assert_positions(out, sink_recent(8, 1, 4, out), (const int32_t[]){0}, 1);
}

/* ---- random ---------------------------------------------------------------------------------- */

static void test_random_basic(void **state) {
    (void)state;
    int32_t a[200], b[200];
    for (uint64_t seed = 0; seed < 20; seed++) {
        int n = random_sel(100, 37, seed, a);
        assert_int_equal(n, 37);
        for (int i = 0; i < n; i++) {
            assert_true(a[i] >= 0 && a[i] < 100);
            if (i) assert_true(a[i] > a[i - 1]); /* sorted and distinct */
        }
        /* reproducible */
        assert_int_equal(random_sel(100, 37, seed, b), 37);
        assert_memory_equal(a, b, 37 * sizeof *a);
    }
    /* different seeds give different sets */
    random_sel(100, 37, 1, a);
    random_sel(100, 37, 2, b);
    assert_memory_not_equal(a, b, 37 * sizeof *a);
    /* keep = T: all; T = 1 */
    assert_int_equal(random_sel(7, 7, 3, a), 7);
    for (int i = 0; i < 7; i++) assert_int_equal(a[i], i);
    assert_int_equal(random_sel(1, 1, 3, a), 1);
    assert_int_equal(a[0], 0);
    /* the draws are nested: keep k is a subset of keep k + 1 (prefix of one shuffle) */
    int na = random_sel(50, 10, 9, a), nb = random_sel(50, 11, 9, b), found = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) found += a[i] == b[j];
    assert_int_equal(found, 10);
}

static void test_random_uniform(void **state) {
    (void)state;
    /* Each position should be drawn with probability keep/T. 20000 draws of 5 of 20:
     * expected count 5000 per position; chi-square has 19 degrees of freedom (mean 19,
     * sd 6.2); 60 is beyond p = 1e-5. A generator that favours ends or the seed's low bits
     * fails by thousands. */
    enum { T = 20, KEEP = 5, N = 20000 };
    long count[T] = {0};
    long pairs_first =
        0; /* how often positions 0 and 1 are drawn together: 20000*C(18,3)/C(20,5) */
    int32_t out[KEEP];
    for (int s = 0; s < N; s++) {
        random_sel(T, KEEP, (uint64_t)s, out);
        bool has0 = false, has1 = false;
        for (int i = 0; i < KEEP; i++) {
            count[out[i]]++;
            has0 |= out[i] == 0;
            has1 |= out[i] == 1;
        }
        pairs_first += has0 && has1;
    }
    const double expect = (double)N * KEEP / T;
    double chi2 = 0;
    for (int t = 0; t < T; t++) chi2 += (count[t] - expect) * (count[t] - expect) / expect;
    assert_true(chi2 < 60.0);
    /* P(0 and 1 both) = (5/20)(4/19) = 1/19: 1052.6 expected, sd ~32 */
    assert_true(fabs((double)pairs_first - N / 19.0) < 200.0);
}

static void test_rng(void **state) {
    (void)state;
    /* xoshiro256** seeded by splitmix64, values from an independent Python implementation of
     * the published algorithms */
    skv_rng r;
    skv_rng_seed(&r, 0);
    assert_true(skv_rng_next(&r) == 0x99ec5f36cb75f2b4ULL);
    assert_true(skv_rng_next(&r) == 0xbf6e1f784956452aULL);
    assert_true(skv_rng_next(&r) == 0x1a5f849d4933e6e0ULL);
    assert_true(skv_rng_next(&r) == 0x6aa594f1262d2d2cULL);
    skv_rng_seed(&r, 42);
    assert_true(skv_rng_next(&r) == 0x15780b2e0c2ec716ULL);
    assert_true(skv_rng_next(&r) == 0x6104d9866d113a7eULL);
    /* uniform in [0, 1), below in range */
    double sum = 0;
    long hist[3] = {0};
    for (int i = 0; i < 30000; i++) {
        double u = skv_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        uint64_t b = skv_rng_below(&r, 3);
        assert_true(b < 3);
        hist[b]++;
    }
    assert_true(fabs(sum / 30000 - 0.5) < 0.01);
    for (int i = 0; i < 3; i++) assert_true(labs(hist[i] - 10000) < 400);
    assert_true(skv_rng_below(&r, 0) == 0);
    assert_true(skv_rng_below(&r, 1) == 0);
    /* a huge bound that is not a power of two exercises the rejection path */
    for (int i = 0; i < 100; i++)
        assert_true(skv_rng_below(&r, 0xc000000000000001ULL) < 0xc000000000000001ULL);
}

/* ---- window score -----------------------------------------------------------------------------
 */

static void test_window_score(void **state) {
    (void)state;
    const double ln2 = log(2.0);
    double out[3];
    float logit[2 * 3];
    char work[4096];
    assert_true(skv_window_score_work_size(2, 4) <= sizeof work);
    /* d = 1 (scale 1): query ln2 over keys 0, 1, 2 -> logits 0, ln2, 2 ln2 -> 1/7, 2/7, 4/7 */
    const float k1[3] = {0, 1, 2};
    const float q1[2] = {(float)ln2, 0.0f}; /* second query: all logits 0 -> uniform 1/3 */
    skv_window_score_head(out, q1, 1, 1, 2, k1, 3, 1, logit, work);
    assert_float_equal(out[0], 1.0 / 7, 1e-7);
    assert_float_equal(out[1], 2.0 / 7, 1e-7);
    assert_float_equal(out[2], 4.0 / 7, 1e-7);
    /* two window queries averaged */
    skv_window_score_head(out, q1, 1, 2, 2, k1, 3, 1, logit, work);
    assert_float_equal(out[0], (1.0 / 7 + 1.0 / 3) / 2, 1e-7);
    assert_float_equal(out[2], (4.0 / 7 + 1.0 / 3) / 2, 1e-7);
    /* the same two rows as two query heads of one group (head stride 1, W = 1) */
    skv_window_score_head(out, q1, 2, 1, 1, k1, 3, 1, logit, work);
    assert_float_equal(out[1], (2.0 / 7 + 1.0 / 3) / 2, 1e-7);
    /* d = 4: the 1/sqrt(4) scale halves the dot products: q = (2 ln2, 0, 0, 0) */
    const float k4[12] = {0, 9, 9, 9, 1, 0, 0, 0, 2, 0, 0, 0};
    const float q4[4] = {(float)(2 * ln2), 0, 0, 0};
    skv_window_score_head(out, q4, 1, 1, 4, k4, 3, 4, logit, work);
    assert_float_equal(out[0], 1.0 / 7, 1e-7);
    assert_float_equal(out[2], 4.0 / 7, 1e-7);
    /* huge logits do not overflow (max subtracted) */
    const float kb[3] = {1000, 1000, 0};
    const float qb[1] = {100};
    skv_window_score_head(out, qb, 1, 1, 1, kb, 3, 1, logit, work);
    assert_float_equal(out[0], 0.5, 1e-12);
    assert_float_equal(out[2], 0.0, 1e-12);
}

/* ---- pooling --------------------------------------------------------------------------------- */

static void check_pool(const double *in, int T, int kernel, skv_pooling p, const double *want) {
    double s[16], tmp[64];
    memcpy(s, in, (size_t)T * sizeof *s);
    skv_pool_row(s, T, kernel, p, tmp);
    for (int t = 0; t < T; t++) assert_float_equal(s[t], want[t], 1e-12);
}

static void test_pooling(void **state) {
    (void)state;
    const double s[5] = {1, 3, 2, 5, 4};
    /* odd kernel 3, pad 1: [1 | 1 3 2 5 4 | 4] */
    check_pool(s, 5, 3, SKV_POOL_MAX, (const double[]){3, 3, 5, 5, 5});
    check_pool(s, 5, 3, SKV_POOL_AVG, (const double[]){5.0 / 3, 2, 10.0 / 3, 11.0 / 3, 13.0 / 3});
    /* kernel 1: unchanged */
    check_pool(s, 5, 1, SKV_POOL_MAX, s);
    check_pool(s, 5, 1, SKV_POOL_AVG, s);
    /* even kernel 2, pad 1: [1 | 1 3 2 5 4 | 4]: windows start at padded 0..4, i.e. position t
     * covers t-1..t; the sixth window [4 4] names no position and is dropped */
    check_pool(s, 5, 2, SKV_POOL_MAX, (const double[]){1, 3, 3, 5, 5});
    check_pool(s, 5, 2, SKV_POOL_AVG, (const double[]){1, 2, 2.5, 3.5, 4.5});
    /* even kernel 4, pad 2: [1 1 | 1 3 2 5 4 | 4 4] -> t covers t-2..t+1 */
    check_pool(s, 5, 4, SKV_POOL_AVG, (const double[]){1.5, 1.75, 2.75, 3.5, 3.75});
    check_pool(s, 5, 4, SKV_POOL_MAX, (const double[]){3, 3, 5, 5, 5});
    /* kernels past 2T + 1 (odd and even): every window holds the whole row, for max pooling
     * computed from a window of 2T + 1 (same values) */
    for (int k = 1000; k <= 1001; k++) {
        double r[5], tmp[1100];
        memcpy(r, s, sizeof r);
        skv_pool_row(r, 5, k, SKV_POOL_MAX, tmp);
        for (int t = 0; t < 5; t++) assert_true(r[t] == 5);
    }
    /* kernel 5, pad 2: [1 1 | 1 3 2 5 4 | 4 4] */
    check_pool(s, 5, 5, SKV_POOL_MAX, (const double[]){3, 5, 5, 5, 5});
    check_pool(s, 5, 5, SKV_POOL_AVG,
               (const double[]){8.0 / 5, 12.0 / 5, 15.0 / 5, 18.0 / 5, 19.0 / 5});
    /* kernel > T: T 2, kernel 7, pad 3: [1 1 1 | 1 2 | 2 2 2] */
    const double s2[2] = {1, 2};
    check_pool(s2, 2, 7, SKV_POOL_MAX, (const double[]){2, 2});
    check_pool(s2, 2, 7, SKV_POOL_AVG, (const double[]){10.0 / 7, 11.0 / 7});
    /* T = 1 with any kernel: the edge value everywhere */
    const double s1[1] = {0.25};
    check_pool(s1, 1, 7, SKV_POOL_AVG, s1);
    check_pool(s1, 1, 8, SKV_POOL_MAX, s1);
}

/* ---- top-k and forced positions ---------------------------------------------------------------
 */

static void test_topk_ties(void **state) {
    (void)state;
    int32_t out[16];
    const double s[5] = {5, 1, 5, 3, 5};
    /* three 5s tie: the two most recent win */
    assert_positions(out, select_row(s, 5, 2, out), (const int32_t[]){2, 4}, 2);
    assert_positions(out, select_row(s, 5, 3, out), (const int32_t[]){0, 2, 4}, 3);
    assert_positions(out, select_row(s, 5, 4, out), (const int32_t[]){0, 2, 3, 4}, 4);
    /* k clamped to [1, T] */
    assert_positions(out, select_row(s, 5, 9, out), (const int32_t[]){0, 1, 2, 3, 4}, 5);
    assert_positions(out, select_row(s, 5, 0, out), (const int32_t[]){4}, 1);
    /* NaN ranks below everything, -inf too; among them the higher position first */
    const double n[4] = {NAN, 1, -INFINITY, NAN};
    assert_positions(out, select_row(n, 4, 1, out), (const int32_t[]){1}, 1);
    assert_positions(out, select_row(n, 4, 2, out), (const int32_t[]){1, 3}, 2);
    /* a plateau of equal scores (max pooling) keeps the latest */
    const double flat[6] = {2, 2, 2, 2, 2, 2};
    assert_positions(out, select_row(flat, 6, 2, out), (const int32_t[]){4, 5}, 2);
}

/* The naive reference: sort every (score, position) by the rule, take the first k, sort them by
 * position. */
typedef struct ref_rank {
    double s;
    int pos;
} ref_rank;

static int ref_rank_cmp(const void *pa, const void *pb) {
    const ref_rank *a = pa, *b = pb;
    const double sa = isnan(a->s) ? -INFINITY : a->s, sb = isnan(b->s) ? -INFINITY : b->s;
    if (sa != sb) return sa > sb ? -1 : 1;
    return b->pos - a->pos; /* ties: the higher position first */
}

static int ref_int_cmp(const void *pa, const void *pb) {
    return *(const int32_t *)pa - *(const int32_t *)pb;
}

static void test_topk_random(void **state) {
    (void)state;
    enum { T_MAX = 700 };
    ref_rank r[T_MAX];
    double s[T_MAX];
    int32_t got[T_MAX], want[T_MAX];
    skv_rng rng;
    skv_rng_seed(&rng, 5);
    /* scores drawn from a few values (many ties, plateaus), specials, both zeros, subnormals,
     * and wide random doubles of both signs */
    const double pool[] = {0.0, -0.0,     1.0,       -1.0,  0.5,    INFINITY, -INFINITY,
                           NAN, 4.9e-324, -4.9e-324, 1e300, -1e300, 0.25,     0.125};
    for (int round = 0; round < 400; round++) {
        const int T = 1 + (int)skv_rng_below(&rng, round < 200 ? 40 : T_MAX);
        const int mode = round % 3;
        for (int t = 0; t < T; t++) {
            if (mode == 0)
                s[t] = pool[skv_rng_below(&rng, sizeof pool / sizeof *pool)];
            else if (mode == 1)
                s[t] = (double)skv_rng_below(&rng, 5) * 0.1;
            else
                s[t] = ((double)skv_rng_below(&rng, 1u << 30) - (double)(1u << 29)) *
                       pow(2.0, (double)skv_rng_below(&rng, 200) - 100.0);
        }
        const int k = (int)skv_rng_below(&rng, (uint64_t)T + 2); /* 0 .. T + 1: clamped */
        for (int t = 0; t < T; t++) r[t] = (ref_rank){s[t], t};
        qsort(r, (size_t)T, sizeof *r, ref_rank_cmp);
        const int kk = k < 1 ? 1 : k > T ? T : k;
        for (int i = 0; i < kk; i++) want[i] = r[i].pos;
        qsort(want, (size_t)kk, sizeof *want, ref_int_cmp);
        assert_positions(got, select_row(s, T, k, got), want, kk);
    }
}

static void test_forced(void **state) {
    (void)state;
    int32_t out[16];
    double s[6] = {9, 8, 7, 1, 2, 3};
    skv_force_last(s, 6, 3); /* window_keep 3: positions 3..5 forced */
    assert_true(isinf(s[3]) && isinf(s[5]) && s[2] == 7);
    /* keep < window_keep: the most recent forced positions */
    assert_positions(out, select_row(s, 6, 2, out), (const int32_t[]){4, 5}, 2);
    /* keep > window_keep: forced + best of the rest */
    assert_positions(out, select_row(s, 6, 4, out), (const int32_t[]){0, 3, 4, 5}, 4);
    /* T < window_keep: all forced */
    double t3[3] = {5, 6, 7};
    skv_force_last(t3, 3, 32);
    assert_positions(out, select_row(t3, 3, 2, out), (const int32_t[]){1, 2}, 2);
    /* window_keep 0 forces nothing */
    double z[3] = {5, 6, 7};
    skv_force_last(z, 3, 0);
    assert_true(z[0] == 5 && z[2] == 7);
}

/* The attention policy's chain on one hand-made head: pool (max, 3), force the last 2, top 4. */
static void test_attention_chain(void **state) {
    (void)state;
    double s[8] = {0.30, 0.01, 0.02, 0.01, 0.20, 0.01, 0.02, 0.03};
    double tmp[16];
    int32_t out[8];
    skv_pool_row(s, 8, 3, SKV_POOL_MAX, tmp);
    /* padded [.30 | .30 .01 .02 .01 .20 .01 .02 .03 | .03] ->
     * [.30 .30 .02 .20 .20 .20 .03 .03] */
    const double want[8] = {0.30, 0.30, 0.02, 0.20, 0.20, 0.20, 0.03, 0.03};
    for (int t = 0; t < 8; t++) assert_float_equal(s[t], want[t], 1e-15);
    skv_force_last(s, 8, 2);
    /* forced 6, 7; then the .30 plateau {0, 1}: keep 4 -> {0, 1, 6, 7} */
    assert_positions(out, select_row(s, 8, 4, out), (const int32_t[]){0, 1, 6, 7}, 4);
    /* keep 5: plus the latest of the .20 plateau {3, 4, 5} -> 5 */
    assert_positions(out, select_row(s, 8, 5, out), (const int32_t[]){0, 1, 5, 6, 7}, 5);
    /* keep 3: forced 6, 7 then position 1 (the later of the .30 tie) */
    assert_positions(out, select_row(s, 8, 3, out), (const int32_t[]){1, 6, 7}, 3);
}

/* ---- registry ----------------------------------------------------------------------------------
 */

static void test_registry(void **state) {
    (void)state;
    assert_string_equal(skv_policy_canonical("sink_recent"), "sink_recent");
    assert_string_equal(skv_policy_canonical("streaming"), "sink_recent");
    assert_string_equal(skv_policy_canonical("random"), "random");
    assert_string_equal(skv_policy_canonical("attention"), "attention");
    assert_string_equal(skv_policy_canonical("snapkv"), "attention");
    assert_string_equal(skv_policy_canonical("pyramid"), "pyramid");
    assert_string_equal(skv_policy_canonical("pyramidkv"), "pyramid");
    assert_null(skv_policy_canonical("scissorhands"));
    assert_null(skv_policy_canonical(""));
    assert_null(skv_policy_canonical(NULL));
    assert_null(skv_policy_canonical("Attention")); /* exact names only */
    assert_false(skv_policy_needs_window("sink_recent"));
    assert_false(skv_policy_needs_window("random"));
    assert_true(skv_policy_needs_window("snapkv"));
    assert_true(skv_policy_needs_window("pyramid"));
    assert_false(skv_policy_needs_window("nope"));
    /* the list in error messages names every row and alias */
    const char *names[] = {"sink_recent", "streaming", "random",   "attention",
                           "snapkv",      "pyramid",   "pyramidkv"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_non_null(strstr(skv_policy_list(), names[i]));
        assert_non_null(skv_policy_find(names[i]));
    }
    const skv_policy *p = skv_policy_find("pyramidkv");
    assert_non_null(p->score);
    assert_non_null(p->allocate);
    assert_false(p->shared);
    assert_true(skv_policy_find("random")->shared);
}

/* adakv's layer selection against the rule worked by hand (SPEC: n_safe = floor(0.2 keep) each
 * head's own top, then the top of all heads' remaining scores; ties: higher position, then lower
 * head). keep 6: n_safe 1, layer total 18. Heads 0 and 1 score 20 everywhere but 30 at 9; head
 * 2 scores 3 at 0, else 0. Safe: 9, 9, 0. The 15 shared places go to the 18 tied 20s of heads
 * 0-1 by position descending, then head ascending: 8..2 of both (14), then (1, head 0). */
static void adakv_expect(const int32_t *idx, int n, const int32_t *want, int n_want) {
    assert_int_equal(n, n_want);
    for (int i = 0; i < n; i++) assert_int_equal(idx[i], want[i]);
}

static void test_adakv_select_by_hand(void **state) {
    (void)state;
    enum { T = 10, H = 3 };
    double s[H * T];
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < T; t++) s[h * T + t] = t == 9 ? 30 : 20;
    for (int t = 0; t < T; t++) s[2 * T + t] = t == 0 ? 3 : 0;
    int b[H];
    int32_t idx[H * T];
    skv_err err = {0};
    assert_int_equal(skv_policy_adakv.select(s, T, T, H, 6, b, idx, &err), SKV_OK);
    adakv_expect(idx, b[0], (int32_t[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 9);
    adakv_expect(idx + T, b[1], (int32_t[]){2, 3, 4, 5, 6, 7, 8, 9}, 8);
    adakv_expect(idx + 2 * T, b[2], (int32_t[]){0}, 1);
    /* a NaN ranks as -inf: with head 0's position 1 NaN the 15th place is (1, head 1) */
    s[1] = NAN;
    assert_int_equal(skv_policy_adakv.select(s, T, T, H, 6, b, idx, &err), SKV_OK);
    adakv_expect(idx, b[0], (int32_t[]){2, 3, 4, 5, 6, 7, 8, 9}, 8);
    adakv_expect(idx + T, b[1], (int32_t[]){1, 2, 3, 4, 5, 6, 7, 8, 9}, 9);
    adakv_expect(idx + 2 * T, b[2], (int32_t[]){0}, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep),           cmocka_unit_test(test_pyramid_budgets),
        cmocka_unit_test(test_sink_recent),    cmocka_unit_test(test_random_basic),
        cmocka_unit_test(test_random_uniform), cmocka_unit_test(test_rng),
        cmocka_unit_test(test_window_score),   cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_topk_ties),      cmocka_unit_test(test_topk_random),
        cmocka_unit_test(test_forced),         cmocka_unit_test(test_attention_chain),
        cmocka_unit_test(test_registry),       cmocka_unit_test(test_adakv_select_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
