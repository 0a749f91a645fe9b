/* quant_x86.h — unpacking the quantized weight blocks with AVX2 (256-bit) instructions, shared
 * by the AVX2 and AVX-512 matmuls (include only from files compiled with at least
 * -mavx2 -mfma -mf16c), and the "prepared" K-quant rows that the AVX2 tiled products read (the
 * AVX-512 ones prepare their own: matmul_avx512vnni.c; AVX2 Q8_0/Q4_0 use 8-row octets, in
 * matmul_avx2.c).
 *
 * A prepared K-quant W row covers up to KQ columns:
 *   q = unsigned codes 0..63, sv = per 32 values 16 int16 multipliers (lanes 0-7 for
 *              the first 16 values, 8-15 for the next 16: maddubs leaves them in that order),
 *              d = super-block scale, wc = per 16 values the coefficient of x's group sum
 *              (-dmin*m for Q4_K/Q5_K, -32*d*sc for Q6_K). */
#ifndef SKV_QUANT_X86_H
#define SKV_QUANT_X86_H

#include "kernels.h"

#include <immintrin.h>
#include <string.h>

#define ALIGNED32 __attribute__((aligned(32)))
#define ALIGNED64 __attribute__((aligned(64)))

static inline float ld_f16(const uint8_t *p) {
    return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

typedef struct act_row {
    const int8_t *q; /* [n] */
    const float *d;  /* [n / bs] */
    const float *s;  /* [n / 16]: d x the sum of each 16 codes (AVX-512 VNNI K-quants: the sums as
                      * int32, skv_act_rows_k_vnni) */
} act_row;

static inline act_row act_at(const skv_mm *mm, int i, int bs) {
    const uint8_t *p = mm->xq + (size_t)i * mm->xq_stride;
    act_row a = {(const int8_t *)p, (const float *)(p + skv_act_off_d(mm->n_in)),
                 (const float *)(p + skv_act_off_s(mm->n_in, bs))};
    return a;
}

static inline const uint8_t *w_row(const skv_mm *mm, int r) {
    return (const uint8_t *)mm->w + (size_t)r * mm->w_stride;
}

/* The n rows from r (rows at r1 and past repeat row r1 - 1: computed, never stored), for the
 * kernels that put n W rows in a vector's lanes. */
static inline void lane_rows(const skv_mm *mm, int r, int r1, int n, const uint8_t **w) {
    for (int k = 0; k < n; k++) w[k] = w_row(mm, r + k < r1 ? r + k : r1 - 1);
}

/* Q4_0's 16 bytes as 32 signed values (code - 8): low nibbles first, then high nibbles. */
static inline __m256i unpack_q4_0(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi8(15));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15));
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

/* A Q8_0 block's (Q4_0: as signed code - 8) 32 codes. */
static inline __m256i q8_codes(const uint8_t *blk, int q4) {
    return q4 ? unpack_q4_0(blk + 2) : _mm256_loadu_si256((const __m256i *)(blk + 2));
}

/* Lane k = the sum of v[k]'s eight lanes (int32: exact in any order). */
static inline __m256i sum8_i32(const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    /* a: rows 0-3, sums of their low 128 bits | of their high 128 bits; b: rows 4-7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

static inline int ld_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The f16 scales at offset off of 8 rows' blocks, as floats (inserts with constant lanes: a
 * 16-bit load each, also at -O1). */
static inline __m256 scales8(const uint8_t *const *w, size_t off) {
    __m128i h = _mm_cvtsi32_si128(ld_u16(w[0] + off));
    h = _mm_insert_epi16(h, ld_u16(w[1] + off), 1);
    h = _mm_insert_epi16(h, ld_u16(w[2] + off), 2);
    h = _mm_insert_epi16(h, ld_u16(w[3] + off), 3);
    h = _mm_insert_epi16(h, ld_u16(w[4] + off), 4);
    h = _mm_insert_epi16(h, ld_u16(w[5] + off), 5);
    h = _mm_insert_epi16(h, ld_u16(w[6] + off), 6);
    h = _mm_insert_epi16(h, ld_u16(w[7] + off), 7);
    return _mm256_cvtph_ps(h);
}

/* Q4_K/Q5_K: the 8 six-bit scales and the 8 mins of a super-block from its 12 packed bytes,
 * as 8 int16 each. With the bytes read as words u0 = 0-3, u1 = 4-7, u2 = 8-11: sub-blocks 0-3
 * are the low 6 bits of u0 (scales) and u1 (mins); sub-blocks 4-7 take their low 4 bits from
 * u2 (low nibbles scales, high nibbles mins) and their top 2 bits from the top bits of u0/u1. */
static inline void k4_scales(const uint8_t *s, __m128i *sc, __m128i *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
    *sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
    *mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
}

/* int16 element j of v (both 128-bit lanes hold the same 8) in all 16 lanes. */
static inline __m256i bcast_i16(__m256i v, int j) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
}

/* Q6_K: the madd multipliers of the 32 values of chunk c (groups 2c and 2c + 1) from the 16
 * scales s16 as int16: group 2c in the low 128-bit lane, 2c + 1 in the high one. */
static inline __m256i q6_chunk_scales(__m256i s16, int c) {
    const __m256i sel = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3,
                                         2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(s16, _mm256_set1_epi32(c)), sel);
}

/* The 4 code vectors (values 0..63) of one half (128 values) of a Q6_K super-block, in order. */
static inline void q6_codes(const uint8_t *ql, const uint8_t *qh, __m256i code[4]) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
    __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                     _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                     _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
    for (int k = 0; k < 4; k++) {
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3);
        code[k] = _mm256_or_si256(lo[k], _mm256_slli_epi16(hi, 4));
    }
}

/* The low and high code vectors (values 0..31) of chunk c (64 values) of a Q4_K/Q5_K
 * super-block; hb = Q5_K's 32 high-bit bytes (zero for Q4_K). */
static inline void k45_codes(const uint8_t *qs, __m256i hb, int c, int q5, __m256i *lo,
                             __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (q5) {
        __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one);
        __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(b0, 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(b1, 4));
    }
}

#define KQ 2048

typedef struct prep_row {
    int8_t q[KQ] ALIGNED32;
    int16_t sv[KQ / 2] ALIGNED32;
    float wc[KQ / 16] ALIGNED32;
    float d[KQ / 256];
} prep_row;

/* Prepares super-blocks [sb0, sb0 + nsb) of a K-quant row into p (from index 0). */
static inline void prep_k(prep_row *p, const uint8_t *w, skv_type t, int sb0, int nsb) {
    for (int s = 0; s < nsb; s++) {
        int8_t *q = p->q + 256 * s;
        int16_t *sv = p->sv + 128 * s;
        float *wc = p->wc + 16 * s;
        if (t == SKV_TYPE_Q6_K) {
            const uint8_t *b = w + (size_t)(sb0 + s) * 210;
            const int8_t *sc = (const int8_t *)(b + 192);
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
            float d = ld_f16(b + 208);
            p->d[s] = d;
            for (int h = 0; h < 2; h++) {
                __m256i code[4];
                q6_codes(b + 64 * h, b + 128 + 32 * h, code);
                for (int k = 0; k < 4; k++)
                    _mm256_store_si256((__m256i *)(q + 128 * h + 32 * k), code[k]);
            }
            for (int c = 0; c < 8; c++)
                _mm256_store_si256((__m256i *)(sv + 16 * c), q6_chunk_scales(s16, c));
            for (int g = 0; g < 16; g++) wc[g] = -32.0f * d * (float)sc[g];
        } else {
            const int q5 = t == SKV_TYPE_Q5_K;
            const uint8_t *b = w + (size_t)(sb0 + s) * (q5 ? 176 : 144);
            p->d[s] = ld_f16(b);
            float dmin = ld_f16(b + 2);
            __m256i hb =
                q5 ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                __m256i lo, hi;
                k45_codes(b + (q5 ? 48 : 16), hb, c, q5, &lo, &hi);
                _mm256_store_si256((__m256i *)(q + 64 * c), lo);
                _mm256_store_si256((__m256i *)(q + 64 * c + 32), hi);
            }
            __m128i sc, mn;
            k4_scales(b + 4, &sc, &mn);
            const __m256i scb = _mm256_broadcastsi128_si256(sc);
            for (int j = 0; j < 8; j++)
                _mm256_store_si256((__m256i *)(sv + 16 * j), bcast_i16(scb, j));
            int16_t m[8];
            _mm_storeu_si128((__m128i *)m, mn);
            for (int j = 0; j < 8; j++) wc[2 * j] = wc[2 * j + 1] = -dmin * (float)m[j];
        }
    }
}

#endif
