/* model.h — the model's internal layout: hparams plus the weight tensors, as views into the
 * mapped GGUF file or in the layouts the kernels read (panels, k16 records, fused matrices; made
 * at load, model.c). Read-only after load, so one model can serve many contexts. */
#ifndef SKV_MODEL_H
#define SKV_MODEL_H

#include "common.h"
#include "gguf.h"
#include "rope.h"

/* A weight matrix or vector. For a matrix: rows = n_out, cols = n_in (GGUF ne[1], ne[0]); data
 * = its rows (in the mapping or a copy), NULL for a matrix held only as panels or k16 records
 * (after fusion, or k16); a matrix packed from mapped rows keeps data at the released pages. */
typedef struct skv_weight {
    const void *data;
    skv_type type;
    int64_t rows, cols;
    void *panels; /* owned: a float matrix in 16-row panels (skv_panels_pack), or NULL */
    void *copy;   /* owned: a quantized matrix's rows copied out of the file (data points here) */
    void *k16;    /* owned: a matrix in k16 records (skv_k16_pack; Q4_K, Q6_K, Q8_0, Q4_*,
                     Q5_*), or NULL */
} skv_weight;

/* Whether a matrix is there (held only as panels or k16 records, data is NULL). */
static inline bool skv_weight_present(const skv_weight *w) {
    return w->data || w->panels || w->k16;
}

typedef struct skv_layer_weights {
    skv_weight attn_norm;  /* [n_embd] f32 */
    skv_weight wq;         /* [n_head * head_dim, n_embd]; absent when fused */
    skv_weight wk;         /* [n_head_kv * head_dim, n_embd]; absent when fused */
    skv_weight wv;         /* [n_head_kv * head_dim, n_embd]; absent when fused */
    skv_weight wqkv;       /* [q | k | v] rows (phi3 files; others fused at load); absent when
                            * separate */
    skv_weight bq, bk, bv; /* f32 biases [dq], [dkv], [dkv]; data NULL when absent */
    skv_weight q_norm;     /* [head_dim] f32 per-head RMSNorm of q (qwen3); NULL when absent */
    skv_weight k_norm;     /* [head_dim] f32 */
    skv_weight wo;         /* [n_embd, n_head * head_dim] */
    skv_weight bo;         /* [n_embd] f32 or NULL */
    skv_weight ffn_norm;   /* [n_embd] f32 */
    skv_weight w_gate;     /* [n_ff, n_embd]; absent when fused into w_up */
    skv_weight w_up;       /* [n_ff, n_embd], or [2 n_ff, n_embd] = [gate | up] when fused */
    skv_weight w_down;     /* [n_embd, n_ff] */
} skv_layer_weights;

struct skv_model {
    skv_hparams hp;
    const struct skv_arch *arch;
    skv_rope_spec rope;     /* the RoPE descriptor (LongRoPE: short factors; a context
                             * turns by skv_model_rope's) */
    float *rope_factors;    /* [n_rot / 2] owned, or NULL: rope_freqs.weight */
    float *rope_long;       /* [n_rot / 2] owned, or NULL: LongRoPE past n_ctx_orig */
    float *rope_short;      /* [n_rot / 2] owned, or NULL: LongRoPE up to n_ctx_orig */
    double *rope_mix;       /* [n_rot / 2] owned, or NULL: YaRN's scale of each frequency */
    float yarn_beta_fast;   /* YaRN's correction range: frequencies turning more than beta_fast */
    float yarn_beta_slow;   /* times over n_ctx_orig are kept, fewer than beta_slow scaled */
    skv_gguf *gguf;         /* owns the mapping */
    skv_vocab *vocab;       /* owned; NULL only from skv_model_load_weights */
    skv_weight tok_embd;    /* [n_vocab, n_embd] */
    skv_weight output_norm; /* [n_embd] f32 */
    skv_weight output;      /* [n_vocab, n_embd]; when tied, tok_embd's tensor (packed
                             * apart from it unless copied as rows) */
    skv_layer_weights *layers; /* [n_layer] */
    uint64_t weight_bytes;
    skv_type weight_type;
    bool meta_only; /* skv_model_load_meta: not to be run (skv_context_new refuses it) */
};

/* The RoPE descriptor of a context of n_ctx positions (resolved, > 0): the model's, with
 * LongRoPE's long factors when n_ctx > hp.n_ctx_orig, else its short ones (llama.cpp's rule: the
 * choice is made once, by the context's size, so every key of a cache turns alike). */
skv_rope_spec skv_model_rope(const skv_model *m, int n_ctx);

/* Loads hparams and weights but no vocabulary (tests of the forward arithmetic on files whose
 * tokenizer is not needed). m->vocab is NULL: only the forward pass may be used. */
skv_model *skv_model_load_weights(const char *path, skv_err *err);

/* Loads like skv_model_load (every check, the vocabulary) but leaves the matrices in the file
 * mapping, not packed or copied (what skv_model_load does at load time, seconds for a large
 * model): for readers of metadata such as `sparsekv info`. The forward pass still works, on the
 * slower unpacked paths. */
skv_model *skv_model_load_unpacked(const char *path, skv_err *err);

/* The same for metadata only: nothing is copied or rewritten, not even the matrices whose
 * stored type the kernels do not read as rows (Q3_K, which skv_model_load_unpacked must make
 * records or Q6_K rows of: seconds for a large model); skv_context_new refuses such a model. */
skv_model *skv_model_load_meta(const char *path, skv_err *err);

#endif
