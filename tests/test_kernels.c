/* test_kernels.c — element conversions, vector kernels and attention: every fast path against
 * its reference, the references against hand-derived values and float64 loops. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tolerances: relative parts scale with the reference value, absolute parts cover values near 0. */
#define TOL_RMSNORM   1e-6 /* relative */
#define TOL_SOFTMAX   1e-6 /* relative, plus 1e-9 absolute for tiny probabilities */
#define TOL_SWIGLU    1e-6 /* relative, plus 1e-7 absolute */
#define TOL_DOT       1e-5 /* relative to sum |a_i b_i| */
#define TOL_ROPE      2e-6 /* absolute, inputs in [-1, 1] (float rounding of the rotation) */
#define TOL_ROPE_COMP 1e-5 /* absolute: composition and inverse */
#define TOL_ATTN      2e-5 /* absolute, values in [-1, 1] */
#define TOL_HAND      1e-6 /* absolute, references against hand-derived numbers */

static const int sizes[] = {1, 2, 7, 8, 9, 31, 32, 33, 63, 64, 65, 127, 1000};
#define N_SIZES ((int)(sizeof sizes / sizeof sizes[0]))

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd_uni(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() >> 8) * (1.0f / 16777216.0f);
}
static void fill(float *x, int n, float lo, float hi) {
    for (int i = 0; i < n; i++) x[i] = rnd_uni(lo, hi);
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Independent half decode: (-1)^s * 2^(e-15) * (1 + m/1024), or m * 2^-24 for e == 0. */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static int have_simd(void) {
    return skv_kernels_use_simd();
}

/* The vector kernels of one SIMD level, called directly (whatever the dispatchers chose), so
 * that every level the CPU has is tested in one run. */
typedef struct simd_level {
    const char *name;
    void (*rmsnorm)(float *, const float *, const float *, int, float);
    void (*softmax)(float *, int);
    void (*softmax_sum)(double *, float *, int, float);
    void (*swiglu)(float *, const float *, const float *, int);
    void (*rope_apply)(float *, int, int, const float *);
} simd_level;
static const simd_level levels[] = {
    {"avx2", skv_rmsnorm_avx2, skv_softmax_avx2, skv_softmax_sum_avx2, skv_swiglu_avx2,
     skv_rope_apply_avx2},
    {"avx512", skv_rmsnorm_avx512, skv_softmax_avx512, skv_softmax_sum_avx512, skv_swiglu_avx512,
     skv_rope_apply_avx512},
};
/* Levels [0, n) of levels[] that this CPU runs (SKV_SIMD lowers it). */
static int n_levels(void) {
    if (!have_simd()) return 0;
    return skv_simd_active_id() >= SKV_SIMD_AVX512 ? 2 : 1;
}

/* ---- conversions --------------------------------------------------------------------------- */

static void test_f16_all_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = skv_f16_to_f32((uint16_t)h);
        double want = half_value((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_true(isnan(skv_f16_to_f32(skv_f32_to_f16(f))));
            assert_int_equal(skv_f32_to_f16(f) & 0x7c00, 0x7c00);
            continue;
        }
        assert_true((double)f == want);
        assert_int_equal(signbit(f) != 0, (h >> 15) != 0); /* -0 stays -0 */
        assert_int_equal(skv_f32_to_f16(f), h);
    }
}

static void test_f16_rounding(void **state) {
    (void)state;
    struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {1.0f + 0x1p-11f, 0x3c00},            /* tie between 0x3c00 and 0x3c01: even */
        {1.0f + 3 * 0x1p-11f, 0x3c02},        /* tie between 0x3c01 and 0x3c02: even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie */
        {1.0f + 0x1p-11f - 0x1p-22f, 0x3c00}, /* just below */
        {65504.0f, 0x7bff},
        {65519.0f, 0x7bff},
        {65520.0f, 0x7c00}, /* tie with 65536: to even, i.e. overflow to inf */
        {1e10f, 0x7c00},
        {-1e10f, 0xfc00},
        {0x1p-24f, 0x0001},      /* smallest subnormal */
        {0x1p-25f, 0x0000},      /* tie between 0 and 2^-24: even */
        {0x1.0002p-25f, 0x0001}, /* above the tie */
        {3 * 0x1p-25f, 0x0002},  /* tie between 1 and 2 ulps: even */
        {5 * 0x1p-25f, 0x0002},  /* tie between 2 and 3: even */
        {0x1p-14f - 0x1p-25f,
         0x0400}, /* tie at the top of the subnormals rounds to the min normal */
        {0x1p-14f, 0x0400},
        {1e-10f, 0x0000},
        {-0.0f, 0x8000},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {-2.5f, 0xc100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(skv_f32_to_f16(cases[i].f), cases[i].h);
    uint16_t hn = skv_f32_to_f16(NAN);
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
    hn = skv_f32_to_f16(bitsf(0x7f800001u)); /* payload only in the low bits: still nan */
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);

    /* Random floats in the half range: the result is a nearest half, ties to even. */
    for (int t = 0; t < 200000; t++) {
        float f = bitsf((rnd_u32() & 0x8fffffffu) | 0x30000000u); /* |f| in [2^-31, 2^32) */
        uint16_t h = skv_f32_to_f16(f);
        double a = fabs((double)f);
        uint16_t ah = h & 0x7fff;
        if (a >= 65520.0) {
            assert_int_equal(ah, 0x7c00);
            continue;
        }
        double v = half_value(ah);
        double dn = fabs(a - v);
        double dl = ah > 0 ? fabs(a - half_value(ah - 1)) : INFINITY;
        double du = ah < 0x7bff ? fabs(a - half_value(ah + 1)) : INFINITY;
        assert_true(dn <= dl && dn <= du);
        if (dn == dl || dn == du) assert_int_equal(ah & 1, 0);
        assert_int_equal(h >> 15, fbits(f) >> 31);
    }
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = skv_bf16_to_f32((uint16_t)h);
        assert_int_equal(fbits(f), h << 16);
        if (isnan(f))
            assert_true(isnan(skv_bf16_to_f32(skv_f32_to_bf16(f))));
        else
            assert_int_equal(skv_f32_to_bf16(f), h);
    }
    assert_int_equal(skv_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(skv_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);            /* tie: even */
    assert_int_equal(skv_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);        /* tie: even */
    assert_int_equal(skv_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above tie */
    assert_int_equal(skv_f32_to_bf16(-1.0f - 0x1p-7f + 0x1p-12f), 0xbf81);
    assert_int_equal(skv_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_int_equal(skv_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(skv_f32_to_bf16(bitsf(0x00000001u)), 0x0000); /* tiny subnormal */
    assert_int_equal(skv_f32_to_bf16(bitsf(0x00018000u)), 0x0002); /* subnormal tie: even */
    uint16_t b = skv_f32_to_bf16(bitsf(0x7f800001u)); /* nan with low payload stays nan */
    assert_true((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

/* The F16 row conversions (F16C at the SIMD levels) against the scalar converters, bit for bit:
 * every half to float (a signalling NaN comes out quiet), and floats over every exponent with
 * mantissas at and around the rounding ties, NaN payloads, infinities, subnormals, plus random
 * patterns; odd lengths for the tails. */
static void test_f16_rows(void **state) {
    (void)state;
    enum { NH = 65536 };
    uint16_t *h = malloc(2 * NH), *h2 = malloc(2 * NH);
    float *f = malloc(sizeof(float) * NH), *f2 = malloc(sizeof(float) * NH);
    assert_true(h && h2 && f && f2);
    for (int i = 0; i < NH; i++) h[i] = (uint16_t)i;
    skv_f16_row_to_f32(f, h, NH - 3); /* odd length: a scalar tail */
    for (int i = 0; i < NH - 3; i++) {
        float want = skv_f16_to_f32(h[i]);
        if (isnan(want)) want = bitsf(fbits(want) | 0x00400000u); /* rows give quiet NaNs */
        if (memcmp(&want, &f[i], 4) != 0)
            fail_msg("half 0x%04x: row gives 0x%08x, scalar 0x%08x", i, fbits(f[i]), fbits(want));
    }
    static const uint32_t mants[] = {0,        1,        0xfff,    0x1000,   0x1001,   0x2000,
                                     0x3000,   0x5000,   0x7ff000, 0x7fe000, 0x7fffff, 0x400000,
                                     0x401000, 0x3ff000, 0x000fff, 0x100000};
    int n = 0;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    while (n < NH) {
        uint32_t bits;
        if (n < 2 * 256 * 16) {
            int m = n % 16, e = (n / 16) % 256, sgn = n / (16 * 256);
            bits = (uint32_t)sgn << 31 | (uint32_t)e << 23 | mants[m];
        } else {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            bits = (uint32_t)(r >> 11);
        }
        memcpy(&f[n++], &bits, 4);
    }
    /* every tail length, into a buffer of a sentinel that no element may keep and the one
     * past the end must (zeroed memory let a tail that skipped its last element pass) */
    for (int len = NH - 16; len <= NH; len++) {
        memset(h2, 0xAA, 2 * NH);
        skv_f16_row_from_f32(h2, f, len);
        for (int i = 0; i < len; i++)
            if (h2[i] != skv_f32_to_f16(f[i]))
                fail_msg("float 0x%08x (n %d, i %d): row gives 0x%04x, scalar 0x%04x", fbits(f[i]),
                         len, i, h2[i], skv_f32_to_f16(f[i]));
        if (len < NH) assert_int_equal(h2[len], 0xAAAA);
    }
    (void)f2;
    free(h), free(h2), free(f), free(f2);
}

static void test_dispatch_switch(void **state) {
    (void)state;
    bool on = skv_kernels_use_simd();
    char want[40];
    const bool wide = on && skv_simd_active_id() >= SKV_SIMD_AVX512;
    snprintf(want, sizeof want, "%s%s%s%s",
             !on                                      ? "scalar"
             : skv_simd_active_id() < SKV_SIMD_AVX512 ? "avx2+fma+f16c"
                                                      : "avx512",
             wide && skv_simd_has_vnni() ? "+vnni" : "", wide && skv_simd_has_bf16() ? "+bf16" : "",
             wide && skv_simd_has_amx() ? "+amx" : "");
    assert_string_equal(skv_kernels_impl(), want);
    if (wide && skv_simd_has_amx()) { /* AMX switched off for a test: the name says so */
        skv_kernels_amx(false);
        want[strlen(want) - 4] = '\0';
        assert_string_equal(skv_kernels_impl(), want);
        skv_kernels_amx(true);
    }
    skv_kernels_force_ref(true);
    assert_false(skv_kernels_use_simd());
    assert_string_equal(skv_kernels_impl(), "scalar");
    skv_kernels_force_ref(false);
    assert_int_equal(skv_kernels_use_simd(), on);
}

/* ---- references against hand-derived values ------------------------------------------------ */

static void test_ref_hand_values(void **state) {
    (void)state;
    for (int pass = 0; pass < 2; pass++) { /* the reference, then the dispatched kernel */
        /* head_dim 4, n_rot 4, pos 1, theta 10000: pair 0 turns by 1 rad, pair 1 by
         * 10000^(-2/4) = 0.01 rad. cos 1 = 0.5403023058681398, sin 1 = 0.8414709848078965,
         * cos .01 = 0.9999500004166653, sin .01 = 0.009999833334166664. */
        float x[4] = {1, 2, 3, 4};
        if (pass == 0)
            skv_rope_ref(x, 4, 4, 1.0, 10000.0f);
        else
            skv_rope(x, 4, 4, 1.0, 10000.0f);
        assert_float_equal(x[0], 1 * 0.5403023058681398 - 2 * 0.8414709848078965, TOL_HAND);
        assert_float_equal(x[1], 1 * 0.8414709848078965 + 2 * 0.5403023058681398, TOL_HAND);
        assert_float_equal(x[2], 3 * 0.9999500004166653 - 4 * 0.009999833334166664, TOL_HAND);
        assert_float_equal(x[3], 3 * 0.009999833334166664 + 4 * 0.9999500004166653, TOL_HAND);
        /* n_rot 2 of head_dim 6: only the first pair turns. */
        float y[6] = {1, 0, 5, 6, 7, 8};
        if (pass == 0)
            skv_rope_ref(y, 6, 2, 1.0, 10000.0f);
        else
            skv_rope(y, 6, 2, 1.0, 10000.0f);
        assert_float_equal(y[0], 0.5403023058681398, TOL_HAND);
        assert_float_equal(y[1], 0.8414709848078965, TOL_HAND);
        assert_true(y[2] == 5 && y[3] == 6 && y[4] == 7 && y[5] == 8);

        float s[2] = {0.0f, (float)M_LN2}; /* e^ln2 = 2: [1/3, 2/3] */
        if (pass == 0)
            skv_softmax_ref(s, 2);
        else
            skv_softmax(s, 2);
        assert_float_equal(s[0], 1.0 / 3.0, TOL_HAND);
        assert_float_equal(s[1], 2.0 / 3.0, TOL_HAND);
        float m[3] = {-INFINITY, 1.0f, -INFINITY}; /* masked entries get exactly 0 */
        if (pass == 0)
            skv_softmax_ref(m, 3);
        else
            skv_softmax(m, 3);
        assert_true(m[0] == 0.0f && m[2] == 0.0f);
        assert_float_equal(m[1], 1.0, TOL_HAND);

        /* Constant vector 3: rms = 3, so out = w * 3 / sqrt(9 + eps). */
        float c[5] = {3, 3, 3, 3, 3}, w[5] = {1, 2, -1, 0.5f, 4}, o[5];
        if (pass == 0)
            skv_rmsnorm_ref(o, c, w, 5, 0.0f);
        else
            skv_rmsnorm(o, c, w, 5, 0.0f);
        for (int i = 0; i < 5; i++) assert_float_equal(o[i], w[i], TOL_HAND);
        if (pass == 0)
            skv_rmsnorm_ref(o, c, w, 5, 7.0f);
        else
            skv_rmsnorm(o, c, w, 5, 7.0f);
        for (int i = 0; i < 5; i++) assert_float_equal(o[i], w[i] * 0.75, TOL_HAND); /* 3/4 */

        /* silu(0) = 0; silu(1) * 2 = 2 / (1 + e^-1); silu(-3) * 0.5 = -1.5 / (1 + e^3). */
        float gt[3] = {0, 1, -3}, up[3] = {5, 2, 0.5f}, so[3];
        if (pass == 0)
            skv_swiglu_ref(so, gt, up, 3);
        else
            skv_swiglu(so, gt, up, 3);
        assert_float_equal(so[0], 0.0, TOL_HAND);
        assert_float_equal(so[1], 1.4621171572600098, TOL_HAND);
        assert_float_equal(so[2], -0.07113880976635018, TOL_HAND);

        float a[3] = {1, 2, 3}, b[3] = {4, -5, 6};
        assert_float_equal(pass == 0 ? skv_dot_f32_ref(a, b, 3) : skv_dot_f32(a, b, 3), 12.0,
                           TOL_HAND);
    }
}

/* ---- fast paths against the references ---------------------------------------------------- */

static int close_rel(double got, double want, double rel, double abs_tol) {
    return got == want || fabs(got - want) <= rel * fabs(want) + abs_tol; /* == for infinities */
}

static void simd_vs_ref(const simd_level *lv) {
    for (int si = 0; si < N_SIZES; si++) {
        int n = sizes[si];
        float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        assert_non_null(x && w && a && b);

        fill(x, n, -2, 2), fill(w, n, -1.5f, 1.5f);
        skv_rmsnorm_ref(a, x, w, n, 1e-5f);
        lv->rmsnorm(b, x, w, n, 1e-5f);
        for (int i = 0; i < n; i++) assert_true(close_rel(b[i], a[i], TOL_RMSNORM, 1e-30));
        memcpy(b, x, sizeof(float) * n); /* in place */
        lv->rmsnorm(b, b, w, n, 1e-5f);
        for (int i = 0; i < n; i++) assert_true(close_rel(b[i], a[i], TOL_RMSNORM, 1e-30));

        fill(x, n, -30, 30);
        if (n > 3) x[n / 2] = -INFINITY; /* a masked score */
        memcpy(a, x, sizeof(float) * n), memcpy(b, x, sizeof(float) * n);
        skv_softmax_ref(a, n);
        lv->softmax(b, n);
        double tot = 0;
        for (int i = 0; i < n; i++) {
            assert_true(close_rel(b[i], a[i], TOL_SOFTMAX, 1e-9));
            tot += b[i];
        }
        assert_float_equal(tot, 1.0, 1e-5);

        fill(x, n, -12, 12), fill(w, n, -3, 3);
        skv_swiglu_ref(a, x, w, n);
        lv->swiglu(b, x, w, n);
        for (int i = 0; i < n; i++) assert_true(close_rel(b[i], a[i], TOL_SWIGLU, 1e-7));
        memcpy(b, x, sizeof(float) * n);
        lv->swiglu(b, b, w, n); /* out aliases gate */
        for (int i = 0; i < n; i++) assert_true(close_rel(b[i], a[i], TOL_SWIGLU, 1e-7));

        /* a rope table on head_dim n, both layouts, full and partial rotation (values past
         * n_rot untouched) */
        for (int neox = 0; neox < 2; neox++) {
            for (int n_rot = n - n % 2; n_rot >= 2; n_rot = n_rot > 2 ? (n_rot / 2) & ~1 : 0) {
                float *cs = malloc(sizeof(float) * n_rot);
                assert_non_null(cs);
                for (int i = 0; i < n_rot / 2; i++) {
                    double ang = 123.0 * pow(10000.0, -2.0 * i / n_rot);
                    cs[neox ? i : 2 * i] = (float)cos(ang);
                    cs[neox ? n_rot / 2 + i : 2 * i + 1] = (float)sin(ang);
                }
                fill(x, n, -1, 1);
                memcpy(b, x, sizeof(float) * n);
                lv->rope_apply(b, n_rot, neox, cs);
                for (int i = 0; i < n_rot / 2; i++) {
                    int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
                    double c = cs[neox ? i : 2 * i], sn = cs[neox ? n_rot / 2 + i : 2 * i + 1];
                    assert_float_equal(b[i0], x[i0] * c - x[i1] * sn, TOL_ROPE);
                    assert_float_equal(b[i1], x[i0] * sn + x[i1] * c, TOL_ROPE);
                }
                for (int i = n_rot; i < n; i++) assert_true(b[i] == x[i]);
                free(cs);
            }
        }
        free(x), free(w), free(a), free(b);
    }
}

static void test_simd_vs_ref(void **state) {
    (void)state;
    if (!have_simd()) skip();
    for (int l = 0; l < n_levels(); l++) simd_vs_ref(&levels[l]);

    /* the AVX2-only kernels: dot and the direct RoPE */
    for (int si = 0; si < N_SIZES; si++) {
        int n = sizes[si];
        float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        assert_non_null(x && w && a && b);
        fill(x, n, -1, 1), fill(w, n, -1, 1);
        double mag = 0;
        for (int i = 0; i < n; i++) mag += fabs((double)x[i] * w[i]);
        assert_true(close_rel(skv_dot_f32_avx2(x, w, n), skv_dot_f32_ref(x, w, n), 0,
                              TOL_DOT * mag + 1e-30));

        /* rope: head_dim n (odd sizes leave the last value alone), full and partial n_rot */
        const double poss[] = {0.0, 1.0, 17.0, 8191.0, -4096.5, 123456.0};
        for (int pi = 0; pi < 6; pi++) {
            for (int nr = 0; nr < 3; nr++) {
                int n_rot = nr == 0 ? n : nr == 1 ? n / 2 : n + 2; /* n_rot > head_dim clamps */
                fill(x, n, -1, 1);
                memcpy(a, x, sizeof(float) * n), memcpy(b, x, sizeof(float) * n);
                skv_rope_ref(a, n, n_rot, poss[pi], 10000.0f);
                skv_rope_avx2(b, n, n_rot, poss[pi], 10000.0f);
                for (int i = 0; i < n; i++) assert_float_equal(b[i], a[i], TOL_ROPE);
                if (n % 2) assert_true(b[n - 1] == x[n - 1]);
            }
        }
        free(x), free(w), free(a), free(b);
    }
}

/* softmax_sum adds, in double, exactly the probabilities the level's softmax gives the row
 * scaled by float products (the window scores rely on it for the same selections as before the
 * two were fused), onto what acc held; the reference the same with skv_softmax_ref. Rows with
 * -inf entries, all -inf (uniform), and every tail length. */
static void softmax_sum_case(void (*softmax)(float *, int),
                             void (*softmax_sum)(double *, float *, int, float), int n,
                             int all_inf) {
    float *x = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n);
    double *acc = malloc(sizeof(double) * n), *want = malloc(sizeof(double) * n);
    assert_non_null(x && a && acc && want);
    fill(x, n, -40, 40);
    if (n > 3) x[n / 3] = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (all_inf) x[i] = -INFINITY;
        acc[i] = want[i] = 0.25 * i - 3.0;
    }
    const float scale = 0.0883883476f; /* 1/sqrt(128) */
    for (int i = 0; i < n; i++) a[i] = x[i] * scale;
    softmax(a, n);
    /* all -inf: uniform, as documented (not zeros: a hand value, not one level against another) */
    if (all_inf)
        for (int i = 0; i < n; i++) assert_true(a[i] == 1.0f / (float)n);
    for (int i = 0; i < n; i++) want[i] += (double)a[i];
    softmax_sum(acc, x, n, scale);
    assert_memory_equal(acc, want, sizeof(double) * n);
    free(x), free(a), free(acc), free(want);
}

static void test_softmax_sum(void **state) {
    (void)state;
    for (int si = 0; si < N_SIZES; si++)
        for (int inf = 0; inf < 2; inf++) {
            softmax_sum_case(skv_softmax_ref, skv_softmax_sum_ref, sizes[si], inf);
            for (int l = 0; l < n_levels(); l++)
                softmax_sum_case(levels[l].softmax, levels[l].softmax_sum, sizes[si], inf);
            softmax_sum_case(skv_softmax, skv_softmax_sum, sizes[si], inf); /* dispatched */
        }
}

/* Extreme inputs of the vector exp: overflow, underflow, nan. */
static void simd_extremes(const simd_level *lv) {
    float g[9] = {-200, -100, -88.5f, 88.5f, 100, INFINITY, -INFINITY, 0, NAN};
    float u[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, a[9], b[9];
    skv_swiglu_ref(a, g, u, 9);
    lv->swiglu(b, g, u, 9);
    for (int i = 0; i < 8; i++) {
        if (isnan(a[i])) { /* silu(-inf) = -inf/inf */
            assert_true(isnan(b[i]) || b[i] == 0.0f);
            continue;
        }
        assert_true(close_rel(b[i], a[i], TOL_SWIGLU, 1e-30));
    }
    assert_true(isnan(b[8]));
    float s[4] = {1000, -1000, 999, 0};
    lv->softmax(s, 4);
    assert_float_equal(s[0], 1 / (1 + exp(-1.0)), 1e-6);
    assert_float_equal(s[2], exp(-1.0) / (1 + exp(-1.0)), 1e-6);
    assert_true(s[1] == 0.0f && s[3] == 0.0f);
}

static void test_simd_extremes(void **state) {
    (void)state;
    if (!have_simd()) skip();
    for (int l = 0; l < n_levels(); l++) simd_extremes(&levels[l]);
}

static void rope_composition(int use_ref) {
    const int hd = 128;
    float x[128], y[128], z[128];
    const double pa[] = {1.0, 5.0, 100.25, 4000.0, -300.0, 65536.0};
    const double pb[] = {2.0, -5.0, 31.0, 4191.0, 1000.5, -1.0};
    for (int t = 0; t < 6; t++) {
        for (int n_rot = 64; n_rot <= hd; n_rot += 64) {
            fill(x, hd, -1, 1);
            memcpy(y, x, sizeof x), memcpy(z, x, sizeof x);
            if (use_ref) {
                skv_rope_ref(y, hd, n_rot, pa[t], 10000.0f);
                skv_rope_ref(y, hd, n_rot, pb[t], 10000.0f);
                skv_rope_ref(z, hd, n_rot, pa[t] + pb[t], 10000.0f);
            } else {
                skv_rope(y, hd, n_rot, pa[t], 10000.0f);
                skv_rope(y, hd, n_rot, pb[t], 10000.0f);
                skv_rope(z, hd, n_rot, pa[t] + pb[t], 10000.0f);
            }
            for (int i = 0; i < hd; i++) assert_float_equal(y[i], z[i], TOL_ROPE_COMP);
            /* rotate by p and back */
            memcpy(y, x, sizeof x);
            if (use_ref) {
                skv_rope_ref(y, hd, n_rot, pa[t], 500000.0f);
                skv_rope_ref(y, hd, n_rot, -pa[t], 500000.0f);
            } else {
                skv_rope(y, hd, n_rot, pa[t], 500000.0f);
                skv_rope(y, hd, n_rot, -pa[t], 500000.0f);
            }
            for (int i = 0; i < hd; i++) assert_float_equal(y[i], x[i], TOL_ROPE_COMP);
        }
    }
}

static void test_rope_composition(void **state) {
    (void)state;
    rope_composition(1);
    rope_composition(0);
    skv_kernels_force_ref(true);
    rope_composition(0);
    skv_kernels_force_ref(false);
}

/* ---- attention ----------------------------------------------------------------------------- */

/* Rows [n, d] in type t from floats; the decoded floats (what the kernel should see) go to dec. */
static void *encode_rows(skv_type t, const float *src, float *dec, int n, int d) {
    size_t rb = skv_row_bytes(t, d);
    uint8_t *buf = malloc(rb * (size_t)(n > 0 ? n : 1));
    assert_non_null(buf);
    for (int j = 0; j < n; j++) {
        const float *s = src + (size_t)j * d;
        float *o = dec + (size_t)j * d;
        uint8_t *row = buf + (size_t)j * rb;
        if (t == SKV_TYPE_F32) {
            memcpy(row, s, sizeof(float) * d);
            memcpy(o, s, sizeof(float) * d);
        } else if (t == SKV_TYPE_F16) {
            for (int c = 0; c < d; c++) {
                uint16_t h = skv_f32_to_f16(s[c]);
                memcpy(row + 2 * c, &h, 2);
                o[c] = (float)half_value(h);
            }
        } else { /* Q8_0 by hand: scale max|x|/127 as f16, q = round(x / scale) */
            for (int b = 0; b < d / 32; b++) {
                uint8_t *blk = row + (size_t)b * 34;
                float amax = 0;
                for (int c = 0; c < 32; c++) amax = fmaxf(amax, fabsf(s[b * 32 + c]));
                uint16_t h = skv_f32_to_f16(amax / 127.0f);
                double sc = half_value(h);
                memcpy(blk, &h, 2);
                for (int c = 0; c < 32; c++) {
                    long qv = sc > 0 ? lround(s[b * 32 + c] / sc) : 0;
                    qv = qv > 127 ? 127 : qv < -127 ? -127 : qv;
                    blk[2 + c] = (uint8_t)(int8_t)qv;
                    o[b * 32 + c] = (float)(sc * (double)qv);
                }
            }
        }
    }
    return buf;
}

/* out[i] = sum_j softmax_j(scale q_i . k_j) v_j, all in float64, two plain passes. */
static void naive_attn(double *out, const float *q, int g, int d, const float *k, const float *v,
                       int n, double scale) {
    double *s = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    assert_non_null(s);
    for (int i = 0; i < g; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double t = 0;
            for (int c = 0; c < d; c++) t += (double)q[i * d + c] * k[(size_t)j * d + c];
            s[j] = t * scale;
            if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mx));
        for (int c = 0; c < d; c++) {
            double acc = 0;
            for (int j = 0; j < n; j++) acc += s[j] * v[(size_t)j * d + c];
            out[i * d + c] = n > 0 ? acc / sum : 0.0;
        }
    }
    free(s);
}

/* mode 0: rising scores (the running max moves at every row), 1: random, 2: peaked. */
static void attn_case(skv_type t, int g, int d, int n, int mode) {
    float *q = malloc(sizeof(float) * g * d);
    float *kf = malloc(sizeof(float) * (size_t)(n + 1) * d),
          *vf = malloc(sizeof(float) * (size_t)(n + 1) * d);
    float *kd = malloc(sizeof(float) * (size_t)(n + 1) * d),
          *vd = malloc(sizeof(float) * (size_t)(n + 1) * d);
    float *o = malloc(sizeof(float) * g * d);
    double *want = malloc(sizeof(double) * g * d);
    assert_non_null(q && kf && vf && kd && vd && o && want);
    fill(q, g * d, -1, 1);
    fill(kf, n * d, -1, 1);
    fill(vf, n * d, -1, 1);
    if (mode == 0) /* k_j leans more and more towards q_0 */
        for (int j = 0; j < n; j++)
            for (int c = 0; c < d; c++)
                kf[(size_t)j * d + c] = 0.02f * kf[(size_t)j * d + c] + q[c] * (float)j / (n + 1);
    float scale = mode == 2 ? 8.0f / sqrtf((float)d) : 1.0f / sqrtf((float)d);
    void *kb = encode_rows(t, kf, kd, n, d), *vb = encode_rows(t, vf, vd, n, d);
    naive_attn(want, q, g, d, kd, vd, n, scale);
    for (int path = 0; path < 3; path++) {
        for (int i = 0; i < g * d; i++) o[i] = NAN; /* every value must be written */
        if (path == 0) {
            skv_attn_group_ref(o, q, g, d, kb, vb, t, n, scale);
        } else {
            skv_kernels_force_ref(path == 2); /* 1: fast path (when the CPU has it), 2: scalar */
            skv_attn_group(o, q, g, d, kb, vb, t, n, scale);
            skv_kernels_force_ref(false);
        }
        for (int i = 0; i < g * d; i++) {
            if (fabs(o[i] - want[i]) > TOL_ATTN)
                fail_msg("attn type %d g %d d %d n %d mode %d path %d: out[%d] = %.8g, want %.8g",
                         (int)t, g, d, n, mode, path, i, o[i], want[i]);
        }
    }
    free(q), free(kf), free(vf), free(kd), free(vd), free(o), free(want), free(kb), free(vb);
}

static void test_attention(void **state) {
    (void)state;
    const skv_type types[] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_Q8_0};
    const int ds[] = {8, 64, 128}, ns[] = {0, 1, 5, 1000};
    for (int ti = 0; ti < 3; ti++)
        for (int g = 1; g <= 4; g++)
            for (int di = 0; di < 3; di++)
                for (int ni = 0; ni < 4; ni++) {
                    if (types[ti] == SKV_TYPE_Q8_0 && ds[di] % 32) continue;
                    for (int mode = 0; mode < 3; mode++) {
                        if (mode != 1 && ns[ni] != 1000) continue;
                        attn_case(types[ti], g, ds[di], ns[ni], mode);
                    }
                }
}

/* Head sizes and group sizes off the common path: d not a multiple of 8 goes through the
 * portable single-pass loop; d not a multiple of 16 or 32 takes the narrower value blocks; many
 * heads cross the head chunking. */
static void test_attention_shapes(void **state) {
    (void)state;
    attn_case(SKV_TYPE_F32, 2, 12, 37, 1);
    attn_case(SKV_TYPE_F16, 3, 80, 33, 1);
    attn_case(SKV_TYPE_F16, 1, 96, 9, 0);
    attn_case(SKV_TYPE_F32, 1, 512, 20, 1);
    attn_case(SKV_TYPE_Q8_0, 2, 256, 17, 1);
    attn_case(SKV_TYPE_F32, 70, 16, 11, 1);
    attn_case(SKV_TYPE_F32, 8, 64, 15, 2);
    attn_case(SKV_TYPE_F16, 3, 24, 21, 0);
    attn_case(SKV_TYPE_F32, 4, 40, 13, 1);
    attn_case(SKV_TYPE_Q8_0, 3, 96, 29, 0);
    attn_case(SKV_TYPE_Q8_0, 4, 32, 8, 1);
    attn_case(SKV_TYPE_F16, 7, 128, 300, 0);
}

/* An infinite value in the last V row stays +inf in the output at every level and tile tail
 * (the padded rows of a partial last tile weigh 0 and must not turn it into 0 x inf = NaN). */
static void test_attention_inf_tail(void **state) {
    (void)state;
    enum { G = 2, D = 64 };
    const int ns[] = {1, 5, 8, 20, 37};
    for (int ni = 0; ni < 5; ni++) {
        const int n = ns[ni];
        float q[G * D], out[G * D];
        float *k = malloc(sizeof(float) * n * D), *v = malloc(sizeof(float) * n * D);
        assert_true(k && v);
        fill(q, G * D, -1, 1), fill(k, n * D, -1, 1), fill(v, n * D, -1, 1);
        v[(size_t)(n - 1) * D + 3] = INFINITY;
        for (int lv = 0; lv < 3; lv++) {
            if (lv == 1 && !have_simd()) continue;
            if (lv == 2 && skv_simd_active_id() < SKV_SIMD_AVX512) continue;
            if (lv == 0)
                skv_attn_group_ref(out, q, G, D, k, v, SKV_TYPE_F32, n, 0.125f);
            else if (lv == 1)
                skv_attn_group_avx2(out, NULL, q, G, D, k, v, SKV_TYPE_F32, n, 0.125f);
            else
                skv_attn_group_avx512(out, NULL, q, G, D, k, v, SKV_TYPE_F32, n, 0.125f);
            for (int i = 0; i < G * D; i++)
                if (i % D == 3 ? !(out[i] == INFINITY) : !isfinite(out[i]))
                    fail_msg("level %d n %d: out[%d] = %g", lv, n, i, out[i]);
        }
        free(k), free(v);
    }
}

/* Invalid kv shapes write zeros rather than read out of bounds. */
static void test_attention_invalid(void **state) {
    (void)state;
    float q[2 * 8], o[2 * 8];
    uint8_t kv[64] = {0};
    fill(q, 16, -1, 1);
    for (int i = 0; i < 16; i++) o[i] = NAN;
    skv_attn_group(o, q, 2, 8, kv, kv, SKV_TYPE_Q8_0, 1, 1.0f); /* 8 is not a block multiple */
    for (int i = 0; i < 16; i++) assert_true(o[i] == 0.0f);
    for (int i = 0; i < 16; i++) o[i] = NAN;
    skv_attn_group(o, q, 2, 8, kv, kv, SKV_TYPE_Q4_0, 1, 1.0f);
    for (int i = 0; i < 16; i++) assert_true(o[i] == 0.0f);
}

/* The two-step rotation (angles once, applied to many vectors) equals skv_rope_ref. */
static void test_rope_two_step(void **state) {
    (void)state;
    const double pos[] = {0, 1, 7, -3, 1000, -4095.0, 8191};
    float cs[128], a[128], b[128];
    for (int k = 0; k < (int)(sizeof pos / sizeof pos[0]); k++) {
        for (int n_rot = 2; n_rot <= 128; n_rot *= 4) {
            fill(a, 128, -1, 1);
            memcpy(b, a, sizeof a);
            skv_rope_ref(a, 128, n_rot, pos[k], 10000.0f);
            skv_rope_angles(cs, n_rot, pos[k], 10000.0f);
            skv_rope_apply(b, n_rot, cs);
            for (int i = 0; i < 128; i++) assert_true(fabsf(a[i] - b[i]) < TOL_ROPE);
        }
    }
}

/* Split-K: attention over K/V cut into chunks, merged through each chunk's log-sum-exp, equals
 * attention over the whole range; and lse itself equals a float64 log-sum-exp. */
static void test_attention_split_lse(void **state) {
    (void)state;
    enum { G = 3, D = 64, N = 1000 };
    static float q[G * D], k[N * D], v[N * D], whole[G * D], part[4][G * D], merged[G * D];
    float lse[4][G], lse_all[G];
    fill(q, G * D, -1, 1);
    fill(k, N * D, -1, 1);
    fill(v, N * D, -1, 1);
    const float scale = 0.125f;
    for (int forced = 0; forced < 2; forced++) {
        skv_kernels_force_ref(forced);
        skv_attn_group_lse(whole, lse_all, q, G, D, k, v, SKV_TYPE_F32, N, scale);
        for (int i = 0; i < G; i++) { /* float64 log-sum-exp */
            double mx = -INFINITY, sum = 0;
            double sc[N];
            for (int j = 0; j < N; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += (double)q[i * D + c] * k[j * D + c];
                sc[j] = dot * scale;
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < N; j++) sum += exp(sc[j] - mx);
            assert_true(fabs(lse_all[i] - (mx + log(sum))) < 1e-4);
        }
        const int cut[5] = {0, 1, 400, 400, N}; /* includes an empty chunk */
        for (int c = 0; c < 4; c++)
            skv_attn_group_lse(part[c], lse[c], q, G, D, k + (size_t)cut[c] * D,
                               v + (size_t)cut[c] * D, SKV_TYPE_F32, cut[c + 1] - cut[c], scale);
        assert_true(isinf(lse[2][0]) && lse[2][0] < 0);
        for (int i = 0; i < G; i++) {
            double m = -INFINITY, tot = 0;
            for (int c = 0; c < 4; c++) m = fmax(m, lse[c][i]);
            for (int c = 0; c < 4; c++) tot += exp(lse[c][i] - m);
            for (int x = 0; x < D; x++) {
                double o = 0;
                for (int c = 0; c < 4; c++) o += exp(lse[c][i] - m) / tot * part[c][i * D + x];
                merged[i * D + x] = (float)o;
            }
        }
        for (int x = 0; x < G * D; x++) assert_true(fabsf(merged[x] - whole[x]) < TOL_ATTN);
    }
    skv_kernels_force_ref(false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_all_values),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dispatch_switch),
        cmocka_unit_test(test_f16_rows),
        cmocka_unit_test(test_ref_hand_values),
        cmocka_unit_test(test_simd_vs_ref),
        cmocka_unit_test(test_simd_extremes),
        cmocka_unit_test(test_softmax_sum),
        cmocka_unit_test(test_rope_composition),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_shapes),
        cmocka_unit_test(test_attention_invalid),
        cmocka_unit_test(test_attention_inf_tail),
        cmocka_unit_test(test_attention_split_lse),
        cmocka_unit_test(test_rope_two_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
