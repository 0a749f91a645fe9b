/* vec_avx2.c — AVX2/FMA/F16C fast paths of the vector kernels and attention. Built with
 * -mavx2 -mfma -mf16c; kernels.c calls these only when the CPU has those extensions. */
#include "kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "avx2_util.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Lanes [0, rem) on, for the tails of loops over 8-float vectors (0 < rem < 8). */
static inline __m256i tail_mask(int rem) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(m + 8 - rem));
}

/* e^x on all floats: x = k ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial
 * (truncation < 1e-8 relative), 2^k applied in two halves so that both stay normal over the
 * whole range (results underflow to subnormals and zero correctly). NaN propagates. */
static inline __m256 vexp(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-104.0f);            /* below: the result rounds to 0 */
    const __m256 hi = _mm256_set1_ps(88.72283935546875f); /* ~ln(FLT_MAX); above: inf */
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 k = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ki = _mm256_cvtps_epi32(k);
    __m256i k1 = _mm256_srai_epi32(ki, 1);
    __m256i k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    p = _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(p, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* ---- rmsnorm, dot, swiglu, softmax -------------------------------------------------------- */

static inline float sumsq(const float *x, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
        a0 = _mm256_fmadd_ps(x0, x0, a0);
        a1 = _mm256_fmadd_ps(x1, x1, a1);
        a2 = _mm256_fmadd_ps(x2, x2, a2);
        a3 = _mm256_fmadd_ps(x3, x3, a3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(x0, x0, a0);
    }
    if (i < n) {
        __m256 x0 = _mm256_maskload_ps(x + i, tail_mask(n - i));
        a1 = _mm256_fmadd_ps(x0, x0, a1);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

void skv_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps) {
    if (n <= 0) return;
    float s = (float)(1.0 / sqrt((double)sumsq(x, n) / n + (double)eps));
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                                _mm256_loadu_ps(w + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), vs),
                                 _mm256_maskload_ps(w + i, m));
        _mm256_maskstore_ps(out + i, m, y);
    }
}

void skv_f16_row_from_f32_avx2(void *dst, const float *src, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        uint16_t h = skv_f32_to_f16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

void skv_f16_row_to_f32_avx2(float *dst, const void *src, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = _cvtsh_ss(h);
    }
}

float skv_dot_f32_avx2(const float *a, const float *b, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    if (i < n) {
        __m256i m = tail_mask(n - i);
        a1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), a1);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

static inline __m256 silu_mul(__m256 g, __m256 u) {
    __m256 e = vexp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void skv_swiglu_avx2(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(
            out + i, m, silu_mul(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
    }
}

/* acc[i, i + 8) += the 8 floats of p, in double. */
static inline __attribute__((always_inline)) void add_pd8(double *acc, __m256 p) {
    _mm256_storeu_pd(
        acc, _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_cvtps_pd(_mm256_castps256_ps128(p))));
    _mm256_storeu_pd(acc + 4, _mm256_add_pd(_mm256_loadu_pd(acc + 4),
                                            _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
}

/* softmax(scale * x) over x[n], the probabilities written back to x, or (sum) added to acc[n]
 * in double instead (x then holds the exponentials). The same operations per element either way,
 * so skv_softmax_sum's terms are skv_softmax's bits of the scaled row. */
static inline __attribute__((always_inline)) void softmax8(float *x, int n, float scale, bool sum,
                                                           double *acc) {
    if (n <= 0) return;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), vsc = _mm256_set1_ps(scale);
    __m256 vm = ninf;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        vm = _mm256_max_ps(vm, sum ? _mm256_mul_ps(v, vsc) : v);
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 v = _mm256_maskload_ps(x + i, m);
        if (sum) v = _mm256_mul_ps(v, vsc);
        vm = _mm256_max_ps(vm, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(m)));
    }
    float mx = hmax(vm);
    if (mx == -INFINITY) { /* everything masked: uniform, as the reference */
        for (int j = 0; j < n; j++) {
            if (sum)
                acc[j] += (double)(1.0f / n);
            else
                x[j] = 1.0f / n;
        }
        return;
    }
    vm = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (sum) v = _mm256_mul_ps(v, vsc);
        __m256 e = vexp(_mm256_sub_ps(v, vm));
        vs = _mm256_add_ps(vs, e);
        _mm256_storeu_ps(x + i, e);
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 v = _mm256_maskload_ps(x + i, m);
        if (sum) v = _mm256_mul_ps(v, vsc);
        __m256 e = vexp(_mm256_sub_ps(v, vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        vs = _mm256_add_ps(vs, e);
        _mm256_maskstore_ps(x + i, m, e);
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum(vs));
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
        if (sum)
            add_pd8(acc + i, p);
        else
            _mm256_storeu_ps(x + i, p);
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 p = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv);
        if (!sum) {
            _mm256_maskstore_ps(x + i, m, p);
        } else {
            float t[8];
            _mm256_storeu_ps(t, p);
            for (int j = 0; j < n - i; j++) acc[i + j] += (double)t[j];
        }
    }
}

void skv_softmax_avx2(float *x, int n) {
    softmax8(x, n, 1.0f, false, NULL);
}

void skv_softmax_sum_avx2(double *acc, float *x, int n, float scale) {
    softmax8(x, n, scale, true, acc);
}

/* ---- rope -------------------------------------------------------------------------------- */

/* sin and cos of 4 doubles. Reduction by pi/2 in double (two-part constant, exact enough for
 * |a| up to ~1e9), then Taylor polynomials on |r| <= pi/4 (error < 1e-11, far below float). */
static inline void vsincos_pd(__m256d a, __m256d *s_out, __m256d *c_out) {
    const __m256d pio2_hi = _mm256_set1_pd(1.5707963267948966);
    const __m256d pio2_lo = _mm256_set1_pd(6.123233995736766e-17);
    __m256d k = _mm256_round_pd(_mm256_mul_pd(a, _mm256_set1_pd(0.6366197723675814)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, pio2_hi, a);
    r = _mm256_fnmadd_pd(k, pio2_lo, r);
    __m256d r2 = _mm256_mul_pd(r, r);
    /* sin r = r (1 - r2/3! + r2^2/5! - ... - r2^5/11!) */
    __m256d ps = _mm256_set1_pd(-1.0 / 39916800.0);
    ps = _mm256_fmadd_pd(ps, r2, _mm256_set1_pd(1.0 / 362880.0));
    ps = _mm256_fmadd_pd(ps, r2, _mm256_set1_pd(-1.0 / 5040.0));
    ps = _mm256_fmadd_pd(ps, r2, _mm256_set1_pd(1.0 / 120.0));
    ps = _mm256_fmadd_pd(ps, r2, _mm256_set1_pd(-1.0 / 6.0));
    ps = _mm256_fmadd_pd(ps, r2, _mm256_set1_pd(1.0));
    __m256d sn = _mm256_mul_pd(ps, r);
    /* cos r = 1 - r2/2! + ... + r2^6/12! */
    __m256d pc = _mm256_set1_pd(1.0 / 479001600.0);
    pc = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(-1.0 / 3628800.0));
    pc = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(1.0 / 40320.0));
    pc = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(-1.0 / 720.0));
    pc = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(1.0 / 24.0));
    pc = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(-0.5));
    __m256d cs = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(1.0));
    /* Quadrant q = k mod 4: swap for odd q; sin negated for q in {2,3}, cos for q in {1,2}. */
    __m256i q = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
    const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
    __m256d swap = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, one), one));
    __m256d s = _mm256_blendv_pd(sn, cs, swap), c = _mm256_blendv_pd(cs, sn, swap);
    __m256i sgn_s = _mm256_slli_epi64(_mm256_and_si256(q, two), 62);
    __m256i sgn_c = _mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(q, one), two), 62);
    *s_out = _mm256_xor_pd(s, _mm256_castsi256_pd(sgn_s));
    *c_out = _mm256_xor_pd(c, _mm256_castsi256_pd(sgn_c));
}

void skv_rope_avx2(float *x, int head_dim, int n_rot, double pos, float theta) {
    if (n_rot > head_dim) n_rot = head_dim;
    if (n_rot <= 0) return;
    int np = SKV_MIN((n_rot + 1) / 2, head_dim / 2);
    /* Frequencies theta^(-2i/n_rot): exact for the first four, then stepped by theta^(-8/n_rot)
     * (relative error ~1e-15 per step: negligible even at large positions). */
    double f[4];
    for (int j = 0; j < 4; j++) f[j] = pow((double)theta, -2.0 * j / n_rot);
    __m256d vf = _mm256_loadu_pd(f), step = _mm256_set1_pd(pow((double)theta, -8.0 / n_rot));
    __m256d vp = _mm256_set1_pd(pos);
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    int i = 0;
    for (; i + 4 <= np; i += 4) {
        __m256d s, c;
        vsincos_pd(_mm256_mul_pd(vp, vf), &s, &c);
        vf = _mm256_mul_pd(vf, step);
        __m256 cc = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(c)), dup);
        __m256 ss = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(s)), dup);
        __m256 v = _mm256_loadu_ps(x + 2 * i);
        __m256 sw = _mm256_permute_ps(v, 0xB1); /* (x1, x0) per pair */
        /* even lanes x0 c - x1 s, odd lanes x1 c + x0 s */
        _mm256_storeu_ps(x + 2 * i, _mm256_fmaddsub_ps(v, cc, _mm256_mul_ps(sw, ss)));
    }
    for (; i < np; i++) {
        double a = pos * pow((double)theta, -2.0 * i / n_rot);
        double c = cos(a), s = sin(a);
        double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = (float)(x0 * c - x1 * s);
        x[2 * i + 1] = (float)(x0 * s + x1 * c);
    }
}

/* Applies a table from skv_rope_table (rope.h) to one head vector: neox = 0 turns adjacent
 * pairs with interleaved cos/sin; neox = 1 turns (x[i], x[i + n_rot/2]) with the cosines
 * first, then the sines. */
void skv_rope_apply_avx2(float *x, int n_rot, int neox, const float *cs) {
    const int h = n_rot / 2;
    int i = 0;
    if (neox) {
        float *x1p = x + h;
        for (; i + 8 <= h; i += 8) {
            __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + h + i);
            __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x1p + i);
            _mm256_storeu_ps(x + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(x1p + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
        }
        for (; i < h; i++) {
            float c = cs[i], s = cs[h + i], x0 = x[i], x1 = x1p[i];
            x[i] = x0 * c - x1 * s;
            x1p[i] = x0 * s + x1 * c;
        }
        return;
    }
    for (; i + 4 <= h; i += 4) {
        __m256 t = _mm256_loadu_ps(cs + 2 * i);
        __m256 cc = _mm256_moveldup_ps(t), ss = _mm256_movehdup_ps(t);
        __m256 v = _mm256_loadu_ps(x + 2 * i);
        __m256 sw = _mm256_permute_ps(v, 0xB1); /* (x1, x0) per pair */
        /* even lanes x0 c - x1 s, odd lanes x1 c + x0 s */
        _mm256_storeu_ps(x + 2 * i, _mm256_fmaddsub_ps(v, cc, _mm256_mul_ps(sw, ss)));
    }
    for (; i < h; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

/* ---- attention ----------------------------------------------------------------------------
 * Tiles of 8 K/V rows. K and V are converted to float in registers as they are loaded (F16 by
 * F16C, Q8_0 by sign extension and the block scale), and each converted vector feeds up to 4
 * query heads (register blocking), so every K/V value is loaded and converted once for a
 * group of up to 4 heads and the loop is not bound by loads. */

#define AI static inline __attribute__((always_inline))
#ifdef __clang__
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

enum { TILE = 8, GCHUNK = 64, HB = 4 /* heads per register block */ };

/* Scale of the Q8_0 block holding value c0 (1 for the float types). */
AI __m256 kv_scale(skv_type t, const uint8_t *row, int c0) {
    if (t != SKV_TYPE_Q8_0) return _mm256_set1_ps(1.0f);
    uint16_t h;
    memcpy(&h, row + (size_t)(c0 / SKV_QK8_0) * (2 + SKV_QK8_0), 2);
    return _mm256_set1_ps(_cvtsh_ss(h));
}

/* Values [c, c+8) of a row as floats (they never straddle a Q8_0 block: c % 8 == 0). */
AI __m256 kv_load(skv_type t, const uint8_t *row, int c, __m256 sc) {
    if (t == SKV_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)row + c);
    if (t == SKV_TYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + 2 * c)));
    const uint8_t *p = row + (size_t)(c / SKV_QK8_0) * (2 + SKV_QK8_0) + 2 + c % SKV_QK8_0;
    __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), sc);
}

/* The 4 sums of 4 vectors, in order. */
AI __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* The 2 sums of 2 vectors in lanes 0 and 1. */
AI __m128 hsum2(__m256 a0, __m256 a1) {
    __m256 h = _mm256_hadd_ps(a0, a1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    return _mm_hadd_ps(s, s);
}

/* Scores (unscaled) of h query heads (rows of q, stride d) against the 8 rows of a tile:
 * s[i] = [q_i . k_0, ..., q_i . k_7]. Rows are taken rr at a time, h * rr <= 12 accumulators. */
AI void qk_block(skv_type t, int d, int h, int rr, const float *q, const uint8_t *const *kr,
                 __m256 *s) {
    __m128 part[HB][TILE / 2];
    UNROLL for (int r0 = 0; r0 < TILE; r0 += rr) {
        __m256 a[HB][TILE];
        UNROLL for (int i = 0; i < h; i++) UNROLL for (int r = 0; r < rr; r++) a[i][r] =
            _mm256_setzero_ps();
        for (int c0 = 0; c0 < d; c0 += 32) {
            __m256 sc[TILE];
            UNROLL for (int r = 0; r < rr; r++) sc[r] = kv_scale(t, kr[r0 + r], c0);
            int ce = SKV_MIN(c0 + 32, d);
            for (int c = c0; c < ce; c += 8) {
                __m256 x[HB];
                UNROLL for (int i = 0; i < h; i++) x[i] = _mm256_loadu_ps(q + (size_t)i * d + c);
                UNROLL for (int r = 0; r < rr; r++) {
                    __m256 k = kv_load(t, kr[r0 + r], c, sc[r]);
                    UNROLL for (int i = 0; i < h; i++) a[i][r] = _mm256_fmadd_ps(x[i], k, a[i][r]);
                }
            }
        }
        UNROLL for (int i = 0; i < h; i++) {
            if (rr == 8)
                s[i] = _mm256_set_m128(hsum4(a[i][4], a[i][5], a[i][6], a[i][7]),
                                       hsum4(a[i][0], a[i][1], a[i][2], a[i][3]));
            else if (rr == 4)
                part[i][r0 / 4] = hsum4(a[i][0], a[i][1], a[i][2], a[i][3]);
            else
                part[i][r0 / 2] = hsum2(a[i][0], a[i][1]);
        }
    }
    UNROLL for (int i = 0; i < h; i++) {
        if (rr == 4)
            s[i] = _mm256_set_m128(part[i][1], part[i][0]);
        else if (rr == 2)
            s[i] = _mm256_set_m128(_mm_movelh_ps(part[i][2], part[i][3]),
                                   _mm_movelh_ps(part[i][0], part[i][1]));
    }
}

/* acc[i] += sum_r p[i][r] v_r for h heads (rows of acc, stride d), cw vectors of the row at a
 * time (h * cw <= 8 accumulators; d % (8 cw) == 0; a step never straddles a Q8_0 block). */
AI void pv_block(skv_type t, int d, int h, int cw, float *acc, const float *p,
                 const uint8_t *const *vr) {
    __m256 pb[HB][TILE]; /* the weights, broadcast once per tile */
    UNROLL for (int i = 0; i < h; i++) UNROLL for (int r = 0; r < TILE; r++) pb[i][r] =
        _mm256_set1_ps(p[i * TILE + r]);
    for (int c0 = 0; c0 < d; c0 += 8 * cw) {
        __m256 a[HB][4];
        UNROLL for (int i = 0; i < h; i++) UNROLL for (int w = 0; w < cw; w++) a[i][w] =
            _mm256_loadu_ps(acc + (size_t)i * d + c0 + 8 * w);
        UNROLL for (int r = 0; r < TILE; r++) {
            __m256 sc = kv_scale(t, vr[r], c0);
            UNROLL for (int w = 0; w < cw; w++) {
                __m256 v = kv_load(t, vr[r], c0 + 8 * w, sc);
                UNROLL for (int i = 0; i < h; i++) a[i][w] = _mm256_fmadd_ps(pb[i][r], v, a[i][w]);
            }
        }
        UNROLL for (int i = 0; i < h; i++) UNROLL for (int w = 0; w < cw; w++)
            _mm256_storeu_ps(acc + (size_t)i * d + c0 + 8 * w, a[i][w]);
    }
}

/* Online softmax step of one head over a tile's scores s: a new maximum rescales what was
 * accumulated; p gets the tile's weights relative to the running maximum. */
AI void online_step(__m256 s, float *mx, float *sum, float *acc, int d, float *p) {
    float tm = hmax(s);
    if (tm > *mx) {
        float r = expf(*mx - tm);
        if (*sum > 0.0f) {
            __m256 vr = _mm256_set1_ps(r);
            for (int c = 0; c < d; c += 8)
                _mm256_storeu_ps(acc + c, _mm256_mul_ps(_mm256_loadu_ps(acc + c), vr));
        }
        *sum *= r;
        *mx = tm;
    }
    __m256 e = vexp(_mm256_sub_ps(s, _mm256_set1_ps(*mx)));
    *sum += hsum(e);
    _mm256_storeu_ps(p, e);
}

/* One tile for a block of h heads: scores, online softmax, weighted values. */
AI void tile_block(skv_type t, int d, int h, const float *q, float *out, float *mx, float *sum,
                   const uint8_t *const *kr, const uint8_t *const *vr, __m256 scale, __m256 valid) {
    __m256 s[HB];
    float p[HB * TILE];
    qk_block(t, d, h, h == 1 ? 8 : h == 4 ? 2 : 4, q, kr, s);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    UNROLL for (int i = 0; i < h; i++)
        online_step(_mm256_blendv_ps(ninf, _mm256_mul_ps(s[i], scale), valid), &mx[i], &sum[i],
                    out + (size_t)i * d, d, p + i * TILE);
    int cw = h <= 2 ? 4 : 2;
    if (t == SKV_TYPE_Q8_0 || d % (8 * cw) == 0) {
        pv_block(t, d, h, h <= 2 ? 4 : 2, out, p, vr);
    } else if (d % 16 == 0) {
        pv_block(t, d, h, 2, out, p, vr);
    } else {
        pv_block(t, d, h, 1, out, p, vr);
    }
}

/* Prefetch distance in tiles: far enough ahead to cover DRAM latency. */
enum { PF_TILES = 2 };

AI void attn_typed(skv_type t, float *out, float *lse, const float *q, int g, int d,
                   const uint8_t *kb, const uint8_t *vb, int n, float scale) {
    size_t rb = skv_row_bytes(t, d);
    float mx[GCHUNK], sum[GCHUNK];
    const __m256 vscale = _mm256_set1_ps(scale);
    memset(out, 0, sizeof(float) * (size_t)g * d);
    /* More than GCHUNK heads (never in practice) costs one more pass per chunk. */
    for (int i0 = 0; i0 < g; i0 += GCHUNK) {
        int gn = SKV_MIN(GCHUNK, g - i0);
        const float *qc = q + (size_t)i0 * d;
        float *oc = out + (size_t)i0 * d;
        for (int i = 0; i < gn; i++) mx[i] = -INFINITY, sum[i] = 0.0f;
        for (int j = 0; j < n; j += TILE) {
            /* A partial last tile repeats K row n-1 (its extra scores are masked to -inf, so
             * those rows get weight 0) and reads zero V rows: nothing past the end is read. */
            int nt = SKV_MIN(TILE, n - j);
            const uint8_t *kr[TILE], *vr[TILE];
            for (int k = 0; k < TILE; k++) {
                size_t row = (size_t)(j + SKV_MIN(k, nt - 1));
                kr[k] = kb + row * rb, vr[k] = vb + row * rb;
                if (k >= nt && rb <= sizeof skv_zero_row) vr[k] = skv_zero_row;
            }
            if (j + (PF_TILES + 1) * TILE <= n) {
                const char *pk = (const char *)(kb + (size_t)(j + PF_TILES * TILE) * rb);
                const char *pv = (const char *)(vb + (size_t)(j + PF_TILES * TILE) * rb);
                for (size_t o = 0; o < TILE * rb; o += 64) {
                    _mm_prefetch(pk + o, _MM_HINT_T0);
                    _mm_prefetch(pv + o, _MM_HINT_T0);
                }
            }
            __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                _mm256_set1_epi32(nt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
            for (int i = 0; i < gn; i += HB) {
                int h = SKV_MIN(HB, gn - i);
                const float *qi = qc + (size_t)i * d;
                float *oi = oc + (size_t)i * d;
                if (h == 4)
                    tile_block(t, d, 4, qi, oi, mx + i, sum + i, kr, vr, vscale, valid);
                else if (h == 3)
                    tile_block(t, d, 3, qi, oi, mx + i, sum + i, kr, vr, vscale, valid);
                else if (h == 2)
                    tile_block(t, d, 2, qi, oi, mx + i, sum + i, kr, vr, vscale, valid);
                else
                    tile_block(t, d, 1, qi, oi, mx + i, sum + i, kr, vr, vscale, valid);
            }
        }
        for (int i = 0; i < gn; i++) {
            if (lse) lse[i0 + i] = sum[i] > 0.0f ? mx[i] + logf(sum[i]) : -INFINITY;
            __m256 inv = _mm256_set1_ps(sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f);
            float *acc = oc + (size_t)i * d;
            for (int c = 0; c < d; c += 8)
                _mm256_storeu_ps(acc + c, _mm256_mul_ps(_mm256_loadu_ps(acc + c), inv));
        }
    }
}

void skv_attn_group_avx2(float *out, float *lse, const float *q, int g, int d, const void *k,
                         const void *v, skv_type kv_type, int n, float scale) {
    if (kv_type == SKV_TYPE_F32)
        attn_typed(SKV_TYPE_F32, out, lse, q, g, d, k, v, n, scale);
    else if (kv_type == SKV_TYPE_F16)
        attn_typed(SKV_TYPE_F16, out, lse, q, g, d, k, v, n, scale);
    else
        attn_typed(SKV_TYPE_Q8_0, out, lse, q, g, d, k, v, n, scale);
}

#else
/* Built without AVX2/FMA/F16C (not x86, or without the flags): nothing here, kernels.c does not
 * call into this file then. */
typedef int skv_vec_avx2_empty;
#endif
