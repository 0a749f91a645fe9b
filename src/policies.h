/* policies.h — compression as score -> allocate -> select (DESIGN.md, SPEC.md).
 *
 * A policy is one row of a registry: a scorer that fills score[layer][kv head][position] and an
 * allocator that gives every (layer, kv head) a budget. Selection is shared by all of them:
 * top-budget by score, ties toward the higher (more recent) position, sorted ascending.
 *
 * Scores are float64. A forced position is scored +inf, so it wins against every finite score,
 * and among forced positions the tie rule keeps the most recent ones first.
 *
 * The pure pieces (budgets, scorers on plain arrays, pooling, top-k) are exposed here so the
 * tests can check them against hand-derived values; compress.c runs them on a context. */
#ifndef SKV_POLICIES_H
#define SKV_POLICIES_H

#include "common.h"
#include "threads.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- inputs of a scoring run ---------------------------------------------------------------- */

/* What a scorer may read. Positions [0, T) are scored; rows of scores are T_stride long. */
typedef struct skv_score_job {
    int n_layer, n_head_kv, n_head, head_dim;
    int T;                             /* positions scored */
    const skv_compress_params *params; /* sinks, seed, pooling, kernel, window_keep */
    /* window policies only: */
    const skv_cache *cache;      /* keys of positions 0..T-1 are each head's first T entries */
    const float *const *queries; /* [n_layer] -> [n_head, q_n, head_dim] post-RoPE */
    int q_n;                     /* tokens per head row in queries */
    int q_off;                   /* first window token within those rows */
    int W;                       /* window queries used: rows q_off .. q_off+W-1 */
    skv_pool *pool;              /* may be NULL */
} skv_score_job;

/* shared = true: the scorer fills only row 0 and every (layer, head) uses it. */
typedef skv_status (*skv_scorer_fn)(const skv_score_job *job, double *scores, int T_stride,
                                    skv_err *err);
/* Fills budgets[n_layer * n_head_kv] (entries to keep of the T_total positions) and
 * layer_budgets[n_layer] as reported in skv_compress_info. */
typedef skv_status (*skv_alloc_fn)(int keep, int n_layer, int n_head_kv, int window_keep,
                                   int *budgets, int *layer_budgets, skv_err *err);

typedef struct skv_policy {
    const char *name;  /* canonical */
    const char *alias; /* or NULL */
    bool needs_window; /* needs window queries */
    bool shared;       /* one score row for every layer and head */
    skv_scorer_fn score;
    skv_alloc_fn allocate;
} skv_policy;

/* Registry lookup by name or alias (exact, case-sensitive); NULL when unknown. */
const skv_policy *skv_policy_find(const char *name);
/* "sink_recent (streaming), random, attention (snapkv), pyramid (pyramidkv)" */
const char *skv_policy_list(void);

/* ---- pure pieces -------------------------------------------------------------------------- */

/* keep = max(1, round_half_even(keep_frac * T)) clamped to [1, T]; T >= 1. */
int skv_policy_keep(double keep_frac, int T);

/* PyramidKV budgets (SPEC.md), beta = 20 in the policy; out[n_layer]. Values are the rule's,
 * not clamped to T (the selection clamps). INVALID_ARG when keep < 1, n_layer < 1, window < 0
 * or beta < 1. */
skv_status skv_pyramid_budgets(int keep, int n_layer, int window, int beta, int *out, skv_err *err);

/* sink_recent scores over [0, T): sink i < sinks scores T + sinks - i (the first sinks win,
 * earliest first), every other position scores its own index (the most recent win). Top-keep
 * of these is exactly "first min(sinks, keep) + last keep - s". */
void skv_score_sink_recent_row(double *score, int T, int sinks);

/* random scores over [0, T): a Fisher-Yates shuffle seeded by seed; the i-th position drawn
 * scores T - i. Top-keep is therefore the first keep draws of a partial Fisher-Yates: keep
 * distinct positions uniformly without replacement. perm: scratch [T]. */
void skv_score_random_row(double *score, int T, uint64_t seed, int32_t *perm);

/* Window score of one kv head (before pooling): for each of the g query heads of the group
 * and each of the W window queries, softmax over the T keys of q.k/sqrt(d), averaged over the
 * g*W rows. The logits of a query head's W rows against the T keys are one small matrix
 * product on the packed float kernels (this is SnapKV's hot loop: W*n_head*T dot products per
 * layer), their softmax runs in float32 (relative error ~1e-7 per probability, far inside the
 * 1e-6 the tests hold it to) and rows are accumulated in float64. Single-threaded: callers
 * parallelize over heads.
 *   q: first query head of the group; query row (i, w) at q + i*q_head_stride + w*d
 *   k: [T, d]; out: [T]; logit: scratch [W, T]; work: skv_window_score_work_size(W, d) bytes */
size_t skv_window_score_work_size(int W, int d);
void skv_window_score_head(double *out, const float *q, int g, int W, size_t q_head_stride,
                           const float *k, int T, int d, float *logit, void *work);

/* In-place pooling of s[T]: pad both ends with kernel/2 copies of the edge value, then a
 * stride-1 max or mean of width kernel; kernel 1 leaves s as it is. For an even kernel the
 * padded row has T+1 windows; position i gets the window that starts at padded index i
 * (original positions i - kernel/2 .. i + kernel/2 - 1), as in the seed, and the extra last
 * window, which names no position, is dropped. tmp: scratch [T + kernel]. */
void skv_pool_row(double *s, int T, int kernel, skv_pooling pooling, double *tmp);

/* Scores positions [max(0, T - n), T) +inf. */
void skv_force_last(double *s, int T, int n);

/* Scratch of skv_select_topk. */
typedef struct skv_rank {
    double s;
    int32_t pos;
} skv_rank;

/* Top-k of score[T] (k clamped to [1, T]); ties -> higher position; NaN ranks lowest.
 * out[k] ascending. scratch: [T]. Returns k. */
int skv_select_topk(const double *score, int T, int k, int32_t *out, skv_rank *scratch);

/* ---- one compression, planned before anything is changed ---------------------------------- */

/* Everything skv_compress decides, computed without touching the cache. */
typedef struct skv_compress_plan {
    const skv_policy *policy;
    int T;       /* logical length of the cache */
    int keep;    /* of T */
    int W;       /* window tokens (info.window_tokens) */
    int n_score; /* positions scored by the policy: T (seed) or T - W (engine with a window) */
    int n_layer, n_head_kv;
    double *scores;     /* [n_layer * n_head_kv, T] (row 0 only when shared); forced = +inf */
    int *budgets;       /* [n_layer * n_head_kv] */
    int *layer_budgets; /* [n_layer] */
    int32_t *idx;       /* [n_layer * n_head_kv, T]: kept positions of each head, ascending */
    int *n_idx;         /* [n_layer * n_head_kv] */
    double window_ms;
} skv_compress_plan;

/* Validates params against ctx, runs the window pass when needed (seed: on a clone), scores,
 * allocates and selects. ctx is not modified. */
skv_status skv_compress_plan_make(skv_context *ctx, const skv_compress_params *params,
                                  skv_compress_plan *plan, skv_err *err);
void skv_compress_plan_free(skv_compress_plan *plan);

#endif
