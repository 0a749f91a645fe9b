/* internal.h — the vocabulary's layout, shared by the files of the tokenizer (tokenizer.c:
 * loading, SentencePiece, decoding; tokenizer/bpe.c: byte-level BPE; tokenizer/chat.c: chat
 * templates). Not part of the API. */
#ifndef SKV_TOKENIZER_INTERNAL_H
#define SKV_TOKENIZER_INTERNAL_H

#include "tokenizer.h"

typedef enum vocab_kind {
    VOCAB_SPM = 0, /* tokenizer.ggml.model = llama: SentencePiece BPE with byte fallback */
    VOCAB_BPE = 1, /* tokenizer.ggml.model = gpt2: byte-level BPE */
} vocab_kind;

/* One merge rule: the pair (left, right) of token ids merges into result; lower rank first. */
typedef struct bpe_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX marks an empty slot */
    int32_t rank;
    int32_t result;
} bpe_merge;

typedef struct skv_pretok skv_pretok; /* compiled pre-tokenizer regexes (bpe.c) */

struct skv_vocab {
    int n;
    vocab_kind kind;
    char *arena;           /* NUL-terminated normalized pieces, then decoded surfaces */
    size_t *piece_off;     /* [n] */
    uint32_t *piece_len;   /* [n] */
    size_t *surf_off;      /* [n] text a token decodes to */
    uint32_t *surf_len;    /* [n] */
    float *score;          /* [n] */
    uint8_t *type;         /* [n] GGUF token type */
    uint8_t *eog;          /* [n] 1 when the token ends generation */
    int32_t bos, eos, unk; /* unk is -1 when the vocabulary has none (byte-level BPE) */
    int32_t eot, eom;      /* -1 when absent */
    bool add_space_prefix;
    bool add_bos, add_eos;   /* what skv_tokenize_ex adds with add_special */
    int32_t byte_token[256]; /* token of each byte value, -1 when the vocabulary lacks it */
    int32_t *table;          /* [table_mask + 1] open addressing over mergeable pieces; -1 empty */
    uint32_t table_mask;
    uint32_t max_piece_len; /* longest mergeable piece: longer slices need no lookup */

    /* Special tokens (CONTROL and USER_DEFINED with a nonempty piece), matched in text only on
     * request: ids sorted by first byte, then longest first; special_first[b] .. [b + 1] is the
     * range starting with byte b. */
    int32_t *special;
    int n_special;
    int special_first[257];

    /* Byte-level BPE */
    bpe_merge *merges; /* [merges_mask + 1] */
    uint32_t merges_mask;
    int n_merges;
    bool ignore_merges;      /* a pre-token that is a whole token is emitted as is (Llama 3) */
    char byte_spell[256][2]; /* each byte in the GPT-2 alphabet (UTF-8, 1 or 2 bytes) */
    uint8_t byte_spell_len[256];
    skv_pretok *pre;
    char pre_name[64];

    char *chat_template; /* tokenizer.chat_template, or NULL */
};

/* A growable array of tokens. */
typedef struct tokvec {
    int32_t *a;
    size_t n, cap;
} tokvec;

bool skv_tokvec_push(tokvec *t, int32_t id);
/* skv_tokenize_ex(v, text, len, false, true, ...) except that no special token is matched
 * inside the [n_skip] ascending byte ranges skip[i] = [begin, end) (chat contents). */
int skv_tokenize_skipping(const skv_vocab *v, const char *text, size_t len, const size_t (*skip)[2],
                          int n_skip, int32_t *tokens, int n_max);

/* Token of a mergeable piece (exact bytes), or -1. */
int32_t skv_vocab_lookup(const skv_vocab *v, const char *s, size_t len);

/* Byte-level BPE (bpe.c). skv_bpe_load reads tokenizer.ggml.merges and tokenizer.ggml.pre after the
 * pieces, types and lookup table are in place; skv_bpe_encode appends the tokens of one fragment of
 * text (no special tokens in it) to out; false when memory runs out or the regex engine fails. */
skv_status skv_bpe_load(skv_vocab *v, const skv_gguf *g, skv_err *err);
bool skv_bpe_encode(const skv_vocab *v, const char *text, size_t len, tokvec *out);
void skv_bpe_free(skv_vocab *v);
/* Whether a vocabulary of this tokenizer.ggml.pre (NULL: none) adds BOS when the file does not
 * say (tokenizer.ggml.add_bos_token). */
bool skv_bpe_pre_adds_bos(const char *pre);
/* Compiles a pre-tokenizer of n (1..2) stages; clear error when PCRE2 refuses an expression. */
skv_pretok *skv_bpe_pretok_compile(const char *const *patterns, int n, skv_err *err);
void skv_bpe_pretok_free(skv_pretok *p);
/* Decoded bytes of a byte-level piece (GPT-2 alphabet back to bytes) written to dst (at most
 * len bytes); returns the count. */
size_t skv_bpe_decode_piece(const char *piece, size_t len, char *dst);
/* The codepoint a byte is spelled with in the GPT-2 alphabet. */
uint32_t skv_bpe_byte_to_cp(uint8_t b);

#endif
