/* test_cache.c — the per-head cache on hand-made rows: append, select (compaction, validation,
 * atomicity), clone isolation, byte accounting, re-rotation against a fresh RoPE. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

enum { L = 2, H = 3, D = 8, T = 40 };

/* Entry values encode (layer, head, position) so a compaction mistake shows. */
static float val(int l, int h, int p, int i, int which) {
    return (float)(which * 10000 + l * 1000 + h * 100 + p) + (float)i / 16;
}

static skv_cache *filled(skv_type type) {
    skv_err err = {0};
    skv_cache *c = skv_cache_new(L, H, D, D, 10000.0f, type, 64, &err);
    assert_non_null(c);
    assert_int_equal(skv_cache_reserve(c, T, &err), SKV_OK);
    float k[D], v[D];
    for (int p = 0; p < T; p++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                for (int i = 0; i < D; i++) {
                    k[i] = val(l, h, p, i, 0);
                    v[i] = val(l, h, p, i, 1);
                }
                skv_cache_append(c, l, h, p, k, v);
            }
    c->n_past = T;
    return c;
}

static void check_head(const skv_cache *c, int l, int h, const int32_t *want, int n) {
    assert_int_equal(skv_cache_head_len(c, l, h), n);
    float k[T * D], v[T * D];
    int32_t pos[T];
    skv_err err = {0};
    assert_int_equal(skv_cache_head_read(c, l, h, k, v, pos, &err), SKV_OK);
    for (int j = 0; j < n; j++) {
        assert_int_equal(pos[j], want[j]);
        for (int i = 0; i < D; i++) {
            assert_true(k[j * D + i] == val(l, h, want[j], i, 0));
            assert_true(v[j * D + i] == val(l, h, want[j], i, 1));
        }
    }
}

static void test_dense_and_bytes(void **state) {
    (void)state;
    skv_cache *c = filled(SKV_TYPE_F32);
    int32_t all[T];
    for (int p = 0; p < T; p++) all[p] = p;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) check_head(c, l, h, all, T);
    /* K + V rows of D floats and one int32 position per entry */
    assert_int_equal(skv_cache_bytes(c, -1), (uint64_t)L * H * T * (2 * D * 4 + 4));
    assert_int_equal(skv_cache_bytes(c, 1), (uint64_t)H * T * (2 * D * 4 + 4));
    assert_int_equal(skv_cache_head_count_upto(skv_cache_head_at(c, 0, 0), 9), 10);
    assert_int_equal(skv_cache_head_count_upto(skv_cache_head_at(c, 0, 0), -1), 0);
    skv_cache_free(c);
}

static void test_select_layer_and_head(void **state) {
    (void)state;
    skv_cache *c = filled(SKV_TYPE_F32);
    skv_err err = {0};
    int32_t keep0[] = {0, 1, 5, 17, 39};
    assert_int_equal(skv_cache_select_layer(c, 0, keep0, 5, &err), SKV_OK);
    for (int h = 0; h < H; h++) check_head(c, 0, h, keep0, 5);
    int32_t keep1[] = {3, 38};
    assert_int_equal(skv_cache_select_head(c, 1, 2, keep1, 2, &err), SKV_OK);
    check_head(c, 1, 2, keep1, 2);
    assert_int_equal(skv_cache_head_len(c, 1, 0), T); /* other heads untouched */
    assert_int_equal(skv_cache_n_past(c), T);         /* logical length survives */
    assert_int_equal(skv_cache_bytes(c, -1), (uint64_t)(3 * 5 + 2 * T + 2) * (2 * D * 4 + 4));
    /* memory was released: capacity equals length after a selection */
    assert_int_equal(skv_cache_head_at(c, 0, 0)->cap, 5);
    /* selecting again from the survivors */
    int32_t keep2[] = {1, 39};
    assert_int_equal(skv_cache_select_layer(c, 0, keep2, 2, &err), SKV_OK);
    for (int h = 0; h < H; h++) check_head(c, 0, h, keep2, 2);
    skv_cache_free(c);
}

static void test_select_rejects_bad_lists(void **state) {
    (void)state;
    skv_cache *c = filled(SKV_TYPE_F32);
    skv_err err = {0};
    int32_t unsorted[] = {3, 2}, dup[] = {2, 2}, range[] = {5, 40}, neg[] = {-1, 2};
    assert_int_equal(skv_cache_select_layer(c, 0, unsorted, 2, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "sorted"));
    assert_int_equal(skv_cache_select_layer(c, 0, dup, 2, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_select_layer(c, 0, range, 2, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "not in the cache"));
    assert_int_equal(skv_cache_select_layer(c, 0, neg, 2, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_select_layer(c, 2, dup, 1, &err), SKV_ERR_INVALID_ARG);
    /* a list valid for head 0 but not head 1 changes nothing in either */
    int32_t ok[] = {1, 2};
    assert_int_equal(skv_cache_select_head(c, 0, 1, ok, 2, &err), SKV_OK);
    int32_t three[] = {1, 2, 3};
    assert_int_equal(skv_cache_select_layer(c, 0, three, 3, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_head_len(c, 0, 0), T);
    skv_cache_free(c);
}

static void test_clone_isolated(void **state) {
    (void)state;
    skv_cache *c = filled(SKV_TYPE_F16);
    skv_err err = {0};
    skv_cache *d = skv_cache_clone(c, &err);
    assert_non_null(d);
    int32_t keep[] = {4};
    assert_int_equal(skv_cache_select_layer(d, 1, keep, 1, &err), SKV_OK);
    assert_int_equal(skv_cache_head_len(c, 1, 0), T);
    assert_int_equal(skv_cache_head_len(d, 1, 0), 1);
    assert_int_equal(skv_cache_n_past(d), T);
    skv_cache_free(c);
    skv_cache_free(d);
}

/* Re-rotating moves each retained key from RoPE(pos) to RoPE(index): compare with a fresh
 * rotation of the unrotated key. */
static void test_rerotate(void **state) {
    (void)state;
    skv_err err = {0};
    skv_cache *c = skv_cache_new(1, 1, D, D, 10000.0f, SKV_TYPE_F32, 64, &err);
    assert_int_equal(skv_cache_reserve(c, T, &err), SKV_OK);
    float raw[T][D], k[D], v[D] = {0};
    for (int p = 0; p < T; p++) {
        for (int i = 0; i < D; i++) raw[p][i] = sinf((float)(p * D + i));
        memcpy(k, raw[p], sizeof k);
        skv_rope_ref(k, D, D, p, 10000.0f);
        skv_cache_append(c, 0, 0, p, k, v);
    }
    c->n_past = T;
    int32_t keep[] = {0, 1, 20, 33, 39};
    assert_int_equal(skv_cache_select_layer(c, 0, keep, 5, &err), SKV_OK);
    assert_int_equal(skv_cache_rerotate(c, &err), SKV_OK);
    assert_int_equal(skv_cache_position_mode(c), SKV_POSITIONS_REROTATE);
    assert_int_equal(skv_cache_head_at(c, 0, 0)->rope_shift, T - 5);
    float got[5 * D];
    assert_int_equal(skv_cache_head_read(c, 0, 0, got, NULL, NULL, &err), SKV_OK);
    for (int j = 0; j < 5; j++) {
        memcpy(k, raw[keep[j]], sizeof k);
        skv_rope_ref(k, D, D, j, 10000.0f);
        for (int i = 0; i < D; i++) assert_true(fabsf(got[j * D + i] - k[i]) < 1e-5f);
    }
    /* a second selection in rerotate mode keeps "entry j is rotated at j" */
    int32_t keep2[] = {20, 39};
    assert_int_equal(skv_cache_select_layer(c, 0, keep2, 2, &err), SKV_OK);
    assert_int_equal(skv_cache_head_read(c, 0, 0, got, NULL, NULL, &err), SKV_OK);
    for (int j = 0; j < 2; j++) {
        memcpy(k, raw[keep2[j]], sizeof k);
        skv_rope_ref(k, D, D, j, 10000.0f);
        for (int i = 0; i < D; i++) assert_true(fabsf(got[j * D + i] - k[i]) < 1e-5f);
    }
    assert_int_equal(skv_cache_head_at(c, 0, 0)->rope_shift, T - 2);
    skv_cache_free(c);
}

static void test_new_rejects(void **state) {
    (void)state;
    skv_err err = {0};
    assert_null(skv_cache_new(1, 1, 8, 8, 1e4f, SKV_TYPE_Q8_0, 16, &err));
    assert_non_null(strstr(err.msg, "multiple of 32"));
    assert_null(skv_cache_new(1, 1, 64, 64, 1e4f, SKV_TYPE_Q4_0, 16, &err));
    assert_null(skv_cache_new(0, 1, 64, 64, 1e4f, SKV_TYPE_F32, 16, &err));
    skv_cache *c = skv_cache_new(1, 2, 64, 64, 1e4f, SKV_TYPE_Q8_0, 16, &err);
    assert_non_null(c);
    assert_int_equal(c->row_bytes, 2 * 34);
    skv_cache_free(c);
}

/* The fallible cache calls refuse a NULL cache with SKV_ERR_INVALID_ARG (they crashed); the
 * accessors answer 0 / NULL. */
static void test_null_cache(void **state) {
    (void)state;
    skv_err err = {0};
    float k[D];
    int32_t pos[1] = {0};
    assert_int_equal(skv_cache_head_read(NULL, 0, 0, k, NULL, NULL, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_select_head(NULL, 0, 0, pos, 1, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_select_layer(NULL, 0, pos, 1, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "no cache"));
    assert_int_equal(skv_cache_rerotate(NULL, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_cache_head_len(NULL, 0, 0), 0);
    assert_null(skv_cache_head_positions(NULL, 0, 0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_and_bytes),
        cmocka_unit_test(test_select_layer_and_head),
        cmocka_unit_test(test_select_rejects_bad_lists),
        cmocka_unit_test(test_clone_isolated),
        cmocka_unit_test(test_rerotate),
        cmocka_unit_test(test_new_rejects),
        cmocka_unit_test(test_null_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
