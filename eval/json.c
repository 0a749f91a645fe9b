/* json.c — a small recursive-descent JSON reader and the two writers eval needs.
 * Input is hostile (user data files): every read is bounds-checked, depth is limited, and
 * errors name the byte offset. */
#include "eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct jparser {
    const char *s;
    size_t len, pos;
    skv_err *err;
    bool failed;
} jparser;

static bool jfail(jparser *p, const char *what) {
    if (!p->failed) skv_err_set(p->err, SKV_ERR_FORMAT, "at byte %zu: %s", p->pos + 1, what);
    p->failed = true;
    return false;
}

static void jskip_ws(jparser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static void jvalue_clear(skv_json *v) {
    if (!v) return;
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        jvalue_clear(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

void skv_json_free(skv_json *v) {
    jvalue_clear(v);
    free(v);
}

/* growable byte buffer for string contents */
typedef struct jbuf {
    char *b;
    size_t n, cap;
} jbuf;

static bool jbuf_put(jbuf *b, const char *src, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->n + n + 1) cap *= 2;
        char *nb = realloc(b->b, cap);
        if (!nb) return false;
        b->b = nb;
        b->cap = cap;
    }
    memcpy(b->b + b->n, src, n);
    b->n += n;
    b->b[b->n] = 0;
    return true;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool jparse_hex4(jparser *p, unsigned *out) {
    if (p->len - p->pos < 4) return jfail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + (size_t)i]);
        if (h < 0) return jfail(p, "\\u must be followed by 4 hex digits");
        v = v * 16 + (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return true;
}

static size_t utf8_encode(unsigned cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* p->pos is at the opening quote */
static bool jparse_string(jparser *p, char **out, size_t *out_len) {
    p->pos++;
    jbuf b = {0};
    if (!jbuf_put(&b, "", 0)) return jfail(p, "out of memory");
    for (;;) {
        if (p->pos >= p->len) {
            free(b.b);
            return jfail(p, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            free(b.b);
            return jfail(p, "control character inside a string (escape it)");
        }
        if (c != '\\') {
            size_t start = p->pos;
            while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' &&
                   (unsigned char)p->s[p->pos] >= 0x20)
                p->pos++;
            if (!jbuf_put(&b, p->s + start, p->pos - start)) {
                free(b.b);
                return jfail(p, "out of memory");
            }
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) {
            free(b.b);
            return jfail(p, "unterminated escape");
        }
        char e = p->s[p->pos++];
        char tmp[4];
        size_t tn = 1;
        switch (e) {
        case '"':
            tmp[0] = '"';
            break;
        case '\\':
            tmp[0] = '\\';
            break;
        case '/':
            tmp[0] = '/';
            break;
        case 'b':
            tmp[0] = '\b';
            break;
        case 'f':
            tmp[0] = '\f';
            break;
        case 'n':
            tmp[0] = '\n';
            break;
        case 'r':
            tmp[0] = '\r';
            break;
        case 't':
            tmp[0] = '\t';
            break;
        case 'u': {
            unsigned cp;
            if (!jparse_hex4(p, &cp)) {
                free(b.b);
                return false;
            }
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                free(b.b);
                return jfail(p, "unpaired low surrogate in \\u escape");
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(b.b);
                    return jfail(p, "high surrogate \\u escape not followed by a low one");
                }
                p->pos += 2;
                if (!jparse_hex4(p, &lo)) {
                    free(b.b);
                    return false;
                }
                if (lo < 0xdc00 || lo > 0xdfff) {
                    free(b.b);
                    return jfail(p, "high surrogate \\u escape not followed by a low one");
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            tn = utf8_encode(cp, tmp);
            break;
        }
        default:
            free(b.b);
            return jfail(p, "unknown escape in string");
        }
        if (!jbuf_put(&b, tmp, tn)) {
            free(b.b);
            return jfail(p, "out of memory");
        }
    }
    *out = b.b;
    *out_len = b.n;
    return true;
}

static bool jparse_number(jparser *p, double *out) {
    size_t start = p->pos;
    const char *s = p->s;
    size_t i = p->pos;
    if (i < p->len && s[i] == '-') i++;
    if (i >= p->len) return jfail(p, "bad number");
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        return jfail(p, "bad number");
    }
    if (i < p->len && s[i] == '.') {
        i++;
        if (i >= p->len || s[i] < '0' || s[i] > '9')
            return jfail(p, "bad number (digit after '.')");
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->len || s[i] < '0' || s[i] > '9') return jfail(p, "bad number (exponent)");
        while (i < p->len && s[i] >= '0' && s[i] <= '9') i++;
    }
    size_t n = i - start;
    char small[64];
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) return jfail(p, "out of memory");
    memcpy(buf, s + start, n);
    buf[n] = 0;
    *out = strtod(buf, NULL); /* overflow gives +-inf: that is how we write infinities */
    if (buf != small) free(buf);
    p->pos = i;
    return true;
}

static bool jparse_value(jparser *p, skv_json *v, int depth);

static bool jpush(jparser *p, skv_json *v, int *cap) {
    if (v->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        skv_json *ni = realloc(v->items, (size_t)nc * sizeof *ni);
        if (!ni) return jfail(p, "out of memory");
        v->items = ni;
        if (v->type == SKV_JSON_OBJECT) {
            char **nk = realloc(v->keys, (size_t)nc * sizeof *nk);
            if (!nk) return jfail(p, "out of memory");
            v->keys = nk;
        }
        *cap = nc;
    }
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    if (v->type == SKV_JSON_OBJECT) v->keys[v->n] = NULL;
    v->n++;
    return true;
}

static bool jparse_value(jparser *p, skv_json *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > JSON_MAX_DEPTH) return jfail(p, "nesting deeper than 64 levels");
    jskip_ws(p);
    if (p->pos >= p->len) return jfail(p, "unexpected end of input (a value was expected)");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        bool obj = c == '{';
        v->type = obj ? SKV_JSON_OBJECT : SKV_JSON_ARRAY;
        char close = obj ? '}' : ']';
        int cap = 0;
        p->pos++;
        jskip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return true;
        }
        for (;;) {
            if (!jpush(p, v, &cap)) return false;
            if (obj) {
                jskip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != '"')
                    return jfail(p, "expected a member name in double quotes");
                size_t kl;
                if (!jparse_string(p, &v->keys[v->n - 1], &kl)) return false;
                jskip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':')
                    return jfail(p, "expected ':' after a member name");
                p->pos++;
            }
            if (!jparse_value(p, &v->items[v->n - 1], depth + 1)) return false;
            jskip_ws(p);
            if (p->pos >= p->len)
                return jfail(p, obj ? "unterminated object" : "unterminated array");
            if (p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->s[p->pos] == close) {
                p->pos++;
                return true;
            }
            return jfail(p, obj ? "expected ',' or '}' in object" : "expected ',' or ']' in array");
        }
    }
    if (c == '"') {
        v->type = SKV_JSON_STRING;
        return jparse_string(p, &v->str, &v->str_len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = SKV_JSON_NUMBER;
        return jparse_number(p, &v->number);
    }
    static const struct {
        const char *word;
        skv_json_type type;
        bool b;
    } words[] = {{"true", SKV_JSON_BOOL, true},
                 {"false", SKV_JSON_BOOL, false},
                 {"null", SKV_JSON_NULL, false}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t wl = strlen(words[i].word);
        if (p->len - p->pos >= wl && !memcmp(p->s + p->pos, words[i].word, wl)) {
            p->pos += wl;
            v->type = words[i].type;
            v->boolean = words[i].b;
            return true;
        }
    }
    return jfail(p, "unexpected character (not the start of a JSON value)");
}

skv_json *skv_json_parse(const char *text, size_t len, skv_err *err) {
    if (!text) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "no JSON text given");
        return NULL;
    }
    skv_json *v = calloc(1, sizeof *v);
    if (!v) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory parsing JSON");
        return NULL;
    }
    jparser p = {.s = text, .len = len, .err = err};
    if (!jparse_value(&p, v, 0)) {
        skv_json_free(v);
        return NULL;
    }
    jskip_ws(&p);
    if (p.pos != p.len) {
        jfail(&p, "unexpected text after the JSON value");
        skv_json_free(v);
        return NULL;
    }
    return v;
}

const skv_json *skv_json_get(const skv_json *obj, const char *key) {
    if (!obj || obj->type != SKV_JSON_OBJECT) return NULL;
    for (int i = obj->n - 1; i >= 0; i--)
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

bool skv_json_get_string(const skv_json *obj, const char *key, const char **out) {
    const skv_json *v = skv_json_get(obj, key);
    if (!v || v->type != SKV_JSON_STRING) return false;
    *out = v->str;
    return true;
}

bool skv_json_get_number(const skv_json *obj, const char *key, double *out) {
    const skv_json *v = skv_json_get(obj, key);
    if (!v) return false;
    if (v->type == SKV_JSON_NULL) { /* NaN is written as null */
        *out = NAN;
        return true;
    }
    if (v->type != SKV_JSON_NUMBER) return false;
    *out = v->number;
    return true;
}

bool skv_json_get_int(const skv_json *obj, const char *key, long *out) {
    const skv_json *v = skv_json_get(obj, key);
    if (!v || v->type != SKV_JSON_NUMBER) return false;
    double d = v->number;
    if (!(d >= -9.0e15 && d <= 9.0e15) || d != floor(d)) return false;
    *out = (long)d;
    return true;
}

void skv_json_write_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c == '\r') {
            fputs("\\r", f);
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
        } else if (c < 0x80) {
            fputc(c, f);
        } else {
            /* a whole valid UTF-8 sequence is copied; a stray byte becomes \u00XX */
            int n = (c >= 0xc2 && c < 0xe0)   ? 2
                    : (c >= 0xe0 && c < 0xf0) ? 3
                    : (c >= 0xf0 && c < 0xf5) ? 4
                                              : 0;
            bool ok = n > 0 && i + (size_t)n <= len;
            for (int k = 1; ok && k < n; k++) ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
            if (ok && n == 3) { /* no overlongs, no surrogates */
                unsigned char c1 = (unsigned char)s[i + 1];
                ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
            }
            if (ok && n == 4) {
                unsigned char c1 = (unsigned char)s[i + 1];
                ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
            }
            if (ok) {
                fwrite(s + i, 1, (size_t)n, f);
                i += (size_t)n - 1;
            } else {
                fprintf(f, "\\u%04x", c);
            }
        }
    }
    fputc('"', f);
}

void skv_json_write_double(FILE *f, double x) {
    if (isnan(x))
        fputs("null", f);
    else if (isinf(x))
        fputs(x > 0 ? "1e999" : "-1e999", f);
    else {
        /* the shortest of %.15g..%.17g that reads back to the same bits: 0.1, not
         * 0.10000000000000001 */
        char buf[40];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, x);
            if (strtod(buf, NULL) == x) break;
        }
        fputs(buf, f);
    }
}
