/* context.c — per-sequence state over a shared model: create, clone, reset, accessors. */
#include "context.h"
#include "kernels/attn_prefill.h"
#include "kernels/kernels.h"
#include "policies.h"

#include <string.h>

skv_context_params skv_context_default_params(void) {
    skv_context_params p = {0};
    p.n_ctx = 0;
    p.n_threads = 0;
    p.kv_type = SKV_TYPE_F32;
    p.capture_window = 0;
    return p;
}

static void free_scratch(skv_context *ctx) {
    free(ctx->x);
    free(ctx->xb);
    free(ctx->q);
    free(ctx->k);
    free(ctx->v);
    free(ctx->att);
    free(ctx->hb);
    free(ctx->hb2);
    free(ctx->qkv);
    free(ctx->work);
    free(ctx->rope_cs);
    free(ctx->attn_part);
    free(ctx->attn_work);
    free(ctx->attn_nvis);
    ctx->attn_work = NULL;
    ctx->attn_nvis = NULL;
    ctx->rope_cs = ctx->attn_part = NULL;
    ctx->x = ctx->xb = ctx->q = ctx->k = ctx->v = ctx->att = ctx->hb = ctx->hb2 = NULL;
    ctx->qkv = NULL;
    ctx->work = NULL;
    ctx->n_batch = 0;
    ctx->work_size = 0;
}

static size_t max_work_size(const skv_model *m, int n) {
    const skv_hparams *hp = &m->hp;
    size_t w = skv_matmul_work_size(m->output.type, n, hp->n_embd);
    for (int l = 0; l < hp->n_layer; l++) {
        const skv_layer_weights *L = &m->layers[l];
        const skv_weight *in = skv_weight_present(&L->wqkv) ? &L->wqkv : &L->wq;
        size_t ws[] = {
            skv_matmul_work_size(in->type, n, hp->n_embd),
            skv_matmul_work_size(skv_weight_present(&L->wk) ? L->wk.type : in->type, n, hp->n_embd),
            skv_matmul_work_size(skv_weight_present(&L->wv) ? L->wv.type : in->type, n, hp->n_embd),
            skv_matmul_work_size(L->wo.type, n, hp->n_head * hp->head_dim),
            skv_matmul_work_size(skv_weight_present(&L->w_gate) ? L->w_gate.type : L->w_up.type, n,
                                 hp->n_embd),
            skv_matmul_work_size(L->w_up.type, n, hp->n_embd),
            skv_matmul_work_size(L->w_down.type, n, hp->n_ff)};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i] > w) w = ws[i];
    }
    return w;
}

/* Scratch for batches of up to n tokens (grown on demand, never shrunk). */
skv_status skv_context_reserve_batch(skv_context *ctx, int n, skv_err *err) {
    if (n <= ctx->n_batch) return SKV_OK;
    const skv_hparams *hp = &ctx->model->hp;
    free_scratch(ctx);
    size_t nn = (size_t)n;
    size_t dq = (size_t)hp->n_head * hp->head_dim, dkv = (size_t)hp->n_head_kv * hp->head_dim;
    ctx->x = malloc(nn * hp->n_embd * sizeof(float));
    ctx->xb = malloc(nn * hp->n_embd * sizeof(float));
    ctx->q = malloc(nn * dq * sizeof(float));
    ctx->k = malloc(nn * dkv * sizeof(float));
    ctx->v = malloc(nn * dkv * sizeof(float));
    ctx->att = malloc(nn * dq * sizeof(float));
    ctx->hb = malloc(nn * hp->n_ff * sizeof(float));
    ctx->hb2 = malloc(nn * 2 * hp->n_ff * sizeof(float)); /* fused [gate | up] rows need 2 n_ff */
    bool fused_qkv = false; /* in any layer (a mix of types may fuse some only) */
    for (int l = 0; l < hp->n_layer; l++)
        fused_qkv |= skv_weight_present(&ctx->model->layers[l].wqkv);
    ctx->qkv = fused_qkv ? malloc(nn * (dq + 2 * dkv) * sizeof(float)) : NULL;
    ctx->rope_cs = malloc(nn * hp->n_rot * sizeof(float));
    ctx->attn_part =
        malloc((size_t)hp->n_head_kv * (size_t)ctx->params.n_threads *
               (size_t)(hp->n_head / hp->n_head_kv) * (hp->head_dim + 1) * sizeof(float));
    ctx->attn_work_size =
        skv_attn_prefill_work_size(SKV_ATTN_TOKENS, hp->n_head / hp->n_head_kv, hp->head_dim);
    ctx->attn_work = malloc((size_t)ctx->params.n_threads * ctx->attn_work_size);
    ctx->attn_nvis = malloc((size_t)ctx->params.n_threads * SKV_ATTN_TOKENS * sizeof(int));
    ctx->work_size = max_work_size(ctx->model, n);
    ctx->work = ctx->work_size ? malloc(ctx->work_size) : NULL;
    if (!ctx->x || !ctx->xb || !ctx->q || !ctx->k || !ctx->v || !ctx->att || !ctx->hb ||
        !ctx->hb2 || (fused_qkv && !ctx->qkv) || !ctx->rope_cs || !ctx->attn_part ||
        !ctx->attn_work || !ctx->attn_nvis || (ctx->work_size && !ctx->work)) {
        free_scratch(ctx);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for a batch of %d tokens", n);
    }
    ctx->n_batch = n;
    return SKV_OK;
}

skv_status skv_context_set_capture(skv_context *ctx, int capture_window, skv_err *err) {
    const skv_hparams *hp = &ctx->model->hp;
    if (capture_window < 0 || capture_window > ctx->params.n_ctx)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "capture window %d is outside [0, %d]",
                           capture_window, ctx->params.n_ctx);
    float *q = NULL;
    if (capture_window > 0) {
        size_t n = (size_t)hp->n_layer * hp->n_head * (size_t)capture_window * hp->head_dim;
        q = calloc(n, sizeof(float));
        if (!q) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for captured queries");
    }
    free(ctx->qcap);
    ctx->qcap = q;
    ctx->params.capture_window = capture_window;
    ctx->qcap_n = 0;
    ctx->qcap_first_pos = 0;
    return SKV_OK;
}

skv_context *skv_context_new(const skv_model *model, const skv_context_params *params,
                             skv_err *err) {
    if (!model) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no model");
        return NULL;
    }
    if (model->meta_only) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "the model was loaded for its metadata only");
        return NULL;
    }
    skv_context_params p = params ? *params : skv_context_default_params();
    const skv_hparams *hp = &model->hp;
    if (p.n_ctx < 0 || p.n_threads < 0 || p.capture_window < 0) {
        const char *name = p.n_ctx < 0 ? "n_ctx" : p.n_threads < 0 ? "n_threads" : "capture_window";
        const int v = p.n_ctx < 0 ? p.n_ctx : p.n_threads < 0 ? p.n_threads : p.capture_window;
        skv_err_set(err, SKV_ERR_INVALID_ARG, "context parameter %s is %d: it must not be negative",
                    name, v);
        return NULL;
    }
    if (p.n_threads > SKV_MAX_THREADS) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "n_threads %d: a context runs at most %d threads",
                    p.n_threads, SKV_MAX_THREADS);
        return NULL;
    }
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train;
    skv_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    ctx->model = model;
    ctx->params = p;
    ctx->params.capture_window = 0;
    ctx->cache = skv_cache_new(hp->n_layer, hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_theta,
                               p.kv_type, p.n_ctx, err);
    if (!ctx->cache) goto fail;
    const skv_rope_spec rope = skv_model_rope(model, p.n_ctx); /* LongRoPE: by n_ctx */
    skv_cache_set_rope(ctx->cache, &rope);
    ctx->pool = skv_pool_new(p.n_threads);
    if (!ctx->pool) {
        skv_err_set(err, SKV_ERR_NOMEM, "could not start %d threads", p.n_threads);
        goto fail;
    }
    ctx->params.n_threads = skv_pool_size(ctx->pool);
    if (skv_context_set_capture(ctx, p.capture_window, err)) goto fail;
    return ctx;
fail:
    skv_context_free(ctx);
    return NULL;
}

void skv_context_free(skv_context *ctx) {
    if (!ctx) return;
    free_scratch(ctx);
    free(ctx->qcap);
    skv_pstate_free(ctx->pstate);
    skv_cache_free(ctx->cache);
    skv_pool_free(ctx->pool);
    free(ctx);
}

skv_status skv_context_reserve(skv_context *ctx, int n_tokens, skv_err *err) {
    if (!ctx) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no context given");
    if (n_tokens < 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "n_tokens must be >= 0, got %d", n_tokens);
    return skv_cache_room(ctx->cache, n_tokens, err);
}

skv_context *skv_context_clone(const skv_context *src, skv_err *err) {
    if (!src) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no context given");
        return NULL;
    }
    skv_context *ctx = skv_context_new(src->model, &src->params, err);
    if (!ctx) return NULL;
    skv_cache *c = skv_cache_clone(src->cache, err);
    if (!c) {
        skv_context_free(ctx);
        return NULL;
    }
    skv_cache_free(ctx->cache);
    ctx->cache = c;
    if (src->qcap && src->qcap_n > 0) {
        const skv_hparams *hp = &src->model->hp;
        memcpy(ctx->qcap, src->qcap,
               (size_t)hp->n_layer * hp->n_head * (size_t)src->params.capture_window *
                   hp->head_dim * sizeof(float));
        ctx->qcap_n = src->qcap_n;
        ctx->qcap_first_pos = src->qcap_first_pos;
    }
    bool ok = true;
    ctx->pstate = skv_pstate_clone(src->pstate, ctx, &ok);
    if (!ok) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory copying the policy state");
        skv_context_free(ctx);
        return NULL;
    }
    return ctx;
}

void skv_context_reset(skv_context *ctx) {
    if (!ctx) return;
    skv_cache_clear(ctx->cache);
    ctx->qcap_n = 0;
    ctx->qcap_first_pos = 0;
    skv_pstate_reset(ctx->pstate, ctx);
}

const skv_model *skv_context_model(const skv_context *ctx) {
    return ctx ? ctx->model : NULL;
}
int skv_context_n_past(const skv_context *ctx) {
    return ctx ? ctx->cache->n_past : 0;
}
int skv_context_n_ctx(const skv_context *ctx) {
    return ctx ? ctx->params.n_ctx : 0;
}
int skv_context_n_threads(const skv_context *ctx) {
    return ctx ? ctx->params.n_threads : 0;
}
skv_cache *skv_context_cache(skv_context *ctx) {
    return ctx ? ctx->cache : NULL;
}
const skv_cache *skv_context_cache_const(const skv_context *ctx) {
    return ctx ? ctx->cache : NULL;
}

const float *skv_context_captured_queries(const skv_context *ctx, int layer, int *n,
                                          int *first_pos) {
    if (!ctx) {
        if (n) *n = 0;
        return NULL;
    }
    const skv_hparams *hp = &ctx->model->hp;
    if (!ctx->qcap || ctx->qcap_n == 0 || layer < 0 || layer >= hp->n_layer) {
        if (n) *n = 0;
        return NULL;
    }
    if (n) *n = ctx->qcap_n;
    if (first_pos) *first_pos = ctx->qcap_first_pos;
    /* the forward pass packs each layer densely as [n_head, qcap_n, head_dim] */
    return ctx->qcap + (size_t)layer * hp->n_head * ctx->qcap_n * hp->head_dim;
}
