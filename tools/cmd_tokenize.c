/* cmd_tokenize.c — `sparsekv tokenize`: the token ids and pieces of a text, with a model's
 * vocabulary or a llama2.c tokenizer.bin. */
#include "cli.h"
#include "cli_args.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: sparsekv tokenize [-m FILE | --vocab-llama2c FILE N] (-p TEXT | -f FILE)\n"
        "                         [--json] [--no-bos] [--special]\n\n"
        "Encodes TEXT (or the bytes of FILE) with the vocabulary of a GGUF FILE: a\n"
        "model or a vocab-only file such as llama.cpp's ggml-vocab-*.gguf\n"
        "(default %s), or of a llama2.c tokenizer.bin\n"
        "holding N tokens (N = 0: every token in the file).\n"
        "SentencePiece (tokenizer.ggml.model llama) and byte-level BPE (gpt2)\n"
        "vocabularies.\n"
        "Prints one line per token, \"id<TAB>piece\", the raw piece as a JSON string\n"
        "(U+2581 for spaces in SentencePiece, the GPT-2 byte alphabet in byte-level\n"
        "BPE: \"\u0120\" is a space); --json prints {\"tokens\":[...],\"pieces\":[...]} instead.\n"
        "BOS (and EOS) are added as the vocabulary asks (tokenizer.ggml.add_bos_token)\n"
        "unless --no-bos. --special: the text of special tokens (<|im_start|>,\n"
        "<|eot_id|>, <s>...) becomes those tokens; without it such text is ordinary text.\n",
        SKV_DEFAULT_MODEL);
}

/* Whole file into a malloc'd buffer; NULL (and a message) on failure. */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("tokenize", "cannot open '%s': %s", path, strerror(errno));
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
    const int bad = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!buf || bad) {
        free(buf);
        cli_error("tokenize", "cannot read '%s': %s", path,
                  bad ? strerror(bad) : "too large for memory");
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_arg = NULL, *vocab_path = NULL, *text = NULL, *text_file = NULL;
    long vocab_n = 0;
    bool json = false, bos = true, special = false;
    enum { O_JSON = CLI_LONG, O_NO_BOS, O_SPECIAL, O_VOCAB };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"prompt", 'p', true, NULL, false},
        {"file", 'f', true, NULL, false},
        {"json", O_JSON, false, NULL, false},
        {"no-bos", O_NO_BOS, false, NULL, false},
        {"special", O_SPECIAL, false, NULL, false},
        {"vocab-llama2c", O_VOCAB, true, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, "tokenize", argc, argv, opts, NULL, NULL)) return 2;
    const char *val;
    for (int key; (key = cli_args_next(&args, &val)) != CLI_DONE;) {
        switch (key) {
        case CLI_FAIL:
            return 2;
        case CLI_OPERAND:
            return cli_args_extra(&args, val), 2;
        case 'h':
            usage(stdout);
            return 0;
        case O_JSON:
            json = true;
            break;
        case O_NO_BOS:
            bos = false;
            break;
        case O_SPECIAL:
            special = true;
            break;
        case 'm':
            model_arg = val;
            break;
        case 'p':
            text = val;
            break;
        case 'f':
            text_file = val;
            break;
        case O_VOCAB: /* --vocab-llama2c FILE N: N is the next argument, whatever it looks like */
            vocab_path = val;
            if (!cli_args_take(&args, &val)) {
                cli_error("tokenize", "--vocab-llama2c needs FILE N (the vocabulary size)");
                return 2;
            }
            if (!cli_parse_int(val, 0, INT_MAX, &vocab_n)) {
                cli_error("tokenize", "--vocab-llama2c: N must be a token count >= 0, not '%s'",
                          val);
                return 2;
            }
            break;
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
        rc = err.status == SKV_ERR_NOMEM ? 1 : 2; /* as a model that does not load */
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
    if (n >= 2 && tokens[0] == skv_vocab_bos(v) && tokens[1] == tokens[0])
        fprintf(stderr, "sparsekv tokenize: warning: the text starts with BOS and another was "
                        "added: two BOS tokens (--no-bos, or drop the text's)\n");
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
