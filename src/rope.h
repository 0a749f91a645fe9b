/* rope.h — rotary position embedding, in one place: the forward pass, key re-rotation in the
 * cache and anything else that turns keys all use these functions.
 *
 * Frequency i (0 <= i < n_rot/2) turns by
 *     angle_i(pos) = pos * freq_scale * theta^(-2i/n_rot) / factor_i
 * (factor_i = 1 without rope_freqs.weight or rope_factors_*; freq_scale = 1 / rope.scaling.factor
 * for linear scaling, else 1; YaRN replaces freq_scale by mix_i), computed in double. A vector
 * embedded at a position is rotated and its turned dimensions multiplied by attn_factor
 * (rope.scaling.attn_factor of LongRoPE models, else 1), as llama.cpp and Hugging Face scale cos
 * and sin. Which two dimensions frequency i turns depends on the mode: ADJACENT (llama) turns
 * (x[2i], x[2i+1]); NEOX (qwen2, qwen3, phi3) turns (x[i], x[i + n_rot/2]). Dimensions from n_rot
 * to head_dim are left alone (partial rotary). Angles are linear in pos, so rotating by a then by b
 * equals rotating by a + b: keys re-rotate by a position delta, with a pure rotation
 * (skv_rope_turn_table: the scale is in them already). */
#ifndef SKV_ROPE_H
#define SKV_ROPE_H

#include "common.h"

typedef struct skv_rope_spec {
    skv_rope_mode mode;
    int head_dim;
    int n_rot;            /* even, 2 <= n_rot <= head_dim */
    double theta;         /* rope.freq_base */
    double freq_scale;    /* 1 / linear scaling factor */
    const float *factors; /* [n_rot / 2] or NULL; owned by the model */
    const double *mix;    /* [n_rot / 2] YaRN's scale of each frequency, in place of freq_scale,
                             or NULL; owned by the model */
    double attn_factor;   /* multiplies cos and sin of an embedding (1 = none) */
} skv_rope_spec;

/* A descriptor with no scaling and no factors. */
skv_rope_spec skv_rope_plain(skv_rope_mode mode, int head_dim, int n_rot, double theta);

/* The table that embeds a vector at pos: n_rot floats, laid out for the mode (ADJACENT: cos/sin
 * pairs cs[2i], cs[2i+1]; NEOX: cs[i] = cos, cs[n_rot/2 + i] = sin), times attn_factor. Angles
 * in double. */
void skv_rope_table(const skv_rope_spec *r, float *cs, double pos);
/* The same for turning an embedded vector on by delta positions: no attn_factor. */
void skv_rope_turn_table(const skv_rope_spec *r, float *cs, double delta);

/* Rotates x[head_dim] in place by a table from skv_rope_table (SIMD when available). */
void skv_rope_apply_table(const skv_rope_spec *r, float *x, const float *cs);
void skv_rope_apply_table_ref(const skv_rope_spec *r, float *x, const float *cs);

/* Embedding at pos in one step (rotation and attn_factor), angles and products in double (the
 * scalar reference). */
void skv_rope_rotate_ref(const skv_rope_spec *r, float *x, double pos);

#endif
