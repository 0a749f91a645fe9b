/* knorm.c — Devoto et al. 2024 (kvpress KnormPress): keys with a low L2 norm draw the attention,
 * so the score is -||k_i||. Keys only: no window, no extra pass. */
#include "policies.h"

#include <math.h>

static skv_status head(const skv_score_job *job, int l, int h, const float *k, double *row,
                       void *scratch, skv_err *err) {
    (void)l, (void)h, (void)scratch, (void)err;
    const int d = job->head_dim;
    for (int i = 0; i < job->T; i++) {
        double s = 0;
        for (int x = 0; x < d; x++) s += (double)k[(size_t)i * d + x] * k[(size_t)i * d + x];
        row[i] = -sqrt(s);
    }
    return SKV_OK;
}

static skv_status score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    return skv_for_each_head(job, scores, T_stride, 0, head, err);
}

const skv_policy skv_policy_knorm = {
    .name = "knorm",
    .paper = "Devoto et al. 2024, A Simple and Effective L2 Norm-Based Strategy for KV Cache "
             "Compression (kvpress KnormPress)",
    .rule = "-||k_i||_2",
    .cost = "none (one pass over the keys)",
    .params = "",
    .decode = true,
    .score = score,
    .allocate = skv_alloc_uniform,
};
