/* runner.c — the two protocols, measured against the dense cache.
 *
 * Per sample: the dense caches are built once (seed protocol: the prefix; engine protocol:
 * prefix + window in one call with query capture) and every configuration works on a clone.
 *
 * The compared distributions are the C next-token distributions of the continuation: row 0
 * follows the last window token, row j (1 <= j < C) follows continuation token j-1, and row j
 * predicts continuation token j.
 *   seed:   feed window + continuation[0..C-2] on the (compressed) prefix cache; rows W-1.. of
 *           that call's logits.
 *   engine: row 0 is the prefill's last row (compression comes after it, so it never
 *           differs); rows 1.. come from feeding continuation[0..C-2] on the (compressed)
 *           prefix+window cache.
 * The reference runs the same calls on the dense cache, so at keep 1.0 both sides do the same
 * arithmetic and must agree bit for bit. */
#include "eval/eval.h"

#include <stdlib.h>
#include <string.h>

void skv_eval_settings_default(skv_eval_settings *s) {
    skv_compress_params cp = skv_compress_default_params();
    memset(s, 0, sizeof *s);
    s->task = SKV_EVAL_LM;
    s->greedy = 32;
    s->n_threads = 0;
    s->kv_type = SKV_TYPE_F32;
    s->sinks = cp.sinks;
    s->kernel = cp.kernel;
    s->window_keep = cp.window_keep;
    s->pooling = cp.pooling;
}

/* Whether a policy reads the seed parameter (the registry says so): it gets one configuration
 * per seed. */
static bool reads_seed(const char *policy) {
    const char *c = skv_policy_canonical(policy);
    for (int k = 0; c && k < skv_policy_count(); k++) {
        skv_policy_about a;
        if (skv_policy_describe(k, &a, NULL) == SKV_OK && !strcmp(a.name, c)) {
            for (const char *s = a.params; (s = strstr(s, "seed")) != NULL; s += 4)
                if ((s == a.params || s[-1] == ',') && (s[4] == ',' || s[4] == '\0')) return true;
            return false;
        }
    }
    return false;
}

skv_status skv_eval_configs(const char *const *policies, int n_policies, const double *keeps,
                            int n_keeps, const skv_protocol *protocols, int n_protocols,
                            const skv_position_mode *positions, int n_positions, int n_seeds,
                            skv_eval_config **out, int *n_out, skv_err *err) {
    *out = NULL;
    *n_out = 0;
    if (n_policies < 1 || n_keeps < 1 || n_protocols < 1 || n_positions < 1 || n_seeds < 1)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "eval needs at least one policy, keep fraction, protocol, position "
                           "mode and seed");
    size_t max = (size_t)n_policies * n_keeps * n_protocols * n_positions * n_seeds;
    if (max > 1000000)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "%zu configurations are too many", max);
    skv_eval_config *c = calloc(max, sizeof *c);
    if (!c) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int pr = 0; pr < n_protocols; pr++)
        for (int po = 0; po < n_positions; po++)
            for (int p = 0; p < n_policies; p++)
                for (int k = 0; k < n_keeps; k++) {
                    bool random = reads_seed(policies[p]); /* random: one per seed */
                    for (int s = 0; s < (random ? n_seeds : 1); s++) {
                        skv_eval_config *e = &c[n];
                        e->index = n++;
                        snprintf(e->policy, sizeof e->policy, "%s", policies[p]);
                        e->keep_frac = keeps[k];
                        e->protocol = protocols[pr];
                        e->positions = positions[po];
                        e->seed = (uint64_t)s;
                    }
                }
    *out = c;
    *n_out = n;
    return SKV_OK;
}

/* Scratch of one sample run. */
typedef struct run {
    const skv_model *model;
    const skv_eval_sample *s;
    const skv_eval_settings *st;
    int V, T, W, C, G;
    float *buf;     /* [max(W + C - 1, 1), V] logits of one call */
    float *cmp;     /* [C, V] */
    int32_t *gtok;  /* [G] greedy tokens of a compressed run */
    bool need_attn; /* a configuration's policy needs the prefill's attention (h2o) */
} run;

/* The C continuation distributions on ctx (which holds the prefix cache of the protocol);
 * first = the engine prefill's last row. Writes rows into out [C, V]. */
static skv_status teacher_force(run *r, skv_context *ctx, skv_protocol proto, const float *first,
                                float *out, skv_err *err) {
    const int32_t *win = r->s->tokens + r->T;
    const int32_t *cont = win + r->W;
    size_t V = (size_t)r->V;
    skv_status st;
    if (proto == SKV_PROTOCOL_SEED) {
        int n = r->W + r->C - 1; /* window and cont are contiguous in tokens */
        if ((st = skv_forward(ctx, win, n, SKV_LOGITS_ALL, r->buf, err))) return st;
        memcpy(out, r->buf + (size_t)(r->W - 1) * V, (size_t)r->C * V * sizeof *out);
        return SKV_OK;
    }
    memcpy(out, first, V * sizeof *out);
    if (r->C > 1) {
        if ((st = skv_forward(ctx, cont, r->C - 1, SKV_LOGITS_ALL, r->buf, err))) return st;
        memcpy(out + V, r->buf, (size_t)(r->C - 1) * V * sizeof *out);
    }
    return SKV_OK;
}

/* Greedy decoding of G tokens after the window. Seed: the window is fed first; engine: the
 * first token comes from first (the prefill's last row). With ref, stops at the first token
 * that differs from ref (the count is all the lm task reports). *n_out = tokens produced. */
static skv_status greedy(run *r, skv_context *ctx, skv_protocol proto, const float *first,
                         const int32_t *ref, int32_t *out, int *n_out, skv_err *err) {
    skv_status st;
    const float *logits = first;
    *n_out = 0;
    if (proto == SKV_PROTOCOL_SEED) {
        if ((st = skv_forward(ctx, r->s->tokens + r->T, r->W, SKV_LOGITS_LAST, r->buf, err)))
            return st;
        logits = r->buf;
    }
    for (int g = 0; g < r->G; g++) {
        int32_t tok = (int32_t)skv_eval_argmax(logits, r->V);
        out[g] = tok;
        *n_out = g + 1;
        if (ref && tok != ref[g]) break;
        if (g + 1 < r->G) {
            if ((st = skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, r->buf, err))) return st;
            logits = r->buf;
        }
    }
    return SKV_OK;
}

/* Text of greedy tokens up to the first EOS (malloc'd). */
static char *detok(const skv_model *model, const int32_t *t, int n) {
    const skv_vocab *v = skv_model_vocab(model);
    int32_t eos = skv_vocab_eos(v);
    int m = 0;
    while (m < n && t[m] != eos) m++;
    int cap = 64 * (m + 1);
    char *buf = malloc((size_t)cap + 1);
    if (!buf) return NULL;
    int k = skv_detokenize(v, t, m, false, buf, cap);
    if (k < 0) {
        cap = -k;
        char *nb = realloc(buf, (size_t)cap + 1);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        k = skv_detokenize(v, t, m, false, buf, cap);
        if (k < 0) k = 0;
    }
    buf[k] = 0;
    return buf;
}

/* The dense reference of one protocol. */
typedef struct ref {
    skv_context *base;
    float *last;     /* [V] engine: the prefill's last row */
    float *logits;   /* [C, V] lm task */
    int32_t *greedy; /* [G] */
    char *text;      /* passkey: greedy text */
    bool correct;
    char found[32];
} ref;

static void ref_free(ref *f) {
    skv_context_free(f->base);
    free(f->last);
    free(f->logits);
    free(f->greedy);
    free(f->text);
    memset(f, 0, sizeof *f);
}

static skv_status ref_build(run *r, skv_protocol proto, ref *f, skv_err *err) {
    const skv_eval_settings *st = r->st;
    size_t V = (size_t)r->V;
    skv_context_params cp = skv_context_default_params();
    int room = r->C > r->G ? r->C : r->G;
    /* the run's size for every context (a LongRoPE model's factors follow it), the memory the
     * sample needs reserved up front */
    cp.n_ctx = st->n_ctx;
    cp.n_threads = st->n_threads;
    cp.kv_type = st->kv_type;
    cp.capture_window = proto == SKV_PROTOCOL_ENGINE ? r->W : 0;
    f->last = malloc(V * sizeof *f->last);
    f->greedy = malloc((size_t)(r->G > 0 ? r->G : 1) * sizeof *f->greedy);
    if (r->C > 0) f->logits = malloc((size_t)r->C * V * sizeof *f->logits);
    if (!f->last || !f->greedy || (r->C > 0 && !f->logits))
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the reference");
    f->base = skv_context_new(r->model, &cp, err);
    if (!f->base) return err ? err->status : SKV_ERR_STATE;
    skv_status s;
    if ((s = skv_context_reserve(f->base, r->T + r->W + room, err))) return s;
    /* policies that need the prefill's attention (h2o): sum it during this prefill */
    if (r->need_attn && (s = skv_context_accumulate_attention(f->base, true, err))) return s;
    if (proto == SKV_PROTOCOL_SEED) {
        if ((s = skv_forward(f->base, r->s->tokens, r->T, SKV_LOGITS_NONE, NULL, err))) return s;
    } else {
        if ((s = skv_forward(f->base, r->s->tokens, r->T + r->W, SKV_LOGITS_LAST, f->last, err)))
            return s;
    }
    if (r->C > 0) {
        skv_context *c = skv_context_clone(f->base, err);
        if (!c) return err ? err->status : SKV_ERR_STATE;
        skv_context_accumulate_attention(c, false, NULL);
        s = teacher_force(r, c, proto, f->last, f->logits, err);
        skv_context_free(c);
        if (s) return s;
    }
    skv_context *g = skv_context_clone(f->base, err);
    if (!g) return err ? err->status : SKV_ERR_STATE;
    skv_context_accumulate_attention(g, false, NULL);
    int n;
    s = greedy(r, g, proto, f->last, NULL, f->greedy, &n, err);
    skv_context_free(g);
    if (s) return s;
    if (st->task != SKV_EVAL_LM) {
        f->text = detok(r->model, f->greedy, r->G);
        if (!f->text) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        f->correct =
            skv_passkey_score(f->text, strlen(f->text), r->s->key, f->found, sizeof f->found);
    }
    return SKV_OK;
}

typedef struct skv_eval_fn_pair {
    skv_eval_result_fn fn;
    void *user;
} skv_eval_fn_pair;

static skv_status run_config(run *r, const skv_eval_config *cfg, ref *f, skv_eval_fn_pair *cb,
                             skv_err *err) {
    const skv_eval_settings *st = r->st;
    skv_context *c = NULL, *g = NULL;
    skv_compress_info info;
    memset(&info, 0, sizeof info);
    char *text = NULL;
    skv_status s = SKV_OK;
    c = skv_context_clone(f->base, err);
    if (!c) return err ? err->status : SKV_ERR_STATE;
    skv_compress_params p = skv_compress_default_params();
    p.policy = cfg->policy;
    p.keep_frac = cfg->keep_frac;
    p.protocol = cfg->protocol;
    p.window_tokens = r->s->tokens + r->T;
    p.n_window = r->W;
    p.seed = cfg->seed;
    p.sinks = st->sinks;
    p.pooling = st->pooling;
    p.kernel = st->kernel;
    p.window_keep = st->window_keep;
    p.positions = cfg->positions;
    if ((s = skv_compress(c, &p, &info, err))) goto done;
    skv_context_accumulate_attention(c, false, NULL); /* the sums are no longer needed */

    skv_eval_result res;
    memset(&res, 0, sizeof res);
    double t0 = skv_time_ms();
    if (st->task == SKV_EVAL_LM) {
        g = skv_context_clone(c, err);
        if (!g) {
            s = err ? err->status : SKV_ERR_STATE;
            goto done;
        }
        if ((s = teacher_force(r, c, cfg->protocol, f->last, r->cmp, err))) goto done;
        const int32_t *cont = r->s->tokens + r->T + r->W;
        if ((s = skv_eval_compare(f->logits, r->cmp, cont, r->C, r->V, &res.m, err))) goto done;
        int n;
        if ((s = greedy(r, g, cfg->protocol, f->last, f->greedy, r->gtok, &n, err))) goto done;
        res.greedy_match = 0;
        while (res.greedy_match < n && r->gtok[res.greedy_match] == f->greedy[res.greedy_match])
            res.greedy_match++;
    } else {
        int n;
        if ((s = greedy(r, c, cfg->protocol, f->last, NULL, r->gtok, &n, err))) goto done;
        while (res.greedy_match < n && r->gtok[res.greedy_match] == f->greedy[res.greedy_match])
            res.greedy_match++;
        text = detok(r->model, r->gtok, n);
        if (!text) {
            s = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
            goto done;
        }
        res.output = text;
        res.ref_output = f->text;
        res.correct = skv_passkey_score(text, strlen(text), r->s->key, res.found, sizeof res.found);
        res.ref_correct = f->correct;
        snprintf(res.ref_found, sizeof res.ref_found, "%s", f->found);
    }
    res.eval_ms = skv_time_ms() - t0;
    res.sample = r->s;
    res.cfg = cfg;
    res.T = info.T;
    res.keep = info.keep;
    res.compress_ms = info.compress_ms;
    res.window_ms = info.window_ms;
    res.cache_ms = info.cache_ms;
    res.bytes_before = info.bytes_before;
    res.bytes_after = info.bytes_after;
    res.n_layer = info.n_layer;
    res.n_head_kv = info.n_head_kv;
    res.kept = info.kept;
    res.layer_budgets = info.layer_budgets;
    res.forced = info.forced;
    res.by_score = info.by_score;
    res.selection_hash = info.selection_hash;
    s = cb->fn(cb->user, &res, err);
done:
    free(text);
    skv_compress_info_free(&info);
    skv_context_free(g);
    skv_context_free(c);
    return s;
}

skv_status skv_eval_run_sample(const skv_model *model, const skv_eval_sample *s,
                               const skv_eval_config *cfgs, int n_cfgs, const skv_eval_settings *st,
                               skv_eval_result_fn fn, void *user, skv_err *err) {
    return skv_eval_run_sample_from(model, s, cfgs, n_cfgs, 0, st, fn, user, err);
}

/* The references are built as for the whole run (prefill attention summed when any
 * configuration needs it), so configurations from `first` on give the same bits. */
skv_status skv_eval_run_sample_from(const skv_model *model, const skv_eval_sample *s,
                                    const skv_eval_config *cfgs, int n_cfgs, int first,
                                    const skv_eval_settings *st, skv_eval_result_fn fn, void *user,
                                    skv_err *err) {
    if (!model || !s || !cfgs || !st || !fn || first < 0 || first > n_cfgs)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "skv_eval_run_sample: missing argument");
    run r = {.model = model, .s = s, .st = st};
    r.V = skv_model_hparams(model)->n_vocab;
    r.T = s->n_prefix;
    r.W = s->n_window;
    r.C = st->task == SKV_EVAL_LM ? s->n_cont : 0;
    r.G = st->greedy;
    if (r.T < 1 || r.W < 1 || (st->task == SKV_EVAL_LM && r.C < 1) ||
        (st->task != SKV_EVAL_LM && r.G < 1) || r.G < 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "sample %d: prefix %d, window %d, continuation %d, greedy %d tokens "
                           "cannot be evaluated",
                           s->index, r.T, r.W, r.C, r.G);
    bool need[2] = {false, false};
    for (int i = first; i < n_cfgs; i++) need[cfgs[i].protocol == SKV_PROTOCOL_ENGINE] = true;
    for (int i = 0; i < n_cfgs && !r.need_attn; i++) {
        const char *c = skv_policy_canonical(cfgs[i].policy);
        for (int k = 0; c && k < skv_policy_count(); k++) {
            skv_policy_about a;
            if (skv_policy_describe(k, &a, NULL) == SKV_OK && !strcmp(a.name, c))
                r.need_attn |= a.needs_prefill_attention;
        }
    }
    int rows = r.W + r.C - 1 > 1 ? r.W + r.C - 1 : 1;
    r.buf = malloc((size_t)rows * (size_t)r.V * sizeof *r.buf);
    r.cmp = malloc((size_t)(r.C > 0 ? r.C : 1) * (size_t)r.V * sizeof *r.cmp);
    r.gtok = malloc((size_t)(r.G > 0 ? r.G : 1) * sizeof *r.gtok);
    ref refs[2];
    memset(refs, 0, sizeof refs);
    skv_status status = SKV_OK;
    if (!r.buf || !r.cmp || !r.gtok) {
        status = skv_err_set(err, SKV_ERR_NOMEM, "out of memory for sample %d", s->index);
        goto done;
    }
    for (int p = 0; p < 2; p++)
        if (need[p] &&
            (status = ref_build(&r, p ? SKV_PROTOCOL_ENGINE : SKV_PROTOCOL_SEED, &refs[p], err)))
            goto done;
    skv_eval_fn_pair cb = {fn, user};
    for (int i = first; i < n_cfgs; i++) {
        ref *f = &refs[cfgs[i].protocol == SKV_PROTOCOL_ENGINE];
        if ((status = run_config(&r, &cfgs[i], f, &cb, err))) goto done;
    }
done:
    ref_free(&refs[0]);
    ref_free(&refs[1]);
    free(r.buf);
    free(r.cmp);
    free(r.gtok);
    return status;
}
