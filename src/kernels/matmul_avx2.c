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
 *   - one x row from panels: 2 long runs of panels stream at once (4 chains).
 *   - otherwise (prefill; raw rows also for one x row): blocks of MC x rows and KC columns; x's
 *     block is packed tile by tile, each 16-row panel is made floats once per block (in L1; raw
 *     rows transposed 8x8) and serves 6x16 register tiles (12 accumulators, 2 loads and 6
 *     broadcasts per 12 FMAs).
 * Quantized weights: x is first quantized to 8-bit blocks (matmul.c). Integer products with
 *   maddubs (u8 x s8 -> s16 pairs) and madd (s16 -> s32), scaled per block in float.
 *   - Q8_0/Q4_0/Q5_0 (Q4_0's and Q5_0's codes unpacked to signed bytes, q8_codes): eight W rows
 *     in the eight lanes, one float chain per output over the blocks
 *     (see the section below); one or two x rows read the raw blocks, more read 8-row octets
 *     transposed once, in 4 x 16 tiles. Q8_0 in k16 records (a loaded model's at this level)
 *     holds the octets already: decode reads them as they lie, prefill copies them; Q4_0
 *     records hold them in nibbles (two octets per vector).
 *   - K-quants: two exact integers per output and super-block, then one float chain (the
 *     formula of the AVX-512 VNNI level: the same bits); one or two x rows read 4 raw rows side
 *     by side, more put 16 W rows in the lanes of two vectors (3 x 16 tiles); Q4_K and Q6_K in
 *     k16 records (a loaded model's) are read as they lie in decode, and prefill prepares its
 *     tiles from them. */
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
/* x rows per block: MC x the block's columns (~650 KB at most, whole tiles) stay in
 * L2 over all panels. Each block converts and reads every W panel once more: a 512-token prompt
 * in 2 blocks instead of 3 (192) ran llama-3.2-1b F16 pp512 ~5% faster at 2 threads (7 of 9
 * alternated rounds, Zen 4, 1 MB L2); the AVX-512 level (12-row tiles) showed no gain. */
#define MC 256

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
 * when first) through columns [0, len) of the tile's packed x (xp: [len][MR], pack_x) and bp.
 * Named accumulators: an array of them ends up on the stack. */
#define ACC_INIT(i)                                                                                \
    __m256 a##i##0 = _mm256_setzero_ps(), a##i##1 = a##i##0;                                       \
    if (i < mr && !first) {                                                                        \
        a##i##0 = _mm256_loadu_ps(y + (size_t)i * ldy);                                            \
        a##i##1 = _mm256_loadu_ps(y + (size_t)i * ldy + 8);                                        \
    }
#define ACC_FMA(i)                                                                                 \
    if (i < mr) {                                                                                  \
        __m256 xb = _mm256_broadcast_ss(xp + (size_t)k * MR + i);                                  \
        a##i##0 = _mm256_fmadd_ps(xb, b0, a##i##0);                                                \
        a##i##1 = _mm256_fmadd_ps(xb, b1, a##i##1);                                                \
    }
#define ACC_STORE(i)                                                                               \
    if (i < mr) {                                                                                  \
        _mm256_storeu_ps(y + (size_t)i * ldy, a##i##0);                                            \
        _mm256_storeu_ps(y + (size_t)i * ldy + 8, a##i##1);                                        \
    }

INLINE void tile_f(int mr, const float *xp, const float *bp, int len, float *y, size_t ldy,
                   int first) {
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
static void tile_any(int mr, const float *xp, const float *bp, int len, float *y, size_t ldy,
                     int first) {
#define TILE_CASE(c)                                                                               \
    case c:                                                                                        \
        tile_f(c, xp, bp, len, y, ldy, first);                                                     \
        return;
    switch (mr) {
        TILE_CASE(6)
        TILE_CASE(5)
        TILE_CASE(4)
        TILE_CASE(3)
        TILE_CASE(2)
    default:
        tile_f(1, xp, bp, len, y, ldy, first);
    }
#undef TILE_CASE
}

/* xp[t][k][MR] = x rows [i0 + t * MR, ...) at columns [k0, k1): each tile's rows interleaved
 * (rows past i1 zero), so a tile reads x as one stream. x's own rows are n_in apart: a power of
 * two times 4 KB in most models, so a block of them read in place maps onto a few cache sets and
 * does not stay in L2 (measured: llama-3.2-1b F16 pp512 at 2 threads 25% below the AVX-512
 * level, which packs; 5% at pp256). 8x8 blocks transposed in registers, 6 of 8 kept. */
static void pack_x(float *xp, const float *x, size_t ldx, int i0, int i1, int k0, int k1) {
    _Static_assert(MR == 6, "a tile's rows are stored as 4 + 2 lanes of the transpose");
    const int len = k1 - k0, len8 = len & ~7;
    for (int i = i0; i < i1; i += MR) {
        float *d = xp + (size_t)(i - i0) * (size_t)len; /* (i - i0) is a multiple of MR */
        const int mr = i1 - i < MR ? i1 - i : MR;
        const float *src = x + (size_t)i * ldx + k0;
        for (int k = 0; k < len8; k += 8) {
            __m256 v[8];
            for (int r = 0; r < 8; r++)
                v[r] = r < mr ? _mm256_loadu_ps(src + (size_t)r * ldx + k) : _mm256_setzero_ps();
            transpose8(v);
            for (int j = 0; j < 8; j++) { /* lanes 0..5 of each */
                float *o = d + (size_t)(k + j) * MR;
                _mm_storeu_ps(o, _mm256_castps256_ps128(v[j]));
                _mm_storel_pi((__m64 *)(o + 4), _mm256_extractf128_ps(v[j], 1));
            }
        }
        for (int k = len8; k < len; k++)
            for (int r = 0; r < MR; r++)
                d[(size_t)k * MR + r] = r < mr ? src[(size_t)r * ldx + k] : 0.0f;
    }
}

/* Outputs of x rows [i0, i1) and W rows [r0, r1): blocks of mc x rows, each in column blocks of
 * up to KC; per block x is packed once (xp, L2) and each 16-row W panel is made floats in bp once
 * (L1-sized), serving every MR-row tile of the block. Panels that end past r1 (the last rows of
 * W) go through a 16-wide scratch copy of y. mc is min(MC, i1 - i0) rounded up to whole tiles,
 * or MR when there is no memory for xp (the same operations per output either way). */
INLINE void gemm_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    float bp[KC * PANEL] ALIGNED32;
    float ys[MR * PANEL];
    float xp_one[MR * KC]; /* one tile's x when xp cannot be had */
    const int n = mm->n_in, nkb = (n + KC - 1) / KC, kc = (n + nkb - 1) / nkb;
    const size_t ldy = (size_t)mm->n_out;
    int mc = i1 - i0 < MC ? i1 - i0 : MC;
    mc = (mc + MR - 1) / MR * MR;
    /* up to 480 KB: too much for a thread's stack (aligned_alloc wants a multiple of 32) */
    float *xp = aligned_alloc(32, (sizeof(float) * (size_t)mc * (size_t)kc + 31) & ~(size_t)31);
    if (!xp) xp = xp_one, mc = MR;
    for (int mc0 = i0; mc0 < i1; mc0 += mc) {
        const int mc1 = i1 - mc0 < mc ? i1 : mc0 + mc;
        for (int k0 = 0; k0 < n; k0 += kc) {
            const int k1 = n - k0 < kc ? n : k0 + kc, first = k0 == 0;
            pack_x(xp, mm->x, (size_t)n, mc0, mc1, k0, k1);
            for (int r = r0; r < r1; r += PANEL) {
                const int nr = r1 - r < PANEL ? r1 - r : PANEL;
                const float *b = mm->w_panels ? pack_panel(bp, mm, r, k0, k1, t)
                                              : (pack_rows(bp, mm, r, nr, k0, k1, t), bp);
                /* the next panel's columns [k0, k1), a share per tile (prefetch_share) */
                prefetch_stream pf;
                const size_t es = elem_size(t);
                prefetch_start(&pf,
                               mm->w_panels && r + PANEL < r1
                                   ? (const uint8_t *)mm->w +
                                         ((size_t)(r + PANEL) * n + (size_t)k0 * PANEL) * es
                                   : NULL,
                               (size_t)(k1 - k0) * PANEL * es, (size_t)(mc1 - mc0 + MR - 1) / MR);
                for (int i = mc0; i < mc1; i += MR) {
                    const int mr = mc1 - i < MR ? mc1 - i : MR;
                    const float *x = xp + (size_t)(i - mc0) * (size_t)(k1 - k0);
                    float *y = mm->y + (size_t)i * ldy + r;
                    prefetch_share(&pf);
                    /* the next tile's outputs (from L3 or memory after the first block) */
                    if (!first && i + 2 * MR <= mc1)
                        for (int ii = MR; ii < 2 * MR; ii++) {
                            _mm_prefetch((const char *)(y + (size_t)ii * ldy), _MM_HINT_T0);
                            _mm_prefetch((const char *)(y + (size_t)ii * ldy + nr - 1),
                                         _MM_HINT_T0);
                        }
                    if (nr == PANEL) {
                        if (mr == MR)
                            tile_f(MR, x, b, k1 - k0, y, ldy, first);
                        else
                            tile_any(mr, x, b, k1 - k0, y, ldy, first);
                        continue;
                    }
                    for (int ii = 0; ii < mr; ii++)
                        for (int j = 0; j < PANEL; j++)
                            ys[ii * PANEL + j] = j < nr && !first ? y[(size_t)ii * ldy + j] : 0.0f;
                    tile_any(mr, x, b, k1 - k0, ys, PANEL, first);
                    for (int ii = 0; ii < mr; ii++)
                        memcpy(y + (size_t)ii * ldy, ys + ii * PANEL, sizeof(float) * (size_t)nr);
                }
            }
        }
    }
    if (xp != xp_one) free(xp);
}

/* The 16 weights of a panel row as two vectors. BF16 widens by interleaving with zeros (one
 * unpack per 8, where load_w8 takes a widen and a shift), which leaves the columns in the
 * order {0-3, 8-11}, {4-7, 12-15}; store_panel puts them back. */
INLINE void load_w16(const uint8_t *p, skv_type t, __m256 *lo, __m256 *hi) {
    if (t != SKV_TYPE_BF16) {
        *lo = load_w8(p, t);
        *hi = load_w8(p + 8 * elem_size(t), t);
        return;
    }
    const __m256i v = _mm256_loadu_si256((const __m256i *)p), z = _mm256_setzero_si256();
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
}

/* y[r, r + 16) of one x row from the panel at p (accumulated from load_w16), clipped to r1. */
INLINE void store_panel(const skv_mm *mm, int r, int r1, __m256 a0, __m256 a1, skv_type t) {
    float out[PANEL];
    if (t == SKV_TYPE_BF16) {
        const __m256 c0 = _mm256_permute2f128_ps(a0, a1, 0x20),
                     c1 = _mm256_permute2f128_ps(a0, a1, 0x31);
        a0 = c0;
        a1 = c1;
    }
    _mm256_storeu_ps(out, a0);
    _mm256_storeu_ps(out + 8, a1);
    memcpy(mm->y + r, out, sizeof(float) * (size_t)(r1 - r < PANEL ? r1 - r : PANEL));
}

/* One x row from panels (decode): the thread's panels in 2 halves, one panel of each at a
 * time, so W streams as 2 long sequential runs (panels are contiguous); 4 FMA chains. From
 * memory 2 streams beat 4 (Xeon, tg64 qwen2.5-0.5b F16 +3-11%, BF16 +6-9%, llama-3.2-1b F16
 * +4-10%); 4 were ~5% faster only where W sat in a 480 MB L3 (smollm2-135m). */
INLINE void gemv_panels(const skv_mm *mm, int r0, int r1, skv_type t) {
    const int n = mm->n_in, np = (r1 - r0 + PANEL - 1) / PANEL, h = np / 2;
    const size_t es = elem_size(t), ps = (size_t)PANEL * n * es, hs = (size_t)h * ps;
    const float *x = mm->x;
    const uint8_t *w0 = (const uint8_t *)mm->w + (size_t)r0 * n * es;
    for (int j = 0; j < h; j++) {
        const uint8_t *p = w0 + (size_t)j * ps;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int k = 0; k < n; k++) {
            const __m256 xb = _mm256_broadcast_ss(x + k);
            const uint8_t *e = p + (size_t)k * PANEL * es;
            SKV_PREFETCH_AHEAD(e, 0);
            SKV_PREFETCH_AHEAD(e + hs, 0);
            __m256 w0l, w0h, w1l, w1h;
            load_w16(e, t, &w0l, &w0h);
            load_w16(e + hs, t, &w1l, &w1h);
            a0 = _mm256_fmadd_ps(xb, w0l, a0);
            a1 = _mm256_fmadd_ps(xb, w0h, a1);
            a2 = _mm256_fmadd_ps(xb, w1l, a2);
            a3 = _mm256_fmadd_ps(xb, w1h, a3);
        }
        store_panel(mm, r0 + j * PANEL, r1, a0, a1, t);
        store_panel(mm, r0 + (h + j) * PANEL, r1, a2, a3, t);
    }
    if (np % 2) { /* the odd last panel */
        const uint8_t *p = w0 + (size_t)(np - 1) * ps;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int k = 0; k < n; k++) {
            const __m256 xb = _mm256_broadcast_ss(x + k);
            __m256 wl, wh;
            load_w16(p + (size_t)k * PANEL * es, t, &wl, &wh);
            a0 = _mm256_fmadd_ps(xb, wl, a0);
            a1 = _mm256_fmadd_ps(xb, wh, a1);
        }
        store_panel(mm, r0 + (np - 1) * PANEL, r1, a0, a1, t);
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

/* x rows below which quantized W is used straight from its raw blocks. */
#define GEMM_Q_MIN_M 3

/* ---- Q8_0, Q4_0, Q5_0, Q4_1, Q5_1: eight W rows in the eight lanes ------------------------
 * Each output is one float chain over the blocks in order,
 *     acc = fma((float)idot_b, dx_b * dw_b, acc),
 * where idot_b is the block's exact integer dot. With eight W rows in the lanes the scales dw
 * of a block are one vector, each block costs one cvt, mul and fma per 8 outputs, and no
 * horizontal sum is left at the end (one row per vector, lanes = partial sums of a block, costs
 * a cvt, a mul and an fma per row and block: measured 1.25-1.5x slower in the tiles). One or two x
 * rows read the raw rows, and a block's 8 partial-sum vectors are summed across lanes into the
 * rows' lanes; more x rows read "octets": 8 rows whose codes are transposed once so that one
 * 32-byte load holds 4 codes of each row, met by 4 x codes broadcast. Q8_0 k16 records
 * (kernels.h) are those octets, made at load, and Q4_0 ones the same in nibbles: decode
 * (gemv_q8_rec, gemv_q4_rec) and prefill (prep_octet_rec) read them without the transposes; the
 * raw-row paths serve other callers (skv_matmul on rows, SKV_NO_HUGE). */

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

/* k * the sum of x's 32 codes at xq in every lane (k = 8: what Q4_0's stored + 8 adds to a dot;
 * 1: the sum that Q4_1's and Q5_1's min m multiplies). */
static inline __m256i x_sum_v(const int8_t *xq, int k) {
    __m256i t = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_set1_epi8((char)k), _mm256_loadu_si256((const __m256i *)xq)),
        _mm256_set1_epi16(1));
    t = _mm256_add_epi32(t, _mm256_permute2x128_si256(t, t, 1));
    t = _mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0x4e));
    return _mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0xb1));
}

/* 8 raw rows w[0..8) against one x row over nb blocks: lane k is row k's chain (Q4_1, Q5_1:
 * then fma(x's block sum, dx m, chain), the min's term). */
INLINE __m256 dot_raw_q8x8(const uint8_t *const *w, act_row a, int nb, skv_type t) {
    const size_t bb = q8_block_bytes(t);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256i x = _mm256_load_si256((const __m256i *)(a.q + 32 * b));
        __m256i v[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const uint8_t *blk = w[k] + (size_t)b * bb;
            if ((b & 1) == 0) _mm_prefetch((const char *)((uintptr_t)blk + PFD), _MM_HINT_T0);
            v[k] = dot_s8(q8_codes(blk, t), x);
        }
        const __m256 dx = _mm256_set1_ps(a.d[b]);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8_i32(v)),
                              _mm256_mul_ps(dx, scales8(w, (size_t)b * bb)), acc);
        if (q8_affine(t))
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x_sum_v(a.q + 32 * b, 1)),
                                  _mm256_mul_ps(dx, scales8(w, (size_t)b * bb + 2)), acc);
    }
    return acc;
}

/* Rows j, j + h, ..., j + 7h of [r0, r1) in the lanes: 8 streams far apart, each sweeping
 * its own eighth of W from start to end; then the last (r1 - r0) % 8 rows. Measured from DRAM
 * (matmul_bench, sparsekv bench tg): 8 adjacent rows read block by block were 3x slower, 4
 * quarters of 2 adjacent rows 1.4x; without the prefetch 1.3x. Still 0-15% below a one-row-
 * per-vector gemv over 2 streams (llama-3.2-1b Q8_0 tg), which the tiles could not match. */
INLINE void gemv_q8(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    const int nb = mm->n_in / 32, h = (r1 - r0) / 8;
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        for (int j = 0; j < h; j++) {
            const uint8_t *w[8];
            float v[8];
            for (int k = 0; k < 8; k++) w[k] = w_row(mm, r0 + j + k * h);
            _mm256_storeu_ps(v, dot_raw_q8x8(w, a, nb, t));
            for (int k = 0; k < 8; k++) y[r0 + j + k * h] = v[k];
        }
        const int r = r0 + 8 * h;
        if (r < r1) {
            const uint8_t *w[8];
            lane_rows(mm, r, r1, 8, w);
            store_lanes(y + r, dot_raw_q8x8(w, a, nb, t), r1 - r);
        }
    }
}

#define MR8 4  /* x rows per tile */
#define NO8 2  /* octets per tile (16 W rows) */
#define KB8 32 /* blocks per prepared column block: two octets are 18 KB, in L1 */
#define MC8 96 /* x rows per row block */

typedef struct prep_oct {
    int8_t q[KB8 * 256] ALIGNED32; /* [block][group g][row k][4]: row k's codes 4g..4g+3 (Q4_0:
                                      as stored, code + 8, 0..15) */
    float d[KB8 * 8] ALIGNED32;    /* [block][row k] */
    float m[KB8 * 8] ALIGNED32;    /* [block][row k]: Q4_1's and Q5_1's mins */
} prep_oct;

/* Prepares blocks [b0, b0 + nb) of 8 rows: per block the 8 x 8 dwords of codes transposed. */
INLINE void prep_octet(prep_oct *p, const uint8_t *const *w, skv_type t, int b0, int nb) {
    const size_t bb = q8_block_bytes(t);
    for (int b = 0; b < nb; b++) {
        __m256i v[8];
        for (int k = 0; k < 8; k++) {
            v[k] = q8_codes(w[k] + (size_t)(b0 + b) * bb, t);
            if (t == SKV_TYPE_Q4_0)
                v[k] = _mm256_add_epi8(v[k], _mm256_set1_epi8(8)); /* as stored: tile_q8x8 */
        }
        _mm256_store_ps(p->d + 8 * b, scales8(w, (size_t)(b0 + b) * bb));
        if (q8_affine(t)) _mm256_store_ps(p->m + 8 * b, scales8(w, (size_t)(b0 + b) * bb + 2));
        __m256 f[8]; /* transpose8 moves 32-bit lanes: the codes pass through bit for bit */
        for (int k = 0; k < 8; k++) f[k] = _mm256_castsi256_ps(v[k]);
        transpose8(f);
        for (int g = 0; g < 8; g++)
            _mm256_store_si256((__m256i *)(p->q + 256 * b + 32 * g), _mm256_castps_si256(f[g]));
    }
}

/* prep_octet from records: octet h of group g holds the prepared codes as they are (Q8_0), or
 * as its nibbles (Q4_0, Q4_1: the low ones for h = 0; Q5_0, Q5_1: with their fifth bits; Q5_0
 * less 16); Q4_1's and Q5_1's mins after their scales. */
INLINE void prep_octet_rec(prep_oct *p, const skv_mm *mm, int g, int h, int b0, int nb,
                           skv_type t) {
    const int aff = q8_affine(t), five = t == SKV_TYPE_Q5_0 || t == SKV_TYPE_Q5_1;
    const int qo = aff ? SKV_K16_Q1_Q : SKV_K16_Q4_Q, ho = aff ? SKV_K16_Q51_H : SKV_K16_Q5_H;
    for (int b = 0; b < nb; b++) {
        const uint8_t *rec = k16_at(mm, g, b0 + b, 32, rec32_bytes(t));
        if (t != SKV_TYPE_Q8_0)
            for (int q = 0; q < 8; q++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(rec + qo + 32 * q));
                __m256i c =
                    _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
                if (five) c = _mm256_or_si256(c, unpack_fifth_bits(rec + ho + 8 * q + 4 * h));
                if (t == SKV_TYPE_Q5_0) c = _mm256_sub_epi8(c, _mm256_set1_epi8(16));
                _mm256_store_si256((__m256i *)(p->q + 256 * b + 32 * q), c);
            }
        else
            memcpy(p->q + 256 * b, rec + SKV_K16_Q8_Q + 256 * h, 256);
        _mm256_store_ps(p->d + 8 * b, _mm256_cvtph_ps(_mm_loadu_si128(
                                          (const __m128i *)(rec + SKV_K16_Q8_D + 16 * h))));
        if (aff)
            _mm256_store_ps(p->m + 8 * b, _mm256_cvtph_ps(_mm_loadu_si128(
                                              (const __m128i *)(rec + SKV_K16_Q1_M + 16 * h))));
    }
}

/* Octet h's 8 scales of block b of an IQ4 record (iq4_rec): IQ4_NL's d, IQ4_XS's d (ls - 32)
 * (exact in float: 11 by 6 bits). */
INLINE __m256 iq4_rec_scales(const uint8_t *rec, int b, int h, skv_type t) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + 16 * h)));
    if (t == SKV_TYPE_IQ4_NL) return d;
    const __m128i sc =
        _mm_loadl_epi64((const __m128i *)(rec + SKV_K16_IQ4XS_SC + 16 * (b % 8) + 8 * h));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
}

/* prep_octet from IQ4 records: the nibbles of octet h (the low ones for h = 0) through the grid,
 * signed codes as Q8_0's, and the block's scales. */
INLINE void prep_octet_iq4(prep_oct *p, const skv_mm *mm, int g, int h, int b0, int nb,
                           skv_type t) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), grid = iq4_grid_v();
    for (int b = 0; b < nb; b++) {
        const uint8_t *rec = iq4_rec(mm, g, b0 + b, t), *q = iq4_rec_codes(rec, b0 + b, t);
        for (int v = 0; v < 8; v++) {
            const __m256i c = _mm256_loadu_si256((const __m256i *)(q + 32 * v));
            const __m256i i = _mm256_and_si256(h ? _mm256_srli_epi16(c, 4) : c, m4);
            _mm256_store_si256((__m256i *)(p->q + 256 * b + 32 * v), _mm256_shuffle_epi8(grid, i));
        }
        _mm256_store_ps(p->d + 8 * b, iq4_rec_scales(rec, b0 + b, h, t));
    }
}

/* mr x rows times NO8 octets over blocks [b0, b0 + nb) of x (the octets start at b0). Q8_0: per
 * group the sign of w moves onto x (dot_s8's vpmaddubsw of |w|), pairs summed in 32 bits. Q4_0
 * (q4): the codes as stored (0..15) are vpmaddubsw's unsigned operand as they are, and its pair
 * sums stay in 16 bits over the block's 8 groups (at most 8 * 2 * 15 * 127 = 30480: exact) to
 * meet vpmaddwd once, less the 8 * x's block sum that the + 8 adds: 2 instructions per group, x
 * row and octet where Q8_0 takes 4. The same integers as the rows' codes give, so the same bits. */
INLINE void tile_q8x8(int mr, const act_row *a, int b0, const prep_oct *const *p, int nb,
                      __m256 acc[MR8][NO8], skv_type t) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int q4 = t == SKV_TYPE_Q4_0;
    for (int b = 0; b < nb; b++) {
        __m256i ia[MR8][NO8];
#pragma GCC unroll 4
        for (int i = 0; i < MR8; i++)
#pragma GCC unroll 2
            for (int c = 0; c < NO8; c++) ia[i][c] = _mm256_setzero_si256();
                /* unrolled 2: at 8 gcc kept Q4_0's 16-bit sums on the stack (an add from memory
                 * each): qwen2.5-0.5b Q4_0 pp512 at 2 threads (Zen 5, SKV_SIMD=avx2) 1.36x faster,
                 * Q8_0 the same */
#pragma GCC unroll 2
        for (int g = 0; g < 8; g++) {
            __m256i w[NO8], aw[NO8];
#pragma GCC unroll 2
            for (int c = 0; c < NO8; c++) {
                w[c] = _mm256_load_si256((const __m256i *)(p[c]->q + 256 * b + 32 * g));
                aw[c] = q4 ? w[c] : _mm256_abs_epi8(w[c]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                int32_t x4;
                memcpy(&x4, a[i].q + 32 * (b0 + b) + 4 * g, 4);
                const __m256i x = _mm256_set1_epi32(x4);
#pragma GCC unroll 2
                for (int c = 0; c < NO8; c++)
                    ia[i][c] =
                        q4 ? _mm256_add_epi16(ia[i][c], _mm256_maddubs_epi16(w[c], x))
                           : _mm256_add_epi32(
                                 ia[i][c],
                                 _mm256_madd_epi16(
                                     _mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(x, w[c])), ones));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m256 dx = _mm256_broadcast_ss(&a[i].d[b0 + b]);
            /* x's block sum, once per x row: times 8 (Q4_0's offset), or as it is (the mins') */
            const int xk = q4 ? 8 : q8_affine(t) ? 1 : 0;
            const __m256i xs = xk ? x_sum_v(a[i].q + 32 * (b0 + b), xk) : _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int c = 0; c < NO8; c++) {
                const __m256i dot =
                    q4 ? _mm256_sub_epi32(_mm256_madd_epi16(ia[i][c], ones), xs) : ia[i][c];
                acc[i][c] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                    _mm256_mul_ps(dx, _mm256_load_ps(p[c]->d + 8 * b)), acc[i][c]);
                if (q8_affine(t))
                    acc[i][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(xs),
                                                _mm256_mul_ps(dx, _mm256_load_ps(p[c]->m + 8 * b)),
                                                acc[i][c]);
            }
        }
    }
}

/* An mr-row tile over one column block, continuing from (or starting) the saved lanes
 * (save: [mr][NO8]); after the last block it stores the nr (1..16) valid W rows' outputs. */
INLINE void tile_q8_step(int mr, const skv_mm *mm, int i, int r, int nr, const prep_oct *const *p,
                         int b0, int nb, int first, int last, __m256 *save, skv_type t) {
    __m256 acc[MR8][NO8];
    act_row a[MR8];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, 32);
        for (int c = 0; c < NO8; c++) acc[ii][c] = first ? _mm256_setzero_ps() : save[ii * NO8 + c];
    }
    tile_q8x8(mr, a, b0, p, nb, acc, t);
    for (int ii = 0; ii < mr; ii++)
        for (int c = 0; c < NO8; c++) {
            if (!last)
                save[ii * NO8 + c] = acc[ii][c];
            else if (8 * c < nr)
                store_lanes(mm->y + (size_t)(i + ii) * mm->n_out + r + 8 * c, acc[ii][c],
                            nr - 8 * c < 8 ? nr - 8 * c : 8);
        }
}

INLINE void gemm_q8(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
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
                    if (mm->w_k16 && (t == SKV_TYPE_IQ4_NL || t == SKV_TYPE_IQ4_XS)) {
                        prep_octet_iq4(&prep[c], mm, r / 16, c, b0, nb, t);
                        continue;
                    }
                    if (mm->w_k16) { /* records: r is a multiple of 16 */
                        prep_octet_rec(&prep[c], mm, r / 16, c, b0, nb, t);
                        continue;
                    }
                    const uint8_t *w[8];
                    lane_rows(mm, r + 8 * c, r + nr, 8, w);
                    prep_octet(&prep[c], w, t, b0, nb);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
                /* constant row counts let the compiler keep the tile in registers */
                for (; i + MR8 <= mc1; i += MR8)
                    tile_q8_step(MR8, mm, i, r, nr, p, b0, nb, first, last,
                                 save + (size_t)(i - mc0) * NO8, t);
                __m256 *sv = save + (size_t)(i - mc0) * NO8;
                switch (mc1 - i) {
                case 3:
                    tile_q8_step(3, mm, i, r, nr, p, b0, nb, first, last, sv, t);
                    break;
                case 2:
                    tile_q8_step(2, mm, i, r, nr, p, b0, nb, first, last, sv, t);
                    break;
                case 1:
                    tile_q8_step(1, mm, i, r, nr, p, b0, nb, first, last, sv, t);
                    break;
                default:
                    break;
                }
            }
        }
    }
}

/* One Q8_0 record's dot for 16 rows (rows 0-7 in s[0], 8-15 in s[1]): per 4 x codes broadcast,
 * vpmaddubsw of |w| and x signed as w, pairs summed by vpmaddwd. pf: the stream's lines asked
 * for skv_k16_ahead_cpu bytes ahead (else SKV_GEMV_PREFETCH, one stream). */
INLINE void q8_rec_dot(const uint8_t *rec, __m256i x, int q, bool pf, __m256i s[2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (pf) {
        SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + 64 * q);
        if (q == 0) SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + 512); /* 544 bytes: a ninth line */
    } else {
        SKV_PREFETCH_AHEAD(rec, 64 * q);
        if (q == 0) SKV_PREFETCH_AHEAD(rec, 512);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i w =
            _mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_Q + 256 * h + 32 * q));
        s[h] = _mm256_add_epi32(
            s[h], _mm256_madd_epi16(
                      _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), ones));
    }
}

/* One Q4_0 (Q4_1) record's dot for 16 rows, as q8_rec_dot's on the codes as stored (0..15: rows
 * 0-7 the low nibbles, 8-15 the high ones, at qo), which vpmaddubsw takes as its unsigned operand.
 * Its pair sums stay in 16 bits over the block (8 of at most 2 * 15 * 127 each: 30480 < 2^15,
 * exact), to which q8_rec_fin gives the pairs' vpmaddwd once; the caller takes off the 8 * (x's
 * block sum) that Q4_0's stored + 8 adds. A record of rb bytes (288, 320) spans 5 or 6 lines: the
 * 8 prefetches, spread from its first byte to its last (under 64 apart), touch each. */
INLINE void q4_rec_dot(const uint8_t *rec, int qo, int rb, __m256i x, int q, bool pf,
                       __m256i s[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (pf)
        SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + (rb - 1) * q / 7);
    else
        SKV_PREFETCH_AHEAD(rec, (rb - 1) * q / 7);
    const __m256i w = _mm256_loadu_si256((const __m256i *)(rec + qo + 32 * q));
    s[0] = _mm256_add_epi16(s[0], _mm256_maddubs_epi16(_mm256_and_si256(w, m4), x));
    s[1] = _mm256_add_epi16(s[1],
                            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4), x));
}

/* One Q5_0 (Q5_1) record's dot for 16 rows: q4_rec_dot's with each code's fifth bit (0x10 from
 * the bits at ho), the code as stored (0..31), 32-bit sums (a block's 16-bit ones could reach 8 *
 * 2 * 31 * 127). The caller takes off Q5_0's 16 * (x's block sum). 352 (384) bytes: 8
 * prefetches 50 (54) apart. */
INLINE void q5_rec_dot(const uint8_t *rec, int qo, int ho, int rb, __m256i x, int q, bool pf,
                       __m256i s[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    if (pf)
        SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + (rb - 1) * q / 7);
    else
        SKV_PREFETCH_AHEAD(rec, (rb - 1) * q / 7);
    const __m256i w = _mm256_loadu_si256((const __m256i *)(rec + qo + 32 * q));
    const uint8_t *hb = rec + ho + 8 * q;
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(w, m4), unpack_fifth_bits(hb));
    const __m256i hi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4), unpack_fifth_bits(hb + 4));
    s[0] = _mm256_add_epi32(s[0], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), ones));
    s[1] = _mm256_add_epi32(s[1], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), ones));
}

/* The record dot of type t. */
INLINE void rec32_dot(skv_type t, const uint8_t *rec, __m256i x, int q, bool pf, __m256i s[2]) {
    if (t == SKV_TYPE_Q4_0)
        q4_rec_dot(rec, SKV_K16_Q4_Q, SKV_K16_Q4_RECORD, x, q, pf, s);
    else if (t == SKV_TYPE_Q4_1)
        q4_rec_dot(rec, SKV_K16_Q1_Q, SKV_K16_Q41_RECORD, x, q, pf, s);
    else if (t == SKV_TYPE_Q5_0)
        q5_rec_dot(rec, SKV_K16_Q5_Q, SKV_K16_Q5_H, SKV_K16_Q5_RECORD, x, q, pf, s);
    else if (t == SKV_TYPE_Q5_1)
        q5_rec_dot(rec, SKV_K16_Q1_Q, SKV_K16_Q51_H, SKV_K16_Q51_RECORD, x, q, pf, s);
    else
        q8_rec_dot(rec, x, q, pf, s);
}

/* Q4_1's and Q5_1's min terms after the scales' (q8_rec_chain): acc += xs (dx m), x's block sum
 * xs times the 16 rows' mins, as the rows' kernels add them (the same bits). */
static inline void q1_rec_mins(const uint8_t *rec, int32_t xs, float dx, __m256 acc[2]) {
    const __m256 vdx = _mm256_set1_ps(dx), f = _mm256_cvtepi32_ps(_mm256_set1_epi32(xs));
    for (int h = 0; h < 2; h++)
        acc[h] =
            _mm256_fmadd_ps(f,
                            _mm256_mul_ps(vdx, _mm256_cvtph_ps(_mm_loadu_si128((
                                                   const __m128i *)(rec + SKV_K16_Q1_M + 16 * h)))),
                            acc[h]);
}

/* A block's sums as int32 less xb: Q4_0's and Q4_1's 16-bit pair sums (q4) summed in pairs
 * first. */
static inline __m256i q8_rec_fin(bool q4, __m256i s, __m256i xb) {
    return _mm256_sub_epi32(q4 ? _mm256_madd_epi16(s, _mm256_set1_epi16(1)) : s, xb);
}

/* off * the sum of x's 32 codes at xq: what the Q4_0 (Q5_0) records' stored codes, code + off
 * for off = 8 (16), add to a dot. */
#define Q4_XS 1024
static inline int32_t rec32_xsum(const int8_t *xq, int off) {
    return _mm256_cvtsi256_si32(x_sum_v(xq, off));
}

/* Decode from Q8_0 (Q4_0, Q5_0) records, per block each octet's 8 rows in the lanes of one chain,
 * as the tiles of gemm_q8 run them, and its 8 scales one load: no transpose of partial sums
 * (sum8_i32) nor 8 scale gathers per block as gemv_q8 needs on rows. Same bits. Zen 4 at
 * SKV_SIMD=avx2: matmul_bench --llama-1b q8_0, 1 thread, 16-20 -> 28-33 GB/s; model tg64 at 2
 * threads, alternated with the rows' build and llama.cpp's AVX2 build: llama-3.2-1b 16.5-23.5
 * -> 22.6-30.2 t/s (llama.cpp 15.2-17.7), qwen2.5-0.5b 43-51 -> 56-71, smollm2-135m 135-146 ->
 * 154-189. With streams (mm->k16_prefetch, as gemv_k16) the thread's groups in K16_STREAMS quarters
 * read at once, each x broadcast serving all four; without, one group after the other (W as one
 * stream). r0 is a multiple of 16 (matmul.c splits rows so), or the first group's outputs before
 * r0 would be written. */
INLINE void gemv_q8_rec_run(const skv_mm *mm, int i0, int i1, int r0, int r1, bool streams,
                            skv_type t) {
    const int nb = mm->n_in / 32, q4 = t == SKV_TYPE_Q4_0 || t == SKV_TYPE_Q4_1;
    const int aff = q8_affine(t), off = t == SKV_TYPE_Q4_0 ? 8 : t == SKV_TYPE_Q5_0 ? 16 : 0;
    const int xk = aff ? 1 : off; /* xs: x's block sums times the offset, or as they are (mins) */
    const size_t rb = rec32_bytes(t);
    /* xk * x's block sums, once per x row (past Q4_XS blocks, wider than any model layer: per
     * block and group) */
    int32_t xs[Q4_XS];
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        for (int b = 0; xk && b < nb && b < Q4_XS; b++) xs[b] = rec32_xsum(a.q + 32 * b, xk);
        const int ga = r0 / 16, gn = (r1 - 16 * ga + 15) / 16;
        const int h = streams ? gn / K16_STREAMS : 0;
        for (int j = 0; j < h; j++) {
            __m256 acc[K16_STREAMS][2];
            for (int st = 0; st < K16_STREAMS; st++) acc[st][0] = acc[st][1] = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const uint8_t *rec[K16_STREAMS];
                __m256i s[K16_STREAMS][2];
#pragma GCC unroll 4
                for (int st = 0; st < K16_STREAMS; st++) {
                    rec[st] = k16_at(mm, ga + st * h + j, b, 32, rb);
                    s[st][0] = s[st][1] = _mm256_setzero_si256();
                }
#pragma GCC unroll 2
                for (int q = 0; q < 8; q++) {
                    int32_t x4;
                    memcpy(&x4, a.q + 32 * b + 4 * q, 4);
                    const __m256i x = _mm256_set1_epi32(x4);
#pragma GCC unroll 4
                    for (int st = 0; st < K16_STREAMS; st++)
                        rec32_dot(t, rec[st], x, q, true, s[st]);
                }
                const int32_t xsb = !xk ? 0 : b < Q4_XS ? xs[b] : rec32_xsum(a.q + 32 * b, xk);
                const __m256i xb = _mm256_set1_epi32(off ? xsb : 0);
#pragma GCC unroll 4
                for (int st = 0; st < K16_STREAMS; st++) {
                    q8_rec_chain(rec[st], q8_rec_fin(q4, s[st][0], xb),
                                 q8_rec_fin(q4, s[st][1], xb), a.d[b], acc[st]);
                    if (aff) q1_rec_mins(rec[st], xsb, a.d[b], acc[st]);
                }
            }
            for (int st = 0; st < K16_STREAMS; st++) {
                const int g = ga + st * h + j;
                store_group(y + 16 * g, acc[st], r1 - 16 * g);
            }
        }
        for (int g = ga + K16_STREAMS * h; 16 * g < r1; g++) {
            const uint8_t *rec = k16_at(mm, g, 0, 32, rb);
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int b = 0; b < nb; b++, rec += rb) {
                __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
                for (int q = 0; q < 8; q++) {
                    int32_t x4;
                    memcpy(&x4, a.q + 32 * b + 4 * q, 4);
                    rec32_dot(t, rec, _mm256_set1_epi32(x4), q, streams, s);
                }
                const int32_t xsb = !xk ? 0 : b < Q4_XS ? xs[b] : rec32_xsum(a.q + 32 * b, xk);
                const __m256i xb = _mm256_set1_epi32(off ? xsb : 0);
                q8_rec_chain(rec, q8_rec_fin(q4, s[0], xb), q8_rec_fin(q4, s[1], xb), a.d[b], acc);
                if (aff) q1_rec_mins(rec, xsb, a.d[b], acc);
            }
            store_group(y + 16 * g, acc, r1 - 16 * g);
        }
    }
}

INLINE void gemv_rec(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    if (mm->k16_prefetch)
        gemv_q8_rec_run(mm, i0, i1, r0, r1, true, t);
    else
        gemv_q8_rec_run(mm, i0, i1, r0, r1, false, t);
}

/* IQ4 decode from records: ns 16-row groups g[] at once against one x row (as gemv_q8_rec_run's
 * streams), per block the indices through the grid (vpshufb) and Q8_0's signed dot (dot_s8's
 * |w| and x signed as w), then acc = fma(idot, dx dw, acc) as the tiles (the same bits). */
INLINE void iq4_rec_groups(const skv_mm *mm, const act_row *a, const int *g, int ns, bool pf,
                           skv_type t, __m256 acc[K16_STREAMS][2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), grid = iq4_grid_v();
    const int nb = mm->n_in / 32;
    for (int st = 0; st < ns; st++) acc[st][0] = acc[st][1] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *rec[K16_STREAMS], *q[K16_STREAMS];
        __m256i s[K16_STREAMS][2];
#pragma GCC unroll 4
        for (int st = 0; st < ns; st++) {
            rec[st] = iq4_rec(mm, g[st], b, t);
            q[st] = iq4_rec_codes(rec[st], b, t);
            s[st][0] = s[st][1] = _mm256_setzero_si256();
        }
#pragma GCC unroll 2
        for (int v = 0; v < 8; v++) {
            int32_t x4;
            memcpy(&x4, a->q + 32 * b + 4 * v, 4);
            const __m256i x = _mm256_set1_epi32(x4);
            const int off = iq4_prefetch_off(b, v, t);
#pragma GCC unroll 4
            for (int st = 0; st < ns; st++) {
                if (pf)
                    SKV_PREFETCH_AT(rec[st], skv_k16_ahead_cpu + off);
                else
                    SKV_PREFETCH_AHEAD(rec[st], off);
                const __m256i w = _mm256_loadu_si256((const __m256i *)(q[st] + 32 * v));
                const __m256i lo = _mm256_shuffle_epi8(grid, _mm256_and_si256(w, m4));
                const __m256i hi =
                    _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));
                s[st][0] = _mm256_add_epi32(
                    s[st][0],
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_abs_epi8(lo), _mm256_sign_epi8(x, lo)), ones));
                s[st][1] = _mm256_add_epi32(
                    s[st][1],
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_abs_epi8(hi), _mm256_sign_epi8(x, hi)), ones));
            }
        }
        const __m256 dx = _mm256_set1_ps(a->d[b]);
#pragma GCC unroll 4
        for (int st = 0; st < ns; st++)
            for (int h = 0; h < 2; h++)
                acc[st][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[st][h]),
                                             _mm256_mul_ps(dx, iq4_rec_scales(rec[st], b, h, t)),
                                             acc[st][h]);
    }
}

/* Decode from IQ4 records: the thread's groups in K16_STREAMS quarters read at once (streams,
 * mm->k16_prefetch), the rest one at a time. r0 is a multiple of 16. */
INLINE void gemv_iq4_rec(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    const bool streams = mm->k16_prefetch;
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        const int ga = r0 / 16, gn = (r1 - 16 * ga + 15) / 16;
        const int h = streams ? gn / K16_STREAMS : 0;
        __m256 acc[K16_STREAMS][2];
        for (int j = 0; j < h; j++) {
            int g[K16_STREAMS];
            for (int st = 0; st < K16_STREAMS; st++) g[st] = ga + st * h + j;
            iq4_rec_groups(mm, &a, g, K16_STREAMS, true, t, acc);
            for (int st = 0; st < K16_STREAMS; st++)
                store_group(y + 16 * g[st], acc[st], r1 - 16 * g[st]);
        }
        for (int g = ga + K16_STREAMS * h; 16 * g < r1; g++) {
            if (streams)
                iq4_rec_groups(mm, &a, &g, 1, true, t, acc);
            else
                iq4_rec_groups(mm, &a, &g, 1, false, t, acc);
            store_group(y + 16 * g, acc[0], r1 - 16 * g);
        }
    }
}

INLINE void matmul_q8(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    if (mm->m < GEMM_Q_MIN_M && mm->w_k16 && (t == SKV_TYPE_IQ4_NL || t == SKV_TYPE_IQ4_XS))
        gemv_iq4_rec(mm, i0, i1, r0, r1, t);
    else if (mm->m < GEMM_Q_MIN_M && mm->w_k16)
        gemv_rec(mm, i0, i1, r0, r1, t);
    else if (mm->m < GEMM_Q_MIN_M)
        gemv_q8(mm, i0, i1, r0, r1, t);
    else
        gemm_q8(mm, i0, i1, r0, r1, t);
}

static void matmul_q8_0(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_Q8_0);
}

static void matmul_q4_0(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_Q4_0);
}

static void matmul_q5_0(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_Q5_0);
}

static void matmul_iq4_nl(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_IQ4_NL);
}

static void matmul_iq4_xs(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->w_k16) /* records only (matmul.c computes rows at the scalar level) */
        matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_IQ4_XS);
}

static void matmul_q4_1(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_Q4_1);
}

static void matmul_q5_1(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    matmul_q8(mm, i0, i1, r0, r1, SKV_TYPE_Q5_1);
}

/* ---- K-quants (Q4_K, Q5_K, Q6_K): two exact integers per output and super-block -------------
 * The formula of matmul_avx512vnni.c, hence the same bits as the VNNI level: per super-block s
 *   U_s = sum over sub-blocks j of sc_j x (W codes . x codes over sub-block j)
 *   M_s = sum over groups h of 16 values of mn_h x (x's code sum over group h)
 *   acc = fma(float(U_s), d_s * dx_s, acc);  acc = fma(float(M_s), dm_s * dx_s, acc)
 * (Q4_K/Q5_K: sub-blocks of 32, mn = the sub-block's min, dm = -dmin; Q6_K: sub-blocks of 16,
 * mn = sc, dm = -32 d.) U comes from vpmaddubsw (code x x pairs, exact in 16 bits) and vpmaddwd
 * by the scale; M from vpmaddwd of mn pairs against pairs of x's group sums, which are int32 in
 * the activation row (skv_act_rows_k_int). Integers are exact in any order, so decode (4 raw
 * rows side by side) and prefill (sixteen W rows in the lanes of two vectors, "hexads") agree
 * bit for bit. Q4_K and Q6_K in k16 records (kernels.h): decode reads them as they lie
 * (gemv_k16, gemv_q6_rec), prefill prepares its hexads from them (prep_hk_rec, prep_hk_q6rec). */

void skv_act_rows_k_int(uint8_t *row, int64_t n, bool k_order) {
    int32_t *s = (int32_t *)(row + skv_act_off_s(n, 256));
    for (int64_t o = 0; o + 16 <= n; o += 16) { /* sum of 16 codes: of (code + 128), less 2048 */
        const __m128i v =
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row + o)), _mm_set1_epi8((char)0x80));
        const __m128i sad = _mm_sad_epu8(v, _mm_setzero_si128());
        const int sum = _mm_cvtsi128_si32(_mm_add_epi64(sad, _mm_unpackhi_epi64(sad, sad)));
        memcpy(s + o / 16, &(int32_t){sum - 2048}, 4);
    }
    if (!k_order) return;
    for (int64_t o = 0; o + 128 <= n; o += 128) { /* swap values [32, 64) and [64, 96) */
        const __m256i a = _mm256_loadu_si256((const __m256i *)(row + o + 32));
        const __m256i c = _mm256_loadu_si256((const __m256i *)(row + o + 64));
        _mm256_storeu_si256((__m256i *)(row + o + 32), c);
        _mm256_storeu_si256((__m256i *)(row + o + 64), a);
    }
}

/* k16 records (kernels.h) from Q4_K rows, as skv_k16_pack_ref writes them: per row and
 * sub-block j the 32 codes become 16 bytes (code i in the low nibble of byte i, code 16 + i in
 * the high one), 4 dwords (groups gp) that a 4x4 transpose per 4 rows sends to their places. */
void skv_k16_pack_avx2(const void *w, int n_out, int n_in, void *dst) {
    const int nsb = n_in / 256;
    const size_t rb = (size_t)nsb * 144;
    const __m256i m4 = _mm256_set1_epi8(15);
    uint8_t *rec = dst;
    for (int g = 0; g < (n_out + 15) / 16; g++)
        for (int s = 0; s < nsb; s++, rec += SKV_K16_RECORD) {
            __m128i t[8][16]; /* [sub-block][row] */
            memset(rec + SKV_K16_SC, 0, SKV_K16_RECORD - SKV_K16_SC);
            for (int k = 0; k < 16; k++) {
                if (16 * g + k >= n_out) { /* rows past n_out stay zero */
                    for (int j = 0; j < 8; j++) t[j][k] = _mm_setzero_si128();
                    continue;
                }
                const uint8_t *b = (const uint8_t *)w + (size_t)(16 * g + k) * rb + (size_t)s * 144;
                for (int c = 0; c < 4; c++) { /* chunk c: sub-blocks 2c (low nibbles), 2c + 1 */
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * c));
                    const __m256i lo = _mm256_and_si256(v, m4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    t[2 * c][k] = _mm_or_si128(_mm256_castsi256_si128(lo),
                                               _mm_slli_epi16(_mm256_extracti128_si256(lo, 1), 4));
                    t[2 * c + 1][k] =
                        _mm_or_si128(_mm256_castsi256_si128(hi),
                                     _mm_slli_epi16(_mm256_extracti128_si256(hi, 1), 4));
                }
                __m128i scv, mnv;
                k4_scales(b + 4, &scv, &mnv);
                int16_t sc[8], mn[8];
                _mm_storeu_si128((__m128i *)sc, scv);
                _mm_storeu_si128((__m128i *)mn, mnv);
                for (int j = 0; j < 8; j++) {
                    rec[SKV_K16_SC + 16 * j + k] = (uint8_t)sc[j];
                    rec[SKV_K16_MN + 32 * (j / 2) + 2 * k + j % 2] = (uint8_t)mn[j];
                }
                memcpy(rec + SKV_K16_D + 2 * k, b, 2);
                memcpy(rec + SKV_K16_DMIN + 2 * k, b + 2, 2);
            }
            for (int j = 0; j < 8; j++)
                for (int k0 = 0; k0 < 16; k0 += 4) {
                    const __m128i a0 = _mm_unpacklo_epi32(t[j][k0], t[j][k0 + 1]);
                    const __m128i a1 = _mm_unpackhi_epi32(t[j][k0], t[j][k0 + 1]);
                    const __m128i a2 = _mm_unpacklo_epi32(t[j][k0 + 2], t[j][k0 + 3]);
                    const __m128i a3 = _mm_unpackhi_epi32(t[j][k0 + 2], t[j][k0 + 3]);
                    const __m128i gp[4] = {_mm_unpacklo_epi64(a0, a2), _mm_unpackhi_epi64(a0, a2),
                                           _mm_unpacklo_epi64(a1, a3), _mm_unpackhi_epi64(a1, a3)};
                    for (int q = 0; q < 4; q++)
                        _mm_storeu_si128((__m128i *)(rec + SKV_K16_Q + 256 * j + 64 * q + 4 * k0),
                                         gp[q]);
                }
        }
}

/* Two int16 words in one int32 (vpmaddwd's pairs). */
static inline int32_t pair16(int e, int f) {
    return (int32_t)((uint32_t)(uint16_t)e | (uint32_t)(uint16_t)f << 16);
}

/* U's lanes of one raw super-block b (sum of the lanes = U). */
INLINE __m256i u_raw(skv_type t, const uint8_t *b, const int8_t *xq, __m128i sc) {
    __m256i isum = _mm256_setzero_si256();
    if (t == SKV_TYPE_Q6_K) {
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i code[4];
            q6_codes(b + 64 * h, b + 128 + 32 * h, code);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                const __m256i p = _mm256_maddubs_epi16(
                    code[j], _mm256_loadu_si256((const __m256i *)(xq + 32 * c)));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, q6_chunk_scales(s16, c)));
            }
        }
        return isum;
    }
    const int q5 = t == SKV_TYPE_Q5_K;
    const __m256i scb = _mm256_broadcastsi128_si256(sc);
    const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        k45_codes(b + (q5 ? 48 : 16), hb, c, q5, &lo, &hi);
        const __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xq + 64 * c))),
            bcast_i16(scb, 2 * c));
        const __m256i p1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 64 * c + 32))),
            bcast_i16(scb, 2 * c + 1));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
    }
    return isum;
}

/* Decode: 4 raw rows w[] (nb super-blocks each) . one activation row, their U and M side by
 * side into k_chain4 (quant_x86.h). */
INLINE void dot_raw(skv_type t, const uint8_t *const *w, act_row a, int nb, float *y) {
    const int q6 = t == SKV_TYPE_Q6_K;
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    /* (d, dm) from the f16 pairs (Q4_K/Q5_K: d, dmin; Q6_K: d, d) */
    const float e = q6 ? -32.0f : -1.0f;
    const __m256 dm_mul = _mm256_setr_ps(1, e, 1, e, 1, e, 1, e);
    __m256 acc = _mm256_setzero_ps();
    for (int s = 0; s < nb; s++) {
        const int8_t *xq = a.q + 256 * s;
        const __m256i xp = k_xpairs_v(a, s, q6);
        __m256i v[8];
        uint32_t dd[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const uint8_t *blk = w[k] + (size_t)s * bb;
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) /* the row's block ahead: 144-210 bytes */
                SKV_PREFETCH_AHEAD(blk, 64 * l);
            if (q6) {
                v[2 * k] = u_raw(t, blk, xq, _mm_setzero_si128());
                v[2 * k + 1] = _mm256_madd_epi16(
                    _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))), xp);
                uint16_t h;
                memcpy(&h, blk + 208, 2);
                dd[k] = h | (uint32_t)h << 16;
            } else {
                __m128i sc, mn;
                k4_scales(blk + 4, &sc, &mn);
                v[2 * k] = u_raw(t, blk, xq, sc);
                /* mins of sub-blocks 2p, 2p + 1 against the pair p */
                v[2 * k + 1] =
                    _mm256_zextsi128_si256(_mm_madd_epi16(mn, _mm256_castsi256_si128(xp)));
                memcpy(&dd[k], blk, 4);
            }
        }
        acc = k_chain4(acc, v, dd, dm_mul, a.d[s]);
    }
    k_chain4_store(acc, y);
}

/* Rows [r0, r1) for x rows [i0, i1) from the raw blocks (quant_x86.h). t is a constant after
 * inlining. */
INLINE void gemv_rows(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    K_GEMV_ROWS(mm, i0, i1, r0, r1, t, dot_raw);
}

/* Decode from k16 records: sixteen rows in the lanes of two vectors, read as they lie; per
 * sub-block 16 vpmaddubsw of the nibbles against 4 broadcast x codes, summed in 16 bits (8 x
 * 2 x 15 x 127 < 2^15), then vpmaddwd by the scales. One super-block of ns groups (1, or the
 * K16_STREAMS a thread reads at once; a constant after inlining), each x broadcast serving all of
 * them (as K16_STREAMS inlined one-group steps, the compiler hoisted the 64 broadcasts and
 * spilled them: Zen 5, 512 x 2048 from L2, 37 GB/s against 49 for one group at a time; now 53).
 * 16 registers hold the 8 partial sums, the x pair and the codes; U waits in memory (8 sums per
 * sub-block). pf: each line asked for skv_k16_ahead_cpu bytes ahead. */
/* Q5_K records (q5): each nibble vector gets its fifth bits (unpack_fifth_bits), and the 16-bit
 * sums go into U every 2 groups (4 x 31 x 127 each). */
INLINE __m256i k16_sc(const uint8_t *rec, int j, int c) { /* sub-block j's scales in both words */
    const __m256i sc =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(rec + SKV_K16_SC + 16 * j + 8 * c)));
    return _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
}

INLINE void k16_steps(int ns, const uint8_t *const *rec, const int8_t *xq, const int32_t *xp,
                      __m256 dx, __m256 (*acc)[2], bool pf, bool q5) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i u[K16_STREAMS][2];
#pragma GCC unroll 4
    for (int q = 0; q < ns; q++) u[q][0] = u[q][1] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i t[K16_STREAMS][2];
#pragma GCC unroll 4
        for (int q = 0; q < ns; q++) {
            /* the scales, mins and d: lines 32-36 of 37 (Q5_K: lines 32-44 of 45, the fifth bits
             * from 37) */
            if (pf) SKV_PREFETCH_AT(rec[q], skv_k16_ahead_cpu + 2048 + 64 * j);
            if (pf && q5 && j < 5) SKV_PREFETCH_AT(rec[q], skv_k16_ahead_cpu + 2560 + 64 * j);
            t[q][0] = t[q][1] = _mm256_setzero_si256();
        }
/* unrolled 2: at 4, gcc spilled partial sums (Zen 5, 8192 x 2048 from L3 31 -> 50 GB/s) */
#pragma GCC unroll 2
        for (int gp = 0; gp < 4; gp++) {
            int32_t c0, c1;
            memcpy(&c0, xq + 32 * j + 4 * gp, 4);
            memcpy(&c1, xq + 32 * j + 4 * gp + 16, 4);
            const __m256i x0 = _mm256_set1_epi32(c0), x1 = _mm256_set1_epi32(c1);
#pragma GCC unroll 4
            for (int q = 0; q < ns; q++) {
                const uint8_t *r = rec[q] + SKV_K16_Q + 256 * j + 64 * gp;
                if (pf) SKV_PREFETCH_AT(rec[q], skv_k16_ahead_cpu + 256 * j + 64 * gp);
#pragma GCC unroll 2
                for (int c = 0; c < 2; c++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(r + 32 * c));
                    __m256i lo = _mm256_and_si256(v, m4),
                            hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if (q5) {
                        const uint8_t *h = rec[q] + SKV_K16_Q5K_H + 16 * (4 * j + gp) + 4 * c;
                        lo = _mm256_or_si256(lo, unpack_fifth_bits(h));
                        hi = _mm256_or_si256(hi, unpack_fifth_bits(h + 8));
                    }
                    t[q][c] =
                        _mm256_add_epi16(t[q][c], _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0),
                                                                   _mm256_maddubs_epi16(hi, x1)));
                    if (q5 && gp % 2 == 1) { /* 2 groups of 4 x 31 x 127 each: into U */
                        u[q][c] = _mm256_add_epi32(
                            u[q][c], _mm256_madd_epi16(t[q][c], k16_sc(rec[q], j, c)));
                        t[q][c] = _mm256_setzero_si256();
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int q = 0; q < ns && !q5; q++)
#pragma GCC unroll 2
            for (int c = 0; c < 2; c++)
                u[q][c] =
                    _mm256_add_epi32(u[q][c], _mm256_madd_epi16(t[q][c], k16_sc(rec[q], j, c)));
    }
    const __m256 neg = _mm256_set1_ps(-1.0f);
#pragma GCC unroll 4
    for (int q = 0; q < ns; q++)
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                m = _mm256_add_epi32(
                    m,
                    _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((
                                          const __m128i *)(rec[q] + SKV_K16_MN + 32 * p + 16 * c))),
                                      _mm256_set1_epi32(xp[p])));
            const __m256 d =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec[q] + SKV_K16_D + 16 * c)));
            const __m256 dm =
                _mm256_mul_ps(neg, _mm256_cvtph_ps(_mm_loadu_si128(
                                       (const __m128i *)(rec[q] + SKV_K16_DMIN + 16 * c))));
            acc[q][c] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[q][c]), _mm256_mul_ps(d, dx), acc[q][c]);
            acc[q][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dm, dx), acc[q][c]);
        }
}

/* With streams (mm->k16_prefetch) the rows' groups in K16_STREAMS quarters read at once, each
 * line asked for skv_k16_ahead_cpu bytes ahead, as the VNNI level's gemv_k16; without, one group
 * after the other. streams is a constant after inlining. */
INLINE void gemv_k16_run(const skv_mm *mm, int i0, int i1, int r0, int r1, bool streams, bool q5) {
    const int nsb = mm->n_in / 256;
    int32_t xp[K16_MAX_SB][8];
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 256);
        float *y = mm->y + (size_t)i * mm->n_out;
        const bool pre = nsb <= K16_MAX_SB;
        for (int s = 0; pre && s < nsb; s++) k_xpairs(a, s, 0, xp[s]);
        const int ga = r0 / 16, gn = (r1 - 16 * ga + 15) / 16;
        const int h = streams ? gn / K16_STREAMS : 0;
        for (int j = 0; j < h; j++) {
            __m256 acc[K16_STREAMS][2];
            for (int q = 0; q < K16_STREAMS; q++) acc[q][0] = acc[q][1] = _mm256_setzero_ps();
            for (int s = 0; s < nsb; s++) {
                int32_t one[8];
                if (!pre) k_xpairs(a, s, 0, one);
                const __m256 dx = _mm256_set1_ps(a.d[s]);
                const uint8_t *rec[K16_STREAMS];
                for (int q = 0; q < K16_STREAMS; q++) rec[q] = k16_rec(mm, ga + q * h + j, s);
                k16_steps(K16_STREAMS, rec, a.q + 256 * s, pre ? xp[s] : one, dx, acc, true, q5);
            }
            for (int q = 0; q < K16_STREAMS; q++) {
                const int g = ga + q * h + j;
                store_group(y + 16 * g, acc[q], r1 - 16 * g);
            }
        }
        for (int g = ga + K16_STREAMS * h; 16 * g < r1; g++) {
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int s = 0; s < nsb; s++) {
                int32_t one[8];
                if (!pre) k_xpairs(a, s, 0, one);
                const uint8_t *rec = k16_rec(mm, g, s);
                k16_steps(1, &rec, a.q + 256 * s, pre ? xp[s] : one, _mm256_set1_ps(a.d[s]), &acc,
                          streams, q5);
            }
            store_group(y + 16 * g, acc, r1 - 16 * g);
        }
    }
}

static void gemv_k16(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    const bool q5 = mm->wt == SKV_TYPE_Q5_K;
    if (mm->k16_prefetch && q5)
        gemv_k16_run(mm, i0, i1, r0, r1, true, true);
    else if (mm->k16_prefetch)
        gemv_k16_run(mm, i0, i1, r0, r1, true, false);
    else if (q5)
        gemv_k16_run(mm, i0, i1, r0, r1, false, true);
    else
        gemv_k16_run(mm, i0, i1, r0, r1, false, false);
}

/* Decode from Q6_K k16 records (kernels.h): per pair of scale groups and octet, 8 code vectors
 * made from their low nibbles and top 2 bits, vpmaddubsw against 4 x codes broadcast (2 of
 * each group: x reordered once per x row, q6_xr), two at a time summed in 16 bits (2 x 2 x 63
 * x 127 < 2^15), then vpmaddwd by the two groups' scales. U and M are the exact integers of the
 * rows' code (u_raw, k_chain4), so the same bits. */
/* The top 2 bits of vector jj (of 4) of a qh vector, at bits 4-5 of each byte. */
INLINE __m256i q6_top(__m256i qh, int jj) {
    const __m256i m = _mm256_set1_epi8(0x30);
    switch (jj) {
    case 0:
        return _mm256_and_si256(_mm256_slli_epi16(qh, 4), m);
    case 1:
        return _mm256_and_si256(_mm256_slli_epi16(qh, 2), m);
    case 2:
        return _mm256_and_si256(qh, m);
    default:
        return _mm256_and_si256(_mm256_srli_epi16(qh, 2), m);
    }
}

/* Code vectors jj and jj + 4 (values 0..63) of octet h of pair record pr; Q3_K records (q3):
 * the code + 4 from its planes, + 28, the Q6_K code of the same value. */
INLINE void q6_rec_codes(const uint8_t *pr, int h, int jj, __m256i *ca, __m256i *cb, bool q3) {
    if (q3) {
        q3_rec_codes(pr, h, jj, ca, cb);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i qa = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q6_QH + 32 * h));
    const __m256i qb = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q6_QH + 64 + 32 * h));
    const __m256i v = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q6_QL + 64 * jj + 32 * h));
    *ca = _mm256_or_si256(_mm256_and_si256(v, m4), q6_top(qa, jj));
    *cb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), q6_top(qb, jj));
}

INLINE void q6_step(const uint8_t *rec, const int8_t *xr, const int32_t *xp, float dx,
                    __m256 acc[2], bool q3) {
    const int pair = q3 ? SKV_K16_Q3_PAIR : SKV_K16_Q6_PAIR;
    __m256i u[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, mm[2] = {u[0], u[1]};
    /* unrolled 2: all 8 (64 steps) made gcc spill (Zen 5, one Q6_K matrix hot, 8192 x 2048 from
     * L3 24 -> 37-41 GB/s) */
#pragma GCC unroll 2
    for (int p = 0; p < 8; p++) {
        const uint8_t *pr = rec + pair * p; /* the pair's bytes, read in order */
        const __m256i xpair = _mm256_set1_epi32(xp[p]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i sc = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(pr + SKV_K16_Q6_SC + 16 * h)));
            mm[h] = _mm256_add_epi32(mm[h], _mm256_madd_epi16(sc, xpair));
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++) {
                __m256i ca, cb;
                /* 8 lines ahead per 416-byte pair (4 per 224-byte Q3_K one): some twice, none
                 * missed */
                if (!q3 || jj % 2 == 0) SKV_PREFETCH_AHEAD(pr, (q3 ? 32 : 64) * (4 * h + jj));
                if (q3) /* codes + 4: the 28 more of Q6_K's codes come in below, from M */
                    q3_rec_codes4(pr, h, jj, &ca, &cb);
                else
                    q6_rec_codes(pr, h, jj, &ca, &cb, false);
                int32_t xa, xb;
                memcpy(&xa, xr + 32 * p + 4 * jj, 4);
                memcpy(&xb, xr + 32 * p + 4 * (jj + 4), 4);
                const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(ca, _mm256_set1_epi32(xa)),
                                                   _mm256_maddubs_epi16(cb, _mm256_set1_epi32(xb)));
                u[h] = _mm256_add_epi32(u[h], _mm256_madd_epi16(t, sc));
            }
        }
    }
    /* as k_chain4: acc = fma(U, d dx, acc), then fma(M, (d (-32)) dx, acc); Q3_K: U of the codes
     * + 4, and sum sc (code + 4 + 28) x = U + 28 M exactly, the Q6_K code's U */
    const __m256 vdx = _mm256_set1_ps(dx), m32 = _mm256_set1_ps(-32.0f);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        if (q3) u[h] = _mm256_add_epi32(u[h], _mm256_mullo_epi32(mm[h], _mm256_set1_epi32(28)));
        const __m256 d = _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(rec + (q3 ? SKV_K16_Q3_D : SKV_K16_Q6_D) + 16 * h)));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[h]), _mm256_mul_ps(d, vdx), acc[h]);
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm[h]),
                                 _mm256_mul_ps(_mm256_mul_ps(d, m32), vdx), acc[h]);
    }
}

/* Decode from Q2_K records (kernels.h): q6_step's walk over the 2-bit codes (Q3_K's low planes),
 * U by the scales (the low nibbles), M by the mins (the high nibbles) against x's group sums,
 * then acc = fma(U, d dx, acc), fma(M, (-dmin) dx, acc) as the prefill tiles (prep_hk_q6rec):
 * the same bits. The codes are small (4 x 2 x 3 x 127 per word): a pair's 4 vector products
 * are summed in 16 bits before one vpmaddwd by the scales. */
INLINE void q2_step(const uint8_t *rec, const int8_t *xr, const int32_t *xp, float dx,
                    __m256 acc[2]) {
    __m256i u[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, mm[2] = {u[0], u[1]};
#pragma GCC unroll 2
    for (int p = 0; p < 8; p++) {
        const uint8_t *pr = rec + SKV_K16_Q2_PAIR * p; /* 160 bytes, read in order */
        const __m256i xpair = _mm256_set1_epi32(xp[p]);
        SKV_PREFETCH_AHEAD(pr, 0);
        SKV_PREFETCH_AHEAD(pr, 64);
        SKV_PREFETCH_AHEAD(pr, 128);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i sc, mn, t = _mm256_setzero_si256();
            q2_rec_scales(pr, h, &sc, &mn);
            mm[h] = _mm256_add_epi32(mm[h], _mm256_madd_epi16(mn, xpair));
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++) {
                __m256i ca, cb;
                q2_rec_codes(pr, h, jj, &ca, &cb);
                int32_t xa, xb;
                memcpy(&xa, xr + 32 * p + 4 * jj, 4);
                memcpy(&xb, xr + 32 * p + 4 * (jj + 4), 4);
                t = _mm256_add_epi16(
                    t, _mm256_add_epi16(_mm256_maddubs_epi16(ca, _mm256_set1_epi32(xa)),
                                        _mm256_maddubs_epi16(cb, _mm256_set1_epi32(xb))));
            }
            u[h] = _mm256_add_epi32(u[h], _mm256_madd_epi16(t, sc));
        }
    }
    const __m256 vdx = _mm256_set1_ps(dx), neg = _mm256_set1_ps(-1.0f);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256 d =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + SKV_K16_Q2_D + 16 * h)));
        const __m256 dmin =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + SKV_K16_Q2_DMIN + 16 * h)));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[h]), _mm256_mul_ps(d, vdx), acc[h]);
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm[h]),
                                 _mm256_mul_ps(_mm256_mul_ps(dmin, neg), vdx), acc[h]);
    }
}

/* q3 / q2: the records are Q3_K's / Q2_K's (kernels.h). */
INLINE void gemv_q6_rec_t(const skv_mm *mm, int i0, int i1, int r0, int r1, bool q3, bool q2) {
    const int nsb = mm->n_in / 256;
    q6_x x;
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 256);
        float *y = mm->y + (size_t)i * mm->n_out;
        q6_x_row(&x, a, nsb);
        for (int g = r0 / 16; 16 * g < r1; g++) {
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int s = 0; s < nsb; s++) {
                const int8_t *xr;
                const int32_t *xp;
                q6_x_at(&x, a, s, &xr, &xp);
                if (q2)
                    q2_step(q6_rec(mm, g, s), xr, xp, a.d[s], acc);
                else
                    q6_step(q6_rec(mm, g, s), xr, xp, a.d[s], acc, q3);
            }
            store_group(y + 16 * g, acc, r1 - 16 * g);
        }
    }
}

static void gemv_q6_rec(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->w_rec == SKV_TYPE_Q2_K)
        gemv_q6_rec_t(mm, i0, i1, r0, r1, false, true);
    else if (mm->w_rec == SKV_TYPE_Q3_K)
        gemv_q6_rec_t(mm, i0, i1, r0, r1, true, false);
    else
        gemv_q6_rec_t(mm, i0, i1, r0, r1, false, false);
}

static void gemv_k(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_Q4_K:
        if (mm->w_k16)
            gemv_k16(mm, i0, i1, r0, r1);
        else
            gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q4_K);
        break;
    case SKV_TYPE_Q5_K:
        if (mm->w_k16)
            gemv_k16(mm, i0, i1, r0, r1);
        else
            gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q5_K);
        break;
    default:
        if (mm->w_k16)
            gemv_q6_rec(mm, i0, i1, r0, r1);
        else
            gemv_rows(mm, i0, i1, r0, r1, SKV_TYPE_Q6_K);
        break;
    }
}

/* Prefill: a hexad of sixteen W rows, prepared once per column block of KBA super-blocks: codes
 * transposed so that the 32 bytes at q + 64 g + 32 h hold 4 codes (values [4g, 4g + 4)) of each
 * of rows 8h..8h+7; x codes broadcast 4 at a time. The tile's vpmaddubsw sums are added in 16
 * bits over F groups (2 x max code x 127 each, F of them below 2^15), then vpmaddwd by the
 * scales into U. */
#define MRA 3   /* x rows per tile: 6 U and 6 partial-sum vectors, 2 of W, 1 of x */
#define KBA 2   /* super-blocks per prepared column block (12 KB) */
#define MCA 192 /* x rows per row block */

typedef struct prep_hk {
    uint8_t q[KBA * 4096] ALIGNED32; /* [sb][group g of 4 values (64)][row (16)][4] */
    int32_t sc[KBA * 256] ALIGNED32; /* [sb][sub-block j (8 or 16)][row]: sc_j in both words */
    int32_t mn[KBA * 128] ALIGNED32; /* [sb][pair p (4 or 8)][row]: the mn pair as words */
    float d[KBA * 16] ALIGNED32;     /* [sb][row] */
    float dm[KBA * 16] ALIGNED32;    /* [sb][row] */
} prep_hk;

/* Super-blocks [b0, b0 + nb) of the 16 raw rows w[]. */
INLINE void prep_hk_rows(prep_hk *p, const uint8_t *const *w, skv_type t, int b0, int nb) {
    const int q6 = t == SKV_TYPE_Q6_K, q5 = t == SKV_TYPE_Q5_K;
    const size_t bb = q6 ? 210 : q5 ? 176 : 144;
    for (int s = 0; s < nb; s++) {
        uint8_t codes[16][256] ALIGNED32;
        for (int k = 0; k < 16; k++) {
            const uint8_t *blk = w[k] + (size_t)(b0 + s) * bb;
            if (q6) {
                for (int h = 0; h < 2; h++) {
                    __m256i code[4];
                    q6_codes(blk + 64 * h, blk + 128 + 32 * h, code);
                    for (int c = 0; c < 4; c++)
                        _mm256_store_si256((__m256i *)(codes[k] + 128 * h + 32 * c), code[c]);
                }
                const int8_t *sc = (const int8_t *)(blk + 192);
                for (int j = 0; j < 16; j++) p->sc[256 * s + 16 * j + k] = pair16(sc[j], sc[j]);
                for (int q = 0; q < 8; q++)
                    p->mn[128 * s + 16 * q + k] = pair16(sc[2 * q], sc[2 * q + 1]);
                p->d[16 * s + k] = ld_f16(blk + 208);
                p->dm[16 * s + k] = -32.0f * p->d[16 * s + k];
                continue;
            }
            const __m256i hb =
                q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                __m256i lo, hi;
                k45_codes(blk + (q5 ? 48 : 16), hb, c, q5, &lo, &hi);
                _mm256_store_si256((__m256i *)(codes[k] + 64 * c), lo);
                _mm256_store_si256((__m256i *)(codes[k] + 64 * c + 32), hi);
            }
            __m128i scv, mnv;
            k4_scales(blk + 4, &scv, &mnv);
            int16_t sc[8], mn[8];
            _mm_storeu_si128((__m128i *)sc, scv);
            _mm_storeu_si128((__m128i *)mn, mnv);
            for (int j = 0; j < 8; j++) p->sc[256 * s + 16 * j + k] = pair16(sc[j], sc[j]);
            for (int q = 0; q < 4; q++)
                p->mn[128 * s + 16 * q + k] = pair16(mn[2 * q], mn[2 * q + 1]);
            p->d[16 * s + k] = ld_f16(blk);
            p->dm[16 * s + k] = -ld_f16(blk + 2);
        }
        for (int h = 0; h < 2; h++) /* transpose8 moves 32-bit lanes: codes pass as they are */
            for (int j = 0; j < 8; j++) {
                __m256 v[8];
                for (int k = 0; k < 8; k++)
                    v[k] = _mm256_load_ps((const float *)(codes[8 * h + k] + 32 * j));
                transpose8(v);
                for (int g = 0; g < 8; g++)
                    _mm256_store_ps((float *)(p->q + 4096 * s + 64 * (8 * j + g) + 32 * h), v[g]);
            }
    }
}

/* The same from the k16 records of 16-row group g16: the nibbles split, the scales widened. */
static void prep_hk_rec(prep_hk *p, const skv_mm *mm, int g16, int b0, int nb) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const bool q5 = mm->wt == SKV_TYPE_Q5_K;
    for (int s = 0; s < nb; s++) {
        const uint8_t *rec = k16_rec(mm, g16, b0 + s);
        uint8_t *q = p->q + 4096 * s;
        for (int j = 0; j < 8; j++) {
            for (int gp = 0; gp < 4; gp++)
                for (int h = 0; h < 2; h++) {
                    const __m256i v = _mm256_loadu_si256(
                        (const __m256i *)(rec + SKV_K16_Q + 256 * j + 64 * gp + 32 * h));
                    __m256i lo = _mm256_and_si256(v, m4),
                            hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if (q5) { /* the fifth bits (kernels.h) */
                        const uint8_t *hb = rec + SKV_K16_Q5K_H + 16 * (4 * j + gp) + 4 * h;
                        lo = _mm256_or_si256(lo, unpack_fifth_bits(hb));
                        hi = _mm256_or_si256(hi, unpack_fifth_bits(hb + 8));
                    }
                    _mm256_store_si256((__m256i *)(q + 64 * (8 * j + gp) + 32 * h), lo);
                    _mm256_store_si256((__m256i *)(q + 64 * (8 * j + 4 + gp) + 32 * h), hi);
                }
            for (int h = 0; h < 2; h++) {
                const __m256i c = _mm256_cvtepu8_epi32(
                    _mm_loadl_epi64((const __m128i *)(rec + SKV_K16_SC + 16 * j + 8 * h)));
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * j + 8 * h),
                                   _mm256_or_si256(c, _mm256_slli_epi32(c, 16)));
            }
        }
        for (int q4 = 0; q4 < 4; q4++)
            for (int h = 0; h < 2; h++)
                _mm256_store_si256((__m256i *)(p->mn + 128 * s + 16 * q4 + 8 * h),
                                   _mm256_cvtepu8_epi16(_mm_loadu_si128(
                                       (const __m128i *)(rec + SKV_K16_MN + 32 * q4 + 16 * h))));
        for (int h = 0; h < 2; h++) {
            _mm256_store_ps(
                p->d + 16 * s + 8 * h,
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + SKV_K16_D + 16 * h))));
            _mm256_store_ps(p->dm + 16 * s + 8 * h,
                            _mm256_mul_ps(_mm256_set1_ps(-1.0f),
                                          _mm256_cvtph_ps(_mm_loadu_si128(
                                              (const __m128i *)(rec + SKV_K16_DMIN + 16 * h)))));
        }
    }
}

/* The Q6_K hexads from Q2_K records (kernels.h), as prep_hk_q6rec's from Q6_K ones: the codes
 * (0..3) in K order, each group's scale in both words, the mins' pairs as M's, dm = -dmin. */
static void prep_hk_q2rec(prep_hk *p, const skv_mm *mm, int g16, int b0, int nb) {
    for (int s = 0; s < nb; s++) {
        const uint8_t *rec = q6_rec(mm, g16, b0 + s);
        uint8_t *q = p->q + 4096 * s;
        for (int pp = 0; pp < 8; pp++) {
            const uint8_t *pr = rec + SKV_K16_Q2_PAIR * pp;
            for (int h = 0; h < 2; h++) {
                __m256i sc, mn;
                q2_rec_prep(pr, h, q + 512 * pp + 32 * h, &sc, &mn);
                _mm256_store_si256((__m256i *)(p->mn + 128 * s + 16 * pp + 8 * h), mn);
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp) + 8 * h),
                                   _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sc, 0xa0), 0xa0));
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp + 1) + 8 * h),
                                   _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sc, 0xf5), 0xf5));
            }
        }
        for (int h = 0; h < 2; h++) {
            _mm256_store_ps(
                p->d + 16 * s + 8 * h,
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + SKV_K16_Q2_D + 16 * h))));
            _mm256_store_ps(p->dm + 16 * s + 8 * h,
                            _mm256_mul_ps(_mm256_set1_ps(-1.0f),
                                          _mm256_cvtph_ps(_mm_loadu_si128(
                                              (const __m128i *)(rec + SKV_K16_Q2_DMIN + 16 * h)))));
        }
    }
}

/* The same from Q6_K k16 records (kernels.h): a pair's vectors 2g and 2g + 1 hold codes
 * 4g..4g+3 of its two groups, 2 of each in a row's lane: the low words of the two make group
 * 2p's 4 codes, the high words group 2p + 1's. */
static void prep_hk_q6rec(prep_hk *p, const skv_mm *mm, int g16, int b0, int nb) {
    const bool q3 = mm->w_rec == SKV_TYPE_Q3_K;
    if (mm->w_rec == SKV_TYPE_Q2_K) {
        prep_hk_q2rec(p, mm, g16, b0, nb);
        return;
    }
    for (int s = 0; s < nb; s++) {
        const uint8_t *rec = q6_rec(mm, g16, b0 + s);
        uint8_t *q = p->q + 4096 * s;
        for (int pp = 0; pp < 8; pp++) {
            const uint8_t *pr = rec + (q3 ? SKV_K16_Q3_PAIR : SKV_K16_Q6_PAIR) * pp;
            for (int h = 0; h < 2; h++) {
                __m256i v[8];
                for (int jj = 0; jj < 4; jj++) q6_rec_codes(pr, h, jj, &v[jj], &v[jj + 4], q3);
                rec_pair_to_k_order(v, q + 512 * pp + 32 * h);
                /* row k's (sc_2p, sc_2p+1): the mins' pair, and each one in both words */
                const __m256i sc = _mm256_cvtepi8_epi16(
                    _mm_loadu_si128((const __m128i *)(pr + SKV_K16_Q6_SC + 16 * h)));
                _mm256_store_si256((__m256i *)(p->mn + 128 * s + 16 * pp + 8 * h), sc);
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp) + 8 * h),
                                   _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sc, 0xa0), 0xa0));
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp + 1) + 8 * h),
                                   _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sc, 0xf5), 0xf5));
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(
                (const __m128i *)(rec + (q3 ? SKV_K16_Q3_D : SKV_K16_Q6_D) + 16 * h)));
            _mm256_store_ps(p->d + 16 * s + 8 * h, d);
            _mm256_store_ps(p->dm + 16 * s + 8 * h, _mm256_mul_ps(_mm256_set1_ps(-32.0f), d));
        }
    }
}

/* mr x rows times the hexad over super-blocks [b0, b0 + nb) of x; acc: [mr][16] floats, the
 * chains so far. */
INLINE void tile_hk(int mr, skv_type t, const act_row *a, int b0, const prep_hk *p, int nb,
                    float *acc) {
    const int q6 = t == SKV_TYPE_Q6_K, nsub = q6 ? 16 : 8, gs = q6 ? 4 : 8;
    const int F = q6 ? 2 : t == SKV_TYPE_Q5_K ? 4 : 8; /* 16002, 7874, 3810 per group */
    for (int s = 0; s < nb; s++) {
        const int xo = 256 * (b0 + s);
        const uint8_t *q = p->q + 4096 * s;
        __m256i u[MRA][2];
#pragma GCC unroll 4
        for (int i = 0; i < MRA; i++) u[i][0] = u[i][1] = _mm256_setzero_si256();
        for (int j = 0; j < nsub; j++) {
            const __m256i *scj = (const __m256i *)(p->sc + 256 * s + 16 * j);
#pragma GCC unroll 4
            for (int g0 = 0; g0 < gs; g0 += F) {
                __m256i v[MRA][2];
#pragma GCC unroll 4
                for (int i = 0; i < MRA; i++) v[i][0] = v[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 2 /* fully unrolled, the W loads move up and the tile spills (-25%) */
                for (int g = g0; g < g0 + F; g++) {
                    const int gi = gs * j + g;
                    const __m256i w0 = _mm256_load_si256((const __m256i *)(q + 64 * gi));
                    const __m256i w1 = _mm256_load_si256((const __m256i *)(q + 64 * gi + 32));
#pragma GCC unroll 4
                    for (int i = 0; i < mr; i++) {
                        int32_t x4;
                        memcpy(&x4, a[i].q + xo + 4 * gi, 4);
                        const __m256i x = _mm256_set1_epi32(x4);
                        v[i][0] = _mm256_add_epi16(v[i][0], _mm256_maddubs_epi16(w0, x));
                        v[i][1] = _mm256_add_epi16(v[i][1], _mm256_maddubs_epi16(w1, x));
                    }
                }
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    u[i][0] = _mm256_add_epi32(u[i][0], _mm256_madd_epi16(v[i][0], scj[0]));
                    u[i][1] = _mm256_add_epi32(u[i][1], _mm256_madd_epi16(v[i][1], scj[1]));
                }
            }
        }
        const __m256i *mn = (const __m256i *)(p->mn + 128 * s); /* [pair][row] */
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            /* M: each x pair broadcast in-lane from a register (vpshufd): 4-byte loads of a
             * vector just stored stall (-12%), vpermd per pair cost ~5% on Zen 5 */
            __m256i xl[2], m[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            k_xpairs_lanes(a[i], b0 + s, q6, xl);
#define MN_PAIR(pp, xv, imm)                                                                       \
    do {                                                                                           \
        const __m256i xb = _mm256_shuffle_epi32(xv, imm);                                          \
        m[0] = _mm256_add_epi32(m[0], _mm256_madd_epi16(_mm256_load_si256(mn + 2 * (pp)), xb));    \
        m[1] =                                                                                     \
            _mm256_add_epi32(m[1], _mm256_madd_epi16(_mm256_load_si256(mn + 2 * (pp) + 1), xb));   \
    } while (0)
            MN_PAIR(0, xl[0], 0x00);
            if (q6) {
                MN_PAIR(1, xl[0], 0x55);
                MN_PAIR(2, xl[0], 0xaa);
                MN_PAIR(3, xl[0], 0xff);
                MN_PAIR(4, xl[1], 0x00);
                MN_PAIR(5, xl[1], 0x55);
                MN_PAIR(6, xl[1], 0xaa);
                MN_PAIR(7, xl[1], 0xff);
            } else { /* lanes hold pairs 0 2 1 3 */
                MN_PAIR(1, xl[0], 0xaa);
                MN_PAIR(2, xl[0], 0x55);
                MN_PAIR(3, xl[0], 0xff);
            }
#undef MN_PAIR
            const __m256 dx = _mm256_set1_ps(a[i].d[b0 + s]);
#pragma GCC unroll 2
            for (int c = 0; c < 2; c++) {
                float *ac = acc + 16 * i + 8 * c;
                __m256 A = _mm256_load_ps(ac);
                A = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[i][c]),
                                    _mm256_mul_ps(_mm256_load_ps(p->d + 16 * s + 8 * c), dx), A);
                A = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m[c]),
                                    _mm256_mul_ps(_mm256_load_ps(p->dm + 16 * s + 8 * c), dx), A);
                _mm256_store_ps(ac, A);
            }
        }
    }
}

INLINE void tile_hk_step(int mr, skv_type t, const skv_mm *mm, int i, const prep_hk *p, int b0,
                         int nb, float *acc) {
    act_row a[MRA];
    for (int ii = 0; ii < mr; ii++) a[ii] = act_at(mm, i + ii, 256);
    tile_hk(mr, t, a, b0, p, nb, acc);
}

/* Blocks of MCA x rows; each hexad and column block of KBA super-blocks is prepared once and
 * serves every tile of the x block; the chains wait in acc (L1) between column blocks. t is a
 * constant after inlining. */
INLINE void gemm_hk(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    prep_hk prep;
    float acc[MCA * 16] ALIGNED32;
    const int nblk = mm->n_in / 256, nkb = (nblk + KBA - 1) / KBA;
    for (int mc0 = i0; mc0 < i1; mc0 += MCA) {
        const int mc1 = i1 - mc0 < MCA ? i1 : mc0 + MCA;
        for (int r = r0; r < r1; r += 16) {
            const int nr = r1 - r < 16 ? r1 - r : 16;
            memset(acc, 0, sizeof(float) * 16 * (size_t)(mc1 - mc0));
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * KBA, nb = nblk - b0 < KBA ? nblk - b0 : KBA;
                if (mm->w_k16 && t == SKV_TYPE_Q6_K) { /* r is a multiple of 16 */
                    prep_hk_q6rec(&prep, mm, r / 16, b0, nb);
                } else if (mm->w_k16) {
                    prep_hk_rec(&prep, mm, r / 16, b0, nb);
                } else {
                    const uint8_t *w[16];
                    lane_rows(mm, r, r1, 16, w);
                    prep_hk_rows(&prep, w, t, b0, nb);
                }
                int i = mc0;
                for (; i + MRA <= mc1; i += MRA)
                    tile_hk_step(MRA, t, mm, i, &prep, b0, nb, acc + 16 * (i - mc0));
                if (mc1 - i == 2)
                    tile_hk_step(2, t, mm, i, &prep, b0, nb, acc + 16 * (i - mc0));
                else if (mc1 - i == 1)
                    tile_hk_step(1, t, mm, i, &prep, b0, nb, acc + 16 * (i - mc0));
            }
            for (int i = mc0; i < mc1; i++)
                memcpy(mm->y + (size_t)i * mm->n_out + r, acc + 16 * (i - mc0),
                       sizeof(float) * (size_t)nr);
        }
    }
}

/* Not inlined: each has its frame apart from the caller's. */
static __attribute__((noinline)) void gemm_k(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_Q4_K:
        gemm_hk(mm, i0, i1, r0, r1, SKV_TYPE_Q4_K);
        break;
    case SKV_TYPE_Q5_K:
        gemm_hk(mm, i0, i1, r0, r1, SKV_TYPE_Q5_K);
        break;
    default:
        gemm_hk(mm, i0, i1, r0, r1, SKV_TYPE_Q6_K);
        break;
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
    case SKV_TYPE_Q5_0:
        matmul_q5_0(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q4_1:
        matmul_q4_1(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q5_1:
        matmul_q5_1(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q4_K:
    case SKV_TYPE_Q5_K:
    case SKV_TYPE_Q6_K:
        if (mm->m < GEMM_Q_MIN_M)
            gemv_k(mm, i0, i1, r0, r1);
        else
            gemm_k(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_IQ4_NL:
        matmul_iq4_nl(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_IQ4_XS:
        matmul_iq4_xs(mm, i0, i1, r0, r1);
        break;
    case SKV_TYPE_Q3_K: /* records only: the Q6_K code, reading them (kernels.h) */
    case SKV_TYPE_Q2_K:
        if (mm->w_k16) {
            skv_mm q6 = *mm;
            q6.wt = SKV_TYPE_Q6_K;
            q6.w_rec = mm->wt;
            skv_matmul_avx2(&q6, i0, i1, r0, r1);
        }
        break;
    default:
        break;
    }
}

#endif
