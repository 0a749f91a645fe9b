/* attn_prefill_amx.c — the blocked prefill attention (attn_prefill_simd.h) at 16 lanes with both
 * products of F16 caches on AMX tiles (SKV_AP_AMX: the scores and the weighted values; the
 * softmax stays on vectors). attn_prefill.c calls in only when the CPU has AMX-BF16
 * (skv_kernels_use_amx), the cache is F16 and hd % 32 == 0. */
#include "kernels.h"

#if defined(SKV_HAVE_MATMUL_AMX) && defined(__AVX512F__) && defined(__AVX512BF16__) &&             \
    (defined(__AMX_TILE__) || defined(__AMXTILE__)) &&                                             \
    (defined(__AMX_BF16__) || defined(__AMXBF16__))

#include "amx_util.h"
#include "attn_prefill_v16.h"
#define SKV_AP_FN  skv_attn_prefill_amx
#define SKV_AP_AMX 1

#include "attn_prefill_simd.h"

#else
typedef int skv_attn_prefill_amx_empty;
#endif
