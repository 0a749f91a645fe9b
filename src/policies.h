/* policies.h — compression as score -> allocate -> select (docs/SPEC.md, docs/POLICIES.md).
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

/* What a scorer may read. Positions [0, T) are scored; rows of scores are T_stride long.
 * Positions here are entry indices of each head: for a fresh prefill they are the positions
 * themselves; under a decoding budget (every head of equal length) entry i of a head. */
typedef struct skv_score_job {
    int n_layer, n_head_kv, n_head, head_dim;
    int T;                             /* positions scored */
    int T_total;                       /* entries of each head (T + the engine window) */
    int keep;                          /* entries each head keeps (h2o's recent = keep / 2) */
    const skv_compress_params *params; /* sinks, seed, pooling, kernel, window_keep */
    const skv_cache *cache; /* keys of positions 0..T-1 are each head's first T entries */
    /* window policies only: */
    const float *const *queries; /* [n_layer] -> [n_head, q_n, head_dim] post-RoPE */
    int q_n;                     /* tokens per head row in queries */
    int q_off;                   /* first window token within those rows */
    int W;                       /* window queries used: rows q_off .. q_off+W-1 */
    /* prefill-attention policies (h2o): [n_layer * n_head_kv] -> [T_total] sums of the
     * attention every cached query paid to each entry, summed over the query heads */
    const double *const *attn_sum;
    skv_pool *pool;  /* may be NULL */
    const void *ext; /* a policy registered through the C API: its skv_policy_def */
} skv_score_job;

/* shared = true: the scorer fills only row 0 and every (layer, head) uses it. */
typedef skv_status (*skv_scorer_fn)(const skv_score_job *job, double *scores, int T_stride,
                                    skv_err *err);
/* Fills budgets[n_layer * n_head_kv] (entries to keep of the T_total positions) and
 * layer_budgets[n_layer] as reported in skv_compress_info. T is the positions a head holds. */
typedef skv_status (*skv_alloc_fn)(int keep, int T, int n_layer, int n_head_kv, int window_keep,
                                   int *budgets, int *layer_budgets, skv_err *err);
/* Selection of one layer when the policy does not select each head on its own (adakv):
 * scores [n_head_kv, T_stride] rows of length T; budgets [n_head_kv] in/out (the counts each
 * head ends with); idx [n_head_kv, T_stride] ascending. */
typedef skv_status (*skv_select_fn)(const double *scores, int T, int T_stride, int n_head_kv,
                                    int keep, int *budgets, int32_t *idx, skv_err *err);

/* What a policy needs besides the cache's keys. */
enum {
    SKV_POLICY_NEEDS_WINDOW = 1,       /* window queries (seed: a window pass on a copy) */
    SKV_POLICY_NEEDS_PREFILL_ATTN = 2, /* attention accumulated during the prefill */
    SKV_POLICY_NEEDS_VALUES = 4,       /* value vectors (registered rows that ask for them) */
};

typedef struct skv_policy {
    const char *name;  /* canonical */
    const char *alias; /* or NULL */
    const char *paper;
    const char *rule;   /* the score in one line */
    const char *cost;   /* what it costs beyond the prefill */
    const char *params; /* the skv_compress_params fields it reads: "sinks,seed,..." or "" */
    unsigned needs;     /* SKV_POLICY_NEEDS_*: the one place a row says what it reads */
    bool shared;        /* one score row for every layer and head */
    bool decode;        /* usable under a decoding budget (every head cut to one count) */
    bool sinks_forced;  /* sink_recent: scores above T are its forced sinks */
    skv_scorer_fn score;
    skv_alloc_fn allocate;
    skv_select_fn select; /* NULL: each head its own top-budget */
    const void *ext;      /* registered rows: their skv_policy_def (skv_score_job.ext) */
} skv_policy;

/* Whether the row scores with window queries (derived from needs: a second flag could
 * disagree with it). */
static inline bool skv_policy_row_needs_window(const skv_policy *p) {
    return (p->needs & SKV_POLICY_NEEDS_WINDOW) != 0;
}

/* The registry (src/policies/registry.c): the built-in rows in order, then the rows registered
 * through skv_policy_register. */
int skv_policy_registry_size(void);
const skv_policy *skv_policy_at(int i);

/* Built-in rows, one per file in src/policies/. */
extern const skv_policy skv_policy_sink_recent, skv_policy_random, skv_policy_attention,
    skv_policy_pyramid, skv_policy_knorm, skv_policy_keydiff, skv_policy_tova, skv_policy_h2o,
    skv_policy_adakv;

/* Shared scorers and allocators (src/policies/snapkv.c, policies.c). */
skv_status skv_score_window(const skv_score_job *job, double *scores, int T_stride, int W_used,
                            int q_first, int kernel, int window_keep, skv_err *err);
skv_status skv_score_attention(const skv_score_job *job, double *scores, int T_stride,
                               skv_err *err);
skv_status skv_alloc_uniform(int keep, int T, int n_layer, int n_head_kv, int window_keep,
                             int *budgets, int *layer_budgets, skv_err *err);
/* Runs fn(task) for task in [0, n_layer * n_head_kv) over the pool with each worker holding
 * the float keys of the head (first T_total entries) in k. */
typedef skv_status (*skv_head_fn)(const skv_score_job *job, int layer, int head, const float *k,
                                  double *row, void *scratch, skv_err *err);
skv_status skv_for_each_head(const skv_score_job *job, double *scores, int T_stride,
                             size_t scratch_bytes, skv_head_fn fn, skv_err *err);

/* Registry lookup by name or alias (exact, case-sensitive); NULL when unknown. */
const skv_policy *skv_policy_find(const char *name);
/* "sink_recent (streaming), random, attention (snapkv), ..." of every registry row, in a
 * static buffer refreshed by skv_policy_register (not during concurrent registration). */
const char *skv_policy_list(void);

/* ---- pure pieces -------------------------------------------------------------------------- */

/* keep = max(1, round_half_even(keep_frac * T)) clamped to [1, T]; T >= 1. */
int skv_policy_keep(double keep_frac, int T);

/* PyramidKV budgets (docs/SPEC.md), beta = 20 in the policy; out[n_layer]. Values are the rule's,
 * not clamped to T (the selection clamps). INVALID_ARG when keep < 1, n_layer < 1, window < 0
 * or beta < 1. */
skv_status skv_pyramid_budgets(int keep, int n_layer, int window, int beta, int *out, skv_err *err);
/* The same with KVCache-Factory's clamp (docs/SPEC.md) for a cache of T positions: when
 * T > window and mx >= T - window, mx = T - window and mn = 2 * base - mx. */
skv_status skv_pyramid_budgets_clamped(int keep, int T, int n_layer, int window, int beta, int *out,
                                       skv_err *err);

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

/* Top-k of score[T] (k clamped to [1, T]); ties -> higher position; NaN ranks lowest, with
 * -inf; -0 ties +0. out[k] ascending. scratch: [T]. Returns k. O(T). */
int skv_select_topk(const double *score, int T, int k, int32_t *out, uint64_t *scratch);

/* ---- per-context policy state: h2o's accumulated attention, the decoding budget ---------- */

typedef struct skv_policy_state {
    /* h2o (src/policies/h2o.c): acc[(l * H + h) * acc_cap + e] sums, over every query seen
     * since the cache was empty, the attention paid to entry e of (l, h), summed over the
     * group's query heads; zero beyond the head's entries. acc_n[l * H + h]: entries it
     * covers. acc_ok: false once a cache change it did not follow broke the sums. */
    double *acc;
    int *acc_n;
    int acc_cap;
    bool acc_ok;
    double acc_ms; /* wall time the forward passes spent on the sums since the cache was empty:
                    * h2o's selection work, which skv_compress adds to its compress_ms */
    /* decoding budget (src/policies/decode.c) */
    int max_entries, interval; /* 0: no budget */
    int qw;                    /* window queries kept: min(n_window, interval), >= 1 */
    skv_compress_params params;
    char policy[32];
    float *qring; /* [n_layer][n_head][qw][head_dim]: the last q_valid tokens, oldest first */
    int q_valid;
    int since; /* tokens since the last cut */
    int cuts;
} skv_policy_state;

void skv_pstate_free(skv_policy_state *ps);
/* Deep copy (NULL in, NULL out; NULL on failure with *ok = false). */
skv_policy_state *skv_pstate_clone(const skv_policy_state *ps, const skv_context *ctx, bool *ok);
void skv_pstate_reset(skv_policy_state *ps, const skv_context *ctx);
/* forward.c's hooks: after the attention of one layer of a batch of n tokens at pos0.. (its
 * post-RoPE queries in ctx->q, its entries committed); whether n more tokens may go past
 * n_ctx (a budget with rerotate, room in every head); after every forward call. */
void skv_pstate_layer(skv_context *ctx, int layer, int n, int pos0);
bool skv_pstate_unbounded(const skv_context *ctx, int n);
/* Whether a call of n tokens goes in pieces: a re-rotating budget whose heads lack room for n
 * more. Then skv_pstate_next_piece says how many of the n to feed next: up to the next cut
 * (skv_context_budget_piece), within the room left (>= 1). */
bool skv_pstate_must_split(const skv_context *ctx, int n);
int skv_pstate_next_piece(const skv_context *ctx, int n);
skv_status skv_pstate_after_forward(skv_context *ctx, int n, skv_err *err);
/* Before a forward call changes the cache: SKV_ERR_STATE when a budget is set and the heads
 * hold different numbers of entries (its next cut could not run). */
skv_status skv_pstate_before_forward(const skv_context *ctx, skv_err *err);
/* h2o: grows the attention sums (when accumulating) so that every head may take n_more
 * entries; called by skv_forward before the tokens enter the cache. */
skv_status skv_h2o_reserve(skv_context *ctx, int n_more, skv_err *err);
/* h2o: accumulate the attention of one layer (called by skv_pstate_layer). */
void skv_h2o_accumulate(skv_context *ctx, int layer, int n, int pos0);
/* Follows a head's compaction to the kept entry indices keep[n_keep] (ascending). */
void skv_pstate_compact(skv_policy_state *ps, int layer_head, const int32_t *keep, int n_keep);
/* The rows for skv_score_job.attn_sum, or NULL (with a message) when h2o cannot be scored. */
skv_status skv_h2o_rows(const skv_context *ctx, const double **rows, skv_err *err);
/* Scores the entries of a cache with pol into scores (rows of job.T_total; one row when
 * pol->shared, else n_layer * n_head_kv). The caller fills job's .T, .T_total, .keep, .params,
 * .cache and, for window policies, .queries, .q_n, .q_off and .W; this fills the model's shape,
 * the pool, the policy's ext and, when the policy needs them, the prefill attention rows, and
 * when T < T_total forces the last W entries of each row (the window) so that they stay. */
skv_status skv_policy_score_cache(skv_context *ctx, const skv_policy *pol, skv_score_job job,
                                  double *scores, skv_err *err);

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

/* Validates params against ctx, runs the window pass when needed (seed: on ctx, its window
 * entries dropped again and the heads' room given back; on a clone when ctx has attention sums
 * or a budget), scores, allocates and selects. ctx's entries are as they were. */
skv_status skv_compress_plan_make(skv_context *ctx, const skv_compress_params *params,
                                  skv_compress_plan *plan, skv_err *err);
void skv_compress_plan_free(skv_compress_plan *plan);

#endif
