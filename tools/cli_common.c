/* cli_common.c — option parsing and error helpers shared by the subcommands. */
#include "cli.h"
#include "eval/eval.h"

#include <errno.h>
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

const char *cli_model_path(const char *cmd, const char *explicit_path) {
    if (explicit_path) return explicit_path;
    if (access(SKV_DEFAULT_MODEL, R_OK) == 0) return SKV_DEFAULT_MODEL;
    cli_error(cmd,
              "no model given (-m MODEL) and the default model %s is not there "
              "(run from the project root, next to ../shared)",
              SKV_DEFAULT_MODEL);
    return NULL;
}

skv_model *cli_load_model(const char *cmd, const char *path) {
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    if (!m) cli_error(cmd, "%s", err.msg);
    return m;
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    skv_json_write_string(f, s, len); /* the eval writer's escaping, one implementation */
}
