/* model.c — loads a Llama-architecture GGUF: hparams from metadata, validated tensor views into
 * the mapping, the vocabulary. Nothing is copied except the (small) norm vectors, which are kept
 * as float32 whatever their stored type. */
#include "model.h"
#include "kernels.h"
#include "tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool get_hparam_int(const skv_gguf *g, const char *key, int64_t lo, int64_t hi, int *out,
                           bool required, skv_err *err) {
    int64_t v;
    if (skv_gguf_find_key(g, key) < 0) {
        if (required) skv_err_set(err, SKV_ERR_FORMAT, "missing hyperparameter '%s'", key);
        return !required;
    }
    if (!skv_gguf_get_int(g, key, &v)) {
        skv_err_set(err, SKV_ERR_FORMAT, "hyperparameter '%s' is not an integer", key);
        return false;
    }
    if (v < lo || v > hi) {
        skv_err_set(err, SKV_ERR_FORMAT, "hyperparameter '%s' = %lld is out of range [%lld, %lld]",
                    key, (long long)v, (long long)lo, (long long)hi);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool get_hparam_float(const skv_gguf *g, const char *key, double lo, double hi, float *out,
                             skv_err *err) {
    double v;
    if (skv_gguf_find_key(g, key) < 0) return true; /* keep the default */
    if (!skv_gguf_get_float(g, key, &v) || !(v >= lo && v <= hi)) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "hyperparameter '%s' is missing a valid value in "
                    "[%g, %g]",
                    key, lo, hi);
        return false;
    }
    *out = (float)v;
    return true;
}

/* Finds a tensor and checks its shape: ne0 x ne1 (ne1 = 0 for a vector). Matrices must be of a
 * type the matmul supports. */
static bool get_tensor(const skv_gguf *g, const char *name, int64_t ne0, int64_t ne1, skv_weight *w,
                       bool required, skv_err *err) {
    int64_t i = skv_gguf_find_tensor(g, name);
    if (i < 0) {
        if (required) skv_err_set(err, SKV_ERR_FORMAT, "missing tensor '%s'", name);
        return false;
    }
    const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
    int want_dims = ne1 ? 2 : 1;
    int64_t n2 = t->n_dims > 2 ? t->ne[2] * (t->n_dims > 3 ? t->ne[3] : 1) : 1;
    if (t->ne[0] != ne0 || (want_dims == 2 && t->ne[1] != ne1) ||
        (want_dims == 1 && t->n_dims > 1 && t->ne[1] != 1) || n2 != 1) {
        char got[96];
        snprintf(got, sizeof got, "[%lld, %lld%s]", (long long)t->ne[0],
                 (long long)(t->n_dims > 1 ? t->ne[1] : 1), n2 != 1 ? ", ..." : "");
        if (want_dims == 2)
            skv_err_set(err, SKV_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld, %lld]",
                        name, got, (long long)ne0, (long long)ne1);
        else
            skv_err_set(err, SKV_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld]", name, got,
                        (long long)ne0);
        return false;
    }
    if (!skv_type_supported(t->type)) {
        skv_err_set(err, SKV_ERR_UNSUPPORTED, "tensor '%s' has unsupported type id %d", name,
                    (int)t->type);
        return false;
    }
    w->data = t->data;
    w->type = t->type;
    w->rows = want_dims == 2 ? ne1 : 1;
    w->cols = ne0;
    return true;
}

/* Norm vectors are copied to float32 so every kernel can take them as float. */
static bool get_norm(skv_model *m, const char *name, skv_weight *w, skv_err *err) {
    skv_weight t;
    if (!get_tensor(m->gguf, name, m->hp.n_embd, 0, &t, true, err)) return false;
    float *f = malloc((size_t)m->hp.n_embd * sizeof(float));
    if (!f) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return false;
    }
    skv_dequantize_row(t.type, t.data, f, m->hp.n_embd);
    t.data = f; /* only owned copies ever land in the model, so free() is always right */
    t.type = SKV_TYPE_F32;
    *w = t;
    return true;
}

static uint64_t weight_bytes(const skv_weight *w) {
    return (uint64_t)skv_row_bytes(w->type, w->cols) * (uint64_t)w->rows;
}

void skv_model_free(skv_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int l = 0; l < m->hp.n_layer; l++) {
            free((void *)m->layers[l].attn_norm.data);
            free((void *)m->layers[l].ffn_norm.data);
        }
    }
    free((void *)m->output_norm.data);
    free(m->layers);
    skv_vocab_free(m->vocab);
    skv_gguf_close(m->gguf);
    free(m);
}

static bool load_hparams(skv_model *m, skv_err *err) {
    const skv_gguf *g = m->gguf;
    skv_hparams *hp = &m->hp;
    const char *arch = skv_gguf_get_str(g, "general.architecture");
    if (!arch) {
        skv_err_set(err, SKV_ERR_FORMAT, "missing 'general.architecture'");
        return false;
    }
    if (strcmp(arch, "llama") != 0) {
        skv_err_set(err, SKV_ERR_UNSUPPORTED,
                    "architecture '%s' is not supported (sparsekv runs 'llama')", arch);
        return false;
    }
    const int big = 1 << 24;
    if (!get_hparam_int(g, "llama.embedding_length", 1, big, &hp->n_embd, true, err) ||
        !get_hparam_int(g, "llama.block_count", 1, 4096, &hp->n_layer, true, err) ||
        !get_hparam_int(g, "llama.feed_forward_length", 1, big, &hp->n_ff, true, err) ||
        !get_hparam_int(g, "llama.attention.head_count", 1, 4096, &hp->n_head, true, err) ||
        !get_hparam_int(g, "llama.context_length", 1, 1 << 28, &hp->n_ctx_train, true, err))
        return false;
    hp->n_head_kv = hp->n_head;
    if (!get_hparam_int(g, "llama.attention.head_count_kv", 1, 4096, &hp->n_head_kv, false, err))
        return false;
    if (hp->n_embd % hp->n_head) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "embedding length %d is not a multiple of the head "
                    "count %d",
                    hp->n_embd, hp->n_head);
        return false;
    }
    if (hp->n_head % hp->n_head_kv) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "head count %d is not a multiple of the kv head "
                    "count %d",
                    hp->n_head, hp->n_head_kv);
        return false;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_rot = hp->head_dim;
    if (!get_hparam_int(g, "llama.rope.dimension_count", 2, hp->head_dim, &hp->n_rot, false, err))
        return false;
    if (hp->n_rot % 2) {
        skv_err_set(err, SKV_ERR_FORMAT, "rope dimension count %d is odd", hp->n_rot);
        return false;
    }
    hp->rope_theta = 10000.0f;
    hp->norm_eps = 1e-5f;
    if (!get_hparam_float(g, "llama.rope.freq_base", 1e-3, 1e12, &hp->rope_theta, err) ||
        !get_hparam_float(g, "llama.attention.layer_norm_rms_epsilon", 0, 1, &hp->norm_eps, err))
        return false;
    return true;
}

static bool load_tensors(skv_model *m, skv_err *err) {
    const skv_gguf *g = m->gguf;
    const skv_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, dq = (int64_t)hp->n_head * hp->head_dim,
            dkv = (int64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;

    int64_t ti = skv_gguf_find_tensor(g, "token_embd.weight");
    if (ti < 0) {
        skv_err_set(err, SKV_ERR_FORMAT, "missing tensor 'token_embd.weight'");
        return false;
    }
    const skv_gguf_tensor *te = skv_gguf_tensor_at(g, ti);
    if (te->ne[1] < 1 || te->ne[1] > (1 << 24)) {
        skv_err_set(err, SKV_ERR_FORMAT, "tensor 'token_embd.weight' has an invalid vocab size");
        return false;
    }
    m->hp.n_vocab = (int)te->ne[1];
    if (!get_tensor(g, "token_embd.weight", d, m->hp.n_vocab, &m->tok_embd, true, err))
        return false;
    if (!get_norm(m, "output_norm.weight", &m->output_norm, err)) return false;
    if (get_tensor(g, "output.weight", d, m->hp.n_vocab, &m->output, false, err)) {
        m->hp.tied_output = false;
    } else {
        if (skv_gguf_find_tensor(g, "output.weight") >= 0) return false; /* present but wrong */
        m->output = m->tok_embd;
        m->hp.tied_output = true;
    }

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return false;
    }
    char name[96];
#define LAYER_TENSOR(field, suffix, ne0, ne1)                                                      \
    snprintf(name, sizeof name, "blk.%d." suffix, l);                                              \
    if (!get_tensor(g, name, ne0, ne1, &L->field, true, err)) return false;
    for (int l = 0; l < hp->n_layer; l++) {
        skv_layer_weights *L = &m->layers[l];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if (!get_norm(m, name, &L->attn_norm, err)) return false;
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if (!get_norm(m, name, &L->ffn_norm, err)) return false;
        LAYER_TENSOR(wq, "attn_q.weight", d, dq)
        LAYER_TENSOR(wk, "attn_k.weight", d, dkv)
        LAYER_TENSOR(wv, "attn_v.weight", d, dkv)
        LAYER_TENSOR(wo, "attn_output.weight", dq, d)
        LAYER_TENSOR(w_gate, "ffn_gate.weight", d, ff)
        LAYER_TENSOR(w_up, "ffn_up.weight", d, ff)
        LAYER_TENSOR(w_down, "ffn_down.weight", ff, d)
    }
#undef LAYER_TENSOR

    /* What a token reads: every matrix once, the output matrix, the norms. */
    uint64_t total = weight_bytes(&m->output) + (uint64_t)d * 4 * (1 + 2 * (uint64_t)hp->n_layer);
    uint64_t by_type[SKV_TYPE_COUNT] = {0};
    for (int l = 0; l < hp->n_layer; l++) {
        const skv_weight *ws[] = {&m->layers[l].wq,    &m->layers[l].wk,     &m->layers[l].wv,
                                  &m->layers[l].wo,    &m->layers[l].w_gate, &m->layers[l].w_up,
                                  &m->layers[l].w_down};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
            total += weight_bytes(ws[k]);
            by_type[ws[k]->type] += weight_bytes(ws[k]);
        }
    }
    m->weight_bytes = total;
    m->weight_type = SKV_TYPE_F32;
    for (int t = 0; t < SKV_TYPE_COUNT; t++)
        if (by_type[t] > by_type[m->weight_type]) m->weight_type = (skv_type)t;
    return true;
}

skv_model *skv_model_load(const char *path, skv_err *err) {
    skv_model *m = calloc(1, sizeof *m);
    if (!m) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->gguf = skv_gguf_open(path, err);
    if (!m->gguf || !load_hparams(m, err) || !load_tensors(m, err)) goto fail;
    m->vocab = skv_vocab_from_gguf(m->gguf, err);
    if (!m->vocab) goto fail;
    if (skv_vocab_n_tokens(m->vocab) != m->hp.n_vocab) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "the vocabulary has %d tokens but token_embd.weight has %d rows",
                    skv_vocab_n_tokens(m->vocab), m->hp.n_vocab);
        goto fail;
    }
    return m;
fail:
    skv_model_free(m);
    return NULL;
}

const skv_hparams *skv_model_hparams(const skv_model *m) {
    return &m->hp;
}
const skv_vocab *skv_model_vocab(const skv_model *m) {
    return m->vocab;
}
uint64_t skv_model_weight_bytes(const skv_model *m) {
    return m->weight_bytes;
}
skv_type skv_model_weight_type(const skv_model *m) {
    return m->weight_type;
}
