/* fuzz_results.c — libFuzzer target for eval-merge's reader of results.jsonl: reads the input
 * as a results file from memory and, when it reads and checks, writes every report from it
 * (summary.csv / .md, timing.csv, plot data, plots.gp) into a scratch directory. The oracle
 * beyond ASan/UBSan: plots.gp must never hold a gnuplot shell escape or system() call, whatever
 * the input (issue 12: strings from results files reached gnuplot as code). Build: make fuzz;
 * run: tests/fuzz_results_run.sh build/fuzz_results. */
#include "eval/eval.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[256];

static void cleanup(void) {
    const char *names[] = {"summary.csv", "summary.md", "timing.csv", "plot_data.dat", "plots.gp"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", scratch, names[i]);
        unlink(path);
    }
    rmdir(scratch);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/skv_fuzz_results.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) abort();
    atexit(cleanup);
    return 0;
}

/* No line of the script may start a shell command ('!' or system). */
static void check_script(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/plots.gp", scratch);
    FILE *f = fopen(path, "r");
    if (!f) abort();
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '!' || strstr(line, "system(") || strstr(line, "system ")) abort();
    }
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f) return 0;
    skv_eval_rows rows = {0};
    skv_err err = {0};
    skv_status st = skv_eval_read_results_stream(f, "fuzz.jsonl", &rows, &err);
    fclose(f);
    if (st == SKV_OK) {
        for (int i = 0; i < rows.n; i++) {
            /* what the reader promises: registry names only */
            if (!skv_policy_canonical(rows.rows[i].policy) ||
                strcmp(skv_policy_canonical(rows.rows[i].policy), rows.rows[i].policy))
                abort();
            if (strcmp(rows.rows[i].protocol, "seed") && strcmp(rows.rows[i].protocol, "engine"))
                abort();
            if (strcmp(rows.rows[i].positions, "original") &&
                strcmp(rows.rows[i].positions, "rerotate"))
                abort();
        }
        if (rows.n > 0 && rows.n <= 512 && skv_eval_rows_check(&rows, &err) == SKV_OK) {
            char *md = NULL;
            if (skv_eval_write_reports(&rows, scratch, &md, &err) == SKV_OK) check_script();
            free(md);
        }
    } else if (!strstr(err.msg, "fuzz.jsonl")) {
        abort(); /* every reader error names the file */
    }
    skv_eval_rows_free(&rows);
    return 0;
}
