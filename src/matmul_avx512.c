/* matmul_avx512.c — the AVX-512 matrix products (built with -mavx512f/bw/vl/dq/vnni on top of
 * the AVX2 flags; matmul.c calls them only when the CPU has AVX-512 F/BW/VL, and this file
 * sends quantized weights back to matmul_avx2.c when the CPU has no VNNI).
 *
 * Float weights (F32/F16/BF16) in panels: the same single FMA chain per output over k in order as
 * matmul_avx2.c and the scalar reference, so the same bits at every level, any m, any thread
 * split. A 16-row panel is one register wide.
 *   - one x row (decode): the thread's panels in 4 quarters streamed at once.
 *   - more (prefill): blocks of MC x rows and KC columns; panels are made floats two at a time
 *     (L1/L2) and serve 12x32 register tiles: 24 accumulators, 2 loads and 12 broadcasts per 24
 *     FMAs. Raw rows (not panels) take the AVX2 code (same bits).
 * Quantized weights with VNNI: x quantized to 8-bit blocks (matmul.c), integer dot products over
 * 64 values per instruction, scaled per block in float.
 *   - Q8_0/Q4_0: vpdpbusd multiplies unsigned by signed bytes. x is made unsigned by adding 128
 *     (xor 0x80) and the 128 * sum(w) this adds is taken off first (the accumulator starts at
 *     minus it: one more vpdpbusd per W block, shared by all x rows). Two blocks per register,
 *     each 8 lanes scaled by its own dx * dw.
 *   - K-quants: the codes are unsigned already: maddubs to int16 pairs, then vpdpwssd with the
 *     int16 sub-block scales; per super-block in float, the min / offset terms as x's group sums
 *     times 16 coefficients (one FMA).
 *   One or two x rows read the raw blocks, more read prepared rows (quant_x86.h); both do the
 *   same float operations per output in the same order, so a row's result does not depend on m
 *   or the thread split. (They differ from the AVX2 path's bits: it sums 8 lanes, not 16.) */
#include "kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                      \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "quant_x86.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* ---- float weights ------------------------------------------------------------------------ */

#define PANEL SKV_MM_PANEL
#define MR    12  /* x rows per prefill tile (x 2 panels: 24 accumulators) */
#define KC    640 /* columns per block: as matmul_avx2.c (SmolLM2's 576 in one) */
#define MC    192 /* x rows per block */

_Static_assert(PANEL == 16, "a panel is one 512-bit register of floats");

static inline size_t elem_size(skv_type t) {
    return t == SKV_TYPE_F32 ? 4 : 2;
}

/* The 16 weights of panel column k as floats. t is a constant after inlining. */
INLINE __m512 load_w16(const uint8_t *p, skv_type t) {
    if (t == SKV_TYPE_F32) return _mm512_loadu_ps((const float *)p);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (t == SKV_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The first n of 16 lanes. */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* Panel r's columns [k0, k1) as floats in bp (F32: used in place). */
INLINE const float *pack_panel(float *bp, const skv_mm *mm, int r, int k0, int k1, skv_type t) {
    const size_t es = elem_size(t);
    const uint8_t *p = (const uint8_t *)mm->w + (size_t)r * mm->n_in * es; /* r % PANEL == 0 */
    if (t == SKV_TYPE_F32) return (const float *)p + (size_t)k0 * PANEL;
    for (int k = k0; k < k1; k++)
        _mm512_store_ps(bp + (size_t)(k - k0) * PANEL, load_w16(p + (size_t)k * PANEL * es, t));
    return bp;
}

/* y[i][0, 16 * np) (row stride ldy, lanes past m0/m1 untouched) over mr <= MR x rows: continues
 * each chain from y (or from 0 when first) through columns [0, len) of x and the panels b0, b1. */
#define ACC_INIT(i)                                                                                \
    __m512 a##i##0 = _mm512_setzero_ps(), a##i##1 = a##i##0;                                       \
    if (i < mr && !first) {                                                                        \
        a##i##0 = _mm512_maskz_loadu_ps(m0, y + (size_t)i * ldy);                                  \
        if (np > 1) a##i##1 = _mm512_maskz_loadu_ps(m1, y + (size_t)i * ldy + PANEL);              \
    }
#define ACC_FMA(i)                                                                                 \
    if (i < mr) {                                                                                  \
        const __m512 xb = _mm512_set1_ps(x##i[k]);                                                 \
        a##i##0 = _mm512_fmadd_ps(xb, w0, a##i##0);                                                \
        if (np > 1) a##i##1 = _mm512_fmadd_ps(xb, w1, a##i##1);                                    \
    }
#define ACC_STORE(i)                                                                               \
    if (i < mr) {                                                                                  \
        _mm512_mask_storeu_ps(y + (size_t)i * ldy, m0, a##i##0);                                   \
        if (np > 1) _mm512_mask_storeu_ps(y + (size_t)i * ldy + PANEL, m1, a##i##1);               \
    }
#define X_ROW(i) *x##i = mr > i ? x + (size_t)i * ldx : x

INLINE void tile_f(int mr, int np, const float *x, size_t ldx, const float *b0, const float *b1,
                   int len, float *y, size_t ldy, __mmask16 m0, __mmask16 m1, int first) {
    /* rows past mr are never read (and never point past x) */
    const float X_ROW(0), X_ROW(1), X_ROW(2), X_ROW(3), X_ROW(4), X_ROW(5), X_ROW(6), X_ROW(7),
        X_ROW(8), X_ROW(9), X_ROW(10), X_ROW(11);
    (void)x1, (void)x2, (void)x3, (void)x4, (void)x5, (void)x6, (void)x7, (void)x8, (void)x9,
        (void)x10, (void)x11, (void)b1;
    // clang-format off
    ACC_INIT(0) ACC_INIT(1) ACC_INIT(2) ACC_INIT(3) ACC_INIT(4) ACC_INIT(5)
    ACC_INIT(6) ACC_INIT(7) ACC_INIT(8) ACC_INIT(9) ACC_INIT(10) ACC_INIT(11)
    for (int k = 0; k < len; k++) {
        const __m512 w0 = _mm512_loadu_ps(b0 + (size_t)k * PANEL);
        const __m512 w1 = np > 1 ? _mm512_loadu_ps(b1 + (size_t)k * PANEL) : w0;
        ACC_FMA(0) ACC_FMA(1) ACC_FMA(2) ACC_FMA(3) ACC_FMA(4) ACC_FMA(5)
        ACC_FMA(6) ACC_FMA(7) ACC_FMA(8) ACC_FMA(9) ACC_FMA(10) ACC_FMA(11)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
    ACC_STORE(6) ACC_STORE(7) ACC_STORE(8) ACC_STORE(9) ACC_STORE(10) ACC_STORE(11)
    // clang-format on
}

/* tile_f for counts known only at run time: one instantiation each. */
static void tile_any(int mr, int np, const float *x, size_t ldx, const float *b0, const float *b1,
                     int len, float *y, size_t ldy, __mmask16 m0, __mmask16 m1, int first) {
#define TILE_CASE(c)                                                                               \
    case c:                                                                                        \
        if (np > 1)                                                                                \
            tile_f(c, 2, x, ldx, b0, b1, len, y, ldy, m0, m1, first);                              \
        else                                                                                       \
            tile_f(c, 1, x, ldx, b0, b1, len, y, ldy, m0, m1, first);                              \
        return;
    switch (mr) {
        TILE_CASE(12)
        TILE_CASE(11)
        TILE_CASE(10)
        TILE_CASE(9)
        TILE_CASE(8)
        TILE_CASE(7)
        TILE_CASE(6)
        TILE_CASE(5)
        TILE_CASE(4)
        TILE_CASE(3)
        TILE_CASE(2)
        TILE_CASE(1)
    default:
        return;
    }
#undef TILE_CASE
}

/* Outputs of x rows [i0, i1) and W rows [r0, r1) (r0 on a panel boundary) from panels. */
INLINE void gemm_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    float bp[2][KC * PANEL] __attribute__((aligned(64))); /* 80 KB */
    const int n = mm->n_in, nkb = (n + KC - 1) / KC, kc = (n + nkb - 1) / nkb;
    const size_t ldy = (size_t)mm->n_out;
    for (int mc0 = i0; mc0 < i1; mc0 += MC) {
        const int mc1 = i1 - mc0 < MC ? i1 : mc0 + MC;
        for (int k0 = 0; k0 < n; k0 += kc) {
            const int k1 = n - k0 < kc ? n : k0 + kc, first = k0 == 0;
            for (int r = r0; r < r1; r += 2 * PANEL) {
                const int np = r1 - r > PANEL ? 2 : 1;
                const __mmask16 m0 = lanes(r1 - r), m1 = np > 1 ? lanes(r1 - r - PANEL) : 0;
                const float *b0 = pack_panel(bp[0], mm, r, k0, k1, t);
                const float *b1 = np > 1 ? pack_panel(bp[1], mm, r + PANEL, k0, k1, t) : b0;
                for (int i = mc0; i < mc1; i += MR) {
                    const int mr = mc1 - i < MR ? mc1 - i : MR;
                    const float *x = mm->x + (size_t)i * n + k0;
                    float *y = mm->y + (size_t)i * ldy + r;
                    if (!first && i + 2 * MR <= mc1) /* the next tile's outputs */
                        for (int ii = MR; ii < 2 * MR; ii++)
                            _mm_prefetch((const char *)(y + (size_t)ii * ldy), _MM_HINT_T0);
                    if (mr == MR && np == 2)
                        tile_f(MR, 2, x, (size_t)n, b0, b1, k1 - k0, y, ldy, m0, m1, first);
                    else
                        tile_any(mr, np, x, (size_t)n, b0, b1, k1 - k0, y, ldy, m0, m1, first);
                }
            }
        }
    }
}

/* One x row from panels (decode): the thread's panels in 4 quarters, one panel of each at a
 * time, so W streams as 4 long sequential runs; 4 FMA chains of 16. */
INLINE void gemv_panels(const skv_mm *mm, int r0, int r1, skv_type t) {
    const int n = mm->n_in, np = (r1 - r0 + PANEL - 1) / PANEL, q = np / 4;
    const size_t es = elem_size(t), ps = (size_t)PANEL * n * es;
    const float *x = mm->x;
    const uint8_t *w0 = (const uint8_t *)mm->w + (size_t)r0 * n * es;
    for (int j = 0; j < q; j++) {
        const uint8_t *p = w0 + (size_t)j * ps;
        const size_t qs = (size_t)q * ps;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int k = 0; k < n; k++) {
            const __m512 xb = _mm512_set1_ps(x[k]);
            const uint8_t *e = p + (size_t)k * PANEL * es;
            a0 = _mm512_fmadd_ps(xb, load_w16(e, t), a0);
            a1 = _mm512_fmadd_ps(xb, load_w16(e + qs, t), a1);
            a2 = _mm512_fmadd_ps(xb, load_w16(e + 2 * qs, t), a2);
            a3 = _mm512_fmadd_ps(xb, load_w16(e + 3 * qs, t), a3);
        }
        const int ra = r0 + j * PANEL;
        _mm512_mask_storeu_ps(mm->y + ra, lanes(r1 - ra), a0);
        _mm512_mask_storeu_ps(mm->y + ra + q * PANEL, lanes(r1 - ra - q * PANEL), a1);
        _mm512_mask_storeu_ps(mm->y + ra + 2 * q * PANEL, lanes(r1 - ra - 2 * q * PANEL), a2);
        _mm512_mask_storeu_ps(mm->y + ra + 3 * q * PANEL, lanes(r1 - ra - 3 * q * PANEL), a3);
    }
    for (int j = 4 * q; j < np; j++) {
        const uint8_t *p = w0 + (size_t)j * ps;
        __m512 a0 = _mm512_setzero_ps();
        for (int k = 0; k < n; k++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(x[k]), load_w16(p + (size_t)k * PANEL * es, t), a0);
        _mm512_mask_storeu_ps(mm->y + r0 + j * PANEL, lanes(r1 - r0 - j * PANEL), a0);
    }
}

INLINE void matmul_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    if (mm->m == 1)
        gemv_panels(mm, r0, r1, t);
    else
        gemm_float(mm, i0, i1, r0, r1, t);
}

/* ---- quantized weights ---------------------------------------------------------------------
 * Per output, in order over the row: Q8_0/Q4_0 acc = fma(float(int dot of blocks b, b+1),
 * [dx*dw of b] x 8 ++ [of b+1] x 8, acc) for b = 0, 2, 4 ... (an odd last block with zeros in the
 * high half); K-quants acc = fma(float(int dot of super-block s), dx*d, acc) and
 * cor = fma(coefficients[16], x group sums[16], cor). The result is the 16-lane sum of acc (plus
 * that of cor). */

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
    d[0] = _cvtsh_ss((unsigned short)(p0[0] | p0[1] << 8));
    d[1] = two ? _cvtsh_ss((unsigned short)(p1[0] | p1[1] << 8)) : 0.0f;
    __m256i lo = q4 ? unpack_q4_0(p0 + 2) : _mm256_loadu_si256((const __m256i *)(p0 + 2));
    __m256i hi = !two ? _mm256_setzero_si256()
                 : q4 ? unpack_q4_0(p1 + 2)
                      : _mm256_loadu_si256((const __m256i *)(p1 + 2));
    return join(lo, hi);
}

/* Raw Q4_K/Q5_K super-block: 4 code registers (64 values each), the 4 matching int16 scale
 * registers, and the 16 min coefficients -dmin * m[g / 2]. */
static inline void raw_k45(const uint8_t *b, int q5, __m512i code[4], __m512i sv[4], __m512 *wc) {
    __m128i sc, mn;
    k4_scales(b + 4, &sc, &mn);
    const __m256i scb = _mm256_broadcastsi128_si256(sc);
    const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        k45_codes(b + (q5 ? 48 : 16), hb, c, q5, &lo, &hi);
        code[c] = join(lo, hi);
        sv[c] = join(bcast_i16(scb, 2 * c), bcast_i16(scb, 2 * c + 1));
    }
    const float dmin = _cvtsh_ss((unsigned short)(b[2] | b[3] << 8));
    const __m512 m8 = _mm512_castps256_ps512(
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(mn)), _mm256_set1_ps(-dmin)));
    *wc = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                m8);
}

/* Raw Q6_K super-block: the same, with the -32 offset's coefficients -32 d sc[g]. */
static inline void raw_q6k(const uint8_t *b, __m512i code[4], __m512i sv[4], __m512 *wc) {
    const int8_t *sc = (const int8_t *)(b + 192);
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    for (int h = 0; h < 2; h++) {
        __m256i c4[4];
        q6_codes(b + 64 * h, b + 128 + 32 * h, c4);
        code[2 * h] = join(c4[0], c4[1]);
        code[2 * h + 1] = join(c4[2], c4[3]);
    }
    for (int c = 0; c < 4; c++)
        sv[c] = join(q6_chunk_scales(s16, 2 * c), q6_chunk_scales(s16, 2 * c + 1));
    const float d = _cvtsh_ss((unsigned short)(b[208] | b[209] << 8));
    *wc = _mm512_mul_ps(_mm512_set1_ps(-32.0f * d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                        _mm_loadu_si128((const __m128i *)sc))));
}

/* One super-block's integer dot: sum over 4 x 64 values of code * x * scale. */
static inline __m512i k_dot(const __m512i code[4], const __m512i sv[4], const int8_t *xq) {
    __m512i isum = _mm512_setzero_si512();
    for (int c = 0; c < 4; c++)
        isum = _mm512_dpwssd_epi32(
            isum, _mm512_maddubs_epi16(code[c], _mm512_loadu_si512(xq + 64 * c)), sv[c]);
    return isum;
}

/* A raw row (nb blocks of the weight type) . one activation row. */
static float dot_raw(skv_type t, const uint8_t *w, act_row a, int nb) {
    __m512 acc = _mm512_setzero_ps(), cor = _mm512_setzero_ps();
    if (t == SKV_TYPE_Q8_0 || t == SKV_TYPE_Q4_0) {
        const int q4 = t == SKV_TYPE_Q4_0;
        for (int b = 0; b < nb; b += 2) {
            const int two = b + 1 < nb;
            float dw[2];
            const __m512i wv = raw_q8_pair(w, b, two, q4, dw);
            const __m512i dp = _mm512_dpbusd_epi32(neg_bias(wv), x_unsigned(a.q + 32 * b, two), wv);
            const __m512 s = _mm512_mul_ps(pair_scale(a.d + b, two), pair_scale(dw, two));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc);
        }
        return _mm512_reduce_add_ps(acc);
    }
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    for (int s = 0; s < nb; s++) {
        const uint8_t *b = w + (size_t)s * bb;
        __m512i code[4], sv[4];
        __m512 wc;
        float d;
        if (t == SKV_TYPE_Q6_K) {
            raw_q6k(b, code, sv, &wc);
            d = _cvtsh_ss((unsigned short)(b[208] | b[209] << 8));
        } else {
            raw_k45(b, t == SKV_TYPE_Q5_K, code, sv, &wc);
            d = _cvtsh_ss((unsigned short)(b[0] | b[1] << 8));
        }
        const __m512i isum = k_dot(code, sv, a.q + 256 * s);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(a.d[s] * d), acc);
        cor = _mm512_fmadd_ps(wc, _mm512_loadu_ps(a.s + 16 * s), cor);
    }
    return _mm512_reduce_add_ps(acc) + _mm512_reduce_add_ps(cor);
}

static void gemv_q(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    const int bs = skv_act_block(mm->wt), nb = mm->n_in / bs;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)mm->w + (size_t)r * mm->w_stride;
        for (int i = i0; i < i1; i++)
            mm->y[(size_t)i * mm->n_out + r] = dot_raw(mm->wt, w, act_at(mm, i, bs), nb);
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

/* K-quant tile over super-blocks [sb0, sb0 + nsb) of x; cor gets the min / offset terms. */
INLINE void tile_k(int mr, const act_row *a, int sb0, const prep_row *const *p, int nsb,
                   __m512 acc[MRQ][NRQ], __m512 cor[MRQ][NRQ]) {
    for (int s = 0; s < nsb; s++) {
        __m512i ia[MRQ][NRQ];
#pragma GCC unroll 4
        for (int i = 0; i < MRQ; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) ia[i][j] = _mm512_setzero_si512();
        const int xo = 256 * (sb0 + s);
        for (int c = 0; c < 4; c++) {
            __m512i w[NRQ], sv[NRQ];
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) {
                w[j] = _mm512_loadu_si512(p[j]->q + 256 * s + 64 * c);
                sv[j] = _mm512_loadu_si512(p[j]->sv + 128 * s + 32 * c);
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const __m512i x = _mm512_loadu_si512(a[i].q + xo + 64 * c);
#pragma GCC unroll 4
                for (int j = 0; j < NRQ; j++)
                    ia[i][j] = _mm512_dpwssd_epi32(ia[i][j], _mm512_maddubs_epi16(w[j], x), sv[j]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 xs = _mm512_loadu_ps(a[i].s + 16 * (sb0 + s));
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) {
                acc[i][j] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i][j]),
                                    _mm512_set1_ps(a[i].d[sb0 + s] * p[j]->d[s]), acc[i][j]);
                cor[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(p[j]->wc + 16 * s), xs, cor[i][j]);
            }
        }
    }
}

/* Runs an mr-row tile over one column block, continuing from (or starting) the saved lanes,
 * and writes y after the last block. save: [mr][NRQ][2] (acc, cor). */
INLINE void tile_q_step(int mr, int kq, const skv_mm *mm, int i, int r, int nr,
                        const prep_row *const *p, const prep_q8x *const *p8, int b0, int nb,
                        int first, int last, __m512 *save) {
    __m512 acc[MRQ][NRQ], cor[MRQ][NRQ];
    act_row a[MRQ];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, kq ? 256 : 32);
        for (int j = 0; j < NRQ; j++) {
            acc[ii][j] = first ? _mm512_setzero_ps() : save[(ii * NRQ + j) * 2];
            cor[ii][j] = first ? _mm512_setzero_ps() : save[(ii * NRQ + j) * 2 + 1];
        }
    }
    if (kq)
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
                    kq ? _mm512_reduce_add_ps(acc[ii][j]) + _mm512_reduce_add_ps(cor[ii][j])
                       : _mm512_reduce_add_ps(acc[ii][j]);
                mm->y[(size_t)(i + ii) * mm->n_out + r + j] = v;
            }
        }
}

/* Blocks of MCQ x rows; for each NRQ W rows and each block of up to KQ columns, the W rows are
 * prepared once and serve every tile of the x block. */
static void gemm_q(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    prep_row prep[NRQ];         /* K-quants: ~5 KB each, in L1 */
    prep_q8x prep8[NRQ];        /* Q8_0/Q4_0: 6 KB each */
    __m512 save[MCQ * NRQ * 2]; /* 48 KB */
    const skv_type t = mm->wt;
    const int kq = t != SKV_TYPE_Q8_0 && t != SKV_TYPE_Q4_0;
    const int bs = kq ? 256 : 32;
    const int nblk = mm->n_in / bs, per = KQ / bs; /* per even: block pairs never straddle */
    const int nkb = (nblk + per - 1) / per;
    for (int mc0 = i0; mc0 < i1; mc0 += MCQ) {
        const int mc1 = i1 - mc0 < MCQ ? i1 : mc0 + MCQ;
        for (int r = r0; r < r1; r += NRQ) {
            const int nr = r1 - r < NRQ ? r1 - r : NRQ;
            const prep_row *p[NRQ];
            const prep_q8x *p8[NRQ];
            for (int j = 0; j < NRQ; j++) {
                p[j] = &prep[j < nr ? j : nr - 1];
                p8[j] = &prep8[j < nr ? j : nr - 1];
            }
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * per, b1 = b0 + per < nblk ? b0 + per : nblk;
                for (int j = 0; j < nr; j++) {
                    const uint8_t *w = (const uint8_t *)mm->w + (size_t)(r + j) * mm->w_stride;
                    if (kq)
                        prep_k(&prep[j], w, t, b0, b1 - b0);
                    else
                        prep_q8x_fill(&prep8[j], w, t == SKV_TYPE_Q4_0, b0, b1 - b0);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
                for (; i + MRQ <= mc1; i += MRQ) {
                    __m512 *sv = save + (size_t)(i - mc0) * NRQ * 2;
                    if (kq)
                        tile_q_step(MRQ, 1, mm, i, r, nr, p, p8, b0, b1 - b0, first, last, sv);
                    else
                        tile_q_step(MRQ, 0, mm, i, r, nr, p, p8, b0, b1 - b0, first, last, sv);
                }
                for (; i < mc1; i++) {
                    __m512 *sv = save + (size_t)(i - mc0) * NRQ * 2;
                    if (kq)
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

void skv_matmul_avx512(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_F32:
    case SKV_TYPE_F16:
    case SKV_TYPE_BF16:
        if (!mm->w_panels) {
            skv_matmul_avx2(mm, i0, i1, r0, r1); /* the same bits */
        } else if (mm->wt == SKV_TYPE_F32) {
            matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_F32);
        } else if (mm->wt == SKV_TYPE_F16) {
            matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_F16);
        } else {
            matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_BF16);
        }
        break;
    case SKV_TYPE_Q8_0:
    case SKV_TYPE_Q4_0:
    case SKV_TYPE_Q4_K:
    case SKV_TYPE_Q5_K:
    case SKV_TYPE_Q6_K:
        if (!skv_simd_has_vnni())
            skv_matmul_avx2(mm, i0, i1, r0, r1);
        else if (mm->m < GEMM_Q_MIN_M)
            gemv_q(mm, i0, i1, r0, r1);
        else
            gemm_q(mm, i0, i1, r0, r1);
        break;
    default:
        break;
    }
}

#endif
