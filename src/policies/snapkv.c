/* snapkv.c — SnapKV (Li et al. 2024): the window queries' attention over the scored keys,
 * pooled, with the last window_keep positions forced. The window score itself lives in
 * policies.c (skv_score_window), shared with pyramid, adakv and tova. */
#include "policies.h"

const skv_policy skv_policy_attention = {
    .name = "attention",
    .alias = "snapkv",
    .paper = "Li et al. 2024, SnapKV: LLM Knows What You are Looking for Before Generation",
    .rule = "pool(mean over the group's heads and W window queries of softmax(q.k_i/sqrt(d)))",
    .cost = "window scores (W*H_q*T dot products per layer); seed: a window pass",
    .params = "pooling,kernel,window_keep",
    .needs = SKV_POLICY_NEEDS_WINDOW,
    .decode = true,
    .score = skv_score_attention,
    .allocate = skv_alloc_uniform,
};
