/* avx2_util.h — horizontal reductions (float and int32), an 8x8 transpose and a spread-out
 * prefetch shared by the files compiled with -mavx2 -mfma -mf16c (the *_avx2.c files, and the
 * AVX-512 ones, built on top of those flags). */
#ifndef SKV_AVX2_UTIL_H
#define SKV_AVX2_UTIL_H

#include <immintrin.h>
#include <stddef.h>

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* In-place transpose of 8 vectors (v[j] lane i <-> v[i] lane j). */
static inline __attribute__((always_inline)) void transpose8(__m256 v[8]) {
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Prefetch of a byte range in shares: prefetch_start(s, p, bytes, parts), then prefetch_share(s)
 * up to parts times, each asking for the next bytes / parts (whole lines). Prefill uses it for
 * the next W panel while the tiles of the current one run: a panel's block is read once per
 * block of x rows, cold (from memory), and without it each panel began with a stall of misses
 * until the hardware prefetcher caught on (llama-3.2-1b F16 pp512 at 2 threads: AVX2 level +4..+7%,
 * AVX-512 +0..+11%). */
typedef struct {
    const char *p;
    size_t left, step;
} prefetch_stream;

static inline void prefetch_start(prefetch_stream *s, const void *p, size_t bytes, size_t parts) {
    s->p = (const char *)p;
    s->left = p ? bytes : 0;
    s->step = parts ? ((bytes + parts - 1) / parts + 63) & ~(size_t)63 : bytes;
}

static inline __attribute__((always_inline)) void prefetch_share(prefetch_stream *s) {
    if (!s->left) return;
    const size_t n = s->step < s->left ? s->step : s->left;
    for (size_t o = 0; o < n; o += 64) _mm_prefetch(s->p + o, _MM_HINT_T0);
    s->p += n;
    s->left -= n;
}

#endif
