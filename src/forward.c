/* forward.c — the transformer, read top to bottom: one batched pass of n tokens through every
 * layer, appending their keys and values to the per-head cache.
 *
 *   x = embed(tokens)                               x  [n, n_embd]
 *   for each layer:
 *     xb = rmsnorm(x) ; q, k, v = xb·Wq, xb·Wk, xb·Wv   q  [n, n_head, head_dim]
 *          (or one fused xb·Wqkv split in three; + biases when the model has them)
 *     q, k = rmsnorm per head (qwen3 only)            k, v [n, n_head_kv, head_dim]
 *     RoPE(q, k) at each token's position (the cache's skv_rope_spec, rope.h: the model's, with
 *     the LongRoPE factors of the context's size); q times Llama 4's temperature (mistral3)
 *     append k, v to the cache; capture q (optional)
 *     att = attention(q over each kv head's retained entries with pos <= token pos)
 *     x += att·Wo (+ bo)
 *     xb = rmsnorm(x) ; x += (silu(xb·Wgate) * xb·Wup)·Wdown
 *          (phi3: one fused xb·Wup gives [gate | up])
 *   logits = rmsnorm(x)·Wout
 * Which of these a model has is decided by its architecture descriptor (arch.c) at load time.
 */
#include "kernels/attn_prefill.h"
#include "context.h"
#include "kernels/kernels.h"
#include "policies.h"

#include <math.h>
#include <string.h>

/* Long prompts go through in batches of this many tokens, bounding scratch memory. */
#define FORWARD_BATCH 512

typedef struct attn_task {
    const skv_context *ctx;
    const float *q; /* [n, n_head * head_dim] */
    float *att;     /* [n, n_head * head_dim] */
    int layer, n, pos0;
    int n_split; /* > 1: one decode token, each kv head's entries cut into n_split ranges */
} attn_task;

/* Prefill: one (block of SKV_ATTN_TOKENS tokens, kv head) per work item, interleaved across
 * threads (later blocks see more entries, so interleaving balances the causal triangle), on
 * the blocked kernel; caches it does not take (q8_0) run one (token, kv head) at a time.
 * Decode: one token has only n_head_kv items (3 heads on 2 threads idle a third of the
 * machine), so each head's entries are split into n_split = n_threads ranges whose partial
 * results merge by log-sum-exp. */
static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *t = arg;
    const skv_context *ctx = t->ctx;
    const skv_hparams *hp = &ctx->model->hp;
    const skv_cache *c = ctx->cache;
    const int g = hp->n_head / hp->n_head_kv, hd = hp->head_dim, nkv = hp->n_head_kv;
    const size_t dq = (size_t)hp->n_head * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    if (t->n_split > 1) {
        for (int idx = ith; idx < nkv * t->n_split; idx += nth) {
            int h = idx / t->n_split, part = idx % t->n_split;
            const skv_cache_head *head = skv_cache_head_at_const(c, t->layer, h);
            int n_valid = skv_cache_head_count_upto(head, t->pos0);
            int j0 = (int)((int64_t)n_valid * part / t->n_split);
            int j1 = (int)((int64_t)n_valid * (part + 1) / t->n_split);
            float *out = ctx->attn_part + (size_t)h * t->n_split * g * (hd + 1) +
                         (size_t)part * g * (hd + 1);
            skv_attn_group_lse(out, out + (size_t)g * hd, t->q + (size_t)h * g * hd, g, hd,
                               head->k + (size_t)j0 * c->row_bytes,
                               head->v + (size_t)j0 * c->row_bytes, c->type, j1 - j0, scale);
        }
        return;
    }
    const int n_blocks = (t->n + SKV_ATTN_TOKENS - 1) / SKV_ATTN_TOKENS;
    int *n_vis = ctx->attn_nvis + (size_t)ith * SKV_ATTN_TOKENS;
    void *work = (uint8_t *)ctx->attn_work + (size_t)ith * ctx->attn_work_size;
    for (int idx = ith; idx < n_blocks * nkv; idx += nth) {
        int b0 = idx / nkv * SKV_ATTN_TOKENS, h = idx % nkv;
        int nb = t->n - b0 < SKV_ATTN_TOKENS ? t->n - b0 : SKV_ATTN_TOKENS;
        const skv_cache_head *head = skv_cache_head_at_const(c, t->layer, h);
        size_t off = (size_t)b0 * dq + (size_t)h * g * hd;
        for (int i = 0; i < nb; i++) n_vis[i] = skv_cache_head_count_upto(head, t->pos0 + b0 + i);
        /* head_dim 8 (toy models) fills one vector per row: the per-token kernel does as well */
        if (nb > 1 && hd >= 16 &&
            skv_attn_prefill(t->att + off, dq, t->q + off, dq, nb, g, hd, head->k, head->v, c->type,
                             n_vis, scale, work))
            continue;
        for (int i = 0; i < nb; i++)
            skv_attn_group(t->att + off + (size_t)i * dq, t->q + off + (size_t)i * dq, g, hd,
                           head->k, head->v, c->type, n_vis[i], scale);
    }
}

/* Merges the split-K partials of a decode token: out = sum_c exp(lse_c - L) out_c. */
static void attn_merge(const skv_context *ctx, float *att, int n_split) {
    const skv_hparams *hp = &ctx->model->hp;
    int g = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
    for (int h = 0; h < hp->n_head_kv; h++) {
        const float *parts = ctx->attn_part + (size_t)h * n_split * g * (hd + 1);
        for (int i = 0; i < g; i++) {
            float m = -INFINITY;
            for (int c = 0; c < n_split; c++)
                m = fmaxf(m, parts[(size_t)c * g * (hd + 1) + (size_t)g * hd + i]);
            float *o = att + ((size_t)h * g + i) * hd;
            for (int x = 0; x < hd; x++) o[x] = 0.0f;
            if (m == -INFINITY) continue; /* no entry visible at all */
            float tot = 0.0f;
            for (int c = 0; c < n_split; c++) {
                const float *pc = parts + (size_t)c * g * (hd + 1);
                float w = expf(pc[(size_t)g * hd + i] - m);
                tot += w;
                for (int x = 0; x < hd; x++) o[x] += w * pc[(size_t)i * hd + x];
            }
            for (int x = 0; x < hd; x++) o[x] /= tot;
        }
    }
}

/* The per-token steps between the matrix products, spread over the pool in contiguous token
 * ranges (each token's work is independent, so the split does not change any result). */
typedef enum tok_op {
    TOK_NORM,       /* xb = rmsnorm(x) */
    TOK_ADD_NORM,   /* x += xb (the residual), then xb = rmsnorm(x) */
    TOK_ADD,        /* x += xb */
    TOK_ROPE_STORE, /* RoPE q and k, store k and v in the cache, capture q */
    TOK_SWIGLU,     /* hb = silu(hb) * hb2 */
} tok_op;

typedef struct tok_task {
    skv_context *ctx;
    tok_op op;
    int n, layer, pos0;
    const float *norm; /* [n_embd] */
    const float *bias; /* TOK_ADD*: added with the residual (attention output bias), or NULL */
    int qcap_skip, qcap_slot0, qcap_total;
} tok_task;

static void tok_worker(void *arg, int ith, int nth) {
    const tok_task *t = arg;
    skv_context *ctx = t->ctx;
    const skv_hparams *hp = &ctx->model->hp;
    skv_cache *cache = ctx->cache;
    const int d = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    const int dq = nh * hd, dkv = nkv * hd, g = nh / nkv, l = t->layer;
    const skv_layer_weights *L = &ctx->model->layers[l];
    const skv_rope_spec *rope = &cache->rope;
    const int i0 = (int)((int64_t)t->n * ith / nth), i1 = (int)((int64_t)t->n * (ith + 1) / nth);
    float cs_shift[1024]; /* angles at a shifted position (rerotate mode); n_rot <= 1024 */
    for (int i = i0; i < i1; i++) {
        float *x = ctx->x + (size_t)i * d, *xb = ctx->xb + (size_t)i * d;
        switch (t->op) {
        case TOK_ADD:
        case TOK_ADD_NORM:
            if (t->bias)
                for (int j = 0; j < d; j++) x[j] += xb[j] + t->bias[j];
            else
                for (int j = 0; j < d; j++) x[j] += xb[j];
            if (t->op == TOK_ADD) break;
            /* fall through */
        case TOK_NORM:
            skv_rmsnorm(xb, x, t->norm, d, hp->norm_eps);
            break;
        case TOK_SWIGLU:
            if (!skv_weight_present(&L->w_gate)) { /* fused: hb2 rows are [gate | up] */
                const float *gu = ctx->hb2 + (size_t)i * 2 * hp->n_ff;
                skv_swiglu(ctx->hb + (size_t)i * hp->n_ff, gu, gu + hp->n_ff, hp->n_ff);
            } else
                skv_swiglu(ctx->hb + (size_t)i * hp->n_ff, ctx->hb + (size_t)i * hp->n_ff,
                           ctx->hb2 + (size_t)i * hp->n_ff, hp->n_ff);
            break;
        case TOK_ROPE_STORE: {
            const int pos = t->pos0 + i;
            float *qi = ctx->q + (size_t)i * dq, *ki = ctx->k + (size_t)i * dkv;
            float *vi = ctx->v + (size_t)i * dkv;
            if (skv_weight_present(&L->wqkv)) { /* fused projection: rows [q | k | v] */
                const float *src = ctx->qkv + (size_t)i * (dq + 2 * dkv);
                memcpy(qi, src, (size_t)dq * sizeof(float));
                memcpy(ki, src + dq, (size_t)dkv * sizeof(float));
                memcpy(vi, src + dq + dkv, (size_t)dkv * sizeof(float));
            }
            if (L->bq.data) {
                const float *bq = L->bq.data, *bk = L->bk.data, *bv = L->bv.data;
                for (int j = 0; j < dq; j++) qi[j] += bq[j];
                for (int j = 0; j < dkv; j++) ki[j] += bk[j], vi[j] += bv[j];
            }
            if (L->q_norm.data) { /* per-head RMSNorm before RoPE */
                for (int h = 0; h < nh; h++)
                    skv_rmsnorm(qi + (size_t)h * hd, qi + (size_t)h * hd, L->q_norm.data, hd,
                                hp->norm_eps);
                for (int h = 0; h < nkv; h++)
                    skv_rmsnorm(ki + (size_t)h * hd, ki + (size_t)h * hd, L->k_norm.data, hd,
                                hp->norm_eps);
            }
            const float *cs = ctx->rope_cs + (size_t)i * hp->n_rot;
            for (int h = 0; h < nkv; h++) {
                /* rerotate mode places new tokens right after the head's retained entries */
                int32_t shift = skv_cache_head_at(cache, l, h)->rope_shift;
                const float *a = cs;
                if (shift) {
                    skv_rope_table(rope, cs_shift, (double)pos - shift);
                    a = cs_shift;
                }
                for (int j = 0; j < g; j++)
                    skv_rope_apply_table(rope, qi + (size_t)(h * g + j) * hd, a);
                skv_rope_apply_table(rope, ki + (size_t)h * hd, a);
                skv_cache_store(cache, l, h, i, pos, ki + (size_t)h * hd, vi + (size_t)h * hd);
            }
            if (hp->attn_temp_scale != 0) { /* Llama 4's temperature, by the logical position */
                const float temp =
                    (float)(1.0 +
                            hp->attn_temp_scale * log(floor((double)pos / hp->n_ctx_orig) + 1.0));
                for (int j = 0; j < dq; j++) qi[j] *= temp;
            }
            if (i >= t->qcap_skip) { /* captured layout per layer: [n_head, total, head_dim] */
                float *dst = ctx->qcap + (size_t)l * nh * t->qcap_total * hd;
                int slot = t->qcap_slot0 + i - t->qcap_skip;
                for (int h = 0; h < nh; h++)
                    memcpy(dst + ((size_t)h * t->qcap_total + slot) * hd, qi + (size_t)h * hd,
                           (size_t)hd * sizeof(float));
            }
            break;
        }
        }
    }
}

static void per_token(tok_task *t, tok_op op, const float *norm, const float *bias) {
    t->op = op;
    t->norm = norm;
    t->bias = bias;
    if (t->n == 1) /* one token: not worth waking the pool */
        tok_worker(t, 0, 1);
    else /* (several: the workers are kept busy between the products, so they keep spinning) */
        skv_pool_run(t->ctx->pool, tok_worker, t);
}

/* The pool for a step of n tokens and `work` multiply-adds, or NULL (the caller alone) for a
 * decode step below SKV_POOL_MIN_WORK. A prefill keeps the pool for everything: its workers
 * stay busy between the products (letting the caller run some alone let them fall asleep:
 * stories260K pp64 91k -> 22k t/s). */
static skv_pool *pool_for(const skv_context *ctx, int n, int64_t work) {
    return n == 1 && work < SKV_POOL_MIN_WORK ? NULL : ctx->pool;
}

/* How the model holds W: panels (float), k16 records (Q4_K, Q5_K, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1,
 * IQ4_NL, IQ4_XS, Q3_K and Q2_K at the SIMD levels; Q6_K where its kernels are the AVX2 ones), or
 * the rows. */
static const void *w_layout(const skv_weight *w, skv_mm_layout *layout) {
    *layout = w->panels ? SKV_MM_PANELS : w->k16 ? SKV_MM_K16 : SKV_MM_ROWS;
    return w->panels ? w->panels : w->k16 ? w->k16 : w->data;
}

/* y[n, n_out] = x[n, n_in] . W^T, from W as the model holds it. */
static void mm_w(skv_context *ctx, float *y, const float *x, int n, const skv_weight *w, int n_out,
                 int n_in) {
    skv_mm_layout layout;
    const skv_mm_part part = {y, w_layout(w, &layout), n_out};
    skv_matmul_group(pool_for(ctx, n, (int64_t)n * n_out * n_in), &part, 1, x, n, w->type, layout,
                     n_in, ctx->work);
}

/* Two or three products of one x (q, k, v; gate, up) that the loader did not fuse into one
 * matrix (model.c, fuse: it does whenever they share a type and layout, except quantized rows
 * left in the file mapping, SKV_NO_HUGE): in one pool run when their W share a type and layout
 * (x quantized once), else one after the other (a Q4_K_M file's mixed types). */
static void mm_w_group(skv_context *ctx, const float *x, int n, int n_in, int count,
                       const skv_weight *const *w, float *const *y, const int *n_out) {
    skv_mm_part parts[SKV_MM_GROUP_MAX];
    skv_mm_layout layout = SKV_MM_ROWS, lj;
    bool same = count <= SKV_MM_GROUP_MAX;
    for (int j = 0; same && j < count; j++) {
        parts[j] = (skv_mm_part){y[j], w_layout(w[j], &lj), n_out[j]};
        if (j == 0) layout = lj;
        same = lj == layout && w[j]->type == w[0]->type;
    }
    if (same) {
        int64_t outs = 0;
        for (int j = 0; j < count; j++) outs += n_out[j];
        skv_matmul_group(pool_for(ctx, n, n * outs * n_in), parts, count, x, n, w[0]->type, layout,
                         n_in, ctx->work);
        return;
    }
    for (int j = 0; j < count; j++) mm_w(ctx, y[j], x, n, w[j], n_out[j], n_in);
}

/* Runs one batch of n <= n_batch tokens at positions pos0.. and leaves the final hidden states
 * in ctx->x. qcap_skip: tokens of this batch before the capture window. */
static void forward_batch(skv_context *ctx, const int32_t *tokens, int n, int qcap_skip,
                          int qcap_slot0, int qcap_total) {
    const skv_model *m = ctx->model;
    const skv_hparams *hp = &m->hp;
    skv_cache *cache = ctx->cache;
    const int d = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    const int dq = nh * hd, dkv = nkv * hd, ff = hp->n_ff;
    const int pos0 = cache->n_past;
    float *x = ctx->x, *xb = ctx->xb; /* [n, d] */
    tok_task tt = {ctx, TOK_NORM, n, 0, pos0, NULL, NULL, qcap_skip, qcap_slot0, qcap_total};

    size_t erow = skv_row_bytes(m->tok_embd.type, d);
    for (int i = 0; i < n; i++)
        skv_dequantize_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + erow * tokens[i],
                           x + (size_t)i * d, d);
    for (int i = 0; i < n; i++) /* the same angles serve every layer */
        skv_rope_table(&cache->rope, ctx->rope_cs + (size_t)i * hp->n_rot, pos0 + i);

    for (int l = 0; l < hp->n_layer; l++) {
        const skv_layer_weights *L = &m->layers[l];
        tt.layer = l;

        /* attention block (the previous layer's feed-forward residual is added here) */
        per_token(&tt, l == 0 ? TOK_NORM : TOK_ADD_NORM, L->attn_norm.data, NULL);
        if (skv_weight_present(&L->wqkv)) {
            mm_w(ctx, ctx->qkv, xb, n, &L->wqkv, dq + 2 * dkv, d);
        } else {
            const skv_weight *w[3] = {&L->wq, &L->wk, &L->wv};
            float *const y[3] = {ctx->q, ctx->k, ctx->v};
            const int rows[3] = {dq, dkv, dkv};
            mm_w_group(ctx, xb, n, d, 3, w, y, rows);
        }
        per_token(&tt, TOK_ROPE_STORE, NULL, NULL);
        skv_cache_commit(cache, l, n);

        /* split a decode token's heads when each thread still gets a long range */
        int nth = ctx->params.n_threads, n_split = 1;
        if (n == 1 && nth > 1 && skv_cache_head_at(cache, l, 0)->n >= 256 * nth) n_split = nth;
        attn_task at = {ctx, ctx->q, ctx->att, l, n, pos0, n_split};
        /* (one token over a short cache: the caller alone) */
        skv_pool_run(pool_for(ctx, n, (int64_t)hp->n_head * hd * skv_cache_head_at(cache, l, 0)->n),
                     attn_worker, &at);
        if (n_split > 1) attn_merge(ctx, ctx->att, n_split);
        if (ctx->pstate) skv_pstate_layer(ctx, l, n, pos0); /* h2o sums, budget window */
        mm_w(ctx, xb, ctx->att, n, &L->wo, d, dq);

        /* feed-forward block (SwiGLU) */
        per_token(&tt, TOK_ADD_NORM, L->ffn_norm.data, L->bo.data);
        if (skv_weight_present(&L->w_gate)) {
            const skv_weight *w[2] = {&L->w_gate, &L->w_up};
            float *const y[2] = {ctx->hb, ctx->hb2};
            const int rows[2] = {ff, ff};
            mm_w_group(ctx, xb, n, d, 2, w, y, rows);
        } else { /* fused [gate | up] */
            mm_w(ctx, ctx->hb2, xb, n, &L->w_up, 2 * ff, d);
        }
        per_token(&tt, TOK_SWIGLU, NULL, NULL);
        mm_w(ctx, xb, ctx->hb, n, &L->w_down, d, ff);
    }
    per_token(&tt, TOK_ADD, NULL, NULL); /* the last feed-forward residual */
    cache->n_past += n;
}

/* logits[rows, n_vocab] of the last `rows` tokens of the batch held in ctx->x. */
static void forward_logits(skv_context *ctx, int n, int rows, float *logits) {
    const skv_model *m = ctx->model;
    const int d = m->hp.n_embd;
    for (int i = n - rows; i < n; i++)
        skv_rmsnorm(ctx->xb + (size_t)i * d, ctx->x + (size_t)i * d, m->output_norm.data, d,
                    m->hp.norm_eps);
    mm_w(ctx, logits, ctx->xb + (size_t)(n - rows) * d, rows, &m->output, m->hp.n_vocab, d);
}

static skv_status forward_call(skv_context *ctx, const int32_t *tokens, int n_tokens,
                               skv_logits_mode mode, float *logits, skv_err *err);

skv_status skv_forward(skv_context *ctx, const int32_t *tokens, int n_tokens, skv_logits_mode mode,
                       float *logits, skv_err *err) {
    if (!ctx) return skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_forward: no context given");
    if (n_tokens <= 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "skv_forward needs at least one token (n_tokens = %d)", n_tokens);
    if (!tokens)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_forward: tokens is NULL (n_tokens = %d)",
                           n_tokens);
    if (mode != SKV_LOGITS_NONE && mode != SKV_LOGITS_LAST && mode != SKV_LOGITS_ALL)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown logits mode %d", (int)mode);
    if (mode != SKV_LOGITS_NONE && !logits)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "a logits buffer is required");
    const skv_hparams *hp = &ctx->model->hp;
    if (hp->n_rot > 1024)
        return skv_err_set(err, SKV_ERR_UNSUPPORTED, "rope dimension %d is too large", hp->n_rot);
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "token %d (id %d) is outside the vocabulary [0, %d)", i, tokens[i],
                               hp->n_vocab);
    /* A re-rotating budget whose heads have no room for the whole call takes it in pieces,
     * each ending where a cut is due, as if it had been fed that way (a long prompt streams). */
    if (!skv_pstate_must_split(ctx, n_tokens))
        return forward_call(ctx, tokens, n_tokens, mode, logits, err);
    const size_t V = (size_t)hp->n_vocab;
    for (int done = 0, piece; done < n_tokens; done += piece) {
        piece = skv_pstate_next_piece(ctx, n_tokens - done);
        const bool last = done + piece == n_tokens;
        const skv_logits_mode m = mode == SKV_LOGITS_ALL ? mode : last ? mode : SKV_LOGITS_NONE;
        skv_status st =
            forward_call(ctx, tokens + done, piece, m,
                         mode == SKV_LOGITS_ALL ? logits + (size_t)done * V : logits, err);
        if (st) return st;
    }
    return SKV_OK;
}

/* One forward call on validated arguments: the tokens enter the cache (and a budget's cut
 * follows). */
static skv_status forward_call(skv_context *ctx, const int32_t *tokens, int n_tokens,
                               skv_logits_mode mode, float *logits, skv_err *err) {
    const skv_hparams *hp = &ctx->model->hp;
    skv_cache *cache = ctx->cache;
    if ((int64_t)cache->n_past + n_tokens > ctx->params.n_ctx &&
        !skv_pstate_unbounded(ctx, n_tokens)) /* a budget with rerotate may run past n_ctx */
        return skv_err_set(err, SKV_ERR_STATE,
                           "context full: %d tokens after %d would exceed n_ctx = %d", n_tokens,
                           cache->n_past, ctx->params.n_ctx);

    if (ctx->pstate) {
        skv_status pst = skv_pstate_before_forward(ctx, err);
        if (pst) return pst;
    }

    /* Everything that can fail happens before the first token changes the cache (but a budget's
     * cut, after it: see skv_context_set_budget). */
    int batch = n_tokens < FORWARD_BATCH ? n_tokens : FORWARD_BATCH;
    skv_status st = skv_context_reserve_batch(ctx, batch, err);
    if (st) return st;
    st = skv_cache_reserve(cache, n_tokens, err);
    if (!st) st = skv_h2o_reserve(ctx, n_tokens, err);
    if (st) return st;

    int W = ctx->params.capture_window;
    int cap_total = W < n_tokens ? W : n_tokens; /* the last cap_total tokens are captured */
    int cap_first = n_tokens - cap_total;
    if (ctx->qcap) {
        ctx->qcap_n = cap_total;
        ctx->qcap_first_pos = cache->n_past + cap_first;
    }

    const int pos0 = cache->n_past;
    int bad_state = -1; /* LOGITS_NONE: the first position whose hidden state is not finite */
    for (int b0 = 0; b0 < n_tokens; b0 += batch) {
        int n = n_tokens - b0 < batch ? n_tokens - b0 : batch;
        int skip = n, slot0 = 0;
        if (ctx->qcap && b0 + n > cap_first) {
            skip = cap_first > b0 ? cap_first - b0 : 0;
            slot0 = b0 + skip - cap_first;
        }
        forward_batch(ctx, tokens + b0, n, skip, slot0, cap_total);
        if (mode == SKV_LOGITS_ALL)
            forward_logits(ctx, n, n, logits + (size_t)b0 * hp->n_vocab);
        else if (mode == SKV_LOGITS_LAST && b0 + n == n_tokens)
            forward_logits(ctx, n, 1, logits);
        else if (mode == SKV_LOGITS_NONE && bad_state < 0) /* no logits to show it: the state */
            for (size_t i = 0; i < (size_t)n * hp->n_embd && bad_state < 0; i++)
                if (!isfinite(ctx->x[i])) bad_state = pos0 + b0 + (int)(i / hp->n_embd);
    }
    if (bad_state >= 0)
        return skv_err_set(err, SKV_ERR_NUMERIC,
                           "the model produced a non-finite hidden state at position %d",
                           bad_state);
    /* NaN/Inf weights (or an overflow) show up here first: say where, rather than let a caller
     * sample garbage or report a meaningless metric. */
    int rows = mode == SKV_LOGITS_ALL ? n_tokens : mode == SKV_LOGITS_LAST ? 1 : 0;
    for (int r = 0; r < rows; r++) {
        const float *row = logits + (size_t)r * hp->n_vocab;
        for (int v = 0; v < hp->n_vocab; v++)
            if (!isfinite(row[v]))
                return skv_err_set(err, SKV_ERR_NUMERIC,
                                   "the model produced non-finite logits at position %d",
                                   cache->n_past - rows + r);
    }
    return ctx->pstate ? skv_pstate_after_forward(ctx, n_tokens, err) : SKV_OK;
}
