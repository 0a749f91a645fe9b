/* context.h — per-sequence state: the cache, scratch buffers and captured queries. */
#ifndef SKV_CONTEXT_H
#define SKV_CONTEXT_H

#include "cache.h"
#include "model/model.h"
#include "threads.h"

struct skv_context {
    const skv_model *model;
    skv_context_params params;
    skv_cache *cache;
    skv_pool *pool;

    /* scratch for a batch of up to n_batch tokens (grown on demand) */
    int n_batch;
    float *x;        /* [n_batch, n_embd] residual stream */
    float *xb;       /* [n_batch, n_embd] normed input */
    float *q;        /* [n_batch, n_head * head_dim] */
    float *k;        /* [n_batch, n_head_kv * head_dim] */
    float *v;        /* [n_batch, n_head_kv * head_dim] */
    float *att;      /* [n_batch, n_head * head_dim] attention output */
    float *hb;       /* [n_batch, n_ff] gate */
    float *hb2;      /* [n_batch, n_ff] up, or [n_batch, 2 n_ff] fused [gate | up] rows */
    float *qkv;      /* [n_batch, (n_head + 2 n_head_kv) head_dim] fused projection, or NULL */
    float *rope_cs;  /* [n_batch, n_rot] cos/sin pairs of each token's position */
    void *attn_work; /* [n_threads, attn_work_size] blocked prefill attention scratch */
    size_t attn_work_size;
    int *attn_nvis;   /* [n_threads, SKV_ATTN_TOKENS] visible entries per token of a block */
    float *attn_part; /* [n_head_kv, n_threads, n_head / n_head_kv * (head_dim + 1)] split-K
                         partial outputs and log-sum-exps of one decode token */
    void *work;       /* matmul work (quantized activations) */
    size_t work_size;

    /* captured queries (capture_window > 0): [n_layer][n_head, capture_window, head_dim] */
    float *qcap;
    int qcap_n;         /* valid captured tokens */
    int qcap_first_pos; /* position of the first captured token */

    /* h2o's accumulated attention and the decoding budget (policies.h), or NULL */
    struct skv_policy_state *pstate;
};

/* Prefill attention runs on blocks of this many tokens of one kv head (src/kernels/attn_prefill.c).
 */
#define SKV_ATTN_TOKENS 32

/* Grows the scratch buffers to batches of n tokens. */
skv_status skv_context_reserve_batch(skv_context *ctx, int n, skv_err *err);

/* Turns query capture on (W > 0) or off (W = 0) for later forward calls. */
skv_status skv_context_set_capture(skv_context *ctx, int capture_window, skv_err *err);

#endif
