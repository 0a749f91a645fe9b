/* tova.c — TOVA (Oren et al. 2024, kvpress TOVAPress): the attention of ONE query, the last
 * window query (seed: position T+W-1 on the copy; engine: the last prompt position), group
 * mean, softmax over the scored positions, no pooling, nothing forced. */
#include "policies.h"

static skv_status score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    if (job->W < 1)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "tova needs a window of at least 1 query");
    return skv_score_window(job, scores, T_stride, 1, job->q_off + job->W - 1, 1, 0, err);
}

const skv_policy skv_policy_tova = {
    .name = "tova",
    .paper = "Oren et al. 2024, Transformers are Multi-State RNNs (TOVA; kvpress TOVAPress)",
    .rule = "group mean of softmax(q_last.k_i/sqrt(d)) of the last window query",
    .cost = "one query's scores (H_q*T dot products per layer); seed: a window pass",
    .params = "",
    .needs = SKV_POLICY_NEEDS_WINDOW,
    .decode = true,
    .score = score,
    .allocate = skv_alloc_uniform,
};
