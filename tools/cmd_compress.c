/* cmd_compress.c — `sparsekv compress`: prefill a prompt, compress its KV cache under a policy
 * and print what was kept (a summary, or one JSON document with --json). */
#include "cli.h"
#include "cli_policy.h"

#include <stdlib.h>
#include <string.h>

static const char *CMD = "compress";

static void usage(FILE *f) {
    fprintf(f,
            "usage: sparsekv compress [-m MODEL] -p PROMPT --policy P --keep F\n"
            "                         [--window N | --window-text TEXT] [--protocol seed|engine]\n"
            "                         [--seed S] [--sinks N] [--pool max|avg] [--kernel N]\n"
            "                         [--window-keep N] [--positions original|rerotate]\n"
            "                         [-t N] [--json]\n\n"
            "Tokenizes PROMPT (BOS + text), prefills its KV cache, compresses it per layer and\n"
            "kv head under policy P and reports what was kept.\n\n"
            "  -m MODEL            GGUF model (default %s)\n"
            "  -p PROMPT           the prompt text\n"
            "  -t N                threads (default: all cores)\n"
            "  --json              print one JSON document: policy, keep_frac, T, keep,\n"
            "                      compress_ms, window_ms, window_tokens, layer_budgets\n"
            "                      (pyramid), bytes_before, bytes_after, protocol, positions,\n"
            "                      prompt_tokens, kept [layer][head], and layers: per layer,\n"
            "                      per kv head, the retained positions\n"
            "  -h, --help          this help\n\n",
            SKV_DEFAULT_MODEL);
    cli_policy_usage(f);
}

static void print_int_array(FILE *f, const int *a, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", a[i]);
    fputc(']', f);
}

static void print_json(FILE *f, const skv_context *ctx, const skv_compress_info *info,
                       const cli_policy_opts *o, int prompt_tokens) {
    const skv_cache *c = skv_context_cache_const(ctx);
    fprintf(f, "{\"policy\": ");
    cli_json_string(f, info->policy, strlen(info->policy));
    fprintf(f, ", \"keep_frac\": %.17g, \"T\": %d, \"keep\": %d", info->keep_frac, info->T,
            info->keep);
    fprintf(f, ", \"compress_ms\": %.6f, \"window_ms\": %.6f, \"window_tokens\": %d",
            info->compress_ms, info->window_ms, info->window_tokens);
    if (!strcmp(info->policy, "pyramid")) {
        fprintf(f, ", \"layer_budgets\": ");
        print_int_array(f, info->layer_budgets, info->n_layer);
    }
    fprintf(f, ", \"bytes_before\": %llu, \"bytes_after\": %llu",
            (unsigned long long)info->bytes_before, (unsigned long long)info->bytes_after);
    fprintf(f, ", \"protocol\": \"%s\", \"positions\": \"%s\", \"prompt_tokens\": %d",
            cli_protocol_name(o->params.protocol), cli_positions_name(o->params.positions),
            prompt_tokens);
    fprintf(f, ", \"kept\": [");
    for (int l = 0; l < info->n_layer; l++) {
        fprintf(f, "%s", l ? ", " : "");
        print_int_array(f, info->kept + (size_t)l * info->n_head_kv, info->n_head_kv);
    }
    fprintf(f, "], \"layers\": [");
    for (int l = 0; l < skv_cache_n_layer(c); l++) {
        fprintf(f, "%s[", l ? ", " : "");
        for (int h = 0; h < skv_cache_n_head_kv(c); h++) {
            const int32_t *pos = skv_cache_head_positions(c, l, h);
            int n = skv_cache_head_len(c, l, h);
            fprintf(f, "%s[", h ? ", " : "");
            for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", (int)pos[i]);
            fputc(']', f);
        }
        fputc(']', f);
    }
    fprintf(f, "]}\n");
}

static void print_summary(FILE *f, const skv_compress_info *info, const cli_policy_opts *o,
                          int prompt_tokens) {
    fprintf(f,
            "policy %s, %s protocol, %s positions: T = %d prefix positions, keep = %d "
            "(keep_frac %g)\n",
            info->policy, cli_protocol_name(o->params.protocol),
            cli_positions_name(o->params.positions), info->T, info->keep, info->keep_frac);
    fprintf(f, "prompt: %d tokens", prompt_tokens);
    if (info->window_tokens)
        fprintf(f, ", window %d tokens (%s)", info->window_tokens,
                o->params.protocol == SKV_PROTOCOL_ENGINE ? "kept in the cache"
                                                          : "scored on a copy, not kept");
    fputc('\n', f);
    if (!strcmp(info->policy, "pyramid")) {
        fprintf(f, "layer budgets: ");
        print_int_array(f, info->layer_budgets, info->n_layer);
        fputc('\n', f);
    }
    for (int l = 0; l < info->n_layer; l++) {
        fprintf(f, "layer %2d kept per kv head: ", l);
        print_int_array(f, info->kept + (size_t)l * info->n_head_kv, info->n_head_kv);
        fputc('\n', f);
    }
    double pct = info->bytes_before ? 100.0 * (double)info->bytes_after / info->bytes_before : 0;
    fprintf(f, "KV bytes: %llu -> %llu (%.1f%%)\n", (unsigned long long)info->bytes_before,
            (unsigned long long)info->bytes_after, pct);
    fprintf(f, "compress: %.3f ms", info->compress_ms);
    if (info->window_ms > 0) fprintf(f, " (window pass %.3f ms)", info->window_ms);
    fprintf(f, "\n");
}

int cmd_compress(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    int n_threads = 0;
    bool json = false;
    cli_policy_opts opts;
    cli_policy_init(&opts);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_policy_parse(&opts, CMD, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "-p") || !strcmp(a, "-t")) {
            if (i + 1 >= argc) {
                cli_error(CMD, "%s needs a value", a);
                return 2;
            }
            const char *v = argv[++i];
            if (a[1] == 'm') {
                model_path = v;
            } else if (a[1] == 'p') {
                prompt = v;
            } else {
                long t;
                if (!cli_parse_int(v, 0, 4096, &t)) {
                    cli_error(CMD, "-t must be a thread count in [0, 4096], got '%s'", v);
                    return 2;
                }
                n_threads = (int)t;
            }
        } else {
            cli_error(CMD, "unknown option '%s' (see sparsekv compress --help)", a);
            return 2;
        }
    }
    if (!prompt) {
        cli_error(CMD, "-p PROMPT is required");
        return 2;
    }
    if (!cli_policy_check(&opts, CMD, true)) return 2;
    const char *path = cli_model_path(CMD, model_path);
    if (!path) return 2;
    skv_model *model = cli_load_model(CMD, path);
    if (!model) return 1;

    cli_prompt p;
    int rc = cli_policy_tokenize(CMD, model, &opts, prompt, &p);
    if (rc) {
        if (rc == 1) cli_error(CMD, "out of memory");
        skv_model_free(model);
        return rc;
    }
    skv_context_params cparams = skv_context_default_params();
    cparams.n_threads = n_threads;
    skv_context *ctx = NULL;
    skv_compress_info info;
    rc = cli_policy_run(CMD, model, &cparams, &opts, &p, false, &ctx, NULL, &info);
    if (rc == 0) {
        if (json)
            print_json(stdout, ctx, &info, &opts, p.n_tokens);
        else
            print_summary(stdout, &info, &opts, p.n_tokens);
        if (fflush(stdout) != 0) rc = 1;
    }
    skv_compress_info_free(&info);
    skv_context_free(ctx);
    cli_prompt_free(&p);
    skv_model_free(model);
    return rc;
}
