/* llama2c.c — llama2.c checkpoint + tokenizer.bin -> GGUF v3 (F32, tokenizer embedded).
 *
 * Checkpoint formats (all little-endian float32 weights, row-major [rows, cols]):
 *   v0 (legacy): 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 *       max_seq_len) where a negative vocab_size means an unshared classifier; then
 *       tok_embeddings, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, the RoPE
 *       tables freq_cis_real/imag [seq_len, head_size/2] (ignored), wcls when unshared.
 *   v1: uint32 magic "ak42", int32 version 1, the 7 int32, uint8 shared_classifier, zero pad to
 *       256 bytes; then rms_att, rms_ffn, rms_final, tok_embeddings, wq, wk, wv, wo, w1, w2, w3,
 *       wcls when unshared.
 * llama2.c's RoPE rotates adjacent pairs like GGUF's "llama" architecture, so Q and K are copied
 * unpermuted. w1 -> ffn_gate, w2 -> ffn_down, w3 -> ffn_up. */
#include "llama2c.h"

#include "common.h"
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA2C_MAGIC      0x616b3432u /* "ak42" read as little-endian uint32 */
#define LLAMA2C_V1_HEADER  256
#define LLAMA2C_V0_HEADER  28
#define GGUF_TOKEN_NORMAL  1
#define GGUF_TOKEN_UNKNOWN 2
#define GGUF_TOKEN_CONTROL 3
#define GGUF_TOKEN_BYTE    6

typedef struct ck_config {
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    bool shared;
    int version;
} ck_config;

/* Pointers into the mapped checkpoint. Per-layer tensors are [n_layers, ...] contiguous. */
typedef struct ck_weights {
    const float *tok, *rms_att, *rms_ffn, *rms_final, *wq, *wk, *wv, *wo, *w1, *w2, *w3, *wcls;
} ck_weights;

typedef struct mapped {
    const uint8_t *p;
    size_t size;
} mapped;

static skv_status map_file(const char *path, const char *what, mapped *m, skv_err *err) {
    m->p = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skv_err_set(err, SKV_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return skv_err_set(err, SKV_ERR_IO, "%s '%s' is not a readable regular file", what, path);
    }
    if (st.st_size == 0) {
        close(fd);
        return skv_err_set(err, SKV_ERR_FORMAT, "%s '%s' is empty", what, path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return skv_err_set(err, SKV_ERR_IO, "cannot map %s '%s': %s", what, path, strerror(e));
    m->p = p;
    m->size = (size_t)st.st_size;
    return SKV_OK;
}

static void unmap_file(mapped *m) {
    if (m->p) munmap((void *)m->p, m->size);
    m->p = NULL;
}

static int32_t rd_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static skv_status read_config(const mapped *m, const char *path, ck_config *c, uint64_t *hdr,
                              skv_err *err) {
    if (m->size < LLAMA2C_V0_HEADER)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "checkpoint '%s' is truncated: %zu bytes is smaller than a llama2.c "
                           "header",
                           path, m->size);
    const uint8_t *p = m->p;
    if ((uint32_t)rd_i32(p) == LLAMA2C_MAGIC) {
        if (m->size < 8 + 4 * 7 + 1)
            return skv_err_set(err, SKV_ERR_FORMAT, "checkpoint '%s' is truncated in its header",
                               path);
        int32_t version = rd_i32(p + 4);
        if (version != 1)
            return skv_err_set(err, SKV_ERR_UNSUPPORTED,
                               "checkpoint '%s' has llama2.c format version %d; only versions 0 "
                               "(legacy) and 1 (float32) are supported",
                               path, (int)version);
        p += 8;
        c->version = 1;
        *hdr = LLAMA2C_V1_HEADER;
    } else {
        c->version = 0;
        *hdr = LLAMA2C_V0_HEADER;
    }
    c->dim = rd_i32(p);
    c->hidden = rd_i32(p + 4);
    c->n_layers = rd_i32(p + 8);
    c->n_heads = rd_i32(p + 12);
    c->n_kv_heads = rd_i32(p + 16);
    c->vocab = rd_i32(p + 20);
    c->seq_len = rd_i32(p + 24);
    if (c->version == 1) {
        uint8_t flag = p[28];
        if (flag > 1)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "checkpoint '%s': shared_classifier flag is %u, not 0 or 1", path,
                               flag);
        c->shared = flag == 1;
    } else {
        if (c->vocab == INT32_MIN)
            return skv_err_set(err, SKV_ERR_FORMAT, "checkpoint '%s': vocab_size is invalid", path);
        c->shared = c->vocab > 0;
        if (c->vocab < 0) c->vocab = -c->vocab;
    }
    if (c->dim <= 0 || c->hidden <= 0 || c->n_layers <= 0 || c->n_heads <= 0 ||
        c->n_kv_heads <= 0 || c->vocab <= 0 || c->seq_len <= 0)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "checkpoint '%s' (llama2.c v%d): header has a non-positive size "
                           "(dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, "
                           "vocab_size %d, max_seq_len %d): not a llama2.c checkpoint?",
                           path, c->version, c->dim, c->hidden, c->n_layers, c->n_heads,
                           c->n_kv_heads, c->vocab, c->seq_len);
    if (c->dim % c->n_heads || c->n_heads % c->n_kv_heads || (c->dim / c->n_heads) % 2)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "checkpoint '%s': dim %d, n_heads %d, n_kv_heads %d are inconsistent "
                           "(need dim = n_heads * even head size, n_heads a multiple of "
                           "n_kv_heads)",
                           path, c->dim, c->n_heads, c->n_kv_heads);
    return SKV_OK;
}

/* Lays the weights out in file order; fails when the file size does not match the header. */
static skv_status locate_weights(const mapped *m, const char *path, const ck_config *c,
                                 uint64_t hdr, ck_weights *w, skv_err *err) {
    const uint64_t L = (uint64_t)c->n_layers, dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden;
    const uint64_t vocab = (uint64_t)c->vocab, head = dim / (uint64_t)c->n_heads;
    const uint64_t kv_dim = head * (uint64_t)c->n_kv_heads;
    /* Element counts; all factors are < 2^31, products of three fit in 2^93 only in theory,
     * so each is overflow-checked. */
    uint64_t n_tok = 0, n_norm = 0, n_wq = 0, n_wk = 0, n_ffn = 0, n_rope = 0, t = 0;
    bool ok = skv_mul_ok(vocab, dim, &n_tok) && skv_mul_ok(L, dim, &n_norm) &&
              skv_mul_ok(dim, dim, &t) && skv_mul_ok(t, L, &n_wq) && skv_mul_ok(kv_dim, dim, &t) &&
              skv_mul_ok(t, L, &n_wk) && skv_mul_ok(hid, dim, &t) && skv_mul_ok(t, L, &n_ffn) &&
              skv_mul_ok((uint64_t)c->seq_len, head, &n_rope);
    /* sections in v1 order (v0 only reorders them and adds the RoPE tables) */
    uint64_t counts[] = {n_norm,
                         n_norm,
                         dim,
                         n_tok,
                         n_wq,
                         n_wk,
                         n_wk,
                         n_wq,
                         n_ffn,
                         n_ffn,
                         n_ffn,
                         c->shared ? 0 : n_tok,
                         c->version == 0 ? n_rope : 0};
    uint64_t total = 0;
    for (size_t i = 0; ok && i < sizeof counts / sizeof counts[0]; i++)
        ok = skv_add_ok(total, counts[i], &total);
    uint64_t need = 0;
    ok = ok && skv_mul_ok(total, 4, &need) && skv_add_ok(need, hdr, &need);
    if (!ok)
        return skv_err_set(err, SKV_ERR_FORMAT, "checkpoint '%s': header sizes overflow", path);
    if ((uint64_t)m->size < need)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "checkpoint '%s' is truncated: its header (llama2.c v%d, dim %d, "
                           "n_layers %d, vocab %d) needs %llu bytes but the file has %zu",
                           path, c->version, c->dim, c->n_layers, c->vocab,
                           (unsigned long long)need, m->size);
    if ((uint64_t)m->size > need)
        return skv_err_set(err, SKV_ERR_FORMAT,
                           "checkpoint '%s' has %zu bytes, more than the %llu its header "
                           "(llama2.c v%d) describes: not a llama2.c checkpoint of this version?",
                           path, m->size, (unsigned long long)need, c->version);
    const float *f = (const float *)(m->p + hdr); /* page-aligned map + 28 or 256 */
    if (c->version == 1) {
        w->rms_att = f, f += n_norm;
        w->rms_ffn = f, f += n_norm;
        w->rms_final = f, f += dim;
        w->tok = f, f += n_tok;
        w->wq = f, f += n_wq;
        w->wk = f, f += n_wk;
        w->wv = f, f += n_wk;
        w->wo = f, f += n_wq;
        w->w1 = f, f += n_ffn;
        w->w2 = f, f += n_ffn;
        w->w3 = f, f += n_ffn;
        w->wcls = c->shared ? w->tok : f;
    } else {
        w->tok = f, f += n_tok;
        w->rms_att = f, f += n_norm;
        w->wq = f, f += n_wq;
        w->wk = f, f += n_wk;
        w->wv = f, f += n_wk;
        w->wo = f, f += n_wq;
        w->rms_ffn = f, f += n_norm;
        w->w1 = f, f += n_ffn;
        w->w2 = f, f += n_ffn;
        w->w3 = f, f += n_ffn;
        w->rms_final = f, f += dim;
        f += n_rope; /* freq_cis_real, freq_cis_imag */
        w->wcls = c->shared ? w->tok : f;
    }
    return SKV_OK;
}

/* ---- tokenizer.bin ------------------------------------------------------------------------ */

typedef struct vocab_out {
    int n;
    char **pieces; /* GGUF token strings */
    size_t *lens;
    float *scores;
    int32_t *types;
    uint32_t unk, bos, eos;
} vocab_out;

static void vocab_free(vocab_out *v) {
    if (v->pieces)
        for (int i = 0; i < v->n; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    free(v->types);
}

static bool is_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

/* Converts one llama2.c piece to its GGUF string and token type. */
static char *convert_piece(const uint8_t *s, size_t n, size_t *out_len, int32_t *type) {
    static const struct {
        const char *raw, *gguf;
        int32_t type;
    } special[] = {{"\n<s>\n", "<s>", GGUF_TOKEN_CONTROL},
                   {"\n</s>\n", "</s>", GGUF_TOKEN_CONTROL},
                   {"<s>", "<s>", GGUF_TOKEN_CONTROL},
                   {"</s>", "</s>", GGUF_TOKEN_CONTROL},
                   {"<unk>", "<unk>", GGUF_TOKEN_UNKNOWN}};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        if (n == strlen(special[i].raw) && !memcmp(s, special[i].raw, n)) {
            *type = special[i].type;
            *out_len = strlen(special[i].gguf);
            return strdup(special[i].gguf);
        }
    }
    if (n == 6 && !memcmp(s, "<0x", 3) && is_hex(s[3]) && is_hex(s[4]) && s[5] == '>') {
        *type = GGUF_TOKEN_BYTE;
    } else {
        *type = GGUF_TOKEN_NORMAL;
    }
    /* SentencePiece writes spaces as U+2581 (3 bytes in UTF-8). */
    size_t spaces = 0;
    if (*type == GGUF_TOKEN_NORMAL)
        for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    char *o = malloc(n + 2 * spaces + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' && *type == GGUF_TOKEN_NORMAL) {
            memcpy(o + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            o[k++] = (char)s[i];
        }
    }
    o[k] = 0;
    *out_len = k;
    return o;
}

static skv_status read_vocab(const char *path, int n_vocab, vocab_out *v, skv_err *err) {
    mapped m;
    skv_status st = map_file(path, "tokenizer", &m, err);
    if (st != SKV_OK) return st;
    /* Every token takes at least 8 bytes (score + length): bound n before allocating. */
    if (m.size < 4 || (uint64_t)n_vocab > (m.size - 4) / 8) {
        st = skv_err_set(err, SKV_ERR_FORMAT,
                         "tokenizer '%s' (%zu bytes) is too small to hold the checkpoint's %d "
                         "tokens",
                         path, m.size, n_vocab);
        goto done;
    }
    v->n = n_vocab;
    v->pieces = calloc((size_t)n_vocab, sizeof *v->pieces);
    v->lens = calloc((size_t)n_vocab, sizeof *v->lens);
    v->scores = calloc((size_t)n_vocab, sizeof *v->scores);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    if (!v->pieces || !v->lens || !v->scores || !v->types) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading tokenizer '%s'", path);
        goto done;
    }
    int32_t max_len = rd_i32(m.p);
    if (max_len <= 0) {
        st = skv_err_set(err, SKV_ERR_FORMAT, "tokenizer '%s': max_token_length %d is not positive",
                         path, max_len);
        goto done;
    }
    v->unk = 0, v->bos = 1, v->eos = 2; /* llama2.c's fixed ids, unless the pieces say otherwise */
    bool seen_unk = false, seen_bos = false, seen_eos = false;
    size_t pos = 4;
    for (int i = 0; i < n_vocab; i++) {
        if (m.size - pos < 8) {
            st = skv_err_set(err, SKV_ERR_FORMAT,
                             "tokenizer '%s' is truncated at token %d of %d (offset %zu)", path, i,
                             n_vocab, pos);
            goto done;
        }
        memcpy(&v->scores[i], m.p + pos, 4);
        int32_t len = rd_i32(m.p + pos + 4);
        pos += 8;
        if (len < 0 || (size_t)len > m.size - pos) {
            st = skv_err_set(err, SKV_ERR_FORMAT,
                             "tokenizer '%s': token %d has length %d, past the end of the file",
                             path, i, (int)len);
            goto done;
        }
        v->pieces[i] = convert_piece(m.p + pos, (size_t)len, &v->lens[i], &v->types[i]);
        if (!v->pieces[i]) {
            st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading tokenizer '%s'", path);
            goto done;
        }
        pos += (size_t)len;
        if (v->types[i] == GGUF_TOKEN_UNKNOWN && !seen_unk) v->unk = (uint32_t)i, seen_unk = true;
        if (v->types[i] == GGUF_TOKEN_CONTROL && !strcmp(v->pieces[i], "<s>") && !seen_bos)
            v->bos = (uint32_t)i, seen_bos = true;
        if (v->types[i] == GGUF_TOKEN_CONTROL && !strcmp(v->pieces[i], "</s>") && !seen_eos)
            v->eos = (uint32_t)i, seen_eos = true;
    }
    if (pos != m.size)
        st = skv_err_set(err, SKV_ERR_FORMAT,
                         "tokenizer '%s' has %zu bytes after its %d tokens: it does not match "
                         "the checkpoint's vocab_size",
                         path, m.size - pos, n_vocab);
done:
    unmap_file(&m);
    return st;
}

/* ---- conversion --------------------------------------------------------------------------- */

/* "stories260K (llama2.c, converted to GGUF)" from ".../stories260K.bin". */
static char *model_name(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 4 && !strcmp(base + n - 4, ".bin")) n -= 4;
    const char *suffix = " (llama2.c, converted to GGUF)";
    char *s = malloc(n + strlen(suffix) + 1);
    if (s) {
        memcpy(s, base, n);
        strcpy(s + n, suffix);
    }
    return s;
}

static skv_status add_layer_tensor(skv_gguf_writer *w, int layer, const char *what,
                                   const float *base, int n_dims, int64_t ne0, int64_t ne1) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s.weight", layer, what);
    const int64_t ne[2] = {ne0, ne1};
    return skv_gguf_writer_add_tensor(w, name, SKV_TYPE_F32, n_dims, ne,
                                      base + (size_t)layer * (size_t)(ne0 * ne1));
}

skv_llama2c_params skv_llama2c_default_params(void) {
    skv_llama2c_params p = {.rope_theta = 10000.0f};
    return p;
}

skv_status skv_convert_llama2c(const char *checkpoint_path, const char *tokenizer_path,
                               const char *out_path, skv_err *err) {
    return skv_convert_llama2c_ex(checkpoint_path, tokenizer_path, out_path, NULL, err);
}

skv_status skv_convert_llama2c_ex(const char *checkpoint_path, const char *tokenizer_path,
                                  const char *out_path, const skv_llama2c_params *params,
                                  skv_err *err) {
    return skv_llama2c_convert(checkpoint_path, tokenizer_path, out_path, params, NULL, err);
}

skv_status skv_llama2c_convert(const char *checkpoint_path, const char *tokenizer_path,
                               const char *out_path, const skv_llama2c_params *params,
                               bool *bad_input, skv_err *err) {
    if (bad_input) *bad_input = false;
    if (!checkpoint_path || !tokenizer_path || !out_path)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "convert-llama2c: NULL path");
    const skv_llama2c_params p = params ? *params : skv_llama2c_default_params();
    if (!(p.rope_theta > 0.0f) || !isfinite(p.rope_theta))
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "convert-llama2c: the RoPE base frequency must be a finite number > 0");
    mapped m = {0};
    vocab_out v = {0};
    skv_gguf_writer *w = NULL;
    char *name = NULL;
    ck_config c = {0};
    ck_weights cw = {0};
    uint64_t hdr = 0;
    skv_status st = map_file(checkpoint_path, "checkpoint", &m, err);
    if (st == SKV_OK) st = read_config(&m, checkpoint_path, &c, &hdr, err);
    if (st == SKV_OK) st = locate_weights(&m, checkpoint_path, &c, hdr, &cw, err);
    if (st == SKV_OK) st = read_vocab(tokenizer_path, c.vocab, &v, err);
    if (st != SKV_OK) { /* everything so far only read the inputs */
        if (bad_input) *bad_input = st != SKV_ERR_NOMEM;
        goto done;
    }

    w = skv_gguf_writer_new();
    name = model_name(checkpoint_path);
    if (!w || !name) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory converting '%s'", checkpoint_path);
        goto done;
    }
    if (skv_gguf_writer_add_source(w, checkpoint_path) != SKV_OK ||
        skv_gguf_writer_add_source(w, tokenizer_path) != SKV_OK) {
        st = skv_err_set(err, SKV_ERR_INVALID_ARG, "cannot record the converter's inputs");
        goto done;
    }
    const int64_t dim = c.dim, hid = c.hidden, head = c.dim / c.n_heads;
    const int64_t kv_dim = head * c.n_kv_heads;
    /* Keys in the order of the reference conversion (../shared/models/stories260K.gguf). */
    skv_gguf_writer_set_str(w, "general.architecture", "llama");
    skv_gguf_writer_set_str(w, "general.name", name);
    skv_gguf_writer_set_u32(w, "general.file_type", 0); /* all F32 */
    skv_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c.seq_len);
    skv_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c.dim);
    skv_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c.hidden);
    skv_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c.n_layers);
    skv_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c.n_heads);
    skv_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c.n_kv_heads);
    skv_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)head);
    /* llama2.c hard-codes theta 10000 (the default) and RMSNorm eps 1e-5 in run.c */
    skv_gguf_writer_set_f32(w, "llama.rope.freq_base", p.rope_theta);
    skv_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    skv_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)c.vocab);
    skv_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    skv_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.pieces, v.lens,
                                (uint64_t)v.n);
    skv_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SKV_GGUF_FLOAT32, v.scores, (uint64_t)v.n);
    skv_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SKV_GGUF_INT32, v.types, (uint64_t)v.n);
    skv_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", v.unk);
    skv_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v.bos);
    skv_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v.eos);
    skv_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    skv_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);

    /* GGUF ne = [cols, rows] of llama2.c's row-major [rows, cols]. Setter and add_tensor errors
     * are kept by the writer and reported by write. */
    skv_gguf_writer_add_tensor(w, "token_embd.weight", SKV_TYPE_F32, 2,
                               (const int64_t[]){dim, c.vocab}, cw.tok);
    for (int l = 0; l < c.n_layers; l++) {
        add_layer_tensor(w, l, "attn_norm", cw.rms_att, 1, dim, 1);
        add_layer_tensor(w, l, "attn_q", cw.wq, 2, dim, dim);
        add_layer_tensor(w, l, "attn_k", cw.wk, 2, dim, kv_dim);
        add_layer_tensor(w, l, "attn_v", cw.wv, 2, dim, kv_dim);
        add_layer_tensor(w, l, "attn_output", cw.wo, 2, dim, dim);
        add_layer_tensor(w, l, "ffn_norm", cw.rms_ffn, 1, dim, 1);
        add_layer_tensor(w, l, "ffn_gate", cw.w1, 2, dim, hid);
        add_layer_tensor(w, l, "ffn_down", cw.w2, 2, hid, dim);
        add_layer_tensor(w, l, "ffn_up", cw.w3, 2, dim, hid);
    }
    skv_gguf_writer_add_tensor(w, "output_norm.weight", SKV_TYPE_F32, 1, (const int64_t[]){dim},
                               cw.rms_final);
    if (!c.shared)
        skv_gguf_writer_add_tensor(w, "output.weight", SKV_TYPE_F32, 2,
                                   (const int64_t[]){dim, c.vocab}, cw.wcls);
    st = skv_gguf_writer_write(w, out_path, err);
done:
    skv_gguf_writer_free(w);
    free(name);
    vocab_free(&v);
    unmap_file(&m);
    return st;
}
