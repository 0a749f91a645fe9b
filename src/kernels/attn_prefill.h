/* attn_prefill.h — blocked causal attention for many query tokens at once (prefill).
 *
 * The scores of a block of query rows against a chunk of keys are one small matrix product
 * (register-tiled, no horizontal sums), followed by an online softmax per row across chunks and
 * a second product with the values. Work memory is bounded by the block and chunk sizes, not by
 * the number of entries. */
#ifndef SKV_ATTN_PREFILL_H
#define SKV_ATTN_PREFILL_H

#include "kernels.h"

#include <stdbool.h>
#include <stddef.h>

/* Causal attention of n tokens of one kv group over one kv head's entries.
 * q:   token i's g query rows at q + i*q_stride, each [hd] floats (the g rows contiguous)
 * out: token i's g output rows at out + i*out_stride (must not overlap q, k or v)
 * k, v: the head's entries, rows of kv_type (SKV_TYPE_F32 or SKV_TYPE_F16; others -> return
 *       false without writing, the caller falls back), row r at k + r*skv_row_bytes(kv_type, hd)
 * n_vis[i]: token i attends to entries [0, n_vis[i]) (non-decreasing in i for speed; any order
 *       gives correct results; may be 0 -> zeros)
 * out[i][h] = sum_{j < n_vis[i]} softmax_j(scale * q[i][h] . k[j]) v[j]
 * work: skv_attn_prefill_work_size(n, g, hd) bytes, any alignment (independent of the number
 *       of entries: key chunks are bounded). Single-threaded: callers run one call per
 *       (kv head, token block). n <= 0, g <= 0 or hd <= 0: nothing to do, returns true. */
size_t skv_attn_prefill_work_size(int n, int g, int hd);
bool skv_attn_prefill(float *out, size_t out_stride, const float *q, size_t q_stride, int n, int g,
                      int hd, const void *k, const void *v, skv_type kv_type, const int *n_vis,
                      float scale, void *work);
/* The portable reference (single pass per row, float accumulation); same contract. */
bool skv_attn_prefill_ref(float *out, size_t out_stride, const float *q, size_t q_stride, int n,
                          int g, int hd, const void *k, const void *v, skv_type kv_type,
                          const int *n_vis, float scale, void *work);

/* Blocking of the SIMD paths, shared with the work size: query rows per block (a multiple of
 * 24 and 48, the micro-kernels' rows at 8 and 16 lanes) and keys per chunk. An F16 chunk of
 * K and V is made floats once per block: 96 rows hold forward.c's 32-token block at 3 query
 * heads per kv head (SmolLM2) in one block where 48 took two, and take g = 4 or 7 (Llama 3.2,
 * Qwen2.5) in fewer (Xeon, attention alone: ~3% faster, AVX2 level ~2%). */
#define SKV_AP_ROWS 96
#define SKV_AP_KEYS 128

#if defined(__x86_64__) || defined(__i386__)
/* attn_prefill_avx2.c: only when skv_kernels_use_simd(), hd % 8 == 0, kv_type F32 or F16,
 * n, g >= 1; work 64-byte aligned, at least skv_attn_prefill_work_size bytes. */
void skv_attn_prefill_avx2(float *out, size_t out_stride, const float *q, size_t q_stride, int n,
                           int g, int hd, const void *k, const void *v, skv_type kv_type,
                           const int *n_vis, float scale, void *work);
/* attn_prefill_avx512.c: the same with 16 rows per vector (the same bits); only at the AVX-512
 * level and when hd % 16 == 0. */
void skv_attn_prefill_avx512(float *out, size_t out_stride, const float *q, size_t q_stride, int n,
                             int g, int hd, const void *k, const void *v, skv_type kv_type,
                             const int *n_vis, float scale, void *work);
#endif
#ifdef SKV_HAVE_MATMUL_AMX
/* attn_prefill_amx.c: the same with both products on AMX tiles (other bits: a float sum of exact
 * bf16 partial products); only when skv_kernels_use_amx(), kv_type F16 and hd % 32 == 0. */
void skv_attn_prefill_amx(float *out, size_t out_stride, const float *q, size_t q_stride, int n,
                          int g, int hd, const void *k, const void *v, skv_type kv_type,
                          const int *n_vis, float scale, void *work);
#endif

#endif
