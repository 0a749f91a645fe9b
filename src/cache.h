/* cache.h — the KV cache's internal layout.
 *
 * One skv_cache_head per (layer, kv head), each with its own arrays, so a selection can keep a
 * different subset in every head and give the freed memory back (the arrays shrink).
 *   pos[n]               logical positions, ascending (causality is decided on these)
 *   k[n][row_bytes]      keys after RoPE, in the cache type
 *   v[n][row_bytes]      values, in the cache type
 * rope_shift: 0 in original mode. In rerotate mode the keys sit at rotation index 0..n-1 and a
 * token appended at logical position p is rotated at p - rope_shift (per head). */
#ifndef SKV_CACHE_H
#define SKV_CACHE_H

#include "common.h"
#include "rope.h"

typedef struct skv_cache_head {
    int32_t *pos; /* [cap] */
    uint8_t *k;   /* [cap, row_bytes] */
    uint8_t *v;   /* [cap, row_bytes] */
    int n, cap;
    int32_t rope_shift;
} skv_cache_head;

struct skv_cache {
    int n_layer, n_head_kv, head_dim;
    skv_rope_spec rope; /* how keys were rotated (re-rotation composes with it) */
    skv_type type;
    size_t row_bytes; /* bytes of one K (or V) row in type */
    int n_past;       /* logical length T */
    int n_ctx;        /* maximum logical length */
    skv_position_mode mode;
    skv_cache_head *heads; /* [n_layer * n_head_kv] */
    /* > 0 under a decoding budget: max_entries + interval, the most a head will hold. Growth
     * stops there and a cut keeps that room, instead of shrinking to the cut and growing by
     * half again before the next (2 remaps per array and head per cut, and 1.5x reported). */
    int cap_hint;
};

static inline skv_cache_head *skv_cache_head_at(skv_cache *c, int layer, int head) {
    return &c->heads[(size_t)layer * (size_t)c->n_head_kv + (size_t)head];
}
static inline const skv_cache_head *skv_cache_head_at_const(const skv_cache *c, int layer,
                                                            int head) {
    return &c->heads[(size_t)layer * (size_t)c->n_head_kv + (size_t)head];
}

skv_cache *skv_cache_new(int n_layer, int n_head_kv, int head_dim, int n_rot, float rope_theta,
                         skv_type type, int n_ctx, skv_err *err);
/* Sets the RoPE the keys are rotated with (skv_cache_new assumes adjacent pairs, no scaling,
 * no factors). r->factors must outlive the cache (the model owns them). */
void skv_cache_set_rope(skv_cache *c, const skv_rope_spec *r);
void skv_cache_free(skv_cache *c);
skv_cache *skv_cache_clone(const skv_cache *c, skv_err *err);
/* Empties every head (n_past 0, original positions) and keeps the arrays for the next appends;
 * skv_cache_free gives them back. */
void skv_cache_clear(skv_cache *c);
/* Drops every entry at a position >= n_past (the tail of each head) and sets n_past: undoes
 * appends, keeping the arrays. Original positions only (the positions are the tokens'). */
void skv_cache_drop_from(skv_cache *c, int n_past);
/* Each head's capacity, caps[n_layer * n_head_kv] (skv_cache_caps), and back to it: heads that
 * grew since shrink again (their entries must fit). */
void skv_cache_caps(const skv_cache *c, int *caps);
void skv_cache_restore_caps(skv_cache *c, const int *caps);
/* Makes room for n more entries in every head (grows geometrically, up to n_ctx). */
skv_status skv_cache_reserve(skv_cache *c, int n_more, skv_err *err);
/* Room for exactly n_more more entries in every head (at most n_ctx), where reserve grows by
 * half as much again for appends to come: skv_context_reserve. */
skv_status skv_cache_room(skv_cache *c, int n_more, skv_err *err);
/* Appends one entry (already rotated key, value, given as float rows [head_dim]) to a head.
 * Room must have been reserved. */
void skv_cache_append(skv_cache *c, int layer, int head, int32_t pos, const float *k,
                      const float *v);
/* Writes entry n + i of a head without counting it yet, so that a batch's entries can be
 * written in parallel; skv_cache_commit then counts n_new entries in every head of a layer.
 * Room must have been reserved; positions must stay ascending. */
void skv_cache_store(skv_cache *c, int layer, int head, int i, int32_t pos, const float *k,
                     const float *v);
void skv_cache_commit(skv_cache *c, int layer, int n_new);
/* Number of entries of a head with pos <= p (positions are sorted). */
int skv_cache_head_count_upto(const skv_cache_head *h, int32_t p);

#endif
