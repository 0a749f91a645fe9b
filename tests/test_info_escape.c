/* test_info_escape.c — sparsekv never sends a control byte from a model file to the terminal
 * (issue 12). stories260K copied with keys whose names and values hold ESC sequences (a screen
 * clear, a window-title OSC) and BEL, under a file name holding them too: `info`'s text shows
 * them as \xNN and holds no byte < 0x20 but newlines. The same copy with an extra tensor whose
 * name holds ESC, BEL, a C1 CSI (U+009B) and an invalid byte is refused, and the message naming
 * the tensor shows each escaped, byte for byte as hand-written. Also: `info` on a GGUF it
 * cannot run. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EVIL_TENSOR                                                                                \
    "evil\x1b[2J\x1b]0;pwn\x07\xc2\x9b"                                                            \
    "31m\xff\\end"
/* how a message shows it (a backslash stays as it is in messages) */
#define EVIL_SHOWN "evil\\x1b[2J\\x1b]0;pwn\\x07\\xc2\\x9b31m\\xff\\end"

/* stories260K plus an evil key; with extra_tensor, plus a tensor named EVIL_TENSOR. */
static void evil_model(const char *path, bool extra_tensor) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, NULL), SKV_OK);
    assert_int_equal(skv_gguf_writer_set_str(w, "evil.\x1b[2Jkey", "value \x1b]0;title\x07"),
                     SKV_OK);
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                         SKV_OK);
    }
    float one[4] = {1, 2, 3, 4};
    int64_t ne[1] = {4};
    if (extra_tensor)
        assert_int_equal(skv_gguf_writer_add_tensor(w, EVIL_TENSOR, SKV_TYPE_F32, 1, ne, one),
                         SKV_OK);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
}

static void no_raw_controls(const char *what, const char *out) {
    for (const unsigned char *p = (const unsigned char *)out; *p; p++)
        if ((*p < 0x20 && *p != '\n') || *p == 0x7f || *p == 0x9b)
            fail_msg("%s printed the raw control byte 0x%02x:\n%s", what, *p, out);
}

static void test_info_text_is_escaped(void **state) {
    (void)state;
    char dir[4096], path[4200], cmd[8192];
    snprintf(dir, sizeof dir, "%s", test_tmp_path("_esc"));
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(path, sizeof path, "%s/m\x1b[2J\x07.gguf", dir);
    evil_model(path, false);
    snprintf(cmd, sizeof cmd, "'%s' info '%s' 2>&1", test_cli(), path);
    int st = -1;
    char *out = test_run(cmd, &st);
    assert_non_null(out);
    if (st != 0) fail_msg("info exited %d:\n%s", st, out);
    no_raw_controls("info", out);
    assert_non_null(strstr(out, "/m\\x1b[2J\\x07.gguf (GGUF v3, llama)\n"));
    free(out);
    /* --json: JSON's own escapes, no raw control byte either */
    snprintf(cmd, sizeof cmd, "'%s' info --json '%s' 2>&1", test_cli(), path);
    out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    no_raw_controls("info --json", out);
    assert_non_null(strstr(out, "/m\\u001b[2J\\u0007.gguf\""));
    free(out);
    unlink(path);

    /* the tensor name in the loader's refusal, and in the file's own table: a model sparsekv
     * cannot run is shown as it is (exit 0) */
    snprintf(path, sizeof path, "%s/t.gguf", dir);
    evil_model(path, true);
    snprintf(cmd, sizeof cmd, "'%s' info '%s' 2>&1", test_cli(), path);
    out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "runnable     no: "));
    no_raw_controls("info (refused model)", out);
    if (!strstr(out, EVIL_SHOWN)) fail_msg("the tensor name is not shown escaped:\n%s", out);
    free(out);
    unlink(path);
    rmdir(dir);
}

/* A GGUF sparsekv cannot run (stories260K relabelled 'gemma'; a vocabulary-only file) is shown
 * as it is: why, every metadata key with its type and value (arrays as type x length), every
 * tensor; --json the same as one document with "runnable": false. Exit 0 (it refused them,
 * exit 2, with the reason alone). A broken model, and a file that is no GGUF, still exit 2. */
static void test_info_unrunnable(void **state) {
    (void)state;
    char path[4096], cmd[8192];
    snprintf(path, sizeof path, "%s", test_tmp_path(".gguf"));
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, NULL), SKV_OK);
    assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", "gemma"), SKV_OK);
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                         SKV_OK);
    }
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
    char *out = test_cli_expect(0, "info '%s' 2>&1", path);
    assert_non_null(strstr(out, "(GGUF v3, gemma)"));
    assert_non_null(strstr(out, "runnable     no: architecture 'gemma' is not supported"));
    assert_non_null(strstr(out, "llama.block_count"));
    assert_non_null(strstr(out, "uint32   5\n"));
    assert_non_null(
        strstr(out, "tokenizer.ggml.tokens                        array    [string x 512]"));
    assert_non_null(strstr(out, "blk.4.ffn_down.weight            f32      [172, 64]"));
    free(out);
    snprintf(cmd, sizeof cmd,
             "'%s' info --json '%s' | python3 -c 'import json,sys; "
             "d=json.load(sys.stdin); print(d[\"runnable\"], d[\"architecture\"], "
             "d[\"metadata\"][\"llama.block_count\"], d[\"metadata\"][\"tokenizer.ggml.tokens\"], "
             "len(d[\"tensors\"]))'",
             test_cli(), path);
    int st = -1;
    out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_string_equal(out, "False gemma 5 {'array': 'string', 'n': 512} 47\n");
    free(out);
    /* a vocabulary-only GGUF (stories260K's metadata, no tensor): shown, exit 0 */
    g = skv_gguf_open(test_model_path("stories260K/stories260K.gguf"), &err);
    assert_non_null(g);
    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, NULL), SKV_OK);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
    out = test_cli_expect(0, "info '%s' 2>&1", path);
    assert_non_null(strstr(out, "runnable     no: "));
    assert_non_null(strstr(out, "a vocabulary-only GGUF"));
    assert_non_null(strstr(out, "tokenizer.ggml.model                         string   \"llama\""));
    free(out);
    /* a broken model (llama without its hyperparameters) stays refused: exit 2, the reason */
    w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", "llama"), SKV_OK);
    assert_int_equal(skv_gguf_writer_set_u32(w, "llama.block_count", 2), SKV_OK);
    float one[4] = {1, 2, 3, 4};
    int64_t ne[1] = {4};
    assert_int_equal(skv_gguf_writer_add_tensor(w, "output_norm.weight", SKV_TYPE_F32, 1, ne, one),
                     SKV_OK);
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    out = test_cli_expect(2, "info '%s' 2>&1", path);
    assert_non_null(strstr(out, "missing hyperparameter"));
    assert_null(strstr(out, "runnable"));
    free(out);
    /* not a GGUF: refused */
    assert_true(test_write_text(path, "not a model"));
    free(test_cli_expect(2, "info '%s' 2>&1", path));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_text_is_escaped),
        cmocka_unit_test(test_info_unrunnable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
