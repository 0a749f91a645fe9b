/* matmul_avx2.c — the AVX2/FMA/F16C matrix products (built with -mavx2 -mfma -mf16c; matmul.c
 * calls them only when the CPU has those extensions).
 *
 * Every output's sum is done one way only, whichever path computes it, so the result of a row
 * is the same bits whether it is multiplied alone (decode) or with 511 others (prefill), and
 * whatever the thread split (a NaN output is NaN either way, not always with the same bits).
 *
 * Float weights (F32/F16/BF16): one FMA chain per output over k in order (x[k] broadcast, 16
 * outputs in two vectors). W is best stored in panels (skv_panels_pack: 16 rows k-major; what
 * a loaded model holds), raw rows also work.
 *   - one x row from panels: 4 long runs of panels stream at once (8 chains).
 *   - otherwise (prefill; raw rows also for one x row): blocks of MC x rows and KC columns; each
 *     16-row panel is made floats once per block (in L1; raw rows transposed 8x8) and serves
 *     6x16 register tiles (12 accumulators, 2 loads and 6 broadcasts per 12 FMAs).
 * Quantized weights: x is first quantized to 8-bit blocks (matmul.c). Integer products with
 *   maddubs (u8 x s8 -> s16 pairs) and madd (s16 -> s32), scaled per block in float.
 *   - Q8_0/Q4_0: eight W rows in the eight lanes, one float chain per output over the blocks
 *     (see the section below); one or two x rows read the raw blocks, more read 8-row octets
 *     transposed once, in 4 x 16 tiles.
 *   - K-quants, one or two x rows: straight over the raw blocks.
 *   - K-quants, more: 2 W rows are unpacked once ("prepared": codes as bytes, scales as int16
 *     multipliers and floats) and serve every 3-row tile of a block of x rows. */
#include "kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "avx2_util.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant_x86.h"

/* for the kernels specialised by a constant weight type or row count */
#define INLINE static inline __attribute__((always_inline))

/* ---- activation quantization (same bytes as skv_quantize_act_row) ------------------------ */

void skv_quantize_act_row_avx2(const float *x, void *dst, int64_t n, int bs) {
    int8_t *q = dst;
    float *d = (float *)((uint8_t *)dst + skv_act_off_d(n));
    float *s = (float *)((uint8_t *)dst + skv_act_off_s(n, bs));
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / bs; b++) {
        const float *xb = x + b * bs;
        __m256 vmax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int j = 0; j < bs; j += 8) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb + j), abs_mask);
            vmax = _mm256_max_ps(vmax, a);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* inf or NaN */
        }
        if (_mm256_movemask_ps(bad)) { /* as the scalar version: NaN scale, zero codes */
            d[b] = NAN;
            memset(q + b * bs, 0, (size_t)bs);
            for (int g = 0; g < bs / 16; g++) s[b * (bs / 16) + g] = NAN;
            continue;
        }
        float amax = hmax(vmax);
        float db = amax / 127.0f, id = skv_act_inv_scale(amax);
        d[b] = db;
        const __m256 vid = _mm256_set1_ps(id);
        for (int j = 0; j < bs; j += 32) {
            __m256i v[4];
            for (int t = 0; t < 4; t++) {
                __m256 f = _mm256_mul_ps(_mm256_loadu_ps(xb + j + 8 * t), vid);
                f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                v[t] = _mm256_cvtps_epi32(f);
            }
            int64_t g = (b * bs + j) / 16;
            s[g] = db * (float)hsum_i32(_mm256_add_epi32(v[0], v[1]));
            s[g + 1] = db * (float)hsum_i32(_mm256_add_epi32(v[2], v[3]));
            __m256i p =
                _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            _mm256_storeu_si256((__m256i *)(q + b * bs + j), _mm256_permutevar8x32_epi32(p, perm));
        }
    }
}

/* ---- float weights -------------------------------------------------------------------------
 * Every output is one float FMA chain over its columns in order: y = fma(x[k], w[k], y) for
 * k = 0 .. n_in - 1, starting from 0. The kernels keep 16 outputs (16 W rows) in two vectors
 * and broadcast x[k], so nothing else is ever summed; decode and prefill, raw rows and panels,
 * any thread split: the same operations per output, the same bits. */

#define PANEL SKV_MM_PANEL
/* x rows per prefill tile: 6 x 2 accumulators + 2 W vectors + 1 broadcast register */
#define MR 6
/* At most this many columns per block. 640 keeps SmolLM2's 576 in one block: a second block
 * re-reads every output (measured +8% on 49152x576 against 512). Larger n: blocks of ~512. */
#define KC 640
/* x rows per block: MC x the block's columns (up to 480 KB) stay in L2 over all panels */
#define MC 192

_Static_assert(SKV_MM_ROW_ALIGN % PANEL == 0, "threads must get whole panels");

static inline size_t elem_size(skv_type t) {
    return t == SKV_TYPE_F32 ? 4 : 2;
}

/* 8 consecutive weights as floats. t is a constant after inlining. */
INLINE __m256 load_w8(const uint8_t *p, skv_type t) {
    if (t == SKV_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (t == SKV_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float load_w1(const uint8_t *p, skv_type t) {
    if (t == SKV_TYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return t == SKV_TYPE_F16 ? _cvtsh_ss(h) : skv_bf16_to_f32(h);
}

/* bp[k - k0][16] = W rows [r, r + nr) at columns [k0, k1) as floats, rows from nr on zero.
 * Raw rows: 8x8 blocks transposed in registers. */
INLINE void pack_rows(float *bp, const skv_mm *mm, int r, int nr, int k0, int k1, skv_type t) {
    const size_t es = elem_size(t), st = mm->w_stride;
    const uint8_t *w = (const uint8_t *)mm->w + (size_t)r * st;
    const int len = k1 - k0, len8 = len & ~7;
    for (int h = 0; h < PANEL; h += 8) {
        for (int k = 0; k < len8; k += 8) {
            __m256 v[8];
            for (int j = 0; j < 8; j++)
                v[j] = h + j < nr ? load_w8(w + (size_t)(h + j) * st + (size_t)(k0 + k) * es, t)
                                  : _mm256_setzero_ps();
            transpose8(v);
            for (int j = 0; j < 8; j++) _mm256_store_ps(bp + (size_t)(k + j) * PANEL + h, v[j]);
        }
        for (int k = len8; k < len; k++)
            for (int j = 0; j < 8; j++)
                bp[(size_t)k * PANEL + h + j] =
                    h + j < nr ? load_w1(w + (size_t)(h + j) * st + (size_t)(k0 + k) * es, t)
                               : 0.0f;
    }
}

/* The same from a panel (already k-major, zero-padded): a conversion, or F32 used in place. */
INLINE const float *pack_panel(float *bp, const skv_mm *mm, int r, int k0, int k1, skv_type t) {
    const size_t es = elem_size(t);
    const uint8_t *p = (const uint8_t *)mm->w + (size_t)r * mm->n_in * es; /* r % PANEL == 0 */
    if (t == SKV_TYPE_F32) return (const float *)p + (size_t)k0 * PANEL;
    for (int k = k0; k < k1; k++) {
        _mm256_store_ps(bp + (size_t)(k - k0) * PANEL, load_w8(p + (size_t)k * PANEL * es, t));
        _mm256_store_ps(bp + (size_t)(k - k0) * PANEL + 8,
                        load_w8(p + ((size_t)k * PANEL + 8) * es, t));
    }
    return bp;
}

/* y[i][0, 16) (row stride ldy) over mr <= MR x rows: continues each chain from y (or from 0
 * when first) through columns [0, len) of x (row stride ldx) and bp. Named accumulators: an
 * array of them ends up on the stack. */
#define ACC_INIT(i)                                                                                \
    __m256 a##i##0 = _mm256_setzero_ps(), a##i##1 = a##i##0;                                       \
    if (i < mr && !first) {                                                                        \
        a##i##0 = _mm256_loadu_ps(y + (size_t)i * ldy);                                            \
        a##i##1 = _mm256_loadu_ps(y + (size_t)i * ldy + 8);                                        \
    }
#define ACC_FMA(i)                                                                                 \
    if (i < mr) {                                                                                  \
        __m256 xb = _mm256_broadcast_ss(x##i + k);                                                 \
        a##i##0 = _mm256_fmadd_ps(xb, b0, a##i##0);                                                \
        a##i##1 = _mm256_fmadd_ps(xb, b1, a##i##1);                                                \
    }
#define ACC_STORE(i)                                                                               \
    if (i < mr) {                                                                                  \
        _mm256_storeu_ps(y + (size_t)i * ldy, a##i##0);                                            \
        _mm256_storeu_ps(y + (size_t)i * ldy + 8, a##i##1);                                        \
    }

INLINE void tile_f(int mr, const float *x, size_t ldx, const float *bp, int len, float *y,
                   size_t ldy, int first) {
    /* one pointer per x row: base + 4k addressing in the loop, no multiplies */
    const float *x0 = x, *x1 = mr > 1 ? x0 + ldx : x0, *x2 = mr > 2 ? x1 + ldx : x0,
                *x3 = mr > 3 ? x2 + ldx : x0, *x4 = mr > 4 ? x3 + ldx : x0,
                *x5 = mr > 5 ? x4 + ldx : x0; /* rows past mr: never read, never past x */
    (void)x1, (void)x2, (void)x3, (void)x4, (void)x5;
    // clang-format off
    ACC_INIT(0) ACC_INIT(1) ACC_INIT(2) ACC_INIT(3) ACC_INIT(4) ACC_INIT(5)
    for (int k = 0; k < len; k++) {
        __m256 b0 = _mm256_loadu_ps(bp + (size_t)k * PANEL);
        __m256 b1 = _mm256_loadu_ps(bp + (size_t)k * PANEL + 8);
        ACC_FMA(0) ACC_FMA(1) ACC_FMA(2) ACC_FMA(3) ACC_FMA(4) ACC_FMA(5)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
    // clang-format on
}

/* tile_f for a row count known only at run time: one instantiation per count. */
static void tile_any(int mr, const float *x, size_t ldx, const float *bp, int len, float *y,
                     size_t ldy, int first) {
#define TILE_CASE(c)                                                                               \
    case c:                                                                                        \
        tile_f(c, x, ldx, bp, len, y, ldy, first);                                                 \
        return;
    switch (mr) {
        TILE_CASE(6)
        TILE_CASE(5)
        TILE_CASE(4)
        TILE_CASE(3)
        TILE_CASE(2)
    default:
        tile_f(1, x, ldx, bp, len, y, ldy, first);
    }
#undef TILE_CASE
}

/* Outputs of x rows [i0, i1) and W rows [r0, r1): blocks of MC x rows, each in column blocks of
 * up to KC; each 16-row W panel of a column block is made floats in bp once (L1-sized) and serves
 * every MR-row tile of the x block (in L2). Panels that end past r1 (the last rows of W) go
 * through a 16-wide scratch copy of y. */
INLINE void gemm_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    float bp[KC * PANEL] ALIGNED32;
    float ys[MR * PANEL];
    const int n = mm->n_in, nkb = (n + KC - 1) / KC, kc = (n + nkb - 1) / nkb;
    const size_t ldy = (size_t)mm->n_out;
    for (int mc0 = i0; mc0 < i1; mc0 += MC) {
        const int mc1 = i1 - mc0 < MC ? i1 : mc0 + MC;
        for (int k0 = 0; k0 < n; k0 += kc) {
            const int k1 = n - k0 < kc ? n : k0 + kc, first = k0 == 0;
            for (int r = r0; r < r1; r += PANEL) {
                const int nr = r1 - r < PANEL ? r1 - r : PANEL;
                const float *b = mm->w_panels ? pack_panel(bp, mm, r, k0, k1, t)
                                              : (pack_rows(bp, mm, r, nr, k0, k1, t), bp);
                for (int i = mc0; i < mc1; i += MR) {
                    const int mr = mc1 - i < MR ? mc1 - i : MR;
                    const float *x = mm->x + (size_t)i * n + k0;
                    float *y = mm->y + (size_t)i * ldy + r;
                    /* the next tile's outputs (from L3 or memory after the first block) */
                    if (!first && i + 2 * MR <= mc1)
                        for (int ii = MR; ii < 2 * MR; ii++) {
                            _mm_prefetch((const char *)(y + (size_t)ii * ldy), _MM_HINT_T0);
                            _mm_prefetch((const char *)(y + (size_t)ii * ldy + nr - 1),
                                         _MM_HINT_T0);
                        }
                    if (nr == PANEL) {
                        if (mr == MR)
                            tile_f(MR, x, (size_t)n, b, k1 - k0, y, ldy, first);
                        else
                            tile_any(mr, x, (size_t)n, b, k1 - k0, y, ldy, first);
                        continue;
                    }
                    for (int ii = 0; ii < mr; ii++)
                        for (int j = 0; j < PANEL; j++)
                            ys[ii * PANEL + j] = j < nr && !first ? y[(size_t)ii * ldy + j] : 0.0f;
                    tile_any(mr, x, (size_t)n, b, k1 - k0, ys, PANEL, first);
                    for (int ii = 0; ii < mr; ii++)
                        memcpy(y + (size_t)ii * ldy, ys + ii * PANEL, sizeof(float) * (size_t)nr);
                }
            }
        }
    }
}

/* y[r, r + 16) of one x row from the panel at p, clipped to r1. */
INLINE void store_panel(const skv_mm *mm, int r, int r1, __m256 a0, __m256 a1) {
    float out[PANEL];
    _mm256_storeu_ps(out, a0);
    _mm256_storeu_ps(out + 8, a1);
    memcpy(mm->y + r, out, sizeof(float) * (size_t)(r1 - r < PANEL ? r1 - r : PANEL));
}

/* One x row from panels (decode): the thread's panels in 4 quarters, one panel of each at a
 * time, so W streams as 4 long sequential runs (panels are contiguous); 8 FMA chains. */
INLINE void gemv_panels(const skv_mm *mm, int r0, int r1, skv_type t) {
    const int n = mm->n_in, np = (r1 - r0 + PANEL - 1) / PANEL, q = np / 4;
    const size_t es = elem_size(t), ps = (size_t)PANEL * n * es;
    const float *x = mm->x;
    const uint8_t *w0 = (const uint8_t *)mm->w + (size_t)r0 * n * es;
    for (int j = 0; j < q; j++) {
        const uint8_t *p = w0 + (size_t)j * ps;
        const size_t qs = (size_t)q * ps;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
               a7 = a0;
        for (int k = 0; k < n; k++) {
            const __m256 xb = _mm256_broadcast_ss(x + k);
            const uint8_t *e = p + (size_t)k * PANEL * es;
            a0 = _mm256_fmadd_ps(xb, load_w8(e, t), a0);
            a1 = _mm256_fmadd_ps(xb, load_w8(e + 8 * es, t), a1);
            a2 = _mm256_fmadd_ps(xb, load_w8(e + qs, t), a2);
            a3 = _mm256_fmadd_ps(xb, load_w8(e + qs + 8 * es, t), a3);
            a4 = _mm256_fmadd_ps(xb, load_w8(e + 2 * qs, t), a4);
            a5 = _mm256_fmadd_ps(xb, load_w8(e + 2 * qs + 8 * es, t), a5);
            a6 = _mm256_fmadd_ps(xb, load_w8(e + 3 * qs, t), a6);
            a7 = _mm256_fmadd_ps(xb, load_w8(e + 3 * qs + 8 * es, t), a7);
        }
        store_panel(mm, r0 + j * PANEL, r1, a0, a1);
        store_panel(mm, r0 + (q + j) * PANEL, r1, a2, a3);
        store_panel(mm, r0 + (2 * q + j) * PANEL, r1, a4, a5);
        store_panel(mm, r0 + (3 * q + j) * PANEL, r1, a6, a7);
    }
    for (int j = 4 * q; j < np; j++) {
        const uint8_t *p = w0 + (size_t)j * ps;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int k = 0; k < n; k++) {
            const __m256 xb = _mm256_broadcast_ss(x + k);
            a0 = _mm256_fmadd_ps(xb, load_w8(p + (size_t)k * PANEL * es, t), a0);
            a1 = _mm256_fmadd_ps(xb, load_w8(p + ((size_t)k * PANEL + 8) * es, t), a1);
        }
        store_panel(mm, r0 + j * PANEL, r1, a0, a1);
    }
}

INLINE void matmul_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    if (mm->m == 1 && mm->w_panels)
        gemv_panels(mm, r0, r1, t);
    else
        gemm_float(mm, i0, i1, r0, r1, t);
}

static void matmul_f32(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_F32);
}

static void matmul_f16(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_F16);
}

static void matmul_bf16(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_BF16);
}

/* Signed 8-bit w times signed 8-bit x, 32 lanes, summed in pairs and quads to 8 int32: the
 * sign of w moves onto x so that maddubs sees |w| as its unsigned operand. |w| <= 128 and
 * |x| <= 127 keep every 16-bit pair sum below 2^15. */
static inline __m256i dot_s8(__m256i w, __m256i x) {
    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* The K-quant raw-block dots below take NW rows w[0..nw) side by side against one activation
 * row: the x loads are shared and nw streams of W are in flight, and each row's sum goes through
 * the same operations in the same order as alone (and as in the prepared tiles further down), so
 * the result of a row does not depend on its neighbour. (Q8_0/Q4_0: dot_raw_q8x8, 8 rows.) */
#define NW 2

/* Q4_K/Q5_K (nsb super-blocks): per chunk maddubs then madd with the sub-block scale, summed in
 * int32 over the super-block; the mins meet x's group sums. */
INLINE void dot_raw_k45(const uint8_t *const *w, int nw, act_row a, int nsb, int q5, float *y) {
    const size_t bb = q5 ? 176 : 144;
    const __m256i dup_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256i dup_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    __m256 acc[NW], cor[NW];
    for (int k = 0; k < NW; k++) acc[k] = cor[k] = _mm256_setzero_ps();
    for (int s = 0; s < nsb; s++) {
        const int8_t *xq = a.q + 256 * s;
        const float *xs = a.s + 16 * s;
#pragma GCC unroll 2
        for (int k = 0; k < nw; k++) {
            const uint8_t *b = w[k] + (size_t)s * bb;
            __m128i sc, mn;
            k4_scales(b + 4, &sc, &mn);
            const __m256i scb = _mm256_broadcastsi128_si256(sc);
            const uint8_t *qs = b + (q5 ? 48 : 16);
            const __m256i hb =
                q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
            __m256i isum = _mm256_setzero_si256();
            /* unrolled: the scale shuffles' masks and the Q5 shifts become constants */
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256i lo, hi;
                k45_codes(qs, hb, c, q5, &lo, &hi);
                __m256i p0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)(xq + 64 * c))),
                    bcast_i16(scb, 2 * c));
                __m256i p1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi,
                                         _mm256_load_si256((const __m256i *)(xq + 64 * c + 32))),
                    bcast_i16(scb, 2 * c + 1));
                isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
            }
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ld_f16(b) * a.d[s]),
                                     acc[k]);
            /* the mins: -dmin * m[j] for both groups of 16 of sub-block j, times x's group sums */
            __m256 wc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(mn)),
                                      _mm256_set1_ps(-ld_f16(b + 2)));
            cor[k] =
                _mm256_fmadd_ps(_mm256_permutevar8x32_ps(wc, dup_lo), _mm256_loadu_ps(xs), cor[k]);
            cor[k] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(wc, dup_hi), _mm256_loadu_ps(xs + 8),
                                     cor[k]);
        }
    }
    for (int k = 0; k < nw; k++) y[k] = hsum(acc[k]) + hsum(cor[k]);
}

/* Q6_K (nsb super-blocks): codes 0..63 with maddubs, the 16 signed scales with madd; the -32
 * offset as -32 d sc[g] times x's group sums. */
INLINE void dot_raw_q6k(const uint8_t *const *w, int nw, act_row a, int nsb, float *y) {
    __m256 acc[NW], cor[NW];
    for (int k = 0; k < NW; k++) acc[k] = cor[k] = _mm256_setzero_ps();
    for (int s = 0; s < nsb; s++) {
        const int8_t *xq = a.q + 256 * s;
        const float *xs = a.s + 16 * s;
#pragma GCC unroll 2
        for (int k = 0; k < nw; k++) {
            const uint8_t *b = w[k] + (size_t)s * 210;
            const int8_t *sc = (const int8_t *)(b + 192);
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
            __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i code[4];
                q6_codes(b + 64 * h, b + 128 + 32 * h, code);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    int c = 4 * h + j;
                    __m256i p = _mm256_maddubs_epi16(
                        code[j], _mm256_load_si256((const __m256i *)(xq + 32 * c)));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, q6_chunk_scales(s16, c)));
                }
            }
            float d = ld_f16(b + 208);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * a.d[s]), acc[k]);
            const __m256 m32d = _mm256_set1_ps(-32.0f * d);
            __m256 f0 =
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc)));
            __m256 f1 = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8))));
            cor[k] = _mm256_fmadd_ps(_mm256_mul_ps(m32d, f0), _mm256_loadu_ps(xs), cor[k]);
            cor[k] = _mm256_fmadd_ps(_mm256_mul_ps(m32d, f1), _mm256_loadu_ps(xs + 8), cor[k]);
        }
    }
    for (int k = 0; k < nw; k++) y[k] = hsum(acc[k]) + hsum(cor[k]);
}

INLINE void dot_raw(skv_type t, const uint8_t *const *w, int nw, act_row a, int nb, float *y) {
    switch (t) {
    case SKV_TYPE_Q4_K:
        dot_raw_k45(w, nw, a, nb, 0, y);
        break;
    case SKV_TYPE_Q5_K:
        dot_raw_k45(w, nw, a, nb, 1, y);
        break;
    default:
        dot_raw_q6k(w, nw, a, nb, y);
        break;
    }
}

/* Rows [r0, r1) for x rows [i0, i1) from the raw blocks, NW rows at a time (rows j and j + h:
 * two distant streams of W); t is a constant after inlining. */
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
            dot_raw(t, w, NW, a, nb, v);
            for (int k = 0; k < NW; k++) y[r0 + j + k * h] = v[k];
        }
        for (int r = r0 + NW * h; r < r1; r++) {
            const uint8_t *w[NW] = {w0 + (size_t)r * st};
            dot_raw(t, w, 1, a, nb, y + r);
        }
    }
}

/* x rows below which quantized W is used straight from its raw blocks. */
#define GEMM_Q_MIN_M 3

/* ---- Q8_0/Q4_0: eight W rows in the eight lanes ------------------------------------------
 * Each output is one float chain over the blocks in order,
 *     acc = fma((float)idot_b, dx_b * dw_b, acc),
 * where idot_b is the block's exact integer dot. With eight W rows in the lanes the scales dw
 * of a block are one vector, each block costs one cvt, mul and fma per 8 outputs, and no
 * horizontal sum is left at the end (one row per vector, lanes = partial sums of a block, costs
 * a cvt, a mul and an fma per row and block: measured 1.25-1.5x slower in the tiles). One or two x
 * rows read the raw rows, and a block's 8 partial-sum vectors are summed across lanes into the
 * rows' lanes; more x rows read "octets": 8 rows whose codes are transposed once so that one
 * 32-byte load holds 4 codes of each row, met by 4 x codes broadcast. */

/* Stores the first n (1..8) lanes of v. */
static inline void store_lanes(float *y, __m256 v, int n) {
    if (n == 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(y, t, sizeof(float) * (size_t)n);
}

/* Bytes ahead that each of the 8 rows is prefetched, every other block: about one 64-byte line
 * per prefetch for Q8_0's 34-byte blocks (Q4_0's 18-byte ones get each line about twice). */
#define PFD 1024

/* 8 raw rows w[0..8) against one x row over nb blocks: lane k is row k's chain. */
INLINE __m256 dot_raw_q8x8(const uint8_t *const *w, act_row a, int nb, int q4) {
    const size_t bb = q4 ? 18 : 34;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256i x = _mm256_load_si256((const __m256i *)(a.q + 32 * b));
        __m256i v[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const uint8_t *blk = w[k] + (size_t)b * bb;
            if ((b & 1) == 0) /* an address, maybe past W: a prefetch never faults */
                _mm_prefetch((const char *)((uintptr_t)blk + PFD), _MM_HINT_T0);
            v[k] = dot_s8(q8_codes(blk, q4), x);
        }
        const __m256 s = _mm256_mul_ps(_mm256_set1_ps(a.d[b]), scales8(w, (size_t)b * bb));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8_i32(v)), s, acc);
    }
    return acc;
}

/* Rows j, j + h, ..., j + 7h of [r0, r1) in the lanes: 8 streams far apart, each sweeping
 * its own eighth of W from start to end; then the last (r1 - r0) % 8 rows. Measured from DRAM
 * (matmul_bench, sparsekv bench tg): 8 adjacent rows read block by block were 3x slower, 4
 * quarters of 2 adjacent rows 1.4x; without the prefetch 1.3x. Still 0-15% below a one-row-
 * per-vector gemv over 2 streams (llama-3.2-1b Q8_0 tg), which the tiles could not match. */
INLINE void gemv_q8(const skv_mm *mm, int i0, int i1, int r0, int r1, int q4) {
    const int nb = mm->n_in / 32, h = (r1 - r0) / 8;
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        for (int j = 0; j < h; j++) {
            const uint8_t *w[8];
            float t[8];
            for (int k = 0; k < 8; k++) w[k] = w_row(mm, r0 + j + k * h);
            _mm256_storeu_ps(t, dot_raw_q8x8(w, a, nb, q4));
            for (int k = 0; k < 8; k++) y[r0 + j + k * h] = t[k];
        }
        const int r = r0 + 8 * h;
        if (r < r1) {
            const uint8_t *w[8];
            lane_rows(mm, r, r1, 8, w);
            store_lanes(y + r, dot_raw_q8x8(w, a, nb, q4), r1 - r);
        }
    }
}

#define MR8 4  /* x rows per tile */
#define NO8 2  /* octets per tile (16 W rows) */
#define KB8 32 /* blocks per prepared column block: two octets are 18 KB, in L1 */
#define MC8 96 /* x rows per row block */

typedef struct prep_oct {
    int8_t q[KB8 * 256] ALIGNED32; /* [block][group g][row k][4]: row k's codes 4g..4g+3 */
    float d[KB8 * 8] ALIGNED32;    /* [block][row k] */
} prep_oct;

/* Prepares blocks [b0, b0 + nb) of 8 rows: per block the 8 x 8 dwords of codes transposed. */
INLINE void prep_octet(prep_oct *p, const uint8_t *const *w, int q4, int b0, int nb) {
    const size_t bb = q4 ? 18 : 34;
    for (int b = 0; b < nb; b++) {
        __m256i v[8];
        for (int k = 0; k < 8; k++) v[k] = q8_codes(w[k] + (size_t)(b0 + b) * bb, q4);
        _mm256_store_ps(p->d + 8 * b, scales8(w, (size_t)(b0 + b) * bb));
        __m256 f[8]; /* transpose8 moves 32-bit lanes: the codes pass through bit for bit */
        for (int k = 0; k < 8; k++) f[k] = _mm256_castsi256_ps(v[k]);
        transpose8(f);
        for (int g = 0; g < 8; g++)
            _mm256_store_si256((__m256i *)(p->q + 256 * b + 32 * g), _mm256_castps_si256(f[g]));
    }
}

/* mr x rows times NO8 octets over blocks [b0, b0 + nb) of x (the octets start at b0). */
INLINE void tile_q8x8(int mr, const act_row *a, int b0, const prep_oct *const *p, int nb,
                      __m256 acc[MR8][NO8]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        __m256i ia[MR8][NO8];
#pragma GCC unroll 4
        for (int i = 0; i < MR8; i++)
#pragma GCC unroll 2
            for (int c = 0; c < NO8; c++) ia[i][c] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m256i w[NO8], aw[NO8];
#pragma GCC unroll 2
            for (int c = 0; c < NO8; c++) {
                w[c] = _mm256_load_si256((const __m256i *)(p[c]->q + 256 * b + 32 * g));
                aw[c] = _mm256_abs_epi8(w[c]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                int32_t x4;
                memcpy(&x4, a[i].q + 32 * (b0 + b) + 4 * g, 4);
                const __m256i x = _mm256_set1_epi32(x4);
#pragma GCC unroll 2
                for (int c = 0; c < NO8; c++)
                    ia[i][c] = _mm256_add_epi32(
                        ia[i][c],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(x, w[c])),
                                          ones));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m256 dx = _mm256_broadcast_ss(&a[i].d[b0 + b]);
#pragma GCC unroll 2
            for (int c = 0; c < NO8; c++)
                acc[i][c] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][c]),
                                    _mm256_mul_ps(dx, _mm256_load_ps(p[c]->d + 8 * b)), acc[i][c]);
        }
    }
}

/* An mr-row tile over one column block, continuing from (or starting) the saved lanes
 * (save: [mr][NO8]); after the last block it stores the nr (1..16) valid W rows' outputs. */
INLINE void tile_q8_step(int mr, const skv_mm *mm, int i, int r, int nr, const prep_oct *const *p,
                         int b0, int nb, int first, int last, __m256 *save) {
    __m256 acc[MR8][NO8];
    act_row a[MR8];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, 32);
        for (int c = 0; c < NO8; c++) acc[ii][c] = first ? _mm256_setzero_ps() : save[ii * NO8 + c];
    }
    tile_q8x8(mr, a, b0, p, nb, acc);
    for (int ii = 0; ii < mr; ii++)
        for (int c = 0; c < NO8; c++) {
            if (!last)
                save[ii * NO8 + c] = acc[ii][c];
            else if (8 * c < nr)
                store_lanes(mm->y + (size_t)(i + ii) * mm->n_out + r + 8 * c, acc[ii][c],
                            nr - 8 * c < 8 ? nr - 8 * c : 8);
        }
}

INLINE void gemm_q8(const skv_mm *mm, int i0, int i1, int r0, int r1, int q4) {
    prep_oct prep[NO8];
    __m256 save[MC8 * NO8] ALIGNED32;
    const int nblk = mm->n_in / 32, nkb = (nblk + KB8 - 1) / KB8;
    for (int mc0 = i0; mc0 < i1; mc0 += MC8) {
        const int mc1 = i1 - mc0 < MC8 ? i1 : mc0 + MC8;
        for (int r = r0; r < r1; r += 8 * NO8) {
            const int nr = r1 - r < 8 * NO8 ? r1 - r : 8 * NO8, no = (nr + 7) / 8;
            const prep_oct *p[NO8];
            for (int c = 0; c < NO8; c++) p[c] = &prep[c < no ? c : no - 1];
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * KB8, nb = nblk - b0 < KB8 ? nblk - b0 : KB8;
                for (int c = 0; c < no; c++) {
                    const uint8_t *w[8];
                    lane_rows(mm, r + 8 * c, r + nr, 8, w);
                    prep_octet(&prep[c], w, q4, b0, nb);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
                /* constant row counts let the compiler keep the tile in registers */
                for (; i + MR8 <= mc1; i += MR8)
                    tile_q8_step(MR8, mm, i, r, nr, p, b0, nb, first, last,
                                 save + (size_t)(i - mc0) * NO8);
                __m256 *sv = save + (size_t)(i - mc0) * NO8;
                switch (mc1 - i) {
                case 3:
                    tile_q8_step(3, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                case 2:
                    tile_q8_step(2, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                case 1:
                    tile_q8_step(1, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                default:
                    break;
                }
            }
        }
    }
}

INLINE void matmul_q8(const skv_mm *mm, int i0, int i1, int r0, int r1, int q4) {
    if (mm->m < GEMM_Q_MIN_M)
        gemv_q8(mm, i0, i1, r0, r1, q4);
    else
        gemm_q8(mm, i0, i1, r0, r1, q4);
}

static void matmul_q8_0(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, 0);
}

static void matmul_q4_0(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, 1);
}

static void gemv_k(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
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

/* ---- K-quants: prepared rows (quant_x86.h) ----------------------------------------------- */
#define NRQ 2 /* W rows per quantized tile */
#define MRQ 3 /* x rows per quantized tile */

/* K-quant tile over super-blocks [sb0, sb0 + nsb) of x; cor gets the min/offset terms. */
INLINE void tile_k(int mr, const act_row *a, int sb0, const prep_row *const *p, int nsb,
                   __m256 acc[MRQ][NRQ], __m256 cor[MRQ][NRQ]) {
    for (int s = 0; s < nsb; s++) {
        __m256i ia[MRQ][NRQ];
#pragma GCC unroll 4
        for (int i = 0; i < MRQ; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) ia[i][j] = _mm256_setzero_si256();
        const int xo = 256 * (sb0 + s);
        for (int c = 0; c < 8; c++) {
            __m256i w[NRQ], sv[NRQ];
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) {
                w[j] = _mm256_load_si256((const __m256i *)(p[j]->q + 256 * s + 32 * c));
                sv[j] = _mm256_load_si256((const __m256i *)(p[j]->sv + 128 * s + 16 * c));
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                __m256i x = _mm256_load_si256((const __m256i *)(a[i].q + xo + 32 * c));
#pragma GCC unroll 4
                for (int j = 0; j < NRQ; j++)
                    ia[i][j] = _mm256_add_epi32(
                        ia[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(w[j], x), sv[j]));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m256 dx = _mm256_broadcast_ss(&a[i].d[sb0 + s]);
            const float *xs = a[i].s + 16 * (sb0 + s);
            __m256 s0 = _mm256_loadu_ps(xs), s1 = _mm256_loadu_ps(xs + 8);
#pragma GCC unroll 4
            for (int j = 0; j < NRQ; j++) {
                acc[i][j] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][j]),
                                    _mm256_mul_ps(dx, _mm256_broadcast_ss(&p[j]->d[s])), acc[i][j]);
                cor[i][j] = _mm256_fmadd_ps(_mm256_load_ps(p[j]->wc + 16 * s), s0, cor[i][j]);
                cor[i][j] = _mm256_fmadd_ps(_mm256_load_ps(p[j]->wc + 16 * s + 8), s1, cor[i][j]);
            }
        }
    }
}

/* Runs an mr-row tile over one column block, continuing from (or starting) the saved lanes,
 * and writes y after the last block. save: [mr][NRQ][2] (acc, cor). */
INLINE void tile_k_step(int mr, const skv_mm *mm, int i, int r, int nr, const prep_row *const *p,
                        int b0, int nb, int first, int last, __m256 *save) {
    __m256 acc[MRQ][NRQ], cor[MRQ][NRQ];
    act_row a[MRQ];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, 256);
        for (int j = 0; j < NRQ; j++) {
            acc[ii][j] = first ? _mm256_setzero_ps() : save[(ii * NRQ + j) * 2];
            cor[ii][j] = first ? _mm256_setzero_ps() : save[(ii * NRQ + j) * 2 + 1];
        }
    }
    tile_k(mr, a, b0, p, nb, acc, cor);
    for (int ii = 0; ii < mr; ii++)
        for (int j = 0; j < NRQ; j++) {
            if (!last) {
                save[(ii * NRQ + j) * 2] = acc[ii][j];
                save[(ii * NRQ + j) * 2 + 1] = cor[ii][j];
            } else if (j < nr) {
                /* the raw one-row kernels end the same way */
                mm->y[(size_t)(i + ii) * mm->n_out + r + j] = hsum(acc[ii][j]) + hsum(cor[ii][j]);
            }
        }
}

/* Blocks of MCQ x rows; for each NRQ W rows and each block of up to KQ columns, the W rows
 * are prepared once and serve every tile of the x block. */
#define MCQ 96

static void gemm_k(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    prep_row prep[NRQ]; /* ~5 KB each, stays in L1 */
    __m256 save[MCQ * NRQ * 2] ALIGNED32;
    const skv_type t = mm->wt;
    const int nblk = mm->n_in / 256, per = KQ / 256;
    const int nkb = (nblk + per - 1) / per;
    for (int mc0 = i0; mc0 < i1; mc0 += MCQ) {
        int mc1 = i1 - mc0 < MCQ ? i1 : mc0 + MCQ;
        for (int r = r0; r < r1; r += NRQ) {
            int nr = r1 - r < NRQ ? r1 - r : NRQ;
            const prep_row *p[NRQ];
            for (int j = 0; j < NRQ; j++) p[j] = &prep[j < nr ? j : nr - 1];
            for (int kb = 0; kb < nkb; kb++) {
                int b0 = kb * per, b1 = b0 + per < nblk ? b0 + per : nblk;
                for (int j = 0; j < nr; j++) prep_k(&prep[j], w_row(mm, r + j), t, b0, b1 - b0);
                int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
                /* constant row counts let the compiler keep the tile in registers */
                for (; i + MRQ <= mc1; i += MRQ)
                    tile_k_step(MRQ, mm, i, r, nr, p, b0, b1 - b0, first, last,
                                save + (size_t)(i - mc0) * NRQ * 2);
                for (; i < mc1; i++)
                    tile_k_step(1, mm, i, r, nr, p, b0, b1 - b0, first, last,
                                save + (size_t)(i - mc0) * NRQ * 2);
            }
        }
    }
}

void skv_matmul_avx2(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_F32:
        matmul_f32(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_F16:
        matmul_f16(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_BF16:
        matmul_bf16(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q8_0:
        matmul_q8_0(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q4_0:
        matmul_q4_0(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q4_K:
    case SKV_TYPE_Q5_K:
    case SKV_TYPE_Q6_K:
        if (mm->m < GEMM_Q_MIN_M)
            gemv_k(mm, i0, i1, r0, r1);
        else
            gemm_k(mm, i0, i1, r0, r1);
        break;
    default:
        break;
    }
}

#endif
