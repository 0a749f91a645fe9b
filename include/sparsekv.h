/*
 * sparsekv.h — the one public header of libsparsekv.
 *
 * sparsekv runs Llama-family GGUF models on the CPU and compresses their KV cache by position
 * selection: per layer and per kv head it keeps the cache entries that matter, at their original
 * RoPE positions, and frees the rest.
 *
 * Conventions
 *   - Every name starts with skv_ (types, functions) or SKV_ (constants).
 *   - Objects are opaque. Each *_new / *_load has a *_free that accepts NULL.
 *   - Fallible functions return enum skv_status and fill an optional skv_err (may be NULL);
 *     constructors return NULL on failure and fill the skv_err. The skv_err is written on
 *     failure only: test the returned value, not err.status (C: skv_err err = {0}; C++:
 *     skv_err err{}). Given a NULL object, fallible functions return SKV_ERR_INVALID_ARG
 *     (constructors NULL), accessors 0 or NULL (a token id: -1), and skv_context_reset does
 *     nothing. A NULL params pointer (skv_context_new, skv_sampler_new) means the defaults.
 *   - Lifetimes: a model must outlive every context (clones too) and vocabulary made from it,
 *     and its file must not change while it is loaded (the model maps it: write a new file and
 *     rename it over the old one; truncating or rewriting it in place is a SIGBUS in every
 *     process that has it loaded).
 *   - The library never prints to stdout and never calls exit().
 *   - Shapes are written row-major, outermost first: float *k; // [n_pos, head_dim]
 */
#ifndef SPARSEKV_H
#define SPARSEKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of the public API are the only ones libsparsekv.so exports (built with
 * -fvisibility=hidden). */
#if defined(__GNUC__)
#define SKV_API __attribute__((visibility("default")))
#else
#define SKV_API
#endif

/* Version of this header. skv_version() / skv_version_number() give the library's own, which
 * differs from these only if an application was built against another release. The shared
 * library's SONAME is libsparsekv.so.SKV_VERSION_MAJOR. */
#define SKV_VERSION_MAJOR 0
#define SKV_VERSION_MINOR 2
#define SKV_VERSION_PATCH 0
#define SKV_VERSION       "0.2.0"
/* major * 10000 + minor * 100 + patch */
#define SKV_VERSION_NUMBER (SKV_VERSION_MAJOR * 10000 + SKV_VERSION_MINOR * 100 + SKV_VERSION_PATCH)

/* The most worker threads a context (skv_context_params.n_threads) or skv_quantize_model runs. */
#define SKV_MAX_THREADS 1024

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */

typedef enum skv_status {
    SKV_OK = 0,              /* success */
    SKV_ERR_INVALID_ARG = 1, /* a caller-supplied argument is out of range or inconsistent */
    SKV_ERR_IO = 2,          /* a file could not be opened, mapped, read or written */
    SKV_ERR_FORMAT = 3,      /* a file is malformed (bad magic, counts, offsets, shapes...) */
    SKV_ERR_UNSUPPORTED = 4, /* well-formed but not supported (architecture, tensor type...) */
    SKV_ERR_NOMEM = 5,       /* an allocation failed */
    SKV_ERR_STATE = 6,       /* the call is not valid in the object's current state
                                (e.g. the context is full, no queries were captured) */
    SKV_ERR_NUMERIC = 7,     /* the model produced NaN or Inf (e.g. non-finite weights); the
                                message names the first position. The tokens are in the cache,
                                but nothing computed from them is meaningful */
} skv_status;

/* Error details. Pass one to any fallible call; on failure msg holds a complete sentence that
 * names the problem, e.g. "tensor 'blk.3.attn_k.weight' extends past end of file". */
typedef struct skv_err {
    skv_status status;
    char msg[512];
} skv_err;

/* A short constant name for a status ("ok", "invalid argument", ...). */
SKV_API const char *skv_status_str(skv_status s);

/* ---------------------------------------------------------------------------------------------
 * Tensor element types (numbering follows the GGUF/ggml type ids)
 * ------------------------------------------------------------------------------------------- */

typedef enum skv_type {
    SKV_TYPE_F32 = 0,
    SKV_TYPE_F16 = 1,
    SKV_TYPE_Q4_0 = 2,
    SKV_TYPE_Q4_1 = 3,
    SKV_TYPE_Q5_0 = 6,
    SKV_TYPE_Q5_1 = 7,
    SKV_TYPE_Q8_0 = 8,
    SKV_TYPE_Q2_K = 10, /* weights only: 2-bit codes, a 4-bit scale and min per 16 values */
    SKV_TYPE_Q3_K = 11, /* weights only; computed as Q6_K of the same values (held in k16
                         * records at the SIMD levels, as Q6_K rows without AVX2) */
    SKV_TYPE_Q4_K = 12,
    SKV_TYPE_Q5_K = 13,
    SKV_TYPE_Q6_K = 14,
    SKV_TYPE_IQ4_NL = 20, /* weights only: 4-bit indices into a fixed table of 16 int8 values */
    SKV_TYPE_IQ4_XS = 23, /* weights only: IQ4_NL's indices, 6-bit scales per 32 in super-blocks */
    SKV_TYPE_BF16 = 30,
    SKV_TYPE_COUNT = 39, /* one past the largest ggml id we know of; not a type */
} skv_type;

/* "f32", "f16", "q8_0", ...; NULL for an id sparsekv does not support. */
SKV_API const char *skv_type_name(skv_type t);
/* Parses a name as printed by skv_type_name (case-insensitive); false if unknown. */
SKV_API bool skv_type_from_name(const char *name, skv_type *out);

/* ---------------------------------------------------------------------------------------------
 * Model: read-only weights, shareable between contexts and threads
 * ------------------------------------------------------------------------------------------- */

typedef struct skv_model skv_model;
typedef struct skv_vocab skv_vocab;

/* Which dimensions RoPE turns together (see docs/ARCHITECTURES.md). */
typedef enum skv_rope_mode {
    SKV_ROPE_ADJACENT = 0, /* pairs (x[2i], x[2i+1]): llama */
    SKV_ROPE_NEOX = 1,     /* pairs (x[i], x[i + n_rot/2]): qwen2, qwen3, phi3 */
} skv_rope_mode;

/* How RoPE angles are stretched for contexts past the training length (docs/ARCHITECTURES.md). */
typedef enum skv_rope_scaling {
    SKV_ROPE_SCALING_NONE = 0,
    SKV_ROPE_SCALING_LINEAR = 1,   /* every angle times rope_freq_scale (1 / rope.scaling.factor) */
    SKV_ROPE_SCALING_YARN = 2,     /* YaRN (Qwen2.5 / Qwen3 long-context files): low frequencies
                                      interpolated by rope_freq_scale, high ones kept, a linear ramp
                                      between (llama.cpp's betas 32 and 1 over n_ctx_orig) */
    SKV_ROPE_SCALING_LONGROPE = 3, /* Phi-3.5, Phi-3-*-128k, Phi-4-mini: per-frequency divisors,
                                      rope_factors_short.weight for a context of at most
                                      n_ctx_orig positions and rope_factors_long.weight past it,
                                      chosen once per context by its n_ctx (as llama.cpp does) */
} skv_rope_scaling;

typedef struct skv_hparams {
    int n_vocab;
    int n_ctx_train; /* context length the model was trained for */
    int n_embd;      /* model dimension */
    int n_layer;
    int n_head;    /* query heads */
    int n_head_kv; /* key/value heads (GQA when < n_head) */
    int head_dim;  /* attention.key_length, else n_embd / n_head */
    int n_ff;      /* feed-forward hidden dimension */
    int n_rot;     /* RoPE dimension count (<= head_dim) */
    float rope_theta;
    float norm_eps;
    bool tied_output; /* output matrix is the token embedding */
    char arch[16];    /* general.architecture: llama, qwen2, qwen3, phi3 or mistral3 */
    skv_rope_mode rope_mode;
    float rope_freq_scale;  /* linear and YaRN scaling: 1 / rope.scaling.factor (1 = none) */
    bool rope_freq_factors; /* rope_freqs.weight divides each RoPE frequency (Llama 3.1+) */
    bool qkv_bias;          /* attention projections have biases */
    bool qk_norm;           /* per-head RMSNorm of q and k before RoPE (qwen3) */
    skv_rope_scaling rope_scaling;
    int n_ctx_orig;         /* rope.scaling.original_context_length (n_ctx_train when absent) */
    float rope_attn_factor; /* multiplies cos and sin of every embedding (1 = none): LongRoPE's
                               rope.scaling.attn_factor; YaRN's 1 + 0.1 ln(factor) times it
                               (mistral3 with yarn_log_multiplier m: divided by 1 + 0.1 m ln f) */
    float attn_temp_scale;  /* mistral3 (Llama 4's scaling): a query at position p is multiplied by
                               1 + attn_temp_scale ln(floor(p / n_ctx_orig) + 1) (0 = none) */
} skv_hparams;

/* Loads a GGUF model (general.architecture llama, qwen2, qwen3, phi3 or mistral3;
 * docs/ARCHITECTURES.md).
 * The file is mapped; float matrices (F32/F16/BF16) are copied once into the layout the kernels
 * stream (16-row panels); at the AVX2 and AVX-512 levels Q4_K, Q5_K, Q8_0, Q4_0/1, Q5_0/1,
 * IQ4_NL, IQ4_XS, Q2_K and Q3_K matrices (and Q6_K ones on AVX2 without AVX-512 VNNI) are
 * rewritten into k16 records (sixteen rows interleaved), q/k/v and gate/up fused into one matrix
 * each where they share a type; other quantized matrices of 2 MB and more are copied as stored.
 * Copies of 2 MB and more go into 2 MB-aligned memory with transparent huge pages advised
 * (decode reads every matrix once per token: with the mapping's 4 KB pages the TLB misses cost
 * up to a third of the decode speed). A copied matrix leaves the mapping, so a model takes about
 * its file size in memory, in each process: the environment variable SKV_NO_HUGE=1 (any value
 * but "" or "0") keeps quantized matrices in the mapping as stored (no records, no fusion),
 * which processes share, except Q2_K, Q3_K and IQ4_XS ones (the SIMD kernels read those from
 * records only), and panels in plain malloc memory (the results are the same bits). The copies
 * are written by a pool of one thread per core the process may run on, gone when the call
 * returns. Returns NULL and fills err on failure. */
SKV_API skv_model *skv_model_load(const char *path, skv_err *err);
SKV_API void skv_model_free(skv_model *model);

SKV_API const skv_hparams *skv_model_hparams(const skv_model *model);
/* The model's tokenizer (owned by the model). */
SKV_API const skv_vocab *skv_model_vocab(const skv_model *model);
/* Bytes of weight data the model reads per token (all matrices and norms). */
SKV_API uint64_t skv_model_weight_bytes(const skv_model *model);
/* The type most of the model's matrices are stored in. */
SKV_API skv_type skv_model_weight_type(const skv_model *model);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer: SentencePiece BPE with byte fallback (tokenizer.ggml.model = llama: Llama 2,
 * Mistral, Phi-3) and byte-level BPE (gpt2: GPT-2, Llama 3, Qwen2/2.5/3, SmolLM), see
 * docs/TOKENIZERS.md
 * ------------------------------------------------------------------------------------------- */

/* Loads the vocabulary of a GGUF file: a full model or a vocab-only file holding no tensors
 * (llama.cpp's ggml-vocab-*.gguf). Free with skv_vocab_free. */
SKV_API skv_vocab *skv_vocab_load(const char *path, skv_err *err);

/* Loads a vocabulary from a llama2.c tokenizer.bin (e.g. tok512.bin, the 32000-token
 * llama2-tokenizer/tokenizer.bin). bos/eos default to 1/2, unk to 0. n_vocab: the tokens to
 * read (the checkpoint's vocabulary size), or 0 for every token in the file; the file must hold
 * exactly that many: fewer or more (a tokenizer of another vocabulary, which llama2.c's run.c
 * would read the first n_vocab of) is SKV_ERR_FORMAT, naming the count; negative n_vocab is
 * SKV_ERR_INVALID_ARG. */
SKV_API skv_vocab *skv_vocab_load_llama2c(const char *path, int n_vocab, skv_err *err);
/* Frees a vocabulary from skv_vocab_load or skv_vocab_load_llama2c (never the one owned by a
 * model). */
SKV_API void skv_vocab_free(skv_vocab *vocab);

SKV_API int skv_vocab_n_tokens(const skv_vocab *vocab);
SKV_API int32_t skv_vocab_bos(const skv_vocab *vocab);
SKV_API int32_t skv_vocab_eos(const skv_vocab *vocab);
/* The raw piece of a token as stored in the vocabulary (SentencePiece: U+2581 for spaces;
 * byte-level BPE: the GPT-2 byte alphabet, "\u0120" for a space), or NULL. */
SKV_API const char *skv_vocab_piece(const skv_vocab *vocab, int32_t token);

/* "llama" (SentencePiece) or "gpt2" (byte-level BPE). */
SKV_API const char *skv_vocab_model(const skv_vocab *vocab);
/* The byte-level pre-tokenizer in use ("llama-bpe", "qwen2", ...); NULL for SentencePiece. */
SKV_API const char *skv_vocab_pre(const skv_vocab *vocab);
/* End-of-turn token (tokenizer.ggml.eot_token_id), -1 when the vocabulary names none. */
SKV_API int32_t skv_vocab_eot(const skv_vocab *vocab);
/* Whether token ends generation: EOS, EOT, EOM and the control tokens that close a turn
 * (<|eot_id|>, <|im_end|>, <|end|>, <|endoftext|>, ...). */
SKV_API bool skv_vocab_is_eog(const skv_vocab *vocab, int32_t token);
/* Whether the vocabulary asks for BOS before / EOS after a text (tokenizer.ggml.add_bos_token,
 * add_eos_token; without the key: BOS for SentencePiece and Llama 3, none for other byte-level
 * vocabularies). */
SKV_API bool skv_vocab_add_bos(const skv_vocab *vocab);
SKV_API bool skv_vocab_add_eos(const skv_vocab *vocab);
/* tokenizer.chat_template, or NULL. */
SKV_API const char *skv_vocab_chat_template(const skv_vocab *vocab);
/* Id of the token whose raw piece is exactly piece (e.g. "<|im_end|>"), or -1. Linear. */
SKV_API int32_t skv_vocab_find(const skv_vocab *vocab, const char *piece);

/* Return convention of the three calls below: >= 0 the count written; INT_MIN on invalid
 * arguments (NULL vocab, NULL buffer with a nonzero size, a token id out of range) or when memory
 * runs out; any other negative value -(count needed) when the buffer is too small.
 * A loaded vocabulary is read-only and may be shared between threads. */

/* Encodes len bytes of text (any bytes: invalid UTF-8 falls back to byte tokens). Prepends BOS
 * when add_bos. Returns the number of tokens written; when n_max is too small, returns
 * -(number needed) and writes nothing useful. */
SKV_API int skv_tokenize(const skv_vocab *vocab, const char *text, size_t len, bool add_bos,
                         int32_t *tokens, int n_max);

/* Like skv_tokenize, with llama.cpp's two switches: add_special adds BOS/EOS as the vocabulary
 * asks (skv_vocab_add_bos/_eos); parse_special matches the text of special tokens (CONTROL and
 * USER_DEFINED types: "<|begin_of_text|>", "<|im_start|>", "<s>" ...) in text and emits their ids.
 * Without parse_special such text is encoded as ordinary text, never as the special token. */
SKV_API int skv_tokenize_ex(const skv_vocab *vocab, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t *tokens, int n_max);

/* Decodes tokens to bytes. BOS/EOS produce nothing; byte tokens produce their byte; the space
 * that SentencePiece adds before the first word (the piece right after BOS, or the first piece
 * when strip_leading_space) is dropped. Returns bytes written (not NUL-terminated) or
 * -(bytes needed) when buf_size is too small. */
SKV_API int skv_detokenize(const skv_vocab *vocab, const int32_t *tokens, int n_tokens,
                           bool strip_leading_space, char *buf, int buf_size);

/* Bytes of one token as it would appear in generated text after token prev (so the leading space
 * after BOS is dropped). prev only matters when it is BOS: any other value, -1 for the first
 * token, is taken as "not after BOS". Returns bytes written or -(needed). */
SKV_API int skv_token_to_piece(const skv_vocab *vocab, int32_t prev, int32_t token, char *buf,
                               int buf_size);

/* ---------------------------------------------------------------------------------------------
 * Chat templates: built-in formats chosen from tokenizer.chat_template by recognisable markers
 * (no Jinja): Llama 3 (<|start_header_id|>), ChatML (<|im_start|>: Qwen, SmolLM), Phi-3
 * (<|user|> ... <|end|>) and Mistral NeMo's [INST]...[/INST] (Ministral 8B; not Mistral 7B's
 * "[INST] " nor Small 3's [SYSTEM_PROMPT]).
 * ------------------------------------------------------------------------------------------- */

typedef struct skv_chat_message {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
} skv_chat_message;

/* Name of the built-in format ("llama3", "chatml", "phi3", "mistral") that tmpl selects: tmpl is a
 * format name, or a template's text (Jinja, recognised by its markers), or NULL for the
 * vocabulary's tokenizer.chat_template. NULL (err filled) when there is no template or it is not
 * recognised. vocab may be NULL when tmpl is given (to check a name before a model is loaded). */
SKV_API const char *skv_chat_template_name(const skv_vocab *vocab, const char *tmpl, skv_err *err);
/* The special token that opens a message in that format ("<|start_header_id|>", "<|im_start|>",
 * "<|user|>", "[INST]"), or NULL as skv_chat_template_name. A vocabulary without it as a token
 * (skv_vocab_find < 0) reads the formatted conversation's markers as plain text. */
SKV_API const char *skv_chat_template_opener(const skv_vocab *vocab, const char *tmpl);

/* Formats a conversation as the template (tmpl as above; vocab may be NULL when tmpl is given)
 * does, ending with the assistant's header when add_generation_prompt (mistral: no header, the
 * user's [/INST] ends the prompt). The text holds the special
 * tokens' text (BOS included where the template writes it): encode it with skv_tokenize_ex(...,
 * add_special = false, parse_special = true), which also reads special-token text inside a
 * message's content as the token (as Hugging Face's apply_chat_template does: a message holding
 * "<|im_end|>" ends its turn there), or with skv_chat_tokenize, which does not. Returns bytes
 * written (a NUL follows when room
 * remains), -(bytes needed) when buf_size is too small, INT_MIN on error (err filled: unknown or
 * missing template, a role other than system/user/assistant, NULL arguments). */
SKV_API int skv_chat_format(const skv_vocab *vocab, const char *tmpl,
                            const skv_chat_message *messages, int n_messages,
                            bool add_generation_prompt, char *buf, int buf_size, skv_err *err);
/* The conversation formatted as skv_chat_format does, encoded: the template's special tokens are
 * tokens, the messages' contents are text whatever they spell (content from someone untrusted
 * cannot open or close a turn); everything else tokenizes as skv_tokenize_ex(..., false, true)
 * of the formatted text does. Returns the token count, -(tokens needed) when n_max is too small,
 * INT_MIN on error (err filled, as skv_chat_format's, or a NULL vocab). */
SKV_API int skv_chat_tokenize(const skv_vocab *vocab, const char *tmpl,
                              const skv_chat_message *messages, int n_messages,
                              bool add_generation_prompt, int32_t *tokens, int n_max, skv_err *err);

/* ---------------------------------------------------------------------------------------------
 * Context: per-sequence state (KV cache, scratch, captured queries) over a shared model
 * ------------------------------------------------------------------------------------------- */

/* One context serves one thread at a time (its calls are not synchronised); contexts over one
 * model may run in parallel, each with its own worker threads. */
typedef struct skv_context skv_context;
typedef struct skv_cache skv_cache;

typedef enum skv_position_mode {
    SKV_POSITIONS_ORIGINAL = 0, /* retained keys keep their original RoPE positions (default) */
    SKV_POSITIONS_REROTATE = 1, /* StreamingLLM: retained keys re-rotated to their index in the
                                   cache; tokens appended afterwards are placed right after */
} skv_position_mode;

typedef struct skv_context_params {
    int n_ctx;          /* maximum logical length; 0 = the model's n_ctx_train (more is
                           allowed: memory grows with the tokens, not with n_ctx, and quality
                           past the training length is the model's). A LongRoPE model turns by
                           its long factors when n_ctx > n_ctx_orig, else by its short ones */
    int n_threads;      /* worker threads, at most SKV_MAX_THREADS; 0 = one per core this process
                           may run on (sched_getaffinity: a cpuset or taskset counts) */
    skv_type kv_type;   /* SKV_TYPE_F32 (default), SKV_TYPE_F16 or SKV_TYPE_Q8_0 */
    int capture_window; /* when > 0, every forward call keeps the post-RoPE queries of its last
                           capture_window tokens (all layers), for the engine protocol; 0 costs
                           nothing */
} skv_context_params;

SKV_API skv_context_params skv_context_default_params(void);
SKV_API skv_context *skv_context_new(const skv_model *model, const skv_context_params *params,
                                     skv_err *err);
SKV_API void skv_context_free(skv_context *ctx);

/* A new context over the same model with a deep copy of ctx's cache, captured queries, decoding
 * budget (skv_context_set_budget, with its count of cuts) and attention accumulation (h2o). The
 * original is never modified. */
SKV_API skv_context *skv_context_clone(const skv_context *ctx, skv_err *err);

SKV_API const skv_model *skv_context_model(const skv_context *ctx);
/* Logical length: the position the next token will be given. */
SKV_API int skv_context_n_past(const skv_context *ctx);
SKV_API int skv_context_n_ctx(const skv_context *ctx);
SKV_API int skv_context_n_threads(const skv_context *ctx);
/* Gives every kv head room for n_tokens more entries now (past what it holds, at most n_ctx),
 * so that the forward calls that add them do not grow the cache on the way (a growth moves or
 * copies every head's arrays at once): before a long prompt, or on a clone about to decode (a
 * clone has exactly the room its entries take). The room is given back by a compression or
 * skv_context_free. SKV_ERR_INVALID_ARG for n_tokens < 0; SKV_ERR_NOMEM with every entry intact
 * (heads grown before the failure keep their room). */
SKV_API skv_status skv_context_reserve(skv_context *ctx, int n_tokens, skv_err *err);
/* Drops the whole cache (logical length back to 0) and captured queries; a decoding budget and
 * attention accumulation stay set, their counts (cuts, accumulated attention) back to zero. The
 * cache keeps its memory for the next prompt (skv_cache_bytes_allocated() says how much; a
 * compression gives the part past what it keeps back, skv_context_free all of it). */
SKV_API void skv_context_reset(skv_context *ctx);

typedef enum skv_logits_mode {
    SKV_LOGITS_NONE = 0, /* compute no logits (fastest prefill) */
    SKV_LOGITS_LAST = 1, /* logits of the last token: [n_vocab] */
    SKV_LOGITS_ALL = 2,  /* logits of every token: [n_tokens, n_vocab] */
} skv_logits_mode;

/* Runs n_tokens through the model at positions n_past .. n_past+n_tokens-1 (one batched pass),
 * appending their keys and values to the cache. Attention is causal by position. logits must
 * hold the rows mode asks for (may be NULL for SKV_LOGITS_NONE). SKV_ERR_NUMERIC when NaN or
 * Inf reached the logits asked for ("non-finite logits at position P") or, with
 * SKV_LOGITS_NONE, the last layer's hidden state of a token ("non-finite hidden state at
 * position P"); the tokens are in the cache then, as after a success (reset or drop the
 * context). SKV_ERR_INVALID_ARG for tokens NULL, n_tokens < 1 or a token outside the
 * vocabulary; SKV_ERR_STATE when the tokens do not fit in n_ctx. */
SKV_API skv_status skv_forward(skv_context *ctx, const int32_t *tokens, int n_tokens,
                               skv_logits_mode mode, float *logits, skv_err *err);

/* Captured post-RoPE queries of the last forward call's last n tokens (n <= capture_window), as
 * attention used them (mistral3: times the query temperature):
 * q points at [n_head, n, head_dim] for the layer; NULL when nothing was captured.
 * *first_pos receives the position of the first captured query. */
SKV_API const float *skv_context_captured_queries(const skv_context *ctx, int layer, int *n,
                                                  int *first_pos);

/* The context's cache (owned by the context). */
SKV_API skv_cache *skv_context_cache(skv_context *ctx);
SKV_API const skv_cache *skv_context_cache_const(const skv_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * KV cache: per layer and per kv head, a sorted array of retained positions with their K
 * (post-RoPE) and V rows. Dense = every head holds 0..T-1.
 * ------------------------------------------------------------------------------------------- */

SKV_API int skv_cache_n_layer(const skv_cache *cache);
SKV_API int skv_cache_n_head_kv(const skv_cache *cache);
SKV_API int skv_cache_head_dim(const skv_cache *cache);
SKV_API skv_type skv_cache_type(const skv_cache *cache);
/* Logical length T: survives selection. */
SKV_API int skv_cache_n_past(const skv_cache *cache);
SKV_API skv_position_mode skv_cache_position_mode(const skv_cache *cache);

/* A NULL cache or a (layer, kv head) out of range: the calls below that return a status give
 * SKV_ERR_INVALID_ARG, skv_cache_head_len 0, skv_cache_head_positions NULL. */

/* Number of entries retained in (layer, kv head). */
SKV_API int skv_cache_head_len(const skv_cache *cache, int layer, int head);
/* Entries of the longest kv head (what a decoding budget bounds); 0 for NULL. */
SKV_API int skv_cache_longest(const skv_cache *cache);
/* Retained positions of (layer, kv head): [len], ascending. Borrowed; valid until the cache
 * changes (skv_forward, skv_compress, a selection, a cut, reset: each may move the arrays,
 * a failed skv_compress included). */
SKV_API const int32_t *skv_cache_head_positions(const skv_cache *cache, int layer, int head);

/* Dense float copies of a head's keys and values (the seed's dense_kv). k and v (either may be
 * NULL) must hold [len, head_dim] floats; pos (may be NULL) [len]. */
SKV_API skv_status skv_cache_head_read(const skv_cache *cache, int layer, int head, float *k,
                                       float *v, int32_t *pos, skv_err *err);

/* Keeps, in every kv head of one layer, only the listed positions (logical positions, not
 * indices): positions[n_positions], ascending, unique, each present in every head (else
 * SKV_ERR_INVALID_ARG, cache unchanged). skv_cache_select_head: one kv head, its own list. */
SKV_API skv_status skv_cache_select_layer(skv_cache *cache, int layer, const int32_t *positions,
                                          int n_positions, skv_err *err);
SKV_API skv_status skv_cache_select_head(skv_cache *cache, int layer, int head,
                                         const int32_t *positions, int n_positions, skv_err *err);

/* Re-rotates every head's retained keys from their original position to their index in the
 * head (StreamingLLM) and switches the cache to SKV_POSITIONS_REROTATE: tokens appended later
 * are rotated at (head length + i) while still being causal by logical position. */
SKV_API skv_status skv_cache_rerotate(skv_cache *cache, skv_err *err);

/* Bytes held by K, V and positions: of one layer, or of the whole cache (layer < 0; a layer past
 * the last holds 0). Counts retained entries (not spare capacity). */
SKV_API uint64_t skv_cache_bytes(const skv_cache *cache, int layer);
/* Bytes actually allocated (including spare capacity). */
SKV_API uint64_t skv_cache_bytes_allocated(const skv_cache *cache);

/* ---------------------------------------------------------------------------------------------
 * Compression: score -> allocate -> select (docs/SPEC.md)
 * ------------------------------------------------------------------------------------------- */

typedef enum skv_protocol {
    SKV_PROTOCOL_SEED = 0,   /* window tokens scored on a copy of the prefix cache, not kept */
    SKV_PROTOCOL_ENGINE = 1, /* window = the last W positions already in the cache; their
                                queries come from the prefill's capture; window kept */
} skv_protocol;

typedef enum skv_pooling { SKV_POOL_MAX = 0, SKV_POOL_AVG = 1 } skv_pooling;

typedef struct skv_compress_params {
    const char *policy; /* a registry name or alias (skv_policy_describe, `sparsekv
                           policies`): sink_recent|streaming, random, attention|snapkv,
                           pyramid|pyramidkv, knorm, keydiff, tova, h2o, adakv, ... */
    double keep_frac;   /* in (0, 1] */
    skv_protocol protocol;
    /* seed protocol: window tokens scored as if on a copy of the cache (not kept), read by the
     * policies that need a window (attention, pyramid, tova, adakv); ignored by the others */
    const int32_t *window_tokens;
    int n_window;        /* seed: number of window_tokens; engine: window size W, whose
                            positions [T-W, T) are always kept and count toward keep (when
                            keep <= W only the last keep of them stay); engine sink_recent and
                            random keep the window too */
    uint64_t seed;       /* random */
    int sinks;           /* sink_recent, default 4 */
    skv_pooling pooling; /* attention, pyramid, adakv; default max */
    int kernel;          /* pooling kernel, default 7, in [1, 65536]; even kernels: position i
                            takes the padded window starting at i (the seed's mapping) */
    int window_keep;     /* last prefix positions forced in, default 32 (engine pyramid: the
                            budget rule's window is W + window_keep) */
    skv_position_mode positions; /* default original */
} skv_compress_params;

/* Defaults: sink_recent at keep_frac 1.0 (compresses nothing), seed protocol, sinks 4, max
 * pooling, kernel 7, window_keep 32, original positions. */
SKV_API skv_compress_params skv_compress_default_params(void);

/* What a compression did. Arrays are owned by the info; release with skv_compress_info_free. */
typedef struct skv_compress_info {
    char policy[32]; /* canonical name */
    double keep_frac;
    int T;              /* logical length of the compressed prefix */
    int keep;           /* max(1, round_half_even(keep_frac * T)) clamped to [1, T] */
    double compress_ms; /* all selection work, window pass included (h2o: the forward passes'
                           time summing the attention it selects by, too) */
    double window_ms;   /* the window pass's share of compress_ms (seed protocol) */
    int window_tokens;  /* the window W used: 0 in the seed protocol for the policies that need
                           none; in the engine protocol W (every policy keeps the window) */
    int n_layer, n_head_kv;
    int *layer_budgets;    /* [n_layer] (pyramid: the rule's values, not clamped to T;
                              otherwise keep per layer) */
    int *kept;             /* [n_layer, n_head_kv] entries kept */
    uint64_t bytes_before; /* KV bytes before / after: keys, values and each entry's 4-byte
                              position (what the cache holds per entry) */
    uint64_t bytes_after;
    /* what the selection really was, per layer summed over its kv heads: entries kept because
     * they were forced (engine window, window_keep, sinks, h2o's recent) and entries chosen by
     * score; forced[l] + by_score[l] = sum of kept[l, h] */
    int *forced;             /* [n_layer] */
    int *by_score;           /* [n_layer] */
    uint64_t selection_hash; /* FNV-1a of every head's kept positions: equal selections hash
                                equal */
    double cache_ms; /* the share of compress_ms spent applying the selection: moving the kept
                        entries, giving the rest's memory back to the OS, re-rotating (paid by
                        every policy, scoring or not) */
} skv_compress_info;

SKV_API void skv_compress_info_free(skv_compress_info *info);

/* Compresses ctx's cache in place under params (docs/SPEC.md). The cache must be a fresh dense
 * prefill in original-position mode (else SKV_ERR_STATE). A policy that scores a position NaN
 * (from NaN or infinite keys or queries, which skv_forward reported as SKV_ERR_NUMERIC) is
 * SKV_ERR_NUMERIC: no ranking is made from them. On error the cache holds what it held (its
 * entries and room; its arrays may have moved: the seed window pass appends to them).
 * info may be NULL; it is zeroed first, so skv_compress_info_free is safe after a failure. */
SKV_API skv_status skv_compress(skv_context *ctx, const skv_compress_params *params,
                                skv_compress_info *info, skv_err *err);

/* Canonical policy name for a name or alias (exact, lower case, as the seed's), or NULL if
 * unknown. */
SKV_API const char *skv_policy_canonical(const char *name);
/* Whether a policy needs window queries. */
SKV_API bool skv_policy_needs_window(const char *name);

/* ---- the policy registry: one row per policy (src/policies/), the single source of truth */

typedef struct skv_policy_about {
    const char *name;   /* canonical */
    const char *alias;  /* or NULL */
    const char *paper;  /* source */
    const char *rule;   /* the score in one line */
    const char *cost;   /* what it costs beyond the prefill */
    const char *params; /* the skv_compress_params fields it reads, comma-separated, or "" */
    bool needs_window;  /* window queries (engine: captured; seed: a window pass on a copy) */
    bool needs_prefill_attention; /* attention summed during the prefill
                                     (skv_context_accumulate_attention before it) */
    bool decode;                  /* usable under a decoding budget (skv_context_set_budget) */
    bool layer_budgets;           /* its own layer budgets (info.layer_budgets differ from keep) */
    bool builtin;                 /* false: registered through skv_policy_register */
    bool needs_values;            /* value vectors (a registered policy that asked for them) */
} skv_policy_about;

/* Rows in the registry (built-in first, then registered ones, in order). */
SKV_API int skv_policy_count(void);
/* Row i, or SKV_ERR_INVALID_ARG when i is out of range. Strings are static. */
SKV_API skv_status skv_policy_describe(int i, skv_policy_about *out, skv_err *err);

/* The compression parameters (skv_compress_params fields) with their CLI flag, default and
 * accepted range, as text. */
typedef struct skv_policy_param_about {
    const char *name, *flag, *def, *range, *help;
} skv_policy_param_about;
SKV_API int skv_policy_param_count(void);
SKV_API const skv_policy_param_about *skv_policy_param_at(int i);

/* A policy written outside the library scores one (layer, kv head) at a time; selection,
 * the engine window and budgets are the library's (top-keep, ties toward the higher position).
 * keys: [n, head_dim] post-RoPE keys of the n scored positions (float copies); values: their
 * values, [n, head_dim] float copies (NULL unless the policy set needs_values); queries: the
 * window's post-RoPE queries of the group's query heads, row (i, w) at
 * queries + i * query_head_stride + w * head_dim (NULL when the policy needs no window).
 * Every pointer is valid during the call only.
 * The score function is called once per (layer, kv head), from the context's worker threads,
 * several at once: it must be safe to call concurrently (user state shared between calls needs
 * atomics or a lock). Its status comes back from skv_compress (or skv_forward, under a budget),
 * with "policy 'NAME' failed on layer L kv head H: " and the sentence it wrote into err->msg
 * (when it set err->status too, its message as it is); a value that is no skv_status comes back
 * as SKV_ERR_INVALID_ARG, a NaN score (or one left unwritten) as SKV_ERR_NUMERIC. */
typedef struct skv_policy_head {
    int layer, kv_head, head_dim;
    int n; /* positions scored: score[0..n) */
    const float *keys;
    const float *queries;
    int group, n_window;
    size_t query_head_stride;
    const float *values;
    const int32_t *positions; /* [n] the scored entries' logical positions (ascending; after a
                                 cut, entry 0 is not position 0: sinks are positions[i] < S) */
} skv_policy_head;
typedef skv_status (*skv_policy_score_fn)(void *user, const skv_policy_head *head, double *score,
                                          skv_err *err);
typedef struct skv_policy_def {
    const char *name;  /* [a-z0-9_]{1,31}, not a registered name or alias (copied) */
    const char *paper; /* shown by `sparsekv policies` (copied; may be NULL) */
    bool needs_window;
    bool needs_values; /* head->values filled (a float copy of each head's values per call); in
                          what was needs_window's padding, so the struct kept its 40 bytes */
    skv_policy_score_fn score;
    void *user;
} skv_policy_def;
/* Adds a row to the registry (at most 64 registered rows). Not safe while another thread
 * compresses or registers. */
SKV_API skv_status skv_policy_register(const skv_policy_def *def, skv_err *err);

/* h2o needs the attention every prompt query paid to every key: turned on before the prefill,
 * the forward pass sums it per (layer, kv head, entry) (one extra q.k and softmax per visible
 * entry of every token: about the attention's own score cost). Off costs nothing. SKV_ERR_STATE
 * when turned on over a non-empty cache. */
SKV_API skv_status skv_context_accumulate_attention(skv_context *ctx, bool on, skv_err *err);

/* Decoding-time compression (docs/SPEC.md): after every forward call that brings the tokens since
 * the last cut to >= interval (or leaves a head above max_entries + interval), every head
 * holding more than max_entries entries is cut back to max_entries by params->policy, scored
 * with the last min(params->n_window, interval) tokens' queries as the window (kept; n_window 0:
 * interval);
 * params->positions = rerotate re-rotates after every cut, and then the logical length may run
 * past n_ctx. A head holds at most max_entries + interval entries when calls end where cuts
 * are due (skv_context_budget_piece; the CLI's and Python's generate feed their prompts so); a
 * longer call holds all of its tokens until its end, except that under rerotate a call for
 * which the heads lack room is taken in pieces, each ending where a cut is due (a prompt longer
 * than n_ctx streams; captured queries are then the last piece's). An error in a later piece
 * leaves the earlier ones in the cache. Heads left with no room for another token are cut at
 * once. A context whose heads already hold n_ctx entries cannot take a budget (SKV_ERR_STATE: a
 * cut needs new tokens' queries, and none fit). keep_frac, protocol and
 * window_tokens are ignored. max_entries = 0 removes the budget; otherwise it must be larger
 * than the window, min(n_window, interval) with n_window 0 meaning interval (the CLI's and
 * Python's default) (SKV_ERR_INVALID_ARG). The policy must allow
 * decode (skv_policy_about.decode). Every head must hold the same number of entries (not after
 * pyramid or adakv, or skv_cache_select_head): else SKV_ERR_STATE, here and from skv_forward
 * (before any token enters the cache) while the budget is set. A cut runs after the forward
 * call's tokens are in the cache: when it fails (out of memory, a registered policy's error)
 * skv_forward returns that status with the tokens in the cache. h2o turns on
 * skv_context_accumulate_attention (so the cache must be empty). */
SKV_API skv_status skv_context_set_budget(skv_context *ctx, const skv_compress_params *params,
                                          int max_entries, int interval, skv_err *err);
/* Cuts made under the budget so far. */
SKV_API int skv_context_budget_cuts(const skv_context *ctx);
/* How many tokens the next call should bring so that it ends where a cut is due: interval less
 * the tokens fed since the last cut (the whole interval once that much has come); 0 without a
 * budget. A caller keeping the bound over a long input feeds it pieces of this size. */
SKV_API int skv_context_budget_piece(const skv_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Sampling
 * ------------------------------------------------------------------------------------------- */

typedef struct skv_sampler_params {
    float temperature; /* 0 = greedy (argmax, lowest id on ties) */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    uint64_t seed;
} skv_sampler_params;

typedef struct skv_sampler skv_sampler;

SKV_API skv_sampler_params skv_sampler_default_params(void);
SKV_API skv_sampler *skv_sampler_new(const skv_sampler_params *params, skv_err *err);
SKV_API void skv_sampler_free(skv_sampler *s);
/* Picks a token from logits [n_vocab]; logits may be modified. A NaN logit counts as -inf. -1
 * when s or logits is NULL or n_vocab <= 0. */
SKV_API int32_t skv_sampler_sample(skv_sampler *s, float *logits, int n_vocab);

/* A small, documented PRNG (xoshiro256** seeded through splitmix64) used for sampling, the
 * random policy and synthetic models. Its state is the caller's struct, never NULL. */
typedef struct skv_rng {
    uint64_t s[4];
} skv_rng;
SKV_API void skv_rng_seed(skv_rng *rng, uint64_t seed);
SKV_API uint64_t skv_rng_next(skv_rng *rng);
/* Uniform in [0, 1). */
SKV_API double skv_rng_uniform(skv_rng *rng);
/* Uniform in [0, n), unbiased. */
SKV_API uint64_t skv_rng_below(skv_rng *rng, uint64_t n);

/* ---------------------------------------------------------------------------------------------
 * Conversion and model files
 * ------------------------------------------------------------------------------------------- */

/* llama2.c checkpoint (v0 or v1) + tokenizer.bin -> GGUF v3 (F32, tokenizer embedded). */
SKV_API skv_status skv_convert_llama2c(const char *checkpoint_path, const char *tokenizer_path,
                                       const char *out_path, skv_err *err);
/* What a llama2.c checkpoint does not record, for models trained with other values. */
typedef struct skv_llama2c_params {
    float rope_theta; /* RoPE base frequency written as llama.rope.freq_base (default 10000,
                         what llama2.c's run.c uses) */
} skv_llama2c_params;
SKV_API skv_llama2c_params skv_llama2c_default_params(void);
/* skv_convert_llama2c with params (NULL: the defaults). SKV_ERR_INVALID_ARG also when
 * rope_theta is not a finite number > 0. */
SKV_API skv_status skv_convert_llama2c_ex(const char *checkpoint_path, const char *tokenizer_path,
                                          const char *out_path, const skv_llama2c_params *params,
                                          skv_err *err);

/* Rewrites a GGUF model with its 2-D weight matrices in type (norms stay F32), on n_threads
 * threads (0: all cores; at most SKV_MAX_THREADS). A matrix whose rows are not whole blocks of
 * type takes, when they are whole blocks of 32, the 32-block type just above type in bits (as
 * llama-quantize: Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K, Q4_0 for Q2_K and Q3_K, IQ4_NL
 * for IQ4_XS), else F16; one stored in a type no larger than that is copied. SKV_ERR_INVALID_ARG
 * for an id that is negative or >= SKV_TYPE_COUNT or a bad thread count, SKV_ERR_UNSUPPORTED for a
 * type sparsekv does not write. */
SKV_API skv_status skv_quantize_model(const char *in_path, const char *out_path, skv_type type,
                                      int n_threads, skv_err *err);

/* ---------------------------------------------------------------------------------------------
 * SIMD level of the kernels
 * ------------------------------------------------------------------------------------------- */

/* The level the kernels run at: "scalar" (plain C references), "avx2" (AVX2+FMA+F16C) or
 * "avx512". Chosen once per process from CPUID: the widest level both the CPU and this build
 * have, lowered by the environment variable SKV_SIMD=scalar|avx2|avx512|auto (SKV_FORCE_SCALAR=1
 * is the same as SKV_SIMD=scalar). */
SKV_API const char *skv_simd_level(void);
/* True when the prefill of F16 and BF16 weights (products of 32 or more rows), and the prefill
 * attention over an F16 cache (head size a multiple of 32), run on AMX tiles:
 * the avx512 level on a CPU with AMX-BF16 whose OS grants the tile state (Linux 5.16 and later),
 * and SKV_NO_AMX unset (SKV_NO_AMX=1 keeps the FMA / vdpbf16ps code). F16 weights are then
 * multiplied as exact bf16 parts (the weight in two, x in three), summed in float: float
 * accumulation error like the FMA code's, other bits; BF16 weights take x rounded to bf16 as
 * vdpbf16ps does. Such a product gives a row the same bits in any batch of 32 rows or more; a
 * smaller batch (decode) runs the FMA code, within float rounding of it. The attention's scores
 * and weighted values are exact bf16 partial products summed in float as well. */
SKV_API bool skv_simd_amx(void);
/* Whether decode reads Q4_K, Q5_K, Q8_0, Q4_0/1 and Q5_0/1 weights (k16 records) as several
 * prefetched streams per thread (else one stream): true at a SIMD level; SKV_K16_PREFETCH=0|1
 * (read once) overrides that. The results are the same bits either way; only the speed differs. */
SKV_API bool skv_simd_k16_prefetch(void);
/* How many bytes ahead of its loads that decode asks for its weights, as measured per CPU: 3072
 * on AMD and Hygon up to family 0x18 (a Zen 1), 2048 on later AMD (a Zen 5; Zen 3 and 4 not
 * measured), 1024 on other CPUs (an AMX Xeon); 0 when skv_simd_k16_prefetch() is false. */
SKV_API int skv_simd_k16_ahead(void);
/* The widest level this CPU (and its OS) supports, whatever SKV_SIMD says or this build has. */
SKV_API const char *skv_simd_cpu_level(void);
/* The CPU features seen, space-separated ("sse4.2 avx avx2 fma f16c avx512f ..."). */
SKV_API const char *skv_simd_cpu_features(void);
/* NULL when SKV_SIMD is unset or was honoured; else why not, and which level runs instead (an
 * unknown value is ignored; a level the CPU or build lacks falls back to the widest below it).
 * Also names an SKV_K16_PREFETCH value other than 0 or 1 (ignored). The library never prints
 * it: the CLI does, on stderr. */
SKV_API const char *skv_simd_warning(void);

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

/* The library's version string ("0.2.0") and number (SKV_VERSION_NUMBER of the library). */
SKV_API const char *skv_version(void);
SKV_API int skv_version_number(void);
/* Monotonic wall clock in milliseconds (for timing reports). */
SKV_API double skv_time_ms(void);

#ifdef __cplusplus
}
#endif

#endif /* SPARSEKV_H */
