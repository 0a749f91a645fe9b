/* cli_common.c — option parsing and error helpers shared by the subcommands. */
#include "cli.h"
#include "eval/eval.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sparsekv %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool cli_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* The directory of the running executable (without the trailing slash), or "" if unknown. */
static void exe_dir(char *buf, size_t size) {
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0 || (size_t)n >= size - 1) {
        buf[0] = 0;
        return;
    }
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = 0;
    else
        buf[0] = 0;
}

const char *cli_model_path(const char *cmd, const char *explicit_path) {
    if (explicit_path) return explicit_path;
    static char found[PATH_MAX];
    const char *env = getenv("SKV_DEFAULT_MODEL");
    if (env && *env) {
        if (access(env, R_OK) == 0) return env;
        cli_error(cmd, "SKV_DEFAULT_MODEL=%s cannot be read: %s", env, strerror(errno));
        return NULL;
    }
    char dir[PATH_MAX];
    exe_dir(dir, sizeof dir);
    const char *rel[] = {"/../models/stories260K.gguf", "/../share/sparsekv/stories260K.gguf"};
    for (size_t i = 0; dir[0] && i < sizeof rel / sizeof rel[0]; i++) {
        char candidate[PATH_MAX + 64];
        snprintf(candidate, sizeof candidate, "%s%s", dir, rel[i]);
        if (access(candidate, R_OK) == 0) return realpath(candidate, found) ? found : NULL;
    }
    const char *local[] = {"models/stories260K.gguf",
                           "../shared/models/stories260K/stories260K.gguf"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (access(local[i], R_OK) == 0) return local[i];
    cli_error(cmd,
              "no model given (-m MODEL) and the embedded stories260K.gguf was not found "
              "(looked in %s/../models, %s/../share/sparsekv, ./models and "
              "../shared/models/stories260K; SKV_DEFAULT_MODEL=PATH names another)",
              dir[0] ? dir : "?", dir[0] ? dir : "?");
    return NULL;
}

int cli_model_rc = 1;

skv_model *cli_load_model(const char *cmd, const char *path) {
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    if (!m) cli_error(cmd, "%s", err.msg);
    /* a file that is missing, malformed or of an unsupported kind is bad input (exit 2) */
    cli_model_rc = !m && err.status == SKV_ERR_NOMEM ? 1 : 2;
    return m;
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    skv_json_write_string(f, s, len); /* the eval writer's escaping, one implementation */
}
