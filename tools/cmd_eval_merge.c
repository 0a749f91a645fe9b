/* cmd_eval_merge.c — `sparsekv eval-merge DIR... --out DIR`: joins the results.jsonl of eval
 * shards into the results, summary and plots one run over all samples would have written. */
#include "cli.h"
#include "cli_args.h"
#include "eval/eval.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *CMD = "eval-merge";

/* defined in cmd_eval.c */
int cmd_eval_finish(const char *cmd, const skv_eval_rows *rows, const char *out, bool quiet,
                    const skv_eval_labels *labels);
bool cmd_eval_remove_outputs(const char *dir);

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv eval-merge DIR|FILE.jsonl... --out DIR [--overwrite]\n"
               "                          [--allow-partial] [--label K=TEXT] [-q]\n\n"
               "Reads DIR/results.jsonl and DIR/run.json of every shard, checks that the shards\n"
               "belong together (same model file by size and header hash, data file,\n"
               "configuration, cut sizes, KV type), that every shard i/n of the set is there\n"
               "exactly once and finished (run.json \"complete\": true), that no sample or\n"
               "(sample, configuration) appears twice, and writes into --out the merged\n"
               "results.jsonl (sorted as a single run writes it), summary.csv, summary.md,\n"
               "timing.csv, run.json, plot data and plots, exactly as `sparsekv eval` over all\n"
               "samples would; prints summary.md. A shard that does not fit: exit 2, naming the\n"
               "shard and the field.\n\n"
               "  --out DIR     output directory (required; may be one of the inputs); one\n"
               "                that holds the results of another run or merge is refused\n"
               "  --overwrite   replace those (what eval and eval-merge write there)\n"
               "  --allow-partial  merge anyway when shards are missing, unfinished or have no\n"
               "                run.json: what is missing is said on stderr and recorded in\n"
               "                the merged run.json (\"complete\": false, \"missing\")\n"
               "  --label KEY=TEXT  legend text in the plots for a policy, protocol or\n"
               "                position mode, e.g. --label attention=SnapKV (repeatable)\n"
               "  -q, --quiet   say less on stderr\n"
               "  -h, --help    this help\n");
}

/* What a partial merge lacks, one sentence each. */
typedef struct missing_list {
    char **items;
    int n;
} missing_list;

static bool missing_add(missing_list *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* true when out of memory */
static bool missing_add(missing_list *m, const char *fmt, ...) {
    char buf[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **n = realloc(m->items, (size_t)(m->n + 1) * sizeof *n);
    if (!n) return true;
    m->items = n;
    if (!(n[m->n] = strdup(buf))) return true;
    m->n++;
    return false;
}

int cmd_eval_merge(int argc, char **argv) {
    const char *out = NULL;
    bool quiet = false, allow_partial = false, overwrite = false;
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
    enum { O_ALLOW_PARTIAL = CLI_LONG, O_OUT, O_LABEL, O_OVERWRITE };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"quiet", 'q', false, NULL, false},
        {"allow-partial", O_ALLOW_PARTIAL, false, NULL, false},
        {"out", O_OUT, true, NULL, false},
        {"label", O_LABEL, true, NULL, true},
        {"overwrite", O_OVERWRITE, false, NULL, false},
        {0},
    };
    cli_args args;
    int status = -1; /* set to leave the loop with that exit status */
    if (!cli_args_init(&args, CMD, argc, argv, opts, NULL, NULL)) status = 2;
    const char *v;
    for (int key; status < 0 && (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        char why[512];
        switch (key) {
        case CLI_FAIL:
            status = 2;
            break;
        case 'h':
            usage(stdout);
            status = 0;
            break;
        case 'q':
            quiet = true;
            break;
        case O_ALLOW_PARTIAL:
            allow_partial = true;
            break;
        case O_OUT:
            out = v;
            break;
        case O_OVERWRITE:
            overwrite = true;
            break;
        case O_LABEL:
            if (n_labels == argc ||
                !skv_eval_label_parse(v, &label_items[n_labels], why, sizeof why)) {
                cli_error(CMD, "bad --label '%s': %s", v, why);
                status = 2;
                break;
            }
            labels.n = ++n_labels;
            break;
        case CLI_OPERAND:
            inputs[n_inputs++] = v;
            break;
        }
    }
    if (status >= 0) {
        free(inputs);
        free(label_items);
        return status;
    }
    if (!out || n_inputs < 1) {
        cli_error(CMD, "need at least one shard directory and --out DIR (see --help)");
        free(inputs);
        free(label_items);
        return 2;
    }
    /* input paths: DIR/results.jsonl, or a file as given; run.json beside results.jsonl */
    char(*paths)[4096] = calloc((size_t)n_inputs, sizeof *paths);
    skv_eval_runinfo *info = calloc((size_t)n_inputs, sizeof *info);
    bool *has_info = calloc((size_t)n_inputs, sizeof *has_info);
    int *row_from = calloc((size_t)n_inputs + 1, sizeof *row_from);
    skv_eval_rows rows = {0};
    skv_eval_runinfo merged = {0};
    skv_err err = {0};
    int rc = 1;
    missing_list miss = {0};
    if (!paths || !info || !has_info || !row_from) {
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
        char rj[4200] = "";
        if (S_ISDIR(sb.st_mode)) {
            snprintf(paths[i], sizeof paths[i], "%s/results.jsonl", inputs[i]);
            snprintf(rj, sizeof rj, "%s/run.json", inputs[i]);
        } else {
            snprintf(paths[i], sizeof paths[i], "%s", inputs[i]);
            /* a results.jsonl file named as such: the run.json of its directory */
            const char *base = strrchr(inputs[i], '/');
            base = base ? base + 1 : inputs[i];
            if (!strcmp(base, "results.jsonl"))
                snprintf(rj, sizeof rj, "%.*s%srun.json", (int)(base - inputs[i]), inputs[i],
                         base == inputs[i] ? "./" : "");
        }
        row_from[i] = rows.n;
        if (skv_eval_read_results(paths[i], &rows, &err)) {
            cli_error(CMD, "%s", err.msg);
            rc = err.status == SKV_ERR_NOMEM ? 1 : 2;
            goto done;
        }
        if (rj[0] && access(rj, F_OK) == 0) {
            if (skv_eval_runinfo_read(rj, &info[i], &err)) {
                cli_error(CMD, "shard %s: %s", inputs[i], err.msg);
                rc = err.status == SKV_ERR_NOMEM ? 1 : 2;
                goto done;
            }
            has_info[i] = true;
        }
    }
    row_from[n_inputs] = rows.n;

    /* the shards must belong together, be finished, and make a whole set */
    int first = -1;
    for (int i = 0; i < n_inputs; i++) {
        if (!has_info[i]) {
            if (!allow_partial) {
                cli_error(CMD,
                          "shard %s: field 'run.json': missing, so nothing shows that it belongs "
                          "with the others or that it finished (--allow-partial to merge anyway)",
                          inputs[i]);
                rc = 2;
                goto done;
            }
            if (missing_add(&miss, "%s: no run.json (unchecked)", inputs[i])) goto oom;
            continue;
        }
        if (first < 0) first = i;
        const skv_eval_runinfo *a = &info[first], *b = &info[i];
        const char *field = skv_eval_runinfo_diff(a, b);
        if (!field && a->shard_n != b->shard_n) field = "shard";
        if (field) {
            const char *va = skv_eval_runinfo_get(a, field), *vb = skv_eval_runinfo_get(b, field);
            char sa[32], sb2[32], shown_a[1024], shown_b[1024];
            if (!strcmp(field, "shard")) {
                snprintf(sa, sizeof sa, "%d/%d", a->shard_k, a->shard_n);
                snprintf(sb2, sizeof sb2, "%d/%d", b->shard_k, b->shard_n);
                va = sa, vb = sb2;
            }
            if (!strcmp(field, "simd"))
                cli_error(CMD,
                          "shard %s ran with the %s kernels, shard %s with %s: their results "
                          "differ in the last bits (run every shard at one level: SKV_SIMD=avx2 "
                          "or scalar, or SKV_NO_AMX=1, lowers it)",
                          inputs[i], vb ? vb : "(unrecorded)", inputs[first],
                          va ? va : "(unrecorded)");
            else
                cli_error(CMD,
                          "shard %s: field '%s' differs from shard %s ('%s' there, '%s' here): "
                          "the shards were not run with the same model, data and arguments",
                          inputs[i], field, inputs[first],
                          va ? cli_config_shown(va, shown_a, sizeof shown_a) : "(none)",
                          vb ? cli_config_shown(vb, shown_b, sizeof shown_b) : "(none)");
            rc = 2;
            goto done;
        }
        if (!b->complete) {
            if (!allow_partial) {
                cli_error(CMD,
                          "shard %s: field 'complete': false in its run.json: the run was "
                          "interrupted (finish it with `sparsekv eval --resume %s`, or "
                          "--allow-partial to merge what it wrote)",
                          inputs[i], inputs[i]);
                rc = 2;
                goto done;
            }
            if (missing_add(&miss, "%s: shard %d/%d unfinished (%d rows of %lld)", inputs[i],
                            b->shard_k, b->shard_n, row_from[i + 1] - row_from[i],
                            (long long)b->n_samples * b->n_configs))
                goto oom;
        } else if ((long long)(row_from[i + 1] - row_from[i]) !=
                   (long long)b->n_samples * b->n_configs) {
            cli_error(CMD,
                      "shard %s: field 'rows': results.jsonl holds %d rows, its run.json says "
                      "%d samples x %d configurations",
                      inputs[i], row_from[i + 1] - row_from[i], b->n_samples, b->n_configs);
            rc = 2;
            goto done;
        }
        /* every row belongs to the shard that holds it (a sample is in one shard only) */
        for (int k = row_from[i]; k < row_from[i + 1]; k++)
            if (!skv_eval_in_shard(rows.rows[k].sample, b->shard_k, b->shard_n)) {
                cli_error(CMD,
                          "shard %s: field 'sample': sample %d is not in shard %d/%d (index %% "
                          "%d != %d): the file was edited or mixed with another shard's",
                          inputs[i], rows.rows[k].sample, b->shard_k, b->shard_n, b->shard_n,
                          b->shard_k);
                rc = 2;
                goto done;
            }
        for (int j = first; j < i; j++)
            if (has_info[j] && info[j].shard_k == b->shard_k) {
                cli_error(CMD, "shard %s: field 'shard': shard %d/%d appears twice (in %s and %s)",
                          inputs[i], b->shard_k, b->shard_n, inputs[j], inputs[i]);
                rc = 2;
                goto done;
            }
    }
    if (first >= 0) {
        int n = info[first].shard_n;
        for (int k = 0; k < n; k++) {
            bool found = false;
            for (int i = 0; i < n_inputs && !found; i++)
                found = has_info[i] && info[i].shard_k == k;
            if (found) continue;
            if (!allow_partial) {
                cli_error(CMD,
                          "shard %d/%d: field 'shard': missing from the set (every shard i/%d, "
                          "0 <= i < %d, must be given once; --allow-partial to merge anyway)",
                          k, n, n, n);
                rc = 2;
                goto done;
            }
            if (missing_add(&miss, "shard %d/%d missing", k, n)) goto oom;
        }
    }
    if (skv_eval_rows_check(&rows, &err)) {
        cli_error(CMD, "%s", err.msg);
        rc = 2;
        goto done;
    }
    /* an --out that holds another run's (or merge's) results is not replaced by accident; one
     * whose results.jsonl is one of the inputs is, as documented: the merge is a superset of
     * that shard */
    struct stat od;
    if (stat(out, &od) == 0 && !S_ISDIR(od.st_mode)) { /* a usage error, as eval's */
        cli_error(CMD, "--out %s exists and is not a directory", out);
        rc = 2;
        goto done;
    }
    bool out_is_input = false;
    char held[4200];
    snprintf(held, sizeof held, "%s/results.jsonl", out);
    struct stat ob, ib;
    bool holds = stat(held, &ob) == 0;
    for (int i = 0; holds && i < n_inputs && !out_is_input; i++)
        out_is_input = stat(paths[i], &ib) == 0 && ib.st_dev == ob.st_dev && ib.st_ino == ob.st_ino;
    if (!holds) {
        snprintf(held, sizeof held, "%s/run.json", out);
        holds = access(held, F_OK) == 0;
    }
    if (holds && !out_is_input && !overwrite) {
        cli_error(CMD,
                  "%s holds the results of another run or merge (%s): pass --overwrite to "
                  "replace them, or choose another --out",
                  out, held);
        rc = 2;
        goto done;
    }
    if (miss.n) {
        fprintf(stderr, "sparsekv eval-merge: WARNING: PARTIAL MERGE (--allow-partial): the "
                        "results below do not cover the whole run:\n");
        for (int i = 0; i < miss.n; i++) fprintf(stderr, "  - %s\n", miss.items[i]);
    }
    if (skv_eval_mkdirs(out, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    if (overwrite && !out_is_input && !cmd_eval_remove_outputs(out)) {
        cli_error(CMD, "cannot remove the previous results in %s: %s", out, strerror(errno));
        goto done;
    }
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/results.jsonl", out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = skv_eval_create(tmp);
    if (!f) {
        cli_error(CMD, "cannot write %s: %s", path, strerror(errno));
        goto done;
    }
    for (int i = 0; i < rows.n; i++) {
        fputs(rows.rows[i].line, f);
        fputc('\n', f);
    }
    int e = 0;
    if (fflush(f) != 0 || ferror(f)) e = errno ? errno : EIO;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) {
        unlink(tmp);
        cli_error(CMD, "error writing %s: %s", path, strerror(e));
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "sparsekv eval-merge: %d result lines from %d input%s into %s\n", rows.n,
                n_inputs, n_inputs == 1 ? "" : "s", out);
    rc = cmd_eval_finish(CMD, &rows, out, quiet, &labels);
    if (rc == 0) {
        /* the merged run.json: the shards' settings, what was merged, what is missing */
        if (first >= 0) {
            for (int k = 0; k < info[first].n_config; k++)
                if (skv_eval_runinfo_set(&merged, info[first].config[k].key, &err, "%s",
                                         info[first].config[k].value))
                    goto fail_err;
            merged.n_samples_total = info[first].n_samples_total;
            merged.n_configs = info[first].n_configs;
            if (info[first].model && !(merged.model = strdup(info[first].model))) goto oom;
            if (info[first].data && !(merged.data = strdup(info[first].data))) goto oom;
        }
        for (int i = 0; i < n_inputs; i++) merged.n_samples += has_info[i] ? info[i].n_samples : 0;
        merged.shard_k = 0;
        merged.shard_n = 1;
        merged.rows = rows.n;
        merged.complete = miss.n == 0;
        merged.partial = miss.n > 0;
        merged.missing = miss.items;
        merged.n_missing = miss.n;
        miss.items = NULL;
        miss.n = 0;
        /* the directory this command's relative paths (merged_from) are relative to */
        char cwd[4096];
        if (getcwd(cwd, sizeof cwd) && !(merged.cwd = strdup(cwd))) goto oom;
        if (!(merged.command = calloc((size_t)argc + 1, sizeof *merged.command)) ||
            !(merged.inputs = calloc((size_t)n_inputs + 1, sizeof *merged.inputs)))
            goto oom;
        for (int i = 0; i < argc; i++) {
            if (!(merged.command[i] = strdup(argv[i]))) goto oom;
            merged.n_command = i + 1;
        }
        for (int i = 0; i < n_inputs; i++) {
            if (!(merged.inputs[i] = strdup(inputs[i]))) goto oom;
            merged.n_inputs = i + 1;
        }
        if (skv_eval_runinfo_write(out, &merged, &err)) goto fail_err;
        if (merged.partial)
            fprintf(stderr,
                    "sparsekv eval-merge: WARNING: partial merge: %d item%s missing (listed "
                    "above and in %s/run.json)\n",
                    merged.n_missing, merged.n_missing == 1 ? "" : "s", out);
    }
    goto done;
oom:
    skv_err_set(&err, SKV_ERR_NOMEM, "out of memory");
fail_err:
    cli_error(CMD, "%s", err.msg);
    rc = 1;
done:
    for (int i = 0; i < miss.n; i++) free(miss.items[i]);
    free(miss.items);
    skv_eval_runinfo_free(&merged);
    for (int i = 0; info && i < n_inputs; i++) skv_eval_runinfo_free(&info[i]);
    free(info);
    free(has_info);
    free(row_from);
    skv_eval_rows_free(&rows);
    free(paths);
    free(inputs);
    free(label_items);
    return rc;
}
