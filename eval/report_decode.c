/* report_decode.c — the reports of decoding-time rows (`sparsekv eval --budget LIST`): one
 * summary line per (budget, policy) and two figures, KL against the budget and the entries per
 * head over time. The rows come checked (skv_eval_rows_check: sorted, one task, one kind). */
#include "eval/eval.h"
#include "sparsekv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dconfig {
    int config, budget, every;
    const char *policy;
    int *members; /* row indices, ascending sample */
    int n;
} dconfig;

/* The configurations in config-index order, each with its rows. */
static skv_status collect(const skv_eval_rows *rows, dconfig **out, int *n_out, skv_err *err) {
    dconfig *c = calloc((size_t)rows->n, sizeof *c);
    int n = 0;
    if (!c) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < rows->n; i++) {
        const skv_eval_row *r = &rows->rows[i];
        int k = 0;
        while (k < n && c[k].config != r->config) k++;
        if (k == n) {
            c[n].config = r->config;
            c[n].budget = r->budget;
            c[n].every = r->compress_every;
            c[n].policy = r->policy;
            c[n].members = malloc((size_t)rows->n * sizeof *c[n].members);
            if (!c[n].members) {
                for (int j = 0; j < n; j++) free(c[j].members);
                free(c);
                return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
            }
            n++;
        }
        c[k].members[c[k].n++] = i;
    }
    for (int a = 1; a < n; a++) /* insertion sort by config index */
        for (int b = a; b > 0 && c[b].config < c[b - 1].config; b--) {
            dconfig t = c[b];
            c[b] = c[b - 1];
            c[b - 1] = t;
        }
    *out = c;
    *n_out = n;
    return SKV_OK;
}

typedef struct dstats {
    skv_eval_stat kl, top1, ln_ppl;
    double kl_p99, cuts;
    int most; /* the most entries of any head in any row */
    long long n_tokens;
    skv_eval_pooled pooled; /* over every token of every sample, as the prefill summary's */
} dstats;

static void stats_of(const skv_eval_rows *rows, const dconfig *c, double *vals, dstats *o) {
    for (int i = 0; i < c->n; i++) vals[i] = rows->rows[c->members[i]].kl_mean;
    o->kl = skv_eval_stat_of(vals, c->n);
    for (int i = 0; i < c->n; i++) vals[i] = rows->rows[c->members[i]].top1;
    o->top1 = skv_eval_stat_of(vals, c->n);
    for (int i = 0; i < c->n; i++) vals[i] = rows->rows[c->members[i]].ln_ppl_ratio;
    o->ln_ppl = skv_eval_stat_of(vals, c->n);
    o->kl_p99 = o->cuts = 0;
    o->most = 0;
    o->n_tokens = 0;
    long long same = 0;
    double nll_ref = 0, nll_cmp = 0;
    for (int i = 0; i < c->n; i++) {
        const skv_eval_row *r = &rows->rows[c->members[i]];
        o->kl_p99 += r->kl_p99 / c->n;
        o->cuts += (double)r->cuts / c->n;
        if (r->max_entries > o->most) o->most = r->max_entries;
        o->n_tokens += r->n_tokens;
        same += r->n_same_top;
        nll_ref += r->nll_ref * r->n_tokens;
        nll_cmp += r->nll_cmp * r->n_tokens;
    }
    o->pooled = skv_eval_pool(o->n_tokens, same, nll_ref, nll_cmp);
}

/* A CSV number; empty when undefined (a CI of one sample), with the precision of the other
 * modes' summary.csv. */
static void num(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.9g", x);
}

/* A plot_data.dat number: never empty (gnuplot's columns are split by blanks). */
static void dnum(FILE *f, double x) {
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fputs("nan", f);
}

/* Labelled ticks of a log axis over [lo, hi]: 1, 2 and 5 times each power of ten (only the
 * powers over more than three decades; every digit within one), where gnuplot's own would
 * label one decade or none. */
static void log_ticks(FILE *f, const char *axis, double lo, double hi) {
    const int e0 = (int)floor(log10(lo)), e1 = (int)ceil(log10(hi));
    static const int all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, some[] = {1, 2, 5}, one[] = {1};
    const int *m = e1 - e0 > 3 ? one : e1 - e0 > 1 ? some : all;
    const int nm = e1 - e0 > 3 ? 1 : e1 - e0 > 1 ? 3 : 9;
    fprintf(f, "set %s (", axis);
    int n = 0;
    for (int e = e0; e <= e1; e++)
        for (int i = 0; i < nm; i++) {
            const double v = m[i] * pow(10.0, e);
            if (v >= lo && v <= hi) fprintf(f, "%s'%g' %.9g", n++ ? ", " : "", v, v);
        }
    fputs(")\n", f);
    if (n < 2) fprintf(f, "set %s autofreq\n", axis); /* a range inside one step: gnuplot's */
}

static const char *shown_policy(const skv_eval_labels *labels, const char *policy) {
    const char *l = skv_eval_label_of(labels, policy);
    return l ? l : policy;
}

skv_status skv_eval_write_decode_reports(const skv_eval_rows *rows, const char *dir,
                                         const skv_eval_labels *labels, char **md, skv_err *err) {
    if (md) *md = NULL;
    if (!rows || rows->n < 1 || !rows->rows[0].decode)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "no decoding-time rows to report");
    dconfig *cf = NULL;
    int n_cf = 0;
    skv_status st = collect(rows, &cf, &n_cf, err);
    if (st) return st;
    double *vals = malloc((size_t)rows->n * sizeof *vals);
    dstats *ds = calloc((size_t)n_cf, sizeof *ds);
    char *mdbuf = NULL;
    size_t mdlen = 0;
    FILE *f = NULL, *m = NULL;
    char path[4200];
    if (!vals || !ds) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < n_cf; k++) stats_of(rows, &cf[k], vals, &ds[k]);

    /* summary.csv: no timings, so merged shards give the bytes one run gives */
    if (!(f = skv_eval_open_tmp(dir, "summary.csv", path, sizeof path, err))) goto io;
    fputs("mode,policy,budget,compress_every,bound,n,kl_mean,kl_mean_ci95,kl_p99,top1,"
          "top1_ci95,ln_ppl_ratio,cuts,max_entries,ln_ppl_ratio_ci95,n_tokens,same_top_p,"
          "same_top_p_unc,ppl_ref,ppl_cmp\n",
          f);
    for (int k = 0; k < n_cf; k++) {
        const dstats *s = &ds[k];
        fputs("decode,", f);
        skv_eval_write_csv_field(f, cf[k].policy);
        fprintf(f, ",%d,%d,%d,%d,", cf[k].budget, cf[k].every, cf[k].budget + cf[k].every, s->kl.n);
        num(f, s->kl.mean), fputc(',', f), num(f, s->kl.ci95), fputc(',', f);
        num(f, s->kl_p99), fputc(',', f), num(f, s->top1.mean), fputc(',', f);
        num(f, s->top1.ci95), fputc(',', f), num(f, s->ln_ppl.mean), fputc(',', f);
        num(f, s->cuts);
        fprintf(f, ",%d,", s->most);
        num(f, s->ln_ppl.ci95);
        fprintf(f, ",%lld,", s->n_tokens);
        num(f, s->pooled.same_top_p), fputc(',', f), num(f, s->pooled.same_top_unc);
        fputc(',', f), num(f, s->pooled.ppl_ref), fputc(',', f), num(f, s->pooled.ppl_cmp);
        fputc('\n', f);
    }
    if ((st = skv_eval_close_tmp(f, path, err))) {
        f = NULL;
        goto done;
    }

    /* summary.md (also returned for stdout) */
    m = open_memstream(&mdbuf, &mdlen);
    if (!m) {
        f = NULL;
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    fprintf(m,
            "# Decoding-time compression (eval --budget)\n\n"
            "Every sample teacher-forced with each kv head cut back to the budget every "
            "compress_every tokens (rerotate), each next-token distribution compared with the "
            "full cache's; mean over %d sample%s, ± the 95%% confidence half-width. A budget of "
            "at least the sample length, where one is given, never cuts: its row is a control "
            "(KL 0).\n\n",
            cf[0].n, cf[0].n == 1 ? "" : "s");
    fputs("| policy | budget | every | n | KL mean | KL p99 | top-1 | ln PPL ratio | cuts | "
          "most entries per head (bound) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
          m);
    for (int k = 0; k < n_cf; k++) {
        const dstats *s = &ds[k];
        fputs("| ", m);
        skv_eval_write_md_cell(m, shown_policy(labels, cf[k].policy));
        fprintf(m, " | %d | %d | %d | %.4g", cf[k].budget, cf[k].every, s->kl.n, s->kl.mean);
        if (isfinite(s->kl.ci95)) fprintf(m, " ± %.2g", s->kl.ci95);
        fprintf(m, " | %.4g | %.3f", s->kl_p99, s->top1.mean);
        if (isfinite(s->top1.ci95)) fprintf(m, " ± %.3f", s->top1.ci95);
        fprintf(m, " | %.4g", s->ln_ppl.mean);
        if (isfinite(s->ln_ppl.ci95)) fprintf(m, " ± %.2g", s->ln_ppl.ci95);
        fprintf(m, " | %.1f | %d (%d) |\n", s->cuts, s->most, cf[k].budget + cf[k].every);
    }
    if (fclose(m) != 0) {
        m = NULL;
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    m = NULL;
    if (!(f = skv_eval_open_tmp(dir, "summary.md", path, sizeof path, err))) goto io;
    fwrite(mdbuf, 1, mdlen, f);
    if ((st = skv_eval_close_tmp(f, path, err))) {
        f = NULL;
        goto done;
    }

    /* plot_data.dat: per policy (first-seen order), (budget, KL mean, CI) for kl_vs_budget;
     * then per policy the mean entries after each step at the smallest budget */
    const char *pols[64];
    int n_pols = 0, min_budget = cf[0].budget, every_min = cf[0].every;
    bool any_positive = false;
    for (int k = 0; k < n_cf; k++) {
        bool seen = false;
        for (int p = 0; p < n_pols; p++) seen |= !strcmp(pols[p], cf[k].policy);
        if (!seen && n_pols < 64) pols[n_pols++] = cf[k].policy;
        if (cf[k].budget < min_budget) min_budget = cf[k].budget, every_min = cf[k].every;
        any_positive |= ds[k].kl.mean > 0;
    }
    if (!(f = skv_eval_open_tmp(dir, "plot_data.dat", path, sizeof path, err))) goto io;
    fputs("# sparsekv eval --budget: blocks 0..P-1: budget kl_mean kl_ci95 (one per policy);\n"
          "# blocks P..2P-1: step mean_entries (smallest budget)\n",
          f);
    for (int p = 0; p < n_pols; p++) {
        fprintf(f, "# %s\n", pols[p]);
        for (int k = 0; k < n_cf; k++) {
            if (strcmp(cf[k].policy, pols[p])) continue;
            fprintf(f, "%d ", cf[k].budget);
            dnum(f, ds[k].kl.mean), fputc(' ', f),
                dnum(f, isfinite(ds[k].kl.ci95) ? ds[k].kl.ci95 : 0);
            fputc('\n', f);
        }
        fputs("\n\n", f);
    }
    /* the entries series of each policy; when all are equal (uniform budgets cut every head to
     * the same count) one line is drawn for all, instead of lines hiding each other */
    bool same_entries = true;
    const dconfig *first_cf = NULL;
    for (int k = 0; k < n_cf; k++) {
        if (cf[k].budget != min_budget) continue;
        if (!first_cf) {
            first_cf = &cf[k];
            continue;
        }
        for (int i = 0; same_entries && i < cf[k].n && i < first_cf->n; i++) {
            const skv_eval_row *a = &rows->rows[cf[k].members[i]];
            const skv_eval_row *b = &rows->rows[first_cf->members[i]];
            same_entries = a->n_entries == b->n_entries &&
                           !memcmp(a->entries, b->entries, (size_t)a->n_entries * sizeof(int));
        }
        same_entries &= cf[k].n == first_cf->n;
    }
    for (int p = 0; p < n_pols; p++) {
        fprintf(f, "# %s, budget %d\n", pols[p], min_budget);
        for (int k = 0; k < n_cf; k++) {
            if (strcmp(cf[k].policy, pols[p]) || cf[k].budget != min_budget) continue;
            int steps = 1 << 30;
            for (int i = 0; i < cf[k].n; i++)
                if (rows->rows[cf[k].members[i]].n_entries < steps)
                    steps = rows->rows[cf[k].members[i]].n_entries;
            for (int t = 0; t < steps; t++) {
                double sum = 0;
                for (int i = 0; i < cf[k].n; i++) sum += rows->rows[cf[k].members[i]].entries[t];
                fprintf(f, "%d %.4f\n", t + 1, sum / cf[k].n);
            }
        }
        fputs("\n\n", f);
    }
    if ((st = skv_eval_close_tmp(f, path, err))) {
        f = NULL;
        goto done;
    }

    /* plots.gp */
    if (!(f = skv_eval_open_tmp(dir, "plots.gp", path, sizeof path, err))) goto io;
    fputs("# sparsekv eval --budget plots: run `gnuplot plots.gp` in this directory\n"
          "png_term = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n"
          "# sparsekv runs this with out_suffix='.tmp' and renames the figures into place\n"
          "if (!exists('out_suffix')) out_suffix = ''\n"
          "set encoding utf8\nset grid lc rgb '#dddddd'\nset border 3\nset xtics nomirror\n"
          "set ytics nomirror\n"
          "set key outside bottom center horizontal Left reverse samplen 2.5 noenhanced\n",
          f);
    double kl_lo = 0; /* the log KL axis's bottom */
    for (int fig = 0; fig < 2; fig++) {
        for (int term = 0; term < 2; term++) {
            const char *name = fig == 0 ? "kl_vs_budget" : "entries_vs_step";
            if (term == 0)
                fprintf(f,
                        "eval('set terminal '.png_term.' size 900,520 noenhanced font "
                        "\"Sans,11\"')\nset output '%s.png'.out_suffix\n",
                        name);
            else
                fprintf(f,
                        "set terminal svg size 900,520 dynamic noenhanced font 'Sans,11'\n"
                        "set output '%s.svg'.out_suffix\n",
                        name);
            if (fig == 0) {
                fprintf(f, "set title 'KL(full || budget) per token vs the decoding budget'\n"
                           "set xlabel 'budget (entries per kv head)'\nset logscale x\n"
                           "set format y '%%g'\nset xtics (");
                for (int k = 0, w = 0; k < n_cf; k++) {
                    if (strcmp(cf[k].policy, pols[0])) continue;
                    fprintf(f, "%s%d", w++ ? ", " : "", cf[k].budget);
                }
                fputs(")\n", f);
                int bmin = cf[0].budget, bmax = cf[0].budget;
                for (int k = 0; k < n_cf; k++) {
                    if (cf[k].budget < bmin) bmin = cf[k].budget;
                    if (cf[k].budget > bmax) bmax = cf[k].budget;
                }
                fprintf(f, "set xrange [%g:%g]\n", bmin / 1.5, bmax * 1.5);
                /* the means and their 95% CIs; a lower end at or below 0 is drawn from the
                 * bottom of the log axis (kl_lo) */
                double ylo = INFINITY, yhi = 0;
                for (int k = 0; k < n_cf; k++) {
                    const double mu = ds[k].kl.mean, ci = ds[k].kl.ci95;
                    if (!(mu > 0)) continue;
                    ylo = fmin(ylo, isfinite(ci) && mu - ci > 0 ? mu - ci : mu);
                    yhi = fmax(yhi, isfinite(ci) ? mu + ci : mu);
                }
                kl_lo = ylo / 1.5;
                if (any_positive) { /* a budget that never cuts has KL 0: off the log axis */
                    fprintf(f,
                            "set ylabel 'mean KL, nats (log; bars: 95%% CI)'\nset logscale y\n"
                            "set yrange [%g:%g]\n",
                            kl_lo, yhi * 1.5);
                    log_ticks(f, "ytics", kl_lo, yhi * 1.5);
                } else
                    fputs("set ylabel 'mean KL, nats'\nunset logscale y\nset yrange [0:0.001]\n",
                          f);
            } else {
                fprintf(f,
                        "set title 'entries per kv head while decoding (budget %d, a cut every "
                        "%d tokens)'\nset xlabel 'tokens fed after the prefix'\n"
                        "set xtics autofreq\nset ytics autofreq\nset xrange [*:*]\n"
                        "set yrange [%d:%d]\nunset "
                        "logscale\nset ylabel 'most entries of any head "
                        "(mean over "
                        "samples)'\n",
                        min_budget, every_min, min_budget / 2, min_budget + every_min + 8);
            }
            fputs("plot ", f);
            for (int p = 0; p < (fig == 1 && same_entries ? 1 : n_pols); p++) {
                const char *col = skv_eval_policy_colour(pols[p]);
                const int pt = fig == 1 && same_entries ? 7 : skv_eval_policy_pt(pols[p]);
                /* KL: each policy's points moved a little along the (log) budget axis, so that
                 * the CI bars of one budget stand side by side instead of over each other */
                char x[64] = "1";
                if (fig == 0)
                    snprintf(x, sizeof x, "($1 * %.6f)", pow(1.04, p - (n_pols - 1) / 2.0));
                if (fig == 0 && any_positive) /* the CI bars first, under the line */
                    fprintf(f,
                            "%s'plot_data.dat' index %d using %s:($2 > 0 ? $2 : 1/0):($2 - $3 > "
                            "%.9g ? $2 - $3 : %.9g):($2 + $3) with yerrorbars lw 1 pt %d lc rgb "
                            "'%s' notitle, \\\n     ",
                            p ? ", \\\n     " : "", p, x, kl_lo, kl_lo, pt, col);
                fprintf(f,
                        "%s'plot_data.dat' index %d using %s:%s with linespoints lw 2 pt %d "
                        "lc rgb '%s' title ",
                        p && !(fig == 0 && any_positive) ? ", \\\n     " : "",
                        fig == 0 ? p : n_pols + p, x,
                        fig == 0 ? (any_positive ? "($2 > 0 ? $2 : 1/0)" : "2") : "2", pt, col);
                skv_eval_write_gnuplot_string(f, fig == 1 && same_entries && n_pols > 1
                                                     ? "every policy (the same counts)"
                                                     : shown_policy(labels, pols[p]));
            }
            if (fig == 1)
                fprintf(f,
                        ", \\\n     %d with lines dt 2 lc rgb '#888888' title 'budget', \\\n"
                        "     %d with lines dt 3 lc rgb '#444444' title 'bound (budget + "
                        "every)'",
                        min_budget, min_budget + every_min);
            fputs("\nset output\n", f);
        }
        skv_eval_write_drawn_mark(f, fig == 0 ? "kl_vs_budget" : "entries_vs_step");
    }
    if ((st = skv_eval_close_tmp(f, path, err))) {
        f = NULL;
        goto done;
    }
    f = NULL;
    if (md) {
        *md = mdbuf;
        mdbuf = NULL;
    }
    goto done;
io:
    st = err ? err->status : SKV_ERR_IO;
    f = NULL;
done:
    if (m) fclose(m);
    free(mdbuf);
    for (int k = 0; k < n_cf; k++) free(cf[k].members);
    free(cf);
    free(vals);
    free(ds);
    return st;
}
