/* cli_common.c — option parsing and error helpers shared by the subcommands. */
#include "cli.h"
#include "eval/eval.h"
#include "kernels/kernels.h" /* skv_simd_has_vnni, skv_simd_has_bf16 */
#include "model/model.h"     /* skv_model_load_meta */
#include "threads.h"         /* skv_n_cores */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Text from the file (or the command line) made safe for a terminal: control bytes (C0, DEL and
 * the C1 controls U+0080..U+009F that some terminals read as CSI), invalid UTF-8 bytes and the
 * backslash become \xNN / \\, so no escape sequence ever reaches the terminal. Valid printable
 * UTF-8 passes (and newlines and tabs with keep_newlines). Writes into buf (truncated to size - 1
 * on a whole escape). */
const char *cli_escape(const char *s, char *buf, size_t size, bool keep_newlines) {
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p && o + 1 < size) {
        unsigned c = *p;
        int len = c < 0x80             ? 1
                  : (c & 0xe0) == 0xc0 ? 2
                  : (c & 0xf0) == 0xe0 ? 3
                  : (c & 0xf8) == 0xf0 ? 4
                                       : 0;
        bool ok = len > 0;
        for (int k = 1; ok && k < len; k++) ok = (p[k] & 0xc0) == 0x80;
        if (ok && len == 2) ok = c >= 0xc2 && !(c == 0xc2 && p[1] < 0xa0); /* overlong, C1 */
        if (ok && len == 3) ok = !(c == 0xe0 && p[1] < 0xa0) && !(c == 0xed && p[1] >= 0xa0);
        if (ok && len == 4)
            ok = c <= 0xf4 && !(c == 0xf0 && p[1] < 0x90) && !(c == 0xf4 && p[1] >= 0x90);
        if (ok && len == 1)
            ok = (c >= 0x20 && c != 0x7f && (c != '\\' || keep_newlines)) ||
                 (keep_newlines && (c == '\n' || c == '\t'));
        if (ok) {
            if (o + (size_t)len >= size) break;
            memcpy(buf + o, p, (size_t)len);
            o += (size_t)len;
            p += len;
        } else if (c == '\\') {
            if (o + 2 >= size) break;
            buf[o++] = '\\';
            buf[o++] = '\\';
            p++;
        } else {
            if (o + 4 >= size) break;
            snprintf(buf + o, 5, "\\x%02x", c);
            o += 4;
            p++;
        }
    }
    buf[o] = 0;
    return buf;
}

void cli_error(const char *cmd, const char *fmt, ...) {
    /* messages quote names and values from files: escaped, so none reaches the terminal as a
     * control sequence (issue 12) */
    char msg[8192], shown[4 * 8192 + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sparsekv %s: %s\n", cmd, cli_escape(msg, shown, sizeof shown, true));
}

bool cli_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

bool cli_output_ok(const char *cmd, const char *path, bool overwrite) {
    struct stat st;
    if (!*path) {
        cli_error(cmd, "the output file's name is empty");
        return false;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_error(cmd, "%s is a directory: give the output file's name", path);
        return false;
    }
    /* the directory it goes in (the writer's temporary file beside it would name the fault) */
    const char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
        if (stat(dir, &st) != 0) {
            cli_error(cmd, "cannot write %s: %s: %s", path, dir, strerror(errno));
            return false;
        }
        if (!S_ISDIR(st.st_mode)) {
            cli_error(cmd, "cannot write %s: %s is not a directory", path, dir);
            return false;
        }
    }
    if (overwrite || lstat(path, &st) != 0) return true; /* nothing there (else the writer says) */
    cli_error(cmd, "%s exists: pass --overwrite to replace it, or choose another output", path);
    return false;
}

/* The parsers take the whole value and nothing around it: strto* would skip leading blanks
 * (and strtoull would then read " -1" as 2^64 - 1). */
static bool bare(const char *s) {
    return s && *s && !isspace((unsigned char)*s);
}

bool cli_parse_int(const char *s, long lo, long hi, long *out) {
    if (!bare(s)) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

void cli_warn_ctx(const char *cmd, int n_ctx, const skv_model *model) {
    const int train = skv_model_hparams(model)->n_ctx_train;
    if (n_ctx > train)
        fprintf(stderr,
                "sparsekv %s: warning: --ctx %d is past the model's training context (%d): "
                "positions past it are ones the model never saw\n",
                cmd, n_ctx, train);
}

void cli_warn_threads(const char *cmd, long n) {
    const long cores = skv_n_cores();
    if (cores > 0 && n > cores) /* allowed (a test of it, say), but never silently */
        fprintf(stderr,
                "sparsekv %s: warning: -t %ld is more than the %ld core%s this process may run "
                "on: the threads take turns on %s, slower than -t %ld\n",
                cmd, n, cores, cores == 1 ? "" : "s", cores == 1 ? "it" : "them", cores);
}

bool cli_parse_threads(const char *cmd, const char *s, long *out) {
    if (cli_parse_int(s, 1, SKV_MAX_THREADS, out)) {
        cli_warn_threads(cmd, *out);
        return true;
    }
    cli_error(cmd, "-t must be a thread count in [1, %d] (without -t: all cores), got '%s'",
              SKV_MAX_THREADS, s);
    return false;
}

bool cli_parse_ctx(const char *cmd, const char *s, int *out) {
    long v;
    if (cli_parse_int(s, 0, 1L << 28, &v)) {
        *out = (int)v;
        return true;
    }
    cli_error(cmd,
              "--ctx must be a context size in [0, %ld] (0: the model's training length), "
              "got '%s'",
              1L << 28, s);
    return false;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!bare(s) || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out) {
    if (!bare(s)) return false;
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
    return cli_load_model_as(cmd, path, false);
}

skv_model *cli_load_model_as(const char *cmd, const char *path, bool meta) {
    skv_err err = {0};
    skv_model *m = meta ? skv_model_load_meta(path, &err) : skv_model_load(path, &err);
    if (!m) cli_error(cmd, "%s", err.msg);
    /* a file that is missing, malformed or of an unsupported kind is bad input (exit 2) */
    cli_model_rc = !m && err.status == SKV_ERR_NOMEM ? 1 : 2;
    return m;
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    skv_json_write_string(f, s, len); /* the eval writer's escaping, one implementation */
}

const char *cli_simd_kernels(void) {
    static char buf[64];
    const char *level = skv_simd_level();
    const bool wide = !strcmp(level, "avx512"); /* the two extensions are used at that level */
    snprintf(buf, sizeof buf, "%s%s%s%s", level, wide && skv_simd_has_vnni() ? "+vnni" : "",
             wide && skv_simd_has_bf16() ? "+bf16" : "", skv_simd_amx() ? "+amx" : "");
    return buf;
}

const char *cli_config_shown(const char *value, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = '\0';
    for (const char *p = value; o + 1 < size;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char tok[64], num[32];
        const char *shown = NULL;
        /* only a decimal fraction as %.17g writes one (digits, one point, no exponent): counts,
         * hashes and names are shown as they are */
        if (len > 0 && len < sizeof tok && memchr(p, '.', len) &&
            strspn(p, "-0123456789.") >= len) {
            memcpy(tok, p, len);
            tok[len] = '\0';
            char *rest;
            const double v = strtod(tok, &rest);
            for (int digits = 1; *rest == '\0' && digits <= 17 && !shown; digits++) {
                snprintf(num, sizeof num, "%.*g", digits, v);
                if (!strchr(num, 'e') && strtod(num, NULL) == v) shown = num;
            }
        }
        o += (size_t)snprintf(buf + o, size - o, "%s%.*s", p == value ? "" : ",",
                              shown ? (int)strlen(shown) : (int)len, shown ? shown : p);
        if (o >= size) o = size - 1;
        if (!end) break;
        p = end + 1;
    }
    return buf;
}

/* The temporaries the library's writers make beside path (gguf.c: PATH.tmp.PID.N, N counting
 * this process's writes from 0; synth.c: PATH.partPID, written through PATH.partPID.tmp.PID.N),
 * removed when SIGINT, SIGTERM or SIGHUP ends the process, which then ends as the signal
 * would. Only names holding this process's id: never another's files. */
#define CLEANUP_NAMES 4
static char cleanup_names[CLEANUP_NAMES][4200];
static volatile sig_atomic_t n_cleanup;

static void cleanup_and_die(int sig) {
    for (int i = 0; i < n_cleanup; i++) unlink(cleanup_names[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_remove_temporaries_on_signal(const char *path) {
    const long pid = (long)getpid();
    snprintf(cleanup_names[0], sizeof cleanup_names[0], "%s.tmp.%ld.0", path, pid);
    snprintf(cleanup_names[1], sizeof cleanup_names[1], "%s.tmp.%ld.1", path, pid);
    snprintf(cleanup_names[2], sizeof cleanup_names[2], "%s.part%ld", path, pid);
    snprintf(cleanup_names[3], sizeof cleanup_names[3], "%s.part%ld.tmp.%ld.0", path, pid, pid);
    n_cleanup = CLEANUP_NAMES;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cleanup_and_die;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* a signal the shell ignores (nohup, a background job's SIGINT) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
}
