/* cli_policy.h — the compression options shared by `sparsekv compress` and `sparsekv generate`:
 * parsing (--policy --keep --window --window-text --protocol --seed --sinks --pool --kernel
 * --window-keep --positions) into skv_compress_params, splitting the prompt into prefix and
 * window, and the prefill -> compress sequence of both protocols.
 *
 * Use: cli_policy_init; the command's cli_args with cli_policy_options (and
 * cli_policy_budget_options); cli_policy_take for every key; cli_policy_check after the loop;
 * cli_policy_tokenize; cli_policy_run; cli_prompt_free. */
#ifndef SKV_CLI_POLICY_H
#define SKV_CLI_POLICY_H

#include "cli.h"
#include "cli_args.h"

/* Keys of the compression options (cli_args tables below). */
enum {
    CLI_POLICY_POLICY = CLI_LONG + 200,
    CLI_POLICY_KEEP,
    CLI_POLICY_WINDOW,
    CLI_POLICY_WINDOW_TEXT,
    CLI_POLICY_PROTOCOL,
    CLI_POLICY_SEED,
    CLI_POLICY_SINKS,
    CLI_POLICY_POOL,
    CLI_POLICY_KERNEL,
    CLI_POLICY_WINDOW_KEEP,
    CLI_POLICY_POSITIONS,
    CLI_POLICY_MAX_CACHE,
    CLI_POLICY_COMPRESS_EVERY,
};

/* --policy (alias --policies), --keep, --window, --window-text, --protocol (--protocols),
 * --seed, --sinks, --pool (--pooling), --kernel, --window-keep, --positions. */
extern const cli_opt cli_policy_options[];
/* --max-cache (alias --budget), --compress-every: a decoding budget (generate). */
extern const cli_opt cli_policy_budget_options[];

typedef struct cli_policy_opts {
    skv_compress_params params; /* params.policy is NULL until --policy */
    bool keep_given;
    int window_n;            /* --window N: the last N prompt tokens are the window (0 = none) */
    const char *window_text; /* --window-text TEXT: a window appended after the prompt */
    int max_cache;           /* --max-cache N: decoding budget, entries per kv head (0 = none) */
    int compress_every;      /* --compress-every K: tokens between cuts (default 32) */
    bool seed_shared;        /* --seed also seeds the command itself (generate's sampler) */
} cli_policy_opts;

void cli_policy_init(cli_policy_opts *o);

/* Takes the value of a compression option (a key of the tables above): 1; 0 when key is not
 * one of them; -1 after a message on a bad value (exit status 2). */
int cli_policy_take(cli_policy_opts *o, const cli_args *args, int key, const char *value);

/* Checks the combination once every option is read: a policy when required; no compression
 * option without --policy; --keep with --policy (or --max-cache); a window for the policies
 * that need one, not both --window and --window-text; --seed / --sinks / --pool / --kernel /
 * --window-keep only for a policy that reads them. false after a message (exit status 2). */
bool cli_policy_check(const cli_policy_opts *o, const cli_args *args, bool policy_required);

/* The policy parameters given (--seed when seed_is_policys, --sinks, --pool, --kernel,
 * --window-keep) against what the policy's registry row says it reads: false after a message
 * naming the first it does not read (exit status 2). Part of cli_policy_check; bench calls it
 * alone (its --seed seeds the tokens too). */
bool cli_policy_check_params(const char *cmd, const cli_args *args, const char *policy,
                             bool seed_is_policys);

/* Under --max-cache: each cut's window, the last min(--window or --compress-every,
 * --compress-every) tokens fed (the library's rule, skv_context_set_budget). */
int cli_policy_budget_window(const cli_policy_opts *o);

/* The note when a compression chose nothing by score (every kept entry forced by the window,
 * --window-keep or --sinks), naming what forced them; nothing otherwise. */
void cli_policy_note_unscored(FILE *f, const cli_policy_opts *o, const skv_compress_info *info);

/* The same for a decoding budget, from the options alone: the forced entries of every cut
 * (window, --window-keep, --sinks) fill --max-cache. */
void cli_policy_note_budget_unscored(FILE *f, const cli_policy_opts *o);

/* Whether the policy (name or alias) reads the skv_compress_params field ("seed", "sinks",
 * "pooling", "kernel", "window_keep"), as its registry row says. */
bool cli_policy_reads(const char *policy, const char *field);

/* Whether the policy (name or alias) needs the prefill's attention summed
 * (skv_context_accumulate_attention before the prefill: h2o), as its registry row says. */
bool cli_policy_needs_prefill_attention(const char *policy);

/* Usage lines of the compression flags (the policy list comes from the registry). budget: the
 * command has --max-cache (its effect on --window is said); own_seed: the command lists --seed
 * itself (generate: it seeds the sampler too), so it is not listed again. */
void cli_policy_usage(FILE *f, bool budget, bool own_seed);
/* Usage lines of --max-cache and --compress-every (generate). */
void cli_policy_budget_usage(FILE *f);
/* "sink_recent (streaming), random, ..." from the registry (static buffer). */
const char *cli_policy_names(void);

/* A prompt as tokens: BOS + prompt text (+ the --window-text tokens, without BOS). */
typedef struct cli_prompt {
    int32_t *tokens;
    int n_tokens;
    int n_window; /* the last n_window tokens are the window (0 = none) */
} cli_prompt;

/* Tokenizes the prompt and the window. Returns 0, or 2 after a message (window longer than the
 * prompt, empty window text), or 1 (out of memory). */
int cli_policy_tokenize(const char *cmd, const skv_model *model, const cli_policy_opts *o,
                        const char *prompt, cli_prompt *out);
void cli_prompt_free(cli_prompt *p);

/* Creates a context from cparams (capture_window raised to the window for the engine
 * protocol), prefills the prompt and, when a policy was given, compresses:
 *   seed:   prefill everything but the window; compress (the window scored on a copy);
 *           with feed_window, then feed the window, so the context holds the whole prompt;
 *   engine: prefill the whole prompt in one call, capturing the window's queries; compress.
 * last_logits [n_vocab] (may be NULL) gets the logits after the last token fed. info (may be
 * NULL) is filled when compressed (release with skv_compress_info_free), zeroed otherwise.
 * Returns the exit status (0; 1 runtime failure; 2 bad input) after printing any message;
 * *ctx_out is the context on success (caller frees), NULL otherwise. */
int cli_policy_run(const char *cmd, const skv_model *model, const skv_context_params *cparams,
                   const cli_policy_opts *o, const cli_prompt *p, bool feed_window,
                   skv_context **ctx_out, float *last_logits, skv_compress_info *info);

/* "seed" / "engine", "original" / "rerotate", "max" / "avg" */
const char *cli_protocol_name(skv_protocol p);
const char *cli_positions_name(skv_position_mode m);
const char *cli_pooling_name(skv_pooling p);

#endif
