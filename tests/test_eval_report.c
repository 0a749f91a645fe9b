/* test_eval_report.c — results.jsonl read back, merged and summarized: crafted rows with
 * hand-computed summaries (pooled "same top p" vs per-sample top-1, seeds, 95% CI), ordering,
 * and the errors merge must catch. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eval/eval.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NEAR(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

typedef struct crafted {
    int sample, config;
    const char *policy;
    double keep;
    int seed, n_tokens, same_top, greedy_match;
    double kl_mean, top1, nll_ref, nll_cmp;
} crafted;

static void put(FILE *f, const crafted *c) {
    fprintf(f,
            "{\"task\":\"lm\",\"sample\":%d,\"depth_index\":0,\"config\":%d,\"policy\":\"%s\","
            "\"keep_frac\":%.17g,\"protocol\":\"seed\",\"positions\":\"original\",\"seed\":%d,"
            "\"greedy\":8,\"greedy_match\":%d,\"n_tokens\":%d,\"same_top\":%d,\"kl_mean\":%.17g,"
            "\"kl_median\":%.17g,\"kl_p90\":%.17g,\"kl_p99\":%.17g,\"kl_max\":%.17g,"
            "\"top1\":%.17g,\"nll_ref\":%.17g,\"nll_cmp\":%.17g,\"ln_ppl_ratio\":%.17g,"
            "\"kv_bytes_before\":1000,\"kv_bytes_after\":500,\"compress_ms\":%d}\n",
            c->sample, c->config, c->policy, c->keep, c->seed, c->greedy_match, c->n_tokens,
            c->same_top, c->kl_mean, c->kl_mean / 2, c->kl_mean * 2, c->kl_mean * 3, c->kl_mean * 4,
            c->top1, c->nll_ref, c->nll_cmp, c->nll_cmp - c->nll_ref, rand() % 100);
}

static const crafted rows_a[] = {
    /* attention 0.5, two samples with different token counts */
    {1, 0, "attention", 0.5, 0, 10, 9, 5, 0.4, 0.9, 2.0, 2.1},
    {0, 1, "random", 0.5, 0, 4, 3, 2, 0.1, 0.75, 1.0, 1.0},
    {1, 2, "random", 0.5, 1, 10, 10, 8, 0.9, 1.0, 2.0, 2.0},
};
static const crafted rows_b[] = {
    {0, 0, "attention", 0.5, 0, 4, 2, 3, 0.2, 0.5, 1.0, 1.5},
    {0, 2, "random", 0.5, 1, 4, 4, 2, 0.3, 1.0, 1.0, 1.0},
    {1, 1, "random", 0.5, 0, 10, 10, 8, 0.5, 1.0, 2.0, 2.0},
    {0, 3, "attention", 1.0, 0, 4, 4, 8, 0.0, 1.0, 1.0, 1.0},
    {1, 3, "attention", 1.0, 0, 10, 10, 8, 0.0, 1.0, 2.0, 2.0},
};

static const char *write_rows(const crafted *c, int n) {
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < n; i++) put(f, &c[i]);
    fclose(f);
    return path;
}

/* Value of column name in data row `row` (1-based after the header) of a CSV text. */
static double csv_get(const char *csv, int row, const char *name) {
    const char *nl = strchr(csv, '\n');
    char head[2048];
    snprintf(head, sizeof head, "%.*s", (int)(nl - csv), csv);
    int col = -1, k = 0;
    for (char *tok = strtok(head, ","); tok; tok = strtok(NULL, ","), k++)
        if (!strcmp(tok, name)) col = k;
    if (col < 0) fail_msg("no column %s", name);
    const char *line = nl + 1;
    for (int r = 1; r < row; r++) line = strchr(line, '\n') + 1;
    for (int c = 0; c < col; c++) line = strchr(line, ',') + 1;
    if (*line == ',' || *line == '\n') return NAN;
    return strtod(line, NULL);
}

static char *csv_cell(const char *csv, int row, int col) {
    const char *line = strchr(csv, '\n') + 1;
    for (int r = 1; r < row; r++) line = strchr(line, '\n') + 1;
    for (int c = 0; c < col; c++) line = strchr(line, ',') + 1;
    size_t n = strcspn(line, ",\n");
    return strndup(line, n);
}

static void test_summary(void **state) {
    (void)state;
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s", write_rows(rows_a, 3));
    snprintf(pb, sizeof pb, "%s", write_rows(rows_b, 5));
    skv_eval_rows rows = {0};
    skv_err err = {0};
    assert_int_equal(skv_eval_read_results(pa, &rows, &err), SKV_OK);
    assert_int_equal(skv_eval_read_results(pb, &rows, &err), SKV_OK);
    assert_int_equal(rows.n, 8);
    assert_int_equal(skv_eval_rows_check(&rows, &err), SKV_OK);
    /* sorted by (sample, config) */
    for (int i = 1; i < rows.n; i++)
        assert_true(rows.rows[i - 1].sample < rows.rows[i].sample ||
                    (rows.rows[i - 1].sample == rows.rows[i].sample &&
                     rows.rows[i - 1].config < rows.rows[i].config));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", test_tmp_path("_report"));
    assert_int_equal(skv_eval_mkdirs(dir, &err), SKV_OK);
    char *md = NULL;
    assert_int_equal(skv_eval_write_reports(&rows, dir, &md, &err), SKV_OK);
    assert_non_null(md);
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    char *csv = test_read_file(path, NULL);
    assert_non_null(csv);

    /* three rows, in configuration order: attention 0.5, random 0.5 (seeds merged),
     * attention 1.0 */
    char *p1 = csv_cell(csv, 1, 3), *p2 = csv_cell(csv, 2, 3), *p3 = csv_cell(csv, 3, 3);
    assert_string_equal(p1, "attention");
    assert_string_equal(p2, "random");
    assert_string_equal(p3, "attention");
    free(p1);
    free(p2);
    free(p3);
    const char *end = csv;
    for (int i = 0; i < 4; i++) end = strchr(end, '\n') + 1; /* header + 3 rows */
    assert_string_equal(end, "");

    /* attention 0.5: samples (kl 0.2, top1 2/4 of 4 tokens) and (kl 0.4, top1 9/10) */
    NEAR(csv_get(csv, 1, "n_samples"), 2, 0);
    NEAR(csv_get(csv, 1, "n_seeds"), 1, 0);
    NEAR(csv_get(csv, 1, "n_tokens"), 14, 0);
    NEAR(csv_get(csv, 1, "kl_mean"), 0.3, 1e-9);
    /* t(0.975, df 1) * sd / sqrt(n), sd = sqrt(0.02) */
    NEAR(csv_get(csv, 1, "kl_mean_ci95"), 12.706204736 * sqrt(0.02) / sqrt(2.0), 1e-7);
    assert_true(isnan(csv_get(csv, 1, "kl_mean_seed_sd")));
    NEAR(csv_get(csv, 1, "kl_median"), 0.15, 1e-9);
    NEAR(csv_get(csv, 1, "kl_max"), 1.6, 1e-9); /* max over rows, not a mean */
    /* top-1: the mean of per-sample fractions ... */
    NEAR(csv_get(csv, 1, "top1"), 0.7, 1e-9);
    /* ... same top p: pooled over all 14 tokens, llama-perplexity's +- sqrt(p(1-p)/(N-1)) */
    double p = 11.0 / 14.0;
    NEAR(csv_get(csv, 1, "same_top_p"), p, 1e-9);
    NEAR(csv_get(csv, 1, "same_top_p_unc"), sqrt(p * (1 - p) / 13.0), 1e-9);
    /* pooled perplexities: exp of the token-weighted mean NLL */
    NEAR(csv_get(csv, 1, "ppl_ref"), exp((1.0 * 4 + 2.0 * 10) / 14), 1e-7);
    NEAR(csv_get(csv, 1, "ppl_cmp"), exp((1.5 * 4 + 2.1 * 10) / 14), 1e-7);
    NEAR(csv_get(csv, 1, "ln_ppl_ratio"), (0.5 + 0.1) / 2, 1e-9);
    NEAR(csv_get(csv, 1, "greedy_match"), 4, 1e-9);
    NEAR(csv_get(csv, 1, "kv_bytes_after"), 500, 0);

    /* random 0.5: sample 0 seeds (0.1, 0.3), sample 1 seeds (0.5, 0.9): per-sample means 0.2
     * and 0.7; per-seed means 0.3 and 0.6 */
    NEAR(csv_get(csv, 2, "n_samples"), 2, 0);
    NEAR(csv_get(csv, 2, "n_seeds"), 2, 0);
    NEAR(csv_get(csv, 2, "n_tokens"), 28, 0);
    NEAR(csv_get(csv, 2, "kl_mean"), 0.45, 1e-9);
    NEAR(csv_get(csv, 2, "kl_mean_ci95"), 12.706204736 * sqrt(0.125) / sqrt(2.0), 1e-7);
    NEAR(csv_get(csv, 2, "kl_mean_seed_sd"), sqrt(0.045), 1e-9);
    NEAR(csv_get(csv, 2, "top1"), (0.875 + 1.0) / 2, 1e-9);
    NEAR(csv_get(csv, 2, "same_top_p"), 27.0 / 28.0, 1e-9);
    NEAR(csv_get(csv, 2, "greedy_match"), 5, 1e-9);

    /* the control row */
    NEAR(csv_get(csv, 3, "kl_mean"), 0, 0);
    NEAR(csv_get(csv, 3, "same_top_p"), 1, 0);
    NEAR(csv_get(csv, 3, "same_top_p_unc"), 0, 0);
    NEAR(csv_get(csv, 3, "kl_mean_ci95"), 0, 0);

    /* no timings in the CSV (merge must reproduce it byte for byte); they go to timing.csv */
    assert_null(strstr(csv, "_ms"));
    snprintf(path, sizeof path, "%s/timing.csv", dir);
    char *timing = test_read_file(path, NULL);
    assert_non_null(timing);
    assert_non_null(strstr(timing, "compress_ms"));
    assert_non_null(strstr(md, "| seed | original | random | 0.5 | 2 (×2 seeds) |"));
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    char *gp = test_read_file(path, NULL);
    assert_non_null(gp);
    assert_non_null(strstr(gp, "kl_vs_keep.png"));
    assert_non_null(strstr(gp, "top1_vs_keep.svg"));
    assert_non_null(strstr(gp, "ppl_vs_keep.png"));
    assert_non_null(strstr(gp, "greedy_vs_keep.svg"));
    assert_non_null(strstr(gp, "title 'random'"));
    assert_non_null(strstr(gp, "title 'seed protocol'"));
    free(gp);
    free(timing);
    free(csv);
    free(md);

    /* the same rows in another order and split give the same summary bytes */
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    char *first = test_read_file(path, NULL);
    skv_eval_rows r2 = {0};
    assert_int_equal(skv_eval_read_results(pb, &r2, &err), SKV_OK);
    assert_int_equal(skv_eval_read_results(pa, &r2, &err), SKV_OK);
    assert_int_equal(skv_eval_rows_check(&r2, &err), SKV_OK);
    char dir2[4096];
    snprintf(dir2, sizeof dir2, "%s", test_tmp_path("_report2"));
    assert_int_equal(skv_eval_mkdirs(dir2, &err), SKV_OK);
    assert_int_equal(skv_eval_write_reports(&r2, dir2, NULL, &err), SKV_OK);
    snprintf(path, sizeof path, "%s/summary.csv", dir2);
    char *second = test_read_file(path, NULL);
    assert_string_equal(first, second);
    free(first);
    free(second);
    skv_eval_rows_free(&r2);
    skv_eval_rows_free(&rows);
    unlink(pa);
    unlink(pb);
}

static void expect_check_error(const crafted *a, int na, const crafted *b, int nb,
                               const char *msg) {
    char pa[4096];
    snprintf(pa, sizeof pa, "%s", write_rows(a, na));
    const char *pb = write_rows(b, nb);
    skv_eval_rows rows = {0};
    skv_err err = {0};
    assert_int_equal(skv_eval_read_results(pa, &rows, &err), SKV_OK);
    assert_int_equal(skv_eval_read_results(pb, &rows, &err), SKV_OK);
    assert_int_equal(skv_eval_rows_check(&rows, &err), SKV_ERR_FORMAT);
    if (!strstr(err.msg, msg)) fail_msg("'%s' does not say '%s'", err.msg, msg);
    skv_eval_rows_free(&rows);
    unlink(pa);
    unlink(pb);
}

static void test_merge_errors(void **state) {
    (void)state;
    /* one (sample, config) in two shards */
    expect_check_error(rows_a, 3, rows_a, 1, "appears twice");
    /* config 0 names attention here and sink_recent there */
    crafted other = rows_b[0];
    other.policy = "sink_recent";
    expect_check_error(rows_a, 3, &other, 1, "different settings");
}

static void expect_read_error(const char *content, const char *msg) {
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "w");
    fputs(content, f);
    fclose(f);
    skv_eval_rows rows = {0};
    skv_err err = {0};
    assert_int_not_equal(skv_eval_read_results(path, &rows, &err), SKV_OK);
    if (!strstr(err.msg, msg)) fail_msg("'%s' does not say '%s'", err.msg, msg);
    assert_non_null(strstr(err.msg, path));
    skv_eval_rows_free(&rows);
    unlink(path);
}

static void test_read_errors(void **state) {
    (void)state;
    expect_read_error("\n{\"task\": \"lm\"\n", ":2: bad JSON");
    expect_read_error("{\"task\": \"lm\", \"sample\": 0, \"config\": 0}\n", "field 'policy'");
    expect_read_error("[1, 2]\n", "not an eval result line");
    skv_eval_rows rows = {0};
    skv_err err = {0};
    assert_int_equal(skv_eval_read_results("/nonexistent/results.jsonl", &rows, &err), SKV_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/results.jsonl"));
    /* mixed tasks */
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "w");
    put(f, &rows_a[0]);
    fputs("{\"task\":\"passkey\",\"sample\":5,\"config\":0,\"policy\":\"attention\","
          "\"keep_frac\":0.5,\"protocol\":\"seed\",\"positions\":\"original\",\"seed\":0,"
          "\"greedy\":8,\"greedy_match\":1,\"depth\":0.5,\"correct\":true,"
          "\"ref_correct\":false}\n",
          f);
    fclose(f);
    assert_int_equal(skv_eval_read_results(path, &rows, &err), SKV_OK);
    assert_int_equal(skv_eval_rows_check(&rows, &err), SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "different tasks"));
    skv_eval_rows_free(&rows);
    unlink(path);
}

/* The plot block of plots.gp for figure name (from its "# ---- name" line to the next). */
static char *gp_section(const char *gp, const char *name) {
    char head[128];
    snprintf(head, sizeof head, "# ---- %s\n", name);
    const char *a = strstr(gp, head);
    if (!a) {
        fail_msg("no section %s", name);
        return NULL;
    }
    const char *b = strstr(a + strlen(head), "# ---- ");
    return strndup(a, b ? (size_t)(b - a) : strlen(a));
}

/* Colour of the first data line of policy in a plots.gp section, from the plot_data.dat
 * block whose comment names it. */
static void line_colour(const char *dat, const char *gp, const char *policy, char *out) {
    /* index of the block "# policy seed original" */
    char want[128];
    snprintf(want, sizeof want, "# %s seed original\n", policy);
    const char *at = strstr(dat, want);
    assert_non_null(at);
    int idx = 0;
    for (const char *p = strstr(dat, "\n\n\n"); p && p < at; p = strstr(p + 3, "\n\n\n")) idx++;
    char key[64];
    snprintf(key, sizeof key, "index %d using", idx);
    const char *l = strstr(gp, key);
    assert_non_null(l);
    const char *c = strstr(l, "lc rgb '");
    assert_non_null(c);
    snprintf(out, 8, "%.7s", c + 8);
}

/* Figures: a fixed colour per policy whatever the order, keep-1.0 controls as a reference
 * line (not data points), log axes where promised, dodged x. */
static void test_plots(void **state) {
    (void)state;
    /* two runs with the policies in opposite orders (config indices say the order) */
    static const crafted order1[] = {
        {0, 0, "random", 0.25, 0, 4, 3, 2, 0.2, 0.75, 1.0, 1.2},
        {0, 1, "random", 1.0, 0, 4, 4, 8, 0.0, 1.0, 1.0, 1.0},
        {0, 2, "attention", 0.25, 0, 4, 3, 5, 0.1, 0.75, 1.0, 1.1},
        {0, 3, "attention", 1.0, 0, 4, 4, 8, 0.0, 1.0, 1.0, 1.0},
        {1, 0, "random", 0.25, 0, 4, 2, 2, 0.4, 0.5, 1.0, 1.4},
        {1, 1, "random", 1.0, 0, 4, 4, 8, 0.0, 1.0, 1.0, 1.0},
        {1, 2, "attention", 0.25, 0, 4, 3, 5, 0.3, 0.75, 1.0, 1.3},
        {1, 3, "attention", 1.0, 0, 4, 4, 8, 0.0, 1.0, 1.0, 1.0},
    };
    crafted order2[8];
    for (int i = 0; i < 8; i++) {
        order2[i] = order1[i];
        order2[i].config = (order1[i].config + 2) % 4; /* attention first */
    }
    char colours[2][2][8];
    for (int run = 0; run < 2; run++) {
        char pa[4096];
        snprintf(pa, sizeof pa, "%s", write_rows(run ? order2 : order1, 8));
        skv_eval_rows rows = {0};
        skv_err err = {0};
        assert_int_equal(skv_eval_read_results(pa, &rows, &err), SKV_OK);
        assert_int_equal(skv_eval_rows_check(&rows, &err), SKV_OK);
        /* the control rows keep everything: bytes after = before */
        for (int i = 0; i < rows.n; i++)
            if (rows.rows[i].keep_frac == 1.0) rows.rows[i].bytes_after = rows.rows[i].bytes_before;
        char dir[4096], path[4200];
        snprintf(dir, sizeof dir, "%s", test_tmp_path("_plots"));
        assert_int_equal(skv_eval_mkdirs(dir, &err), SKV_OK);
        skv_eval_label lab = {"attention", "SnapKV"};
        skv_eval_labels labels = {&lab, 1};
        assert_int_equal(skv_eval_write_reports_labeled(&rows, dir, &labels, NULL, &err), SKV_OK);
        snprintf(path, sizeof path, "%s/plots.gp", dir);
        char *gp = test_read_file(path, NULL);
        snprintf(path, sizeof path, "%s/plot_data.dat", dir);
        char *dat = test_read_file(path, NULL);
        assert_non_null(gp);
        assert_non_null(dat);
        /* keep axis: log, tics only at the measured non-control fractions */
        assert_non_null(strstr(gp, "set logscale x\n"));
        assert_non_null(strstr(gp, "set xtics ('0.25' 0.25)\n"));
        /* controls are not data points: two blocks of one point each */
        assert_null(strstr(dat, "\n1 "));
        assert_non_null(strstr(dat, "# random seed original\n0.25 "));
        assert_non_null(strstr(dat, "# attention seed original\n0.25 "));
        /* dodged: the two lines sit at different x around 0.25 */
        double x1 = 0, x2 = 0;
        assert_int_equal(sscanf(strstr(dat, "# random seed original\n") + 23, "%*g %lg", &x1), 1);
        assert_int_equal(sscanf(strstr(dat, "# attention seed original\n") + 26, "%*g %lg", &x2),
                         1);
        assert_true(x1 != x2 && x1 > 0.2 && x1 < 0.3 && x2 > 0.2 && x2 < 0.3);
        /* KL on a log axis; top-1 zoomed to the data with the full cache's reference line */
        char *kl = gp_section(gp, "kl_vs_keep"), *top1 = gp_section(gp, "top1_vs_keep");
        char *ppl = gp_section(gp, "ppl_vs_keep"), *gr = gp_section(gp, "greedy_vs_keep");
        assert_non_null(strstr(kl, "\nset logscale y\n"));
        assert_null(strstr(top1, "\nset logscale y\n"));
        assert_non_null(strstr(top1, "title 'full cache (keep 1.0)'"));
        assert_non_null(strstr(ppl, "title 'full cache (keep 1.0)'"));
        assert_non_null(strstr(gr, "  8 with lines"));    /* reference at G = 8 */
        assert_null(strstr(top1, "set yrange [0:1.05]")); /* the old fixed range */
        /* the label replaces the policy name in the legend, the name stays in the data */
        assert_non_null(strstr(top1, "title 'SnapKV'"));
        assert_null(strstr(top1, "title 'attention'"));
        line_colour(dat, top1, "attention", colours[run][0]);
        line_colour(dat, top1, "random", colours[run][1]);
        free(kl);
        free(top1);
        free(ppl);
        free(gr);
        free(gp);
        free(dat);
        skv_eval_rows_free(&rows);
        unlink(pa);
    }
    /* fixed colours, whatever the order; and the documented ones */
    assert_string_equal(colours[0][0], colours[1][0]);
    assert_string_equal(colours[0][1], colours[1][1]);
    assert_string_equal(colours[0][0], "#D55E00");
    assert_string_equal(colours[0][1], "#7F7F7F");
    assert_string_equal(skv_eval_policy_colour("attention"), "#D55E00");
    assert_string_equal(skv_eval_policy_colour("knorm"), "#CC79A7");
    /* an unknown name gets a stable fallback colour */
    assert_string_equal(skv_eval_policy_colour("future_policy"),
                        skv_eval_policy_colour("future_policy"));
    assert_int_equal(strlen(skv_eval_policy_colour("future_policy")), 7);
}

/* compress --plot: the heat map's inline matrix holds a 1 exactly at each kept position, one
 * row per (layer, kv head), layer-major; the output path and title reach gnuplot as strings. */
static void test_kept_map(void **state) {
    (void)state;
    const int32_t h00[] = {0, 3}, h01[] = {1}, h10[] = {-1}, h11[] = {2, 3, 4};
    const int32_t *pos[] = {h00, h01, h10, h11};
    const int lens[] = {2, 1, 0, 3};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    skv_eval_write_kept_map(f, "out'x.png", "t\n'!x", 2, 2, 5, pos, lens, 3);
    fclose(f);
    const char *m = strstr(buf, "$kept << EOD\n");
    assert_non_null(m);
    assert_non_null(strstr(m, "EOD\n"));
    assert_non_null(strstr(m, "\n1 0 0 1 0\n0 1 0 0 0\n0 0 0 0 0\n0 0 1 1 1\nEOD\n"));
    assert_non_null(strstr(buf, "set output 'out''x.png'\n"));
    assert_non_null(strstr(buf, "set title 't?''!x'\n"));
    assert_non_null(strstr(buf, "2.5, graph 0 to 2.5, graph 1")); /* the window starts at 3 */
    free(buf);
    /* the CLI draws it (when gnuplot is there) */
    int st = 0;
    char *has = test_run("command -v gnuplot", &st);
    free(has);
    if (st != 0) return;
    char png[4096], cmd[8400];
    snprintf(png, sizeof png, "%s", test_tmp_path("_kept.png"));
    snprintf(cmd, sizeof cmd,
             "'%s' compress -p 'Once upon a time there was a little girl named Lily.' --policy "
             "random --keep 0.5 --window 4 --protocol engine --plot '%s' 2>&1",
             test_cli(), png);
    char *log = test_run(cmd, &st);
    if (st != 0) fail_msg("compress --plot exited %d:\n%s", st, log ? log : "");
    free(log);
    size_t n = 0;
    unsigned char *img = test_read_file(png, &n);
    assert_non_null(img);
    assert_true(n > 8 && !memcmp(img, "\x89PNG\r\n\x1a\n", 8));
    free(img);
    unlink(png);
}

static bool file_is_png(const char *dir, const char *name) {
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t n = 0;
    unsigned char *img = test_read_file(p, &n);
    bool png = img && n > 8 && !memcmp(img, "\x89PNG\r\n\x1a\n", 8);
    free(img);
    return png;
}

static bool file_exists(const char *dir, const char *name) {
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* --greedy 0 measures no greedy tokens: the other figures are drawn and greedy_vs_keep is left
 * out (its empty 0..0 axis used to stop gnuplot before any figure); keep 1.0 alone draws KL 0 on
 * a linear axis. A gnuplot that fails keeps
 * the figures it finished and is a warning that labels gnuplot's words; the run exits 0. */
static void test_plots_cli(void **state) {
    (void)state;
    const char *model = test_model_path("stories260K/stories260K.gguf");
    char dir[4096], bin[4096], cmd[16384];
    snprintf(dir, sizeof dir, "%s", test_tmp_path("_g0"));
    int st = 0;
    free(test_run("command -v gnuplot", &st));
    bool gnuplot = st == 0;
    snprintf(cmd, sizeof cmd,
             "'%s' eval -m '%s' -t 1 --samples 1 --policies knorm --keep 0.5 --protocols seed "
             "--greedy 0 --out '%s' 2>&1 >/dev/null",
             test_cli(), model, dir);
    char *log = test_run(cmd, &st);
    if (st != 0) fail_msg("eval --greedy 0 exited %d:\n%s", st, log);
    if (gnuplot) {
        if (strstr(log, "gnuplot")) fail_msg("gnuplot complained:\n%s", log);
        assert_true(file_is_png(dir, "kl_vs_keep.png"));
        assert_true(file_is_png(dir, "top1_vs_keep.png"));
        assert_true(file_is_png(dir, "ppl_vs_keep.png"));
        assert_true(file_exists(dir, "ppl_vs_keep.svg"));
        assert_false(file_exists(dir, "greedy_vs_keep.png"));
        assert_non_null(strstr(log, "plots in"));
        assert_null(strstr(log, "greedy_vs_keep"));
    }
    free(log);
    /* keep 1.0 only: every KL is 0, which a log axis cannot show (gnuplot refused to draw) */
    log = test_cli_expect(0,
                          "eval -m '%s' -t 1 --samples 1 --policies knorm --keep 1.0 --protocols "
                          "seed --greedy 2 --overwrite --out '%s' 2>&1 >/dev/null",
                          model, dir);
    if (gnuplot) {
        if (strstr(log, "gnuplot")) fail_msg("gnuplot complained:\n%s", log);
        assert_true(file_is_png(dir, "kl_vs_keep.png"));
    }
    free(log);

    /* a gnuplot that finishes kl_vs_keep, starts top1_vs_keep and fails */
    snprintf(bin, sizeof bin, "%s", test_tmp_path("_bin"));
    assert_int_equal(mkdir(bin, 0777), 0);
    char fake[4200];
    snprintf(fake, sizeof fake, "%s/gnuplot", bin);
    FILE *f = fopen(fake, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\n"
          "echo x > kl_vs_keep.png.tmp; echo x > kl_vs_keep.svg.tmp\n"
          "echo 'sparsekv-drawn: kl_vs_keep' >&2\n"
          "echo x > top1_vs_keep.png.tmp\n"
          "echo '\"plots.gp\" line 9: no such thing' >&2\n"
          "exit 1\n",
          f);
    fclose(f);
    assert_int_equal(chmod(fake, 0755), 0);
    snprintf(cmd, sizeof cmd,
             "PATH='%s':\"$PATH\" '%s' eval -m '%s' -t 1 --samples 1 --policies knorm --keep "
             "0.5 --protocols seed --greedy 2 --overwrite --out '%s' 2>&1 >/dev/null",
             bin, test_cli(), model, dir);
    log = test_run(cmd, &st);
    if (st != 0) fail_msg("eval with a failing gnuplot exited %d:\n%s", st, log);
    assert_non_null(strstr(log, "warning: gnuplot failed on"));
    assert_non_null(strstr(log, "only kl_vs_keep drawn"));
    assert_non_null(strstr(log, "sparsekv eval: gnuplot: \"plots.gp\" line 9: no such thing"));
    assert_null(strstr(log, "sparsekv-drawn"));
    free(log);
    assert_true(file_exists(dir, "kl_vs_keep.png"));
    assert_true(file_exists(dir, "kl_vs_keep.svg"));
    assert_false(file_exists(dir, "top1_vs_keep.png"));
    assert_false(file_exists(dir, "top1_vs_keep.png.tmp"));
    assert_false(file_exists(dir, "kl_vs_keep.png.tmp"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, bin);
    free(test_run(cmd, &st));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary),     cmocka_unit_test(test_merge_errors),
        cmocka_unit_test(test_read_errors), cmocka_unit_test(test_plots),
        cmocka_unit_test(test_kept_map),    cmocka_unit_test(test_plots_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
