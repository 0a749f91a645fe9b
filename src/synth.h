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

/* The shape of a Llama-architecture model. */
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

int skv_synth_n_presets(void);
const skv_synth_shape *skv_synth_preset_at(int i);
/* Preset by name (case-insensitive), NULL if unknown. */
const skv_synth_shape *skv_synth_preset(const char *name);

/* Number of parameters of a shape (every matrix and norm; the tied output counted once). */
uint64_t skv_synth_n_params(const skv_synth_shape *shape);

typedef struct skv_synth_params {
    skv_type type; /* type of the 2-D matrices (norms are always F32) */
    uint64_t seed;
    int n_ctx;     /* llama.context_length to write; 0 = shape->n_ctx */
    int n_threads; /* 0 = all online cores */
} skv_synth_params;

/* Writes a llama GGUF with random weights: every matrix element ~ N(0, 1/fan_in) (Irwin-Hall
 * approximation, deterministic per tensor name, row and seed), norms = 1, a synthetic
 * SentencePiece vocabulary of n_vocab pieces (byte tokens <0x00>..<0xFF>, BOS = 1, EOS = 2,
 * UNK = 0). Memory stays bounded by a few rows per thread whatever the model size. */
skv_status skv_synth_write(const skv_synth_shape *shape, const skv_synth_params *params,
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

/* The type a matrix with rows of cols values is written in when want is asked for: want when
 * cols is a multiple of its block size, else F16 (F32 when want is F32). */
skv_type skv_matrix_type_for(skv_type want, int64_t cols);

/* --- model rewriting (skv_quantize_model with a report) ------------------------------------ */

typedef struct skv_quantize_report {
    int n_tensors;   /* all tensors written */
    int n_converted; /* 2-D tensors rewritten in the requested type */
    int n_unchanged; /* already in the requested type, or not a matrix (norms): copied */
    int n_fallback;  /* matrices whose rows are not a multiple of the type's block size,
                        written in fallback_type instead */
    skv_type fallback_type;
    char fallback_names[512];     /* comma-separated names of those (truncated with "...") */
    uint64_t bytes_in, bytes_out; /* tensor data bytes */
    double ms;
} skv_quantize_report;

/* skv_quantize_model, filling report (may be NULL). A matrix whose row length is not a multiple
 * of type's block size is written in F16 (F32 when type is F32) and listed in the report. */
skv_status skv_quantize_model_ex(const char *in_path, const char *out_path, skv_type type,
                                 int n_threads, skv_quantize_report *report, skv_err *err);

#endif
