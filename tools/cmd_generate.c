/* cmd_generate.c — `sparsekv generate`: prompt -> (optional compression) -> sampled text. */
#include "cli.h"
#include "cli_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: sparsekv generate [-m MODEL] [-p PROMPT] [-n N] [--temp T] [--top-k K]\n"
        "                         [--top-p P] [--seed S] [-t THREADS] [--kv-type f32|f16|q8_0]\n"
        "                         [--quiet] [--policy P --keep F [compression options]]\n\n"
        "Prints the prompt followed by up to N generated tokens (stops early at EOS).\n"
        "With no prompt, generation starts from BOS alone. With --policy, the prompt's KV\n"
        "cache is compressed after the prefill and generation continues on it.\n\n"
        "  -m MODEL      GGUF model (default %s)\n"
        "  -p PROMPT     prompt text (BOS is prepended)\n"
        "  -n N          tokens to generate (default 256)\n"
        "  --temp T      temperature; 0 = greedy (default 0.8)\n"
        "  --top-k K     keep the K most likely tokens; 0 = off (default 40)\n"
        "  --top-p P     nucleus sampling mass in (0, 1]; 1 = off (default 0.95)\n"
        "  --seed S      random seed (default 0)\n"
        "  -t THREADS    worker threads (default: all cores)\n"
        "  --kv-type T   KV cache element type (default f32)\n"
        "  --quiet       no statistics on stderr\n\n"
        "Compression:\n",
        SKV_DEFAULT_MODEL);
    cli_policy_usage(f);
}

int cmd_generate(int argc, char **argv) {
    const char *model_arg = NULL, *prompt = "";
    long n_gen = 256, threads = 0;
    skv_sampler_params sp = skv_sampler_default_params();
    skv_type kv_type = SKV_TYPE_F32;
    bool quiet = false;
    cli_policy_opts po;
    cli_policy_init(&po);

    for (int i = 1; i < argc; i++) {
        int used = cli_policy_parse(&po, "generate", argc, argv, &i);
        if (used < 0) return 2;
        if (used > 0) continue;
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        double dv;
        long lv;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!val) {
            cli_error("generate", "option '%s' needs a value (or is unknown; see --help)", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m")) {
            model_arg = val;
        } else if (!strcmp(a, "-p")) {
            prompt = val;
        } else if (!strcmp(a, "-n")) {
            if (!cli_parse_int(val, 0, 1 << 30, &n_gen)) goto bad;
        } else if (!strcmp(a, "--temp")) {
            if (!cli_parse_double(val, 0, 1e6, &dv)) goto bad;
            sp.temperature = (float)dv;
        } else if (!strcmp(a, "--top-k")) {
            if (!cli_parse_int(val, 0, 1 << 30, &lv)) goto bad;
            sp.top_k = (int)lv;
        } else if (!strcmp(a, "--top-p")) {
            if (!cli_parse_double(val, 1e-9, 1, &dv)) goto bad;
            sp.top_p = (float)dv;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(val, &sp.seed)) goto bad;
        } else if (!strcmp(a, "-t")) {
            if (!cli_parse_int(val, 1, 1024, &threads)) goto bad;
        } else if (!strcmp(a, "--kv-type")) {
            if (!skv_type_from_name(val, &kv_type) ||
                (kv_type != SKV_TYPE_F32 && kv_type != SKV_TYPE_F16 && kv_type != SKV_TYPE_Q8_0))
                goto bad;
        } else {
            cli_error("generate", "unknown option '%s' (see --help)", a);
            return 2;
        }
        continue;
    bad:
        cli_error("generate", "invalid value '%s' for %s", val, a);
        return 2;
    }

    if (!cli_policy_check(&po, "generate", false)) return 2;
    const char *path = cli_model_path("generate", model_arg);
    if (!path) return 2;
    skv_model *model = cli_load_model("generate", path);
    if (!model) return 1;
    const skv_hparams *hp = skv_model_hparams(model);
    const skv_vocab *vocab = skv_model_vocab(model);
    int rc = 1;
    skv_err err = {0};
    skv_context *ctx = NULL;
    skv_sampler *smp = NULL;
    float *logits = NULL;
    cli_prompt prompt_toks = {0};
    skv_compress_info info = {0};
    rc = cli_policy_tokenize("generate", model, &po, prompt, &prompt_toks);
    if (rc) goto done;
    rc = 1;
    const int32_t *toks = prompt_toks.tokens;
    int n_prompt = prompt_toks.n_tokens;
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = (int)threads;
    cp.kv_type = kv_type;
    if (n_prompt + n_gen > hp->n_ctx_train) {
        cli_error("generate",
                  "prompt (%d tokens) + %ld generated tokens exceed the model's "
                  "context of %d",
                  n_prompt, n_gen, hp->n_ctx_train);
        rc = 2;
        goto done;
    }
    smp = skv_sampler_new(&sp, &err);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    if (!smp || !logits) {
        cli_error("generate", "%s", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    fwrite(prompt, 1, strlen(prompt), stdout);
    if (po.window_text) fputs(po.window_text, stdout);
    fflush(stdout);

    double t0 = skv_time_ms();
    rc = cli_policy_run("generate", model, &cp, &po, &prompt_toks, true, &ctx, logits, &info);
    if (rc) goto done;
    rc = 1;
    double t1 = skv_time_ms();
    int32_t prev = toks[n_prompt - 1];
    int n_done = 0;
    char piece[256];
    for (; n_done < n_gen; n_done++) {
        int32_t tok = skv_sampler_sample(smp, logits, hp->n_vocab);
        if (tok == skv_vocab_eos(vocab)) break;
        int len = skv_token_to_piece(vocab, prev, tok, piece, sizeof piece);
        if (len > 0) fwrite(piece, 1, (size_t)len, stdout);
        fflush(stdout);
        prev = tok;
        if (n_done + 1 < n_gen && skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, logits, &err)) {
            cli_error("generate", "%s", err.msg);
            goto done;
        }
    }
    fputc('\n', stdout);
    double t2 = skv_time_ms();
    if (!quiet) {
        fprintf(stderr,
                "\nprompt: %d tokens in %.1f ms (%.1f t/s); generated %d tokens in "
                "%.1f ms (%.1f t/s); %d threads\n",
                n_prompt, t1 - t0, n_prompt * 1e3 / (t1 - t0 + 1e-9), n_done, t2 - t1,
                n_done * 1e3 / (t2 - t1 + 1e-9), skv_context_n_threads(ctx));
        if (info.policy[0])
            fprintf(stderr,
                    "compressed: %s keep %.3g of T=%d (%d positions), KV %.1f -> %.1f "
                    "KiB in %.2f ms\n",
                    info.policy, info.keep_frac, info.T, info.keep, info.bytes_before / 1024.0,
                    info.bytes_after / 1024.0, info.compress_ms);
    }
    rc = 0;
done:
    cli_prompt_free(&prompt_toks);
    skv_compress_info_free(&info);
    free(logits);
    skv_sampler_free(smp);
    skv_context_free(ctx);
    skv_model_free(model);
    return rc;
}
