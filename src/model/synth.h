/* synth.h — synthetic models (random weights with the exact shapes of real models), a GGUF
 * writer that streams tensor data in bounded memory, and the model rewriter's detailed report.
 *
 * Why synthetic models: benchmarks need the shapes (and so the FLOPs and bytes) of real models,
 * and no machine here can download one. Weights are deterministic from a seed, so two runs with
 * the same seed write byte-identical files. */
#ifndef SKV_SYNTH_H
#define SKV_SYNTH_H

#include "common.h"
#include "gguf.h"

#include <stdbool.h>
#include <stdint.h>

/* The shape of a model of one of the supported architectures (llama unless arch says). */
typedef struct skv_synth_shape {
    const char *name;
    const char *note; /* one line for --list (what the preset imitates) */
    int n_vocab;      /* >= 259: 3 special tokens + 256 byte tokens + normal pieces */
    int n_ctx_train;  /* the real model's context length */
    int n_ctx;        /* llama.context_length written by default (<= n_ctx_train) */
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int n_ff;
    float rope_theta;
    float norm_eps;
    bool tied; /* no output.weight: the output matrix is token_embd */
} skv_synth_shape;

/* What a shape is written as, beyond the plain llama block (all zeros = plain llama). */
typedef struct skv_synth_arch {
    const char *arch; /* general.architecture: NULL/"llama", "qwen2", "qwen3", "phi3" */
    int head_dim;     /* 0 = n_embd / n_head; else written as attention.key_length */
    bool qkv_bias;    /* attn_q/k/v.bias (qwen2) */
    bool qk_norm;     /* attn_q_norm / attn_k_norm (qwen3) */
    bool fused;       /* attn_qkv and ffn_up = [gate | up] (phi3) */
    bool rope_freqs;  /* rope_freqs.weight of Llama 3.1+ (factor 32, low/high frequency factors
                         1 and 4, original context 8192) */
    int n_rot;        /* 0 = head_dim; else rope.dimension_count (partial rotary: Phi-4-mini) */
    bool longrope;    /* LongRoPE (phi3): rope_factors_long / rope_factors_short
                         (skv_synth_longrope_factors) and the attn_factor of the shape's
                         n_ctx_train over n_ctx_orig */
    float yarn;       /* > 0: rope.scaling.type yarn with this factor */
    float yarn_beta_fast, yarn_beta_slow, yarn_log_mul; /* > 0: written (mistral3) */
    float attn_temp; /* > 0: attention.temperature_scale (mistral3) */
    int n_ctx_orig;  /* rope.scaling.original_context_length (longrope and yarn need it) */
} skv_synth_arch;

/* The architecture of a preset (a pointer from skv_synth_preset/_at); the plain llama one
 * (all zeros) for any other shape. Never NULL. */
const skv_synth_arch *skv_synth_arch_of(const skv_synth_shape *shape);

int skv_synth_n_presets(void);
const skv_synth_shape *skv_synth_preset_at(int i);
/* Preset by name (case-insensitive), NULL if unknown. */
const skv_synth_shape *skv_synth_preset(const char *name);

/* Number of parameters of a shape (every matrix and norm; the tied output counted once). */
uint64_t skv_synth_n_params(const skv_synth_shape *shape);
uint64_t skv_synth_n_params_arch(const skv_synth_shape *shape, const skv_synth_arch *arch);
/* The Llama 3.1+ RoPE frequency divisors for head_dim / 2 frequencies (rope_freqs.weight; pass
 * n_rot for a partial rotation: one per turned pair). */
void skv_synth_llama3_rope_freqs(float *out, int head_dim, float theta);
/* LongRoPE divisors for n_rot / 2 frequencies: smooth ramps from 1 (not the published ones,
 * which were searched per model): short 1 -> 1.1, long 1 -> scale (n_ctx_train / n_ctx_orig),
 * quadratic in the frequency index. */
void skv_synth_longrope_factors(float *lng, float *shrt, int n_rot, double scale);
/* LongRoPE's attn_factor as the converters write it: sqrt(1 + ln(scale) / ln(n_ctx_orig)), 1
 * for scale <= 1. */
double skv_synth_longrope_attn_factor(double scale, int n_ctx_orig);

typedef struct skv_synth_params {
    skv_type type; /* type of the 2-D matrices (norms are always F32) */
    uint64_t seed;
    int n_ctx;     /* llama.context_length to write; 0 = shape->n_ctx */
    int n_threads; /* 0 = skv_n_cores() */
} skv_synth_params;

/* Writes a GGUF of the shape's architecture with random weights: every matrix element
 * ~ N(0, 1/fan_in) (Irwin-Hall approximation, deterministic per tensor name, row and seed),
 * biases ~ N(0, 0.1^2), norms = 1, and either a synthetic SentencePiece vocabulary of n_vocab
 * pieces (byte tokens <0x00>..<0xFF>, BOS = 1, EOS = 2, UNK = 0) or the one of
 * params->vocab_path. Memory stays bounded by a few rows per thread whatever the model size. */
skv_status skv_synth_write(const skv_synth_shape *shape, const skv_synth_params *params,
                           const char *path, skv_err *err);
/* The same with an explicit architecture (NULL = skv_synth_arch_of(shape)) and vocabulary:
 * vocab_path names a vocab-only GGUF (e.g. ../shared/models/vocab/ggml-vocab-qwen2.gguf)
 * whose tokenizer.* metadata is copied instead of the synthetic vocabulary, and n_vocab
 * becomes that vocabulary's size (NULL = the synthetic SentencePiece one). */
skv_status skv_synth_write_ex(const skv_synth_shape *shape, const skv_synth_arch *arch,
                              const skv_synth_params *params, const char *vocab_path,
                              const char *path, skv_err *err);

/* --- streamed GGUF writing ---------------------------------------------------------------- */

/* A tensor to write: data != NULL is written as is (referenced until the write returns);
 * data == NULL has its rows produced by the fill callback. */
typedef struct skv_stream_tensor {
    const char *name;
    skv_type type;
    int n_dims;
    int64_t ne[SKV_GGUF_MAX_DIMS];
    const void *data;
} skv_stream_tensor;

/* Fills rows [row0, row0 + n_rows) of tensor ti (row = ne[0] values in the tensor's type) into
 * dst. Called from the writing thread, in row order; it may use threads of its own. */
typedef skv_status (*skv_stream_fill_fn)(void *ctx, int64_t ti, int64_t row0, int64_t n_rows,
                                         void *dst, skv_err *err);

/* Writes w's metadata and the n tensors to path. Tensors without data are laid out by the
 * writer over a read-only zero mapping (no memory), then their rows are produced chunk by chunk
 * and written in place; the file appears at path (renamed) only when complete. */
skv_status skv_gguf_write_streamed(skv_gguf_writer *w, const skv_stream_tensor *t, int64_t n,
                                   skv_stream_fill_fn fill, void *ctx, const char *path,
                                   skv_err *err);

/* GGUF general.file_type (llama.cpp's ftype numbering) for a model whose matrices are t. */
uint32_t skv_ftype_of(skv_type t);
/* general.file_type for a file whose matrices were asked in `asked` (or in a mix, mix_ftype:
 * Q4_K_M's 15, Q2_K_M's 10; 0 for none) and written n_by_type[t] in each type t: the asked one
 * (the mix's) when any matrix took it (one of the mix's K types), else that of the type most of
 * them were written in (a model whose rows are no whole k-quant blocks is not labelled a k-quant
 * file). */
uint32_t skv_ftype_label(skv_type asked, uint32_t mix_ftype, const int n_by_type[SKV_TYPE_COUNT]);

/* The type a matrix with rows of cols values is written in when want is asked for: want when
 * cols is a multiple of its block size; else, for a 256-value type when cols is a multiple of
 * 32, the 32-block type just above it in bits (llama-quantize's choice): Q5_0 for Q4_K, Q5_1 for
 * Q5_K, Q8_0 for Q6_K, Q4_0 for Q2_K and Q3_K, IQ4_NL for IQ4_XS; else F16 (F32 for F32). */
skv_type skv_matrix_type_for(skv_type want, int64_t cols);

/* --- model rewriting (skv_quantize_model with a report) ------------------------------------ */

typedef struct skv_quantize_report {
    int n_tensors;   /* all tensors written */
    int n_converted; /* 2-D tensors rewritten in the requested type */
    int n_unchanged; /* already in the requested type, or not a matrix (norms): copied */
    int n_fallback;  /* matrices whose rows are not a multiple of the type's block size,
                        written in another type instead (skv_matrix_type_for's, or the stored
                        one when that is no larger) */
    int n_fallback_by_type[SKV_TYPE_COUNT]; /* those by the type they were written in */
    char fallback_names[512];     /* comma-separated names of those (truncated with "...") */
    uint64_t bytes_in, bytes_out; /* tensor data bytes */
    double ms;
    int n_by_type[SKV_TYPE_COUNT]; /* 2-D tensors written in each type (the mix) */
    bool bad_input; /* the failure was the input's: missing, unreadable, not a GGUF, or holding a
                       tensor type sparsekv cannot read (else the output's, or the arguments') */
} skv_quantize_report;

/* skv_quantize_model, filling report (may be NULL). A matrix whose row length is not a multiple
 * of type's block size is written in skv_matrix_type_for(type, row length) (a 32-block type or
 * F16), or
 * copied when it is stored in a type no larger than that, and listed in the report. */
skv_status skv_quantize_model_ex(const char *in_path, const char *out_path, skv_type type,
                                 int n_threads, skv_quantize_report *report, skv_err *err);

/* Mixes: a type per tensor by its role, as the common GGUF file types do. */
typedef enum skv_quant_mix {
    SKV_QMIX_NONE = 0,   /* every matrix in the one type */
    SKV_QMIX_Q4_K_M = 1, /* Q6_K for the output matrix and for attn_v / ffn_down of the layers
                            skv_quant_mix_more_bits picks, Q5_K for attn_qkv (fused, phi3), Q4_K
                            elsewhere (file type 15) */
    SKV_QMIX_Q2_K_M = 2, /* llama-quantize's Q2_K ("Q2_K - Medium", file type 10): Q6_K for the
                            output matrix, Q3_K for attn_output and ffn_down, attn_v Q4_K where
                            n_head >= 4 n_head_kv (else Q3_K), Q2_K elsewhere */
    SKV_QMIX_Q3_K_M = 3, /* llama-quantize's Q3_K_M (file type 12): Q6_K for the output matrix,
                            attn_v Q5_K in layers 0-1 (else Q4_K), ffn_down Q5_K in the first
                            sixteenth of the layers (else Q4_K), attn_output and attn_qkv Q4_K,
                            Q3_K elsewhere */
} skv_quant_mix;

typedef struct skv_quantize_opts {
    skv_type type; /* every matrix's type (mix NONE); ignored for a mix */
    skv_quant_mix mix;
    bool simple; /* K-quants with the plain min/max scales instead of the search */
    int n_threads;
} skv_quantize_opts;

skv_status skv_quantize_model_opts(const char *in_path, const char *out_path,
                                   const skv_quantize_opts *opts, skv_quantize_report *report,
                                   skv_err *err);

/* Q4_K_M's layer rule: the first and last eighth of the n_layer layers, and every third layer in
 * between (layer - n_layer/8 = 2, 5, 8, ...), get the wider type. */
bool skv_quant_mix_more_bits(int layer, int n_layer);
/* The type mix gives the 2-D tensor name (before the block-size fallback). n_gqa: query heads
 * per kv head; has_output: the model has its own output.weight (else token_embd doubles as the
 * output and is treated so). */
skv_type skv_quant_mix_type(skv_quant_mix mix, const char *name, int n_layer, int n_gqa,
                            bool has_output);
/* The mix's general.file_type (15, 10, 12), 0 for SKV_QMIX_NONE. */
uint32_t skv_quant_mix_ftype(skv_quant_mix mix);
/* The K type most of the mix's matrices get (Q4_K, Q2_K, Q3_K); SKV_TYPE_COUNT for none. */
skv_type skv_quant_mix_base(skv_quant_mix mix);
/* "q4_k_m", "q2_k_m", "q3_k_m"; NULL for none. */
const char *skv_quant_mix_name(skv_quant_mix mix);
/* The mix a name (any case) names, or SKV_QMIX_NONE. */
skv_quant_mix skv_quant_mix_from_name(const char *name);

#endif
