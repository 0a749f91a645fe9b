/* cmd_logits.c — `sparsekv logits`: float32 logits of every prompt position, for comparing
 * engines. The file holds row-major [n_tokens, n_vocab] floats and nothing else. */
#include "cli.h"
#include "cli_args.h"
#include "eval/eval.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv logits [-m MODEL] (-p PROMPT | --tokens ID,ID,... |\n"
               "                       --tokens-file FILE) -o FILE [-t THREADS]\n"
               "                       [--kv-type f32|f16|q8_0] [--ctx N] [--no-bos]\n\n"
               "Runs the prompt in one batch and writes float32 logits for every position,\n"
               "row-major [n_tokens, n_vocab], to FILE (native little-endian, no header).\n"
               "Prints the token ids as a JSON array on stdout. --tokens-file reads the ids\n"
               "from a file: decimal numbers separated by anything else (a JSON array such as\n"
               "the fixtures' <name>.ids.json works), or, where the file is a JSON object\n"
               "(such as reference_logits.json), its \"tokens\" array, every element a JSON\n"
               "integer from 0 to 2^31-1; elsewhere a number that is no plain decimal token\n"
               "id (2.5, -2, 1e3) is an error. Token ids are used as given (no BOS); a\n"
               "PROMPT gets BOS when the vocabulary asks for it (tokenizer.ggml.add_bos_token;\n"
               "--no-bos: never). FILE is replaced if it exists. --ctx N sizes the context\n"
               "(default: the model's training length; for a LongRoPE model it chooses the\n"
               "RoPE factors, short up to the model's original length, long past it).\n");
}

/* The ids a file holds: where it is a JSON object (the fixtures' reference_logits.json, whose
 * other numbers are not ids), its top-level "tokens" array, parsed as JSON; else every number in
 * it ("[1, 2,\n3]" -> 1 2 3). A word holding a digit (a run of letters, digits, '.', '_', '+' and
 * '-') must be a plain decimal id: "2.5", "-2", "1e3" or "v2" is an error, not ids read apart.
 * Returns the count, or -1 with why (a message naming what was wrong) when the file does not
 * read, holds such a word or a number above INT32_MAX, holds no number, or has a "tokens" key
 * that no flat array follows. */
/* The "tokens" array of a JSON object, every element an integer id from 0 to INT32_MAX. */
static int read_ids_json(const char *text, size_t len, int32_t **out, char *why, size_t why_size) {
    skv_err err = {0};
    skv_json *j = skv_json_parse(text, len, &err);
    if (!j) {
        snprintf(why, why_size, "not JSON: %.120s", err.msg);
        return -1;
    }
    const skv_json *a = skv_json_get(j, "tokens");
    int n = -1;
    if (!a || a->type != SKV_JSON_ARRAY || a->n == 0) {
        snprintf(why, why_size, "a JSON object needs a \"tokens\" array of ids");
    } else {
        int32_t *ids = malloc((size_t)a->n * sizeof *ids);
        n = ids ? a->n : -1;
        if (!ids) snprintf(why, why_size, "out of memory");
        for (int i = 0; ids && i < a->n; i++) {
            const skv_json *e = &a->items[i];
            if (e->type != SKV_JSON_NUMBER || e->number < 0 || e->number > INT32_MAX ||
                e->number != (double)(int64_t)e->number) {
                snprintf(why, why_size,
                         "\"tokens\"[%d] is not a token id (an integer from 0 to %d)", i,
                         INT32_MAX);
                free(ids);
                ids = NULL;
                n = -1;
                break;
            }
            ids[i] = (int32_t)e->number;
        }
        if (ids) *out = ids;
    }
    skv_json_free(j);
    return n;
}

static int read_ids_file(const char *path, int32_t **out, char *why, size_t why_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_size, "cannot open it: %s", strerror(errno));
        return -1;
    }
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *bigger = cap < ((size_t)1 << 30) ? realloc(buf, 2 * cap + 1) : NULL;
            if (!bigger) {
                free(buf);
                buf = NULL;
            }
            buf = bigger, cap *= 2;
        }
    }
    const int read_errno = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!buf || read_errno) {
        snprintf(why, why_size, "cannot read it: %s",
                 buf ? strerror(read_errno) : "too large or out of memory");
        free(buf);
        return -1;
    }
    buf[len] = 0;
    const char *p = buf, *end = buf + len;
    const char *first = buf + (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3) ? 3 : 0);
    while (*first == ' ' || *first == '\t' || *first == '\n' || *first == '\r') first++;
    if (*first == '{') { /* a JSON object: its "tokens" array, read as JSON */
        const int n = read_ids_json(first, len - (size_t)(first - buf), out, why, why_size);
        free(buf);
        return n;
    }
    int n = 0, idcap = 64;
    int32_t *ids = malloc((size_t)idcap * sizeof *ids);
    bool bad = !ids;
    if (bad) snprintf(why, why_size, "out of memory");
    while (!bad && p < end) {
        const char *w = p; /* one word */
        bool digit = false, plain = true;
        while (p < end && (isalnum((unsigned char)*p) || (*p && strchr("._+-", *p)))) {
            digit |= isdigit((unsigned char)*p) != 0;
            plain &= isdigit((unsigned char)*p) != 0;
            p++;
        }
        if (p == w) { /* a separator */
            p++;
            continue;
        }
        if (!digit) continue; /* a word of text, no number in it */
        int64_t v = 0;
        for (const char *c = w; plain && c < p && v <= INT32_MAX; c++) v = v * 10 + (*c - '0');
        if (!plain || v > INT32_MAX) {
            snprintf(why, why_size, "'%.*s' is not a token id (a decimal number from 0 to %d)",
                     (int)(p - w < 40 ? p - w : 40), w, INT32_MAX);
            bad = true;
            break;
        }
        if (n == idcap) {
            int32_t *bigger = realloc(ids, (size_t)(idcap *= 2) * sizeof *ids);
            if (!bigger) {
                snprintf(why, why_size, "out of memory");
                bad = true;
                break;
            }
            ids = bigger;
        }
        ids[n++] = (int32_t)v;
    }
    free(buf);
    if (!bad && n == 0) snprintf(why, why_size, "it holds no token ids");
    if (bad || n == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    return n;
}

/* "1,2,3" -> ids; returns count or -1. */
static int parse_ids(const char *s, int32_t **out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    while (ids && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || (*end && *end != ',')) break;
        if (n == cap) {
            int32_t *bigger = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!bigger) break;
            ids = bigger;
        }
        ids[n++] = (int32_t)v;
        s = *end ? end + 1 : end;
        if (!*s) {
            *out = ids;
            return n;
        }
    }
    free(ids);
    return -1;
}

int cmd_logits(int argc, char **argv) {
    const char *model_arg = NULL, *prompt = NULL, *ids_arg = NULL, *out_path = NULL,
               *ids_file = NULL;
    long threads = 0;
    bool bos = true;
    skv_type kv_type = SKV_TYPE_F32;
    int n_ctx = 0;
    enum { O_NO_BOS = CLI_LONG, O_TOKENS, O_TOKENS_FILE, O_KV_TYPE, O_CTX };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"prompt", 'p', true, NULL, false},
        {"output", 'o', true, NULL, false},
        {"threads", 't', true, NULL, false},
        {"no-bos", O_NO_BOS, false, NULL, false},
        {"tokens", O_TOKENS, true, NULL, false},
        {"tokens-file", O_TOKENS_FILE, true, NULL, false},
        {"kv-type", O_KV_TYPE, true, NULL, false},
        {"ctx", O_CTX, true, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, "logits", argc, argv, opts, NULL, NULL)) return 2;
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
        case O_NO_BOS:
            bos = false;
            break;
        case O_CTX:
            if (!cli_parse_ctx("logits", val, &n_ctx)) return 2;
            break;
        case 'm':
            model_arg = val;
            break;
        case 'p':
            prompt = val;
            break;
        case O_TOKENS:
            ids_arg = val;
            break;
        case O_TOKENS_FILE:
            ids_file = val;
            break;
        case 'o':
            out_path = val;
            break;
        case 't':
            if (!cli_parse_threads("logits", val, &threads)) {
                return 2;
            }
            break;
        case O_KV_TYPE:
            if (!skv_type_from_name(val, &kv_type)) {
                cli_error("logits", "unknown kv type '%s'", val);
                return 2;
            }
            break;
        }
    }
    if (!cli_args_requires(&args, O_NO_BOS, 'p', "token ids are used as given")) return 2;
    if (!out_path || (!!prompt + !!ids_arg + !!ids_file) != 1) {
        cli_error("logits", "need -o FILE and exactly one of -p PROMPT, --tokens LIST or "
                            "--tokens-file FILE");
        return 2;
    }
    /* a directory, or a place with no directory, is said before the model runs */
    if (!cli_output_ok("logits", out_path, true)) return 2;
    int32_t *toks = NULL;
    int n = 0;
    if (ids_arg && (n = parse_ids(ids_arg, &toks)) <= 0) {
        cli_error("logits", "--tokens must be a comma-separated list of token ids");
        return 2;
    }
    char why[160] = "";
    if (ids_file && (n = read_ids_file(ids_file, &toks, why, sizeof why)) <= 0) {
        cli_error("logits", "--tokens-file '%s': %s", ids_file, why);
        return 2;
    }
    const char *path = cli_model_path("logits", model_arg);
    if (!path) {
        free(toks);
        return 2;
    }
    if (cli_same_file(out_path, path) || (ids_file && cli_same_file(out_path, ids_file))) {
        cli_error("logits", "-o %s is the %s: name another file", out_path,
                  cli_same_file(out_path, path) ? "model" : "--tokens-file");
        free(toks);
        return 2;
    }
    skv_model *model = cli_load_model("logits", path);
    if (!model) {
        free(toks);
        return cli_model_rc;
    }
    const skv_hparams *hp = skv_model_hparams(model);
    int rc = 1;
    skv_err err = {0};
    skv_context *ctx = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    char tmp[4200];
    if (prompt) {
        size_t len = strlen(prompt);
        toks = malloc((len + 2) * sizeof *toks);
        /* BOS (and EOS) as the vocabulary asks, as tokenize/generate/eval do, unless --no-bos */
        n = toks ? skv_tokenize_ex(skv_model_vocab(model), prompt, len, bos, false, toks,
                                   (int)len + 2)
                 : 0;
        if (n <= 0) {
            cli_error("logits", "the prompt gives no tokens");
            rc = 2;
            goto done;
        }
    }
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = (int)threads;
    cp.kv_type = kv_type;
    cp.n_ctx = n_ctx;
    cli_warn_ctx("logits", n_ctx, model);
    if (n_ctx > 0 && n > n_ctx) {
        cli_error("logits", "%d tokens do not fit in --ctx %d", n, n_ctx);
        rc = 2;
        goto done;
    }
    if (n_ctx == 0 && n > hp->n_ctx_train) { /* allowed (another engine may be compared) */
        cp.n_ctx = n;
        fprintf(stderr,
                "sparsekv logits: warning: %d tokens run past the model's context of %d "
                "(positions it was not trained on)\n",
                n, hp->n_ctx_train);
    }
    ctx = skv_context_new(model, &cp, &err);
    logits = malloc((size_t)n * hp->n_vocab * sizeof *logits);
    if (!ctx || !logits) {
        cli_error("logits", "%s", ctx ? "out of memory" : err.msg);
        goto done;
    }
    if (skv_forward(ctx, toks, n, SKV_LOGITS_ALL, logits, &err)) {
        cli_error("logits", "%s", err.msg);
        rc = err.status == SKV_ERR_INVALID_ARG ? 2 : 1;
        goto done;
    }
    /* a new or regular FILE: a temporary file beside it, renamed into place, so a failed write
     * leaves FILE as it was; anything else that exists (a FIFO, /dev/stdout, a device) is written
     * as it is (renaming over it would replace the node) */
    struct stat st;
    const bool direct = lstat(out_path, &st) == 0 && !S_ISREG(st.st_mode);
    if (direct)
        snprintf(tmp, sizeof tmp, "%s", out_path);
    else
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_path, (long)getpid());
    f = direct ? fopen(tmp, "wb") : skv_eval_create(tmp); /* the temporary follows no link */
    int e = f ? 0 : errno;
    const size_t count = (size_t)n * hp->n_vocab;
    if (f && fwrite(logits, sizeof *logits, count, f) != count) e = errno ? errno : EIO;
    if (f && fclose(f) != 0 && !e) e = errno;
    f = NULL;
    if (!e && !direct && rename(tmp, out_path) != 0) e = errno;
    if (e) {
        if (!direct) remove(tmp);
        cli_error("logits", "cannot write '%s': %s", out_path, strerror(e));
        goto done;
    }
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", toks[i]);
    printf("]\n");
    rc = 0;
done:
    if (f) fclose(f);
    free(toks);
    free(logits);
    skv_context_free(ctx);
    skv_model_free(model);
    return rc;
}
