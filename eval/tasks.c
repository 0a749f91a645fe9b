/* tasks.c — the retrieval tasks the sparsekv retrieval model was trained on (tools/train/data.py
 * writes the same text): key-value lookup and multi-needle. Both reuse the passkey machinery:
 * a sample's key is the 5-digit answer and skv_passkey_score grades the greedy output.
 *
 *   kv        "Here is a list of keys and values. Remember them." then n pairs " abc: NNNNN."
 *             (distinct 3-letter keys), then " What is the value of abc? The value of abc is";
 *             the asked pair is pair round_half_even(depth * (n - 1)).
 *   multikey  the passkey intro and filler with SKV_MULTIKEY_NEEDLES needles
 *             " The magic number for NAME is NNNNN." (distinct names) before filler sentence
 *             round_half_even(u * n_filler) (needles sharing a place in index order); the asked
 *             one has u = depth, the others a uniform u; then
 *             " What is the magic number for NAME? The magic number for NAME is".
 * Sample i draws everything from skv_rng seeded with SKV_TASK_SEED0 + i (the trainer's Python
 * generator never produces these streams). */
#include "eval/eval.h"
#include "eval/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKV_TASK_SEED0 0x7461736b00000000ull /* "task" */

static const char kv_intro[] = "Here is a list of keys and values. Remember them.";
static const char *const names[] = {"apple",  "river",  "tiger",  "cloud",  "stone",  "house",
                                    "candle", "garden", "silver", "rabbit", "forest", "window",
                                    "pepper", "castle", "dragon", "orange", "violet", "summer",
                                    "winter", "button", "mirror", "rocket", "pencil", "anchor"};
#define N_NAMES ((int)(sizeof names / sizeof names[0]))

/* A growable string; ok turns false on the first allocation failure. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool ok;
} sbuf;

static void sb_add(sbuf *b, const char *s) {
    size_t n = strlen(s);
    if (!b->ok) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->ok = false;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

/* Everything a sample draws: n_max pairs/needles worth of keys and values. */
typedef struct task_draw {
    int n;           /* kv: pairs drawn; multikey: needles */
    char (*keys)[8]; /* kv: 3-letter keys; multikey: unused */
    char (*vals)[8]; /* 5-digit values */
    int name_idx[SKV_MULTIKEY_NEEDLES];
    double u[SKV_MULTIKEY_NEEDLES];
    int asked; /* multikey */
} task_draw;

static void draw_free(task_draw *d) {
    free(d->keys);
    free(d->vals);
    memset(d, 0, sizeof *d);
}

static void draw_value(skv_rng *rng, char v[8]) {
    snprintf(v, 8, "%05u", 10000u + (unsigned)skv_rng_below(rng, 90000u));
}

static skv_status draw(skv_eval_task_kind kind, uint64_t seed, int n_max, double depth,
                       task_draw *d, skv_err *err) {
    memset(d, 0, sizeof *d);
    skv_rng rng;
    skv_rng_seed(&rng, seed);
    if (kind == SKV_TASK_KV) {
        if (n_max > 17576) n_max = 17576; /* distinct 3-letter keys */
        d->n = n_max;
        d->keys = calloc((size_t)n_max, sizeof *d->keys);
        d->vals = calloc((size_t)n_max, sizeof *d->vals);
        if (!d->keys || !d->vals) {
            draw_free(d);
            return skv_err_set(err, SKV_ERR_NOMEM, "out of memory drawing a kv prompt");
        }
        for (int i = 0; i < n_max; i++) {
            for (;;) {
                for (int c = 0; c < 3; c++) d->keys[i][c] = (char)('a' + skv_rng_below(&rng, 26));
                d->keys[i][3] = 0;
                int j = 0;
                while (j < i && strcmp(d->keys[j], d->keys[i])) j++;
                if (j == i) break;
            }
            draw_value(&rng, d->vals[i]);
        }
        return SKV_OK;
    }
    d->n = SKV_MULTIKEY_NEEDLES;
    d->vals = calloc(SKV_MULTIKEY_NEEDLES, sizeof *d->vals);
    if (!d->vals) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory drawing a prompt");
    for (int j = 0; j < d->n; j++) {
        for (;;) {
            d->name_idx[j] = (int)skv_rng_below(&rng, N_NAMES);
            int k = 0;
            while (k < j && d->name_idx[k] != d->name_idx[j]) k++;
            if (k == j) break;
        }
        draw_value(&rng, d->vals[j]);
        d->u[j] = skv_rng_uniform(&rng);
    }
    d->asked = (int)skv_rng_below(&rng, (uint64_t)d->n);
    d->u[d->asked] = depth;
    return SKV_OK;
}

/* The prompt text with n pairs (kv) or n filler sentences (multikey); *answer: the value. */
static char *build(skv_eval_task_kind kind, const task_draw *d, double depth, int n,
                   const char **answer) {
    sbuf b = {NULL, 0, 0, true};
    char line[160];
    if (kind == SKV_TASK_KV) {
        int asked = (int)skv_round_half_even(depth * (n - 1));
        sb_add(&b, kv_intro);
        for (int i = 0; i < n; i++) {
            snprintf(line, sizeof line, " %s: %s.", d->keys[i], d->vals[i]);
            sb_add(&b, line);
        }
        snprintf(line, sizeof line, " What is the value of %s? The value of %s is", d->keys[asked],
                 d->keys[asked]);
        sb_add(&b, line);
        *answer = d->vals[asked];
    } else {
        long slot[SKV_MULTIKEY_NEEDLES];
        for (int j = 0; j < d->n; j++) slot[j] = skv_round_half_even(d->u[j] * n);
        sb_add(&b, skv_prompt_intro);
        for (int i = 0; i <= n; i++) {
            for (int j = 0; j < d->n; j++) {
                if (slot[j] != i) continue;
                snprintf(line, sizeof line, " The magic number for %s is %s.",
                         names[d->name_idx[j]], d->vals[j]);
                sb_add(&b, line);
            }
            if (i < n) sb_add(&b, skv_prompt_fillers[i % 5]);
        }
        const char *nm = names[d->name_idx[d->asked]];
        snprintf(line, sizeof line, " What is the magic number for %s? The magic number for %s is",
                 nm, nm);
        sb_add(&b, line);
        *answer = d->vals[d->asked];
    }
    if (!b.ok) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char *skv_task_prompt(skv_eval_task_kind kind, uint64_t sample, double depth, int n,
                      char answer[16]) {
    task_draw d;
    if (n < (kind == SKV_TASK_KV ? 1 : 0) ||
        draw(kind, SKV_TASK_SEED0 + sample, kind == SKV_TASK_KV ? n : 0, depth, &d, NULL))
        return NULL;
    const char *a = NULL;
    char *t = build(kind, &d, depth, n, &a);
    if (t) snprintf(answer, 16, "%s", a);
    draw_free(&d);
    return t;
}

/* Tokens of sample's prompt of size n; -1 on error. toks may be NULL (count only). */
static int sample_tokens(const skv_vocab *vocab, skv_eval_task_kind kind, uint64_t sample,
                         double depth, int n, int32_t **toks, char answer[16], skv_err *err) {
    char *text = skv_task_prompt(kind, sample, depth, n, answer);
    if (!text) {
        skv_err_set(err, SKV_ERR_NOMEM, "out of memory building a task prompt");
        return -1;
    }
    int32_t *t = NULL;
    int c = skv_prompt_tokenize(vocab, text, strlen(text), "task", &t, err);
    free(text);
    if (c >= 0 && toks)
        *toks = t;
    else
        free(t);
    return c;
}

typedef struct count_arg {
    const skv_vocab *vocab;
    skv_eval_task_kind kind;
    uint64_t sample;
    double depth;
    char *answer;
} count_arg;

/* skv_prompt_fit's count of a sample's prompt. */
static int count_sample(const void *arg, int size, skv_err *err) {
    const count_arg *a = arg;
    return sample_tokens(a->vocab, a->kind, a->sample, a->depth, size, NULL, a->answer, err);
}

skv_status skv_eval_task_dataset(const skv_vocab *vocab, skv_eval_task_kind kind, int n_samples,
                                 const double *depths, int n_depths, int n_tokens, int window,
                                 int shard_k, int shard_n, skv_eval_dataset *out, skv_err *err) {
    memset(out, 0, sizeof *out);
    if (kind != SKV_TASK_KV && kind != SKV_TASK_MULTIKEY)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "unknown retrieval task %d", (int)kind);
    if (n_samples < 1 || n_depths < 1 || window < 1 || n_tokens < 2 * window)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "the task needs samples >= 1, depths >= 1 and a prompt budget of at "
                           "least twice the window (%d tokens for a window of %d)",
                           n_tokens, window);
    for (int d = 0; d < n_depths; d++)
        if (!(depths[d] >= 0.0 && depths[d] <= 1.0))
            return skv_err_set(err, SKV_ERR_INVALID_ARG, "depth %g is not in [0, 1]", depths[d]);
    out->n_total = n_samples * n_depths;
    out->samples = calloc((size_t)n_samples * (size_t)n_depths, sizeof *out->samples);
    if (!out->samples) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    skv_status st = SKV_OK;
    int lo0 = kind == SKV_TASK_KV ? 1 : 0;
    for (int i = 0; i < n_samples; i++) {
        if (!skv_eval_in_shard(i, shard_k, shard_n)) continue;
        for (int d = 0; d < n_depths; d++) {
            char answer[16];
            /* the largest size whose prompt fits: doubling, then bisection (token counts grow
             * with the size), then down while another draw tokenizes longer */
            const count_arg ca = {vocab, kind, (uint64_t)i, depths[d], answer};
            int n = sample_tokens(vocab, kind, (uint64_t)i, depths[d], lo0, NULL, answer, err);
            if (n < 0) goto fail_err;
            if (n > n_tokens) {
                st = skv_err_set(err, SKV_ERR_INVALID_ARG,
                                 "the shortest task prompt has %d tokens, more than the budget of "
                                 "%d",
                                 n, n_tokens);
                goto fail;
            }
            const int lo = skv_prompt_fit(lo0, n_tokens, count_sample, &ca, err);
            if (lo < 0) goto fail_err;
            int32_t *t = NULL;
            if ((n = sample_tokens(vocab, kind, (uint64_t)i, depths[d], lo, &t, answer, err)) < 0)
                goto fail_err;
            st = skv_prompt_add_sample(out, "task", i, d, depths[d], t, n, n_tokens, window, answer,
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
