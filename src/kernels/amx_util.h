/* amx_util.h — helpers shared by the AMX files (include only from *_amx.c, compiled with the
 * AVX-512, AVX512_BF16 and AMX flags): splitting floats into bf16 parts that add up to them
 * exactly, tile rows of bf16 pairs, the tile configuration. */
#ifndef SKV_AMX_UTIL_H
#define SKV_AMX_UTIL_H

#include "avx512_util.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AMX_INLINE static inline __attribute__((always_inline))

/* bf16 of each lane (round to nearest even) and that value back as floats. */
AMX_INLINE __m256i bf16_round(__m512 v, __m512 *back) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    *back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return h;
}

/* The float's top 16 bits: its top 8 significant bits as a bf16 value. */
AMX_INLINE __m512 bf16_top(__m512 w) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(w), _mm512_set1_epi32((int)0xffff0000u)));
}

/* The bf16 nearest each lane (ties to even) as floats (low 16 bits zero); a finite lane past
 * bf16's largest (~3.39e38), which would round to inf, keeps its top 8 bits instead. */
AMX_INLINE __m512 bf16_near(__m512 v) {
    __m512 back;
    (void)bf16_round(v, &back);
    const __mmask16 over = _mm512_fpclass_ps_mask(back, 0x18) &         // +-inf
                           (__mmask16)~_mm512_fpclass_ps_mask(v, 0x99); // from a finite v
    return _mm512_mask_blend_ps(over, back, bf16_top(v));
}

/* The 16 bf16 values of floats that are bf16 values already (low 16 bits zero). */
AMX_INLINE __m256i bf16_bits(__m512 f) {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}

/* v - r where r is finite (an infinity or NaN keeps its own part and leaves 0 to the rest, where
 * inf - inf would make a NaN). */
AMX_INLINE __m512 remainder_of(__m512 v, __m512 r) {
    const __mmask16 fin =
        _mm512_cmp_ps_mask(_mm512_abs_ps(r), _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);
    return _mm512_maskz_sub_ps(fin, v, r);
}

/* Two columns of floats that are bf16 values already (low 16 bits zero) as one B tile row:
 * lane r holds (a[r], b[r]), b's high half above a's (of other floats: their top 16 bits). */
AMX_INLINE __m512i tile_row_f(__m512 a, __m512 b) {
    return _mm512_ternarylogic_epi32(_mm512_castps_si512(b), _mm512_set1_epi32((int)0xffff0000u),
                                     _mm512_srli_epi32(_mm512_castps_si512(a), 16), 0xea);
}

/* An f16 weight (as float) = hi + lo, both bf16 exactly: hi keeps the top 8 significant bits, lo
 * the last 3 (w - hi is exact, with at most 3 bits). An infinity or NaN stays in hi, lo 0. */
AMX_INLINE void split_f16(__m512 w, __m512 *hi, __m512 *lo) {
    *hi = bf16_top(w);
    *lo = remainder_of(w, *hi);
}

/* The same for a finite w, without the guard (a caller that ruled infinities out). */
AMX_INLINE void split_f16_finite(__m512 w, __m512 *hi, __m512 *lo) {
    *hi = bf16_top(w);
    *lo = _mm512_sub_ps(w, *hi);
}

/* Two vectors of floats as 32 bf16 (a's below b's), rounded to nearest: exact for values that
 * are bf16 already. */
AMX_INLINE __m512i bf16_two(__m512 a, __m512 b) {
    return (__m512i)_mm512_cvtne2ps_pbh(b, a);
}

/* v = p[0] + p[1] + p[2] exactly (a float's 24 significant bits in three bf16 parts, each the
 * remainder rounded to nearest) down to 2^-126: a subnormal part is flushed (by the conversion,
 * and the tiles would too), so a lane under ~2^-110 loses its tail. An infinity or NaN stays in
 * p[0]. */
AMX_INLINE void split3(__m512 v, __m512 p[3]) {
    for (int i = 0; i < 3; i++) {
        p[i] = bf16_near(v);
        v = remainder_of(v, p[i]);
    }
}

/* The B tile rows of the three bf16 parts of two vectors a, b of finite floats within bf16's
 * range (softmax weights): row[p] lane r = (a_p[r], b_p[r]), a = a_0 + a_1 + a_2 exactly, each
 * part the top 16 bits of what the ones before it left (a float's 24 significant bits are three
 * times 8; exact down to 2^-126 as split3). Truncating rather than rounding as split3 does needs
 * no conversion and no permute: 14 operations per pair instead of ~23 (attention with weights
 * split so ~7% faster; error against float64 in test_amx no worse). */
AMX_INLINE void pair_rows3(__m512 a, __m512 b, __m512i row[3]) {
    for (int p = 0;; p++) {
        row[p] = tile_row_f(a, b); /* (takes the top 16 bits of each) */
        if (p == 2) return;
        a = _mm512_sub_ps(a, bf16_top(a));
        b = _mm512_sub_ps(b, bf16_top(b));
    }
}

/* ldtilecfg's 64-byte operand (palette 1). */
typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile t */
    uint8_t rows[16];
} tile_config;

/* Every tile 16 rows of 64 bytes. */
static inline void tiles_configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    /* not _tile_loadconfig: gcc 12's macro names 8 bytes of the operand, so the stores to the
     * rest may be removed as dead (then tileloadd faults on an unconfigured tile) */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

/* The tiles read and write memory the compiler does not know they touch (gcc's _tile_loadd and
 * _tile_stored name no operand in memory): stores before a tile load must not move past it or be
 * dropped, loads after a tile store must not move before it. */
#define TILE_MEMORY() __asm__ volatile("" : : : "memory")

#endif
