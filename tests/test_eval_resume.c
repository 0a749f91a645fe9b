/* test_eval_resume.c — eval never destroys a previous run, and an interrupted run can be
 * finished (issue 12): --out refuses a non-empty directory unless --overwrite; rows are whole
 * lines, run.json says "complete": false until the end; an eval killed (SIGKILL) after N rows
 * and then resumed gives summary.csv byte-identical to an uninterrupted run's. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A small configuration of the default model: 4 generated samples x 16 configurations. */
#define ARGS                                                                                       \
    "-t 1 -q --samples 4 --policies sink_recent,random,h2o --keep 0.5 --seeds 2 --greedy 4 "       \
    "--protocols seed,engine"

static const char *model(void) {
    return test_model_path("stories260K/stories260K.gguf");
}

static char *file_in(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return test_read_file(p, NULL);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

static void rm_rf(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    int st = 0;
    free(test_run(cmd, &st));
}

/* Starts `sparsekv eval ARGS --out dir` and SIGKILLs it once results.jsonl holds >= n lines.
 * Returns the number of lines when killed (0 when the run ended first). */
static int eval_killed_after(const char *dir, int n) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char out[4200];
        snprintf(out, sizeof out, "%s", dir);
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl(test_cli(), test_cli(), "eval", "-m", model(), "-t", "1", "-q", "--samples", "4",
              "--policies", "sink_recent,random,h2o", "--keep", "0.5", "--seeds", "2", "--greedy",
              "4", "--protocols", "seed,engine", "--out", out, (char *)NULL);
        _exit(127);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    int lines = 0;
    for (;;) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) return 0; /* finished before n rows */
        char *s = test_read_file(path, NULL);
        lines = count_lines(s);
        free(s);
        if (lines >= n) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    char *s = test_read_file(path, NULL);
    lines = count_lines(s);
    free(s);
    return lines;
}

static void test_kill_and_resume(void **state) {
    (void)state;
    char full[4096], cut[4096], args[16384], p[4200];
    snprintf(full, sizeof full, "%s", test_tmp_path("_full"));
    snprintf(cut, sizeof cut, "%s", test_tmp_path("_cut"));
    char *err = NULL;
    snprintf(args, sizeof args, "eval -m '%s' " ARGS " --out '%s'", model(), full);
    int st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("eval failed (%d): %s", st, err);
    free(err);
    char *want = file_in(full, "summary.csv");
    assert_non_null(want);
    char *rj = file_in(full, "run.json");
    assert_non_null(strstr(rj, "\"complete\":true"));
    assert_non_null(strstr(rj, "\"model_hash\":\""));
    free(rj);

    /* killed after 6 of 64 rows: only whole lines, run.json says incomplete, no summary */
    int lines = eval_killed_after(cut, 6);
    if (lines == 0) fail_msg("the eval finished before it could be killed");
    assert_true(lines < 64);
    char *rows = file_in(cut, "results.jsonl");
    assert_non_null(rows);
    size_t len = strlen(rows);
    assert_true(len > 0 && rows[len - 1] == '\n');
    free(rows);
    rj = file_in(cut, "run.json");
    assert_non_null(rj);
    assert_non_null(strstr(rj, "\"complete\":false"));
    free(rj);
    char *none = file_in(cut, "summary.csv");
    assert_null(none);

    /* the same directory without --resume: refused, naming the directory and the flag */
    snprintf(args, sizeof args, "eval -m '%s' " ARGS " --out '%s'", model(), cut);
    assert_int_equal(test_cli_stderr(args, &err), 2);
    assert_non_null(strstr(err, cut));
    assert_non_null(strstr(err, "--overwrite"));
    free(err);

    /* resuming with other arguments: refused, naming the field */
    snprintf(args, sizeof args, "eval -m '%s' " ARGS " --continuation 32 --resume '%s'", model(),
             cut);
    assert_int_equal(test_cli_stderr(args, &err), 2);
    assert_non_null(strstr(err, "field 'continuation'"));
    free(err);

    /* run.json cannot be written (its temporary name is taken by a directory): exit 1 with
     * the system's message */
    char blocker[4300];
    snprintf(blocker, sizeof blocker, "%s/run.json.tmp", cut);
    assert_int_equal(mkdir(blocker, 0777), 0);
    snprintf(args, sizeof args, "eval --resume '%s'", cut);
    assert_int_equal(test_cli_stderr(args, &err), 1);
    assert_non_null(strstr(err, "run.json"));
    assert_non_null(strstr(err, "Is a directory"));
    free(err);
    assert_int_equal(rmdir(blocker), 0);

    /* a kill in the middle of a write (a power cut): a partial last line, dropped on resume */
    snprintf(p, sizeof p, "%s/results.jsonl", cut);
    FILE *f = fopen(p, "a");
    assert_non_null(f);
    fputs("{\"task\":\"lm\",\"sample\":", f);
    fclose(f);

    /* --resume DIR alone: the recorded arguments; the summary is the uninterrupted run's */
    snprintf(args, sizeof args, "eval --resume '%s'", cut);
    st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("eval --resume failed (%d): %s", st, err);
    assert_non_null(strstr(err, "dropped a partial last line"));
    free(err);
    char *got = file_in(cut, "summary.csv");
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
    rows = file_in(cut, "results.jsonl");
    assert_int_equal(count_lines(rows), 64);
    free(rows);
    rj = file_in(cut, "run.json");
    assert_non_null(strstr(rj, "\"complete\":true"));
    assert_non_null(strstr(rj, "\"resumed\":1"));
    free(rj);
    /* no temporary file stays behind */
    snprintf(p, sizeof p, "ls '%s' | grep -c '\\.tmp$'", cut);
    int gst = 0;
    char *tmps = test_run(p, &gst);
    assert_int_equal(atoi(tmps), 0);
    free(tmps);

    /* resuming with the arguments given again (same settings) is accepted too */
    rows = file_in(cut, "results.jsonl");
    snprintf(p, sizeof p, "%s/results.jsonl", cut);
    f = fopen(p, "w");
    assert_non_null(f);
    char *nl = rows;
    for (int i = 0; i < 37; i++) nl = strchr(nl, '\n') + 1; /* mid-sample: row 37 of 64 */
    fwrite(rows, 1, (size_t)(nl - rows), f);
    fclose(f);
    free(rows);
    snprintf(args, sizeof args, "eval -m '%s' " ARGS " --resume '%s'", model(), cut);
    st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("eval --resume with arguments failed (%d): %s", st, err);
    free(err);
    got = file_in(cut, "summary.csv");
    assert_string_equal(got, want);
    free(got);
    free(want);
    rm_rf(full);
    rm_rf(cut);
}

static void test_overwrite(void **state) {
    (void)state;
    char d[4096], args[16384], p[4200];
    snprintf(d, sizeof d, "%s", test_tmp_path("_ow"));
    assert_int_equal(mkdir(d, 0777), 0);
    /* a non-empty directory is refused before anything is written into it */
    snprintf(p, sizeof p, "%s/summary.csv", d);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("the previous run's summary\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/passkey_vs_keep.png", d);
    f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    char *err = NULL;
    snprintf(args, sizeof args,
             "eval -m '%s' -t 1 -q --samples 1 --policies sink_recent --out '%s'", model(), d);
    assert_int_equal(test_cli_stderr(args, &err), 2);
    assert_non_null(strstr(err, d));
    assert_non_null(strstr(err, "--overwrite"));
    free(err);
    char *s = file_in(d, "summary.csv");
    assert_string_equal(s, "the previous run's summary\n");
    free(s);
    /* --overwrite: the new run's files, and the old figure of another task is gone */
    snprintf(args, sizeof args,
             "eval -m '%s' -t 1 -q --samples 1 --policies sink_recent --greedy 4 --overwrite "
             "--out '%s'",
             model(), d);
    int st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("eval --overwrite failed (%d): %s", st, err);
    free(err);
    s = file_in(d, "summary.csv");
    assert_non_null(strstr(s, "protocol,positions,policy"));
    free(s);
    assert_int_equal(access(p, F_OK), -1);
    /* arguments that differ from the run's in two fields: both are named (the message named
     * the first alone, often not the one the user changed) */
    snprintf(args, sizeof args,
             "eval -m '%s' -t 1 -q --samples 2 --policies sink_recent --greedy 5 --resume '%s'",
             model(), d);
    assert_int_equal(test_cli_stderr(args, &err), 2);
    assert_non_null(strstr(err, "cannot resume"));
    assert_non_null(strstr(err, "'samples'"));
    assert_non_null(strstr(err, "'greedy'"));
    assert_non_null(strstr(err, "differ too"));
    free(err);
    /* --resume with --overwrite is refused */
    snprintf(args, sizeof args, "eval --resume '%s' --overwrite", d);
    assert_int_equal(test_cli_stderr(args, &err), 2);
    free(err);
    /* --resume of a directory that holds no run */
    snprintf(args, sizeof args, "eval --resume '%s/nope'", d);
    assert_int_equal(test_cli_stderr(args, &err), 2);
    assert_non_null(strstr(err, "cannot resume"));
    free(err);
    rm_rf(d);
}

/* --resume DIR alone from another working directory: run.json records where the run started
 * ("cwd") and absolute model and data paths, and the recorded command's relative -m / --data
 * are taken from there. An older run.json (relative paths, no "cwd") still resumes from the
 * directory it started in, and elsewhere is refused with a message that says why. */
static void test_resume_elsewhere(void **state) {
    (void)state;
    char root[2048], real[4096], cmd[16384], p[4096];
    snprintf(root, sizeof root, "%s", test_tmp_path("_cwd"));
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/m' '%s/d' && cp '%s' '%s/m/model.gguf'", root, root,
             model(), root);
    int st = 0;
    free(test_run(cmd, &st));
    assert_int_equal(st, 0);
    assert_non_null(realpath(root, real));
    char cli[4096]; /* the commands below change directory */
    assert_non_null(realpath(test_cli(), cli));
    /* three samples of 40 token ids */
    snprintf(p, sizeof p, "%s/d/data.jsonl", root);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    for (int s = 0; s < 3; s++) {
        fputs("{\"tokens\": [1", f);
        for (int i = 1; i < 40; i++) fprintf(f, ", %d", 3 + (s * 131 + i * 37) % 500);
        fputs("]}\n", f);
    }
    fclose(f);
    /* started in root with relative paths everywhere, --out included */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' eval -m m/model.gguf --data d/data.jsonl -t 1 -q --policies "
             "sink_recent,knorm --keep 0.5 --protocols seed --window 4 --continuation 8 "
             "--greedy 2 --out run 2>&1 >/dev/null",
             root, cli);
    char *log = test_run(cmd, &st);
    if (st != 0) fail_msg("eval failed (%d): %s", st, log);
    free(log);
    snprintf(p, sizeof p, "%s/run", root);
    char *want = file_in(p, "summary.csv");
    assert_non_null(want);
    char *rj = file_in(p, "run.json");
    char field[8400];
    snprintf(field, sizeof field, "\"model\":\"%s/m/model.gguf\"", real);
    assert_non_null(strstr(rj, field));
    snprintf(field, sizeof field, "\"data\":\"%s/d/data.jsonl\"", real);
    assert_non_null(strstr(rj, field));
    assert_non_null(strstr(rj, "\"cwd\":\""));
    assert_non_null(strstr(rj, "\"-m\",\"m/model.gguf\"")); /* the command as typed */
    free(rj);

    /* other arguments: refused, the values shown as typed (0.1, not 0.10000000000000001; 10,
     * not 1e+01) */
    const struct {
        const char *args, *run_has, *given;
    } differ[] = {{"--keep 0.1", "the run has '0.5,1'", "give '0.1,1'"},
                  {"--keep 0.5 --greedy 10", "the run has '2'", "give '10'"}};
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && '%s' eval -m m/model.gguf --data d/data.jsonl -t 1 -q --policies "
                 "sink_recent,knorm --protocols seed --window 4 --continuation 8 %s --resume run "
                 "2>&1 >/dev/null",
                 root, cli, differ[i].args);
        log = test_run(cmd, &st);
        if (st != 2 || !strstr(log, differ[i].run_has) || !strstr(log, differ[i].given))
            fail_msg("resume with %s: exit %d, want '%s' and '%s':\n%s", differ[i].args, st,
                     differ[i].run_has, differ[i].given, log);
        free(log);
    }

    /* cut to 2 of 12 rows, resumed from / */
    char rows_path[4200];
    snprintf(rows_path, sizeof rows_path, "%s/results.jsonl", p);
    char *rows = test_read_file(rows_path, NULL);
    assert_non_null(rows);
    char *nl = strchr(strchr(rows, '\n') + 1, '\n') + 1;
    f = fopen(rows_path, "w");
    assert_non_null(f);
    fwrite(rows, 1, (size_t)(nl - rows), f);
    fclose(f);
    free(rows);
    snprintf(cmd, sizeof cmd, "cd / && '%s' eval --resume '%s/run' 2>&1 >/dev/null", cli, root);
    log = test_run(cmd, &st);
    if (st != 0) fail_msg("eval --resume from / failed (%d): %s", st, log);
    assert_non_null(strstr(log, "2 of 12 rows already done"));
    free(log);
    char *got = file_in(p, "summary.csv");
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);

    /* an older run.json: relative model and data paths, no "cwd" */
    snprintf(cmd, sizeof cmd,
             "cd '%s/run' && sed -i -e 's|,\"cwd\":\"[^\"]*\"||' -e "
             "'s|\"model\":\"[^\"]*\"|\"model\":\"m/model.gguf\"|' -e "
             "'s|\"data\":\"[^\"]*\"|\"data\":\"d/data.jsonl\"|' run.json && "
             "grep -c '\"cwd\"' run.json; cd / && '%s' eval --resume '%s/run' 2>&1 >/dev/null",
             root, cli, root);
    log = test_run(cmd, &st);
    assert_int_equal(st, 2);
    assert_int_equal(strncmp(log, "0\n", 2), 0); /* grep -c first: the edit took "cwd" out */
    assert_non_null(strstr(log, "relative path 'm/model.gguf'"));
    assert_non_null(strstr(log, "an older run.json"));
    free(log);
    /* from the directory it started in, it resumes, and then records "cwd" */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' eval --resume run 2>&1 >/dev/null", root, cli);
    log = test_run(cmd, &st);
    if (st != 0) fail_msg("eval --resume of an older run.json failed (%d): %s", st, log);
    free(log);
    rj = file_in(p, "run.json");
    assert_non_null(strstr(rj, "\"cwd\":\""));
    assert_non_null(strstr(rj, "\"simd\":\""));
    free(rj);

    /* at another kernel level (results differ in the last bits): refused, naming both */
    if (strcmp(skv_simd_level(), "scalar") != 0) {
        snprintf(cmd, sizeof cmd,
                 "cd / && SKV_SIMD=scalar '%s' eval --resume '%s/run' 2>&1 >/dev/null", cli, root);
        log = test_run(cmd, &st);
        assert_int_equal(st, 2);
        assert_non_null(strstr(log, "it ran with the"));
        assert_non_null(strstr(log, "this process has scalar"));
        free(log);
    }
    /* a run.json from before the field resumes at any level, and stays without it */
    snprintf(cmd, sizeof cmd,
             "cd '%s/run' && sed -i 's|,\"simd\":\"[^\"]*\"||' run.json && cd / && "
             "SKV_SIMD=scalar '%s' eval --resume '%s/run' 2>&1 >/dev/null",
             root, cli, root);
    log = test_run(cmd, &st);
    if (st != 0) fail_msg("eval --resume of a run.json without simd failed (%d): %s", st, log);
    free(log);
    rj = file_in(p, "run.json");
    assert_null(strstr(rj, "\"simd\""));
    free(rj);
    free(want);
    rm_rf(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_overwrite),
        cmocka_unit_test(test_resume_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
