/* matmul_avx512bf16.c — BF16 weights in panels with vdpbf16ps (AVX512_BF16), which multiplies
 * pairs of bf16 values and adds both products to a float lane: twice the products of an FMA per
 * instruction. The activations are rounded to bf16 once per matrix product (skv_act_rows_bf16,
 * round to nearest even, as llama.cpp does for BF16 weights); the weights are bf16 already.
 * Both instructions flush subnormals to zero (activations below 2^-126 become 0, products and
 * sums too): far below anything a forward pass depends on.
 *
 * Lane r of an accumulator is output row r of a 16-row panel; it sums the pairs (x[2p], x[2p+1])
 * . (w[r][2p], w[r][2p+1]) in the order p = 0, 1, ...: one chain per output, continued through y
 * across column blocks, so any m (decode reads the panels directly, prefill packs them into
 * blocks) and any thread split give the same bits. Panels keep their layout (column k of 16 rows
 * is 32 bytes); the two columns of a pair are interleaved by one permute when loaded. */
#include "kernels.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)

#include "avx512_util.h"
#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

#define PANEL SKV_MM_PANEL
#define MR    12  /* x rows per prefill tile (x 2 panels: 24 accumulators) */
#define KCP   320 /* column pairs per block (640 columns, as the float kernels) */
#define MC    192 /* x rows per block */

_Static_assert(PANEL == 16, "a panel is one 512-bit register of floats");

/* x[n] as bf16 in order (round to nearest even, subnormals to zero; an odd n padded with +0):
 * 32-bit word p holds the pair (x[2p], x[2p + 1]) as vdpbf16ps reads it. */
void skv_act_rows_bf16(const float *x, void *dst, int n) {
    uint16_t *d = dst;
    for (int k = 0; k < n; k += 32) {
        const int rem = n - k;
        const __mmask16 m0 = rem >= 16 ? 0xffff : (__mmask16)((1u << rem) - 1);
        const __mmask16 m1 = rem >= 32   ? 0xffff
                             : rem <= 16 ? 0
                                         : (__mmask16)((1u << (rem - 16)) - 1);
        const __m512 lo = _mm512_maskz_loadu_ps(m0, x + k),
                     hi = _mm512_maskz_loadu_ps(m1, x + k + 16);
        const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        const int nw = rem >= 32 ? 32 : (rem + 1) & ~1; /* whole pairs */
        if (nw >= 32) /* plain: a masked store costs twice as much on Zen (avx512_util.h) */
            _mm512_storeu_si512(d + k, v);
        else
            _mm512_mask_storeu_epi16(d + k, (__mmask32)((1u << nw) - 1), v);
    }
}

INLINE __m512 dot2(__m512 acc, __m512i x, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
}

/* y[0, 16 np) of mr <= MR x rows (bf16 pair words, row stride ldx words) over pairs [0, len) of
 * the interleaved panels b0, b1, continuing each chain from y unless first. */
#define ACC_INIT(i)                                                                                \
    __m512 a##i##0 = _mm512_setzero_ps(), a##i##1 = a##i##0;                                       \
    if (i < mr && !first) {                                                                        \
        a##i##0 = _mm512_maskz_loadu_ps(m0, y + (size_t)i * ldy);                                  \
        if (np > 1) a##i##1 = _mm512_maskz_loadu_ps(m1, y + (size_t)i * ldy + PANEL);              \
    }
#define ACC_DOT(i)                                                                                 \
    if (i < mr) {                                                                                  \
        const __m512i xb = _mm512_set1_epi32((int)x##i[p]);                                        \
        a##i##0 = dot2(a##i##0, xb, w0);                                                           \
        if (np > 1) a##i##1 = dot2(a##i##1, xb, w1);                                               \
    }
#define ACC_STORE(i)                                                                               \
    if (i < mr) {                                                                                  \
        _mm512_mask_storeu_ps(y + (size_t)i * ldy, m0, a##i##0);                                   \
        if (np > 1) _mm512_mask_storeu_ps(y + (size_t)i * ldy + PANEL, m1, a##i##1);               \
    }
#define X_ROW(i) *x##i = mr > i ? x + (size_t)i * ldx : x

INLINE void tile_bf(int mr, int np, const uint32_t *x, size_t ldx, const __m512i *b0,
                    const __m512i *b1, int len, float *y, size_t ldy, __mmask16 m0, __mmask16 m1,
                    int first) {
    const uint32_t X_ROW(0), X_ROW(1), X_ROW(2), X_ROW(3), X_ROW(4), X_ROW(5), X_ROW(6), X_ROW(7),
        X_ROW(8), X_ROW(9), X_ROW(10), X_ROW(11);
    (void)x1, (void)x2, (void)x3, (void)x4, (void)x5, (void)x6, (void)x7, (void)x8, (void)x9,
        (void)x10, (void)x11, (void)b1;
    // clang-format off
    ACC_INIT(0) ACC_INIT(1) ACC_INIT(2) ACC_INIT(3) ACC_INIT(4) ACC_INIT(5)
    ACC_INIT(6) ACC_INIT(7) ACC_INIT(8) ACC_INIT(9) ACC_INIT(10) ACC_INIT(11)
    for (int p = 0; p < len; p++) {
        const __m512i w0 = _mm512_load_si512(b0 + p);
        const __m512i w1 = np > 1 ? _mm512_load_si512(b1 + p) : w0;
        ACC_DOT(0) ACC_DOT(1) ACC_DOT(2) ACC_DOT(3) ACC_DOT(4) ACC_DOT(5)
        ACC_DOT(6) ACC_DOT(7) ACC_DOT(8) ACC_DOT(9) ACC_DOT(10) ACC_DOT(11)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
    ACC_STORE(6) ACC_STORE(7) ACC_STORE(8) ACC_STORE(9) ACC_STORE(10) ACC_STORE(11)
    // clang-format on
}

static void tile_any(int mr, int np, const uint32_t *x, size_t ldx, const __m512i *b0,
                     const __m512i *b1, int len, float *y, size_t ldy, __mmask16 m0, __mmask16 m1,
                     int first) {
#define TILE_CASE(c)                                                                               \
    case c:                                                                                        \
        if (np > 1)                                                                                \
            tile_bf(c, 2, x, ldx, b0, b1, len, y, ldy, m0, m1, first);                             \
        else                                                                                       \
            tile_bf(c, 1, x, ldx, b0, b1, len, y, ldy, m0, m1, first);                             \
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

/* Outputs of x rows [i0, i1) and W rows [r0, r1) (r0 on a panel boundary). */
static void gemm_bf16(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    __m512i bp[2][KCP]; /* 40 KB: two panels' pairs, interleaved */
    const int n = mm->n_in, npairs = (n + 1) / 2, nkb = (npairs + KCP - 1) / KCP;
    const int kcp = (npairs + nkb - 1) / nkb;
    const size_t ldy = (size_t)mm->n_out, ldx = mm->xq_stride / 4;
    for (int mc0 = i0; mc0 < i1; mc0 += MC) {
        const int mc1 = i1 - mc0 < MC ? i1 : mc0 + MC;
        for (int p0 = 0; p0 < npairs; p0 += kcp) {
            const int p1 = npairs - p0 < kcp ? npairs : p0 + kcp, first = p0 == 0;
            for (int r = r0; r < r1; r += 2 * PANEL) {
                const int np = r1 - r > PANEL ? 2 : 1;
                const __mmask16 m0 = lanes(r1 - r), m1 = np > 1 ? lanes(r1 - r - PANEL) : 0;
                for (int j = 0; j < np; j++) {
                    const uint16_t *pw = (const uint16_t *)mm->w + (size_t)(r + j * PANEL) * n;
                    for (int p = p0; p < p1; p++) bp[j][p - p0] = bf16_load_pair(pw, p, n);
                }
                for (int i = mc0; i < mc1; i += MR) {
                    const int mr = mc1 - i < MR ? mc1 - i : MR;
                    const uint32_t *x =
                        (const uint32_t *)(const void *)(mm->xq + (size_t)i * mm->xq_stride) + p0;
                    float *y = mm->y + (size_t)i * ldy + r;
                    if (mr == MR && np == 2)
                        tile_bf(MR, 2, x, ldx, bp[0], bp[1], p1 - p0, y, ldy, m0, m1, first);
                    else
                        tile_any(mr, np, x, ldx, bp[0], bp[1], p1 - p0, y, ldy, m0, m1, first);
                }
            }
        }
    }
}

/* One x row (decode): the thread's panels in 2 halves, one panel of each at a time, as the float
 * gemv in matmul_avx512.c streams them (2 long sequential runs per thread). */
static void gemv_bf16(const skv_mm *mm, int r0, int r1) {
    const int n = mm->n_in, npairs = (n + 1) / 2, np = (r1 - r0 + PANEL - 1) / PANEL, h = np / 2;
    const size_t ps = (size_t)PANEL * n, hs = (size_t)h * ps; /* bf16 values per panel, half */
    const uint32_t *x = (const uint32_t *)(const void *)mm->xq;
    const uint16_t *w0 = (const uint16_t *)mm->w + (size_t)r0 * n;
    for (int j = 0; j < h; j++) {
        const uint16_t *p = w0 + (size_t)j * ps;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int k = 0; k < npairs; k++) {
            const __m512i xb = _mm512_set1_epi32((int)x[k]);
            SKV_PREFETCH_AHEAD(p, (size_t)4 * k * PANEL);
            SKV_PREFETCH_AHEAD(p + hs, (size_t)4 * k * PANEL);
            a0 = dot2(a0, xb, bf16_load_pair(p, k, n));
            a1 = dot2(a1, xb, bf16_load_pair(p + hs, k, n));
        }
        const int ra = r0 + j * PANEL;
        _mm512_mask_storeu_ps(mm->y + ra, lanes(r1 - ra), a0);
        _mm512_mask_storeu_ps(mm->y + ra + h * PANEL, lanes(r1 - ra - h * PANEL), a1);
    }
    if (np % 2) { /* the odd last panel */
        const uint16_t *p = w0 + (size_t)(np - 1) * ps;
        __m512 a0 = _mm512_setzero_ps();
        for (int k = 0; k < npairs; k++)
            a0 = dot2(a0, _mm512_set1_epi32((int)x[k]), bf16_load_pair(p, k, n));
        _mm512_mask_storeu_ps(mm->y + r0 + (np - 1) * PANEL, lanes(r1 - r0 - (np - 1) * PANEL), a0);
    }
}

void skv_matmul_avx512_bf16(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->m == 1)
        gemv_bf16(mm, r0, r1);
    else
        gemm_bf16(mm, i0, i1, r0, r1);
}

#else
/* Built without AVX512_BF16: matmul.c never calls into this file then. */
typedef int skv_matmul_avx512bf16_empty;
#endif
