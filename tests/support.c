/* support.c — see support.h. */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *test_model_path(const char *rel) {
    static char buf[4096];
    const char *dir = getenv("SKV_MODELS");
    snprintf(buf, sizeof buf, "%s/%s", dir && *dir ? dir : "../shared/models", rel);
    return buf;
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
