/* decode.c — the per-context policy state and decoding-time compression (docs/SPEC.md, kvpress
 * DecodingPress; StreamingLLM's real use): a context with a budget cuts every head back to
 * max_entries after every `interval` new tokens, scoring its entries as at prefill time with
 * the last min(W, interval) tokens' queries as the (kept) window. */
#include "context.h"
#include "policies.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_pstate_free(skv_policy_state *ps) {
    if (!ps) return;
    free(ps->acc);
    free(ps->acc_n);
    free(ps->qring);
    free(ps);
}

static size_t ring_floats(const skv_context *ctx, int qw) {
    const skv_hparams *hp = &ctx->model->hp;
    return (size_t)hp->n_layer * hp->n_head * (size_t)qw * hp->head_dim;
}

skv_policy_state *skv_pstate_clone(const skv_policy_state *src, const skv_context *ctx, bool *ok) {
    *ok = true;
    if (!src) return NULL;
    skv_policy_state *ps = calloc(1, sizeof *ps);
    if (!ps) goto fail;
    *ps = *src;
    ps->acc = NULL, ps->acc_n = NULL, ps->qring = NULL;
    ps->params.policy = ps->policy;
    const size_t heads = (size_t)ctx->model->hp.n_layer * ctx->model->hp.n_head_kv;
    if (src->acc) {
        ps->acc = malloc(heads * (size_t)src->acc_cap * sizeof *ps->acc);
        ps->acc_n = malloc(heads * sizeof *ps->acc_n);
        if (!ps->acc || !ps->acc_n) goto fail;
        memcpy(ps->acc, src->acc, heads * (size_t)src->acc_cap * sizeof *ps->acc);
        memcpy(ps->acc_n, src->acc_n, heads * sizeof *ps->acc_n);
    }
    if (src->qring) {
        size_t n = ring_floats(ctx, src->qw);
        ps->qring = malloc(n * sizeof *ps->qring);
        if (!ps->qring) goto fail;
        memcpy(ps->qring, src->qring, n * sizeof *ps->qring);
    }
    return ps;
fail:
    skv_pstate_free(ps);
    *ok = false;
    return NULL;
}

void skv_pstate_reset(skv_policy_state *ps, const skv_context *ctx) {
    if (!ps) return;
    const size_t heads = (size_t)ctx->model->hp.n_layer * ctx->model->hp.n_head_kv;
    if (ps->acc) {
        memset(ps->acc, 0, heads * (size_t)ps->acc_cap * sizeof *ps->acc);
        memset(ps->acc_n, 0, heads * sizeof *ps->acc_n);
        ps->acc_ok = true;
        ps->acc_ms = 0.0;
    }
    ps->q_valid = 0;
    ps->since = 0;
    ps->cuts = 0;
}

void skv_pstate_compact(skv_policy_state *ps, int lh, const int32_t *keep, int n_keep) {
    if (!ps || !ps->acc) return;
    double *a = ps->acc + (size_t)lh * ps->acc_cap;
    const int old = ps->acc_n[lh];
    for (int j = 0; j < n_keep; j++) a[j] = keep[j] < old ? a[keep[j]] : 0.0;
    for (int j = n_keep; j < old; j++) a[j] = 0.0;
    ps->acc_n[lh] = n_keep;
}

/* The last qw tokens' post-RoPE queries of every layer, oldest first. */
static void ring_push(skv_context *ctx, int layer, int n) {
    skv_policy_state *ps = ctx->pstate;
    const skv_hparams *hp = &ctx->model->hp;
    const int d = hp->head_dim, qw = ps->qw, nh = hp->n_head;
    float *base = ps->qring + (size_t)layer * nh * qw * d;
    const int take = n < qw ? n : qw;
    const int keep_old = qw - take; /* rows that stay, shifted to the front */
    for (int h = 0; h < nh; h++) {
        float *r = base + (size_t)h * qw * d;
        if (keep_old > 0) memmove(r, r + (size_t)take * d, (size_t)keep_old * d * sizeof *r);
        for (int i = 0; i < take; i++)
            memcpy(r + (size_t)(keep_old + i) * d,
                   ctx->q + (size_t)(n - take + i) * nh * d + (size_t)h * d, (size_t)d * sizeof *r);
    }
    if (layer == hp->n_layer - 1) ps->q_valid = ps->q_valid + n < qw ? ps->q_valid + n : qw;
}

void skv_pstate_layer(skv_context *ctx, int layer, int n, int pos0) {
    skv_policy_state *ps = ctx->pstate;
    if (ps->acc) {
        const double t0 = skv_time_ms();
        skv_h2o_accumulate(ctx, layer, n, pos0);
        ps->acc_ms += skv_time_ms() - t0;
    }
    if (ps->qring) ring_push(ctx, layer, n);
}

bool skv_pstate_must_split(const skv_context *ctx, int n) {
    const skv_policy_state *ps = ctx->pstate;
    return ps && ps->max_entries >= 1 && ps->params.positions == SKV_POSITIONS_REROTATE && n >= 2 &&
           (int64_t)skv_cache_longest(ctx->cache) + n > ctx->params.n_ctx;
}

int skv_pstate_next_piece(const skv_context *ctx, int n) {
    const int room = ctx->params.n_ctx - skv_cache_longest(ctx->cache);
    return SKV_MAX(1, SKV_MIN(n, SKV_MIN(skv_context_budget_piece(ctx), room)));
}

bool skv_pstate_unbounded(const skv_context *ctx, int n) {
    const skv_policy_state *ps = ctx->pstate;
    if (!ps || ps->max_entries < 1 || ps->params.positions != SKV_POSITIONS_REROTATE) return false;
    const skv_cache *c = ctx->cache;
    if ((int64_t)skv_cache_longest(c) + n > ctx->params.n_ctx) return false;
    return (int64_t)c->n_past + n < INT32_MAX / 2;
}

/* A cut takes every head from n entries to the same max_entries: SKV_ERR_STATE unless every
 * head holds the same number of entries (pyramid, adakv or a per-head selection leave them
 * unequal). */
static skv_status heads_equal(const skv_context *ctx, skv_err *err) {
    const skv_cache *c = ctx->cache;
    const int H = c->n_head_kv, n = c->heads[0].n;
    for (int i = 1; i < c->n_layer * H; i++)
        if (c->heads[i].n != n)
            return skv_err_set(err, SKV_ERR_STATE,
                               "a decoding budget needs every head to hold the same number of "
                               "entries (layer %d kv head %d holds %d, layer 0 kv head 0 %d): "
                               "compress with a policy that keeps as many in every head, or "
                               "remove the budget (max_entries = 0)",
                               i / H, i % H, c->heads[i].n, n);
    return SKV_OK;
}

skv_status skv_pstate_before_forward(const skv_context *ctx, skv_err *err) {
    const skv_policy_state *ps = ctx->pstate;
    return ps && ps->max_entries > 0 ? heads_equal(ctx, err) : SKV_OK;
}

skv_status skv_context_set_budget(skv_context *ctx, const skv_compress_params *params,
                                  int max_entries, int interval, skv_err *err) {
    if (!ctx) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no context given");
    if (max_entries == 0) {
        ctx->cache->cap_hint = 0;
        if (ctx->pstate) {
            free(ctx->pstate->qring);
            ctx->pstate->qring = NULL;
            ctx->pstate->max_entries = 0;
        }
        return SKV_OK;
    }
    if (!params || !params->policy)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "a budget needs a policy");
    const skv_policy *pol = skv_policy_find(params->policy);
    if (!pol)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown policy '%.64s' (valid: %s)",
                           params->policy, skv_policy_list());
    if (!pol->decode)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "policy '%s' does not run under a decoding budget; use one that "
                           "does (skv_policy_about.decode; `sparsekv policies` marks them)",
                           pol->name);
    const int n_ctx = ctx->params.n_ctx;
    if (max_entries < 1 || interval < 1 || (int64_t)max_entries + interval > n_ctx)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "a budget needs max_entries >= 1, interval >= 1 and max_entries + "
                           "interval <= n_ctx (%d), got %d and %d",
                           n_ctx, max_entries, interval);
    if (params->sinks < 0 || params->kernel < 1 || params->kernel > 65536 ||
        params->window_keep < 0 || params->n_window < 0 ||
        (params->positions != SKV_POSITIONS_ORIGINAL &&
         params->positions != SKV_POSITIONS_REROTATE))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "invalid compression parameters");
    int qw = params->n_window > 0 ? params->n_window : interval; /* 0: the CLI's default */
    if (qw > interval) qw = interval;
    /* the window is always kept: a budget no larger leaves the policy nothing to choose, and
     * a cut right after a prompt shorter than the window could not keep it at all */
    if (max_entries <= qw)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "a budget of %d entries is not larger than its window of %d queries "
                           "(min(n_window, interval), always kept)",
                           max_entries, qw);
    if (skv_cache_position_mode(ctx->cache) == SKV_POSITIONS_REROTATE &&
        params->positions != SKV_POSITIONS_REROTATE)
        return skv_err_set(err, SKV_ERR_STATE,
                           "the cache is re-rotated: a budget over it must re-rotate too");
    skv_status eq = heads_equal(ctx, err);
    if (eq) return eq;
    /* a cut comes after new tokens (its window is their queries): they need room */
    if (ctx->cache->heads[0].n >= n_ctx)
        return skv_err_set(err, SKV_ERR_STATE,
                           "the heads hold %d entries, the whole context: a budget cuts only "
                           "after new tokens enter, and none fit; set the budget before the "
                           "context fills",
                           ctx->cache->heads[0].n);
    if (pol->needs & SKV_POLICY_NEEDS_PREFILL_ATTN) { /* refused past the first token */
        skv_status st = skv_context_accumulate_attention(ctx, true, err);
        if (st) return st;
    }
    skv_policy_state *ps = ctx->pstate;
    if (!ps) {
        ps = ctx->pstate = calloc(1, sizeof *ps);
        if (!ps) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    float *ring = calloc(ring_floats(ctx, qw), sizeof *ring);
    if (!ring) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the window queries");
    free(ps->qring);
    ps->qring = ring;
    ps->qw = qw;
    ps->q_valid = 0;
    ps->params = *params;
    snprintf(ps->policy, sizeof ps->policy, "%s", pol->name);
    ps->params.policy = ps->policy;
    ps->params.window_tokens = NULL;
    ps->max_entries = max_entries;
    ps->interval = interval;
    ps->since = 0;
    ctx->cache->cap_hint = max_entries + interval;
    return SKV_OK;
}

int skv_context_budget_cuts(const skv_context *ctx) {
    return ctx && ctx->pstate ? ctx->pstate->cuts : 0;
}

int skv_context_budget_piece(const skv_context *ctx) {
    const skv_policy_state *ps = ctx ? ctx->pstate : NULL;
    if (!ps || ps->max_entries < 1) return 0;
    /* once a whole interval has come (the heads stayed within max_entries), the next cut is due
     * as soon as they pass it: a whole interval keeps the bound */
    return ps->since < ps->interval ? ps->interval - ps->since : ps->interval;
}

/* One cut: every head (all of equal length n) back to max_entries entries. */
static skv_status cut(skv_context *ctx, skv_err *err) {
    skv_policy_state *ps = ctx->pstate;
    skv_cache *c = ctx->cache;
    const skv_hparams *hp = &ctx->model->hp;
    const int L = c->n_layer, H = c->n_head_kv;
    const int n = c->heads[0].n;
    skv_status eq = heads_equal(ctx, err);
    if (eq) return eq;
    if (n <= ps->max_entries) return SKV_OK;
    const skv_policy *pol = skv_policy_find(ps->policy);
    if (!pol) return skv_err_set(err, SKV_ERR_STATE, "the budget's policy is gone");
    const int W = ps->q_valid < ps->qw ? ps->q_valid : ps->qw;
    if (W < 1 || W >= n)
        return skv_err_set(err, SKV_ERR_STATE, "no window queries for the budget's cut");
    const int T = n - W; /* scored entries; the last W (the window) are kept */
    const size_t rows = pol->shared ? 1 : (size_t)L * H;
    double *scores = malloc(rows * (size_t)n * sizeof *scores);
    const float **queries = calloc((size_t)L, sizeof *queries);
    int32_t *idx = malloc((size_t)n * sizeof *idx), *pos = malloc((size_t)n * sizeof *pos);
    uint64_t *rank = malloc((size_t)n * sizeof *rank);
    skv_status st = SKV_OK;
    if (!scores || !queries || !idx || !pos || !rank) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory for a budget cut of %d entries", n);
        goto done;
    }
    for (int l = 0; l < L; l++)
        queries[l] = ps->qring + (size_t)l * hp->n_head * ps->qw * hp->head_dim;
    st = skv_policy_score_cache(ctx, pol,
                                (skv_score_job){
                                    .T = T,
                                    .T_total = n,
                                    .keep = ps->max_entries,
                                    .params = &ps->params,
                                    .cache = c,
                                    .queries = queries,
                                    .q_n = ps->qw,
                                    .q_off = ps->qw - W,
                                    .W = W,
                                },
                                scores, err);
    if (st) goto done;
    for (int l = 0; l < L && !st; l++) {
        for (int h = 0; h < H && !st; h++) {
            const size_t i = (size_t)l * H + (size_t)h;
            const double *row = scores + (pol->shared ? 0 : i * (size_t)n);
            int k = skv_select_topk(row, n, ps->max_entries, idx, rank);
            const skv_cache_head *hd = &c->heads[i];
            for (int j = 0; j < k; j++) pos[j] = hd->pos[idx[j]];
            st = skv_cache_select_head(c, l, h, pos, k, err);
            if (!st) skv_pstate_compact(ps, (int)i, idx, k);
        }
    }
    if (!st && ps->params.positions == SKV_POSITIONS_REROTATE) st = skv_cache_rerotate(c, err);
    if (!st) ps->cuts++;
done:
    free(scores);
    free(queries);
    free(idx);
    free(pos);
    free(rank);
    return st;
}

skv_status skv_pstate_after_forward(skv_context *ctx, int n, skv_err *err) {
    skv_policy_state *ps = ctx->pstate;
    if (ps->max_entries < 1) return SKV_OK;
    ps->since += n;
    const int longest = skv_cache_longest(ctx->cache);
    if (longest <= ps->max_entries) return SKV_OK;
    /* not yet due, unless the heads have no room left for one more token (with max_entries +
     * interval = n_ctx they would fill up before the interval and lock the context) */
    if (ps->since < ps->interval && longest <= ps->max_entries + ps->interval &&
        longest < ctx->params.n_ctx)
        return SKV_OK;
    /* a failed cut (a registered policy's error, out of memory) leaves since as it is: the
     * next forward call tries again */
    const skv_status st = cut(ctx, err);
    if (!st) ps->since = 0;
    return st;
}
