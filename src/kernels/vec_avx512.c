/* vec_avx512.c — AVX-512 (F/BW/VL/DQ) paths of the vector kernels and of the decode attention.
 * Built with the AVX-512 flags; kernels.c and rope.c call these only at the avx512 level.
 *
 * RMSNorm, SwiGLU, softmax and the RoPE table application work element by element as their
 * AVX2 twins do (SwiGLU: the same operations, so the same bits; RoPE: the same for the vector
 * part, while the AVX2 code rounds its tail pairs in scalar code; RMSNorm and softmax sum in
 * another order). The decode attention is its own design, below. */
#include "kernels.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__F16C__)

#include "avx512_util.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#ifdef __clang__
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* e^x on 16 floats: the AVX2 code's vexp (vec_avx2.c) lane for lane: x = k ln2 + r, e^r by the
 * degree-7 Taylor polynomial, 2^k applied in two halves so that both stay normal. */
AI __m512 vexp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(88.72283935546875f);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i ki = _mm512_cvtps_epi32(k);
    __m512i k1 = _mm512_srai_epi32(ki, 1);
    __m512i k2 = _mm512_sub_epi32(ki, k1);
    const __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
    p = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    p = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), p, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), p, x);
}

/* ---- rmsnorm, swiglu, softmax, rope ------------------------------------------------------- */

void skv_rmsnorm_avx512(float *out, const float *x, const float *w, int n, float eps) {
    if (n <= 0) return;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(x0, x0, a0);
        a1 = _mm512_fmadd_ps(x1, x1, a1);
    }
    for (; i < n; i += 16) {
        __m512 x0 = _mm512_maskz_loadu_ps(lanes(SKV_MIN(16, n - i)), x + i);
        a0 = _mm512_fmadd_ps(x0, x0, a0);
    }
    float ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    __m512 vs = _mm512_set1_ps((float)(1.0 / sqrt((double)ss / n + (double)eps)));
    for (i = 0; i < n; i += 16) {
        __mmask16 m = lanes(SKV_MIN(16, n - i));
        __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs),
                                 _mm512_maskz_loadu_ps(m, w + i));
        store_ps16(out + i, m, y);
    }
}

void skv_swiglu_avx512(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = lanes(SKV_MIN(16, n - i));
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 e = vexp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 y = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
        store_ps16(out + i, m, y);
    }
}

/* softmax(scale * x) over x[n], the probabilities written back to x, or (sum) added to acc[n]
 * in double instead (x then holds the exponentials). The same operations per element either way,
 * so skv_softmax_sum's terms are skv_softmax's bits of the scaled row. */
static inline __attribute__((always_inline)) void softmax16(float *x, int n, float scale, bool sum,
                                                            double *acc) {
    if (n <= 0) return;
    const __m512 ninf = _mm512_set1_ps(-INFINITY), vsc = _mm512_set1_ps(scale);
    __m512 vm = ninf;
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_mask_loadu_ps(ninf, lanes(SKV_MIN(16, n - i)), x + i);
        vm = _mm512_max_ps(vm, sum ? _mm512_mul_ps(v, vsc) : v);
    }
    float mx = _mm512_reduce_max_ps(vm);
    if (mx == -INFINITY) { /* everything masked: uniform, as the reference */
        for (int j = 0; j < n; j++) {
            if (sum)
                acc[j] += (double)(1.0f / n);
            else
                x[j] = 1.0f / n;
        }
        return;
    }
    vm = _mm512_set1_ps(mx);
    __m512 vs = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = lanes(SKV_MIN(16, n - i));
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        if (sum) v = _mm512_mul_ps(v, vsc);
        __m512 e = _mm512_maskz_mov_ps(m, vexp16(_mm512_sub_ps(v, vm)));
        vs = _mm512_add_ps(vs, e);
        store_ps16(x + i, m, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = lanes(SKV_MIN(16, n - i));
        __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
        if (!sum) {
            store_ps16(x + i, m, p);
            continue;
        }
        const __mmask8 lo = (__mmask8)m, hi = (__mmask8)(m >> 8);
        __m512d a0 = _mm512_maskz_loadu_pd(lo, acc + i),
                a1 = _mm512_maskz_loadu_pd(hi, acc + i + 8);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1)));
        store_pd8(acc + i, lo, a0);
        store_pd8(acc + i + 8, hi, a1);
    }
}

void skv_softmax_avx512(float *x, int n) {
    softmax16(x, n, 1.0f, false, NULL);
}

void skv_softmax_sum_avx512(double *acc, float *x, int n, float scale) {
    softmax16(x, n, scale, true, acc);
}

/* A rope.h table applied to one head vector, as skv_rope_apply_avx2 (the same vector operations
 * per pair; masked tails instead of its scalar ones): neox 0 turns adjacent pairs with interleaved
 * cos/sin, 1 turns (x[i], x[i + n_rot/2]) with the cosines first, then the sines. */
void skv_rope_apply_avx512(float *x, int n_rot, int neox, const float *cs) {
    const int h = n_rot / 2;
    if (neox) {
        float *x1p = x + h;
        for (int i = 0; i < h; i += 16) {
            __mmask16 m = lanes(SKV_MIN(16, h - i));
            __m512 c = _mm512_maskz_loadu_ps(m, cs + i), s = _mm512_maskz_loadu_ps(m, cs + h + i);
            __m512 x0 = _mm512_maskz_loadu_ps(m, x + i), x1 = _mm512_maskz_loadu_ps(m, x1p + i);
            store_ps16(x + i, m, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
            store_ps16(x1p + i, m, _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
        }
        return;
    }
    for (int i = 0; i < 2 * h; i += 16) {
        __mmask16 m = lanes(SKV_MIN(16, 2 * h - i));
        __m512 t = _mm512_maskz_loadu_ps(m, cs + i);
        __m512 cc = _mm512_moveldup_ps(t), ss = _mm512_movehdup_ps(t);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 sw = _mm512_permute_ps(v, 0xB1); /* (x1, x0) per pair */
        /* even lanes x0 c - x1 s, odd lanes x1 c + x0 s */
        store_ps16(x + i, m, _mm512_fmaddsub_ps(v, cc, _mm512_mul_ps(sw, ss)));
    }
}

/* ---- decode attention ----------------------------------------------------------------------
 * Tiles of 16 keys; a head's 16 scores of a tile fill one vector, so the online softmax runs once
 * per 16 keys. The scores come from dot products along the rows of K (each row converted to
 * float once and used by up to 4 query heads), 4 rows at a time per head; each row leaves a
 * vector of partial sums, and those are folded in two steps: red4 turns the 4 rows' vectors into
 * one whose 128-bit block r holds row r's 4 remaining partial sums, and fold4 turns four such
 * (groups k = 0..3) into the 16 scores. Group k takes the keys k, 4 + k, 8 + k, 12 + k, which
 * puts key j in lane j at the end. The weighted values accumulate into out with up to 16
 * accumulators in registers per 16 keys. */

enum { TILE = 16, GCHUNK = 64, HB = 4 /* heads per register block */, PF_TILES = 2 };

/* Scale of the Q8_0 block holding value c0 (1 for the float types). */
AI __m512 kv_scale(skv_type t, const uint8_t *row, int c0) {
    if (t != SKV_TYPE_Q8_0) return _mm512_set1_ps(1.0f);
    uint16_t h;
    memcpy(&h, row + (size_t)(c0 / SKV_QK8_0) * (2 + SKV_QK8_0), 2);
    return _mm512_set1_ps(_cvtsh_ss(h));
}

/* Values [c, c+16) of a row as floats (never straddling a Q8_0 block: c % 16 == 0). */
AI __m512 kv_load(skv_type t, const uint8_t *row, int c, __m512 sc) {
    if (t == SKV_TYPE_F32) return _mm512_loadu_ps((const float *)(const void *)row + c);
    if (t == SKV_TYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * c)));
    const uint8_t *p = row + (size_t)(c / SKV_QK8_0) * (2 + SKV_QK8_0) + 2 + c % SKV_QK8_0;
    __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(q), sc);
}

/* 128-bit block r of the result: the 4 partial sums of a_r (the sum of the block is a_r's). */
AI __m512 red4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Lane 4r + k of the result: the sum of block r of z_k. */
AI __m512 fold4(__m512 z0, __m512 z1, __m512 z2, __m512 z3) {
    __m512 u = _mm512_add_ps(_mm512_unpacklo_ps(z0, z1), _mm512_unpackhi_ps(z0, z1));
    __m512 v = _mm512_add_ps(_mm512_unpacklo_ps(z2, z3), _mm512_unpackhi_ps(z2, z3));
    return _mm512_add_ps(_mm512_shuffle_ps(u, v, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u, v, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* Unscaled scores of h heads (rows of q, stride d) against the tile's 16 keys: s[i] lane j =
 * q_i . k_j. ng groups of 4 keys at a time (h * 4 * ng <= 16 accumulators). */
AI void qk_tile(skv_type t, int d, int h, int ng, const float *q, const uint8_t *const *kr,
                __m512 *s) {
    __m512 z[HB][4];
    UNROLL for (int k0 = 0; k0 < 4; k0 += ng) {
        __m512 a[4][HB][4]; /* [group][head][row] */
        UNROLL for (int gk = 0; gk < ng; gk++) UNROLL for (int i = 0; i < h; i++)
            UNROLL for (int r = 0; r < 4; r++) a[gk][i][r] = _mm512_setzero_ps();
        for (int c = 0; c < d; c += 16) {
            __m512 x[HB];
            UNROLL for (int i = 0; i < h; i++) x[i] = _mm512_loadu_ps(q + (size_t)i * d + c);
            UNROLL for (int gk = 0; gk < ng; gk++) UNROLL for (int r = 0; r < 4; r++) {
                const uint8_t *row = kr[4 * r + k0 + gk];
                __m512 kv = kv_load(t, row, c, kv_scale(t, row, c));
                UNROLL for (int i = 0; i < h; i++) a[gk][i][r] =
                    _mm512_fmadd_ps(x[i], kv, a[gk][i][r]);
            }
        }
        UNROLL for (int gk = 0; gk < ng; gk++) UNROLL for (int i = 0; i < h; i++) z[i][k0 + gk] =
            red4(a[gk][i][0], a[gk][i][1], a[gk][i][2], a[gk][i][3]);
    }
    UNROLL for (int i = 0; i < h; i++) s[i] = fold4(z[i][0], z[i][1], z[i][2], z[i][3]);
}

/* acc[i] += sum_r p[i][r] v_r for h heads (rows of acc, stride d), cw vectors of a row at a
 * time (h * cw <= 16 accumulators; d % (16 cw) == 0). With pk (and pv) non-NULL, row r of a
 * later tile's keys and values (rows of rb bytes) is prefetched with row r's products: spread
 * over the tile, the prefetches never outnumber the core's miss buffers at once (a burst of a
 * whole tile's lines, 128 for f32 rows of 64, stalled the loads; measured 6-45% slower from
 * DRAM, bench/attn_decode_bench.c). */
AI void pv_tile(skv_type t, int d, int h, int cw, float *acc, const float *p,
                const uint8_t *const *vr, const char *pk, const char *pv, size_t rb) {
    for (int c0 = 0; c0 < d; c0 += 16 * cw) {
        __m512 a[HB][4];
        UNROLL for (int i = 0; i < h; i++) UNROLL for (int w = 0; w < cw; w++) a[i][w] =
            _mm512_loadu_ps(acc + (size_t)i * d + c0 + 16 * w);
        /* not unrolled: 12 instances of this loop (3 types x 4 head counts) stay small */
        for (int r = 0; r < TILE; r++) {
            if (pk && c0 == 0)
                for (size_t o = 0; o < rb; o += 64) {
                    _mm_prefetch(pk + r * rb + o, _MM_HINT_T0);
                    _mm_prefetch(pv + r * rb + o, _MM_HINT_T0);
                }
            __m512 pb[HB];
            UNROLL for (int i = 0; i < h; i++) pb[i] = _mm512_set1_ps(p[i * TILE + r]);
            UNROLL for (int w = 0; w < cw; w++) {
                int c = c0 + 16 * w;
                __m512 v = kv_load(t, vr[r], c, kv_scale(t, vr[r], c));
                UNROLL for (int i = 0; i < h; i++) a[i][w] = _mm512_fmadd_ps(pb[i], v, a[i][w]);
            }
        }
        UNROLL for (int i = 0; i < h; i++) UNROLL for (int w = 0; w < cw; w++)
            _mm512_storeu_ps(acc + (size_t)i * d + c0 + 16 * w, a[i][w]);
    }
}

/* Online softmax step of one head over a tile's (scaled, masked) scores s: a new maximum
 * rescales what was accumulated; p gets the tile's weights relative to the running maximum. */
AI void online_step(__m512 s, float *mx, float *sum, float *acc, int d, float *p) {
    float tm = _mm512_reduce_max_ps(s);
    if (tm > *mx) {
        float r = expf(*mx - tm);
        if (*sum > 0.0f) {
            __m512 vr = _mm512_set1_ps(r);
            for (int c = 0; c < d; c += 16)
                _mm512_storeu_ps(acc + c, _mm512_mul_ps(_mm512_loadu_ps(acc + c), vr));
        }
        *sum *= r;
        *mx = tm;
    }
    __m512 e = vexp16(_mm512_sub_ps(s, _mm512_set1_ps(*mx)));
    *sum += _mm512_reduce_add_ps(e);
    _mm512_storeu_ps(p, e);
}

/* Value vectors per step of pv_tile: 4 (at most 16 accumulators for 4 heads) where they divide
 * the row's d / 16 vectors, else 2 or 1. */
static int pv_width(int d) {
    int nv = d / 16;
    return nv % 4 == 0 ? 4 : nv % 2 == 0 ? 2 : 1;
}

/* One tile for a block of h heads: scores, online softmax, weighted values (prefetching a
 * later tile's rows when pk is non-NULL: pv_tile). */
AI void tile_block(skv_type t, int d, int h, const float *q, float *out, float *mx, float *sum,
                   const uint8_t *const *kr, const uint8_t *const *vr, float scale, __mmask16 valid,
                   const char *pk, const char *pv, size_t rb) {
    __m512 s[HB];
    float p[HB * TILE] __attribute__((aligned(64)));
    qk_tile(t, d, h, h == 1 ? 4 : h == 2 ? 2 : 1, q, kr, s);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), vscale = _mm512_set1_ps(scale);
    UNROLL for (int i = 0; i < h; i++)
        online_step(_mm512_mask_mul_ps(ninf, valid, s[i], vscale), &mx[i], &sum[i],
                    out + (size_t)i * d, d, p + i * TILE);
    switch (pv_width(d)) {
    case 4:
        pv_tile(t, d, h, 4, out, p, vr, pk, pv, rb);
        break;
    case 2:
        pv_tile(t, d, h, 2, out, p, vr, pk, pv, rb);
        break;
    default:
        pv_tile(t, d, h, 1, out, p, vr, pk, pv, rb);
        break;
    }
}

AI void attn_typed(skv_type t, float *out, float *lse, const float *q, int g, int d,
                   const uint8_t *kb, const uint8_t *vb, int n, float scale) {
    size_t rb = skv_row_bytes(t, d);
    float mx[GCHUNK], sum[GCHUNK];
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
            const char *pk = NULL, *pv = NULL; /* rows to prefetch, PF_TILES tiles ahead */
            if (j + (PF_TILES + 1) * TILE <= n) {
                pk = (const char *)(kb + (size_t)(j + PF_TILES * TILE) * rb);
                pv = (const char *)(vb + (size_t)(j + PF_TILES * TILE) * rb);
            }
            __mmask16 valid = lanes(nt);
            for (int i = 0; i < gn; i += HB) {
                int h = SKV_MIN(HB, gn - i);
                const float *qi = qc + (size_t)i * d;
                float *oi = oc + (size_t)i * d;
                if (h == 4)
                    tile_block(t, d, 4, qi, oi, mx + i, sum + i, kr, vr, scale, valid,
                               i ? NULL : pk, pv, rb);
                else if (h == 3)
                    tile_block(t, d, 3, qi, oi, mx + i, sum + i, kr, vr, scale, valid,
                               i ? NULL : pk, pv, rb);
                else if (h == 2)
                    tile_block(t, d, 2, qi, oi, mx + i, sum + i, kr, vr, scale, valid,
                               i ? NULL : pk, pv, rb);
                else
                    tile_block(t, d, 1, qi, oi, mx + i, sum + i, kr, vr, scale, valid,
                               i ? NULL : pk, pv, rb);
            }
        }
        for (int i = 0; i < gn; i++) {
            if (lse) lse[i0 + i] = sum[i] > 0.0f ? mx[i] + logf(sum[i]) : -INFINITY;
            __m512 inv = _mm512_set1_ps(sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f);
            float *acc = oc + (size_t)i * d;
            for (int c = 0; c < d; c += 16)
                _mm512_storeu_ps(acc + c, _mm512_mul_ps(_mm512_loadu_ps(acc + c), inv));
        }
    }
}

void skv_attn_group_avx512(float *out, float *lse, const float *q, int g, int d, const void *k,
                           const void *v, skv_type kv_type, int n, float scale) {
    if (kv_type == SKV_TYPE_F32)
        attn_typed(SKV_TYPE_F32, out, lse, q, g, d, k, v, n, scale);
    else if (kv_type == SKV_TYPE_F16)
        attn_typed(SKV_TYPE_F16, out, lse, q, g, d, k, v, n, scale);
    else
        attn_typed(SKV_TYPE_Q8_0, out, lse, q, g, d, k, v, n, scale);
}

#else
/* Built without AVX-512: kernels.c never calls into this file then. */
typedef int skv_vec_avx512_empty;
#endif
