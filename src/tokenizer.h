/* tokenizer.h — internal constructors of the vocabulary (the API is in sparsekv.h). */
#ifndef SKV_TOKENIZER_H
#define SKV_TOKENIZER_H

#include "common.h"
#include "gguf.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    SKV_TOKEN_NORMAL = 1,
    SKV_TOKEN_UNKNOWN = 2,
    SKV_TOKEN_CONTROL = 3,
    SKV_TOKEN_USER = 4,
    SKV_TOKEN_UNUSED = 5,
    SKV_TOKEN_BYTE = 6
};

/* Conventions of the public calls beyond sparsekv.h (implemented in tokenizer.c):
 *   - skv_tokenize, skv_detokenize and skv_token_to_piece return INT_MIN on invalid arguments
 *     (NULL vocab, NULL buffer with a nonzero size, token id out of range) or when memory runs
 *     out; -(needed) only ever means "buffer too small".
 *   - Encoding departs from SentencePiece only where that keeps decode(encode(s)) == s for
 *     every byte string: invalid UTF-8 bytes and a literal U+2581 in the text become byte
 *     tokens, and a space without a "\u2581" piece becomes <0x20>.
 *   - <unk> decodes to " \u2047 " (as SentencePiece prints it); control tokens to nothing.
 *   - A vocabulary is immutable after loading: encoding/decoding are thread-safe. */

/* Builds the vocabulary of a GGUF file (tokenizer.ggml.model = "llama": tokens, scores,
 * token_type, bos/eos/unk ids, optional add_space_prefix). Clear error when any of it is missing or
 * inconsistent. The vocabulary copies what it needs: g may be closed afterwards. */
skv_vocab *skv_vocab_from_gguf(const skv_gguf *g, skv_err *err);

/* Score and GGUF token type of a token (used by the llama2.c converter). */
float skv_vocab_score(const skv_vocab *v, int32_t token);
int skv_vocab_token_type(const skv_vocab *v, int32_t token);
int32_t skv_vocab_unk(const skv_vocab *v);

#endif
