/* eval.h — the library side of `sparsekv eval`: what each compression policy costs in quality
 * against the full cache, token by token (docs/EVAL.md).
 *
 *   json.c     a small JSON reader (data lines, results.jsonl) and string writer
 *   metrics.c  log-softmax, KL, top-1, percentiles, PPL; mean / sd / 95% CI (Student t)
 *   data.c     samples: JSONL data files, model-generated default samples, sharding
 *   passkey.c  needle-in-a-haystack prompts and the exact-match scorer
 *   runner.c   the protocols: reference vs compressed cache, per sample x configuration
 *   report.c   results.jsonl lines, reading them back, summary.csv / summary.md, gnuplot files
 *
 * Nothing here prints; problems come back as skv_status + skv_err, warnings as strings. */
#ifndef SKV_EVAL_H
#define SKV_EVAL_H

#include "common.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------------------------------------
 * JSON (RFC 8259 subset that matters here: every value type, \uXXXX with surrogate pairs)
 * ------------------------------------------------------------------------------------------- */

typedef enum skv_json_type {
    SKV_JSON_NULL,
    SKV_JSON_BOOL,
    SKV_JSON_NUMBER,
    SKV_JSON_STRING,
    SKV_JSON_ARRAY,
    SKV_JSON_OBJECT,
} skv_json_type;

typedef struct skv_json skv_json;
struct skv_json {
    skv_json_type type;
    bool boolean;
    double number;
    char *str; /* STRING: UTF-8, NUL-terminated (may hold NULs: use str_len) */
    size_t str_len;
    int n;           /* ARRAY / OBJECT: number of items */
    skv_json *items; /* [n] elements or member values */
    char **keys;     /* OBJECT: [n] member names (NUL-terminated) */
};

/* Parses exactly one JSON value (surrounding whitespace allowed). On failure returns NULL and
 * err names the byte offset and the problem. Nesting deeper than 64 is refused. */
skv_json *skv_json_parse(const char *text, size_t len, skv_err *err);
void skv_json_free(skv_json *v);
/* Member of an object by name (the last one when repeated), or NULL. */
const skv_json *skv_json_get(const skv_json *obj, const char *key);
/* Typed lookups: false when absent or of another type (an integer must be integral). */
bool skv_json_get_string(const skv_json *obj, const char *key, const char **out);
bool skv_json_get_number(const skv_json *obj, const char *key, double *out);
bool skv_json_get_int(const skv_json *obj, const char *key, long *out);

/* Writes s as a JSON string literal; invalid UTF-8 bytes become \u00XX. */
void skv_json_write_string(FILE *f, const char *s, size_t len);
/* Writes a double so that reading it back gives the same bits (shortest of %.15g..%.17g);
 * +-inf as +-1e999 (which
 * JSON readers, ours and Python's, read back as infinity), NaN as null. */
void skv_json_write_double(FILE *f, double x);

/* ---------------------------------------------------------------------------------------------
 * Metrics
 * ------------------------------------------------------------------------------------------- */

/* out[i] = log softmax(logits)[i] in double. -inf logits give -inf; when no logit is finite
 * (or one is NaN) every output is NaN. */
void skv_eval_log_softmax(const float *logits, int n, double *out);
/* KL(P || Q) = sum_i p_i (log p_i - log q_i) in nats from log-probabilities. Terms with
 * p_i = 0 contribute 0; p_i > 0 with q_i = 0 gives +inf. */
double skv_eval_kl(const double *logp, const double *logq, int n);
/* Index of the largest value, lowest index on ties; NaN never wins; -1 when n < 1. */
int skv_eval_argmax(const float *x, int n);
/* Linear-interpolation percentile of ascending values (llama-perplexity's rule:
 * position frac * (n - 1)). */
double skv_eval_percentile(const double *sorted, int n, double frac);

/* Quality of one teacher-forced continuation under a compressed cache vs the reference. */
typedef struct skv_eval_lm_metrics {
    int n_tokens;                                      /* continuation positions compared */
    double kl_mean, kl_median, kl_p90, kl_p99, kl_max; /* KL(ref || cmp) per position, nats */
    int n_same_top;          /* positions whose argmax agrees (lowest id on ties) */
    double top1;             /* n_same_top / n_tokens */
    double nll_ref, nll_cmp; /* mean negative log-likelihood of the continuation tokens */
    double ppl_ref, ppl_cmp; /* exp(nll) */
    double ln_ppl_ratio;     /* nll_cmp - nll_ref = ln(PPL_cmp / PPL_ref) */
} skv_eval_lm_metrics;

/* ref, cmp: [n_tok, n_vocab] logits; targets[n_tok]: the token each row predicts. */
skv_status skv_eval_compare(const float *ref, const float *cmp, const int32_t *targets, int n_tok,
                            int n_vocab, skv_eval_lm_metrics *out, skv_err *err);

/* Two-sided 95% critical value of Student's t with df degrees of freedom (NaN for df < 1). */
double skv_eval_t975(int df);

typedef struct skv_eval_stat {
    int n;
    double mean;
    double sd;   /* sample standard deviation (n - 1); NaN when n < 2 */
    double ci95; /* half-width t975(n-1) * sd / sqrt(n); NaN when n < 2 */
} skv_eval_stat;

/* Summation runs in index order, so equal inputs give equal bits. */
skv_eval_stat skv_eval_stat_of(const double *x, int n);

/* Figures pooled over every compared token of a configuration's rows, as llama-perplexity
 * prints them: the share of tokens whose top token is the full cache's (± its binomial standard
 * error) and the token-weighted PPLs, from the counts and the NLLs summed over tokens. NaN where
 * undefined (no token; the error of one). */
typedef struct skv_eval_pooled {
    double same_top_p, same_top_unc, ppl_ref, ppl_cmp;
} skv_eval_pooled;
skv_eval_pooled skv_eval_pool(long long n_tokens, long long n_same_top, double sum_nll_ref,
                              double sum_nll_cmp);

/* ---------------------------------------------------------------------------------------------
 * Samples
 * ------------------------------------------------------------------------------------------- */

typedef struct skv_eval_sample {
    int index;       /* position in the data set (the shard key) */
    int line;        /* 1-based line of the data file; 0 for generated samples */
    int32_t *tokens; /* [n_prefix + n_window + n_cont] prefix | window | continuation */
    int n_prefix, n_window, n_cont;
    /* passkey task */
    int depth_index; /* index into the depth list (0 for the lm task) */
    double depth;
    char key[16]; /* the number hidden in the prompt */
} skv_eval_sample;

/* How a token sequence is cut. Each part: >= 1 an absolute token count, in (0, 1) a fraction of
 * the usable tokens, 0 = "the rest" (prefix only). */
typedef struct skv_eval_split {
    double prefix, window, cont;
    /* "messages" lines: the chat format (llama3, chatml, phi3, mistral) where the model has none or
     * to override its own; NULL: the model's tokenizer.chat_template */
    const char *chat_template;
} skv_eval_split;

typedef struct skv_eval_dataset {
    skv_eval_sample *samples; /* [n] the samples of this shard, by index */
    int n;
    int n_total;     /* samples in the whole data set (all shards) */
    int n_skipped;   /* of this shard's samples */
    char **warnings; /* [n_warnings] one sentence each (skipped samples) */
    int n_warnings;
} skv_eval_dataset;

void skv_eval_dataset_free(skv_eval_dataset *d);

/* Cuts tokens[n] under split into s (tokens copied). n_ctx bounds T + W + max(C, greedy).
 * Returns false with a reason in why (a sentence) when the sample does not fit. */
bool skv_eval_cut(const int32_t *tokens, int n, const skv_eval_split *split, int n_ctx, int greedy,
                  skv_eval_sample *s, char *why, size_t why_size);

/* Whether sample index i belongs to shard k of n (strided slices: i % n == k). */
static inline bool skv_eval_in_shard(int i, int k, int n) {
    return n <= 1 || i % n == k;
}

/* Reads a JSONL data file. Each non-blank line is one sample, an object with either
 *   "text": string             tokenized with BOS, then cut by split
 *   "tokens": [ids]            used as is, then cut by split
 *   "context", "window", "continuation": strings  (context with BOS; the others without)
 *   "messages": [{"role", "content"}...]  a conversation formatted with the model's chat
 *                              template (special tokens parsed), then cut by split
 * Every line is parsed (a bad line is an error naming its line in every shard); only the
 * shard's samples are tokenized. max_samples > 0 keeps the first max_samples samples. Samples
 * that do not fit are skipped with a warning. */
skv_status skv_eval_load_jsonl(const char *path, const skv_vocab *vocab,
                               const skv_eval_split *split, int n_ctx, int greedy, int max_samples,
                               int shard_k, int shard_n, skv_eval_dataset *out, skv_err *err);

/* The default data: sample i is n_total tokens the model samples from BOS at temperature 1
 * with seed i, then cut by split. */
typedef struct skv_eval_gen_params {
    int n_samples;
    int n_total; /* tokens per sample, BOS included */
    int n_threads;
    skv_type kv_type;
    int n_ctx; /* the generating context's size (0: the training length), as the run's */
} skv_eval_gen_params;

skv_status skv_eval_generate(const skv_model *model, const skv_eval_gen_params *gp,
                             const skv_eval_split *split, int greedy, int shard_k, int shard_n,
                             skv_eval_dataset *out, skv_err *err);

/* ---------------------------------------------------------------------------------------------
 * Passkey (needle in a haystack)
 * ------------------------------------------------------------------------------------------- */

#define SKV_PASSKEY_QUESTION "What is the pass key? The pass key is"

typedef struct skv_passkey_prompt {
    char *text; /* malloc'd, NUL-terminated */
    size_t len;
    size_t needle_at; /* byte offset of the needle sentence */
    int n_filler;     /* filler sentences in total */
    int n_before;     /* filler sentences before the needle = round_half_even(depth * n_filler) */
    char key[16];     /* 5 digits */
} skv_passkey_prompt;

/* The 5-digit key of sample seed (10000..99999, from skv_rng seeded with seed). */
void skv_passkey_key(uint64_t seed, char key[16]);
/* Builds intro + n_filler filler sentences (five repeating ones) with the needle after
 * n_before of them + question. */
skv_status skv_passkey_make(const char *key, double depth, int n_filler, skv_passkey_prompt *out,
                            skv_err *err);
void skv_passkey_prompt_free(skv_passkey_prompt *p);
/* Exact match: the first run of ASCII digits in output must equal key. found receives that run
 * (truncated to found_size - 1; "" when there is none). */
bool skv_passkey_score(const char *output, size_t len, const char *key, char *found,
                       size_t found_size);

/* Passkey prompts for every (sample, depth) of the shard: the most filler blocks whose prompt
 * (BOS + text) has at most n_tokens tokens; the last `window` tokens are the window. */
skv_status skv_eval_passkey_dataset(const skv_vocab *vocab, int n_samples, const double *depths,
                                    int n_depths, int n_tokens, int window, int shard_k,
                                    int shard_n, skv_eval_dataset *out, skv_err *err);

/* Retrieval tasks of the trained retrieval model (eval/tasks.c; the same text as
 * tools/train/data.py): key-value lookup and multi-needle. Samples are scored like passkey. */
typedef enum skv_eval_task_kind { SKV_TASK_KV = 1, SKV_TASK_MULTIKEY = 2 } skv_eval_task_kind;
#define SKV_MULTIKEY_NEEDLES 4

/* The prompt text of sample (malloc'd; NULL when out of memory): kv with n pairs, multikey with
 * n filler sentences; answer receives the 5-digit value asked for. */
char *skv_task_prompt(skv_eval_task_kind kind, uint64_t sample, double depth, int n,
                      char answer[16]);
/* Prompts for every (sample, depth) of the shard, each the largest (most pairs / filler) whose
 * BOS + text has at most n_tokens tokens; the last `window` tokens are the window. */
skv_status skv_eval_task_dataset(const skv_vocab *vocab, skv_eval_task_kind kind, int n_samples,
                                 const double *depths, int n_depths, int n_tokens, int window,
                                 int shard_k, int shard_n, skv_eval_dataset *out, skv_err *err);

/* ---------------------------------------------------------------------------------------------
 * Runner
 * ------------------------------------------------------------------------------------------- */

/* lm: KL against the full cache; the others are retrieval tasks scored by exact match (passkey:
 * eval/passkey.c; kv and multikey: eval/tasks.c). */
typedef enum skv_eval_task {
    SKV_EVAL_LM = 0,
    SKV_EVAL_PASSKEY = 1,
    SKV_EVAL_KV = 2,
    SKV_EVAL_MULTIKEY = 3,
} skv_eval_task;
/* "lm", "passkey", "kv", "multikey"; and back (false for any other name). */
const char *skv_eval_task_name(skv_eval_task task);
bool skv_eval_task_from_name(const char *name, skv_eval_task *out);

/* One configuration: everything that changes the compressed cache. */
typedef struct skv_eval_config {
    int index;       /* position in the run's enumeration (orders the summary) */
    char policy[32]; /* canonical name */
    double keep_frac;
    skv_protocol protocol;
    skv_position_mode positions;
    uint64_t seed; /* random policy; 0 otherwise */
    /* decoding-time configurations (`eval --budget`): entries per kv head and tokens between
     * cuts; 0 for compression after the prefill (keep_frac, protocol and seed apply then) */
    int budget, compress_every;
} skv_eval_config;

typedef struct skv_eval_settings {
    skv_eval_task task;
    int greedy; /* G: greedy tokens decoded after the window */
    int n_threads;
    skv_type kv_type;
    int sinks, kernel, window_keep; /* passed to skv_compress */
    skv_pooling pooling;
    const char *model_path; /* recorded in every line */
    int n_ctx; /* every context's size (0: the model's training length): for a LongRoPE model it
                  chooses the RoPE factors, alike for the whole run */
} skv_eval_settings;

void skv_eval_settings_default(skv_eval_settings *s);

/* Enumerates configurations: for protocol, for positions, for policy, for keep, for seed (seeds
 * 0..n_seeds-1 for random, 0 otherwise). policies must be canonical. *out is malloc'd. */
skv_status skv_eval_configs(const char *const *policies, int n_policies, const double *keeps,
                            int n_keeps, const skv_protocol *protocols, int n_protocols,
                            const skv_position_mode *positions, int n_positions, int n_seeds,
                            skv_eval_config **out, int *n_out, skv_err *err);

/* The measurement of one sample under one configuration. */
typedef struct skv_eval_result {
    const skv_eval_sample *sample;
    const skv_eval_config *cfg;
    int T; /* compressed prefix length (seed: n_prefix; engine: n_prefix + n_window) */
    int keep;
    skv_eval_lm_metrics m;
    int greedy_match; /* greedy tokens equal to the reference's before the first difference */
    double compress_ms, window_ms, cache_ms, eval_ms;
    uint64_t bytes_before, bytes_after;
    int n_layer, n_head_kv;
    const int *kept;          /* [n_layer, n_head_kv] */
    const int *layer_budgets; /* [n_layer] */
    const int *forced;        /* [n_layer] entries forced (window, window_keep, sinks, recent) */
    const int *by_score;      /* [n_layer] entries chosen by score */
    uint64_t selection_hash;  /* equal selections hash equal (skv_compress_info) */
    /* passkey */
    const char *output, *ref_output; /* greedy text after the prompt */
    bool correct, ref_correct;
    char found[32], ref_found[32];
} skv_eval_result;

typedef skv_status (*skv_eval_result_fn)(void *user, const skv_eval_result *r, skv_err *err);

/* Decoding-time evaluation (eval/decode.c, `sparsekv eval --budget LIST`): the sample fed under a
 * context budget of `budget` entries per kv head (a cut every `compress_every` tokens, the
 * window's queries the last min(n_window, compress_every) tokens', rerotate), continuation
 * distributions compared with the full cache's. entries[n_steps]: the most entries any head held
 * after each token of window and continuation. */
typedef struct skv_eval_decode_result {
    const skv_eval_sample *sample;
    const skv_eval_config *cfg;
    skv_eval_lm_metrics m;
    int cuts, max_entries;
    const int *entries;
    int n_steps;
    double eval_ms;
} skv_eval_decode_result;
typedef skv_status (*skv_eval_decode_fn)(void *user, const skv_eval_decode_result *r, skv_err *err);

/* The decoding-time configurations: for budget, for policy (canonical; each must be
 * decode-capable); positions rerotate, keep_frac 0. *out is malloc'd. */
skv_status skv_eval_decode_configs(const char *const *policies, int n_policies, const int *budgets,
                                   int n_budgets, int compress_every, skv_eval_config **out,
                                   int *n_out, skv_err *err);
/* Runs decoding-time configurations first..n_cfgs-1 on one sample (the full-cache reference is
 * fed once); fn gets each result in order. */
skv_status skv_eval_decode_sample(const skv_model *model, const skv_eval_sample *s,
                                  const skv_eval_config *cfgs, int n_cfgs, int first,
                                  const skv_eval_settings *st, skv_eval_decode_fn fn, void *user,
                                  skv_err *err);
/* One results.jsonl line of a decoding-time result: "mode": "decode", "budget",
 * "compress_every", the metrics, "cuts", "max_entries" and "entries" (over time). */
void skv_eval_write_decode(FILE *f, const skv_eval_settings *st, const skv_eval_decode_result *r);

/* Runs every configuration on one sample: the dense caches are built once (seed: prefix;
 * engine: prefix + window in one call with capture) and cloned per configuration. fn gets each
 * result in configuration order. */
skv_status skv_eval_run_sample(const skv_model *model, const skv_eval_sample *s,
                               const skv_eval_config *cfgs, int n_cfgs, const skv_eval_settings *st,
                               skv_eval_result_fn fn, void *user, skv_err *err);

/* ---------------------------------------------------------------------------------------------
 * Reports
 * ------------------------------------------------------------------------------------------- */

/* Writes one results.jsonl line (with the newline). */
void skv_eval_write_result(FILE *f, const skv_eval_settings *st, const skv_eval_result *r);

/* One line of results.jsonl as read back: what the summary needs, plus the raw line. */
typedef struct skv_eval_row {
    skv_eval_task task;
    int sample, depth_index, config;
    char policy[32];
    double keep_frac, depth;
    char protocol[16], positions[16];
    uint64_t seed;
    int n_tokens, n_same_top, greedy, greedy_match;
    double kl_mean, kl_median, kl_p90, kl_p99, kl_max, top1, nll_ref, nll_cmp, ln_ppl_ratio;
    double correct, ref_correct;
    double compress_ms, window_ms, cache_ms, eval_ms;
    double bytes_before, bytes_after;
    double by_score_share; /* sum of by_score / sum of (forced + by_score): the share of the
                              kept entries chosen by score; NaN where the row lacks them */
    /* "mode": "decode" rows (eval --budget): keep_frac 0, protocol "engine", positions
     * "rerotate"; entries[n_entries] the most entries of any head after each fed token */
    bool decode;
    int budget, compress_every, cuts, max_entries, n_entries;
    int *entries;
    char *line; /* the raw line, without its newline */
    const char *file;
} skv_eval_row;

typedef struct skv_eval_rows {
    skv_eval_row *rows;
    int n, cap;
} skv_eval_rows;

void skv_eval_rows_free(skv_eval_rows *r);
/* Appends the lines of a results.jsonl file. Errors name the file and line. */
skv_status skv_eval_read_results(const char *path, skv_eval_rows *rows, skv_err *err);
/* The same from an open stream; path names it in errors (the fuzz target reads from memory). */
skv_status skv_eval_read_results_stream(FILE *f, const char *path, skv_eval_rows *rows,
                                        skv_err *err);
/* The protocol / position-mode names results.jsonl uses ("seed", "engine"; "original",
 * "rerotate"); false for anything else. */
bool skv_eval_protocol_from_name(const char *s, skv_protocol *out);
bool skv_eval_positions_from_name(const char *s, skv_position_mode *out);
/* Sorts by (sample, depth, config) and refuses duplicates and mixed tasks, or one config
 * index that names two different configurations. */
skv_status skv_eval_rows_check(skv_eval_rows *rows, skv_err *err);

/* Writes summary.csv, summary.md, timing.csv, plot_data.dat and plots.gp into dir from rows
 * (already checked). The CSV holds no timings, so shards merged give the same bytes as one run.
 * *md (when not NULL) receives summary.md's text (malloc'd). */
skv_status skv_eval_write_reports(const skv_eval_rows *rows, const char *dir, char **md,
                                  skv_err *err);

/* Display names for the plots (`--label snapkv=SnapKV`): key is a policy name or alias, a
 * protocol or a position mode; text is user text (escaped wherever it is written). */
typedef struct skv_eval_label {
    char key[32]; /* canonical policy name, protocol or position mode */
    const char *text;
} skv_eval_label;

typedef struct skv_eval_labels {
    const skv_eval_label *items;
    int n;
} skv_eval_labels;

/* The label text given for key (a policy, protocol or position mode), or NULL. */
const char *skv_eval_label_of(const skv_eval_labels *labels, const char *key);
/* dir/name opened as dir/name.tmp (path gets dir/name); skv_eval_close_tmp checks every write
 * and renames it into place, so a report file is never seen half written. */
FILE *skv_eval_open_tmp(const char *dir, const char *name, char *path, size_t path_size,
                        skv_err *err);
skv_status skv_eval_close_tmp(FILE *f, const char *path, skv_err *err);

/* The reports of decoding-time rows (eval --budget, eval/report_decode.c): summary.csv and
 * summary.md per (budget, policy), plot_data.dat and plots.gp drawing kl_vs_budget (KL per
 * policy against the budget) and entries_vs_step (the most entries of any head after each fed
 * token, mean over samples, at the smallest budget: the saw-tooth between cuts). *md (when not
 * NULL) receives summary.md's text. */
skv_status skv_eval_write_decode_reports(const skv_eval_rows *rows, const char *dir,
                                         const skv_eval_labels *labels, char **md, skv_err *err);

/* The retrieval tasks' accuracy against needle depth (eval/report_depth.c): depth_data.dat, and
 * a section appended to the plots.gp the main report wrote that draws accuracy_vs_depth (a panel
 * per keep fraction below 1, a line per policy, the full cache dashed; the engine protocol and
 * original positions when the run has them). Nothing for the lm task or decode rows. */
skv_status skv_eval_write_depth_figure(const skv_eval_rows *rows, const char *dir,
                                       const skv_eval_labels *labels, skv_err *err);

/* Parses "KEY=TEXT" into *out (text points into spec). False with a sentence in why when KEY
 * names no policy, protocol or position mode, or TEXT is empty, longer than 64 bytes or holds
 * control characters. */
bool skv_eval_label_parse(const char *spec, skv_eval_label *out, char *why, size_t why_size);

/* skv_eval_write_reports with labels for the plots (labels may be NULL). */
skv_status skv_eval_write_reports_labeled(const skv_eval_rows *rows, const char *dir,
                                          const skv_eval_labels *labels, char **md, skv_err *err);

/* Escapes for the places eval writes text to:
 * a CSV field (RFC 4180: quoted when it holds a comma, quote, CR or LF, quotes doubled),
 * a gnuplot single-quoted string literal (quotes included: '' for ', control bytes as '?'),
 * a Markdown table cell (backslash, |, backtick, *, [, ], #, ~ and _ at a word's edge
 * backslash-escaped; <, >, & as entities; line breaks as spaces). */
void skv_eval_write_csv_field(FILE *f, const char *s);
void skv_eval_write_gnuplot_string(FILE *f, const char *s);
void skv_eval_write_md_cell(FILE *f, const char *s);

/* In plots.gp after a figure's last `set output`: when the caller set skv_marks (sparsekv
 * does), gnuplot prints "sparsekv-drawn: NAME", so the figures finished before an error are
 * kept. */
void skv_eval_write_drawn_mark(FILE *f, const char *name);

/* The name of a policy's fixed plot colour ("#rrggbb"): the same for a policy in every run
 * whatever the order of --policies; unknown names get one of a fallback set by a hash. */
const char *skv_eval_policy_colour(const char *policy);
/* Its fixed gnuplot point type (marker), chosen the same way. */
int skv_eval_policy_pt(const char *policy);

/* compress --plot: a heat map of kept positions, one row per (layer, kv head), one column per
 * position 0..n_pos-1. positions[l * n_head + h] lists the kept positions of that head (n of
 * them, lens[l * n_head + h]). Writes a self-contained gnuplot script (data inline) that draws
 * the PNG at png_path (and nothing else) to f. window_from >= 0 marks the observation window
 * [window_from, n_pos). title is user text (escaped). */
void skv_eval_write_kept_map(FILE *f, const char *png_path, const char *title, int n_layer,
                             int n_head, int n_pos, const int32_t *const *positions,
                             const int *lens, int window_from);

/* Creates dir and its parents when missing. */
skv_status skv_eval_mkdirs(const char *dir, skv_err *err);

/* ---------------------------------------------------------------------------------------------
 * run.json (eval/runinfo.c): what a run was and whether it finished; checked by --resume and
 * eval-merge. "config" holds every setting that changes the results, as strings (model and
 * data identity included), so two runs belong together when their configs are equal.
 * ------------------------------------------------------------------------------------------- */

#define SKV_EVAL_RUN_FIELDS 64
/* Bytes of a model file hashed for its identity (header, metadata, tensor table). */
#define SKV_EVAL_MODEL_HASH_BYTES (1u << 20)

typedef struct skv_eval_run_field {
    char key[32];
    char *value;
} skv_eval_run_field;

typedef struct skv_eval_runinfo {
    bool complete, partial;
    char **command; /* [n_command] the eval arguments (argv[0] = "eval") */
    int n_command;
    char **inputs; /* eval-merge: the shards merged */
    int n_inputs;
    char **missing; /* eval-merge --allow-partial: what is missing, one sentence each */
    int n_missing;
    char *model, *data; /* absolute paths (not compared: they may differ between machines) */
    char *cwd;          /* the directory the run was started from: the command's relative paths */
    int shard_k, shard_n;
    skv_eval_run_field config[SKV_EVAL_RUN_FIELDS];
    int n_config;
    int n_samples_total, n_samples, n_skipped, n_configs, resumed;
    long long rows;
    double wall_ms;
} skv_eval_runinfo;

/* A new file at path, open for writing: whatever was there (a stale temporary, a link someone
 * planted) is removed first and the file is created with O_EXCL, so no link is followed. NULL
 * with errno on failure. Temporaries renamed into place are made with it. */
FILE *skv_eval_create(const char *path);

void skv_eval_runinfo_free(skv_eval_runinfo *r);
/* Sets config[key] to the formatted value (replacing it when present). */
skv_status skv_eval_runinfo_set(skv_eval_runinfo *r, const char *key, skv_err *err, const char *fmt,
                                ...) __attribute__((format(printf, 4, 5)));
const char *skv_eval_runinfo_get(const skv_eval_runinfo *r, const char *key);
/* The first config key whose value differs between a and b (or is in one only, except "simd",
 * which a run.json from before it lacks: compared only where both have it); NULL when equal. */
const char *skv_eval_runinfo_diff(const skv_eval_runinfo *a, const skv_eval_runinfo *b);
/* Writes dir/run.json (through run.json.tmp, renamed into place). */
skv_status skv_eval_runinfo_write(const char *dir, const skv_eval_runinfo *r, skv_err *err);
/* Reads a run.json (untrusted: every field checked). */
skv_status skv_eval_runinfo_read(const char *path, skv_eval_runinfo *r, skv_err *err);
/* Size of a file and the FNV-1a 64 hash of its first max_bytes bytes (0: all). */
skv_status skv_eval_file_hash(const char *path, uint64_t max_bytes, uint64_t *size, uint64_t *hash,
                              skv_err *err);

/* skv_eval_run_sample from configuration `first` on (the ones before were done by an
 * interrupted run): the same results as the full run gives for those configurations. */
skv_status skv_eval_run_sample_from(const skv_model *model, const skv_eval_sample *s,
                                    const skv_eval_config *cfgs, int n_cfgs, int first,
                                    const skv_eval_settings *st, skv_eval_result_fn fn, void *user,
                                    skv_err *err);

#endif
