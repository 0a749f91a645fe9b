/* metrics.c — per-token comparison of two next-token distributions, and the statistics the
 * summary reports. Everything is computed in double from the float logits. */
#include "eval/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void skv_eval_log_softmax(const float *logits, int n, double *out) {
    double mx = -INFINITY;
    bool bad = n < 1;
    for (int i = 0; i < n; i++) {
        double x = logits[i];
        if (isnan(x)) bad = true;
        if (x > mx) mx = x;
    }
    if (bad || !isfinite(mx)) { /* all -inf, NaN or +inf: no distribution */
        for (int i = 0; i < n; i++) out[i] = NAN;
        return;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx); /* exp(-inf) = 0 */
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++) out[i] = (double)logits[i] - lse;
}

double skv_eval_kl(const double *logp, const double *logq, int n) {
    double kl = 0.0;
    for (int i = 0; i < n; i++) {
        double lp = logp[i];
        if (isnan(lp) || isnan(logq[i])) return NAN;
        if (lp == -INFINITY) continue; /* p_i = 0 */
        if (logq[i] == -INFINITY) return INFINITY;
        kl += exp(lp) * (lp - logq[i]);
    }
    return kl;
}

int skv_eval_argmax(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        if (best < 0 || x[i] > x[best]) best = i; /* strict: the lowest id wins ties */
    }
    if (best < 0 && n > 0) best = 0;
    return best;
}

double skv_eval_percentile(const double *sorted, int n, double frac) {
    if (n < 1) return NAN;
    if (frac <= 0) return sorted[0];
    if (frac >= 1) return sorted[n - 1];
    double p = frac * (double)(n - 1);
    int ip = (int)p;
    double w = p - ip;
    int hi = ip + 1 < n ? ip + 1 : n - 1;
    if (w == 0.0) return sorted[ip];
    return (1.0 - w) * sorted[ip] + w * sorted[hi];
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    /* NaN sorts last so percentiles of finite values stay meaningful */
    if (isnan(x)) return isnan(y) ? 0 : 1;
    if (isnan(y)) return -1;
    return (x > y) - (x < y);
}

skv_status skv_eval_compare(const float *ref, const float *cmp, const int32_t *targets, int n_tok,
                            int n_vocab, skv_eval_lm_metrics *out, skv_err *err) {
    memset(out, 0, sizeof *out);
    if (n_tok < 1 || n_vocab < 1 || !ref || !cmp || !targets)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "cannot compare %d continuation positions over %d tokens", n_tok,
                           n_vocab);
    for (int t = 0; t < n_tok; t++)
        if (targets[t] < 0 || targets[t] >= n_vocab)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "continuation token %d is %d, outside the vocabulary of %d", t,
                               (int)targets[t], n_vocab);
    double *lp = malloc((size_t)n_vocab * sizeof *lp);
    double *lq = malloc((size_t)n_vocab * sizeof *lq);
    double *kl = malloc((size_t)n_tok * sizeof *kl);
    if (!lp || !lq || !kl) {
        free(lp);
        free(lq);
        free(kl);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory comparing logits");
    }
    double nll_ref = 0, nll_cmp = 0, kl_sum = 0;
    int same = 0;
    for (int t = 0; t < n_tok; t++) {
        const float *r = ref + (size_t)t * (size_t)n_vocab;
        const float *c = cmp + (size_t)t * (size_t)n_vocab;
        skv_eval_log_softmax(r, n_vocab, lp);
        skv_eval_log_softmax(c, n_vocab, lq);
        kl[t] = skv_eval_kl(lp, lq, n_vocab);
        kl_sum += kl[t];
        nll_ref -= lp[targets[t]];
        nll_cmp -= lq[targets[t]];
        if (skv_eval_argmax(r, n_vocab) == skv_eval_argmax(c, n_vocab)) same++;
    }
    out->n_tokens = n_tok;
    out->kl_mean = kl_sum / n_tok;
    qsort(kl, (size_t)n_tok, sizeof *kl, cmp_double);
    out->kl_median = skv_eval_percentile(kl, n_tok, 0.5);
    out->kl_p90 = skv_eval_percentile(kl, n_tok, 0.9);
    out->kl_p99 = skv_eval_percentile(kl, n_tok, 0.99);
    out->kl_max = kl[n_tok - 1]; /* NaN sorts last (cmp_double): any NaN makes the max NaN */
    out->n_same_top = same;
    out->top1 = (double)same / n_tok;
    out->nll_ref = nll_ref / n_tok;
    out->nll_cmp = nll_cmp / n_tok;
    out->ppl_ref = exp(out->nll_ref);
    out->ppl_cmp = exp(out->nll_cmp);
    out->ln_ppl_ratio = out->nll_cmp - out->nll_ref;
    free(lp);
    free(lq);
    free(kl);
    return SKV_OK;
}

double skv_eval_t975(int df) {
    /* exact quantiles for small df (checked against a numerical integration of the t density);
     * beyond, the Cornish-Fisher expansion around the normal quantile (error < 1e-7) */
    static const double table[31] = {
        NAN,         12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851,
        2.364624252, 2.306004135,  2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656,
        2.144786688, 2.131449546,  2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447,
        2.079613845, 2.073873068,  2.068657610, 2.063898562, 2.059538553, 2.055529439, 2.051830516,
        2.048407142, 2.045229642,  2.042272456};
    if (df < 1) return NAN;
    if (df <= 30) return table[df];
    const double z = 1.959963984540054;
    double z2 = z * z, z3 = z2 * z, z5 = z3 * z2, z7 = z5 * z2, z9 = z7 * z2;
    double v = df;
    double g1 = (z3 + z) / 4.0;
    double g2 = (5 * z5 + 16 * z3 + 3 * z) / 96.0;
    double g3 = (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / 384.0;
    double g4 = (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / 92160.0;
    return z + g1 / v + g2 / (v * v) + g3 / (v * v * v) + g4 / (v * v * v * v);
}

skv_eval_pooled skv_eval_pool(long long n_tokens, long long n_same_top, double sum_nll_ref,
                              double sum_nll_cmp) {
    skv_eval_pooled o = {NAN, NAN, NAN, NAN};
    if (n_tokens < 1) return o;
    const double n = (double)n_tokens;
    o.same_top_p = (double)n_same_top / n;
    if (n_tokens > 1) o.same_top_unc = sqrt(o.same_top_p * (1 - o.same_top_p) / (n - 1));
    o.ppl_ref = exp(sum_nll_ref / n);
    o.ppl_cmp = exp(sum_nll_cmp / n);
    return o;
}

skv_eval_stat skv_eval_stat_of(const double *x, int n) {
    skv_eval_stat s = {.n = n, .mean = NAN, .sd = NAN, .ci95 = NAN};
    if (n < 1) return s;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += x[i];
    s.mean = sum / n;
    if (n < 2) return s;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (x[i] - s.mean) * (x[i] - s.mean);
    s.sd = sqrt(ss / (n - 1));
    s.ci95 = skv_eval_t975(n - 1) * s.sd / sqrt((double)n);
    return s;
}
