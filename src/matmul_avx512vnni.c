/* matmul_avx512vnni.c — the AVX-512 products of quantized weights (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K) with VNNI (built with -mavx512f/bw/vl/dq/vnni on top of the AVX2 flags; called from
 * matmul_avx512.c only when the CPU has VNNI). x is quantized to 8-bit blocks (matmul.c); integer
 * dot products, scaled in float.
 *   - Q8_0/Q4_0 (the section at the end): sixteen W rows in the lanes, vpdpbusd of 4 x codes
 *     (unsigned: + 128) broadcast against 4 codes of each row; one row or two (decode) read W
 *     rows front to back and sum in the same order: the same bits (also as the AVX2 level's).
 *   - K-quants: the codes are unsigned already: vpmaddubsw per 64 values, then vpdpwssd with
 *     the sub-blocks' 16-bit scales, summed over the super-block in integers and scaled in float
 *     once (d_w x d_x); the min / offset terms as x's group sums times 16 coefficients (one FMA
 *     per super-block). One or two x rows read the raw blocks, more read prepared rows; both do
 *     the same float operations per output in the same order, so a row's result does not depend
 *     on m or the thread split. (They differ from the AVX2 path's bits by rounding: it sums 8
 *     lanes, not 16.) */
#include "kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                      \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__) &&   \
    defined(__F16C__)

#include "avx2_util.h"
#include "avx512_util.h"
#include "quant_x86.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Per K-quant output, in order over the row: per super-block u = integer sum over its 4 x 64
 * values of code x x x scale, acc = fma(float(u), [d_w x d_x], acc); and separately
 * cor = fma(coefficients[16], x group sums[16], cor). The result is the 16-lane sum of acc plus
 * that of cor. Column blocks of KQ values carry acc and cor from one to the next. */

_Static_assert(KQ % 256 == 0, "column blocks hold whole super-blocks");

/* Two 256-bit halves as one register. */
static inline __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
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

#define NRQ 4  /* W rows per K-quant tile */
#define MRQ 4  /* x rows per K-quant tile */
#define MCQ 96 /* x rows per block */

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
INLINE void tile_k_step(int mr, const skv_mm *mm, int i, int r, int nr, const prep_kx *const *p,
                        int sb0, int nsb, int first, int last, __m512 *save) {
    __m512 acc[MRQ][NRQ], cor[MRQ][NRQ];
    act_row a[MRQ];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, 256);
        for (int j = 0; j < NRQ; j++) {
            acc[ii][j] = first ? _mm512_setzero_ps() : save[(ii * NRQ + j) * 2];
            cor[ii][j] = first ? _mm512_setzero_ps() : save[(ii * NRQ + j) * 2 + 1];
        }
    }
    tile_k(mr, a, sb0, p, nsb, acc, cor);
    for (int ii = 0; ii < mr; ii++)
        for (int j = 0; j < NRQ; j++) {
            if (!last) {
                save[(ii * NRQ + j) * 2] = acc[ii][j];
                save[(ii * NRQ + j) * 2 + 1] = cor[ii][j];
            } else if (j < nr) { /* as dot_raw ends */
                mm->y[(size_t)(i + ii) * mm->n_out + r + j] =
                    _mm512_reduce_add_ps(acc[ii][j]) + _mm512_reduce_add_ps(cor[ii][j]);
            }
        }
}

/* K-quants: blocks of MCQ x rows; for each NRQ W rows and each block of up to KQ columns, the W
 * rows are prepared once and serve every tile of the x block. */
/* Not inlined: its ~70 KB frame stays apart from the caller's. */
static __attribute__((noinline)) void gemm_k(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    prep_kx prep[NRQ];          /* 4.6 KB each, in L1 */
    __m512 save[MCQ * NRQ * 2]; /* 48 KB */
    const skv_type t = mm->wt;
    const int nblk = mm->n_in / 256, per = KQ / 256;
    const int nkb = (nblk + per - 1) / per;
    for (int mc0 = i0; mc0 < i1; mc0 += MCQ) {
        const int mc1 = i1 - mc0 < MCQ ? i1 : mc0 + MCQ;
        for (int r = r0; r < r1; r += NRQ) {
            const int nr = r1 - r < NRQ ? r1 - r : NRQ;
            const prep_kx *p[NRQ];
            for (int j = 0; j < NRQ; j++) p[j] = &prep[j < nr ? j : nr - 1];
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * per, b1 = b0 + per < nblk ? b0 + per : nblk;
                for (int j = 0; j < nr; j++)
                    prep_kx_fill(&prep[j], (const uint8_t *)mm->w + (size_t)(r + j) * mm->w_stride,
                                 t, b0, b1 - b0);
                const int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
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

/* ---- Q8_0/Q4_0: sixteen W rows in the lanes ---------------------------------------------------
 * Each output is one float chain over the blocks, acc = fma(float(idot_b), dx_b * dw_b, acc):
 * the AVX2 level's order (matmul_avx2.c), so the same bits as its code, and decode (gemv_hex)
 * the same bits as prefill. Prefill: a "hexad" is 16 W rows whose codes are transposed once per
 * column block, so that one 64-byte load holds 4 codes of each row; x codes are unsigned (+128,
 * skv_act_unsigned) and broadcast 4 at a time; vpdpbusd sums 4 products per lane, and the
 * 128 * sum(w) that the +128 adds is taken off first (the integer sums start from minus it).
 * Per block and x row: 8 vpdpbusd, a convert, a multiply and an FMA per 16 outputs, where
 * scaling each pair of blocks of each row in float took 3 of the 4 instructions per 64 products.
 * matmul_bench 2 threads (Zen 4): 200-250 -> 470-570 GFLOP/s; llama-3.2-1b Q8_0 pp512 2.2x. */

/* x blocks of 32 that gemv_hex keeps sums of on its stack (n_in up to 32768) */
#define MAX_XB 1024

#define MRH 4  /* x rows per tile (6: the arrays spill, 2x slower) */
#define NOH 2  /* hexads per tile (32 W rows) */
#define KBH 16 /* blocks per prepared column block: two hexads are 20 KB, in L1 */
#define MCH 96 /* x rows per row block */

typedef struct prep_hex {
    int8_t q[KBH * 512] ALIGNED64;  /* [block][group g][row k][4]: row k's codes 4g..4g+3 */
    int32_t nb[KBH * 16] ALIGNED64; /* [block][row k]: -128 * the sum of its codes */
    float d[KBH * 16] ALIGNED64;    /* [block][row k] */
} prep_hex;

/* Prepares blocks [b0, b0 + nb) of 16 rows w[0..16). */
INLINE void prep_hexad(prep_hex *p, const uint8_t *const *w, int q4, int b0, int nb) {
    const size_t bb = q4 ? 18 : 34;
    for (int b = 0; b < nb; b++) {
        const size_t off = (size_t)(b0 + b) * bb;
        __m256 lo[8], hi[8]; /* transpose8 moves 32-bit lanes: the codes pass bit for bit */
        for (int k = 0; k < 8; k++) {
            lo[k] = _mm256_castsi256_ps(q8_codes(w[k] + off, q4));
            hi[k] = _mm256_castsi256_ps(q8_codes(w[k + 8] + off, q4));
        }
        transpose8(lo);
        transpose8(hi);
        __m512i bias = _mm512_setzero_si512();
        for (int g = 0; g < 8; g++) {
            const __m512i v = join(_mm256_castps_si256(lo[g]), _mm256_castps_si256(hi[g]));
            _mm512_store_si512(p->q + 512 * b + 64 * g, v);
            bias = _mm512_dpbusd_epi32(bias, _mm512_set1_epi8((char)0x80), v);
        }
        _mm512_store_si512(p->nb + 16 * b, _mm512_sub_epi32(_mm512_setzero_si512(), bias));
        _mm512_store_ps(p->d + 16 * b, _mm512_insertf32x8(_mm512_castps256_ps512(scales8(w, off)),
                                                          scales8(w + 8, off), 1));
    }
}

/* mr x rows times NOH hexads over blocks [b0, b0 + nb) of x (the hexads start at b0). */
INLINE void tile_hex(int mr, const act_row *a, int b0, const prep_hex *const *p, int nb,
                     __m512 acc[MRH][NOH]) {
    for (int b = 0; b < nb; b++) {
        __m512i ia[MRH][NOH];
#pragma GCC unroll 2
        for (int c = 0; c < NOH; c++) {
            const __m512i nbias = _mm512_load_si512(p[c]->nb + 16 * b);
#pragma GCC unroll 4
            for (int i = 0; i < MRH; i++) ia[i][c] = nbias;
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i w[NOH];
#pragma GCC unroll 2
            for (int c = 0; c < NOH; c++) w[c] = _mm512_load_si512(p[c]->q + 512 * b + 64 * g);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                int32_t x4;
                memcpy(&x4, a[i].q + 32 * (b0 + b) + 4 * g, 4);
                const __m512i x = _mm512_set1_epi32(x4);
#pragma GCC unroll 2
                for (int c = 0; c < NOH; c++) ia[i][c] = _mm512_dpbusd_epi32(ia[i][c], x, w[c]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 dx = _mm512_set1_ps(a[i].d[b0 + b]);
#pragma GCC unroll 2
            for (int c = 0; c < NOH; c++)
                acc[i][c] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i][c]),
                                    _mm512_mul_ps(dx, _mm512_load_ps(p[c]->d + 16 * b)), acc[i][c]);
        }
    }
}

/* An mr-row tile over one column block, continuing from (or starting) the saved lanes (save:
 * [mr][NOH]); after the last block it stores the nr (1..32) valid W rows' outputs. */
INLINE void tile_hex_step(int mr, const skv_mm *mm, int i, int r, int nr, const prep_hex *const *p,
                          int b0, int nb, int first, int last, __m512 *save) {
    __m512 acc[MRH][NOH];
    act_row a[MRH];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, 32);
        for (int c = 0; c < NOH; c++) acc[ii][c] = first ? _mm512_setzero_ps() : save[ii * NOH + c];
    }
    tile_hex(mr, a, b0, p, nb, acc);
    for (int ii = 0; ii < mr; ii++)
        for (int c = 0; c < NOH; c++) {
            if (!last)
                save[ii * NOH + c] = acc[ii][c];
            else if (16 * c < nr)
                _mm512_mask_storeu_ps(mm->y + (size_t)(i + ii) * mm->n_out + r + 16 * c,
                                      lanes(nr - 16 * c), acc[ii][c]);
        }
}

/* Blocks of MCH x rows; for each 32 W rows and each column block of KBH blocks, the two hexads
 * are prepared once and serve every tile of the x block. */
static __attribute__((noinline)) void gemm_hex(const skv_mm *mm, int i0, int i1, int r0, int r1,
                                               int q4) {
    prep_hex prep[NOH];
    __m512 save[MCH * NOH];
    const int nblk = mm->n_in / 32, nkb = (nblk + KBH - 1) / KBH;
    for (int mc0 = i0; mc0 < i1; mc0 += MCH) {
        const int mc1 = i1 - mc0 < MCH ? i1 : mc0 + MCH;
        for (int r = r0; r < r1; r += 16 * NOH) {
            const int nr = r1 - r < 16 * NOH ? r1 - r : 16 * NOH, no = (nr + 15) / 16;
            const prep_hex *p[NOH];
            for (int c = 0; c < NOH; c++) p[c] = &prep[c < no ? c : no - 1];
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * KBH, nb = nblk - b0 < KBH ? nblk - b0 : KBH;
                for (int c = 0; c < no; c++) {
                    const uint8_t *w[16]; /* rows past the last repeat it: computed, not stored */
                    for (int k = 0; k < 16; k++) {
                        const int rk = r + 16 * c + k < r + nr ? r + 16 * c + k : r + nr - 1;
                        w[k] = (const uint8_t *)mm->w + (size_t)rk * mm->w_stride;
                    }
                    prep_hexad(&prep[c], w, q4, b0, nb);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                int i = mc0;
                for (; i + MRH <= mc1; i += MRH)
                    tile_hex_step(MRH, mm, i, r, nr, p, b0, nb, first, last,
                                  save + (size_t)(i - mc0) * NOH);
                __m512 *sv = save + (size_t)(i - mc0) * NOH;
                switch (mc1 - i) {
                case 3:
                    tile_hex_step(3, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                case 2:
                    tile_hex_step(2, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                case 1:
                    tile_hex_step(1, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                default:
                    break;
                }
            }
        }
    }
}

/* Decode: NS W rows against one x row, each read front to back, side by side, 8 blocks at a
 * time. A block's dot product is vpdpbusd of its codes made unsigned (+ 128: w ^ 0x80) with x's
 * signed codes, less what the + 128 adds (128 * the sum of x's block, xb, the same for every
 * row); a row's 8 blocks' sums are transposed into the lanes (sum8_i32), and the NS rows' 8
 * lanes into 8 vectors of NS lanes, block by block, so that each row's chain continues in its
 * own lane: acc = fma(float(idot_b), dx_b * dw_b, acc), the operations of a lane of the tiles. */
#define NS 4
INLINE void dot_hex_rows(const uint8_t *const *w, act_row a, const int32_t *xb, int nb, int q4,
                         float *y) {
    const size_t bb = q4 ? 18 : 34;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m128 acc = _mm_setzero_ps(); /* lane r: row r */
    int b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256i x[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            x[k] = _mm256_loadu_si256((const __m256i *)(a.q + 32 * (b + k)));
        const __m256i bias = _mm256_loadu_si256((const __m256i *)(xb + b));
        const __m256 dx = _mm256_loadu_ps(a.d + b);
        __m256 f[NS], s[NS]; /* [row]: lane k = block b + k */
#pragma GCC unroll 4
        for (int r = 0; r < NS; r++) {
            __m256i v[8];
            const uint8_t *blk[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                blk[k] = w[r] + (size_t)(b + k) * bb;
                v[k] = _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                           _mm256_xor_si256(q8_codes(blk[k], q4), flip), x[k]);
            }
            f[r] = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum8_i32(v), bias));
            s[r] = _mm256_mul_ps(dx, scales8(blk, 0));
        }
        /* lanes k (low half) and k + 4 (high half) of the 4 rows, for k = 0..3 */
        const __m256 f01l = _mm256_unpacklo_ps(f[0], f[1]), f01h = _mm256_unpackhi_ps(f[0], f[1]);
        const __m256 f23l = _mm256_unpacklo_ps(f[2], f[3]), f23h = _mm256_unpackhi_ps(f[2], f[3]);
        const __m256 s01l = _mm256_unpacklo_ps(s[0], s[1]), s01h = _mm256_unpackhi_ps(s[0], s[1]);
        const __m256 s23l = _mm256_unpacklo_ps(s[2], s[3]), s23h = _mm256_unpackhi_ps(s[2], s[3]);
        const __m256 fk[4] = {
            _mm256_shuffle_ps(f01l, f23l, 0x44), _mm256_shuffle_ps(f01l, f23l, 0xee),
            _mm256_shuffle_ps(f01h, f23h, 0x44), _mm256_shuffle_ps(f01h, f23h, 0xee)};
        const __m256 sk[4] = {
            _mm256_shuffle_ps(s01l, s23l, 0x44), _mm256_shuffle_ps(s01l, s23l, 0xee),
            _mm256_shuffle_ps(s01h, s23h, 0x44), _mm256_shuffle_ps(s01h, s23h, 0xee)};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc = _mm_fmadd_ps(_mm256_castps256_ps128(fk[k]), _mm256_castps256_ps128(sk[k]), acc);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc =
                _mm_fmadd_ps(_mm256_extractf128_ps(fk[k], 1), _mm256_extractf128_ps(sk[k], 1), acc);
    }
    float out[4];
    _mm_storeu_ps(out, acc);
    for (; b < nb; b++) /* the last nb % 8 blocks */
        for (int r = 0; r < NS; r++) {
            const uint8_t *blk = w[r] + (size_t)b * bb;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(a.q + 32 * b));
            const __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                                  _mm256_xor_si256(q8_codes(blk, q4), flip), x);
            const int idot = hsum_i32(d) - xb[b];
            out[r] = fmaf((float)idot, a.d[b] * ld_f16(blk), out[r]);
        }
    for (int r = 0; r < NS; r++) y[r] = out[r];
}

/* Rows [r0, r1) for x rows [i0, i1) (one or two): rows j, j + h, j + 2h, j + 3h at once, four
 * streams; the last (r1 - r0) % 4 rows with copies of the last one (computed, not stored).
 * Measured (Zen 4, llama-3.2-1b Q8_0 tg64): pairs of adjacent rows instead were 2x slower,
 * prefetching 512-2048 B ahead 10-25% slower; 0-15% below the former gemv (two streams, 16-lane
 * partial sums: another order, which the tiles cannot follow). */
static void gemv_hex(const skv_mm *mm, int i0, int i1, int r0, int r1, int q4) {
    const int nb = mm->n_in / 32, h = (r1 - r0) / NS;
    int32_t xb[MAX_XB]; /* 128 * the sum of each block of x's codes */
    if (nb > MAX_XB) {  /* wider than any model layer: the AVX2 code, same bits */
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        for (int b = 0; b < nb; b++) {
            const __m256i d =
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80),
                                    _mm256_loadu_si256((const __m256i *)(a.q + 32 * b)));
            xb[b] = hsum_i32(d);
        }
        for (int j = r0; j < r0 + h; j++) {
            const uint8_t *w[NS];
            float v[NS];
            for (int k = 0; k < NS; k++)
                w[k] = (const uint8_t *)mm->w + (size_t)(j + k * h) * mm->w_stride;
            dot_hex_rows(w, a, xb, nb, q4, v);
            for (int k = 0; k < NS; k++) y[j + k * h] = v[k];
        }
        for (int r = r0 + NS * h; r < r1; r += NS) {
            const uint8_t *w[NS];
            float v[NS];
            for (int k = 0; k < NS; k++)
                w[k] =
                    (const uint8_t *)mm->w + (size_t)(r + k < r1 ? r + k : r1 - 1) * mm->w_stride;
            dot_hex_rows(w, a, xb, nb, q4, v);
            for (int k = 0; k < NS && r + k < r1; k++) y[r + k] = v[k];
        }
    }
}

/* x rows below which quantized W is used straight from its raw blocks. */
#define GEMM_Q_MIN_M 3

bool skv_act_k_order(skv_type wt) {
    return skv_simd_has_vnni() && (wt == SKV_TYPE_Q4_K || wt == SKV_TYPE_Q5_K);
}

bool skv_act_unsigned(skv_type wt, int m) {
    return skv_simd_has_vnni() && (wt == SKV_TYPE_Q8_0 || wt == SKV_TYPE_Q4_0) && m >= GEMM_Q_MIN_M;
}

void skv_act_rows_unsigned(uint8_t *q, int64_t n) {
    int64_t o = 0;
    for (; o + 64 <= n; o += 64)
        _mm512_storeu_si512(
            q + o, _mm512_xor_si512(_mm512_loadu_si512(q + o), _mm512_set1_epi8((char)0x80)));
    for (; o < n; o++) q[o] ^= 0x80;
}

void skv_matmul_avx512_vnni(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->wt == SKV_TYPE_Q8_0 || mm->wt == SKV_TYPE_Q4_0) {
        if (mm->m < GEMM_Q_MIN_M)
            gemv_hex(mm, i0, i1, r0, r1, mm->wt == SKV_TYPE_Q4_0);
        else
            gemm_hex(mm, i0, i1, r0, r1, mm->wt == SKV_TYPE_Q4_0);
        return;
    }
    if (mm->m < GEMM_Q_MIN_M)
        gemv_k(mm, i0, i1, r0, r1);
    else
        gemm_k(mm, i0, i1, r0, r1);
}

#else
/* Built without the AVX-512 VNNI flags: nothing here. */
typedef int skv_matmul_avx512vnni_empty;
#endif
