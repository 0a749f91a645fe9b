/* test_compress.c — skv_compress on the real stories260K model, against independent references:
 *   - window scores against naive float64 loops over the cache's keys and the captured queries,
 *     and against queries/keys of this file's own float64 forward (r64 below);
 *   - the kept positions form a valid top-k of those reference scores (forced ones present);
 *   - masking equivalence: decoding on a compressed cache gives the logits of r64 decoding on
 *     the full cache with the dropped (layer, kv head, position) entries masked out, for every
 *     policy, both protocols and both position modes;
 *   - keep_frac = 1 and compressing a clone leave the logits bit-identical; errors leave the
 *     cache unchanged; rerotate gives fresh RoPE at the new index.
 *
 * r64 is a deliberately naive float64 Llama written for this test: it reads the GGUF through
 * the GGUF reader, keeps its own cache indexed by position with a visibility mask and a
 * rotation index per entry, and shares no code with the engine. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cache.h" /* skv_cache_head_at: a NaN put into a key */
#include "gguf.h"
#include "policies.h"
#include "sparsekv.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Engine (float32) vs r64 (float64) logits: the same bound test_forward.c uses for the dense
 * forward against a float64 reference; float32 rounding over 5 layers and a 512-way output
 * stays near 1e-5 on this model, and a wrong mask moves logits by 1e-2 or more (checked: each
 * masking test also asserts that the masked logits differ from the dense ones by > 50 * TOL). */
#define TOL_LOGITS 1e-4
/* Scores from the same float32 keys and queries, computed twice in float64. */
#define TOL_SCORE 1e-6
/* Scores from r64's float64 keys/queries vs the engine's float32 ones. */
#define TOL_SCORE_R64 1e-4

static const char *TEXT = "Once upon a time, there was a little girl named Lily. She loved to play "
                          "outside in the park. One day, she saw a big, red ball. She wanted to "
                          "play with it, but it was too high.";

static skv_model *model;
static int32_t toks[256];
static int n_toks;
static int L, HQ, HKV, HD, V;

/* ---- r64: naive float64 forward with a masked, position-indexed cache ---------------------- */

typedef struct r64 {
    int d, ff, n_rot, n_ctx;
    double theta, eps;
    double *embd, *onorm, *out; /* [V, d], [d], [V, d] */
    double **an, **wq, **wk, **wv, **wo, **fn, **wg, **wu, **wdn;
    /* cache, entry (l, h, pos) at ((l * HKV + h) * n_ctx + pos) */
    double *kraw, *krot, *v; /* [.., hd] keys before / after RoPE, values */
    int *rot;                /* rotation index of each entry */
    unsigned char *vis;      /* 1 = attended */
    int *shift;              /* [L * HKV]: a token at logical p is rotated at p - shift */
    int n_past;
    double *q_last; /* [L, HQ, hd] post-RoPE queries of the last token */
} r64;

static double *r64_tensor(skv_gguf *g, const char *name, int64_t n_expect) {
    int64_t i = skv_gguf_find_tensor(g, name);
    if (i < 0) return NULL;
    const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
    assert_int_equal(t->type, SKV_TYPE_F32); /* stories260K is all f32 */
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    assert_true(n == n_expect);
    double *out = malloc((size_t)n * sizeof *out);
    const float *src = t->data;
    for (int64_t j = 0; j < n; j++) out[j] = src[j];
    return out;
}

static double **r64_layers(skv_gguf *g, const char *suffix, int64_t n) {
    double **w = calloc((size_t)L, sizeof *w);
    char name[128];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
        w[l] = r64_tensor(g, name, n);
        assert_non_null(w[l]);
    }
    return w;
}

static r64 *r64_new(int n_ctx) {
    const skv_hparams *hp = skv_model_hparams(model);
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(g);
    r64 *m = calloc(1, sizeof *m);
    m->d = hp->n_embd;
    m->ff = hp->n_ff;
    m->n_rot = hp->n_rot;
    m->theta = hp->rope_theta;
    m->eps = hp->norm_eps;
    m->n_ctx = n_ctx;
    const int64_t d = m->d, dq = (int64_t)HQ * HD, dkv = (int64_t)HKV * HD, ff = m->ff;
    m->embd = r64_tensor(g, "token_embd.weight", V * d);
    m->onorm = r64_tensor(g, "output_norm.weight", d);
    m->out = r64_tensor(g, "output.weight", V * d);
    if (!m->out) { /* tied */
        m->out = malloc((size_t)(V * d) * sizeof(double));
        memcpy(m->out, m->embd, (size_t)(V * d) * sizeof(double));
    }
    m->an = r64_layers(g, "attn_norm.weight", d);
    m->wq = r64_layers(g, "attn_q.weight", dq * d);
    m->wk = r64_layers(g, "attn_k.weight", dkv * d);
    m->wv = r64_layers(g, "attn_v.weight", dkv * d);
    m->wo = r64_layers(g, "attn_output.weight", d * dq);
    m->fn = r64_layers(g, "ffn_norm.weight", d);
    m->wg = r64_layers(g, "ffn_gate.weight", ff * d);
    m->wu = r64_layers(g, "ffn_up.weight", ff * d);
    m->wdn = r64_layers(g, "ffn_down.weight", d * ff);
    skv_gguf_close(g);
    size_t entries = (size_t)L * HKV * n_ctx;
    m->kraw = calloc(entries * HD, sizeof(double));
    m->krot = calloc(entries * HD, sizeof(double));
    m->v = calloc(entries * HD, sizeof(double));
    m->rot = calloc(entries, sizeof(int));
    m->vis = calloc(entries, 1);
    m->shift = calloc((size_t)L * HKV, sizeof(int));
    m->q_last = calloc((size_t)L * HQ * HD, sizeof(double));
    return m;
}

static void r64_free(r64 *m) {
    if (!m) return;
    double **ws[] = {m->an, m->wq, m->wk, m->wv, m->wo, m->fn, m->wg, m->wu, m->wdn};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        for (int l = 0; l < L; l++) free(ws[i][l]);
        free(ws[i]);
    }
    free(m->embd);
    free(m->onorm);
    free(m->out);
    free(m->kraw);
    free(m->krot);
    free(m->v);
    free(m->rot);
    free(m->vis);
    free(m->shift);
    free(m->q_last);
    free(m);
}

/* Llama "normal" RoPE on adjacent pairs, in float64. */
static void rope64(double *x, double pos, int n_rot, double theta) {
    for (int i = 0; 2 * i < n_rot; i++) {
        double a = pos * pow(theta, -2.0 * i / n_rot);
        double c = cos(a), s = sin(a), x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

static void rmsnorm64(double *out, const double *x, const double *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void matvec64(double *y, const double *w, const double *x, int n_out, int n_in) {
    for (int o = 0; o < n_out; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++) s += w[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}

static size_t r64_at(const r64 *m, int l, int h, int pos) {
    return ((size_t)l * HKV + (size_t)h) * (size_t)m->n_ctx + (size_t)pos;
}

/* One token at position n_past; logits [V] (may be NULL). */
static void r64_step(r64 *m, int32_t tok, double *logits) {
    const int d = m->d, pos = m->n_past, g = HQ / HKV;
    assert_true(pos < m->n_ctx);
    double *x = malloc((size_t)d * sizeof *x), *xb = malloc((size_t)d * sizeof *xb);
    double *q = malloc((size_t)HQ * HD * sizeof *q), *k = malloc((size_t)HKV * HD * sizeof *k);
    double *v = malloc((size_t)HKV * HD * sizeof *v), *att = malloc((size_t)HQ * HD * sizeof *att);
    double *sc = malloc((size_t)m->n_ctx * sizeof *sc);
    double *h1 = malloc((size_t)m->ff * sizeof *h1), *h2 = malloc((size_t)m->ff * sizeof *h2);
    double *tmp = malloc((size_t)d * sizeof *tmp);
    for (int i = 0; i < d; i++) x[i] = m->embd[(size_t)tok * d + i];
    for (int l = 0; l < L; l++) {
        rmsnorm64(xb, x, m->an[l], d, m->eps);
        matvec64(q, m->wq[l], xb, HQ * HD, d);
        matvec64(k, m->wk[l], xb, HKV * HD, d);
        matvec64(v, m->wv[l], xb, HKV * HD, d);
        for (int h = 0; h < HKV; h++) {
            size_t e = r64_at(m, l, h, pos);
            memcpy(m->kraw + e * HD, k + h * HD, HD * sizeof(double));
            memcpy(m->v + e * HD, v + h * HD, HD * sizeof(double));
            m->rot[e] = pos - m->shift[l * HKV + h];
            memcpy(m->krot + e * HD, k + h * HD, HD * sizeof(double));
            rope64(m->krot + e * HD, m->rot[e], m->n_rot, m->theta);
            m->vis[e] = 1;
        }
        for (int qh = 0; qh < HQ; qh++) {
            const int h = qh / g;
            double *qr = q + qh * HD;
            rope64(qr, pos - m->shift[l * HKV + h], m->n_rot, m->theta);
            memcpy(m->q_last + ((size_t)l * HQ + qh) * HD, qr, HD * sizeof(double));
            double mx = -INFINITY;
            for (int j = 0; j <= pos; j++) {
                size_t e = r64_at(m, l, h, j);
                if (!m->vis[e]) continue;
                double s = 0;
                for (int i = 0; i < HD; i++) s += qr[i] * m->krot[e * HD + i];
                sc[j] = s / sqrt((double)HD);
                if (sc[j] > mx) mx = sc[j];
            }
            double sum = 0;
            for (int j = 0; j <= pos; j++)
                if (m->vis[r64_at(m, l, h, j)]) sum += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < HD; i++) att[qh * HD + i] = 0;
            for (int j = 0; j <= pos; j++) {
                size_t e = r64_at(m, l, h, j);
                if (!m->vis[e]) continue;
                for (int i = 0; i < HD; i++) att[qh * HD + i] += sc[j] / sum * m->v[e * HD + i];
            }
        }
        matvec64(tmp, m->wo[l], att, d, HQ * HD);
        for (int i = 0; i < d; i++) x[i] += tmp[i];
        rmsnorm64(xb, x, m->fn[l], d, m->eps);
        matvec64(h1, m->wg[l], xb, m->ff, d);
        matvec64(h2, m->wu[l], xb, m->ff, d);
        for (int i = 0; i < m->ff; i++) h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h2[i];
        matvec64(tmp, m->wdn[l], h1, d, m->ff);
        for (int i = 0; i < d; i++) x[i] += tmp[i];
    }
    if (logits) {
        rmsnorm64(xb, x, m->onorm, d, m->eps);
        matvec64(logits, m->out, xb, V, d);
    }
    m->n_past++;
    free(x), free(xb), free(q), free(k), free(v), free(att), free(sc), free(h1), free(h2);
    free(tmp);
}

/* Makes r64's cache match a compressed engine cache: positions the engine dropped are masked;
 * in rerotate mode the retained keys move to their index in the head and later tokens of that
 * head are rotated at p - (T - n). */
static void r64_mirror(r64 *m, const skv_cache *c, bool rerotate) {
    const int T = m->n_past;
    for (int l = 0; l < L; l++) {
        for (int h = 0; h < HKV; h++) {
            const int n = skv_cache_head_len(c, l, h);
            const int32_t *pos = skv_cache_head_positions(c, l, h);
            for (int p = 0; p < T; p++) m->vis[r64_at(m, l, h, p)] = 0;
            for (int j = 0; j < n; j++) {
                assert_true(pos[j] >= 0 && pos[j] < T);
                size_t e = r64_at(m, l, h, pos[j]);
                m->vis[e] = 1;
                if (rerotate) {
                    m->rot[e] = j;
                    memcpy(m->krot + e * HD, m->kraw + e * HD, HD * sizeof(double));
                    rope64(m->krot + e * HD, j, m->n_rot, m->theta);
                }
            }
            if (rerotate) m->shift[l * HKV + h] = T - n;
        }
    }
}

/* ---- helpers --------------------------------------------------------------------------------- */

static skv_context *new_ctx_threads(int capture, int n_ctx, int threads) {
    return test_context(model, SKV_TYPE_F32, n_ctx, threads, capture);
}

static skv_context *new_ctx(int capture, int n_ctx) {
    return new_ctx_threads(capture, n_ctx, 1);
}

static void feed(skv_context *ctx, const int32_t *t, int n, float *logits) {
    test_feed(ctx, t, n, logits ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, logits);
}

/* A full copy of a cache's observable state, to prove a failed call changed nothing. */
typedef struct snap {
    int n_past, mode, total;
    int *len;
    float *kv; /* all heads' k then v rows */
    int32_t *pos;
    uint64_t bytes;
} snap;

static snap snap_take(const skv_cache *c) {
    snap s = {0};
    s.n_past = skv_cache_n_past(c);
    s.mode = (int)skv_cache_position_mode(c);
    s.bytes = skv_cache_bytes(c, -1);
    s.len = calloc((size_t)L * HKV, sizeof(int));
    for (int i = 0; i < L * HKV; i++) s.total += s.len[i] = skv_cache_head_len(c, i / HKV, i % HKV);
    s.kv = malloc((size_t)(s.total + 1) * 2 * HD * sizeof(float));
    s.pos = malloc((size_t)(s.total + 1) * sizeof(int32_t));
    size_t off = 0;
    for (int i = 0; i < L * HKV; i++) {
        skv_err err = {0};
        assert_int_equal(skv_cache_head_read(c, i / HKV, i % HKV, s.kv + off * 2 * HD,
                                             s.kv + off * 2 * HD + (size_t)s.len[i] * HD,
                                             s.pos + off, &err),
                         SKV_OK);
        off += (size_t)s.len[i];
    }
    return s;
}

static void snap_check_free(snap *a, const skv_cache *c) {
    snap b = snap_take(c);
    assert_int_equal(a->n_past, b.n_past);
    assert_int_equal(a->mode, b.mode);
    assert_int_equal(a->total, b.total);
    assert_true(a->bytes == b.bytes);
    assert_memory_equal(a->len, b.len, (size_t)L * HKV * sizeof(int));
    assert_memory_equal(a->kv, b.kv, (size_t)a->total * 2 * HD * sizeof(float));
    assert_memory_equal(a->pos, b.pos, (size_t)a->total * sizeof(int32_t));
    free(a->len), free(a->kv), free(a->pos);
    free(b.len), free(b.kv), free(b.pos);
}

static skv_compress_params params_for(const char *policy, double keep, skv_protocol proto,
                                      const int32_t *win, int W) {
    skv_compress_params p = skv_compress_default_params();
    p.policy = policy;
    p.keep_frac = keep;
    p.protocol = proto;
    p.window_tokens = win;
    p.n_window = W;
    return p;
}

static void compress_ok(skv_context *ctx, const skv_compress_params *p, skv_compress_info *info) {
    skv_err err = {0};
    skv_status st = skv_compress(ctx, p, info, &err);
    if (st) fprintf(stderr, "compress: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
}

/* ---- reference window scores ----------------------------------------------------------------- */

/* Naive pooled score of one row, exactly as docs/SPEC.md words it (explicit padded array). */
static void naive_pool(double *s, int T, int kernel, skv_pooling pool) {
    if (kernel <= 1) return;
    int pad = kernel / 2, np = T + 2 * pad;
    double *padded = malloc((size_t)np * sizeof *padded);
    for (int i = 0; i < np; i++) {
        int src = i - pad;
        padded[i] = s[src < 0 ? 0 : src >= T ? T - 1 : src];
    }
    for (int t = 0; t < T; t++) { /* windows beyond the T-th (even kernels) name no position */
        double acc = pool == SKV_POOL_MAX ? -INFINITY : 0;
        for (int j = 0; j < kernel; j++)
            acc = pool == SKV_POOL_MAX ? fmax(acc, padded[t + j]) : acc + padded[t + j];
        s[t] = pool == SKV_POOL_MAX ? acc : acc / kernel;
    }
    free(padded);
}

/* score [L, HKV, P] (pooled, last window_keep forced +inf): queries qf[l] [HQ, q_n, HD] with
 * the window at rows q_off.., keys read from the cache. Straight float64 loops. */
static void naive_scores(double *score, int P, int W, const skv_compress_params *p,
                         const float *const *qf, int q_n, int q_off, const skv_cache *c) {
    const int g = HQ / HKV;
    float *k = malloc((size_t)skv_cache_n_past(c) * HD * sizeof *k);
    double *lg = malloc((size_t)P * sizeof *lg);
    for (int l = 0; l < L; l++) {
        for (int h = 0; h < HKV; h++) {
            skv_err err = {0};
            assert_int_equal(skv_cache_head_read(c, l, h, k, NULL, NULL, &err), SKV_OK);
            double *row = score + ((size_t)l * HKV + h) * P;
            for (int t = 0; t < P; t++) row[t] = 0;
            for (int qh = h * g; qh < (h + 1) * g; qh++) {
                for (int w = 0; w < W; w++) {
                    const float *q = qf[l] + ((size_t)qh * q_n + q_off + w) * HD;
                    double mx = -INFINITY, sum = 0;
                    for (int t = 0; t < P; t++) {
                        double s = 0;
                        for (int i = 0; i < HD; i++) s += (double)q[i] * (double)k[t * HD + i];
                        lg[t] = s / sqrt((double)HD);
                        mx = fmax(mx, lg[t]);
                    }
                    for (int t = 0; t < P; t++) sum += exp(lg[t] - mx);
                    for (int t = 0; t < P; t++) row[t] += exp(lg[t] - mx) / sum / (g * W);
                }
            }
            naive_pool(row, P, p->kernel, p->pooling);
            for (int t = P - p->window_keep; t < P; t++)
                if (t >= 0) row[t] = INFINITY;
        }
    }
    free(k);
    free(lg);
}

static void check_scores(const double *got, int T_stride, const double *want, int P, double tol) {
    for (int r = 0; r < L * HKV; r++) {
        for (int t = 0; t < P; t++) {
            double a = got[(size_t)r * T_stride + t], b = want[(size_t)r * P + t];
            if (isinf(b)) {
                assert_true(isinf(a) && a > 0);
            } else if (fabs(a - b) > tol) {
                fail_msg("score row %d position %d: %.12g vs reference %.12g", r, t, a, b);
            }
        }
    }
}

/* Seed protocol: plan scores == naive loops over the cache keys and the window queries
 * captured on a clone, for raw, max-pooled (odd) and avg-pooled (even) configurations; and
 * == r64's own float64 queries and keys within float32 noise. */
static void test_window_scores_seed(void **state) {
    (void)state;
    const int T = 30, W = 8;
    skv_context *ctx = new_ctx(0, 0);
    feed(ctx, toks, T, NULL);
    /* the window queries: the same prefix, then the window in its own call (captured) */
    skv_err err = {0};
    skv_context *cap = new_ctx(W, 0);
    feed(cap, toks, T, NULL);
    feed(cap, toks + T, W, NULL); /* last call: the window; its queries are captured */
    const float *qf[16];
    for (int l = 0; l < L; l++) {
        int n = 0, first = -1;
        qf[l] = skv_context_captured_queries(cap, l, &n, &first);
        assert_non_null(qf[l]);
        assert_int_equal(n, W);
        assert_int_equal(first, T);
    }
    /* r64's window queries and prefix keys, fully independent of the engine */
    r64 *m = r64_new(64);
    double *q64 = malloc((size_t)L * HQ * W * HD * sizeof(double));
    for (int i = 0; i < T + W; i++) {
        r64_step(m, toks[i], NULL);
        if (i >= T)
            for (int l = 0; l < L; l++)
                for (int qh = 0; qh < HQ; qh++)
                    memcpy(q64 + (((size_t)l * HQ + qh) * W + (i - T)) * HD,
                           m->q_last + ((size_t)l * HQ + qh) * HD, HD * sizeof(double));
    }
    const struct {
        int kernel, window_keep;
        skv_pooling pool;
    } cfg[] = {
        {1, 0, SKV_POOL_MAX}, {7, 4, SKV_POOL_MAX}, {4, 0, SKV_POOL_AVG}, {40, 2, SKV_POOL_AVG}};
    double *want = malloc((size_t)L * HKV * T * sizeof(double));
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        skv_compress_params p = params_for("attention", 0.5, SKV_PROTOCOL_SEED, toks + T, W);
        p.kernel = cfg[ci].kernel;
        p.window_keep = cfg[ci].window_keep;
        p.pooling = cfg[ci].pool;
        skv_compress_plan plan;
        assert_int_equal(skv_compress_plan_make(ctx, &p, &plan, &err), SKV_OK);
        assert_int_equal(plan.T, T);
        assert_int_equal(plan.n_score, T);
        assert_int_equal(plan.W, W);
        naive_scores(want, T, W, &p, qf, W, 0, skv_context_cache_const(ctx));
        check_scores(plan.scores, T, want, T, TOL_SCORE);
        /* every raw row is a mean of distributions: sums to 1 */
        if (cfg[ci].kernel == 1) {
            for (int r = 0; r < L * HKV; r++) {
                double s = 0;
                for (int t = 0; t < T; t++) s += plan.scores[(size_t)r * T + t];
                assert_float_equal(s, 1.0, 1e-9);
            }
            /* against r64: its own float64 keys (post-RoPE) and queries */
            for (int l = 0; l < L; l++) {
                for (int h = 0; h < HKV; h++) {
                    double row[64] = {0};
                    for (int qh = h * (HQ / HKV); qh < (h + 1) * (HQ / HKV); qh++) {
                        for (int w = 0; w < W; w++) {
                            const double *q = q64 + (((size_t)l * HQ + qh) * W + w) * HD;
                            double lg[64], mx = -INFINITY, sum = 0;
                            for (int t = 0; t < T; t++) {
                                const double *k = m->krot + r64_at(m, l, h, t) * HD;
                                double s = 0;
                                for (int i = 0; i < HD; i++) s += q[i] * k[i];
                                lg[t] = s / sqrt((double)HD);
                                mx = fmax(mx, lg[t]);
                            }
                            for (int t = 0; t < T; t++) sum += exp(lg[t] - mx);
                            for (int t = 0; t < T; t++)
                                row[t] += exp(lg[t] - mx) / sum / ((HQ / HKV) * W);
                        }
                    }
                    for (int t = 0; t < T; t++)
                        assert_float_equal(plan.scores[((size_t)l * HKV + h) * T + t], row[t],
                                           TOL_SCORE_R64);
                }
            }
        }
        skv_compress_plan_free(&plan);
    }
    free(want);
    free(q64);
    r64_free(m);
    skv_context_free(cap);
    skv_context_free(ctx);
}

/* Engine protocol: scores of the T-W prefix positions over the prefix keys only, from the
 * prefill's own capture; the window positions are forced. */
static void test_window_scores_engine(void **state) {
    (void)state;
    const int T = 38, W = 8, P = T - W;
    /* captures more than W (the last W are used); 2 threads: the scorer runs on the pool */
    skv_context *ctx = new_ctx_threads(12, 0, 2);
    feed(ctx, toks, T, NULL);
    const float *qf[16];
    int n = 0, first = 0;
    for (int l = 0; l < L; l++) qf[l] = skv_context_captured_queries(ctx, l, &n, &first);
    assert_int_equal(n, 12);
    assert_int_equal(first, T - 12);
    skv_compress_params p = params_for("snapkv", 0.5, SKV_PROTOCOL_ENGINE, NULL, W);
    p.window_keep = 3;
    skv_compress_plan plan;
    skv_err err = {0};
    assert_int_equal(skv_compress_plan_make(ctx, &p, &plan, &err), SKV_OK);
    assert_int_equal(plan.n_score, P);
    double *want = malloc((size_t)L * HKV * P * sizeof(double));
    naive_scores(want, P, W, &p, qf, n, n - W, skv_context_cache_const(ctx));
    check_scores(plan.scores, T, want, P, TOL_SCORE);
    for (int r = 0; r < L * HKV; r++)
        for (int t = P; t < T; t++) assert_true(isinf(plan.scores[(size_t)r * T + t]));
    free(want);
    skv_compress_plan_free(&plan);
    skv_context_free(ctx);
}

/* skv_compress keeps a valid top-k of the reference scores: exactly min(budget, T) per head,
 * every forced position, and no dropped position scoring above a kept one. */
static void test_topk_valid(void **state) {
    (void)state;
    const int T = 40, W = 6;
    skv_context *base = new_ctx(0, 0);
    feed(base, toks, T, NULL);
    skv_context *cap = new_ctx(W, 0);
    feed(cap, toks, T, NULL);
    feed(cap, toks + T, W, NULL);
    const float *qf[16];
    int n, first;
    for (int l = 0; l < L; l++) qf[l] = skv_context_captured_queries(cap, l, &n, &first);
    const char *policies[] = {"attention", "pyramid"};
    double *ref = malloc((size_t)L * HKV * T * sizeof(double));
    for (int pi = 0; pi < 2; pi++) {
        for (int ki = 0; ki < 3; ki++) {
            const double keep = (const double[]){0.1, 0.4, 0.7}[ki];
            skv_err err = {0};
            skv_context *ctx = skv_context_clone(base, &err);
            skv_compress_params p = params_for(policies[pi], keep, SKV_PROTOCOL_SEED, toks + T, W);
            p.window_keep = 5;
            skv_compress_info info;
            compress_ok(ctx, &p, &info);
            /* reference from the uncompressed keys */
            naive_scores(ref, T, W, &p, qf, W, 0, skv_context_cache_const(base));
            const int k = skv_policy_keep(keep, T);
            assert_int_equal(info.keep, k);
            assert_int_equal(info.T, T);
            assert_int_equal(info.window_tokens, W);
            const skv_cache *c = skv_context_cache_const(ctx);
            for (int l = 0; l < L; l++) {
                int budget = pi == 0 ? k : info.layer_budgets[l];
                if (budget > T) budget = T;
                if (pi == 0) assert_int_equal(info.layer_budgets[l], k);
                for (int h = 0; h < HKV; h++) {
                    const int len = skv_cache_head_len(c, l, h);
                    const int32_t *pos = skv_cache_head_positions(c, l, h);
                    assert_int_equal(len, budget);
                    assert_int_equal(info.kept[l * HKV + h], len);
                    const double *row = ref + ((size_t)l * HKV + h) * T;
                    bool kept[64] = {false};
                    for (int i = 0; i < len; i++) {
                        if (i) assert_true(pos[i] > pos[i - 1]);
                        kept[pos[i]] = true;
                    }
                    double min_kept = INFINITY, max_drop = -INFINITY;
                    for (int t = 0; t < T; t++) {
                        if (kept[t])
                            min_kept = fmin(min_kept, row[t]);
                        else
                            max_drop = fmax(max_drop, row[t]);
                    }
                    assert_true(min_kept >= max_drop - TOL_SCORE);
                    /* forced: the last min(budget, window_keep) positions */
                    for (int t = T - SKV_MIN(budget, p.window_keep); t < T; t++)
                        assert_true(kept[t]);
                }
            }
            assert_true(info.bytes_before == skv_cache_bytes(skv_context_cache_const(base), -1));
            assert_true(info.bytes_after == skv_cache_bytes(c, -1));
            assert_true(info.bytes_after < info.bytes_before);
            assert_true(info.compress_ms >= info.window_ms && info.window_ms >= 0);
            /* applying the selection is a share of the whole, apart from the window pass */
            assert_true(info.cache_ms > 0 && info.compress_ms >= info.window_ms + info.cache_ms);
            skv_compress_info_free(&info);
            skv_context_free(ctx);
        }
    }
    free(ref);
    skv_context_free(cap);
    skv_context_free(base);
}

/* ---- masking equivalence --------------------------------------------------------------------- */

typedef struct mask_case {
    const char *policy;
    skv_protocol protocol;
    double keep;
    skv_position_mode positions;
} mask_case;

/* Prefill (seed: T prefix tokens; engine: T + W tokens with capture), compress, then (seed) feed
 * the window and decode N greedy tokens; r64 does the same on its full cache with the dropped
 * entries masked. Every logit row must agree within TOL_LOGITS, and the compression must
 * actually matter (masked differs from dense). */
static void run_mask_case(const mask_case *mc) {
    const int T = 36, W = 8, N = 6;
    const bool engine = mc->protocol == SKV_PROTOCOL_ENGINE;
    skv_context *ctx = new_ctx(engine ? W : 0, 0);
    r64 *m = r64_new(T + W + N + 1), *dense = r64_new(T + W + N + 1);
    const int n_prefill = engine ? T + W : T;
    feed(ctx, toks, n_prefill, NULL);
    for (int i = 0; i < n_prefill; i++) {
        r64_step(m, toks[i], NULL);
        r64_step(dense, toks[i], NULL);
    }
    skv_compress_params p =
        params_for(mc->policy, mc->keep, mc->protocol, engine ? NULL : toks + T, W);
    p.window_keep = 4;
    p.positions = mc->positions;
    p.seed = 7;
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    const skv_cache *c = skv_context_cache_const(ctx);
    if (engine) /* the window stays (its latest positions first when a budget is below W) */
        for (int l = 0; l < L; l++)
            for (int h = 0; h < HKV; h++) {
                const int32_t *pos = skv_cache_head_positions(c, l, h);
                int len = skv_cache_head_len(c, l, h);
                for (int i = 1; i <= SKV_MIN(len, W); i++)
                    assert_int_equal(pos[len - i], T + W - i);
            }
    r64_mirror(m, c, mc->positions == SKV_POSITIONS_REROTATE);
    assert_int_equal(skv_cache_position_mode(c), mc->positions);

    float *lf = malloc((size_t)V * sizeof *lf);
    double *lm = malloc((size_t)V * sizeof *lm), *ld = malloc((size_t)V * sizeof *ld);
    double worst = 0, effect = 0;
    int32_t next[64];
    int n_next = 0;
    if (!engine)
        for (int i = 0; i < W; i++) next[n_next++] = toks[T + i];
    for (int step = 0; step < n_next + N; step++) {
        int32_t t = step < n_next ? next[step] : -1;
        if (t < 0) t = (int32_t)test_argmaxf(lf, V);
        feed(ctx, &t, 1, lf);
        r64_step(m, t, lm);
        r64_step(dense, t, ld);
        for (int i = 0; i < V; i++) {
            worst = fmax(worst, fabs((double)lf[i] - lm[i]));
            effect = fmax(effect, fabs(lm[i] - ld[i]));
        }
    }
    if (getenv("SKV_TEST_VERBOSE"))
        fprintf(stderr, "%s %d %.2f %d: worst %.3g effect %.3g\n", mc->policy, (int)mc->protocol,
                mc->keep, (int)mc->positions, worst, effect);
    if (worst > TOL_LOGITS || effect < 50 * TOL_LOGITS)
        fail_msg("%s %s keep %.2f %s: engine vs masked reference %.3g (tol %g), masked vs dense "
                 "%.3g",
                 mc->policy, engine ? "engine" : "seed", mc->keep,
                 mc->positions == SKV_POSITIONS_REROTATE ? "rerotate" : "original", worst,
                 TOL_LOGITS, effect);
    skv_compress_info_free(&info);
    free(lf), free(lm), free(ld);
    r64_free(m);
    r64_free(dense);
    skv_context_free(ctx);
}

static void test_mask_equivalence_seed(void **state) {
    (void)state;
    const mask_case cases[] = {
        {"attention", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_ORIGINAL},
        {"pyramid", SKV_PROTOCOL_SEED, 0.4, SKV_POSITIONS_ORIGINAL},
        {"random", SKV_PROTOCOL_SEED, 0.5, SKV_POSITIONS_ORIGINAL},
        {"sink_recent", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_ORIGINAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_mask_case(&cases[i]);
}

static void test_mask_equivalence_engine(void **state) {
    (void)state;
    const mask_case cases[] = {
        {"snapkv", SKV_PROTOCOL_ENGINE, 0.4, SKV_POSITIONS_ORIGINAL},
        {"pyramidkv", SKV_PROTOCOL_ENGINE, 0.5, SKV_POSITIONS_ORIGINAL},
        {"streaming", SKV_PROTOCOL_ENGINE, 0.4, SKV_POSITIONS_ORIGINAL},
        {"random", SKV_PROTOCOL_ENGINE, 0.5, SKV_POSITIONS_ORIGINAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_mask_case(&cases[i]);
}

static void test_mask_equivalence_rerotate(void **state) {
    (void)state;
    const mask_case cases[] = {
        {"sink_recent", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_REROTATE},
        {"attention", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_REROTATE}, /* per-head counts */
        {"pyramid", SKV_PROTOCOL_ENGINE, 0.5, SKV_POSITIONS_REROTATE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_mask_case(&cases[i]);
}

/* ---- identity, isolation, rerotate ------------------------------------------------------------
 */

static void decode_n(skv_context *ctx, int N, float *rows /* [N, V] */) {
    int32_t t = toks[skv_context_n_past(ctx) % n_toks];
    for (int i = 0; i < N; i++) {
        feed(ctx, &t, 1, rows + (size_t)i * V);
        t = (int32_t)test_argmaxf(rows + (size_t)i * V, V);
    }
}

static void test_keep_all_identity(void **state) {
    (void)state;
    const int T = 30, W = 6, N = 5;
    float *a = malloc((size_t)N * V * sizeof *a), *b = malloc((size_t)N * V * sizeof *b);
    const char *policies[] = {"sink_recent", "random", "attention", "pyramid"};
    for (int proto = 0; proto < 2; proto++) {
        for (int pi = 0; pi < 4; pi++) {
            skv_context *dense = new_ctx(W, 0), *comp = new_ctx(W, 0);
            feed(dense, toks, T, NULL);
            feed(comp, toks, T, NULL);
            skv_compress_params p =
                params_for(policies[pi], 1.0, (skv_protocol)proto, proto ? NULL : toks + T, W);
            skv_compress_info info;
            compress_ok(comp, &p, &info);
            /* pyramid's budgets may exceed T in layer 0; the clamp keeps all T everywhere */
            for (int i = 0; i < L * HKV; i++) assert_int_equal(info.kept[i], T);
            assert_true(info.bytes_after == info.bytes_before);
            decode_n(dense, N, a);
            decode_n(comp, N, b);
            assert_memory_equal(a, b, (size_t)N * V * sizeof *a);
            skv_compress_info_free(&info);
            skv_context_free(dense);
            skv_context_free(comp);
        }
    }
    free(a);
    free(b);
}

/* Compressing a clone (and the seed protocol's own window pass) leaves the original's cache
 * and logits bit-identical to a context that was never compressed. */
static void test_clone_isolation(void **state) {
    (void)state;
    const int T = 30, W = 6, N = 5;
    float *a = malloc((size_t)N * V * sizeof *a), *b = malloc((size_t)N * V * sizeof *b);
    skv_context *orig = new_ctx(0, 0), *fresh = new_ctx(0, 0);
    feed(orig, toks, T, NULL);
    feed(fresh, toks, T, NULL);
    snap s = snap_take(skv_context_cache_const(orig));
    skv_err err = {0};
    skv_context *cl = skv_context_clone(orig, &err);
    assert_non_null(cl);
    skv_compress_params p = params_for("attention", 0.3, SKV_PROTOCOL_SEED, toks + T, W);
    p.positions = SKV_POSITIONS_REROTATE;
    skv_compress_info info;
    compress_ok(cl, &p, &info);
    assert_true(info.bytes_after < info.bytes_before);
    snap_check_free(&s, skv_context_cache_const(orig));
    decode_n(orig, N, a);
    decode_n(fresh, N, b);
    assert_memory_equal(a, b, (size_t)N * V * sizeof *a);
    skv_compress_info_free(&info);
    skv_context_free(cl);
    skv_context_free(orig);
    skv_context_free(fresh);
    free(a);
    free(b);
}

/* After rerotate, entry j of a head (originally at position p) holds RoPE(unrotated key, j):
 * the unrotated key is recovered in float64 from the dense cache (rotate by -p). */
static void test_rerotate_keys(void **state) {
    (void)state;
    const int T = 30;
    skv_context *ctx = new_ctx(0, 0);
    feed(ctx, toks, T, NULL);
    const skv_cache *c = skv_context_cache_const(ctx);
    float *dense = malloc((size_t)L * HKV * T * HD * sizeof(float));
    skv_err err = {0};
    for (int i = 0; i < L * HKV; i++)
        assert_int_equal(
            skv_cache_head_read(c, i / HKV, i % HKV, dense + (size_t)i * T * HD, NULL, NULL, &err),
            SKV_OK);
    skv_compress_params p = params_for("random", 0.4, SKV_PROTOCOL_SEED, NULL, 0);
    p.positions = SKV_POSITIONS_REROTATE;
    p.seed = 3;
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    assert_int_equal(skv_cache_position_mode(c), SKV_POSITIONS_REROTATE);
    const skv_hparams *hp = skv_model_hparams(model);
    float *k = malloc((size_t)T * HD * sizeof *k);
    int32_t pos[64];
    int moved = 0;
    for (int i = 0; i < L * HKV; i++) {
        int n = skv_cache_head_len(c, i / HKV, i % HKV);
        assert_int_equal(skv_cache_head_read(c, i / HKV, i % HKV, k, NULL, pos, &err), SKV_OK);
        for (int j = 0; j < n; j++) {
            double x[64];
            for (int e = 0; e < HD; e++) x[e] = dense[((size_t)i * T + pos[j]) * HD + e];
            rope64(x, -(double)pos[j], hp->n_rot, hp->rope_theta); /* unrotate */
            rope64(x, (double)j, hp->n_rot, hp->rope_theta);       /* fresh at the new index */
            for (int e = 0; e < HD; e++)
                assert_float_equal(k[(size_t)j * HD + e], x[e], 1e-5 * fmax(1.0, fabs(x[e])));
            moved += pos[j] != j;
        }
    }
    assert_true(moved > 0); /* the test rotated something */
    skv_compress_info_free(&info);
    free(k);
    free(dense);
    skv_context_free(ctx);
}

/* ---- exact selections through the public call ------------------------------------------------ */

static void test_shared_policies_exact(void **state) {
    (void)state;
    const int T = 40, W = 8;
    /* engine sink_recent: keep 20 of 40 with the last 8 as window = sinks 0..3 + 24..39 */
    skv_context *ctx = new_ctx(0, 0);
    feed(ctx, toks, T, NULL);
    skv_compress_params p = params_for("streaming", 0.5, SKV_PROTOCOL_ENGINE, NULL, W);
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    assert_string_equal(info.policy, "sink_recent");
    assert_int_equal(info.window_tokens, W);
    const skv_cache *c = skv_context_cache_const(ctx);
    for (int i = 0; i < L * HKV; i++) {
        const int32_t *pos = skv_cache_head_positions(c, i / HKV, i % HKV);
        assert_int_equal(skv_cache_head_len(c, i / HKV, i % HKV), 20);
        for (int j = 0; j < 4; j++) assert_int_equal(pos[j], j);
        for (int j = 4; j < 20; j++) assert_int_equal(pos[j], 24 + j - 4);
    }
    assert_int_equal(skv_cache_n_past(c), T); /* logical length survives */
    skv_compress_info_free(&info);
    skv_context_free(ctx);

    /* seed random: same set in every head and layer, = skv_score_random_row's top-keep */
    ctx = new_ctx(0, 0);
    feed(ctx, toks, T, NULL);
    p = params_for("random", 0.25, SKV_PROTOCOL_SEED, toks + T, W); /* window ignored */
    p.seed = 11;
    compress_ok(ctx, &p, &info);
    assert_int_equal(info.window_tokens, 0);
    double s[64];
    int32_t perm[64], want[64];
    uint64_t rk[64];
    skv_score_random_row(s, T, 11, perm);
    int n = skv_select_topk(s, T, 10, want, rk);
    assert_int_equal(n, 10);
    for (int i = 0; i < 10; i++) assert_int_equal(perm[i] >= 0, 1);
    c = skv_context_cache_const(ctx);
    for (int i = 0; i < L * HKV; i++) {
        assert_int_equal(skv_cache_head_len(c, i / HKV, i % HKV), 10);
        assert_memory_equal(skv_cache_head_positions(c, i / HKV, i % HKV), want,
                            10 * sizeof(int32_t));
    }
    skv_compress_info_free(&info);
    skv_context_free(ctx);
}

/* Engine edge cases: keep <= W keeps only the latest window positions; pyramid's rule counts
 * the window (window = W + window_keep). */
static void test_engine_edges(void **state) {
    (void)state;
    const int T = 40, W = 8;
    skv_context *base = new_ctx(W, 0);
    feed(base, toks, T, NULL);
    skv_err err = {0};
    skv_context *ctx = skv_context_clone(base, &err);
    skv_compress_params p = params_for("attention", 0.1, SKV_PROTOCOL_ENGINE, NULL, W);
    skv_compress_info info;
    compress_ok(ctx, &p, &info);
    assert_int_equal(info.keep, 4);
    const skv_cache *c = skv_context_cache_const(ctx);
    for (int i = 0; i < L * HKV; i++) {
        assert_int_equal(skv_cache_head_len(c, i / HKV, i % HKV), 4);
        assert_memory_equal(skv_cache_head_positions(c, i / HKV, i % HKV),
                            ((const int32_t[]){36, 37, 38, 39}), 4 * sizeof(int32_t));
    }
    skv_compress_info_free(&info);
    skv_context_free(ctx);

    ctx = skv_context_clone(base, &err);
    p = params_for("pyramid", 0.6, SKV_PROTOCOL_ENGINE, NULL, W);
    p.window_keep = 3;
    compress_ok(ctx, &p, &info);
    int want[16];
    assert_int_equal(skv_pyramid_budgets(24, L, W + 3, 20, want, NULL), SKV_OK);
    c = skv_context_cache_const(ctx);
    for (int l = 0; l < L; l++) {
        assert_int_equal(info.layer_budgets[l], want[l]);
        for (int h = 0; h < HKV; h++) {
            const int len = skv_cache_head_len(c, l, h);
            const int32_t *pos = skv_cache_head_positions(c, l, h);
            assert_int_equal(len, SKV_MIN(want[l], T));
            /* window + window_keep: the last 11 positions are all there */
            for (int i = 1; i <= W + 3; i++) assert_int_equal(pos[len - i], T - i);
        }
    }
    skv_compress_info_free(&info);
    skv_context_free(ctx);
    skv_context_free(base);
}

/* ---- errors leave the cache unchanged
 * ------------------------------------------------------------ */

static void expect_error(skv_context *ctx, const skv_compress_params *p, skv_status want,
                         const char *needle) {
    snap s = snap_take(skv_context_cache_const(ctx));
    skv_err err = {0};
    skv_compress_info info;
    memset(&info, 0xab, sizeof info);
    skv_status st = skv_compress(ctx, p, &info, &err);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("expected status %d with '%s', got %d: %s", (int)want, needle, (int)st, err.msg);
    assert_null(info.kept); /* zeroed, safe to free */
    skv_compress_info_free(&info);
    snap_check_free(&s, skv_context_cache_const(ctx));
}

/* A NaN key (what a NaN weight puts in the cache; skv_forward says SKV_ERR_NUMERIC then): every
 * policy that scores from the keys refuses with SKV_ERR_NUMERIC, naming the head, and
 * leaves the cache as it was; those that do not read them (sink_recent, random) compress, and
 * keydiff, which takes such a key for one without a direction. */
static void test_nan_keys(void **state) {
    (void)state;
    const int T = 40, W = 8;
    const char *scorers[] = {"attention", "pyramid", "knorm", "tova", "adakv"};
    for (int k = 0; k < 8; k++) {
        skv_context *ctx = new_ctx(W, 0);
        feed(ctx, toks, T, NULL);
        const skv_cache_head *hd = skv_cache_head_at(skv_context_cache(ctx), 1, 0);
        const float nan = NAN;
        memcpy(hd->k + 3 * skv_context_cache(ctx)->row_bytes, &nan, sizeof nan); /* f32 row */
        /* keydiff reads a key without a finite norm as one without a direction (cosine 0) */
        const char *pol = k < 5    ? scorers[k]
                          : k == 5 ? "keydiff"
                          : k == 6 ? "sink_recent"
                                   : "random";
        skv_compress_params p = params_for(pol, 0.5, SKV_PROTOCOL_ENGINE, NULL, W);
        p.window_keep = 0;
        if (k < 5) {
            expect_error(ctx, &p, SKV_ERR_NUMERIC, "of layer 1 kv head 0 NaN");
        } else {
            skv_compress_info info;
            compress_ok(ctx, &p, &info);
            skv_compress_info_free(&info);
        }
        skv_context_free(ctx);
    }
}

static void test_errors(void **state) {
    (void)state;
    const int T = 20, W = 4;
    skv_context *ctx = new_ctx(0, 0);
    feed(ctx, toks, T, NULL);
    skv_compress_params p;

    p = params_for("scissorhands", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "unknown policy 'scissorhands' (valid: sink_recent");
    p = params_for(NULL, 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "no policy");
    const double bad_keep[] = {0.0, -0.1, 1.0000001, 2.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_keep / sizeof bad_keep[0]; i++) {
        p = params_for("random", bad_keep[i], SKV_PROTOCOL_SEED, NULL, 0);
        expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "keep_frac must be in (0, 1]");
    }
    p = params_for("attention", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "needs a window");
    p = params_for("pyramid", 0.5, SKV_PROTOCOL_SEED, NULL, W); /* tokens missing */
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "needs a window");
    p = params_for("snapkv", 0.5, SKV_PROTOCOL_ENGINE, NULL, 0);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "needs a window");
    p = params_for("attention", 0.5, SKV_PROTOCOL_SEED, toks + T, W);
    p.kernel = 0;
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "kernel");
    p.kernel = 7;
    p.window_keep = -1;
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "window_keep");
    p = params_for("sink_recent", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    p.sinks = -2;
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "sinks");
    p = params_for("sink_recent", 0.5, (skv_protocol)5, NULL, 0);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "protocol");
    /* engine without a capture: a state error that says how to fix it */
    p = params_for("attention", 0.5, SKV_PROTOCOL_ENGINE, NULL, W);
    expect_error(ctx, &p, SKV_ERR_STATE, "capture_window >= 4");
    /* engine window as long as the cache */
    p = params_for("sink_recent", 0.5, SKV_PROTOCOL_ENGINE, NULL, T);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "shorter than the cache");
    /* a failing window pass (bad token id) on the clone leaves the prefix untouched */
    int32_t bad[4] = {1, 2, 999999, 3};
    p = params_for("attention", 0.5, SKV_PROTOCOL_SEED, bad, 4);
    snap s = snap_take(skv_context_cache_const(ctx));
    skv_err err = {0};
    assert_int_not_equal(skv_compress(ctx, &p, NULL, &err), SKV_OK);
    snap_check_free(&s, skv_context_cache_const(ctx));
    skv_context_free(ctx);

    /* seed window that does not fit in the context */
    ctx = new_ctx(0, T + 2);
    feed(ctx, toks, T, NULL);
    p = params_for("attention", 0.5, SKV_PROTOCOL_SEED, toks + T, W);
    expect_error(ctx, &p, SKV_ERR_INVALID_ARG, "does not fit");
    /* already compressed, then compressed again */
    p = params_for("sink_recent", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    compress_ok(ctx, &p, NULL);
    expect_error(ctx, &p, SKV_ERR_STATE, "already compressed");
    skv_context_free(ctx);

    /* empty cache */
    ctx = new_ctx(0, 0);
    p = params_for("random", 0.5, SKV_PROTOCOL_SEED, NULL, 0);
    expect_error(ctx, &p, SKV_ERR_STATE, "empty");
    /* engine capture that does not end at T (a later call captured nothing) */
    skv_context_free(ctx);
    ctx = new_ctx(W, 0);
    feed(ctx, toks, T, NULL);
    feed(ctx, toks + T, 2, NULL); /* captures 2 < W */
    p = params_for("attention", 0.5, SKV_PROTOCOL_ENGINE, NULL, W);
    expect_error(ctx, &p, SKV_ERR_STATE, "captured 2");
    skv_context_free(ctx);

    assert_int_equal(skv_compress(NULL, &p, NULL, NULL), SKV_ERR_INVALID_ARG);
    skv_compress_info_free(NULL);
}

/* ---- the CLI ------------------------------------------------------------------------------------
 */

static char *run_cli(const char *args, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s compress -m %s %s 2>/dev/null", test_cli(),
             test_model_path("stories260K/stories260K.gguf"), args);
    char *out = test_run(cmd, status);
    assert_non_null(out);
    return out;
}

static void test_cli_compress(void **state) {
    (void)state;
    if (access(test_cli(), X_OK) != 0) {
        fprintf(stderr, "skipping: no CLI at %s (set SKV_CLI)\n", test_cli());
        skip();
    }
    /* sink_recent on the prompt "Once upon a time": BOS + its tokens */
    const char *prompt = "Once upon a time, there was a little girl";
    int32_t t[64];
    const int T = skv_tokenize(skv_model_vocab(model), prompt, strlen(prompt), true, t, 64);
    const int keep = skv_policy_keep(0.5, T);
    int st = -1;
    char args[512];
    snprintf(args, sizeof args, "-t 1 -p '%s' --policy streaming --keep 0.5 --sinks 2 --json",
             prompt);
    char *out = run_cli(args, &st);
    assert_int_equal(st, 0);
    char want[1024];
    snprintf(want, sizeof want,
             "\"policy\": \"sink_recent\", \"keep_frac\": 0.5, \"T\": %d, "
             "\"keep\": %d",
             T, keep);
    if (!strstr(out, want)) fail_msg("missing '%s' in %s", want, out);
    /* every head: 0, 1 then the last keep - 2 positions */
    int n = snprintf(want, sizeof want, "[0, 1");
    for (int p = T - (keep - 2); p < T; p++)
        n += snprintf(want + n, sizeof want - (size_t)n, ", %d", p);
    snprintf(want + n, sizeof want - (size_t)n, "]");
    char *layers = strstr(out, "\"layers\": [[");
    assert_non_null(layers);
    int heads = 0;
    for (char *q = strstr(layers, want); q; q = strstr(q + 1, want)) heads++;
    assert_int_equal(heads, L * HKV);
    assert_non_null(strstr(out, "\"protocol\": \"seed\", \"positions\": \"original\""));
    assert_null(strstr(out, "layer_budgets"));
    free(out);

    /* pyramid reports its budgets, window tokens; the summary form prints no JSON */
    snprintf(args, sizeof args, "-t 1 -p '%s' --policy pyramidkv --keep 0.5 --window 4 --json",
             prompt);
    out = run_cli(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\"layer_budgets\": ["));
    assert_non_null(strstr(out, "\"window_tokens\": 4"));
    free(out);
    snprintf(args, sizeof args,
             "-t 1 -p '%s' --policy snapkv --keep 0.5 --window 4 "
             "--protocol engine",
             prompt);
    out = run_cli(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "policy attention, engine protocol"));
    free(out);

    /* --kv-type: the same selection, the bytes of that type (stories260K: 4 kv heads of 8
     * per layer, 5 layers; an entry is a K and a V row plus an int32 position) */
    const int per_entry[2] = {2 * 8 * 4 + 4, 2 * 8 * 2 + 4};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "-t 1 -p '%s' --policy knorm --keep 0.5 --kv-type %s --json",
                 prompt, i ? "f16" : "f32");
        out = run_cli(args, &st);
        assert_int_equal(st, 0);
        snprintf(want, sizeof want, "\"bytes_before\": %d, \"bytes_after\": %d",
                 L * HKV * T * per_entry[i], L * HKV * keep * per_entry[i]);
        if (!strstr(out, want)) fail_msg("missing '%s' in %s", want, out);
        free(out);
    }

    /* bad input: exit status 2 and nothing on stdout */
    const char *bad[] = {
        "-p 'Once' --policy random --keep 0.5 --kv-type q4_0",
        "-p 'Once' --policy scissorhands --keep 0.5",
        "-p 'Once' --policy random --keep 0",
        "-p 'Once' --policy random --keep 1.5",
        "-p 'Once' --policy attention --keep 0.5",
        "-p 'Once upon' --policy attention --keep 0.5 --window 50",
        "-p 'Once upon' --policy attention --keep 0.5 --window 1 --kernel 0",
        "-p 'Once' --policy random --keep 0.5 --frobnicate",
        "-p 'Once' --policy random --keep",
        "-p 'Once' --policy random --keep 0.5 --protocol fast",
        "--policy random --keep 0.5",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = run_cli(bad[i], &st);
        if (st != 2 || out[0]) fail_msg("'%s': status %d, stdout '%s'", bad[i], st, out);
        free(out);
    }
    out = run_cli("--help", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--window-text"));
    free(out);
}

static int setup(void **state) {
    (void)state;
    skv_err err = {0};
    model = skv_model_load(test_stories_path(), &err);
    if (!model) {
        fprintf(stderr, "load failed: %s\n", err.msg);
        return -1;
    }
    const skv_hparams *hp = skv_model_hparams(model);
    L = hp->n_layer, HQ = hp->n_head, HKV = hp->n_head_kv, HD = hp->head_dim, V = hp->n_vocab;
    if (L > 16 || HD > 64) return -1;
    n_toks = skv_tokenize(skv_model_vocab(model), TEXT, strlen(TEXT), true, toks, 256);
    return n_toks >= 60 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    skv_model_free(model);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_scores_seed),
        cmocka_unit_test(test_window_scores_engine),
        cmocka_unit_test(test_topk_valid),
        cmocka_unit_test(test_mask_equivalence_seed),
        cmocka_unit_test(test_mask_equivalence_engine),
        cmocka_unit_test(test_mask_equivalence_rerotate),
        cmocka_unit_test(test_keep_all_identity),
        cmocka_unit_test(test_clone_isolation),
        cmocka_unit_test(test_rerotate_keys),
        cmocka_unit_test(test_shared_policies_exact),
        cmocka_unit_test(test_engine_edges),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nan_keys),
        cmocka_unit_test(test_cli_compress),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
