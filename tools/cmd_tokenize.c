/* cmd_tokenize.c — `sparsekv tokenize`: the token ids and pieces of a text, with a model's
 * vocabulary or a llama2.c tokenizer.bin. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: sparsekv tokenize [-m FILE | --vocab-llama2c FILE N] (-p TEXT | -f FILE)\n"
            "                         [--json] [--no-bos] [--special]\n\n"
            "Encodes TEXT (or the bytes of FILE) with the vocabulary of a GGUF FILE: a model or\n"
            "a vocab-only file such as llama.cpp's ggml-vocab-*.gguf (default %s),\n"
            "or of a llama2.c tokenizer.bin holding N tokens (N = 0: every token in the file).\n"
            "SentencePiece (tokenizer.ggml.model llama) and byte-level BPE (gpt2) vocabularies.\n"
            "Prints one line per token, \"id<TAB>piece\", the raw piece as a JSON string (U+2581\n"
            "for spaces in SentencePiece, the GPT-2 byte alphabet in byte-level BPE: \"\u0120\"\n"
            "is a space); --json prints {\"tokens\":[...],\"pieces\":[...]} instead.\n"
            "BOS (and EOS) are added as the vocabulary asks (tokenizer.ggml.add_bos_token) unless\n"
            "--no-bos. --special: the text of special tokens (<|im_start|>, <|eot_id|>, <s>...)\n"
            "becomes those tokens; without it such text is ordinary text.\n",
            SKV_DEFAULT_MODEL);
}

/* Whole file into a malloc'd buffer; NULL (and a message) on failure. */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("tokenize", "cannot open '%s'", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = cap < ((size_t)INT_MAX / 4) ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        cli_error("tokenize", "cannot read '%s' (too large or unreadable)", path);
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_arg = NULL, *vocab_path = NULL, *text = NULL, *text_file = NULL;
    long vocab_n = 0;
    bool json = false, bos = true, special = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--no-bos")) {
            bos = false;
        } else if (!strcmp(argv[i], "--special")) {
            special = true;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model_arg = argv[++i];
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
            text = argv[++i];
        } else if (!strcmp(argv[i], "-f") && i + 1 < argc) {
            text_file = argv[++i];
        } else if (!strcmp(argv[i], "--vocab-llama2c") && i + 2 < argc) {
            vocab_path = argv[++i];
            if (!cli_parse_int(argv[++i], 0, INT_MAX, &vocab_n)) {
                cli_error("tokenize", "--vocab-llama2c: N must be a token count >= 0, not '%s'",
                          argv[i]);
                return 2;
            }
        } else {
            cli_error("tokenize", "unexpected argument '%s' (see --help)", argv[i]);
            return 2;
        }
    }
    if (!text == !text_file) {
        cli_error("tokenize", "give the text with exactly one of -p TEXT or -f FILE (see --help)");
        return 2;
    }
    if (model_arg && vocab_path) {
        cli_error("tokenize", "-m and --vocab-llama2c exclude each other");
        return 2;
    }

    size_t len = 0;
    char *owned = NULL;
    if (text_file) {
        owned = read_text(text_file, &len);
        if (!owned) return 2;
        text = owned;
    } else {
        len = strlen(text);
    }

    skv_vocab *own_vocab = NULL;
    const skv_vocab *v;
    int rc = 1;
    int32_t *tokens = NULL;
    skv_err err = {0};
    if (vocab_path) {
        own_vocab = skv_vocab_load_llama2c(vocab_path, (int)vocab_n, &err);
    } else {
        const char *path = cli_model_path("tokenize", model_arg);
        if (!path) {
            rc = 2;
            goto done;
        }
        own_vocab = skv_vocab_load(path, &err);
    }
    if (!own_vocab) {
        cli_error("tokenize", "%s", err.msg);
        rc = err.status == SKV_ERR_NOMEM || err.status == SKV_ERR_IO ? 1 : 2;
        goto done;
    }
    v = own_vocab;

    /* A llama2.c vocabulary asks for BOS (the default of skv_vocab_add_bos). */
    int need = skv_tokenize_ex(v, text, len, bos, special, NULL, 0);
    if (need <= 0 && need != INT_MIN) {
        tokens = malloc(sizeof *tokens * (size_t)(-need + 1));
        need = tokens ? skv_tokenize_ex(v, text, len, bos, special, tokens, -need) : INT_MIN;
    }
    if (need < 0) {
        cli_error("tokenize", "the text (%zu bytes) could not be tokenized (too long?)", len);
        goto done;
    }
    int n = need;
    if (json) {
        printf("{\"tokens\":[");
        for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", (int)tokens[i]);
        printf("],\"pieces\":[");
        for (int i = 0; i < n; i++) {
            const char *p = skv_vocab_piece(v, tokens[i]);
            if (i) putchar(',');
            cli_json_string(stdout, p, strlen(p));
        }
        printf("]}\n");
    } else {
        for (int i = 0; i < n; i++) {
            const char *p = skv_vocab_piece(v, tokens[i]);
            printf("%d\t", (int)tokens[i]);
            cli_json_string(stdout, p, strlen(p));
            putchar('\n');
        }
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(tokens);
    skv_vocab_free(own_vocab);
    free(owned);
    return rc;
}
