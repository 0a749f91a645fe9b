/* tokenizer.h — internal constructors of the vocabulary (the API is in sparsekv.h). */
#ifndef SKV_TOKENIZER_H
#define SKV_TOKENIZER_H

#include "common.h"
#include "gguf.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum { SKV_TOKEN_NORMAL = 1, SKV_TOKEN_UNKNOWN = 2, SKV_TOKEN_CONTROL = 3,
       SKV_TOKEN_USER = 4, SKV_TOKEN_UNUSED = 5, SKV_TOKEN_BYTE = 6 };

/* Builds the vocabulary of a GGUF file (tokenizer.ggml.model = "llama": tokens, scores,
 * token_type, bos/eos/unk ids). Clear error when any of it is missing or inconsistent. */
skv_vocab *skv_vocab_from_gguf(const skv_gguf *g, skv_err *err);

/* Score and GGUF token type of a token (used by the llama2.c converter). */
float skv_vocab_score(const skv_vocab *v, int32_t token);
int skv_vocab_token_type(const skv_vocab *v, int32_t token);
int32_t skv_vocab_unk(const skv_vocab *v);

#endif
