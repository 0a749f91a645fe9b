/* test_policies_new.c — the policies beyond the seed (knorm, keydiff, tova, h2o, adakv), the
 * registry, PyramidKV's clamp and decoding-time compression, on real stories260K caches.
 *
 * Selections are checked against an independent float64 implementation of docs/SPEC.md's rules
 * (its own loops over the engine's cached keys and captured queries; any valid top-k passes,
 * ties aside). Masking equivalence: the compressed engine's logits equal the float64 reference
 * forward pass (tests/ref_forward.c) that sees the dense sequence with the dropped entries
 * masked (and, with rerotate, the new rotation indices). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common.h"
#include "context.h"
#include "eval/eval.h" /* skv_eval_policy_pt, skv_eval_policy_colour */
#include "policies.h"
#include "ref_forward.h"
#include "sparsekv.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL_LOGITS 1e-4
#define TOL_SCORE  1e-5

static const char *TEXT =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big red ball near the tree. She ran to get it, "
    "but a dog took it first. Lily was sad, but the dog brought the ball back to her.";

static skv_model *model;
static ref_model *rmodel;
static int32_t toks[256];
static int n_toks;
static int L, HQ, HKV, HD, V;

/* The built-in policies beyond the four founding ones (those: test_policies.c), taken from the
 * registry in setup so that a policy added to it is checked here without a list to extend: its
 * rule must be written into ref_scores. */
static const char *NEW_POLICIES[32];
static int N_NEW;

static int n_threads = 2; /* 1 for the long decoding loops (a token is too small to split) */

static skv_context *new_ctx(int capture, bool accumulate) {
    skv_context *ctx = test_context(model, SKV_TYPE_F32, 0, n_threads, capture);
    skv_err err = {0};
    if (accumulate) assert_int_equal(skv_context_accumulate_attention(ctx, true, &err), SKV_OK);
    return ctx;
}

static skv_compress_params params_for(const char *policy, double keep, skv_protocol proto,
                                      const int32_t *window, int W) {
    skv_compress_params p = skv_compress_default_params();
    p.policy = policy;
    p.keep_frac = keep;
    p.protocol = proto;
    p.window_tokens = window;
    p.n_window = W;
    p.window_keep = 4;
    return p;
}

static void compress_ok(skv_context *ctx, const skv_compress_params *p, skv_compress_info *info) {
    skv_err err = {0};
    skv_status st = skv_compress(ctx, p, info, &err);
    if (st) fail_msg("compress %s: %s", p->policy, err.msg);
}

/* ---- the float64 reference of docs/SPEC.md's rules ---------------------------------------------
 */

/* The inputs: keys [L, HKV, n_keys, HD] of the dense cache, queries [L, HQ, n_q, HD] with
 * their positions q_pos0.. (post-RoPE, as cached / captured), all in double. */
typedef struct inputs {
    double *k;
    int n_keys;
    double *q;
    int n_q, q_pos0;
} inputs;

static const double *K(const inputs *in, int l, int h, int t) {
    return in->k + (((size_t)l * HKV + h) * in->n_keys + t) * HD;
}
static const double *Q(const inputs *in, int l, int qh, int j) {
    return in->q + (((size_t)l * HQ + qh) * in->n_q + j) * HD;
}

static inputs inputs_take(const skv_context *keys_ctx, const skv_context *q_ctx) {
    inputs in = {0};
    const skv_cache *c = skv_context_cache_const(keys_ctx);
    in.n_keys = skv_cache_head_len(c, 0, 0);
    in.k = malloc((size_t)L * HKV * in.n_keys * HD * sizeof(double));
    float *kf = malloc((size_t)in.n_keys * HD * sizeof(float));
    for (int l = 0; l < L; l++)
        for (int h = 0; h < HKV; h++) {
            assert_int_equal(skv_cache_head_read(c, l, h, kf, NULL, NULL, NULL), SKV_OK);
            for (int i = 0; i < in.n_keys * HD; i++)
                in.k[((size_t)l * HKV + h) * in.n_keys * HD + i] = kf[i];
        }
    free(kf);
    int n = 0, first = 0;
    assert_non_null(skv_context_captured_queries(q_ctx, 0, &n, &first));
    in.n_q = n, in.q_pos0 = first;
    in.q = malloc((size_t)L * HQ * n * HD * sizeof(double));
    for (int l = 0; l < L; l++) {
        const float *qf = skv_context_captured_queries(q_ctx, l, &n, &first);
        for (size_t i = 0; i < (size_t)HQ * n * HD; i++) in.q[(size_t)l * HQ * n * HD + i] = qf[i];
    }
    return in;
}

static void inputs_free(inputs *in) {
    free(in->k);
    free(in->q);
}

/* softmax over keys [0, nk) of query qv against (l, h) keys, added (times w) to out */
static void add_softmax(const inputs *in, int l, int h, const double *qv, int nk, double w,
                        double *out) {
    double lg[256], mx = -INFINITY, sum = 0;
    for (int t = 0; t < nk; t++) {
        const double *kv = K(in, l, h, t);
        double s = 0;
        for (int x = 0; x < HD; x++) s += qv[x] * kv[x];
        lg[t] = s / sqrt((double)HD);
        mx = fmax(mx, lg[t]);
    }
    for (int t = 0; t < nk; t++) sum += exp(lg[t] - mx);
    for (int t = 0; t < nk; t++) out[t] += w * exp(lg[t] - mx) / sum;
}

/* Scores of one (layer, kv head) over the P scored positions; forced = +inf. T_total: entries
 * of the head (P + the engine window W). False: no reference for pol. */
static bool ref_scores(const char *pol, const inputs *in, int l, int h, int P, int T_total, int W,
                       int keep, const skv_compress_params *p, double *s) {
    const int g = HQ / HKV;
    for (int t = 0; t < P; t++) s[t] = 0;
    if (!strcmp(pol, "knorm")) {
        for (int t = 0; t < P; t++) {
            double n2 = 0;
            for (int x = 0; x < HD; x++) n2 += K(in, l, h, t)[x] * K(in, l, h, t)[x];
            s[t] = -sqrt(n2);
        }
    } else if (!strcmp(pol, "keydiff")) {
        double a[64] = {0}, an = 0;
        for (int t = 0; t < P; t++) {
            double n2 = 0;
            for (int x = 0; x < HD; x++) n2 += K(in, l, h, t)[x] * K(in, l, h, t)[x];
            for (int x = 0; x < HD; x++) a[x] += K(in, l, h, t)[x] / sqrt(n2) / P;
        }
        for (int x = 0; x < HD; x++) an += a[x] * a[x];
        for (int t = 0; t < P; t++) {
            double dot = 0, n2 = 0;
            for (int x = 0; x < HD; x++) {
                dot += K(in, l, h, t)[x] * a[x];
                n2 += K(in, l, h, t)[x] * K(in, l, h, t)[x];
            }
            s[t] = -dot / sqrt(n2) / sqrt(an);
        }
    } else if (!strcmp(pol, "tova")) {
        for (int qh = h * g; qh < (h + 1) * g; qh++)
            add_softmax(in, l, h, Q(in, l, qh, in->n_q - 1), P, 1.0 / g, s);
    } else if (!strcmp(pol, "h2o")) {
        /* every cached query j (positions q_pos0 + j), causal over keys [0, pos] */
        for (int j = 0; j < in->n_q; j++) {
            double row[256] = {0};
            const int pos = in->q_pos0 + j;
            for (int qh = h * g; qh < (h + 1) * g; qh++)
                add_softmax(in, l, h, Q(in, l, qh, j), pos + 1, 1.0 / g, row);
            for (int t = 0; t < P && t <= pos; t++) s[t] += row[t];
        }
        for (int t = T_total - keep / 2; t < P; t++)
            if (t >= 0) s[t] = INFINITY;
    } else if (!strcmp(pol, "adakv")) { /* SnapKV's pooled window score, window_keep forced */
        double raw[256] = {0};
        for (int qh = h * g; qh < (h + 1) * g; qh++)
            for (int w = in->n_q - W; w < in->n_q; w++)
                add_softmax(in, l, h, Q(in, l, qh, w), P, 1.0 / (g * W), raw);
        const int pad = p->kernel / 2;
        for (int t = 0; t < P; t++) {
            double m = -INFINITY;
            for (int j = t - pad; j < t - pad + p->kernel; j++)
                m = fmax(m, raw[j < 0 ? 0 : j >= P ? P - 1 : j]);
            s[t] = m;
        }
        for (int t = P - p->window_keep; t < P; t++)
            if (t >= 0) s[t] = INFINITY;
    } else {
        return false;
    }
    return true;
}

/* The kept flags of (l, h) in the compressed cache. */
static int kept_of(const skv_context *ctx, int l, int h, bool *kept, int T) {
    const skv_cache *c = skv_context_cache_const(ctx);
    const int len = skv_cache_head_len(c, l, h);
    const int32_t *pos = skv_cache_head_positions(c, l, h);
    memset(kept, 0, (size_t)T * sizeof *kept);
    for (int i = 0; i < len; i++) {
        assert_true(pos[i] >= 0 && pos[i] < T);
        if (i) assert_true(pos[i] > pos[i - 1]);
        kept[pos[i]] = true;
    }
    return len;
}

/* One policy, one protocol: compress and check against the reference. */
static void check_selection(const char *pol, skv_protocol proto, double keep_frac) {
    const int T = 48, W = 8;
    const bool engine = proto == SKV_PROTOCOL_ENGINE;
    const bool h2o = !strcmp(pol, "h2o");
    /* the compressed context, and one that captured the queries the reference needs */
    skv_context *ctx, *qctx;
    int T_total;
    if (engine) {
        T_total = T + W;
        ctx = new_ctx(T_total, h2o); /* captures every prompt query */
        test_feed(ctx, toks, T_total, SKV_LOGITS_NONE, NULL);
        qctx = NULL;
    } else {
        T_total = T;
        ctx = new_ctx(0, h2o);
        test_feed(ctx, toks, T, SKV_LOGITS_NONE, NULL);
        if (h2o) { /* the prefix's own queries */
            qctx = new_ctx(T, false);
            test_feed(qctx, toks, T, SKV_LOGITS_NONE, NULL);
        } else { /* the window's queries, as the window pass on a copy sees them */
            qctx = new_ctx(W, false);
            test_feed(qctx, toks, T + W, SKV_LOGITS_NONE, NULL);
        }
    }
    inputs in = inputs_take(ctx, qctx ? qctx : ctx);
    skv_compress_params p = params_for(pol, keep_frac, proto, engine ? NULL : toks + T, W);
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    const int keep = info.keep, P = engine ? T : T; /* scored positions */
    assert_int_equal(info.T, T_total);
    assert_int_equal(keep, skv_policy_keep(keep_frac, T_total));
    const int n_safe = (int)floor(0.2 * keep);
    double s[256];
    bool kept[256];
    for (int l = 0; l < L; l++) {
        int layer_total = 0, forced_l = 0;
        double shared_min = INFINITY, drop_max = -INFINITY;
        for (int h = 0; h < HKV; h++) {
            if (!ref_scores(pol, &in, l, h, P, T_total, W, keep, &p, s))
                fail_msg("no reference scores for policy '%s': write its rule into ref_scores "
                         "(tests/test_policies_new.c)",
                         pol);
            for (int t = P; t < T_total; t++) s[t] = INFINITY; /* the engine window */
            const int len = kept_of(ctx, l, h, kept, T_total);
            layer_total += len;
            assert_int_equal(info.kept[l * HKV + h], len);
            double min_kept = INFINITY, max_drop = -INFINITY;
            for (int t = 0; t < T_total; t++) {
                if (kept[t])
                    min_kept = fmin(min_kept, s[t]);
                else
                    max_drop = fmax(max_drop, s[t]);
                if (kept[t] && isinf(s[t])) forced_l++;
            }
            if (strcmp(pol, "adakv")) {
                assert_int_equal(len, keep);
                /* a valid top-keep: nothing dropped outscores anything kept (ties aside) */
                if (!(min_kept >= max_drop - TOL_SCORE))
                    fail_msg("%s %s layer %d head %d: kept min %.9g < dropped max %.9g", pol,
                             engine ? "engine" : "seed", l, h, min_kept, max_drop);
            } else {
                assert_true(len >= n_safe);
                /* the shared phase: what the head kept beyond its own top n_safe */
                int32_t order[256];
                int n = 0;
                for (int t = 0; t < T_total; t++)
                    if (kept[t]) order[n++] = t;
                for (int i = 0; i < n; i++) /* sort kept by score, descending */
                    for (int j = i + 1; j < n; j++)
                        if (s[order[j]] > s[order[i]]) {
                            int32_t x = order[i];
                            order[i] = order[j];
                            order[j] = x;
                        }
                for (int i = n_safe; i < n; i++) shared_min = fmin(shared_min, s[order[i]]);
                drop_max = fmax(drop_max, max_drop);
            }
        }
        if (!strcmp(pol, "adakv")) {
            assert_int_equal(layer_total, keep * HKV);
            if (shared_min < INFINITY && !(shared_min >= drop_max - TOL_SCORE))
                fail_msg("adakv layer %d: a dropped entry (%.9g) outscores one chosen in the "
                         "shared phase (%.9g)",
                         l, drop_max, shared_min);
        }
        /* what the selection really was */
        assert_int_equal(info.forced[l] + info.by_score[l], layer_total);
        if (strcmp(pol, "knorm") && strcmp(pol, "keydiff") && strcmp(pol, "tova"))
            assert_true(info.forced[l] <= forced_l);
    }
    skv_compress_info_free(&info);
    inputs_free(&in);
    skv_context_free(ctx);
    skv_context_free(qctx);
}

static void test_selection_seed(void **state) {
    (void)state;
    for (int i = 0; i < N_NEW; i++) {
        check_selection(NEW_POLICIES[i], SKV_PROTOCOL_SEED, 0.3);
        check_selection(NEW_POLICIES[i], SKV_PROTOCOL_SEED, 0.6);
    }
}

static void test_selection_engine(void **state) {
    (void)state;
    for (int i = 0; i < N_NEW; i++) {
        check_selection(NEW_POLICIES[i], SKV_PROTOCOL_ENGINE, 0.3);
        check_selection(NEW_POLICIES[i], SKV_PROTOCOL_ENGINE, 0.6);
    }
}

/* ---- masking equivalence ---------------------------------------------------------------------
 */

static void mask_case(const char *pol, skv_protocol proto, double keep, skv_position_mode pm,
                      skv_type kv) {
    const int T = 40, W = 8, N = 6;
    const bool engine = proto == SKV_PROTOCOL_ENGINE;
    skv_context *ctx = test_context(model, kv, 0, 2, engine ? W : 0);
    skv_err err = {0};
    if (!strcmp(pol, "h2o"))
        assert_int_equal(skv_context_accumulate_attention(ctx, true, &err), SKV_OK);
    const int n_prefill = engine ? T + W : T;
    test_feed(ctx, toks, n_prefill, SKV_LOGITS_NONE, NULL);
    skv_compress_params p = params_for(pol, keep, proto, engine ? NULL : toks + T, W);
    p.positions = pm;
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    double effect;
    const double worst = test_masked_decode(ctx, rmodel, toks, T, W, N, engine,
                                            pm == SKV_POSITIONS_REROTATE, &effect);
    /* f16 / q8_0 caches round the keys and values: compare to the reference loosely */
    const double tol = kv == SKV_TYPE_F32 ? TOL_LOGITS : kv == SKV_TYPE_F16 ? 0.05 : 0.5;
    if (worst > tol || effect < 50 * TOL_LOGITS)
        fail_msg("%s %s keep %.2f %s kv %d: engine vs masked reference %.3g (tol %g), masked vs "
                 "dense %.3g",
                 pol, engine ? "engine" : "seed", keep,
                 pm == SKV_POSITIONS_REROTATE ? "rerotate" : "original", (int)kv, worst, tol,
                 effect);
    skv_compress_info_free(&info);
    skv_context_free(ctx);
}

static void test_mask_equivalence(void **state) {
    (void)state;
    for (int i = 0; i < N_NEW; i++) {
        /* both protocols, both position modes (alternating, to keep the test short) */
        const bool odd = i % 2;
        mask_case(NEW_POLICIES[i], SKV_PROTOCOL_SEED, 0.4,
                  odd ? SKV_POSITIONS_REROTATE : SKV_POSITIONS_ORIGINAL, SKV_TYPE_F32);
        mask_case(NEW_POLICIES[i], SKV_PROTOCOL_ENGINE, 0.5,
                  odd ? SKV_POSITIONS_ORIGINAL : SKV_POSITIONS_REROTATE, SKV_TYPE_F32);
    }
}

/* An f16 cache runs every new policy (it rounds keys and values, so the tolerance is loose; the
 * selection itself is checked in f32 above). q8_0 needs head_dim % 32 == 0, which stories260K
 * (head_dim 8) does not have. */
static void test_kv_types(void **state) {
    (void)state;
    for (int i = 0; i < N_NEW; i++) {
        mask_case(NEW_POLICIES[i], i % 2 ? SKV_PROTOCOL_SEED : SKV_PROTOCOL_ENGINE, 0.5,
                  i % 2 ? SKV_POSITIONS_REROTATE : SKV_POSITIONS_ORIGINAL, SKV_TYPE_F16);
    }
}

/* ---- h2o needs the prefill's sums ----------------------------------------------------------- */

static void test_h2o_needs_accumulation(void **state) {
    (void)state;
    skv_context *ctx = new_ctx(0, false);
    test_feed(ctx, toks, 20, SKV_LOGITS_NONE, NULL);
    skv_compress_params p = params_for("h2o", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    skv_compress_info info;
    skv_err err = {0};
    assert_int_equal(skv_compress(ctx, &p, &info, &err), SKV_ERR_STATE);
    assert_non_null(strstr(err.msg, "skv_context_accumulate_attention"));
    /* too late: the cache is not empty */
    assert_int_equal(skv_context_accumulate_attention(ctx, true, &err), SKV_ERR_STATE);
    assert_int_equal(skv_cache_head_len(skv_context_cache_const(ctx), 0, 0), 20);
    skv_context_free(ctx);
    /* the sums never change the logits */
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    skv_context *x = new_ctx(0, false), *y = new_ctx(0, true);
    test_feed(x, toks, 30, SKV_LOGITS_LAST, a);
    test_feed(y, toks, 30, SKV_LOGITS_LAST, b);
    assert_memory_equal(a, b, (size_t)V * sizeof *a);
    skv_context_free(x);
    skv_context_free(y);
    free(a), free(b);
    /* the sums are h2o's selection work: its compress_ms counts the forward passes' time in
     * them (SPEC.md: compress_ms covers all selection work), knorm's on the same cache does not */
    skv_context *z = new_ctx(0, true);
    test_feed(z, toks, 200, SKV_LOGITS_NONE, NULL);
    const double acc_ms = z->pstate->acc_ms;
    assert_true(acc_ms > 0.0);
    skv_context *zk = skv_context_clone(z, &err);
    assert_non_null(zk);
    assert_int_equal(skv_compress(z, &p, &info, &err), SKV_OK);
    assert_true(info.compress_ms >= acc_ms);
    skv_compress_info_free(&info);
    skv_compress_params pk = params_for("knorm", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    const double t0 = skv_time_ms();
    assert_int_equal(skv_compress(zk, &pk, &info, &err), SKV_OK);
    assert_true(info.compress_ms <= skv_time_ms() - t0);
    skv_compress_info_free(&info);
    skv_context_free(zk);
    skv_context_free(z);
}

/* More threads than the accumulation once had room for (256 flags on its stack: past that h2o
 * refused every cache, blaming the caller): the same kept positions as at 1 thread. */
static void test_h2o_many_threads(void **state) {
    (void)state;
    skv_context *c[2];
    const int nth[2] = {1, 300};
    for (int i = 0; i < 2; i++) {
        c[i] = test_context(model, SKV_TYPE_F32, 64, nth[i], 0);
        skv_err err = {0};
        assert_int_equal(skv_context_accumulate_attention(c[i], true, &err), SKV_OK);
        test_feed(c[i], toks, 40, SKV_LOGITS_NONE, NULL);
        skv_compress_params p = params_for("h2o", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
        skv_compress_info info;
        if (skv_compress(c[i], &p, &info, &err) != SKV_OK)
            fail_msg("h2o at %d threads: %s", nth[i], err.msg);
        skv_compress_info_free(&info);
    }
    const skv_cache *a = skv_context_cache_const(c[0]), *b = skv_context_cache_const(c[1]);
    for (int l = 0; l < skv_cache_n_layer(a); l++)
        for (int h = 0; h < skv_cache_n_head_kv(a); h++) {
            const int n = skv_cache_head_len(a, l, h);
            assert_int_equal(n, 20);
            assert_int_equal(skv_cache_head_len(b, l, h), n);
            assert_memory_equal(skv_cache_head_positions(a, l, h),
                                skv_cache_head_positions(b, l, h), (size_t)n * sizeof(int32_t));
        }
    skv_context_free(c[0]);
    skv_context_free(c[1]);
}

/* ---- PyramidKV's clamp ---------------------------------------------------------------------- */

static void test_pyramid_clamp(void **state) {
    (void)state;
    int b[8];
    /* hand-derived: keep 40 of T 40, window 8, L 4: base 32, mn 1, mx 63 -> clamp mx = 32,
     * mn = 32: every raw budget 40, scale 1: all 40 */
    assert_int_equal(skv_pyramid_budgets_clamped(40, 40, 4, 8, 20, b, NULL), SKV_OK);
    for (int l = 0; l < 4; l++) assert_int_equal(b[l], 40);
    /* keep 30 of T 40, window 8: base 22, mn 1, mx 43 >= 32 -> mx 32, mn 12, steps 6:
     * raw 40, 34, 28, 22 (sum 124), scale 120/124 */
    assert_int_equal(skv_pyramid_budgets_clamped(30, 40, 4, 8, 20, b, NULL), SKV_OK);
    const int want[4] = {39, 33, 27, 21};
    for (int l = 0; l < 4; l++) assert_int_equal(b[l], want[l]);
    /* without the clamp's trigger (mx < T - window) the rule is unchanged */
    int u[8];
    assert_int_equal(skv_pyramid_budgets(10, 4, 2, 20, u, NULL), SKV_OK);
    assert_int_equal(skv_pyramid_budgets_clamped(10, 100, 4, 2, 20, b, NULL), SKV_OK);
    assert_memory_equal(u, b, 4 * sizeof(int));
    /* the layers add up to keep * L within rounding, and never exceed T, for every keep */
    for (int T = 12; T <= 80; T += 17)
        for (int keep = 1; keep <= T; keep++) {
            assert_int_equal(skv_pyramid_budgets_clamped(keep, T, 5, 4, 20, b, NULL), SKV_OK);
            int sum = 0;
            for (int l = 0; l < 5; l++) sum += b[l] < T ? b[l] : T;
            if (keep > 4 + 5) assert_true(abs(sum - keep * 5) <= 5);
        }
    /* keep 1.0 keeps every entry (engine and seed) */
    skv_context *ctx = new_ctx(8, false);
    test_feed(ctx, toks, 48, SKV_LOGITS_NONE, NULL);
    skv_compress_params p = params_for("pyramid", 1.0, SKV_PROTOCOL_ENGINE, NULL, 8);
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    for (int i = 0; i < L * HKV; i++) assert_int_equal(info.kept[i], 48);
    skv_compress_info_free(&info);
    skv_context_free(ctx);
}

/* ---- the registry --------------------------------------------------------------------------- */

/* An outside policy: keeps the earliest positions (score -position). */
static skv_status earliest(void *user, const skv_policy_head *hd, double *score, skv_err *err) {
    (void)err;
    int *calls = user; /* called from several worker threads at once */
    __atomic_fetch_add(calls, 1, __ATOMIC_RELAXED);
    assert_non_null(hd->keys);
    assert_null(hd->values); /* it did not ask for them */
    assert_true(hd->head_dim == HD);
    for (int i = 0; i < hd->n; i++) score[i] = -(double)i;
    return SKV_OK;
}

/* An outside policy over values: the norm of each value vector, after checking that the values
 * it was given are the cache's (user: [L * HKV] float copies read before the compression). */
static skv_status value_norm(void *user, const skv_policy_head *hd, double *score, skv_err *err) {
    (void)err;
    float *const *ref = user;
    assert_non_null(hd->values);
    assert_memory_equal(hd->values, ref[hd->layer * HKV + hd->kv_head],
                        (size_t)hd->n * HD * sizeof(float));
    for (int i = 0; i < hd->n; i++) {
        double s = 0;
        for (int j = 0; j < HD; j++) s += (double)hd->values[i * HD + j] * hd->values[i * HD + j];
        score[i] = sqrt(s);
    }
    return SKV_OK;
}

/* An outside policy that misbehaves: user 0 returns a value that is no skv_status, user 1 scores
 * a NaN, user 2 fails on layer 1 with its own sentence in err->msg, user 3 writes no score. */
static skv_status misbehaving(void *user, const skv_policy_head *hd, double *score, skv_err *err) {
    if (*(const int *)user == 3) return SKV_OK; /* writes no score */
    for (int i = 0; i < hd->n; i++) score[i] = (double)i;
    if (*(const int *)user == 0) return (skv_status)42;
    if (*(const int *)user == 2) {
        if (hd->layer != 1) return SKV_OK;
        snprintf(err->msg, sizeof err->msg, "custom failure at layer %d", hd->layer);
        return SKV_ERR_UNSUPPORTED;
    }
    score[hd->n / 2] = NAN;
    return SKV_OK;
}

/* Row index of a policy in the registry, -1 when absent. */
static int row_of(const char *name) {
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        if (!skv_policy_describe(i, &a, NULL) && !strcmp(a.name, name)) return i;
    }
    return -1;
}

/* The hand-written docs keep up with the registry: a section per built-in policy in
 * docs/POLICIES.md and its name in the README's list. */
static void test_docs_name_every_policy(void **state) {
    (void)state;
    size_t n = 0;
    char *pol = test_read_file("docs/POLICIES.md", &n), *readme = test_read_file("README.md", &n);
    assert_non_null(pol);
    assert_non_null(readme);
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        assert_int_equal(skv_policy_describe(i, &a, NULL), SKV_OK);
        if (!a.builtin) continue;
        char want[96];
        snprintf(want, sizeof want, "\n## %s", a.name);
        if (!strstr(pol, want)) fail_msg("docs/POLICIES.md has no section \"## %s\"", a.name);
        snprintf(want, sizeof want, "`%s`", a.name);
        if (!strstr(readme, want)) fail_msg("README.md does not name the policy %s", a.name);
    }
    free(pol);
    free(readme);
}

/* A built-in-style row (no ext) whose scorer fails in its own words, which do not name it. */
static skv_status failing_builtin(const skv_score_job *job, double *scores, int T_stride,
                                  skv_err *err) {
    (void)job, (void)scores, (void)T_stride;
    return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the test");
}

/* A built-in scorer's failure is said with the policy's name, as a registered one's is. */
static void test_builtin_error_named(void **state) {
    (void)state;
    const skv_policy row = {
        .name = "fake_builtin", .score = failing_builtin, .allocate = skv_alloc_uniform};
    skv_context *ctx = new_ctx(0, false);
    test_feed(ctx, toks, 20, SKV_LOGITS_NONE, NULL);
    skv_compress_params p = skv_compress_default_params();
    double *scores = calloc((size_t)L * HKV * 20, sizeof *scores);
    skv_err err = {0};
    skv_score_job job = {
        .T = 20, .T_total = 20, .keep = 10, .params = &p, .cache = skv_context_cache_const(ctx)};
    assert_int_equal(skv_policy_score_cache(ctx, &row, job, scores, &err), SKV_ERR_NOMEM);
    assert_string_equal(err.msg, "policy 'fake_builtin': out of memory for the test");
    free(scores);
    skv_context_free(ctx);
}

static void test_registry(void **state) {
    (void)state;
    /* the founding four first, in SPEC's order; the others anywhere among the built-ins */
    const char *names[] = {"sink_recent", "random", "attention", "pyramid", "knorm",
                           "keydiff",     "tova",   "h2o",       "adakv"};
    const int n0 = skv_policy_count();
    assert_true(n0 >= 9);
    for (int i = 0; i < 9; i++) {
        skv_policy_about a;
        const int row = row_of(names[i]);
        assert_true(i < 4 ? row == i : row >= 4);
        assert_int_equal(skv_policy_describe(row, &a, NULL), SKV_OK);
        assert_true(a.builtin);
        assert_true(strlen(a.paper) > 0 && strlen(a.rule) > 0);
        assert_non_null(strstr(skv_policy_list(), names[i]));
        assert_true(a.needs_window == skv_policy_needs_window(names[i]));
    }
    /* needs_window is what the rules read: the window policies are the ones SPEC names */
    for (int i = 0; i < 9; i++)
        assert_true(skv_policy_needs_window(names[i]) ==
                    (!strcmp(names[i], "attention") || !strcmp(names[i], "pyramid") ||
                     !strcmp(names[i], "tova") || !strcmp(names[i], "adakv")));
    skv_policy_about a;
    assert_int_equal(skv_policy_describe(n0, &a, NULL), SKV_ERR_INVALID_ARG);
    skv_err e2 = {0};
    assert_int_equal(skv_policy_describe(0, NULL, &e2), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(e2.msg, "no place"));
    assert_int_equal(skv_forward(NULL, toks, 1, SKV_LOGITS_NONE, NULL, &e2), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(e2.msg, "no context"));
    skv_policy_describe(row_of("h2o"), &a, NULL);
    assert_true(a.needs_prefill_attention && !a.needs_window);
    skv_policy_describe(row_of("adakv"), &a, NULL);
    assert_true(a.needs_window && !a.decode);
    /* every parameter a row names is in the parameter table */
    for (int i = 0; i < n0; i++) {
        skv_policy_describe(i, &a, NULL);
        char buf[128];
        snprintf(buf, sizeof buf, "%s", a.params);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            bool found = false;
            for (int k = 0; k < skv_policy_param_count(); k++)
                found |= !strcmp(skv_policy_param_at(k)->name, tok);
            assert_true(found);
        }
    }
    /* registering an outside scorer */
    int calls = 0;
    skv_policy_def def = {
        .name = "earliest_test", .paper = "a test", .score = earliest, .user = &calls};
    skv_err err = {0};
    assert_int_equal(skv_policy_register(&def, &err), SKV_OK);
    assert_int_equal(skv_policy_register(&def, &err), SKV_ERR_INVALID_ARG); /* duplicate */
    skv_policy_def bad = {.name = "Bad Name", .score = earliest, .user = &calls};
    assert_int_equal(skv_policy_register(&bad, &err), SKV_ERR_INVALID_ARG);
    bad.name = "knorm";
    assert_int_equal(skv_policy_register(&bad, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "'knorm' is a built-in policy"));
    bad.name = "snapkv"; /* an alias: said as one */
    assert_int_equal(skv_policy_register(&bad, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "'snapkv' is already the alias of policy 'attention'"));
    assert_int_equal(skv_policy_count(), n0 + 1);
    assert_string_equal(skv_policy_canonical("earliest_test"), "earliest_test");

    assert_non_null(strstr(skv_policy_list(), "earliest_test"));
    skv_context *ctx = new_ctx(0, false);
    test_feed(ctx, toks, 30, SKV_LOGITS_NONE, NULL);
    skv_compress_params p = params_for("earliest_test", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    assert_int_equal(calls, L * HKV);
    const skv_cache *c = skv_context_cache_const(ctx);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < HKV; h++) {
            assert_int_equal(skv_cache_head_len(c, l, h), 15);
            for (int i = 0; i < 15; i++) assert_int_equal(skv_cache_head_positions(c, l, h)[i], i);
        }
    skv_compress_info_free(&info);
    skv_context_free(ctx);
    /* a scorer over values: it gets the cache's values, and the heads keep its top half */
    float *vref[64];
    assert_true(L * HKV <= 64);
    skv_policy_def dv = {
        .name = "value_norm_test", .score = value_norm, .user = vref, .needs_values = true};
    assert_int_equal(skv_policy_register(&dv, &err), SKV_OK);
    skv_policy_describe(row_of("value_norm_test"), &a, NULL);
    assert_true(a.needs_values && !a.needs_window && !a.builtin);
    ctx = new_ctx(0, false);
    test_feed(ctx, toks, 30, SKV_LOGITS_NONE, NULL);
    for (int i = 0; i < L * HKV; i++) {
        vref[i] = malloc((size_t)30 * HD * sizeof(float));
        assert_int_equal(skv_cache_head_read(skv_context_cache_const(ctx), i / HKV, i % HKV, NULL,
                                             vref[i], NULL, &err),
                         SKV_OK);
    }
    p = params_for("value_norm_test", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    compress_ok(ctx, &p, &info);
    c = skv_context_cache_const(ctx);
    for (int i = 0; i < L * HKV; i++) { /* kept: exactly the 15 largest norms */
        double norm[30];
        for (int t = 0; t < 30; t++) {
            double s2 = 0;
            for (int j = 0; j < HD; j++) s2 += (double)vref[i][t * HD + j] * vref[i][t * HD + j];
            norm[t] = sqrt(s2);
        }
        const int32_t *pos = skv_cache_head_positions(c, i / HKV, i % HKV);
        assert_int_equal(skv_cache_head_len(c, i / HKV, i % HKV), 15);
        for (int t = 0; t < 30; t++) {
            int above = 0; /* positions with a larger norm (ties: the higher position wins) */
            for (int u = 0; u < 30; u++)
                above += norm[u] > norm[t] || (norm[u] == norm[t] && u > t);
            bool kept = false;
            for (int k = 0; k < 15; k++) kept |= pos[k] == t;
            assert_true(kept == (above < 15));
        }
        free(vref[i]);
    }
    skv_compress_info_free(&info);
    skv_context_free(ctx);
    /* a scorer's bad status or NaN score: a status of the enum, the cache as it was */
    static const int modes[4] = {0, 1, 2, 3};
    const char *bad_names[4] = {"bad_status_test", "nan_score_test", "own_words_test",
                                "no_score_test"};
    const skv_status want[4] = {SKV_ERR_INVALID_ARG, SKV_ERR_NUMERIC, SKV_ERR_UNSUPPORTED,
                                SKV_ERR_NUMERIC};
    const char *said[4] = {"which is no skv_status", "NaN", ": custom failure at layer 1",
                           "left it unscored"};
    for (int k = 0; k < 4; k++) {
        skv_policy_def d = {.name = bad_names[k], .score = misbehaving, .user = (void *)&modes[k]};
        assert_int_equal(skv_policy_register(&d, &err), SKV_OK);
        ctx = new_ctx(0, false);
        test_feed(ctx, toks, 30, SKV_LOGITS_NONE, NULL);
        p = params_for(bad_names[k], 0.5, SKV_PROTOCOL_SEED, NULL, 0);
        assert_int_equal(skv_compress(ctx, &p, &info, &err), want[k]);
        assert_non_null(strstr(err.msg, said[k]));
        if (k == 2) assert_non_null(strstr(err.msg, "policy 'own_words_test' failed on layer 1"));
        assert_int_equal(skv_cache_head_len(skv_context_cache_const(ctx), 0, 0), 30);
        skv_context_free(ctx);
    }
}

/* ---- decoding-time compression -------------------------------------------------------------- */

static int argmax(const float *x) {
    return test_argmaxf(x, V);
}

static int longest(const skv_context *ctx) {
    const skv_cache *c = skv_context_cache_const(ctx);
    int m = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < HKV; h++)
            if (skv_cache_head_len(c, l, h) > m) m = skv_cache_head_len(c, l, h);
    return m;
}

/* 900 tokens past a 512 context under --max-cache 96 with rerotate, every decode policy; the
 * bound max_entries + interval holds after every step. */
static void test_budget_bound(void **state) {
    (void)state;
    n_threads = 1;
    float *lg = malloc((size_t)V * sizeof *lg);
    int n_tried = 0;
    for (int pi = 0; pi < skv_policy_count(); pi++) { /* every built-in that decodes */
        skv_policy_about a;
        assert_int_equal(skv_policy_describe(pi, &a, NULL), SKV_OK);
        if (!a.builtin || !a.decode) continue;
        n_tried++;
        skv_context *ctx = new_ctx(0, false);
        assert_int_equal(skv_context_n_ctx(ctx), 512);
        skv_compress_params p = skv_compress_default_params();
        p.policy = a.name;
        p.n_window = 8;
        p.window_keep = 4;
        p.positions = SKV_POSITIONS_REROTATE;
        skv_err err = {0};
        assert_int_equal(skv_context_set_budget(ctx, &p, 96, 32, &err), SKV_OK);
        test_feed(ctx, toks, 20, SKV_LOGITS_LAST, lg);
        for (int i = 0; i < 900; i++) {
            int32_t t = argmax(lg);
            test_feed(ctx, &t, 1, SKV_LOGITS_LAST, lg);
            assert_true(longest(ctx) <= 96 + 32);
            assert_int_equal(skv_cache_longest(skv_context_cache_const(ctx)), longest(ctx));
        }
        assert_int_equal(skv_context_n_past(ctx), 920);
        assert_true(skv_context_budget_cuts(ctx) >= (920 - 128) / 32);
        /* the room a head keeps is the bound itself, not 1.5x a cut's */
        const skv_cache *kc = skv_context_cache_const(ctx);
        assert_int_equal(skv_cache_bytes_allocated(kc),
                         (uint64_t)L * HKV * (96 + 32) *
                             (2 * sizeof(float) * HD + sizeof(int32_t)));
        skv_context_free(ctx);
    }
    assert_true(n_tried >= 6);
    free(lg);
}

/* h2o's sums grow with the heads, not with n_ctx, and growing keeps them: fed in chunks (each
 * growth copies the rows) they equal the sums of one call. */
static void test_h2o_sums_grow(void **state) {
    (void)state;
    const int n = 150;
    skv_context *a = test_context(model, SKV_TYPE_F32, 4096, 1, 0);
    skv_context *b = test_context(model, SKV_TYPE_F32, 4096, 1, 0);
    skv_err err = {0};
    assert_int_equal(skv_context_accumulate_attention(a, true, &err), SKV_OK);
    assert_int_equal(skv_context_accumulate_attention(b, true, &err), SKV_OK);
    for (int i = 0; i < n; i += 37)
        test_feed(a, toks + i, SKV_MIN(37, n - i), SKV_LOGITS_NONE, NULL);
    test_feed(b, toks, n, SKV_LOGITS_NONE, NULL);
    assert_true(a->pstate->acc_cap >= n && a->pstate->acc_cap < 4 * n);
    const double **ra = calloc((size_t)L * HKV, sizeof *ra),
                 **rb = calloc((size_t)L * HKV, sizeof *rb);
    assert_int_equal(skv_h2o_rows(a, ra, &err), SKV_OK);
    assert_int_equal(skv_h2o_rows(b, rb, &err), SKV_OK);
    double worst = 0, total = 0;
    for (int i = 0; i < L * HKV; i++)
        for (int e = 0; e < n; e++) {
            worst = fmax(worst, fabs(ra[i][e] - rb[i][e]) / fmax(1e-12, fabs(rb[i][e])));
            total += ra[i][e];
        }
    assert_true(worst < 1e-5);
    /* every query's softmax sums to 1 per query head, and a kv head's row sums its group */
    assert_true(fabs(total - (double)n * HQ * L) < 1e-6 * n * HQ * L);
    free(ra), free(rb);
    skv_context_free(a);
    skv_context_free(b);
}

/* A re-rotating budget takes a call longer than its heads' room in pieces that end where cuts
 * are due: the same logits as feeding those pieces one call each. A context already full
 * cannot take a budget; compress with a policy that does not decode is refused under one. */
static void test_budget_pieces(void **state) {
    (void)state;
    const int n = 250;
    skv_compress_params p = skv_compress_default_params();
    p.policy = "tova";
    p.n_window = 4;
    p.positions = SKV_POSITIONS_REROTATE;
    skv_err err = {0};
    skv_context *a = test_context(model, SKV_TYPE_F32, 64, 1, 8);
    skv_context *b = test_context(model, SKV_TYPE_F32, 64, 1, 0);
    assert_int_equal(skv_context_set_budget(a, &p, 40, 16, &err), SKV_OK);
    assert_int_equal(skv_context_set_budget(b, &p, 40, 16, &err), SKV_OK);
    float *la = malloc((size_t)n * V * sizeof *la), *lb = malloc((size_t)n * V * sizeof *lb);
    assert_int_equal(skv_forward(a, toks, n, SKV_LOGITS_ALL, la, &err), SKV_OK);
    /* b: what the pieces are: 16 (the interval) up to each cut */
    for (int i = 0; i < n; i += 16)
        test_feed(b, toks + i, SKV_MIN(16, n - i), SKV_LOGITS_ALL, lb + (size_t)i * V);
    assert_int_equal(skv_context_n_past(a), n);
    assert_int_equal(skv_context_budget_cuts(a), skv_context_budget_cuts(b));
    assert_true(skv_context_budget_cuts(a) >= 10);
    assert_memory_equal(la, lb, (size_t)n * V * sizeof *la);
    assert_true(longest(a) <= 40 + 16);
    /* the last piece is 10 tokens (250 = 15 x 16 + 10), not the tail one by one: its last 8
     * are the captured queries */
    int n_cap = 0, first = 0;
    assert_non_null(skv_context_captured_queries(a, 0, &n_cap, &first));
    assert_int_equal(n_cap, 8);
    assert_int_equal(first, n - 8);
    skv_context_free(a);
    skv_context_free(b);
    free(la), free(lb);
    /* max_entries + interval = n_ctx: heads that fill up before the interval are cut at once
     * rather than locking the context */
    skv_context *f = test_context(model, SKV_TYPE_F32, 64, 1, 0);
    test_feed(f, toks, 60, SKV_LOGITS_NONE, NULL);
    skv_compress_params sp = p;
    sp.policy = "sink_recent";
    assert_int_equal(skv_context_set_budget(f, &sp, 40, 24, &err), SKV_OK);
    for (int i = 0; i < 10; i++) test_feed(f, toks + 60 + i, 1, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_context_n_past(f), 70);
    assert_true(skv_context_budget_cuts(f) >= 1 && longest(f) <= 64);
    skv_context_free(f);
    /* n_window 0 is the interval (the CLI's and Python's default), not a window of 1 */
    skv_compress_params dp = skv_compress_default_params();
    dp.policy = "tova";
    assert_int_equal(dp.n_window, 0);
    f = test_context(model, SKV_TYPE_F32, 64, 1, 0);
    assert_int_equal(skv_context_set_budget(f, &dp, 16, 16, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "window of 16"));
    assert_int_equal(skv_context_set_budget(f, &dp, 17, 16, &err), SKV_OK);
    skv_context_free(f);
    /* full: no room for the tokens a cut needs */
    skv_context *c = test_context(model, SKV_TYPE_F32, 64, 1, 0);
    test_feed(c, toks, 64, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_context_set_budget(c, &p, 40, 16, &err), SKV_ERR_STATE);
    assert_non_null(strstr(err.msg, "set the budget before the context fills"));
    skv_context_free(c);
    /* compress with a policy that leaves heads unequal, under a budget */
    c = test_context(model, SKV_TYPE_F32, 128, 1, 0);
    assert_int_equal(skv_context_set_budget(c, &p, 40, 16, &err), SKV_OK);
    test_feed(c, toks, 30, SKV_LOGITS_NONE, NULL);
    skv_compress_params cp = params_for("adakv", 0.5, SKV_PROTOCOL_ENGINE, NULL, 4);
    skv_compress_info info;
    assert_int_equal(skv_compress(c, &cp, &info, &err), SKV_ERR_STATE);
    assert_non_null(strstr(err.msg, "does not run under a decoding budget"));
    assert_int_equal(skv_cache_head_len(skv_context_cache_const(c), 0, 0), 30);
    skv_context_free(c);
}

/* The seed window pass runs on the context itself: afterwards its cache holds the prefix only,
 * its own captured queries are the prefill's still, and the selection is the one a context
 * with a budget (whose pass runs on a clone) makes. */
static void test_seed_pass_in_place(void **state) {
    (void)state;
    const int T = 40, W = 8;
    skv_err err = {0};
    skv_context *a = test_context(model, SKV_TYPE_F32, 128, 1, 6);
    skv_context *b = test_context(model, SKV_TYPE_F32, 128, 1, 6);
    test_feed(a, toks, T, SKV_LOGITS_NONE, NULL);
    test_feed(b, toks, T, SKV_LOGITS_NONE, NULL);
    skv_compress_params bp = skv_compress_default_params();
    bp.policy = "tova";
    bp.n_window = 4;
    assert_int_equal(skv_context_set_budget(b, &bp, 100, 16, &err), SKV_OK); /* b: a clone */
    int n0 = 0, f0 = 0, n1 = 0, f1 = 0;
    const float *q0 = skv_context_captured_queries(a, 1, &n0, &f0);
    const size_t nq = (size_t)HQ * 6 * HD;
    float *before = malloc(nq * sizeof *before);
    memcpy(before, q0, nq * sizeof *before);
    skv_compress_params p = params_for("attention", 0.4, SKV_PROTOCOL_SEED, toks + T, W);
    skv_compress_info ia, ib;
    compress_ok(a, &p, &ia);
    compress_ok(b, &p, &ib);
    assert_int_equal(skv_context_n_past(a), T);
    const float *q1 = skv_context_captured_queries(a, 1, &n1, &f1);
    assert_int_equal(n1, n0);
    assert_int_equal(f1, f0);
    assert_memory_equal(q1, before, nq * sizeof *before);
    const skv_cache *ca = skv_context_cache_const(a), *cb = skv_context_cache_const(b);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < HKV; h++) {
            const int n = skv_cache_head_len(ca, l, h);
            assert_int_equal(n, skv_cache_head_len(cb, l, h));
            assert_memory_equal(skv_cache_head_positions(ca, l, h),
                                skv_cache_head_positions(cb, l, h), (size_t)n * sizeof(int32_t));
            assert_true(skv_cache_head_positions(ca, l, h)[n - 1] < T);
        }
    skv_compress_info_free(&ia);
    skv_compress_info_free(&ib);
    /* the window's growth is given back: after a compression that keeps everything and after
     * one whose scorer fails, the heads hold the room they held */
    skv_context *c = test_context(model, SKV_TYPE_F32, 128, 1, 0);
    test_feed(c, toks, T, SKV_LOGITS_NONE, NULL);
    const uint64_t room = skv_cache_bytes_allocated(skv_context_cache_const(c));
    p = params_for("attention", 1.0, SKV_PROTOCOL_SEED, toks + T, W);
    compress_ok(c, &p, &ia);
    skv_compress_info_free(&ia);
    assert_int_equal(skv_cache_bytes_allocated(skv_context_cache_const(c)), room);
    static const int fail_mode = 2;
    skv_policy_def d = {.name = "window_fail_test",
                        .needs_window = true,
                        .score = misbehaving,
                        .user = (void *)&fail_mode};
    assert_int_equal(skv_policy_register(&d, &err), SKV_OK);
    p = params_for("window_fail_test", 0.5, SKV_PROTOCOL_SEED, toks + T, W);
    assert_int_equal(skv_compress(c, &p, &ia, &err), SKV_ERR_UNSUPPORTED);
    assert_int_equal(skv_cache_bytes_allocated(skv_context_cache_const(c)), room);
    assert_int_equal(skv_context_n_past(c), T);
    skv_context_free(c);
    free(before);
    skv_context_free(a);
    skv_context_free(b);
}

static long rss_kb(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = -1;
    fclose(f);
    return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Compressing short caches (each head's arrays on the heap, under cache.c's 64 KB) lowers the
 * process's memory too, not only the cache's count. */
static void test_compress_returns_heap_memory(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__GLIBC__)
    skip(); /* the sanitizers' allocators keep freed memory on purpose; malloc_trim is glibc's */
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    skip();
#endif
#endif
    const char *path = test_synth_llama(16, 4, 4, 256, 512, 3, 1);
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    assert_non_null(m);
    enum { NC = 6, T = 200 }; /* 64 heads x 200 x 256 B: 50 KB arrays, 6.5 MB a context */
    skv_context *cs[NC];
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = 1 + (i * 37) % 299;
    for (int c = 0; c < NC; c++) {
        cs[c] = test_context(m, SKV_TYPE_F32, 512, 1, 0);
        test_feed(cs[c], ids, T, SKV_LOGITS_NONE, NULL);
    }
    const long r0 = rss_kb();
    uint64_t freed = 0;
    for (int c = 0; c < NC; c++) {
        skv_compress_params p = params_for("streaming", 0.1, SKV_PROTOCOL_SEED, NULL, 0);
        skv_compress_info info;
        compress_ok(cs[c], &p, &info);
        freed += info.bytes_before - info.bytes_after;
        skv_compress_info_free(&info);
    }
    const long r1 = rss_kb();
    print_message("freed %llu KB of cache, RSS dropped %ld KB\n", (unsigned long long)(freed >> 10),
                  r0 - r1);
    assert_true(r0 > 0 && (double)(r0 - r1) >= 0.5 * (double)(freed >> 10));
    for (int c = 0; c < NC; c++) skv_context_free(cs[c]);
    skv_model_free(m);
    remove(path);
}

/* Clones of an empty context and of one with an empty head (adakv at a tiny keep) copy nothing
 * from arrays that do not exist. */
static void test_clone_empty_heads(void **state) {
    (void)state;
    skv_err err = {0};
    skv_context *c = test_context(model, SKV_TYPE_F32, 64, 1, 8);
    skv_context *d = skv_context_clone(c, &err);
    assert_non_null(d);
    skv_context_free(d);
    test_feed(c, toks, 20, SKV_LOGITS_NONE, NULL);
    skv_compress_params cp = params_for("adakv", 0.1, SKV_PROTOCOL_SEED, toks + 20, 1);
    cp.window_keep = 0;
    skv_compress_info info;
    assert_int_equal(skv_compress(c, &cp, &info, &err), SKV_OK);
    skv_compress_info_free(&info);
    int empty = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < HKV; h++)
            empty += skv_cache_head_len(skv_context_cache_const(c), l, h) == 0;
    d = skv_context_clone(c, &err);
    assert_non_null(d);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < HKV; h++)
            assert_int_equal(skv_cache_head_len(skv_context_cache_const(d), l, h),
                             skv_cache_head_len(skv_context_cache_const(c), l, h));
    print_message("adakv keep 0.1 of 20 left %d of %d heads empty\n", empty, L * HKV);
    skv_context_free(d);
    skv_context_free(c);
}

/* StreamingLLM under a budget in original positions: after a cut every head holds the sinks
 * and the most recent entries; and a budget without rerotate refuses to pass n_ctx. */
static void test_budget_streaming(void **state) {
    (void)state;
    n_threads = 1;
    skv_context *ctx = new_ctx(0, false);
    skv_compress_params p = skv_compress_default_params();
    p.policy = "streaming";
    p.sinks = 4;
    p.n_window = 4;
    skv_err err = {0};
    assert_int_equal(skv_context_set_budget(ctx, &p, 40, 16, &err), SKV_OK);
    float *lg = malloc((size_t)V * sizeof *lg);
    test_feed(ctx, toks, 10, SKV_LOGITS_LAST, lg);
    int last_cuts = 0;
    for (int i = 0; i < 200; i++) {
        int32_t t = argmax(lg);
        test_feed(ctx, &t, 1, SKV_LOGITS_LAST, lg);
        if (skv_context_budget_cuts(ctx) != last_cuts) { /* just cut */
            last_cuts = skv_context_budget_cuts(ctx);
            const int n = skv_context_n_past(ctx);
            const skv_cache *c = skv_context_cache_const(ctx);
            for (int l = 0; l < L; l++)
                for (int h = 0; h < HKV; h++) {
                    assert_int_equal(skv_cache_head_len(c, l, h), 40);
                    const int32_t *pos = skv_cache_head_positions(c, l, h);
                    for (int j = 0; j < 4; j++) assert_int_equal(pos[j], j);
                    for (int j = 4; j < 40; j++) assert_int_equal(pos[j], n - 40 + j);
                }
        }
    }
    assert_true(last_cuts > 0);
    /* original positions: the logical length stops at n_ctx */
    int32_t t = 1;
    while (skv_context_n_past(ctx) < 512) test_feed(ctx, &t, 1, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_forward(ctx, &t, 1, SKV_LOGITS_NONE, NULL, &err), SKV_ERR_STATE);
    skv_context_free(ctx);
    /* refused: unknown, not decode-able, bad sizes */
    ctx = new_ctx(0, false);
    p.policy = "adakv";
    assert_int_equal(skv_context_set_budget(ctx, &p, 40, 16, &err), SKV_ERR_INVALID_ARG);
    p.policy = "nope";
    assert_int_equal(skv_context_set_budget(ctx, &p, 40, 16, &err), SKV_ERR_INVALID_ARG);
    p.policy = "tova";
    assert_int_equal(skv_context_set_budget(ctx, &p, 500, 16, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_context_set_budget(ctx, &p, 40, 0, &err), SKV_ERR_INVALID_ARG);
    /* no larger than the window min(n_window, interval), which every cut keeps */
    p.n_window = 8;
    assert_int_equal(skv_context_set_budget(ctx, &p, 8, 16, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "not larger than its window of 8"));
    p.n_window = 64;
    assert_int_equal(skv_context_set_budget(ctx, &p, 16, 16, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_context_set_budget(ctx, &p, 17, 16, &err), SKV_OK);
    skv_context_free(ctx);
    free(lg);
}

/* A budget cuts every head alike: a cache whose heads hold different counts (pyramid, adakv, a
 * per-head selection) is refused by set_budget, and by a forward call under a budget before any
 * token enters the cache (it used to append the tokens, then fail in the cut, on every call). */
static void test_budget_unequal_heads(void **state) {
    (void)state;
    n_threads = 1;
    skv_err err = {0};
    skv_compress_params bp = skv_compress_default_params();
    bp.policy = "tova";
    bp.n_window = 4;
    skv_compress_params p = params_for("pyramid", 0.4, SKV_PROTOCOL_ENGINE, NULL, 8);
    skv_compress_info info;
    /* compressed first, budget after */
    skv_context *ctx = new_ctx(8, false);
    test_feed(ctx, toks, 60, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_compress(ctx, &p, &info, &err), SKV_OK);
    skv_compress_info_free(&info);
    const skv_cache *c = skv_context_cache_const(ctx);
    assert_int_not_equal(skv_cache_head_len(c, 0, 0), skv_cache_head_len(c, L - 1, 0));
    assert_int_equal(skv_context_set_budget(ctx, &bp, 30, 8, &err), SKV_ERR_STATE);
    assert_non_null(strstr(err.msg, "same number of entries"));
    test_feed(ctx, toks, 1, SKV_LOGITS_NONE, NULL); /* no budget: decoding goes on */
    skv_context_free(ctx);
    /* budget first: a compression that would leave the heads unequal is refused up front;
     * a selection of one head (skv_cache_select_head) then stops the decoding */
    ctx = new_ctx(8, false);
    assert_int_equal(skv_context_set_budget(ctx, &bp, 100, 8, &err), SKV_OK);
    test_feed(ctx, toks, 60, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_compress(ctx, &p, &info, &err), SKV_ERR_STATE);
    c = skv_context_cache_const(ctx);
    assert_int_equal(skv_cache_head_len(c, 0, 0), 60);
    const int32_t first[3] = {0, 1, 2};
    assert_int_equal(skv_cache_select_head(skv_context_cache(ctx), 0, 0, first, 3, &err), SKV_OK);
    const int len0 = skv_cache_head_len(c, 0, 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(skv_forward(ctx, toks, 1, SKV_LOGITS_NONE, NULL, &err), SKV_ERR_STATE);
        assert_non_null(strstr(err.msg, "same number of entries"));
        assert_int_equal(skv_context_n_past(ctx), 60);
        assert_int_equal(skv_cache_head_len(c, 0, 0), len0);
    }
    /* removing the budget lets it decode */
    assert_int_equal(skv_context_set_budget(ctx, NULL, 0, 0, &err), SKV_OK);
    test_feed(ctx, toks, 1, SKV_LOGITS_NONE, NULL);
    assert_int_equal(skv_context_n_past(ctx), 61);
    skv_context_free(ctx);
}

/* A budget at least the sequence never cuts: the logits are the dense run's, bit for bit. */
static void test_budget_dense_identity(void **state) {
    (void)state;
    n_threads = 1;
    const char *pols[] = {"sink_recent", "h2o", "tova"};
    const int n_gen = 150;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    for (size_t pi = 0; pi < 3; pi++) {
        skv_context *dense = new_ctx(0, false), *bud = new_ctx(0, false);
        skv_compress_params p = skv_compress_default_params();
        p.policy = pols[pi];
        p.n_window = 8;
        p.positions = SKV_POSITIONS_REROTATE;
        skv_err err = {0};
        assert_int_equal(skv_context_set_budget(bud, &p, 200, 32, &err), SKV_OK);
        test_feed(dense, toks, 20, SKV_LOGITS_LAST, a);
        test_feed(bud, toks, 20, SKV_LOGITS_LAST, b);
        assert_memory_equal(a, b, (size_t)V * sizeof *a);
        for (int i = 0; i < n_gen; i++) {
            int32_t t = argmax(a);
            test_feed(dense, &t, 1, SKV_LOGITS_LAST, a);
            test_feed(bud, &t, 1, SKV_LOGITS_LAST, b);
            assert_memory_equal(a, b, (size_t)V * sizeof *a);
        }
        assert_int_equal(skv_context_budget_cuts(bud), 0);
        skv_context_free(dense);
        skv_context_free(bud);
    }
    free(a), free(b);
}

/* ---- the CLI -------------------------------------------------------------------------------- */

static void test_cli_policies(void **state) {
    (void)state;
    char cmd[4096];
    int status;
    snprintf(cmd, sizeof cmd, "%s policies", test_cli());
    char *out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        skv_policy_describe(i, &a, NULL);
        if (a.builtin) assert_non_null(strstr(out, a.name));
    }
    free(out);
    const char *M = test_model_path("stories260K/stories260K.gguf");
    snprintf(cmd, sizeof cmd,
             "%s compress -m %s -t 1 -p '%s' --policy h2o --keep 0.3 --window 4 --protocol engine "
             "--json",
             test_cli(), M, "Once upon a time there was a girl who loved to play in the park");
    out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "\"forced\": ["));
    assert_non_null(strstr(out, "\"by_score\": ["));
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -t 1 -p 'Once upon a time' -n 900 --policy sink_recent "
             "--max-cache 96 --positions rerotate 2>&1 >/dev/null",
             test_cli(), M);
    out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    const char *b = strstr(out, "at most ");
    assert_non_null(b);
    assert_true(atoi(b + 8) <= 96 + 32);
    free(out);
    /* a long prompt goes in pieces: the bound holds during it, and with rerotate a prompt
     * longer than the context (512) streams through */
    char prompt[8192] = "";
    for (int i = 0; i < 60; i++) strcat(prompt, "Lily and Ben went to the park. They saw a dog. ");
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s -t 1 -n 4 --policy sink_recent --max-cache 64%s -p '%.*s' "
                 "2>&1 >/dev/null",
                 test_cli(), M, k ? " --positions rerotate" : "", k ? 2900 : 580, prompt);
        out = test_run(cmd, &status);
        assert_int_equal(status, 0);
        b = strstr(out, "at most ");
        assert_non_null(b);
        assert_true(atoi(b + 8) <= 64 + 32);
        assert_non_null(strstr(out, k ? "logical length 10" : "logical length 2"));
        free(out);
    }
    /* past the context without rerotate: refused */
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -t 1 -p 'Once' -n 900 --policy tova --max-cache 96 2>&1 "
             ">/dev/null",
             test_cli(), M);
    out = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "rerotate"));
    free(out);
}

/* eval --budget: decode rows in results.jsonl, the bound, the control (a budget >= the sample:
 * KL 0), a policy that cannot run under a budget refused, and shards that merge into the
 * summary one run gives. */
static void test_cli_eval_budget(void **state) {
    (void)state;
    char cmd[2048], dir[512];
    int status;
    snprintf(dir, sizeof dir, "%s", test_tmp_path("evaldec"));
    const char *M = test_model_path("stories260K/stories260K.gguf");
    snprintf(cmd, sizeof cmd,
             "%s eval -m %s -t 1 -q --samples 1 --budget 96 --policies sink_recent,adakv "
             "--out %s 2>&1",
             test_cli(), M, dir);
    char *out = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "adakv does not run under a budget"));
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s eval -m %s -t 1 -q --samples 2 --budget 64,96 --policies sink_recent,tova "
             "--out %s",
             test_cli(), M, dir);
    out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "| sink_recent | 96 | 32 | 2 |"));
    assert_non_null(strstr(out, "| tova | 64 | 32 | 2 |"));
    free(out);
    char path[600];
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    size_t n = 0;
    char *j = test_read_file(path, &n);
    assert_non_null(j);
    int rows = 0;
    for (const char *r = strstr(j, "\"mode\":\"decode\""); r;
         r = strstr(r + 1, "\"mode\":\"decode\""))
        rows++;
    assert_int_equal(rows, 2 * 2 * 2); /* samples x budgets x policies */
    for (const char *m = strstr(j, "\"max_entries\":"); m; m = strstr(m + 1, "\"max_entries\":"))
        assert_true(atoi(m + 14) <= 96 + 32);
    /* summary.csv pools same_top over the rows' tokens, as the prefill summary does */
    long tokens = 0, same = 0;
    for (char *line = j; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        if (strstr(line, "\"policy\":\"tova\"") && strstr(line, "\"budget\":64,")) {
            tokens += atol(strstr(line, "\"n_tokens\":") + 11);
            same += atol(strstr(line, "\"same_top\":") + 11);
        }
        line = end ? end + 1 : NULL;
    }
    free(j);
    assert_true(tokens > 0);
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    char *csv = test_read_file(path, NULL);
    assert_non_null(csv);
    assert_non_null(strstr(csv, ",max_entries,ln_ppl_ratio_ci95,n_tokens,same_top_p,"
                                "same_top_p_unc,ppl_ref,ppl_cmp\n"));
    const char *row = strstr(csv, "\ndecode,tova,64,");
    assert_non_null(row);
    const char *f = row + 1;
    for (int k = 0; k < 15; k++) f = strchr(f, ',') + 1; /* to n_tokens, the 16th field */
    char *after = NULL;
    assert_int_equal(strtol(f, &after, 10), tokens);
    assert_true(fabs(strtod(after + 1, NULL) - (double)same / (double)tokens) < 1e-8);
    free(csv);
    /* the figure: each policy its own marker, and the CIs drawn */
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    char *gp = test_read_file(path, NULL);
    assert_non_null(gp);
    assert_non_null(strstr(gp, "with yerrorbars"));
    char want[128];
    snprintf(want, sizeof want, "pt %d lc rgb '%s' title 'sink_recent'",
             skv_eval_policy_pt("sink_recent"), skv_eval_policy_colour("sink_recent"));
    assert_non_null(strstr(gp, want));
    snprintf(want, sizeof want, "pt %d lc rgb '%s' title 'tova'", skv_eval_policy_pt("tova"),
             skv_eval_policy_colour("tova"));
    assert_non_null(strstr(gp, want));
    assert_true(skv_eval_policy_pt("sink_recent") != skv_eval_policy_pt("tova"));
    free(gp);
    /* the same run in two shards, merged: the same summary.csv, byte for byte */
    char sh[2][512], merged[512];
    for (int k = 0; k < 2; k++) {
        snprintf(sh[k], sizeof sh[k], "%s", test_tmp_path("evaldec_shard"));
        snprintf(cmd, sizeof cmd,
                 "%s eval -m %s -t 1 -q --samples 2 --budget 64,96 --policies sink_recent,tova "
                 "--shard %d/2 --out %s >/dev/null",
                 test_cli(), M, k, sh[k]);
        free(test_run(cmd, &status));
        assert_int_equal(status, 0);
    }
    snprintf(merged, sizeof merged, "%s", test_tmp_path("evaldec_merged"));
    snprintf(cmd, sizeof cmd, "%s eval-merge %s %s --out %s -q >/dev/null", test_cli(), sh[0],
             sh[1], merged);
    free(test_run(cmd, &status));
    assert_int_equal(status, 0);
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/summary.csv", dir);
    snprintf(b, sizeof b, "%s/summary.csv", merged);
    size_t na = 0, nb = 0;
    char *ta = test_read_file(a, &na), *tb = test_read_file(b, &nb);
    assert_non_null(ta);
    assert_non_null(tb);
    assert_int_equal(na, nb);
    assert_memory_equal(ta, tb, na);
    free(ta), free(tb);
    /* the control */
    snprintf(cmd, sizeof cmd,
             "%s eval -m %s -t 1 -q --samples 1 --budget 480 --policies h2o,streaming --overwrite "
             "--out %s",
             test_cli(), M, dir);
    out = test_run(cmd, &status);
    assert_int_equal(status, 0); /* exit 1 when a control row differs */
    assert_non_null(strstr(out, "| h2o | 480 | 32 | 1 | 0 | 0 | 1.000 | 0 | 0.0 |"));
    free(out);
}

static int setup(void **state) {
    (void)state;
    skv_err err = {0};
    const char *path = test_stories_path();
    model = skv_model_load(path, &err);
    if (!model) return -1;
    rmodel = ref_model_load(path);
    if (!rmodel) return -1;
    const skv_hparams *hp = skv_model_hparams(model);
    L = hp->n_layer, HQ = hp->n_head, HKV = hp->n_head_kv, HD = hp->head_dim, V = hp->n_vocab;
    if (HD > 64) return -1;
    n_toks = skv_tokenize(skv_model_vocab(model), TEXT, strlen(TEXT), true, toks, 256);
    static const char *const founding[] = {"sink_recent", "random", "attention", "pyramid"};
    N_NEW = 0;
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        if (skv_policy_describe(i, &a, NULL) || !a.builtin) continue;
        bool old = false;
        for (int k = 0; k < 4; k++) old |= !strcmp(a.name, founding[k]);
        if (!old && N_NEW < 32) NEW_POLICIES[N_NEW++] = a.name;
    }
    return n_toks >= 64 && N_NEW >= 5 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    ref_model_free(rmodel);
    skv_model_free(model);
    return 0;
}

/* adakv at small keeps leaves some heads empty: each layer's heads together hold keep * H_kv
 * entries (SPEC), which is what the selection counted (forced + by score), read from the cache
 * head by head (a check that copied head 0's list into an empty head passed the old tests) */
static void test_adakv_heads_hold_the_selection(void **state) {
    (void)state;
    if (!model) skip();
    int32_t ids[64];
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play.";
    int n = skv_tokenize(skv_model_vocab(model), text, strlen(text), true, ids, 64);
    assert_true(n > 21);
    const skv_hparams *hp = skv_model_hparams(model);
    for (int kf = 1; kf <= 5; kf++) {
        skv_context *c = test_context(model, SKV_TYPE_F32, 64, 1, 8);
        test_feed(c, ids, 20, SKV_LOGITS_NONE, NULL);
        skv_compress_params cp = skv_compress_default_params();
        cp.policy = "adakv";
        cp.keep_frac = 0.05 * kf;
        cp.window_tokens = ids + 20;
        cp.n_window = 1;
        cp.window_keep = 0;
        skv_compress_info info;
        skv_err err = {0};
        assert_int_equal(skv_compress(c, &cp, &info, &err), SKV_OK);
        for (int l = 0; l < hp->n_layer; l++) {
            int sum = 0;
            for (int h = 0; h < hp->n_head_kv; h++)
                sum += skv_cache_head_len(skv_context_cache_const(c), l, h);
            assert_int_equal(sum, info.keep * hp->n_head_kv);
            assert_int_equal(sum, info.forced[l] + info.by_score[l]);
        }
        skv_compress_info_free(&info);
        skv_context_free(c);
    }
}

/* A re-rotating budget re-rotates: after its first cut the cache is in rerotate mode and the
 * next token's logits differ from the same budget's in original positions (the tests compared
 * two contexts mutated alike, and a budget that never re-rotated passed them) */
static void test_budget_rerotates(void **state) {
    (void)state;
    if (!model) skip();
    int32_t ids[64];
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play.";
    int n = skv_tokenize(skv_model_vocab(model), text, strlen(text), true, ids, 64);
    float *lr = malloc(sizeof(float) * (size_t)V), *lo = malloc(sizeof(float) * (size_t)V);
    assert_true(lr && lo);
    for (int k = 0; k < 2; k++) {
        skv_context *c = test_context(model, SKV_TYPE_F32, 128, 1, 0);
        skv_compress_params p = skv_compress_default_params();
        p.policy = "streaming";
        p.n_window = 4;
        p.positions = k ? SKV_POSITIONS_REROTATE : SKV_POSITIONS_ORIGINAL;
        skv_err err = {0};
        assert_int_equal(skv_context_set_budget(c, &p, 12, 8, &err), SKV_OK);
        for (int i = 0; i < n && skv_context_budget_cuts(c) == 0; i++)
            test_feed(c, ids + i, 1, SKV_LOGITS_LAST, k ? lr : lo);
        assert_true(skv_context_budget_cuts(c) > 0);
        assert_int_equal(skv_cache_position_mode(skv_context_cache_const(c)), p.positions);
        test_feed(c, ids, 1, SKV_LOGITS_LAST, k ? lr : lo);
        skv_context_free(c);
    }
    assert_true(test_max_abs_diff(lr, lo, (size_t)V) > 1e-3);
    free(lr), free(lo);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_seed),
        cmocka_unit_test(test_selection_engine),
        cmocka_unit_test(test_mask_equivalence),
        cmocka_unit_test(test_kv_types),
        cmocka_unit_test(test_h2o_needs_accumulation),
        cmocka_unit_test(test_h2o_many_threads),
        cmocka_unit_test(test_pyramid_clamp),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_builtin_error_named),
        cmocka_unit_test(test_docs_name_every_policy),
        cmocka_unit_test(test_budget_bound),
        cmocka_unit_test(test_h2o_sums_grow),
        cmocka_unit_test(test_budget_pieces),
        cmocka_unit_test(test_clone_empty_heads),
        cmocka_unit_test(test_seed_pass_in_place),
        cmocka_unit_test(test_compress_returns_heap_memory),
        cmocka_unit_test(test_budget_streaming),
        cmocka_unit_test(test_budget_dense_identity),
        cmocka_unit_test(test_budget_unequal_heads),
        cmocka_unit_test(test_cli_policies),
        cmocka_unit_test(test_cli_eval_budget),
        cmocka_unit_test(test_adakv_heads_hold_the_selection),
        cmocka_unit_test(test_budget_rerotates),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
