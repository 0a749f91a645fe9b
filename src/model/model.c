/* model.c — loads a GGUF model of one of the architectures in arch.c: hparams from metadata,
 * validated tensor views into the mapping, the vocabulary. Nothing is copied except the small
 * vectors (norms, biases, RoPE factors), which are kept as float32 whatever their stored type.
 * Every tensor of the file must be one the architecture uses (as llama.cpp requires). */
#include "model.h"
#include "arch.h"
#include "kernels/kernels.h"
#include "threads.h"
#include "tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

typedef struct loader {
    skv_model *m;
    bool *used; /* [n_tensors]: tensors the architecture consumed */
    char key[128];
} loader;

/* "<arch>.<suffix>" */
static const char *akey(loader *ld, const char *suffix) {
    snprintf(ld->key, sizeof ld->key, "%s.%s", ld->m->hp.arch, suffix);
    return ld->key;
}

/* Finds a tensor and checks its shape: ne0 x ne1 (ne1 = 0 for a vector). Matrices must be of a
 * type the matmul supports. Absent and not required: false with err untouched. */
static bool get_tensor(loader *ld, const char *name, int64_t ne0, int64_t ne1, skv_weight *w,
                       bool required, skv_err *err) {
    const skv_gguf *g = ld->m->gguf;
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
    ld->used[i] = true;
    w->data = t->data;
    w->type = t->type;
    w->rows = want_dims == 2 ? ne1 : 1;
    w->cols = ne0;
    return true;
}

/* A vector [n] copied to float32 so every kernel can take it as float. Absent and optional:
 * true with w->data NULL. */
static bool get_vec(loader *ld, const char *name, int64_t n, skv_weight *w, bool required,
                    skv_err *err) {
    skv_weight t;
    w->data = NULL;
    if (!get_tensor(ld, name, n, 0, &t, required, err))
        return !required && skv_gguf_find_tensor(ld->m->gguf, name) < 0;
    float *f = malloc((size_t)n * sizeof(float));
    if (!f) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return false;
    }
    skv_dequantize_row(t.type, t.data, f, n);
    t.data = f; /* only owned copies ever land in the model, so free() is always right */
    t.type = SKV_TYPE_F32;
    *w = t;
    return true;
}

static uint64_t weight_bytes(const skv_weight *w) {
    return w->data ? (uint64_t)skv_row_bytes(w->type, w->cols) * (uint64_t)w->rows : 0;
}

/* The matrices of a layer (absent ones have data NULL), in one list for every loop over them. */
enum { N_LAYER_MATRICES = 8 };
static void layer_matrices(skv_layer_weights *L, skv_weight *out[N_LAYER_MATRICES]) {
    skv_weight *all[N_LAYER_MATRICES] = {&L->wq, &L->wk,     &L->wv,   &L->wqkv,
                                         &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    memcpy(out, all, sizeof all);
}

void skv_model_free(skv_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int l = 0; l < m->hp.n_layer; l++) {
            skv_layer_weights *L = &m->layers[l];
            const void *owned[] = {L->attn_norm.data, L->ffn_norm.data, L->bq.data,
                                   L->bk.data,        L->bv.data,       L->bo.data,
                                   L->q_norm.data,    L->k_norm.data};
            for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free((void *)owned[i]);
            skv_weight *mats[N_LAYER_MATRICES];
            layer_matrices(L, mats);
            for (int i = 0; i < N_LAYER_MATRICES; i++) {
                free(mats[i]->panels);
                free(mats[i]->copy);
                free(mats[i]->k16);
            }
        }
    }
    free(m->output.panels);
    free(m->output.copy);
    free(m->output.k16);
    free((void *)m->output_norm.data);
    free(m->rope_factors);
    free(m->rope_long);
    free(m->rope_short);
    free(m->rope_mix);
    free(m->layers);
    skv_vocab_free(m->vocab);
    skv_gguf_close(m->gguf);
    free(m);
}

static bool load_hparams(loader *ld, skv_err *err) {
    skv_model *m = ld->m;
    const skv_gguf *g = m->gguf;
    skv_hparams *hp = &m->hp;
    const char *arch = skv_gguf_get_str(g, "general.architecture");
    if (!arch) {
        skv_err_set(err, SKV_ERR_FORMAT, "missing 'general.architecture'");
        return false;
    }
    m->arch = skv_arch_require(arch, err);
    if (!m->arch) return false;
    snprintf(hp->arch, sizeof hp->arch, "%s", m->arch->name);
    const int big = 1 << 24;
    if (!get_hparam_int(g, akey(ld, "embedding_length"), 1, big, &hp->n_embd, true, err) ||
        !get_hparam_int(g, akey(ld, "block_count"), 1, 4096, &hp->n_layer, true, err) ||
        !get_hparam_int(g, akey(ld, "feed_forward_length"), 1, big, &hp->n_ff, true, err) ||
        !get_hparam_int(g, akey(ld, "attention.head_count"), 1, 4096, &hp->n_head, true, err) ||
        !get_hparam_int(g, akey(ld, "context_length"), 1, 1 << 28, &hp->n_ctx_train, true, err))
        return false;
    int experts = 0;
    if (!get_hparam_int(g, akey(ld, "expert_count"), 0, 1 << 16, &experts, false, err))
        return false;
    if (experts > 0) {
        skv_err_set(err, SKV_ERR_UNSUPPORTED,
                    "architecture '%s' with %d experts (mixture of experts) is not supported",
                    hp->arch, experts);
        return false;
    }
    hp->n_head_kv = hp->n_head;
    if (!get_hparam_int(g, akey(ld, "attention.head_count_kv"), 1, 4096, &hp->n_head_kv, false,
                        err))
        return false;
    /* head_dim: attention.key_length when given (qwen3: n_head * head_dim != n_embd) */
    hp->head_dim = 0;
    if (!get_hparam_int(g, akey(ld, "attention.key_length"), 1, 1 << 16, &hp->head_dim, false, err))
        return false;
    if (!hp->head_dim) {
        if (hp->n_embd % hp->n_head) {
            skv_err_set(err, SKV_ERR_FORMAT,
                        "embedding length %d is not a multiple of the head count %d (and no "
                        "'%s.attention.key_length' gives the head size)",
                        hp->n_embd, hp->n_head, hp->arch);
            return false;
        }
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    if (hp->n_head % hp->n_head_kv) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "head count %d is not a multiple of the kv head "
                    "count %d",
                    hp->n_head, hp->n_head_kv);
        return false;
    }
    int vlen = hp->head_dim;
    if (!get_hparam_int(g, akey(ld, "attention.value_length"), 1, 1 << 16, &vlen, false, err))
        return false;
    if (vlen != hp->head_dim) {
        skv_err_set(err, SKV_ERR_UNSUPPORTED,
                    "architecture '%s': value length %d differs from key length %d (not "
                    "supported)",
                    hp->arch, vlen, hp->head_dim);
        return false;
    }
    if ((int64_t)hp->n_head * hp->head_dim > big) {
        skv_err_set(err, SKV_ERR_FORMAT, "head count x head size is too large");
        return false;
    }
    hp->n_rot = hp->head_dim;
    if (!get_hparam_int(g, akey(ld, "rope.dimension_count"), 2, hp->head_dim, &hp->n_rot, false,
                        err))
        return false;
    if (hp->n_rot % 2) {
        skv_err_set(err, SKV_ERR_FORMAT, "rope dimension count %d is odd", hp->n_rot);
        return false;
    }
    hp->rope_theta = 10000.0f;
    hp->norm_eps = 1e-5f;
    hp->rope_freq_scale = 1.0f;
    if (!get_hparam_float(g, akey(ld, "rope.freq_base"), 1e-3, 1e12, &hp->rope_theta, err) ||
        !get_hparam_float(g, akey(ld, "attention.layer_norm_rms_epsilon"), 0, 1, &hp->norm_eps,
                          err))
        return false;
    /* RoPE scaling: none, linear (positions divided by the factor), YaRN, or LongRoPE, which its
     * tensors declare (load_tensors; the converters write no type for it, llama.cpp's own name
     * "longrope" is taken too) */
    float factor = 1.0f;
    if (!get_hparam_float(g, akey(ld, "rope.scale_linear"), 1e-6, 1e6, &factor, err)) return false;
    const char *stype = skv_gguf_get_str(g, akey(ld, "rope.scaling.type"));
    if (stype && strcmp(stype, "none") != 0) {
        if (strcmp(stype, "linear") != 0 && strcmp(stype, "yarn") != 0 &&
            strcmp(stype, "longrope") != 0) {
            skv_err_set(err, SKV_ERR_UNSUPPORTED,
                        "architecture '%s': RoPE scaling type '%.32s' is not supported (only "
                        "'none', 'linear', 'yarn' and 'longrope')",
                        hp->arch, stype);
            return false;
        }
        if (!get_hparam_float(g, akey(ld, "rope.scaling.factor"), 1e-6, 1e6, &factor, err))
            return false;
        if (!strcmp(stype, "yarn")) hp->rope_scaling = SKV_ROPE_SCALING_YARN;
        if (!strcmp(stype, "longrope")) hp->rope_scaling = SKV_ROPE_SCALING_LONGROPE;
    }
    if (factor > 0 && factor != 1.0f) {
        hp->rope_freq_scale = 1.0f / factor;
        if (hp->rope_scaling == SKV_ROPE_SCALING_NONE) hp->rope_scaling = SKV_ROPE_SCALING_LINEAR;
    }
    hp->rope_mode = m->arch->rope;
    /* the context length the model was trained for before the extension (YaRN's ramp, LongRoPE's
     * choice of factors), and a scale of cos and sin (LongRoPE's, as converted: sqrt(1 +
     * ln(n_ctx_train / n_ctx_orig) / ln(n_ctx_orig))) */
    hp->n_ctx_orig = hp->n_ctx_train;
    hp->rope_attn_factor = 1.0f;
    if (!get_hparam_int(g, akey(ld, "rope.scaling.original_context_length"), 1, 1 << 28,
                        &hp->n_ctx_orig, false, err) ||
        !get_hparam_float(g, akey(ld, "rope.scaling.attn_factor"), 1e-3, 1e3, &hp->rope_attn_factor,
                          err))
        return false;
    /* YaRN's correction range and magnitude (llama.cpp's and Hugging Face's defaults; mistral3
     * files may set both: a log multiplier m divides the magnitude by 1 + 0.1 m ln(factor)) */
    m->yarn_beta_fast = 32.0f;
    m->yarn_beta_slow = 1.0f;
    float log_mul = 0.0f;
    if (m->arch->yarn_keys &&
        (!get_hparam_float(g, akey(ld, "rope.scaling.yarn_beta_fast"), 1e-3, 1e4,
                           &m->yarn_beta_fast, err) ||
         !get_hparam_float(g, akey(ld, "rope.scaling.yarn_beta_slow"), 1e-3, 1e4,
                           &m->yarn_beta_slow, err) ||
         !get_hparam_float(g, akey(ld, "rope.scaling.yarn_log_multiplier"), 0, 1e3, &log_mul, err)))
        return false;
    if (hp->rope_scaling == SKV_ROPE_SCALING_YARN && factor > 1)
        hp->rope_attn_factor *=
            (1.0f + 0.1f * logf(factor)) / (1.0f + 0.1f * log_mul * logf(factor));
    /* Llama 4's query temperature (mistral3) */
    if (m->arch->attn_temp && !get_hparam_float(g, akey(ld, "attention.temperature_scale"), 0, 1e3,
                                                &hp->attn_temp_scale, err))
        return false;
    return true;
}

/* YaRN's scale of each frequency i < n_rot / 2: frequencies that turn fewer than beta_slow (1)
 * times over n_ctx_orig positions are interpolated (freq_scale), those turning more than
 * beta_fast (32) times kept (1), a linear ramp between over the pair index (llama.cpp's and
 * Hugging Face's correction range: floor and ceil of n_rot ln(n_ctx_orig / (2 pi beta)) /
 * (2 ln theta), within [0, n_rot - 1]). */
static double *yarn_mix(const skv_model *m) {
    const skv_hparams *hp = &m->hp;
    const int h = hp->n_rot / 2;
    double *mix = malloc((size_t)h * sizeof *mix);
    if (!mix) return NULL;
    const double n = hp->n_rot, lt = 2 * log((double)hp->rope_theta), two_pi = 2 * M_PI;
    double lo = floor(n * log(hp->n_ctx_orig / (m->yarn_beta_fast * two_pi)) / lt);
    double hi = ceil(n * log(hp->n_ctx_orig / (m->yarn_beta_slow * two_pi)) / lt);
    lo = lo < 0 ? 0 : lo;
    hi = hi > n - 1 ? n - 1 : hi;
    const double span = hi - lo > 0.001 ? hi - lo : 0.001;
    for (int i = 0; i < h; i++) {
        double y = (i - lo) / span, keep = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
        mix[i] = hp->rope_freq_scale * (1 - keep) + keep;
    }
    return mix;
}

skv_rope_spec skv_model_rope(const skv_model *m, int n_ctx) {
    skv_rope_spec r = m->rope;
    if (m->rope_long) r.factors = n_ctx > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
    return r;
}

/* A vector of n_rot / 2 RoPE frequency divisors, each positive and finite; *out owned. */
static bool get_rope_factors(loader *ld, const char *name, float **out, skv_err *err) {
    skv_weight w;
    const int n = ld->m->hp.n_rot / 2;
    if (!get_vec(ld, name, n, &w, true, err)) return false;
    *out = (float *)w.data;
    for (int i = 0; i < n; i++)
        if (!((*out)[i] > 0) || !isfinite((*out)[i])) {
            skv_err_set(err, SKV_ERR_FORMAT,
                        "tensor '%s' has a factor that is not positive and finite (entry %d)", name,
                        i);
            return false;
        }
    return true;
}

/* Whether the per-layer tensor "blk.<l>.<suffix>" exists. */
static bool layer_has(const skv_gguf *g, int l, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
    return skv_gguf_find_tensor(g, name) >= 0;
}

/* Decides whether an optional per-layer feature is present (from layer 0) and checks that
 * every layer agrees. */
static bool feature(loader *ld, skv_need need, const char *suffix, bool *present, skv_err *err) {
    const skv_hparams *hp = &ld->m->hp;
    *present = need == SKV_NEED_REQUIRED ||
               (need == SKV_NEED_OPTIONAL && layer_has(ld->m->gguf, 0, suffix));
    if (need != SKV_NEED_OPTIONAL) return true;
    for (int l = 1; l < hp->n_layer; l++)
        if (layer_has(ld->m->gguf, l, suffix) != *present) {
            skv_err_set(err, SKV_ERR_FORMAT, "tensor 'blk.%d.%s' is %s but layer 0 %s it", l,
                        suffix, *present ? "missing" : "present", *present ? "has" : "lacks");
            return false;
        }
    return true;
}

static bool load_tensors(loader *ld, skv_err *err) {
    skv_model *m = ld->m;
    const skv_gguf *g = m->gguf;
    const skv_arch *a = m->arch;
    skv_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, hd = hp->head_dim, dq = (int64_t)hp->n_head * hp->head_dim,
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
    hp->n_vocab = (int)te->ne[1];
    if (!get_tensor(ld, "token_embd.weight", d, hp->n_vocab, &m->tok_embd, true, err)) return false;
    if (!get_vec(ld, "output_norm.weight", d, &m->output_norm, true, err)) return false;
    if (get_tensor(ld, "output.weight", d, hp->n_vocab, &m->output, false, err)) {
        hp->tied_output = false;
    } else {
        if (skv_gguf_find_tensor(g, "output.weight") >= 0) return false; /* present but wrong */
        m->output = m->tok_embd;
        hp->tied_output = true;
    }

    /* RoPE frequency factors (Llama 3.1+): one per rotated pair */
    m->rope = skv_rope_plain(hp->rope_mode, hp->head_dim, hp->n_rot, hp->rope_theta);
    m->rope.freq_scale = hp->rope_freq_scale;
    if (skv_gguf_find_tensor(g, "rope_freqs.weight") >= 0 && a->rope_freqs != SKV_NEED_NO) {
        if (!get_rope_factors(ld, "rope_freqs.weight", &m->rope_factors, err)) return false;
        m->rope.factors = m->rope_factors;
        hp->rope_freq_factors = true;
    }
    /* LongRoPE: two sets, the context's size chooses (skv_model_rope) */
    const bool has_long = skv_gguf_find_tensor(g, "rope_factors_long.weight") >= 0,
               has_short = skv_gguf_find_tensor(g, "rope_factors_short.weight") >= 0;
    if ((has_long || has_short) && a->rope_longrope != SKV_NEED_NO) {
        if (has_long != has_short) {
            skv_err_set(err, SKV_ERR_FORMAT, "tensor '%s' is present but '%s' is missing",
                        has_long ? "rope_factors_long.weight" : "rope_factors_short.weight",
                        has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
            return false;
        }
        if (!get_rope_factors(ld, "rope_factors_long.weight", &m->rope_long, err) ||
            !get_rope_factors(ld, "rope_factors_short.weight", &m->rope_short, err))
            return false;
        if (hp->rope_scaling == SKV_ROPE_SCALING_YARN ||
            hp->rope_scaling == SKV_ROPE_SCALING_LINEAR) {
            skv_err_set(err, SKV_ERR_UNSUPPORTED,
                        "LongRoPE factors (rope_factors_long/short) with RoPE scaling '%s' are not "
                        "supported",
                        hp->rope_scaling == SKV_ROPE_SCALING_YARN ? "yarn" : "linear");
            return false;
        }
        m->rope.factors = m->rope_short;
        hp->rope_scaling = SKV_ROPE_SCALING_LONGROPE;
    } else if (hp->rope_scaling == SKV_ROPE_SCALING_LONGROPE) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "RoPE scaling type 'longrope' needs the tensors rope_factors_long.weight and "
                    "rope_factors_short.weight (architecture '%s'%s)",
                    hp->arch, a->rope_longrope == SKV_NEED_NO ? ", which has none" : "");
        return false;
    }
    if (hp->rope_scaling == SKV_ROPE_SCALING_YARN && !(m->rope.mix = m->rope_mix = yarn_mix(m))) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return false;
    }
    m->rope.attn_factor = hp->rope_attn_factor;

    bool sep, fused, bias, obias, qkn;
    if (!feature(ld, a->qkv_separate, "attn_q.weight", &sep, err) ||
        !feature(ld, a->qkv_fused, "attn_qkv.weight", &fused, err) ||
        !feature(ld, a->qkv_bias, "attn_q.bias", &bias, err) ||
        !feature(ld, a->out_bias, "attn_output.bias", &obias, err) ||
        !feature(ld, a->qk_norm, "attn_q_norm.weight", &qkn, err))
        return false;
    if (sep == fused) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "architecture '%s' needs either attn_q/attn_k/attn_v or attn_qkv tensors "
                    "(blk.0 has %s)",
                    hp->arch, sep ? "both" : "neither");
        return false;
    }
    hp->qkv_bias = bias;
    hp->qk_norm = qkn;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return false;
    }
    char name[128];
#define LNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    for (int l = 0; l < hp->n_layer; l++) {
        skv_layer_weights *L = &m->layers[l];
        if (!get_vec(ld, LNAME("attn_norm.weight"), d, &L->attn_norm, true, err) ||
            !get_vec(ld, LNAME("ffn_norm.weight"), d, &L->ffn_norm, true, err))
            return false;
        if (sep) {
            if (!get_tensor(ld, LNAME("attn_q.weight"), d, dq, &L->wq, true, err) ||
                !get_tensor(ld, LNAME("attn_k.weight"), d, dkv, &L->wk, true, err) ||
                !get_tensor(ld, LNAME("attn_v.weight"), d, dkv, &L->wv, true, err))
                return false;
        } else if (!get_tensor(ld, LNAME("attn_qkv.weight"), d, dq + 2 * dkv, &L->wqkv, true, err))
            return false;
        if (bias && (!get_vec(ld, LNAME("attn_q.bias"), dq, &L->bq, true, err) ||
                     !get_vec(ld, LNAME("attn_k.bias"), dkv, &L->bk, true, err) ||
                     !get_vec(ld, LNAME("attn_v.bias"), dkv, &L->bv, true, err)))
            return false;
        if (qkn && (!get_vec(ld, LNAME("attn_q_norm.weight"), hd, &L->q_norm, true, err) ||
                    !get_vec(ld, LNAME("attn_k_norm.weight"), hd, &L->k_norm, true, err)))
            return false;
        if (!get_tensor(ld, LNAME("attn_output.weight"), dq, d, &L->wo, true, err)) return false;
        if (obias && !get_vec(ld, LNAME("attn_output.bias"), d, &L->bo, true, err)) return false;
        if (a->gate_up_fused) {
            if (!get_tensor(ld, LNAME("ffn_up.weight"), d, 2 * ff, &L->w_up, true, err))
                return false;
        } else if (!get_tensor(ld, LNAME("ffn_gate.weight"), d, ff, &L->w_gate, true, err) ||
                   !get_tensor(ld, LNAME("ffn_up.weight"), d, ff, &L->w_up, true, err))
            return false;
        if (!get_tensor(ld, LNAME("ffn_down.weight"), ff, d, &L->w_down, true, err)) return false;
    }
#undef LNAME

    /* Everything in the file must have been used: an unknown tensor means an arithmetic this
     * engine does not do (llama.cpp refuses such files too). */
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++)
        if (!ld->used[i]) {
            skv_err_set(err, SKV_ERR_UNSUPPORTED,
                        "tensor '%.96s' is not part of architecture '%s' as sparsekv runs it",
                        skv_gguf_tensor_at(g, i)->name, hp->arch);
            return false;
        }

    /* What a token reads: every matrix once, the output matrix, the norms. */
    uint64_t total = weight_bytes(&m->output) + (uint64_t)d * 4 * (1 + 2 * (uint64_t)hp->n_layer);
    uint64_t by_type[SKV_TYPE_COUNT] = {0};
    for (int l = 0; l < hp->n_layer; l++) {
        skv_weight *ws[N_LAYER_MATRICES];
        layer_matrices(&m->layers[l], ws);
        for (int k = 0; k < N_LAYER_MATRICES; k++) {
            total += weight_bytes(ws[k]);
            if (ws[k]->data) by_type[ws[k]->type] += weight_bytes(ws[k]);
        }
    }
    m->weight_bytes = total;
    m->weight_type = SKV_TYPE_F32;
    for (int t = 0; t < SKV_TYPE_COUNT; t++)
        if (by_type[t] > by_type[m->weight_type]) m->weight_type = (skv_type)t;
    return true;
}

#define HUGE_BYTES ((size_t)2 << 20)

/* SKV_NO_HUGE set to anything but "" or "0": quantized matrices stay in the file mapping, which
 * processes that load the same file share (no copies, no k16 records, no fusion of quantized
 * rows), and float panels go into plain memory. */
static bool keep_mapped(void) {
    const char *e = getenv("SKV_NO_HUGE");
    return e && e[0] && strcmp(e, "0") != 0;
}

/* Whether weights of this size go into huge pages: 2 MB and more, unless keep_mapped. */
static bool huge_wanted(size_t bytes) {
    return bytes >= HUGE_BYTES && !keep_mapped();
}

/* Weights of 2 MB and more (float panels, copies of quantized rows) start on a 2 MB boundary
 * and ask for transparent huge pages: decode streams every matrix once per token, and with 4 KB
 * pages (the file mapping's) each 4 KB of it costs a TLB miss, in a VM a two-level walk. */
static void *alloc_weights(size_t bytes) {
    if (!huge_wanted(bytes)) return malloc(bytes);
    const size_t rounded = (bytes + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
    void *p = aligned_alloc(HUGE_BYTES, rounded);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    return p;
}

/* Writing the weights' copies is most of a load: on a VM whose host takes back freed memory,
 * each first write of a page waits for the host (measured: 2.3 GB in 16 s on one thread, 8 s
 * on two), so the copies are written by every core, each its share of 16-row groups (panels,
 * k16 records, rewritten rows) or of 2 MB pieces (copies as stored): the same bytes as one
 * thread's. Rows of a type the kernels read from records only (Q3_K) are rewritten on the way
 * as the rows of skv_type_held (COPY_BYTES). */
typedef enum { COPY_PANELS, COPY_K16, COPY_BYTES } copy_kind;
typedef struct copy_job {
    copy_kind kind;
    skv_type from, type; /* stored, held */
    const uint8_t *src;  /* rows as stored */
    uint8_t *dst;
    int64_t rows, cols;
    size_t bytes; /* COPY_BYTES */
} copy_job;

/* Rows [r0, r1) of a matrix stored in j->from as rows of j->type at dst. */
static void rewrite_rows(const copy_job *j, int64_t r0, int64_t r1, uint8_t *dst) {
    const int64_t nb = j->cols / skv_type_block_size(j->from);
    skv_q3_k_to_q6_k(j->src + (size_t)r0 * skv_row_bytes(j->from, j->cols), dst, nb * (r1 - r0));
}

static void copy_task(void *arg, int ith, int nth) {
    const copy_job *j = arg;
    if (j->kind == COPY_BYTES && j->from == j->type) {
        const size_t pieces = (j->bytes + HUGE_BYTES - 1) / HUGE_BYTES;
        const size_t p0 = pieces * (size_t)ith / (size_t)nth,
                     p1 = pieces * (size_t)(ith + 1) / (size_t)nth;
        const size_t b0 = p0 * HUGE_BYTES,
                     b1 = p1 * HUGE_BYTES < j->bytes ? p1 * HUGE_BYTES : j->bytes;
        if (b0 < b1) memcpy(j->dst + b0, j->src + b0, b1 - b0);
        return;
    }
    const int64_t groups = (j->rows + 15) / 16;
    const int64_t g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    if (g0 >= g1) return;
    const int64_t r0 = 16 * g0, r1 = 16 * g1 < j->rows ? 16 * g1 : j->rows;
    if (j->from != j->type) { /* COPY_BYTES */
        rewrite_rows(j, r0, r1, j->dst + (size_t)r0 * skv_row_bytes(j->type, j->cols));
        return;
    }
    const uint8_t *src = j->src + (size_t)r0 * skv_row_bytes(j->type, j->cols);
    if (j->kind == COPY_PANELS)
        skv_panels_pack(j->type, src, (int)(r1 - r0), (int)j->cols,
                        j->dst + (size_t)g0 * 16 * skv_row_bytes(j->type, j->cols));
    else
        skv_k16_pack(j->type, src, (int)(r1 - r0), (int)j->cols,
                     j->dst + skv_k16_bytes(j->type, (int)(16 * g0), (int)j->cols));
}

static void copy_run(skv_pool *pool, copy_kind kind, const skv_weight *w, skv_type held,
                     const void *src, void *dst, size_t bytes) {
    copy_job j = {kind, w->type, held, src, dst, w->rows, w->cols, bytes};
    skv_pool_run(pool, copy_task, &j);
}

/* How a matrix is held once loaded. Float matrices are kept in panels, the layout the float
 * kernels stream in decode and prefill (kernels.h); Q4_K, Q5_K, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1 and
 * IQ4_NL ones at the AVX2 and AVX-512 levels, and Q6_K ones where its kernels are the AVX2 ones, in
 * k16 records (kernels.h, skv_k16_wanted), which those kernels read without unpacking; other
 * quantized ones of 2 MB and more as a copy of their rows (alloc_weights), smaller ones from the
 * mapping. Q3_K, Q2_K and IQ4_XS ones, which the SIMD kernels read from records only, are
 * records wherever records are read (also with SKV_NO_HUGE and unpacked: a copy either way), else
 * Q3_K as Q6_K rows of the same values (Q2_K and IQ4_XS as their rows). The token embedding keeps
 * its mapped rows, except that a tied quantized output's copy serves it (pack_matrices); a tied
 * float output gets its own panels, a tied one in records its own records (the embedding rows then
 * come back from the file). */
typedef enum { HOLD_MAPPED, HOLD_COPY, HOLD_PANELS, HOLD_K16 } hold_kind;

/* pack false (skv_model_load_unpacked): rows as stored, in the mapping where the kernels read
 * their type, else records or rewritten rows. */
static hold_kind hold_of(const skv_weight *w, bool pack) {
    const skv_type t = skv_type_held(w->type);
    if (skv_type_records_only(w->type) && skv_k16_wanted(w->type) &&
        skv_k16_bytes(w->type, (int)w->rows, (int)w->cols) != 0)
        return HOLD_K16;
    if (!pack) return t != w->type ? HOLD_COPY : HOLD_MAPPED;
    if (skv_k16_wanted(t) && !keep_mapped() && skv_k16_bytes(t, (int)w->rows, (int)w->cols) != 0)
        return HOLD_K16;
    if (skv_panels_bytes(t, (int)w->rows, (int)w->cols) != 0) return HOLD_PANELS;
    if (t != w->type) return HOLD_COPY;
    return huge_wanted(skv_row_bytes(t, w->cols) * (size_t)w->rows) ? HOLD_COPY : HOLD_MAPPED;
}

/* The type w is held in as h: records of its own type, else skv_type_held's rows. */
static skv_type held_type(const skv_weight *w, hold_kind h) {
    return h == HOLD_K16 ? w->type : skv_type_held(w->type);
}

/* The bytes a held row takes (panels and records: a row's share of its group of 16). */
static size_t held_row_bytes(const skv_weight *w, hold_kind h) {
    const skv_type t = held_type(w, h);
    return h == HOLD_K16 ? skv_k16_bytes(t, 16, (int)w->cols) / 16 : skv_row_bytes(t, w->cols);
}

/* Writes w (mapped rows) as held by h into dst, then lets the mapped rows go; the bytes a token
 * reads grow by what a rewrite adds (Q3_K as Q6_K rows). */
static void hold_write(skv_model *m, skv_pool *pool, const skv_weight *w, hold_kind h, void *dst) {
    const size_t raw = skv_row_bytes(w->type, w->cols) * (size_t)w->rows;
    const skv_type held = held_type(w, h);
    copy_run(pool,
             h == HOLD_K16      ? COPY_K16
             : h == HOLD_PANELS ? COPY_PANELS
                                : COPY_BYTES,
             w, held, w->data, dst, raw);
    m->weight_bytes += (skv_row_bytes(held, w->cols) - skv_row_bytes(w->type, w->cols)) * w->rows;
    /* only a tied token embedding is read again, a few rows per token, back from the file */
    skv_gguf_release(m->gguf, w->data, raw);
}

static bool pack_matrix(skv_model *m, skv_pool *pool, skv_weight *w, bool pack, skv_err *err) {
    if (!w->data || w->copy || w->panels || w->k16) return true; /* absent, or fused already */
    const hold_kind h = hold_of(w, pack);
    if (h == HOLD_MAPPED) return true;
    const skv_type t = held_type(w, h);
    const size_t bytes = h == HOLD_K16      ? skv_k16_bytes(t, (int)w->rows, (int)w->cols)
                         : h == HOLD_PANELS ? skv_panels_bytes(t, (int)w->rows, (int)w->cols)
                                            : skv_row_bytes(t, w->cols) * (size_t)w->rows;
    void *buf = bytes == SIZE_MAX ? NULL : alloc_weights(bytes);
    if (!buf) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the weights (%zu bytes)", bytes);
        return false;
    }
    hold_write(m, pool, w, h, buf);
    w->type = t;
    if (h == HOLD_K16) w->k16 = buf, w->data = NULL;
    if (h == HOLD_PANELS) w->panels = buf; /* data stays: the released mapping, never read */
    if (h == HOLD_COPY) w->copy = buf, w->data = buf;
    return true;
}

/* Matrices that read the same input, of one type, become one with their rows stacked (q, k, v
 * into wqkv; gate, up into w_up as [gate | up]: the layouts of the files that store them fused):
 * one product per group instead of two or three, so one quantization or packing of x and one
 * dispatch to the threads. Every output is computed as before (the kernels' results do not
 * depend on the other rows), so the logits are the same bits. Each part is written straight
 * into its place in the group's buffer (panels and records: whole groups of 16 rows; quantized
 * rows as stored, also those too small for a copy of their own); a group that does not qualify
 * is left for pack_matrix. */
static bool fuse(skv_model *m, skv_pool *pool, skv_weight *dst, skv_weight *const *parts, int n,
                 skv_err *err) {
    const skv_type type = parts[0]->type;
    const int64_t cols = parts[0]->cols;
    hold_kind h = HOLD_MAPPED;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        const skv_weight *p = parts[i];
        if (!p->data || p->type != type || p->cols != cols) return true;
        hold_kind hp = hold_of(p, true);
        if (hp == HOLD_MAPPED) hp = HOLD_COPY; /* fused rows are copied whatever their size */
        if (i > 0 && hp != h) return true;
        h = hp;
        if ((h == HOLD_PANELS || h == HOLD_K16) && p->rows % 16) return true;
        rows += p->rows;
    }
    if (h == HOLD_COPY && keep_mapped()) return true; /* quantized rows stay shared */
    const size_t rb = held_row_bytes(parts[0], h), total = rb * (size_t)rows;
    uint8_t *buf = alloc_weights(total);
    if (!buf) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the weights (%zu bytes)", total);
        return false;
    }
    size_t off = 0;
    const skv_type held = held_type(parts[0], h);
    for (int i = 0; i < n; i++) {
        skv_weight *p = parts[i];
        hold_write(m, pool, p, h, buf + off);
        off += rb * (size_t)p->rows;
        *p = (skv_weight){.type = held, .rows = p->rows, .cols = p->cols};
    }
    *dst = (skv_weight){.data = h == HOLD_COPY ? buf : NULL,
                        .type = held,
                        .rows = rows,
                        .cols = cols,
                        .panels = h == HOLD_PANELS ? buf : NULL,
                        .copy = h == HOLD_COPY ? buf : NULL,
                        .k16 = h == HOLD_K16 ? buf : NULL};
    return true;
}

/* pack false: only the matrices stored in a type the kernels do not read are rewritten. */
static bool pack_matrices(skv_model *m, bool pack, skv_err *err) {
    skv_pool *pool = skv_pool_new(0); /* NULL (no threads to be had): the caller alone */
    bool ok = true;
    for (int l = 0; ok && l < m->hp.n_layer; l++) {
        skv_layer_weights *L = &m->layers[l];
        skv_weight *mats[N_LAYER_MATRICES];
        layer_matrices(L, mats);
        skv_weight *qkv[] = {&L->wq, &L->wk, &L->wv}, *gate_up[] = {&L->w_gate, &L->w_up};
        if (pack)
            ok = fuse(m, pool, &L->wqkv, qkv, 3, err) && fuse(m, pool, &L->w_up, gate_up, 2, err);
        for (int i = 0; ok && i < N_LAYER_MATRICES; i++)
            ok = pack_matrix(m, pool, mats[i], pack, err);
    }
    ok = ok && pack_matrix(m, pool, &m->output, pack, err);
    skv_pool_free(pool);
    if (!ok) return false;
    /* A tied output copied (as stored or rewritten) is the embedding too: read its rows there,
     * so that they are not in memory twice nor faulted back from the file. */
    if (m->hp.tied_output && m->output.copy) {
        m->tok_embd.data = m->output.copy;
        m->tok_embd.type = m->output.type;
    }
    return true;
}

/* How far load goes with the matrices: held for the kernels (packed), runnable from the rows
 * (unpacked), or not at all (meta). */
typedef enum { LOAD_PACKED, LOAD_UNPACKED, LOAD_META } load_mode;

static skv_model *load(const char *path, bool with_vocab, load_mode mode, skv_err *err) {
    skv_model *m = calloc(1, sizeof *m);
    if (!m) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    loader ld = {m, NULL, {0}};
    m->gguf = skv_gguf_open(path, err);
    if (!m->gguf) goto fail;
    ld.used = calloc((size_t)skv_gguf_n_tensors(m->gguf) + 1, sizeof *ld.used);
    if (!ld.used) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->meta_only = mode == LOAD_META;
    /* said first: such a file lacks the hyperparameters too, which would be named instead */
    if (skv_gguf_n_tensors(m->gguf) == 0 &&
        skv_gguf_find_key(m->gguf, "tokenizer.ggml.model") >= 0) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "'%s' holds no tensors: a vocabulary-only GGUF, not a model (skv_vocab_load "
                    "reads its tokenizer, as `sparsekv tokenize -m` and `synth-model --vocab` do)",
                    path);
        goto fail;
    }
    if (!load_hparams(&ld, err) || !load_tensors(&ld, err) ||
        (mode != LOAD_META && !pack_matrices(m, mode == LOAD_PACKED, err)))
        goto fail;
    free(ld.used);
    ld.used = NULL;
    if (!with_vocab) return m;
    m->vocab = skv_vocab_from_gguf(m->gguf, err);
    if (!m->vocab) { /* the reader's words, with the file they are about (as skv_vocab_load) */
        if (err) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            skv_err_set(err, err->status, "'%s': %s", path, msg);
        }
        goto fail;
    }
    if (skv_vocab_n_tokens(m->vocab) != m->hp.n_vocab) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "'%s': the vocabulary has %d tokens but token_embd.weight has %d rows", path,
                    skv_vocab_n_tokens(m->vocab), m->hp.n_vocab);
        goto fail;
    }
    return m;
fail:
    free(ld.used);
    skv_model_free(m);
    return NULL;
}

skv_model *skv_model_load(const char *path, skv_err *err) {
    return load(path, true, LOAD_PACKED, err);
}

skv_model *skv_model_load_weights(const char *path, skv_err *err) {
    return load(path, false, LOAD_PACKED, err);
}

skv_model *skv_model_load_unpacked(const char *path, skv_err *err) {
    return load(path, true, LOAD_UNPACKED, err);
}

skv_model *skv_model_load_meta(const char *path, skv_err *err) {
    return load(path, true, LOAD_META, err);
}

const skv_hparams *skv_model_hparams(const skv_model *m) {
    return m ? &m->hp : NULL;
}
const skv_vocab *skv_model_vocab(const skv_model *m) {
    return m ? m->vocab : NULL;
}
uint64_t skv_model_weight_bytes(const skv_model *m) {
    return m ? m->weight_bytes : 0;
}
skv_type skv_model_weight_type(const skv_model *m) {
    return m ? m->weight_type : SKV_TYPE_F32;
}
