/* ref_forward.c — see ref_forward.h. Deliberately simple: every weight is dequantized to
 * double once, and each call recomputes the whole sequence. */
#include "ref_forward.h"

#include "gguf.h"
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ref_model {
    int n_vocab, d, n_layer, n_head, n_kv, hd, ff, n_rot;
    double theta, eps;
    double *embd, *out_norm, *out;              /* [V,d], [d], [V,d] */
    double **attn_norm, **wq, **wk, **wv, **wo; /* per layer */
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

static int64_t get_i(const skv_gguf *g, const char *key, int64_t dflt) {
    int64_t v;
    return skv_gguf_get_int(g, key, &v) ? v : dflt;
}

ref_model *ref_model_load(const char *path) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(path, &err);
    if (!g) return NULL;
    ref_model *m = calloc(1, sizeof *m);
    m->d = (int)get_i(g, "llama.embedding_length", 0);
    m->n_layer = (int)get_i(g, "llama.block_count", 0);
    m->n_head = (int)get_i(g, "llama.attention.head_count", 0);
    m->n_kv = (int)get_i(g, "llama.attention.head_count_kv", m->n_head);
    m->ff = (int)get_i(g, "llama.feed_forward_length", 0);
    m->hd = m->d / m->n_head;
    m->n_rot = (int)get_i(g, "llama.rope.dimension_count", m->hd);
    double v;
    m->theta = skv_gguf_get_float(g, "llama.rope.freq_base", &v) ? v : 10000.0;
    m->eps = skv_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &v) ? v : 1e-5;
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
    double ***fields[] = {&m->attn_norm, &m->wq,     &m->wk,   &m->wv,    &m->wo,
                          &m->ffn_norm,  &m->w_gate, &m->w_up, &m->w_down};
    const char *names[] = {"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
                           "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
    for (size_t f = 0; f < 9; f++) {
        *fields[f] = calloc(L, sizeof(double *));
        for (size_t l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%zu.%s.weight", l, names[f]);
            (*fields[f])[l] = load_tensor(g, name, NULL, NULL);
        }
    }
    skv_gguf_close(g);
    return m;
}

void ref_model_free(ref_model *m) {
    if (!m) return;
    double **fields[] = {m->attn_norm, m->wq,     m->wk,   m->wv,    m->wo,
                         m->ffn_norm,  m->w_gate, m->w_up, m->w_down};
    for (size_t f = 0; f < 9; f++) {
        for (int l = 0; l < m->n_layer; l++) free(fields[f][l]);
        free(fields[f]);
    }
    free(m->embd);
    free(m->out_norm);
    free(m->out);
    free(m);
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

/* o[rows] = W[rows, cols] x[cols] */
static void matvec(double *o, const double *W, const double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += W[(size_t)r * cols + c] * x[c];
        o[r] = s;
    }
}

static void rope(double *x, int n_rot, int pos, double theta) {
    for (int i = 0; i < n_rot; i += 2) {
        double a = pos * pow(theta, -(double)i / n_rot);
        double x0 = x[i], x1 = x[i + 1];
        x[i] = x0 * cos(a) - x1 * sin(a);
        x[i + 1] = x0 * sin(a) + x1 * cos(a);
    }
}

void ref_forward(const ref_model *m, const int32_t *tokens, int n, double *logits, ref_keep_fn keep,
                 void *user) {
    int d = m->d, hd = m->hd, dq = m->n_head * hd, dkv = m->n_kv * hd, g = m->n_head / m->n_kv;
    double *x = calloc((size_t)n * d, sizeof(double)); /* [n, d] */
    double *xb = calloc((size_t)d, sizeof(double));
    double *q = calloc((size_t)n * dq, sizeof(double));  /* [n, n_head, hd] */
    double *k = calloc((size_t)n * dkv, sizeof(double)); /* [n, n_kv, hd] */
    double *v = calloc((size_t)n * dkv, sizeof(double));
    double *att = calloc((size_t)dq, sizeof(double));
    double *tmp = calloc((size_t)(d > m->ff ? d : m->ff), sizeof(double));
    double *h1 = calloc((size_t)m->ff, sizeof(double)), *h3 = calloc((size_t)m->ff, sizeof(double));
    double *sc = calloc((size_t)n, sizeof(double));
    for (int t = 0; t < n; t++)
        memcpy(x + (size_t)t * d, m->embd + (size_t)tokens[t] * d, (size_t)d * sizeof(double));
    for (int l = 0; l < m->n_layer; l++) {
        for (int t = 0; t < n; t++) {
            rmsnorm(xb, x + (size_t)t * d, m->attn_norm[l], d, m->eps);
            matvec(q + (size_t)t * dq, m->wq[l], xb, dq, d);
            matvec(k + (size_t)t * dkv, m->wk[l], xb, dkv, d);
            matvec(v + (size_t)t * dkv, m->wv[l], xb, dkv, d);
            for (int h = 0; h < m->n_head; h++)
                rope(q + (size_t)t * dq + h * hd, m->n_rot, t, m->theta);
            for (int h = 0; h < m->n_kv; h++)
                rope(k + (size_t)t * dkv + h * hd, m->n_rot, t, m->theta);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < m->n_head; h++) {
                int kvh = h / g;
                const double *qh = q + (size_t)t * dq + h * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    sc[j] = -INFINITY;
                    if (keep && !keep(l, kvh, j, user)) continue;
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += qh[i] * k[(size_t)j * dkv + kvh * hd + i];
                    sc[j] = s / sqrt((double)hd);
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
            matvec(tmp, m->wo[l], att, d, dq);
            for (int i = 0; i < d; i++) x[(size_t)t * d + i] += tmp[i];
            rmsnorm(xb, x + (size_t)t * d, m->ffn_norm[l], d, m->eps);
            matvec(h1, m->w_gate[l], xb, m->ff, d);
            matvec(h3, m->w_up[l], xb, m->ff, d);
            for (int i = 0; i < m->ff; i++) h1[i] = h1[i] / (1 + exp(-h1[i])) * h3[i];
            matvec(tmp, m->w_down[l], h1, d, m->ff);
            for (int i = 0; i < d; i++) x[(size_t)t * d + i] += tmp[i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm(xb, x + (size_t)t * d, m->out_norm, d, m->eps);
        matvec(logits + (size_t)t * m->n_vocab, m->out, xb, m->n_vocab, d);
    }
    free(x);
    free(xb);
    free(q);
    free(k);
    free(v);
    free(att);
    free(tmp);
    free(h1);
    free(h3);
    free(sc);
}
