/* sink_recent.c — StreamingLLM (Xiao et al. 2023): the first `sinks` positions plus the most
 * recent ones. */
#include "policies.h"

static skv_status score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    (void)T_stride;
    (void)err;
    skv_score_sink_recent_row(scores, job->T, job->params->sinks);
    return SKV_OK;
}

const skv_policy skv_policy_sink_recent = {
    .name = "sink_recent",
    .alias = "streaming",
    .paper = "Xiao et al. 2023, Efficient Streaming Language Models with Attention Sinks "
             "(StreamingLLM)",
    .rule = "first min(sinks, keep) positions + the last keep - s",
    .cost = "none",
    .params = "sinks",
    .shared = true,
    .decode = true,
    .sinks_forced = true,
    .score = score,
    .allocate = skv_alloc_uniform,
};
