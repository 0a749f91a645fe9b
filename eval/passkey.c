/* passkey.c — needle-in-a-haystack retrieval: a 5-digit key hidden at a chosen depth of
 * repeated filler text, then a question; the model must repeat the key. */
#include "eval/eval.h"
#include "eval/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_passkey_key(uint64_t seed, char key[16]) {
    skv_rng rng;
    skv_rng_seed(&rng, seed);
    unsigned v = 10000u + (unsigned)skv_rng_below(&rng, 90000u);
    snprintf(key, 16, "%05u", v);
}

void skv_passkey_prompt_free(skv_passkey_prompt *p) {
    if (!p) return;
    free(p->text);
    memset(p, 0, sizeof *p);
}

skv_status skv_passkey_make(const char *key, double depth, int n_filler, skv_passkey_prompt *out,
                            skv_err *err) {
    memset(out, 0, sizeof *out);
    if (!key || strlen(key) == 0 || strlen(key) >= sizeof out->key)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "the pass key must have 1 to 15 characters");
    for (const char *k = key; *k; k++)
        if (*k < '0' || *k > '9')
            return skv_err_set(err, SKV_ERR_INVALID_ARG, "the pass key '%s' is not all digits",
                               key);
    if (!(depth >= 0.0 && depth <= 1.0))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "passkey depth %g is not in [0, 1]", depth);
    if (n_filler < 0 || n_filler > 1000000)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "passkey filler count %d is out of range",
                           n_filler);
    char needle[96];
    snprintf(needle, sizeof needle, " The pass key is %s. Remember it.", key);
    const char question[] = " " SKV_PASSKEY_QUESTION;
    size_t nl = strlen(needle);
    size_t len = strlen(skv_prompt_intro) + nl + strlen(question);
    for (int i = 0; i < n_filler; i++) len += strlen(skv_prompt_fillers[i % 5]);
    char *t = malloc(len + 1);
    if (!t) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory building a passkey prompt");
    int before = (int)skv_round_half_even(depth * n_filler);
    size_t pos = 0;
    memcpy(t, skv_prompt_intro, strlen(skv_prompt_intro));
    pos += strlen(skv_prompt_intro);
    for (int i = 0; i <= n_filler; i++) {
        if (i == before) {
            out->needle_at = pos;
            memcpy(t + pos, needle, nl);
            pos += nl;
        }
        if (i < n_filler) {
            size_t fl = strlen(skv_prompt_fillers[i % 5]);
            memcpy(t + pos, skv_prompt_fillers[i % 5], fl);
            pos += fl;
        }
    }
    memcpy(t + pos, question, strlen(question));
    pos += strlen(question);
    t[pos] = 0;
    out->text = t;
    out->len = pos;
    out->n_filler = n_filler;
    out->n_before = before;
    snprintf(out->key, sizeof out->key, "%s", key);
    return SKV_OK;
}

bool skv_passkey_score(const char *output, size_t len, const char *key, char *found,
                       size_t found_size) {
    size_t i = 0;
    while (i < len && !(output[i] >= '0' && output[i] <= '9')) i++;
    size_t start = i;
    while (i < len && output[i] >= '0' && output[i] <= '9') i++;
    size_t n = i - start;
    if (found && found_size > 0) {
        size_t c = n < found_size - 1 ? n : found_size - 1;
        memcpy(found, output + start, c);
        found[c] = 0;
    }
    return n > 0 && key && strlen(key) == n && !memcmp(output + start, key, n);
}

static int prompt_tokens(const skv_vocab *vocab, const skv_passkey_prompt *p, int32_t **toks,
                         skv_err *err) {
    return skv_prompt_tokenize(vocab, p->text, p->len, "passkey", toks, err);
}

/* Tokens of the prompt with n_filler blocks (-1 on error). */
static int count_tokens(const void *vocab, int n_filler, skv_err *err) {
    skv_passkey_prompt p;
    if (skv_passkey_make("99999", 0.5, n_filler, &p, err)) return -1;
    int32_t *t = NULL;
    int n = prompt_tokens(vocab, &p, &t, err);
    skv_passkey_prompt_free(&p);
    free(t);
    return n;
}

skv_status skv_eval_passkey_dataset(const skv_vocab *vocab, int n_samples, const double *depths,
                                    int n_depths, int n_tokens, int window, int shard_k,
                                    int shard_n, skv_eval_dataset *out, skv_err *err) {
    memset(out, 0, sizeof *out);
    if (n_samples < 1 || n_depths < 1 || window < 1 || n_tokens < 2 * window)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "passkey needs samples >= 1, depths >= 1 and a prompt budget of at "
                           "least twice the window (%d tokens for a window of %d)",
                           n_tokens, window);
    out->n_total = n_samples * n_depths;
    size_t cap = (size_t)n_samples * (size_t)n_depths;
    out->samples = calloc(cap, sizeof *out->samples);
    if (!out->samples) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    /* one filler count for every prompt: the largest whose prompt fits n_tokens (token counts
     * grow with the filler and barely depend on the key or the depth) */
    skv_status st = SKV_OK;
    const int lo = skv_prompt_fit(0, n_tokens, count_tokens, vocab, err);
    if (lo < 0) goto fail_err;
    for (int i = 0; i < n_samples; i++) {
        if (!skv_eval_in_shard(i, shard_k, shard_n)) continue;
        char key[16];
        skv_passkey_key((uint64_t)i, key);
        for (int d = 0; d < n_depths; d++) {
            /* another key or depth can tokenize a token longer: then one block less */
            int32_t *t = NULL;
            int n = -1;
            for (int nf = lo; nf >= 0 && (n < 0 || n > n_tokens); nf--) {
                free(t);
                t = NULL;
                skv_passkey_prompt p;
                if ((st = skv_passkey_make(key, depths[d], nf, &p, err))) goto fail;
                n = prompt_tokens(vocab, &p, &t, err);
                skv_passkey_prompt_free(&p);
                if (n < 0) goto fail_err;
            }
            st = skv_prompt_add_sample(out, "passkey", i, d, depths[d], t, n, n_tokens, window, key,
                                       err);
            if (st) goto fail;
        }
    }
    return SKV_OK;
fail_err:
    st = err ? err->status : SKV_ERR_STATE;
fail:
    skv_eval_dataset_free(out);
    return st ? st : SKV_ERR_STATE;
}
