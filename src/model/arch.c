/* arch.c — the table of supported architectures (see arch.h). Adding one that fits the
 * RMSNorm + attention + SwiGLU block is a new row here. */
#include "arch.h"

#include <string.h>

#define NO  SKV_NEED_NO
#define OPT SKV_NEED_OPTIONAL
#define REQ SKV_NEED_REQUIRED

static const skv_arch ARCHS[] = {
    /* name    family                                     rope               q/k/v fused bias
       out_b qk_norm gate_up rope_freqs longrope yarn_keys attn_temp */
    {"llama", "Llama 1/2/3.x, Mistral, SmolLM2, TinyLlama", SKV_ROPE_ADJACENT, REQ, NO, OPT, OPT,
     NO, false, OPT, NO, false, false},
    {"qwen2", "Qwen2, Qwen2.5", SKV_ROPE_NEOX, REQ, NO, REQ, NO, NO, false, NO, NO, false, false},
    {"qwen3", "Qwen3 (dense)", SKV_ROPE_NEOX, REQ, NO, NO, NO, REQ, false, NO, NO, false, false},
    {"phi3", "Phi-3, Phi-3.5, Phi-4 (mini)", SKV_ROPE_NEOX, OPT, OPT, NO, NO, NO, true, NO, OPT,
     false, false},
    {"mistral3", "Ministral 3, Mistral Small 3.1+ (text)", SKV_ROPE_ADJACENT, REQ, NO, NO, OPT, NO,
     false, OPT, NO, true, true},
};

#undef NO
#undef OPT
#undef REQ

const skv_arch *skv_arch_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

const skv_arch *skv_arch_require(const char *name, skv_err *err) {
    const skv_arch *a = skv_arch_find(name);
    if (!a)
        skv_err_set(err, SKV_ERR_UNSUPPORTED,
                    "architecture '%.64s' is not supported (sparsekv runs %s)", name ? name : "",
                    skv_arch_names());
    return a;
}

const char *skv_arch_names(void) {
    return "llama, qwen2, qwen3, phi3, mistral3";
}

int skv_arch_count(void) {
    return (int)(sizeof ARCHS / sizeof ARCHS[0]);
}

const skv_arch *skv_arch_at(int i) {
    return i >= 0 && i < skv_arch_count() ? &ARCHS[i] : NULL;
}
