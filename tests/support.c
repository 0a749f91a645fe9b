/* support.c — see support.h. */
#include "support.h"
#include "model/synth.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The repository's own copy of the embedded default model (the same file as the fixture). */
#define REPO_STORIES "models/stories260K.gguf"

const char *test_fixture_path(const char *rel) {
    static char buf[4096];
    const char *dir = getenv("SKV_MODELS");
    snprintf(buf, sizeof buf, "%s/%s", dir && *dir ? dir : "../shared/models", rel);
    if (access(buf, R_OK) == 0) return buf;
    if (strcmp(rel, "stories260K/stories260K.gguf") == 0 && access(REPO_STORIES, R_OK) == 0)
        return REPO_STORIES;
    return NULL;
}

const char *test_stories_path(void) {
    const char *p = test_fixture_path("stories260K/stories260K.gguf");
    return p ? p : REPO_STORIES; /* missing: the load fails with the file's name */
}

const char *test_model_path(const char *rel) {
    const char *p = test_fixture_path(rel);
    if (p) return p;
    const char *dir = getenv("SKV_MODELS");
    print_message("[  SKIP    ] fixture %s/%s not found\n", dir && *dir ? dir : "../shared/models",
                  rel);
    skip();
    return NULL; /* not reached: skip() leaves the test */
}

bool test_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

void *test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (size) *size = (size_t)n;
    }
    return buf;
}

const char *test_tmp_path(const char *suffix) {
    static char buf[4096];
    static int counter;
    const char *dir = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/skv_test_%d_%d%s", dir && *dir ? dir : "/tmp", (int)getpid(),
             counter++, suffix);
    return buf;
}

const char *test_cli(void) {
    const char *p = getenv("SKV_CLI");
    return p && *p ? p : "build/sparsekv";
}

char *test_run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    size_t n;
    while (out && (n = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *bigger = realloc(out, cap * 2);
            if (!bigger) break;
            out = bigger;
            cap *= 2;
        }
    }
    int st = pclose(p);
    if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (out) out[len] = 0;
    return out;
}

void bbuf_put(bbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
void bbuf_u8(bbuf *b, uint8_t v) {
    bbuf_put(b, &v, 1);
}
void bbuf_u32(bbuf *b, uint32_t v) {
    bbuf_put(b, &v, 4);
}
void bbuf_u64(bbuf *b, uint64_t v) {
    bbuf_put(b, &v, 8);
}
void bbuf_strn(bbuf *b, const char *s, size_t n) {
    bbuf_u64(b, n);
    bbuf_put(b, s, n);
}
void bbuf_str(bbuf *b, const char *s) {
    bbuf_strn(b, s, strlen(s));
}

skv_context *test_context(const skv_model *m, skv_type kv, int n_ctx, int threads, int capture) {
    skv_context_params cp = skv_context_default_params();
    cp.kv_type = kv;
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.capture_window = capture;
    skv_err err = {0};
    skv_context *ctx = skv_context_new(m, &cp, &err);
    if (!ctx) fprintf(stderr, "context: %s\n", err.msg);
    assert_non_null(ctx);
    return ctx;
}

void test_feed(skv_context *ctx, const int32_t *t, int n, skv_logits_mode mode, float *logits) {
    skv_err err = {0};
    skv_status st = skv_forward(ctx, t, n, mode, logits, &err);
    if (st) fprintf(stderr, "forward: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
}

int test_argmaxf(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

double test_max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

const char *test_synth_llama(int n_layer, int n_head, int n_head_kv, int n_embd, int n_ctx,
                             uint64_t seed, int threads) {
    skv_synth_shape shape = {.name = "test",
                             .note = "test",
                             .n_vocab = 300,
                             .n_ctx_train = n_ctx,
                             .n_ctx = n_ctx,
                             .n_embd = n_embd,
                             .n_layer = n_layer,
                             .n_head = n_head,
                             .n_head_kv = n_head_kv,
                             .n_ff = 256,
                             .rope_theta = 10000.0f,
                             .norm_eps = 1e-5f,
                             .tied = false};
    skv_synth_params sp = {.type = SKV_TYPE_F32, .seed = seed, .n_ctx = 0, .n_threads = threads};
    const char *path = test_tmp_path(".gguf");
    skv_err err = {0};
    skv_status st = skv_synth_write(&shape, &sp, path, &err);
    if (st) fprintf(stderr, "synth: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    return path;
}

const char *test_synth_gqa64(int n_ctx, uint64_t seed, int threads) {
    return test_synth_llama(2, 3, 1, 192, n_ctx, seed, threads);
}

const char *test_synth_tiny(const struct skv_synth_arch *a, int n_ctx_train, uint64_t seed) {
    skv_synth_shape shape = {.name = "test-tiny",
                             .note = "test",
                             .n_vocab = 300,
                             .n_ctx_train = n_ctx_train,
                             .n_ctx = n_ctx_train,
                             .n_embd = 128,
                             .n_layer = 2,
                             .n_head = 4,
                             .n_head_kv = 2,
                             .n_ff = 192,
                             .rope_theta = 10000.0f,
                             .norm_eps = 1e-5f,
                             .tied = false};
    skv_synth_params sp = {.type = SKV_TYPE_F32, .seed = seed, .n_ctx = 0, .n_threads = 1};
    const char *path = test_tmp_path(".gguf");
    skv_err err = {0};
    skv_status st = skv_synth_write_ex(&shape, a, &sp, NULL, path, &err);
    if (st) fprintf(stderr, "synth: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    return path;
}

/* What a compression kept, as the masked reference needs it. */
typedef struct masked {
    int T; /* compressed prefix length */
    int L, H;
    bool *kept;  /* [L, H, T] */
    int *index;  /* [L, H, T]: index of a kept position among the kept */
    int *n_kept; /* [L, H] */
    bool rerotate;
} masked;

static bool mk_visible(int l, int h, int qpos, int kpos, void *u) {
    const masked *mk = u;
    if (qpos < mk->T || kpos >= mk->T) return true; /* the prefix was computed dense */
    return mk->kept[((size_t)l * mk->H + h) * mk->T + kpos];
}

static void mk_rot(int l, int h, int qpos, int kpos, double *qrot, double *krot, void *u) {
    const masked *mk = u;
    if (!mk->rerotate || qpos < mk->T) return; /* natural positions */
    int shift = mk->T - mk->n_kept[l * mk->H + h];
    *qrot = qpos - shift;
    *krot = kpos >= mk->T ? kpos - shift : mk->index[((size_t)l * mk->H + h) * mk->T + kpos];
}

static masked mk_from_cache(const skv_cache *c, int T, bool rerotate) {
    masked mk = {T, skv_cache_n_layer(c), skv_cache_n_head_kv(c), NULL, NULL, NULL, rerotate};
    size_t n = (size_t)mk.L * mk.H;
    mk.kept = calloc(n * T, sizeof(bool));
    mk.index = calloc(n * T, sizeof(int));
    mk.n_kept = calloc(n, sizeof(int));
    assert_true(mk.kept && mk.index && mk.n_kept);
    for (int l = 0; l < mk.L; l++)
        for (int h = 0; h < mk.H; h++) {
            int len = skv_cache_head_len(c, l, h);
            const int32_t *pos = skv_cache_head_positions(c, l, h);
            mk.n_kept[l * mk.H + h] = len;
            for (int j = 0; j < len; j++) {
                assert_true(pos[j] >= 0 && pos[j] < T);
                mk.kept[((size_t)l * mk.H + h) * T + pos[j]] = true;
                mk.index[((size_t)l * mk.H + h) * T + pos[j]] = j;
            }
        }
    return mk;
}

double test_masked_decode(skv_context *ctx, const ref_model *rm, const int32_t *ids, int T, int W,
                          int N, bool engine, bool rerotate, double *effect) {
    const int V = ref_model_n_vocab(rm);
    const int n_prefill = engine ? T + W : T;
    masked mk = mk_from_cache(skv_context_cache_const(ctx), n_prefill, rerotate);
    int32_t *seq = malloc((size_t)(T + W + N) * sizeof *seq);
    float *lf = malloc((size_t)(W + N) * V * sizeof(float));
    assert_true(seq && lf);
    int n_seq = n_prefill, rows = 0;
    memcpy(seq, ids, (size_t)n_prefill * sizeof *seq);
    if (!engine) {
        test_feed(ctx, ids + T, W, SKV_LOGITS_ALL, lf);
        memcpy(seq + n_seq, ids + T, (size_t)W * sizeof *seq);
        n_seq += W;
        rows = W;
    }
    for (int s = 0; s < N; s++) {
        int32_t t = ids[T + W + s];
        if (rows) t = test_argmaxf(lf + (size_t)(rows - 1) * V, V); /* greedy continuation */
        test_feed(ctx, &t, 1, SKV_LOGITS_LAST, lf + (size_t)rows * V);
        seq[n_seq++] = t;
        rows++;
    }
    double *ref = malloc((size_t)n_seq * V * sizeof(double));
    double *dense = malloc((size_t)n_seq * V * sizeof(double));
    assert_true(ref && dense);
    ref_ctl ctl = {mk_visible, mk_rot, &mk};
    ref_forward_ctl(rm, seq, n_seq, ref, &ctl);
    ref_forward(rm, seq, n_seq, dense, NULL, NULL);
    double worst = 0;
    *effect = 0;
    for (int r = 0; r < rows; r++) {
        const double *rr = ref + (size_t)(n_seq - rows + r) * V;
        const double *dd = dense + (size_t)(n_seq - rows + r) * V;
        for (int j = 0; j < V; j++) {
            worst = fmax(worst, fabs(lf[(size_t)r * V + j] - rr[j]));
            *effect = fmax(*effect, fabs(rr[j] - dd[j]));
        }
    }
    free(mk.kept);
    free(mk.index);
    free(mk.n_kept);
    free(seq);
    free(lf);
    free(ref);
    free(dense);
    return worst;
}

char *test_cli_expect(int want_status, const char *fmt, ...) {
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "%s ", test_cli());
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    assert_true(m >= 0 && (size_t)m < sizeof cmd - (size_t)n);
    int st = -1;
    char *out = test_run(cmd, &st);
    assert_non_null(out);
    if (st != want_status) fprintf(stderr, "'%s' exited %d:\n%s\n", cmd, st, out);
    assert_int_equal(st, want_status);
    return out;
}

int test_cli_stderr(const char *args, char **err_out) {
    char cmd[16384];
    char errpath[4096];
    snprintf(errpath, sizeof errpath, "%s", test_tmp_path(".err"));
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", test_cli(), args, errpath);
    int st = -1;
    free(test_run(cmd, &st));
    char *e = test_read_file(errpath, NULL);
    unlink(errpath);
    if (err_out)
        *err_out = e ? e : strdup("");
    else
        free(e);
    return st;
}
