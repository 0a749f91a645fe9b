/* sample.c — picking the next token: greedy, temperature, top-k, top-p, with a seeded RNG. */
#include "common.h"

#include <math.h>
#include <stdlib.h>

struct skv_sampler {
    skv_sampler_params p;
    skv_rng rng;
    int cap;
    int *idx;    /* [cap] candidate ids, sorted by logit descending */
    float *prob; /* [cap] */
};

skv_sampler_params skv_sampler_default_params(void) {
    skv_sampler_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 0};
    return p;
}

skv_sampler *skv_sampler_new(const skv_sampler_params *params, skv_err *err) {
    skv_sampler_params p = params ? *params : skv_sampler_default_params();
    if (!(p.temperature >= 0) || !isfinite(p.temperature)) {
        skv_err_set(err, SKV_ERR_INVALID_ARG,
                    "sampler temperature must be a finite float >= 0 (0: greedy), got %g",
                    (double)p.temperature);
        return NULL;
    }
    if (p.top_k < 0) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "sampler top_k must be >= 0 (0: off), got %d",
                    p.top_k);
        return NULL;
    }
    if (!(p.top_p > 0) || p.top_p > 1) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "sampler top_p must be in (0, 1] (1: off), got %g",
                    (double)p.top_p);
        return NULL;
    }
    skv_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->p = p;
    skv_rng_seed(&s->rng, p.seed);
    return s;
}

void skv_sampler_free(skv_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s);
}

/* A NaN logit ranks as -inf: never above a number, in the greedy pick, the sort and the
 * softmax alike. */
static float rank_of(float l) {
    return isnan(l) ? -INFINITY : l;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (rank_of(x[i]) > rank_of(x[best])) best = i; /* strict: lowest id wins ties */
    return best;
}

/* qsort has no context argument: the logits being sorted, per thread. */
static _Thread_local const float *tl_logits;

static int by_logit_desc(const void *a, const void *b) {
    int ia = *(const int *)a, ib = *(const int *)b;
    float la = rank_of(tl_logits[ia]), lb = rank_of(tl_logits[ib]);
    if (la != lb) return la > lb ? -1 : 1;
    return ia - ib;
}

int32_t skv_sampler_sample(skv_sampler *s, float *logits, int n_vocab) {
    if (!s || !logits || n_vocab <= 0) return -1;
    if (s->p.temperature == 0) return argmax(logits, n_vocab);
    if (s->cap < n_vocab) {
        int *idx = realloc(s->idx, (size_t)n_vocab * sizeof *idx);
        if (idx) s->idx = idx;
        float *prob = realloc(s->prob, (size_t)n_vocab * sizeof *prob);
        if (prob) s->prob = prob;
        if (!idx || !prob) return argmax(logits, n_vocab); /* degrade, never crash */
        s->cap = n_vocab;
    }
    for (int i = 0; i < n_vocab; i++) s->idx[i] = i;
    tl_logits = logits;
    qsort(s->idx, (size_t)n_vocab, sizeof *s->idx, by_logit_desc);
    int n = n_vocab;
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;

    /* softmax over the candidates at the temperature, in double (a float quotient overflows to
     * inf at a tiny temperature, and inf - inf would make every weight NaN) */
    const double temp = s->p.temperature;
    double mx = (double)rank_of(logits[s->idx[0]]) / temp, sum = 0;
    if (!isfinite(mx)) return s->idx[0]; /* a +inf logit wins; all -inf (or NaN): the first */
    for (int i = 0; i < n; i++) {
        double e = exp((double)rank_of(logits[s->idx[i]]) / temp - mx);
        s->prob[i] = (float)e;
        sum += e;
    }
    if (s->p.top_p < 1) { /* smallest prefix whose mass reaches top_p */
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += s->prob[i] / sum;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < n; i++) sum += s->prob[i];
    }
    double r = skv_rng_uniform(&s->rng) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->prob[i];
        if (r < acc) return s->idx[i];
    }
    return s->idx[n - 1];
}
