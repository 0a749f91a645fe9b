/* prompt.c — the prompt and sample building shared by passkey.c and tasks.c (see prompt.h). */
#include "eval/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char skv_prompt_intro[] = "There is an important piece of information hidden inside a lot "
                                "of irrelevant text. Find it and remember it. I will ask you "
                                "about it.";
const char *const skv_prompt_fillers[5] = {" The grass is green.", " The sky is blue.",
                                           " The sun is yellow.", " Here we go.",
                                           " There and back again."};

int skv_prompt_tokenize(const skv_vocab *vocab, const char *text, size_t len, const char *what,
                        int32_t **toks, skv_err *err) {
    if (len > (size_t)1 << 28) {
        skv_err_set(err, SKV_ERR_INVALID_ARG, "%s prompt too long", what);
        return -1;
    }
    int cap = (int)len + 3; /* a byte each at most, BOS, EOS and SentencePiece's leading space */
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory tokenizing a %s prompt", what);
        return -1;
    }
    int n = skv_tokenize_ex(vocab, text, len, true, false, t, cap); /* BOS as the vocab asks */
    if (n < 1) {
        free(t);
        skv_err_set(err, SKV_ERR_STATE, "the tokenizer failed on a %s prompt", what);
        return -1;
    }
    *toks = t;
    return n;
}

int skv_prompt_fit(int lo, int n_tokens, skv_prompt_count_fn count, const void *arg, skv_err *err) {
    int hi = lo + 1;
    for (;;) {
        int n = count(arg, hi, err);
        if (n < 0) return -1;
        if (n > n_tokens || hi > 100000) break;
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        int n = count(arg, mid, err);
        if (n < 0) return -1;
        if (n <= n_tokens)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

skv_status skv_prompt_add_sample(skv_eval_dataset *out, const char *what, int index,
                                 int depth_index, double depth, int32_t *tokens, int n,
                                 int n_tokens, int window, const char *key, skv_err *err) {
    if (n > n_tokens || n < 2 * window) {
        free(tokens);
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "the %s prompt of sample %d at depth %g has %d tokens, outside "
                           "[%d, %d]: raise the prompt budget or lower --window",
                           what, index, depth, n, 2 * window, n_tokens);
    }
    skv_eval_sample *s = &out->samples[out->n++];
    s->index = index;
    s->tokens = tokens;
    s->n_prefix = n - window;
    s->n_window = window;
    s->n_cont = 0;
    s->depth_index = depth_index;
    s->depth = depth;
    snprintf(s->key, sizeof s->key, "%s", key);
    return SKV_OK;
}
