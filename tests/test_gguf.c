/* test_gguf.c — GGUF reader and writer: hand-built files (v2 and v3, every value type, nested
 * arrays), writer round trips (every tensor type, alignment, strings with NULs), and the shared
 * stories260K.gguf checked against its llama2.c checkpoint. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "kernels/kernels.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- a byte builder for hand-made files (independent of the writer) ------------------------- */

static void put_key(bbuf *b, const char *key, uint32_t type) {
    bbuf_str(b, key);
    bbuf_u32(b, type);
}
static void pad_to(bbuf *b, size_t align) {
    while (b->n % align) bbuf_u8(b, 0);
}

/* A file with one key of every scalar type, strings with NUL bytes and nested arrays, and one
 * F32 tensor [3, 2] holding 0..5. */
#define HAND_N_KV 17
static bbuf hand_file(uint32_t version) {
    bbuf b = {0};
    bbuf_put(&b, "GGUF", 4);
    bbuf_u32(&b, version);
    bbuf_u64(&b, 1);
    bbuf_u64(&b, HAND_N_KV);
    put_key(&b, "u8", SKV_GGUF_UINT8), bbuf_u8(&b, 250);
    put_key(&b, "i8", SKV_GGUF_INT8), bbuf_u8(&b, (uint8_t)-7);
    put_key(&b, "u16", SKV_GGUF_UINT16), bbuf_put(&b, &(uint16_t){65000}, 2);
    put_key(&b, "i16", SKV_GGUF_INT16), bbuf_put(&b, &(int16_t){-30000}, 2);
    put_key(&b, "u32", SKV_GGUF_UINT32), bbuf_u32(&b, 4000000000u);
    put_key(&b, "i32", SKV_GGUF_INT32), bbuf_put(&b, &(int32_t){-2000000000}, 4);
    put_key(&b, "f32", SKV_GGUF_FLOAT32), bbuf_put(&b, &(float){1.5f}, 4);
    put_key(&b, "bool", SKV_GGUF_BOOL), bbuf_u8(&b, 1);
    put_key(&b, "str", SKV_GGUF_STRING), bbuf_strn(&b, "a\0b", 3);
    put_key(&b, "u64", SKV_GGUF_UINT64), bbuf_u64(&b, UINT64_MAX);
    put_key(&b, "i64", SKV_GGUF_INT64), bbuf_put(&b, &(int64_t){INT64_MIN}, 8);
    put_key(&b, "f64", SKV_GGUF_FLOAT64), bbuf_put(&b, &(double){-0.125}, 8);
    /* [[1, 2], [], [3]] as int16 */
    put_key(&b, "nested", SKV_GGUF_ARRAY), bbuf_u32(&b, SKV_GGUF_ARRAY), bbuf_u64(&b, 3);
    bbuf_u32(&b, SKV_GGUF_INT16), bbuf_u64(&b, 2), bbuf_put(&b, (int16_t[]){1, 2}, 4);
    bbuf_u32(&b, SKV_GGUF_INT16), bbuf_u64(&b, 0);
    bbuf_u32(&b, SKV_GGUF_INT16), bbuf_u64(&b, 1), bbuf_put(&b, (int16_t[]){3}, 2);
    /* [["x", ""], [["deep"]]]: arrays of strings and of arrays of strings */
    put_key(&b, "nested_str", SKV_GGUF_ARRAY), bbuf_u32(&b, SKV_GGUF_ARRAY), bbuf_u64(&b, 2);
    bbuf_u32(&b, SKV_GGUF_STRING), bbuf_u64(&b, 2), bbuf_str(&b, "x"), bbuf_str(&b, "");
    bbuf_u32(&b, SKV_GGUF_ARRAY), bbuf_u64(&b, 1);
    bbuf_u32(&b, SKV_GGUF_STRING), bbuf_u64(&b, 1), bbuf_str(&b, "deep");
    put_key(&b, "bools", SKV_GGUF_ARRAY), bbuf_u32(&b, SKV_GGUF_BOOL), bbuf_u64(&b, 3);
    bbuf_put(&b, (uint8_t[]){1, 0, 1}, 3);
    put_key(&b, "f64s", SKV_GGUF_ARRAY), bbuf_u32(&b, SKV_GGUF_FLOAT64), bbuf_u64(&b, 2);
    bbuf_put(&b, (double[]){0.5, -1e300}, 16);
    put_key(&b, "empty", SKV_GGUF_ARRAY), bbuf_u32(&b, SKV_GGUF_UINT32), bbuf_u64(&b, 0);
    bbuf_str(&b, "t");
    bbuf_u32(&b, 2), bbuf_u64(&b, 3), bbuf_u64(&b, 2);
    bbuf_u32(&b, SKV_TYPE_F32), bbuf_u64(&b, 0);
    pad_to(&b, 32);
    bbuf_put(&b, (float[]){0, 1, 2, 3, 4, 5}, 24);
    return b;
}

static int64_t key_index(const skv_gguf *g, const char *k) {
    int64_t i = skv_gguf_find_key(g, k);
    assert_true(i >= 0);
    assert_string_equal(skv_gguf_key(g, i), k);
    return i;
}

/* Checks every value of hand_file (also used on its rewritten copy). */
static void check_hand(const skv_gguf *g) {
    int64_t v;
    double f;
    bool bo;
    size_t len;
    assert_int_equal(skv_gguf_n_kv(g), HAND_N_KV);
    assert_true(skv_gguf_kv_int(g, key_index(g, "u8"), &v) && v == 250);
    assert_true(skv_gguf_kv_int(g, key_index(g, "i8"), &v) && v == -7);
    assert_true(skv_gguf_kv_int(g, key_index(g, "u16"), &v) && v == 65000);
    assert_true(skv_gguf_kv_int(g, key_index(g, "i16"), &v) && v == -30000);
    assert_true(skv_gguf_kv_int(g, key_index(g, "u32"), &v) && v == 4000000000ll);
    assert_true(skv_gguf_kv_int(g, key_index(g, "i32"), &v) && v == -2000000000);
    assert_true(skv_gguf_kv_float(g, key_index(g, "f32"), &f) && f == 1.5);
    assert_false(skv_gguf_kv_int(g, key_index(g, "f32"), &v));
    assert_true(skv_gguf_kv_bool(g, key_index(g, "bool"), &bo) && bo);
    assert_true(skv_gguf_kv_int(g, key_index(g, "bool"), &v) && v == 1);
    assert_false(skv_gguf_kv_float(g, key_index(g, "bool"), &f));
    assert_false(skv_gguf_kv_bool(g, key_index(g, "u8"), &bo));
    const char *s = skv_gguf_kv_str(g, key_index(g, "str"), &len);
    assert_non_null(s);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "a\0b", 4); /* and NUL-terminated */
    assert_null(skv_gguf_kv_str(g, key_index(g, "u8"), &len));
    /* uint64 above INT64_MAX does not fit _int but does fit _float */
    assert_false(skv_gguf_kv_int(g, key_index(g, "u64"), &v));
    assert_true(skv_gguf_kv_float(g, key_index(g, "u64"), &f) && f == 18446744073709551615.0);
    assert_true(skv_gguf_kv_int(g, key_index(g, "i64"), &v) && v == INT64_MIN);
    assert_true(skv_gguf_kv_float(g, key_index(g, "f64"), &f) && f == -0.125);
    assert_true(skv_gguf_kv_float(g, key_index(g, "u16"), &f) && f == 65000.0);

    int64_t n = key_index(g, "nested");
    assert_int_equal(skv_gguf_kv_type(g, n), SKV_GGUF_ARRAY);
    assert_int_equal(skv_gguf_arr_type(g, n), SKV_GGUF_ARRAY);
    assert_int_equal(skv_gguf_arr_len(g, n), 3);
    assert_false(skv_gguf_arr_int(g, n, 0, &v)); /* elements are arrays */
    const skv_gguf_value *arr = skv_gguf_kv_value(g, n);
    const uint64_t lens[3] = {2, 0, 1};
    const int64_t want[3][2] = {{1, 2}, {0, 0}, {3, 0}};
    for (uint64_t j = 0; j < 3; j++) {
        const skv_gguf_value *e = skv_gguf_value_arr_elem(arr, j);
        assert_non_null(e);
        assert_int_equal(skv_gguf_value_type(e), SKV_GGUF_ARRAY);
        assert_int_equal(skv_gguf_value_arr_type(e), SKV_GGUF_INT16);
        assert_int_equal(skv_gguf_value_arr_len(e), lens[j]);
        for (uint64_t k = 0; k < lens[j]; k++)
            assert_true(skv_gguf_value_arr_int(e, k, &v) && v == want[j][k]);
        assert_false(skv_gguf_value_arr_int(e, lens[j], &v)); /* out of range */
    }
    assert_null(skv_gguf_value_arr_elem(arr, 3));

    arr = skv_gguf_kv_value(g, key_index(g, "nested_str"));
    const skv_gguf_value *e0 = skv_gguf_value_arr_elem(arr, 0);
    assert_int_equal(skv_gguf_value_arr_type(e0), SKV_GGUF_STRING);
    assert_string_equal(skv_gguf_value_str(g, skv_gguf_value_arr_elem(e0, 0), &len), "x");
    assert_string_equal(skv_gguf_value_str(g, skv_gguf_value_arr_elem(e0, 1), &len), "");
    assert_int_equal(len, 0);
    const skv_gguf_value *e1 = skv_gguf_value_arr_elem(arr, 1);
    const skv_gguf_value *deep = skv_gguf_value_arr_elem(e1, 0);
    assert_int_equal(skv_gguf_value_arr_type(deep), SKV_GGUF_STRING);
    assert_string_equal(skv_gguf_value_str(g, skv_gguf_value_arr_elem(deep, 0), NULL), "deep");

    int64_t bi = key_index(g, "bools");
    assert_int_equal(skv_gguf_arr_type(g, bi), SKV_GGUF_BOOL);
    for (uint64_t j = 0; j < 3; j++) assert_true(skv_gguf_arr_int(g, bi, j, &v) && v == (j != 1));
    int64_t fi = key_index(g, "f64s");
    assert_true(skv_gguf_arr_float(g, fi, 0, &f) && f == 0.5);
    assert_true(skv_gguf_arr_float(g, fi, 1, &f) && f == -1e300);
    assert_false(skv_gguf_arr_int(g, fi, 0, &v));
    int64_t ei = key_index(g, "empty");
    assert_int_equal(skv_gguf_arr_type(g, ei), SKV_GGUF_UINT32);
    assert_int_equal(skv_gguf_arr_len(g, ei), 0);
    assert_int_equal(skv_gguf_find_key(g, "missing"), -1);

    assert_int_equal(skv_gguf_n_tensors(g), 1);
    const skv_gguf_tensor *t = skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "t"));
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 3);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->size, 24);
    assert_memory_equal(t->data, ((float[]){0, 1, 2, 3, 4, 5}), 24);
    assert_int_equal(skv_gguf_find_tensor(g, "u"), -1);
    assert_null(skv_gguf_tensor_at(g, 1));
}

static void test_hand_v3_and_v2(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        bbuf b = hand_file(version);
        skv_err err = {0};
        skv_gguf *g = skv_gguf_open_memory(b.p, b.n, &err);
        assert_non_null(g);
        assert_int_equal(skv_gguf_version(g), version);
        assert_int_equal(skv_gguf_alignment(g), 32);
        check_hand(g);
        skv_gguf_close(g);
        free(b.p);
    }
}

static void test_v1_rejected(void **state) {
    (void)state;
    bbuf b = hand_file(3);
    uint32_t one = 1;
    memcpy(b.p + 4, &one, 4);
    skv_err err = {0};
    assert_null(skv_gguf_open_memory(b.p, b.n, &err));
    assert_int_equal(err.status, SKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "version 1"));
    free(b.p);
}

static bool skip_ints(const char *key) {
    return !strcmp(key, "u8") || !strcmp(key, "i8") || !strcmp(key, "u16") || !strcmp(key, "i16");
}

/* Reader -> copy_kv -> writer -> reader keeps every value, nested arrays included. */
static void test_copy_kv_round_trip(void **state) {
    (void)state;
    bbuf b = hand_file(2);
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open_memory(b.p, b.n, &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, NULL), SKV_OK);
    const skv_gguf_tensor *t = skv_gguf_tensor_at(g, 0);
    assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                     SKV_OK);
    const char *path = test_tmp_path(".gguf");
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf *g2 = skv_gguf_open(path, &err);
    assert_non_null(g2);
    assert_int_equal(skv_gguf_version(g2), 3);
    check_hand(g2);
    /* same key order as the source */
    for (int64_t i = 0; i < HAND_N_KV; i++)
        assert_string_equal(skv_gguf_key(g, i), skv_gguf_key(g2, i));
    skv_gguf_close(g2);

    /* skip drops keys */
    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, skip_ints), SKV_OK);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    g2 = skv_gguf_open(path, &err);
    assert_non_null(g2);
    assert_int_equal(skv_gguf_n_kv(g2), HAND_N_KV - 4);
    assert_int_equal(skv_gguf_find_key(g2, "u8"), -1);
    assert_true(skv_gguf_find_key(g2, "nested") >= 0);
    assert_int_equal(skv_gguf_n_tensors(g2), 0);
    skv_gguf_close(g2);
    skv_gguf_close(g);
    unlink(path);
    free(b.p);
}

/* Deterministic filler bytes. */
static void fill(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static void test_writer_round_trip(void **state) {
    (void)state;
    static const skv_type types[] = {SKV_TYPE_F32,    SKV_TYPE_F16,    SKV_TYPE_BF16, SKV_TYPE_Q8_0,
                                     SKV_TYPE_Q4_0,   SKV_TYPE_Q5_0,   SKV_TYPE_Q4_1, SKV_TYPE_Q5_1,
                                     SKV_TYPE_Q4_K,   SKV_TYPE_Q5_K,   SKV_TYPE_Q6_K, SKV_TYPE_Q3_K,
                                     SKV_TYPE_IQ4_NL, SKV_TYPE_IQ4_XS, SKV_TYPE_Q2_K};
    enum { NT = sizeof types / sizeof types[0] };
    const uint64_t aligns[] = {0 /* default */, 64, 1};
    for (size_t ai = 0; ai < 3; ai++) {
        skv_gguf_writer *w = skv_gguf_writer_new();
        assert_non_null(w);
        assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", "llama"), SKV_OK);
        if (aligns[ai])
            assert_int_equal(skv_gguf_writer_set_u32(w, "general.alignment", (uint32_t)aligns[ai]),
                             SKV_OK);
        assert_int_equal(skv_gguf_writer_set_u32(w, "a.u32", 7), SKV_OK);
        assert_int_equal(skv_gguf_writer_set_i32(w, "a.i32", -9), SKV_OK);
        assert_int_equal(skv_gguf_writer_set_u64(w, "a.u64", 1ull << 40), SKV_OK);
        assert_int_equal(skv_gguf_writer_set_f32(w, "a.f32", 0.1f), SKV_OK);
        assert_int_equal(skv_gguf_writer_set_bool(w, "a.bool", false), SKV_OK);
        assert_int_equal(skv_gguf_writer_set_u32(w, "a.u32", 8), SKV_OK); /* last value wins */
        const char *strs[] = {"tok\0en", "", "\xe2\x96\x81the"};
        const size_t lens[] = {6, 0, 6};
        assert_int_equal(skv_gguf_writer_set_arr_str(w, "a.strs", strs, lens, 3), SKV_OK);
        const char *cstrs[] = {"x", "yz"};
        assert_int_equal(skv_gguf_writer_set_arr_str(w, "a.cstrs", cstrs, NULL, 2), SKV_OK);
        const float fs[] = {-0.0f, 1.0f, 3.25f};
        assert_int_equal(skv_gguf_writer_set_arr(w, "a.f32s", SKV_GGUF_FLOAT32, fs, 3), SKV_OK);
        const int8_t i8s[] = {-128, 127};
        assert_int_equal(skv_gguf_writer_set_arr(w, "a.i8s", SKV_GGUF_INT8, i8s, 2), SKV_OK);
        const uint8_t bs[] = {0, 1};
        assert_int_equal(skv_gguf_writer_set_arr(w, "a.bools", SKV_GGUF_BOOL, bs, 2), SKV_OK);
        assert_int_equal(skv_gguf_writer_set_arr(w, "a.none", SKV_GGUF_INT64, NULL, 0), SKV_OK);

        uint8_t *data[NT];
        size_t sizes[NT];
        int64_t ne[NT][4];
        for (int i = 0; i < NT; i++) {
            int bsz = skv_type_block_size(types[i]);
            int n_dims = 1 + i % 4;
            int64_t d[4] = {bsz * (1 + i % 3), 3, 2, 1};
            for (int k = 0; k < 4; k++) ne[i][k] = k < n_dims ? d[k] : 1;
            sizes[i] = skv_row_bytes(types[i], ne[i][0]) * (size_t)(ne[i][1] * ne[i][2] * ne[i][3]);
            data[i] = malloc(sizes[i]);
            fill(data[i], sizes[i], (uint32_t)i);
            char name[32];
            snprintf(name, sizeof name, "t.%s", skv_type_name(types[i]));
            assert_int_equal(skv_gguf_writer_add_tensor(w, name, types[i], n_dims, ne[i], data[i]),
                             SKV_OK);
        }
        const char *path = test_tmp_path(".gguf");
        skv_err err = {0};
        assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
        skv_gguf_writer_free(w);

        skv_gguf *g = skv_gguf_open(path, &err);
        assert_non_null(g);
        uint64_t align = aligns[ai] ? aligns[ai] : 32;
        assert_int_equal(skv_gguf_alignment(g), align);
        assert_int_equal(skv_gguf_n_kv(g), aligns[ai] ? 13 : 12);
        /* insertion order: a.u32 keeps its first position */
        int64_t first = aligns[ai] ? 2 : 1;
        assert_string_equal(skv_gguf_key(g, first), "a.u32");
        assert_string_equal(skv_gguf_key(g, first + 1), "a.i32");
        int64_t v;
        double f;
        size_t len;
        bool bo = true;
        assert_true(skv_gguf_get_int(g, "a.u32", &v) && v == 8);
        assert_int_equal(skv_gguf_kv_type(g, skv_gguf_find_key(g, "a.u32")), SKV_GGUF_UINT32);
        assert_true(skv_gguf_get_int(g, "a.i32", &v) && v == -9);
        assert_true(skv_gguf_get_int(g, "a.u64", &v) && v == (1ll << 40));
        assert_true(skv_gguf_get_float(g, "a.f32", &f) && f == (double)0.1f);
        assert_true(skv_gguf_kv_bool(g, skv_gguf_find_key(g, "a.bool"), &bo) && !bo);
        assert_string_equal(skv_gguf_get_str(g, "general.architecture"), "llama");
        int64_t si = skv_gguf_find_key(g, "a.strs");
        assert_int_equal(skv_gguf_arr_len(g, si), 3);
        for (uint64_t j = 0; j < 3; j++) {
            const char *s = skv_gguf_arr_str(g, si, j, &len);
            assert_int_equal(len, lens[j]);
            assert_memory_equal(s, strs[j], len);
            assert_int_equal(s[len], 0);
        }
        si = skv_gguf_find_key(g, "a.cstrs");
        assert_string_equal(skv_gguf_arr_str(g, si, 1, &len), "yz");
        int64_t fi = skv_gguf_find_key(g, "a.f32s");
        for (uint64_t j = 0; j < 3; j++) {
            assert_true(skv_gguf_arr_float(g, fi, j, &f));
            assert_memory_equal(&(float){(float)f}, &fs[j], 4); /* keeps -0.0 */
        }
        int64_t ii = skv_gguf_find_key(g, "a.i8s");
        assert_true(skv_gguf_arr_int(g, ii, 0, &v) && v == -128);
        assert_true(skv_gguf_arr_int(g, ii, 1, &v) && v == 127);
        int64_t bi = skv_gguf_find_key(g, "a.bools");
        assert_int_equal(skv_gguf_arr_type(g, bi), SKV_GGUF_BOOL);
        assert_true(skv_gguf_arr_int(g, bi, 1, &v) && v == 1);
        assert_int_equal(skv_gguf_arr_len(g, skv_gguf_find_key(g, "a.none")), 0);

        size_t fsize;
        const uint8_t *base = skv_gguf_file_data(g, &fsize);
        assert_int_equal(skv_gguf_data_offset(g) % align, 0);
        assert_int_equal(skv_gguf_n_tensors(g), NT);
        for (int i = 0; i < NT; i++) {
            const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
            char name[32];
            snprintf(name, sizeof name, "t.%s", skv_type_name(types[i]));
            assert_string_equal(t->name, name);
            assert_int_equal(skv_gguf_find_tensor(g, name), i);
            assert_int_equal(t->type, types[i]);
            assert_int_equal(t->n_dims, 1 + i % 4);
            for (int k = 0; k < 4; k++) assert_int_equal(t->ne[k], ne[i][k]);
            assert_int_equal(t->size, sizes[i]);
            assert_int_equal(t->offset % align, 0);
            assert_int_equal((size_t)((const uint8_t *)t->data - base) % align, 0);
            assert_memory_equal(t->data, data[i], sizes[i]);
            free(data[i]);
        }
        skv_gguf_close(g);
        unlink(path);
    }
}

static void test_writer_errors(void **state) {
    (void)state;
    skv_err err = {0};
    float d[32] = {0};
    /* bad tensors are reported by write, with the name */
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_add_tensor(w, "q", SKV_TYPE_Q8_0, 1, (int64_t[]){31}, d),
                     SKV_ERR_INVALID_ARG);
    const char *path = test_tmp_path(".gguf");
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "'q'"));
    assert_non_null(strstr(err.msg, "block size"));
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    skv_gguf_writer_free(w);

    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_add_tensor(w, "a", SKV_TYPE_F32, 1, (int64_t[]){4}, d),
                     SKV_OK);
    assert_int_equal(skv_gguf_writer_add_tensor(w, "a", SKV_TYPE_F32, 1, (int64_t[]){4}, d),
                     SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "duplicate tensor name 'a'"));
    skv_gguf_writer_free(w);

    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_add_tensor(w, "z", SKV_TYPE_F32, 2, (int64_t[]){4, 0}, d),
                     SKV_ERR_INVALID_ARG);
    skv_gguf_writer_free(w);
    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_add_tensor(w, "z", (skv_type)3, 1, (int64_t[]){4}, d),
                     SKV_ERR_INVALID_ARG);
    skv_gguf_writer_free(w);

    /* alignment must be a power of two */
    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_set_u32(w, "general.alignment", 48), SKV_OK);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "power of two"));
    skv_gguf_writer_free(w);

    /* unwritable directory: I/O error naming the path, no file */
    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err), SKV_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gguf"));
    skv_gguf_writer_free(w);
    skv_gguf_writer_free(NULL);

    /* a failed open names the file */
    assert_null(skv_gguf_open("/nonexistent-dir/x.gguf", &err));
    assert_int_equal(err.status, SKV_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gguf"));
    skv_gguf_close(NULL);
}

/* An existing file is replaced only by a complete one. */
static void test_writer_replaces_atomically(void **state) {
    (void)state;
    const char *p = test_tmp_path(".gguf");
    char path[4096];
    snprintf(path, sizeof path, "%s", p);
    skv_err err = {0};
    skv_gguf_writer *w = skv_gguf_writer_new();
    skv_gguf_writer_set_u32(w, "k", 1);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    w = skv_gguf_writer_new();
    skv_gguf_writer_set_u32(w, "general.alignment", 3); /* fails before touching the file */
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_ERR_INVALID_ARG);
    skv_gguf_writer_free(w);
    skv_gguf *g = skv_gguf_open(path, &err);
    assert_non_null(g);
    int64_t v;
    assert_true(skv_gguf_get_int(g, "k", &v) && v == 1);
    skv_gguf_close(g);
    unlink(path);
}

/* The shared model: facts from its README, tensor data checked against the llama2.c
 * checkpoint it was converted from (v1 layout, 256-byte header). */
static void test_shared_stories260k(void **state) {
    (void)state;
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    if (!g) {
        print_message("skipping: %s\n", err.msg);
        skip();
    }
    assert_int_equal(skv_gguf_version(g), 3);
    assert_int_equal(skv_gguf_n_kv(g), 22);
    assert_int_equal(skv_gguf_n_tensors(g), 47);
    assert_int_equal(skv_gguf_alignment(g), 32);
    assert_string_equal(skv_gguf_get_str(g, "general.architecture"), "llama");
    assert_string_equal(skv_gguf_get_str(g, "tokenizer.ggml.model"), "llama");
    int64_t v;
    double f;
    const struct {
        const char *k;
        int64_t v;
    } ints[] = {{"llama.context_length", 512},         {"llama.embedding_length", 64},
                {"llama.feed_forward_length", 172},    {"llama.block_count", 5},
                {"llama.attention.head_count", 8},     {"llama.attention.head_count_kv", 4},
                {"llama.rope.dimension_count", 8},     {"llama.vocab_size", 512},
                {"tokenizer.ggml.bos_token_id", 1},    {"tokenizer.ggml.eos_token_id", 2},
                {"tokenizer.ggml.unknown_token_id", 0}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        assert_true(skv_gguf_get_int(g, ints[i].k, &v));
        assert_int_equal(v, ints[i].v);
    }
    assert_true(skv_gguf_get_float(g, "llama.rope.freq_base", &f) && f == 10000.0);
    assert_true(skv_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f));
    assert_true(f == (double)1e-5f);
    int64_t ti = skv_gguf_find_key(g, "tokenizer.ggml.tokens");
    assert_int_equal(skv_gguf_arr_type(g, ti), SKV_GGUF_STRING);
    assert_int_equal(skv_gguf_arr_len(g, ti), 512);
    size_t len;
    assert_string_equal(skv_gguf_arr_str(g, ti, 0, &len), "<unk>");
    assert_string_equal(skv_gguf_arr_str(g, ti, 1, &len), "<s>");
    assert_string_equal(skv_gguf_arr_str(g, ti, 3, &len), "<0x00>");
    assert_string_equal(skv_gguf_arr_str(g, ti, 259, &len), "\xe2\x96\x81t");
    int64_t ty = skv_gguf_find_key(g, "tokenizer.ggml.token_type");
    assert_true(skv_gguf_arr_int(g, ty, 0, &v) && v == 2);
    assert_true(skv_gguf_arr_int(g, ty, 2, &v) && v == 3);
    assert_true(skv_gguf_arr_int(g, ty, 258, &v) && v == 6);
    assert_true(skv_gguf_arr_int(g, ty, 259, &v) && v == 1);
    int64_t sc = skv_gguf_find_key(g, "tokenizer.ggml.scores");
    assert_true(skv_gguf_arr_float(g, sc, 261, &f) && f == -2.0);

    assert_int_equal(skv_gguf_find_tensor(g, "output.weight"), -1);
    const skv_gguf_tensor *emb =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "token_embd.weight"));
    assert_non_null(emb);
    assert_int_equal(emb->type, SKV_TYPE_F32);
    assert_int_equal(emb->ne[0], 64);
    assert_int_equal(emb->ne[1], 512);
    assert_int_equal(emb->size, 64 * 512 * 4);
    const skv_gguf_tensor *k3 =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "blk.3.attn_k.weight"));
    assert_non_null(k3);
    assert_int_equal(k3->n_dims, 2);
    assert_int_equal(k3->ne[0], 64);
    assert_int_equal(k3->ne[1], 32);
    const skv_gguf_tensor *fd =
        skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "blk.4.ffn_down.weight"));
    assert_int_equal(fd->ne[0], 172);
    assert_int_equal(fd->ne[1], 64);

    size_t csize;
    const char *ck_path = test_fixture_path("stories260K/stories260K.bin"); /* optional */
    uint8_t *ck = ck_path ? test_read_file(ck_path, &csize) : NULL;
    if (ck) {
        /* v1: header 256, rms_att[5,64], rms_ffn[5,64], rms_final[64], tok_embeddings,
         * wq[5,64,64], wk[5,32,64] */
        size_t emb_off = 256 + (5 * 64 + 5 * 64 + 64) * 4;
        assert_memory_equal(emb->data, ck + emb_off, emb->size);
        size_t wk_off = emb_off + 512 * 64 * 4 + 5 * 64 * 64 * 4 + 3 * 32 * 64 * 4;
        assert_memory_equal(k3->data, ck + wk_off, k3->size);
        const skv_gguf_tensor *on =
            skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, "output_norm.weight"));
        assert_memory_equal(on->data, ck + 256 + 10 * 64 * 4, 64 * 4);
        free(ck);
    }
    skv_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_v3_and_v2),
        cmocka_unit_test(test_v1_rejected),
        cmocka_unit_test(test_copy_kv_round_trip),
        cmocka_unit_test(test_writer_round_trip),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_replaces_atomically),
        cmocka_unit_test(test_shared_stories260k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
