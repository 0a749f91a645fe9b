/* prompt.h — internal to eval/: the pieces the passkey dataset (passkey.c) and the retrieval
 * task datasets (tasks.c) build their prompts and samples from. */
#ifndef SKV_EVAL_PROMPT_H
#define SKV_EVAL_PROMPT_H

#include "eval/eval.h"

/* The passkey intro and its filler: filler sentence i is skv_prompt_fillers[i % 5]. */
extern const char skv_prompt_intro[];
extern const char *const skv_prompt_fillers[5];

/* BOS + text[len] into *toks (malloc'd; the caller frees): the token count, or -1 with err set.
 * what names the prompt in messages ("passkey", "task"). A byte never yields more than one
 * token, so len + 2 is always room enough. */
int skv_prompt_tokenize(const skv_vocab *vocab, const char *text, size_t len, const char *what,
                        int32_t **toks, skv_err *err);

/* The token count of a prompt of size `size` (-1 on error, err set). */
typedef int (*skv_prompt_count_fn)(const void *arg, int size, skv_err *err);

/* The largest size >= lo whose prompt has at most n_tokens tokens, for counts that grow with the
 * size: doubling from lo + 1 (up to past 100000), then bisection. lo itself is not counted: the
 * result is lo when no larger size fits. -1 on error (err set). */
int skv_prompt_fit(int lo, int n_tokens, skv_prompt_count_fn count, const void *arg, skv_err *err);

/* Appends sample (index, depth_index, depth) with tokens[n] (taken over: freed on error) and key
 * to out, whose samples have room for it, the last window tokens being the window. An error
 * names the `what` prompt when n is outside [2 * window, n_tokens]. */
skv_status skv_prompt_add_sample(skv_eval_dataset *out, const char *what, int index,
                                 int depth_index, double depth, int32_t *tokens, int n,
                                 int n_tokens, int window, const char *key, skv_err *err);

#endif
