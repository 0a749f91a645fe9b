/* gguf.h — GGUF v2/v3 reader (mmap, every count/offset bounds-checked) and writer.
 *
 * Reader: a file is opened once; keys, values and tensor infos are parsed and validated up
 * front, so every accessor below is a cheap lookup that cannot fail on a file that opened.
 * Tensor data stays in the mapping (zero copy). */
#ifndef SKV_GGUF_H
#define SKV_GGUF_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum skv_gguf_vtype {
    SKV_GGUF_UINT8 = 0,
    SKV_GGUF_INT8 = 1,
    SKV_GGUF_UINT16 = 2,
    SKV_GGUF_INT16 = 3,
    SKV_GGUF_UINT32 = 4,
    SKV_GGUF_INT32 = 5,
    SKV_GGUF_FLOAT32 = 6,
    SKV_GGUF_BOOL = 7,
    SKV_GGUF_STRING = 8,
    SKV_GGUF_ARRAY = 9,
    SKV_GGUF_UINT64 = 10,
    SKV_GGUF_INT64 = 11,
    SKV_GGUF_FLOAT64 = 12,
    SKV_GGUF_VTYPE_COUNT
} skv_gguf_vtype;

#define SKV_GGUF_MAX_DIMS          4
#define SKV_GGUF_DEFAULT_ALIGNMENT 32

typedef struct skv_gguf skv_gguf;

typedef struct skv_gguf_tensor {
    const char *name; /* NUL-terminated copy */
    skv_type type;
    int n_dims;
    int64_t ne[SKV_GGUF_MAX_DIMS]; /* ne[0] = elements per row (fastest); unused dims = 1 */
    uint64_t offset;               /* relative to the start of the data section */
    uint64_t size;                 /* bytes */
    const void *data;              /* into the mapping */
} skv_gguf_tensor;

/* Opens and validates a file (mmap). NULL + err on any problem. */
skv_gguf *skv_gguf_open(const char *path, skv_err *err);
/* Same on a caller-owned buffer that must outlive the reader (tests, fuzzing). */
skv_gguf *skv_gguf_open_memory(const void *data, size_t size, skv_err *err);
void skv_gguf_close(skv_gguf *g);
/* Tells the system that bytes [p, p + n) of a mapped file will not be read for a while (their
 * pages leave the process's memory and come back from the file if read again). Nothing
 * happens for a GGUF opened from memory or for a range outside the mapping. */
void skv_gguf_release(const skv_gguf *g, const void *p, size_t n);

uint32_t skv_gguf_version(const skv_gguf *g);
uint64_t skv_gguf_alignment(const skv_gguf *g);
const void *skv_gguf_file_data(const skv_gguf *g, size_t *size);
/* File offset of the data section (tensor offsets are relative to it). */
uint64_t skv_gguf_data_offset(const skv_gguf *g);

/* Key/value metadata. i in [0, n_kv). */
int64_t skv_gguf_n_kv(const skv_gguf *g);
int64_t skv_gguf_find_key(const skv_gguf *g, const char *key); /* -1 if absent */
const char *skv_gguf_key(const skv_gguf *g, int64_t i);
skv_gguf_vtype skv_gguf_kv_type(const skv_gguf *g, int64_t i);
/* "uint8" ... "float64" (the names of the reader's messages); "invalid" for another id. */
const char *skv_gguf_vtype_name(uint32_t t);

/* Scalar getters; false when the value is not of a compatible type (or is out of range of
 * the output: e.g. a uint64 above INT64_MAX for _int). _int accepts every integer type and bool;
 * _float accepts float32/64 and integers. */
bool skv_gguf_kv_int(const skv_gguf *g, int64_t i, int64_t *out);
bool skv_gguf_kv_float(const skv_gguf *g, int64_t i, double *out);
bool skv_gguf_kv_bool(const skv_gguf *g, int64_t i, bool *out);
/* NUL-terminated (the file's bytes may contain NULs: len is the true length). */
const char *skv_gguf_kv_str(const skv_gguf *g, int64_t i, size_t *len);

/* Arrays (possibly nested). For an array value i: element type and count. */
skv_gguf_vtype skv_gguf_arr_type(const skv_gguf *g, int64_t i);
uint64_t skv_gguf_arr_len(const skv_gguf *g, int64_t i);
bool skv_gguf_arr_int(const skv_gguf *g, int64_t i, uint64_t j, int64_t *out);
bool skv_gguf_arr_float(const skv_gguf *g, int64_t i, uint64_t j, double *out);
const char *skv_gguf_arr_str(const skv_gguf *g, int64_t i, uint64_t j, size_t *len);

/* Generic access to any value, including elements of nested arrays. A value pointer stays valid
 * until skv_gguf_close. The scalar getters follow the rules of skv_gguf_kv_int/_float/_bool. */
typedef struct skv_gguf_value skv_gguf_value;
const skv_gguf_value *skv_gguf_kv_value(const skv_gguf *g, int64_t i); /* NULL if out of range */
skv_gguf_vtype skv_gguf_value_type(const skv_gguf_value *v);
bool skv_gguf_value_int(const skv_gguf_value *v, int64_t *out);
bool skv_gguf_value_float(const skv_gguf_value *v, double *out);
bool skv_gguf_value_bool(const skv_gguf_value *v, bool *out);
const char *skv_gguf_value_str(const skv_gguf *g, const skv_gguf_value *v, size_t *len);
/* Arrays: element type (SKV_GGUF_VTYPE_COUNT when v is not an array) and count. */
skv_gguf_vtype skv_gguf_value_arr_type(const skv_gguf_value *v);
uint64_t skv_gguf_value_arr_len(const skv_gguf_value *v);
/* Element j of an array of strings or of arrays (NULL for scalar arrays: use the getters). */
const skv_gguf_value *skv_gguf_value_arr_elem(const skv_gguf_value *v, uint64_t j);
bool skv_gguf_value_arr_int(const skv_gguf_value *v, uint64_t j, int64_t *out);
bool skv_gguf_value_arr_float(const skv_gguf_value *v, uint64_t j, double *out);
/* The raw little-endian elements of a scalar array, in the file (possibly unaligned). */
const void *skv_gguf_value_arr_data(const skv_gguf_value *v);

/* Tensors. i in [0, n_tensors). */
int64_t skv_gguf_n_tensors(const skv_gguf *g);
int64_t skv_gguf_find_tensor(const skv_gguf *g, const char *name); /* -1 if absent */
const skv_gguf_tensor *skv_gguf_tensor_at(const skv_gguf *g, int64_t i);

/* Convenience for model loading: looks key up and fills *out; returns false when absent or
 * of an incompatible type. */
bool skv_gguf_get_int(const skv_gguf *g, const char *key, int64_t *out);
bool skv_gguf_get_float(const skv_gguf *g, const char *key, double *out);
const char *skv_gguf_get_str(const skv_gguf *g, const char *key);

/* --- Writer ----------------------------------------------------------------------------- */

typedef struct skv_gguf_writer skv_gguf_writer;

skv_gguf_writer *skv_gguf_writer_new(void);
void skv_gguf_writer_free(skv_gguf_writer *w);

/* Scalars. A key set twice keeps the last value. Return SKV_ERR_NOMEM or SKV_OK. */
skv_status skv_gguf_writer_set_u32(skv_gguf_writer *w, const char *key, uint32_t v);
skv_status skv_gguf_writer_set_i32(skv_gguf_writer *w, const char *key, int32_t v);
skv_status skv_gguf_writer_set_u64(skv_gguf_writer *w, const char *key, uint64_t v);
skv_status skv_gguf_writer_set_f32(skv_gguf_writer *w, const char *key, float v);
skv_status skv_gguf_writer_set_bool(skv_gguf_writer *w, const char *key, bool v);
skv_status skv_gguf_writer_set_str(skv_gguf_writer *w, const char *key, const char *v);
/* Array of a fixed-size scalar type: data holds n elements in that type's C representation
 * (SKV_GGUF_BOOL: one byte each). Data is copied. */
skv_status skv_gguf_writer_set_arr(skv_gguf_writer *w, const char *key, skv_gguf_vtype elem,
                                   const void *data, uint64_t n);
/* Array of strings (copied). lens may be NULL for NUL-terminated strings. */
skv_status skv_gguf_writer_set_arr_str(skv_gguf_writer *w, const char *key, const char *const *strs,
                                       const size_t *lens, uint64_t n);
/* Copies every key/value of a reader except those for which skip(key) is true (skip may be
 * NULL). Used to rewrite a model with new tensor types. */
skv_status skv_gguf_writer_copy_kv(skv_gguf_writer *w, const skv_gguf *g,
                                   bool (*skip)(const char *key));

/* Adds a tensor; data (size = row bytes of type * rows) is referenced, not copied: it must stay
 * valid until skv_gguf_writer_write returns. ne as in skv_gguf_tensor. */
skv_status skv_gguf_writer_add_tensor(skv_gguf_writer *w, const char *name, skv_type type,
                                      int n_dims, const int64_t *ne, const void *data);

/* Names a file the output must not be (an input of the conversion); files whose keys were
 * copied with skv_gguf_writer_copy_kv are protected already. A path that does not exist is
 * ignored. */
skv_status skv_gguf_writer_add_source(skv_gguf_writer *w, const char *path);

/* The output-path rule of skv_gguf_writer_write alone (sources included), for callers that
 * write a temporary file and rename it into place themselves. */
skv_status skv_gguf_writer_check_output(const skv_gguf_writer *w, const char *path, skv_err *err);

/* Writes GGUF v3 with general.alignment (default 32 when not set) to path, atomically (a
 * temporary file renamed into place, so a failed write never leaves a half file). The output
 * must be a new path or a regular file that is not an input: a symbolic link, device, FIFO,
 * socket or directory, or a source file, is refused with SKV_ERR_INVALID_ARG. */
skv_status skv_gguf_writer_write(skv_gguf_writer *w, const char *path, skv_err *err);
/* The same, its messages naming shown instead of path: for a caller that writes its own
 * temporary file on the way to the path its user gave. */
skv_status skv_gguf_writer_write_as(skv_gguf_writer *w, const char *path, const char *shown,
                                    skv_err *err);

#endif
