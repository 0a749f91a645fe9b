/* bpe.c — byte-level BPE (tokenizer.ggml.model = gpt2: GPT-2, Llama 3, Qwen2/2.5/3, SmolLM).
 *
 * Encoding one fragment of text (no special tokens in it):
 *   1. Pre-tokenize: the regular expression(s) of tokenizer.ggml.pre cut the text into pieces;
 *      matches and the gaps between them are all pieces ("isolated" splitting). A pre-tokenizer
 *      of two stages (smollm: single digits, then GPT-2's expression) splits each piece of the
 *      first stage again. PCRE2 with UTF + UCP (Unicode properties for \p{L}, \s ...), JIT when
 *      available, and PCRE2_MATCH_INVALID_UTF: bytes that are not UTF-8 never match and so land
 *      in gaps, where they stay byte tokens (decode(encode(s)) == s for every byte string).
 *   2. Each piece starts as one token per byte (the byte spelled in GPT-2's byte-to-unicode
 *      alphabet); adjacent pairs merge by rank (tokenizer.ggml.merges order, lowest first; ties:
 *      leftmost) until no pair has a merge. Symbols live in a linked list, candidate pairs in a
 *      binary heap; stale entries are detected when popped. With ignore_merges (Llama 3), a
 *      piece that is itself a token is emitted whole.
 * No Unicode normalization is applied (Qwen's tokenizer.json asks for NFC: text that is not in
 * NFC may tokenize differently, as in llama.cpp). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/internal.h"

#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

#define MAX_STAGES 2

struct skv_pretok {
    int n;
    pcre2_code *re[MAX_STAGES];
};

/* Pre-tokenizer expressions, from the tokenizer.json of each family. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Mistral's Tekken (NeMo, Small 3.x, Ministral, Pixtral): words split where lower case follows
 * upper, digits one by one, '/' and line breaks kept with the punctuation before them. PCRE2
 * takes the letter categories as written (llama.cpp rewrites them for its own engine, upper and
 * title case as letters outside [a-z], lower case as letters outside [A-Z]). */
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"   \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"      \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_def {
    const char *name;
    bool ignore_merges;
    bool add_bos; /* BOS when the file has no tokenizer.ggml.add_bos_token (llama.cpp's default) */
    const char *re[MAX_STAGES];
} pre_def;

static const pre_def PRE_DEFS[] = {
    {"default", false, false, {RE_GPT2, NULL}}, /* HF's ByteLevel pre-tokenizer alone */
    {"gpt-2", false, false, {RE_GPT2, NULL}},
    {"llama-bpe", true, true, {RE_LLAMA3, NULL}}, /* Llama 3 adds <|begin_of_text|> */
    {"llama3", true, true, {RE_LLAMA3, NULL}},
    {"llama-v3", true, true, {RE_LLAMA3, NULL}},
    {"qwen2", false, false, {RE_QWEN2, NULL}},
    {"smollm", false, false, {"\\p{N}", RE_GPT2}},
    {"tekken", true, true, {RE_TEKKEN, NULL}}, /* Mistral's tokenizers add <s> */
};

/* The definition of a tokenizer.ggml.pre name (NULL: "default"), or NULL if unknown. */
static const pre_def *pre_find(const char *pre) {
    if (!pre) pre = "default";
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (strcmp(PRE_DEFS[i].name, pre) == 0) return &PRE_DEFS[i];
    return NULL;
}

bool skv_bpe_pre_adds_bos(const char *pre) {
    const pre_def *def = pre_find(pre);
    return def && def->add_bos;
}

#define SUPPORTED_PRE "default, gpt-2, llama-bpe (llama3, llama-v3), qwen2, smollm, tekken"

/* ------------------------------------------------------------------------------------------ */
/* The GPT-2 byte-to-unicode alphabet: printable Latin-1 bytes ('!'..'~', 0xa1..0xac,
 * 0xae..0xff) stand for themselves; the other 68 bytes, in increasing order, map to U+0100.. */

static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

/* The 68 others: 0x00..0x20 (33), 0x7f..0xa0 (34), 0xad (1). */
uint32_t skv_bpe_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7f && b <= 0xa0) return 0x100u + 33 + (b - 0x7fu);
    return 0x100u + 67; /* 0xad */
}

/* Byte a codepoint of the alphabet stands for, -1 for others. */
static int cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(cp - 0x100 - 33 + 0x7f);
    if (cp == 0x100 + 67) return 0xad;
    return -1;
}

size_t skv_bpe_decode_piece(const char *piece, size_t len, char *dst) {
    const unsigned char *p = (const unsigned char *)piece;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n;
        if (p[i] < 0x80) {
            cp = p[i];
            n = 1;
        } else if ((p[i] & 0xe0) == 0xc0 && i + 1 < len && (p[i + 1] & 0xc0) == 0x80) {
            cp = (uint32_t)(p[i] & 0x1f) << 6 | (p[i + 1] & 0x3f);
            n = 2;
        } else {
            cp = UINT32_MAX; /* not of the alphabet: copied as is */
            n = 1;
        }
        int b = cp == UINT32_MAX ? -1 : cp_to_byte(cp);
        if (b >= 0) {
            dst[k++] = (char)b;
        } else {
            memcpy(dst + k, piece + i, n);
            k += n;
        }
        i += n;
    }
    return k;
}

/* ------------------------------------------------------------------------------------------ */
/* Pre-tokenizer */

void skv_bpe_pretok_free(skv_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p);
}

skv_pretok *skv_bpe_pretok_compile(const char *const *patterns, int n, skv_err *err) {
    if (n < 1 || n > MAX_STAGES) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "a pre-tokenizer has 1 to %d expressions, not %d",
                    MAX_STAGES, n);
        return NULL;
    }
    skv_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory compiling the pre-tokenizer");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        int code;
        PCRE2_SIZE at;
        p->re[i] = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(code, msg, sizeof msg) < 0) strcpy((char *)msg, "?");
            skv_err_set(err, SKV_ERR_FORMAT,
                        "the pre-tokenizer regular expression '%.120s' is refused by PCRE2 at "
                        "offset %zu: %s",
                        patterns[i], (size_t)at, (const char *)msg);
            skv_bpe_pretok_free(p);
            return NULL;
        }
        p->n = i + 1;
        (void)pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE); /* interpreter when no JIT */
    }
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Merges */

static uint32_t merge_hash(uint64_t key) {
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32);
}

static const bpe_merge *merge_find(const skv_vocab *v, int32_t l, int32_t r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint32_t i = merge_hash(key) & v->merges_mask;
    for (;;) {
        const bpe_merge *m = &v->merges[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
        i = (i + 1) & v->merges_mask;
    }
}

void skv_bpe_free(skv_vocab *v) {
    free(v->merges);
    v->merges = NULL;
    skv_bpe_pretok_free(v->pre);
    v->pre = NULL;
}

skv_status skv_bpe_load(skv_vocab *v, const skv_gguf *g, skv_err *err) {
    const char *pre = skv_gguf_get_str(g, "tokenizer.ggml.pre");
    if (!pre) {
        if (skv_gguf_find_key(g, "tokenizer.ggml.pre") >= 0)
            return skv_err_set(err, SKV_ERR_FORMAT, "GGUF key tokenizer.ggml.pre is not a string");
        pre = "default";
    }
    const pre_def *def = pre_find(pre);
    if (!def)
        return skv_err_set(err, SKV_ERR_UNSUPPORTED,
                           "byte-level BPE pre-tokenizer '%.60s' (tokenizer.ggml.pre) is not "
                           "supported (supported: " SUPPORTED_PRE ")",
                           pre);
    snprintf(v->pre_name, sizeof v->pre_name, "%s", def->name);
    v->ignore_merges = def->ignore_merges;
    int n_re = def->re[1] ? 2 : 1;
    v->pre = skv_bpe_pretok_compile(def->re, n_re, err);
    if (!v->pre) return err ? err->status : SKV_ERR_FORMAT;

    int64_t km = skv_gguf_find_key(g, "tokenizer.ggml.merges");
    if (km < 0)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "the byte-level BPE tokenizer has no tokenizer.ggml.merges");
    if (skv_gguf_kv_type(g, km) != SKV_GGUF_ARRAY || skv_gguf_arr_type(g, km) != SKV_GGUF_STRING)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "GGUF key tokenizer.ggml.merges is not an array of strings");
    uint64_t nm = skv_gguf_arr_len(g, km);
    if (nm > (uint64_t)INT32_MAX / 4)
        return skv_err_set(err, SKV_ERR_FORMAT, "the tokenizer has an implausible %llu merges",
                           (unsigned long long)nm);
    uint32_t size = 16;
    while (size < 2 * nm) size *= 2;
    v->merges = malloc((size_t)size * sizeof *v->merges);
    if (!v->merges)
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for %llu merges",
                           (unsigned long long)nm);
    for (uint32_t i = 0; i < size; i++) v->merges[i].key = UINT64_MAX;
    v->merges_mask = size - 1;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (uint64_t r = 0; r < nm; r++) {
        size_t len = 0;
        const char *s = skv_gguf_arr_str(g, km, r, &len);
        const char *sp = s ? memchr(s, ' ', len) : NULL;
        if (!sp || sp == s || sp == s + len - 1) {
            free(cat);
            return skv_err_set(
                err, SKV_ERR_FORMAT, "merge %llu ('%.*s') is not two tokens separated by a space",
                (unsigned long long)r, s ? (int)(len < 80 ? len : 80) : 0, s ? s : "");
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t a = skv_vocab_lookup(v, s, ll), b = skv_vocab_lookup(v, sp + 1, rl);
        if (a < 0 || b < 0) {
            free(cat);
            const char *bad = a < 0 ? s : sp + 1;
            size_t bl = a < 0 ? ll : rl;
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "merge %llu ('%.*s') names '%.*s', which is not a normal token of "
                               "the vocabulary",
                               (unsigned long long)r, (int)(len < 80 ? len : 80), s,
                               (int)(bl < 80 ? bl : 80), bad);
        }
        if (ll + rl > cat_cap) {
            cat_cap = 2 * (ll + rl);
            char *c = realloc(cat, cat_cap);
            if (!c) {
                free(cat);
                return skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading the merges");
            }
            cat = c;
        }
        memcpy(cat, s, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t res = skv_vocab_lookup(v, cat, ll + rl);
        if (res < 0) {
            skv_status st = skv_err_set(err, SKV_ERR_FORMAT,
                                        "merge %llu ('%.*s') makes '%.*s', which is not a normal "
                                        "token of the vocabulary",
                                        (unsigned long long)r, (int)(len < 80 ? len : 80), s,
                                        (int)(ll + rl < 80 ? ll + rl : 80), cat);
            free(cat);
            return st;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint32_t h = merge_hash(key) & v->merges_mask;
        while (v->merges[h].key != UINT64_MAX && v->merges[h].key != key)
            h = (h + 1) & v->merges_mask;
        if (v->merges[h].key == UINT64_MAX) { /* a repeated pair keeps its first rank */
            v->merges[h].key = key;
            v->merges[h].rank = (int32_t)r;
            v->merges[h].result = res;
        }
    }
    free(cat);
    v->n_merges = (int)nm;
    return SKV_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding */

typedef struct bsym {
    int32_t id; /* -1 once merged into its left neighbour */
    int32_t prev, next;
} bsym;

typedef struct bpair {
    int32_t rank;
    int32_t left; /* symbol index */
    int32_t left_id, right_id, result;
} bpair;

/* Per-call cache of pieces already encoded (natural text repeats its words): the piece is a
 * slice of the caller's text, its tokens a slice of out; both outlive the call's work. */
#define CACHE_SIZE     4096 /* slots, a power of two; full: no more insertions */
#define CACHE_MAX_WORD 48   /* longer pieces are not cached */

typedef struct cache_slot {
    const unsigned char *word; /* NULL: empty */
    uint32_t len, tok_start, tok_n;
} cache_slot;

typedef struct bwork {
    const skv_vocab *v;
    tokvec *out;
    bsym *sym;   /* [longest piece] */
    bpair *heap; /* grows */
    size_t n_heap, cap_heap;
    char *spelled; /* [2 * longest piece] the piece in the GPT-2 alphabet (ignore_merges) */
    pcre2_match_data *md[MAX_STAGES];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    cache_slot *cache; /* [CACHE_SIZE], NULL: no cache */
    int cache_used;
} bwork;

static bool pair_less(const bpair *x, const bpair *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static bool heap_add(bwork *w, bpair p) {
    if (w->n_heap == w->cap_heap) {
        size_t cap = w->cap_heap ? 2 * w->cap_heap : 64;
        bpair *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return false;
        w->heap = h;
        w->cap_heap = cap;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!pair_less(&p, &w->heap[up])) break;
        w->heap[i] = w->heap[up];
        i = up;
    }
    w->heap[i] = p;
    return true;
}

static bpair heap_take(bwork *w) {
    bpair top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->n_heap) break;
        if (c + 1 < w->n_heap && pair_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!pair_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->n_heap > 0) w->heap[i] = last;
    return top;
}

static bool queue_pair(bwork *w, int32_t l) {
    if (l < 0) return true;
    int32_t r = w->sym[l].next;
    if (r < 0) return true;
    const bpe_merge *m = merge_find(w->v, w->sym[l].id, w->sym[r].id);
    if (!m) return true;
    bpair p = {m->rank, l, w->sym[l].id, w->sym[r].id, m->result};
    return heap_add(w, p);
}

static bool encode_word_uncached(bwork *w, const unsigned char *s, size_t n);

static uint32_t word_hash(const unsigned char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h ^ (h >> 13);
}

/* BPE of one pre-tokenized piece, through the cache. */
static bool encode_word(bwork *w, const unsigned char *s, size_t n) {
    if (!w->cache || n < 2 || n > CACHE_MAX_WORD) return encode_word_uncached(w, s, n);
    uint32_t i = word_hash(s, n) & (CACHE_SIZE - 1);
    for (;;) {
        cache_slot *c = &w->cache[i];
        if (!c->word) break;
        if (c->len == n && memcmp(c->word, s, n) == 0) {
            for (uint32_t k = 0; k < c->tok_n; k++)
                if (!skv_tokvec_push(w->out, w->out->a[c->tok_start + k])) return false;
            return true;
        }
        i = (i + 1) & (CACHE_SIZE - 1);
    }
    size_t start = w->out->n;
    if (!encode_word_uncached(w, s, n)) return false;
    if (w->cache_used < CACHE_SIZE / 2 && start <= UINT32_MAX && w->out->n - start <= UINT32_MAX) {
        w->cache[i] = (cache_slot){s, (uint32_t)n, (uint32_t)start, (uint32_t)(w->out->n - start)};
        w->cache_used++;
    }
    return true;
}

static bool encode_word_uncached(bwork *w, const unsigned char *s, size_t n) {
    const skv_vocab *v = w->v;
    if (n == 1) return skv_tokvec_push(w->out, v->byte_token[s[0]]);
    if (v->ignore_merges) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            w->spelled[k++] = v->byte_spell[s[i]][0];
            if (v->byte_spell_len[s[i]] == 2) w->spelled[k++] = v->byte_spell[s[i]][1];
        }
        int32_t id = skv_vocab_lookup(v, w->spelled, k);
        if (id >= 0) return skv_tokvec_push(w->out, id);
    }
    bsym *sym = w->sym;
    for (size_t i = 0; i < n; i++) {
        sym[i].id = v->byte_token[s[i]];
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (!queue_pair(w, (int32_t)i)) return false;
    while (w->n_heap > 0) {
        bpair p = heap_take(w);
        bsym *l = &sym[p.left];
        if (l->id != p.left_id || l->next < 0) continue;
        bsym *r = &sym[l->next];
        if (r->id != p.right_id) continue;
        l->id = p.result;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        r->id = -1;
        if (!queue_pair(w, l->prev) || !queue_pair(w, p.left)) return false;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if (!skv_tokvec_push(w->out, sym[i].id)) return false;
    return true;
}

/* Splits s[0..n) with the expression of stage st (matches and gaps are pieces) and hands each
 * piece to the next stage, the last stage's pieces to BPE. */
static bool split(bwork *w, int st, const unsigned char *s, size_t n) {
    if (n == 0) return true;
    if (st == w->v->pre->n) return encode_word(w, s, n);
    const pcre2_code *re = w->v->pre->re[st];
    PCRE2_SIZE at = 0;
    while (at < n) {
        int rc = pcre2_match(re, s, n, at, 0, w->md[st], w->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT ||
            rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT)
            rc = pcre2_match(re, s, n, at, PCRE2_NO_JIT, w->md[st], w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return false;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md[st]);
        PCRE2_SIZE m0 = ov[0], m1 = ov[1];
        if (m0 < at || m1 > n || m1 < m0) return false;
        if (m1 == m0) { /* an empty match: not a piece; go on past one byte */
            if (m0 >= n) break;
            if (!split(w, st + 1, s + at, m0 + 1 - at)) return false;
            at = m0 + 1;
            continue;
        }
        if (!split(w, st + 1, s + at, m0 - at)) return false;
        if (!split(w, st + 1, s + m0, m1 - m0)) return false;
        at = m1;
    }
    return split(w, st + 1, s + at, n - at);
}

bool skv_bpe_encode(const skv_vocab *v, const char *text, size_t len, tokvec *out) {
    if (len == 0) return true;
    bwork w = {.v = v, .out = out};
    bool ok = false;
    w.sym = malloc(len * sizeof *w.sym);
    w.spelled = malloc(2 * len);
    w.mctx = pcre2_match_context_create(NULL);
    w.jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!w.sym || !w.spelled || !w.mctx || !w.jit) goto done;
    if (len >= 256) w.cache = calloc(CACHE_SIZE, sizeof *w.cache); /* optional: NULL is fine */
    pcre2_jit_stack_assign(w.mctx, NULL, w.jit);
    for (int i = 0; i < v->pre->n; i++) {
        w.md[i] = pcre2_match_data_create_from_pattern(v->pre->re[i], NULL);
        if (!w.md[i]) goto done;
    }
    ok = split(&w, 0, (const unsigned char *)text, len);
done:
    for (int i = 0; i < MAX_STAGES; i++) pcre2_match_data_free(w.md[i]);
    pcre2_jit_stack_free(w.jit);
    free(w.cache);
    pcre2_match_context_free(w.mctx);
    free(w.spelled);
    free(w.heap);
    free(w.sym);
    return ok;
}
