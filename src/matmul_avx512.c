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

/* A K-quant super-block unpacked for vpdpbusd: code[c] = 64 unsigned codes; ds[c] = per dpbusd
 * lane (4 values) d times the scale of the sub-block those values are in; wc = per 16 values the
 * coefficient of x's group sum (-dmin * m for Q4_K/Q5_K, -32 d sc for Q6_K's offset). Both
 * d * scale products are exact in float.
 * Which values code[c] holds is what 512-bit loads of the block give most cheaply:
 *   Q6_K: values [64c, 64c + 64) in order.
 *   Q4_K/Q5_K: a 64-byte load of qs holds 4 sub-blocks' nibbles, so code[c] holds values
 *   [32q, 32q + 32) ++ [32q + 64, 32q + 96) with q = 4 (c / 2) + c % 2 (the low nibbles of
 *   chunks c and c + 1, or their high nibbles). x is reordered to match
 *   (skv_act_rows_k_order). */
typedef struct kblock {
    __m512i code[4];
    __m512 ds[4];
    __m512 wc;
} kblock;

/* Lanes 0-7 from element e of v, lanes 8-15 from element f. */
static inline __m512 two_elems(__m512 v, int e, int f) {
    return _mm512_permutexvar_ps(
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(e)), _mm256_set1_epi32(f), 1),
        v);
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
        const float d = _cvtsh_ss((unsigned short)(b[208] | b[209] << 8));
        const __m512 scf =
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sc)));
        const __m512 dsc = _mm512_mul_ps(_mm512_set1_ps(d), scf);
        /* groups of 16 values: 4 lanes each */
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            k->ds[c] = _mm512_permutexvar_ps(
                _mm512_add_epi32(_mm512_set1_epi32(4 * c),
                                 _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)),
                dsc);
        k->wc = _mm512_mul_ps(_mm512_set1_ps(-32.0f * d), scf);
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
    const float d = _cvtsh_ss((unsigned short)(b[0] | b[1] << 8));
    const float dmin = _cvtsh_ss((unsigned short)(b[2] | b[3] << 8));
    /* the 8 scales and 8 mins as floats in 16 lanes: sc = F[0..8), m = F[8..16) */
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k4_scales16(b + 4)));
    const __m512 dsc = _mm512_mul_ps(_mm512_set1_ps(d), f);
    /* sub-blocks of 32 values: 8 lanes each; code[c] holds sub-blocks q and q + 2 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        k->ds[c] = two_elems(dsc, 4 * (c / 2) + c % 2, 4 * (c / 2) + c % 2 + 2);
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

/* Every K-quant output, per super-block: t = float(codes . x) * ds over its 4 x 64 values
 * (a multiply, then 3 FMAs), then acc = fma(t, dx, acc): the chain through acc is one FMA per
 * super-block, so consecutive super-blocks overlap. */
static inline __m512 k_part(__m512i code, __m512i x) {
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), code, x));
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
                const __m512 s = _mm512_mul_ps(dx, pair_scale(dw, two));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[k]);
            }
        }
        for (int k = 0; k < nw; k++) y[k] = _mm512_reduce_add_ps(acc[k]);
        return;
    }
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    for (int s = 0; s < nb; s++) {
        const int8_t *xq = a.q + 256 * s;
        const __m512 dx = _mm512_set1_ps(a.d[s]), xs = _mm512_loadu_ps(a.s + 16 * s);
#pragma GCC unroll 2
        for (int k = 0; k < nw; k++) {
            kblock kb;
            unpack_k(w[k] + (size_t)s * bb, t, &kb);
            __m512 u = _mm512_mul_ps(k_part(kb.code[0], _mm512_loadu_si512(xq)), kb.ds[0]);
#pragma GCC unroll 4
            for (int c = 1; c < 4; c++)
                u = _mm512_fmadd_ps(k_part(kb.code[c], _mm512_loadu_si512(xq + 64 * c)), kb.ds[c],
                                    u);
            acc[k] = _mm512_fmadd_ps(u, dx, acc[k]);
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
    float ds[KQ / 4] ALIGNED64;
    float wc[KQ / 16] ALIGNED64;
} prep_kx;

static void prep_kx_fill(prep_kx *p, const uint8_t *w, skv_type t, int sb0, int nsb) {
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    for (int s = 0; s < nsb; s++) {
        kblock k;
        unpack_k(w + (size_t)(sb0 + s) * bb, t, &k);
        for (int c = 0; c < 4; c++) {
            _mm512_store_si512(p->q + 256 * s + 64 * c, k.code[c]);
            _mm512_store_ps(p->ds + 64 * s + 16 * c, k.ds[c]);
        }
        _mm512_store_ps(p->wc + 16 * s, k.wc);
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
        __m512 t[MRQ][NRQ];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i w[NRQ];
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) w[j] = _mm512_load_si512(p[j]->q + 256 * s + 64 * c);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const __m512i x = _mm512_loadu_si512(a[i].q + xo + 64 * c);
#pragma GCC unroll 4
                for (int j = 0; j < NRQ; j++) {
                    const __m512 ds = _mm512_load_ps(p[j]->ds + 64 * s + 16 * c);
                    t[i][j] = c == 0 ? _mm512_mul_ps(k_part(w[j], x), ds)
                                     : _mm512_fmadd_ps(k_part(w[j], x), ds, t[i][j]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 dx = _mm512_set1_ps(a[i].d[sb0 + s]);
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) acc[i][j] = _mm512_fmadd_ps(t[i][j], dx, acc[i][j]);
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
INLINE void tile_q_step(int mr, int kq, const skv_mm *mm, int i, int r, int nr,
                        const prep_kx *const *p, const prep_q8x *const *p8, int b0, int nb,
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
    prep_kx prep[NRQ];          /* K-quants: 4.6 KB each, in L1 */
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
            const prep_kx *p[NRQ];
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
                        prep_kx_fill(&prep[j], w, t, b0, b1 - b0);
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
