/* data.c — where eval's samples come from: a JSONL file, or sequences the model samples
 * itself; how each is cut into prefix | window | continuation; which shard gets which. */
#include "eval/eval.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_eval_dataset_free(skv_eval_dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) free(d->samples[i].tokens);
    free(d->samples);
    for (int i = 0; i < d->n_warnings; i++) free(d->warnings[i]);
    free(d->warnings);
    memset(d, 0, sizeof *d);
}

static skv_status add_warning(skv_eval_dataset *d, const char *msg, skv_err *err) {
    char **w = realloc(d->warnings, (size_t)(d->n_warnings + 1) * sizeof *w);
    if (!w) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    d->warnings = w;
    size_t n = strlen(msg);
    char *c = malloc(n + 1);
    if (!c) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    memcpy(c, msg, n + 1);
    d->warnings[d->n_warnings++] = c;
    return SKV_OK;
}

/* A part's size: count (>= 1) or fraction (0, 1) of n_eff. */
static long part_size(double spec, int n_eff) {
    if (spec >= 1.0) return (long)spec;
    return skv_round_half_even(spec * n_eff);
}

bool skv_eval_cut(const int32_t *tokens, int n, const skv_eval_split *split, int n_ctx, int greedy,
                  skv_eval_sample *s, char *why, size_t why_size) {
    /* fractions and "the rest" are taken of the tokens that fit beside the greedy run */
    int room = n_ctx - greedy;
    bool ctx_bound = room < n; /* the context, not the sample, limits the parts */
    int n_eff = ctx_bound ? room : n;
    if (n_eff < 0) n_eff = 0;
    long W = part_size(split->window, n_eff);
    long C = part_size(split->cont, n_eff);
    long T = split->prefix > 0 ? part_size(split->prefix, n_eff) : n_eff - W - C;
    /* fractions that add up to 1 may round one token over: the prefix gives it back */
    if (split->prefix > 0 && split->prefix < 1 && T + W + C > n_eff && T + W + C <= n_eff + 2)
        T = n_eff - W - C;
    long greedy_room = C > greedy ? C : greedy;
    /* The messages name the limit that failed and the options that move it, and print no
     * negative count: with --prefix rest a short sample gives T < 0. */
    char of[160], has[160];
    if (ctx_bound) {
        snprintf(of, sizeof of,
                 "of the %d tokens the model's context of %d leaves beside --greedy %d", n_eff,
                 n_ctx, greedy);
        snprintf(has, sizeof has, "the model's context of %d leaves %d beside --greedy %d", n_ctx,
                 n_eff, greedy);
    } else {
        snprintf(of, sizeof of, "of the sample's %d tokens", n);
        snprintf(has, sizeof has, "the sample has %d", n);
    }
    const char *lead = ctx_bound ? "sample does not fit" : "sample too short";
    if (ctx_bound && room < 3) {
        snprintf(why, why_size,
                 "%s: --greedy %d leaves %d of the model's context of %d for prefix, window and "
                 "continuation (at least 1 token each): lower --greedy",
                 lead, greedy, room > 0 ? room : 0, n_ctx);
        return false;
    }
    if (W < 1 || C < 1 || (split->prefix > 0 && T < 1)) { /* a fraction rounded to 0 tokens */
        const char *opt = W < 1 ? "--window" : C < 1 ? "--continuation" : "--prefix";
        double spec = W < 1 ? split->window : C < 1 ? split->cont : split->prefix;
        snprintf(why, why_size, "%s: %s %g %s is 0 tokens: give %s as a token count", lead, opt,
                 spec, of, opt);
        return false;
    }
    if (T < 1) { /* --prefix rest: nothing left */
        snprintf(why, why_size,
                 "%s: window %ld + continuation %ld leave no prefix: the three parts need at least "
                 "%ld tokens and %s: lower %s--window or --continuation",
                 lead, W, C, W + C + 1, has, ctx_bound ? "--greedy, " : "");
        return false;
    }
    if (T + W + C > n) {
        snprintf(why, why_size,
                 "sample too short: prefix %ld + window %ld + continuation %ld = %ld tokens, the "
                 "sample has %d: lower --prefix, --window or --continuation",
                 T, W, C, T + W + C, n);
        return false;
    }
    if (T + W + greedy_room > n_ctx) {
        snprintf(why, why_size,
                 "sample too long for the model's context of %d: prefix %ld + window %ld + "
                 "max(continuation %ld, greedy %d) = %ld tokens: lower --prefix, --window or %s",
                 n_ctx, T, W, C, greedy, T + W + greedy_room,
                 C > greedy ? "--continuation" : "--greedy");
        return false;
    }
    int total = (int)(T + W + C);
    s->tokens = malloc((size_t)total * sizeof *s->tokens);
    if (!s->tokens) {
        snprintf(why, why_size, "out of memory");
        return false;
    }
    memcpy(s->tokens, tokens, (size_t)total * sizeof *s->tokens);
    s->n_prefix = (int)T;
    s->n_window = (int)W;
    s->n_cont = (int)C;
    return true;
}

/* Tokenizes len bytes (with the vocabulary's BOS when bos) into a malloc'd array; -1 on
 * failure. */
static int tokenize_alloc(const skv_vocab *vocab, const char *text, size_t len, bool bos,
                          int32_t **out) {
    if (len > (size_t)1 << 28) return -1;
    int cap = (int)len + 2; /* at most one token per byte, plus BOS */
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return -1;
    /* BOS (and EOS) only where the vocabulary asks for them: Qwen's and GPT-2's add none */
    int n = skv_tokenize_ex(vocab, text, len, bos, false, t, cap);
    if (n < 0) {
        free(t);
        return -1;
    }
    *out = t;
    return n;
}

/* Reads a whole file into a NUL-terminated buffer. */
static char *read_all(const char *path, size_t *size, skv_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        skv_err_set(err, SKV_ERR_IO, "cannot open data file %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap > ((size_t)1 << 34)) {
                free(buf);
                buf = NULL;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    const int ioerr = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!buf) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory reading %s", path);
        return NULL;
    }
    if (ioerr) {
        free(buf);
        skv_err_set(err, SKV_ERR_IO, "cannot read data file %s: %s", path, strerror(ioerr));
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

/* Tokens of a "messages" conversation: formatted with the model's chat template (the
 * assistant's header appended unless the last message is the assistant's), special tokens
 * parsed, no BOS added (the template writes it). Returns the count, -1 after filling err. */
static int chat_tokens(const skv_json *msgs, const char *path, int line, const skv_vocab *vocab,
                       const char *tmpl, int32_t **out, skv_err *err) {
    int n = msgs->n;
    if (n < 1) {
        skv_err_set(err, SKV_ERR_FORMAT, "%s:%d: \"messages\" is empty", path, line);
        return -1;
    }
    skv_chat_message *m = malloc((size_t)n * sizeof *m);
    if (!m) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const skv_json *e = &msgs->items[i];
        const skv_json *r = e->type == SKV_JSON_OBJECT ? skv_json_get(e, "role") : NULL;
        const skv_json *c = e->type == SKV_JSON_OBJECT ? skv_json_get(e, "content") : NULL;
        if (!r || !c || r->type != SKV_JSON_STRING || c->type != SKV_JSON_STRING ||
            strlen(c->str) != c->str_len) {
            free(m);
            skv_err_set(err, SKV_ERR_FORMAT,
                        "%s:%d: \"messages\"[%d] is not an object with string \"role\" and "
                        "\"content\" (without NUL bytes)",
                        path, line, i);
            return -1;
        }
        m[i].role = r->str;
        m[i].content = c->str;
    }
    bool gen = strcmp(m[n - 1].role, "assistant") != 0;
    skv_err cerr = {0};
    int need = skv_chat_format(vocab, tmpl, m, n, gen, NULL, 0, &cerr);
    char *text = NULL;
    if (need != INT_MIN) {
        int size = (need < 0 ? -need : need) + 1;
        text = malloc((size_t)size);
        need = text ? skv_chat_format(vocab, tmpl, m, n, gen, text, size, &cerr) : INT_MIN;
    }
    free(m);
    if (need < 0) {
        free(text);
        skv_err_set(err, cerr.status == SKV_OK ? SKV_ERR_NOMEM : cerr.status, "%s:%d: %s%s", path,
                    line, cerr.msg[0] ? cerr.msg : "out of memory",
                    !tmpl && cerr.status == SKV_ERR_UNSUPPORTED ? " (--chat-template NAME)" : "");
        return -1;
    }
    int cap = need + 2;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    int k = t ? skv_tokenize_ex(vocab, text, (size_t)need, false, true, t, cap) : INT_MIN;
    free(text);
    if (k < 0) {
        free(t);
        skv_err_set(err, SKV_ERR_NOMEM, "%s:%d: could not tokenize the conversation", path, line);
        return -1;
    }
    *out = t;
    return k;
}

/* Builds the sample of one parsed line; false + why when it does not fit, status on errors. */
static skv_status line_sample(const skv_json *v, const char *path, int line, const skv_vocab *vocab,
                              const skv_eval_split *split, int n_ctx, int greedy,
                              skv_eval_sample *s, bool *ok, char *why, size_t why_size,
                              skv_err *err) {
    const skv_json *text = skv_json_get(v, "text");
    const skv_json *toks = skv_json_get(v, "tokens");
    const skv_json *ctxv = skv_json_get(v, "context");
    const skv_json *msgs = skv_json_get(v, "messages");
    if (text && text->type != SKV_JSON_STRING) text = NULL;
    if (toks && toks->type != SKV_JSON_ARRAY) toks = NULL;
    if (msgs && msgs->type != SKV_JSON_ARRAY) msgs = NULL;
    *ok = false;
    if (msgs && !text && !toks) {
        int32_t *t = NULL;
        int n = chat_tokens(msgs, path, line, vocab, split->chat_template, &t, err);
        if (n < 0) return err ? err->status : SKV_ERR_FORMAT;
        *ok = skv_eval_cut(t, n, split, n_ctx, greedy, s, why, why_size);
        free(t);
        return SKV_OK;
    }
    if (text) {
        int32_t *t = NULL;
        int n = tokenize_alloc(vocab, text->str, text->str_len, true, &t);
        if (n < 0)
            return skv_err_set(err, SKV_ERR_NOMEM, "%s:%d: could not tokenize the text", path,
                               line);
        *ok = skv_eval_cut(t, n, split, n_ctx, greedy, s, why, why_size);
        free(t);
        return SKV_OK;
    }
    if (toks) {
        int n = toks->n;
        int32_t *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
        if (!t) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        int n_vocab = skv_vocab_n_tokens(vocab);
        for (int i = 0; i < n; i++) {
            const skv_json *e = &toks->items[i];
            if (e->type != SKV_JSON_NUMBER || e->number != floor(e->number) || e->number < 0 ||
                e->number >= n_vocab) {
                free(t);
                return skv_err_set(err, SKV_ERR_FORMAT,
                                   "%s:%d: \"tokens\"[%d] is not a token id in [0, %d)", path, line,
                                   i, n_vocab);
            }
            t[i] = (int32_t)e->number;
        }
        *ok = skv_eval_cut(t, n, split, n_ctx, greedy, s, why, why_size);
        free(t);
        return SKV_OK;
    }
    /* explicit parts: context with BOS, window and continuation as they follow it */
    const skv_json *parts[3] = {ctxv, skv_json_get(v, "window"), skv_json_get(v, "continuation")};
    int32_t *pt[3] = {0};
    int pn[3] = {0};
    for (int i = 0; i < 3; i++) {
        pn[i] = tokenize_alloc(vocab, parts[i]->str, parts[i]->str_len, i == 0, &pt[i]);
        if (pn[i] < 0) {
            for (int j = 0; j < i; j++) free(pt[j]);
            return skv_err_set(err, SKV_ERR_NOMEM, "%s:%d: could not tokenize the text", path,
                               line);
        }
    }
    int total = pn[0] + pn[1] + pn[2];
    int32_t *all = malloc((size_t)(total > 0 ? total : 1) * sizeof *all);
    if (!all) {
        for (int i = 0; i < 3; i++) free(pt[i]);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    int o = 0;
    for (int i = 0; i < 3; i++) {
        memcpy(all + o, pt[i], (size_t)pn[i] * sizeof *all);
        o += pn[i];
        free(pt[i]);
    }
    skv_eval_split exact = {(double)pn[0], (double)pn[1], (double)pn[2], NULL};
    if (pn[0] < 1 || pn[1] < 1 || pn[2] < 1) {
        snprintf(why, why_size,
                 "sample too short: context %d, window %d, continuation %d tokens (each must "
                 "be >= 1)",
                 pn[0], pn[1], pn[2]);
        free(all);
        return SKV_OK;
    }
    /* the line sets the parts, not --prefix/--window/--continuation: say so when they overflow */
    int room = pn[2] > greedy ? pn[2] : greedy;
    if ((long)pn[0] + pn[1] + room > n_ctx) {
        snprintf(why, why_size,
                 "sample too long for the model's context of %d: context %d + window %d + "
                 "max(continuation %d, greedy %d) = %ld tokens: shorten the line's %s",
                 n_ctx, pn[0], pn[1], pn[2], greedy, (long)pn[0] + pn[1] + room,
                 pn[2] >= greedy ? "parts" : "context or window, or lower --greedy");
        free(all);
        return SKV_OK;
    }
    *ok = skv_eval_cut(all, total, &exact, n_ctx, greedy, s, why, why_size);
    free(all);
    return SKV_OK;
}

skv_status skv_eval_load_jsonl(const char *path, const skv_vocab *vocab,
                               const skv_eval_split *split, int n_ctx, int greedy, int max_samples,
                               int shard_k, int shard_n, skv_eval_dataset *out, skv_err *err) {
    memset(out, 0, sizeof *out);
    size_t size;
    char *buf = read_all(path, &size, err);
    if (!buf) return err ? err->status : SKV_ERR_IO;
    skv_status st = SKV_OK;
    int line = 0, index = 0, cap = 0;
    /* a UTF-8 byte order mark (Windows editors write one) is not part of the first line */
    size_t pos = size >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3) ? 3 : 0;
    while (pos < size) {
        size_t end = pos;
        while (end < size && buf[end] != '\n') end++;
        line++;
        const char *ls = buf + pos;
        size_t ln = end - pos;
        pos = end + 1;
        if (blank(ls, ln)) continue;
        if (max_samples > 0 && index >= max_samples) break;
        skv_err jerr = {0};
        skv_json *v = skv_json_parse(ls, ln, &jerr);
        if (!v) {
            st = skv_err_set(err, SKV_ERR_FORMAT, "%s:%d: bad JSON: %s", path, line, jerr.msg);
            goto done;
        }
        const skv_json *t = skv_json_get(v, "text"), *tk = skv_json_get(v, "tokens");
        const skv_json *c = skv_json_get(v, "context"), *w = skv_json_get(v, "window"),
                       *co = skv_json_get(v, "continuation"), *ms = skv_json_get(v, "messages");
        bool shape_ok = v->type == SKV_JSON_OBJECT &&
                        ((t && t->type == SKV_JSON_STRING) || (tk && tk->type == SKV_JSON_ARRAY) ||
                         (ms && ms->type == SKV_JSON_ARRAY) ||
                         (c && w && co && c->type == SKV_JSON_STRING &&
                          w->type == SKV_JSON_STRING && co->type == SKV_JSON_STRING));
        if (!shape_ok) {
            skv_json_free(v);
            st = skv_err_set(err, SKV_ERR_FORMAT,
                             "%s:%d: expected an object with a string \"text\", an array "
                             "\"tokens\", an array \"messages\" of {\"role\", \"content\"}, "
                             "or the strings \"context\", \"window\" and \"continuation\"",
                             path, line);
            goto done;
        }
        int i = index++;
        if (!skv_eval_in_shard(i, shard_k, shard_n)) {
            skv_json_free(v);
            continue;
        }
        if (out->n == cap) {
            int nc = cap ? cap * 2 : 16;
            skv_eval_sample *ns = realloc(out->samples, (size_t)nc * sizeof *ns);
            if (!ns) {
                skv_json_free(v);
                st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
                goto done;
            }
            out->samples = ns;
            cap = nc;
        }
        skv_eval_sample *s = &out->samples[out->n];
        memset(s, 0, sizeof *s);
        s->index = i;
        s->line = line;
        bool ok;
        char why[512] = "";
        st = line_sample(v, path, line, vocab, split, n_ctx, greedy, s, &ok, why, sizeof why, err);
        skv_json_free(v);
        if (st) goto done;
        if (ok) {
            out->n++;
        } else {
            out->n_skipped++;
            char msg[1024];
            snprintf(msg, sizeof msg, "%s:%d: skipped: %s", path, line, why);
            if ((st = add_warning(out, msg, err))) goto done;
        }
    }
    out->n_total = index;
done:
    free(buf);
    if (st) skv_eval_dataset_free(out);
    return st;
}

skv_status skv_eval_generate(const skv_model *model, const skv_eval_gen_params *gp,
                             const skv_eval_split *split, int greedy, int shard_k, int shard_n,
                             skv_eval_dataset *out, skv_err *err) {
    memset(out, 0, sizeof *out);
    const skv_hparams *hp = skv_model_hparams(model);
    int n_ctx = gp->n_ctx > 0 ? gp->n_ctx : hp->n_ctx_train;
    int n_total = gp->n_total;
    if (gp->n_samples < 1 || n_total < 3 || n_total > n_ctx)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "cannot generate %d samples of %d tokens with a context of %d",
                           gp->n_samples, n_total, n_ctx);
    out->n_total = gp->n_samples;
    out->samples = calloc((size_t)gp->n_samples, sizeof *out->samples);
    int32_t *toks = malloc((size_t)n_total * sizeof *toks);
    float *logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    skv_context_params cp = skv_context_default_params();
    cp.n_ctx = gp->n_ctx;
    cp.n_threads = gp->n_threads;
    cp.kv_type = gp->kv_type;
    skv_context *ctx = NULL;
    skv_sampler *smp = NULL;
    skv_status st = SKV_OK;
    if (!out->samples || !toks || !logits) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory generating samples");
        goto done;
    }
    /* every sample has n_total tokens and cuts alike: a cut that fails is refused once, before
     * the generating, not skipped sample by sample */
    memset(toks, 0, (size_t)n_total * sizeof *toks);
    skv_eval_sample probe = {0};
    char why[512] = "";
    if (!skv_eval_cut(toks, n_total, split, n_ctx, greedy, &probe, why, sizeof why)) {
        bool oom = !strcmp(why, "out of memory");
        st = skv_err_set(err, oom ? SKV_ERR_NOMEM : SKV_ERR_INVALID_ARG,
                         "generated samples of %d tokens: %s", n_total, why);
        goto done;
    }
    free(probe.tokens);
    ctx = skv_context_new(model, &cp, err);
    if (!ctx) {
        st = err ? err->status : SKV_ERR_STATE;
        goto done;
    }
    const skv_vocab *vocab = skv_model_vocab(model);
    for (int i = 0; i < gp->n_samples; i++) {
        if (!skv_eval_in_shard(i, shard_k, shard_n)) continue;
        skv_context_reset(ctx);
        skv_sampler_params sp = skv_sampler_default_params();
        sp.temperature = 1.0f;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.seed = (uint64_t)i;
        skv_sampler_free(smp);
        smp = skv_sampler_new(&sp, err);
        if (!smp) {
            st = err ? err->status : SKV_ERR_STATE;
            goto done;
        }
        toks[0] = skv_vocab_bos(vocab);
        for (int t = 1; t < n_total; t++) {
            if ((st = skv_forward(ctx, &toks[t - 1], 1, SKV_LOGITS_LAST, logits, err))) goto done;
            toks[t] = skv_sampler_sample(smp, logits, hp->n_vocab);
        }
        skv_eval_sample *s = &out->samples[out->n];
        memset(s, 0, sizeof *s);
        s->index = i;
        if (skv_eval_cut(toks, n_total, split, n_ctx, greedy, s, why, sizeof why)) {
            out->n++;
        } else {
            out->n_skipped++;
            char msg[600];
            snprintf(msg, sizeof msg, "generated sample %d: skipped: %s", i, why);
            if ((st = add_warning(out, msg, err))) goto done;
        }
    }
done:
    skv_sampler_free(smp);
    skv_context_free(ctx);
    free(toks);
    free(logits);
    if (st) skv_eval_dataset_free(out);
    return st;
}
