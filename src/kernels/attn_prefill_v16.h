/* attn_prefill_v16.h — the vector operations of attn_prefill_simd.h at 16 float lanes (AVX-512
 * F), for attn_prefill_avx512.c and attn_prefill_amx.c. */
#ifndef SKV_ATTN_PREFILL_V16_H
#define SKV_ATTN_PREFILL_V16_H

#include "avx512_util.h"
#include <immintrin.h>

#define VL             16
#define V              __m512
#define VI             __m512i
#define V_LOAD(p)      _mm512_load_ps(p)
#define V_LOADU(p)     _mm512_loadu_ps(p)
#define V_STOREU(p, x) _mm512_storeu_ps(p, x)
#define V_DIV(a, b)    _mm512_div_ps(a, b)
#define V_GT(a, b)     _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define V_TRANSPOSE(v) transpose16(v)
#define V_STORE(p, x)  _mm512_store_ps(p, x)
#define V_SET1(f)      _mm512_set1_ps(f)
#define V_ZERO()       _mm512_setzero_ps()
#define V_ADD(a, b)    _mm512_add_ps(a, b)
#define V_SUB(a, b)    _mm512_sub_ps(a, b)
#define V_MUL(a, b)    _mm512_mul_ps(a, b)
#define V_MAX(a, b)    _mm512_max_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ROUND(x)     _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_CVTI(x)      _mm512_cvtps_epi32(x)
#define V_SCALE2(p, k) _mm512_scalef_ps(p, k) /* p * 2^floor(k) */
#define V_LOAD_F16(p)  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define VI_LOAD(p)     _mm512_load_si512(p)
#define VI_SET1(i)     _mm512_set1_epi32(i)
#define VI_ZERO()      _mm512_setzero_si512()
#define VI_ADD(a, b)   _mm512_add_epi32(a, b)
#define VI_SUB(a, b)   _mm512_sub_epi32(a, b)
#define VI_SLLI(a, n)  _mm512_slli_epi32(a, n)
#define VI_AS_V(a)     _mm512_castsi512_ps(a)
/* lane masks are mask registers */
#define VI_GT(a, b)    _mm512_cmpgt_epi32_mask(a, b)
#define V_NE(a, b)     _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ)
#define V_SEL(m, a, b) _mm512_mask_blend_ps(m, b, a) /* a where m, else b */

#endif
