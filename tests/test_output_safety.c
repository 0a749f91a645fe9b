/* test_output_safety.c — what sparsekv writes never lands where it must not, and a failed write
 * is never a success: the GGUF writers (quantize, convert-llama2c, synth-model, the writer itself)
 * write only to a new path or to a regular file that is none of their inputs (a symbolic link,
 * FIFO, device node or directory at the output path stays what it was), and a command whose
 * standard output cannot be written exits 1 with the system's message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gguf.h"
#include "sparsekv.h"
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* A fresh directory for one test. */
static const char *tmp_dir(void) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", test_tmp_path(".d"));
    assert_int_equal(mkdir(dir, 0700), 0);
    return dir;
}

static skv_gguf_writer *small_writer(void) {
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", "llama"), SKV_OK);
    return w;
}

static mode_t lmode(const char *path) {
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return st.st_mode;
}

static void test_writer_refuses_special_outputs(void **state) {
    (void)state;
    const char *dir = tmp_dir();
    char target[600], link[600], fifo[600], dev[600], sub[600], ok[600];
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(link, sizeof link, "%s/link.gguf", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo.gguf", dir);
    snprintf(dev, sizeof dev, "%s/null.gguf", dir);
    snprintf(sub, sizeof sub, "%s/sub.gguf", dir);
    snprintf(ok, sizeof ok, "%s/new.gguf", dir);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fputs("precious", f);
    fclose(f);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    /* A device node of our own (the null device's numbers), so nothing system-wide is at risk;
     * creating one needs root, so that case is skipped without it. */
    bool have_dev = mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0;

    skv_gguf_writer *w = small_writer();
    skv_err err = {0};
    assert_int_equal(skv_gguf_writer_write(w, link, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "symbolic link"));
    assert_true(S_ISLNK(lmode(link)));
    assert_int_equal(skv_gguf_writer_write(w, fifo, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "FIFO"));
    assert_true(S_ISFIFO(lmode(fifo)));
    assert_int_equal(skv_gguf_writer_write(w, sub, &err), SKV_ERR_INVALID_ARG);
    assert_true(S_ISDIR(lmode(sub)));
    if (have_dev) {
        assert_int_equal(skv_gguf_writer_write(w, dev, &err), SKV_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "device"));
        assert_true(S_ISCHR(lmode(dev)));
    }
    /* The link's target is untouched; a new path and an existing regular file are fine. */
    size_t n = 0;
    char *text = test_read_file(target, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(text, "precious", 8);
    free(text);
    assert_int_equal(skv_gguf_writer_write(w, ok, &err), SKV_OK);
    assert_int_equal(skv_gguf_writer_write(w, ok, &err), SKV_OK);
    assert_true(S_ISREG(lmode(ok)));
    skv_gguf_writer_free(w);

    unlink(link), unlink(fifo), unlink(dev), rmdir(sub), unlink(ok), unlink(target), rmdir(dir);
}

/* quantize IN IN (or IN and a hard link to it) must not rewrite its own input. */
static void test_quantize_refuses_its_input(void **state) {
    (void)state;
    const char *dir = tmp_dir();
    char in[600], hard[600], out[600];
    snprintf(in, sizeof in, "%s/in.gguf", dir);
    snprintf(hard, sizeof hard, "%s/hard.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    size_t n = 0;
    void *model = test_read_file(test_model_path("stories260K/stories260K.gguf"), &n);
    assert_non_null(model);
    FILE *f = fopen(in, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(model, 1, n, f), n);
    fclose(f);
    assert_int_equal(link(in, hard), 0);

    skv_err err = {0};
    assert_int_equal(skv_quantize_model(in, in, SKV_TYPE_F16, 1, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "input"));
    assert_int_equal(skv_quantize_model(in, hard, SKV_TYPE_F16, 1, &err), SKV_ERR_INVALID_ARG);
    size_t n2 = 0;
    void *after = test_read_file(in, &n2);
    assert_int_equal(n2, n);
    assert_memory_equal(after, model, n);
    free(after);
    assert_int_equal(skv_quantize_model(in, out, SKV_TYPE_F16, 1, &err), SKV_OK);

    /* The CLI says so and exits 2, with or without --overwrite (which never means IN). */
    char cmd[2048];
    const char *outs[] = {in, hard};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s quantize %s %s f16%s 2>&1", test_cli(), in, outs[i % 2],
                 i < 2 ? "" : " --overwrite");
        int status = -1;
        char *msg = test_run(cmd, &status);
        assert_int_equal(status, 2);
        assert_non_null(strstr(msg, "input of this conversion"));
        free(msg);
    }
    size_t n3 = 0;
    after = test_read_file(in, &n3);
    assert_int_equal(n3, n);
    assert_memory_equal(after, model, n);
    free(after);
    free(model);
    unlink(in), unlink(hard), unlink(out), rmdir(dir);
}

/* convert-llama2c must not write over its checkpoint or tokenizer. */
static void test_convert_refuses_its_input(void **state) {
    (void)state;
    test_model_path("stories260K/stories260K.bin"); /* skip before the directory is made */
    test_model_path("stories260K/tok512.bin");
    const char *dir = tmp_dir();
    char ckpt[600], tok[600];
    snprintf(ckpt, sizeof ckpt, "%s/model.bin", dir);
    snprintf(tok, sizeof tok, "%s/tok.bin", dir);
    const char *src[2] = {"stories260K/stories260K.bin", "stories260K/tok512.bin"};
    const char *dst[2] = {ckpt, tok};
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        void *p = test_read_file(test_model_path(src[i]), &n);
        assert_non_null(p);
        FILE *f = fopen(dst[i], "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(p, 1, n, f), n);
        fclose(f);
        free(p);
    }
    skv_err err = {0};
    assert_int_equal(skv_convert_llama2c(ckpt, tok, ckpt, &err), SKV_ERR_INVALID_ARG);
    assert_int_equal(skv_convert_llama2c(ckpt, tok, tok, &err), SKV_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "input"));
    unlink(ckpt), unlink(tok), rmdir(dir);
}

/* synth-model writes through a temporary file it renames itself: same rule, even with
 * --overwrite (without it, anything at the path is refused). */
static void test_synth_refuses_symlink(void **state) {
    (void)state;
    const char *dir = tmp_dir();
    char target[600], link[600];
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(link, sizeof link, "%s/link.gguf", dir);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(symlink(target, link), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type f32 -o %s 2>&1", test_cli(),
             link);
    int status = -1;
    char *msg = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(msg, "--overwrite"));
    assert_true(S_ISLNK(lmode(link)));
    free(msg);
    snprintf(cmd, sizeof cmd, "%s synth-model --preset tiny --type f32 -o %s --overwrite 2>&1",
             test_cli(), link);
    msg = test_run(cmd, &status);
    assert_int_not_equal(status, 0);
    assert_non_null(strstr(msg, "symbolic link"));
    assert_true(S_ISLNK(lmode(link)));
    free(msg);
    unlink(link), unlink(target), rmdir(dir);
}

/* A link planted at the name of a temporary (logits' FILE.tmp.PID, eval's run.json.tmp) is
 * removed, not written through: logits wrote its floats into the link's target. */
static void test_temporaries_follow_no_link(void **state) {
    (void)state;
    const char *dir = tmp_dir();
    char victim[600], cmd[PATH_MAX + 1024];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious", f);
    fclose(f);
    /* exec keeps the shell's pid, which names the temporary */
    char cli[PATH_MAX];
    assert_non_null(realpath(test_cli(), cli));
    snprintf(cmd, sizeof cmd,
             "cd %s && sh -c 'ln -s victim out.f32.tmp.$$ && exec %s logits --tokens 1,2 -t 1 -o "
             "out.f32' 2>&1",
             dir, cli);
    int status = -1;
    char *msg = test_run(cmd, &status);
    if (status != 0) fail_msg("%s gave exit %d and:\n%s", cmd, status, msg);
    free(msg);
    char *v = test_read_file(victim, NULL);
    assert_string_equal(v, "precious");
    free(v);
    char out[700];
    snprintf(out, sizeof out, "%s/out.f32", dir);
    assert_true(S_ISREG(lmode(out)));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* An input that is also an output is refused before anything is written: eval's --data named
 * like one of its results in --out (with --overwrite it was replaced by them), compress's --plot
 * onto its model. */
static void test_inputs_are_not_outputs(void **state) {
    (void)state;
    const char *dir = tmp_dir();
    char data[600], model[600], cmd[4096];
    snprintf(data, sizeof data, "%s/results.jsonl", dir);
    FILE *f = fopen(data, "w");
    assert_non_null(f);
    for (int i = 0; i < 2; i++)
        fputs("{\"text\": \"Once upon a time there was a girl named Lily who loved the park. "
              "Once upon a time there was a girl named Lily who loved the park.\"}\n",
              f);
    fclose(f);
    char *before = test_read_file(data, NULL);
    char *msg = test_cli_expect(
        2, "eval --data %s --out %s --overwrite --policies knorm --keep 0.5 --greedy 0 -q 2>&1",
        data, dir);
    assert_non_null(strstr(msg, "which this run writes"));
    free(msg);
    char *after = test_read_file(data, NULL);
    assert_string_equal(before, after);
    free(before), free(after);
    snprintf(model, sizeof model, "%s/m.png", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", test_model_path("stories260K/stories260K.gguf"), model);
    assert_int_equal(system(cmd), 0);
    msg = test_cli_expect(
        2, "compress -m %s -p 'hello there' --policy knorm --keep 0.5 --plot %s 2>&1", model,
        model);
    assert_non_null(strstr(msg, "is the model"));
    free(msg);
    skv_err err = {0};
    skv_model *m = skv_model_load(model, &err); /* still the model */
    assert_non_null(m);
    skv_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* SIGTERM during synth-model's write: the temporaries go with the process (they stayed, 270 MB
 * each here). Skipped when the write ended before the signal could be sent. */
static void test_signal_removes_temporaries(void **state) {
    (void)state;
    const char *dir = tmp_dir();
    char cli[PATH_MAX], cmd[PATH_MAX + 1024];
    assert_non_null(realpath(test_cli(), cli));
    snprintf(cmd, sizeof cmd,
             "cd %s && { %s synth-model --preset smollm2-135m --type f16 -o m.gguf >/dev/null "
             "2>&1 & p=$!; i=0; while [ $i -lt 1000 ] && ! ls m.gguf.* >/dev/null 2>&1; do "
             "sleep 0.01; i=$((i+1)); done; kill -TERM $p; wait $p; echo \"rc=$?\"; ls; }",
             dir, cli);
    int status = -1;
    char *out = test_run(cmd, &status);
    const bool finished = strstr(out, "rc=0") != NULL;
    if (!finished && !strstr(out, "rc=143")) fail_msg("unexpected:\n%s", out);
    if (!finished && strchr(strstr(out, "rc=143"), 'm')) fail_msg("left behind:\n%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    if (finished) skip();
}

/* `sparsekv info > /dev/full` used to exit 0. */
static void test_stdout_write_errors_fail(void **state) {
    (void)state;
    if (access("/dev/full", W_OK) != 0) skip();
    const char *cmds[] = {"info", "tokenize -p 'Once upon a time'", "--help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/full", test_cli(), cmds[i]);
        int status = -1;
        char *msg = test_run(cmd, &status);
        assert_int_equal(status, 1);
        assert_non_null(strstr(msg, "No space left on device"));
        free(msg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_refuses_special_outputs),
        cmocka_unit_test(test_quantize_refuses_its_input),
        cmocka_unit_test(test_convert_refuses_its_input),
        cmocka_unit_test(test_synth_refuses_symlink),
        cmocka_unit_test(test_stdout_write_errors_fail),
        cmocka_unit_test(test_temporaries_follow_no_link),
        cmocka_unit_test(test_inputs_are_not_outputs),
        cmocka_unit_test(test_signal_removes_temporaries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
