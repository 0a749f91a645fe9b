/* quant_x86.h — unpacking the quantized weight blocks with AVX2 (256-bit) instructions, shared
 * by the AVX2 and AVX-512 matmuls (include only from files compiled with at least
 * -mavx2 -mfma -mf16c): activation rows, W row pointers, block unpacking, K-quant decode
 * helpers, the k16 record accessors and the steps their decode kernels share (the layout is in
 * kernels.h). */
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
    const float *s;  /* [n / 16]: d x the sum of each 16 codes (K-quants: the sums as int32,
                      * skv_act_rows_k_int) */
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

/* 16 bytes of nibbles as 32 values 0..15: the low nibbles first, then the high ones (the order
 * of Q4_0's, Q4_1's, Q5_0's and Q5_1's codes). */
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15)),
                            _mm_and_si128(v, _mm_set1_epi8(15)));
}

/* Q4_0's 16 bytes as 32 signed values (code - 8). */
static inline __m256i unpack_q4_0(const uint8_t *qs) {
    return _mm256_sub_epi8(unpack_nibbles(qs), _mm256_set1_epi8(8));
}

/* The fifth bits of Q5_0 / Q5_1 codes, 0x10 in byte j where bit j of qh (a little-endian uint32)
 * is set: qh's byte j / 8 spread over the 8 bytes of its lane quarter, each byte's own bit picked
 * and compared. */
static inline __m256i unpack_fifth_bits(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                             2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                            _mm256_set1_epi8(0x10));
}

/* The IQ4 grid (skv_iq4_grid) in both lanes: vpshufb's table, index -> value. */
static inline __m256i iq4_grid_v(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)skv_iq4_grid));
}
/* The 32-value block types that the Q8_0 kernels read as signed bytes: Q8_0's codes, Q4_0's
 * code - 8, Q5_0's code - 16, IQ4_NL's grid values, Q4_1's and Q5_1's codes as they are (0..15,
 * 0..31: value d code + m, the "affine" ones); bytes per block; whether a type has the min m
 * (f16, after d). */
static inline __m256i q8_codes(const uint8_t *blk, skv_type t) {
    switch (t) {
    case SKV_TYPE_IQ4_NL:
        return _mm256_shuffle_epi8(iq4_grid_v(), unpack_nibbles(blk + 2));
    case SKV_TYPE_Q4_0:
        return unpack_q4_0(blk + 2);
    case SKV_TYPE_Q5_0:
        return _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles(blk + 6), unpack_fifth_bits(blk + 2)),
                               _mm256_set1_epi8(16));
    case SKV_TYPE_Q4_1:
        return unpack_nibbles(blk + 4);
    case SKV_TYPE_Q5_1:
        return _mm256_or_si256(unpack_nibbles(blk + 8), unpack_fifth_bits(blk + 4));
    default:
        return _mm256_loadu_si256((const __m256i *)(blk + 2));
    }
}
static inline size_t q8_block_bytes(skv_type t) {
    switch (t) {
    case SKV_TYPE_Q4_0:
    case SKV_TYPE_IQ4_NL:
        return 18;
    case SKV_TYPE_Q4_1:
        return 20;
    case SKV_TYPE_Q5_0:
        return 22;
    case SKV_TYPE_Q5_1:
        return 24;
    default:
        return 34;
    }
}
/* Bytes of a k16 record of 32-value blocks (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1; kernels.h). */
static inline size_t rec32_bytes(skv_type t) {
    return t == SKV_TYPE_Q4_0 || t == SKV_TYPE_IQ4_NL ? SKV_K16_Q4_RECORD
           : t == SKV_TYPE_Q5_0                       ? SKV_K16_Q5_RECORD
           : t == SKV_TYPE_Q4_1                       ? SKV_K16_Q41_RECORD
           : t == SKV_TYPE_Q5_1                       ? SKV_K16_Q51_RECORD
                                                      : SKV_K16_Q8_RECORD;
}
static inline bool q8_affine(skv_type t) {
    return t == SKV_TYPE_Q4_1 || t == SKV_TYPE_Q5_1;
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

/* The pairs of x's group sums (int32 in the activation row, skv_act_rows_k_int) of
 * super-block s that the mins meet, as two int16 words per int32 (vpmaddwd's operand): Q4_K/Q5_K
 * the sums of sub-blocks 2p and 2p + 1 (p < 4; xp[4..8) zero), Q6_K of groups 2p and 2p + 1
 * (p < 8). The packs never saturate: |sum| <= 32 x 127. */
static inline __m256i k_xpairs_v(act_row a, int s, int q6) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(a.s + 16 * s));     /* groups 0-7 */
    const __m256i hi = _mm256_loadu_si256((const __m256i *)(a.s + 16 * s + 8)); /* 8-15 */
    __m256i w;
    if (q6) { /* words lo0-3 hi0-3 | lo4-7 hi4-7, put in order */
        w = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8);
    } else { /* sub-blocks 0 1 4 5 | 2 3 6 7, put in order, then as words */
        const __m256i sb = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xd8);
        w = _mm256_permute4x64_epi64(_mm256_packs_epi32(sb, _mm256_setzero_si256()), 0xd8);
    }
    return w;
}

/* The same pairs with both 128-bit lanes alike, so that an in-lane vpshufd broadcasts one
 * (a lane-crossing vpermd per pair cost the AVX2 prefill tile ~4% on Zen 5): Q4_K/Q5_K x[0]
 * holds pairs 0, 2, 1, 3 (x[1] unset), Q6_K x[0] pairs 0-3 and x[1] pairs 4-7. Q4_K/Q5_K: the
 * sums of sub-blocks 0 1 4 5 | 2 3 6 7 as words, 64-bit elements pairs 0 2 | 0 2 | 1 3 | 1 3. */
static inline void k_xpairs_lanes(act_row a, int s, int q6, __m256i x[2]) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(a.s + 16 * s));
    const __m256i hi = _mm256_loadu_si256((const __m256i *)(a.s + 16 * s + 8));
    if (q6) { /* 64-bit elements: pairs 0 1 | 4 5 | 2 3 | 6 7 */
        const __m256i pk = _mm256_packs_epi32(lo, hi);
        x[0] = _mm256_permute4x64_epi64(pk, 0x88);
        x[1] = _mm256_permute4x64_epi64(pk, 0xdd);
    } else {
        const __m256i sb = _mm256_hadd_epi32(lo, hi);
        x[0] = _mm256_permute4x64_epi64(_mm256_packs_epi32(sb, sb), 0x88);
    }
}

static inline void k_xpairs(act_row a, int s, int q6, int32_t xp[8]) {
    _mm256_storeu_si256((__m256i *)xp, k_xpairs_v(a, s, q6));
}

/* Super-blocks whose x pairs gemv_k16 prepares once per x row, on its stack (n_in up to 65536;
 * wider rows, beyond any model's, make them at each step). */
#define K16_MAX_SB 256

/* ---- K-quant decode from raw rows, shared by the AVX2 and VNNI levels ----------------------
 * A level's dot(t, w, a, nb, y) multiplies 4 raw rows w[0..4) by one activation row. Per
 * super-block their exact integers U and M sit in v[8] (U_k's lanes in v[2k], M_k's in
 * v[2k + 1]); k_chain4 sums each vector's lanes (sum8_i32: lanes U_0, M_0, U_1, M_1, ...) and
 * continues row k's chain in lane 2k:
 *   acc = fma(U, d dx, acc);  acc = fma(M, dm dx, acc)
 * with (d, dm) = the f16 pair dd[k] (Q4_K/Q5_K: d, dmin; Q6_K: d, d) times dm_mul's lanes
 * (1, -1) or (1, -32). A row's result is the same whichever rows are beside it. */
static inline __m256 k_chain4(__m256 acc, const __m256i v[8], const uint32_t dd[4], __m256 dm_mul,
                              float dx) {
    const __m256 f = _mm256_cvtepi32_ps(sum8_i32(v));
    const __m256 sv =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dd)), dm_mul),
                      _mm256_set1_ps(dx));
    acc = _mm256_fmadd_ps(f, sv, acc);
    return _mm256_fmadd_ps(_mm256_movehdup_ps(f), _mm256_movehdup_ps(sv), acc);
}

static inline void k_chain4_store(__m256 acc, float y[4]) {
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int k = 0; k < 4; k++) y[k] = out[2 * k];
}

/* Rows [r0, r1) for x rows [i0, i1) through dot, rows j, j + h, j + 2h, j + 3h at once (4
 * streams of W); the last (r1 - r0) % 4 rows with copies of the last one (computed, not
 * stored). A macro so that dot, an always-inline function of the including file, is inlined. */
#define K_GEMV_ROWS(mm, i0, i1, r0, r1, t, dot)                                                    \
    do {                                                                                           \
        const int nb_ = (mm)->n_in / 256, h_ = ((r1) - (r0)) / 4;                                  \
        for (int i_ = (i0); i_ < (i1); i_++) {                                                     \
            const act_row a_ = act_at((mm), i_, 256);                                              \
            float *y_ = (mm)->y + (size_t)i_ * (mm)->n_out;                                        \
            for (int j_ = 0; j_ < h_; j_++) {                                                      \
                const uint8_t *w_[4];                                                              \
                float v_[4];                                                                       \
                for (int k_ = 0; k_ < 4; k_++) w_[k_] = w_row((mm), (r0) + j_ + k_ * h_);          \
                dot((t), w_, a_, nb_, v_);                                                         \
                for (int k_ = 0; k_ < 4; k_++) y_[(r0) + j_ + k_ * h_] = v_[k_];                   \
            }                                                                                      \
            for (int r_ = (r0) + 4 * h_; r_ < (r1); r_ += 4) {                                     \
                const uint8_t *w_[4];                                                              \
                float v_[4];                                                                       \
                lane_rows((mm), r_, (r1), 4, w_);                                                  \
                dot((t), w_, a_, nb_, v_);                                                         \
                for (int k_ = 0; k_ < 4 && r_ + k_ < (r1); k_++) y_[r_ + k_] = v_[k_];             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 decode from k16 records (gemv_k16 at both levels,
 * gemv_hex_rec at VNNI, gemv_q8_rec at AVX2) with prefetch (mm->k16_prefetch): the thread's groups
 * in K16_STREAMS runs read at once, each line asked for skv_k16_ahead_cpu bytes ahead (kernels.h;
 * see matmul_avx512vnni.c). */
#define K16_STREAMS 4

/* The k16 record (kernels.h) of 16-row group g, block b (of unit values, rec bytes each). */
static inline const uint8_t *k16_at(const skv_mm *mm, int g, int b, int unit, size_t rec) {
    return (const uint8_t *)mm->w + ((size_t)g * (size_t)(mm->n_in / unit) + (size_t)b) * rec;
}
static inline const uint8_t *k16_rec(const skv_mm *mm, int g, int s) { /* Q4_K, Q5_K */
    return k16_at(mm, g, s, 256, mm->wt == SKV_TYPE_Q5_K ? SKV_K16_Q5K_RECORD : SKV_K16_RECORD);
}
static inline const uint8_t *q8_rec(const skv_mm *mm, int g, int b) { /* Q8_0 */
    return k16_at(mm, g, b, 32, SKV_K16_Q8_RECORD);
}
/* Bytes of the records the Q6_K code reads: Q6_K's own, or Q3_K / Q2_K ones (w_rec) */
static inline size_t q6_rec_bytes(const skv_mm *mm) {
    return mm->w_rec == SKV_TYPE_Q3_K   ? SKV_K16_Q3_RECORD
           : mm->w_rec == SKV_TYPE_Q2_K ? SKV_K16_Q2_RECORD
                                        : SKV_K16_Q6_RECORD;
}
static inline const uint8_t *q6_rec(const skv_mm *mm, int g, int s) {
    return k16_at(mm, g, s, 256, q6_rec_bytes(mm));
}

/* IQ4_NL / IQ4_XS records (kernels.h): where block b's record starts for 16-row group g (XS: the
 * super-block's, 8 blocks to a record), and its indices there (a Q4_0 record's nibbles). */
static inline const uint8_t *iq4_rec(const skv_mm *mm, int g, int b, skv_type t) {
    return t == SKV_TYPE_IQ4_NL ? k16_at(mm, g, b, 32, SKV_K16_Q4_RECORD)
                                : k16_at(mm, g, b / 8, 256, SKV_K16_IQ4XS_RECORD);
}
static inline const uint8_t *iq4_rec_codes(const uint8_t *rec, int b, skv_type t) {
    return t == SKV_TYPE_IQ4_NL ? rec + SKV_K16_Q4_Q : rec + SKV_K16_IQ4XS_Q + 256 * (b % 8);
}
/* The decode's i-th (0..7) prefetch for block b, as an offset from its record's start: 8 a block
 * spread over the record's bytes (IQ4_XS: 64 over the super-block's), under 64 apart, so that each
 * line of the stream is asked for. */
static inline int iq4_prefetch_off(int b, int i, skv_type t) {
    if (t == SKV_TYPE_IQ4_NL) return (SKV_K16_Q4_RECORD - 1) * i / 7;
    return (SKV_K16_IQ4XS_RECORD - 1) * (8 * (b % 8) + i) / 63;
}

/* The third bit of each byte of v, bit b (0..7), at bit 2 (value 4): 16-bit shifts by at most
 * 2 left or 5 right, so bit 2 of a byte comes from the same byte (b is a constant once the
 * callers' loops unroll). */
static inline __m256i q3_third(__m256i v, int b) {
    const __m256i s = b <= 2 ? _mm256_slli_epi16(v, 2 - b) : _mm256_srli_epi16(v, b - 2);
    return _mm256_and_si256(s, _mm256_set1_epi8(4));
}

/* Q3_K records (kernels.h): code vectors jj and jj + 4 of octet h of pair record pr, each code
 * + 4 (0..7) from its two planes, in the Q6_K record's order. */
static inline void q3_rec_codes4(const uint8_t *pr, int h, int jj, __m256i *ca, __m256i *cb) {
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i la = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q3_LO + 32 * h));
    const __m256i lb = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q3_LO + 64 + 32 * h));
    const __m256i hi = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q3_HI + 32 * h));
    const __m256i a = _mm256_and_si256(_mm256_srli_epi16(la, 2 * jj), m2);
    const __m256i b = _mm256_and_si256(_mm256_srli_epi16(lb, 2 * jj), m2);
    *ca = _mm256_or_si256(a, q3_third(hi, jj));
    *cb = _mm256_or_si256(b, q3_third(hi, jj + 4));
}

/* The same + 28: the Q6_K codes (0..63, value (code - 32) d sc) of the same values. */
static inline void q3_rec_codes(const uint8_t *pr, int h, int jj, __m256i *ca, __m256i *cb) {
    const __m256i k28 = _mm256_set1_epi8(28);
    q3_rec_codes4(pr, h, jj, ca, cb);
    *ca = _mm256_add_epi8(*ca, k28);
    *cb = _mm256_add_epi8(*cb, k28);
}

/* Q2_K records (kernels.h): code vectors jj and jj + 4 (0..3) of octet h of pair record pr. */
static inline void q2_rec_codes(const uint8_t *pr, int h, int jj, __m256i *ca, __m256i *cb) {
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i la = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q2_LO + 32 * h));
    const __m256i lb = _mm256_loadu_si256((const __m256i *)(pr + SKV_K16_Q2_LO + 64 + 32 * h));
    *ca = _mm256_and_si256(_mm256_srli_epi16(la, 2 * jj), m2);
    *cb = _mm256_and_si256(_mm256_srli_epi16(lb, 2 * jj), m2);
}

/* Q2_K records: octet h's scales and mins of pair record pr as 16-bit words, row k's
 * (group 2p, group 2p + 1) at words 2k, 2k + 1. */
static inline void q2_rec_scales(const uint8_t *pr, int h, __m256i *sc, __m256i *mn) {
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i scm = _mm_loadu_si128((const __m128i *)(pr + SKV_K16_Q2_SCM + 16 * h));
    *sc = _mm256_cvtepu8_epi16(_mm_and_si128(scm, m4));
    *mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scm, 4), m4));
}

#define Q6_MAX_SB 64 /* x reordered on the stack up to 16384 columns; wider: per step */

/* x codes of super-block s in the Q6_K / Q3_K records' order: per pair p and vector j, codes 2j,
 * 2j + 1 of group 2p, then of group 2p + 1. */
static inline void q6_xr(const int8_t *xq, int8_t xr[256]) {
    for (int p = 0; p < 8; p++) {
        const __m128i g0 = _mm_loadu_si128((const __m128i *)(xq + 32 * p));
        const __m128i g1 = _mm_loadu_si128((const __m128i *)(xq + 32 * p + 16));
        _mm_storeu_si128((__m128i *)(xr + 32 * p), _mm_unpacklo_epi16(g0, g1));
        _mm_storeu_si128((__m128i *)(xr + 32 * p + 16), _mm_unpackhi_epi16(g0, g1));
    }
}

/* x in the records' order for decode: xr (reordered codes, q6_xr) and xp (group-sum pairs,
 * k_xpairs) of each super-block, made once per x row where they fit (pre), else per step. */
typedef struct q6_x {
    bool pre;
    int8_t xr[Q6_MAX_SB][256] __attribute__((aligned(32)));
    int32_t xp[Q6_MAX_SB][8];
    int8_t one[256] __attribute__((aligned(32)));
    int32_t onep[8];
} q6_x;

static inline void q6_x_row(q6_x *x, act_row a, int nsb) {
    x->pre = nsb <= Q6_MAX_SB;
    for (int s = 0; x->pre && s < nsb; s++) {
        q6_xr(a.q + 256 * s, x->xr[s]);
        k_xpairs(a, s, 1, x->xp[s]);
    }
}

/* Super-block s's xr and xp. */
static inline void q6_x_at(q6_x *x, act_row a, int s, const int8_t **xr, const int32_t **xp) {
    if (x->pre) {
        *xr = x->xr[s], *xp = x->xp[s];
        return;
    }
    q6_xr(a.q + 256 * s, x->one);
    k_xpairs(a, s, 1, x->onep);
    *xr = x->one, *xp = x->onep;
}

/* A Q6_K (or Q3_K) record pair's 8 code vectors of one octet (q6_rec_codes / q3_rec_codes) in
 * the prefill hexads' K order, at q (the pair's 512 bytes, + 32 for octet 1): vectors 2g and
 * 2g + 1 hold codes 4g..4g+3 of the pair's two groups, 2 of each in a row's lane; the low words
 * of the two make group 2p's 4 codes (to q + 64 g), the high words group 2p + 1's (q + 64 (4 + g)).
 */
static inline void rec_pair_to_k_order(const __m256i v[8], uint8_t *q) {
    for (int g = 0; g < 4; g++) {
        const __m256i a = v[2 * g], b = v[2 * g + 1];
        _mm256_store_si256((__m256i *)(q + 64 * g),
                           _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xaa));
        _mm256_store_si256((__m256i *)(q + 64 * (4 + g)),
                           _mm256_blend_epi16(_mm256_srli_epi32(a, 16), b, 0xaa));
    }
}

/* Q2_K records: octet h of pair record pr as the prefill hexads take it: its code vectors in K
 * order at q (rec_pair_to_k_order), its scales and mins as words (q2_rec_scales). */
static inline void q2_rec_prep(const uint8_t *pr, int h, uint8_t *q, __m256i *sc, __m256i *mn) {
    __m256i v[8];
    for (int jj = 0; jj < 4; jj++) q2_rec_codes(pr, h, jj, &v[jj], &v[jj + 4]);
    rec_pair_to_k_order(v, q);
    q2_rec_scales(pr, h, sc, mn);
}

/* Prefill fetches the k16 records that its next preparation will read (skv_k16_next_prep) into
 * L2, a share before each tile while the tiles of the current column block run: preparing them
 * straight from memory stalled for ~25% of the VNNI Q8_0 tile loop's samples and ~10% of Q4_K's.
 * (VNNI only: the slower AVX2 tiles hide the wait, no gain measured there on Zen 5.) Addresses
 * are formed as integers: a group's lines from the one holding its first byte may end past
 * the weights (a prefetch does not fault). */
typedef struct k16_ahead {
    uintptr_t p[2]; /* [ng]: the line holding each group's first record byte */
    size_t len;     /* bytes from p[c] to the group's last record byte */
    size_t off;     /* bytes fetched so far, over the groups in turn */
    int ng, share;  /* share: lines per tile */
} k16_ahead;

/* tg: 16-row groups per tile (at most 2: the callers assert it); rec: record bytes, of unit values;
 * tiles: the tiles that will run before the next preparation. */
static inline k16_ahead k16_ahead_next(const skv_mm *mm, int mc0, int mcs, int i1, int r, int tg,
                                       int r0, int r1, int kb, int nkb, int kbs, size_t rec,
                                       int unit, int tiles) {
    k16_ahead a = {{0, 0}, 0, 0, 0, 0};
    int g, ng, b0, nb;
    if (!mm->w_k16 || !skv_k16_next_prep(mc0, mcs, i1, r, tg, r0, r1, kb, nkb, kbs, mm->n_in / unit,
                                         &g, &ng, &b0, &nb))
        return a;
    a.ng = ng;
    a.len = (size_t)nb * rec + 63;
    for (int c = 0; c < ng; c++)
        a.p[c] = (uintptr_t)k16_at(mm, g + c, b0, unit, rec) & ~(uintptr_t)63;
    a.share = (int)((size_t)a.ng * a.len / 64 / (size_t)(tiles > 0 ? tiles : 1)) + 1;
    return a;
}

/* The next share of a's lines. */
static inline void k16_ahead_some(k16_ahead *a) {
    for (int n = a->share; n > 0 && a->off < (size_t)a->ng * a->len; n--, a->off += 64) {
        const size_t c = a->off >= a->len; /* ng <= 2 */
        _mm_prefetch((const char *)(a->p[c] + (a->off - c * a->len)), _MM_HINT_T1);
    }
}

/* One Q8_0 (or Q4_0: the scales lie alike) record's step of its 16 rows' chains: s0 / s1 the
 * exact integer dots of rows [0, 8) / [8, 16), acc += s (dx d), as every Q8_0 / Q4_0 kernel sums
 * (the same bits). */
_Static_assert((int)SKV_K16_Q8_D == (int)SKV_K16_Q4_D,
               "Q8_0 and Q4_0 records keep their scales alike");
static inline void q8_rec_chain(const uint8_t *rec, __m256i s0, __m256i s1, float dx,
                                __m256 acc[2]) {
    const __m256 vdx = _mm256_set1_ps(dx);
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + SKV_K16_Q8_D)));
    const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + SKV_K16_Q8_D + 16)));
    acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(vdx, d0), acc[0]);
    acc[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(vdx, d1), acc[1]);
}

/* A 16-row group's outputs (acc[0]: rows 0-7, acc[1]: 8-15), the first n (1..16) stored. */
static inline void store_group(float *y, const __m256 acc[2], int n) {
    if (n >= 16) {
        _mm256_storeu_ps(y, acc[0]);
        _mm256_storeu_ps(y + 8, acc[1]);
        return;
    }
    float t[16];
    _mm256_storeu_ps(t, acc[0]);
    _mm256_storeu_ps(t + 8, acc[1]);
    memcpy(y, t, sizeof(float) * (size_t)n);
}

#endif
