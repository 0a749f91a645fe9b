/* gguf.c — GGUF v2/v3 reader and v3 writer.
 *
 * The reader treats the file as hostile: every count and length is compared against the bytes
 * that remain before anything is allocated for it, every sum and product is overflow-checked,
 * array nesting is depth-limited, and tensors are checked against each other and the file end.
 * All parsing happens in skv_gguf_open*, so the accessors cannot fail on an opened file.
 * Multi-byte values are little-endian (the GGUF convention; the host is assumed to be too). */
#include "gguf.h"

#include "kernels/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC     "GGUF"
#define GGUF_MAX_DEPTH 8 /* nested arrays deeper than this are rejected (stack safety) */

/* Smallest encodings, used to reject counts that the remaining bytes cannot possibly hold. */
#define MIN_KV_BYTES     13 /* key length (8) + value type (4) + a 1-byte value */
#define MIN_TENSOR_BYTES 32 /* name length (8) + n_dims (4) + one dim (8) + type (4) + offset */

/* One parsed value. Numeric arrays point into the file; strings are copied into a NUL-terminated
 * pool (offsets, since the pool grows while parsing). */
typedef struct gval {
    uint32_t type;
    uint32_t elem_type; /* arrays */
    uint64_t n;         /* arrays: element count; strings: byte length */
    uint64_t start;     /* file offset of the payload (after the type tag) */
    uint64_t nbytes;    /* payload bytes in the file */
    union {
        uint64_t bits;      /* scalars, raw little-endian bits zero-extended */
        uint64_t str_off;   /* strings: offset into the pool */
        struct gval *items; /* arrays of strings or arrays: n parsed elements */
        const uint8_t *raw; /* arrays of fixed-size scalars: n elements in the file */
    } u;
} gval;

typedef struct gkv {
    uint64_t key_off; /* into the pool */
    uint64_t key_len;
    gval v;
} gkv;

struct skv_gguf {
    dev_t dev; /* identity of the mapped file (0/0 for a memory buffer): writers never */
    ino_t ino; /* write over a file they read from */
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when we own an mmap */
    size_t map_size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start;
    int64_t n_kv;
    gkv *kv;
    int64_t *kv_sorted; /* indices sorted by key, for lookup and duplicate detection */
    int64_t n_tensors;
    skv_gguf_tensor *tensors;
    int64_t *t_sorted; /* indices sorted by name */
    char *pool;
    uint64_t pool_len, pool_cap;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static size_t vtype_size(uint32_t t) {
    switch (t) {
    case SKV_GGUF_UINT8:
    case SKV_GGUF_INT8:
    case SKV_GGUF_BOOL:
        return 1;
    case SKV_GGUF_UINT16:
    case SKV_GGUF_INT16:
        return 2;
    case SKV_GGUF_UINT32:
    case SKV_GGUF_INT32:
    case SKV_GGUF_FLOAT32:
        return 4;
    case SKV_GGUF_UINT64:
    case SKV_GGUF_INT64:
    case SKV_GGUF_FLOAT64:
        return 8;
    default:
        return 0; /* string, array, invalid */
    }
}

const char *skv_gguf_vtype_name(uint32_t t) {
    static const char *names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return t < SKV_GGUF_VTYPE_COUNT ? names[t] : "invalid";
}

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Copies a name into buf for an error message: at most ~80 bytes, unprintables as '?'. */
static const char *printable(char *buf, size_t cap, const char *s, uint64_t len) {
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        if (i == 79 && len > 80) {
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
    }
    buf[n] = 0;
    return buf;
}

/* Scalar value -> int64 / double, by type. */
static bool scalar_int(uint32_t type, uint64_t bits, int64_t *out) {
    switch (type) {
    case SKV_GGUF_UINT8:
        *out = (uint8_t)bits;
        return true;
    case SKV_GGUF_INT8:
        *out = (int8_t)(uint8_t)bits;
        return true;
    case SKV_GGUF_UINT16:
        *out = (uint16_t)bits;
        return true;
    case SKV_GGUF_INT16:
        *out = (int16_t)(uint16_t)bits;
        return true;
    case SKV_GGUF_UINT32:
        *out = (uint32_t)bits;
        return true;
    case SKV_GGUF_INT32:
        *out = (int32_t)(uint32_t)bits;
        return true;
    case SKV_GGUF_BOOL:
        *out = bits != 0;
        return true;
    case SKV_GGUF_UINT64:
        if (bits > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)bits;
        return true;
    case SKV_GGUF_INT64:
        *out = (int64_t)bits;
        return true;
    default:
        return false;
    }
}

static bool scalar_float(uint32_t type, uint64_t bits, double *out) {
    if (type == SKV_GGUF_FLOAT32) {
        float f;
        uint32_t b = (uint32_t)bits;
        memcpy(&f, &b, 4);
        *out = f;
        return true;
    }
    if (type == SKV_GGUF_FLOAT64) {
        memcpy(out, &bits, 8);
        return true;
    }
    if (type == SKV_GGUF_BOOL) return false;
    if (type == SKV_GGUF_UINT64) {
        *out = (double)bits;
        return true;
    }
    int64_t i;
    if (!scalar_int(type, bits, &i)) return false;
    *out = (double)i;
    return true;
}

static uint64_t load_bits(const uint8_t *p, size_t sz) {
    uint64_t v = 0;
    memcpy(&v, p, sz); /* little-endian host: low bytes first */
    return v;
}

/* ---- parser ------------------------------------------------------------------------------- */

typedef struct parser {
    skv_gguf *g;
    uint64_t pos;
    skv_err *err;
    char what[160]; /* "key 'x'" or "tensor 'y'": prefix of messages */
} parser;

static uint64_t remaining(const parser *p) {
    return p->g->size - p->pos;
}

static bool fail(parser *p, skv_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(parser *p, skv_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    skv_err_set(p->err, st, "GGUF: %s%s%s", p->what, p->what[0] ? ": " : "", msg);
    return false;
}

/* Makes sure n more bytes exist; 'item' names what is being read. */
static bool need(parser *p, uint64_t n, const char *item) {
    if (remaining(p) < n)
        return fail(p, SKV_ERR_FORMAT,
                    "%s at offset %llu extends past end of file (file truncated? %llu bytes)", item,
                    (unsigned long long)p->pos, (unsigned long long)p->g->size);
    return true;
}

static bool get_u32(parser *p, uint32_t *v, const char *item) {
    if (!need(p, 4, item)) return false;
    *v = rd_u32(p->g->base + p->pos);
    p->pos += 4;
    return true;
}

static bool get_u64(parser *p, uint64_t *v, const char *item) {
    if (!need(p, 8, item)) return false;
    *v = rd_u64(p->g->base + p->pos);
    p->pos += 8;
    return true;
}

/* Reads a length-prefixed string, copies it into the pool (NUL-terminated). */
static bool get_str(parser *p, uint64_t *off, uint64_t *len, const char *item) {
    char lbl[64];
    snprintf(lbl, sizeof lbl, "%s length", item);
    uint64_t n;
    if (!get_u64(p, &n, lbl)) return false;
    if (n > remaining(p))
        return fail(p, SKV_ERR_FORMAT,
                    "%s of %llu bytes at offset %llu extends past end of file (%llu bytes left)",
                    item, (unsigned long long)n, (unsigned long long)p->pos,
                    (unsigned long long)remaining(p));
    skv_gguf *g = p->g;
    if (g->pool_len + n + 1 > g->pool_cap) {
        /* The pool never exceeds the file size plus one NUL per string (strings have 8-byte
         * length prefixes), so this doubling is bounded by the input. */
        uint64_t cap = g->pool_cap ? g->pool_cap : 4096;
        while (cap < g->pool_len + n + 1) cap *= 2;
        char *np = realloc(g->pool, cap);
        if (!np) return fail(p, SKV_ERR_NOMEM, "out of memory reading %s", item);
        g->pool = np;
        g->pool_cap = cap;
    }
    memcpy(g->pool + g->pool_len, g->base + p->pos, n);
    g->pool[g->pool_len + n] = 0;
    *off = g->pool_len;
    *len = n;
    g->pool_len += n + 1;
    p->pos += n;
    return true;
}

static void gval_free(gval *v) {
    if (v->type == SKV_GGUF_ARRAY &&
        (v->elem_type == SKV_GGUF_STRING || v->elem_type == SKV_GGUF_ARRAY) && v->u.items) {
        for (uint64_t j = 0; j < v->n; j++) gval_free(&v->u.items[j]);
        free(v->u.items);
        v->u.items = NULL;
    }
}

static bool parse_value(parser *p, uint32_t type, gval *v, int depth);

static bool parse_array(parser *p, gval *v, int depth) {
    if (depth > GGUF_MAX_DEPTH)
        return fail(p, SKV_ERR_FORMAT, "arrays nested deeper than %d levels", GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    if (!get_u32(p, &et, "array element type")) return false;
    if (et >= SKV_GGUF_VTYPE_COUNT)
        return fail(p, SKV_ERR_FORMAT, "array element type %u is invalid", et);
    if (!get_u64(p, &n, "array length")) return false;
    uint64_t min = vtype_size(et);
    if (et == SKV_GGUF_STRING) min = 8;
    if (et == SKV_GGUF_ARRAY) min = 12;
    /* Reject before allocating: n elements need at least n * min bytes. */
    if (n > remaining(p) / min)
        return fail(p, SKV_ERR_FORMAT,
                    "array length %llu of %s at offset %llu exceeds the %llu bytes left in the "
                    "file",
                    (unsigned long long)n, skv_gguf_vtype_name(et), (unsigned long long)p->pos,
                    (unsigned long long)remaining(p));
    v->elem_type = et;
    v->n = n;
    if (et != SKV_GGUF_STRING && et != SKV_GGUF_ARRAY) {
        const uint8_t *raw = p->g->base + p->pos;
        if (et == SKV_GGUF_BOOL)
            for (uint64_t j = 0; j < n; j++)
                if (raw[j] > 1)
                    return fail(p, SKV_ERR_FORMAT,
                                "bool array element %llu has value %u (not 0 or 1)",
                                (unsigned long long)j, raw[j]);
        v->u.raw = raw;
        p->pos += n * min;
        return true;
    }
    v->u.items = calloc(n ? n : 1, sizeof(gval));
    if (!v->u.items)
        return fail(p, SKV_ERR_NOMEM, "out of memory for an array of %llu", (unsigned long long)n);
    for (uint64_t j = 0; j < n; j++) {
        if (!parse_value(p, et, &v->u.items[j], depth)) {
            /* Only the first j+1 items may hold allocations; the rest are zeroed. */
            v->n = j + 1;
            return false;
        }
    }
    return true;
}

static bool parse_value(parser *p, uint32_t type, gval *v, int depth) {
    memset(v, 0, sizeof *v);
    v->type = type;
    v->start = p->pos;
    bool ok;
    if (type == SKV_GGUF_STRING) {
        ok = get_str(p, &v->u.str_off, &v->n, "string");
    } else if (type == SKV_GGUF_ARRAY) {
        ok = parse_array(p, v, depth + 1);
    } else {
        size_t sz = vtype_size(type);
        if (sz == 0) return fail(p, SKV_ERR_FORMAT, "value type %u is invalid", type);
        ok = need(p, sz, skv_gguf_vtype_name(type));
        if (ok) {
            v->u.bits = load_bits(p->g->base + p->pos, sz);
            p->pos += sz;
            if (type == SKV_GGUF_BOOL && v->u.bits > 1)
                ok = fail(p, SKV_ERR_FORMAT, "bool value %u is not 0 or 1", (unsigned)v->u.bits);
        }
    }
    v->nbytes = p->pos - v->start;
    return ok;
}

static int cmp_bytes(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    int c = memcmp(a, b, SKV_MIN(alen, blen));
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

/* Sort records: the compared bytes travel with the index, so qsort needs no context. */
typedef struct sort_rec {
    const char *s;
    uint64_t len; /* name length; or the tensor offset when sorting by offset */
    int64_t idx;
} sort_rec;

static int cmp_rec_name(const void *a, const void *b) {
    const sort_rec *x = a, *y = b;
    int c = cmp_bytes(x->s, x->len, y->s, y->len);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_rec_off(const void *a, const void *b) {
    const sort_rec *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Sorts recs and stores the resulting index order in idx. */
static void sort_into(sort_rec *recs, int64_t *idx, int64_t n,
                      int (*cmp)(const void *, const void *)) {
    qsort(recs, (size_t)n, sizeof *recs, cmp);
    for (int64_t i = 0; i < n; i++) idx[i] = recs[i].idx;
}

static bool parse_kvs(parser *p, uint64_t n_kv) {
    skv_gguf *g = p->g;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof(gkv));
    if (!g->kv)
        return fail(p, SKV_ERR_NOMEM, "out of memory for %llu keys", (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gkv *kv = &g->kv[i];
        snprintf(p->what, sizeof p->what, "key #%llu", (unsigned long long)i);
        if (!get_str(p, &kv->key_off, &kv->key_len, "key name")) return false;
        g->n_kv = (int64_t)i + 1; /* from here on kv[i] is freed by close */
        char nm[100];
        printable(nm, sizeof nm, g->pool + kv->key_off, kv->key_len);
        if (memchr(g->pool + kv->key_off, 0, kv->key_len))
            return fail(p, SKV_ERR_FORMAT, "key name '%s' contains a NUL byte", nm);
        snprintf(p->what, sizeof p->what, "key '%s'", nm);
        uint32_t type;
        if (!get_u32(p, &type, "value type")) return false;
        if (type >= SKV_GGUF_VTYPE_COUNT)
            return fail(p, SKV_ERR_FORMAT, "value type %u is invalid", type);
        if (!parse_value(p, type, &kv->v, 0)) return false;
    }
    p->what[0] = 0;
    g->kv_sorted = malloc((n_kv ? n_kv : 1) * sizeof(int64_t));
    sort_rec *recs = malloc((n_kv ? n_kv : 1) * sizeof *recs);
    if (!g->kv_sorted || !recs) {
        free(recs);
        return fail(p, SKV_ERR_NOMEM, "out of memory for the key index");
    }
    for (uint64_t i = 0; i < n_kv; i++)
        recs[i] = (sort_rec){g->pool + g->kv[i].key_off, g->kv[i].key_len, (int64_t)i};
    sort_into(recs, g->kv_sorted, (int64_t)n_kv, cmp_rec_name);
    free(recs);
    for (uint64_t i = 1; i < n_kv; i++) {
        const gkv *a = &g->kv[g->kv_sorted[i - 1]], *b = &g->kv[g->kv_sorted[i]];
        if (!cmp_bytes(g->pool + a->key_off, a->key_len, g->pool + b->key_off, b->key_len)) {
            char nm[100];
            return fail(p, SKV_ERR_FORMAT, "duplicate key '%s'",
                        printable(nm, sizeof nm, g->pool + b->key_off, b->key_len));
        }
    }
    return true;
}

static bool read_alignment(parser *p) {
    skv_gguf *g = p->g;
    g->alignment = SKV_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = skv_gguf_find_key(g, "general.alignment");
    if (i < 0) return true;
    int64_t a;
    const gval *v = &g->kv[i].v;
    if (v->type == SKV_GGUF_BOOL || !scalar_int(v->type, v->u.bits, &a))
        return fail(p, SKV_ERR_FORMAT,
                    "general.alignment has type %s, expected an unsigned integer",
                    skv_gguf_vtype_name(v->type));
    if (a <= 0 || (a & (a - 1)) != 0 || a > (1ll << 30))
        return fail(p, SKV_ERR_FORMAT,
                    "general.alignment %lld is not a nonzero power of two (at most 2^30)",
                    (long long)a);
    g->alignment = (uint64_t)a;
    return true;
}

/* ggml's names of the tensor types sparsekv does not read (ggml.h, v0.5.0), for the refusal: a
 * user with an IQ2_XXS file sees which type it is, not only its number. NULL for ids ggml never
 * had or that gguf files no longer hold. */
static const char *ggml_type_name(uint32_t id) {
    static const char *const names[] = {
        [9] = "Q8_1",   [15] = "Q8_K",  [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS",
        [19] = "IQ1_S", [21] = "IQ3_S", [22] = "IQ2_S",   [24] = "I8",     [25] = "I16",
        [26] = "I32",   [27] = "I64",   [28] = "F64",     [29] = "IQ1_M",  [34] = "TQ1_0",
        [35] = "TQ2_0", [39] = "MXFP4", [40] = "NVFP4",   [41] = "Q1_0",   [42] = "Q2_0"};
    return id < sizeof names / sizeof names[0] ? names[id] : NULL;
}

/* Parses tensor info i. Its name's pool offset goes to *name_off: the pool may still move, so
 * name pointers are set once every string has been read. */
static bool parse_tensor_info(parser *p, int64_t i, int64_t *name_off) {
    skv_gguf *g = p->g;
    skv_gguf_tensor *t = &g->tensors[i];
    snprintf(p->what, sizeof p->what, "tensor #%lld", (long long)i);
    uint64_t off, len;
    if (!get_str(p, &off, &len, "tensor name")) return false;
    *name_off = (int64_t)off;
    char nm[100];
    printable(nm, sizeof nm, g->pool + off, len);
    if (memchr(g->pool + off, 0, len))
        return fail(p, SKV_ERR_FORMAT, "tensor name '%s' contains a NUL byte", nm);
    snprintf(p->what, sizeof p->what, "tensor '%s'", nm);
    uint32_t n_dims;
    if (!get_u32(p, &n_dims, "n_dims")) return false;
    if (n_dims < 1 || n_dims > SKV_GGUF_MAX_DIMS)
        return fail(p, SKV_ERR_FORMAT, "n_dims %u is outside 1..%d", n_dims, SKV_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t nel = 1;
    for (int d = 0; d < SKV_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        if (!get_u64(p, &ne, "dimension")) return false;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return fail(p, SKV_ERR_FORMAT, "dimension %u is %lld (must be positive)", d,
                        (long long)ne);
        if (!skv_mul_ok(nel, ne, &nel) || nel > (uint64_t)INT64_MAX)
            return fail(p, SKV_ERR_FORMAT, "element count overflows");
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if (!get_u32(p, &type, "type")) return false;
    if (!skv_type_supported((skv_type)type)) {
        const char *name = ggml_type_name(type);
        return name ? fail(p, SKV_ERR_UNSUPPORTED, "tensor type id %u (%s) is not supported", type,
                           name)
                    : fail(p, SKV_ERR_UNSUPPORTED, "tensor type id %u is not supported", type);
    }
    t->type = (skv_type)type;
    int bs = skv_type_block_size(t->type);
    if (t->ne[0] % bs)
        return fail(p, SKV_ERR_FORMAT, "ne[0] = %lld is not a multiple of the %s block size %d",
                    (long long)t->ne[0], skv_type_name(t->type), bs);
    uint64_t blocks = nel / (uint64_t)bs;
    if (!skv_mul_ok(blocks, skv_type_block_bytes(t->type), &t->size))
        return fail(p, SKV_ERR_FORMAT, "byte size overflows");
    if (!get_u64(p, &t->offset, "data offset")) return false;
    if (t->offset % g->alignment)
        return fail(p, SKV_ERR_FORMAT, "data offset %llu is not a multiple of the alignment %llu",
                    (unsigned long long)t->offset, (unsigned long long)g->alignment);
    return true;
}

static bool parse_tensors(parser *p, uint64_t n_tensors) {
    skv_gguf *g = p->g;
    if (n_tensors > remaining(p) / MIN_TENSOR_BYTES)
        return fail(p, SKV_ERR_FORMAT, "n_tensors %llu exceeds what the %llu bytes left can hold",
                    (unsigned long long)n_tensors, (unsigned long long)remaining(p));
    size_t n1 = n_tensors ? (size_t)n_tensors : 1;
    g->tensors = calloc(n1, sizeof(skv_gguf_tensor));
    g->t_sorted = malloc(n1 * sizeof(int64_t));
    sort_rec *recs = malloc(n1 * sizeof *recs);
    if (!g->tensors || !g->t_sorted || !recs) {
        free(recs);
        return fail(p, SKV_ERR_NOMEM, "out of memory for %llu tensors",
                    (unsigned long long)n_tensors);
    }
    bool ok = true;
    /* t_sorted holds the name offsets until the index is built. */
    for (uint64_t i = 0; i < n_tensors && ok; i++)
        ok = parse_tensor_info(p, (int64_t)i, &g->t_sorted[i]);
    if (!ok) goto done;
    p->what[0] = 0;
    g->n_tensors = (int64_t)n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) g->tensors[i].name = g->pool + g->t_sorted[i];

    for (uint64_t i = 0; i < n_tensors; i++)
        recs[i] = (sort_rec){g->tensors[i].name, strlen(g->tensors[i].name), (int64_t)i};
    sort_into(recs, g->t_sorted, (int64_t)n_tensors, cmp_rec_name);
    for (uint64_t i = 1; i < n_tensors && ok; i++) {
        const skv_gguf_tensor *a = &g->tensors[g->t_sorted[i - 1]];
        const skv_gguf_tensor *b = &g->tensors[g->t_sorted[i]];
        if (!strcmp(a->name, b->name))
            ok = fail(p, SKV_ERR_FORMAT, "duplicate tensor name '%s'", a->name);
    }
    if (!ok) goto done;

    /* The data section starts at the next multiple of the alignment. */
    uint64_t start = p->pos, pad = (g->alignment - start % g->alignment) % g->alignment;
    if (!skv_add_ok(start, pad, &g->data_start)) {
        ok = fail(p, SKV_ERR_FORMAT, "data section offset overflows");
        goto done;
    }
    for (uint64_t i = 0; i < n_tensors && ok; i++) {
        skv_gguf_tensor *t = &g->tensors[i];
        uint64_t a, e;
        if (!skv_add_ok(g->data_start, t->offset, &a) || !skv_add_ok(a, t->size, &e) || e > g->size)
            ok = fail(p, SKV_ERR_FORMAT,
                      "tensor '%s' extends past end of file (data at %llu + %llu bytes, file "
                      "has %llu)",
                      t->name, (unsigned long long)t->offset, (unsigned long long)t->size,
                      (unsigned long long)g->size);
        else
            t->data = g->base + a;
    }
    if (!ok) goto done;

    /* Sorted by offset, each tensor must start at or after the end of the one before. */
    int64_t *by_off = malloc(n1 * sizeof *by_off);
    if (!by_off) {
        ok = fail(p, SKV_ERR_NOMEM, "out of memory for the tensor index");
        goto done;
    }
    for (uint64_t i = 0; i < n_tensors; i++)
        recs[i] = (sort_rec){NULL, g->tensors[i].offset, (int64_t)i};
    sort_into(recs, by_off, (int64_t)n_tensors, cmp_rec_off);
    for (uint64_t i = 1; i < n_tensors && ok; i++) {
        const skv_gguf_tensor *a = &g->tensors[by_off[i - 1]];
        const skv_gguf_tensor *b = &g->tensors[by_off[i]];
        if (b->offset < a->offset + a->size)
            ok = fail(p, SKV_ERR_FORMAT, "tensors '%s' and '%s' overlap", a->name, b->name);
    }
    free(by_off);
done:
    free(recs);
    return ok;
}

static skv_gguf *parse(skv_gguf *g, skv_err *err) {
    parser p = {.g = g, .pos = 0, .err = err};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        fail(&p, SKV_ERR_FORMAT, "not a GGUF file (bad magic)");
        goto bad;
    }
    p.pos = 4;
    if (!get_u32(&p, &version, "version")) goto bad;
    if (version == 1) {
        fail(&p, SKV_ERR_UNSUPPORTED, "GGUF version 1 is not supported (only versions 2 and 3)");
        goto bad;
    }
    if (version != 2 && version != 3) {
        fail(&p, SKV_ERR_UNSUPPORTED, "unsupported GGUF version %u%s (only versions 2 and 3)",
             version, (version & 0xffff) == 0 ? ", maybe a big-endian file" : "");
        goto bad;
    }
    g->version = version;
    if (!get_u64(&p, &n_tensors, "tensor count") || !get_u64(&p, &n_kv, "key/value count"))
        goto bad;
    if (n_kv > remaining(&p) / MIN_KV_BYTES) {
        fail(&p, SKV_ERR_FORMAT, "n_kv %llu exceeds what the %llu bytes left can hold",
             (unsigned long long)n_kv, (unsigned long long)remaining(&p));
        goto bad;
    }
    if (n_tensors > remaining(&p) / MIN_TENSOR_BYTES) {
        fail(&p, SKV_ERR_FORMAT, "n_tensors %llu exceeds what the %llu bytes left can hold",
             (unsigned long long)n_tensors, (unsigned long long)remaining(&p));
        goto bad;
    }
    if (!parse_kvs(&p, n_kv) || !read_alignment(&p) || !parse_tensors(&p, n_tensors)) goto bad;
    return g;
bad:
    skv_gguf_close(g);
    return NULL;
}

/* ---- public reader API -------------------------------------------------------------------- */

skv_gguf *skv_gguf_open_memory(const void *data, size_t size, skv_err *err) {
    if (!data && size) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "GGUF: NULL buffer");
        return NULL;
    }
    skv_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        skv_err_set(err, SKV_ERR_NOMEM, "GGUF: out of memory");
        return NULL;
    }
    static const uint8_t empty[1];
    g->base = data ? data : empty;
    g->size = size;
    return parse(g, err);
}

skv_gguf *skv_gguf_open(const char *path, skv_err *err) {
    if (!path) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "GGUF: NULL path");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        skv_err_set(err, SKV_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        skv_err_set(err, SKV_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        skv_err_set(err, SKV_ERR_IO, "'%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 24) {
        close(fd);
        skv_err_set(err, SKV_ERR_FORMAT,
                    "'%s' is not a GGUF file: %lld bytes is smaller than a GGUF header", path,
                    (long long)st.st_size);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        skv_err_set(err, SKV_ERR_IO, "cannot map '%s': %s", path, strerror(map_errno));
        return NULL;
    }
    skv_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        munmap(map, size);
        skv_err_set(err, SKV_ERR_NOMEM, "GGUF: out of memory");
        return NULL;
    }
    g->base = map;
    g->size = size;
    g->map = map;
    g->map_size = size;
    g->dev = st.st_dev;
    g->ino = st.st_ino;
    g = parse(g, err);
    if (!g && err) {
        /* Name the file in front of the parser's message. */
        char msg[sizeof err->msg];
        const char *m = err->msg;
        if (!strncmp(m, "GGUF: ", 6)) m += 6;
        snprintf(msg, sizeof msg, "%s", m);
        skv_err_set(err, err->status, "GGUF file '%s': %s", path, msg);
    }
    return g;
}

void skv_gguf_release(const skv_gguf *g, const void *p, size_t n) {
    if (!g || !g->map || !p) return;
    uintptr_t lo = (uintptr_t)g->map, hi = lo + g->map_size, a = (uintptr_t)p;
    if (a < lo || a > hi || n > hi - a) return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t s = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t e = (a + n) & ~((uintptr_t)page - 1);
    if (e > s) madvise((void *)s, e - s, MADV_DONTNEED); /* advice only: failure is harmless */
}

void skv_gguf_close(skv_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) gval_free(&g->kv[i].v);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    free(g->pool);
    if (g->map) munmap(g->map, g->map_size);
    free(g);
}

uint32_t skv_gguf_version(const skv_gguf *g) {
    return g->version;
}

uint64_t skv_gguf_alignment(const skv_gguf *g) {
    return g->alignment;
}

const void *skv_gguf_file_data(const skv_gguf *g, size_t *size) {
    if (size) *size = g->size;
    return g->base;
}

uint64_t skv_gguf_data_offset(const skv_gguf *g) {
    return g->data_start;
}

int64_t skv_gguf_n_kv(const skv_gguf *g) {
    return g->n_kv;
}

int64_t skv_gguf_find_key(const skv_gguf *g, const char *key) {
    if (!key || !g->kv_sorted) return -1;
    uint64_t klen = strlen(key);
    int64_t lo = 0, hi = g->n_kv - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const gkv *kv = &g->kv[g->kv_sorted[mid]];
        int c = cmp_bytes(g->pool + kv->key_off, kv->key_len, key, klen);
        if (c == 0) return g->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static const gval *kv_val(const skv_gguf *g, int64_t i) {
    return (i >= 0 && i < g->n_kv) ? &g->kv[i].v : NULL;
}

const char *skv_gguf_key(const skv_gguf *g, int64_t i) {
    return (i >= 0 && i < g->n_kv) ? g->pool + g->kv[i].key_off : NULL;
}

skv_gguf_vtype skv_gguf_kv_type(const skv_gguf *g, int64_t i) {
    const gval *v = kv_val(g, i);
    return v ? (skv_gguf_vtype)v->type : SKV_GGUF_VTYPE_COUNT;
}

const skv_gguf_value *skv_gguf_kv_value(const skv_gguf *g, int64_t i) {
    return (const skv_gguf_value *)kv_val(g, i);
}

skv_gguf_vtype skv_gguf_value_type(const skv_gguf_value *val) {
    const gval *v = (const gval *)val;
    return v ? (skv_gguf_vtype)v->type : SKV_GGUF_VTYPE_COUNT;
}

bool skv_gguf_value_int(const skv_gguf_value *val, int64_t *out) {
    const gval *v = (const gval *)val;
    return v && scalar_int(v->type, v->u.bits, out);
}

bool skv_gguf_value_float(const skv_gguf_value *val, double *out) {
    const gval *v = (const gval *)val;
    return v && scalar_float(v->type, v->u.bits, out);
}

bool skv_gguf_value_bool(const skv_gguf_value *val, bool *out) {
    const gval *v = (const gval *)val;
    if (!v || v->type != SKV_GGUF_BOOL) return false;
    *out = v->u.bits != 0;
    return true;
}

const char *skv_gguf_value_str(const skv_gguf *g, const skv_gguf_value *val, size_t *len) {
    const gval *v = (const gval *)val;
    if (!v || v->type != SKV_GGUF_STRING) return NULL;
    if (len) *len = (size_t)v->n;
    return g->pool + v->u.str_off;
}

skv_gguf_vtype skv_gguf_value_arr_type(const skv_gguf_value *val) {
    const gval *v = (const gval *)val;
    return (v && v->type == SKV_GGUF_ARRAY) ? (skv_gguf_vtype)v->elem_type : SKV_GGUF_VTYPE_COUNT;
}

uint64_t skv_gguf_value_arr_len(const skv_gguf_value *val) {
    const gval *v = (const gval *)val;
    return (v && v->type == SKV_GGUF_ARRAY) ? v->n : 0;
}

const skv_gguf_value *skv_gguf_value_arr_elem(const skv_gguf_value *val, uint64_t j) {
    const gval *v = (const gval *)val;
    if (!v || v->type != SKV_GGUF_ARRAY || j >= v->n) return NULL;
    if (v->elem_type != SKV_GGUF_STRING && v->elem_type != SKV_GGUF_ARRAY) return NULL;
    return (const skv_gguf_value *)&v->u.items[j];
}

/* Bits of element j of a fixed-size-scalar array. */
static bool arr_bits(const gval *v, uint64_t j, uint64_t *bits) {
    if (!v || v->type != SKV_GGUF_ARRAY || j >= v->n) return false;
    size_t sz = vtype_size(v->elem_type);
    if (!sz) return false;
    *bits = load_bits(v->u.raw + j * sz, sz);
    return true;
}

bool skv_gguf_value_arr_int(const skv_gguf_value *val, uint64_t j, int64_t *out) {
    const gval *v = (const gval *)val;
    uint64_t bits;
    return arr_bits(v, j, &bits) && scalar_int(v->elem_type, bits, out);
}

bool skv_gguf_value_arr_float(const skv_gguf_value *val, uint64_t j, double *out) {
    const gval *v = (const gval *)val;
    uint64_t bits;
    return arr_bits(v, j, &bits) && scalar_float(v->elem_type, bits, out);
}

const void *skv_gguf_value_arr_data(const skv_gguf_value *val) {
    const gval *v = (const gval *)val;
    if (!v || v->type != SKV_GGUF_ARRAY || !vtype_size(v->elem_type)) return NULL;
    return v->u.raw;
}

bool skv_gguf_kv_int(const skv_gguf *g, int64_t i, int64_t *out) {
    return skv_gguf_value_int(skv_gguf_kv_value(g, i), out);
}

bool skv_gguf_kv_float(const skv_gguf *g, int64_t i, double *out) {
    return skv_gguf_value_float(skv_gguf_kv_value(g, i), out);
}

bool skv_gguf_kv_bool(const skv_gguf *g, int64_t i, bool *out) {
    return skv_gguf_value_bool(skv_gguf_kv_value(g, i), out);
}

const char *skv_gguf_kv_str(const skv_gguf *g, int64_t i, size_t *len) {
    return skv_gguf_value_str(g, skv_gguf_kv_value(g, i), len);
}

skv_gguf_vtype skv_gguf_arr_type(const skv_gguf *g, int64_t i) {
    return skv_gguf_value_arr_type(skv_gguf_kv_value(g, i));
}

uint64_t skv_gguf_arr_len(const skv_gguf *g, int64_t i) {
    return skv_gguf_value_arr_len(skv_gguf_kv_value(g, i));
}

bool skv_gguf_arr_int(const skv_gguf *g, int64_t i, uint64_t j, int64_t *out) {
    return skv_gguf_value_arr_int(skv_gguf_kv_value(g, i), j, out);
}

bool skv_gguf_arr_float(const skv_gguf *g, int64_t i, uint64_t j, double *out) {
    return skv_gguf_value_arr_float(skv_gguf_kv_value(g, i), j, out);
}

const char *skv_gguf_arr_str(const skv_gguf *g, int64_t i, uint64_t j, size_t *len) {
    const skv_gguf_value *arr = skv_gguf_kv_value(g, i);
    if (skv_gguf_value_arr_type(arr) != SKV_GGUF_STRING) return NULL;
    return skv_gguf_value_str(g, skv_gguf_value_arr_elem(arr, j), len);
}

int64_t skv_gguf_n_tensors(const skv_gguf *g) {
    return g->n_tensors;
}

int64_t skv_gguf_find_tensor(const skv_gguf *g, const char *name) {
    if (!name) return -1;
    int64_t lo = 0, hi = g->n_tensors - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->t_sorted[mid]].name, name);
        if (c == 0) return g->t_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

const skv_gguf_tensor *skv_gguf_tensor_at(const skv_gguf *g, int64_t i) {
    return (i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

bool skv_gguf_get_int(const skv_gguf *g, const char *key, int64_t *out) {
    return skv_gguf_kv_int(g, skv_gguf_find_key(g, key), out);
}

bool skv_gguf_get_float(const skv_gguf *g, const char *key, double *out) {
    return skv_gguf_kv_float(g, skv_gguf_find_key(g, key), out);
}

const char *skv_gguf_get_str(const skv_gguf *g, const char *key) {
    return skv_gguf_kv_str(g, skv_gguf_find_key(g, key), NULL);
}

/* ---- writer ------------------------------------------------------------------------------- */

typedef struct wkv {
    char *key;
    uint32_t type;
    uint8_t *blob; /* the value's serialized payload (after the type tag) */
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;
    skv_type type;
    int n_dims;
    int64_t ne[SKV_GGUF_MAX_DIMS];
    uint64_t size;
    const void *data;
} wtensor;

/* A file the output must not be (an input of the conversion). */
typedef struct wsource {
    dev_t dev;
    ino_t ino;
} wsource;

struct skv_gguf_writer {
    wsource src[8];
    int n_src;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    skv_status bad; /* first error from a setter, reported by write */
    char bad_msg[300];
};

skv_gguf_writer *skv_gguf_writer_new(void) {
    return calloc(1, sizeof(skv_gguf_writer));
}

void skv_gguf_writer_free(skv_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].blob);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static skv_status wfail(skv_gguf_writer *w, skv_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static skv_status wfail(skv_gguf_writer *w, skv_status st, const char *fmt, ...) {
    if (w && w->bad == SKV_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->bad_msg, sizeof w->bad_msg, fmt, ap);
        va_end(ap);
        w->bad = st;
    }
    return st;
}

/* Takes ownership of blob (freed on failure). */
static skv_status put_kv(skv_gguf_writer *w, const char *key, uint32_t type, uint8_t *blob,
                         size_t len) {
    if (!w || !key) {
        free(blob);
        return w ? wfail(w, SKV_ERR_INVALID_ARG, "NULL key") : SKV_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) { /* set twice: last value, first position */
            free(w->kv[i].blob);
            w->kv[i].type = type;
            w->kv[i].blob = blob;
            w->kv[i].len = len;
            return SKV_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) {
            free(blob);
            return wfail(w, SKV_ERR_NOMEM, "out of memory adding key '%s'", key);
        }
        w->kv = nk;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(blob);
        return wfail(w, SKV_ERR_NOMEM, "out of memory adding key '%s'", key);
    }
    w->kv[w->n_kv++] = (wkv){k, type, blob, len};
    return SKV_OK;
}

static skv_status put_scalar(skv_gguf_writer *w, const char *key, uint32_t type, const void *v,
                             size_t sz) {
    uint8_t *b = malloc(sz);
    if (!b) return wfail(w, SKV_ERR_NOMEM, "out of memory adding key '%s'", key ? key : "");
    memcpy(b, v, sz);
    return put_kv(w, key, type, b, sz);
}

skv_status skv_gguf_writer_set_u32(skv_gguf_writer *w, const char *key, uint32_t v) {
    return put_scalar(w, key, SKV_GGUF_UINT32, &v, 4);
}

skv_status skv_gguf_writer_set_i32(skv_gguf_writer *w, const char *key, int32_t v) {
    return put_scalar(w, key, SKV_GGUF_INT32, &v, 4);
}

skv_status skv_gguf_writer_set_u64(skv_gguf_writer *w, const char *key, uint64_t v) {
    return put_scalar(w, key, SKV_GGUF_UINT64, &v, 8);
}

skv_status skv_gguf_writer_set_f32(skv_gguf_writer *w, const char *key, float v) {
    return put_scalar(w, key, SKV_GGUF_FLOAT32, &v, 4);
}

skv_status skv_gguf_writer_set_bool(skv_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, SKV_GGUF_BOOL, &b, 1);
}

skv_status skv_gguf_writer_set_str(skv_gguf_writer *w, const char *key, const char *v) {
    if (!v) return wfail(w, SKV_ERR_INVALID_ARG, "NULL string for key '%s'", key ? key : "");
    uint64_t n = strlen(v);
    uint8_t *b = malloc(8 + n);
    if (!b) return wfail(w, SKV_ERR_NOMEM, "out of memory adding key '%s'", key ? key : "");
    memcpy(b, &n, 8);
    memcpy(b + 8, v, n);
    return put_kv(w, key, SKV_GGUF_STRING, b, 8 + n);
}

skv_status skv_gguf_writer_set_arr(skv_gguf_writer *w, const char *key, skv_gguf_vtype elem,
                                   const void *data, uint64_t n) {
    size_t sz = vtype_size(elem);
    if (!sz)
        return wfail(w, SKV_ERR_INVALID_ARG,
                     "key '%s': array element type %d is not a fixed-size "
                     "scalar",
                     key ? key : "", (int)elem);
    if (n && !data)
        return wfail(w, SKV_ERR_INVALID_ARG, "key '%s': NULL array data", key ? key : "");
    uint64_t bytes;
    if (!skv_mul_ok(n, sz, &bytes) || bytes > SIZE_MAX - 12)
        return wfail(w, SKV_ERR_INVALID_ARG, "key '%s': array too large", key ? key : "");
    if (elem == SKV_GGUF_BOOL)
        for (uint64_t j = 0; j < n; j++)
            if (((const uint8_t *)data)[j] > 1)
                return wfail(w, SKV_ERR_INVALID_ARG, "key '%s': bool element %llu is not 0 or 1",
                             key ? key : "", (unsigned long long)j);
    uint8_t *b = malloc(12 + bytes);
    if (!b) return wfail(w, SKV_ERR_NOMEM, "out of memory adding key '%s'", key ? key : "");
    uint32_t et = (uint32_t)elem;
    memcpy(b, &et, 4);
    memcpy(b + 4, &n, 8);
    if (bytes) memcpy(b + 12, data, bytes);
    return put_kv(w, key, SKV_GGUF_ARRAY, b, 12 + bytes);
}

skv_status skv_gguf_writer_set_arr_str(skv_gguf_writer *w, const char *key, const char *const *strs,
                                       const size_t *lens, uint64_t n) {
    if (n && !strs)
        return wfail(w, SKV_ERR_INVALID_ARG, "key '%s': NULL string array", key ? key : "");
    uint64_t total = 12;
    for (uint64_t j = 0; j < n; j++) {
        if (!strs[j])
            return wfail(w, SKV_ERR_INVALID_ARG, "key '%s': string %llu is NULL", key ? key : "",
                         (unsigned long long)j);
        uint64_t l = lens ? lens[j] : strlen(strs[j]);
        if (!skv_add_ok(total, 8 + l, &total) || total > SIZE_MAX)
            return wfail(w, SKV_ERR_INVALID_ARG, "key '%s': array too large", key ? key : "");
    }
    uint8_t *b = malloc(total);
    if (!b) return wfail(w, SKV_ERR_NOMEM, "out of memory adding key '%s'", key ? key : "");
    uint32_t et = SKV_GGUF_STRING;
    memcpy(b, &et, 4);
    memcpy(b + 4, &n, 8);
    size_t pos = 12;
    for (uint64_t j = 0; j < n; j++) {
        uint64_t l = lens ? lens[j] : strlen(strs[j]);
        memcpy(b + pos, &l, 8);
        memcpy(b + pos + 8, strs[j], l);
        pos += 8 + l;
    }
    return put_kv(w, key, SKV_GGUF_ARRAY, b, total);
}

skv_status skv_gguf_writer_copy_kv(skv_gguf_writer *w, const skv_gguf *g,
                                   bool (*skip)(const char *key)) {
    if (!w || !g) return w ? wfail(w, SKV_ERR_INVALID_ARG, "NULL reader") : SKV_ERR_INVALID_ARG;
    if (g->map && w->n_src < (int)(sizeof w->src / sizeof w->src[0]))
        w->src[w->n_src++] = (wsource){g->dev, g->ino};
    for (int64_t i = 0; i < g->n_kv; i++) {
        const char *key = skv_gguf_key(g, i);
        if (skip && skip(key)) continue;
        /* v2 and v3 encode values identically, so the validated bytes are copied as they are. */
        const gval *v = &g->kv[i].v;
        uint8_t *b = malloc(v->nbytes ? v->nbytes : 1);
        if (!b) return wfail(w, SKV_ERR_NOMEM, "out of memory copying key '%s'", key);
        memcpy(b, g->base + v->start, v->nbytes);
        skv_status st = put_kv(w, key, v->type, b, v->nbytes);
        if (st != SKV_OK) return st;
    }
    return SKV_OK;
}

skv_status skv_gguf_writer_add_tensor(skv_gguf_writer *w, const char *name, skv_type type,
                                      int n_dims, const int64_t *ne, const void *data) {
    if (!w) return SKV_ERR_INVALID_ARG;
    if (!name || !*name) return wfail(w, SKV_ERR_INVALID_ARG, "tensor with an empty name");
    if (!skv_type_supported(type))
        return wfail(w, SKV_ERR_INVALID_ARG, "tensor '%s': unsupported type id %d", name,
                     (int)type);
    if (n_dims < 1 || n_dims > SKV_GGUF_MAX_DIMS || !ne)
        return wfail(w, SKV_ERR_INVALID_ARG, "tensor '%s': n_dims %d is outside 1..%d", name,
                     n_dims, SKV_GGUF_MAX_DIMS);
    uint64_t nel = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return wfail(w, SKV_ERR_INVALID_ARG, "tensor '%s': dimension %d is %lld", name, d,
                         (long long)ne[d]);
        if (!skv_mul_ok(nel, (uint64_t)ne[d], &nel) || nel > (uint64_t)INT64_MAX)
            return wfail(w, SKV_ERR_INVALID_ARG, "tensor '%s': element count overflows", name);
    }
    int bs = skv_type_block_size(type);
    if (ne[0] % bs)
        return wfail(w, SKV_ERR_INVALID_ARG,
                     "tensor '%s': ne[0] = %lld is not a multiple of the "
                     "%s block size %d",
                     name, (long long)ne[0], skv_type_name(type), bs);
    uint64_t size;
    if (!skv_mul_ok(nel / (uint64_t)bs, skv_type_block_bytes(type), &size))
        return wfail(w, SKV_ERR_INVALID_ARG, "tensor '%s': byte size overflows", name);
    if (!data) return wfail(w, SKV_ERR_INVALID_ARG, "tensor '%s': NULL data", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return wfail(w, SKV_ERR_INVALID_ARG, "duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return wfail(w, SKV_ERR_NOMEM, "out of memory adding tensor '%s'", name);
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return wfail(w, SKV_ERR_NOMEM, "out of memory adding tensor '%s'", name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < SKV_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->size = size;
    t->data = data;
    w->n_t++;
    return SKV_OK;
}

/* The alignment the file will use: general.alignment when set (validated), else the default. */
static skv_status writer_alignment(const skv_gguf_writer *w, uint64_t *align, skv_err *err) {
    *align = SKV_GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        size_t sz = vtype_size(w->kv[i].type);
        int64_t a;
        if (!sz || w->kv[i].type == SKV_GGUF_BOOL || w->kv[i].len != sz ||
            !scalar_int(w->kv[i].type, load_bits(w->kv[i].blob, sz), &a) || a <= 0 ||
            (a & (a - 1)) || a > (1ll << 30))
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "GGUF writer: general.alignment must be a nonzero power of two");
        *align = (uint64_t)a;
    }
    return SKV_OK;
}

typedef struct wfile {
    FILE *f;
    uint64_t pos;
    bool ok;
} wfile;

static void wbytes(wfile *o, const void *p, size_t n) {
    if (o->ok && n && fwrite(p, 1, n, o->f) != n) o->ok = false;
    o->pos += n;
}

static void wzeros(wfile *o, uint64_t n) {
    static const uint8_t zeros[64];
    while (n) {
        size_t k = (size_t)SKV_MIN(n, (uint64_t)sizeof zeros);
        wbytes(o, zeros, k);
        n -= k;
    }
}

static void wu32(wfile *o, uint32_t v) {
    wbytes(o, &v, 4);
}

static void wu64(wfile *o, uint64_t v) {
    wbytes(o, &v, 8);
}

static void wstr(wfile *o, const char *s) {
    uint64_t n = strlen(s);
    wu64(o, n);
    wbytes(o, s, n);
}

skv_status skv_gguf_writer_add_source(skv_gguf_writer *w, const char *path) {
    if (!w || !path) return SKV_ERR_INVALID_ARG;
    struct stat st;
    if (stat(path, &st) != 0) return SKV_OK; /* nothing there: nothing to protect */
    if (w->n_src >= (int)(sizeof w->src / sizeof w->src[0]))
        return wfail(w, SKV_ERR_INVALID_ARG, "too many source files");
    w->src[w->n_src++] = (wsource){st.st_dev, st.st_ino};
    return SKV_OK;
}

/* The output may be a new path or an existing regular file that is none of the inputs: never a
 * symbolic link, device, FIFO, socket or directory (rename() would replace the link or the
 * device node by a regular file), never the file being converted. */
static skv_status check_output_path(const skv_gguf_writer *w, const char *path, skv_err *err);

skv_status skv_gguf_writer_check_output(const skv_gguf_writer *w, const char *path, skv_err *err) {
    if (!w || !path) return skv_err_set(err, SKV_ERR_INVALID_ARG, "GGUF writer: NULL argument");
    return check_output_path(w, path, err);
}

static skv_status check_output_path(const skv_gguf_writer *w, const char *path, skv_err *err) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return SKV_OK;
        return skv_err_set(err, SKV_ERR_IO, "cannot check output '%s': %s", path, strerror(errno));
    }
    const char *kind = S_ISLNK(st.st_mode)    ? "a symbolic link"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : !S_ISREG(st.st_mode) ? "not a regular file"
                                              : NULL;
    if (kind)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "refusing to write '%s': it is %s (the output must be a regular file "
                           "or a new path)",
                           path, kind);
    for (int i = 0; i < w->n_src; i++)
        if (w->src[i].dev == st.st_dev && w->src[i].ino == st.st_ino)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "refusing to write '%s': it is an input of this conversion", path);
    return SKV_OK;
}

skv_status skv_gguf_writer_write(skv_gguf_writer *w, const char *path, skv_err *err) {
    return skv_gguf_writer_write_as(w, path, path, err);
}

skv_status skv_gguf_writer_write_as(skv_gguf_writer *w, const char *path, const char *shown,
                                    skv_err *err) {
    if (!w || !path || !shown)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "GGUF writer: NULL argument");
    if (w->bad != SKV_OK) return skv_err_set(err, w->bad, "GGUF writer: %s", w->bad_msg);
    skv_status chk = check_output_path(w, path, err);
    if (chk != SKV_OK) return chk;
    uint64_t align;
    skv_status st = writer_alignment(w, &align, err);
    if (st != SKV_OK) return st;

    /* Offsets of every tensor in the data section, each aligned. */
    uint64_t *offs = malloc((w->n_t ? w->n_t : 1) * sizeof *offs);
    if (!offs) return skv_err_set(err, SKV_ERR_NOMEM, "GGUF writer: out of memory");
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        offs[i] = off;
        uint64_t end;
        if (!skv_add_ok(off, w->t[i].size, &end) || !skv_add_ok(end, align, &off)) {
            free(offs);
            return skv_err_set(err, SKV_ERR_INVALID_ARG, "GGUF writer: tensor data too large");
        }
        off = end + (align - end % align) % align;
    }

    /* A unique temporary name next to the target, so rename() is atomic. */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 64);
    if (!tmp) {
        free(offs);
        return skv_err_set(err, SKV_ERR_NOMEM, "GGUF writer: out of memory");
    }
    static unsigned counter;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, plen + 64, "%s.tmp.%ld.%u", path, (long)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        st = skv_err_set(err, SKV_ERR_IO, "cannot create a temporary file next to '%s': %s", shown,
                         strerror(errno));
        free(tmp);
        free(offs);
        return st;
    }
    wfile o = {fdopen(fd, "wb"), 0, true};
    if (!o.f) {
        st = skv_err_set(err, SKV_ERR_IO, "cannot write '%s': %s", shown, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        free(offs);
        return st;
    }
    setvbuf(o.f, NULL, _IOFBF, 1 << 20);

    wbytes(&o, GGUF_MAGIC, 4);
    wu32(&o, 3);
    wu64(&o, w->n_t);
    wu64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        wstr(&o, w->kv[i].key);
        wu32(&o, w->kv[i].type);
        wbytes(&o, w->kv[i].blob, w->kv[i].len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        wstr(&o, t->name);
        wu32(&o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) wu64(&o, (uint64_t)t->ne[d]);
        wu32(&o, (uint32_t)t->type);
        wu64(&o, offs[i]);
    }
    wzeros(&o, (align - o.pos % align) % align);
    uint64_t data_start = o.pos;
    for (size_t i = 0; i < w->n_t && o.ok; i++) {
        wzeros(&o, data_start + offs[i] - o.pos);
        wbytes(&o, w->t[i].data, (size_t)w->t[i].size);
    }
    if (w->n_t) wzeros(&o, (align - o.pos % align) % align);
    int saved = 0;
    if (!o.ok) saved = errno;
    if (fflush(o.f) != 0 && o.ok) {
        o.ok = false;
        saved = errno;
    }
    if (o.ok && fsync(fileno(o.f)) != 0 && errno != EINVAL && errno != EROFS) {
        o.ok = false;
        saved = errno;
    }
    if (fclose(o.f) != 0 && o.ok) {
        o.ok = false;
        saved = errno;
    }
    if (o.ok && rename(tmp, path) != 0) {
        st = skv_err_set(err, SKV_ERR_IO, "cannot move the new file into '%s': %s", shown,
                         strerror(errno));
        unlink(tmp);
    } else if (!o.ok) {
        st = skv_err_set(err, SKV_ERR_IO, "writing '%s' failed: %s", shown,
                         strerror(saved ? saved : EIO));
        unlink(tmp);
    }
    free(tmp);
    free(offs);
    return st;
}
