/* avx512_util.h — small helpers shared by the AVX-512 files (include only from *_avx512*.c, which
 * are compiled with the AVX-512 flags). */
#ifndef SKV_AVX512_UTIL_H
#define SKV_AVX512_UTIL_H

#include <immintrin.h>

/* The first n of 16 lanes (n <= 0: none, n >= 16: all). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

#endif
