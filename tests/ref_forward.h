/* ref_forward.h — an independent, naive float64 Llama forward pass for the tests: straight
 * loops, full recomputation, no shared kernels. Reads weights through the GGUF reader only. */
#ifndef SKV_REF_FORWARD_H
#define SKV_REF_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ref_model ref_model;

/* Which keys a query may see, beyond causality: return false to mask out the key at kpos for
 * (layer, kv head). NULL = dense causal attention. */
typedef bool (*ref_keep_fn)(int layer, int kv_head, int kpos, void *user);

ref_model *ref_model_load(const char *gguf_path);
void ref_model_free(ref_model *m);
int ref_model_n_vocab(const ref_model *m);

/* logits[n, n_vocab] of every position of tokens[0..n). Query at position i sees keys at
 * positions j <= i for which keep(l, h, j) (or all of them when keep is NULL). */
void ref_forward(const ref_model *m, const int32_t *tokens, int n, double *logits, ref_keep_fn keep,
                 void *user);

#endif
