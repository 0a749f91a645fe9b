/* test_gguf_malformed.c — the GGUF reader on hostile input. A small valid file is built by hand
 * with the offset of every field recorded; each case patches or truncates it and checks that
 * opening fails with a message naming the problem (and, under ASan, without a crash, leak or
 * huge allocation). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "kernels/kernels.h"
#include "support.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Field offsets of the valid file. */
typedef struct layout {
    size_t version, n_tensors, n_kv;
    size_t kv[5];      /* start of each key/value (its key length) */
    size_t align_val;  /* value of general.alignment */
    size_t arr_etype;  /* element type of test.arr */
    size_t arr_len;    /* length of test.arr */
    size_t flag_val;   /* value of test.flag */
    size_t strs_len0;  /* length of the first string of test.strs */
    size_t kv_type[5]; /* type tag of each key/value */
    size_t t[3];       /* start of each tensor info */
    size_t t_ndims[3], t_ne0[3], t_type[3], t_off[3];
    size_t data; /* data section start */
    size_t size;
} layout;

/* kv: general.architecture="llama", general.alignment=32 (u32), test.arr=u8[1,2,3],
 *     test.flag=true, test.strs=["a","bc"]
 * tensors: a F32 [8,2] @0 (64 B), b Q8_0 [32] @64 (34 B), c F16 [4] @128 (8 B), ending the file. */
static bbuf valid_file(layout *L) {
    bbuf b = {0};
    bbuf_put(&b, "GGUF", 4);
    L->version = b.n, bbuf_u32(&b, 3);
    L->n_tensors = b.n, bbuf_u64(&b, 3);
    L->n_kv = b.n, bbuf_u64(&b, 5);
    L->kv[0] = b.n, bbuf_str(&b, "general.architecture");
    L->kv_type[0] = b.n, bbuf_u32(&b, SKV_GGUF_STRING), bbuf_str(&b, "llama");
    L->kv[1] = b.n, bbuf_str(&b, "general.alignment");
    L->kv_type[1] = b.n, bbuf_u32(&b, SKV_GGUF_UINT32);
    L->align_val = b.n, bbuf_u32(&b, 32);
    L->kv[2] = b.n, bbuf_str(&b, "test.arr");
    L->kv_type[2] = b.n, bbuf_u32(&b, SKV_GGUF_ARRAY);
    L->arr_etype = b.n, bbuf_u32(&b, SKV_GGUF_UINT8);
    L->arr_len = b.n, bbuf_u64(&b, 3), bbuf_put(&b, (uint8_t[]){1, 2, 3}, 3);
    L->kv[3] = b.n, bbuf_str(&b, "test.flag");
    L->kv_type[3] = b.n, bbuf_u32(&b, SKV_GGUF_BOOL);
    L->flag_val = b.n, bbuf_u8(&b, 1);
    L->kv[4] = b.n, bbuf_str(&b, "test.strs");
    L->kv_type[4] = b.n, bbuf_u32(&b, SKV_GGUF_ARRAY), bbuf_u32(&b, SKV_GGUF_STRING),
    bbuf_u64(&b, 2);
    L->strs_len0 = b.n, bbuf_str(&b, "a"), bbuf_str(&b, "bc");
    const char *names[3] = {"a", "b", "c"};
    const uint32_t types[3] = {SKV_TYPE_F32, SKV_TYPE_Q8_0, SKV_TYPE_F16};
    const uint32_t ndims[3] = {2, 1, 1};
    const uint64_t ne0[3] = {8, 32, 4}, offs[3] = {0, 64, 128};
    for (int i = 0; i < 3; i++) {
        L->t[i] = b.n, bbuf_str(&b, names[i]);
        L->t_ndims[i] = b.n, bbuf_u32(&b, ndims[i]);
        L->t_ne0[i] = b.n, bbuf_u64(&b, ne0[i]);
        if (ndims[i] == 2) bbuf_u64(&b, 2);
        L->t_type[i] = b.n, bbuf_u32(&b, types[i]);
        L->t_off[i] = b.n, bbuf_u64(&b, offs[i]);
    }
    while (b.n % 32) bbuf_u8(&b, 0);
    L->data = b.n;
    for (int i = 0; i < 136; i++) bbuf_u8(&b, (uint8_t)i);
    L->size = b.n;
    return b;
}

static void patch32(bbuf *b, size_t at, uint32_t v) {
    memcpy(b->p + at, &v, 4);
}
static void patch64(bbuf *b, size_t at, uint64_t v) {
    memcpy(b->p + at, &v, 8);
}

/* Opens size bytes of a heap copy (so ASan sees any overread) and expects failure with a
 * message containing want (when not NULL). */
static void expect_fail_n(const bbuf *b, size_t size, const char *want, skv_status st) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, b->p, size);
    skv_err err = {.status = SKV_OK, .msg = ""};
    skv_gguf *g = skv_gguf_open_memory(copy, size, &err);
    if (g) {
        skv_gguf_close(g);
        free(copy);
        fail_msg("a malformed file opened (size %zu, expected '%s')", size, want ? want : "");
    }
    assert_true(err.msg[0] != 0);
    if (want && !strstr(err.msg, want)) {
        free(copy);
        fail_msg("message '%s' lacks '%s'", err.msg, want);
    }
    if (st != SKV_OK) assert_int_equal(err.status, st);
    free(copy);
}

static void expect_fail(const bbuf *b, const char *want) {
    expect_fail_n(b, b->n, want, SKV_ERR_FORMAT);
}

static void test_valid_base(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open_memory(b.p, b.n, &err);
    assert_non_null(g);
    assert_int_equal(skv_gguf_n_kv(g), 5);
    assert_int_equal(skv_gguf_n_tensors(g), 3);
    assert_int_equal(skv_gguf_data_offset(g), L.data);
    assert_int_equal(skv_gguf_tensor_at(g, 2)->size, 8);
    skv_gguf_close(g);
    free(b.p);
}

/* (a) every prefix of the file is rejected; section boundaries get the expected message. */
static void test_truncation(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    for (size_t n = 0; n < b.n; n++) expect_fail_n(&b, n, NULL, SKV_ERR_FORMAT);
    expect_fail_n(&b, 0, "bad magic", SKV_ERR_FORMAT);
    expect_fail_n(&b, 3, "bad magic", SKV_ERR_FORMAT);
    expect_fail_n(&b, L.version + 2, "version at offset 4 extends past end of file",
                  SKV_ERR_FORMAT);
    expect_fail_n(&b, L.n_kv + 4, "key/value count", SKV_ERR_FORMAT);
    expect_fail_n(&b, L.kv[0], "n_kv 5 exceeds", SKV_ERR_FORMAT);
    expect_fail_n(&b, L.t[0], "n_tensors 3 exceeds", SKV_ERR_FORMAT);
    expect_fail_n(&b, L.t[2] + 24, "tensor 'c': type at offset", SKV_ERR_FORMAT);
    expect_fail_n(&b, L.data, "tensor 'a' extends past end of file", SKV_ERR_FORMAT);
    expect_fail_n(&b, L.data + 90, "tensor 'b' extends past end of file", SKV_ERR_FORMAT);
    expect_fail_n(&b, b.n - 1, "tensor 'c' extends past end of file", SKV_ERR_FORMAT);
    /* inside a string of an array value */
    expect_fail_n(&b, L.strs_len0 + 9 + 8 + 1, "key 'test.strs': string of 2 bytes",
                  SKV_ERR_FORMAT);
    free(b.p);
}

/* (b) magic and version */
static void test_magic_version(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    b.p[0] = 'g';
    expect_fail(&b, "bad magic");
    b.p[0] = 'G';
    patch32(&b, L.version, 1);
    expect_fail_n(&b, b.n, "version 1 is not supported", SKV_ERR_UNSUPPORTED);
    patch32(&b, L.version, 0);
    expect_fail_n(&b, b.n, "unsupported GGUF version 0", SKV_ERR_UNSUPPORTED);
    patch32(&b, L.version, 4);
    expect_fail_n(&b, b.n, "unsupported GGUF version 4", SKV_ERR_UNSUPPORTED);
    patch32(&b, L.version, 0x03000000u);
    expect_fail_n(&b, b.n, "big-endian", SKV_ERR_UNSUPPORTED);
    free(b.p);
}

/* (c) absurd counts and lengths fail before any allocation of that size */
static void test_absurd_counts(void **state) {
    (void)state;
    layout L;
    const struct {
        size_t *field;
        uint64_t value;
        const char *want;
    } cases[] = {
        {&L.n_kv, 1ull << 60, "n_kv 1152921504606846976 exceeds"},
        {&L.n_kv, UINT64_MAX, "n_kv"},
        {&L.n_tensors, 1ull << 60, "n_tensors 1152921504606846976 exceeds"},
        {&L.n_tensors, 100, "n_tensors 100 exceeds"},
        {&L.kv[1], 1ull << 62, "key #1: key name of 4611686018427387904 bytes"},
        {&L.kv[1], UINT64_MAX, "extends past end of file"},
        {&L.arr_len, 1ull << 60, "key 'test.arr': array length 1152921504606846976"},
        {&L.arr_len, UINT64_MAX, "array length"},
        {&L.strs_len0, 1ull << 40, "key 'test.strs': string of 1099511627776 bytes"},
        {&L.t[1], UINT64_MAX, "tensor #1: tensor name of"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bbuf b = valid_file(&L);
        patch64(&b, *cases[i].field, cases[i].value);
        expect_fail(&b, cases[i].want);
        free(b.p);
    }
    /* n_kv = 6 makes the first tensor info be read as a key: still a clean error */
    bbuf b = valid_file(&L);
    patch64(&b, L.n_kv, 6);
    expect_fail(&b, NULL);
    free(b.p);
}

/* (d) offsets past the end, overlap, misalignment, bad alignment values */
static void test_offsets(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    patch64(&b, L.t_off[2], 1ull << 20);
    expect_fail(&b, "tensor 'c' extends past end of file");
    patch64(&b, L.t_off[2], UINT64_MAX - 31); /* offset + size overflows */
    expect_fail(&b, "tensor 'c' extends past end of file");
    patch64(&b, L.t_off[2], 32); /* inside a's 64 bytes */
    expect_fail(&b, "tensors 'a' and 'c' overlap");
    patch64(&b, L.t_off[2], 64); /* same start as b */
    expect_fail(&b, "overlap");
    patch64(&b, L.t_off[2], 130);
    expect_fail(&b, "tensor 'c': data offset 130 is not a multiple of the alignment 32");
    free(b.p);

    const uint32_t bad_align[] = {0, 3, 48, 0x80000000u};
    for (size_t i = 0; i < 4; i++) {
        b = valid_file(&L);
        patch32(&b, L.align_val, bad_align[i]);
        expect_fail(&b, "general.alignment");
        expect_fail(&b, "power of two");
        free(b.p);
    }
    /* alignment 64: offset 64 is fine, 128 is fine, but the data section moves */
    b = valid_file(&L);
    patch32(&b, L.align_val, 64);
    skv_err err;
    skv_gguf *g = skv_gguf_open_memory(b.p, b.n, &err);
    if (L.data % 64) {
        assert_null(g); /* the data section start moved by 32: c runs past the end */
        assert_non_null(strstr(err.msg, "tensor 'c' extends past end of file"));
    } else {
        assert_non_null(g);
        skv_gguf_close(g);
    }
    free(b.p);
    /* alignment 1: tensors may touch (c right after b's 34 bytes) but not overlap by a byte
     * (the offsets of alignment 32 cannot tell an off-by-one in the overlap check) */
    b = valid_file(&L);
    patch32(&b, L.align_val, 1);
    patch64(&b, L.t_off[2], 64 + 34);
    g = skv_gguf_open_memory(b.p, b.n, &err);
    if (!g) fail_msg("touching tensors refused: %s", err.msg);
    skv_gguf_close(g);
    patch64(&b, L.t_off[2], 64 + 33);
    expect_fail(&b, "tensors 'b' and 'c' overlap");
    free(b.p);
    /* alignment of the wrong type */
    b = valid_file(&L);
    patch32(&b, L.kv_type[1], SKV_GGUF_FLOAT32);
    expect_fail(&b, "general.alignment has type float32");
    free(b.p);
}

/* (e) bad type ids, n_dims, dims, block multiples, value types, bools, duplicates */
static void test_bad_fields(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    patch32(&b, L.t_type[1], 99);
    expect_fail_n(&b, b.n, "tensor 'b': tensor type id 99 is not supported", SKV_ERR_UNSUPPORTED);
    patch32(&b, L.t_type[1], 4); /* a removed ggml type (Q4_2) */
    expect_fail_n(&b, b.n, "tensor type id 4 is not supported", SKV_ERR_UNSUPPORTED);
    patch32(&b, L.t_type[1], 16); /* a type ggml has, sparsekv not: named */
    expect_fail_n(&b, b.n, "tensor 'b': tensor type id 16 (IQ2_XXS) is not supported",
                  SKV_ERR_UNSUPPORTED);
    patch32(&b, L.t_type[1], SKV_TYPE_Q8_0);
    patch64(&b, L.t_ne0[1], 31);
    expect_fail(&b, "tensor 'b': ne[0] = 31 is not a multiple of the q8_0 block size 32");
    patch64(&b, L.t_ne0[1], 0);
    expect_fail(&b, "tensor 'b': dimension 0 is 0");
    patch64(&b, L.t_ne0[1], (uint64_t)-5);
    expect_fail(&b, "dimension 0 is -5");
    free(b.p);

    b = valid_file(&L);
    patch64(&b, L.t_ne0[0], 1ull << 32); /* [2^32, 2] is fine, 2^32 * 2^32 is not */
    patch64(&b, L.t_ne0[0] + 8, 1ull << 32);
    expect_fail(&b, "tensor 'a': element count overflows");
    patch64(&b, L.t_ne0[0] + 8, 2);
    expect_fail(&b, "tensor 'a' extends past end of file"); /* 32 GiB */
    patch64(&b, L.t_ne0[0], (1ull << 62) / 3 * 2);          /* nel fits int64, bytes do not fit */
    expect_fail(&b, "tensor 'a': byte size overflows");
    free(b.p);

    const uint32_t ndims[] = {0, 5, 1000, UINT32_MAX};
    for (size_t i = 0; i < 4; i++) {
        b = valid_file(&L);
        patch32(&b, L.t_ndims[2], ndims[i]);
        char want[64];
        snprintf(want, sizeof want, "tensor 'c': n_dims %u is outside 1..4", ndims[i]);
        expect_fail(&b, want);
        free(b.p);
    }

    b = valid_file(&L);
    patch32(&b, L.kv_type[3], 13);
    expect_fail(&b, "key 'test.flag': value type 13 is invalid");
    patch32(&b, L.kv_type[3], UINT32_MAX);
    expect_fail(&b, "value type 4294967295 is invalid");
    patch32(&b, L.kv_type[3], SKV_GGUF_BOOL);
    b.p[L.flag_val] = 2;
    expect_fail(&b, "key 'test.flag': bool value 2 is not 0 or 1");
    free(b.p);

    b = valid_file(&L);
    patch32(&b, L.arr_etype, 13);
    expect_fail(&b, "key 'test.arr': array element type 13 is invalid");
    patch32(&b, L.arr_etype, SKV_GGUF_BOOL);
    expect_fail(&b, "key 'test.arr': bool array element 1 has value 2");
    free(b.p);

    /* duplicate key: test.strs renamed in place to test.flag (both 9 bytes) */
    b = valid_file(&L);
    memcpy(b.p + L.kv[4] + 8, "test.flag", 9);
    expect_fail(&b, "duplicate key 'test.flag'");
    free(b.p);

    b = valid_file(&L);
    b.p[L.t[2] + 8] = 'a';
    expect_fail(&b, "duplicate tensor name 'a'");
    b.p[L.t[2] + 8] = 0;
    expect_fail(&b, "tensor #2: tensor name '?' contains a NUL byte");
    free(b.p);

    b = valid_file(&L);
    b.p[L.kv[3] + 8 + 4] = 0; /* "test\0flag" */
    expect_fail(&b, "key #3: key name 'test?flag' contains a NUL byte");
    free(b.p);
}

/* (f) nested arrays: 8 levels open, 9 and a deep bomb fail, without deep recursion */
static bbuf nested_file(int depth, int with_leaf) {
    bbuf b = {0};
    bbuf_put(&b, "GGUF", 4);
    bbuf_u32(&b, 3);
    bbuf_u64(&b, 0);
    bbuf_u64(&b, 1);
    bbuf_str(&b, "bomb");
    bbuf_u32(&b, SKV_GGUF_ARRAY);
    for (int d = 1; d < depth; d++) bbuf_u32(&b, SKV_GGUF_ARRAY), bbuf_u64(&b, 1);
    bbuf_u32(&b, SKV_GGUF_INT32);
    bbuf_u64(&b, with_leaf ? 1 : 0);
    if (with_leaf) bbuf_u32(&b, 42);
    return b;
}

static void test_depth(void **state) {
    (void)state;
    bbuf b = nested_file(8, 1);
    skv_err err;
    skv_gguf *g = skv_gguf_open_memory(b.p, b.n, &err);
    assert_non_null(g);
    const skv_gguf_value *v = skv_gguf_kv_value(g, 0);
    for (int d = 1; d < 8; d++) {
        assert_int_equal(skv_gguf_value_arr_type(v), SKV_GGUF_ARRAY);
        v = skv_gguf_value_arr_elem(v, 0);
    }
    int64_t x;
    assert_true(skv_gguf_value_arr_int(v, 0, &x) && x == 42);
    skv_gguf_close(g);
    free(b.p);

    b = nested_file(9, 1);
    expect_fail(&b, "key 'bomb': arrays nested deeper than 8 levels");
    free(b.p);
    b = nested_file(100000, 0);
    expect_fail(&b, "nested deeper than 8");
    free(b.p);
    /* a bomb whose inner levels are truncated away */
    b = nested_file(5, 1);
    expect_fail_n(&b, b.n - 6, "exceeds the 10 bytes left", SKV_ERR_FORMAT);
    free(b.p);
}

/* A flipped byte anywhere must never crash (it may still open: e.g. inside tensor data). */
static void test_byte_flips(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    uint8_t *copy = malloc(b.n);
    const uint8_t vals[] = {0x00, 0xff, 0x80, 0x01, 0x7f};
    int rejected = 0;
    for (size_t i = 0; i < L.data; i++) {
        for (size_t k = 0; k < sizeof vals; k++) {
            memcpy(copy, b.p, b.n);
            if (copy[i] == vals[k]) continue;
            copy[i] = vals[k];
            skv_err err = {0};
            skv_gguf *g = skv_gguf_open_memory(copy, b.n, &err);
            if (!g) {
                assert_true(err.msg[0] != 0);
                rejected++;
                continue;
            }
            /* walk everything that opened */
            for (int64_t t = 0; t < skv_gguf_n_tensors(g); t++) {
                const skv_gguf_tensor *ti = skv_gguf_tensor_at(g, t);
                assert_true(ti->offset + ti->size <= b.n - L.data);
            }
            skv_gguf_close(g);
        }
    }
    assert_true(rejected > 100); /* most header bytes matter */
    free(copy);
    free(b.p);
}

/* A malformed file on disk: the message also names the path. */
static void test_file_path_in_message(void **state) {
    (void)state;
    layout L;
    bbuf b = valid_file(&L);
    const char *p = test_tmp_path(".gguf");
    char path[4096];
    snprintf(path, sizeof path, "%s", p);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(b.p, 1, b.n - 1, f);
    fclose(f);
    skv_err err;
    assert_null(skv_gguf_open(path, &err));
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "tensor 'c' extends past end of file"));
    f = fopen(path, "wb"); /* empty file */
    fclose(f);
    assert_null(skv_gguf_open(path, &err));
    assert_int_equal(err.status, SKV_ERR_FORMAT);
    assert_null(skv_gguf_open("/", &err));
    assert_int_equal(err.status, SKV_ERR_IO);
    unlink(path);
    free(b.p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_base),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_magic_version),
        cmocka_unit_test(test_absurd_counts),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_byte_flips),
        cmocka_unit_test(test_file_path_in_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
