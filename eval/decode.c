/* decode.c — decoding-time evaluation (`sparsekv eval --budget LIST`): every sample is
 * teacher-forced under a context budget (skv_context_set_budget: at most N entries per kv head
 * after each cut, a cut every `compress_every` tokens) and each continuation distribution is
 * compared with the full cache's. Both runs make the same forward calls (the prefix in one call,
 * then one token per call), so a budget that never cuts reproduces the reference bit for bit (KL
 * 0). */
#include "eval/eval.h"
#include "sparsekv.h"

#include <stdlib.h>
#include <string.h>

static int most_entries(const skv_context *ctx) {
    return skv_cache_longest(skv_context_cache_const(ctx));
}

/* Feeds the sample (prefix in one call, then one token per call) and keeps the C continuation
 * rows [C, V]; entries [W + C - 1] (may be NULL) gets the most entries of any head after each
 * token. */
static skv_status run_one(skv_context *ctx, const skv_eval_sample *s, int V, float *rows,
                          float *tmp, int *entries, skv_err *err) {
    const int T = s->n_prefix, W = s->n_window, C = s->n_cont;
    skv_status st = skv_forward(ctx, s->tokens, T, SKV_LOGITS_NONE, NULL, err);
    for (int j = T; !st && j < T + W + C - 1; j++) {
        st = skv_forward(ctx, s->tokens + j, 1, SKV_LOGITS_LAST, tmp, err);
        if (entries) entries[j - T] = most_entries(ctx);
        const int i = j - (T + W - 1); /* the row predicting continuation token i */
        if (!st && i >= 0) memcpy(rows + (size_t)i * V, tmp, (size_t)V * sizeof *tmp);
    }
    return st;
}

skv_status skv_eval_decode_configs(const char *const *policies, int n_policies, const int *budgets,
                                   int n_budgets, int compress_every, skv_eval_config **out,
                                   int *n_out, skv_err *err) {
    *out = NULL;
    *n_out = 0;
    if (!policies || !budgets || n_policies < 1 || n_budgets < 1 || compress_every < 1)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_eval_decode_configs: bad argument");
    skv_eval_config *c = calloc((size_t)n_policies * (size_t)n_budgets, sizeof *c);
    if (!c) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int b = 0; b < n_budgets; b++) {
        for (int p = 0; p < n_policies; p++) {
            if (budgets[b] < 1 || strlen(policies[p]) >= sizeof c[n].policy) {
                free(c);
                return skv_err_set(err, SKV_ERR_INVALID_ARG, "bad decoding-time configuration");
            }
            c[n].index = n;
            snprintf(c[n].policy, sizeof c[n].policy, "%s", policies[p]);
            c[n].protocol = SKV_PROTOCOL_ENGINE; /* the context cuts its own cache */
            c[n].positions = SKV_POSITIONS_REROTATE;
            c[n].budget = budgets[b];
            c[n].compress_every = compress_every;
            n++;
        }
    }
    *out = c;
    *n_out = n;
    return SKV_OK;
}

skv_status skv_eval_decode_sample(const skv_model *model, const skv_eval_sample *s,
                                  const skv_eval_config *cfgs, int n_cfgs, int first,
                                  const skv_eval_settings *st, skv_eval_decode_fn fn, void *user,
                                  skv_err *err) {
    if (!model || !s || !cfgs || !st || !fn || first < 0 || first > n_cfgs)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_eval_decode_sample: bad argument");
    const int V = skv_model_hparams(model)->n_vocab, C = s->n_cont, W = s->n_window;
    if (C < 1 || W < 1)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "sample %d: decode evaluation needs a window and a continuation",
                           s->index);
    for (int k = first; k < n_cfgs; k++) {
        /* the window the budget keeps: the last min(W, K) tokens (skv_context_set_budget) */
        const int kw = cfgs[k].compress_every < W ? cfgs[k].compress_every : W;
        if (cfgs[k].budget <= kw)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "budget %d is not larger than the window it keeps (%d tokens, the "
                               "smaller of --window and --compress-every, always kept): every "
                               "policy would keep the same entries; raise --budget, or lower the "
                               "smaller of the two",
                               cfgs[k].budget, kw);
    }
    if (first == n_cfgs) return SKV_OK;
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = st->n_threads;
    cp.kv_type = st->kv_type;
    cp.n_ctx = st->n_ctx;
    float *ref = malloc((size_t)C * V * sizeof *ref), *cmp = malloc((size_t)C * V * sizeof *cmp);
    float *tmp = malloc((size_t)V * sizeof *tmp);
    int *entries = malloc((size_t)(W + C) * sizeof *entries);
    skv_context *ctx = NULL;
    skv_status rc = SKV_OK;
    if (!ref || !cmp || !tmp || !entries) {
        rc = skv_err_set(err, SKV_ERR_NOMEM, "out of memory for sample %d", s->index);
        goto done;
    }
    ctx = skv_context_new(model, &cp, err);
    if (!ctx || (rc = run_one(ctx, s, V, ref, tmp, NULL, err))) {
        if (!ctx) rc = err ? err->status : SKV_ERR_NOMEM;
        goto done;
    }
    skv_context_free(ctx);
    ctx = NULL;
    for (int k = first; k < n_cfgs; k++) {
        const skv_eval_config *c = &cfgs[k];
        const double t0 = skv_time_ms();
        ctx = skv_context_new(model, &cp, err);
        if (!ctx) {
            rc = err ? err->status : SKV_ERR_NOMEM;
            goto done;
        }
        skv_compress_params bp = skv_compress_default_params();
        bp.policy = c->policy;
        bp.n_window = W;
        bp.sinks = st->sinks;
        bp.kernel = st->kernel;
        bp.pooling = st->pooling;
        bp.window_keep = st->window_keep;
        bp.positions = SKV_POSITIONS_REROTATE;
        if ((rc = skv_context_set_budget(ctx, &bp, c->budget, c->compress_every, err))) goto done;
        if ((rc = run_one(ctx, s, V, cmp, tmp, entries, err))) goto done;
        skv_eval_decode_result r;
        memset(&r, 0, sizeof r);
        r.sample = s;
        r.cfg = c;
        if ((rc = skv_eval_compare(ref, cmp, s->tokens + s->n_prefix + W, C, V, &r.m, err)))
            goto done;
        r.cuts = skv_context_budget_cuts(ctx);
        r.entries = entries;
        r.n_steps = W + C - 1;
        for (int i = 0; i < r.n_steps; i++)
            if (entries[i] > r.max_entries) r.max_entries = entries[i];
        r.eval_ms = skv_time_ms() - t0;
        if ((rc = fn(user, &r, err))) goto done;
        skv_context_free(ctx);
        ctx = NULL;
    }
done:
    skv_context_free(ctx);
    free(ref), free(cmp), free(tmp), free(entries);
    return rc;
}
