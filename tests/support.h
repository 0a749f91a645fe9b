/* support.h — helpers shared by the tests (not part of the library). */
#ifndef SKV_TEST_SUPPORT_H
#define SKV_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

/* Directory of the shared models: $SKV_MODELS or ../shared/models (tests run from the repo
 * root). Returns a path joined with rel in a static buffer. */
const char *test_model_path(const char *rel);
/* Whole file into a malloc'd buffer (caller frees); NULL when missing. */
void *test_read_file(const char *path, size_t *size);
/* A fresh temporary file path under $TMPDIR with the given suffix (static buffer). */
const char *test_tmp_path(const char *suffix);
/* Path of the CLI binary ($SKV_CLI). */
const char *test_cli(void);
/* Runs a shell command, captures stdout into a malloc'd NUL-terminated buffer; *status gets the
 * exit status. */
char *test_run(const char *cmd, int *status);

/* A growable byte buffer for hand-made files (independent of the GGUF writer). Multi-byte
 * values are written in host order (little-endian here, as GGUF). Aborts when out of memory. */
typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
} bbuf;
void bbuf_put(bbuf *b, const void *src, size_t n);
void bbuf_u8(bbuf *b, uint8_t v);
void bbuf_u32(bbuf *b, uint32_t v);
void bbuf_u64(bbuf *b, uint64_t v);
void bbuf_strn(bbuf *b, const char *s, size_t n); /* GGUF string: u64 length + bytes */
void bbuf_str(bbuf *b, const char *s);

#endif
