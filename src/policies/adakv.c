/* adakv.c — Ada-KV (Feng et al. 2024, kvpress AdaKVPress) on SnapKV scores: per layer the heads
 * share keep * H_kv entries. Each head first takes its own top n_safe = floor(0.2 * keep); the
 * remaining keep*H_kv - H_kv*n_safe entries are the top of every head's remaining scores
 * together (ties: higher position, then lower head). Heads end with different counts. */
#include "policies.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    double s;
    int32_t pos;
    int32_t head;
} cand;

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    double sa = isnan(a->s) ? -INFINITY : a->s, sb = isnan(b->s) ? -INFINITY : b->s;
    if (sa != sb) return sa > sb ? -1 : 1;
    if (a->pos != b->pos) return a->pos > b->pos ? -1 : 1;
    return (a->head > b->head) - (a->head < b->head);
}

static int pos_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

static skv_status select_layer(const double *scores, int T, int T_stride, int H, int keep,
                               int *budgets, int32_t *idx, skv_err *err) {
    const int n_safe = (int)floor(0.2 * keep);
    long long total = (long long)keep * H;
    if (total > (long long)T * H) total = (long long)T * H;
    uint64_t *rank = malloc((size_t)T * sizeof *rank + 1);
    cand *c = malloc((size_t)T * (size_t)H * sizeof *c + 1);
    bool *taken = calloc((size_t)T * (size_t)H + 1, sizeof *taken);
    if (!rank || !c || !taken) {
        free(rank), free(c), free(taken);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for adakv's selection");
    }
    long long used = 0;
    for (int h = 0; h < H; h++) {
        int n = n_safe > 0 ? skv_select_topk(scores + (size_t)h * T_stride, T, n_safe,
                                             idx + (size_t)h * T_stride, rank)
                           : 0;
        budgets[h] = n;
        used += n;
        for (int i = 0; i < n; i++) taken[(size_t)h * T + idx[(size_t)h * T_stride + i]] = true;
    }
    size_t nc = 0;
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            if (!taken[(size_t)h * T + t]) c[nc++] = (cand){scores[(size_t)h * T_stride + t], t, h};
    qsort(c, nc, sizeof *c, cand_cmp);
    for (size_t i = 0; i < nc && used < total; i++, used++) {
        int h = c[i].head;
        idx[(size_t)h * T_stride + budgets[h]++] = c[i].pos;
    }
    for (int h = 0; h < H; h++)
        qsort(idx + (size_t)h * T_stride, (size_t)budgets[h], sizeof *idx, pos_cmp);
    free(rank), free(c), free(taken);
    return SKV_OK;
}

const skv_policy skv_policy_adakv = {
    .name = "adakv",
    .paper = "Feng et al. 2024, Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget "
             "Allocation (kvpress AdaKVPress), on SnapKV scores",
    .rule = "attention's score; per layer keep*H_kv entries: each head its top floor(0.2 keep), "
            "the rest the top of all heads together",
    .cost = "as attention",
    .params = "pooling,kernel,window_keep",
    .needs = SKV_POLICY_NEEDS_WINDOW,
    .score = skv_score_attention,
    .allocate = skv_alloc_uniform,
    .select = select_layer,
};
