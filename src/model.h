/* model.h — the model's internal layout: hparams plus views of the weight tensors in the
 * mapped GGUF file. Read-only after load, so one model can serve many contexts. */
#ifndef SKV_MODEL_H
#define SKV_MODEL_H

#include "common.h"
#include "gguf.h"

/* A weight matrix or vector inside the mapping. For a matrix: rows = n_out, cols = n_in
 * (GGUF ne[1], ne[0]). */
typedef struct skv_weight {
    const void *data;
    skv_type type;
    int64_t rows, cols;
} skv_weight;

typedef struct skv_layer_weights {
    skv_weight attn_norm; /* [n_embd] f32 */
    skv_weight wq;        /* [n_head * head_dim, n_embd] */
    skv_weight wk;        /* [n_head_kv * head_dim, n_embd] */
    skv_weight wv;        /* [n_head_kv * head_dim, n_embd] */
    skv_weight wo;        /* [n_embd, n_head * head_dim] */
    skv_weight ffn_norm;  /* [n_embd] f32 */
    skv_weight w_gate;    /* [n_ff, n_embd] */
    skv_weight w_up;      /* [n_ff, n_embd] */
    skv_weight w_down;    /* [n_embd, n_ff] */
} skv_layer_weights;

struct skv_model {
    skv_hparams hp;
    skv_gguf *gguf;            /* owns the mapping */
    skv_vocab *vocab;          /* owned */
    skv_weight tok_embd;       /* [n_vocab, n_embd] */
    skv_weight output_norm;    /* [n_embd] f32 */
    skv_weight output;         /* [n_vocab, n_embd]; == tok_embd when tied */
    skv_layer_weights *layers; /* [n_layer] */
    uint64_t weight_bytes;
    skv_type weight_type;
};

#endif
