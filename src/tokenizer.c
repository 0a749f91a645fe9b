/* tokenizer.c — the Llama 2 tokenizer: SentencePiece BPE with byte fallback.
 *
 * Both sources (llama2.c tokenizer.bin, GGUF metadata) are normalized to the GGUF form: pieces
 * spell spaces as U+2581, BOS/EOS are "<s>"/"</s>", and every token has a GGUF token type.
 *
 * Encoding: the text (with a leading space, SentencePiece's add_dummy_prefix) is cut into UTF-8
 * characters, spaces written as U+2581; adjacent symbols are merged, best score first (ties: the
 * leftmost pair), whenever their concatenation is a normal piece. A symbol that is no piece
 * falls back to its byte tokens. Symbols live in a doubly-linked list over one buffer (adjacent
 * symbols are adjacent bytes, so a pair's text is a slice: no copies) and candidate pairs in a
 * binary heap; stale heap entries are detected when popped. O(n log n).
 *
 * Two deliberate departures from SentencePiece keep decode(encode(s)) == s for every byte string:
 * invalid UTF-8 bytes and a literal U+2581 in the text are opaque units that never merge and
 * always become byte tokens (SentencePiece would turn them into U+FFFD and a space). */
#include "tokenizer.h"
#include "tokenizer/internal.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define SPACE_MARK     "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */
#define SPACE_MARK_LEN 3
#define UNK_SURFACE    " \xe2\x81\x87 " /* " ⁇ ": how SentencePiece prints <unk> */
#define MAX_PIECE      65536            /* bytes; real pieces are a few dozen */
#define MAX_FILE       (256u << 20)     /* llama2.c tokenizer files are well under 1 MB */

/* ------------------------------------------------------------------------------------------ */
/* Construction                                                                               */

void skv_vocab_free(skv_vocab *v) {
    if (!v) return;
    free(v->arena);
    free(v->piece_off);
    free(v->piece_len);
    free(v->surf_off);
    free(v->surf_len);
    free(v->score);
    free(v->type);
    free(v->table);
    free(v->eog);
    free(v->special);
    free(v->chat_template);
    skv_bpe_free(v);
    free(v);
}

bool skv_tokvec_push(tokvec *t, int32_t id) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        int32_t *a = realloc(t->a, cap * sizeof *a);
        if (!a) return false;
        t->a = a;
        t->cap = cap;
    }
    t->a[t->n++] = id;
    return true;
}

/* Arrays for n tokens and an arena of arena_bytes for their pieces (surfaces are added later). */
static skv_vocab *vocab_alloc(int n, size_t arena_bytes, skv_err *err) {
    skv_vocab *v = calloc(1, sizeof *v);
    if (!v) goto nomem;
    v->n = n;
    v->arena = malloc(arena_bytes ? arena_bytes : 1);
    v->piece_off = calloc((size_t)n, sizeof *v->piece_off);
    v->piece_len = calloc((size_t)n, sizeof *v->piece_len);
    v->surf_off = calloc((size_t)n, sizeof *v->surf_off);
    v->surf_len = calloc((size_t)n, sizeof *v->surf_len);
    v->score = calloc((size_t)n, sizeof *v->score);
    v->type = calloc((size_t)n, sizeof *v->type);
    v->eog = calloc((size_t)n, sizeof *v->eog);
    if (!v->arena || !v->piece_off || !v->piece_len || !v->surf_off || !v->surf_len || !v->score ||
        !v->type || !v->eog)
        goto nomem;
    v->kind = VOCAB_SPM;
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->eot = v->eom = -1;
    v->add_space_prefix = true;
    v->add_bos = true;
    v->add_eos = false;
    return v;
nomem:
    skv_vocab_free(v);
    skv_err_set(err, SKV_ERR_NOMEM, "out of memory allocating a vocabulary of %d tokens", n);
    return NULL;
}

/* Copies a piece into the arena at *pos, spaces turned into U+2581 when asked. */
static void vocab_put(skv_vocab *v, int id, size_t *pos, const char *s, size_t len,
                      bool spaces_to_mark) {
    char *dst = v->arena + *pos;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (spaces_to_mark && s[i] == ' ') {
            memcpy(dst + k, SPACE_MARK, SPACE_MARK_LEN);
            k += SPACE_MARK_LEN;
        } else {
            dst[k++] = s[i];
        }
    }
    dst[k] = '\0';
    v->piece_off[id] = *pos;
    v->piece_len[id] = (uint32_t)k;
    *pos += k + 1;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Byte value of a "<0xXX>" piece, or -1. */
static int parse_byte_piece(const char *s, size_t len) {
    if (len != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static uint32_t hash_bytes(const char *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    h ^= h >> 16; /* murmur3 finalizer: the low bits index the table */
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

/* Only these pieces take part in encoding: control, user-defined (special), unknown, byte and
 * unused tokens are never produced by a merge (type 0, "undefined", is read as normal). */
static bool mergeable_type(int type) {
    return type == SKV_TOKEN_NORMAL || type == 0;
}

static const char *piece_at(const skv_vocab *v, int32_t id) {
    return v->arena + v->piece_off[id];
}

/* Token of a normal piece, or -1. */
int32_t skv_vocab_lookup(const skv_vocab *v, const char *s, size_t len) {
    if (len > v->max_piece_len) return -1;
    uint32_t i = hash_bytes(s, len) & v->table_mask;
    for (;;) {
        int32_t id = v->table[i];
        if (id < 0) return -1;
        if (v->piece_len[id] == len && memcmp(piece_at(v, id), s, len) == 0) return id;
        i = (i + 1) & v->table_mask;
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void utf8_put(uint32_t cp, char *dst, size_t *len) {
    unsigned char *d = (unsigned char *)dst;
    if (cp < 0x80) {
        d[0] = (unsigned char)cp;
        *len = 1;
    } else if (cp < 0x800) {
        d[0] = (unsigned char)(0xc0 | cp >> 6);
        d[1] = (unsigned char)(0x80 | (cp & 0x3f));
        *len = 2;
    } else {
        d[0] = (unsigned char)(0xe0 | cp >> 12);
        d[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        d[2] = (unsigned char)(0x80 | (cp & 0x3f));
        *len = 3;
    }
}

/* Validates types and special ids, then builds the byte table, the surfaces, the hash table,
 * the special-token list and the end-of-generation flags. what names the source in messages. */
static skv_status vocab_finish(skv_vocab *v, const char *what, skv_err *err) {
    int n = v->n;
    bool bpe = v->kind == VOCAB_BPE;
    if (v->bos < 0 || v->bos >= n || v->eos < 0 || v->eos >= n || v->unk < -1 || v->unk >= n ||
        (v->unk < 0 && !bpe) || v->eot >= n || v->eom >= n)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "%s: special token ids (bos %d, eos %d, unk %d, eot %d, eom %d) must "
                           "be below the vocabulary size %d",
                           what, (int)v->bos, (int)v->eos, (int)v->unk, (int)v->eot, (int)v->eom,
                           n);
    for (int b = 0; b < 256; b++) v->byte_token[b] = -1;

    size_t surf_bytes = 0, n_merge = 0;
    int n_special = 0;
    for (int i = 0; i < n; i++) {
        const char *p = piece_at(v, i);
        if (isnan(v->score[i]))
            return skv_err_set(err, SKV_ERR_FORMAT, "%s: token %d has a NaN score", what, i);
        if (v->type[i] == SKV_TOKEN_BYTE && !bpe) {
            int b = parse_byte_piece(p, v->piece_len[i]);
            if (b < 0)
                return skv_err_set(err, SKV_ERR_FORMAT,
                                   "%s: byte token %d is not of the form <0xXX>", what, i);
            if (v->byte_token[b] < 0) v->byte_token[b] = i;
        }
        if (mergeable_type(v->type[i])) {
            n_merge++;
            if (v->piece_len[i] > v->max_piece_len) v->max_piece_len = v->piece_len[i];
        }
        if ((v->type[i] == SKV_TOKEN_CONTROL || v->type[i] == SKV_TOKEN_USER) &&
            v->piece_len[i] > 0)
            n_special++;
        surf_bytes += v->piece_len[i] + sizeof UNK_SURFACE;
    }

    /* Decoded text of every token, appended to the arena. */
    size_t used = v->piece_off[n - 1] + v->piece_len[n - 1] + 1;
    char *arena = realloc(v->arena, used + surf_bytes);
    if (!arena) return skv_err_set(err, SKV_ERR_NOMEM, "%s: out of memory", what);
    v->arena = arena;
    for (int i = 0; i < n; i++) {
        const char *p = piece_at(v, i);
        char *dst = v->arena + used;
        size_t k = 0;
        int t = v->type[i];
        if (i == v->bos || i == v->eos || t == SKV_TOKEN_CONTROL) {
            /* nothing */
        } else if (bpe) {
            if (t == SKV_TOKEN_USER) { /* added text: verbatim */
                memcpy(dst, p, v->piece_len[i]);
                k = v->piece_len[i];
            } else {
                k = skv_bpe_decode_piece(p, v->piece_len[i], dst);
            }
        } else if (t == SKV_TOKEN_BYTE) {
            dst[k++] = (char)parse_byte_piece(p, v->piece_len[i]);
        } else if (t == SKV_TOKEN_UNKNOWN) {
            memcpy(dst, UNK_SURFACE, sizeof UNK_SURFACE - 1);
            k = sizeof UNK_SURFACE - 1;
        } else {
            for (uint32_t j = 0; j < v->piece_len[i]; j++) {
                if (j + SPACE_MARK_LEN <= v->piece_len[i] &&
                    memcmp(p + j, SPACE_MARK, SPACE_MARK_LEN) == 0) {
                    dst[k++] = ' ';
                    j += SPACE_MARK_LEN - 1;
                } else {
                    dst[k++] = p[j];
                }
            }
        }
        v->surf_off[i] = used;
        v->surf_len[i] = (uint32_t)k;
        used += k;
    }

    uint32_t size = 16;
    while (size < 2 * n_merge) size *= 2;
    v->table = malloc(size * sizeof *v->table);
    if (!v->table) return skv_err_set(err, SKV_ERR_NOMEM, "%s: out of memory", what);
    memset(v->table, 0xff, size * sizeof *v->table);
    v->table_mask = size - 1;
    for (int i = 0; i < n; i++) {
        if (!mergeable_type(v->type[i])) continue;
        const char *p = piece_at(v, i);
        uint32_t h = hash_bytes(p, v->piece_len[i]) & v->table_mask;
        int32_t o;
        while ((o = v->table[h]) >= 0 && !(v->piece_len[o] == v->piece_len[i] &&
                                           memcmp(piece_at(v, o), p, v->piece_len[i]) == 0))
            h = (h + 1) & v->table_mask;
        if (o < 0) v->table[h] = i; /* of duplicate pieces the first wins */
    }

    if (bpe) { /* every byte is a token spelled in the GPT-2 alphabet */
        for (int b = 0; b < 256; b++) {
            char buf[4];
            size_t len;
            utf8_put(skv_bpe_byte_to_cp((uint8_t)b), buf, &len);
            memcpy(v->byte_spell[b], buf, len);
            v->byte_spell_len[b] = (uint8_t)len;
            v->byte_token[b] = skv_vocab_lookup(v, buf, len);
            if (v->byte_token[b] < 0)
                return skv_err_set(err, SKV_ERR_FORMAT,
                                   "%s: the byte-level vocabulary has no normal token for byte "
                                   "0x%02x ('%.*s')",
                                   what, b, (int)len, buf);
        }
    }

    if (n_special > 0) {
        v->special = malloc((size_t)n_special * sizeof *v->special);
        if (!v->special) return skv_err_set(err, SKV_ERR_NOMEM, "%s: out of memory", what);
        int k = 0;
        for (int i = 0; i < n; i++)
            if ((v->type[i] == SKV_TOKEN_CONTROL || v->type[i] == SKV_TOKEN_USER) &&
                v->piece_len[i] > 0)
                v->special[k++] = i;
        /* By first byte, then longest first, then lowest id: one 64-bit key per token (first
         * byte: 8 bits, 2^21 - 1 - length: 21 bits, id: 29 bits since n < 2^29). */
        uint64_t *keys = malloc((size_t)k * sizeof *keys);
        if (!keys) return skv_err_set(err, SKV_ERR_NOMEM, "%s: out of memory", what);
        for (int j = 0; j < k; j++) {
            int32_t id = v->special[j];
            keys[j] = (uint64_t)(unsigned char)piece_at(v, id)[0] << 50 |
                      (uint64_t)(0x1fffff - v->piece_len[id]) << 29 | (uint64_t)id;
        }
        qsort(keys, (size_t)k, sizeof *keys, cmp_u64);
        for (int j = 0; j < k; j++) v->special[j] = (int32_t)(keys[j] & 0x1fffffff);
        free(keys);
        v->n_special = k;
    }
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < v->n_special && (unsigned char)piece_at(v, v->special[k])[0] < b) k++;
        v->special_first[b] = k;
    }

    /* End of generation: eos, eot, eom and the control tokens that end a turn. */
    static const char *const eog_names[] = {"<|eot_id|>",      "<|im_end|>",    "<|end|>",
                                            "<|eom_id|>",      "<|endoftext|>", "<end_of_turn>",
                                            "<|end_of_text|>", "</s>"};
    v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    if (v->eom >= 0) v->eog[v->eom] = 1;
    for (int i = 0; i < n; i++) {
        if (v->type[i] != SKV_TOKEN_CONTROL && v->type[i] != SKV_TOKEN_USER) continue;
        for (size_t j = 0; j < sizeof eog_names / sizeof eog_names[0]; j++)
            if (v->piece_len[i] == strlen(eog_names[j]) &&
                memcmp(piece_at(v, i), eog_names[j], v->piece_len[i]) == 0)
                v->eog[i] = 1;
    }
    return SKV_OK;
}

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    int32_t i;
    memcpy(&i, &u, sizeof i);
    return i;
}

static float rd_f32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static unsigned char *read_whole_file(const char *path, size_t *size, skv_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        skv_err_set(err, SKV_ERR_IO, "cannot open tokenizer file '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        skv_err_set(err, SKV_ERR_IO, "tokenizer file '%s' is not a regular file", path);
        return NULL;
    }
    if ((uint64_t)st.st_size > MAX_FILE) {
        fclose(f);
        skv_err_set(err, SKV_ERR_FORMAT, "tokenizer file '%s' is implausibly large (%lld bytes)",
                    path, (long long)st.st_size);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading '%s'", path);
        return NULL;
    }
    if (fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        skv_err_set(err, SKV_ERR_IO, "cannot read tokenizer file '%s'", path);
        return NULL;
    }
    fclose(f);
    *size = n;
    return buf;
}

/* Walks a llama2.c tokenizer file: counts its tokens and the arena bytes they need (spaces grow
 * to U+2581). want <= 0: until the end of the file. */
static skv_status llama2c_scan(const unsigned char *d, size_t size, int want, const char *path,
                               int *count, size_t *arena, skv_err *err) {
    if (size < 4)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "'%s' is too short (%zu bytes) to be a llama2.c tokenizer file", path,
                           size);
    int32_t max_len = rd_i32(d);
    if (max_len < 0 || max_len > MAX_PIECE)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "'%s' has an invalid max_token_length %d (not a llama2.c tokenizer "
                           "file?)",
                           path, (int)max_len);
    size_t off = 4, bytes = 0;
    int n = 0;
    while (want > 0 ? n < want : off < size) {
        if (off == size)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "'%s' holds %d tokens but the vocabulary size is %d", path, n, want);
        if (size - off < 8)
            return skv_err_set(err, SKV_ERR_FORMAT, "'%s' ends inside the header of token %d", path,
                               n);
        float score = rd_f32(d + off);
        int32_t len = rd_i32(d + off + 4);
        off += 8;
        if (len < 0)
            return skv_err_set(err, SKV_ERR_FORMAT, "'%s': token %d has a negative length (%d)",
                               path, n, (int)len);
        if (len > max_len)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "'%s': token %d is %d bytes long, more than the file's "
                               "max_token_length %d",
                               path, n, (int)len, (int)max_len);
        if ((size_t)len > size - off)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "'%s': token %d (%d bytes) extends past the end of the file", path,
                               n, (int)len);
        if (isnan(score))
            return skv_err_set(err, SKV_ERR_FORMAT, "'%s': token %d has a NaN score", path, n);
        for (int32_t i = 0; i < len; i++) bytes += d[off + (size_t)i] == ' ' ? SPACE_MARK_LEN : 1;
        bytes += 1;
        off += (size_t)len;
        n++;
    }
    if (off != size)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "'%s' holds more than the %d tokens of the vocabulary (%zu bytes "
                           "left over)",
                           path, want, size - off);
    if (n < 3)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "'%s' holds %d tokens; a Llama vocabulary needs at least <unk>, <s> "
                           "and </s>",
                           path, n);
    *count = n;
    *arena = bytes;
    return SKV_OK;
}

skv_vocab *skv_vocab_load_llama2c(const char *path, int n_vocab, skv_err *err) {
    if (!path) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no tokenizer path given");
        return NULL;
    }
    if (n_vocab < 0) {
        skv_err_set(err, SKV_ERR_INVALID_ARG,
                    "vocabulary size %d: give the tokens to read, or 0 for all of them", n_vocab);
        return NULL;
    }
    size_t size = 0;
    unsigned char *d = read_whole_file(path, &size, err);
    if (!d) return NULL;
    int n = 0;
    size_t arena = 0;
    skv_vocab *v = NULL;
    if (llama2c_scan(d, size, n_vocab, path, &n, &arena, err) != SKV_OK) goto fail;
    v = vocab_alloc(n, arena, err);
    if (!v) goto fail;

    size_t off = 4, pos = 0;
    for (int i = 0; i < n; i++) {
        float score = rd_f32(d + off);
        size_t len = (size_t)rd_i32(d + off + 4);
        const char *s = (const char *)d + off + 8;
        off += 8 + len;
        /* The exporter wrote BOS/EOS with newlines around them and U+2581 as ' '. */
        if (i == 1 && len == 5 && memcmp(s, "\n<s>\n", 5) == 0) {
            s += 1;
            len = 3;
        } else if (i == 2 && len == 6 && memcmp(s, "\n</s>\n", 6) == 0) {
            s += 1;
            len = 4;
        }
        vocab_put(v, i, &pos, s, len, true);
        v->score[i] = score;
        if (i == v->unk)
            v->type[i] = SKV_TOKEN_UNKNOWN;
        else if (i == v->bos || i == v->eos)
            v->type[i] = SKV_TOKEN_CONTROL;
        else if (parse_byte_piece(s, len) >= 0)
            v->type[i] = SKV_TOKEN_BYTE;
        else
            v->type[i] = SKV_TOKEN_NORMAL;
    }
    char what[600];
    snprintf(what, sizeof what, "'%s'", path);
    if (vocab_finish(v, what, err) != SKV_OK) goto fail;
    free(d);
    return v;
fail:
    skv_vocab_free(v);
    free(d);
    return NULL;
}

/* An optional integer key: *out keeps its default when absent. */
static bool gguf_opt_int(const skv_gguf *g, const char *key, int64_t *out, skv_err *err) {
    int64_t i = skv_gguf_find_key(g, key);
    if (i < 0) return true;
    if (skv_gguf_kv_int(g, i, out)) return true;
    skv_err_set(err, SKV_ERR_FORMAT, "GGUF key %s is not an integer", key);
    return false;
}

/* Index of key when it is an array of n elements (n < 0: any count) of an acceptable kind. */
static int64_t gguf_array(const skv_gguf *g, const char *key, bool strings, int64_t n,
                          skv_err *err) {
    int64_t i = skv_gguf_find_key(g, key);
    if (i < 0) {
        skv_err_set(err, SKV_ERR_FORMAT, "the GGUF tokenizer has no %s", key);
        return -1;
    }
    bool ok = skv_gguf_kv_type(g, i) == SKV_GGUF_ARRAY;
    if (ok) {
        skv_gguf_vtype t = skv_gguf_arr_type(g, i);
        ok = strings ? t == SKV_GGUF_STRING
                     : t != SKV_GGUF_STRING && t != SKV_GGUF_ARRAY && t < SKV_GGUF_VTYPE_COUNT;
    }
    if (!ok) {
        skv_err_set(err, SKV_ERR_FORMAT, "GGUF key %s is not an array of %s", key,
                    strings ? "strings" : "numbers");
        return -1;
    }
    if (n >= 0 && skv_gguf_arr_len(g, i) != (uint64_t)n) {
        skv_err_set(err, SKV_ERR_FORMAT, "GGUF key %s has %llu elements but there are %lld tokens",
                    key, (unsigned long long)skv_gguf_arr_len(g, i), (long long)n);
        return -1;
    }
    return i;
}

/* An optional bool key: *out keeps its default when absent. */
static bool gguf_opt_bool(const skv_gguf *g, const char *key, bool *out, skv_err *err) {
    int64_t i = skv_gguf_find_key(g, key);
    if (i < 0) return true;
    if (skv_gguf_kv_bool(g, i, out)) return true;
    skv_err_set(err, SKV_ERR_FORMAT, "GGUF key %s is not a bool", key);
    return false;
}

skv_vocab *skv_vocab_from_gguf(const skv_gguf *g, skv_err *err) {
    if (!g) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no GGUF file given");
        return NULL;
    }
    const char *model = skv_gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "the GGUF file has no tokenizer (tokenizer.ggml.model is missing or not a "
                    "string)");
        return NULL;
    }
    vocab_kind kind;
    if (strcmp(model, "llama") == 0) {
        kind = VOCAB_SPM;
    } else if (strcmp(model, "gpt2") == 0) {
        kind = VOCAB_BPE;
    } else {
        skv_err_set(err, SKV_ERR_UNSUPPORTED,
                    "tokenizer model '%.100s' is not supported (supported: 'llama', "
                    "SentencePiece BPE; 'gpt2', byte-level BPE)",
                    model);
        return NULL;
    }
    int64_t kt = gguf_array(g, "tokenizer.ggml.tokens", true, -1, err);
    if (kt < 0) return NULL;
    uint64_t n64 = skv_gguf_arr_len(g, kt);
    if (n64 < 3 || n64 > (uint64_t)INT32_MAX / 4) {
        skv_err_set(err, SKV_ERR_FORMAT, "the GGUF tokenizer has an implausible %llu tokens",
                    (unsigned long long)n64);
        return NULL;
    }
    int n = (int)n64;
    int64_t ks = -1;
    if (kind == VOCAB_SPM || skv_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        ks = gguf_array(g, "tokenizer.ggml.scores", false, n, err);
        if (ks < 0) return NULL;
    }
    int64_t ky = gguf_array(g, "tokenizer.ggml.token_type", false, n, err);
    if (ky < 0) return NULL;
    int64_t bos = 1, eos = 2, unk = kind == VOCAB_SPM ? 0 : -1, eot = -1, eom = -1;
    if (!gguf_opt_int(g, "tokenizer.ggml.bos_token_id", &bos, err) ||
        !gguf_opt_int(g, "tokenizer.ggml.eos_token_id", &eos, err) ||
        !gguf_opt_int(g, "tokenizer.ggml.unknown_token_id", &unk, err) ||
        !gguf_opt_int(g, "tokenizer.ggml.eot_token_id", &eot, err) ||
        !gguf_opt_int(g, "tokenizer.ggml.eom_token_id", &eom, err))
        return NULL;
    if (bos < 0 || bos >= n || eos < 0 || eos >= n || unk < (kind == VOCAB_SPM ? 0 : -1) ||
        unk >= n || eot < -1 || eot >= n || eom < -1 || eom >= n) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "GGUF special token ids (bos %lld, eos %lld, unk %lld, eot %lld, eom %lld) "
                    "must be below the vocabulary size %d",
                    (long long)bos, (long long)eos, (long long)unk, (long long)eot, (long long)eom,
                    n);
        return NULL;
    }

    size_t arena = 0;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = skv_gguf_arr_str(g, kt, (uint64_t)i, &len);
        if (!s) {
            skv_err_set(err, SKV_ERR_FORMAT, "GGUF token %d cannot be read", i);
            return NULL;
        }
        if (len > MAX_PIECE) {
            skv_err_set(err, SKV_ERR_FORMAT, "GGUF token %d is %zu bytes long (limit %d)", i, len,
                        MAX_PIECE);
            return NULL;
        }
        arena += len + 1;
    }
    skv_vocab *v = vocab_alloc(n, arena, err);
    if (!v) return NULL;
    v->kind = kind;
    v->bos = (int32_t)bos;
    v->eos = (int32_t)eos;
    v->unk = (int32_t)unk;
    v->eot = (int32_t)eot;
    v->eom = (int32_t)eom;
    bool prefix = kind == VOCAB_SPM;
    if (!gguf_opt_bool(g, "tokenizer.ggml.add_space_prefix", &prefix, err)) goto fail;
    v->add_space_prefix = prefix;
    if (kind == VOCAB_BPE) /* without the flag, the pre-tokenizer's family decides */
        v->add_bos = skv_bpe_pre_adds_bos(skv_gguf_get_str(g, "tokenizer.ggml.pre"));
    if (!gguf_opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err) ||
        !gguf_opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err))
        goto fail;
    int64_t kc = skv_gguf_find_key(g, "tokenizer.chat_template");
    if (kc >= 0) {
        size_t len = 0;
        const char *t = skv_gguf_kv_str(g, kc, &len);
        if (!t || len > (64u << 20)) {
            skv_err_set(err, SKV_ERR_FORMAT,
                        "GGUF key tokenizer.chat_template is not a string (or is too long)");
            goto fail;
        }
        v->chat_template = malloc(len + 1);
        if (!v->chat_template) {
            skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading the chat template");
            goto fail;
        }
        memcpy(v->chat_template, t, len);
        v->chat_template[len] = '\0';
    }

    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = skv_gguf_arr_str(g, kt, (uint64_t)i, &len);
        vocab_put(v, i, &pos, s, len, false);
        double score = 0;
        int64_t type;
        if (ks >= 0 && !skv_gguf_arr_float(g, ks, (uint64_t)i, &score)) {
            skv_err_set(err, SKV_ERR_FORMAT, "GGUF score of token %d is not a number", i);
            goto fail;
        }
        if (!skv_gguf_arr_int(g, ky, (uint64_t)i, &type) || type < 0 || type > SKV_TOKEN_BYTE) {
            skv_err_set(err, SKV_ERR_FORMAT, "GGUF token %d has an invalid token type", i);
            goto fail;
        }
        /* A double beyond float's range would be undefined behaviour to convert. */
        v->score[i] = score > FLT_MAX ? INFINITY : score < -FLT_MAX ? -INFINITY : (float)score;
        v->type[i] = (uint8_t)type;
    }
    if (vocab_finish(v, "GGUF tokenizer", err) != SKV_OK) goto fail;
    if (kind == VOCAB_BPE && skv_bpe_load(v, g, err) != SKV_OK) goto fail;
    return v;
fail:
    skv_vocab_free(v);
    return NULL;
}

skv_vocab *skv_vocab_load(const char *path, skv_err *err) {
    if (!path) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no vocabulary path given");
        return NULL;
    }
    skv_gguf *g = skv_gguf_open(path, err);
    if (!g) return NULL;
    skv_vocab *v = skv_vocab_from_gguf(g, err);
    skv_gguf_close(g);
    if (!v && err) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        skv_err_set(err, err->status, "'%s': %s", path, msg);
    }
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Accessors                                                                                  */

static bool valid_token(const skv_vocab *v, int32_t t) {
    return v && t >= 0 && t < v->n;
}

int skv_vocab_n_tokens(const skv_vocab *v) {
    return v ? v->n : 0;
}

int32_t skv_vocab_bos(const skv_vocab *v) {
    return v ? v->bos : -1;
}

int32_t skv_vocab_eos(const skv_vocab *v) {
    return v ? v->eos : -1;
}

int32_t skv_vocab_unk(const skv_vocab *v) {
    return v ? v->unk : -1;
}

int32_t skv_vocab_eot(const skv_vocab *v) {
    return v ? v->eot : -1;
}

bool skv_vocab_is_eog(const skv_vocab *v, int32_t token) {
    return valid_token(v, token) && v->eog[token];
}

bool skv_vocab_add_bos(const skv_vocab *v) {
    return v && v->add_bos;
}

bool skv_vocab_add_eos(const skv_vocab *v) {
    return v && v->add_eos;
}

const char *skv_vocab_model(const skv_vocab *v) {
    return !v ? NULL : v->kind == VOCAB_BPE ? "gpt2" : "llama";
}

const char *skv_vocab_pre(const skv_vocab *v) {
    return v && v->kind == VOCAB_BPE ? v->pre_name : NULL;
}

const char *skv_vocab_chat_template(const skv_vocab *v) {
    return v ? v->chat_template : NULL;
}

int32_t skv_vocab_find(const skv_vocab *v, const char *piece) {
    if (!v || !piece) return -1;
    size_t len = strlen(piece);
    for (int i = 0; i < v->n; i++)
        if (v->piece_len[i] == len && memcmp(piece_at(v, i), piece, len) == 0) return i;
    return -1;
}

const char *skv_vocab_piece(const skv_vocab *v, int32_t token) {
    return valid_token(v, token) ? piece_at(v, token) : NULL;
}

float skv_vocab_score(const skv_vocab *v, int32_t token) {
    return valid_token(v, token) ? v->score[token] : 0.0f;
}

int skv_vocab_token_type(const skv_vocab *v, int32_t token) {
    return valid_token(v, token) ? v->type[token] : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                   */

typedef struct symbol {
    int32_t start, len; /* slice of the normalized text; len 0 once merged into its left */
    int32_t prev, next; /* neighbours, -1 at the ends */
    int32_t id;         /* token of the slice, -1 when it is no piece (byte fallback) */
    bool opaque;        /* invalid UTF-8 byte or literal U+2581: never merges */
} symbol;

typedef struct pair {
    float score;
    int32_t left, right; /* symbols */
    int32_t len;         /* bytes of the merged slice, to detect stale entries */
    int32_t id;
} pair;

typedef struct pair_heap {
    pair *a;
    size_t n, cap;
} pair_heap;

/* Higher score first; equal scores: the leftmost pair. */
static bool pair_before(const pair *x, const pair *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static bool heap_push(pair_heap *h, pair p) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        pair *a = realloc(h->a, cap * sizeof *a);
        if (!a) return false;
        h->a = a;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h->a[parent])) break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = p;
    return true;
}

static pair heap_pop(pair_heap *h) {
    pair top = h->a[0];
    pair last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && pair_before(&h->a[c + 1], &h->a[c])) c++;
        if (!pair_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0) h->a[i] = last;
    return top;
}

/* Queues the merge of symbols l and r when their text is a piece. */
static bool try_pair(const skv_vocab *v, const char *text, const symbol *sym, int32_t l, int32_t r,
                     pair_heap *h) {
    if (l < 0 || r < 0 || sym[l].opaque || sym[r].opaque) return true;
    int32_t len = sym[l].len + sym[r].len;
    int32_t id = skv_vocab_lookup(v, text + sym[l].start, (size_t)len);
    if (id < 0) return true;
    pair p = {v->score[id], l, r, len, id};
    return heap_push(h, p);
}

/* Length of the well-formed UTF-8 sequence at s (1..4), 0 when s[0] does not start one. */
static int utf8_len(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0; /* overlong */
        if (c == 0xed) hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90; /* overlong */
        if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (avail < (size_t)len || s[1] < lo || s[1] > hi) return 0;
    for (int k = 2; k < len; k++)
        if ((s[k] & 0xc0) != 0x80) return 0;
    return len;
}

static bool is_space_mark(const char *s, int32_t len) {
    return len == SPACE_MARK_LEN && memcmp(s, SPACE_MARK, SPACE_MARK_LEN) == 0;
}

/* Tokens a final symbol becomes: its piece, else byte tokens, else <unk>. out may be NULL
 * (counting). A space symbol falls back to the byte of a space so that decoding gives ' '. */
static int emit_symbol(const skv_vocab *v, const char *text, const symbol *s, int32_t *out) {
    if (s->id >= 0) {
        if (out) out[0] = s->id;
        return 1;
    }
    const unsigned char *p = (const unsigned char *)text + s->start;
    if (!s->opaque && is_space_mark(text + s->start, s->len)) {
        if (out) out[0] = v->byte_token[' '] >= 0 ? v->byte_token[' '] : v->unk;
        return 1;
    }
    for (int32_t i = 0; i < s->len; i++) {
        if (v->byte_token[p[i]] < 0) {
            if (out) out[0] = v->unk;
            return 1;
        }
    }
    if (out)
        for (int32_t i = 0; i < s->len; i++) out[i] = v->byte_token[p[i]];
    return s->len;
}

/* Appends the SentencePiece tokens of one fragment of text (no special tokens in it) to out;
 * prefix: add SentencePiece's leading space (add_dummy_prefix). False when memory runs out. */
static bool spm_encode(const skv_vocab *v, const char *text, size_t len, bool prefix, tokvec *out) {
    if (len == 0) return true;
    size_t cap = 3 * len + SPACE_MARK_LEN;
    char *norm = malloc(cap);
    symbol *sym = malloc((len + 1) * sizeof *sym); /* one per character at most, + prefix */
    pair_heap heap = {0};
    bool ok = false;
    if (!norm || !sym) goto done;

    int32_t n_sym = 0, pos = 0;
    if (prefix) {
        memcpy(norm, SPACE_MARK, SPACE_MARK_LEN);
        sym[n_sym++] = (symbol){0, SPACE_MARK_LEN, -1, -1, -1, false};
        pos = SPACE_MARK_LEN;
    }
    const unsigned char *t = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        symbol s = {pos, 0, -1, -1, -1, false};
        if (t[i] == ' ') {
            memcpy(norm + pos, SPACE_MARK, SPACE_MARK_LEN);
            s.len = SPACE_MARK_LEN;
            i++;
        } else {
            int u = utf8_len(t + i, len - i);
            s.opaque = u == 0 || is_space_mark(text + i, u);
            s.len = u ? u : 1;
            memcpy(norm + pos, t + i, (size_t)s.len);
            i += (size_t)s.len;
        }
        pos += s.len;
        sym[n_sym++] = s;
    }
    for (int32_t i = 0; i < n_sym; i++) {
        sym[i].prev = i - 1;
        sym[i].next = i + 1 < n_sym ? i + 1 : -1;
        if (!sym[i].opaque)
            sym[i].id = skv_vocab_lookup(v, norm + sym[i].start, (size_t)sym[i].len);
    }
    for (int32_t i = 0; i + 1 < n_sym; i++)
        if (!try_pair(v, norm, sym, i, i + 1, &heap)) goto done;

    while (heap.n > 0) {
        pair p = heap_pop(&heap);
        symbol *l = &sym[p.left], *r = &sym[p.right];
        /* Stale: one side was merged away or grew since the pair was queued. */
        if (l->len == 0 || r->len == 0 || l->next != p.right || l->len + r->len != p.len) continue;
        l->len = p.len;
        l->id = p.id;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        r->len = 0;
        if (!try_pair(v, norm, sym, l->prev, p.left, &heap) ||
            !try_pair(v, norm, sym, p.left, l->next, &heap))
            goto done;
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        int32_t ids[4];
        int k = emit_symbol(v, norm, &sym[i], NULL);
        if (k <= 4) {
            emit_symbol(v, norm, &sym[i], ids);
            for (int j = 0; j < k; j++)
                if (!skv_tokvec_push(out, ids[j])) goto done;
        } else {
            int32_t *big = malloc((size_t)k * sizeof *big);
            if (!big) goto done;
            emit_symbol(v, norm, &sym[i], big);
            for (int j = 0; j < k; j++)
                if (!skv_tokvec_push(out, big[j])) {
                    free(big);
                    goto done;
                }
            free(big);
        }
    }
    ok = true;
done:
    free(heap.a);
    free(sym);
    free(norm);
    return ok;
}

/* Length of the special token that starts at s (the longest), its id in *id; 0 when none. */
static size_t match_special(const skv_vocab *v, const char *s, size_t avail, int32_t *id) {
    unsigned char b = (unsigned char)s[0];
    for (int k = v->special_first[b]; k < v->special_first[b + 1]; k++) {
        int32_t t = v->special[k];
        size_t n = v->piece_len[t];
        if (n <= avail && memcmp(piece_at(v, t), s, n) == 0) {
            *id = t;
            return n;
        }
    }
    return 0;
}

/* Appends the tokens of a fragment of plain text. after_special: SentencePiece adds its leading
 * space to text at the start and after a special token (as llama.cpp does). */
static bool encode_fragment(const skv_vocab *v, const char *text, size_t len, bool after_special,
                            tokvec *out) {
    if (v->kind == VOCAB_BPE) return skv_bpe_encode(v, text, len, out);
    return spm_encode(v, text, len, v->add_space_prefix && after_special, out);
}

/* skip: [n_skip] ascending [begin, end) byte ranges where no special token is matched (chat
 * contents: text, whatever it spells); NULL for none. */
static int tokenize_impl(const skv_vocab *v, const char *text, size_t len, bool bos, bool eos,
                         bool parse_special, const size_t (*skip)[2], int n_skip, int32_t *tokens,
                         int n_max) {
    if (!v || (!text && len > 0) || n_max < 0 || (!tokens && n_max > 0)) return INT_MIN;
    /* Normalized text: at most 3 bytes per input byte plus the prefix; indices fit int32. */
    if (len > ((size_t)INT32_MAX - 16) / 3) return INT_MIN;
    tokvec out = {0};
    int result = INT_MIN;
    if (bos && !skv_tokvec_push(&out, v->bos)) goto done;
    size_t start = 0;
    bool after_special = true;
    if (parse_special && v->n_special > 0) {
        int r = 0; /* the first skip range not behind i */
        for (size_t i = 0; i < len;) {
            while (r < n_skip && skip[r][1] <= i) r++;
            if (r < n_skip && skip[r][0] <= i) { /* part of the current fragment */
                i = skip[r][1];
                continue;
            }
            int32_t id;
            size_t m = match_special(v, text + i, len - i, &id);
            if (m == 0) {
                i++;
                continue;
            }
            if (i > start) {
                if (!encode_fragment(v, text + start, i - start, after_special, &out)) goto done;
            }
            if (!skv_tokvec_push(&out, id)) goto done;
            after_special = true;
            i += m;
            start = i;
        }
    }
    if (len > start && !encode_fragment(v, text + start, len - start, after_special, &out))
        goto done;
    if (eos && !skv_tokvec_push(&out, v->eos)) goto done;
    if (out.n > INT_MAX) goto done;
    if (out.n > (size_t)n_max) {
        result = -(int)out.n;
        goto done;
    }
    if (out.n) memcpy(tokens, out.a, out.n * sizeof *tokens);
    result = (int)out.n;
done:
    free(out.a);
    return result;
}

int skv_tokenize_ex(const skv_vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *tokens, int n_max) {
    return tokenize_impl(v, text, len, add_special && v && v->add_bos,
                         add_special && v && v->add_eos, parse_special, NULL, 0, tokens, n_max);
}

int skv_tokenize_skipping(const skv_vocab *v, const char *text, size_t len, const size_t (*skip)[2],
                          int n_skip, int32_t *tokens, int n_max) {
    return tokenize_impl(v, text, len, false, false, true, skip, n_skip, tokens, n_max);
}

int skv_tokenize(const skv_vocab *v, const char *text, size_t len, bool add_bos, int32_t *tokens,
                 int n_max) {
    return tokenize_impl(v, text, len, add_bos, false, false, NULL, 0, tokens, n_max);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                   */

/* Decoded bytes of token; strip drops the leading space SentencePiece added. */
static const char *surface(const skv_vocab *v, int32_t token, bool strip, size_t *len) {
    const char *s = v->arena + v->surf_off[token];
    size_t n = v->surf_len[token];
    if (strip && v->add_space_prefix && n > 0 && s[0] == ' ') {
        s++;
        n--;
    }
    *len = n;
    return s;
}

int skv_detokenize(const skv_vocab *v, const int32_t *tokens, int n_tokens,
                   bool strip_leading_space, char *buf, int buf_size) {
    if (!v || n_tokens < 0 || (!tokens && n_tokens > 0) || buf_size < 0 || (!buf && buf_size > 0))
        return INT_MIN;
    size_t need = 0;
    for (int i = 0; i < n_tokens; i++) {
        if (!valid_token(v, tokens[i])) return INT_MIN;
        bool strip = i == 0 ? strip_leading_space : tokens[i - 1] == v->bos;
        size_t n;
        surface(v, tokens[i], strip, &n);
        need += n;
        if (need > INT_MAX) return INT_MIN;
    }
    if (need > (size_t)buf_size) return -(int)need;
    size_t k = 0;
    for (int i = 0; i < n_tokens; i++) {
        bool strip = i == 0 ? strip_leading_space : tokens[i - 1] == v->bos;
        size_t n;
        const char *s = surface(v, tokens[i], strip, &n);
        if (n) memcpy(buf + k, s, n); /* buf may be NULL when nothing is written */
        k += n;
    }
    return (int)k;
}

int skv_token_to_piece(const skv_vocab *v, int32_t prev, int32_t token, char *buf, int buf_size) {
    if (!valid_token(v, token) || buf_size < 0 || (!buf && buf_size > 0)) return INT_MIN;
    size_t n;
    const char *s = surface(v, token, prev == v->bos, &n);
    if (n > (size_t)buf_size) return -(int)n;
    if (n) memcpy(buf, s, n);
    return (int)n;
}
