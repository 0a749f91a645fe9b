/* report.c — results.jsonl lines out and back in, and the summary made from them.
 *
 * A run's summary is always computed from its results.jsonl as read back (%.17g doubles
 * round-trip exactly), rows sorted by (sample, depth, config) and summed in that order, so
 * eval-merge over shards reproduces a single run's summary.csv byte for byte. */
#include "eval/eval.h"
#include "policies.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static const char *protocol_name(skv_protocol p) {
    return p == SKV_PROTOCOL_ENGINE ? "engine" : "seed";
}
static const char *positions_name(skv_position_mode m) {
    return m == SKV_POSITIONS_REROTATE ? "rerotate" : "original";
}
static const char *pooling_name(skv_pooling p) {
    return p == SKV_POOL_AVG ? "avg" : "max";
}

static void wkey(FILE *f, const char *k) {
    fprintf(f, ",\"%s\":", k);
}
static void wd(FILE *f, const char *k, double x) {
    wkey(f, k);
    skv_json_write_double(f, x);
}
static void wi(FILE *f, const char *k, long long x) {
    wkey(f, k);
    fprintf(f, "%lld", x);
}
static void ws(FILE *f, const char *k, const char *s) {
    wkey(f, k);
    skv_json_write_string(f, s ? s : "", s ? strlen(s) : 0);
}

/* The LM metrics of a row (prefill and decode rows write the same names). */
static void write_lm_metrics(FILE *f, const skv_eval_lm_metrics *m) {
    wi(f, "n_tokens", m->n_tokens);
    wd(f, "kl_mean", m->kl_mean);
    wd(f, "kl_median", m->kl_median);
    wd(f, "kl_p90", m->kl_p90);
    wd(f, "kl_p99", m->kl_p99);
    wd(f, "kl_max", m->kl_max);
    wd(f, "top1", m->top1);
    wi(f, "same_top", m->n_same_top);
    wd(f, "nll_ref", m->nll_ref);
    wd(f, "nll_cmp", m->nll_cmp);
    wd(f, "ppl_ref", m->ppl_ref);
    wd(f, "ppl_cmp", m->ppl_cmp);
    wd(f, "ln_ppl_ratio", m->ln_ppl_ratio);
}

const char *skv_eval_task_name(skv_eval_task task) {
    switch (task) {
    case SKV_EVAL_LM:
        return "lm";
    case SKV_EVAL_PASSKEY:
        return "passkey";
    case SKV_EVAL_KV:
        return "kv";
    case SKV_EVAL_MULTIKEY:
        return "multikey";
    }
    return "?";
}

bool skv_eval_task_from_name(const char *name, skv_eval_task *out) {
    for (int t = SKV_EVAL_LM; t <= SKV_EVAL_MULTIKEY; t++)
        if (name && !strcmp(name, skv_eval_task_name((skv_eval_task)t))) {
            *out = (skv_eval_task)t;
            return true;
        }
    return false;
}

void skv_eval_write_result(FILE *f, const skv_eval_settings *st, const skv_eval_result *r) {
    const skv_eval_sample *s = r->sample;
    const skv_eval_config *c = r->cfg;
    bool lm = st->task == SKV_EVAL_LM;
    fprintf(f, "{\"task\":\"%s\"", skv_eval_task_name(st->task));
    wi(f, "sample", s->index);
    wi(f, "line", s->line);
    wi(f, "depth_index", s->depth_index);
    wi(f, "config", c->index);
    ws(f, "model", st->model_path);
    ws(f, "policy", c->policy);
    wd(f, "keep_frac", c->keep_frac);
    ws(f, "protocol", protocol_name(c->protocol));
    ws(f, "positions", positions_name(c->positions));
    wi(f, "seed", (long long)c->seed);
    wi(f, "sinks", st->sinks);
    wi(f, "kernel", st->kernel);
    ws(f, "pooling", pooling_name(st->pooling));
    wi(f, "window_keep", st->window_keep);
    ws(f, "kv_type", skv_type_name(st->kv_type));
    wi(f, "n_prefix", s->n_prefix);
    wi(f, "n_window", s->n_window);
    wi(f, "n_continuation", lm ? s->n_cont : 0);
    wi(f, "greedy", st->greedy);
    wi(f, "T", r->T);
    wi(f, "keep", r->keep);
    if (lm) {
        write_lm_metrics(f, &r->m);
    } else {
        wd(f, "depth", s->depth);
        ws(f, "key", s->key);
        ws(f, "output", r->output);
        ws(f, "found", r->found);
        wkey(f, "correct");
        fputs(r->correct ? "true" : "false", f);
        ws(f, "ref_output", r->ref_output);
        ws(f, "ref_found", r->ref_found);
        wkey(f, "ref_correct");
        fputs(r->ref_correct ? "true" : "false", f);
    }
    wi(f, "greedy_match", r->greedy_match);
    wi(f, "kv_bytes_before", (long long)r->bytes_before);
    wi(f, "kv_bytes_after", (long long)r->bytes_after);
    wkey(f, "kept_per_layer");
    fputc('[', f);
    for (int l = 0; r->kept && l < r->n_layer; l++) {
        long long sum = 0;
        for (int h = 0; h < r->n_head_kv; h++) sum += r->kept[l * r->n_head_kv + h];
        fprintf(f, "%s%lld", l ? "," : "", sum);
    }
    fputc(']', f);
    wkey(f, "kept");
    fputc('[', f);
    for (int l = 0; r->kept && l < r->n_layer; l++) {
        fputs(l ? ",[" : "[", f);
        for (int h = 0; h < r->n_head_kv; h++)
            fprintf(f, "%s%d", h ? "," : "", r->kept[l * r->n_head_kv + h]);
        fputc(']', f);
    }
    fputc(']', f);
    wkey(f, "layer_budgets");
    fputc('[', f);
    for (int l = 0; r->layer_budgets && l < r->n_layer; l++)
        fprintf(f, "%s%d", l ? "," : "", r->layer_budgets[l]);
    fputc(']', f);
    /* what the selection really was, per layer: forced entries and entries chosen by score */
    wkey(f, "forced");
    fputc('[', f);
    for (int l = 0; r->forced && l < r->n_layer; l++)
        fprintf(f, "%s%d", l ? "," : "", r->forced[l]);
    fputc(']', f);
    wkey(f, "by_score");
    fputc('[', f);
    for (int l = 0; r->by_score && l < r->n_layer; l++)
        fprintf(f, "%s%d", l ? "," : "", r->by_score[l]);
    fputc(']', f);
    wd(f, "compress_ms", r->compress_ms);
    wd(f, "window_ms", r->window_ms);
    wd(f, "cache_ms", r->cache_ms);
    wd(f, "eval_ms", r->eval_ms);
    fputs("}\n", f);
}

void skv_eval_write_decode(FILE *f, const skv_eval_settings *st, const skv_eval_decode_result *r) {
    const skv_eval_sample *s = r->sample;
    const skv_eval_config *c = r->cfg;
    fprintf(f, "{\"task\":\"%s\",\"mode\":\"decode\"", skv_eval_task_name(SKV_EVAL_LM));
    wi(f, "sample", s->index);
    wi(f, "line", s->line);
    wi(f, "depth_index", s->depth_index);
    wi(f, "config", c->index);
    ws(f, "model", st->model_path);
    ws(f, "policy", c->policy);
    wi(f, "budget", c->budget);
    wi(f, "compress_every", c->compress_every);
    ws(f, "protocol", protocol_name(c->protocol));
    ws(f, "positions", positions_name(c->positions));
    wi(f, "sinks", st->sinks);
    wi(f, "kernel", st->kernel);
    ws(f, "pooling", pooling_name(st->pooling));
    wi(f, "window_keep", st->window_keep);
    ws(f, "kv_type", skv_type_name(st->kv_type));
    wi(f, "n_prefix", s->n_prefix);
    wi(f, "n_window", s->n_window);
    wi(f, "n_continuation", s->n_cont);
    write_lm_metrics(f, &r->m);
    wi(f, "cuts", r->cuts);
    wi(f, "max_entries", r->max_entries);
    wkey(f, "entries");
    fputc('[', f);
    for (int i = 0; i < r->n_steps; i++) fprintf(f, "%s%d", i ? "," : "", r->entries[i]);
    fputc(']', f);
    wd(f, "eval_ms", r->eval_ms);
    fputs("}\n", f);
}

/* ------------------------------------------------------------------------------------------ */

void skv_eval_rows_free(skv_eval_rows *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->rows[i].line), free(r->rows[i].entries);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

static bool get_bool01(const skv_json *o, const char *k, double *out) {
    const skv_json *v = skv_json_get(o, k);
    if (!v) return false;
    if (v->type == SKV_JSON_BOOL) {
        *out = v->boolean ? 1.0 : 0.0;
        return true;
    }
    if (v->type == SKV_JSON_NUMBER) {
        *out = v->number;
        return true;
    }
    return false;
}

/* A string value read from a results file, shown in an error message: printable ASCII as is,
 * every other byte as \xNN, at most 48 bytes of it. */
static void show_value(char *buf, size_t size, const char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 48) {
            o += (size_t)snprintf(buf + o, size - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
    }
    buf[o] = 0;
}

/* The string member key of o, or NULL when absent, not a string or holding a NUL byte. */
static const char *get_str(const skv_json *o, const char *key, size_t *len) {
    const skv_json *v = skv_json_get(o, key);
    if (!v || v->type != SKV_JSON_STRING || !v->str || strlen(v->str) != v->str_len) return NULL;
    *len = v->str_len;
    return v->str;
}

bool skv_eval_protocol_from_name(const char *s, skv_protocol *out) {
    if (!s) return false;
    if (!strcmp(s, "seed"))
        *out = SKV_PROTOCOL_SEED;
    else if (!strcmp(s, "engine"))
        *out = SKV_PROTOCOL_ENGINE;
    else
        return false;
    return true;
}

bool skv_eval_positions_from_name(const char *s, skv_position_mode *out) {
    if (!s) return false;
    if (!strcmp(s, "original"))
        *out = SKV_POSITIONS_ORIGINAL;
    else if (!strcmp(s, "rerotate"))
        *out = SKV_POSITIONS_REROTATE;
    else
        return false;
    return true;
}

/* The LM metrics every kl row carries (prefill and decode rows). */
static bool lm_metrics_from_json(const skv_json *o, skv_eval_row *row, const char **field) {
    long l;
#define NEED(cond, name)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            *field = name;                                                                         \
            return false;                                                                          \
        }                                                                                          \
    } while (0)
    NEED(skv_json_get_int(o, "n_tokens", &l) && l >= 1 && l < (1L << 30), "n_tokens");
    row->n_tokens = (int)l;
    NEED(skv_json_get_int(o, "same_top", &l) && l >= 0 && l <= row->n_tokens, "same_top");
    row->n_same_top = (int)l;
    NEED(skv_json_get_number(o, "kl_mean", &row->kl_mean), "kl_mean");
    NEED(skv_json_get_number(o, "kl_median", &row->kl_median), "kl_median");
    NEED(skv_json_get_number(o, "kl_p90", &row->kl_p90), "kl_p90");
    NEED(skv_json_get_number(o, "kl_p99", &row->kl_p99), "kl_p99");
    NEED(skv_json_get_number(o, "kl_max", &row->kl_max), "kl_max");
    NEED(skv_json_get_number(o, "top1", &row->top1), "top1");
    NEED(skv_json_get_number(o, "nll_ref", &row->nll_ref), "nll_ref");
    NEED(skv_json_get_number(o, "nll_cmp", &row->nll_cmp), "nll_cmp");
    NEED(skv_json_get_number(o, "ln_ppl_ratio", &row->ln_ppl_ratio), "ln_ppl_ratio");
    return true;
}

/* The rest of a "mode": "decode" row (task lm; policy already read). */
static bool decode_row_from_json(const skv_json *o, skv_eval_row *row, const char **field) {
    long l;
    double d;
    NEED(row->task == SKV_EVAL_LM, "task");
    NEED(skv_json_get_int(o, "budget", &l) && l >= 1 && l < (1L << 30), "budget");
    row->budget = (int)l;
    NEED(skv_json_get_int(o, "compress_every", &l) && l >= 1 && l < (1L << 30), "compress_every");
    row->compress_every = (int)l;
    NEED(skv_json_get_int(o, "cuts", &l) && l >= 0 && l < (1L << 30), "cuts");
    row->cuts = (int)l;
    NEED(skv_json_get_int(o, "max_entries", &l) && l >= 0 && l < (1L << 30), "max_entries");
    row->max_entries = (int)l;
    /* what the writer puts there: nothing else is ever shown */
    snprintf(row->protocol, sizeof row->protocol, "engine");
    snprintf(row->positions, sizeof row->positions, "rerotate");
    row->keep_frac = 0;
    if (!lm_metrics_from_json(o, row, field)) return false;
    const skv_json *e = skv_json_get(o, "entries");
    NEED(e && e->type == SKV_JSON_ARRAY && e->n >= 1 && e->n <= (1 << 24), "entries");
    row->entries = malloc((size_t)e->n * sizeof *row->entries);
    NEED(row->entries, "entries (out of memory)");
    row->n_entries = e->n;
    for (int i = 0; i < e->n; i++) {
        const skv_json *v = &e->items[i];
        NEED(v->type == SKV_JSON_NUMBER && v->number >= 0 && v->number < (1 << 30) &&
                 v->number == (int)v->number,
             "entries");
        row->entries[i] = (int)v->number;
    }
    row->eval_ms = skv_json_get_number(o, "eval_ms", &d) ? d : NAN;
    row->compress_ms = row->window_ms = row->cache_ms = row->bytes_before = row->bytes_after = NAN;
    return true;
}
#undef NEED

/* Fills row from a parsed line. On failure names the field in *field and says what is wrong
 * with it in why. Every string kept from the line is checked against the names this program
 * writes (the policy registry, the protocols, the position modes), so nothing else can reach a
 * summary, a CSV or a gnuplot script. */
static bool row_from_json(const skv_json *o, skv_eval_row *row, const char **field, char *why,
                          size_t why_size) {
    const char *s;
    size_t len;
    long l;
    double d;
    char shown[256];
    why[0] = 0;
#define NEED(cond, name)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            *field = name;                                                                         \
            return false;                                                                          \
        }                                                                                          \
    } while (0)
    NEED(o->type == SKV_JSON_OBJECT, "(an object)");
    NEED((s = get_str(o, "task", &len)) && skv_eval_task_from_name(s, &row->task), "task");
    NEED(skv_json_get_int(o, "sample", &l) && l >= 0 && l < (1L << 30), "sample");
    row->sample = (int)l;
    NEED(skv_json_get_int(o, "config", &l) && l >= 0 && l < (1L << 30), "config");
    row->config = (int)l;
    row->depth_index = 0;
    if (skv_json_get_int(o, "depth_index", &l)) {
        NEED(l >= 0 && l < (1L << 20), "depth_index");
        row->depth_index = (int)l;
    }
    NEED((s = get_str(o, "policy", &len)), "policy");
    const char *canon = skv_policy_canonical(s);
    if (!canon || strlen(canon) >= sizeof row->policy) {
        show_value(shown, sizeof shown, s, len);
        snprintf(why, why_size, "unknown policy \"%s\" (known: %s)", shown, skv_policy_list());
        NEED(false, "policy");
    }
    snprintf(row->policy, sizeof row->policy, "%s", canon);
    row->decode = false;
    if ((s = get_str(o, "mode", &len)) || skv_json_get(o, "mode")) {
        NEED(s && (!strcmp(s, "decode") || !strcmp(s, "prefill")), "mode");
        row->decode = !strcmp(s, "decode");
    }
    if (row->decode) return decode_row_from_json(o, row, field);
    NEED(skv_json_get_number(o, "keep_frac", &row->keep_frac) && row->keep_frac > 0 &&
             row->keep_frac <= 1,
         "keep_frac");
    skv_protocol proto;
    NEED((s = get_str(o, "protocol", &len)), "protocol");
    if (!skv_eval_protocol_from_name(s, &proto)) {
        show_value(shown, sizeof shown, s, len);
        snprintf(why, why_size, "unknown protocol \"%s\" (known: seed, engine)", shown);
        NEED(false, "protocol");
    }
    snprintf(row->protocol, sizeof row->protocol, "%s", s);
    skv_position_mode pm;
    NEED((s = get_str(o, "positions", &len)), "positions");
    if (!skv_eval_positions_from_name(s, &pm)) {
        show_value(shown, sizeof shown, s, len);
        snprintf(why, why_size, "unknown position mode \"%s\" (known: original, rerotate)", shown);
        NEED(false, "positions");
    }
    snprintf(row->positions, sizeof row->positions, "%s", s);
    NEED(skv_json_get_int(o, "seed", &l) && l >= 0, "seed");
    row->seed = (uint64_t)l;
    NEED(skv_json_get_int(o, "greedy", &l) && l >= 0 && l < (1L << 30), "greedy");
    row->greedy = (int)l;
    NEED(skv_json_get_int(o, "greedy_match", &l) && l >= 0 && l <= row->greedy, "greedy_match");
    row->greedy_match = (int)l;
    if (row->task == SKV_EVAL_LM) {
        if (!lm_metrics_from_json(o, row, field)) return false;
    } else {
        NEED(skv_json_get_number(o, "depth", &row->depth), "depth");
        NEED(get_bool01(o, "correct", &row->correct), "correct");
        NEED(get_bool01(o, "ref_correct", &row->ref_correct), "ref_correct");
    }
    row->by_score_share = NAN; /* optional: rows from before these fields lack them */
    const skv_json *fa = skv_json_get(o, "forced"), *ba = skv_json_get(o, "by_score");
    if (fa && ba && fa->type == SKV_JSON_ARRAY && ba->type == SKV_JSON_ARRAY && fa->n == ba->n) {
        double nf = 0, nb = 0;
        bool ok = true;
        for (int i = 0; i < fa->n && ok; i++) {
            ok = fa->items[i].type == SKV_JSON_NUMBER && ba->items[i].type == SKV_JSON_NUMBER &&
                 fa->items[i].number >= 0 && ba->items[i].number >= 0;
            if (ok) nf += fa->items[i].number, nb += ba->items[i].number;
        }
        if (ok && nf + nb > 0) row->by_score_share = nb / (nf + nb);
    }
    row->bytes_before = skv_json_get_number(o, "kv_bytes_before", &d) ? d : NAN;
    row->bytes_after = skv_json_get_number(o, "kv_bytes_after", &d) ? d : NAN;
    row->compress_ms = skv_json_get_number(o, "compress_ms", &d) ? d : NAN;
    row->window_ms = skv_json_get_number(o, "window_ms", &d) ? d : NAN;
    row->cache_ms = skv_json_get_number(o, "cache_ms", &d) ? d : NAN; /* older rows lack it */
    row->eval_ms = skv_json_get_number(o, "eval_ms", &d) ? d : NAN;
#undef NEED
    return true;
}

skv_status skv_eval_read_results(const char *path, skv_eval_rows *rows, skv_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return skv_err_set(err, SKV_ERR_IO, "cannot open results file %s: %s", path,
                           strerror(errno));
    skv_status st = skv_eval_read_results_stream(f, path, rows, err);
    fclose(f);
    return st;
}

skv_status skv_eval_read_results_stream(FILE *f, const char *path, skv_eval_rows *rows,
                                        skv_err *err) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;
    skv_status st = SKV_OK;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (lineno == 1 && n >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) { /* UTF-8 BOM */
            memmove(line, line + 3, (size_t)n - 2);
            n -= 3;
        }
        bool blank = true;
        for (ssize_t i = 0; i < n; i++)
            if (line[i] != ' ' && line[i] != '\t') blank = false;
        if (blank) continue;
        skv_err jerr = {0};
        skv_json *v = skv_json_parse(line, (size_t)n, &jerr);
        if (!v) {
            st = skv_err_set(err, SKV_ERR_FORMAT, "%s:%d: bad JSON: %s", path, lineno, jerr.msg);
            break;
        }
        if (rows->n == rows->cap) {
            int nc = rows->cap ? rows->cap * 2 : 256;
            skv_eval_row *nr =
                rows->cap > (1 << 28) ? NULL : realloc(rows->rows, (size_t)nc * sizeof *nr);
            if (!nr) {
                skv_json_free(v);
                st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            rows->rows = nr;
            rows->cap = nc;
        }
        skv_eval_row *row = &rows->rows[rows->n];
        memset(row, 0, sizeof *row);
        const char *field = NULL;
        char why[512];
        bool ok = row_from_json(v, row, &field, why, sizeof why);
        skv_json_free(v);
        if (!ok) {
            free(row->entries);
            if (why[0])
                st = skv_err_set(err, SKV_ERR_FORMAT, "%s:%d: field '%s': %s", path, lineno, field,
                                 why);
            else
                st = skv_err_set(err, SKV_ERR_FORMAT,
                                 "%s:%d: not an eval result line (field '%s' missing or invalid)",
                                 path, lineno, field);
            break;
        }
        row->line = malloc((size_t)n + 1);
        if (!row->line) {
            free(row->entries);
            st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
        memcpy(row->line, line, (size_t)n + 1);
        row->file = path;
        rows->n++;
    }
    if (!st && ferror(f)) st = skv_err_set(err, SKV_ERR_IO, "error reading %s", path);
    free(line);
    return st;
}

static int row_cmp(const void *a, const void *b) {
    const skv_eval_row *x = a, *y = b;
    if (x->sample != y->sample) return x->sample < y->sample ? -1 : 1;
    if (x->depth_index != y->depth_index) return x->depth_index < y->depth_index ? -1 : 1;
    if (x->config != y->config) return x->config < y->config ? -1 : 1;
    return 0;
}

static bool same_config(const skv_eval_row *a, const skv_eval_row *b) {
    return !strcmp(a->policy, b->policy) && a->keep_frac == b->keep_frac &&
           a->decode == b->decode && a->budget == b->budget &&
           a->compress_every == b->compress_every && !strcmp(a->protocol, b->protocol) &&
           !strcmp(a->positions, b->positions) && a->seed == b->seed && a->greedy == b->greedy;
}

/* qsort has no context argument; rows_check sets this before sorting (single-threaded use) */
static _Thread_local const skv_eval_row *cfg_sort_rows;

static int cfg_order_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    const skv_eval_row *x = &cfg_sort_rows[i], *y = &cfg_sort_rows[j];
    if (x->config != y->config) return x->config < y->config ? -1 : 1;
    return (i > j) - (i < j);
}

skv_status skv_eval_rows_check(skv_eval_rows *rows, skv_err *err) {
    if (rows->n < 1) return skv_err_set(err, SKV_ERR_FORMAT, "no eval results to summarize");
    qsort(rows->rows, (size_t)rows->n, sizeof rows->rows[0], row_cmp);
    for (int i = 0; i < rows->n; i++) {
        const skv_eval_row *r = &rows->rows[i];
        if (r->task != rows->rows[0].task)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "%s and %s hold results of different tasks (%s and %s)",
                               rows->rows[0].file, r->file, skv_eval_task_name(rows->rows[0].task),
                               skv_eval_task_name(r->task));
        if (r->decode != rows->rows[0].decode)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "%s and %s mix decoding-time rows (eval --budget) with rows "
                               "compressed after the prefill: merge each kind on its own",
                               rows->rows[0].file, r->file);
        if (i > 0 && row_cmp(r, r - 1) == 0)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "sample %d (depth %d) config %d appears twice (in %s and %s): "
                               "were the shards run with different --shard counts, or one given "
                               "twice?",
                               r->sample, r->depth_index, r->config, (r - 1)->file, r->file);
    }
    /* one config index must always name the same configuration: rows ordered by (config,
     * row) so each index's first row comes first (no table sized by the largest index, which
     * a hostile file sets to 2^30) */
    int *order = malloc((size_t)rows->n * sizeof *order);
    if (!order) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < rows->n; i++) order[i] = i;
    cfg_sort_rows = rows->rows;
    qsort(order, (size_t)rows->n, sizeof *order, cfg_order_cmp);
    skv_status st = SKV_OK;
    for (int k = 1, first = 0; k < rows->n && !st; k++) {
        const skv_eval_row *r = &rows->rows[order[k]], *f = &rows->rows[order[first]];
        if (r->config != f->config) {
            first = k;
        } else if (!same_config(f, r)) {
            st = skv_err_set(err, SKV_ERR_FORMAT,
                             "config %d means different settings in %s and %s: the runs were "
                             "made with different arguments",
                             r->config, f->file, r->file);
        }
    }
    free(order);
    return st;
}

/* ------------------------------------------------------------------------------------------ */

skv_status skv_eval_mkdirs(const char *dir, skv_err *err) {
    size_t n = strlen(dir);
    if (n == 0) return skv_err_set(err, SKV_ERR_INVALID_ARG, "empty output directory name");
    char *p = malloc(n + 1);
    if (!p) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            skv_status st =
                skv_err_set(err, SKV_ERR_IO, "cannot create directory %s: %s", p, strerror(errno));
            free(p);
            return st;
        }
        p[i] = c;
    }
    free(p);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return skv_err_set(err, SKV_ERR_IO, "%s exists and is not a directory", dir);
    return SKV_OK;
}

/* One summary row: a configuration without its seed (and, for passkey, one depth). */
typedef struct group {
    int first_config, depth_index;
    const skv_eval_row *proto; /* a member row: names the configuration */
    int *members;              /* row indices, in row order */
    int n, cap;
} group;

typedef struct gstats {
    int n_samples, n_seeds, n_rows;
    long long n_tokens, n_same_top;
    skv_eval_stat kl_mean, kl_median, kl_p90, kl_p99, top1, ln_ppl, greedy_match, accuracy,
        ref_accuracy;
    double kl_mean_seed_sd, top1_seed_sd, ln_ppl_seed_sd, greedy_seed_sd, accuracy_seed_sd;
    double kl_max, same_top_p, same_top_unc, ppl_ref, ppl_cmp;
    double bytes_before, bytes_after, compress_ms, window_ms, cache_ms, eval_ms;
    double by_score_share; /* mean over the rows */
    int greedy;
} gstats;

static bool same_group(const skv_eval_row *a, const skv_eval_row *b) {
    return !strcmp(a->policy, b->policy) && a->keep_frac == b->keep_frac &&
           !strcmp(a->protocol, b->protocol) && !strcmp(a->positions, b->positions) &&
           a->depth_index == b->depth_index;
}

static int group_cmp(const void *a, const void *b) {
    const group *x = a, *y = b;
    if (x->first_config != y->first_config) return x->first_config < y->first_config ? -1 : 1;
    return (x->depth_index > y->depth_index) - (x->depth_index < y->depth_index);
}

typedef double (*row_metric)(const skv_eval_row *r);
static double m_kl_mean(const skv_eval_row *r) {
    return r->kl_mean;
}
static double m_kl_median(const skv_eval_row *r) {
    return r->kl_median;
}
static double m_kl_p90(const skv_eval_row *r) {
    return r->kl_p90;
}
static double m_kl_p99(const skv_eval_row *r) {
    return r->kl_p99;
}
static double m_top1(const skv_eval_row *r) {
    return r->top1;
}
static double m_ln_ppl(const skv_eval_row *r) {
    return r->ln_ppl_ratio;
}
static double m_greedy(const skv_eval_row *r) {
    return r->greedy_match;
}
static double m_correct(const skv_eval_row *r) {
    return r->correct;
}
static double m_ref_correct(const skv_eval_row *r) {
    return r->ref_correct;
}

/* Per-sample values (mean over the sample's seeds) -> stat over samples; *seed_sd = sd over
 * seeds of the per-seed means over samples. Members are sorted by (sample, config). */
static skv_eval_stat group_stat(const skv_eval_rows *rows, const group *g, row_metric fn,
                                double *vals, double *seed_sd) {
    int ns = 0;
    for (int i = 0; i < g->n;) {
        const skv_eval_row *r = &rows->rows[g->members[i]];
        double sum = 0;
        int k = 0;
        while (i < g->n && rows->rows[g->members[i]].sample == r->sample) {
            sum += fn(&rows->rows[g->members[i]]);
            k++;
            i++;
        }
        vals[ns++] = sum / k;
    }
    skv_eval_stat s = skv_eval_stat_of(vals, ns);
    if (seed_sd) {
        /* seeds present, ascending (they are small integers 0..n_seeds-1 in practice) */
        uint64_t seeds[256];
        int n_seeds = 0;
        for (int i = 0; i < g->n; i++) {
            uint64_t sd = rows->rows[g->members[i]].seed;
            bool seen = false;
            for (int k = 0; k < n_seeds; k++) seen |= seeds[k] == sd;
            if (!seen && n_seeds < 256) seeds[n_seeds++] = sd;
        }
        for (int a = 1; a < n_seeds; a++) /* insertion sort */
            for (int b = a; b > 0 && seeds[b] < seeds[b - 1]; b--) {
                uint64_t t = seeds[b];
                seeds[b] = seeds[b - 1];
                seeds[b - 1] = t;
            }
        double means[256];
        for (int k = 0; k < n_seeds; k++) {
            double sum = 0;
            int c = 0;
            for (int i = 0; i < g->n; i++) {
                const skv_eval_row *r = &rows->rows[g->members[i]];
                if (r->seed != seeds[k]) continue;
                sum += fn(r);
                c++;
            }
            means[k] = sum / c;
        }
        *seed_sd = n_seeds >= 2 ? skv_eval_stat_of(means, n_seeds).sd : NAN;
    }
    return s;
}

static void compute_stats(const skv_eval_rows *rows, const group *g, double *vals, gstats *o) {
    memset(o, 0, sizeof *o);
    o->n_rows = g->n;
    const skv_eval_row *p = g->proto;
    o->greedy = p->greedy;
    uint64_t seeds_seen[256];
    int n_seeds = 0;
    double sum_nll_ref = 0, sum_nll_cmp = 0;
    int n_cache = 0;
    o->kl_max = -INFINITY;
    for (int i = 0; i < g->n; i++) {
        const skv_eval_row *r = &rows->rows[g->members[i]];
        if (i == 0 || r->sample != rows->rows[g->members[i - 1]].sample) o->n_samples++;
        bool seen = false;
        for (int k = 0; k < n_seeds; k++) seen |= seeds_seen[k] == r->seed;
        if (!seen && n_seeds < 256) seeds_seen[n_seeds++] = r->seed;
        o->n_tokens += r->n_tokens;
        o->n_same_top += r->n_same_top;
        sum_nll_ref += r->nll_ref * r->n_tokens;
        sum_nll_cmp += r->nll_cmp * r->n_tokens;
        if (isnan(r->kl_max) || r->kl_max > o->kl_max) o->kl_max = r->kl_max;
        o->bytes_before += r->bytes_before;
        o->bytes_after += r->bytes_after;
        o->compress_ms += r->compress_ms;
        o->window_ms += r->window_ms;
        if (isfinite(r->cache_ms)) o->cache_ms += r->cache_ms, n_cache++; /* older rows lack it */
        o->eval_ms += r->eval_ms;
        o->by_score_share += r->by_score_share;
    }
    o->n_seeds = n_seeds;
    o->bytes_before /= g->n;
    o->bytes_after /= g->n;
    o->compress_ms /= g->n;
    o->window_ms /= g->n;
    o->cache_ms = n_cache ? o->cache_ms / n_cache : NAN;
    o->eval_ms /= g->n;
    o->by_score_share /= g->n;
    if (p->task == SKV_EVAL_LM) {
        o->kl_mean = group_stat(rows, g, m_kl_mean, vals, &o->kl_mean_seed_sd);
        o->kl_median = group_stat(rows, g, m_kl_median, vals, NULL);
        o->kl_p90 = group_stat(rows, g, m_kl_p90, vals, NULL);
        o->kl_p99 = group_stat(rows, g, m_kl_p99, vals, NULL);
        o->top1 = group_stat(rows, g, m_top1, vals, &o->top1_seed_sd);
        o->ln_ppl = group_stat(rows, g, m_ln_ppl, vals, &o->ln_ppl_seed_sd);
        /* llama-perplexity's "same top p": pooled over every compared token */
        const skv_eval_pooled pl =
            skv_eval_pool(o->n_tokens, o->n_same_top, sum_nll_ref, sum_nll_cmp);
        o->same_top_p = pl.same_top_p;
        o->same_top_unc = pl.same_top_unc;
        o->ppl_ref = pl.ppl_ref;
        o->ppl_cmp = pl.ppl_cmp;
    } else {
        o->accuracy = group_stat(rows, g, m_correct, vals, &o->accuracy_seed_sd);
        o->ref_accuracy = group_stat(rows, g, m_ref_correct, vals, NULL);
    }
    o->greedy_match = group_stat(rows, g, m_greedy, vals, &o->greedy_seed_sd);
}

/* CSV number: %.9g, empty for NaN (no timings ever go here). */
static void cnum(FILE *f, double x) {
    fputc(',', f);
    if (isnan(x))
        return;
    else if (isinf(x))
        fputs(x > 0 ? "inf" : "-inf", f);
    else
        fprintf(f, "%.9g", x);
}

static void write_csv_row(FILE *f, const group *g, const gstats *s) {
    const skv_eval_row *p = g->proto;
    bool lm = p->task == SKV_EVAL_LM;
    fputs(skv_eval_task_name(p->task), f);
    const char *names[3] = {p->protocol, p->positions, p->policy};
    for (int k = 0; k < 3; k++) {
        fputc(',', f);
        skv_eval_write_csv_field(f, names[k]);
    }
    cnum(f, p->keep_frac);
    if (!lm) cnum(f, p->depth);
    fprintf(f, ",%d,%d", s->n_samples, s->n_seeds);
    if (lm) {
        fprintf(f, ",%lld", s->n_tokens);
        cnum(f, s->kl_mean.mean);
        cnum(f, s->kl_mean.ci95);
        cnum(f, s->kl_mean_seed_sd);
        cnum(f, s->kl_median.mean);
        cnum(f, s->kl_p90.mean);
        cnum(f, s->kl_p99.mean);
        cnum(f, s->kl_max);
        cnum(f, s->top1.mean);
        cnum(f, s->top1.ci95);
        cnum(f, s->top1_seed_sd);
        cnum(f, s->same_top_p);
        cnum(f, s->same_top_unc);
        cnum(f, s->ppl_ref);
        cnum(f, s->ppl_cmp);
        cnum(f, s->ln_ppl.mean);
        cnum(f, s->ln_ppl.ci95);
        cnum(f, s->ln_ppl_seed_sd);
    } else {
        cnum(f, s->accuracy.mean);
        cnum(f, s->accuracy.ci95);
        cnum(f, s->accuracy_seed_sd);
        cnum(f, s->ref_accuracy.mean);
    }
    cnum(f, s->greedy_match.mean);
    cnum(f, s->greedy_match.ci95);
    cnum(f, s->greedy_seed_sd);
    fprintf(f, ",%d", s->greedy);
    cnum(f, s->bytes_before);
    cnum(f, s->bytes_after);
    cnum(f, s->by_score_share);
    fputc('\n', f);
}

static const char csv_head_lm[] =
    "task,protocol,positions,policy,keep_frac,n_samples,n_seeds,n_tokens,kl_mean,kl_mean_ci95,"
    "kl_mean_seed_sd,kl_median,kl_p90,kl_p99,kl_max,top1,top1_ci95,top1_seed_sd,same_top_p,"
    "same_top_p_unc,ppl_ref,ppl_cmp,ln_ppl_ratio,ln_ppl_ratio_ci95,ln_ppl_ratio_seed_sd,"
    "greedy_match,greedy_match_ci95,greedy_match_seed_sd,greedy,kv_bytes_before,"
    "kv_bytes_after,by_score_share\n";
static const char csv_head_pk[] =
    "task,protocol,positions,policy,keep_frac,depth,n_samples,n_seeds,accuracy,accuracy_ci95,"
    "accuracy_seed_sd,ref_accuracy,greedy_match,greedy_match_ci95,greedy_match_seed_sd,greedy,"
    "kv_bytes_before,kv_bytes_after,by_score_share\n";

/* "1.23e-05 ± 4.5e-06" style cells; "—" for what does not exist */
static void md_pm(FILE *f, const char *fmt, double v, double ci) {
    fputs(" ", f);
    if (isnan(v)) {
        fputs("—", f);
    } else {
        fprintf(f, fmt, v);
        if (!isnan(ci)) {
            fputs(" ± ", f);
            fprintf(f, fmt, ci);
        }
    }
    fputs(" |", f);
}

static void write_md_row(FILE *f, const group *g, const gstats *s) {
    const skv_eval_row *p = g->proto;
    bool lm = p->task == SKV_EVAL_LM;
    const char *names[3] = {p->protocol, p->positions, p->policy};
    for (int k = 0; k < 3; k++) {
        fputs(k ? " | " : "| ", f);
        skv_eval_write_md_cell(f, names[k]);
    }
    fprintf(f, " | %g |", p->keep_frac);
    if (!lm) fprintf(f, " %g |", p->depth);
    if (s->n_seeds > 1)
        fprintf(f, " %d (×%d seeds) |", s->n_samples, s->n_seeds);
    else
        fprintf(f, " %d |", s->n_samples);
    if (lm) {
        md_pm(f, "%.4g", s->kl_mean.mean, s->kl_mean.ci95);
        md_pm(f, "%.4g", s->kl_p99.mean, NAN);
        md_pm(f, "%.4g", s->kl_max, NAN);
        md_pm(f, "%.3f", s->top1.mean, s->top1.ci95);
        fprintf(f, " %.1f ± %.1f %% |", 100 * s->same_top_p,
                isnan(s->same_top_unc) ? 0.0 : 100 * s->same_top_unc);
        md_pm(f, "%.4f", s->ln_ppl.mean, s->ln_ppl.ci95);
    } else {
        md_pm(f, "%.3f", s->accuracy.mean, s->accuracy.ci95);
        md_pm(f, "%.3f", s->ref_accuracy.mean, NAN);
    }
    fprintf(f, " %.1f / %d |", s->greedy_match.mean, s->greedy);
    if (s->bytes_before > 0)
        fprintf(f, " %.1f %% |", 100.0 * s->bytes_after / s->bytes_before);
    else
        fputs(" — |", f);
    /* nothing dropped (the keep-1.0 control): no choice was made, whatever the scores said */
    if (isfinite(s->by_score_share) && s->bytes_after < s->bytes_before)
        fprintf(f, " %.1f %% |", 100.0 * s->by_score_share);
    else
        fputs(" — |", f);
    if (lm) {
        if (s->n_seeds > 1)
            fprintf(f, " %.2g / %.2g |", s->kl_mean_seed_sd, s->top1_seed_sd);
        else
            fputs(" |", f);
    } else {
        if (s->n_seeds > 1)
            fprintf(f, " %.2g |", s->accuracy_seed_sd);
        else
            fputs(" |", f);
    }
    fprintf(f, " %.2f | %.2f |", s->compress_ms, s->window_ms);
    if (isfinite(s->cache_ms))
        fprintf(f, " %.2f |\n", s->cache_ms);
    else
        fputs(" — |\n", f); /* rows written before cache_ms */
}

FILE *skv_eval_create(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) return NULL;
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        const int e = errno;
        close(fd);
        unlink(path);
        errno = e;
    }
    return f;
}

/* Report files are written to NAME.tmp and renamed into place by close_file, so an interrupted
 * run never leaves half a summary or plot script under the real name. */
FILE *skv_eval_open_tmp(const char *dir, const char *name, char *path, size_t path_size,
                        skv_err *err) {
    snprintf(path, path_size, "%s/%s", dir, name);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = skv_eval_create(tmp);
    if (!f) skv_err_set(err, SKV_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    return f;
}

skv_status skv_eval_close_tmp(FILE *f, const char *path, skv_err *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int e = 0;
    if (fflush(f) != 0 || ferror(f)) e = errno ? errno : EIO;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) {
        unlink(tmp);
        return skv_err_set(err, SKV_ERR_IO, "error writing %s: %s", path, strerror(e));
    }
    return SKV_OK;
}

/* ---- escaping for the places text goes --------------------------------------------------- */

void skv_eval_write_csv_field(FILE *f, const char *s) {
    if (!s) s = "";
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

void skv_eval_write_drawn_mark(FILE *f, const char *name) {
    fputs("if (exists('skv_marks')) print 'sparsekv-drawn: ' . ", f);
    skv_eval_write_gnuplot_string(f, name);
    fputc('\n', f);
}

void skv_eval_write_gnuplot_string(FILE *f, const char *s) {
    /* In a single-quoted gnuplot string only '' is special; a raw line break would end the
     * command, so control bytes (and DEL) become '?'. */
    fputc('\'', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '\'')
            fputs("''", f);
        else if (*p < 0x20 || *p == 0x7f)
            fputc('?', f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

static bool md_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

void skv_eval_write_md_cell(FILE *f, const char *s) {
    if (!s) s = "";
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (c == '\r' || c == '\n' || c == '\t')
            fputc(' ', f);
        else if ((unsigned char)c < 0x20 || c == 0x7f)
            fputc('?', f);
        else if (c == '<')
            fputs("&lt;", f);
        else if (c == '>')
            fputs("&gt;", f);
        else if (c == '&')
            fputs("&amp;", f);
        else if (c == '\\' || c == '|' || c == '`' || c == '*' || c == '[' || c == ']' ||
                 c == '#' || c == '~')
            fprintf(f, "\\%c", c);
        else if (c == '_' && !(p > s && md_word_char(p[-1]) && md_word_char(p[1])))
            fputs("\\_", f); /* intraword underscores (sink_recent) stay as they are */
        else
            fputc(c, f);
    }
}

/* ---- labels -------------------------------------------------------------------------------- */

bool skv_eval_label_parse(const char *spec, skv_eval_label *out, char *why, size_t why_size) {
    memset(out, 0, sizeof *out);
    const char *eq = spec ? strchr(spec, '=') : NULL;
    if (!eq || eq == spec) {
        snprintf(why, why_size, "expected KEY=TEXT, e.g. snapkv=SnapKV");
        return false;
    }
    char key[64];
    size_t kl = (size_t)(eq - spec);
    if (kl >= sizeof key) {
        snprintf(why, why_size, "the key is too long");
        return false;
    }
    memcpy(key, spec, kl);
    key[kl] = 0;
    const char *canon = skv_policy_canonical(key);
    skv_protocol pr;
    skv_position_mode pm;
    if (canon)
        snprintf(out->key, sizeof out->key, "%s", canon);
    else if (skv_eval_protocol_from_name(key, &pr))
        snprintf(out->key, sizeof out->key, "%s", pr == SKV_PROTOCOL_ENGINE ? "engine" : "seed");
    else if (skv_eval_positions_from_name(key, &pm))
        snprintf(out->key, sizeof out->key, "%s",
                 pm == SKV_POSITIONS_REROTATE ? "rerotate" : "original");
    else {
        char shown[256];
        show_value(shown, sizeof shown, key, kl);
        snprintf(why, why_size,
                 "'%s' is not a policy (%s), a protocol (seed, engine) or a position mode "
                 "(original, rerotate)",
                 shown, skv_policy_list());
        return false;
    }
    const char *text = eq + 1;
    size_t tl = strlen(text);
    if (tl == 0 || tl > 64) {
        snprintf(why, why_size, "the label text must have 1 to 64 bytes");
        return false;
    }
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f) {
            snprintf(why, why_size, "the label text holds a control character");
            return false;
        }
    out->text = text;
    return true;
}

const char *skv_eval_label_of(const skv_eval_labels *labels, const char *key) {
    for (int i = 0; labels && i < labels->n; i++)
        if (!strcmp(labels->items[i].key, key)) return labels->items[i].text;
    return NULL;
}

/* ---- fixed styles ---------------------------------------------------------------------------- */

/* One colour (Okabe-Ito and Paul Tol's colour-blind-safe sets) and point type per policy, by
 * canonical name, so a policy looks the same in every figure of every run. */
static const struct {
    const char *policy, *colour;
    int pt;
} policy_styles[] = {
    {"sink_recent", "#0072B2", 7}, /* blue, filled circle */
    {"random", "#7F7F7F", 6},      /* grey, open circle: the baseline */
    {"attention", "#D55E00", 9},   /* vermillion, filled triangle */
    {"pyramid", "#009E73", 5},     /* bluish green, filled square */
    {"knorm", "#CC79A7", 13},      /* reddish purple, filled diamond */
    {"keydiff", "#E69F00", 11},    /* orange, filled down triangle */
    {"tova", "#56B4E9", 4},        /* sky blue, open square */
    {"h2o", "#882255", 8},         /* wine, open triangle */
    {"adakv", "#332288", 12},      /* indigo, open diamond */
};
static const char *const fallback_colours[] = {"#999933", "#117733", "#AA4499",
                                               "#44AA99", "#661100", "#6699CC"};

static int policy_style(const char *policy) {
    for (size_t i = 0; i < sizeof policy_styles / sizeof policy_styles[0]; i++)
        if (!strcmp(policy_styles[i].policy, policy)) return (int)i;
    return -1;
}

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

const char *skv_eval_policy_colour(const char *policy) {
    int k = policy_style(policy ? policy : "");
    if (k >= 0) return policy_styles[k].colour;
    return fallback_colours[name_hash(policy ? policy : "") %
                            (sizeof fallback_colours / sizeof fallback_colours[0])];
}

int skv_eval_policy_pt(const char *policy) {
    int k = policy_style(policy ? policy : "");
    return k >= 0 ? policy_styles[k].pt
                  : 2 + (int)(name_hash(policy ? policy : "") % 2) * 1; /* x or * */
}

/* Dash per protocol and position mode: solid, dashed, dotted, dash-dot. */
static const char *mode_dash(const char *protocol, const char *positions) {
    bool engine = !strcmp(protocol, "engine"), rerot = !strcmp(positions, "rerotate");
    if (!engine && !rerot) return "1";
    if (engine && !rerot) return "(10,6)";
    if (!engine) return "(2,5)";
    return "(12,5,2,5)";
}

static int mode_rank(const char *protocol, const char *positions) {
    return (!strcmp(protocol, "engine") ? 1 : 0) + (!strcmp(positions, "rerotate") ? 2 : 0);
}

/* The legend / panel text of a protocol + position mode (labels applied; not escaped). */
static void mode_label(const skv_eval_labels *labels, int m, char *text, size_t size) {
    const char *proto = m & 1 ? "engine" : "seed", *pos = m & 2 ? "rerotate" : "original";
    const char *lp = skv_eval_label_of(labels, proto), *lq = skv_eval_label_of(labels, pos);
    if (m & 2)
        snprintf(text, size, "%s, %s", lp ? lp : proto, lq ? lq : pos);
    else if (lp)
        snprintf(text, size, "%s", lp);
    else
        snprintf(text, size, "%s protocol", proto);
}

/* A name for a plot data comment: [A-Za-z0-9_.-] only. */
static void write_plain(FILE *f, const char *s) {
    for (; *s; s++) fputc(md_word_char(*s) || *s == '_' || *s == '.' || *s == '-' ? *s : '?', f);
}

/* ---- plots ----------------------------------------------------------------------------------- */

/* A number for plot_data.dat: %.9g, NaN for what is undefined (gnuplot skips it). */
static void pnum(FILE *f, double x) {
    if (isfinite(x))
        fprintf(f, " %.9g", x);
    else
        fputs(" NaN", f);
}

typedef struct plot_line {
    int first_group; /* its first group in summary order */
    const skv_eval_row *proto;
    double offset; /* dodge factor for x */
} plot_line;

/* A keep-1.0 row that kept every entry: the full cache itself (KL 0, top-1 1, ...). */
static bool is_control(const skv_eval_row *p, const gstats *s) {
    return p->keep_frac == 1.0 && s->bytes_before > 0 && s->bytes_after >= s->bytes_before;
}

typedef struct yrange {
    double lo, hi;
} yrange;

static void yr_add(yrange *r, double v) {
    if (!isfinite(v)) return;
    if (v < r->lo) r->lo = v;
    if (v > r->hi) r->hi = v;
}

/* Plots: one line per (policy, protocol, positions) over the keep fractions, on a log keep
 * axis; keep-1.0 controls are the reference line, not points. */
static skv_status write_plots(const skv_eval_rows *rows, const group *groups, const gstats *stats,
                              int n_groups, const char *dir, const skv_eval_labels *labels,
                              skv_err *err) {
    char path[4096];
    bool lm = rows->rows[0].task == SKV_EVAL_LM;
    int *line_of = malloc((size_t)n_groups * sizeof *line_of);
    plot_line *lines = calloc((size_t)n_groups, sizeof *lines);
    double *keeps = malloc((size_t)n_groups * sizeof *keeps);
    const char **pols = malloc((size_t)n_groups * sizeof *pols);
    FILE *f = NULL;
    skv_status st = SKV_OK;
    if (!line_of || !lines || !keeps || !pols) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* lines, in summary order; policies in order of first appearance */
    int n_lines = 0, n_keeps = 0, n_pols = 0;
    int greedy = 0;
    for (int i = 0; i < n_groups; i++) {
        const skv_eval_row *p = groups[i].proto;
        if (stats[i].greedy > greedy) greedy = stats[i].greedy;
        line_of[i] = -1;
        if (is_control(p, &stats[i])) continue;
        int l = -1;
        for (int k = 0; k < n_lines && l < 0; k++) {
            const skv_eval_row *q = lines[k].proto;
            if (!strcmp(p->policy, q->policy) && !strcmp(p->protocol, q->protocol) &&
                !strcmp(p->positions, q->positions))
                l = k;
        }
        if (l < 0) {
            l = n_lines++;
            lines[l].first_group = i;
            lines[l].proto = p;
        }
        line_of[i] = l;
        bool seen = false;
        for (int k = 0; k < n_keeps; k++) seen |= keeps[k] == p->keep_frac;
        if (!seen) keeps[n_keeps++] = p->keep_frac;
        seen = false;
        for (int k = 0; k < n_pols; k++) seen |= !strcmp(pols[k], p->policy);
        if (!seen) pols[n_pols++] = p->policy;
    }
    for (int a = 1; a < n_keeps; a++) /* ascending */
        for (int b = a; b > 0 && keeps[b] < keeps[b - 1]; b--) {
            double t = keeps[b];
            keeps[b] = keeps[b - 1];
            keeps[b - 1] = t;
        }
    /* dodge: lines side by side around each keep fraction, a policy's modes next to each
     * other; the whole spread is 30% of the smallest gap between keep fractions (log axis) */
    double gap = log(2.0);
    for (int k = 1; k < n_keeps; k++)
        if (log(keeps[k] / keeps[k - 1]) < gap) gap = log(keeps[k] / keeps[k - 1]);
    /* (one panel per protocol / position mode: the slots restart in each) */
    int panel_modes[4], n_panels = 0;
    for (int m = 0; m < 4; m++) {
        int n_m = 0, slot = 0;
        for (int l = 0; l < n_lines; l++)
            n_m += mode_rank(lines[l].proto->protocol, lines[l].proto->positions) == m;
        if (n_m == 0) continue;
        panel_modes[n_panels++] = m;
        for (int pi = 0; pi < n_pols; pi++)
            for (int l = 0; l < n_lines; l++)
                if (!strcmp(lines[l].proto->policy, pols[pi]) &&
                    mode_rank(lines[l].proto->protocol, lines[l].proto->positions) == m)
                    lines[l].offset =
                        n_m > 1 ? exp(0.3 * gap * ((double)slot++ / (n_m - 1) - 0.5)) : 1.0;
    }
    if (n_panels == 0) panel_modes[n_panels++] = 0;

    /* data */
    f = skv_eval_open_tmp(dir, "plot_data.dat", path, sizeof path, err);
    if (!f) {
        st = err ? err->status : SKV_ERR_IO;
        goto done;
    }
    yrange yr_kl = {INFINITY, -INFINITY}, yr_top1 = {INFINITY, -INFINITY},
           yr_ppl = {INFINITY, -INFINITY}, yr_greedy = {INFINITY, -INFINITY},
           yr_acc = {INFINITY, -INFINITY};
    double kl_floor = INFINITY; /* smallest positive KL drawn (mean or CI bound) */
    double ref_acc = 0;
    int n_ref = 0;
    for (int i = 0; i < n_groups; i++) {
        if (lm) continue;
        ref_acc += stats[i].ref_accuracy.mean;
        n_ref++;
    }
    ref_acc = n_ref ? ref_acc / n_ref : NAN;
    for (int i = 0; i < n_groups && lm; i++) {
        if (line_of[i] < 0) continue;
        const gstats *s = &stats[i];
        double ci = isnan(s->kl_mean.ci95) ? 0 : s->kl_mean.ci95;
        if (s->kl_mean.mean > 0 && isfinite(s->kl_mean.mean)) {
            yr_kl.hi = fmax(yr_kl.hi, s->kl_mean.mean + ci);
            kl_floor =
                fmin(kl_floor, s->kl_mean.mean - ci > 0 ? s->kl_mean.mean - ci : s->kl_mean.mean);
        }
    }
    /* log KL axis: from a little under the smallest value drawn; a CI that reaches 0 is drawn
     * down to the bottom edge */
    double kl_bottom = isfinite(kl_floor) ? kl_floor / 2 : 1e-6;
    fprintf(f, "# sparsekv eval plot data: one block per line (gnuplot index), keep-1.0 controls "
               "(full cache) left out\n");
    if (lm)
        fprintf(f, "# keep_frac x(dodged) kl_mean kl_lo kl_hi top1 top1_lo top1_hi ppl_ratio "
                   "ppl_lo ppl_hi greedy_match greedy_lo greedy_hi\n");
    else
        fprintf(f, "# keep_frac x(dodged) accuracy(mean over depths)\n");
    for (int l = 0; l < n_lines; l++) {
        const skv_eval_row *q = lines[l].proto;
        fputs(l ? "\n\n# " : "# ", f);
        write_plain(f, q->policy);
        fputc(' ', f);
        write_plain(f, q->protocol);
        fputc(' ', f);
        write_plain(f, q->positions);
        fputc('\n', f);
        for (int i = 0; i < n_groups; i++) {
            if (line_of[i] != l) continue;
            double keep = groups[i].proto->keep_frac, x = keep * lines[l].offset;
            if (!lm) {
                /* once per keep fraction: average the depths */
                bool first = true;
                for (int j = 0; j < i; j++)
                    if (line_of[j] == l && groups[j].proto->keep_frac == keep) first = false;
                if (!first) continue;
                double sum = 0;
                int c = 0;
                for (int j = i; j < n_groups; j++)
                    if (line_of[j] == l && groups[j].proto->keep_frac == keep) {
                        sum += stats[j].accuracy.mean;
                        c++;
                    }
                fprintf(f, "%.9g", keep);
                pnum(f, x);
                pnum(f, sum / c);
                fputc('\n', f);
                yr_add(&yr_acc, sum / c);
                continue;
            }
            const gstats *s = &stats[i];
            double kci = isnan(s->kl_mean.ci95) ? 0 : s->kl_mean.ci95;
            double tci = isnan(s->top1.ci95) ? 0 : s->top1.ci95;
            double pci = isnan(s->ln_ppl.ci95) ? 0 : s->ln_ppl.ci95;
            double gci = isnan(s->greedy_match.ci95) ? 0 : s->greedy_match.ci95;
            double km = s->kl_mean.mean;
            fprintf(f, "%.9g", keep);
            pnum(f, x);
            pnum(f, km > 0 ? km : NAN);
            pnum(f, km > 0 ? (km - kci > 0 ? km - kci : kl_bottom) : NAN);
            pnum(f, km > 0 ? km + kci : NAN);
            double t = s->top1.mean, tlo = fmax(0, t - tci), thi = fmin(1, t + tci);
            pnum(f, t);
            pnum(f, tlo);
            pnum(f, thi);
            yr_add(&yr_top1, tlo);
            yr_add(&yr_top1, thi);
            double pm = s->ln_ppl.mean;
            pnum(f, exp(pm));
            pnum(f, exp(pm - pci));
            pnum(f, exp(pm + pci));
            yr_add(&yr_ppl, exp(pm - pci));
            yr_add(&yr_ppl, exp(pm + pci));
            double g = s->greedy_match.mean, glo = fmax(0, g - gci),
                   ghi = fmin((double)s->greedy, g + gci);
            pnum(f, g);
            pnum(f, glo);
            pnum(f, ghi);
            yr_add(&yr_greedy, glo);
            yr_add(&yr_greedy, ghi);
            fputc('\n', f);
        }
    }
    if ((st = skv_eval_close_tmp(f, path, err))) {
        f = NULL;
        goto done;
    }
    f = NULL;

    /* script */
    f = skv_eval_open_tmp(dir, "plots.gp", path, sizeof path, err);
    if (!f) {
        st = err ? err->status : SKV_ERR_IO;
        goto done;
    }
    fprintf(f, "# sparsekv eval plots: run `gnuplot plots.gp` in this directory\n"
               "png_term = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n"
               "# sparsekv runs this with out_suffix='.tmp' and renames the figures into place\n"
               "if (!exists('out_suffix')) out_suffix = ''\n"
               "set encoding utf8\nset bars small\nset pointsize 1.0\n");
    /* the axes every panel starts from (the legend panel unsets them) */
    char axes[4096];
    {
        double kmin = n_keeps ? keeps[0] : 0.5, kmax = n_keeps ? keeps[n_keeps - 1] : 1.0;
        double pad = exp(0.3 * gap);
        size_t o = (size_t)snprintf(
            axes, sizeof axes,
            "set grid lc rgb '#dddddd' lw 1\nset border 3 lc rgb '#444444'\nset xtics nomirror\n"
            "set ytics nomirror\nunset x2tics\nunset y2tics\n"
            "unset key\nset logscale x\nset xrange [%.9g:%.9g]\nset xtics (",
            kmin / pad, kmax * pad);
        for (int k = 0; k < n_keeps && o < sizeof axes - 64; k++)
            o += (size_t)snprintf(axes + o, sizeof axes - o, "%s'%g' %.9g", k ? ", " : "", keeps[k],
                                  keeps[k]);
        snprintf(axes + o, sizeof axes - o, ")\nset mxtics 1\n");
    }
    struct plotdef {
        const char *name, *ylabel, *title, *using;
        int kind; /* 0 kl (log), 1 top1, 2 ppl, 3 greedy, 4 passkey */
        int ycol; /* the value's column in plot_data.dat */
    } defs_lm[4] = {{"kl_vs_keep", "KL(full || compressed), nats per token (log scale)",
                     "KL divergence from the full cache (mean over samples, 95% CI)", "2:3:4:5", 0,
                     3},
                    {"top1_vs_keep", "top-1 agreement with the full cache",
                     "Top-1 agreement with the full cache (mean over samples, 95% CI)", "2:6:7:8",
                     1, 6},
                    {"ppl_vs_keep", "PPL(compressed) / PPL(full)",
                     "Perplexity ratio on the continuation (geometric mean over samples, 95% CI)",
                     "2:9:10:11", 2, 9},
                    {"greedy_vs_keep", "greedy tokens matching the full cache",
                     "Greedy decoding: tokens until the first divergence (mean over samples, "
                     "95% CI)",
                     "2:12:13:14", 3, 12}},
      defs_pk[1] = {{"passkey_vs_keep", "exact-match accuracy", NULL, "2:3", 4, 3}};
    int n_plots = lm ? 4 : 1;
    for (int pl = 0; pl < n_plots; pl++) {
        const struct plotdef *d = lm ? &defs_lm[pl] : &defs_pk[pl];
        fprintf(f, "\n# ---- %s\n", d->name);
        if (d->kind == 3 && greedy == 0) { /* an empty 0..0 axis is a gnuplot error */
            fprintf(f, "# not drawn: --greedy 0 decoded no greedy tokens\n");
            continue;
        }
        /* the y axis of this figure, set again in every panel */
        char *yset = NULL;
        size_t yset_len = 0;
        FILE *fy = open_memstream(&yset, &yset_len);
        if (!fy) {
            st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
            goto done;
        }
        FILE *fmain = f;
        f = fy;
        fprintf(f, "unset label\nunset logscale y\n");
        if (d->kind == 3)
            fprintf(f, "set ylabel '%s (of %d)'\n", d->ylabel, greedy);
        else
            fprintf(f, "set ylabel '%s'\n", d->ylabel);
        double ref = NAN; /* the full cache's value: drawn as a reference line */
        yrange r = {0, 1};
        switch (d->kind) {
        case 0:
            if (isfinite(yr_kl.hi) && yr_kl.hi > 0)
                fprintf(f, "set logscale y\nset format y '%%g'\nset yrange [%.9g:%.9g]\n",
                        kl_bottom, yr_kl.hi * 2);
            else /* every KL 0 (keep 1.0 only, or a cache nothing was dropped from): off a log
                  * axis, where gnuplot refused to draw */
                fprintf(f, "set ylabel 'KL(full || compressed), nats per token'\n"
                           "set format y '%%g'\nset yrange [0:0.001]\n");
            fprintf(f, "set label 1 'full cache (keep 1.0): KL = 0' at graph 0.02, graph 0.04 "
                       "left textcolor rgb '#444444'\n");
            break;
        case 1:
            r = yr_top1;
            ref = 1.0;
            break;
        case 2:
            r = yr_ppl;
            ref = 1.0;
            break;
        case 3:
            r = yr_greedy;
            ref = greedy;
            break;
        default:
            r = yr_acc;
            ref = ref_acc;
            break;
        }
        if (d->kind != 0) {
            fprintf(f, "set format y '%%g'\n");
            if (isfinite(ref)) {
                yr_add(&r, ref);
            }
            if (!(r.lo <= r.hi)) r = (yrange){0, 1};
            double span = r.hi - r.lo;
            if (span <= 0) span = fabs(r.hi) > 0 ? fabs(r.hi) * 0.1 : 1;
            double lo = r.lo - 0.08 * span, hi = r.hi + 0.08 * span;
            if (d->kind == 4) { /* accuracy: the whole 0..1 */
                lo = -0.02;
                hi = 1.02;
            } else if (d->kind == 1) { /* fractions: no room far outside [0, 1] */
                lo = fmax(lo, -0.02);
                hi = fmin(hi, 1.02);
            } else if (d->kind == 3) { /* greedy tokens: 0..G */
                lo = fmax(lo, -0.02 * greedy);
                hi = fmin(hi, 1.02 * greedy);
            }
            fprintf(f, "set yrange [%.9g:%.9g]\n", lo, hi);
        }
        f = fmain;
        if (fclose(fy) != 0) {
            free(yset);
            st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
            goto done;
        }

        /* one panel per protocol / position mode, side by side (2 x 2 for 3 or 4), the same
         * axes in each, placed by hand; the legend is its own strip along the bottom */
        int cols = n_panels == 1 ? 1 : 2, prow = n_panels > 2 ? 2 : 1;
        int n_entries = n_pols + n_panels + (isfinite(ref) && d->kind != 0 ? 1 : 0);
        int width = cols == 1 ? 960 : 1400, key_cols = width / 190;
        int key_rows = (n_entries + key_cols - 1) / key_cols;
        int height = (prow == 1 ? 520 : 920) + 22 * key_rows;
        double key_h = (16.0 + 22.0 * key_rows) / height, title_h = 34.0 / height;
        double pw = 1.0 / cols, ph = (1.0 - key_h - title_h) / prow;
        for (int term = 0; term < 2; term++) {
            if (term == 0)
                fprintf(f,
                        "eval('set terminal '.png_term.' size %d,%d noenhanced font "
                        "\"Sans,11\"')\nset output '%s.png'.out_suffix\n",
                        width, height, d->name);
            else
                fprintf(f,
                        "set terminal svg size %d,%d dynamic noenhanced font 'Sans,11'\n"
                        "set output '%s.svg'.out_suffix\n",
                        width, height, d->name);
            if (d->title)
                fprintf(f, "set multiplot title '%s'\n", d->title);
            else /* the retrieval tasks share one figure: name the task that ran */
                fprintf(f,
                        "set multiplot title '%s task: exact-match accuracy (mean over depths)'\n",
                        skv_eval_task_name(rows->rows[0].task));
            for (int pn = 0; pn < n_panels; pn++) {
                int m = panel_modes[pn];
                fputs(axes, f);
                fputs(yset, f);
                fprintf(f, "set origin %.6f,%.6f\nset size %.6f,%.6f\n", (pn % cols) * pw,
                        key_h + (prow - 1 - pn / cols) * ph, pw, ph);
                bool bottom = pn / cols == prow - 1;
                fprintf(f, "set xlabel '%s'\n", bottom ? "keep fraction (log scale)" : "");
                if (pn % cols) fputs("set ylabel ''\n", f);
                if (n_panels > 1) {
                    char text[200];
                    mode_label(labels, m, text, sizeof text);
                    fputs("set title ", f);
                    skv_eval_write_gnuplot_string(f, text);
                    fputc('\n', f);
                } else {
                    fputs("unset title\n", f);
                }
                fprintf(f, "plot \\\n");
                bool any = false;
                /* the full cache's value first, a wide light band under the data */
                if (isfinite(ref) && d->kind != 0) {
                    fprintf(f, "  %.9g with lines lc rgb '#c8c8c8' lw 6", ref);
                    any = true;
                }
                for (int l = 0; l < n_lines; l++) {
                    const skv_eval_row *q = lines[l].proto;
                    if (mode_rank(q->protocol, q->positions) != m) continue;
                    const char *col = skv_eval_policy_colour(q->policy);
                    /* solid CI bars and markers, then the line with its dash */
                    fprintf(f,
                            "%s  'plot_data.dat' index %d using %s with %s lc rgb '%s' dt 1 "
                            "pt %d lw 1",
                            any ? ", \\\n" : "", l, d->using, lm ? "yerrorbars" : "points", col,
                            skv_eval_policy_pt(q->policy));
                    fprintf(f,
                            ", \\\n  'plot_data.dat' index %d using 2:%d with lines lc rgb "
                            "'%s' dt %s lw 1.5",
                            l, d->ycol, col, mode_dash(q->protocol, q->positions));
                    any = true;
                }
                if (!any) fputs("  1/0", f);
                fputc('\n', f);
            }
            /* the legend strip: one entry per policy (colour, marker), one per protocol /
             * position mode (dash), and the full cache's reference line */
            fprintf(f,
                    "set origin 0,0\nset size 1,%.6f\nunset title\nunset xlabel\nunset ylabel\n"
                    "unset border\nunset tics\nunset grid\nunset label\nunset logscale\n"
                    "set xrange [0:1]\nset yrange [0:1]\nset lmargin 0\nset rmargin 0\n"
                    "set tmargin 0\nset bmargin 0\n"
                    "set key center center horizontal Left reverse samplen 3 spacing 1.1 "
                    "width -1 maxrows %d\nplot \\\n",
                    key_h, key_rows);
            bool any = false;
            for (int pi = 0; pi < n_pols; pi++) {
                const char *lab = skv_eval_label_of(labels, pols[pi]);
                fprintf(f, "%s  1/0 with linespoints lc rgb '%s' dt 1 pt %d lw 1.5 title ",
                        any ? ", \\\n" : "", skv_eval_policy_colour(pols[pi]),
                        skv_eval_policy_pt(pols[pi]));
                skv_eval_write_gnuplot_string(f, lab ? lab : pols[pi]);
                any = true;
            }
            for (int k = 0; k < n_panels; k++) {
                int mk = panel_modes[k];
                char text[200];
                mode_label(labels, mk, text, sizeof text);
                fprintf(f, "%s  1/0 with lines lc rgb '#333333' dt %s lw 1.5 title ",
                        any ? ", \\\n" : "",
                        mode_dash(mk & 1 ? "engine" : "seed", mk & 2 ? "rerotate" : "original"));
                skv_eval_write_gnuplot_string(f, text);
                any = true;
            }
            if (isfinite(ref) && d->kind != 0)
                fprintf(f, "%s  1/0 with lines lc rgb '#c8c8c8' lw 6 title '%s'",
                        any ? ", \\\n" : "", d->kind == 4 ? "full cache" : "full cache (keep 1.0)");
            else if (!any)
                fputs("  1/0 notitle", f);
            fputs("\nunset multiplot\nset lmargin -1\nset rmargin -1\nset tmargin -1\n"
                  "set bmargin -1\n",
                  f);
        }
        free(yset);
        fprintf(f, "set output\n");
        skv_eval_write_drawn_mark(f, d->name);
    }
    st = skv_eval_close_tmp(f, path, err);
    f = NULL;
done:
    if (f) fclose(f);
    free(line_of);
    free(lines);
    free(keeps);
    free(pols);
    return st;
}

skv_status skv_eval_write_reports(const skv_eval_rows *rows, const char *dir, char **md,
                                  skv_err *err) {
    return skv_eval_write_reports_labeled(rows, dir, NULL, md, err);
}

skv_status skv_eval_write_reports_labeled(const skv_eval_rows *rows, const char *dir,
                                          const skv_eval_labels *labels, char **md, skv_err *err) {
    if (md) *md = NULL;
    if (rows->n < 1) return skv_err_set(err, SKV_ERR_FORMAT, "no eval results to summarize");
    skv_status st = SKV_OK;
    group *groups = NULL;
    gstats *stats = NULL;
    int n_groups = 0, cap_groups = 0;
    double *vals = malloc((size_t)rows->n * sizeof *vals);
    char *mdbuf = NULL;
    size_t mdlen = 0;
    FILE *mf = NULL, *f = NULL;
    char path[4096];
    if (!vals) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < rows->n; i++) {
        const skv_eval_row *r = &rows->rows[i];
        group *g = NULL;
        for (int k = 0; k < n_groups && !g; k++)
            if (same_group(groups[k].proto, r)) g = &groups[k];
        if (!g) {
            if (n_groups == cap_groups) {
                int nc = cap_groups ? cap_groups * 2 : 32;
                group *ng = realloc(groups, (size_t)nc * sizeof *ng);
                if (!ng) {
                    st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
                    goto done;
                }
                groups = ng;
                cap_groups = nc;
            }
            g = &groups[n_groups++];
            memset(g, 0, sizeof *g);
            g->first_config = r->config;
            g->depth_index = r->depth_index;
            g->proto = r;
        }
        if (r->config < g->first_config) g->first_config = r->config;
        if (g->n == g->cap) {
            int nc = g->cap ? g->cap * 2 : 16;
            int *nm = realloc(g->members, (size_t)nc * sizeof *nm);
            if (!nm) {
                st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
                goto done;
            }
            g->members = nm;
            g->cap = nc;
        }
        g->members[g->n++] = i;
    }
    qsort(groups, (size_t)n_groups, sizeof *groups, group_cmp);
    stats = calloc((size_t)n_groups, sizeof *stats);
    if (!stats) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < n_groups; k++) compute_stats(rows, &groups[k], vals, &stats[k]);
    bool lm = rows->rows[0].task == SKV_EVAL_LM;

    if (!(f = skv_eval_open_tmp(dir, "summary.csv", path, sizeof path, err))) goto fail_io;
    fputs(lm ? csv_head_lm : csv_head_pk, f);
    for (int k = 0; k < n_groups; k++) write_csv_row(f, &groups[k], &stats[k]);
    if ((st = skv_eval_close_tmp(f, path, err))) goto done;

    if (!(f = skv_eval_open_tmp(dir, "timing.csv", path, sizeof path, err))) goto fail_io;
    fprintf(f,
            "protocol,positions,policy,keep_frac%s,n_rows,compress_ms,window_ms,cache_ms,"
            "eval_ms\n",
            lm ? "" : ",depth");
    for (int k = 0; k < n_groups; k++) {
        const skv_eval_row *p = groups[k].proto;
        skv_eval_write_csv_field(f, p->protocol);
        fputc(',', f);
        skv_eval_write_csv_field(f, p->positions);
        fputc(',', f);
        skv_eval_write_csv_field(f, p->policy);
        fprintf(f, ",%.9g", p->keep_frac);
        if (!lm) fprintf(f, ",%.9g", p->depth);
        fprintf(f, ",%d,%.4f,%.4f,", stats[k].n_rows, stats[k].compress_ms, stats[k].window_ms);
        if (isfinite(stats[k].cache_ms)) fprintf(f, "%.4f", stats[k].cache_ms); /* else empty */
        fprintf(f, ",%.4f\n", stats[k].eval_ms);
    }
    if ((st = skv_eval_close_tmp(f, path, err))) goto done;

    mf = open_memstream(&mdbuf, &mdlen);
    if (!mf) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (lm) {
        fprintf(mf, "| protocol | positions | policy | keep | n | KL mean | KL p99 | KL max | "
                    "top-1 | same top p | ln(PPL/PPL_ref) | greedy match | KV kept | by score | "
                    "seed sd (KL / top-1) | compress ms | window ms | cache ms |\n"
                    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
                    "---:|---:|---:|\n");
    } else {
        fprintf(mf, "| protocol | positions | policy | keep | depth | n | accuracy | "
                    "dense accuracy | greedy match | KV kept | by score | seed sd | compress ms | "
                    "window ms | cache ms |\n"
                    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int k = 0; k < n_groups; k++) write_md_row(mf, &groups[k], &stats[k]);
    if (lm)
        fprintf(mf, "\nn = samples; ± = 95%% confidence interval over samples (Student t); KL "
                    "in nats per continuation token; same top p pooled over all tokens "
                    "(± binomial standard error, as llama-perplexity prints it); random: every "
                    "sample is first averaged over its seeds, seed sd = standard deviation of "
                    "the per-seed means; KV kept = bytes after / before compression; by score = "
                    "the share of the kept entries chosen by score (the rest forced: window, "
                    "window_keep, sinks, recent; 0 %% compares no choices; — where nothing was "
                    "dropped); compress "
                    "ms = all of it, of which window ms the seed protocol's window pass and "
                    "cache ms applying the selection (moving entries, freeing memory).\n");
    else
        fprintf(mf, "\nn = samples; accuracy = exact match of the greedy answer; ± = 95%% "
                    "confidence interval over samples (Student t), 0 when all n samples agree "
                    "(then only the rule of three bounds the rate: at 95%%, within 3/n of 0 or "
                    "1); random: every sample is first averaged over its seeds, seed sd = "
                    "standard deviation of the per-seed means; KV kept = bytes after / before "
                    "compression; by score = the share of the kept entries chosen by score; "
                    "compress ms = all of it, of which window ms the seed "
                    "protocol's window pass and cache ms applying the selection (moving "
                    "entries, freeing memory).\n");
    if (fclose(mf) != 0) {
        mf = NULL;
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    mf = NULL;
    if (!(f = skv_eval_open_tmp(dir, "summary.md", path, sizeof path, err))) goto fail_io;
    fwrite(mdbuf, 1, mdlen, f);
    if ((st = skv_eval_close_tmp(f, path, err))) goto done;

    st = write_plots(rows, groups, stats, n_groups, dir, labels, err);
    goto done;
fail_io:
    st = err ? err->status : SKV_ERR_IO;
done:
    if (mf) fclose(mf);
    if (!st && md) {
        *md = mdbuf;
        mdbuf = NULL;
    }
    free(mdbuf);
    for (int k = 0; k < n_groups; k++) free(groups[k].members);
    free(groups);
    free(stats);
    free(vals);
    return st;
}

/* ---- compress --plot ------------------------------------------------------------------------ */

void skv_eval_write_kept_map(FILE *f, const char *png_path, const char *title, int n_layer,
                             int n_head, int n_pos, const int32_t *const *positions,
                             const int *lens, int window_from) {
    int n_rows = n_layer * n_head;
    if (n_pos < 1) n_pos = 1;
    /* about 8 px per row (at least 3), 360..1400 px high */
    int px_row = n_rows > 0 && 900 / n_rows >= 3 ? (900 / n_rows > 14 ? 14 : 900 / n_rows) : 3;
    int height = 150 + n_rows * px_row;
    if (height < 360) height = 360;
    if (height > 1400) height = 1400;
    fprintf(f, "# sparsekv compress --plot: kept positions per (layer, kv head)\n"
               "png_term = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n");
    fprintf(f, "eval('set terminal '.png_term.' size 1100,%d noenhanced font \"Sans,10\"')\n",
            height);
    fputs("set output ", f);
    skv_eval_write_gnuplot_string(f, png_path);
    fputs("\nset title ", f);
    skv_eval_write_gnuplot_string(f, title);
    fprintf(f, "\nset xlabel 'position in the cache (token index)'\n"
               "set ylabel 'layer (one row per kv head)'\n"
               "set palette defined (0 '#dddddd', 1 '#08519c')\nset cbrange [0:1]\n"
               "unset colorbox\nset tics out nomirror\nset border lc rgb '#444444'\n");
    fprintf(f, "set xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\n", n_pos - 1, n_rows - 1);
    /* a tic per layer at the middle of its heads; separators between layers */
    int step = n_layer > 40 ? (n_layer + 39) / 40 : 1;
    fputs("set ytics (", f);
    for (int l = 0, k = 0; l < n_layer; l += step, k++)
        fprintf(f, "%s'%d' %.1f", k ? ", " : "", l, l * n_head + (n_head - 1) / 2.0);
    fputs(")\n", f);
    for (int l = 1; l < n_layer && n_head > 1; l++)
        fprintf(f, "set arrow from -0.5,%.1f to %d.5,%.1f nohead front lc rgb '#ffffff' lw 1\n",
                l * n_head - 0.5, n_pos - 1, l * n_head - 0.5);
    if (window_from > 0 && window_from < n_pos) {
        fprintf(f,
                "set arrow from %.1f, graph 0 to %.1f, graph 1 nohead front lc rgb '#D55E00' "
                "lw 1.5 dt (6,4)\n"
                "set label 'window' at %.1f, graph 1.02 left textcolor rgb '#D55E00'\n",
                window_from - 0.5, window_from - 0.5, window_from - 0.5);
    }
    fputs("$kept << EOD\n", f);
    char *rowbuf = malloc((size_t)n_pos);
    for (int r = 0; r < n_rows && rowbuf; r++) {
        memset(rowbuf, 0, (size_t)n_pos);
        for (int i = 0; positions && positions[r] && i < lens[r]; i++)
            if (positions[r][i] >= 0 && positions[r][i] < n_pos) rowbuf[positions[r][i]] = 1;
        for (int c = 0; c < n_pos; c++)
            fputs(c ? (rowbuf[c] ? " 1" : " 0") : (rowbuf[c] ? "1" : "0"), f);
        fputc('\n', f);
    }
    free(rowbuf);
    fputs("EOD\nset key outside bottom right horizontal samplen 1.5 noautotitle\n"
          "set style fill solid 1.0 noborder\n"
          "plot $kept matrix with image notitle, \\\n"
          "  1/0 with boxes fc rgb '#08519c' title 'kept', \\\n"
          "  1/0 with boxes fc rgb '#dddddd' title 'evicted'\nset output\n",
          f);
}
