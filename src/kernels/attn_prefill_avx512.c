/* attn_prefill_avx512.c — the blocked prefill attention (attn_prefill_simd.h) with AVX-512 F:
 * 16 rows per vector, the same bits as the AVX2 build of it. */
#if defined(__AVX512F__)

#include "attn_prefill_v16.h"
#define SKV_AP_FN skv_attn_prefill_avx512

#include "attn_prefill_simd.h"

#else
typedef int skv_attn_prefill_avx512_empty;
#endif
