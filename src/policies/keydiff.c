/* keydiff.c — Park et al. 2025 (kvpress KeyDiffPress): keys that differ most from the mean key
 * direction are kept: a = normalize(mean_j normalize(k_j)) over the scored positions, score
 * -cos(k_i, a). A zero key has no direction: its normalized form is 0 and its cosine 0. */
#include "policies.h"

#include <math.h>

static skv_status head(const skv_score_job *job, int l, int h, const float *k, double *row,
                       void *scratch, skv_err *err) {
    (void)l, (void)h, (void)err;
    const int d = job->head_dim, T = job->T;
    double *a = scratch; /* [d] */
    for (int x = 0; x < d; x++) a[x] = 0;
    for (int i = 0; i < T; i++) { /* row[i] = ||k_i|| for now */
        const float *ki = k + (size_t)i * d;
        double s = 0;
        for (int x = 0; x < d; x++) s += (double)ki[x] * ki[x];
        row[i] = sqrt(s);
        if (row[i] > 0)
            for (int x = 0; x < d; x++) a[x] += ki[x] / row[i];
    }
    double an = 0;
    for (int x = 0; x < d; x++) an += a[x] * a[x]; /* the mean's 1/T cancels in normalize */
    an = sqrt(an);
    for (int i = 0; i < T; i++) {
        const float *ki = k + (size_t)i * d;
        double dot = 0;
        for (int x = 0; x < d; x++) dot += ki[x] * a[x];
        row[i] = row[i] > 0 && an > 0 ? -dot / (row[i] * an) : 0.0;
    }
    return SKV_OK;
}

static skv_status score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    return skv_for_each_head(job, scores, T_stride, (size_t)job->head_dim * sizeof(double), head,
                             err);
}

const skv_policy skv_policy_keydiff = {
    .name = "keydiff",
    .paper = "Park et al. 2025, KeyDiff: Key Similarity-Based KV Cache Eviction (kvpress "
             "KeyDiffPress)",
    .rule = "-cos(k_i, a), a = normalize(mean_j normalize(k_j))",
    .cost = "none (two passes over the keys)",
    .params = "",
    .decode = true,
    .score = score,
    .allocate = skv_alloc_uniform,
};
