/* arch.h — the architecture descriptors: per general.architecture, which tensors a block has
 * and how it computes. The loader (model.c) and the forward pass (forward.c) read these flags;
 * nothing else in the engine names an architecture. See docs/ARCHITECTURES.md. */
#ifndef SKV_ARCH_H
#define SKV_ARCH_H

#include "common.h"

typedef enum skv_need {
    SKV_NEED_NO = 0,   /* must not be present */
    SKV_NEED_OPTIONAL, /* all layers or none */
    SKV_NEED_REQUIRED,
} skv_need;

typedef struct skv_arch {
    const char *name;       /* general.architecture, also the metadata key prefix */
    const char *family;     /* what it runs, for messages and docs */
    skv_rope_mode rope;     /* pairing of RoPE dimensions */
    skv_need qkv_separate;  /* attn_q / attn_k / attn_v */
    skv_need qkv_fused;     /* attn_qkv = [q | k | v] rows (exactly one of the two forms) */
    skv_need qkv_bias;      /* attn_q/k/v.bias (or attn_qkv.bias when fused) */
    skv_need out_bias;      /* attn_output.bias */
    skv_need qk_norm;       /* attn_q_norm / attn_k_norm [head_dim]: per-head RMSNorm */
    bool gate_up_fused;     /* ffn_up = [gate | up] rows, no ffn_gate */
    skv_need rope_freqs;    /* rope_freqs.weight [n_rot / 2] */
    skv_need rope_longrope; /* LongRoPE: rope_factors_long / rope_factors_short [n_rot / 2],
                               both or neither */
    bool yarn_keys;         /* reads rope.scaling.yarn_beta_fast / _slow / _log_multiplier (else
                               YaRN's betas are 32 and 1, as llama.cpp has them) */
    bool attn_temp;         /* reads attention.temperature_scale (Llama 4's query scaling) */
} skv_arch;

/* The descriptor of an architecture name, or NULL. */
const skv_arch *skv_arch_find(const char *name);
/* The same, or NULL with SKV_ERR_UNSUPPORTED and the message that names what is supported (the
 * loader's and quantize's refusal). */
const skv_arch *skv_arch_require(const char *name, skv_err *err);
/* "llama, qwen2, qwen3, phi3, mistral3" */
const char *skv_arch_names(void);
int skv_arch_count(void);
const skv_arch *skv_arch_at(int i);

#endif
