/* matmul_avx512.c — the AVX-512 float matrix products, and the AVX-512 level's dispatch over
 * all weight types (built with -mavx512f/bw/vl/dq on top of the AVX2 flags; matmul.c calls in only
 * when the CPU has AVX-512 F/BW/VL/DQ). Quantized weights go to matmul_avx512vnni.c when the CPU
 * has VNNI, else to matmul_avx2.c.
 *
 * Float weights (F32/F16/BF16) in panels: the same single FMA chain per output over k in order as
 * matmul_avx2.c, so the same bits as the AVX2 level (the scalar fallback sums in another order),
 * any m, any thread split. A 16-row panel is one register wide.
 *   - one x row (decode): the thread's panels in 2 halves streamed at once.
 *   - more (prefill): blocks of MC x rows and KC columns; x packed tile by tile (12 rows
 *     interleaved), panels made floats two at a time (L1/L2), 12x32 register tiles: 24
 *     accumulators, 2 loads and 12 broadcasts per 24 FMAs. Raw rows (not panels: keys scored by
 *     the window policies) are transposed into the same float blocks; one x row from raw rows
 *     takes the AVX2 code (same bits). */
#include "kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                      \
    defined(__AVX512DQ__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "avx2_util.h"
#include "avx512_util.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* ---- float weights ------------------------------------------------------------------------ */

#define PANEL SKV_MM_PANEL
#define MR    12  /* x rows per prefill tile (x 2 panels: 24 accumulators) */
#define KC    640 /* columns per block: as matmul_avx2.c (SmolLM2's 576 in one) */
/* x rows per block: 22 whole tiles (~675 KB of packed x at most, in a 1 MB L2); a 512-token
 * prompt in 2 blocks instead of 3 (192), so each W panel is converted and read once less:
 * llama-3.2-1b F16 pp512, 2 threads, alternated both orders: ahead in 8 of 10 rounds, ~+4% */
#define MC 264

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

/* Panel r's columns [k0, k1) as floats in bp (F32: used in place). */
INLINE const float *pack_panel(float *bp, const skv_mm *mm, int r, int k0, int k1, skv_type t) {
    const size_t es = elem_size(t);
    const uint8_t *p = (const uint8_t *)mm->w + (size_t)r * mm->n_in * es; /* r % PANEL == 0 */
    if (t == SKV_TYPE_F32) return (const float *)p + (size_t)k0 * PANEL;
    for (int k = k0; k < k1; k++)
        _mm512_store_ps(bp + (size_t)(k - k0) * PANEL, load_w16(p + (size_t)k * PANEL * es, t));
    return bp;
}

/* The same from raw rows: W rows [r, r + nr) (rows from nr on zero) at columns [k0, k1) into
 * bp[k - k0][16], 16x16 blocks transposed in registers. */
INLINE const float *pack_rows(float *bp, const skv_mm *mm, int r, int nr, int k0, int k1,
                              skv_type t) {
    const size_t es = elem_size(t), st = mm->w_stride;
    const uint8_t *w = (const uint8_t *)mm->w + (size_t)r * st + (size_t)k0 * es;
    const int len = k1 - k0;
    for (int k = 0; k < len; k += PANEL) {
        const int cols = len - k < PANEL ? len - k : PANEL;
        const __mmask16 mk = lanes(cols);
        __m512 v[PANEL];
        for (int j = 0; j < PANEL; j++) {
            const uint8_t *src = w + (size_t)j * st + (size_t)k * es;
            if (j >= nr)
                v[j] = _mm512_setzero_ps();
            else if (t == SKV_TYPE_F32)
                v[j] = _mm512_maskz_loadu_ps(mk, src);
            else if (t == SKV_TYPE_F16)
                v[j] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, src));
            else
                v[j] = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, src)), 16));
        }
        transpose16(v);
        for (int j = 0; j < cols; j++) _mm512_store_ps(bp + (size_t)(k + j) * PANEL, v[j]);
    }
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
        const __m512 xb = _mm512_set1_ps(xp[(size_t)k * MR + i]);                                  \
        a##i##0 = _mm512_fmadd_ps(xb, w0, a##i##0);                                                \
        if (np > 1) a##i##1 = _mm512_fmadd_ps(xb, w1, a##i##1);                                    \
    }
#define ACC_STORE(i)                                                                               \
    if (i < mr) {                                                                                  \
        _mm512_mask_storeu_ps(y + (size_t)i * ldy, m0, a##i##0);                                   \
        if (np > 1) _mm512_mask_storeu_ps(y + (size_t)i * ldy + PANEL, m1, a##i##1);               \
    }

/* xp: the tile's x rows packed by pack_x, [len][MR]; one pointer for all 12 rows (with a
 * pointer per row, 12 of them plus the loop's own do not fit in the 16 general registers) */
INLINE void tile_f(int mr, int np, const float *xp, const float *b0, const float *b1, int len,
                   float *y, size_t ldy, __mmask16 m0, __mmask16 m1, int first) {
    (void)b1;
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
static void tile_any(int mr, int np, const float *xp, const float *b0, const float *b1, int len,
                     float *y, size_t ldy, __mmask16 m0, __mmask16 m1, int first) {
#define TILE_CASE(c)                                                                               \
    case c:                                                                                        \
        if (np > 1)                                                                                \
            tile_f(c, 2, xp, b0, b1, len, y, ldy, m0, m1, first);                                  \
        else                                                                                       \
            tile_f(c, 1, xp, b0, b1, len, y, ldy, m0, m1, first);                                  \
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

/* xp[t][k][MR] = x rows [i0 + t * MR, ...) at columns [k0, k1): each tile's rows interleaved
 * (rows past i1 zero), so a tile reads x as one stream and needs one pointer for it. 8x8 blocks
 * transposed in registers; rows 8..11 of a tile are the low halves of a second transpose. */
static void pack_x(float *xp, const float *x, size_t ldx, int i0, int i1, int k0, int k1) {
    _Static_assert(MR == 12, "a tile's rows are packed as 8 + 4");
    const int len = k1 - k0, len8 = len & ~7;
    for (int i = i0; i < i1; i += MR) {
        float *d = xp + (size_t)(i - i0) * (size_t)len; /* (i - i0) is a multiple of MR */
        const int mr = i1 - i < MR ? i1 - i : MR;
        const float *src = x + (size_t)i * ldx + k0;
        for (int k = 0; k < len8; k += 8) {
            __m256 v[8], u[8];
            for (int r = 0; r < 8; r++) {
                v[r] = r < mr ? _mm256_loadu_ps(src + (size_t)r * ldx + k) : _mm256_setzero_ps();
                u[r] = r < 4 && r + 8 < mr ? _mm256_loadu_ps(src + (size_t)(r + 8) * ldx + k)
                                           : _mm256_setzero_ps();
            }
            transpose8(v);
            transpose8(u);
            for (int j = 0; j < 8; j++) {
                _mm256_storeu_ps(d + (size_t)(k + j) * MR, v[j]);
                _mm_storeu_ps(d + (size_t)(k + j) * MR + 8, _mm256_castps256_ps128(u[j]));
            }
        }
        for (int k = len8; k < len; k++)
            for (int r = 0; r < MR; r++)
                d[(size_t)k * MR + r] = r < mr ? src[(size_t)r * ldx + k] : 0.0f;
    }
}

/* Outputs of x rows [i0, i1) and W rows [r0, r1) (r0 on a panel boundary) from panels: per
 * block of MC x rows and kc columns, x packed once (xp, L2) and the W panels made floats two at
 * a time (bp, L1/L2), each pair serving every tile of the block. */
INLINE void gemm_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    const int n = mm->n_in, nkb = (n + KC - 1) / KC, kc = (n + nkb - 1) / nkb;
    const int mc = i1 - i0 < MC ? i1 - i0 : MC;
    /* whole tiles: up to ~675 KB, too much for a thread's stack (aligned_alloc wants a size that
     * is a multiple of the alignment) */
    const size_t xp_bytes =
        (sizeof(float) * (size_t)((mc + MR - 1) / MR * MR) * (size_t)kc + 63) & ~(size_t)63;
    float *xp = aligned_alloc(64, xp_bytes);
    if (!xp) { /* the AVX2 code needs no buffer and gives the same bits */
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
    float bp[2][KC * PANEL] __attribute__((aligned(64))); /* 80 KB */
    const size_t ldy = (size_t)mm->n_out;
    for (int mc0 = i0; mc0 < i1; mc0 += MC) {
        const int mc1 = i1 - mc0 < MC ? i1 : mc0 + MC;
        for (int k0 = 0; k0 < n; k0 += kc) {
            const int k1 = n - k0 < kc ? n : k0 + kc, first = k0 == 0;
            pack_x(xp, mm->x, (size_t)n, mc0, mc1, k0, k1);
            for (int r = r0; r < r1; r += 2 * PANEL) {
                const int np = r1 - r > PANEL ? 2 : 1;
                const __mmask16 m0 = lanes(r1 - r), m1 = np > 1 ? lanes(r1 - r - PANEL) : 0;
                const float *b0, *b1;
                if (mm->w_panels) {
                    b0 = pack_panel(bp[0], mm, r, k0, k1, t);
                    b1 = np > 1 ? pack_panel(bp[1], mm, r + PANEL, k0, k1, t) : b0;
                } else {
                    b0 = pack_rows(bp[0], mm, r, r1 - r, k0, k1, t);
                    b1 = np > 1 ? pack_rows(bp[1], mm, r + PANEL, r1 - r - PANEL, k0, k1, t) : b0;
                }
                /* the next two panels' columns [k0, k1) (avx2_util.h prefetch_share): the two
                 * blocks are PANEL * n * es apart (not contiguous: a panel holds all n columns),
                 * so two streams, each a share per tile */
                prefetch_stream pf0, pf1;
                const size_t es = elem_size(t), blk = (size_t)(k1 - k0) * PANEL * es;
                const size_t tiles = (size_t)(mc1 - mc0 + MR - 1) / MR;
                const uint8_t *w = (const uint8_t *)mm->w;
                prefetch_start(&pf0,
                               mm->w_panels && r + 2 * PANEL < r1
                                   ? w + ((size_t)(r + 2 * PANEL) * n + (size_t)k0 * PANEL) * es
                                   : NULL,
                               blk, tiles);
                prefetch_start(&pf1,
                               mm->w_panels && r + 3 * PANEL < r1
                                   ? w + ((size_t)(r + 3 * PANEL) * n + (size_t)k0 * PANEL) * es
                                   : NULL,
                               blk, tiles);
                for (int i = mc0; i < mc1; i += MR) {
                    const int mr = mc1 - i < MR ? mc1 - i : MR;
                    const float *x = xp + (size_t)(i - mc0) * (size_t)(k1 - k0);
                    float *y = mm->y + (size_t)i * ldy + r;
                    prefetch_share(&pf0);
                    prefetch_share(&pf1);
                    if (!first && i + 2 * MR <= mc1) /* the next tile's outputs */
                        for (int ii = MR; ii < 2 * MR; ii++)
                            _mm_prefetch((const char *)(y + (size_t)ii * ldy), _MM_HINT_T0);
                    if (mr == MR && np == 2)
                        tile_f(MR, 2, x, b0, b1, k1 - k0, y, ldy, m0, m1, first);
                    else
                        tile_any(mr, np, x, b0, b1, k1 - k0, y, ldy, m0, m1, first);
                }
            }
        }
    }
    free(xp);
}

/* One x row from panels (decode): the thread's panels in 2 halves, one panel of each at a time,
 * so W streams as 2 long sequential runs per thread (panels are contiguous). 4 runs (quarters,
 * as the AVX2 code had them) read slower on the Xeon with AMX: qwen2.5-0.5b / llama-3.2-1b F16 tg64
 * at 2 threads, alternated, +5-9% with 2 (3 was 12% slower than 4, 1 the same as 4). */
INLINE void gemv_panels(const skv_mm *mm, int r0, int r1, skv_type t) {
    const int n = mm->n_in, np = (r1 - r0 + PANEL - 1) / PANEL, h = np / 2;
    const size_t es = elem_size(t), ps = (size_t)PANEL * n * es, hs = (size_t)h * ps;
    const float *x = mm->x;
    const uint8_t *w0 = (const uint8_t *)mm->w + (size_t)r0 * n * es;
    for (int j = 0; j < h; j++) {
        const uint8_t *p = w0 + (size_t)j * ps;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int k = 0; k < n; k++) {
            const __m512 xb = _mm512_set1_ps(x[k]);
            const uint8_t *e = p + (size_t)k * PANEL * es;
            SKV_PREFETCH_AHEAD(e, 0);
            SKV_PREFETCH_AHEAD(e + hs, 0);
            a0 = _mm512_fmadd_ps(xb, load_w16(e, t), a0);
            a1 = _mm512_fmadd_ps(xb, load_w16(e + hs, t), a1);
        }
        const int ra = r0 + j * PANEL;
        _mm512_mask_storeu_ps(mm->y + ra, lanes(r1 - ra), a0);
        _mm512_mask_storeu_ps(mm->y + ra + h * PANEL, lanes(r1 - ra - h * PANEL), a1);
    }
    if (np % 2) { /* the odd last panel */
        const uint8_t *p = w0 + (size_t)(np - 1) * ps;
        __m512 a0 = _mm512_setzero_ps();
        for (int k = 0; k < n; k++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(x[k]), load_w16(p + (size_t)k * PANEL * es, t), a0);
        _mm512_mask_storeu_ps(mm->y + r0 + (np - 1) * PANEL, lanes(r1 - r0 - (np - 1) * PANEL), a0);
    }
}

INLINE void matmul_float(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    if (mm->m == 1)
        gemv_panels(mm, r0, r1, t);
    else
        gemm_float(mm, i0, i1, r0, r1, t);
}

void skv_matmul_avx512(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_F32:
    case SKV_TYPE_F16:
    case SKV_TYPE_BF16:
        if (!mm->w_panels && mm->m == 1) {
            skv_matmul_avx2(mm, i0, i1, r0, r1); /* one x row from raw rows: the same bits */
        } else if (mm->wt == SKV_TYPE_F32) {
            matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_F32);
        } else if (mm->wt == SKV_TYPE_F16) {
            matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_F16);
        } else {
            matmul_float(mm, i0, i1, r0, r1, SKV_TYPE_BF16);
        }
        break;
    default:
        if (skv_simd_has_vnni())
            skv_matmul_avx512_vnni(mm, i0, i1, r0, r1);
        else
            skv_matmul_avx2(mm, i0, i1, r0, r1);
        break;
    }
}

#else
/* Built without the AVX-512 flags: nothing here, matmul.c does not call into this file. */
typedef int skv_matmul_avx512_empty;
#endif
