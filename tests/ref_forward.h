/* ref_forward.h — an independent, naive float64 forward pass for the tests: straight loops,
 * full recomputation, no shared kernels. Reads weights through the GGUF reader only, and knows
 * the architectures on its own (llama, qwen2, qwen3, phi3, mistral3: biases, per-head q/k norms,
 * fused projections, NEOX or adjacent RoPE pairs, rope_freqs factors, linear RoPE scaling,
 * LongRoPE's two factor sets and attn_factor, YaRN; mistral3's YaRN keys and query temperature). */
#ifndef SKV_REF_FORWARD_H
#define SKV_REF_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ref_model ref_model;

/* Which keys a query may see, beyond causality: return false to mask out the key at kpos for
 * (layer, kv head). NULL = dense causal attention. */
typedef bool (*ref_keep_fn)(int layer, int kv_head, int kpos, void *user);

/* Finer control: visibility per (query, key) pair, and the positions RoPE turns the query and
 * the key by (rerotate mode moves both). Either callback may be NULL (dense causal; natural
 * positions). */
typedef struct ref_ctl {
    bool (*visible)(int layer, int kv_head, int qpos, int kpos, void *user);
    void (*rot)(int layer, int kv_head, int qpos, int kpos, double *qrot, double *krot, void *user);
    void *user;
} ref_ctl;

ref_model *ref_model_load(const char *gguf_path);
void ref_model_free(ref_model *m);
/* LongRoPE: the factor set of a context of n_ctx positions (0 = context_length, the default):
 * long past rope.scaling.original_context_length, else short. No effect on other models. */
void ref_model_set_n_ctx(ref_model *m, int n_ctx);
int ref_model_n_vocab(const ref_model *m);

/* logits[n, n_vocab] of every position of tokens[0..n). Query at position i sees keys at
 * positions j <= i for which keep(l, h, j) (or all of them when keep is NULL). */
void ref_forward(const ref_model *m, const int32_t *tokens, int n, double *logits, ref_keep_fn keep,
                 void *user);
void ref_forward_ctl(const ref_model *m, const int32_t *tokens, int n, double *logits,
                     const ref_ctl *ctl);

/* RoPE of one head vector in float64 as this reference does it (mode and factors of m): the
 * embedding at pos (times LongRoPE's attn_factor), and the turn of an embedded vector by delta
 * positions (no factor: it is in the vector already). */
void ref_rope(const ref_model *m, double *x, double pos);
void ref_turn(const ref_model *m, double *x, double delta);

#endif
