/* test_tokenizer.c — the SentencePiece-BPE tokenizer against Meta's published token ids
 * (expected.json), a naive O(n^2) reference encoder, hand-derived merges on tiny vocabularies,
 * round trips on random byte strings, tok512.bin vs stories260K.gguf, hostile files and the
 * buffer-size contracts. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "support.h"
#include "tokenizer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPACE_MARK "\xe2\x96\x81"

static skv_vocab *load_llama2(void) {
    skv_err err = {0};
    skv_vocab *v =
        skv_vocab_load_llama2c(test_model_path("llama2-tokenizer/tokenizer.bin"), 32000, &err);
    if (!v) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(v);
    return v;
}

static skv_vocab *load_tok512(void) {
    skv_err err = {0};
    skv_vocab *v = skv_vocab_load_llama2c(test_model_path("stories260K/tok512.bin"), 512, &err);
    if (!v) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(v);
    return v;
}

/* Encodes into a malloc'd array (the size asked first, through the -needed contract). */
static int32_t *encode(const skv_vocab *v, const char *s, size_t len, bool bos, int *n) {
    int need = skv_tokenize(v, s, len, bos, NULL, 0);
    assert_true(need <= 0);
    int32_t *t = malloc(sizeof *t * (size_t)(-need + 1));
    assert_non_null(t);
    *n = skv_tokenize(v, s, len, bos, t, -need);
    assert_int_equal(*n, -need);
    return t;
}

static char *decode(const skv_vocab *v, const int32_t *t, int n, bool strip, int *len) {
    int need = skv_detokenize(v, t, n, strip, NULL, 0);
    assert_true(need <= 0);
    char *buf = malloc((size_t)(-need) + 1);
    assert_non_null(buf);
    *len = skv_detokenize(v, t, n, strip, buf, -need);
    assert_int_equal(*len, -need);
    return buf;
}

/* ---------------------------------------------------------------------------------------- */
/* Naive reference encoder: an array of symbols, each round scans every adjacent pair for the
 * best-scoring piece (first on ties) and merges it. Pieces found by binary search in a sorted
 * copy of the vocabulary built through the public accessors only. */

typedef struct ref_piece {
    const char *s;
    size_t len;
    int32_t id;
} ref_piece;

typedef struct ref_vocab {
    ref_piece *p;
    int n;
    const skv_vocab *v;
    int32_t bytes[256]; /* byte tokens by value */
} ref_vocab;

static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

static int cmp_ref_piece(const void *x, const void *y) {
    const ref_piece *a = x, *b = y;
    int c = cmp_bytes(a->s, a->len, b->s, b->len);
    return c ? c : (a->id > b->id) - (a->id < b->id);
}

static int32_t byte_token(const skv_vocab *v, unsigned char b) {
    char want[8];
    snprintf(want, sizeof want, "<0x%02X>", b);
    for (int i = 0; i < skv_vocab_n_tokens(v); i++)
        if (skv_vocab_token_type(v, i) == SKV_TOKEN_BYTE &&
            strcmp(skv_vocab_piece(v, i), want) == 0)
            return i;
    return -1;
}

static ref_vocab ref_build(const skv_vocab *v) {
    ref_vocab r = {.p = calloc((size_t)skv_vocab_n_tokens(v), sizeof(ref_piece)), .v = v};
    assert_non_null(r.p);
    for (int i = 0; i < skv_vocab_n_tokens(v); i++) {
        int t = skv_vocab_token_type(v, i);
        if (t != SKV_TOKEN_NORMAL && t != SKV_TOKEN_USER) continue;
        const char *s = skv_vocab_piece(v, i);
        r.p[r.n++] = (ref_piece){s, strlen(s), i};
    }
    qsort(r.p, (size_t)r.n, sizeof *r.p, cmp_ref_piece);
    for (int b = 0; b < 256; b++) r.bytes[b] = byte_token(v, (unsigned char)b);
    return r;
}

static int32_t ref_find(const ref_vocab *r, const char *s, size_t len) {
    int lo = 0, hi = r->n; /* first element >= (s, len) */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cmp_bytes(r->p[mid].s, r->p[mid].len, s, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n && cmp_bytes(r->p[lo].s, r->p[lo].len, s, len) == 0 ? r->p[lo].id : -1;
}

/* Bytes of the well-formed UTF-8 character at s, by decoding the code point; 0 if invalid. */
static int ref_char_len(const unsigned char *s, size_t avail) {
    if (s[0] < 0x80) return 1;
    int n = (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (size_t)n > avail) return 0;
    uint32_t cp = s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

typedef struct ref_sym {
    size_t start, len;
    bool opaque, space;
} ref_sym;

/* Reference encoding without BOS; returns the count (out has room for 4 * len + 4). */
static int ref_encode(const ref_vocab *r, const char *text, size_t len, int32_t *out) {
    if (len == 0) return 0;
    char *norm = malloc(3 * len + 3);
    ref_sym *sym = malloc(sizeof *sym * (len + 1));
    assert_true(norm && sym);
    size_t pos = 3;
    int n = 0;
    memcpy(norm, SPACE_MARK, 3);
    sym[n++] = (ref_sym){0, 3, false, true};
    for (size_t i = 0; i < len;) {
        const unsigned char *u = (const unsigned char *)text + i;
        if (*u == ' ') {
            memcpy(norm + pos, SPACE_MARK, 3);
            sym[n++] = (ref_sym){pos, 3, false, true};
            pos += 3;
            i++;
            continue;
        }
        int c = ref_char_len(u, len - i);
        bool mark = c == 3 && memcmp(u, SPACE_MARK, 3) == 0;
        size_t k = c ? (size_t)c : 1;
        memcpy(norm + pos, u, k);
        sym[n++] = (ref_sym){pos, k, c == 0 || mark, false};
        pos += k;
        i += k;
    }
    for (;;) {
        int best = -1;
        float best_score = 0;
        for (int i = 0; i + 1 < n; i++) {
            if (sym[i].opaque || sym[i + 1].opaque) continue;
            int32_t id = ref_find(r, norm + sym[i].start, sym[i].len + sym[i + 1].len);
            if (id < 0) continue;
            float s = skv_vocab_score(r->v, id);
            if (best < 0 || s > best_score) {
                best = i;
                best_score = s;
            }
        }
        if (best < 0) break;
        sym[best].len += sym[best + 1].len;
        sym[best].space = false;
        memmove(sym + best + 1, sym + best + 2, sizeof *sym * (size_t)(n - best - 2));
        n--;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = sym[i].opaque ? -1 : ref_find(r, norm + sym[i].start, sym[i].len);
        if (id >= 0) {
            out[k++] = id;
        } else if (sym[i].space) {
            out[k++] = r->bytes[' '];
        } else {
            for (size_t j = 0; j < sym[i].len; j++)
                out[k++] = r->bytes[(unsigned char)norm[sym[i].start + j]];
        }
    }
    free(norm);
    free(sym);
    return k;
}

/* ---------------------------------------------------------------------------------------- */
/* A small JSON reader, enough for expected.json: [{"text": "...", "ids": [1, 2]}, ...]. */

typedef struct json {
    const char *p, *end;
} json;

static void js_ws(json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static bool js_eat(json *j, char c) {
    js_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

static int js_hex4(json *j) {
    if (j->end - j->p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = j->p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    j->p += 4;
    return v;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string literal into a malloc'd buffer; NULL on malformed input. */
static char *js_string(json *j, size_t *len) {
    if (!js_eat(j, '"')) return NULL;
    char *o = malloc((size_t)(j->end - j->p) + 1);
    size_t k = 0;
    while (o && j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        if (j->p == j->end) break;
        c = *j->p++;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            o[k++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
        } else if (c == 'u') {
            int cp = js_hex4(j);
            if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
                j->p[1] == 'u') {
                j->p += 2;
                int lo = js_hex4(j);
                if (lo < 0xdc00 || lo > 0xdfff)
                    cp = -1;
                else
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp < 0) break;
            k += put_utf8(o + k, (uint32_t)cp);
        } else {
            break;
        }
    }
    if (!o || j->p == j->end || *j->p != '"') {
        free(o);
        return NULL;
    }
    j->p++;
    o[k] = '\0';
    *len = k;
    return o;
}

/* [int, ...] into out (cap entries); count or -1. */
static int js_int_array(json *j, int32_t *out, int cap) {
    if (!js_eat(j, '[')) return -1;
    int n = 0;
    if (js_eat(j, ']')) return 0;
    do {
        js_ws(j);
        char *e;
        long v = strtol(j->p, &e, 10);
        if (e == j->p || n == cap) return -1;
        j->p = e;
        out[n++] = (int32_t)v;
    } while (js_eat(j, ','));
    return js_eat(j, ']') ? n : -1;
}

/* ---------------------------------------------------------------------------------------- */

static void test_expected_json(void **state) {
    (void)state;
    size_t size;
    test_model_path("llama2-tokenizer/tokenizer.bin"); /* skip before allocating */
    char *data = test_read_file(test_model_path("llama2-tokenizer/expected.json"), &size);
    assert_non_null(data);
    skv_vocab *v = load_llama2();
    ref_vocab r = ref_build(v);
    json j = {data, data + size};
    assert_true(js_eat(&j, '['));
    int cases = 0;
    do {
        assert_true(js_eat(&j, '{'));
        char *text = NULL;
        size_t text_len = 0;
        int32_t ids[1024];
        int n_ids = -1;
        do {
            size_t klen;
            char *key = js_string(&j, &klen);
            assert_non_null(key);
            assert_true(js_eat(&j, ':'));
            if (strcmp(key, "text") == 0) {
                text = js_string(&j, &text_len);
                assert_non_null(text);
            } else if (strcmp(key, "ids") == 0) {
                n_ids = js_int_array(&j, ids, 1024);
                assert_true(n_ids >= 0);
            } else {
                fail_msg("unexpected key '%s' in expected.json", key);
            }
            free(key);
        } while (js_eat(&j, ','));
        assert_true(js_eat(&j, '}'));
        assert_non_null(text);
        assert_true(n_ids > 0);

        int n;
        int32_t *got = encode(v, text, text_len, true, &n);
        if (n != n_ids || memcmp(got, ids, sizeof *ids * (size_t)n) != 0) {
            for (int i = 0; i < n; i++) fprintf(stderr, "%d ", (int)got[i]);
            fprintf(stderr, "\n");
            fail_msg("case %d (\"%.40s...\"): %d tokens, expected %d", cases, text, n, n_ids);
        }
        /* the naive reference agrees (sanity of the reference itself) */
        int32_t *ref = malloc(sizeof *ref * (4 * text_len + 4));
        int rn = ref_encode(&r, text, text_len, ref);
        assert_int_equal(rn, n_ids - 1);
        assert_memory_equal(ref, ids + 1, sizeof *ids * (size_t)rn);
        int dlen;
        char *back = decode(v, got, n, false, &dlen);
        assert_int_equal(dlen, (int)text_len);
        assert_memory_equal(back, text, text_len);
        free(back);
        free(ref);
        free(got);
        free(text);
        cases++;
    } while (js_eat(&j, ','));
    assert_true(js_eat(&j, ']'));
    assert_true(cases >= 5);
    free(r.p);
    skv_vocab_free(v);
    free(data);
}

static void test_llama2_vocab_contents(void **state) {
    (void)state;
    skv_vocab *v = load_llama2();
    assert_int_equal(skv_vocab_n_tokens(v), 32000);
    assert_int_equal(skv_vocab_bos(v), 1);
    assert_int_equal(skv_vocab_eos(v), 2);
    assert_int_equal(skv_vocab_unk(v), 0);
    assert_string_equal(skv_vocab_piece(v, 0), "<unk>");
    assert_string_equal(skv_vocab_piece(v, 1), "<s>");
    assert_string_equal(skv_vocab_piece(v, 2), "</s>");
    assert_string_equal(skv_vocab_piece(v, 3), "<0x00>");
    assert_string_equal(skv_vocab_piece(v, 258), "<0xFF>");
    assert_string_equal(skv_vocab_piece(v, 306), SPACE_MARK "I");
    assert_string_equal(skv_vocab_piece(v, 29871), SPACE_MARK);
    assert_string_equal(skv_vocab_piece(v, 13), "<0x0A>");
    assert_int_equal(skv_vocab_token_type(v, 0), SKV_TOKEN_UNKNOWN);
    assert_int_equal(skv_vocab_token_type(v, 1), SKV_TOKEN_CONTROL);
    assert_int_equal(skv_vocab_token_type(v, 2), SKV_TOKEN_CONTROL);
    assert_int_equal(skv_vocab_token_type(v, 100), SKV_TOKEN_BYTE);
    assert_int_equal(skv_vocab_token_type(v, 306), SKV_TOKEN_NORMAL);
    assert_true(skv_vocab_score(v, 260) == -1.0f); /* "▁t", second merge of the vocabulary */
    assert_null(skv_vocab_piece(v, -1));
    assert_null(skv_vocab_piece(v, 32000));

    /* decoding: BOS/EOS nothing, byte tokens their byte, space after BOS dropped */
    int32_t t[] = {1, 306, 2, 13, 306, 100, 1, 29871};
    char buf[64];
    int n = skv_detokenize(v, t, 8, false, buf, sizeof buf);
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "I\n Ia", 5);
    n = skv_detokenize(v, t + 4, 2, true, buf, sizeof buf);
    assert_int_equal(n, 2);
    assert_memory_equal(buf, "Ia", 2);
    n = skv_detokenize(v, t + 4, 2, false, buf, sizeof buf);
    assert_int_equal(n, 3);
    assert_memory_equal(buf, " Ia", 3);
    assert_int_equal(skv_token_to_piece(v, 1, 306, buf, sizeof buf), 1);
    assert_int_equal(buf[0], 'I');
    assert_int_equal(skv_token_to_piece(v, 13, 306, buf, sizeof buf), 2);
    assert_memory_equal(buf, " I", 2);
    assert_int_equal(skv_token_to_piece(v, -1, 2, buf, sizeof buf), 0);
    assert_int_equal(skv_token_to_piece(v, -1, 3 + 0xC3, buf, sizeof buf), 1);
    assert_int_equal((unsigned char)buf[0], 0xC3);
    /* invalid ids are refused */
    assert_int_equal(skv_token_to_piece(v, -1, 32000, buf, sizeof buf), INT_MIN);
    int32_t bad[] = {306, -5};
    assert_int_equal(skv_detokenize(v, bad, 2, false, buf, sizeof buf), INT_MIN);
    skv_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* Random byte strings */

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t random_text(char *out, size_t cap) {
    static const char *const parts[] = {"the",
                                        "Once",
                                        " upon",
                                        "a",
                                        "time",
                                        "little",
                                        "girl",
                                        "Lily",
                                        "ball",
                                        "meaning",
                                        "of",
                                        "life",
                                        "er",
                                        "ing",
                                        ".",
                                        ",",
                                        "!",
                                        "?",
                                        "\n",
                                        "\n\n",
                                        "\t",
                                        "\r\n",
                                        " ",
                                        "  ",
                                        "    ",
                                        "\xc3\xa9",
                                        "\xc3\x9f",
                                        "\xe4\xb8\xad\xe6\x96\x87",
                                        "\xf0\x9f\x98\x80",
                                        "\xe2\x80\x8a",
                                        SPACE_MARK,
                                        " " SPACE_MARK "x",
                                        "\xc2\xa0",
                                        "\xef\xbf\xbd",
                                        "<s>",
                                        "</s>",
                                        "<0x41>",
                                        "<unk>",
                                        "\x80",
                                        "\xbf",
                                        "\xc3",
                                        "\xe2\x96",
                                        "\xff",
                                        "\xfe",
                                        "\xc0\x80",
                                        "\xed\xa0\x80",
                                        "\xf4\x90\x80\x80",
                                        "\xf0\x9f\x98",
                                        "0",
                                        "123",
                                        "x",
                                        "Z",
                                        "'",
                                        "\"",
                                        "\\"};
    size_t target = (size_t)(rnd() % 201), n = 0;
    if (target > cap) target = cap;
    while (n < target) {
        uint64_t r = rnd() % 10;
        if (r == 0) {
            out[n++] = (char)(rnd() & 0xff); /* any byte, NUL included */
        } else if (r == 1) {
            out[n++] = (char)(rnd() % 32); /* control bytes */
        } else {
            const char *p = parts[rnd() % (sizeof parts / sizeof *parts)];
            size_t k = strlen(p);
            if (k > target - n) k = target - n; /* may cut a character: more invalid UTF-8 */
            memcpy(out + n, p, k);
            n += k;
        }
    }
    return n;
}

static void roundtrip_random(const skv_vocab *v, uint64_t seed, int count) {
    ref_vocab r = ref_build(v);
    rng_state = seed;
    char text[256];
    int32_t ref[4 * 256 + 4];
    for (int c = 0; c < count; c++) {
        size_t len = random_text(text, 200);
        int n;
        int32_t *t = encode(v, text, len, true, &n);
        assert_true(n >= 1);
        assert_int_equal(t[0], skv_vocab_bos(v));
        int rn = ref_encode(&r, text, len, ref);
        if (rn != n - 1 || memcmp(ref, t + 1, sizeof *t * (size_t)rn) != 0)
            fail_msg("string %d (%zu bytes): encoder and reference differ", c, len);

        int dlen;
        char *back = decode(v, t, n, false, &dlen);
        if ((size_t)dlen != len || memcmp(back, text, len) != 0)
            fail_msg("string %d (%zu bytes) did not round-trip with BOS", c, len);
        free(back);

        /* the same pieces one at a time, as a generator would print them */
        char pieces[1024];
        int plen = 0;
        for (int i = 1; i < n; i++) {
            int k = skv_token_to_piece(v, t[i - 1], t[i], pieces + plen, (int)sizeof pieces - plen);
            assert_true(k >= 0);
            plen += k;
        }
        assert_int_equal(plen, (int)len);
        assert_memory_equal(pieces, text, len);
        free(t);

        /* without BOS, strip_leading_space removes the dummy prefix */
        t = encode(v, text, len, false, &n);
        assert_int_equal(n, rn);
        back = decode(v, t, n, true, &dlen);
        if ((size_t)dlen != len || memcmp(back, text, len) != 0)
            fail_msg("string %d (%zu bytes) did not round-trip without BOS", c, len);
        free(back);
        free(t);
    }
    free(r.p);
}

static void test_roundtrip_random_llama2(void **state) {
    (void)state;
    skv_vocab *v = load_llama2();
    roundtrip_random(v, 12345, 3000);
    skv_vocab_free(v);
}

static void test_roundtrip_random_tok512(void **state) {
    (void)state;
    skv_vocab *v = load_tok512();
    roundtrip_random(v, 777, 1500);
    skv_vocab_free(v);
}

/* Edge strings that must round-trip exactly. */
static void test_roundtrip_edges(void **state) {
    (void)state;
    skv_vocab *v = load_llama2();
    static const struct {
        const char *s;
        size_t len;
    } cases[] = {
        {"", 0},
        {" ", 1},
        {"  ", 2},
        {"   leading", 10},
        {"trailing   ", 11},
        {"a\0b", 3},
        {"\0", 1},
        {"\x80", 1},
        {"\xff\xfe", 2},
        {SPACE_MARK, 3},
        {" " SPACE_MARK " ", 5},
        {"\xe2\x96", 2},
        {"\n", 1},
        {"\t \t", 3},
        {"\xc3\xa9t\xc3\xa9", 6},
        {"\xf0\x9f\x98\x80", 4},
        {"<s></s>", 7},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        for (int bos = 0; bos < 2; bos++) {
            int n, dlen;
            int32_t *t = encode(v, cases[c].s, cases[c].len, bos, &n);
            char *back = decode(v, t, n, !bos, &dlen);
            assert_int_equal(dlen, (int)cases[c].len);
            assert_memory_equal(back, cases[c].s, cases[c].len);
            free(back);
            free(t);
        }
    }
    /* a literal U+2581 is kept as its bytes, a space is the piece "▁" */
    int n;
    int32_t *t = encode(v, SPACE_MARK, 3, false, &n);
    int32_t want[] = {29871, 3 + 0xE2, 3 + 0x96, 3 + 0x81};
    assert_int_equal(n, 4);
    assert_memory_equal(t, want, sizeof want);
    free(t);
    skv_vocab_free(v);
}

/* ---------------------------------------------------------------------------------------- */
/* Tiny hand-built vocabularies in the llama2.c format */

typedef struct hand_piece {
    const char *s;
    float score;
} hand_piece;

static void put_i32(FILE *f, int32_t x) {
    assert_int_equal(fwrite(&x, 4, 1, f), 1);
}

static void put_token(FILE *f, float score, const char *s, int32_t len) {
    assert_int_equal(fwrite(&score, 4, 1, f), 1);
    put_i32(f, len);
    if (len > 0) assert_int_equal(fwrite(s, 1, (size_t)len, f), (size_t)len);
}

/* <unk>, <s>, </s>, the 256 byte tokens, then pieces (spaces written as ' ', as llama2.c does). */
static const char *write_hand_vocab(const hand_piece *p, int n) {
    const char *path = test_tmp_path(".bin");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put_i32(f, 16);
    put_token(f, 0, "<unk>", 5);
    put_token(f, 0, "\n<s>\n", 5);
    put_token(f, 0, "\n</s>\n", 6);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        put_token(f, 0, s, 6);
    }
    for (int i = 0; i < n; i++) put_token(f, p[i].score, p[i].s, (int32_t)strlen(p[i].s));
    fclose(f);
    return path;
}

static void expect_tokens(const skv_vocab *v, const char *text, size_t len, const int32_t *want,
                          int n_want) {
    int n;
    int32_t *t = encode(v, text, len, false, &n);
    if (n != n_want || memcmp(t, want, sizeof *t * (size_t)n) != 0) {
        fprintf(stderr, "'%s':", text);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", (int)t[i]);
        fprintf(stderr, "\n");
        fail_msg("'%s' encoded to %d tokens, expected %d", text, n, n_want);
    }
    int dlen;
    char *back = decode(v, t, n, true, &dlen);
    assert_int_equal(dlen, (int)len);
    assert_memory_equal(back, text, len);
    free(back);
    free(t);
}
#define EXPECT(v, text, ...)                                                                       \
    do {                                                                                           \
        const int32_t w_[] = {__VA_ARGS__};                                                        \
        expect_tokens(v, text, sizeof(text) - 1, w_, (int)(sizeof w_ / sizeof *w_));               \
    } while (0)
#define B(x) (3 + (x)) /* byte token */

static void test_hand_vocab(void **state) {
    (void)state;
    enum { SP = 259, A, Bb, C, AB, BC, ABC, AA, LT, GT, S, LTS, SPB, CA };
    static const hand_piece pieces[] = {
        {" ", -20}, {"a", -10}, {"b", -11}, {"c", -12}, {"ab", -1}, {"bc", -0.5f}, {"abc", -2},
        {"aa", -3}, {"<", -13}, {">", -14}, {"s", -15}, {"<s", -4}, {" b", -5},    {"ca", -0.2f},
    };
    const char *path = write_hand_vocab(pieces, sizeof pieces / sizeof *pieces);
    skv_err err = {0};
    assert_null(skv_vocab_load_llama2c(path, -5, &err)); /* negative: the caller's mistake */
    assert_int_equal(err.status, SKV_ERR_INVALID_ARG);
    skv_vocab *v = skv_vocab_load_llama2c(path, 0, &err); /* 0: read to the end */
    assert_non_null(v);
    assert_int_equal(skv_vocab_n_tokens(v), CA + 1);
    assert_string_equal(skv_vocab_piece(v, SPB), SPACE_MARK "b");

    /* ▁ a b c: bc (-0.5) beats ab (-1); then a+bc = abc (-2); ▁abc is no piece */
    EXPECT(v, "abc", SP, ABC);
    /* ▁ a b c a: ca (-0.2) first, then ab; bca and abca are no pieces */
    EXPECT(v, "abca", SP, AB, CA);
    /* ▁ a a a: two equal aa pairs, the leftmost merges */
    EXPECT(v, "aaa", SP, AA, A);
    /* ab (-1) before ▁b (-5), which still merges afterwards */
    EXPECT(v, "bab", SPB, AB);
    EXPECT(v, "cb", SP, C, Bb);
    /* "<s>" is BOS's text: control pieces never come out of a merge */
    EXPECT(v, "<s>", SP, LTS, GT);
    /* byte fallback: é is no piece, nor is the invalid byte, nor a literal U+2581 */
    EXPECT(v, "\xc3\xa9", SP, B(0xC3), B(0xA9));
    EXPECT(v, "a\xff", SP, A, B(0xFF));
    EXPECT(v, SPACE_MARK "a", SP, B(0xE2), B(0x96), B(0x81), A);
    /* spaces: "▁▁" is no piece */
    EXPECT(v, " ", SP, SP);
    EXPECT(v, " b", SP, SPB);
    skv_vocab_free(v);
    remove(path);

    /* No "▁" piece: a lone space falls back to the byte 0x20 (decodes to ' '), yet ▁a merges. */
    static const hand_piece pieces2[] = {{"a", -1}, {" a", -2}};
    path = write_hand_vocab(pieces2, 2);
    v = skv_vocab_load_llama2c(path, 261, &err);
    assert_non_null(v);
    EXPECT(v, "a", 260);
    EXPECT(v, "b", B(' '), B('b'));
    EXPECT(v, " a", B(' '), 260);
    EXPECT(v, "a a", 260, 260);
    skv_vocab_free(v);
    remove(path);
}

/* ---------------------------------------------------------------------------------------- */

static void test_tok512_bin_vs_gguf(void **state) {
    (void)state;
    skv_err err = {0};
    skv_vocab *a = load_tok512();
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    if (!g) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(g);
    skv_vocab *b = skv_vocab_from_gguf(g, &err);
    if (!b) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(b);
    skv_gguf_close(g); /* the vocabulary keeps its own copy */

    assert_int_equal(skv_vocab_n_tokens(a), 512);
    assert_int_equal(skv_vocab_n_tokens(b), 512);
    assert_int_equal(skv_vocab_bos(a), skv_vocab_bos(b));
    assert_int_equal(skv_vocab_eos(a), skv_vocab_eos(b));
    assert_int_equal(skv_vocab_unk(a), skv_vocab_unk(b));
    for (int i = 0; i < 512; i++) {
        assert_string_equal(skv_vocab_piece(a, i), skv_vocab_piece(b, i));
        assert_true(skv_vocab_score(a, i) == skv_vocab_score(b, i));
        assert_int_equal(skv_vocab_token_type(a, i), skv_vocab_token_type(b, i));
    }
    static const char *const texts[] = {
        "Once upon a time, there was a little girl named Lily.",
        "Lily's mom said, \"Lily, let's go to the park.\"",
        "",
        " ",
        "  two  spaces  ",
        "\n\nnewlines\n",
        "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xff",
    };
    for (size_t c = 0; c < sizeof texts / sizeof *texts; c++) {
        int na, nb;
        int32_t *ta = encode(a, texts[c], strlen(texts[c]), true, &na);
        int32_t *tb = encode(b, texts[c], strlen(texts[c]), true, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ta, tb, sizeof *ta * (size_t)na);
        free(ta);
        free(tb);
    }
    /* a known encoding: "Once" and " upon" are single pieces of tok512 */
    int n;
    int32_t *t = encode(b, "Once upon", 9, true, &n);
    assert_int_equal(n, 3);
    assert_string_equal(skv_vocab_piece(b, t[1]), SPACE_MARK "Once");
    assert_string_equal(skv_vocab_piece(b, t[2]), SPACE_MARK "upon");
    free(t);
    skv_vocab_free(a);
    skv_vocab_free(b);
}

/* A GGUF holding only tokenizer metadata, built with the writer; fields can be broken. */
typedef struct gguf_case {
    const char *model; /* NULL: key absent */
    bool no_tokens;
    int n_scores;       /* scores written */
    int32_t bad_type;   /* when nonzero, token 3's type */
    const char *token3; /* token 3's text */
    int64_t bos;        /* -1: key absent */
} gguf_case;

static skv_vocab *vocab_from_case(const gguf_case *c, skv_err *err) {
    const char *toks[5] = {"<unk>", "<s>", "</s>", c->token3, "a"};
    float scores[5] = {0, 0, 0, -1, -2};
    int32_t types[5] = {2, 3, 3, 1, 1};
    if (c->bad_type) types[3] = c->bad_type;
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_non_null(w);
    if (c->model) assert_int_equal(skv_gguf_writer_set_str(w, "tokenizer.ggml.model", c->model), 0);
    if (!c->no_tokens)
        assert_int_equal(skv_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 5), 0);
    assert_int_equal(skv_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SKV_GGUF_FLOAT32, scores,
                                             (uint64_t)c->n_scores),
                     0);
    assert_int_equal(
        skv_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SKV_GGUF_INT32, types, 5), 0);
    if (c->bos >= 0)
        assert_int_equal(
            skv_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos), 0);
    const char *path = test_tmp_path(".gguf");
    skv_err werr = {0};
    assert_int_equal(skv_gguf_writer_write(w, path, &werr), 0);
    skv_gguf_writer_free(w);
    skv_gguf *g = skv_gguf_open(path, &werr);
    assert_non_null(g);
    skv_vocab *v = skv_vocab_from_gguf(g, err);
    skv_gguf_close(g);
    remove(path);
    return v;
}

static void expect_gguf_error(gguf_case c, skv_status st, const char *needle) {
    skv_err err = {0};
    skv_vocab *v = vocab_from_case(&c, &err);
    assert_null(v);
    assert_int_equal(err.status, st);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_gguf_vocab_errors(void **state) {
    (void)state;
    const gguf_case ok = {"llama", false, 5, 0, SPACE_MARK "a", -1};
    skv_err err = {0};
    skv_vocab *v = vocab_from_case(&ok, &err);
    assert_non_null(v);
    int n;
    int32_t *t = encode(v, "a", 1, true, &n);
    assert_int_equal(n, 2);
    assert_int_equal(t[0], 1);
    assert_int_equal(t[1], 3);
    free(t);
    t = encode(v, "b", 1, false, &n); /* no byte tokens: <unk> */
    assert_int_equal(n, 2);
    assert_int_equal(t[1], 0);
    free(t);
    skv_vocab_free(v);

    gguf_case c = ok;
    c.model = "bert";
    expect_gguf_error(c, SKV_ERR_UNSUPPORTED, "'bert' is not supported");
    c.model = "gpt2"; /* byte-level BPE, but these pieces lack the byte alphabet and merges */
    expect_gguf_error(c, SKV_ERR_FORMAT, "byte");
    c = ok;
    c.model = NULL;
    expect_gguf_error(c, SKV_ERR_FORMAT, "tokenizer.ggml.model");
    c = ok;
    c.no_tokens = true;
    expect_gguf_error(c, SKV_ERR_FORMAT, "tokenizer.ggml.tokens");
    c = ok;
    c.n_scores = 4;
    expect_gguf_error(c, SKV_ERR_FORMAT, "tokenizer.ggml.scores");
    c = ok;
    c.bad_type = 9;
    expect_gguf_error(c, SKV_ERR_FORMAT, "token type");
    c = ok;
    c.bad_type = SKV_TOKEN_BYTE;
    c.token3 = "<0xZZ>";
    expect_gguf_error(c, SKV_ERR_FORMAT, "<0xXX>");
    c = ok;
    c.bos = 99;
    expect_gguf_error(c, SKV_ERR_FORMAT, "bos 99");
}

/* ---------------------------------------------------------------------------------------- */

static const char *write_bytes(const void *data, size_t n) {
    const char *path = test_tmp_path(".bin");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

static void expect_bin_error(const void *data, size_t n, int n_vocab, skv_status st,
                             const char *needle) {
    const char *path = write_bytes(data, n);
    skv_err err = {0};
    skv_vocab *v = skv_vocab_load_llama2c(path, n_vocab, &err);
    remove(path);
    assert_null(v);
    assert_int_equal(err.status, st);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_malformed_llama2c(void **state) {
    (void)state;
    size_t size;
    unsigned char *good = test_read_file(test_model_path("stories260K/tok512.bin"), &size);
    assert_non_null(good);
    unsigned char *d = malloc(size + 16);
    assert_non_null(d);

    skv_err err = {0};
    assert_null(skv_vocab_load_llama2c("/nonexistent/tokenizer.bin", 512, &err));
    assert_int_equal(err.status, SKV_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/tokenizer.bin"));

    expect_bin_error(good, 2, 512, SKV_ERR_FORMAT, "too short");
    expect_bin_error(good, 0, 0, SKV_ERR_FORMAT, "too short");
    /* n_vocab mismatches, both ways */
    expect_bin_error(good, size, 513, SKV_ERR_FORMAT, "holds 512 tokens");
    expect_bin_error(good, size, 511, SKV_ERR_FORMAT, "more than the 511 tokens");
    /* cut inside a token's header, and inside its bytes */
    expect_bin_error(good, size - 3 - 4, 512, SKV_ERR_FORMAT,
                     "ends inside the header of token 511");
    expect_bin_error(good, size - 1, 512, SKV_ERR_FORMAT, "extends past the end");
    expect_bin_error(good, size - 1, 0, SKV_ERR_FORMAT, "extends past the end");
    /* token 0 ("<unk>") at offset 4: score, then length */
    int32_t neg = -5, huge = 1 << 30, max_len = -1;
    memcpy(d, good, size);
    memcpy(d + 8, &neg, 4);
    expect_bin_error(d, size, 512, SKV_ERR_FORMAT, "token 0 has a negative length");
    memcpy(d, good, size);
    memcpy(d + 8, &huge, 4);
    expect_bin_error(d, size, 512, SKV_ERR_FORMAT, "max_token_length");
    memcpy(d, good, size);
    memcpy(d, &max_len, 4);
    expect_bin_error(d, size, 512, SKV_ERR_FORMAT, "max_token_length");
    memcpy(d, good, size);
    float nan = NAN;
    memcpy(d + 4, &nan, 4);
    expect_bin_error(d, size, 512, SKV_ERR_FORMAT, "NaN");
    /* too few tokens for <unk>, <s>, </s> */
    expect_bin_error(good, 4 + 8 + 5, 0, SKV_ERR_FORMAT, "holds 1 tokens");
    /* the file itself is fine with n_vocab 0 */
    const char *path = write_bytes(good, size);
    skv_vocab *v = skv_vocab_load_llama2c(path, 0, &err);
    assert_non_null(v);
    assert_int_equal(skv_vocab_n_tokens(v), 512);
    skv_vocab_free(v);
    remove(path);
    free(d);
    free(good);
}

/* Randomly corrupted tokenizer files load or fail with a message, never crash (ASan runs). */
static void test_corrupted_llama2c(void **state) {
    (void)state;
    size_t size;
    unsigned char *good = test_read_file(test_model_path("stories260K/tok512.bin"), &size);
    assert_non_null(good);
    unsigned char *d = malloc(size);
    assert_non_null(d);
    rng_state = 4242;
    int loaded = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(d, good, size);
        size_t n = size;
        int flips = 1 + (int)(rnd() % 4);
        for (int f = 0; f < flips; f++) d[rnd() % size] = (unsigned char)rnd();
        if (rnd() % 3 == 0) n = rnd() % size;
        const char *path = write_bytes(d, n);
        skv_err err = {0};
        skv_vocab *v = skv_vocab_load_llama2c(path, (rnd() & 1) ? 512 : 0, &err);
        remove(path);
        if (v) {
            loaded++;
            int nt;
            int32_t *t = encode(v, "Once upon a time \xff", 18, true, &nt);
            int dlen;
            char *back = decode(v, t, nt, false, &dlen);
            free(back);
            free(t);
            skv_vocab_free(v);
        } else {
            assert_true(err.status == SKV_ERR_FORMAT);
            assert_true(strlen(err.msg) > 10);
        }
    }
    print_message("%d of 300 corrupted files still loaded\n", loaded);
    free(d);
    free(good);
}

static void test_buffer_contracts(void **state) {
    (void)state;
    skv_vocab *v = load_llama2();
    const char *text = "I believe the meaning of life is";
    size_t len = strlen(text);
    int32_t t[16];
    for (int i = 0; i < 16; i++) t[i] = -7;
    assert_int_equal(skv_tokenize(v, text, len, true, NULL, 0), -8);
    assert_int_equal(skv_tokenize(v, text, len, true, t, 7), -8);
    for (int i = 0; i < 16; i++) assert_int_equal(t[i], -7); /* nothing written */
    assert_int_equal(skv_tokenize(v, text, len, true, t, 8), 8);
    assert_int_equal(t[0], 1);
    assert_int_equal(t[7], 338);
    assert_int_equal(t[8], -7);
    assert_int_equal(skv_tokenize(v, text, len, false, t, 16), 7);
    assert_int_equal(skv_tokenize(v, "", 0, true, t, 0), -1);
    assert_int_equal(skv_tokenize(v, "", 0, false, NULL, 0), 0);
    assert_int_equal(skv_tokenize(v, NULL, 0, true, t, 16), 1);
    /* invalid arguments */
    assert_int_equal(skv_tokenize(NULL, text, len, true, t, 16), INT_MIN);
    assert_int_equal(skv_tokenize(v, NULL, 3, true, t, 16), INT_MIN);
    assert_int_equal(skv_tokenize(v, text, len, true, NULL, 16), INT_MIN);
    assert_int_equal(skv_tokenize(v, text, len, true, t, -1), INT_MIN);

    assert_int_equal(skv_tokenize(v, text, len, true, t, 8), 8);
    char buf[64];
    memset(buf, '#', sizeof buf);
    assert_int_equal(skv_detokenize(v, t, 8, false, NULL, 0), -(int)len);
    assert_int_equal(skv_detokenize(v, t, 8, false, buf, (int)len - 1), -(int)len);
    assert_int_equal(buf[0], '#');
    assert_int_equal(skv_detokenize(v, t, 8, false, buf, (int)len), (int)len);
    assert_memory_equal(buf, text, len);
    assert_int_equal(buf[len], '#');
    assert_int_equal(skv_detokenize(v, t, 0, false, NULL, 0), 0);

    /* "▁believe" after "▁I": 8 bytes with its space */
    assert_int_equal(skv_token_to_piece(v, t[1], t[2], NULL, 0), -8);
    assert_int_equal(skv_token_to_piece(v, t[1], t[2], buf, 7), -8);
    assert_int_equal(skv_token_to_piece(v, t[1], t[2], buf, 8), 8);
    assert_memory_equal(buf, " believe", 8);
    skv_vocab_free(v);
}

/* Speed on ~100 KB of text (printed, not asserted), checked by a round trip. */
static void test_long_text(void **state) {
    (void)state;
    skv_vocab *v = load_llama2();
    size_t cap = 100 * 1024;
    char *text = malloc(cap + 64);
    assert_non_null(text);
    size_t len = 0;
    rng_state = 99;
    static const char *const words[] = {
        "the",        "little", "girl",        "named",        "Lily",
        "loved",      "to",     "play",        "outside",      "in",
        "park",       "One",    "day",         "she",          "saw",
        "a",          "big",    "red",         "ball",         "wanted",
        "with",       "it",     "but",         "was",          "too",
        "high",       "mom",    "said",        "let's",        "go",
        "relativity", "theory", "caf\xc3\xa9", "na\xc3\xafve", "\xe4\xb8\xad\xe6\x96\x87",
        "12345",      "(x)",    "don't"};
    while (len < cap) {
        const char *w = words[rnd() % (sizeof words / sizeof *words)];
        size_t k = strlen(w);
        memcpy(text + len, w, k);
        len += k;
        uint64_t r = rnd() % 20;
        text[len++] = r == 0 ? '\n' : r == 1 ? ',' : r == 2 ? '.' : ' ';
    }
    int32_t *t = malloc(sizeof *t * (len + 1));
    assert_non_null(t);
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    int n = skv_tokenize(v, text, len, true, t, (int)len + 1);
    double t1 = (double)clock() / CLOCKS_PER_SEC;
    print_message("encoded %zu bytes into %d tokens in %.1f ms of CPU time\n", len, n,
                  (t1 - t0) * 1e3);
    assert_true(n > (int)(len / 10));
    int dlen;
    char *back = decode(v, t, n, false, &dlen);
    assert_int_equal(dlen, (int)len);
    assert_memory_equal(back, text, len);
    free(back);
    free(t);
    free(text);
    skv_vocab_free(v);
}

/* The CLI: JSON output with the 32000 vocabulary, plain output with the default model, and the
 * exit status of bad usage. */
static void test_cli_tokenize(void **state) {
    (void)state;
    char *out;
    const char *llama2 = test_fixture_path("llama2-tokenizer/tokenizer.bin"); /* optional */
    if (llama2) {
        out =
            test_cli_expect(0, "tokenize --json --vocab-llama2c %s 32000 -p 'Hello world'", llama2);
        assert_string_equal(out, "{\"tokens\":[1,15043,3186],\"pieces\":[\"<s>\",\"" SPACE_MARK
                                 "Hello\",\"" SPACE_MARK "world\"]}\n");
        free(out);
    }

    out = test_cli_expect(0, "tokenize -m %s --no-bos -p 'Once upon'",
                          test_model_path("stories260K/stories260K.gguf"));
    assert_string_equal(out, "403\t\"" SPACE_MARK "Once\"\n407\t\"" SPACE_MARK "upon\"\n");
    free(out);

    out = test_cli_expect(2, "tokenize -m %s 2>/dev/null", /* no text */
                          test_model_path("stories260K/stories260K.gguf"));
    free(out);
    /* a written <s> parsed as BOS after the added one: said, and not with --no-bos */
    out = test_cli_expect(0, "tokenize -m %s --special -p '<s>Once' 2>&1",
                          test_model_path("stories260K/stories260K.gguf"));
    assert_non_null(strstr(out, "two BOS tokens"));
    free(out);
    out = test_cli_expect(0, "tokenize -m %s --special --no-bos -p '<s>Once' 2>&1",
                          test_model_path("stories260K/stories260K.gguf"));
    assert_null(strstr(out, "BOS"));
    free(out);
    /* a vocabulary that does not open is bad input (2), as a model that does not load */
    out = test_cli_expect(2, "tokenize --vocab-llama2c /nonexistent.bin 0 -p x 2>&1");
    assert_non_null(strstr(out, "sparsekv tokenize: cannot open tokenizer file"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expected_json),
        cmocka_unit_test(test_llama2_vocab_contents),
        cmocka_unit_test(test_roundtrip_random_llama2),
        cmocka_unit_test(test_roundtrip_random_tok512),
        cmocka_unit_test(test_roundtrip_edges),
        cmocka_unit_test(test_hand_vocab),
        cmocka_unit_test(test_tok512_bin_vs_gguf),
        cmocka_unit_test(test_gguf_vocab_errors),
        cmocka_unit_test(test_malformed_llama2c),
        cmocka_unit_test(test_corrupted_llama2c),
        cmocka_unit_test(test_buffer_contracts),
        cmocka_unit_test(test_long_text),
        cmocka_unit_test(test_cli_tokenize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
