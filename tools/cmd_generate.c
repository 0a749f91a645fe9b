/* cmd_generate.c — `sparsekv generate`: prompt -> (optional compression) -> sampled text. */
#include "cli.h"
#include "cli_args.h"
#include "cli_policy.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: sparsekv generate [-m MODEL] [-p PROMPT] [-n N] [--temp T] [--top-k K]\n"
            "                         [--top-p P] [--seed S] [-t THREADS]\n"
            "                         [--kv-type f32|f16|q8_0] [--ctx N] [-q] [--special]\n"
            "                         [--chat [--system TEXT] [--chat-template NAME]]\n"
            "                         [--policy P --keep F [compression options]]\n"
            "                         [--policy P --max-cache N [--compress-every K]]\n\n"
            "Prints the prompt followed by up to N generated tokens (stops early at an\n"
            "end-of-generation token: EOS, EOT, <|eot_id|>, <|im_end|>, <|end|> ...).\n"
            "With no prompt, generation starts from BOS alone. With --policy, the prompt's KV\n"
            "cache is compressed after the prefill (with --max-cache: every K tokens from\n"
            "the first) and generation continues on it.\n\n"
            "  -m MODEL      GGUF model (default %s)\n"
            "  -p, --prompt PROMPT\n"
            "                prompt text (BOS first when the vocabulary asks for it)\n"
            "  -n N          tokens to generate (default 256)\n"
            "  --temp T      temperature; 0 = greedy (default 0.8)\n"
            "  --top-k K     keep the K most likely tokens; 0 = off (default 40)\n"
            "  --top-p P     nucleus sampling mass in (0, 1]; 1 = off (default 0.95)\n"
            "  --seed S      random seed of the sampler and of the random policy (default 0)\n"
            "  -t THREADS    worker threads (default: all cores)\n"
            "  --kv-type T   KV cache element type (default f32)\n"
            "  --ctx N       context size (default 0: the model's training length); for a\n"
            "                LongRoPE model (Phi-3.5, Phi-4-mini: `info` says) it also\n"
            "                chooses the RoPE factors, short up to the model's original\n"
            "                length (4096 for Phi-3.5), long past it\n"
            "  -q, --quiet   no statistics on stderr\n"
            "  --special     the text of special tokens in PROMPT (<|im_start|>,\n"
            "                <|eot_id|> ...) becomes those tokens; BOS is then added only\n"
            "                if the vocabulary asks\n"
            "  --chat        PROMPT is one user message: format it with the model's chat\n"
            "                template (built in: Llama 3, ChatML/Qwen, Phi-3, Mistral NeMo's\n"
            "                [INST]; chosen from tokenizer.chat_template) and generate the\n"
            "                assistant's reply;\n"
            "                special-token text in PROMPT and --system stays text (it cannot\n"
            "                end the turn) unless --special is given too\n"
            "  --system TEXT a system message before the user message (with --chat)\n"
            "  --chat-template NAME  llama3, chatml, phi3 or mistral: the format to use when\n"
            "                the model has no tokenizer.chat_template (or to override it)\n\n",
            SKV_DEFAULT_MODEL);
    cli_policy_usage(f, true, true);
    cli_policy_budget_usage(f);
}

/* The conversation [system,] user formatted with the model's chat template (malloc'd). Returns
 * 0, or 2 after a message (no or unknown template), 1 when memory runs out. */
static int format_chat(const skv_vocab *vocab, const char *tmpl, const char *system_text,
                       const char *user, char **out) {
    skv_chat_message msgs[2];
    int n = 0;
    if (system_text) msgs[n++] = (skv_chat_message){"system", system_text};
    msgs[n++] = (skv_chat_message){"user", user};
    skv_err err = {0};
    int need = skv_chat_format(vocab, tmpl, msgs, n, true, NULL, 0, &err);
    if (need == INT_MIN) {
        cli_error("generate", "--chat: %s", err.msg);
        return err.status == SKV_ERR_NOMEM ? 1 : 2;
    }
    *out = malloc((size_t)(need < 0 ? -need : need) + 1);
    if (!*out) return 1;
    if (skv_chat_format(vocab, tmpl, msgs, n, true, *out, (need < 0 ? -need : need) + 1, &err) <
        0) {
        cli_error("generate", "--chat: %s", err.msg);
        return 1;
    }
    return 0;
}

/* The prompt's tokens toks[0..n) (malloc'd, room for one more) as cli_prompt: BOS alone for an
 * empty prompt; window_n > 0 marks the last window_n tokens as the window. 0, or 2 after a
 * message (toks freed). */
static int finish_prompt(const skv_vocab *vocab, int32_t *toks, int n, int window_n,
                         cli_prompt *out) {
    if (n == 0) { /* nothing to start from: BOS alone */
        toks[n++] = skv_vocab_bos(vocab);
    }
    if (n >= 2 && toks[0] == skv_vocab_bos(vocab) && toks[1] == toks[0])
        fprintf(stderr, "sparsekv generate: warning: the prompt starts with BOS and another was "
                        "added: two BOS tokens (drop the prompt's)\n");
    if (window_n > 0 && window_n >= n) {
        free(toks);
        cli_error("generate",
                  "--window %d is longer than the prompt allows: the prompt has %d tokens",
                  window_n, n);
        return 2;
    }
    out->tokens = toks;
    out->n_tokens = n;
    out->n_window = window_n > 0 ? window_n : 0;
    return 0;
}

/* The prompt with special tokens parsed (and BOS/EOS as the vocabulary asks when add_special).
 * 0, 2 after a message, 1 when memory runs out. */
static int tokenize_special(const skv_vocab *vocab, const char *text, bool add_special,
                            int window_n, cli_prompt *out) {
    memset(out, 0, sizeof *out);
    size_t len = strlen(text);
    int need = skv_tokenize_ex(vocab, text, len, add_special, true, NULL, 0);
    if (need == INT_MIN) return 1;
    int n = need < 0 ? -need : need;
    int32_t *toks = malloc(((size_t)n + 1) * sizeof *toks);
    if (!toks) return 1;
    n = skv_tokenize_ex(vocab, text, len, add_special, true, toks, n);
    if (n < 0) {
        free(toks);
        return 1;
    }
    return finish_prompt(vocab, toks, n, window_n, out);
}

/* --chat without --special: the conversation encoded by skv_chat_tokenize, the messages' text
 * read as text (a prompt that spells <|im_end|> cannot end its turn). */
static int tokenize_chat(const skv_vocab *vocab, const char *tmpl, const char *system_text,
                         const char *user, int window_n, cli_prompt *out) {
    memset(out, 0, sizeof *out);
    skv_chat_message msgs[2];
    int nm = 0;
    if (system_text) msgs[nm++] = (skv_chat_message){"system", system_text};
    msgs[nm++] = (skv_chat_message){"user", user};
    skv_err err = {0};
    int need = skv_chat_tokenize(vocab, tmpl, msgs, nm, true, NULL, 0, &err);
    if (need == INT_MIN) {
        cli_error("generate", "--chat: %s", err.msg);
        return err.status == SKV_ERR_NOMEM ? 1 : 2;
    }
    int n = need < 0 ? -need : need;
    int32_t *toks = malloc(((size_t)n + 1) * sizeof *toks);
    if (!toks) return 1;
    n = skv_chat_tokenize(vocab, tmpl, msgs, nm, true, toks, n, &err);
    if (n < 0) {
        free(toks);
        cli_error("generate", "--chat: %s", err.msg);
        return 1;
    }
    return finish_prompt(vocab, toks, n, window_n, out);
}

int cmd_generate(int argc, char **argv) {
    const char *model_arg = NULL, *prompt = "";
    long n_gen = 256, threads = 0;
    skv_sampler_params sp = skv_sampler_default_params();
    skv_type kv_type = SKV_TYPE_F32;
    bool quiet = false, special = false, chat = false;
    const char *system_text = NULL, *chat_template = NULL;
    cli_policy_opts po;
    cli_policy_init(&po);
    po.seed_shared = true; /* --seed seeds the sampler with or without a policy */
    int n_ctx = 0;
    enum {
        O_SPECIAL = CLI_LONG,
        O_CHAT,
        O_SYSTEM,
        O_TEMPLATE,
        O_TEMP,
        O_TOPK,
        O_TOPP,
        O_KV_TYPE,
        O_CTX
    };
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"prompt", 'p', true, NULL, false},
        {"n-predict", 'n', true, NULL, false},
        {"threads", 't', true, NULL, false},
        {"quiet", 'q', false, NULL, false},
        {"special", O_SPECIAL, false, NULL, false},
        {"chat", O_CHAT, false, NULL, false},
        {"system", O_SYSTEM, true, NULL, false},
        {"chat-template", O_TEMPLATE, true, NULL, false},
        {"temp", O_TEMP, true, NULL, false},
        {"top-k", O_TOPK, true, NULL, false},
        {"top-p", O_TOPP, true, NULL, false},
        {"kv-type", O_KV_TYPE, true, NULL, false},
        {"ctx", O_CTX, true, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, "generate", argc, argv, opts, cli_policy_options,
                       cli_policy_budget_options))
        return 2;
    const char *val;
    for (int key; (key = cli_args_next(&args, &val)) != CLI_DONE;) {
        double dv;
        long lv;
        int used = cli_policy_take(&po, &args, key, val);
        if (used < 0) return 2;
        if (used > 0) continue;
        switch (key) {
        case CLI_FAIL:
            return 2;
        case CLI_OPERAND:
            cli_args_extra(&args, val);
            return 2;
        case 'h':
            usage(stdout);
            return 0;
        case 'q':
            quiet = true;
            break;
        case O_SPECIAL:
            special = true;
            break;
        case O_CHAT:
            chat = true;
            break;
        case 'm':
            model_arg = val;
            break;
        case 'p':
            prompt = val;
            break;
        case O_SYSTEM:
            system_text = val;
            break;
        case O_TEMPLATE:
            chat_template = val;
            break;
        case 'n':
            if (!cli_parse_int(val, 0, 1 << 30, &n_gen)) goto bad;
            break;
        case O_TEMP:
            if (!cli_parse_double(val, 0, 1e6, &dv)) goto bad;
            sp.temperature = (float)dv;
            break;
        case O_TOPK:
            if (!cli_parse_int(val, 0, 1 << 30, &lv)) goto bad;
            sp.top_k = (int)lv;
            break;
        case O_TOPP:
            if (!cli_parse_double(val, 1e-9, 1, &dv)) goto bad;
            sp.top_p = (float)dv;
            break;
        case 't':
            if (!cli_parse_threads("generate", val, &threads)) return 2;
            break;
        case O_CTX:
            if (!cli_parse_ctx("generate", val, &n_ctx)) return 2;
            break;
        case O_KV_TYPE:
            if (!skv_type_from_name(val, &kv_type) ||
                (kv_type != SKV_TYPE_F32 && kv_type != SKV_TYPE_F16 && kv_type != SKV_TYPE_Q8_0))
                goto bad;
            break;
        }
        continue;
    bad:
        cli_error("generate", "invalid value '%s' for %s", val, cli_args_spelling(&args));
        return 2;
    }

    if (!cli_policy_check(&po, &args, false)) return 2;
    sp.seed = po.params.seed;
    if ((system_text || chat_template) && !chat) {
        cli_error("generate", "--system and --chat-template need --chat");
        return 2;
    }
    /* A format name (not a template's text), checked before the model loads; the library
     * knows the names. */
    if (chat_template) {
        skv_err cerr = {0};
        const char *name = skv_chat_template_name(NULL, chat_template, &cerr);
        if (!name || strcmp(name, chat_template) != 0) {
            cli_error("generate",
                      "invalid value '%s' for --chat-template (llama3, chatml, phi3 or mistral)",
                      chat_template);
            return 2;
        }
    }
    if ((chat || special) && po.window_text) {
        cli_error("generate", "--window-text cannot be combined with --chat or --special");
        return 2;
    }
    const char *path = cli_model_path("generate", model_arg);
    if (!path) return 2;
    skv_model *model = cli_load_model("generate", path);
    if (!model) return cli_model_rc;
    const skv_hparams *hp = skv_model_hparams(model);
    const skv_vocab *vocab = skv_model_vocab(model);
    int rc = 1;
    skv_err err = {0};
    skv_context *ctx = NULL;
    skv_sampler *smp = NULL;
    float *logits = NULL;
    cli_prompt prompt_toks = {0};
    skv_compress_info info = {0};
    char *chat_text = NULL;
    const char *prompt_user = prompt;
    if (chat) {
        rc = format_chat(vocab, chat_template, system_text, prompt, &chat_text);
        if (rc) goto done;
        prompt = chat_text;
        /* a format the vocabulary has no marker tokens for: they go in as plain text */
        const char *opener = skv_chat_template_opener(vocab, chat_template);
        if (opener && skv_vocab_find(vocab, opener) < 0)
            fprintf(stderr,
                    "sparsekv generate: warning: the vocabulary has no %s token, so the %s "
                    "markers are read as plain text (the model was not trained on this format)\n",
                    opener, skv_chat_template_name(vocab, chat_template, NULL));
    }
    const int window_n = po.max_cache > 0 ? 0 : po.window_n;
    if (chat && !special) /* a chat template writes BOS itself */
        rc = tokenize_chat(vocab, chat_template, system_text, prompt_user, window_n, &prompt_toks);
    else if (chat || special)
        rc = tokenize_special(vocab, prompt, !chat, window_n, &prompt_toks);
    else
        rc = cli_policy_tokenize("generate", model, &po, prompt, &prompt_toks);
    if (rc) goto done;
    rc = 1;
    const int32_t *toks = prompt_toks.tokens;
    int n_prompt = prompt_toks.n_tokens;
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = (int)threads;
    cp.kv_type = kv_type;
    cp.n_ctx = n_ctx;
    cli_warn_ctx("generate", n_ctx, model);
    const int ctx_len = n_ctx > 0 ? n_ctx : hp->n_ctx_train;
    const char *ctx_what = n_ctx > 0 ? "--ctx" : "the model's context";
    /* a budget with rerotate keeps every head within --max-cache + --compress-every entries,
     * so the logical length may pass the model's context (StreamingLLM's setting) */
    const bool unbounded = po.max_cache > 0 && po.params.positions == SKV_POSITIONS_REROTATE;
    if (po.max_cache > 0 && po.max_cache + po.compress_every > ctx_len) {
        cli_error("generate", "--max-cache %d + --compress-every %d exceed %s of %d", po.max_cache,
                  po.compress_every, ctx_what, ctx_len);
        rc = 2;
        goto done;
    }
    if (!unbounded && n_prompt + n_gen > ctx_len) {
        cli_error("generate", "prompt (%d tokens) + %ld generated tokens exceed %s of %d", n_prompt,
                  n_gen, ctx_what, ctx_len);
        if (po.max_cache > 0)
            cli_error("generate", "running past it needs --positions rerotate with --max-cache");
        rc = 2;
        goto done;
    }
    smp = skv_sampler_new(&sp, &err);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    if (!smp || !logits) {
        cli_error("generate", "%s", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    if (!quiet) cli_policy_note_budget_unscored(stderr, &po);
    double t0 = skv_time_ms();
    rc = cli_policy_run("generate", model, &cp, &po, &prompt_toks, true, &ctx, logits, &info);
    if (rc) goto done;
    rc = 1;
    double t1 = skv_time_ms();
    /* after the context exists and the prompt ran: an error (a cache type the model cannot
     * hold, a budget) leaves stdout empty */
    fwrite(prompt, 1, strlen(prompt), stdout);
    if (po.window_text) /* as the model saw it: its tokens' text after the prompt's last */
        for (int i = n_prompt - prompt_toks.n_window; i < n_prompt; i++) {
            char wp[256];
            const int len =
                skv_token_to_piece(vocab, i > 0 ? toks[i - 1] : -1, toks[i], wp, sizeof wp);
            if (len > 0) fwrite(wp, 1, (size_t)len, stdout);
        }
    fflush(stdout);
    int32_t prev = toks[n_prompt - 1];
    int n_done = 0;
    int most = skv_cache_longest(skv_context_cache_const(
        ctx)); /* most entries any kv head held after the prompt or a step */
    char piece[256];
    for (; n_done < n_gen; n_done++) {
        int32_t tok = skv_sampler_sample(smp, logits, hp->n_vocab);
        if (skv_vocab_is_eog(vocab, tok)) break;
        int len = skv_token_to_piece(vocab, prev, tok, piece, sizeof piece);
        if (len > 0) fwrite(piece, 1, (size_t)len, stdout);
        fflush(stdout);
        prev = tok;
        if (n_done + 1 < n_gen && skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, logits, &err)) {
            cli_error("generate", "%s", err.msg);
            goto done;
        }
        if (po.max_cache > 0) { /* only a budget reports it */
            const int m = skv_cache_longest(skv_context_cache_const(ctx));
            if (m > most) most = m;
        }
    }
    fputc('\n', stdout);
    double t2 = skv_time_ms();
    if (!quiet) {
        char gen_rate[48] = ""; /* no rate of nothing generated */
        if (n_done > 0)
            snprintf(gen_rate, sizeof gen_rate, " (%.1f t/s)", n_done * 1e3 / (t2 - t1 + 1e-9));
        fprintf(stderr,
                "\nprompt: %d tokens in %.1f ms (%.1f t/s); generated %d tokens in "
                "%.1f ms%s; %d threads\n",
                n_prompt, t1 - t0, n_prompt * 1e3 / (t1 - t0 + 1e-9), n_done, t2 - t1, gen_rate,
                skv_context_n_threads(ctx));
        if (info.policy[0])
            fprintf(stderr,
                    "compressed: %s keep %.3g of T=%d (%d positions), KV %.1f -> %.1f "
                    "KiB in %.2f ms\n",
                    info.policy, info.keep_frac, info.T, info.keep, info.bytes_before / 1024.0,
                    info.bytes_after / 1024.0, info.compress_ms);
        if (info.policy[0]) cli_policy_note_unscored(stderr, &po, &info);
        if (po.max_cache > 0)
            fprintf(stderr,
                    "budget: %s, %d cuts, at most %d entries per kv head (bound %d), logical "
                    "length %d\n",
                    skv_policy_canonical(po.params.policy), skv_context_budget_cuts(ctx), most,
                    po.max_cache + po.compress_every, skv_context_n_past(ctx));
    }
    rc = 0;
done:
    cli_prompt_free(&prompt_toks);
    free(chat_text);
    skv_compress_info_free(&info);
    free(logits);
    skv_sampler_free(smp);
    skv_context_free(ctx);
    skv_model_free(model);
    return rc;
}
