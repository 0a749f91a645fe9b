/* attn_prefill_avx2.c — the blocked prefill attention (attn_prefill_simd.h) with AVX2/FMA/F16C:
 * 8 rows per vector. */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "avx2_util.h"
#include <immintrin.h>

#define VL             8
#define V              __m256
#define VI             __m256i
#define V_LOAD(p)      _mm256_load_ps(p)
#define V_LOADU(p)     _mm256_loadu_ps(p)
#define V_STOREU(p, x) _mm256_storeu_ps(p, x)
#define V_DIV(a, b)    _mm256_div_ps(a, b)
#define V_GT(a, b)     _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define V_TRANSPOSE(v) transpose8(v)
#define V_STORE(p, x)  _mm256_store_ps(p, x)
#define V_SET1(f)      _mm256_set1_ps(f)
#define V_ZERO()       _mm256_setzero_ps()
#define V_ADD(a, b)    _mm256_add_ps(a, b)
#define V_SUB(a, b)    _mm256_sub_ps(a, b)
#define V_MUL(a, b)    _mm256_mul_ps(a, b)
#define V_MAX(a, b)    _mm256_max_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_ROUND(x)     _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_CVTI(x)      _mm256_cvtps_epi32(x)
#define V_LOAD_F16(p)  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define VI_LOAD(p)     _mm256_load_si256((const __m256i *)(p))
#define VI_SET1(i)     _mm256_set1_epi32(i)
#define VI_ZERO()      _mm256_setzero_si256()
#define VI_ADD(a, b)   _mm256_add_epi32(a, b)
#define VI_SUB(a, b)   _mm256_sub_epi32(a, b)
#define VI_SLLI(a, n)  _mm256_slli_epi32(a, n)
#define VI_AS_V(a)     _mm256_castsi256_ps(a)
/* lane masks are all-ones / all-zero vectors */
#define VI_GT(a, b)    _mm256_castsi256_ps(_mm256_cmpgt_epi32(a, b))
#define V_NE(a, b)     _mm256_cmp_ps(a, b, _CMP_NEQ_UQ)
#define V_SEL(m, a, b) _mm256_blendv_ps(b, a, m) /* a where m, else b */
#define SKV_AP_FN      skv_attn_prefill_avx2

#include "attn_prefill_simd.h"

#else
/* Built without AVX2/FMA/F16C: nothing here, attn_prefill.c does not call into this file. */
typedef int skv_attn_prefill_avx2_empty;
#endif
