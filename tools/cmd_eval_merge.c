/* cmd_eval_merge.c — `sparsekv eval-merge DIR... --out DIR`: joins the results.jsonl of eval
 * shards into the results, summary and plots one run over all samples would have written. */
#include "cli.h"
#include "eval/eval.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *CMD = "eval-merge";

/* defined in cmd_eval.c */
int cmd_eval_finish(const char *cmd, const skv_eval_rows *rows, const char *out, bool quiet,
                    const skv_eval_labels *labels);

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv eval-merge DIR|FILE.jsonl... --out DIR [--label K=TEXT] [-q]\n\n"
               "Reads DIR/results.jsonl of every shard (or the .jsonl files given), checks that\n"
               "no (sample, configuration) appears twice and that the shards ran the same\n"
               "configurations, and writes into --out the merged results.jsonl (sorted as a\n"
               "single run writes it), summary.csv, summary.md, timing.csv, plot data and\n"
               "plots, exactly as `sparsekv eval` over all samples would; prints summary.md.\n\n"
               "  --out DIR     output directory (required; may be one of the inputs)\n"
               "  --label KEY=TEXT  legend text in the plots for a policy, protocol or\n"
               "                position mode, e.g. --label attention=SnapKV (repeatable)\n"
               "  -q, --quiet   say less on stderr\n"
               "  -h, --help    this help\n");
}

int cmd_eval_merge(int argc, char **argv) {
    const char *out = NULL;
    bool quiet = false;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    int n_inputs = 0;
    skv_eval_label *label_items = calloc((size_t)argc, sizeof *label_items);
    int n_labels = 0;
    skv_eval_labels labels = {label_items, 0};
    if (!inputs || !label_items) {
        cli_error(CMD, "out of memory");
        free(inputs);
        free(label_items);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(inputs);
            free(label_items);
            return 0;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--out")) {
            if (i + 1 >= argc) {
                cli_error(CMD, "--out needs a directory");
                free(inputs);
                free(label_items);
                return 2;
            }
            out = argv[++i];
        } else if (!strcmp(a, "--label")) {
            char why[512];
            if (i + 1 >= argc || n_labels == argc ||
                !skv_eval_label_parse(argv[i + 1], &label_items[n_labels], why, sizeof why)) {
                cli_error(CMD, "bad --label '%s': %s", i + 1 < argc ? argv[i + 1] : "",
                          i + 1 >= argc ? "needs KEY=TEXT" : why);
                free(inputs);
                free(label_items);
                return 2;
            }
            i++;
            labels.n = ++n_labels;
        } else if (a[0] == '-' && a[1]) {
            cli_error(CMD, "unknown option: %s (see --help)", a);
            free(inputs);
            free(label_items);
            return 2;
        } else {
            inputs[n_inputs++] = a;
        }
    }
    if (!out || n_inputs < 1) {
        cli_error(CMD, "need at least one shard directory and --out DIR (see --help)");
        free(inputs);
        free(label_items);
        return 2;
    }
    /* input paths: DIR/results.jsonl, or a file as given */
    char(*paths)[4096] = calloc((size_t)n_inputs, sizeof *paths);
    skv_eval_rows rows = {0};
    skv_err err = {0};
    int rc = 1;
    if (!paths) {
        cli_error(CMD, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_inputs; i++) {
        struct stat sb;
        if (stat(inputs[i], &sb) != 0) {
            cli_error(CMD, "cannot read %s: %s", inputs[i], strerror(errno));
            rc = 2;
            goto done;
        }
        if (S_ISDIR(sb.st_mode))
            snprintf(paths[i], sizeof paths[i], "%s/results.jsonl", inputs[i]);
        else
            snprintf(paths[i], sizeof paths[i], "%s", inputs[i]);
        if (skv_eval_read_results(paths[i], &rows, &err)) {
            cli_error(CMD, "%s", err.msg);
            rc = err.status == SKV_ERR_NOMEM ? 1 : 2;
            goto done;
        }
    }
    if (skv_eval_rows_check(&rows, &err)) {
        cli_error(CMD, "%s", err.msg);
        rc = 2;
        goto done;
    }
    if (skv_eval_mkdirs(out, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/results.jsonl", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_error(CMD, "cannot write %s: %s", path, strerror(errno));
        goto done;
    }
    for (int i = 0; i < rows.n; i++) {
        fputs(rows.rows[i].line, f);
        fputc('\n', f);
    }
    bool werr = ferror(f) != 0;
    if (fclose(f) != 0) werr = true;
    if (werr) {
        cli_error(CMD, "error writing %s", path);
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "sparsekv eval-merge: %d result lines from %d input%s into %s\n", rows.n,
                n_inputs, n_inputs == 1 ? "" : "s", out);
    rc = cmd_eval_finish(CMD, &rows, out, quiet, &labels);
done:
    skv_eval_rows_free(&rows);
    free(paths);
    free(inputs);
    free(label_items);
    return rc;
}
