/* cli_policy.c — see cli_policy.h. */
#include "cli_policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *cli_policy_names(void) {
    static char buf[1024];
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        if (skv_policy_describe(i, &a, NULL)) break;
        int n = snprintf(buf + off, sizeof buf - off, "%s%s%s%s%s", i ? ", " : "", a.name,
                         a.alias ? " (" : "", a.alias ? a.alias : "", a.alias ? ")" : "");
        if (n < 0 || (size_t)n >= sizeof buf - off) break;
        off += (size_t)n;
    }
    return buf;
}

static void print_wrapped(FILE *f, const char *s);

/* Whether the comma-separated field list `params` names `field`. */
static bool reads_param(const char *params, const char *field) {
    size_t n = strlen(field);
    for (const char *s = params; *s;) {
        size_t len = strcspn(s, ",");
        if (len == n && !strncmp(s, field, n)) return true;
        s += len + (s[len] == ',');
    }
    return false;
}

/* "attention, pyramid, ...": the registry's policies that read param, or (param NULL) that
 * need a window; the help says who reads what from the registry, so a new row shows there. */
static const char *policy_names_using(const char *param) {
    static char buf[512];
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        if (skv_policy_describe(i, &a, NULL)) break;
        if (param ? !reads_param(a.params, param) : !a.needs_window) continue;
        int n = snprintf(buf + off, sizeof buf - off, "%s%s", off ? ", " : "", a.name);
        if (n < 0 || (size_t)n >= sizeof buf - off) break;
        off += (size_t)n;
    }
    return buf;
}

/* "(read by X, Y)" for a parameter's help, wrapped from column 22 */
static void print_readers(FILE *f, const char *param) {
    char line[600];
    snprintf(line, sizeof line, "(read by %s)", policy_names_using(param));
    fprintf(f, "%22s", "");
    print_wrapped(f, line);
}

void cli_policy_init(cli_policy_opts *o) {
    memset(o, 0, sizeof *o);
    o->params = skv_compress_default_params();
    o->params.policy = NULL;
    o->compress_every = 32;
}

const char *cli_protocol_name(skv_protocol p) {
    return p == SKV_PROTOCOL_ENGINE ? "engine" : "seed";
}
const char *cli_positions_name(skv_position_mode m) {
    return m == SKV_POSITIONS_REROTATE ? "rerotate" : "original";
}
const char *cli_pooling_name(skv_pooling p) {
    return p == SKV_POOL_AVG ? "avg" : "max";
}

void cli_policy_budget_usage(FILE *f) {
    fprintf(f, "  --max-cache N       decoding budget: every kv head is cut back to N entries by\n"
               "                      the policy (no --keep needed). The last min(--window,\n"
               "                      --compress-every) tokens fed (at the first cut, the\n"
               "                      prompt's) are each cut's window, always kept (--window\n"
               "                      defaults to --compress-every here), so N must be\n"
               "                      larger; --protocol and --window-text do not apply.\n"
               "                      The prompt goes in pieces of K tokens, each followed\n"
               "                      by its cut, so the bound holds during the prompt too.\n"
               "                      With --positions rerotate the prompt and generation\n"
               "                      may run past the model's context length\n"
               "  --compress-every K  tokens between cuts (default 32): at most N + K entries\n");
}

/* words of a list printed from column 22, wrapped before column 80 */
static void print_wrapped(FILE *f, const char *s) {
    int col = 22;
    while (*s) {
        const char *sp = strchr(s, ' ');
        const int n = sp ? (int)(sp - s) : (int)strlen(s);
        if (col > 22 && col + 1 + n > 80) {
            fprintf(f, "\n%22s", "");
            col = 22;
        } else if (col > 22) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", n, s);
        col += n;
        s += n;
        while (*s == ' ') s++;
    }
    fputc('\n', f);
}

void cli_policy_usage(FILE *f, bool budget, bool own_seed) {
    fprintf(f, "compression (`sparsekv policies` describes each policy):\n"
               "  --policy P          ");
    print_wrapped(f, cli_policy_names());
    fprintf(f, "                      (also --policies, --protocols, --pooling: eval's\n"
               "                      spellings)\n");
    fprintf(f,
            "  --keep F            fraction of the T cached positions to keep, in (0, 1]:\n"
            "                      keep = max(1, round_half_even(F * T)); T is the prompt\n"
            "                      without the window (seed protocol) or with it (engine)\n"
            "  --window N          the last N prompt tokens are the observation window\n"
            "%s"
            "  --window-text TEXT  a window appended after the prompt, tokenized on its own\n"
            "                      without BOS (SentencePiece puts a space before its first\n"
            "                      word itself; byte-level BPE wants it written: ' word')\n"
            "                      ",
            budget ? "                      (under --max-cache: the last N tokens fed)\n" : "");
    /* the policies that need a window: a list that grows with the registry, wrapped */
    char need[600];
    snprintf(need, sizeof need, "(%s need one of the two)", policy_names_using(NULL));
    print_wrapped(f, need);
    fprintf(f, "  --protocol seed|engine\n"
               "                      seed (default): prefill the prompt without the window,\n"
               "                      score it with the window run on a copy; the window is\n"
               "                      not kept.\n"
               "                      engine: prefill the whole prompt once, capturing the\n"
               "                      window's queries; the window stays in the cache and\n"
               "                      counts toward keep\n");
    if (!own_seed) {
        fprintf(f, "  --seed S            the random choice's seed (default 0)\n");
        print_readers(f, "seed");
    }
    fprintf(f, "  --sinks N           first positions always kept (default 4)\n");
    print_readers(f, "sinks");
    fprintf(f, "  --pool max|avg      pooling of the window score (default max)\n");
    print_readers(f, "pooling");
    fprintf(f, "  --kernel N          pooling width, 1..65536 (default 7; 1 = no pooling)\n");
    print_readers(f, "kernel");
    fprintf(f, "  --window-keep N     last N prefix positions forced in (default 32)\n");
    print_readers(f, "window_keep");
    fprintf(f, "  --positions original|rerotate\n"
               "                      keep retained keys at their positions (default) or\n"
               "                      re-rotate them to their index in the cache (StreamingLLM)\n");
}

const cli_opt cli_policy_options[] = {
    {"policy", CLI_POLICY_POLICY, true, "policies", false},
    {"keep", CLI_POLICY_KEEP, true, NULL, false},
    {"window", CLI_POLICY_WINDOW, true, NULL, false},
    {"window-text", CLI_POLICY_WINDOW_TEXT, true, NULL, false},
    {"protocol", CLI_POLICY_PROTOCOL, true, "protocols", false},
    {"seed", CLI_POLICY_SEED, true, NULL, false},
    {"sinks", CLI_POLICY_SINKS, true, NULL, false},
    {"pool", CLI_POLICY_POOL, true, "pooling", false},
    {"kernel", CLI_POLICY_KERNEL, true, NULL, false},
    {"window-keep", CLI_POLICY_WINDOW_KEEP, true, NULL, false},
    {"positions", CLI_POLICY_POSITIONS, true, NULL, false},
    {0},
};

const cli_opt cli_policy_budget_options[] = {
    {"max-cache", CLI_POLICY_MAX_CACHE, true, "budget", false},
    {"compress-every", CLI_POLICY_COMPRESS_EVERY, true, NULL, false},
    {0},
};

static int parse_int_flag(const char *cmd, const char *flag, const char *v, long lo, long hi,
                          int *out) {
    long x;
    if (!cli_parse_int(v, lo, hi, &x)) {
        cli_error(cmd, "%s must be an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 1;
}

/* One value of a single-valued option that eval spells as a list ("--policies a,b"). */
static bool one_value(const char *cmd, const char *flag, const char *v) {
    if (!strchr(v, ',')) return true;
    cli_error(cmd, "%s takes one value here, got the list '%s' (`sparsekv eval` compares several)",
              flag, v);
    return false;
}

int cli_policy_take(cli_policy_opts *o, const cli_args *args, int key, const char *v) {
    const char *cmd = args->cmd;
    const char *a = cli_args_spelling(args);
    skv_compress_params *p = &o->params;
    switch (key) {
    case CLI_POLICY_MAX_CACHE:
        return parse_int_flag(cmd, a, v, 1, 1L << 30, &o->max_cache);
    case CLI_POLICY_COMPRESS_EVERY:
        return parse_int_flag(cmd, a, v, 1, 1L << 30, &o->compress_every);
    case CLI_POLICY_POLICY:
        if (!one_value(cmd, a, v)) return -1;
        if (!skv_policy_canonical(v)) {
            cli_error(cmd, "unknown policy '%s' (valid: %s)", v, cli_policy_names());
            return -1;
        }
        p->policy = v;
        return 1;
    case CLI_POLICY_KEEP: {
        double f;
        if (!one_value(cmd, a, v)) return -1;
        if (!cli_parse_double(v, -INFINITY, INFINITY, &f) || !(f > 0.0 && f <= 1.0)) {
            cli_error(cmd, "--keep must be a fraction in (0, 1], got '%s'", v);
            return -1;
        }
        p->keep_frac = f;
        o->keep_given = true;
        return 1;
    }
    case CLI_POLICY_WINDOW:
        return parse_int_flag(cmd, a, v, 0, 1L << 30, &o->window_n);
    case CLI_POLICY_WINDOW_TEXT:
        o->window_text = v;
        return 1;
    case CLI_POLICY_PROTOCOL:
        if (!one_value(cmd, a, v)) return -1;
        if (!strcmp(v, "seed")) {
            p->protocol = SKV_PROTOCOL_SEED;
        } else if (!strcmp(v, "engine")) {
            p->protocol = SKV_PROTOCOL_ENGINE;
        } else {
            cli_error(cmd, "%s must be seed or engine, got '%s'", a, v);
            return -1;
        }
        return 1;
    case CLI_POLICY_SEED:
        if (!cli_parse_u64(v, &p->seed)) {
            cli_error(cmd, "--seed must be an unsigned 64-bit integer, got '%s'", v);
            return -1;
        }
        return 1;
    case CLI_POLICY_SINKS:
        return parse_int_flag(cmd, a, v, 0, 1L << 30, &p->sinks);
    case CLI_POLICY_POOL:
        if (!strcmp(v, "max")) {
            p->pooling = SKV_POOL_MAX;
        } else if (!strcmp(v, "avg")) {
            p->pooling = SKV_POOL_AVG;
        } else {
            cli_error(cmd, "%s must be max or avg, got '%s'", a, v);
            return -1;
        }
        return 1;
    case CLI_POLICY_KERNEL:
        return parse_int_flag(cmd, a, v, 1, 65536, &p->kernel);
    case CLI_POLICY_WINDOW_KEEP:
        return parse_int_flag(cmd, a, v, 0, 1L << 30, &p->window_keep);
    case CLI_POLICY_POSITIONS:
        if (!one_value(cmd, a, v)) return -1;
        if (!strcmp(v, "original")) {
            p->positions = SKV_POSITIONS_ORIGINAL;
        } else if (!strcmp(v, "rerotate")) {
            p->positions = SKV_POSITIONS_REROTATE;
        } else {
            cli_error(cmd, "--positions must be original or rerotate, got '%s'", v);
            return -1;
        }
        return 1;
    default:
        return 0;
    }
}

/* The registry row of a policy name (alias or canonical); false when unknown. */
static bool policy_row(const char *name, skv_policy_about *out) {
    const char *c = skv_policy_canonical(name);
    for (int i = 0; c && i < skv_policy_count(); i++)
        if (skv_policy_describe(i, out, NULL) == SKV_OK && !strcmp(out->name, c)) return true;
    return false;
}

bool cli_policy_needs_prefill_attention(const char *policy) {
    skv_policy_about row;
    return policy_row(policy, &row) && row.needs_prefill_attention;
}

bool cli_policy_reads(const char *policy, const char *field) {
    skv_policy_about row;
    return policy_row(policy, &row) && reads_param(row.params, field);
}

int cli_policy_budget_window(const cli_policy_opts *o) {
    const int wn = o->window_n > 0 ? o->window_n : o->compress_every;
    return wn < o->compress_every ? wn : o->compress_every;
}

/* ", " before every item but the first */
static void list_item(FILE *f, const char **sep, const char *fmt, int v) {
    fputs(*sep, f);
    fprintf(f, fmt, v);
    *sep = ", ";
}

void cli_policy_note_unscored(FILE *f, const cli_policy_opts *o, const skv_compress_info *info) {
    if (!info->by_score || info->keep >= info->T) return;
    for (int l = 0; l < info->n_layer; l++)
        if (info->by_score[l] > 0) return;
    const char *pol = o->params.policy, *sep = "";
    fprintf(f, "note: nothing was chosen by score: every kept entry was forced (");
    /* the window forces entries only where it stays in the cache (engine protocol) */
    if (info->window_tokens > 0 && o->params.protocol == SKV_PROTOCOL_ENGINE)
        list_item(f, &sep, o->window_text ? "--window-text (%d tokens)" : "--window %d",
                  info->window_tokens);
    if (cli_policy_reads(pol, "window_keep"))
        list_item(f, &sep, "--window-keep %d", o->params.window_keep);
    if (cli_policy_reads(pol, "sinks")) list_item(f, &sep, "--sinks %d", o->params.sinks);
    fprintf(f, "); raise --keep or lower those\n");
}

void cli_policy_note_budget_unscored(FILE *f, const cli_policy_opts *o) {
    if (o->max_cache <= 0 || !o->params.policy) return;
    const char *pol = o->params.policy;
    const int qw = cli_policy_budget_window(o);
    const bool wk = cli_policy_reads(pol, "window_keep"), sk = cli_policy_reads(pol, "sinks");
    const int forced = qw + (wk ? o->params.window_keep : 0) + (sk ? o->params.sinks : 0);
    if (forced < o->max_cache) return;
    fprintf(f,
            "note: under --max-cache %d every cut keeps only forced entries (the window of the "
            "last %d tokens",
            o->max_cache, qw);
    if (wk) fprintf(f, " + --window-keep %d", o->params.window_keep);
    if (sk) fprintf(f, " + --sinks %d", o->params.sinks);
    fprintf(f, " = %d), nothing chosen by score; raise --max-cache or lower those\n", forced);
}

bool cli_policy_check_params(const char *cmd, const cli_args *args, const char *policy,
                             bool seed_is_policys) {
    skv_policy_about row;
    if (!policy || !policy_row(policy, &row)) return true;
    static const struct {
        int key;
        const char *field;
    } fields[] = {{CLI_POLICY_SEED, "seed"},
                  {CLI_POLICY_SINKS, "sinks"},
                  {CLI_POLICY_POOL, "pooling"},
                  {CLI_POLICY_KERNEL, "kernel"},
                  {CLI_POLICY_WINDOW_KEEP, "window_keep"}};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        if (fields[k].key == CLI_POLICY_SEED && !seed_is_policys) continue;
        if (cli_args_given(args, fields[k].key) && !reads_param(row.params, fields[k].field)) {
            cli_error(cmd, "%s does not apply to policy '%s' (it reads %s)",
                      cli_args_name(args, fields[k].key), row.name,
                      row.params[0] ? row.params : "no parameters");
            return false;
        }
    }
    return true;
}

bool cli_policy_check(const cli_policy_opts *o, const cli_args *args, bool policy_required) {
    const char *cmd = args->cmd;
    const skv_compress_params *p = &o->params;
    if (!cli_args_requires(args, CLI_POLICY_COMPRESS_EVERY, CLI_POLICY_MAX_CACHE, NULL))
        return false;
    if (!p->policy) {
        if (policy_required) {
            cli_error(cmd, "--policy is required (one of %s)", cli_policy_names());
            return false;
        }
        /* every compression option is ignored without a policy: refuse it */
        for (int k = CLI_POLICY_KEEP; k <= CLI_POLICY_COMPRESS_EVERY; k++) {
            if (k == CLI_POLICY_MAX_CACHE) continue; /* its own message below */
            if (k == CLI_POLICY_SEED && o->seed_shared) continue;
            if (!cli_args_requires(args, k, CLI_POLICY_POLICY,
                                   "without a policy nothing is "
                                   "compressed"))
                return false;
        }
        if (o->max_cache > 0) {
            cli_error(cmd, "--max-cache needs --policy (sink_recent is StreamingLLM)");
            return false;
        }
        return true;
    }
    if (!cli_policy_check_params(cmd, args, p->policy, !o->seed_shared)) return false;
    if (o->max_cache > 0) {
        for (int i = 0; i < skv_policy_count(); i++) {
            skv_policy_about a;
            if (skv_policy_describe(i, &a, NULL) == SKV_OK &&
                !strcmp(a.name, skv_policy_canonical(p->policy)) && !a.decode) {
                char names[512] = "";
                size_t len = 0;
                for (int j = 0; j < skv_policy_count(); j++) {
                    skv_policy_about b;
                    if (skv_policy_describe(j, &b, NULL) == SKV_OK && b.decode &&
                        len < sizeof names)
                        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s",
                                                len ? ", " : "", b.name);
                }
                cli_error(cmd,
                          "policy '%s' does not run under --max-cache%s; the decode policies: %s",
                          p->policy,
                          a.layer_budgets ? " (it gives layers their own budgets, where a "
                                            "decoding budget is one count for every head)"
                                          : "",
                          names);
                return false;
            }
        }
        if (o->keep_given) {
            cli_error(cmd, "give either --keep (compress the prompt once) or --max-cache (a "
                           "decoding budget), not both");
            return false;
        }
        if (o->window_text) {
            cli_error(cmd, "--window-text does not apply under --max-cache (the window is the "
                           "last tokens fed)");
            return false;
        }
        if (cli_args_given(args, CLI_POLICY_PROTOCOL)) {
            cli_error(cmd, "--protocol does not apply under --max-cache (every cut scores with "
                           "the last tokens fed as the window and keeps them)");
            return false;
        }
        /* the library's rule (skv_context_set_budget), checked before the model loads */
        const int qw = cli_policy_budget_window(o);
        if (o->max_cache <= qw) {
            cli_error(cmd,
                      "--max-cache %d is not larger than each cut's window (the last %d tokens "
                      "fed, which every policy keeps under a budget): lower %s or raise "
                      "--max-cache (--max-cache + --compress-every must fit the model's "
                      "context)",
                      o->max_cache, qw,
                      o->window_n > 0 ? "--window / --compress-every" : "--compress-every");
            return false;
        }
        return true;
    }
    if (!o->keep_given) {
        cli_error(cmd, "%s is required with --policy",
                  strcmp(cmd, "generate") ? "--keep F (a fraction in (0, 1])"
                                          : "--keep F (a fraction in (0, 1], after the prompt) or "
                                            "--max-cache N (entries per kv head, while decoding)");
        return false;
    }
    if (o->window_n > 0 && o->window_text) {
        cli_error(cmd, "give either --window N or --window-text TEXT, not both");
        return false;
    }
    if (skv_policy_needs_window(p->policy) && o->window_n == 0 && !o->window_text) {
        cli_error(cmd,
                  "policy '%s' needs an observation window: give --window N (the last N prompt "
                  "tokens) or --window-text TEXT",
                  p->policy);
        return false;
    }
    return true;
}

/* The vocabulary's BOS (when add_bos and the vocabulary asks for one) + text as a malloc'd token
 * array; *n = count. NULL after a message. */
static int32_t *tokenize(const char *cmd, const skv_vocab *vocab, const char *text, bool add_bos,
                         int *n) {
    size_t len = strlen(text);
    if (len > (1u << 28)) {
        cli_error(cmd, "the text is too long (%zu bytes)", len);
        return NULL;
    }
    int cap = (int)len + 4;
    int32_t *toks = malloc((size_t)cap * sizeof *toks);
    if (!toks) return NULL;
    int got = skv_tokenize_ex(vocab, text, len, add_bos, false, toks, cap);
    if (got < 0) { /* more tokens than bytes: grow to what it asked for */
        cap = -got;
        int32_t *bigger = realloc(toks, (size_t)cap * sizeof *toks);
        if (!bigger) {
            free(toks);
            return NULL;
        }
        toks = bigger;
        got = skv_tokenize_ex(vocab, text, len, add_bos, false, toks, cap);
    }
    if (got < 0) {
        free(toks);
        cli_error(cmd, "could not tokenize the text");
        return NULL;
    }
    *n = got;
    return toks;
}

void cli_prompt_free(cli_prompt *p) {
    if (!p) return;
    free(p->tokens);
    memset(p, 0, sizeof *p);
}

int cli_policy_tokenize(const char *cmd, const skv_model *model, const cli_policy_opts *o,
                        const char *prompt, cli_prompt *out) {
    memset(out, 0, sizeof *out);
    const skv_vocab *vocab = skv_model_vocab(model);
    int n = 0;
    int32_t *toks = tokenize(cmd, vocab, prompt, true, &n);
    if (!toks) return 1;
    if (o->window_text) {
        int nw = 0;
        int32_t *w = tokenize(cmd, vocab, o->window_text, false, &nw);
        if (!w) {
            free(toks);
            return 1;
        }
        if (nw == 0) {
            free(toks);
            free(w);
            cli_error(cmd, "--window-text gives no tokens");
            return 2;
        }
        int32_t *all = realloc(toks, ((size_t)n + (size_t)nw) * sizeof *all);
        if (!all) {
            free(toks);
            free(w);
            return 1;
        }
        memcpy(all + n, w, (size_t)nw * sizeof *w);
        free(w);
        toks = all;
        n += nw;
        out->n_window = nw;
    } else if (o->window_n > 0 && o->max_cache == 0) { /* a budget's window: the last fed */
        if (o->window_n >= n) {
            free(toks);
            cli_error(cmd,
                      "--window %d is longer than the prompt allows: the prompt has %d tokens "
                      "(BOS included) and at least one must stay before the window",
                      o->window_n, n);
            return 2;
        }
        out->n_window = o->window_n;
    }
    out->tokens = toks;
    out->n_tokens = n;
    return 0;
}

static int status_exit(skv_status st) {
    return st == SKV_ERR_INVALID_ARG ? 2 : 1;
}

int cli_policy_run(const char *cmd, const skv_model *model, const skv_context_params *cparams,
                   const cli_policy_opts *o, const cli_prompt *p, bool feed_window,
                   skv_context **ctx_out, float *last_logits, skv_compress_info *info) {
    *ctx_out = NULL;
    if (info) memset(info, 0, sizeof *info);
    const bool budget = o->max_cache > 0;
    const bool compress = o->params.policy != NULL && !budget;
    const bool engine = o->params.protocol == SKV_PROTOCOL_ENGINE;
    const int W = p->n_window;
    skv_context_params cp = *cparams;
    if (compress && engine && W > cp.capture_window) cp.capture_window = W;
    const int n_ctx = cp.n_ctx > 0 ? cp.n_ctx : skv_model_hparams(model)->n_ctx_train;
    const bool streams = budget && o->params.positions == SKV_POSITIONS_REROTATE;
    if (p->n_tokens > n_ctx && !streams) {
        cli_error(cmd, "the prompt has %d tokens, more than the context holds (%d)", p->n_tokens,
                  n_ctx);
        return 2;
    }
    skv_err err = {0};
    skv_context *ctx = skv_context_new(model, &cp, &err);
    if (!ctx) {
        cli_error(cmd, "%s", err.msg);
        return status_exit(err.status);
    }
    skv_status st0 = SKV_OK;
    if (budget) {
        skv_compress_params bp = o->params;
        bp.n_window = o->window_n > 0 ? o->window_n : o->compress_every;
        st0 = skv_context_set_budget(ctx, &bp, o->max_cache, o->compress_every, &err);
    } else if (compress) {
        /* policies that need the prefill's attention (h2o) turn its accumulation on first */
        if (cli_policy_needs_prefill_attention(o->params.policy))
            st0 = skv_context_accumulate_attention(ctx, true, &err);
    }
    if (st0) {
        cli_error(cmd, "%s", err.msg);
        skv_context_free(ctx);
        return status_exit(st0);
    }
    /* seed: the window waits until after compression */
    const int n_first = compress && !engine ? p->n_tokens - W : p->n_tokens;
    const bool logits_now = last_logits && n_first == p->n_tokens;
    /* under a budget the prompt goes in pieces that end where cuts are due (every
     * --compress-every tokens), so that no head holds more than N + K entries during the
     * prompt either */
    skv_status st = SKV_OK;
    for (int i = 0, n; !st && i < n_first; i += n) {
        n = budget ? skv_context_budget_piece(ctx) : n_first - i;
        if (n > n_first - i) n = n_first - i;
        const bool last = logits_now && i + n == n_first;
        st = skv_forward(ctx, p->tokens + i, n, last ? SKV_LOGITS_LAST : SKV_LOGITS_NONE,
                         last ? last_logits : NULL, &err);
    }
    if (!st && compress) {
        skv_compress_params cparams2 = o->params;
        cparams2.window_tokens = W > 0 ? p->tokens + n_first : NULL;
        cparams2.n_window = W;
        skv_compress_info tmp;
        st = skv_compress(ctx, &cparams2, info ? info : &tmp, &err);
        if (!info && !st) skv_compress_info_free(&tmp);
    }
    if (!st && n_first < p->n_tokens && feed_window)
        st = skv_forward(ctx, p->tokens + n_first, p->n_tokens - n_first,
                         last_logits ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, last_logits, &err);
    if (st) {
        cli_error(cmd, "%s", err.msg);
        if (info) skv_compress_info_free(info);
        skv_context_free(ctx);
        return status_exit(st);
    }
    *ctx_out = ctx;
    return 0;
}
