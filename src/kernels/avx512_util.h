/* avx512_util.h — small helpers shared by the AVX-512 files (include only from *_avx512*.c, which
 * are compiled with the AVX-512 flags). */
#ifndef SKV_AVX512_UTIL_H
#define SKV_AVX512_UTIL_H

#include <immintrin.h>

/* The first n of 16 lanes (n <= 0: none, n >= 16: all). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
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

#endif
