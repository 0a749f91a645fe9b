/* matmul_avx512vnni.c — the AVX-512 products of quantized weights (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K) with VNNI (built with -mavx512f/bw/vl/dq/vnni on top of the AVX2 flags; called from
 * matmul_avx512.c only when the CPU has VNNI). x is quantized to 8-bit blocks (matmul.c); integer
 * dot products over 64 values per instruction, scaled in float.
 *   - Q8_0/Q4_0: vpdpbusd multiplies unsigned by signed bytes. x is made unsigned by adding 128
 *     (xor 0x80) and the 128 * sum(w) this adds is taken off first (the accumulator starts at
 *     minus it: one more vpdpbusd per W block, shared by all x rows). Two blocks per register,
 *     each 8 lanes scaled by its own dx * dw.
 *   - K-quants: the codes are unsigned already: vpmaddubsw per 64 values, then vpdpwssd with
 *     the sub-blocks' 16-bit scales, summed over the super-block in integers and scaled in float
 *     once (d_w x d_x); the min / offset terms as x's group sums times 16 coefficients (one FMA
 *     per super-block).
 *   One or two x rows read the raw blocks, more read prepared rows; both do the same float
 *   operations per output in the same order, so a row's result does not depend on m or the
 *   thread split. (They differ from the AVX2 path's bits by rounding: it sums 8 lanes, not 16.) */
#include "kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                      \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__) &&   \
    defined(__F16C__)

#include "quant_x86.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Per output, in order over the row:
 *   Q8_0/Q4_0: acc = fma(float(int dot of blocks b, b + 1), [dx*dw of b] x 8 ++ [of b + 1] x 8,
 *              acc) for b = 0, 2, 4 ... (an odd last block with zeros in the high half);
 *   K-quants:  per super-block u = integer sum over its 4 x 64 values of code x x x scale,
 *              acc = fma(float(u), [d_w x d_x], acc); and separately
 *              cor = fma(coefficients[16], x group sums[16], cor).
 * The result is the 16-lane sum of acc (plus that of cor). Column blocks of KQ values carry acc
 * and cor from one to the next. */

_Static_assert(KQ % 256 == 0 && (KQ / 32) % 2 == 0,
               "column blocks hold whole super-blocks and whole pairs of 32-blocks");

/* Two 256-bit halves as one register. */
static inline __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* [d[0]] x 8 ++ [d[1]] x 8, or [d[0]] x 8 ++ [0] x 8 when one. */
static inline __m512 pair_scale(const float *d, int two) {
    if (!two) return _mm512_maskz_mov_ps(0x00ff, _mm512_set1_ps(d[0]));
    double v;
    memcpy(&v, d, sizeof v);
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castpd_ps(_mm512_set1_pd(v)));
}

/* 64 bytes of x (or the first 32 when !two), made unsigned: +128. */
static inline __m512i x_unsigned(const int8_t *q, int two) {
    const __m512i v = two ? _mm512_loadu_si512(q) : _mm512_maskz_loadu_epi8(0xffffffffull, q);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

/* Minus 128 * sum(w) per 4 values: what the unsigned x adds to the dot product. */
static inline __m512i neg_bias(__m512i w) {
    return _mm512_sub_epi32(
        _mm512_setzero_si512(),
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w));
}

/* Raw Q8_0/Q4_0 blocks b and (when two) b + 1 as signed codes, and their two scales. */
static inline __m512i raw_q8_pair(const uint8_t *w, int b, int two, int q4, float d[2]) {
    const size_t bb = q4 ? 18 : 34;
    const uint8_t *p0 = w + (size_t)b * bb, *p1 = p0 + bb;
    d[0] = ld_f16(p0);
    d[1] = two ? ld_f16(p1) : 0.0f;
    __m256i lo = q4 ? unpack_q4_0(p0 + 2) : _mm256_loadu_si256((const __m256i *)(p0 + 2));
    __m256i hi = !two ? _mm256_setzero_si256()
                 : q4 ? unpack_q4_0(p1 + 2)
                      : _mm256_loadu_si256((const __m256i *)(p1 + 2));
    return join(lo, hi);
}

/* A K-quant super-block unpacked for integer dots: code[c] = 64 unsigned codes; sc[c] = per pair
 * of values (one 16-bit lane of vpmaddubsw's result) the integer scale of the sub-block (Q6_K:
 * group of 16) those values are in; d = the super-block's scale; wc = per 16 values the
 * coefficient of x's group sum (-dmin * m for Q4_K/Q5_K, -32 d sc for Q6_K's offset, products
 * exact in float).
 * Which values code[c] holds is what 512-bit loads of the block give most cheaply:
 *   Q6_K: values [64c, 64c + 64) in order.
 *   Q4_K/Q5_K: a 64-byte load of qs holds 4 sub-blocks' nibbles, so code[c] holds values
 *   [32q, 32q + 32) ++ [32q + 64, 32q + 96) with q = 4 (c / 2) + c % 2 (the low nibbles of
 *   chunks c and c + 1, or their high nibbles). x is reordered to match
 *   (skv_act_rows_k_order). */
typedef struct kblock {
    __m512i code[4];
    __m512i sc[4];
    float d;
    __m512 wc;
} kblock;

/* The 16-bit scales of chunk c: words 0-15 get element e of s16, words 16-31 element f (a
 * Q4_K/Q5_K chunk holds two sub-blocks of 32 values). */
static inline __m512i two_words(__m256i s16, int e, int f) {
    return _mm512_permutexvar_epi16(
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)e)),
                           _mm256_set1_epi16((short)f), 1),
        _mm512_castsi256_si512(s16));
}

/* Q4_K/Q5_K's 12 packed scale bytes s (16 may be read) as 16 bytes: the 8 six-bit scales, then
 * the 8 mins. j < 4: scale s[j] & 63, min s[j + 4] & 63; j >= 4: the low 4 bits from the
 * nibbles of s[j + 4] (scales low, mins high), the top 2 from the top bits of s[j - 4] / s[j]. */
static inline __m128i k4_scales16(const uint8_t *s) {
    const __m128i u = _mm_loadu_si128((const __m128i *)s);
    const __m128i lo =
        _mm_shuffle_epi8(u, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i low = _mm_or_si128(
        _mm_and_si128(lo,
                      _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
        _mm_and_si128(_mm_srli_epi16(lo, 4),
                      _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
    const __m128i top =
        _mm_shuffle_epi8(u, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    return _mm_or_si128(low, _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

INLINE void unpack_k(const uint8_t *b, skv_type t, kblock *k) {
    const __m512i m4 = _mm512_set1_epi8(15);
    if (t == SKV_TYPE_Q6_K) {
        const __m512i m3 = _mm512_set1_epi8(3);
        const int8_t *sc = (const int8_t *)(b + 192);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            /* ql: low nibbles values [0, 64) of the half, high nibbles [64, 128); qh: 2 bits per
             * value, at shift 0/2 for the first 64 (by 32s) and 4/6 for the next 64 */
            const __m512i l = _mm512_loadu_si512(b + 64 * h);
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
            const __m512i s_lo =
                _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
            const __m512i s_hi = _mm512_add_epi16(s_lo, _mm512_set1_epi16(4));
            const __m512i h_lo = _mm512_and_si512(_mm512_srlv_epi16(qh, s_lo), m3);
            const __m512i h_hi = _mm512_and_si512(_mm512_srlv_epi16(qh, s_hi), m3);
            k->code[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(h_lo, 4));
            k->code[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                                 _mm512_slli_epi16(h_hi, 4));
        }
        const float d = ld_f16(b + 208);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)sc);
        const __m256i s16 = _mm256_cvtepi8_epi16(sc8);
        /* groups of 16 values: 8 words each */
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            k->sc[c] = _mm512_permutexvar_epi16(
                _mm512_add_epi16(_mm512_set1_epi16((short)(4 * c)),
                                 _mm512_setr_epi64(0, 0, 0x0001000100010001ll, 0x0001000100010001ll,
                                                   0x0002000200020002ll, 0x0002000200020002ll,
                                                   0x0003000300030003ll, 0x0003000300030003ll)),
                _mm512_castsi256_si512(s16));
        k->d = d;
        k->wc = _mm512_mul_ps(_mm512_set1_ps(-32.0f * d),
                              _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
        return;
    }
    const int q5 = t == SKV_TYPE_Q5_K;
    const uint8_t *qs = b + (q5 ? 48 : 16);
    const __m512i hb = q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)))
                          : _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * h);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (q5) { /* bit j of qh byte i is the 5th bit of value 32 j + i */
            const __m512i one = _mm512_set1_epi8(1);
            const __m512i s_lo = _mm512_add_epi16(
                _mm512_set1_epi16((short)(4 * h)),
                _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
            const __m512i s_hi = _mm512_add_epi16(s_lo, _mm512_set1_epi16(1));
            lo = _mm512_or_si512(
                lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, s_lo), one), 4));
            hi = _mm512_or_si512(
                hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, s_hi), one), 4));
        }
        k->code[2 * h] = lo;
        k->code[2 * h + 1] = hi;
    }
    const float dmin = ld_f16(b + 2);
    /* the 8 scales and 8 mins, sc = [0..8), m = [8..16) */
    const __m128i sm = k4_scales16(b + 4);
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
    const __m256i s16 = _mm256_cvtepu8_epi16(sm);
    /* sub-blocks of 32 values: 16 words each; code[c] holds sub-blocks q and q + 2 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        k->sc[c] = two_words(s16, 4 * (c / 2) + c % 2, 4 * (c / 2) + c % 2 + 2);
    k->d = ld_f16(b);
    k->wc = _mm512_permutexvar_ps(
        _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
        _mm512_mul_ps(_mm512_set1_ps(-dmin), f));
}

void skv_act_rows_k_order(uint8_t *q, int64_t n) {
    for (int64_t o = 0; o + 128 <= n; o += 128) { /* swap values [32, 64) and [64, 96) */
        const __m256i a = _mm256_loadu_si256((const __m256i *)(q + o + 32));
        const __m256i c = _mm256_loadu_si256((const __m256i *)(q + o + 64));
        _mm256_storeu_si256((__m256i *)(q + o + 32), c);
        _mm256_storeu_si256((__m256i *)(q + o + 64), a);
    }
}

/* Every K-quant output, per super-block: u = sum over its 4 x 64 values of (codes . x per pair
 * of values, vpmaddubsw) x the 16-bit scale (vpdpwssd), exact in 32-bit integers (at most
 * 4 x 2 x 2 x 63 x 127 x 128 in a lane); then acc = fma(float(u), d_w x d_x, acc). One convert
 * and one FMA per super-block where scaling each 64 values in float took 4 of each. */
INLINE __m512i k_dot(__m512i u, __m512i code, __m512i x, __m512i sc) {
    return _mm512_dpwssd_epi32(u, _mm512_maddubs_epi16(code, x), sc);
}

/* NW raw rows w[] (nb blocks of the weight type each) . one activation row, side by side (each
 * row's sums exactly as alone: NW only changes how many streams of W are read at once). */
#define NW 2
INLINE void dot_raw(skv_type t, int nw, const uint8_t *const *w, act_row a, int nb, float *y) {
    __m512 acc[NW], cor[NW];
    for (int k = 0; k < NW; k++) acc[k] = cor[k] = _mm512_setzero_ps();
    if (t == SKV_TYPE_Q8_0 || t == SKV_TYPE_Q4_0) {
        const int q4 = t == SKV_TYPE_Q4_0;
        for (int b = 0; b < nb; b += 2) {
            const int two = b + 1 < nb;
            const __m512i xu = x_unsigned(a.q + 32 * b, two);
            const __m512 dx = pair_scale(a.d + b, two);
#pragma GCC unroll 2
            for (int k = 0; k < nw; k++) {
                float dw[2];
                const __m512i wv = raw_q8_pair(w[k], b, two, q4, dw);
                const __m512i dp = _mm512_dpbusd_epi32(neg_bias(wv), xu, wv);
                const __m512 sc = _mm512_mul_ps(dx, pair_scale(dw, two));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[k]);
            }
        }
        for (int k = 0; k < nw; k++) y[k] = _mm512_reduce_add_ps(acc[k]);
        return;
    }
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    for (int s = 0; s < nb; s++) {
        const int8_t *xq = a.q + 256 * s;
        const float dx = a.d[s];
        const __m512 xs = _mm512_loadu_ps(a.s + 16 * s);
#pragma GCC unroll 2
        for (int k = 0; k < nw; k++) {
            kblock kb;
            unpack_k(w[k] + (size_t)s * bb, t, &kb);
            __m512i u = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                u = k_dot(u, kb.code[c], _mm512_loadu_si512(xq + 64 * c), kb.sc[c]);
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_set1_ps(kb.d * dx), acc[k]);
            cor[k] = _mm512_fmadd_ps(kb.wc, xs, cor[k]);
        }
    }
    for (int k = 0; k < nw; k++) y[k] = _mm512_reduce_add_ps(acc[k]) + _mm512_reduce_add_ps(cor[k]);
}

/* Rows [r0, r1) for x rows [i0, i1) from the raw blocks, in NW streams (rows j, j + h, ...);
 * t is a constant after inlining. */
INLINE void gemv_rows(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    const int bs = skv_act_block(t), nb = mm->n_in / bs, h = (r1 - r0) / NW;
    const uint8_t *w0 = (const uint8_t *)mm->w;
    const size_t st = mm->w_stride;
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, bs);
        float *y = mm->y + (size_t)i * mm->n_out;
        for (int j = 0; j < h; j++) {
            const uint8_t *w[NW];
            float v[NW];
            for (int k = 0; k < NW; k++) w[k] = w0 + (size_t)(r0 + j + k * h) * st;
            dot_raw(t, NW, w, a, nb, v);
            for (int k = 0; k < NW; k++) y[r0 + j + k * h] = v[k];
        }
        for (int r = r0 + NW * h; r < r1; r++) {
            const uint8_t *w[NW] = {w0 + (size_t)r * st};
            dot_raw(t, 1, w, a, nb, y + r);
        }
    }
}

static void gemv_q(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_Q8_0:
        gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q8_0);
        break;
    case SKV_TYPE_Q4_0:
        gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q4_0);
        break;
    case SKV_TYPE_Q4_K:
        gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q4_K);
        break;
    case SKV_TYPE_Q5_K:
        gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q5_K);
        break;
    default:
        gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q6_K);
        break;
    }
}

#define NRQ 4  /* W rows per quantized tile */
#define MRQ 4  /* x rows per quantized tile */
#define MCQ 96 /* x rows per block */

/* A prepared Q8_0/Q4_0 row: per 64 values (2 blocks) the signed codes, the bias the unsigned x
 * adds (as in dot_raw) and the two scales as 16 lanes, so that a tile only loads them. */
typedef struct prep_q8x {
    int8_t q[KQ] ALIGNED64;
    int32_t bias[KQ / 4] ALIGNED64;
    float dw[KQ / 4] ALIGNED64;
} prep_q8x;

/* A prepared K-quant row: the kblock of each super-block, stored. */
typedef struct prep_kx {
    uint8_t q[KQ] ALIGNED64;
    int16_t sc[KQ / 2] ALIGNED64;
    float wc[KQ / 16] ALIGNED64;
    float d[KQ / 256];
} prep_kx;

static void prep_kx_fill(prep_kx *p, const uint8_t *w, skv_type t, int sb0, int nsb) {
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    for (int s = 0; s < nsb; s++) {
        kblock k;
        unpack_k(w + (size_t)(sb0 + s) * bb, t, &k);
        for (int c = 0; c < 4; c++) {
            _mm512_store_si512(p->q + 256 * s + 64 * c, k.code[c]);
            _mm512_store_si512(p->sc + 128 * s + 32 * c, k.sc[c]);
        }
        _mm512_store_ps(p->wc + 16 * s, k.wc);
        p->d[s] = k.d;
    }
}

static void prep_q8x_fill(prep_q8x *p, const uint8_t *w, int q4, int b0, int nb) {
    for (int b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        float d[2];
        const __m512i wv = raw_q8_pair(w, b0 + b, two, q4, d);
        _mm512_store_si512(p->q + 32 * b, wv);
        _mm512_store_si512(p->bias + 8 * b, neg_bias(wv));
        _mm512_store_ps(p->dw + 8 * b, pair_scale(d, two));
    }
}

/* Q8_0/Q4_0 tile step: blocks b, b + 1 (or b alone) of the prepared rows, blocks xb, xb + 1 of
 * x. two is a constant after inlining: no branch in the loop. */
INLINE void q8_step(int mr, int two, const act_row *a, int xb, const prep_q8x *const *p, int b,
                    __m512 acc[MRQ][NRQ]) {
    __m512i w[NRQ];
#pragma GCC unroll 4
    for (int j = 0; j < NRQ; j++) w[j] = _mm512_load_si512(p[j]->q + 32 * b);
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        const __m512i x = x_unsigned(a[i].q + 32 * xb, two);
        const __m512 dx = pair_scale(a[i].d + xb, two);
#pragma GCC unroll 4
        for (int j = 0; j < NRQ; j++) {
            const __m512i dp = _mm512_dpbusd_epi32(_mm512_load_si512(p[j]->bias + 8 * b), x, w[j]);
            acc[i][j] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                _mm512_mul_ps(dx, _mm512_load_ps(p[j]->dw + 8 * b)), acc[i][j]);
        }
    }
}

/* Q8_0/Q4_0 tile: mr x rows times NRQ prepared rows over blocks [b0, b0 + nb) of x (the
 * prepared rows start at b0; b0 even). */
INLINE void tile_q8(int mr, const act_row *a, int b0, const prep_q8x *const *p, int nb,
                    __m512 acc[MRQ][NRQ]) {
    int b = 0;
    for (; b + 1 < nb; b += 2) q8_step(mr, 1, a, b0 + b, p, b, acc);
    if (b < nb) q8_step(mr, 0, a, b0 + b, p, b, acc);
}

/* K-quant tile over super-blocks [sb0, sb0 + nsb) of x: acc as dot_raw, then cor (a separate
 * sum, so the order of the two loops does not matter). */
INLINE void tile_k(int mr, const act_row *a, int sb0, const prep_kx *const *p, int nsb,
                   __m512 acc[MRQ][NRQ], __m512 cor[MRQ][NRQ]) {
    for (int s = 0; s < nsb; s++) {
        const int xo = 256 * (sb0 + s);
        __m512i t[MRQ][NRQ];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) t[i][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i w[NRQ];
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) w[j] = _mm512_load_si512(p[j]->q + 256 * s + 64 * c);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const __m512i x = _mm512_loadu_si512(a[i].q + xo + 64 * c);
#pragma GCC unroll 4
                for (int j = 0; j < NRQ; j++)
                    t[i][j] =
                        k_dot(t[i][j], w[j], x, _mm512_load_si512(p[j]->sc + 128 * s + 32 * c));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const float dx = a[i].d[sb0 + s];
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[i][j]),
                                            _mm512_set1_ps(p[j]->d[s] * dx), acc[i][j]);
        }
    }
    for (int s = 0; s < nsb; s++) {
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 xs = _mm512_loadu_ps(a[i].s + 16 * (sb0 + s));
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++)
                cor[i][j] = _mm512_fmadd_ps(_mm512_load_ps(p[j]->wc + 16 * s), xs, cor[i][j]);
        }
    }
}

/* Runs an mr-row tile over one column block, continuing from (or starting) the saved lanes,
 * and writes y after the last block. save: [mr][NRQ][2] (acc, cor). */
INLINE void tile_q_step(int mr, int kquant, const skv_mm *mm, int i, int r, int nr,
                        const prep_kx *const *p, const prep_q8x *const *p8, int b0, int nb,
                        int first, int last, __m512 *save) {
    __m512 acc[MRQ][NRQ], cor[MRQ][NRQ];
    act_row a[MRQ];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, kquant ? 256 : 32);
        for (int j = 0; j < NRQ; j++) {
            acc[ii][j] = first ? _mm512_setzero_ps() : save[(ii * NRQ + j) * 2];
            cor[ii][j] = first ? _mm512_setzero_ps() : save[(ii * NRQ + j) * 2 + 1];
        }
    }
    if (kquant)
        tile_k(mr, a, b0, p, nb, acc, cor);
    else
        tile_q8(mr, a, b0, p8, nb, acc);
    for (int ii = 0; ii < mr; ii++)
        for (int j = 0; j < NRQ; j++) {
            if (!last) {
                save[(ii * NRQ + j) * 2] = acc[ii][j];
                save[(ii * NRQ + j) * 2 + 1] = cor[ii][j];
            } else if (j < nr) { /* as dot_raw ends */
                const float v =
                    kquant ? _mm512_reduce_add_ps(acc[ii][j]) + _mm512_reduce_add_ps(cor[ii][j])
                           : _mm512_reduce_add_ps(acc[ii][j]);
                mm->y[(size_t)(i + ii) * mm->n_out + r + j] = v;
            }
        }
}

/* Blocks of MCQ x rows; for each NRQ W rows and each block of up to KQ columns, the W rows are
 * prepared once and serve every tile of the x block. */
/* Not inlined: its ~70 KB frame stays apart from the caller's. */
static __attribute__((noinline)) void gemm_q(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    union {               /* one or the other, in L1 */
        prep_kx k[NRQ];   /* K-quants: 4.6 KB each */
        prep_q8x q8[NRQ]; /* Q8_0/Q4_0: 6 KB each */
    } prep;
    __m512 save[MCQ * NRQ * 2]; /* 48 KB */
    const skv_type t = mm->wt;
    const int kquant = t != SKV_TYPE_Q8_0 && t != SKV_TYPE_Q4_0;
    const int bs = kquant ? 256 : 32;
    const int nblk = mm->n_in / bs, per = KQ / bs; /* per even: block pairs never straddle */
    const int nkb = (nblk + per - 1) / per;
    for (int mc0 = i0; mc0 < i1; mc0 += MCQ) {
        const int mc1 = i1 - mc0 < MCQ ? i1 : mc0 + MCQ;
        for (int r = r0; r < r1; r += NRQ) {
            const int nr = r1 - r < NRQ ? r1 - r : NRQ;
            const prep_kx *p[NRQ];
            const prep_q8x *p8[NRQ];
            for (int j = 0; j < NRQ; j++) {
                p[j] = &prep.k[j < nr ? j : nr - 1];
                p8[j] = &prep.q8[j < nr ? j : nr - 1];
            }
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * per, b1 = b0 + per < nblk ? b0 + per : nblk;
                for (int j = 0; j < nr; j++) {
                    const uint8_t *w = (const uint8_t *)mm->w + (size_t)(r + j) * mm->w_stride;
                    if (kquant)
                        prep_kx_fill(&prep.k[j], w, t, b0, b1 - b0);
                    else
                        prep_q8x_fill(&prep.q8[j], w, t == SKV_TYPE_Q4_0, b0, b1 - b0);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
                for (; i + MRQ <= mc1; i += MRQ) {
                    __m512 *sv = save + (size_t)(i - mc0) * NRQ * 2;
                    if (kquant)
                        tile_q_step(MRQ, 1, mm, i, r, nr, p, p8, b0, b1 - b0, first, last, sv);
                    else
                        tile_q_step(MRQ, 0, mm, i, r, nr, p, p8, b0, b1 - b0, first, last, sv);
                }
                for (; i < mc1; i++) {
                    __m512 *sv = save + (size_t)(i - mc0) * NRQ * 2;
                    if (kquant)
                        tile_q_step(1, 1, mm, i, r, nr, p, p8, b0, b1 - b0, first, last, sv);
                    else
                        tile_q_step(1, 0, mm, i, r, nr, p, p8, b0, b1 - b0, first, last, sv);
                }
            }
        }
    }
}

/* x rows below which quantized W is used straight from its raw blocks. */
#define GEMM_Q_MIN_M 3

bool skv_act_k_order(skv_type wt) {
    return skv_simd_has_vnni() && (wt == SKV_TYPE_Q4_K || wt == SKV_TYPE_Q5_K);
}

void skv_matmul_avx512_vnni(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->m < GEMM_Q_MIN_M)
        gemv_q(mm, i0, i1, r0, r1);
    else
        gemm_q(mm, i0, i1, r0, r1);
}

#else
/* Built without the AVX-512 VNNI flags: nothing here. */
typedef int skv_matmul_avx512vnni_empty;
#endif
