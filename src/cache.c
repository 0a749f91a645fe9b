/* cache.c — the per-(layer, kv head) KV cache: append, copy, select (compact in place and give
 * the memory back), re-rotate, read back, account.
 *
 * Memory: each head's arrays are separate allocations. Large ones are mmap'd directly so that a
 * selection that shrinks them really returns pages to the OS (malloc's heap may keep them), which
 * is the point of compressing a cache. */
#include "cache.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Arrays at or above this size live in their own mapping. */
#define MAP_MIN_BYTES ((size_t)64 * 1024)

/* Resizes an array allocated by this function (p may be NULL, new_bytes may be 0). Keeps the
 * first min(old, new) bytes. Returns false (and leaves *p intact) on failure. */
static bool buf_resize(void **p, size_t old_bytes, size_t new_bytes) {
    bool old_mapped = old_bytes >= MAP_MIN_BYTES, new_mapped = new_bytes >= MAP_MIN_BYTES;
    if (new_bytes == old_bytes) return true;
    if (old_mapped && new_mapped) {
        void *q = mremap(*p, old_bytes, new_bytes, MREMAP_MAYMOVE);
        if (q == MAP_FAILED) return false;
        *p = q;
        return true;
    }
    if (!old_mapped && !new_mapped) {
        if (new_bytes == 0) {
            free(*p);
            *p = NULL;
            return true;
        }
        void *q = realloc(*p, new_bytes);
        if (!q) return false;
        *p = q;
        return true;
    }
    /* crossing the threshold: allocate the other kind and copy */
    void *q;
    if (new_mapped) {
        q = mmap(NULL, new_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED) return false;
    } else {
        q = new_bytes ? malloc(new_bytes) : NULL;
        if (new_bytes && !q) return false;
    }
    size_t keep = old_bytes < new_bytes ? old_bytes : new_bytes;
    if (keep) memcpy(q, *p, keep);
    if (old_mapped)
        munmap(*p, old_bytes);
    else
        free(*p);
    *p = q;
    return true;
}

/* Resizes all three arrays of a head to cap entries. On failure the head keeps a capacity that
 * is still at least its length. */
static bool head_set_cap(skv_cache_head *h, size_t row_bytes, int cap) {
    size_t oc = (size_t)h->cap, nc = (size_t)cap;
    void *pos = h->pos, *k = h->k, *v = h->v;
    if (!buf_resize(&pos, oc * sizeof(int32_t), nc * sizeof(int32_t))) return false;
    h->pos = pos;
    if (!buf_resize(&k, oc * row_bytes, nc * row_bytes)) {
        /* undo pos when growing; when shrinking a smaller pos array is still >= n */
        if (nc > oc && buf_resize(&pos, nc * sizeof(int32_t), oc * sizeof(int32_t))) h->pos = pos;
        return false;
    }
    h->k = k;
    if (!buf_resize(&v, oc * row_bytes, nc * row_bytes)) {
        if (nc > oc) {
            if (buf_resize(&pos, nc * sizeof(int32_t), oc * sizeof(int32_t))) h->pos = pos;
            if (buf_resize(&k, nc * row_bytes, oc * row_bytes)) h->k = k;
        }
        return false;
    }
    h->v = v;
    h->cap = cap;
    return true;
}

static void head_release(skv_cache_head *h, size_t row_bytes) {
    buf_resize((void **)&h->pos, (size_t)h->cap * sizeof(int32_t), 0);
    buf_resize((void **)&h->k, (size_t)h->cap * row_bytes, 0);
    buf_resize((void **)&h->v, (size_t)h->cap * row_bytes, 0);
    h->n = h->cap = 0;
    h->rope_shift = 0;
}

skv_cache *skv_cache_new(int n_layer, int n_head_kv, int head_dim, int n_rot, float rope_theta,
                         skv_type type, int n_ctx, skv_err *err) {
    if (n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0 || n_ctx <= 0) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "cache dimensions must be positive");
        return NULL;
    }
    if (type != SKV_TYPE_F32 && type != SKV_TYPE_F16 && type != SKV_TYPE_Q8_0) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "kv cache type must be f32, f16 or q8_0, not %s",
                    skv_type_name(type) ? skv_type_name(type) : "an unknown type");
        return NULL;
    }
    size_t row_bytes = skv_row_bytes(type, head_dim);
    if (row_bytes == 0) {
        skv_err_set(err, SKV_ERR_INVALID_ARG,
                    "kv cache type %s needs head_dim to be a multiple of %d (head_dim is %d)",
                    skv_type_name(type), skv_type_block_size(type), head_dim);
        return NULL;
    }
    skv_cache *c = calloc(1, sizeof *c);
    if (c) c->heads = calloc((size_t)n_layer * (size_t)n_head_kv, sizeof *c->heads);
    if (!c || !c->heads) {
        free(c);
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory allocating the kv cache");
        return NULL;
    }
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->rope =
        skv_rope_plain(SKV_ROPE_ADJACENT, head_dim, SKV_MIN(n_rot, head_dim) & ~1, rope_theta);
    c->type = type;
    c->row_bytes = row_bytes;
    c->n_ctx = n_ctx;
    c->mode = SKV_POSITIONS_ORIGINAL;
    return c;
}

void skv_cache_set_rope(skv_cache *c, const skv_rope_spec *r) {
    c->rope = *r;
}

void skv_cache_free(skv_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) head_release(&c->heads[i], c->row_bytes);
    free(c->heads);
    free(c);
}

/* The heads keep their arrays: a context reset for the next prompt would otherwise unmap and
 * fault in the same memory again (smollm2-135m F16 pp512 in bench, which resets between runs as
 * llama-bench reuses its cache: +7% on a Zen 5). */
void skv_cache_clear(skv_cache *c) {
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) {
        c->heads[i].n = 0;
        c->heads[i].rope_shift = 0;
    }
    c->n_past = 0;
    c->mode = SKV_POSITIONS_ORIGINAL;
}

int skv_cache_longest(const skv_cache *c) {
    if (!c) return 0;
    int m = 0;
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) m = SKV_MAX(m, c->heads[i].n);
    return m;
}

void skv_cache_drop_from(skv_cache *c, int n_past) {
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) {
        skv_cache_head *h = &c->heads[i];
        while (h->n > 0 && h->pos[h->n - 1] >= n_past) h->n--;
    }
    if (c->n_past > n_past) c->n_past = n_past;
}

void skv_cache_caps(const skv_cache *c, int *caps) {
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) caps[i] = c->heads[i].cap;
}

void skv_cache_restore_caps(skv_cache *c, const int *caps) {
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++)
        if (c->heads[i].cap > caps[i] && c->heads[i].n <= caps[i])
            head_set_cap(&c->heads[i], c->row_bytes, caps[i]); /* failure keeps more room */
}

skv_cache *skv_cache_clone(const skv_cache *src, skv_err *err) {
    skv_cache *c = skv_cache_new(src->n_layer, src->n_head_kv, src->head_dim, src->rope.n_rot,
                                 (float)src->rope.theta, src->type, src->n_ctx, err);
    if (!c) return NULL;
    c->rope = src->rope;
    c->n_past = src->n_past;
    c->mode = src->mode;
    c->cap_hint = src->cap_hint;
    for (int i = 0; i < src->n_layer * src->n_head_kv; i++) {
        const skv_cache_head *s = &src->heads[i];
        skv_cache_head *d = &c->heads[i];
        /* the copy gets exactly the room it needs; appends grow it again */
        if (s->n > 0 && !head_set_cap(d, c->row_bytes, s->n)) {
            skv_cache_free(c);
            skv_err_set(err, SKV_ERR_NOMEM, "out of memory copying the kv cache");
            return NULL;
        }
        if (s->n > 0) { /* an empty head has no arrays (memcpy of NULL is undefined) */
            memcpy(d->pos, s->pos, (size_t)s->n * sizeof(int32_t));
            memcpy(d->k, s->k, (size_t)s->n * c->row_bytes);
            memcpy(d->v, s->v, (size_t)s->n * c->row_bytes);
        }
        d->n = s->n;
        d->rope_shift = s->rope_shift;
    }
    return c;
}

/* Room for n_more more entries in every head: exactly that, at most n_ctx (exact:
 * skv_context_reserve, whose caller knows how many), or half as much again for appends to come
 * (at least what is needed, within a budget's bound and n_ctx). */
static skv_status grow_heads(skv_cache *c, int n_more, bool exact, skv_err *err) {
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) {
        skv_cache_head *h = &c->heads[i];
        const int64_t want = (int64_t)h->n + n_more;
        const int need = exact && want > c->n_ctx ? c->n_ctx : (int)want;
        if (need <= h->cap) continue;
        int cap = need;
        if (!exact) {
            cap = SKV_MAX(h->cap + h->cap / 2, need);
            if (cap < 16) cap = 16;
            if (c->cap_hint >= need && cap > c->cap_hint) cap = c->cap_hint; /* a budget's bound */
            if (cap > c->n_ctx) cap = c->n_ctx > need ? c->n_ctx : need;
        }
        if (!head_set_cap(h, c->row_bytes, cap))
            return skv_err_set(err, SKV_ERR_NOMEM,
                               "out of memory growing the kv cache to %d positions", need);
    }
    return SKV_OK;
}

skv_status skv_cache_reserve(skv_cache *c, int n_more, skv_err *err) {
    return grow_heads(c, n_more, false, err);
}

skv_status skv_cache_room(skv_cache *c, int n_more, skv_err *err) {
    return grow_heads(c, n_more, true, err);
}

static void row_store(skv_type t, uint8_t *dst, const float *src, int n) {
    if (t == SKV_TYPE_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else
        skv_quantize_row(t, src, dst, n);
}

static void row_load(skv_type t, const uint8_t *src, float *dst, int n) {
    if (t == SKV_TYPE_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else
        skv_dequantize_row(t, src, dst, n);
}

void skv_cache_store(skv_cache *c, int layer, int head, int i, int32_t pos, const float *k,
                     const float *v) {
    skv_cache_head *h = skv_cache_head_at(c, layer, head);
    size_t off = (size_t)(h->n + i) * c->row_bytes;
    h->pos[h->n + i] = pos;
    row_store(c->type, h->k + off, k, c->head_dim);
    row_store(c->type, h->v + off, v, c->head_dim);
}

void skv_cache_commit(skv_cache *c, int layer, int n_new) {
    for (int h = 0; h < c->n_head_kv; h++) skv_cache_head_at(c, layer, h)->n += n_new;
}

void skv_cache_append(skv_cache *c, int layer, int head, int32_t pos, const float *k,
                      const float *v) {
    skv_cache_store(c, layer, head, 0, pos, k, v);
    skv_cache_head_at(c, layer, head)->n++;
}

int skv_cache_head_count_upto(const skv_cache_head *h, int32_t p) {
    int lo = 0, hi = h->n; /* first index with pos > p */
    if (hi > 0 && h->pos[hi - 1] <= p) return hi;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (h->pos[mid] <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- public accessors ------------------------------------------------------------------- */

int skv_cache_n_layer(const skv_cache *c) {
    return c ? c->n_layer : 0;
}
int skv_cache_n_head_kv(const skv_cache *c) {
    return c ? c->n_head_kv : 0;
}
int skv_cache_head_dim(const skv_cache *c) {
    return c ? c->head_dim : 0;
}
skv_type skv_cache_type(const skv_cache *c) {
    return c ? c->type : SKV_TYPE_F32;
}
int skv_cache_n_past(const skv_cache *c) {
    return c ? c->n_past : 0;
}
skv_position_mode skv_cache_position_mode(const skv_cache *c) {
    return c ? c->mode : SKV_POSITIONS_ORIGINAL;
}

static bool head_ok(const skv_cache *c, int layer, int head) {
    return c && layer >= 0 && layer < c->n_layer && head >= 0 && head < c->n_head_kv;
}

int skv_cache_head_len(const skv_cache *c, int layer, int head) {
    return head_ok(c, layer, head) ? skv_cache_head_at_const(c, layer, head)->n : 0;
}

const int32_t *skv_cache_head_positions(const skv_cache *c, int layer, int head) {
    return head_ok(c, layer, head) ? skv_cache_head_at_const(c, layer, head)->pos : NULL;
}

skv_status skv_cache_head_read(const skv_cache *c, int layer, int head, float *k, float *v,
                               int32_t *pos, skv_err *err) {
    if (!c) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no cache given");
    if (!head_ok(c, layer, head))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "no (layer %d, kv head %d) in this cache",
                           layer, head);
    const skv_cache_head *h = skv_cache_head_at_const(c, layer, head);
    for (int i = 0; i < h->n; i++) {
        size_t off = (size_t)i * c->row_bytes;
        if (k) row_load(c->type, h->k + off, k + (size_t)i * c->head_dim, c->head_dim);
        if (v) row_load(c->type, h->v + off, v + (size_t)i * c->head_dim, c->head_dim);
    }
    if (pos && h->n) memcpy(pos, h->pos, (size_t)h->n * sizeof(int32_t));
    return SKV_OK;
}

uint64_t skv_cache_bytes(const skv_cache *c, int layer) {
    if (!c) return 0;
    uint64_t n = 0;
    for (int l = 0; l < c->n_layer; l++) {
        if (layer >= 0 && l != layer) continue;
        for (int h = 0; h < c->n_head_kv; h++) n += (uint64_t)skv_cache_head_at_const(c, l, h)->n;
    }
    return n * (2 * (uint64_t)c->row_bytes + sizeof(int32_t));
}

uint64_t skv_cache_bytes_allocated(const skv_cache *c) {
    if (!c) return 0;
    uint64_t n = 0;
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) n += (uint64_t)c->heads[i].cap;
    return n * (2 * (uint64_t)c->row_bytes + sizeof(int32_t));
}

/* ---- selection --------------------------------------------------------------------------- */

/* Scratch for re-rotating keys: a float row, and the RoPE table (rope.h) of one distance,
 * reused while consecutive keys move by the same distance (all recent keys under sink_recent
 * do), since a table costs n_rot/2 sin/cos in double. The same descriptor rotated the keys in
 * the forward pass, so pairing mode, frequency factors and scaling always agree. */
typedef struct rotator {
    float *row; /* [head_dim] */
    float *cs;  /* [n_rot] */
    double delta;
    bool valid;
} rotator;

static bool rotator_init(rotator *r, const skv_cache *c) {
    r->row = malloc((size_t)c->head_dim * sizeof(float));
    r->cs = malloc(((size_t)c->rope.n_rot + 1) * sizeof(float));
    r->valid = false;
    r->delta = 0;
    return r->row && r->cs;
}

static void rotator_free(rotator *r) {
    free(r->row);
    free(r->cs);
}

/* Re-rotates the key of entry i of a head by delta positions (RoPE rotations compose). */
static void key_rotate(skv_cache *c, skv_cache_head *h, int i, double delta, rotator *r) {
    if (delta == 0) return;
    if (!r->valid || r->delta != delta) {
        skv_rope_turn_table(&c->rope, r->cs, delta);
        r->delta = delta;
        r->valid = true;
    }
    uint8_t *row = h->k + (size_t)i * c->row_bytes;
    row_load(c->type, row, r->row, c->head_dim);
    skv_rope_apply_table(&c->rope, r->row, r->cs);
    row_store(c->type, row, r->row, c->head_dim);
}

static skv_status check_positions(const skv_cache *c, int layer, int head, const int32_t *p, int n,
                                  skv_err *err) {
    if (n < 0 || (n > 0 && !p))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "invalid position list");
    for (int j = 1; j < n; j++)
        if (p[j] <= p[j - 1])
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "positions must be sorted and unique (layer %d: %d follows %d)",
                               layer, p[j], p[j - 1]);
    const skv_cache_head *h = skv_cache_head_at_const(c, layer, head);
    int i = 0;
    for (int j = 0; j < n; j++) {
        while (i < h->n && h->pos[i] < p[j]) i++;
        if (i == h->n || h->pos[i] != p[j])
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "position %d is not in the cache (layer %d, kv head %d)", p[j],
                               layer, head);
    }
    return SKV_OK;
}

/* Compacts a head to the (validated) positions: a forward copy, safe because the kept entries'
 * new slots never pass their old ones. Then the arrays shrink so the memory goes back. */
static void head_select(skv_cache *c, skv_cache_head *h, const int32_t *p, int n, rotator *rot) {
    int i = 0;
    for (int j = 0; j < n; j++) {
        while (h->pos[i] != p[j]) i++;
        if (i != j) {
            h->pos[j] = h->pos[i];
            memmove(h->k + (size_t)j * c->row_bytes, h->k + (size_t)i * c->row_bytes, c->row_bytes);
            memmove(h->v + (size_t)j * c->row_bytes, h->v + (size_t)i * c->row_bytes, c->row_bytes);
            /* rerotate mode keeps "entry j is rotated at j" true */
            if (c->mode == SKV_POSITIONS_REROTATE) key_rotate(c, h, j, (double)j - i, rot);
        }
        i++;
    }
    h->n = n;
    if (c->mode == SKV_POSITIONS_REROTATE) h->rope_shift = c->n_past - n;
    /* shrink so the memory goes back (a budget's heads keep the room it will refill); a failed
     * shrink keeps the larger block: still valid */
    head_set_cap(h, c->row_bytes, c->cap_hint > n ? SKV_MIN(c->cap_hint, h->cap) : n);
}

skv_status skv_cache_select_head(skv_cache *c, int layer, int head, const int32_t *positions,
                                 int n_positions, skv_err *err) {
    if (!c) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no cache given");
    if (!head_ok(c, layer, head))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "no (layer %d, kv head %d) in this cache",
                           layer, head);
    skv_status st = check_positions(c, layer, head, positions, n_positions, err);
    if (st) return st;
    rotator rot;
    if (!rotator_init(&rot, c)) {
        rotator_free(&rot);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    head_select(c, skv_cache_head_at(c, layer, head), positions, n_positions, &rot);
    rotator_free(&rot);
    return SKV_OK;
}

skv_status skv_cache_select_layer(skv_cache *c, int layer, const int32_t *positions,
                                  int n_positions, skv_err *err) {
    if (!c) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no cache given");
    if (layer < 0 || layer >= c->n_layer)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "no layer %d in this cache", layer);
    for (int h = 0; h < c->n_head_kv; h++) {
        skv_status st = check_positions(c, layer, h, positions, n_positions, err);
        if (st) return st;
    }
    rotator rot;
    if (!rotator_init(&rot, c)) {
        rotator_free(&rot);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    for (int h = 0; h < c->n_head_kv; h++)
        head_select(c, skv_cache_head_at(c, layer, h), positions, n_positions, &rot);
    rotator_free(&rot);
    return SKV_OK;
}

skv_status skv_cache_rerotate(skv_cache *c, skv_err *err) {
    if (!c) return skv_err_set(err, SKV_ERR_INVALID_ARG, "no cache given");
    if (c->mode == SKV_POSITIONS_REROTATE) return SKV_OK; /* invariant already holds */
    rotator rot;
    if (!rotator_init(&rot, c)) {
        rotator_free(&rot);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) {
        skv_cache_head *h = &c->heads[i];
        for (int j = 0; j < h->n; j++) key_rotate(c, h, j, (double)j - h->pos[j], &rot);
        h->rope_shift = c->n_past - h->n;
    }
    rotator_free(&rot);
    c->mode = SKV_POSITIONS_REROTATE;
    return SKV_OK;
}
