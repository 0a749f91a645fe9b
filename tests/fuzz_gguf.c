/* fuzz_gguf.c — libFuzzer target for the GGUF reader: opens the input from memory and, when it
 * opens, walks every accessor (nested values included) and touches every tensor byte, so that
 * any offset the reader accepted but got wrong shows up under ASan. Build: make fuzz. */
#include "gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static void walk_value(const skv_gguf *g, const skv_gguf_value *v, int depth) {
    int64_t i;
    double f;
    bool b;
    size_t len;
    if (!v || depth > 16) abort(); /* the reader limits depth to 8 */
    if (skv_gguf_value_int(v, &i)) sink += (uint64_t)i;
    if (skv_gguf_value_float(v, &f)) sink += (uint64_t)(f == f);
    if (skv_gguf_value_bool(v, &b)) sink += b;
    const char *s = skv_gguf_value_str(g, v, &len);
    if (s) {
        if (s[len] != 0) abort(); /* promised NUL terminator */
        for (size_t k = 0; k < len; k++) sink += (uint8_t)s[k];
    }
    if (skv_gguf_value_type(v) != SKV_GGUF_ARRAY) return;
    skv_gguf_vtype et = skv_gguf_value_arr_type(v);
    uint64_t n = skv_gguf_value_arr_len(v);
    for (uint64_t j = 0; j < n; j++) {
        if (et == SKV_GGUF_STRING || et == SKV_GGUF_ARRAY) {
            walk_value(g, skv_gguf_value_arr_elem(v, j), depth + 1);
        } else {
            if (skv_gguf_value_arr_int(v, j, &i)) sink += (uint64_t)i;
            if (skv_gguf_value_arr_float(v, j, &f)) sink += (uint64_t)(f == f);
        }
    }
    if (skv_gguf_value_arr_int(v, n, &i)) abort(); /* out of range must fail */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    skv_err err;
    skv_gguf *g = skv_gguf_open_memory(data, size, &err);
    if (!g) {
        if (!err.msg[0] || !memchr(err.msg, 0, sizeof err.msg)) abort();
        return 0;
    }
    sink += skv_gguf_version(g) + skv_gguf_alignment(g) + skv_gguf_data_offset(g);
    size_t fsize;
    if (skv_gguf_file_data(g, &fsize) != data || fsize != size) abort();
    for (int64_t k = 0; k < skv_gguf_n_kv(g); k++) {
        const char *key = skv_gguf_key(g, k);
        if (skv_gguf_find_key(g, key) != k) abort(); /* keys are unique */
        int64_t i;
        double f;
        bool b;
        size_t len;
        if (skv_gguf_kv_int(g, k, &i)) sink += (uint64_t)i;
        if (skv_gguf_kv_float(g, k, &f)) sink += (uint64_t)(f == f);
        if (skv_gguf_kv_bool(g, k, &b)) sink += b;
        if (skv_gguf_kv_str(g, k, &len)) sink += len;
        sink += skv_gguf_kv_type(g, k) + skv_gguf_arr_type(g, k) + skv_gguf_arr_len(g, k);
        if (skv_gguf_arr_str(g, k, 0, &len)) sink += len;
        if (skv_gguf_arr_int(g, k, 0, &i)) sink += (uint64_t)i;
        if (skv_gguf_arr_float(g, k, 0, &f)) sink += (uint64_t)(f == f);
        walk_value(g, skv_gguf_kv_value(g, k), 0);
        if (skv_gguf_get_int(g, key, &i)) sink += (uint64_t)i;
        if (skv_gguf_get_float(g, key, &f)) sink += (uint64_t)(f == f);
        if (skv_gguf_get_str(g, key)) sink++;
    }
    if (skv_gguf_key(g, skv_gguf_n_kv(g)) || skv_gguf_kv_value(g, -1)) abort();
    for (int64_t t = 0; t < skv_gguf_n_tensors(g); t++) {
        const skv_gguf_tensor *ti = skv_gguf_tensor_at(g, t);
        if (skv_gguf_find_tensor(g, ti->name) != t) abort(); /* names are unique */
        if (ti->n_dims < 1 || ti->n_dims > SKV_GGUF_MAX_DIMS || ti->size == 0) abort();
        const uint8_t *p = ti->data;
        if (p < data || p + ti->size > data + size) abort();
        /* first, last and a stride of bytes: ASan checks they are inside the buffer */
        for (uint64_t k = 0; k < ti->size; k += 1 + ti->size / 64) sink += p[k];
        sink += p[ti->size - 1];
    }
    if (skv_gguf_tensor_at(g, skv_gguf_n_tensors(g))) abort();
    skv_gguf_close(g);
    return 0;
}
