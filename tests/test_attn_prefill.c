/* test_attn_prefill.c — the blocked prefill attention (SIMD and forced scalar) against a float64
 * two-pass softmax, over head counts, head sizes, token counts, visibility patterns, F32/F16
 * entries and padded strides; plus the contract's edges (no visible entry, unsupported types,
 * rows outside the outputs untouched). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kernels/attn_prefill.h"
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-5 /* absolute, values in [-1, 1] */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd_uni(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() >> 8) * (1.0f / 16777216.0f);
}
static int rnd_int(int n) { /* [0, n) */
    return (int)(rnd_u32() % (uint32_t)n);
}

/* Half to double from the bit fields (independent of the library's converter). */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double x = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -x : x;
}

/* K or V of `rows` rows of hd values in type t; vals receives the exact stored values. */
static void *make_kv(skv_type t, int rows, int hd, double *vals, float lo, float hi) {
    size_t count = (size_t)rows * hd;
    if (t == SKV_TYPE_F32) {
        float *x = malloc(sizeof(float) * count);
        assert_non_null(x);
        for (size_t i = 0; i < count; i++) x[i] = rnd_uni(lo, hi), vals[i] = x[i];
        return x;
    }
    uint16_t *x = malloc(2 * count);
    assert_non_null(x);
    for (size_t i = 0; i < count; i++) {
        x[i] = skv_f32_to_f16(rnd_uni(lo, hi));
        vals[i] = half_value(x[i]);
    }
    return x;
}

/* out[i][h] in float64: the maximum first, then the normalized weighted sum. */
static void reference(double *ref, const float *q, size_t q_stride, int n, int g, int hd,
                      const double *k, const double *v, const int *n_vis, float scale) {
    double *s = malloc(sizeof(double) * 20000);
    assert_non_null(s);
    for (int i = 0; i < n; i++) {
        for (int h = 0; h < g; h++) {
            const float *qh = q + (size_t)i * q_stride + (size_t)h * hd;
            double *o = ref + ((size_t)i * g + h) * hd;
            for (int c = 0; c < hd; c++) o[c] = 0.0;
            int nv = n_vis[i];
            assert_true(nv <= 20000);
            if (nv <= 0) continue;
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < nv; j++) {
                double d = 0.0;
                for (int c = 0; c < hd; c++) d += (double)qh[c] * k[(size_t)j * hd + c];
                s[j] = d * scale;
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < nv; j++) {
                double p = exp(s[j] - mx);
                sum += p;
                for (int c = 0; c < hd; c++) o[c] += p * v[(size_t)j * hd + c];
            }
            for (int c = 0; c < hd; c++) o[c] /= sum;
        }
    }
    free(s);
}

enum { PAT_CAUSAL, PAT_OFFSET, PAT_EQUAL, PAT_ZEROS, PAT_JUMPS, PAT_UNORDERED, PAT_COUNT };

/* n_vis for pattern pat over `entries` entries (entries >= n for the causal pattern). */
static void make_vis(int *n_vis, int n, int entries, int pat) {
    int t0 = entries - n, z = n / 3 + 1, cur = 0;
    for (int i = 0; i < n; i++) {
        switch (pat) {
        case PAT_CAUSAL:
            n_vis[i] = i + 1;
            break;
        case PAT_OFFSET:
            n_vis[i] = t0 + i + 1;
            break;
        case PAT_EQUAL:
            n_vis[i] = entries;
            break;
        case PAT_ZEROS:
            n_vis[i] = i < z ? 0 : SKV_MIN(entries, t0 + i + 1);
            break;
        case PAT_JUMPS:
            cur += rnd_int(2 * entries / n + 300); /* (SKV_MIN evaluates twice) */
            cur = SKV_MIN(entries, cur);
            n_vis[i] = cur;
            break;
        default:
            n_vis[i] = rnd_int(entries + 1);
            break; /* not required, still correct */
        }
    }
}

typedef struct cfg {
    int g, hd, n, entries, pat;
    skv_type t;
    float scale;
} cfg;

/* One case through the dispatcher with SIMD allowed and with the scalar path forced: both
 * against float64, and the paddings of out (between rows and after) untouched. */
static void run_case(const cfg *cf) {
    int g = cf->g, hd = cf->hd, n = cf->n, e = cf->entries;
    size_t qs = (size_t)g * hd + (size_t)rnd_int(13), os = (size_t)g * hd + (size_t)rnd_int(11);
    float *q = malloc(sizeof(float) * qs * n);
    double *kd = malloc(sizeof(double) * (size_t)e * hd), *vd = malloc(sizeof(double) * e * hd);
    double *ref = malloc(sizeof(double) * (size_t)n * g * hd);
    int *n_vis = malloc(sizeof(int) * n);
    size_t out_len = os * n + 5;
    float *out = malloc(sizeof(float) * out_len);
    size_t ws = skv_attn_prefill_work_size(n, g, hd);
    unsigned char *work = malloc(ws + 3);
    assert_true(q && kd && vd && ref && n_vis && out && work);
    for (size_t i = 0; i < qs * n; i++) q[i] = rnd_uni(-1.0f, 1.0f);
    void *k = make_kv(cf->t, e, hd, kd, -1.0f, 1.0f), *v = make_kv(cf->t, e, hd, vd, -1.0f, 1.0f);
    make_vis(n_vis, n, e, cf->pat);
    reference(ref, q, qs, n, g, hd, kd, vd, n_vis, cf->scale);

    for (int pass = 0; pass < 2; pass++) {
        skv_kernels_force_ref(pass == 1);
        for (size_t i = 0; i < out_len; i++) out[i] = NAN;
        /* work at an odd address: any alignment is allowed */
        assert_true(
            skv_attn_prefill(out, os, q, qs, n, g, hd, k, v, cf->t, n_vis, cf->scale, work + 3));
        double worst = 0.0;
        for (int i = 0; i < n; i++) {
            for (size_t c = 0; c < os; c++) {
                float x = out[(size_t)i * os + c];
                if (c >= (size_t)g * hd) {
                    assert_true(isnan(x)); /* padding left alone */
                    continue;
                }
                double err = fabs((double)x - ref[(size_t)i * g * hd + c]);
                if (!(err <= worst)) worst = err; /* NaN sticks */
            }
        }
        for (size_t i = os * n; i < out_len; i++) assert_true(isnan(out[i]));
        if (!(worst <= TOL))
            fail_msg("g=%d hd=%d n=%d entries=%d pattern=%d type=%d scale=%g %s: error %g", g, hd,
                     n, e, cf->pat, (int)cf->t, cf->scale, pass ? "scalar" : "default", worst);
    }
    skv_kernels_force_ref(false);
    free(q), free(kd), free(vd), free(ref), free(n_vis), free(out), free(work), free(k), free(v);
}

/* Every g x hd x type, cycling through token counts and patterns; the entries are sized so
 * that each case stays around a million multiply-adds in the float64 reference. */
static void test_random_shapes(void **state) {
    (void)state;
    static const int gs[] = {1, 2, 3, 4, 7}, hds[] = {8, 16, 64, 128}, ns[] = {1, 2, 7, 33, 100};
    int idx = 0;
    for (int a = 0; a < 5; a++) {
        for (int b = 0; b < 4; b++) {
            for (int t = 0; t < 2; t++) {
                for (int rep = 0; rep < 3; rep++, idx++) {
                    cfg cf = {.g = gs[a], .hd = hds[b], .n = ns[idx % 5], .pat = idx % PAT_COUNT};
                    cf.t = t ? SKV_TYPE_F16 : SKV_TYPE_F32;
                    cf.scale = (rep == 2 ? 3.0f : 1.0f) / sqrtf((float)cf.hd);
                    long e = 1500000L / ((long)cf.g * cf.hd * cf.n) + rnd_int(40);
                    cf.entries = (int)SKV_MAX(cf.n, SKV_MIN(1500L, e));
                    run_case(&cf);
                }
            }
        }
    }
}

/* Long contexts: many chunks of keys per row, with offset causal and jumping visibility. */
static void test_long_context(void **state) {
    (void)state;
    cfg a = {.g = 3, .hd = 64, .n = 7, .entries = 1500, .pat = PAT_OFFSET, .t = SKV_TYPE_F32};
    a.scale = 0.125f;
    run_case(&a);
    cfg b = {.g = 2, .hd = 16, .n = 33, .entries = 1499, .pat = PAT_JUMPS, .t = SKV_TYPE_F16};
    b.scale = 0.25f;
    run_case(&b);
    /* rows past one whole block of SKV_AP_ROWS (96) into a partial one, all entries visible:
     * at 8 lanes (hd 8) and at every width (hd 16) */
    _Static_assert(SKV_AP_ROWS == 96, "the row counts below straddle a block");
    cfg c = {.g = 4, .hd = 8, .n = 25, .entries = 1031, .pat = PAT_EQUAL, .t = SKV_TYPE_F32};
    c.scale = 1.0f;
    run_case(&c);
    cfg d = {.g = 4, .hd = 16, .n = 49, .entries = 1031, .pat = PAT_EQUAL, .t = SKV_TYPE_F16};
    d.scale = 0.25f;
    run_case(&d);
}

/* An entry a row does not see must not touch it, even when it holds an infinity or a NaN (an F16
 * cache saturates to infinity past 65504): causal rows before the bad entry match the reference
 * computed without it, at every width and on the scalar path; rows that see it are not
 * checked. */
static void test_unseen_infinity(void **state) {
    (void)state;
    static const int hds[] = {8, 16, 64};
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 2; t++)
            for (int bad = 0; bad < 2; bad++) {
                const int g = 2, hd = hds[b], n = 60, e = 60, at = 37;
                const skv_type kt = t ? SKV_TYPE_F16 : SKV_TYPE_F32;
                const size_t st = (size_t)g * hd;
                float *q = malloc(sizeof(float) * n * st), *out = malloc(sizeof(float) * n * st);
                double *kd = malloc(sizeof(double) * e * hd), *vd = malloc(sizeof(double) * e * hd);
                double *ref = malloc(sizeof(double) * n * st);
                int *vis = malloc(sizeof(int) * n);
                void *work = malloc(skv_attn_prefill_work_size(n, g, hd));
                assert_true(q && out && kd && vd && ref && vis && work);
                for (size_t i = 0; i < n * st; i++) q[i] = rnd_uni(-1.0f, 1.0f);
                void *k = make_kv(kt, e, hd, kd, -1.0f, 1.0f), *v = make_kv(kt, e, hd, vd, -1, 1);
                for (int i = 0; i < n; i++) vis[i] = i + 1;
                reference(ref, q, st, n, g, hd, kd, vd, vis, 0.3f);
                /* then spoil entry `at` of V (and of K: its score is masked, not multiplied) */
                for (int c = 0; c < hd; c += 3) {
                    float x = bad ? NAN : (c & 1 ? -INFINITY : INFINITY);
                    size_t o = (size_t)at * hd + c;
                    if (t)
                        ((uint16_t *)v)[o] = ((uint16_t *)k)[o] = skv_f32_to_f16(x);
                    else
                        ((float *)v)[o] = ((float *)k)[o] = x;
                }
                for (int pass = 0; pass < 2; pass++) {
                    skv_kernels_force_ref(pass == 1);
                    assert_true(
                        skv_attn_prefill(out, st, q, st, n, g, hd, k, v, kt, vis, 0.3f, work));
                    for (size_t i = 0; i < (size_t)at * st; i++)
                        if (!(fabs(out[i] - ref[i]) <= TOL))
                            fail_msg("hd=%d %s %s value %zu: %g, expected %g (%s)", hd,
                                     skv_type_name(kt), bad ? "NaN" : "inf", i, out[i], ref[i],
                                     pass ? "scalar" : "default");
                }
                skv_kernels_force_ref(false);
                free(q), free(out), free(kd), free(vd), free(ref), free(vis), free(work), free(k),
                    free(v);
            }
}

/* Head sizes that are not multiples of 8 take the scalar path even with SIMD on. */
static void test_odd_head_size(void **state) {
    (void)state;
    cfg a = {.g = 3, .hd = 12, .n = 9, .entries = 300, .pat = PAT_OFFSET, .t = SKV_TYPE_F16};
    a.scale = 0.3f;
    run_case(&a);
    cfg b = {.g = 1, .hd = 4, .n = 5, .entries = 5, .pat = PAT_CAUSAL, .t = SKV_TYPE_F32};
    b.scale = 0.5f;
    run_case(&b);
}

/* Scores that keep rising along the keys: every chunk brings a new maximum, so what earlier
 * chunks accumulated must be rescaled (and weights of early keys underflow). */
static void test_rising_scores(void **state) {
    (void)state;
    enum { G = 2, HD = 16, N = 5, E = 700 };
    for (int t = 0; t < 2; t++) {
        skv_type kt = t ? SKV_TYPE_F16 : SKV_TYPE_F32;
        static float q[N * G * HD], out[N * G * HD], kf[E * HD], vf[E * HD];
        static uint16_t kh[E * HD], vh[E * HD];
        static double kd[E * HD], vd[E * HD], ref[N * G * HD];
        int n_vis[N];
        for (int i = 0; i < N * G * HD; i++) q[i] = 1.0f;
        for (int j = 0; j < E; j++) {
            for (int c = 0; c < HD; c++) {
                float kx = (float)j / E, vx = rnd_uni(-1.0f, 1.0f);
                kh[j * HD + c] = skv_f32_to_f16(kx), vh[j * HD + c] = skv_f32_to_f16(vx);
                kf[j * HD + c] = t ? (float)half_value(kh[j * HD + c]) : kx;
                vf[j * HD + c] = t ? (float)half_value(vh[j * HD + c]) : vx;
                kd[j * HD + c] = kf[j * HD + c], vd[j * HD + c] = vf[j * HD + c];
            }
        }
        for (int i = 0; i < N; i++) n_vis[i] = E - N + 1 + i;
        float scale = 4.0f; /* scores 0 .. 64: a steep softmax */
        reference(ref, q, G * HD, N, G, HD, kd, vd, n_vis, scale);
        void *work = malloc(skv_attn_prefill_work_size(N, G, HD));
        assert_non_null(work);
        for (int pass = 0; pass < 2; pass++) {
            skv_kernels_force_ref(pass == 1);
            assert_true(skv_attn_prefill(out, G * HD, q, G * HD, N, G, HD, t ? (void *)kh : kf,
                                         t ? (void *)vh : vf, kt, n_vis, scale, work));
            for (int i = 0; i < N * G * HD; i++) assert_true(fabs(out[i] - ref[i]) <= TOL);
        }
        skv_kernels_force_ref(false);
        free(work);
    }
}

/* No visible entry gives zeros; unsupported types and empty calls write nothing. */
static void test_edges(void **state) {
    (void)state;
    enum { G = 3, HD = 8, N = 4 };
    float q[N * G * HD], out[N * G * HD], kv[4 * HD];
    uint8_t work_raw[1];
    void *work = malloc(skv_attn_prefill_work_size(N, G, HD));
    assert_non_null(work);
    for (int i = 0; i < N * G * HD; i++) q[i] = rnd_uni(-1.0f, 1.0f);
    for (int i = 0; i < 4 * HD; i++) kv[i] = rnd_uni(-1.0f, 1.0f);
    int zeros[N] = {0, 0, 0, 0};
    for (int pass = 0; pass < 2; pass++) {
        skv_kernels_force_ref(pass == 1);
        for (int i = 0; i < N * G * HD; i++) out[i] = NAN;
        assert_true(skv_attn_prefill(out, G * HD, q, G * HD, N, G, HD, kv, kv, SKV_TYPE_F32, zeros,
                                     0.5f, work));
        for (int i = 0; i < N * G * HD; i++) assert_true(out[i] == 0.0f);

        static const skv_type bad[] = {SKV_TYPE_Q8_0, SKV_TYPE_Q4_0, SKV_TYPE_BF16, SKV_TYPE_Q4_K};
        int ones[N] = {1, 1, 1, 1};
        for (int b = 0; b < 4; b++) {
            for (int i = 0; i < N * G * HD; i++) out[i] = NAN;
            assert_false(skv_attn_prefill(out, G * HD, q, G * HD, N, G, HD, kv, kv, bad[b], ones,
                                          0.5f, work));
            for (int i = 0; i < N * G * HD; i++) assert_true(isnan(out[i]));
        }
        /* nothing to do */
        assert_true(skv_attn_prefill(out, G * HD, q, G * HD, 0, G, HD, kv, kv, SKV_TYPE_F32, ones,
                                     0.5f, work_raw));
        for (int i = 0; i < N * G * HD; i++) assert_true(isnan(out[i]));
    }
    skv_kernels_force_ref(false);
    /* one visible entry: its value row, exactly up to the division by its weight */
    int one[1] = {1};
    assert_true(skv_attn_prefill(out, G * HD, q, G * HD, 1, G, HD, kv, kv + HD, SKV_TYPE_F32, one,
                                 0.5f, work));
    for (int h = 0; h < G; h++)
        for (int c = 0; c < HD; c++) assert_true(fabsf(out[h * HD + c] - kv[HD + c]) <= 1e-6f);
    free(work);
}

/* The AVX-512 body is the AVX2 one at 16 lanes: every row's operations are the same but for keys
 * the row does not see, which a wider tile runs through without adding anything to the row, so
 * the outputs must be the same bits (odd counts, partial blocks, F32 and F16, causal and random
 * visibility, padded strides). Only on a CPU with AVX-512. */
static void test_widths_same_bits(void **state) {
    (void)state;
#if defined(__x86_64__) || defined(__i386__)
    if (skv_simd_cpu_id() < SKV_SIMD_AVX512) skip();
    /* g = 7 moves to the next token at a different lane in each vector; n = 32 at g = 3 is
     * forward.c's block, exactly one block of rows; strides padded (q by 3, out by 5 floats) */
    static const int gs[] = {1, 2, 3, 4, 7}, hds[] = {16, 64, 128}, ns[] = {1, 13, 32, 50, 100};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 5; c++)
                for (int t = 0; t < 2; t++) {
                    const int g = gs[a], hd = hds[b], n = ns[c], entries = n + 300 + 37 * c;
                    const skv_type kt = t ? SKV_TYPE_F16 : SKV_TYPE_F32;
                    const size_t qs = (size_t)g * hd + 3, os = (size_t)g * hd + 5;
                    double *vals = malloc(sizeof(double) * (size_t)entries * hd);
                    float *q = malloc(sizeof(float) * (size_t)n * qs);
                    float *o2 = malloc(sizeof(float) * (size_t)n * os);
                    float *o5 = malloc(sizeof(float) * (size_t)n * os);
                    int *vis = malloc(sizeof(int) * (size_t)n);
                    assert_true(vals && q && o2 && o5 && vis);
                    void *k = make_kv(kt, entries, hd, vals, -1.0f, 1.0f);
                    void *v = make_kv(kt, entries, hd, vals, -1.0f, 1.0f);
                    for (size_t i = 0; i < (size_t)n * qs; i++) q[i] = rnd_uni(-1.0f, 1.0f);
                    for (size_t i = 0; i < (size_t)n * os; i++) o2[i] = o5[i] = NAN;
                    for (int i = 0; i < n; i++)
                        vis[i] = c % 2 ? entries - n + i + 1 : rnd_int(entries + 1);
                    size_t ws = skv_attn_prefill_work_size(n, g, hd) + 64;
                    uint8_t *work = malloc(ws);
                    assert_non_null(work);
                    void *w = (void *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
                    const float scale = 1.0f / sqrtf((float)hd);
                    skv_attn_prefill_avx2(o2, os, q, qs, n, g, hd, k, v, kt, vis, scale, w);
                    skv_attn_prefill_avx512(o5, os, q, qs, n, g, hd, k, v, kt, vis, scale, w);
                    if (memcmp(o2, o5, sizeof(float) * (size_t)n * os) != 0)
                        fail_msg("g=%d hd=%d n=%d %s: AVX2 and AVX-512 outputs differ", g, hd, n,
                                 skv_type_name(kt));
                    for (int i = 0; i < n; i++) /* the padding between rows left alone */
                        for (size_t x = (size_t)g * hd; x < os; x++)
                            assert_true(isnan(o5[(size_t)i * os + x]));
                    free(work), free(k), free(v), free(vals), free(q), free(o2), free(o5),
                        free(vis);
                }
#else
    skip();
#endif
}

/* The AMX variant (F16 caches, hd % 32 == 0, on a CPU with AMX-BF16): against float64 within the
 * same tolerance, over head counts, token counts that straddle blocks, causal, offset and random
 * visibility and more than one chunk of keys; never the AVX-512 code's bits (so a fall back to it
 * in any shape fails); a chunk holding an infinity takes the vector code, the others the tiles. */
static void test_amx(void **state) {
    (void)state;
#ifdef SKV_HAVE_MATMUL_AMX
    if (!skv_kernels_use_amx()) skip();
    static const int gs[] = {1, 3, 4, 7}, hds[] = {32, 64, 128}, ns[] = {1, 13, 32, 50, 100};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 5; c++) {
                const int g = gs[a], hd = hds[b], n = ns[c], e = n + 200 + 37 * c, pat = c % 3;
                const size_t qs = (size_t)g * hd + 3, os = (size_t)g * hd + 5;
                float *q = malloc(sizeof(float) * (size_t)n * qs);
                float *o = malloc(sizeof(float) * (size_t)n * os);
                float *o5 = malloc(sizeof(float) * (size_t)n * os);
                double *kd = malloc(sizeof(double) * (size_t)e * hd);
                double *vd = malloc(sizeof(double) * (size_t)e * hd);
                double *ref = malloc(sizeof(double) * (size_t)n * g * hd);
                int *vis = malloc(sizeof(int) * (size_t)n);
                uint8_t *work = malloc(skv_attn_prefill_work_size(n, g, hd)); /* + 64 inside */
                assert_true(q && o && o5 && kd && vd && ref && vis && work);
                void *w = (void *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
                for (size_t i = 0; i < (size_t)n * qs; i++) q[i] = rnd_uni(-1.0f, 1.0f);
                void *k = make_kv(SKV_TYPE_F16, e, hd, kd, -1.0f, 1.0f);
                void *v = make_kv(SKV_TYPE_F16, e, hd, vd, -1.0f, 1.0f);
                make_vis(vis, n, e, pat == 0 ? PAT_OFFSET : pat == 1 ? PAT_UNORDERED : PAT_JUMPS);
                const float scale = 1.0f / sqrtf((float)hd);
                reference(ref, q, qs, n, g, hd, kd, vd, vis, scale);
                /* n = 100: then an infinity in K and V at entry `at` of the last chunk (of 4),
                 * which rows up to n / 2 do not see (offset causal); rows that see it are not
                 * checked */
                int checked = n;
                if (c == 4) {
                    const int at = e - n + n / 2;
                    make_vis(vis, n, e, PAT_OFFSET);
                    reference(ref, q, qs, n, g, hd, kd, vd, vis, scale);
                    ((uint16_t *)v)[(size_t)at * hd + 1] = ((uint16_t *)k)[(size_t)at * hd] =
                        0x7c00;
                    checked = n / 2;
                }
                for (size_t i = 0; i < (size_t)n * os; i++) o[i] = o5[i] = NAN;
                skv_attn_prefill_amx(o, os, q, qs, n, g, hd, k, v, SKV_TYPE_F16, vis, scale, w);
                skv_attn_prefill_avx512(o5, os, q, qs, n, g, hd, k, v, SKV_TYPE_F16, vis, scale, w);
                for (int i = 0; i < checked; i++)
                    for (size_t x = 0; x < os; x++) {
                        const float got = o[(size_t)i * os + x];
                        if (x >= (size_t)g * hd) {
                            assert_true(isnan(got)); /* padding left alone */
                            continue;
                        }
                        const double want = ref[((size_t)i * g) * hd + x];
                        if (!(fabs(got - want) <= TOL))
                            fail_msg("g=%d hd=%d n=%d row %d col %zu: %g, expected %g", g, hd, n, i,
                                     x, got, want);
                    }
                /* and about as close to float64 as the vector code's float sums (RMS 0.7-1.0x
                 * theirs here): dropping any one of the five partial products shows (the
                 * squared error grows 100-400x), far below TOL */
                double e_amx = 0, e_fma = 0;
                for (int i = 0; i < checked; i++)
                    for (size_t x = 0; x < (size_t)g * hd; x++) {
                        const double want = ref[((size_t)i * g) * hd + x];
                        e_amx += pow(o[(size_t)i * os + x] - want, 2);
                        e_fma += pow(o5[(size_t)i * os + x] - want, 2);
                    }
                if (!(e_amx <= 4.0 * e_fma + 1e-30))
                    fail_msg("g=%d hd=%d n=%d: squared error %.3g, the vector code's %.3g", g, hd,
                             n, e_amx, e_fma);
                if (!memcmp(o, o5, sizeof(float) * (size_t)n * os))
                    fail_msg("g=%d hd=%d n=%d: the vector code's bits", g, hd, n);
                free(q), free(o), free(o5), free(kd), free(vd), free(ref), free(vis), free(work),
                    free(k), free(v);
            }
#else
    skip();
#endif
}

/* The work size covers the reference path's per-head state too; 0 only for no heads. */
static void test_work_size(void **state) {
    (void)state;
    size_t a = skv_attn_prefill_work_size(1, 3, 64), b = skv_attn_prefill_work_size(512, 3, 64);
    assert_true(a > 0 && b >= a);
    assert_true(skv_attn_prefill_work_size(1, 1000, 8) >= sizeof(float) * 2000);
    assert_true(skv_attn_prefill_work_size(1, 0, 64) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_odd_head_size),
        cmocka_unit_test(test_rising_scores),
        cmocka_unit_test(test_unseen_infinity),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_work_size),
        cmocka_unit_test(test_widths_same_bits),
        cmocka_unit_test(test_amx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
