/* ref_forward.c — see ref_forward.h. Deliberately simple: every weight is dequantized to
 * double once, and each call recomputes the whole sequence. The architecture rules are written
 * here again from their definitions (not taken from src/model/arch.c), so the engine is checked
 * against an independent reading. */
#include "ref_forward.h"

#include "gguf.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ref_model {
    int n_vocab, d, n_layer, n_head, n_kv, hd, ff, n_rot;
    bool neox; /* qwen2, qwen3, phi3 turn (i, i + n_rot/2); llama, mistral3 (2i, 2i+1) */
    double theta, eps, freq_scale;
    double *freq_factors;       /* [n_rot/2] or NULL */
    double *lr_long, *lr_short; /* LongRoPE divisors [n_rot/2] or NULL; freq_factors is one */
    int n_ctx_train, n_ctx_orig;
    double attn_factor; /* LongRoPE, YaRN: scales the turned pairs (cos and sin) */
    double *yarn;       /* [n_rot/2] YaRN's interpolated inverse-frequency scale, or NULL */
    double temp_scale;  /* mistral3: Llama 4's attention temperature (0 = none) */
    double *embd, *out_norm, *out;                     /* [V,d], [d], [V,d] */
    double **attn_norm, **wq, **wk, **wv, **wo;        /* per layer */
    double **bq, **bk, **bv, **bo, **q_norm, **k_norm; /* per layer, entries may be NULL */
    double **ffn_norm, **w_gate, **w_up, **w_down;
};

static double *load_tensor(const skv_gguf *g, const char *name, int64_t *rows, int64_t *cols) {
    int64_t i = skv_gguf_find_tensor(g, name);
    if (i < 0) return NULL;
    const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
    int64_t c = t->ne[0], r = t->n_dims > 1 ? t->ne[1] : 1;
    double *out = malloc((size_t)(r * c) * sizeof(double));
    float *row = malloc((size_t)c * sizeof(float));
    size_t rb = skv_row_bytes(t->type, c);
    for (int64_t j = 0; j < r; j++) {
        skv_dequantize_row(t->type, (const uint8_t *)t->data + rb * (size_t)j, row, c);
        for (int64_t k = 0; k < c; k++) out[j * c + k] = row[k];
    }
    free(row);
    if (rows) *rows = r;
    if (cols) *cols = c;
    return out;
}

static const char *akey(const char *arch, const char *suffix) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s.%s", arch, suffix);
    return buf;
}

static int64_t get_i(const skv_gguf *g, const char *arch, const char *key, int64_t dflt) {
    int64_t v;
    return skv_gguf_get_int(g, akey(arch, key), &v) ? v : dflt;
}

static double get_f(const skv_gguf *g, const char *arch, const char *key, double dflt) {
    double v;
    return skv_gguf_get_float(g, akey(arch, key), &v) ? v : dflt;
}

static double *copy_rows(const double *src, int64_t r0, int64_t nr, int64_t cols) {
    double *o = malloc((size_t)(nr * cols) * sizeof(double));
    memcpy(o, src + r0 * cols, (size_t)(nr * cols) * sizeof(double));
    return o;
}

/* The per-layer tensor arrays, in the order of LAYER_NAMES. */
#define N_FIELDS 15
static const char *const LAYER_NAMES[N_FIELDS] = {
    "attn_norm.weight",   "attn_q.weight",      "attn_k.weight",      "attn_v.weight",
    "attn_output.weight", "attn_q.bias",        "attn_k.bias",        "attn_v.bias",
    "attn_output.bias",   "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight",
    "ffn_gate.weight",    "ffn_up.weight",      "ffn_down.weight"};

static void layer_fields(ref_model *m, double ***f[N_FIELDS]) {
    double ***src[N_FIELDS] = {&m->attn_norm, &m->wq,       &m->wk,     &m->wv,   &m->wo,
                               &m->bq,        &m->bk,       &m->bv,     &m->bo,   &m->q_norm,
                               &m->k_norm,    &m->ffn_norm, &m->w_gate, &m->w_up, &m->w_down};
    memcpy(f, src, sizeof src);
}

ref_model *ref_model_load(const char *path) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(path, &err);
    if (!g) return NULL;
    const char *arch = skv_gguf_get_str(g, "general.architecture");
    if (!arch) arch = "llama";
    ref_model *m = calloc(1, sizeof *m);
    m->neox = !strcmp(arch, "qwen2") || !strcmp(arch, "qwen3") || !strcmp(arch, "phi3");
    const bool mistral3 = !strcmp(arch, "mistral3"); /* YaRN's betas and log multiplier, and a
                                                        temperature, from the file */
    m->d = (int)get_i(g, arch, "embedding_length", 0);
    m->n_layer = (int)get_i(g, arch, "block_count", 0);
    m->n_head = (int)get_i(g, arch, "attention.head_count", 0);
    m->n_kv = (int)get_i(g, arch, "attention.head_count_kv", m->n_head);
    m->ff = (int)get_i(g, arch, "feed_forward_length", 0);
    m->hd = (int)get_i(g, arch, "attention.key_length", m->d / m->n_head);
    m->n_rot = (int)get_i(g, arch, "rope.dimension_count", m->hd);
    m->theta = get_f(g, arch, "rope.freq_base", 10000.0);
    m->eps = get_f(g, arch, "attention.layer_norm_rms_epsilon", 1e-5);
    m->freq_scale = 1.0;
    const char *st = skv_gguf_get_str(g, akey(arch, "rope.scaling.type"));
    if (st && !strcmp(st, "linear")) m->freq_scale = 1.0 / get_f(g, arch, "rope.scaling.factor", 1);
    m->freq_factors = load_tensor(g, "rope_freqs.weight", NULL, NULL);
    m->lr_long = load_tensor(g, "rope_factors_long.weight", NULL, NULL);
    m->lr_short = load_tensor(g, "rope_factors_short.weight", NULL, NULL);
    m->n_ctx_train = (int)get_i(g, arch, "context_length", 0);
    m->n_ctx_orig = (int)get_i(g, arch, "rope.scaling.original_context_length", m->n_ctx_train);
    m->attn_factor = get_f(g, arch, "rope.scaling.attn_factor", 1.0);
    if (st && !strcmp(st, "yarn")) { /* Hugging Face's _compute_yarn_parameters */
        double factor = get_f(g, arch, "rope.scaling.factor", 1), dim = m->n_rot;
        double beta_fast = mistral3 ? get_f(g, arch, "rope.scaling.yarn_beta_fast", 32) : 32;
        double beta_slow = mistral3 ? get_f(g, arch, "rope.scaling.yarn_beta_slow", 1) : 1;
        double mscale_all_dim =
            mistral3 ? get_f(g, arch, "rope.scaling.yarn_log_multiplier", 0) : 0;
        m->freq_scale = 1.0 / factor;
        double lo = floor(dim * log(m->n_ctx_orig / (beta_fast * 2 * M_PI)) / (2 * log(m->theta)));
        double hi = ceil(dim * log(m->n_ctx_orig / (beta_slow * 2 * M_PI)) / (2 * log(m->theta)));
        lo = fmax(lo, 0);
        hi = fmin(hi, dim - 1);
        if (lo == hi) hi += 0.001;
        m->yarn = malloc((size_t)(m->n_rot / 2) * sizeof(double));
        for (int j = 0; j < m->n_rot / 2; j++) {
            double ramp = fmin(fmax((j - lo) / (hi - lo), 0), 1), extrapolate = 1 - ramp;
            m->yarn[j] = m->freq_scale * (1 - extrapolate) + 1.0 * extrapolate;
        }
        /* get_mscale(factor, 1) / get_mscale(factor, mscale_all_dim), the divisor 1 without it */
        if (factor > 1)
            m->attn_factor *= (0.1 * log(factor) + 1) / (0.1 * mscale_all_dim * log(factor) + 1);
    }
    m->temp_scale = mistral3 ? get_f(g, arch, "attention.temperature_scale", 0) : 0;
    ref_model_set_n_ctx(m, 0);
    int64_t rows;
    m->embd = load_tensor(g, "token_embd.weight", &rows, NULL);
    m->n_vocab = (int)rows;
    m->out_norm = load_tensor(g, "output_norm.weight", NULL, NULL);
    m->out = load_tensor(g, "output.weight", NULL, NULL);
    if (!m->out) { /* tied */
        m->out = malloc((size_t)m->n_vocab * m->d * sizeof(double));
        memcpy(m->out, m->embd, (size_t)m->n_vocab * m->d * sizeof(double));
    }
    size_t L = (size_t)m->n_layer;
    double ***fields[N_FIELDS];
    layer_fields(m, fields);
    for (size_t f = 0; f < N_FIELDS; f++) {
        *fields[f] = calloc(L, sizeof(double *));
        for (size_t l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%zu.%s", l, LAYER_NAMES[f]);
            (*fields[f])[l] = load_tensor(g, name, NULL, NULL);
        }
    }
    int64_t dq = (int64_t)m->n_head * m->hd, dkv = (int64_t)m->n_kv * m->hd;
    for (size_t l = 0; l < L; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%zu.attn_qkv.weight", l);
        double *qkv = load_tensor(g, name, NULL, NULL);
        if (qkv) { /* rows [q | k | v] */
            m->wq[l] = copy_rows(qkv, 0, dq, m->d);
            m->wk[l] = copy_rows(qkv, dq, dkv, m->d);
            m->wv[l] = copy_rows(qkv, dq + dkv, dkv, m->d);
            free(qkv);
        }
        if (!m->w_gate[l]) { /* fused ffn_up: rows [gate | up] */
            double *gu = m->w_up[l];
            m->w_gate[l] = copy_rows(gu, 0, m->ff, m->d);
            m->w_up[l] = copy_rows(gu, m->ff, m->ff, m->d);
            free(gu);
        }
    }
    skv_gguf_close(g);
    return m;
}

void ref_model_free(ref_model *m) {
    if (!m) return;
    double ***fields[N_FIELDS];
    layer_fields(m, fields);
    for (size_t f = 0; f < N_FIELDS; f++) {
        for (int l = 0; l < m->n_layer; l++) free((*fields[f])[l]);
        free(*fields[f]);
    }
    if (m->freq_factors != m->lr_long && m->freq_factors != m->lr_short) free(m->freq_factors);
    free(m->lr_long);
    free(m->lr_short);
    free(m->yarn);
    free(m->embd);
    free(m->out_norm);
    free(m->out);
    free(m);
}

void ref_model_set_n_ctx(ref_model *m, int n_ctx) {
    if (!m->lr_long) return;
    m->freq_factors =
        (n_ctx > 0 ? n_ctx : m->n_ctx_train) > m->n_ctx_orig ? m->lr_long : m->lr_short;
}

int ref_model_n_vocab(const ref_model *m) {
    return m->n_vocab;
}

static void rmsnorm(double *o, const double *x, const double *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = x[i] * s * w[i];
}

/* o[rows] = W[rows, cols] x[cols] (+ b) */
static void matvec(double *o, const double *W, const double *x, int rows, int cols,
                   const double *b) {
    for (int r = 0; r < rows; r++) {
        double s = b ? b[r] : 0;
        for (int c = 0; c < cols; c++) s += W[(size_t)r * cols + c] * x[c];
        o[r] = s;
    }
}

static void rotate(const ref_model *m, double *x, double pos, double scale) {
    int half = m->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double a =
            pos * (m->yarn ? m->yarn[i] : m->freq_scale) * pow(m->theta, -2.0 * i / m->n_rot);
        if (m->freq_factors) a /= m->freq_factors[i];
        int i0 = m->neox ? i : 2 * i, i1 = m->neox ? i + half : 2 * i + 1;
        double x0 = x[i0], x1 = x[i1], c = scale * cos(a), s = scale * sin(a);
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

void ref_rope(const ref_model *m, double *x, double pos) {
    rotate(m, x, pos, m->attn_factor);
}

void ref_turn(const ref_model *m, double *x, double delta) {
    rotate(m, x, delta, 1.0);
}

typedef struct keep_adapter {
    ref_keep_fn keep;
    void *user;
} keep_adapter;

static bool keep_visible(int l, int h, int qpos, int kpos, void *u) {
    const keep_adapter *a = u;
    return a->keep(l, h, kpos, a->user);
}

void ref_forward(const ref_model *m, const int32_t *tokens, int n, double *logits, ref_keep_fn keep,
                 void *user) {
    keep_adapter a = {keep, user};
    ref_ctl ctl = {keep ? keep_visible : NULL, NULL, &a};
    ref_forward_ctl(m, tokens, n, logits, &ctl);
}

void ref_forward_ctl(const ref_model *m, const int32_t *tokens, int n, double *logits,
                     const ref_ctl *ctl) {
    int d = m->d, hd = m->hd, dq = m->n_head * hd, dkv = m->n_kv * hd, g = m->n_head / m->n_kv;
    double *x = calloc((size_t)n * d, sizeof(double)); /* [n, d] */
    double *xb = calloc((size_t)d, sizeof(double));
    double *q = calloc((size_t)n * dq, sizeof(double));  /* [n, n_head, hd] before RoPE */
    double *k = calloc((size_t)n * dkv, sizeof(double)); /* [n, n_kv, hd] before RoPE */
    double *v = calloc((size_t)n * dkv, sizeof(double));
    double *qr = calloc((size_t)n * dq, sizeof(double)); /* rotated at natural positions */
    double *kr = calloc((size_t)n * dkv, sizeof(double));
    double *att = calloc((size_t)dq, sizeof(double));
    double *tmp = calloc((size_t)(d > m->ff ? d : m->ff), sizeof(double));
    double *h1 = calloc((size_t)m->ff, sizeof(double)), *h3 = calloc((size_t)m->ff, sizeof(double));
    double *sc = calloc((size_t)n, sizeof(double));
    double *qq = calloc((size_t)hd, sizeof(double)), *kk = calloc((size_t)hd, sizeof(double));
    for (int t = 0; t < n; t++)
        memcpy(x + (size_t)t * d, m->embd + (size_t)tokens[t] * d, (size_t)d * sizeof(double));
    for (int l = 0; l < m->n_layer; l++) {
        for (int t = 0; t < n; t++) {
            rmsnorm(xb, x + (size_t)t * d, m->attn_norm[l], d, m->eps);
            double *qt = q + (size_t)t * dq, *kt = k + (size_t)t * dkv;
            matvec(qt, m->wq[l], xb, dq, d, m->bq[l]);
            matvec(kt, m->wk[l], xb, dkv, d, m->bk[l]);
            matvec(v + (size_t)t * dkv, m->wv[l], xb, dkv, d, m->bv[l]);
            if (m->q_norm[l]) {
                for (int h = 0; h < m->n_head; h++)
                    rmsnorm(qt + h * hd, qt + h * hd, m->q_norm[l], hd, m->eps);
                for (int h = 0; h < m->n_kv; h++)
                    rmsnorm(kt + h * hd, kt + h * hd, m->k_norm[l], hd, m->eps);
            }
            memcpy(qr + (size_t)t * dq, qt, (size_t)dq * sizeof(double));
            memcpy(kr + (size_t)t * dkv, kt, (size_t)dkv * sizeof(double));
            for (int h = 0; h < m->n_head; h++) ref_rope(m, qr + (size_t)t * dq + h * hd, t);
            for (int h = 0; h < m->n_kv; h++) ref_rope(m, kr + (size_t)t * dkv + h * hd, t);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < m->n_head; h++) {
                int kvh = h / g;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    sc[j] = -INFINITY;
                    if (ctl && ctl->visible && !ctl->visible(l, kvh, t, j, ctl->user)) continue;
                    const double *qh = qr + (size_t)t * dq + h * hd;
                    const double *kh = kr + (size_t)j * dkv + kvh * hd;
                    if (ctl && ctl->rot) {
                        double qp = t, kp = j;
                        ctl->rot(l, kvh, t, j, &qp, &kp, ctl->user);
                        memcpy(qq, q + (size_t)t * dq + h * hd, (size_t)hd * sizeof(double));
                        memcpy(kk, k + (size_t)j * dkv + kvh * hd, (size_t)hd * sizeof(double));
                        ref_rope(m, qq, qp);
                        ref_rope(m, kk, kp);
                        qh = qq;
                        kh = kk;
                    }
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += qh[i] * kh[i];
                    sc[j] = s / sqrt((double)hd);
                    if (m->temp_scale) /* the query scaled by its logical position's temperature */
                        sc[j] *= 1 + m->temp_scale * log(floor((double)t / m->n_ctx_orig) + 1);
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
                double *o = att + h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0;
                for (int j = 0; j <= t; j++) {
                    if (sc[j] == -INFINITY) continue;
                    double p = exp(sc[j] - mx) / sum;
                    for (int i = 0; i < hd; i++) o[i] += p * v[(size_t)j * dkv + kvh * hd + i];
                }
            }
            matvec(tmp, m->wo[l], att, d, dq, m->bo[l]);
            for (int i = 0; i < d; i++) x[(size_t)t * d + i] += tmp[i];
            rmsnorm(xb, x + (size_t)t * d, m->ffn_norm[l], d, m->eps);
            matvec(h1, m->w_gate[l], xb, m->ff, d, NULL);
            matvec(h3, m->w_up[l], xb, m->ff, d, NULL);
            for (int i = 0; i < m->ff; i++) h1[i] = h1[i] / (1 + exp(-h1[i])) * h3[i];
            matvec(tmp, m->w_down[l], h1, d, m->ff, NULL);
            for (int i = 0; i < d; i++) x[(size_t)t * d + i] += tmp[i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm(xb, x + (size_t)t * d, m->out_norm, d, m->eps);
        matvec(logits + (size_t)t * m->n_vocab, m->out, xb, m->n_vocab, d, NULL);
    }
    free(x);
    free(xb);
    free(q);
    free(k);
    free(v);
    free(qr);
    free(kr);
    free(att);
    free(tmp);
    free(h1);
    free(h3);
    free(sc);
    free(qq);
    free(kk);
}
