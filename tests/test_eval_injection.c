/* test_eval_injection.c — nothing read from a results file reaches gnuplot, a CSV or a Markdown
 * table as anything but data (issue 12): the crafted shard that used to run `!touch PWNED`
 * through plots.gp, the reader's validation of policy / protocol / positions, and the escapes
 * for each destination (checked against hand-written expected bytes and, for CSV, against an
 * independent RFC 4180 reader). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "eval/eval.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One valid lm result line; policy, protocol, positions are JSON string literals as given. */
static void put_line(FILE *f, int sample, int config, const char *policy_json,
                     const char *protocol_json, const char *positions_json) {
    fprintf(f,
            "{\"task\":\"lm\",\"sample\":%d,\"depth_index\":0,\"config\":%d,\"policy\":%s,"
            "\"keep_frac\":0.5,\"protocol\":%s,\"positions\":%s,\"seed\":0,\"greedy\":8,"
            "\"greedy_match\":3,\"n_tokens\":4,\"same_top\":3,\"kl_mean\":0.25,\"kl_median\":0.2,"
            "\"kl_p90\":0.3,\"kl_p99\":0.4,\"kl_max\":0.5,\"top1\":0.75,\"nll_ref\":1.0,"
            "\"nll_cmp\":1.25,\"ln_ppl_ratio\":0.25,\"kv_bytes_before\":1000,"
            "\"kv_bytes_after\":500,\"compress_ms\":1}\n",
            sample, config, policy_json, protocol_json, positions_json);
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static char *make_dir(void) {
    char *dir = strdup(test_tmp_path("_inject"));
    assert_non_null(dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    return dir;
}

static void rm_rf(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    int st = 0;
    free(test_run(cmd, &st));
}

/* eval-merge on a shard whose field holds gnuplot commands: refused (exit 2, naming the file,
 * the line and the field), and the file the commands would create does not exist anywhere. */
static void merge_crafted(const char *field, const char *policy, const char *protocol,
                          const char *positions) {
    char *dir = make_dir();
    char shard[4200], out[4200], pwned[4300], pwned_out[4300], cmd[16384];
    snprintf(shard, sizeof shard, "%s/shard.jsonl", dir);
    snprintf(out, sizeof out, "%s/merged", dir);
    snprintf(pwned, sizeof pwned, "%s/PWNED", dir);
    snprintf(pwned_out, sizeof pwned_out, "%s/merged/PWNED", dir);
    FILE *f = fopen(shard, "w");
    assert_non_null(f);
    put_line(f, 0, 0, "\"attention\"", "\"seed\"", "\"original\"");
    put_line(f, 1, 0, policy, protocol, positions);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' eval-merge shard.jsonl --out merged -q 2>&1", dir,
             test_cli());
    int st = -1;
    char *log = test_run(cmd, &st);
    assert_non_null(log);
    if (st != 2) fail_msg("eval-merge exited %d on a crafted %s:\n%s", st, field, log);
    char want[64];
    snprintf(want, sizeof want, "shard.jsonl:2: field '%s'", field);
    if (!strstr(log, want)) fail_msg("message does not say '%s':\n%s", want, log);
    assert_null(strstr(log, "\n!touch")); /* the value is shown escaped */
    assert_false(exists(pwned));
    assert_false(exists(pwned_out));
    free(log);
    rm_rf(dir);
    free(dir);
}

static void test_merge_injection(void **state) {
    (void)state;
    merge_crafted("policy", "\"x'\\n!touch PWNED\\n#\"", "\"seed\"", "\"original\"");
    merge_crafted("protocol", "\"attention\"", "\"seed'\\n!touch PWNED\\n#\"", "\"original\"");
    merge_crafted("positions", "\"attention\"", "\"seed\"", "\"o'\\n!touch PWNED\\n#\"");
    /* a CSV / Markdown breaker is no name either */
    merge_crafted("policy", "\"random,1|x\\\"\"", "\"seed\"", "\"original\"");
}

static skv_status read_one(const char *policy, const char *protocol, const char *positions,
                           skv_eval_rows *rows, skv_err *err) {
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    put_line(f, 0, 0, policy, protocol, positions);
    fclose(f);
    skv_status st = skv_eval_read_results(path, rows, err);
    if (st) assert_non_null(strstr(err->msg, path));
    unlink(path);
    return st;
}

static void test_reader_validates(void **state) {
    (void)state;
    skv_eval_rows rows = {0};
    skv_err err = {0};
    /* an alias is read as its canonical name */
    assert_int_equal(read_one("\"snapkv\"", "\"engine\"", "\"rerotate\"", &rows, &err), SKV_OK);
    assert_string_equal(rows.rows[0].policy, "attention");
    assert_string_equal(rows.rows[0].protocol, "engine");
    assert_string_equal(rows.rows[0].positions, "rerotate");
    skv_eval_rows_free(&rows);
    /* unknown names, each named with file, line and field; the value shown escaped */
    assert_int_equal(read_one("\"nosuch\"", "\"seed\"", "\"original\"", &rows, &err),
                     SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, ":1: field 'policy': unknown policy \"nosuch\""));
    assert_int_equal(read_one("\"x\\n!id\"", "\"seed\"", "\"original\"", &rows, &err),
                     SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"x\\x0a!id\""));
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(read_one("\"attention\"", "\"Seed\"", "\"original\"", &rows, &err),
                     SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, ":1: field 'protocol': unknown protocol"));
    assert_int_equal(read_one("\"attention\"", "\"seed\"", "\"shifted\"", &rows, &err),
                     SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, ":1: field 'positions': unknown position mode"));
    /* a NUL inside the string does not pass as its prefix */
    assert_int_equal(read_one("\"attention\\u0000'!x\"", "\"seed\"", "\"original\"", &rows, &err),
                     SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "field 'policy'"));
    /* not a string */
    assert_int_equal(read_one("7", "\"seed\"", "\"original\"", &rows, &err), SKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "field 'policy'"));
    assert_int_equal(rows.n, 0);
    skv_eval_rows_free(&rows);
    /* a UTF-8 BOM before the first line is skipped */
    const char *path = test_tmp_path(".jsonl");
    FILE *f = fopen(path, "w");
    fputs("\xef\xbb\xbf", f);
    put_line(f, 0, 0, "\"random\"", "\"seed\"", "\"original\"");
    fclose(f);
    assert_int_equal(skv_eval_read_results(path, &rows, &err), SKV_OK);
    assert_int_equal(rows.n, 1);
    skv_eval_rows_free(&rows);
    unlink(path);
}

static char *to_string(void (*fn)(FILE *, const char *), const char *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(f, s);
    fclose(f);
    return buf;
}

/* An independent RFC 4180 reader: the fields of one record starting at *p. */
static int csv_record(const char **p, char fields[][64], int max) {
    int n = 0;
    const char *s = *p;
    for (;;) {
        size_t k = 0;
        if (*s == '"') {
            s++;
            for (;;) {
                if (*s == 0) fail_msg("unterminated quoted field");
                if (*s == '"' && s[1] == '"') {
                    fields[n][k++] = '"';
                    s += 2;
                } else if (*s == '"') {
                    s++;
                    break;
                } else {
                    fields[n][k++] = *s++;
                }
                assert_true(k < 63);
            }
        } else {
            while (*s && *s != ',' && *s != '\n') {
                if (*s == '"') fail_msg("bare quote in an unquoted field");
                fields[n][k++] = *s++;
                assert_true(k < 63);
            }
        }
        fields[n][k] = 0;
        n++;
        assert_true(n <= max);
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == '\n') s++;
        break;
    }
    *p = s;
    return n;
}

static void test_csv_quoting(void **state) {
    (void)state;
    char *a = to_string(skv_eval_write_csv_field, "plain_name");
    assert_string_equal(a, "plain_name");
    free(a);
    a = to_string(skv_eval_write_csv_field, "a,b\"c\nd");
    assert_string_equal(a, "\"a,b\"\"c\nd\"");
    free(a);
    a = to_string(skv_eval_write_csv_field, "cr\r");
    assert_string_equal(a, "\"cr\r\"");
    free(a);
    /* a record with awkward fields reads back as the same fields */
    const char *vals[] = {"x'\n!touch PWNED\n#", "a,b", "\"q\"", "", "plain"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (int i = 0; i < 5; i++) {
        if (i) fputc(',', f);
        skv_eval_write_csv_field(f, vals[i]);
    }
    fputs("\nnext,row\n", f);
    fclose(f);
    const char *p = buf;
    char fields[8][64];
    assert_int_equal(csv_record(&p, fields, 8), 5);
    for (int i = 0; i < 5; i++) assert_string_equal(fields[i], vals[i]);
    assert_int_equal(csv_record(&p, fields, 8), 2);
    assert_string_equal(fields[0], "next");
    assert_string_equal(fields[1], "row");
    free(buf);
}

static void test_gnuplot_and_md_escapes(void **state) {
    (void)state;
    char *g = to_string(skv_eval_write_gnuplot_string, "x'\n!touch PWNED\n#");
    assert_string_equal(g, "'x''?!touch PWNED?#'");
    free(g);
    g = to_string(skv_eval_write_gnuplot_string, "back\\slash \"dq\" \x7f");
    assert_string_equal(g, "'back\\slash \"dq\" ?'");
    free(g);
    char *m = to_string(skv_eval_write_md_cell, "a|b\\c\n<i>*x* `y` _z_ sink_recent & [l]");
    assert_string_equal(m, "a\\|b\\\\c &lt;i&gt;\\*x\\* \\`y\\` \\_z\\_ sink_recent &amp; \\[l\\]");
    free(m);
}

static void test_labels(void **state) {
    (void)state;
    skv_eval_label l;
    char why[512];
    assert_true(skv_eval_label_parse("snapkv=SnapKV", &l, why, sizeof why));
    assert_string_equal(l.key, "attention");
    assert_string_equal(l.text, "SnapKV");
    assert_true(skv_eval_label_parse("engine=engine (window kept)", &l, why, sizeof why));
    assert_string_equal(l.key, "engine");
    assert_true(skv_eval_label_parse("rerotate=re-rotated=x", &l, why, sizeof why));
    assert_string_equal(l.key, "rerotate");
    assert_string_equal(l.text, "re-rotated=x");
    assert_false(skv_eval_label_parse("nosuch=X", &l, why, sizeof why));
    assert_non_null(strstr(why, "'nosuch' is not a policy"));
    assert_false(skv_eval_label_parse("attention", &l, why, sizeof why));
    assert_false(skv_eval_label_parse("=X", &l, why, sizeof why));
    assert_false(skv_eval_label_parse("attention=", &l, why, sizeof why));
    assert_false(skv_eval_label_parse("attention=a\nb", &l, why, sizeof why));
    assert_non_null(strstr(why, "control character"));

    /* a label that reaches the script unchecked (the library call, not the CLI) is still only
     * a string to gnuplot: the script runs and creates nothing but the plots */
    char *dir = make_dir();
    char shard[4200], path[4300];
    snprintf(shard, sizeof shard, "%s/r.jsonl", dir);
    FILE *f = fopen(shard, "w");
    put_line(f, 0, 0, "\"attention\"", "\"seed\"", "\"original\"");
    put_line(f, 1, 0, "\"attention\"", "\"seed\"", "\"original\"");
    fclose(f);
    skv_eval_rows rows = {0};
    skv_err err = {0};
    assert_int_equal(skv_eval_read_results(shard, &rows, &err), SKV_OK);
    assert_int_equal(skv_eval_rows_check(&rows, &err), SKV_OK);
    skv_eval_label items[2] = {{"attention", "Snap'KV\n!touch PWNED\n#"}, {"seed", "it's seed"}};
    skv_eval_labels labels = {items, 2};
    assert_int_equal(skv_eval_write_reports_labeled(&rows, dir, &labels, NULL, &err), SKV_OK);
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    char *gp = test_read_file(path, NULL);
    assert_non_null(gp);
    assert_non_null(strstr(gp, "title 'Snap''KV?!touch PWNED?#'"));
    assert_non_null(strstr(gp, "title 'it''s seed'"));
    free(gp);
    int st = 0;
    char *has = test_run("command -v gnuplot", &st);
    free(has);
    if (st == 0) {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp 2>&1", dir);
        char *log = test_run(cmd, &st);
        if (st != 0) fail_msg("gnuplot failed on the script:\n%s", log ? log : "");
        free(log);
        snprintf(path, sizeof path, "%s/PWNED", dir);
        assert_false(exists(path));
        snprintf(path, sizeof path, "%s/kl_vs_keep.png", dir);
        assert_true(exists(path));
    }
    skv_eval_rows_free(&rows);
    rm_rf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_injection), cmocka_unit_test(test_reader_validates),
        cmocka_unit_test(test_csv_quoting),     cmocka_unit_test(test_gnuplot_and_md_escapes),
        cmocka_unit_test(test_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
