/* avx512_util.h — small helpers shared by the AVX-512 files (include only from *_avx512*.c and
 * *_amx.c, which are compiled with the AVX-512 flags). */
#ifndef SKV_AVX512_UTIL_H
#define SKV_AVX512_UTIL_H

#include "kernels.h"

#include <immintrin.h>

/* The first n of 16 lanes (n <= 0: none, n >= 16: all). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Stores of the lanes in m for the streaming vector kernels. A masked store costs twice a plain
 * one on AMD Zen 5 even with every lane set (2.3x streaming to memory: SwiGLU of 512 x 8192
 * floats 0.72 -> 0.54 ns per element), so full vectors go plain. (The matmul tiles store
 * rarely: no difference measured there.) */
static inline void store_ps16(float *p, __mmask16 m, __m512 v) {
    if (m == 0xffff)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}
static inline void store_pd8(double *p, __mmask8 m, __m512d v) {
    if (m == 0xff)
        _mm512_storeu_pd(p, v);
    else
        _mm512_mask_storeu_pd(p, m, v);
}

/* In-place transpose of 16 vectors (v[j] lane i <-> v[i] lane j): 32-bit then 64-bit unpacks
 * within each 128-bit lane (four 4x4 transposes per group of 4 rows), then two rounds of
 * 128-bit lane shuffles across the groups. */
static inline __attribute__((always_inline)) void transpose16(__m512 v[16]) {
    __m512 u[16];
    for (int g = 0; g < 4; g++) {
        const __m512 t0 = _mm512_unpacklo_ps(v[4 * g], v[4 * g + 1]);
        const __m512 t1 = _mm512_unpackhi_ps(v[4 * g], v[4 * g + 1]);
        const __m512 t2 = _mm512_unpacklo_ps(v[4 * g + 2], v[4 * g + 3]);
        const __m512 t3 = _mm512_unpackhi_ps(v[4 * g + 2], v[4 * g + 3]);
        /* u[4g + m], 128-bit lane L: rows 4g..4g+3 of column 4L + m */
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
        u[4 * g + 1] =
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
        u[4 * g + 2] =
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
        u[4 * g + 3] =
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    }
    for (int m = 0; m < 4; m++) {
        /* column 4L + m = lane L of u[m], u[4 + m], u[8 + m], u[12 + m] */
        const __m512 a = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88); /* lanes 0, 2 */
        const __m512 b = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd); /* lanes 1, 3 */
        const __m512 c = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
        const __m512 d = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
        v[m] = _mm512_shuffle_f32x4(a, c, 0x88);
        v[8 + m] = _mm512_shuffle_f32x4(a, c, 0xdd);
        v[4 + m] = _mm512_shuffle_f32x4(b, d, 0x88);
        v[12 + m] = _mm512_shuffle_f32x4(b, d, 0xdd);
    }
}

/* Interleaves the two 16-row columns of a pair (loaded as 32 bf16) into 16 (w[2p], w[2p+1]). */
static inline __attribute__((always_inline)) __m512i bf16_pair_cols(__m512i two_cols) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, two_cols);
}

/* Pair p of the BF16 panel at pw (n columns, 2p < n): both columns, or column n - 1 and zeros,
 * as vdpbf16ps and tdpbf16ps read them (matmul_avx512bf16.c, matmul_amx.c). */
static inline __attribute__((always_inline)) __m512i bf16_load_pair(const uint16_t *pw, int p,
                                                                    int n) {
    const uint16_t *c = pw + (size_t)2 * p * SKV_MM_PANEL;
    if (2 * p + 1 < n) return bf16_pair_cols(_mm512_loadu_si512(c));
    return bf16_pair_cols(
        _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)c)));
}

#endif
