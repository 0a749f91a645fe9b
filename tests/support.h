/* support.h — helpers shared by the tests (not part of the library). */
#ifndef SKV_TEST_SUPPORT_H
#define SKV_TEST_SUPPORT_H

#include "ref_forward.h"
#include "sparsekv.h"

#include <stddef.h>
#include <stdint.h>

/* 1 in a build under AddressSanitizer (make asan: everything runs several times slower there),
 * where the tests that can shrink their largest scalar-reference cases do; 0 otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#define SKV_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SKV_TEST_SANITIZED 1
#endif
#endif
#ifndef SKV_TEST_SANITIZED
#define SKV_TEST_SANITIZED 0
#endif

/* A fixture from the shared models: $SKV_MODELS or ../shared/models (tests run from the repo
 * root), rel joined to it in a static buffer. A plain clone has no ../shared: there the
 * repository's models/stories260K.gguf (the same file) stands in for
 * "stories260K/stories260K.gguf", and test_model_path skips the calling test (cmocka's skip(),
 * with a line naming the file) when the fixture is absent; call it inside a test only, before
 * allocating. test_fixture_path returns NULL instead (for group setups). */
const char *test_model_path(const char *rel);
const char *test_fixture_path(const char *rel);
/* stories260K.gguf (the fixture or the repository's copy) without skipping: for group setups,
 * which cannot skip; when neither exists, the path that a load then fails on. */
const char *test_stories_path(void);
/* Whole file into a malloc'd buffer (caller frees); NULL when missing. */
void *test_read_file(const char *path, size_t *size);
/* path's whole content becomes text (created or replaced); false when it cannot be written. */
bool test_write_text(const char *path, const char *text);
/* A fresh temporary file path under $TMPDIR with the given suffix (static buffer). */
const char *test_tmp_path(const char *suffix);
/* Path of the CLI binary ($SKV_CLI). */
const char *test_cli(void);
/* Runs a shell command, captures stdout into a malloc'd NUL-terminated buffer; *status gets the
 * exit status. */
char *test_run(const char *cmd, int *status);
/* The CLI ($SKV_CLI) with the printf-style arguments fmt..., run through test_run: asserts its
 * exit status is want_status and returns its stdout (the caller frees). */
/* Runs the CLI with args (shell words), stdout discarded; returns the exit status and, when
 * err_out, its stderr as a malloc'd string (never NULL). */
int test_cli_stderr(const char *args, char **err_out);
char *test_cli_expect(int want_status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- models, contexts and logits (a failure fails the calling cmocka test) ---------------- */

/* A context over m with the given cache type, n_ctx (0: the model's), threads (0: all cores)
 * and capture window; prints the library's message before failing. */
skv_context *test_context(const skv_model *m, skv_type kv, int n_ctx, int threads, int capture);
/* skv_forward, asserted to succeed (the library's message printed when not). */
void test_feed(skv_context *ctx, const int32_t *t, int n, skv_logits_mode mode, float *logits);
/* Index of the largest of x[n] (the lowest index on ties). */
int test_argmaxf(const float *x, int n);
/* max |a[i] - b[i]| over n values, in double. */
double test_max_abs_diff(const float *a, const float *b, size_t n);
/* A random-weight llama of that shape (head_dim n_embd / n_head, 300 tokens, F32) written to a
 * temporary file; its path (static buffer of test_tmp_path). */
const char *test_synth_llama(int n_layer, int n_head, int n_head_kv, int n_embd, int n_ctx,
                             uint64_t seed, int threads);
/* test_synth_llama with real head shapes: 2 layers, 3 query heads per kv head of head_dim 64
 * (so q8_0 caches work). */
const char *test_synth_gqa64(int n_ctx, uint64_t seed, int threads);
/* A random-weight model of architecture a (model/synth.h: phi3 with LongRoPE, YaRN, partial
 * rotary...) and context_length n_ctx_train: 2 layers, 4 query heads over 2 kv heads of
 * head_dim 32, n_embd 128, n_ff 192, 300 tokens, F32; its path (static buffer of
 * test_tmp_path). */
struct skv_synth_arch;
const char *test_synth_tiny(const struct skv_synth_arch *a, int n_ctx_train, uint64_t seed);

/* After a compression of ctx's cache, whose prefill held ids[0, n_prefill) with n_prefill =
 * T + W under the engine protocol (the window in the cache), T under the seed one: feeds the
 * seed window ids[T, T + W) (seed only) and N tokens (ids[T + W + s] until there are logits,
 * then greedy), and compares every logits row fed with the float64 reference rm on the same
 * sequence, the entries the compression dropped masked (rerotate: with the new rotation
 * indices). Returns the worst |engine - masked reference|; *effect gets the largest |masked -
 * dense reference| (the compression must matter). */
double test_masked_decode(skv_context *ctx, const ref_model *rm, const int32_t *ids, int T, int W,
                          int N, bool engine, bool rerotate, double *effect);

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
