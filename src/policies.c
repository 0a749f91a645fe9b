/* policies.c — the policy registry, the scorers, the allocators and the shared top-k selection
 * (score -> allocate -> select, see policies.h). Nothing here touches a cache's contents. */
#include "policies.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- pure pieces ---------------------------------------------------------------------------- */

int skv_policy_keep(double keep_frac, int T) {
    if (T < 1) return 0;
    long keep = skv_round_half_even(keep_frac * (double)T);
    if (keep < 1) keep = 1;
    if (keep > T) keep = T;
    return (int)keep;
}

/* One budget of the rule before rescaling. */
static long long pyramid_raw(long long mx, long long mn, long long steps, int l, int window) {
    long long b = mx - (long long)l * steps;
    return (b > mn ? b : mn) + window;
}

skv_status skv_pyramid_budgets_clamped(int keep, int T, int n_layer, int window, int beta, int *out,
                                       skv_err *err) {
    if (keep < 1 || n_layer < 1 || window < 0 || beta < 1)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "pyramid budgets need keep >= 1, layers >= 1, window >= 0 and "
                           "beta >= 1 (got keep %d, layers %d, window %d, beta %d)",
                           keep, n_layer, window, beta);
    /* integer divisions as in the rule (all operands are positive, so C's truncation is
     * Python's floor) */
    long long base = SKV_MAX((long long)keep - window, 1LL);
    long long mn = SKV_MAX(base / beta, 1LL);
    long long mx = 2 * base - mn;
    /* KVCache-Factory's clamp (docs/SPEC.md): layer 0 never asks for more than the cache holds */
    if ((long long)T > window && mx >= (long long)T - window) {
        mx = (long long)T - window;
        mn = 2 * base - mx;
    }
    long long steps = (mx - mn) / SKV_MAX(n_layer - 1, 1);
    long long sum = 0;
    for (int l = 0; l < n_layer; l++) sum += pyramid_raw(mx, mn, steps, l, window);
    if (sum < 1) sum = 1;
    /* both operands are exact in a double, so the quotient is correctly rounded, like
     * Python's int / int */
    double scale = (double)((long long)keep * n_layer) / (double)sum;
    for (int l = 0; l < n_layer; l++) {
        double b = (double)pyramid_raw(mx, mn, steps, l, window) * scale;
        long r = b >= (double)INT32_MAX ? INT32_MAX : skv_round_half_even(b);
        out[l] = (int)(r < 1 ? 1 : r);
    }
    return SKV_OK;
}

skv_status skv_pyramid_budgets(int keep, int n_layer, int window, int beta, int *out,
                               skv_err *err) {
    return skv_pyramid_budgets_clamped(keep, INT32_MAX, n_layer, window, beta, out, err);
}

void skv_score_sink_recent_row(double *score, int T, int sinks) {
    for (int t = 0; t < T; t++) score[t] = t < sinks ? (double)T + (double)(sinks - t) : (double)t;
}

void skv_score_random_row(double *score, int T, uint64_t seed, int32_t *perm) {
    skv_rng rng;
    skv_rng_seed(&rng, seed);
    for (int t = 0; t < T; t++) perm[t] = t;
    for (int i = 0; i < T; i++) {
        int j = i + (int)skv_rng_below(&rng, (uint64_t)(T - i));
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
        score[perm[i]] = (double)(T - i);
    }
}

size_t skv_window_score_work_size(int W, int d) {
    return skv_matmul_work_size(SKV_TYPE_F32, W, d);
}

void skv_window_score_head(double *out, const float *q, int g, int W, size_t q_head_stride,
                           const float *k, int T, int d, float *logit, void *work) {
    const float scale = 1.0f / sqrtf((float)d);
    for (int t = 0; t < T; t++) out[t] = 0.0;
    for (int i = 0; i < g; i++) {
        /* logit[W, T] = q_i[W, d] . k[T, d]^T */
        skv_matmul(NULL, logit, q + (size_t)i * q_head_stride, W, k, SKV_TYPE_F32, T, d, work);
        for (int w = 0; w < W; w++) skv_softmax_sum(out, logit + (size_t)w * T, T, scale);
    }
    const double inv = 1.0 / ((double)g * (double)W);
    for (int t = 0; t < T; t++) out[t] *= inv;
}

void skv_pool_row(double *s, int T, int kernel, skv_pooling pooling, double *tmp) {
    if (kernel <= 1 || T < 1) return;
    /* a max over more than T copies of an edge is that edge: the same result from a window of
     * at most 2T + 1 (a kernel of 65536 over a short row cost 400x the row's scoring) */
    if (pooling == SKV_POOL_MAX && kernel > 2 * T + 1) kernel = 2 * T + 1;
    const int pad = kernel / 2;
    for (int i = 0; i < pad; i++) tmp[i] = s[0];
    memcpy(tmp + pad, s, (size_t)T * sizeof *s);
    for (int i = 0; i < pad; i++) tmp[pad + T + i] = s[T - 1];
    for (int t = 0; t < T; t++) {
        const double *win = tmp + t; /* padded indices t .. t + kernel - 1 */
        double acc = win[0];
        if (pooling == SKV_POOL_MAX) {
            for (int j = 1; j < kernel; j++)
                if (win[j] > acc) acc = win[j];
        } else {
            for (int j = 1; j < kernel; j++) acc += win[j];
            acc /= (double)kernel;
        }
        s[t] = acc;
    }
}

void skv_force_last(double *s, int T, int n) {
    for (int t = SKV_MAX(0, T - n); t < T; t++) s[t] = INFINITY;
}

/* An unsigned key that orders scores as the selection ranks them: NaN as -inf, -0 as +0, and
 * otherwise as doubles (the sign bit flipped for positives, every bit for negatives). */
static uint64_t rank_key(double s) {
    if (isnan(s)) s = -INFINITY;
    if (s == 0.0) s = 0.0;
    uint64_t u;
    memcpy(&u, &s, sizeof u);
    return (u >> 63) ? ~u : u | (1ULL << 63);
}

/* The k-th largest of key[n] (1 <= k <= n), by radix selection one byte at a time from the top:
 * at most 8 passes over shrinking candidates, so O(n) whatever the scores (a plateau included).
 * *above receives how many keys are larger (each pass drops the larger buckets from k), *ties how
 * many equal it (the last candidates). Reorders key. */
static uint64_t kth_largest_key(uint64_t *key, int n, int k, int *above, int *ties) {
    const int k0 = k;
    uint64_t prefix = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        int count[256] = {0};
        for (int i = 0; i < n; i++) count[(key[i] >> shift) & 0xff]++;
        int b = 255;
        while (count[b] < k) k -= count[b--]; /* the byte holding the k-th largest */
        prefix |= (uint64_t)b << shift;
        int m = 0;
        for (int i = 0; i < n; i++)
            if (((key[i] >> shift) & 0xff) == (uint64_t)b) key[m++] = key[i];
        n = m;
    }
    *above = k0 - k;
    *ties = n;
    return prefix;
}

int skv_select_topk(const double *score, int T, int k, int32_t *out, uint64_t *scratch) {
    if (T < 1) return 0;
    k = SKV_MAX(1, SKV_MIN(k, T));
    for (int t = 0; t < T; t++) scratch[t] = rank_key(score[t]);
    int above, ties;
    const uint64_t kth = kth_largest_key(scratch, T, k, &above, &ties);
    /* everything above the k-th key, then of the positions tied with it the latest ones */
    int skip = ties - (k - above), n = 0;
    for (int t = 0; t < T; t++) {
        const uint64_t key = rank_key(score[t]);
        if (key > kth || (key == kth && skip-- <= 0)) out[n++] = t;
    }
    return n;
}

/* ---- shared machinery of the per-head scorers ---------------------------------------------- */

typedef struct head_task {
    const skv_score_job *job;
    double *scores;
    int T_stride;
    size_t scratch_bytes;
    skv_head_fn fn;
    skv_err *errs;      /* [nth] */
    atomic_bool failed; /* a worker failed: the others take no more heads (a slow scorer's
                           remaining calls would only delay the error) */
} head_task;

static void head_worker(void *arg, int ith, int nth) {
    head_task *a = arg;
    const skv_score_job *job = a->job;
    const int n = job->T_total > job->T ? job->T_total : job->T, d = job->head_dim;
    const int H = job->n_head_kv;
    skv_err *err = &a->errs[ith];
    float *k = malloc(((size_t)n * (size_t)d + 1) * sizeof *k);
    void *scratch = a->scratch_bytes ? malloc(a->scratch_bytes) : NULL;
    if (!k || (a->scratch_bytes && !scratch)) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the keys of %d positions", n);
        goto done;
    }
    for (int task = ith; task < job->n_layer * H && !atomic_load(&a->failed); task += nth) {
        const int l = task / H, h = task % H;
        const int len = skv_cache_head_len(job->cache, l, h);
        if (len < n) {
            skv_err_set(err, SKV_ERR_STATE,
                        "layer %d kv head %d holds %d entries, fewer than the %d scored", l, h, len,
                        n);
            goto done;
        }
        float *kk = k;
        if (len > n) { /* read the whole head into a temporary, keep the first n rows */
            kk = malloc((size_t)len * (size_t)d * sizeof *kk);
            if (!kk) {
                skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the keys of %d positions", len);
                goto done;
            }
        }
        skv_status st = skv_cache_head_read(job->cache, l, h, kk, NULL, NULL, err);
        if (!st && kk != k) memcpy(k, kk, (size_t)n * (size_t)d * sizeof *k);
        if (kk != k) free(kk);
        if (st) goto done;
        double *row = a->scores + (size_t)task * (size_t)a->T_stride;
        const skv_status fs = a->fn(job, l, h, k, row, scratch, err);
        if (fs) { /* a status without words would pass as a success below */
            if (err->status == SKV_OK)
                skv_err_set(err, fs, "scoring layer %d kv head %d failed", l, h);
            goto done;
        }
    }
done:
    if (err->status != SKV_OK) atomic_store(&a->failed, true);
    free(k);
    free(scratch);
}

skv_status skv_for_each_head(const skv_score_job *job, double *scores, int T_stride,
                             size_t scratch_bytes, skv_head_fn fn, skv_err *err) {
    if (!job->cache || job->n_head_kv < 1 || job->n_head % job->n_head_kv != 0)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "scoring needs keys and n_head divisible by n_head_kv");
    const int nth = job->pool ? skv_pool_size(job->pool) : 1;
    skv_err *errs = calloc((size_t)nth, sizeof *errs);
    if (!errs) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    head_task a = {job, scores, T_stride, scratch_bytes, fn, errs, false};
    skv_pool_run(job->pool, head_worker, &a);
    skv_status st = SKV_OK;
    for (int i = 0; i < nth && st == SKV_OK; i++) {
        if (errs[i].status != SKV_OK) {
            st = errs[i].status;
            skv_err_set(err, st, "%s", errs[i].msg);
        }
    }
    free(errs);
    return st;
}

/* ---- the window score (attention, pyramid, adakv, tova) ------------------------------------- */

typedef struct window_args {
    int W, q_first, kernel, window_keep;
} window_args;

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* scratch: matmul work, then logit [W, T] floats, then tmp [T + kernel] doubles */
static size_t window_work_bytes(int W, int d) {
    return ALIGN64(skv_window_score_work_size(W, d));
}

static skv_status window_head(const skv_score_job *job, int l, int h, const float *k, double *row,
                              void *scratch, skv_err *err) {
    (void)err;
    const window_args *wa = job->ext;
    const int T = job->T, d = job->head_dim, g = job->n_head / job->n_head_kv;
    void *work = scratch;
    float *logit = (float *)((uint8_t *)scratch + window_work_bytes(wa->W, d));
    double *tmp = (double *)((uint8_t *)logit + ALIGN64((size_t)T * (size_t)wa->W * sizeof(float)));
    const float *q = job->queries[l] +
                     ((size_t)h * (size_t)g * (size_t)job->q_n + (size_t)wa->q_first) * (size_t)d;
    skv_window_score_head(row, q, g, wa->W, (size_t)job->q_n * (size_t)d, k, T, d, logit, work);
    skv_pool_row(row, T, wa->kernel, job->params->pooling, tmp);
    skv_force_last(row, T, wa->window_keep);
    return SKV_OK;
}

skv_status skv_score_window(const skv_score_job *job, double *scores, int T_stride, int W_used,
                            int q_first, int kernel, int window_keep, skv_err *err) {
    if (!job->queries || W_used < 1 || q_first < 0 || q_first + W_used > job->q_n)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "window scoring needs window queries");
    window_args wa = {W_used, q_first, kernel, window_keep};
    skv_score_job j = *job;
    j.ext = &wa;
    size_t bytes = window_work_bytes(W_used, job->head_dim) +
                   ALIGN64((size_t)job->T * (size_t)W_used * sizeof(float)) +
                   ((size_t)job->T + (size_t)kernel) * sizeof(double);
    return skv_for_each_head(&j, scores, T_stride, bytes, window_head, err);
}

skv_status skv_score_attention(const skv_score_job *job, double *scores, int T_stride,
                               skv_err *err) {
    if (job->W < 1)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "attention scoring needs window queries");
    return skv_score_window(job, scores, T_stride, job->W, job->q_off, job->params->kernel,
                            job->params->window_keep, err);
}

skv_status skv_alloc_uniform(int keep, int T, int n_layer, int n_head_kv, int window_keep,
                             int *budgets, int *layer_budgets, skv_err *err) {
    (void)T;
    (void)window_keep;
    (void)err;
    for (int l = 0; l < n_layer; l++) {
        layer_budgets[l] = keep;
        for (int h = 0; h < n_head_kv; h++) budgets[l * n_head_kv + h] = keep;
    }
    return SKV_OK;
}
