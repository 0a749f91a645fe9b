/* pyramid.c — PyramidKV (Cai et al. 2024): SnapKV scores with layer budgets that shrink with
 * depth (the rule and KVCache-Factory's clamp are in policies.c). */
#include "policies.h"

#define SKV_PYRAMID_BETA 20

static skv_status allocate(int keep, int T, int n_layer, int n_head_kv, int window_keep,
                           int *budgets, int *layer_budgets, skv_err *err) {
    skv_status st = skv_pyramid_budgets_clamped(keep, T, n_layer, window_keep, SKV_PYRAMID_BETA,
                                                layer_budgets, err);
    if (st != SKV_OK) return st;
    for (int l = 0; l < n_layer; l++)
        for (int h = 0; h < n_head_kv; h++) budgets[l * n_head_kv + h] = layer_budgets[l];
    return SKV_OK;
}

const skv_policy skv_policy_pyramid = {
    .name = "pyramid",
    .alias = "pyramidkv",
    .paper = "Cai et al. 2024, PyramidKV: Dynamic KV Cache Compression based on Pyramidal "
             "Information Funneling",
    .rule = "attention's score with layer budgets b_l (beta 20, KVCache-Factory's clamp)",
    .cost = "as attention",
    .params = "pooling,kernel,window_keep",
    .needs = SKV_POLICY_NEEDS_WINDOW,
    .score = skv_score_attention,
    .allocate = allocate,
};
