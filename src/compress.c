/* compress.c — skv_compress: validate, plan (window pass, score, allocate, select) leaving the
 * cache's entries as they were, then compact every head and report what was done.
 *
 * The two protocols differ only in where the window queries come from and what is scored:
 *   seed:   the window tokens run on ctx (their entries dropped again; on a clone when ctx
 *           has attention sums or a budget), queries captured; the T positions of the cache
 *           are scored; the window is not in the cache.
 *   engine: the window is the last W positions of the cache, its queries were captured by the
 *           prefill; positions [0, T-W) are scored over the T-W prefix keys; the W window
 *           positions are forced (+inf), so they stay and count toward keep.
 * Edge cases of the engine protocol, all from the one rule "top-keep over T positions, forced =
 * +inf, ties toward the higher position":
 *   - keep <= W: only the last keep window positions stay (no prefix position);
 *   - window_keep forces [max(0, T-W-window_keep), T-W) inside the prefix, after the window;
 *   - pyramid: b_l comes from the rule with window = W + window_keep (what every layer keeps
 *     regardless, as PyramidKV's window) and counts the W window entries of layer l too;
 *   - sink_recent and random with W > 0 also keep the window (it is in the cache, as it would
 *     be after the seed protocol's window is fed); with W = 0 they select over all T.
 * In the seed protocol sink_recent and random ignore window tokens (info.window_tokens = 0). */
#include "context.h"
#include "policies.h"

#include <math.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest pooling kernel accepted: far beyond any useful one (SnapKV uses 5-7); bounds the
 * scratch a hostile value could ask for. */
#define SKV_MAX_KERNEL 65536

skv_compress_params skv_compress_default_params(void) {
    skv_compress_params p;
    memset(&p, 0, sizeof p);
    p.policy = "sink_recent";
    p.keep_frac = 1.0; /* compresses nothing until asked */
    p.protocol = SKV_PROTOCOL_SEED;
    p.window_tokens = NULL;
    p.n_window = 0;
    p.seed = 0;
    p.sinks = 4;
    p.pooling = SKV_POOL_MAX;
    p.kernel = 7;
    p.window_keep = 32;
    p.positions = SKV_POSITIONS_ORIGINAL;
    return p;
}

void skv_compress_info_free(skv_compress_info *info) {
    if (!info) return;
    free(info->layer_budgets);
    free(info->kept);
    free(info->forced);
    free(info->by_score);
    info->layer_budgets = NULL;
    info->kept = NULL;
    info->forced = NULL;
    info->by_score = NULL;
}

void skv_compress_plan_free(skv_compress_plan *plan) {
    if (!plan) return;
    free(plan->scores);
    free(plan->budgets);
    free(plan->layer_budgets);
    free(plan->idx);
    free(plan->n_idx);
    memset(plan, 0, sizeof *plan);
}

static skv_status check_params(const skv_compress_params *p, const skv_policy **policy,
                               skv_err *err) {
    if (!p) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no compression parameters given");
    if (!p->policy)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "no policy given (valid: %s)",
                           skv_policy_list());
    *policy = skv_policy_find(p->policy);
    if (!*policy)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown policy '%.64s' (valid: %s)",
                           p->policy, skv_policy_list());
    if (!(p->keep_frac > 0.0 && p->keep_frac <= 1.0))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "keep_frac must be in (0, 1], got %g",
                           p->keep_frac);
    if (p->protocol != SKV_PROTOCOL_SEED && p->protocol != SKV_PROTOCOL_ENGINE)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown protocol %d (seed = 0, engine = 1)",
                           (int)p->protocol);
    if (p->pooling != SKV_POOL_MAX && p->pooling != SKV_POOL_AVG)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown pooling %d (max = 0, avg = 1)",
                           (int)p->pooling);
    if (p->positions != SKV_POSITIONS_ORIGINAL && p->positions != SKV_POSITIONS_REROTATE)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "unknown position mode %d (original = 0, rerotate = 1)",
                           (int)p->positions);
    if (p->sinks < 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "sinks must be >= 0, got %d", p->sinks);
    if (p->kernel < 1 || p->kernel > SKV_MAX_KERNEL)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "the pooling kernel must be between 1 and %d, got %d", SKV_MAX_KERNEL,
                           p->kernel);
    if (p->window_keep < 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "window_keep must be >= 0, got %d",
                           p->window_keep);
    if (p->n_window < 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "the window size must be >= 0, got %d",
                           p->n_window);
    if (skv_policy_row_needs_window(*policy)) {
        if (p->n_window < 1 || (p->protocol == SKV_PROTOCOL_SEED && p->window_tokens == NULL))
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "policy '%s' needs a window (the observation window whose "
                               "queries score the cache): %s",
                               (*policy)->name,
                               p->protocol == SKV_PROTOCOL_SEED
                                   ? "give window_tokens and n_window >= 1"
                                   : "give n_window >= 1 (the last positions of the cache)");
    }
    return SKV_OK;
}

/* Every head must hold exactly 0..T-1 at original positions: the policies choose among
 * positions of a full prefill. */
static skv_status check_dense(const skv_cache *c, skv_err *err) {
    const int T = skv_cache_n_past(c);
    if (T < 1)
        return skv_err_set(err, SKV_ERR_STATE,
                           "the cache is empty: prefill the prompt before compressing");
    if (skv_cache_position_mode(c) != SKV_POSITIONS_ORIGINAL)
        return skv_err_set(err, SKV_ERR_STATE,
                           "the cache was already compressed and re-rotated; "
                           "compress a fresh prefill");
    for (int l = 0; l < skv_cache_n_layer(c); l++)
        for (int h = 0; h < skv_cache_n_head_kv(c); h++)
            if (skv_cache_head_len(c, l, h) != T)
                return skv_err_set(err, SKV_ERR_STATE,
                                   "the cache was already compressed (layer %d kv head %d holds "
                                   "%d of %d positions); compress a fresh prefill",
                                   l, h, skv_cache_head_len(c, l, h), T);
    return SKV_OK;
}

static void *alloc_array(size_t n, size_t size) {
    uint64_t bytes;
    if (!skv_mul_ok(n ? n : 1, size, &bytes) || bytes > SIZE_MAX) return NULL;
    return malloc((size_t)bytes);
}

skv_status skv_policy_score_cache(skv_context *ctx, const skv_policy *pol, skv_score_job job,
                                  double *scores, skv_err *err) {
    const skv_hparams *hp = skv_model_hparams(ctx->model);
    job.n_layer = skv_cache_n_layer(job.cache);
    job.n_head_kv = skv_cache_n_head_kv(job.cache);
    job.n_head = hp->n_head;
    job.head_dim = hp->head_dim;
    job.pool = ctx->pool;
    job.ext = pol->ext;
    job.attn_sum = NULL;
    const double **sums = NULL;
    skv_status st = SKV_OK;
    if (pol->needs & SKV_POLICY_NEEDS_PREFILL_ATTN) {
        sums = calloc((size_t)job.n_layer * (size_t)job.n_head_kv, sizeof *sums);
        if (!sums) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        st = skv_h2o_rows(ctx, sums, err);
        job.attn_sum = sums;
    }
    if (!st) {
        st = pol->score(&job, scores, job.T_total, err);
        /* a built-in scorer's words name the policy (registered rows say it in ext_head) */
        if (st && !pol->ext && err && strncmp(err->msg, pol->name, strlen(pol->name)))
            skv_err_prefix(err, st, "policy '%s'", pol->name);
    }
    /* NaN has no place in a ranking, whichever policy (built-in or registered) scored it: from
     * NaN or infinite keys or queries (skv_forward said SKV_ERR_NUMERIC then), or a scorer's bug */
    const size_t n_rows = pol->shared ? 1 : (size_t)job.n_layer * (size_t)job.n_head_kv;
    for (size_t r = 0; r < n_rows && !st; r++)
        for (int i = 0; i < job.T; i++)
            if (isnan(scores[r * (size_t)job.T_total + (size_t)i])) {
                st = skv_err_set(err, SKV_ERR_NUMERIC,
                                 "policy '%s' scored position %d of layer %d kv head %d NaN (%s)",
                                 pol->name, i, (int)(r / (size_t)job.n_head_kv),
                                 (int)(r % (size_t)job.n_head_kv),
                                 pol->ext ? "or left it unscored: its scorer must write all n"
                                          : "NaN or infinite keys or queries, which skv_forward "
                                            "reports as SKV_ERR_NUMERIC, give such scores");
                break;
            }
    if (!st && job.T < job.T_total) {
        const size_t rows = pol->shared ? 1 : (size_t)job.n_layer * (size_t)job.n_head_kv;
        for (size_t r = 0; r < rows; r++)
            skv_force_last(scores + r * (size_t)job.T_total, job.T_total, job.W);
    }
    free(sums);
    return st;
}

/* The seed protocol's window pass on c: the W window tokens run through the model with their
 * queries captured into *wq (the caller frees it; [n_layer][n_head][W][head_dim]), c's own
 * capture left as it was; then the W entries they added are dropped again, so that c's cache is
 * the prefix it was (the window pass reads it, and only appends). */
static skv_status window_pass(skv_context *c, const int32_t *tokens, int W, float **wq,
                              skv_err *err) {
    const int T = skv_cache_n_past(c->cache);
    /* the heads' room before: what the W entries' growth takes is given back afterwards */
    int *caps = malloc((size_t)c->cache->n_layer * c->cache->n_head_kv * sizeof *caps);
    if (!caps) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    skv_cache_caps(c->cache, caps);
    float *own = c->qcap;
    const int own_w = c->params.capture_window, own_n = c->qcap_n, own_first = c->qcap_first_pos;
    c->qcap = NULL;
    skv_status st = skv_context_set_capture(c, W, err); /* a fresh buffer for the window */
    if (!st) st = skv_forward(c, tokens, W, SKV_LOGITS_NONE, NULL, err);
    if (!st && (c->qcap_n != W || c->qcap_first_pos != T))
        st = skv_err_set(err, SKV_ERR_STATE,
                         "the window pass captured %d queries at %d, expected %d at %d", c->qcap_n,
                         c->qcap_first_pos, W, T);
    *wq = st ? NULL : c->qcap;
    if (st) free(c->qcap);
    c->qcap = own;
    c->params.capture_window = own_w;
    c->qcap_n = own_n;
    c->qcap_first_pos = own_first;
    skv_cache_drop_from(c->cache, T); /* also after a failure: whatever entered goes */
    skv_cache_restore_caps(c->cache, caps);
    free(caps);
    return st;
}

skv_status skv_compress_plan_make(skv_context *ctx, const skv_compress_params *params,
                                  skv_compress_plan *plan, skv_err *err) {
    memset(plan, 0, sizeof *plan);
    if (!ctx) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no context given");
    const skv_policy *policy = NULL;
    skv_status st = check_params(params, &policy, err);
    if (st) return st;
    if (!policy->decode && ctx->pstate && ctx->pstate->max_entries > 0)
        return skv_err_set(err, SKV_ERR_STATE,
                           "policy '%s' does not run under a decoding budget, and this context "
                           "has one (its next cut could fail): remove the budget first "
                           "(skv_context_set_budget with max_entries = 0)",
                           policy->name);
    const skv_cache *cache = ctx->cache;
    st = check_dense(cache, err);
    if (st) return st;

    const int T = skv_cache_n_past(cache);
    const int L = skv_cache_n_layer(cache), H = skv_cache_n_head_kv(cache);
    const bool engine = params->protocol == SKV_PROTOCOL_ENGINE;
    int W = 0, n_score = T;
    if (engine) {
        W = params->n_window;
        if (W >= T)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "the window (%d positions) must be shorter than the cache "
                               "(%d positions)",
                               W, T);
        n_score = T - W;
    } else if (skv_policy_row_needs_window(policy)) {
        W = params->n_window;
        const int n_ctx = skv_context_n_ctx(ctx);
        if (W > n_ctx - T)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "a window of %d tokens does not fit after the %d-token prefix "
                               "(the context holds %d)",
                               W, T, n_ctx);
    }

    /* Engine: the prefill's own capture must cover the window's positions [T-W, T). */
    const float **queries = NULL;
    int q_n = 0, q_off = 0;
    skv_context *clone = NULL;
    float *wq = NULL; /* the seed window's queries [n_layer][n_head][W][head_dim] */
    if (skv_policy_row_needs_window(policy)) {
        queries = calloc((size_t)L, sizeof *queries);
        if (!queries) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        if (engine) {
            int n = 0, first = 0;
            const float *q0 = skv_context_captured_queries(ctx, 0, &n, &first);
            if (!q0 || n < W || first + n != T) {
                free(queries);
                return skv_err_set(
                    err, SKV_ERR_STATE,
                    "the engine protocol needs the queries of the last %d positions (%d..%d), but "
                    "the last forward call captured %d ending at position %d: create the context "
                    "with capture_window >= %d and feed at least the prompt's last %d tokens in "
                    "its last forward call (a call captures its own last tokens)",
                    W, T - W, T - 1, q0 ? n : 0, q0 ? first + n - 1 : -1, W, W);
            }
            for (int l = 0; l < L; l++)
                queries[l] = skv_context_captured_queries(ctx, l, &n, &first);
            q_n = n;
            q_off = n - W;
        } else {
            /* The seed protocol's window pass. Without attention sums or a budget to disturb,
             * on ctx itself, whose W window entries are dropped again (the prefix's entries
             * never move, and the cache is not copied: a clone cost its size again); else on a
             * clone. Either way the window queries are captured in a buffer of our own. */
            double t0 = skv_time_ms();
            if (ctx->pstate && (ctx->pstate->acc || ctx->pstate->max_entries > 0)) {
                clone = skv_context_clone(ctx, err);
                if (!clone) {
                    free(queries);
                    return err ? err->status : SKV_ERR_NOMEM;
                }
            }
            st = window_pass(clone ? clone : ctx, params->window_tokens, W, &wq, err);
            if (st) {
                skv_context_free(clone);
                free(queries);
                return st;
            }
            const skv_hparams *hp = skv_model_hparams(ctx->model);
            const size_t per_layer = (size_t)hp->n_head * (size_t)W * (size_t)hp->head_dim;
            for (int l = 0; l < L; l++) queries[l] = wq + (size_t)l * per_layer;
            q_n = W;
            q_off = 0;
            plan->window_ms = skv_time_ms() - t0;
        }
    }

    const size_t n_rows = policy->shared ? 1 : (size_t)L * (size_t)H;
    const size_t n_heads = (size_t)L * (size_t)H;
    plan->policy = policy;
    plan->T = T;
    plan->keep = skv_policy_keep(params->keep_frac, T);
    plan->W = W;
    plan->n_score = n_score;
    plan->n_layer = L;
    plan->n_head_kv = H;
    plan->scores = alloc_array(n_rows * (size_t)T, sizeof *plan->scores);
    plan->budgets = alloc_array(n_heads, sizeof *plan->budgets);
    plan->layer_budgets = alloc_array((size_t)L, sizeof *plan->layer_budgets);
    plan->idx = alloc_array(n_heads * (size_t)T, sizeof *plan->idx);
    plan->n_idx = alloc_array(n_heads, sizeof *plan->n_idx);
    uint64_t *rank = alloc_array((size_t)T, sizeof *rank);
    if (!plan->scores || !plan->budgets || !plan->layer_budgets || !plan->idx || !plan->n_idx ||
        !rank) {
        st = skv_err_set(err, SKV_ERR_NOMEM,
                         "out of memory planning the compression of %d "
                         "positions",
                         T);
        goto done;
    }
    st = skv_policy_score_cache(ctx, policy,
                                (skv_score_job){
                                    .T = n_score,
                                    .T_total = T,
                                    .keep = plan->keep,
                                    .params = params,
                                    .cache = cache,
                                    .queries = queries,
                                    .q_n = q_n,
                                    .q_off = q_off,
                                    .W = W,
                                },
                                plan->scores, err);
    if (st) goto done;

    /* The allocator's window is what every layer keeps regardless: in the engine protocol the
     * W window positions and the window_keep before them. */
    st = policy->allocate(plan->keep, T, L, H, params->window_keep + (n_score < T ? W : 0),
                          plan->budgets, plan->layer_budgets, err);
    if (st) goto done;

    if (policy->select) { /* the heads of a layer share its budget (adakv) */
        for (int l = 0; l < L && !st; l++) {
            const size_t i0 = (size_t)l * H;
            st = policy->select(plan->scores + i0 * (size_t)T, T, T, H, plan->keep,
                                plan->budgets + i0, plan->idx + i0 * (size_t)T, err);
            for (int h = 0; h < H; h++) plan->n_idx[i0 + h] = plan->budgets[i0 + h];
        }
        goto done;
    }
    for (size_t i = 0; i < n_heads; i++) {
        int32_t *out = plan->idx + i * (size_t)T;
        if (policy->shared && i > 0 && plan->budgets[i] == plan->budgets[i - 1]) {
            /* same row, same budget: same positions */
            plan->n_idx[i] = plan->n_idx[i - 1];
            memcpy(out, out - T, (size_t)plan->n_idx[i] * sizeof *out);
            continue;
        }
        const double *row = plan->scores + (policy->shared ? 0 : i * (size_t)T);
        plan->n_idx[i] = skv_select_topk(row, T, plan->budgets[i], out, rank);
    }

done:
    free(rank);
    free(queries);
    free(wq);
    skv_context_free(clone);
    if (st) skv_compress_plan_free(plan);
    return st;
}

skv_status skv_compress(skv_context *ctx, const skv_compress_params *params,
                        skv_compress_info *info, skv_err *err) {
    const double t0 = skv_time_ms();
    if (info) memset(info, 0, sizeof *info);
    skv_compress_plan plan;
    skv_status st = skv_compress_plan_make(ctx, params, &plan, err);
    if (st) return st;

    const int L = plan.n_layer, H = plan.n_head_kv, T = plan.T;
    skv_cache *cache = ctx->cache;
    int *kept = NULL, *forced = NULL, *by_score = NULL;
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a over (head, positions) */
    if (info) {
        kept = alloc_array((size_t)L * (size_t)H, sizeof *kept);
        forced = calloc((size_t)L, sizeof *forced);
        by_score = calloc((size_t)L, sizeof *by_score);
        if (!kept || !forced || !by_score) {
            free(kept), free(forced), free(by_score);
            skv_compress_plan_free(&plan);
            return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        }
        /* what the selection really was: forced (+inf: window, window_keep, h2o's recent;
         * sink_recent's sinks score above every position) or chosen by score */
        const double sink_from = (double)plan.n_score;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                const size_t i = (size_t)l * H + (size_t)h;
                const double *row = plan.scores + (plan.policy->shared ? 0 : i * (size_t)T);
                for (int j = 0; j < plan.n_idx[i]; j++) {
                    const int32_t t = plan.idx[i * (size_t)T + (size_t)j];
                    const double sc = row[t];
                    if (isinf(sc) && sc > 0)
                        forced[l]++;
                    else if (plan.policy->sinks_forced && sc >= sink_from)
                        forced[l]++;
                    else
                        by_score[l]++;
                    uint64_t v = ((uint64_t)i << 32) ^ (uint32_t)t;
                    for (int b = 0; b < 8; b++) {
                        hash ^= (v >> (8 * b)) & 0xff;
                        hash *= 1099511628211ULL;
                    }
                }
            }
    }
    const uint64_t bytes_before = skv_cache_bytes(cache, -1);

    /* Every list was validated by construction (ascending, unique, within [0, T) of a dense
     * cache), so the selections below cannot be refused. */
    const double t_apply = skv_time_ms();
    for (int l = 0; l < L && !st; l++) {
        const int32_t *first = plan.idx + (size_t)l * H * (size_t)T;
        bool same = true;
        for (int h = 1; h < H && same; h++) {
            const size_t i = (size_t)l * H + (size_t)h;
            same = plan.n_idx[i] == plan.n_idx[i - h] &&
                   !memcmp(plan.idx + i * (size_t)T, first, (size_t)plan.n_idx[i] * sizeof *first);
        }
        if (plan.n_idx[(size_t)l * H] == T && same) continue; /* keeps everything */
        for (int h = 0; h < H; h++) /* h2o's sums follow the entries they belong to */
            skv_pstate_compact(ctx->pstate, l * H + h, plan.idx + ((size_t)l * H + h) * (size_t)T,
                               plan.n_idx[(size_t)l * H + h]);
        if (same) {
            st = skv_cache_select_layer(cache, l, first, plan.n_idx[(size_t)l * H], err);
        } else {
            for (int h = 0; h < H && !st; h++) {
                const size_t i = (size_t)l * H + (size_t)h;
                st = skv_cache_select_head(cache, l, h, plan.idx + i * (size_t)T, plan.n_idx[i],
                                           err);
            }
        }
    }
    if (!st && params->positions == SKV_POSITIONS_REROTATE) st = skv_cache_rerotate(cache, err);
#ifdef __GLIBC__
    /* heads small enough to live on the heap (cache.c) shrank in place: hand the freed pages
     * to the OS too, or compressing many short caches would not lower the process's memory
     * (a trim costs ~0.4 ms: not for the odd kilobyte) */
    if (!st && bytes_before - skv_cache_bytes(cache, -1) >= ((uint64_t)1 << 20)) malloc_trim(0);
#endif
    const double cache_ms = skv_time_ms() - t_apply;
    if (st) {
        free(kept), free(forced), free(by_score);
        skv_compress_plan_free(&plan);
        return st;
    }

    if (info) {
        snprintf(info->policy, sizeof info->policy, "%s", plan.policy->name);
        info->keep_frac = params->keep_frac;
        info->T = T;
        info->keep = plan.keep;
        info->window_ms = plan.window_ms;
        info->window_tokens = plan.W;
        info->n_layer = L;
        info->n_head_kv = H;
        info->layer_budgets = plan.layer_budgets;
        plan.layer_budgets = NULL; /* moved */
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                kept[(size_t)l * H + (size_t)h] = skv_cache_head_len(cache, l, h);
        info->kept = kept;
        info->forced = forced;
        info->by_score = by_score;
        info->selection_hash = hash;
        info->cache_ms = cache_ms;
        info->bytes_before = bytes_before;
        info->bytes_after = skv_cache_bytes(cache, -1);
    }
    /* h2o selects by sums the forward passes kept: their time is its selection work too */
    const double acc_ms = plan.policy->needs & SKV_POLICY_NEEDS_PREFILL_ATTN && ctx->pstate
                              ? ctx->pstate->acc_ms
                              : 0.0;
    skv_compress_plan_free(&plan);
    if (info) info->compress_ms = skv_time_ms() - t0 + acc_ms;
    return SKV_OK;
}
