/* runinfo.c — run.json: what a run was (command, model and data identity, configuration),
 * whether it finished, and the checks that --resume and eval-merge make with it.
 *
 * run.json is written to run.json.tmp and renamed into place, so a reader sees the old file or
 * the new one, never half of one. It is read back as untrusted input (eval-merge, --resume):
 * every field is type- and size-checked. */
#include "eval/eval.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

skv_status skv_eval_file_hash(const char *path, uint64_t max_bytes, uint64_t *size, uint64_t *hash,
                              skv_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return skv_err_set(err, SKV_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    uint64_t h = 1469598103934665603ull, n = 0;
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < got && (max_bytes == 0 || n + i < max_bytes); i++) {
            h ^= buf[i];
            h *= 1099511628211ull;
        }
        n += got;
    }
    const int bad = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (bad) return skv_err_set(err, SKV_ERR_IO, "cannot read %s: %s", path, strerror(bad));
    *size = n;
    *hash = h;
    return SKV_OK;
}

static void free_strs(char **s, int n) {
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

void skv_eval_runinfo_free(skv_eval_runinfo *r) {
    if (!r) return;
    for (int i = 0; i < r->n_config; i++) free(r->config[i].value);
    free_strs(r->command, r->n_command);
    free_strs(r->inputs, r->n_inputs);
    free_strs(r->missing, r->n_missing);
    free(r->model);
    free(r->data);
    free(r->cwd);
    memset(r, 0, sizeof *r);
}

skv_status skv_eval_runinfo_set(skv_eval_runinfo *r, const char *key, skv_err *err, const char *fmt,
                                ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int i = 0;
    while (i < r->n_config && strcmp(r->config[i].key, key)) i++;
    if (i == SKV_EVAL_RUN_FIELDS || strlen(key) >= sizeof r->config[0].key)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "run.json: too many fields");
    char *v = strdup(buf);
    if (!v) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    if (i == r->n_config) {
        snprintf(r->config[i].key, sizeof r->config[i].key, "%s", key);
        r->n_config++;
    } else {
        free(r->config[i].value);
    }
    r->config[i].value = v;
    return SKV_OK;
}

const char *skv_eval_runinfo_get(const skv_eval_runinfo *r, const char *key) {
    for (int i = 0; i < r->n_config; i++)
        if (!strcmp(r->config[i].key, key)) return r->config[i].value;
    return NULL;
}

/* Fields recorded since a run.json may lack them, where their absence says nothing: compared
 * only where both runs have them ("simd": the kernel level, recorded since 2026-12-05). */
static bool optional_key(const char *k) {
    return !strcmp(k, "simd");
}

const char *skv_eval_runinfo_diff(const skv_eval_runinfo *a, const skv_eval_runinfo *b) {
    for (int i = 0; i < a->n_config; i++) {
        const char *v = skv_eval_runinfo_get(b, a->config[i].key);
        if (!v && optional_key(a->config[i].key)) continue;
        if (!v || strcmp(v, a->config[i].value)) return a->config[i].key;
    }
    for (int i = 0; i < b->n_config; i++)
        if (!skv_eval_runinfo_get(a, b->config[i].key) && !optional_key(b->config[i].key))
            return b->config[i].key;
    return NULL;
}

static void write_str(FILE *f, const char *s) {
    skv_json_write_string(f, s ? s : "", s ? strlen(s) : 0);
}

static void write_strs(FILE *f, const char *name, char *const *s, int n) {
    fprintf(f, ",\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        write_str(f, s[i]);
    }
    fputc(']', f);
}

skv_status skv_eval_runinfo_write(const char *dir, const skv_eval_runinfo *r, skv_err *err) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/run.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = skv_eval_create(tmp);
    if (!f) return skv_err_set(err, SKV_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "{\"complete\":%s", r->complete ? "true" : "false");
    if (r->n_missing || r->partial) {
        fprintf(f, ",\"partial\":true");
        write_strs(f, "missing", r->missing, r->n_missing);
    }
    write_strs(f, "command", r->command, r->n_command);
    if (r->n_inputs) write_strs(f, "merged_from", r->inputs, r->n_inputs);
    fputs(",\"model\":", f);
    write_str(f, r->model);
    fputs(",\"data\":", f);
    write_str(f, r->data);
    if (r->cwd) {
        fputs(",\"cwd\":", f);
        write_str(f, r->cwd);
    }
    fprintf(f, ",\"shard\":\"%d/%d\",\"config\":{", r->shard_k, r->shard_n);
    for (int i = 0; i < r->n_config; i++) {
        if (i) fputc(',', f);
        write_str(f, r->config[i].key);
        fputc(':', f);
        write_str(f, r->config[i].value);
    }
    fprintf(f,
            "},\"n_samples_total\":%d,\"n_samples\":%d,\"n_skipped\":%d,\"n_configs\":%d,"
            "\"rows\":%lld,\"resumed\":%d,\"wall_ms\":%.1f}\n",
            r->n_samples_total, r->n_samples, r->n_skipped, r->n_configs, r->rows, r->resumed,
            r->wall_ms);
    int e = 0;
    if (fflush(f) != 0 || ferror(f)) e = errno ? errno : EIO;
    if (!e && fsync(fileno(f)) != 0 && errno != EINVAL) e = errno;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) {
        unlink(tmp);
        return skv_err_set(err, SKV_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return SKV_OK;
}

/* ---- reading (untrusted) ------------------------------------------------------------------ */

static skv_status read_strs(const skv_json *o, const char *name, char ***out, int *n,
                            const char *path, skv_err *err) {
    const skv_json *a = skv_json_get(o, name);
    if (!a) return SKV_OK;
    if (a->type != SKV_JSON_ARRAY || a->n > 100000)
        return skv_err_set(err, SKV_ERR_FORMAT, "%s: field '%s' is not a list of strings", path,
                           name);
    *out = calloc((size_t)a->n + 1, sizeof **out);
    if (!*out) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < a->n; i++) {
        const skv_json *s = &a->items[i];
        if (s->type != SKV_JSON_STRING || strlen(s->str) != s->str_len)
            return skv_err_set(err, SKV_ERR_FORMAT, "%s: field '%s' is not a list of strings", path,
                               name);
        if (!((*out)[i] = strdup(s->str))) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        *n = i + 1;
    }
    return SKV_OK;
}

static skv_status read_int(const skv_json *o, const char *name, int *out, const char *path,
                           skv_err *err) {
    long v;
    if (!skv_json_get(o, name)) return SKV_OK;
    if (!skv_json_get_int(o, name, &v) || v < 0 || v > (1L << 40))
        return skv_err_set(err, SKV_ERR_FORMAT, "%s: field '%s' is not a count", path, name);
    *out = v > 2147483647L ? 2147483647 : (int)v;
    return SKV_OK;
}

skv_status skv_eval_runinfo_read(const char *path, skv_eval_runinfo *r, skv_err *err) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) return skv_err_set(err, SKV_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char *buf = malloc((1 << 20) + 1);
    if (!buf) {
        fclose(f);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    size_t n = fread(buf, 1, 1 << 20, f);
    bool too_big = n == (1 << 20) && fgetc(f) != EOF;
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || too_big) {
        free(buf);
        return skv_err_set(err, SKV_ERR_FORMAT, "%s: %s", path,
                           bad ? "read error" : "larger than 1 MiB: not a run.json");
    }
    buf[n] = 0;
    skv_err jerr = {0};
    skv_json *o = skv_json_parse(buf, n, &jerr);
    free(buf);
    if (!o) return skv_err_set(err, SKV_ERR_FORMAT, "%s: bad JSON: %s", path, jerr.msg);
    skv_status st = SKV_OK;
    const skv_json *c = skv_json_get(o, "complete");
    const skv_json *cfg = skv_json_get(o, "config");
    const char *s;
    if (o->type != SKV_JSON_OBJECT || !c || c->type != SKV_JSON_BOOL) {
        st =
            skv_err_set(err, SKV_ERR_FORMAT, "%s: field 'complete' missing or not a boolean", path);
        goto done;
    }
    r->complete = c->boolean;
    if (!cfg || cfg->type != SKV_JSON_OBJECT || cfg->n > SKV_EVAL_RUN_FIELDS) {
        st = skv_err_set(err, SKV_ERR_FORMAT, "%s: field 'config' missing or not an object", path);
        goto done;
    }
    for (int i = 0; i < cfg->n; i++) {
        const skv_json *v = &cfg->items[i];
        if (v->type != SKV_JSON_STRING || strlen(v->str) != v->str_len ||
            strlen(cfg->keys[i]) >= sizeof r->config[0].key) {
            st = skv_err_set(err, SKV_ERR_FORMAT, "%s: field 'config' holds a bad entry", path);
            goto done;
        }
        if ((st = skv_eval_runinfo_set(r, cfg->keys[i], err, "%s", v->str))) goto done;
    }
    if ((st = read_strs(o, "command", &r->command, &r->n_command, path, err)) ||
        (st = read_strs(o, "missing", &r->missing, &r->n_missing, path, err)) ||
        (st = read_strs(o, "merged_from", &r->inputs, &r->n_inputs, path, err)))
        goto done;
    r->partial = r->n_missing > 0;
    if (skv_json_get_string(o, "model", &s) && !(r->model = strdup(s))) goto oom;
    if (skv_json_get_string(o, "data", &s) && !(r->data = strdup(s))) goto oom;
    /* absent in run.json files from before it was recorded */
    if (skv_json_get_string(o, "cwd", &s) && *s && !(r->cwd = strdup(s))) goto oom;
    r->shard_k = 0;
    r->shard_n = 1;
    if (skv_json_get_string(o, "shard", &s)) {
        int k, m, used = 0;
        if (sscanf(s, "%d/%d%n", &k, &m, &used) != 2 || s[used] || k < 0 || m < 1 || k >= m) {
            st = skv_err_set(err, SKV_ERR_FORMAT, "%s: field 'shard' is not i/n", path);
            goto done;
        }
        r->shard_k = k;
        r->shard_n = m;
    }
    if ((st = read_int(o, "n_samples_total", &r->n_samples_total, path, err)) ||
        (st = read_int(o, "n_samples", &r->n_samples, path, err)) ||
        (st = read_int(o, "n_skipped", &r->n_skipped, path, err)) ||
        (st = read_int(o, "n_configs", &r->n_configs, path, err)) ||
        (st = read_int(o, "resumed", &r->resumed, path, err)))
        goto done;
    long rows;
    if (skv_json_get_int(o, "rows", &rows) && rows >= 0) r->rows = rows;
    goto done;
oom:
    st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
done:
    skv_json_free(o);
    if (st) skv_eval_runinfo_free(r);
    return st;
}
