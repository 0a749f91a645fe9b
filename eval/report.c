/* report.c — results.jsonl lines out and back in, and the summary made from them.
 *
 * A run's summary is always computed from its results.jsonl as read back (%.17g doubles
 * round-trip exactly), rows sorted by (sample, depth, config) and summed in that order, so
 * eval-merge over shards reproduces a single run's summary.csv byte for byte. */
#include "eval/eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

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

void skv_eval_write_result(FILE *f, const skv_eval_settings *st, const skv_eval_result *r) {
    const skv_eval_sample *s = r->sample;
    const skv_eval_config *c = r->cfg;
    bool lm = st->task == SKV_EVAL_LM;
    fprintf(f, "{\"task\":\"%s\"", lm ? "lm" : "passkey");
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
        wi(f, "n_tokens", r->m.n_tokens);
        wd(f, "kl_mean", r->m.kl_mean);
        wd(f, "kl_median", r->m.kl_median);
        wd(f, "kl_p90", r->m.kl_p90);
        wd(f, "kl_p99", r->m.kl_p99);
        wd(f, "kl_max", r->m.kl_max);
        wd(f, "top1", r->m.top1);
        wi(f, "same_top", r->m.n_same_top);
        wd(f, "nll_ref", r->m.nll_ref);
        wd(f, "nll_cmp", r->m.nll_cmp);
        wd(f, "ppl_ref", r->m.ppl_ref);
        wd(f, "ppl_cmp", r->m.ppl_cmp);
        wd(f, "ln_ppl_ratio", r->m.ln_ppl_ratio);
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
    wd(f, "compress_ms", r->compress_ms);
    wd(f, "window_ms", r->window_ms);
    wd(f, "eval_ms", r->eval_ms);
    fputs("}\n", f);
}

/* ------------------------------------------------------------------------------------------ */

void skv_eval_rows_free(skv_eval_rows *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->rows[i].line);
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

/* Fills row from a parsed line; names the first missing field in *missing. */
static bool row_from_json(const skv_json *o, skv_eval_row *row, const char **missing) {
    const char *s;
    long l;
    double d;
#define NEED(cond, name)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            *missing = name;                                                                       \
            return false;                                                                          \
        }                                                                                          \
    } while (0)
    NEED(o->type == SKV_JSON_OBJECT, "(an object)");
    NEED(skv_json_get_string(o, "task", &s) && (!strcmp(s, "lm") || !strcmp(s, "passkey")), "task");
    row->task = !strcmp(s, "lm") ? SKV_EVAL_LM : SKV_EVAL_PASSKEY;
    NEED(skv_json_get_int(o, "sample", &l) && l >= 0 && l < (1L << 30), "sample");
    row->sample = (int)l;
    NEED(skv_json_get_int(o, "config", &l) && l >= 0 && l < (1L << 30), "config");
    row->config = (int)l;
    row->depth_index = 0;
    if (skv_json_get_int(o, "depth_index", &l)) {
        NEED(l >= 0 && l < (1L << 20), "depth_index");
        row->depth_index = (int)l;
    }
    NEED(skv_json_get_string(o, "policy", &s) && strlen(s) < sizeof row->policy, "policy");
    snprintf(row->policy, sizeof row->policy, "%s", s);
    NEED(skv_json_get_number(o, "keep_frac", &row->keep_frac) && row->keep_frac > 0 &&
             row->keep_frac <= 1,
         "keep_frac");
    NEED(skv_json_get_string(o, "protocol", &s) && strlen(s) < sizeof row->protocol, "protocol");
    snprintf(row->protocol, sizeof row->protocol, "%s", s);
    NEED(skv_json_get_string(o, "positions", &s) && strlen(s) < sizeof row->positions, "positions");
    snprintf(row->positions, sizeof row->positions, "%s", s);
    NEED(skv_json_get_int(o, "seed", &l) && l >= 0, "seed");
    row->seed = (uint64_t)l;
    NEED(skv_json_get_int(o, "greedy", &l) && l >= 0 && l < (1L << 30), "greedy");
    row->greedy = (int)l;
    NEED(skv_json_get_int(o, "greedy_match", &l) && l >= 0 && l <= row->greedy, "greedy_match");
    row->greedy_match = (int)l;
    if (row->task == SKV_EVAL_LM) {
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
    } else {
        NEED(skv_json_get_number(o, "depth", &row->depth), "depth");
        NEED(get_bool01(o, "correct", &row->correct), "correct");
        NEED(get_bool01(o, "ref_correct", &row->ref_correct), "ref_correct");
    }
    row->bytes_before = skv_json_get_number(o, "kv_bytes_before", &d) ? d : NAN;
    row->bytes_after = skv_json_get_number(o, "kv_bytes_after", &d) ? d : NAN;
    row->compress_ms = skv_json_get_number(o, "compress_ms", &d) ? d : NAN;
    row->window_ms = skv_json_get_number(o, "window_ms", &d) ? d : NAN;
    row->eval_ms = skv_json_get_number(o, "eval_ms", &d) ? d : NAN;
#undef NEED
    return true;
}

skv_status skv_eval_read_results(const char *path, skv_eval_rows *rows, skv_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return skv_err_set(err, SKV_ERR_IO, "cannot open results file %s: %s", path,
                           strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;
    skv_status st = SKV_OK;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
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
            skv_eval_row *nr = realloc(rows->rows, (size_t)nc * sizeof *nr);
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
        const char *missing = NULL;
        bool ok = row_from_json(v, row, &missing);
        skv_json_free(v);
        if (!ok) {
            st = skv_err_set(err, SKV_ERR_FORMAT,
                             "%s:%d: not an eval result line (field '%s' missing or invalid)", path,
                             lineno, missing);
            break;
        }
        row->line = malloc((size_t)n + 1);
        if (!row->line) {
            st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
        memcpy(row->line, line, (size_t)n + 1);
        row->file = path;
        rows->n++;
    }
    if (!st && ferror(f)) st = skv_err_set(err, SKV_ERR_IO, "error reading %s", path);
    free(line);
    fclose(f);
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
           !strcmp(a->protocol, b->protocol) && !strcmp(a->positions, b->positions) &&
           a->seed == b->seed && a->greedy == b->greedy;
}

skv_status skv_eval_rows_check(skv_eval_rows *rows, skv_err *err) {
    if (rows->n < 1) return skv_err_set(err, SKV_ERR_FORMAT, "no eval results to summarize");
    qsort(rows->rows, (size_t)rows->n, sizeof rows->rows[0], row_cmp);
    int max_cfg = 0;
    for (int i = 0; i < rows->n; i++) {
        const skv_eval_row *r = &rows->rows[i];
        if (r->task != rows->rows[0].task)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "%s and %s hold results of different tasks (lm and passkey)",
                               rows->rows[0].file, r->file);
        if (i > 0 && row_cmp(r, r - 1) == 0)
            return skv_err_set(err, SKV_ERR_FORMAT,
                               "sample %d (depth %d) config %d appears twice (in %s and %s): "
                               "were the shards run with different --shard counts, or one given "
                               "twice?",
                               r->sample, r->depth_index, r->config, (r - 1)->file, r->file);
        if (r->config > max_cfg) max_cfg = r->config;
    }
    /* one config index must always name the same configuration */
    int *first = malloc(((size_t)max_cfg + 1) * sizeof *first);
    if (!first) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    for (int c = 0; c <= max_cfg; c++) first[c] = -1;
    skv_status st = SKV_OK;
    for (int i = 0; i < rows->n && !st; i++) {
        const skv_eval_row *r = &rows->rows[i];
        if (first[r->config] < 0) {
            first[r->config] = i;
        } else if (!same_config(&rows->rows[first[r->config]], r)) {
            st = skv_err_set(err, SKV_ERR_FORMAT,
                             "config %d means different settings in %s and %s: the runs were "
                             "made with different arguments",
                             r->config, rows->rows[first[r->config]].file, r->file);
        }
    }
    free(first);
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
    double bytes_before, bytes_after, compress_ms, window_ms, eval_ms;
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
        o->eval_ms += r->eval_ms;
    }
    o->n_seeds = n_seeds;
    o->bytes_before /= g->n;
    o->bytes_after /= g->n;
    o->compress_ms /= g->n;
    o->window_ms /= g->n;
    o->eval_ms /= g->n;
    if (p->task == SKV_EVAL_LM) {
        o->kl_mean = group_stat(rows, g, m_kl_mean, vals, &o->kl_mean_seed_sd);
        o->kl_median = group_stat(rows, g, m_kl_median, vals, NULL);
        o->kl_p90 = group_stat(rows, g, m_kl_p90, vals, NULL);
        o->kl_p99 = group_stat(rows, g, m_kl_p99, vals, NULL);
        o->top1 = group_stat(rows, g, m_top1, vals, &o->top1_seed_sd);
        o->ln_ppl = group_stat(rows, g, m_ln_ppl, vals, &o->ln_ppl_seed_sd);
        /* llama-perplexity's "same top p": pooled over every compared token */
        o->same_top_p = (double)o->n_same_top / (double)o->n_tokens;
        o->same_top_unc =
            o->n_tokens > 1 ? sqrt(o->same_top_p * (1 - o->same_top_p) / (double)(o->n_tokens - 1))
                            : NAN;
        o->ppl_ref = exp(sum_nll_ref / (double)o->n_tokens);
        o->ppl_cmp = exp(sum_nll_cmp / (double)o->n_tokens);
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
    fprintf(f, "%s,%s,%s,%s", lm ? "lm" : "passkey", p->protocol, p->positions, p->policy);
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
    fputc('\n', f);
}

static const char csv_head_lm[] =
    "task,protocol,positions,policy,keep_frac,n_samples,n_seeds,n_tokens,kl_mean,kl_mean_ci95,"
    "kl_mean_seed_sd,kl_median,kl_p90,kl_p99,kl_max,top1,top1_ci95,top1_seed_sd,same_top_p,"
    "same_top_p_unc,ppl_ref,ppl_cmp,ln_ppl_ratio,ln_ppl_ratio_ci95,ln_ppl_ratio_seed_sd,"
    "greedy_match,greedy_match_ci95,greedy_match_seed_sd,greedy,kv_bytes_before,"
    "kv_bytes_after\n";
static const char csv_head_pk[] =
    "task,protocol,positions,policy,keep_frac,depth,n_samples,n_seeds,accuracy,accuracy_ci95,"
    "accuracy_seed_sd,ref_accuracy,greedy_match,greedy_match_ci95,greedy_match_seed_sd,greedy,"
    "kv_bytes_before,kv_bytes_after\n";

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
    fprintf(f, "| %s | %s | %s | %g |", p->protocol, p->positions, p->policy, p->keep_frac);
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
    fprintf(f, " %.2f | %.2f |\n", s->compress_ms, s->window_ms);
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t path_size,
                     skv_err *err) {
    snprintf(path, path_size, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) skv_err_set(err, SKV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return f;
}

static skv_status close_file(FILE *f, const char *path, skv_err *err) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    if (bad) return skv_err_set(err, SKV_ERR_IO, "error writing %s", path);
    return SKV_OK;
}

/* Plot lines: one per (protocol, positions, policy); points over keep fractions. For passkey
 * the value is the accuracy averaged over depths. */
static skv_status write_plots(const skv_eval_rows *rows, const group *groups, const gstats *stats,
                              int n_groups, const char *dir, skv_err *err) {
    char path[4096];
    bool lm = rows->rows[0].task == SKV_EVAL_LM;
    FILE *f = open_in(dir, "plot_data.dat", path, sizeof path, err);
    if (!f) return err ? err->status : SKV_ERR_IO;
    /* distinct lines, in summary order */
    int *line_of = malloc((size_t)n_groups * sizeof *line_of);
    int *line_first = malloc((size_t)n_groups * sizeof *line_first);
    if (!line_of || !line_first) {
        free(line_of);
        free(line_first);
        fclose(f);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    int n_lines = 0;
    for (int i = 0; i < n_groups; i++) {
        const skv_eval_row *p = groups[i].proto;
        int l = -1;
        for (int k = 0; k < n_lines && l < 0; k++) {
            const skv_eval_row *q = groups[line_first[k]].proto;
            if (!strcmp(p->policy, q->policy) && !strcmp(p->protocol, q->protocol) &&
                !strcmp(p->positions, q->positions))
                l = k;
        }
        if (l < 0) {
            l = n_lines++;
            line_first[l] = i;
        }
        line_of[i] = l;
    }
    fprintf(f, "# sparsekv eval plot data: one block per line (gnuplot index)\n");
    if (lm)
        fprintf(f, "# keep_frac kl_mean kl_mean_ci95 top1 top1_ci95\n");
    else
        fprintf(f, "# keep_frac accuracy(mean over depths)\n");
    for (int l = 0; l < n_lines; l++) {
        const skv_eval_row *q = groups[line_first[l]].proto;
        fprintf(f, "%s# %s %s %s\n", l ? "\n\n" : "", q->policy, q->protocol, q->positions);
        /* keep fractions of this line, in summary order (ascending as enumerated) */
        for (int i = 0; i < n_groups; i++) {
            if (line_of[i] != l) continue;
            if (!lm) {
                /* once per keep fraction: average the depths */
                bool first = true;
                for (int j = 0; j < i; j++)
                    if (line_of[j] == l && groups[j].proto->keep_frac == groups[i].proto->keep_frac)
                        first = false;
                if (!first) continue;
                double sum = 0;
                int c = 0;
                for (int j = i; j < n_groups; j++)
                    if (line_of[j] == l &&
                        groups[j].proto->keep_frac == groups[i].proto->keep_frac) {
                        sum += stats[j].accuracy.mean;
                        c++;
                    }
                fprintf(f, "%.9g %.9g\n", groups[i].proto->keep_frac, sum / c);
                continue;
            }
            const gstats *s = &stats[i];
            fprintf(f, "%.9g %.9g %.9g %.9g %.9g\n", groups[i].proto->keep_frac, s->kl_mean.mean,
                    isnan(s->kl_mean.ci95) ? 0.0 : s->kl_mean.ci95, s->top1.mean,
                    isnan(s->top1.ci95) ? 0.0 : s->top1.ci95);
        }
    }
    skv_status st = close_file(f, path, err);
    if (st) goto done;
    f = open_in(dir, "plots.gp", path, sizeof path, err);
    if (!f) {
        st = err ? err->status : SKV_ERR_IO;
        goto done;
    }
    fprintf(f, "# sparsekv eval plots: run `gnuplot plots.gp` in this directory\n"
               "png_term = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n"
               "set grid\nset key outside right top\nset xlabel 'keep fraction'\n"
               "set xrange [0:1.05]\n");
    struct {
        const char *name, *ylabel, *title, *using;
    } plots_lm[2] = {{"kl_vs_keep", "KL(reference || compressed), nats per token",
                      "KL divergence vs keep fraction (mean over samples, 95% CI)", "1:2:3"},
                     {"top1_vs_keep", "top-1 agreement with the full cache",
                      "Top-1 agreement vs keep fraction (mean over samples, 95% CI)", "1:4:5"}},
      plots_pk[1] = {{"passkey_vs_keep", "pass key retrieval accuracy",
                      "Passkey accuracy vs keep fraction (mean over depths)", "1:2"}};
    int n_plots = lm ? 2 : 1;
    for (int pl = 0; pl < n_plots; pl++) {
        const char *name = lm ? plots_lm[pl].name : plots_pk[pl].name;
        const char *ylabel = lm ? plots_lm[pl].ylabel : plots_pk[pl].ylabel;
        const char *title = lm ? plots_lm[pl].title : plots_pk[pl].title;
        const char *usng = lm ? plots_lm[pl].using : plots_pk[pl].using;
        fprintf(f, "\nset ylabel '%s'\nset title '%s'\n", ylabel, title);
        if (!lm || pl == 1)
            fprintf(f, "set yrange [0:1.05]\n");
        else
            fprintf(f, "set yrange [0:*]\n");
        for (int term = 0; term < 2; term++) {
            if (term == 0)
                fprintf(f,
                        "eval('set terminal '.png_term.' size 1000,600 noenhanced')\nset output "
                        "'%s.png'\n",
                        name);
            else
                fprintf(f,
                        "set terminal svg size 1000,600 dynamic noenhanced\nset output '%s.svg'\n",
                        name);
            fprintf(f, "plot \\\n");
            for (int l = 0; l < n_lines; l++) {
                const skv_eval_row *q = groups[line_first[l]].proto;
                /* colour by policy (rank of its first line), dash by protocol/positions */
                int pol = 0, dash;
                for (int k = 0; k < n_lines; k++) {
                    const char *pk = groups[line_first[k]].proto->policy;
                    if (!strcmp(pk, q->policy)) break;
                    bool earlier = false;
                    for (int j = 0; j < k; j++)
                        earlier |= !strcmp(groups[line_first[j]].proto->policy, pk);
                    if (!earlier) pol++;
                }
                dash = (!strcmp(q->protocol, "engine") ? 2 : 1) +
                       (!strcmp(q->positions, "rerotate") ? 2 : 0);
                fprintf(f,
                        "  'plot_data.dat' index %d using %s with %s lc %d dt %d pt %d "
                        "title '%s %s%s%s'%s\n",
                        l, usng, lm ? "yerrorlines" : "linespoints", pol + 1, dash, pol + 1,
                        q->policy, q->protocol, strcmp(q->positions, "original") ? " " : "",
                        strcmp(q->positions, "original") ? q->positions : "",
                        l + 1 < n_lines ? ", \\" : "");
            }
        }
        fprintf(f, "set output\n");
    }
    st = close_file(f, path, err);
done:
    free(line_of);
    free(line_first);
    return st;
}

skv_status skv_eval_write_reports(const skv_eval_rows *rows, const char *dir, char **md,
                                  skv_err *err) {
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

    if (!(f = open_in(dir, "summary.csv", path, sizeof path, err))) goto fail_io;
    fputs(lm ? csv_head_lm : csv_head_pk, f);
    for (int k = 0; k < n_groups; k++) write_csv_row(f, &groups[k], &stats[k]);
    if ((st = close_file(f, path, err))) goto done;

    if (!(f = open_in(dir, "timing.csv", path, sizeof path, err))) goto fail_io;
    fprintf(f, "protocol,positions,policy,keep_frac%s,n_rows,compress_ms,window_ms,eval_ms\n",
            lm ? "" : ",depth");
    for (int k = 0; k < n_groups; k++) {
        const skv_eval_row *p = groups[k].proto;
        fprintf(f, "%s,%s,%s,%.9g", p->protocol, p->positions, p->policy, p->keep_frac);
        if (!lm) fprintf(f, ",%.9g", p->depth);
        fprintf(f, ",%d,%.4f,%.4f,%.4f\n", stats[k].n_rows, stats[k].compress_ms,
                stats[k].window_ms, stats[k].eval_ms);
    }
    if ((st = close_file(f, path, err))) goto done;

    mf = open_memstream(&mdbuf, &mdlen);
    if (!mf) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (lm) {
        fprintf(mf, "| protocol | positions | policy | keep | n | KL mean | KL p99 | KL max | "
                    "top-1 | same top p | ln(PPL/PPL_ref) | greedy match | KV kept | "
                    "seed sd (KL / top-1) | compress ms | window ms |\n"
                    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
                    "---:|\n");
    } else {
        fprintf(mf, "| protocol | positions | policy | keep | depth | n | accuracy | "
                    "dense accuracy | greedy match | KV kept | seed sd | compress ms | "
                    "window ms |\n"
                    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int k = 0; k < n_groups; k++) write_md_row(mf, &groups[k], &stats[k]);
    fprintf(mf, "\nn = samples; ± = 95%% confidence interval over samples (Student t); KL in "
                "nats per continuation token; same top p pooled over all tokens "
                "(± binomial standard error, as llama-perplexity prints it); random: every "
                "sample is first averaged over its seeds, seed sd = standard deviation of the "
                "per-seed means; KV kept = bytes after / before compression.\n");
    if (fclose(mf) != 0) {
        mf = NULL;
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    mf = NULL;
    if (!(f = open_in(dir, "summary.md", path, sizeof path, err))) goto fail_io;
    fwrite(mdbuf, 1, mdlen, f);
    if ((st = close_file(f, path, err))) goto done;

    st = write_plots(rows, groups, stats, n_groups, dir, err);
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
