/* h2o.c — H2O (Zhang et al. 2023): heavy hitters by accumulated attention plus the most recent
 * positions. Score of entry i: sum over every cached query j >= i of softmax_j(q_j.k_i/sqrt(d))
 * (causal over the cache's keys [0, j]), group mean; the last keep / 2 entries are forced.
 *
 * The sums are taken inside the forward pass (skv_context_accumulate_attention): after each
 * layer's attention, skv_h2o_accumulate recomputes every visible q.k of the batch's tokens and
 * adds their softmax to a per-(layer, kv head, entry) float64 sum. This costs about the
 * attention's own score work again (one dot product per query head and visible entry), but
 * no second forward pass and no stored queries. */
#include "context.h"
#include "policies.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the accumulator ------------------------------------------------------------------------ */

typedef struct acc_task {
    skv_context *ctx;
    int layer, n, pos0;
    atomic_bool fail; /* a worker ran out of memory */
} acc_task;

static void acc_worker(void *arg, int ith, int nth) {
    acc_task *t = arg;
    skv_context *ctx = t->ctx;
    skv_policy_state *ps = ctx->pstate;
    const skv_hparams *hp = &ctx->model->hp;
    const skv_cache *c = ctx->cache;
    const int H = hp->n_head_kv, g = hp->n_head / H, d = hp->head_dim;
    const size_t dq = (size_t)hp->n_head * d;
    const float scale = 1.0f / sqrtf((float)d);
    for (int h = ith; h < H; h += nth) {
        const skv_cache_head *head = skv_cache_head_at_const(c, t->layer, h);
        const int len = head->n;
        float *k = malloc(((size_t)len * d + 1) * sizeof *k);
        double *p = malloc(((size_t)len + 1) * sizeof *p);
        if (!k || !p || skv_cache_head_read(c, t->layer, h, k, NULL, NULL, NULL) != SKV_OK) {
            free(k), free(p);
            atomic_store_explicit(&t->fail, true, memory_order_relaxed);
            continue;
        }
        double *acc = ps->acc + ((size_t)t->layer * H + h) * (size_t)ps->acc_cap;
        for (int i = 0; i < t->n; i++) {
            const int nvis = skv_cache_head_count_upto(head, t->pos0 + i);
            for (int j = 0; j < g; j++) {
                const float *q = ctx->q + (size_t)i * dq + ((size_t)h * g + j) * d;
                double mx = -INFINITY, sum = 0;
                for (int e = 0; e < nvis; e++) {
                    const float *ke = k + (size_t)e * d;
                    float s = 0;
                    for (int x = 0; x < d; x++) s += q[x] * ke[x];
                    p[e] = (double)(s * scale);
                    if (p[e] > mx) mx = p[e];
                }
                for (int e = 0; e < nvis; e++) sum += (p[e] = exp(p[e] - mx));
                for (int e = 0; e < nvis; e++) acc[e] += p[e] / sum;
            }
        }
        free(k), free(p);
    }
}

void skv_h2o_accumulate(skv_context *ctx, int layer, int n, int pos0) {
    skv_policy_state *ps = ctx->pstate;
    const int H = ctx->model->hp.n_head_kv;
    /* the sums must cover exactly the entries the head held before this batch */
    for (int h = 0; h < H; h++) {
        const skv_cache_head *head = skv_cache_head_at_const(ctx->cache, layer, h);
        int *an = &ps->acc_n[(size_t)layer * H + h];
        if (!ps->acc_ok || *an + n != head->n || head->n > ps->acc_cap) {
            ps->acc_ok = false;
            return;
        }
    }
    acc_task t = {ctx, layer, n, pos0, false};
    skv_pool_run(ctx->pool, acc_worker, &t); /* the pool's join orders the workers' stores */
    if (atomic_load_explicit(&t.fail, memory_order_relaxed)) ps->acc_ok = false;
    for (int h = 0; h < H; h++) ps->acc_n[(size_t)layer * H + h] += n;
}

skv_status skv_h2o_reserve(skv_context *ctx, int n_more, skv_err *err) {
    skv_policy_state *ps = ctx->pstate;
    if (!ps || !ps->acc) return SKV_OK;
    const skv_cache *c = ctx->cache;
    const size_t heads = (size_t)c->n_layer * c->n_head_kv;
    const int64_t need = (int64_t)skv_cache_longest(c) + n_more;
    if (need <= ps->acc_cap) return SKV_OK;
    int64_t cap = SKV_MAX(need, (int64_t)ps->acc_cap + ps->acc_cap / 2);
    if (cap > INT32_MAX / 2) cap = need;
    double *acc = calloc(heads * (size_t)cap, sizeof *acc);
    if (!acc)
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for %zu x %lld attention sums", heads,
                           (long long)cap);
    for (size_t i = 0; i < heads; i++) /* each row's entries; zeros beyond them */
        memcpy(acc + i * (size_t)cap, ps->acc + i * (size_t)ps->acc_cap,
               (size_t)ps->acc_n[i] * sizeof *acc);
    free(ps->acc);
    ps->acc = acc;
    ps->acc_cap = (int)cap;
    return SKV_OK;
}

static skv_policy_state *pstate_get(skv_context *ctx, skv_err *err) {
    if (!ctx->pstate) {
        ctx->pstate = calloc(1, sizeof *ctx->pstate);
        if (!ctx->pstate) skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    return ctx->pstate;
}

skv_status skv_context_accumulate_attention(skv_context *ctx, bool on, skv_err *err) {
    if (!ctx) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no context given");
    if (!on) {
        if (ctx->pstate) {
            free(ctx->pstate->acc);
            free(ctx->pstate->acc_n);
            ctx->pstate->acc = NULL;
            ctx->pstate->acc_n = NULL;
            ctx->pstate->acc_cap = 0;
        }
        return SKV_OK;
    }
    if (ctx->pstate && ctx->pstate->acc) return SKV_OK;
    if (skv_cache_n_past(ctx->cache) != 0)
        return skv_err_set(err, SKV_ERR_STATE,
                           "h2o's attention sums count from the first token on: set it on an "
                           "empty context (reset() first, or before the prompt); the cache "
                           "holds %d positions",
                           skv_cache_n_past(ctx->cache));
    skv_policy_state *ps = pstate_get(ctx, err);
    if (!ps) return SKV_ERR_NOMEM;
    const skv_hparams *hp = &ctx->model->hp;
    const size_t heads = (size_t)hp->n_layer * hp->n_head_kv;
    /* grown with the heads (skv_h2o_reserve), not sized to n_ctx: under a budget the heads stay
     * small however long the context may run */
    const int cap = SKV_MIN(ctx->params.n_ctx, 64);
    ps->acc = calloc(heads * (size_t)cap, sizeof *ps->acc);
    ps->acc_n = calloc(heads, sizeof *ps->acc_n);
    if (!ps->acc || !ps->acc_n) {
        free(ps->acc), free(ps->acc_n);
        ps->acc = NULL, ps->acc_n = NULL;
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for %zu x %d attention sums", heads,
                           cap);
    }
    ps->acc_cap = cap;
    ps->acc_ok = true;
    ps->acc_ms = 0.0;
    return SKV_OK;
}

skv_status skv_h2o_rows(const skv_context *ctx, const double **rows, skv_err *err) {
    const skv_policy_state *ps = ctx->pstate;
    if (!ps || !ps->acc)
        return skv_err_set(err, SKV_ERR_STATE,
                           "h2o needs the attention accumulated during the prefill: call "
                           "skv_context_accumulate_attention(ctx, true) before it");
    const skv_hparams *hp = &ctx->model->hp;
    const int H = hp->n_head_kv;
    for (int i = 0; ps->acc_ok && i < hp->n_layer * H; i++)
        if (ps->acc_n[i] != skv_cache_head_at_const(ctx->cache, i / H, i % H)->n)
            return skv_err_set(err, SKV_ERR_STATE,
                               "h2o's accumulated attention no longer matches the cache");
    if (!ps->acc_ok)
        return skv_err_set(err, SKV_ERR_STATE,
                           "h2o's accumulated attention does not cover the cache (it was turned "
                           "on late, or the cache was changed outside the policies)");
    for (int i = 0; i < hp->n_layer * H; i++) rows[i] = ps->acc + (size_t)i * ps->acc_cap;
    return SKV_OK;
}

/* ---- the scorer ----------------------------------------------------------------------------- */

static skv_status score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    if (!job->attn_sum)
        return skv_err_set(err, SKV_ERR_STATE, "h2o needs the prefill's accumulated attention");
    const int g = job->n_head / job->n_head_kv, T = job->T;
    const int recent = job->keep / 2;
    for (int r = 0; r < job->n_layer * job->n_head_kv; r++) {
        double *row = scores + (size_t)r * T_stride;
        const double *a = job->attn_sum[r];
        for (int t = 0; t < T; t++) row[t] = a[t] / g;
        /* the most recent keep/2 entries of the head (the engine window is among them) */
        for (int t = SKV_MAX(0, job->T_total - recent); t < T; t++) row[t] = INFINITY;
    }
    return SKV_OK;
}

const skv_policy skv_policy_h2o = {
    .name = "h2o",
    .paper = "Zhang et al. 2023, H2O: Heavy-Hitter Oracle for Efficient Generative Inference "
             "of Large Language Models",
    .rule = "sum_j>=i softmax_j(q_j.k_i/sqrt(d)) over every cached query (group mean); the last "
            "keep/2 forced",
    .cost = "prefill accumulation: one extra q.k + softmax per visible entry per query head",
    .params = "",
    .needs = SKV_POLICY_NEEDS_PREFILL_ATTN,
    .decode = true,
    .score = score,
    .allocate = skv_alloc_uniform,
};
