/* matmul_avx512vnni.c — the AVX-512 products of quantized weights (Q8_0, Q4_0, Q5_0, Q4_K,
 * Q5_K, Q6_K) with VNNI (built with -mavx512f/bw/vl/dq/vnni on top of the AVX2 flags; called from
 * matmul_avx512.c only when the CPU has VNNI). x is quantized to 8-bit blocks (matmul.c); integer
 * dot products, scaled in float.
 *   - Q8_0/Q4_0/Q5_0 (the section at the end; Q4_0's and Q5_0's codes unpacked to signed bytes,
 *     q8_codes): sixteen W rows in the lanes, vpdpbusd of 4 x codes
 *     (unsigned: + 128) broadcast against 4 codes of each row; one row or two (decode) read W
 *     rows front to back and sum in the same order: the same bits (also as the AVX2 level's).
 *     Q8_0 in k16 records (a loaded model's): decode reads each octet's 8 rows in the lanes of
 *     one chain, W codes made unsigned (^ 0x80) against signed x, less 128 times the block's x
 *     sum (gemv_hex_rec; 4 prefetched streams per thread as gemv_k16's where the CPU takes
 *     them); prefill joins a group's two octets into its hexads (prep_hexad_rec). Q4_0 records
 *     alike: a vector's low and high nibbles are the two octets' codes + 8 (less 8 times the x
 *     sum in decode; made signed for the hexads).
 *   - K-quants (the first section): per super-block two exact integers per output (the codes'
 *     dot with x times the sub-block scales, and the mins / offsets times x's group sums), then
 *     one float chain over super-blocks; prefill with sixteen W rows in the lanes (vpdpbusd,
 *     vpmulld by the scales), decode from the raw blocks (vpmaddubsw, vpdpwssd): the same bits.
 *     Q4_K in k16 records (a loaded model's, kernels.h): decode reads sixteen rows in the lanes
 *     straight from them (gemv_k16), prefill prepares its tiles from them (prep_k16_from_rec);
 *     the same bits again, and the same as the AVX2 level's (matmul_avx2.c computes the same
 *     formula with 256-bit vpmaddubsw / vpmaddwd). */
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

/* ---- K-quants (Q4_K, Q5_K, Q6_K) -------------------------------------------------------------
 * Per output and super-block s, two integers, exact whatever order they are summed in:
 *   U_s = sum over the sub-blocks j of sc_j x (W codes . x codes over sub-block j)
 *   M_s = sum over the groups h of 16 values of mn_h x (x's code sum over group h)
 * (Q4_K/Q5_K: sub-blocks of 32 with 6-bit scales sc_j, mn_h = the min of the sub-block holding
 * group h; Q6_K: sub-blocks of 16, mn_h = sc_h, its offset of -32 in dm), then one float chain
 * over the super-blocks:
 *   acc = fma(float(U_s), d_s * dx_s, acc);  acc = fma(float(M_s), dm_s * dx_s, acc)
 * with dm = -dmin (Q4_K/Q5_K) or -32 d (Q6_K). Decode computes U and M from the raw blocks,
 * prefill with sixteen W rows in the lanes: the same bits. Bounds (x codes within +-127):
 * |U| <= 16 x 128 x 16 x 63 x 127 < 2^31 (Q6_K; Q5_K: 8 x 63 x 32 x 31 x 127), |M| < 2^23.
 * x's group sums are exact integers for the SIMD K-quant code (this level and the AVX2 one):
 * skv_act_rows_k_int writes them into the activation row in place of the float sums. */

/* Two 256-bit halves as one register. */
static inline __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* A K-quant super-block unpacked for integer dots: code[c] = 64 unsigned codes; sc[c] = per pair
 * of values (one 16-bit lane of vpmaddubsw's result) the integer scale of the sub-block those
 * values are in; mn = mn_h of the 16 groups (16-bit); d, dm as above.
 * Which values code[c] holds is what 512-bit loads of the block give most cheaply:
 *   Q6_K: values [64c, 64c + 64) in order.
 *   Q4_K/Q5_K: a 64-byte load of qs holds 4 sub-blocks' nibbles, so code[c] holds values
 *   [32q, 32q + 32) ++ [32q + 64, 32q + 96) with q = 4 (c / 2) + c % 2 (the low nibbles of
 *   chunks c and c + 1, or their high nibbles). x is reordered to match
 *   (skv_act_rows_k_int): "K order". */
typedef struct kblock {
    __m512i code[4];
    __m512i sc[4];
    __m256i mn;
    float d, dm;
} kblock;

/* The 16-bit scales of chunk c: words 0-15 get element e of s16, words 16-31 element f (a
 * Q4_K/Q5_K chunk holds two sub-blocks of 32 values). */
static inline __m512i two_words(__m256i s16, int e, int f) {
    return _mm512_permutexvar_epi16(
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)e)),
                           _mm256_set1_epi16((short)f), 1),
        _mm512_castsi256_si512(s16));
}

/* Q4_K/Q5_K's 12 packed scale bytes (16 may be read) as 16 bytes: the 8 six-bit scales, then
 * the 8 mins; in each 128-bit lane of u (four blocks at once in decode). j < 4: scale s[j] & 63,
 * min s[j + 4] & 63; j >= 4: the low 4 bits from the nibbles of s[j + 4] (scales low, mins
 * high), the top 2 from the top bits of s[j - 4] / s[j]. */
static inline __m512i k4_scales_x4(__m512i u) {
    const __m512i lo = _mm512_shuffle_epi8(
        u,
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
    const __m512i low = _mm512_or_si512(
        _mm512_and_si512(lo, _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15,
                                                                  63, 63, 63, 63, 0, 0, 0, 0))),
        _mm512_and_si512(_mm512_srli_epi16(lo, 4),
                         _mm512_broadcast_i32x4(
                             _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15))));
    const __m512i top =
        _mm512_shuffle_epi8(u, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1,
                                                                    -1, -1, -1, 4, 5, 6, 7)));
    return _mm512_or_si512(low,
                           _mm512_and_si512(_mm512_srli_epi16(top, 2), _mm512_set1_epi8(0x30)));
}

static inline __m128i k4_scales16(const uint8_t *s) {
    return _mm512_castsi512_si128(
        k4_scales_x4(_mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)s))));
}

/* sm: Q4_K/Q5_K's scales and mins as k4_scales16 gives them (unused for Q6_K). */
INLINE void unpack_k_sm(const uint8_t *b, skv_type t, __m128i sm, kblock *k) {
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
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        /* groups of 16 values: 8 words each */
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            k->sc[c] = _mm512_permutexvar_epi16(
                _mm512_add_epi16(_mm512_set1_epi16((short)(4 * c)),
                                 _mm512_setr_epi64(0, 0, 0x0001000100010001ll, 0x0001000100010001ll,
                                                   0x0002000200020002ll, 0x0002000200020002ll,
                                                   0x0003000300030003ll, 0x0003000300030003ll)),
                _mm512_castsi256_si512(s16));
        k->mn = s16;
        k->d = d;
        k->dm = -32.0f * d;
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
    /* the 8 scales and 8 mins, sc = [0..8), m = [8..16) */
    const __m256i s16 = _mm256_cvtepu8_epi16(sm);
    /* sub-blocks of 32 values: 16 words each; code[c] holds sub-blocks q and q + 2 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        k->sc[c] = two_words(s16, 4 * (c / 2) + c % 2, 4 * (c / 2) + c % 2 + 2);
    k->mn = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    k->d = ld_f16(b);
    k->dm = -ld_f16(b + 2);
}

INLINE void unpack_k(const uint8_t *b, skv_type t, kblock *k) {
    unpack_k_sm(b, t, t == SKV_TYPE_Q6_K ? _mm_setzero_si128() : k4_scales16(b + 4), k);
}

/* x's 16 group sums of super-block s as 16-bit words. */
static inline __m256i xsums16(act_row a, int s) {
    return _mm512_cvtepi32_epi16(_mm512_loadu_si512(a.s + 16 * s));
}

/* U's sum over 64 values: pairs of code x x (vpmaddubsw, exact in 16 bits: 2 x 63 x 127)
 * times the 16-bit scale (vpdpwssd). */
INLINE __m512i k_dot(__m512i u, __m512i code, __m512i x, __m512i sc) {
    return _mm512_dpwssd_epi32(u, _mm512_maddubs_epi16(code, x), sc);
}

/* Decode: NW = 4 raw rows w[] (nb super-blocks each) . one activation row, their U and M side
 * by side into k_chain4 (quant_x86.h). */
#define NW 4
INLINE void dot_raw(skv_type t, const uint8_t *const *w, act_row a, int nb, float *y) {
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    const int q6 = t == SKV_TYPE_Q6_K;
    /* (d, dm) from the f16 pairs (Q4_K/Q5_K: d, dmin; Q6_K: d, d), exactly as unpack_k */
    const __m256 dm_mul = _mm256_setr_ps(1, q6 ? -32.0f : -1.0f, 1, q6 ? -32.0f : -1.0f, 1,
                                         q6 ? -32.0f : -1.0f, 1, q6 ? -32.0f : -1.0f);
    __m256 acc = _mm256_setzero_ps();
    for (int s = 0; s < nb; s++) {
        const int8_t *xq = a.q + 256 * s;
        const __m256i xs = xsums16(a, s);
        __m256i v[8];
        uint32_t dd[NW];
        __m512i sm4 = _mm512_setzero_si512(); /* the NW rows' scales and mins, a lane each */
        if (!q6) {
            __m512i u =
                _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w[0] + s * bb + 4)));
            u = _mm512_inserti32x4(u, _mm_loadu_si128((const __m128i *)(w[1] + s * bb + 4)), 1);
            u = _mm512_inserti32x4(u, _mm_loadu_si128((const __m128i *)(w[2] + s * bb + 4)), 2);
            u = _mm512_inserti32x4(u, _mm_loadu_si128((const __m128i *)(w[3] + s * bb + 4)), 3);
            sm4 = k4_scales_x4(u);
        }
        const __m128i sm[NW] = {_mm512_castsi512_si128(sm4), _mm512_extracti32x4_epi32(sm4, 1),
                                _mm512_extracti32x4_epi32(sm4, 2),
                                _mm512_extracti32x4_epi32(sm4, 3)};
#pragma GCC unroll 4
        for (int k = 0; k < NW; k++) {
            const uint8_t *blk = w[k] + (size_t)s * bb;
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) /* the row's block ahead: 144-210 bytes */
                SKV_PREFETCH_AHEAD(blk, 64 * l);
            kblock kb;
            unpack_k_sm(blk, t, sm[k], &kb);
            __m512i u = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                u = k_dot(u, kb.code[c], _mm512_loadu_si512(xq + 64 * c), kb.sc[c]);
            v[2 * k] = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
            v[2 * k + 1] = _mm256_madd_epi16(kb.mn, xs);
            if (q6) {
                uint16_t h;
                memcpy(&h, blk + 208, 2);
                dd[k] = h | (uint32_t)h << 16;
            } else {
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

/* Prefill: sixteen W rows in the lanes (a "hexad", as for Q8_0 below), their codes transposed
 * once per column block so that one 64-byte load holds 4 codes of each row; x codes broadcast
 * 4 at a time (vpdpbusd: unsigned W codes . signed x codes); per sub-block the 16 rows' sums
 * times their scales (vpmulld) into U; M by vpdpwssd of pairs of mn against pairs of x's
 * sub-block sums (Q4_K/Q5_K) or group sums (Q6_K). */
#define MRK 4  /* x rows per tile */
#define NOK 2  /* hexads per tile (32 W rows) */
#define KBK 2  /* super-blocks per prepared column block: two hexads are 23 KB */
#define MCK 96 /* x rows per row block */
_Static_assert(NOK <= 2, "k16_ahead holds two groups");

typedef struct prep_k16 {
    uint8_t q[KBK * 4096] ALIGNED64; /* [sb][group g of 4 codes (64)][row k][4], K order */
    int32_t sc[KBK * 256] ALIGNED64; /* [sb][sub-block j (8 or 16)][row k] */
    int32_t mn[KBK * 128] ALIGNED64; /* [sb][pair p][row k]: mn_2p, mn_2p+1 as 16-bit words, of
                                      * sub-blocks (Q4_K/Q5_K, p < 4) or groups of 16 (Q6_K) */
    float d[KBK * 16] ALIGNED64;     /* [sb][row k] */
    float dm[KBK * 16] ALIGNED64;    /* [sb][row k] */
} prep_k16;

/* Prepares super-blocks [b0, b0 + nb) of 16 rows w[0..16). Q4_K/Q5_K codes are in K order, so
 * 32-code chunk j of the block is sub-block kperm[j]. */
INLINE void prep_k16_fill(prep_k16 *p, const uint8_t *const *w, skv_type t, int b0, int nb) {
    static const int kperm[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    const int q6 = t == SKV_TYPE_Q6_K;
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    for (int s = 0; s < nb; s++) {
        uint8_t codes[16][256] ALIGNED64;
        int16_t sc[16][16], mn[16][16];
        for (int k = 0; k < 16; k++) {
            const uint8_t *blk = w[k] + (size_t)(b0 + s) * bb;
            kblock kb;
            unpack_k(blk, t, &kb);
            for (int c = 0; c < 4; c++) _mm512_store_si512(codes[k] + 64 * c, kb.code[c]);
            _mm256_storeu_si256((__m256i *)mn[k], kb.mn);
            if (q6) {
                for (int j = 0; j < 16; j++) sc[k][j] = ((const int8_t *)blk)[192 + j];
            } else {
                uint8_t sm[16];
                _mm_storeu_si128((__m128i *)sm, k4_scales16(blk + 4));
                for (int j = 0; j < 8; j++) sc[k][j] = sm[kperm[j]];
            }
            p->d[16 * s + k] = kb.d;
            p->dm[16 * s + k] = kb.dm;
        }
        for (int j = 0; j < 8; j++) { /* transpose8 moves 32-bit lanes: codes pass as they are */
            __m256 lo[8], hi[8];
            for (int k = 0; k < 8; k++) {
                lo[k] = _mm256_load_ps((const float *)(codes[k] + 32 * j));
                hi[k] = _mm256_load_ps((const float *)(codes[k + 8] + 32 * j));
            }
            transpose8(lo);
            transpose8(hi);
            for (int g = 0; g < 8; g++)
                _mm512_store_si512(p->q + 4096 * s + 512 * j + 64 * g,
                                   join(_mm256_castps_si256(lo[g]), _mm256_castps_si256(hi[g])));
        }
        for (int j = 0; j < (q6 ? 16 : 8); j++)
            for (int k = 0; k < 16; k++) p->sc[256 * s + 16 * j + k] = sc[k][j];
        const int pw = q6 ? 1 : 2; /* Q4_K/Q5_K: kb.mn has each sub-block's min twice */
        for (int q = 0; q < (q6 ? 8 : 4); q++)
            for (int k = 0; k < 16; k++)
                p->mn[128 * s + 16 * q + k] =
                    (int32_t)((uint32_t)(uint16_t)mn[k][2 * pw * q] |
                              (uint32_t)(uint16_t)mn[k][2 * pw * q + pw] << 16);
    }
}

/* ---- Q4_K in k16 records (skv_k16_pack): what prep_k16_fill does, done at load ----------------
 */

/* prep_k16_fill from the records of group g: the nibbles split, the scales widened. */
static void prep_k16_from_rec(prep_k16 *p, const skv_mm *mm, int g, int b0, int nb) {
    const __m512i m4 = _mm512_set1_epi8(15), k16 = _mm512_set1_epi8(16);
    const bool q5 = mm->wt == SKV_TYPE_Q5_K;
    for (int s = 0; s < nb; s++) {
        const uint8_t *rec = k16_rec(mm, g, b0 + s);
        for (int j = 0; j < 8; j++) {
            for (int gp = 0; gp < 4; gp++) {
                const __m512i v = _mm512_loadu_si512(rec + SKV_K16_Q + 256 * j + 64 * gp);
                __m512i lo = _mm512_and_si512(v, m4),
                        hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (q5) { /* the fifth bits (kernels.h) */
                    uint64_t hl, hh;
                    memcpy(&hl, rec + SKV_K16_Q5K_H + 16 * (4 * j + gp), 8);
                    memcpy(&hh, rec + SKV_K16_Q5K_H + 16 * (4 * j + gp) + 8, 8);
                    lo = _mm512_mask_add_epi8(lo, (__mmask64)hl, lo, k16);
                    hi = _mm512_mask_add_epi8(hi, (__mmask64)hh, hi, k16);
                }
                _mm512_store_si512(p->q + 4096 * s + 512 * j + 64 * gp, lo);
                _mm512_store_si512(p->q + 4096 * s + 512 * j + 64 * (gp + 4), hi);
            }
            _mm512_store_si512(p->sc + 256 * s + 16 * j,
                               _mm512_cvtepu8_epi32(
                                   _mm_loadu_si128((const __m128i *)(rec + SKV_K16_SC + 16 * j))));
        }
        for (int q = 0; q < 4; q++) /* the records' pairs (mn_2q, mn_2q+1) of each row, widened */
            _mm512_store_si512(p->mn + 128 * s + 16 * q,
                               _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                                   (const __m256i *)(rec + SKV_K16_MN + 32 * q))));
        _mm512_store_ps(p->d + 16 * s,
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_D))));
        _mm512_store_ps(p->dm + 16 * s, _mm512_mul_ps(_mm512_set1_ps(-1.0f),
                                                      _mm512_cvtph_ps(_mm256_loadu_si256(
                                                          (const __m256i *)(rec + SKV_K16_DMIN)))));
    }
}

/* prep_k16_fill's Q6_K hexads from Q3_K records (kernels.h), as the AVX2 level's prep_hk_q6rec:
 * a pair's vectors 2G and 2G + 1 hold codes 4G..4G+3 of its two groups, 2 of each in a row's
 * lane (the low words of the two make group 2p's 4 codes, the high words group 2p + 1's); the
 * Q6_K codes of the same values (q3_rec_codes), so the Q6_K tiles and the same bits. */
static void prep_k16_from_q3rec(prep_k16 *p, const skv_mm *mm, int g16, int b0, int nb) {
    for (int s = 0; s < nb; s++) {
        const uint8_t *rec = q6_rec(mm, g16, b0 + s);
        uint8_t *q = p->q + 4096 * s;
        for (int pp = 0; pp < 8; pp++) {
            const uint8_t *pr = rec + SKV_K16_Q3_PAIR * pp;
            for (int h = 0; h < 2; h++) {
                __m256i v[8];
                for (int jj = 0; jj < 4; jj++) q3_rec_codes(pr, h, jj, &v[jj], &v[jj + 4]);
                rec_pair_to_k_order(v, q + 512 * pp + 32 * h);
                /* row k's (sc_2p, sc_2p+1): the M pair as it is, each scale as an int32 */
                const __m256i sc = _mm256_cvtepi8_epi16(
                    _mm_loadu_si128((const __m128i *)(pr + SKV_K16_Q3_SC + 16 * h)));
                _mm256_store_si256((__m256i *)(p->mn + 128 * s + 16 * pp + 8 * h), sc);
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp) + 8 * h),
                                   _mm256_srai_epi32(_mm256_slli_epi32(sc, 16), 16));
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp + 1) + 8 * h),
                                   _mm256_srai_epi32(sc, 16));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q3_D)));
        _mm512_store_ps(p->d + 16 * s, d);
        _mm512_store_ps(p->dm + 16 * s, _mm512_mul_ps(_mm512_set1_ps(-32.0f), d));
    }
}

/* The same from Q2_K records (kernels.h), as the AVX2 level's prep_hk_q2rec: the codes (0..3) in
 * K order, each group's scale as an int32, the mins' pairs as M's, dm = -dmin. */
static void prep_k16_from_q2rec(prep_k16 *p, const skv_mm *mm, int g16, int b0, int nb) {
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
                                   _mm256_and_si256(sc, _mm256_set1_epi32(0xffff)));
                _mm256_store_si256((__m256i *)(p->sc + 256 * s + 16 * (2 * pp + 1) + 8 * h),
                                   _mm256_srli_epi32(sc, 16));
            }
        }
        _mm512_store_ps(p->d + 16 * s,
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q2_D))));
        _mm512_store_ps(
            p->dm + 16 * s,
            _mm512_mul_ps(_mm512_set1_ps(-1.0f), _mm512_cvtph_ps(_mm256_loadu_si256(
                                                     (const __m256i *)(rec + SKV_K16_Q2_DMIN)))));
    }
}

/* ---- Q3_K records' decode ----------------------------------------------------------------------
 * The AVX2 code's (gemv_q6_rec, Q3_K) with both octets in one register: a pair's scales and planes
 * lie as [octet 0 | octet 1], so each load, shift and product serves the 16 rows, and vpdpwssd
 * takes the scales. The same integers and, per row, the same float chain: the same bits. */

/* The third bit of each byte of v, bit b (0..7), at bit 2 (q3_third's 512-bit twin). */
INLINE __m512i q3_third512(__m512i v, int b) {
    const __m512i s = b <= 2 ? _mm512_slli_epi16(v, 2 - b) : _mm512_srli_epi16(v, b - 2);
    return _mm512_and_si512(s, _mm512_set1_epi8(4));
}

INLINE __m512 q3_rec_step(const uint8_t *rec, const int8_t *xr, const int32_t *xp, float dx,
                          __m512 acc) {
    const __m512i m2 = _mm512_set1_epi8(3);
    __m512i u = _mm512_setzero_si512(), mm = u;
#pragma GCC unroll 2
    for (int p = 0; p < 8; p++) {
        const uint8_t *pr = rec + SKV_K16_Q3_PAIR * p;
        const __m512i sc =
            _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q3_SC)));
        mm = _mm512_dpwssd_epi32(mm, sc, _mm512_set1_epi32(xp[p]));
        const __m512i la = _mm512_loadu_si512(pr + SKV_K16_Q3_LO);
        const __m512i lb = _mm512_loadu_si512(pr + SKV_K16_Q3_LO + 64);
        const __m512i hi = _mm512_loadu_si512(pr + SKV_K16_Q3_HI);
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; jj++) {
            SKV_PREFETCH_AHEAD(pr, 64 * jj); /* 4 lines ahead per 224-byte pair */
            const __m512i ca = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(la, 2 * jj), m2),
                                               q3_third512(hi, jj));
            const __m512i cb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lb, 2 * jj), m2),
                                               q3_third512(hi, jj + 4));
            int32_t xa, xb;
            memcpy(&xa, xr + 32 * p + 4 * jj, 4);
            memcpy(&xb, xr + 32 * p + 4 * (jj + 4), 4);
            const __m512i t = _mm512_add_epi16(_mm512_maddubs_epi16(ca, _mm512_set1_epi32(xa)),
                                               _mm512_maddubs_epi16(cb, _mm512_set1_epi32(xb)));
            u = _mm512_dpwssd_epi32(u, t, sc);
        }
    }
    /* the codes + 28 more are Q6_K's: U + 28 M, then as k_chain4 */
    u = _mm512_add_epi32(u, _mm512_mullo_epi32(mm, _mm512_set1_epi32(28)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q3_D)));
    const __m512 vdx = _mm512_set1_ps(dx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(d, vdx), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(mm),
                           _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(-32.0f)), vdx), acc);
}

/* ---- Q2_K records' decode: the AVX2 code's (q2_step) with both octets in one register, as
 * q3_rec_step; the same integers and float chain, the same bits. */
INLINE __m512 q2_rec_step(const uint8_t *rec, const int8_t *xr, const int32_t *xp, float dx,
                          __m512 acc) {
    const __m512i m2 = _mm512_set1_epi8(3);
    const __m256i m4 = _mm256_set1_epi8(15);
    __m512i u = _mm512_setzero_si512(), mm = u;
#pragma GCC unroll 2
    for (int p = 0; p < 8; p++) {
        const uint8_t *pr = rec + SKV_K16_Q2_PAIR * p;
        SKV_PREFETCH_AHEAD(pr, 0); /* 3 lines ahead per 160-byte pair */
        SKV_PREFETCH_AHEAD(pr, 64);
        SKV_PREFETCH_AHEAD(pr, 128);
        const __m256i scm = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q2_SCM));
        const __m512i sc = _mm512_cvtepu8_epi16(_mm256_and_si256(scm, m4));
        const __m512i mn = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(scm, 4), m4));
        mm = _mm512_dpwssd_epi32(mm, mn, _mm512_set1_epi32(xp[p]));
        const __m512i la = _mm512_loadu_si512(pr + SKV_K16_Q2_LO);
        const __m512i lb = _mm512_loadu_si512(pr + SKV_K16_Q2_LO + 64);
        __m512i t = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; jj++) {
            const __m512i ca = _mm512_and_si512(_mm512_srli_epi16(la, 2 * jj), m2);
            const __m512i cb = _mm512_and_si512(_mm512_srli_epi16(lb, 2 * jj), m2);
            int32_t xa, xb;
            memcpy(&xa, xr + 32 * p + 4 * jj, 4);
            memcpy(&xb, xr + 32 * p + 4 * (jj + 4), 4);
            t = _mm512_add_epi16(t,
                                 _mm512_add_epi16(_mm512_maddubs_epi16(ca, _mm512_set1_epi32(xa)),
                                                  _mm512_maddubs_epi16(cb, _mm512_set1_epi32(xb))));
        }
        u = _mm512_dpwssd_epi32(u, t, sc);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q2_D)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q2_DMIN)));
    const __m512 vdx = _mm512_set1_ps(dx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_mul_ps(d, vdx), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(mm),
                           _mm512_mul_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(-1.0f)), vdx), acc);
}

/* Decode from Q3_K or Q2_K records (q6 has wt Q6_K and w_rec Q3_K or Q2_K). */
INLINE void gemv_q3_q2_rec_t(const skv_mm *mm, int i0, int i1, int r0, int r1, bool q2) {
    const int nsb = mm->n_in / 256;
    q6_x x;
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 256);
        float *y = mm->y + (size_t)i * mm->n_out;
        q6_x_row(&x, a, nsb);
        for (int g = r0 / 16; 16 * g < r1; g++) {
            __m512 acc = _mm512_setzero_ps();
            for (int s = 0; s < nsb; s++) {
                const int8_t *xr;
                const int32_t *xp;
                q6_x_at(&x, a, s, &xr, &xp);
                acc = q2 ? q2_rec_step(q6_rec(mm, g, s), xr, xp, a.d[s], acc)
                         : q3_rec_step(q6_rec(mm, g, s), xr, xp, a.d[s], acc);
            }
            _mm512_mask_storeu_ps(y + 16 * g, lanes(r1 - 16 * g), acc);
        }
    }
}

static void gemv_q3_q2_rec(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->w_rec == SKV_TYPE_Q2_K)
        gemv_q3_q2_rec_t(mm, i0, i1, r0, r1, true);
    else
        gemv_q3_q2_rec_t(mm, i0, i1, r0, r1, false);
}

/* mr x rows times NOK hexads over super-blocks [b0, b0 + nb) of x (the hexads start at b0). */
INLINE void tile_k16(int mr, skv_type t, const act_row *a, int b0, const prep_k16 *const *p, int nb,
                     __m512 acc[MRK][NOK]) {
    const int q6 = t == SKV_TYPE_Q6_K, nsub = q6 ? 16 : 8, gs = q6 ? 4 : 8;
    for (int s = 0; s < nb; s++) {
        const int xo = 256 * (b0 + s);
        __m512i u[MRK][NOK];
#pragma GCC unroll 4
        for (int i = 0; i < MRK; i++)
#pragma GCC unroll 2
            for (int c = 0; c < NOK; c++) u[i][c] = _mm512_setzero_si512();
        for (int j = 0; j < nsub; j++) {
            __m512i v[MRK][NOK];
#pragma GCC unroll 4
            for (int i = 0; i < MRK; i++)
#pragma GCC unroll 2
                for (int c = 0; c < NOK; c++) v[i][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < gs; g++) {
                __m512i wv[NOK];
#pragma GCC unroll 2
                for (int c = 0; c < NOK; c++)
                    wv[c] = _mm512_load_si512(p[c]->q + 4096 * s + 64 * (gs * j + g));
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    int32_t x4;
                    memcpy(&x4, a[i].q + xo + 4 * (gs * j + g), 4);
                    const __m512i x = _mm512_set1_epi32(x4);
#pragma GCC unroll 2
                    for (int c = 0; c < NOK; c++) v[i][c] = _mm512_dpbusd_epi32(v[i][c], wv[c], x);
                }
            }
#pragma GCC unroll 2
            for (int c = 0; c < NOK; c++) {
                const __m512i sc = _mm512_load_si512(p[c]->sc + 256 * s + 16 * j);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++)
                    u[i][c] = _mm512_add_epi32(u[i][c], _mm512_mullo_epi32(v[i][c], sc));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            /* M: each x pair broadcast in-lane from a register (vpshufd), not stored and
             * loaded back (-10%) */
            __m256i xl[2];
            k_xpairs_lanes(a[i], b0 + s, q6, xl);
            const __m512i x0 = _mm512_broadcast_i32x4(_mm256_castsi256_si128(xl[0]));
            const __m512i x1 = q6 ? _mm512_broadcast_i32x4(_mm256_castsi256_si128(xl[1])) : x0;
            __m512i m[NOK];
            for (int c = 0; c < NOK; c++) m[c] = _mm512_setzero_si512();
#define MN_PAIR(q, xv, imm)                                                                        \
    do {                                                                                           \
        const __m512i xb = _mm512_shuffle_epi32(xv, imm);                                          \
        for (int c = 0; c < NOK; c++)                                                              \
            m[c] =                                                                                 \
                _mm512_dpwssd_epi32(m[c], _mm512_load_si512(p[c]->mn + 128 * s + 16 * (q)), xb);   \
    } while (0)
            MN_PAIR(0, x0, _MM_PERM_AAAA);
            if (q6) {
                MN_PAIR(1, x0, _MM_PERM_BBBB);
                MN_PAIR(2, x0, _MM_PERM_CCCC);
                MN_PAIR(3, x0, _MM_PERM_DDDD);
                MN_PAIR(4, x1, _MM_PERM_AAAA);
                MN_PAIR(5, x1, _MM_PERM_BBBB);
                MN_PAIR(6, x1, _MM_PERM_CCCC);
                MN_PAIR(7, x1, _MM_PERM_DDDD);
            } else { /* lanes hold pairs 0 2 1 3 */
                MN_PAIR(1, x0, _MM_PERM_CCCC);
                MN_PAIR(2, x0, _MM_PERM_BBBB);
                MN_PAIR(3, x0, _MM_PERM_DDDD);
            }
#undef MN_PAIR
            const __m512 dx = _mm512_set1_ps(a[i].d[b0 + s]);
#pragma GCC unroll 2
            for (int c = 0; c < NOK; c++) {
                acc[i][c] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(u[i][c]),
                                    _mm512_mul_ps(_mm512_load_ps(p[c]->d + 16 * s), dx), acc[i][c]);
                acc[i][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m[c]),
                                            _mm512_mul_ps(_mm512_load_ps(p[c]->dm + 16 * s), dx),
                                            acc[i][c]);
            }
        }
    }
}

/* An mr-row tile over one column block, continuing from (or starting) the saved lanes (save:
 * [mr][NOK]); after the last block it stores the nr (1..32) valid W rows' outputs. */
INLINE void tile_k16_step(int mr, skv_type t, const skv_mm *mm, int i, int r, int nr,
                          const prep_k16 *const *p, int b0, int nb, int first, int last,
                          __m512 *save) {
    __m512 acc[MRK][NOK];
    act_row a[MRK];
    for (int ii = 0; ii < mr; ii++) {
        a[ii] = act_at(mm, i + ii, 256);
        for (int c = 0; c < NOK; c++) acc[ii][c] = first ? _mm512_setzero_ps() : save[ii * NOK + c];
    }
    tile_k16(mr, t, a, b0, p, nb, acc);
    for (int ii = 0; ii < mr; ii++)
        for (int c = 0; c < NOK; c++) {
            if (!last)
                save[ii * NOK + c] = acc[ii][c];
            else if (16 * c < nr)
                _mm512_mask_storeu_ps(mm->y + (size_t)(i + ii) * mm->n_out + r + 16 * c,
                                      lanes(nr - 16 * c), acc[ii][c]);
        }
}

/* Blocks of MCK x rows; for each 32 W rows and each column block of KBK super-blocks, the two
 * hexads are prepared once and serve every tile of the x block. t is a constant after
 * inlining. */
INLINE void gemm_k16(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    prep_k16 prep[NOK];
    __m512 save[MCK * NOK];
    const int nblk = mm->n_in / 256, nkb = (nblk + KBK - 1) / KBK;
    for (int mc0 = i0; mc0 < i1; mc0 += MCK) {
        const int mc1 = i1 - mc0 < MCK ? i1 : mc0 + MCK;
        for (int r = r0; r < r1; r += 16 * NOK) {
            const int nr = r1 - r < 16 * NOK ? r1 - r : 16 * NOK, no = (nr + 15) / 16;
            const prep_k16 *p[NOK];
            for (int c = 0; c < NOK; c++) p[c] = &prep[c < no ? c : no - 1];
            for (int kb = 0; kb < nkb; kb++) {
                const int b0 = kb * KBK, nb = nblk - b0 < KBK ? nblk - b0 : KBK;
                for (int c = 0; c < no; c++) {
                    if (mm->w_k16) { /* r is a multiple of 16 */
                        if (mm->w_rec == SKV_TYPE_Q3_K)
                            prep_k16_from_q3rec(&prep[c], mm, r / 16 + c, b0, nb);
                        else if (mm->w_rec == SKV_TYPE_Q2_K)
                            prep_k16_from_q2rec(&prep[c], mm, r / 16 + c, b0, nb);
                        else
                            prep_k16_from_rec(&prep[c], mm, r / 16 + c, b0, nb);
                        continue;
                    }
                    const uint8_t *w[16];
                    lane_rows(mm, r + 16 * c, r + nr, 16, w);
                    prep_k16_fill(&prep[c], w, t, b0, nb);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                /* w_k16 here means Q4_K, Q5_K, or Q3_K / Q2_K records under the Q6_K code
                 * (Q6_K's own records are unpacked at this level) */
                const size_t rb = t == SKV_TYPE_Q6_K   ? q6_rec_bytes(mm)
                                  : t == SKV_TYPE_Q5_K ? SKV_K16_Q5K_RECORD
                                                       : SKV_K16_RECORD;
                k16_ahead ah = k16_ahead_next(mm, mc0, MCK, i1, r, NOK, r0, r1, kb, nkb, KBK, rb,
                                              256, (mc1 - mc0) / MRK);
                int i = mc0;
                for (; i + MRK <= mc1; i += MRK) {
                    k16_ahead_some(&ah);
                    tile_k16_step(MRK, t, mm, i, r, nr, p, b0, nb, first, last,
                                  save + (size_t)(i - mc0) * NOK);
                }
                __m512 *sv = save + (size_t)(i - mc0) * NOK;
                switch (mc1 - i) {
                case 3:
                    tile_k16_step(3, t, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                case 2:
                    tile_k16_step(2, t, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                case 1:
                    tile_k16_step(1, t, mm, i, r, nr, p, b0, nb, first, last, sv);
                    break;
                default:
                    break;
                }
            }
        }
    }
}

/* Decode from k16 records: sixteen rows in the lanes as in prefill, read as they lie; per
 * sub-block 8 vpdpbusd of the nibbles against 4 broadcast x codes, times the 16 scales. One
 * super-block of ns groups (1, or the K16_STREAMS a thread reads at once; a constant after
 * inlining), each x broadcast serving all of them (as K16_STREAMS inlined one-group steps, the
 * compiler hoisted the 64 broadcasts and spilled them: a store each and a reload per vpdpbusd).
 * pf: each line asked for skv_k16_ahead_cpu bytes ahead. */
INLINE void k16_steps(int ns, const uint8_t *const *rec, const int8_t *xq, const int32_t *xp,
                      __m512 dx, __m512 *acc, bool pf, bool q5) {
    const __m512i m4 = _mm512_set1_epi8(15), k16 = _mm512_set1_epi8(16);
    __m512i u[K16_STREAMS];
#pragma GCC unroll 4
    for (int q = 0; q < ns; q++) u[q] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int j = 0; j < 8; j++) {
        __m512i t0[K16_STREAMS], t1[K16_STREAMS];
#pragma GCC unroll 4
        for (int q = 0; q < ns; q++) {
            /* the scales, mins and d: lines 32-36 of 37 (Q5_K: lines 32-44 of 45, the fifth bits
             * from 37) */
            if (pf) SKV_PREFETCH_AT(rec[q], skv_k16_ahead_cpu + 2048 + 64 * j);
            if (pf && q5 && j < 5) SKV_PREFETCH_AT(rec[q], skv_k16_ahead_cpu + 2560 + 64 * j);
            t0[q] = t1[q] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int gp = 0; gp < 4; gp++) {
            int32_t x0, x1;
            memcpy(&x0, xq + 32 * j + 4 * gp, 4);
            memcpy(&x1, xq + 32 * j + 4 * gp + 16, 4);
            const __m512i b0 = _mm512_set1_epi32(x0), b1 = _mm512_set1_epi32(x1);
#pragma GCC unroll 4
            for (int q = 0; q < ns; q++) {
                if (pf) SKV_PREFETCH_AT(rec[q], skv_k16_ahead_cpu + 256 * j + 64 * gp);
                const __m512i v = _mm512_loadu_si512(rec[q] + SKV_K16_Q + 256 * j + 64 * gp);
                __m512i lo = _mm512_and_si512(v, m4),
                        hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (q5) { /* the fifth bits: 16 added where set (kernels.h) */
                    uint64_t hl, hh;
                    memcpy(&hl, rec[q] + SKV_K16_Q5K_H + 16 * (4 * j + gp), 8);
                    memcpy(&hh, rec[q] + SKV_K16_Q5K_H + 16 * (4 * j + gp) + 8, 8);
                    lo = _mm512_mask_add_epi8(lo, (__mmask64)hl, lo, k16);
                    hi = _mm512_mask_add_epi8(hi, (__mmask64)hh, hi, k16);
                }
                t0[q] = _mm512_dpbusd_epi32(t0[q], lo, b0);
                t1[q] = _mm512_dpbusd_epi32(t1[q], hi, b1);
            }
        }
#pragma GCC unroll 4
        for (int q = 0; q < ns; q++)
            u[q] = _mm512_add_epi32(
                u[q], _mm512_mullo_epi32(_mm512_add_epi32(t0[q], t1[q]),
                                         _mm512_cvtepu8_epi32(_mm_loadu_si128(
                                             (const __m128i *)(rec[q] + SKV_K16_SC + 16 * j)))));
    }
    __m512i mn[K16_STREAMS];
#pragma GCC unroll 4
    for (int q = 0; q < ns; q++) mn[q] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m512i b = _mm512_set1_epi32(xp[p]);
#pragma GCC unroll 4
        for (int q = 0; q < ns; q++)
            mn[q] = _mm512_dpwssd_epi32(mn[q],
                                        _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                                            (const __m256i *)(rec[q] + SKV_K16_MN + 32 * p))),
                                        b);
    }
#pragma GCC unroll 4
    for (int q = 0; q < ns; q++) {
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec[q] + SKV_K16_D)));
        const __m512 dm = _mm512_mul_ps(
            _mm512_set1_ps(-1.0f),
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec[q] + SKV_K16_DMIN))));
        acc[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u[q]), _mm512_mul_ps(d, dx), acc[q]);
        acc[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mn[q]), _mm512_mul_ps(dm, dx), acc[q]);
    }
}

/* With streams (mm->k16_prefetch) the rows' groups in 4 quarters read at once (K16_STREAMS,
 * quant_x86.h), each line asked for skv_k16_ahead_cpu bytes ahead; without, one group after the
 * other on the hardware prefetcher. AMX Xeon, llama-3.2-1b Q4_K tg at 2 threads: one stream
 * without prefetch 38.4 t/s, with it 37-38; 2 streams 43-46, 4 streams 49.3, 8 streams 39; 4
 * streams with 2048 / 4096 bytes ahead 45 / 40: so 1 KB on Intel, 2 KB on Zen 3-5 (measured on
 * Zen 5), 3 KB on Zen 1-2 (at the AVX2 level): kernels.c, k16_ahead_for. (Those streams ran
 * K16_STREAMS inlined one-group steps, which spilled the x broadcasts; k16_steps shares them: Zen
 * 5, 1 thread, 512 x 2048 from L2 65 -> 108 GB/s, 8192 x 2048 from L3 42 -> 84.) */
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
            __m512 acc[K16_STREAMS];
            for (int q = 0; q < K16_STREAMS; q++) acc[q] = _mm512_setzero_ps();
            for (int s = 0; s < nsb; s++) {
                int32_t one[8];
                if (!pre) k_xpairs(a, s, 0, one);
                const __m512 dx = _mm512_set1_ps(a.d[s]);
                const uint8_t *rec[K16_STREAMS];
                for (int q = 0; q < K16_STREAMS; q++) rec[q] = k16_rec(mm, ga + q * h + j, s);
                k16_steps(K16_STREAMS, rec, a.q + 256 * s, pre ? xp[s] : one, dx, acc, true, q5);
            }
            for (int q = 0; q < K16_STREAMS; q++) {
                const int g = ga + q * h + j;
                _mm512_mask_storeu_ps(y + 16 * g, lanes(r1 - 16 * g), acc[q]);
            }
        }
        for (int g = ga + K16_STREAMS * h; 16 * g < r1; g++) {
            __m512 acc = _mm512_setzero_ps();
            for (int s = 0; s < nsb; s++) {
                int32_t one[8];
                if (!pre) k_xpairs(a, s, 0, one);
                const uint8_t *rec = k16_rec(mm, g, s);
                k16_steps(1, &rec, a.q + 256 * s, pre ? xp[s] : one, _mm512_set1_ps(a.d[s]), &acc,
                          streams, q5);
            }
            _mm512_mask_storeu_ps(y + 16 * g, lanes(r1 - 16 * g), acc);
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

/* Not inlined: each has its ~60 KB frame apart from the caller's. */
static __attribute__((noinline)) void gemm_k(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    switch (mm->wt) {
    case SKV_TYPE_Q4_K:
        gemm_k16(mm, i0, i1, r0, r1, SKV_TYPE_Q4_K);
        break;
    case SKV_TYPE_Q5_K:
        gemm_k16(mm, i0, i1, r0, r1, SKV_TYPE_Q5_K);
        break;
    default:
        gemm_k16(mm, i0, i1, r0, r1, SKV_TYPE_Q6_K);
        break;
    }
}

/* ---- Q8_0, Q4_0, Q5_0: sixteen W rows in the lanes --------------------------------------------
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
_Static_assert(NOH <= 2, "k16_ahead holds two groups");
_Static_assert(KBH % 8 == 0, "IQ4_XS column blocks are whole super-blocks");

typedef struct prep_hex {
    int8_t q[KBH * 512] ALIGNED64;  /* [block][group g][row k][4]: row k's codes 4g..4g+3 */
    int32_t nb[KBH * 16] ALIGNED64; /* [block][row k]: -128 * the sum of its codes */
    float d[KBH * 16] ALIGNED64;    /* [block][row k] */
} prep_hex;

/* Prepares blocks [b0, b0 + nb) of 16 rows w[0..16). */
INLINE void prep_hexad(prep_hex *p, const uint8_t *const *w, skv_type t, int b0, int nb) {
    const size_t bb = q8_block_bytes(t);
    for (int b = 0; b < nb; b++) {
        const size_t off = (size_t)(b0 + b) * bb;
        __m256 lo[8], hi[8]; /* transpose8 moves 32-bit lanes: the codes pass bit for bit */
        for (int k = 0; k < 8; k++) {
            lo[k] = _mm256_castsi256_ps(q8_codes(w[k] + off, t));
            hi[k] = _mm256_castsi256_ps(q8_codes(w[k + 8] + off, t));
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

/* The fifth bits of a Q5_0 record's group vector: 0x10 in byte i where bit i of the mask is set
 * (the low nibbles' bits at h, the high ones' at h + 4). */
static inline __m256i q5_fifth(const uint8_t *h) {
    uint32_t m;
    memcpy(&m, h, 4);
    return _mm256_maskz_mov_epi8((__mmask32)m, _mm256_set1_epi8(0x10));
}

/* prep_hexad from Q8_0 k16 records (kernels.h): group g's two octets side by side are the
 * hexad's codes as they lie, its 16 scales one load. Q4_0 records: the two octets are the low and
 * the high nibbles of one vector, less 8 (the signed codes, as prep_hexad makes of rows); Q5_0
 * records with the fifth bits, less 16. */
INLINE void prep_hexad_rec(prep_hex *p, const skv_mm *mm, int g, int b0, int nb, skv_type t) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i off = _mm256_set1_epi8(t == SKV_TYPE_Q5_0 ? 16 : 8);
    for (int b = 0; b < nb; b++) {
        const uint8_t *rec = k16_at(mm, g, b0 + b, 32, rec32_bytes(t));
        __m512i bias = _mm512_setzero_si512();
        for (int q = 0; q < 8; q++) {
            __m512i v;
            if (t != SKV_TYPE_Q8_0) {
                const __m256i c =
                    _mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q4_Q + 32 * q));
                __m256i lo = _mm256_and_si256(c, m4),
                        hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
                if (t == SKV_TYPE_Q5_0) {
                    lo = _mm256_or_si256(lo, q5_fifth(rec + SKV_K16_Q5_H + 8 * q));
                    hi = _mm256_or_si256(hi, q5_fifth(rec + SKV_K16_Q5_H + 8 * q + 4));
                }
                v = join(_mm256_sub_epi8(lo, off), _mm256_sub_epi8(hi, off));
            } else {
                v = join(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_Q + 32 * q)),
                         _mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_Q + 256 + 32 * q)));
            }
            _mm512_store_si512(p->q + 512 * b + 64 * q, v);
            bias = _mm512_dpbusd_epi32(bias, _mm512_set1_epi8((char)0x80), v);
        }
        _mm512_store_si512(p->nb + 16 * b, _mm512_sub_epi32(_mm512_setzero_si512(), bias));
        _mm512_store_ps(p->d + 16 * b,
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_D))));
    }
}

/* The 16 rows' scales of block b of an IQ4 record (iq4_rec): IQ4_NL's d, IQ4_XS's d (ls - 32),
 * as the AVX2 code's iq4_rec_scales. */
static inline __m512 iq4_scales16(const uint8_t *rec, int b, skv_type t) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_D)));
    if (t == SKV_TYPE_IQ4_NL) return d;
    const __m128i sc = _mm_loadu_si128((const __m128i *)(rec + SKV_K16_IQ4XS_SC + 16 * (b % 8)));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
}

/* prep_hexad from IQ4_NL / IQ4_XS records (kernels.h): each group vector's low and high nibbles
 * through the grid (vpshufb) are the hexad's two octets of signed codes; the scales IQ4_NL's d,
 * IQ4_XS's d (ls - 32) (as the AVX2 code makes them: the same bits). */
INLINE void prep_hexad_iq4(prep_hex *p, const skv_mm *mm, int g, int b0, int nb, skv_type t) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), grid = iq4_grid_v();
    for (int b = 0; b < nb; b++) {
        const int bb = b0 + b;
        const uint8_t *rec = iq4_rec(mm, g, bb, t), *q = iq4_rec_codes(rec, bb, t);
        __m512i bias = _mm512_setzero_si512();
        for (int v = 0; v < 8; v++) {
            const __m256i c = _mm256_loadu_si256((const __m256i *)(q + 32 * v));
            const __m512i w =
                join(_mm256_shuffle_epi8(grid, _mm256_and_si256(c, m4)),
                     _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(c, 4), m4)));
            _mm512_store_si512(p->q + 512 * b + 64 * v, w);
            bias = _mm512_dpbusd_epi32(bias, _mm512_set1_epi8((char)0x80), w);
        }
        _mm512_store_si512(p->nb + 16 * b, _mm512_sub_epi32(_mm512_setzero_si512(), bias));
        _mm512_store_ps(p->d + 16 * b, iq4_scales16(rec, bb, t));
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
                                               skv_type t) {
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
                    if (mm->w_k16 && (t == SKV_TYPE_IQ4_NL || t == SKV_TYPE_IQ4_XS)) {
                        prep_hexad_iq4(&prep[c], mm, r / 16 + c, b0, nb, t);
                        continue;
                    }
                    if (mm->w_k16) { /* records: r is a multiple of 16 */
                        prep_hexad_rec(&prep[c], mm, r / 16 + c, b0, nb, t);
                        continue;
                    }
                    const uint8_t *w[16];
                    lane_rows(mm, r + 16 * c, r + nr, 16, w);
                    prep_hexad(&prep[c], w, t, b0, nb);
                }
                const int first = kb == 0, last = kb == nkb - 1;
                /* IQ4_XS: records of 8 blocks, KBH / 8 to a column block */
                const int xs = t == SKV_TYPE_IQ4_XS;
                k16_ahead ah = k16_ahead_next(
                    mm, mc0, MCH, i1, r, NOH, r0, r1, kb, nkb, xs ? KBH / 8 : KBH,
                    xs ? SKV_K16_IQ4XS_RECORD : rec32_bytes(t), xs ? 256 : 32, (mc1 - mc0) / MRH);
                int i = mc0;
                for (; i + MRH <= mc1; i += MRH) {
                    k16_ahead_some(&ah);
                    tile_hex_step(MRH, mm, i, r, nr, p, b0, nb, first, last,
                                  save + (size_t)(i - mc0) * NOH);
                }
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
INLINE void dot_hex_rows(const uint8_t *const *w, act_row a, const int32_t *xb, int nb, skv_type t,
                         float *y) {
    const size_t bb = q8_block_bytes(t);
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
                                           _mm256_xor_si256(q8_codes(blk[k], t), flip), x[k]);
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
                                                  _mm256_xor_si256(q8_codes(blk, t), flip), x);
            const int idot = hsum_i32(d) - xb[b];
            out[r] = fmaf((float)idot, a.d[b] * ld_f16(blk), out[r]);
        }
    for (int r = 0; r < NS; r++) y[r] = out[r];
}

/* xb[b] = k * the sum of x's codes in block b, once per x row: k = 128 is what vpdpbusd of Q8_0
 * codes made unsigned adds, k = 8 what Q4_0 records' codes as stored (code + 8) add. */
static inline void hex_xsums(act_row a, int nb, int32_t *xb, int k) {
    for (int b = 0; b < nb; b++)
        xb[b] = hsum_i32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)k),
                                             _mm256_loadu_si256((const __m256i *)(a.q + 32 * b))));
}

/* Rows [r0, r1) for x rows [i0, i1) (one or two): rows j, j + h, j + 2h, j + 3h at once, four
 * streams; the last (r1 - r0) % 4 rows with copies of the last one (computed, not stored).
 * Measured (Zen 4, llama-3.2-1b Q8_0 tg64): pairs of adjacent rows instead were 2x slower,
 * prefetching 512-2048 B ahead 10-25% slower; 0-15% below the former gemv (two streams, 16-lane
 * partial sums: another order, which the tiles cannot follow). */
static void gemv_hex(const skv_mm *mm, int i0, int i1, int r0, int r1, skv_type t) {
    const int nb = mm->n_in / 32, h = (r1 - r0) / NS;
    int32_t xb[MAX_XB]; /* 128 * the sum of each block of x's codes */
    if (nb > MAX_XB) {  /* wider than any model layer: the AVX2 code, same bits */
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        hex_xsums(a, nb, xb, 128);
        for (int j = r0; j < r0 + h; j++) {
            const uint8_t *w[NS];
            float v[NS];
            for (int k = 0; k < NS; k++)
                w[k] = (const uint8_t *)mm->w + (size_t)(j + k * h) * mm->w_stride;
            dot_hex_rows(w, a, xb, nb, t, v);
            for (int k = 0; k < NS; k++) y[j + k * h] = v[k];
        }
        for (int r = r0 + NS * h; r < r1; r += NS) {
            const uint8_t *w[NS];
            float v[NS];
            lane_rows(mm, r, r1, NS, w);
            dot_hex_rows(w, a, xb, nb, t, v);
            for (int k = 0; k < NS && r + k < r1; k++) y[r + k] = v[k];
        }
    }
}

/* One Q8_0 record's step (block b of a 16-row group): each octet's 8 rows in the lanes of one
 * chain, vpdpbusd of the codes made unsigned (w ^ 0x80) with 4 x codes broadcast, less 128 * the
 * sum of x's block (xb); the 8 scales one load. The operations of a lane of the tiles, as
 * gemv_hex's: the same bits. Prefetch, as k16_step's: with streams skv_k16_ahead_cpu bytes past
 * each line (read from memory, kernels.h), else the fixed SKV_GEMV_PREFETCH of one stream. */
INLINE void q8_rec_step(const uint8_t *rec, const int8_t *xq, int32_t xb, float dx, __m256 acc[2],
                        bool streams) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        int32_t x4;
        memcpy(&x4, xq + 4 * q, 4);
        /* a record is 544 bytes: q == 0 asks for its ninth line too */
        if (streams) {
            SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + 64 * q);
            if (q == 0) SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + 512);
        } else {
            SKV_PREFETCH_AHEAD(rec, 64 * q);
            if (q == 0) SKV_PREFETCH_AHEAD(rec, 512);
        }
        const __m256i x = _mm256_set1_epi32(x4);
        s0 = _mm256_dpbusd_epi32(
            s0,
            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_Q + 32 * q)),
                             flip),
            x);
        s1 = _mm256_dpbusd_epi32(
            s1,
            _mm256_xor_si256(
                _mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q8_Q + 256 + 32 * q)), flip),
            x);
    }
    const __m256i xbv = _mm256_set1_epi32(xb);
    q8_rec_chain(rec, _mm256_sub_epi32(s0, xbv), _mm256_sub_epi32(s1, xbv), dx, acc);
}

/* q8_rec_step for a Q4_0 record: each vector's low nibbles (rows 0-7) and high ones (rows 8-15)
 * as stored, code + 8, against x by vpdpbusd: the whole bytes once and the high nibbles in place
 * once (two vpdpbusd and a mask per 64 codes, where the nibbles apart took a shift more); less
 * 8 * the sum of x's block (xb). A 288-byte record spans 5 or 6 lines: the 8 prefetches, 41 bytes
 * apart from its first byte to its last, touch each. */
INLINE void q4_rec_step(const uint8_t *rec, const int8_t *xq, int32_t xb, float dx, __m256 acc[2],
                        bool streams) {
    const __m256i hi = _mm256_set1_epi8((char)0xf0);
    __m256i sb = _mm256_setzero_si256(), sh = sb; /* the whole bytes' dots, the high nibbles' */
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        int32_t x4;
        memcpy(&x4, xq + 4 * q, 4);
        if (streams)
            SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + 41 * q);
        else
            SKV_PREFETCH_AHEAD(rec, 41 * q);
        const __m256i x = _mm256_set1_epi32(x4);
        const __m256i w = _mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q4_Q + 32 * q));
        sb = _mm256_dpbusd_epi32(sb, w, x);
        sh = _mm256_dpbusd_epi32(sh, _mm256_and_si256(w, hi), x);
    }
    /* a byte is lo + 16 hi: rows 0-7's dot sb - sh, rows 8-15's sh / 16 (exact: sh is 16 times
     * an integer; |sb| < 2^20) */
    const __m256i xbv = _mm256_set1_epi32(xb);
    q8_rec_chain(rec, _mm256_sub_epi32(_mm256_sub_epi32(sb, sh), xbv),
                 _mm256_sub_epi32(_mm256_srai_epi32(sh, 4), xbv), dx, acc);
}

/* q8_rec_step for a Q5_0 record: the nibbles with their fifth bits (a masked add each), code +
 * 16 as stored, vpdpbusd against x; less 16 * the sum of x's block (xb). 352 bytes, 5 or 6 lines:
 * 8 prefetches 50 bytes apart. */
INLINE void q5_rec_step(const uint8_t *rec, const int8_t *xq, int32_t xb, float dx, __m256 acc[2],
                        bool streams) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        int32_t x4;
        memcpy(&x4, xq + 4 * q, 4);
        if (streams)
            SKV_PREFETCH_AT(rec, skv_k16_ahead_cpu + (SKV_K16_Q5_RECORD - 1) * q / 7);
        else
            SKV_PREFETCH_AHEAD(rec, (SKV_K16_Q5_RECORD - 1) * q / 7);
        const __m256i x = _mm256_set1_epi32(x4);
        const __m256i w = _mm256_loadu_si256((const __m256i *)(rec + SKV_K16_Q5_Q + 32 * q));
        uint32_t hl, hh; /* two 32-bit loads: a kmovd each (one 64-bit value took a third) */
        memcpy(&hl, rec + SKV_K16_Q5_H + 8 * q, 4);
        memcpy(&hh, rec + SKV_K16_Q5_H + 8 * q + 4, 4);
        const __m256i lo = _mm256_and_si256(w, m4),
                      hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        const __m256i bit = _mm256_set1_epi8(0x10);
        s0 = _mm256_dpbusd_epi32(s0, _mm256_mask_add_epi8(lo, _cvtu32_mask32(hl), lo, bit), x);
        s1 = _mm256_dpbusd_epi32(s1, _mm256_mask_add_epi8(hi, _cvtu32_mask32(hh), hi, bit), x);
    }
    const __m256i xbv = _mm256_set1_epi32(xb);
    q8_rec_chain(rec, _mm256_sub_epi32(s0, xbv), _mm256_sub_epi32(s1, xbv), dx, acc);
}

/* The record step of type t (Q8_0, Q4_0, Q5_0). */
INLINE void hex_rec_step(skv_type t, const uint8_t *rec, const int8_t *xq, int32_t xb, float dx,
                         __m256 acc[2], bool streams) {
    if (t == SKV_TYPE_Q4_0)
        q4_rec_step(rec, xq, xb, dx, acc, streams);
    else if (t == SKV_TYPE_Q5_0)
        q5_rec_step(rec, xq, xb, dx, acc, streams);
    else
        q8_rec_step(rec, xq, xb, dx, acc, streams);
}

/* Decode from Q8_0 (Q4_0, Q5_0) k16 records. With streams (mm->k16_prefetch, as Q4_K's gemv_k16)
 * the thread's groups in K16_STREAMS quarters read at once, each line asked for skv_k16_ahead_cpu
 * bytes ahead; without, one group after the other (W as one stream) on SKV_GEMV_PREFETCH. Either
 * way each group's chains take the same steps: the same bits. Zen 5 (llama-3.2-1b Q8_0 tg, 2
 * threads, the settings taking turns token by token in one process): see kernels.c. r0 is a
 * multiple of 16 (matmul.c). */
INLINE void gemv_hex_rec_run(const skv_mm *mm, int i0, int i1, int r0, int r1, bool streams,
                             skv_type t) {
    const int nb = mm->n_in / 32;
    const size_t rb = rec32_bytes(t);
    int32_t xb[MAX_XB]; /* k * the sum of each block of x's codes, once per x row */
    if (nb > MAX_XB) {  /* wider than any model layer: the AVX2 code, same bits */
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        hex_xsums(a, nb, xb, t == SKV_TYPE_Q4_0 ? 8 : t == SKV_TYPE_Q5_0 ? 16 : 128);
        const int ga = r0 / 16, gn = (r1 - 16 * ga + 15) / 16;
        const int h = streams ? gn / K16_STREAMS : 0;
        for (int j = 0; j < h; j++) {
            __m256 acc[K16_STREAMS][2];
            for (int q = 0; q < K16_STREAMS; q++) acc[q][0] = acc[q][1] = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++)
#pragma GCC unroll 4
                for (int q = 0; q < K16_STREAMS; q++)
                    hex_rec_step(t, k16_at(mm, ga + q * h + j, b, 32, rb), a.q + 32 * b, xb[b],
                                 a.d[b], acc[q], true);
            for (int q = 0; q < K16_STREAMS; q++) {
                const int g = ga + q * h + j;
                store_group(y + 16 * g, acc[q], r1 - 16 * g);
            }
        }
        for (int g = ga + K16_STREAMS * h; 16 * g < r1; g++) {
            const uint8_t *rec = k16_at(mm, g, 0, 32, rb);
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int b = 0; b < nb; b++, rec += rb)
                hex_rec_step(t, rec, a.q + 32 * b, xb[b], a.d[b], acc, streams);
            store_group(y + 16 * g, acc, r1 - 16 * g);
        }
    }
}

/* One copy of the loop per type and prefetch mode (constants after inlining). */
#define HEX_REC(T)                                                                                 \
    do {                                                                                           \
        if (mm->k16_prefetch)                                                                      \
            gemv_hex_rec_run(mm, i0, i1, r0, r1, true, T);                                         \
        else                                                                                       \
            gemv_hex_rec_run(mm, i0, i1, r0, r1, false, T);                                        \
    } while (0)
static void gemv_hex_rec(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (mm->wt == SKV_TYPE_Q4_0)
        HEX_REC(SKV_TYPE_Q4_0);
    else if (mm->wt == SKV_TYPE_Q5_0)
        HEX_REC(SKV_TYPE_Q5_0);
    else
        HEX_REC(SKV_TYPE_Q8_0);
}
#undef HEX_REC

/* x rows below which quantized W is used straight from its raw blocks. */
#define GEMM_Q_MIN_M 3

/* ---- IQ4_NL / IQ4_XS decode from records --------------------------------------------------
 * vpdpbusd takes the weights as its unsigned operand: the grid + 128 (1..241) through vpshufb,
 * x's codes signed as they are, and 128 * (x's block sum, hex_xsums) taken off each row's: the
 * exact integer of the AVX2 code's signed dot (matmul_avx2.c iq4_rec_groups), then its float
 * chain acc = fma(idot, dx dw, acc), 16 rows in one vector: the same bits. A 64-byte load is a
 * record's group vectors 2p and 2p + 1 (4 indices of rows 0-7 in the low nibbles, of rows 8-15 in
 * the high ones), met by x's groups 2p and 2p + 1 in the two halves: 6 instructions per 128
 * products where the AVX2 code takes 15. ns 16-row groups g[] side by side, as the AVX2 code's
 * streams. */
INLINE void iq4_vnni_groups(const skv_mm *mm, const act_row *a, const int32_t *xs128, const int *g,
                            int ns, bool pf, skv_type t, __m512 acc[K16_STREAMS]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i grid =
        _mm512_xor_si512(/* + 128 */
                         _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)skv_iq4_grid)),
                         _mm512_set1_epi8((char)0x80));
    const int nb = mm->n_in / 32;
    for (int st = 0; st < ns; st++) acc[st] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *rec[K16_STREAMS], *q[K16_STREAMS];
        __m512i lo[K16_STREAMS], hi[K16_STREAMS];
#pragma GCC unroll 4
        for (int st = 0; st < ns; st++) {
            rec[st] = iq4_rec(mm, g[st], b, t);
            q[st] = iq4_rec_codes(rec[st], b, t);
            lo[st] = hi[st] = _mm512_setzero_si512();
        }
        const __m512i xb =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a->q + 32 * b)));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m512i xv = _mm512_permutexvar_epi32(
                _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1), xb);
#pragma GCC unroll 4
            for (int st = 0; st < ns; st++) {
                for (int e = 0; e < 2; e++) { /* 8 prefetches a block, over the record */
                    const int off = iq4_prefetch_off(b, 2 * p + e, t);
                    if (pf)
                        SKV_PREFETCH_AT(rec[st], skv_k16_ahead_cpu + off);
                    else
                        SKV_PREFETCH_AHEAD(rec[st], off);
                }
                const __m512i z = _mm512_loadu_si512(q[st] + 64 * p);
                lo[st] = _mm512_dpbusd_epi32(
                    lo[st], _mm512_shuffle_epi8(grid, _mm512_and_si512(z, m4)), xv);
                hi[st] = _mm512_dpbusd_epi32(
                    hi[st],
                    _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4)), xv);
            }
        }
        const __m512i xs = _mm512_set1_epi32(xs128[b]);
        const __m512 dx = _mm512_set1_ps(a->d[b]);
#pragma GCC unroll 4
        for (int st = 0; st < ns; st++) {
            /* rows 0-7 and 8-15 of the even groups, plus those of the odd ones */
            const __m512i rows = _mm512_add_epi32(_mm512_shuffle_i64x2(lo[st], hi[st], 0x44),
                                                  _mm512_shuffle_i64x2(lo[st], hi[st], 0xee));
            acc[st] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(rows, xs)),
                                      _mm512_mul_ps(dx, iq4_scales16(rec[st], b, t)), acc[st]);
        }
    }
}

/* The thread's groups in K16_STREAMS quarters read at once (streams, mm->k16_prefetch), the rest
 * one at a time, as the AVX2 gemv_iq4_rec. r0 is a multiple of 16. */
static __attribute__((noinline)) void gemv_iq4_vnni(const skv_mm *mm, int i0, int i1, int r0,
                                                    int r1, skv_type t) {
    const bool streams = mm->k16_prefetch;
    const int nb = mm->n_in / 32;
    int32_t xb[MAX_XB]; /* 128 * the sum of each block of x's codes, once per x row */
    if (nb > MAX_XB) {  /* wider than any model layer: the AVX2 code, same bits */
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
    for (int i = i0; i < i1; i++) {
        const act_row a = act_at(mm, i, 32);
        float *y = mm->y + (size_t)i * mm->n_out;
        hex_xsums(a, nb, xb, 128);
        const int ga = r0 / 16, gn = (r1 - 16 * ga + 15) / 16;
        const int h = streams ? gn / K16_STREAMS : 0;
        __m512 acc[K16_STREAMS];
        for (int j = 0; j < h; j++) {
            int g[K16_STREAMS];
            for (int st = 0; st < K16_STREAMS; st++) g[st] = ga + st * h + j;
            iq4_vnni_groups(mm, &a, xb, g, K16_STREAMS, true, t, acc);
            for (int st = 0; st < K16_STREAMS; st++)
                _mm512_mask_storeu_ps(y + 16 * g[st], lanes(r1 - 16 * g[st]), acc[st]);
        }
        for (int g = ga + K16_STREAMS * h; 16 * g < r1; g++) {
            if (streams)
                iq4_vnni_groups(mm, &a, xb, &g, 1, true, t, acc);
            else
                iq4_vnni_groups(mm, &a, xb, &g, 1, false, t, acc);
            _mm512_mask_storeu_ps(y + 16 * g, lanes(r1 - 16 * g), acc[0]);
        }
    }
}

bool skv_act_unsigned(skv_type wt, int m) {
    return skv_simd_has_vnni() &&
           (wt == SKV_TYPE_Q8_0 || wt == SKV_TYPE_Q4_0 || wt == SKV_TYPE_Q5_0 ||
            wt == SKV_TYPE_IQ4_NL || wt == SKV_TYPE_IQ4_XS) &&
           m >= GEMM_Q_MIN_M;
}

void skv_act_rows_unsigned(uint8_t *q, int64_t n) {
    int64_t o = 0;
    for (; o + 64 <= n; o += 64)
        _mm512_storeu_si512(
            q + o, _mm512_xor_si512(_mm512_loadu_si512(q + o), _mm512_set1_epi8((char)0x80)));
    for (; o < n; o++) q[o] ^= 0x80;
}

void skv_matmul_avx512_vnni(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    if (q8_affine(mm->wt)) { /* Q4_1, Q5_1: the AVX2 code */
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
    if (mm->wt == SKV_TYPE_IQ4_NL || mm->wt == SKV_TYPE_IQ4_XS) {
        /* decode: gemv_iq4_vnni from records (IQ4_NL rows: the AVX2 code); prefill: the Q8_0
         * tiles from the grid's values (IQ4_XS: records only, as the AVX2 code) */
        if (mm->m < GEMM_Q_MIN_M && mm->w_k16)
            gemv_iq4_vnni(mm, i0, i1, r0, r1, mm->wt);
        else if (mm->m < GEMM_Q_MIN_M)
            skv_matmul_avx2(mm, i0, i1, r0, r1);
        else if (mm->wt == SKV_TYPE_IQ4_NL || mm->w_k16)
            gemm_hex(mm, i0, i1, r0, r1, mm->wt);
        return;
    }
    if (mm->wt == SKV_TYPE_Q3_K || mm->wt == SKV_TYPE_Q2_K) {
        /* records only: decode above, prefill the Q6_K tiles */
        skv_mm q6 = *mm;
        q6.wt = SKV_TYPE_Q6_K;
        q6.w_rec = mm->wt;
        if (!mm->w_k16)
            return;
        else if (mm->m < GEMM_Q_MIN_M)
            gemv_q3_q2_rec(&q6, i0, i1, r0, r1);
        else
            gemm_k(&q6, i0, i1, r0, r1);
        return;
    }
    if (mm->wt == SKV_TYPE_Q8_0 || mm->wt == SKV_TYPE_Q4_0 || mm->wt == SKV_TYPE_Q5_0) {
        if (mm->m < GEMM_Q_MIN_M && mm->w_k16)
            gemv_hex_rec(mm, i0, i1, r0, r1);
        else if (mm->m < GEMM_Q_MIN_M)
            gemv_hex(mm, i0, i1, r0, r1, mm->wt);
        else
            gemm_hex(mm, i0, i1, r0, r1, mm->wt);
        return;
    }
    if (mm->m < GEMM_Q_MIN_M)
        (mm->w_k16 ? gemv_k16 : gemv_k)(mm, i0, i1, r0, r1);
    else
        gemm_k(mm, i0, i1, r0, r1);
}

#else
/* Built without the AVX-512 VNNI flags: nothing here. */
typedef int skv_matmul_avx512vnni_empty;
#endif
