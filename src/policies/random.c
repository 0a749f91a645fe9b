/* random.c — the seed's control: keep distinct positions drawn uniformly (Fisher-Yates). */
#include "policies.h"

#include <stdlib.h>

static skv_status score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    (void)T_stride;
    int32_t *perm = malloc((size_t)job->T * sizeof *perm + 1);
    if (!perm)
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the random policy's %d positions",
                           job->T);
    skv_score_random_row(scores, job->T, job->params->seed, perm);
    free(perm);
    return SKV_OK;
}

const skv_policy skv_policy_random = {
    .name = "random",
    .paper = "the seed's control (uniform without replacement, seeded Fisher-Yates)",
    .rule = "keep positions drawn uniformly without replacement",
    .cost = "none",
    .params = "seed",
    .shared = true,
    .score = score,
    .allocate = skv_alloc_uniform,
};
