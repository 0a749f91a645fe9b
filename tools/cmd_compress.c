/* cmd_compress.c — `sparsekv compress`: prefill a prompt, compress its KV cache under a policy
 * and print what was kept (a summary, or one JSON document with --json). */
#include "cli.h"
#include "cli_args.h"
#include "cli_policy.h"

#include "eval/eval.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *CMD = "compress";

static void usage(FILE *f) {
    fprintf(f,
            "usage: sparsekv compress [-m MODEL] -p PROMPT --policy P --keep F\n"
            "                         [--window N | --window-text TEXT]\n"
            "                         [--protocol seed|engine]\n"
            "                         [--seed S] [--sinks N] [--pool max|avg] [--kernel N]\n"
            "                         [--window-keep N] [--positions original|rerotate]\n"
            "                         [-t N] [--kv-type f32|f16|q8_0] [--ctx N] [--json]\n"
            "                         [--plot FILE.png]\n\n"
            "Tokenizes PROMPT (BOS first where the vocabulary asks), prefills its KV cache,\n"
            "compresses it per layer\n"
            "and kv head under policy P and reports what was kept.\n\n"
            "  -m MODEL            GGUF model (default %s)\n"
            "  -p, --prompt PROMPT the prompt text\n"
            "  -t N                threads (default: all cores)\n"
            "  --kv-type T         KV cache element type (default f32): what is kept and its\n"
            "                      bytes as decoding would hold them\n"
            "  --ctx N             context size (default 0: the model's training length); for\n"
            "                      a LongRoPE model (Phi-3.5, Phi-4-mini: `info` says) it\n"
            "                      also chooses the RoPE factors, short up to the model's\n"
            "                      original length (4096 for Phi-3.5), long past it\n"
            "  --json              print one JSON document: policy, keep_frac, T, keep,\n"
            "                      compress_ms, window_ms, cache_ms, window_tokens,\n"
            "                      layer_budgets (pyramid), bytes_before, bytes_after,\n"
            "                      protocol, positions, prompt_tokens, kept [layer][head],\n"
            "                      forced and by_score [layer] (entries forced in / chosen\n"
            "                      by score), and layers: per layer and kv head, the\n"
            "                      retained positions\n"
            "  --plot FILE.png     draw a heat map of the kept positions (one row per layer x\n"
            "                      kv head, one column per position) with gnuplot\n"
            "  -h, --help          this help\n\n",
            SKV_DEFAULT_MODEL);
    cli_policy_usage(f, false, false);
}

static void print_int_array(FILE *f, const int *a, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", a[i]);
    fputc(']', f);
}

/* Whether the policy sets its own layer budgets (the registry says so). */
static bool has_layer_budgets(const char *policy) {
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        if (skv_policy_describe(i, &a, NULL) == SKV_OK && !strcmp(a.name, policy))
            return a.layer_budgets;
    }
    return false;
}

static void print_json(FILE *f, const skv_context *ctx, const skv_compress_info *info,
                       const cli_policy_opts *o, int prompt_tokens) {
    const skv_cache *c = skv_context_cache_const(ctx);
    fprintf(f, "{\"policy\": ");
    cli_json_string(f, info->policy, strlen(info->policy));
    fprintf(f, ", \"keep_frac\": ");
    skv_json_write_double(f, info->keep_frac); /* 0.3, not 0.29999999999999999 */
    fprintf(f, ", \"T\": %d, \"keep\": %d", info->T, info->keep);
    fprintf(f,
            ", \"compress_ms\": %.6f, \"window_ms\": %.6f, \"cache_ms\": %.6f, "
            "\"window_tokens\": %d",
            info->compress_ms, info->window_ms, info->cache_ms, info->window_tokens);
    if (has_layer_budgets(info->policy)) {
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
    /* what the selection really was, per layer summed over its kv heads */
    fprintf(f, "], \"forced\": ");
    print_int_array(f, info->forced, info->forced ? info->n_layer : 0);
    fprintf(f, ", \"by_score\": ");
    print_int_array(f, info->by_score, info->by_score ? info->n_layer : 0);
    fprintf(f, ", \"layers\": [");
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
    const bool engine = o->params.protocol == SKV_PROTOCOL_ENGINE;
    /* the engine protocol's T counts the window too: it is in the cache */
    fprintf(f, "policy %s, %s protocol, %s positions: T = %d %s, keep = %d (keep_frac %g)\n",
            info->policy, cli_protocol_name(o->params.protocol),
            cli_positions_name(o->params.positions), info->T,
            engine ? "cached positions" : "prefix positions", info->keep, info->keep_frac);
    if (info->window_tokens && engine)
        fprintf(f, "prompt: %d tokens, the last %d the window (kept in the cache)", prompt_tokens,
                info->window_tokens);
    else if (info->window_tokens)
        fprintf(f, "prompt: %d tokens + a window of %d (scored on a copy, not kept)", info->T,
                info->window_tokens);
    else if (!engine && prompt_tokens > info->T)
        fprintf(f, "prompt: %d tokens + %d more (not in the cache; %s does not score with them)",
                info->T, prompt_tokens - info->T, info->policy);
    else
        fprintf(f, "prompt: %d tokens", prompt_tokens);
    fputc('\n', f);
    if (has_layer_budgets(info->policy)) {
        fprintf(f, "layer budgets: ");
        print_int_array(f, info->layer_budgets, info->n_layer);
        fputc('\n', f);
    }
    for (int l = 0; l < info->n_layer; l++) {
        fprintf(f, "layer %2d kept per kv head: ", l);
        print_int_array(f, info->kept + (size_t)l * info->n_head_kv, info->n_head_kv);
        fputc('\n', f);
    }
    if (info->forced && info->by_score) {
        fprintf(f, "selection per layer (all kv heads): forced ");
        print_int_array(f, info->forced, info->n_layer);
        fprintf(f, ", chosen by score ");
        print_int_array(f, info->by_score, info->n_layer);
        fputc('\n', f);
        cli_policy_note_unscored(f, o, info);
    }
    double pct = info->bytes_before ? 100.0 * (double)info->bytes_after / info->bytes_before : 0;
    fprintf(f, "KV bytes: %llu -> %llu (%.1f%%)\n", (unsigned long long)info->bytes_before,
            (unsigned long long)info->bytes_after, pct);
    fprintf(f, "compress: %.3f ms (", info->compress_ms);
    if (info->window_ms > 0) fprintf(f, "window pass %.3f ms, ", info->window_ms);
    fprintf(f, "applying the selection %.3f ms)\n", info->cache_ms);
}

/* --plot: the kept positions of every (layer, kv head) as a heat map, drawn by gnuplot from a
 * temporary script (data inline). Returns the exit status. */
static int plot_kept(const skv_context *ctx, const skv_compress_info *info,
                     const cli_policy_opts *o, const char *png) {
    const skv_cache *c = skv_context_cache_const(ctx);
    int L = skv_cache_n_layer(c), H = skv_cache_n_head_kv(c);
    const int32_t **pos = calloc((size_t)L * H + 1, sizeof *pos);
    int *lens = calloc((size_t)L * H + 1, sizeof *lens);
    int n_pos = info->T;
    for (int l = 0; pos && lens && l < L; l++)
        for (int h = 0; h < H; h++) {
            pos[l * H + h] = skv_cache_head_positions(c, l, h);
            lens[l * H + h] = skv_cache_head_len(c, l, h);
            for (int i = 0; i < lens[l * H + h]; i++)
                if (pos[l * H + h][i] >= n_pos) n_pos = pos[l * H + h][i] + 1;
        }
    const char *tmpdir = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/sparsekv-plot-XXXXXX",
             tmpdir && *tmpdir && strlen(tmpdir) < 4000 ? tmpdir : "/tmp");
    int fd = pos && lens ? mkstemp(tmpl) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        cli_error(CMD, "cannot write a temporary gnuplot script: %s", strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmpl);
        }
        free(pos);
        free(lens);
        return 1;
    }
    char title[256];
    snprintf(title, sizeof title,
             "kept positions: %s, keep %g (%d of %d per kv head), %s protocol, %s positions",
             info->policy, info->keep_frac, info->keep, info->T,
             cli_protocol_name(o->params.protocol), cli_positions_name(o->params.positions));
    int window_from = o->params.protocol == SKV_PROTOCOL_ENGINE && info->window_tokens > 0
                          ? info->T - info->window_tokens
                          : -1;
    skv_eval_write_kept_map(f, png, title, L, H, n_pos, pos, lens, window_from);
    free(pos);
    free(lens);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    int rc = 0;
    if (bad) {
        cli_error(CMD, "cannot write the temporary gnuplot script %s", tmpl);
        rc = 1;
    } else {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            /* stdout stays the summary's; gnuplot talks on stderr */
            if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) _exit(127);
            execlp("gnuplot", "gnuplot", tmpl, (char *)NULL);
            _exit(127);
        }
        int status = 0;
        while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            cli_error(CMD, "gnuplot %s: cannot draw %s",
                      pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127
                          ? "is not installed"
                          : "failed",
                      png);
            rc = 1;
        }
    }
    unlink(tmpl);
    return rc;
}

int cmd_compress(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *plot_path = NULL;
    int n_threads = 0;
    skv_type kv_type = SKV_TYPE_F32;
    bool json = false;
    cli_policy_opts opts;
    cli_policy_init(&opts);
    int n_ctx = 0;
    enum { O_JSON = CLI_LONG, O_PLOT, O_KV_TYPE, O_CTX };
    static const cli_opt own[] = {
        {"help", 'h', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"prompt", 'p', true, NULL, false},
        {"threads", 't', true, NULL, false},
        {"json", O_JSON, false, NULL, false},
        {"plot", O_PLOT, true, NULL, false},
        {"kv-type", O_KV_TYPE, true, NULL, false},
        {"ctx", O_CTX, true, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, CMD, argc, argv, own, cli_policy_options, NULL)) return 2;
    const char *v;
    for (int key; (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        int r = cli_policy_take(&opts, &args, key, v);
        if (r < 0) return 2;
        if (r > 0) continue;
        switch (key) {
        case CLI_FAIL:
            return 2;
        case CLI_OPERAND:
            cli_args_extra(&args, v);
            return 2;
        case 'h':
            usage(stdout);
            return 0;
        case O_JSON:
            json = true;
            break;
        case O_CTX:
            if (!cli_parse_ctx(CMD, v, &n_ctx)) return 2;
            break;
        case O_PLOT:
            if (!v[0]) {
                cli_error(CMD, "--plot needs a file name (FILE.png)");
                return 2;
            }
            plot_path = v;
            break;
        case O_KV_TYPE:
            if (!skv_type_from_name(v, &kv_type) ||
                (kv_type != SKV_TYPE_F32 && kv_type != SKV_TYPE_F16 && kv_type != SKV_TYPE_Q8_0)) {
                cli_error(CMD, "invalid value '%s' for --kv-type (f32, f16 or q8_0)", v);
                return 2;
            }
            break;
        case 'm':
            model_path = v;
            break;
        case 'p':
            prompt = v;
            break;
        case 't': {
            long t;
            if (!cli_parse_threads(CMD, v, &t)) {
                return 2;
            }
            n_threads = (int)t;
            break;
        }
        }
    }
    if (!prompt) {
        cli_error(CMD, "-p PROMPT is required");
        return 2;
    }
    if (!cli_policy_check(&opts, &args, true)) return 2;
    if (plot_path) { /* before any work: gnuplot writes PNG, into a folder that must exist */
        size_t n = strlen(plot_path);
        if (n < 5 || strcasecmp(plot_path + n - 4, ".png") != 0) {
            cli_error(CMD, "--plot writes a PNG image: give a FILE.png, not '%s'", plot_path);
            return 2;
        }
        const char *slash = strrchr(plot_path, '/');
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - plot_path) + 1 : 1,
                 slash ? plot_path : ".");
        if (access(dir, W_OK) != 0) {
            cli_error(CMD, "cannot write '%s': folder '%s': %s", plot_path, dir, strerror(errno));
            return 2;
        }
    }
    const char *path = cli_model_path(CMD, model_path);
    if (!path) return 2;
    if (plot_path && cli_same_file(plot_path, path)) {
        cli_error(CMD, "--plot %s is the model: the figure would replace it", plot_path);
        return 2;
    }
    skv_model *model = cli_load_model(CMD, path);
    if (!model) return cli_model_rc;

    cli_prompt p;
    int rc = cli_policy_tokenize(CMD, model, &opts, prompt, &p);
    if (rc) {
        if (rc == 1) cli_error(CMD, "out of memory");
        skv_model_free(model);
        return rc;
    }
    skv_context_params cparams = skv_context_default_params();
    cparams.n_threads = n_threads;
    cparams.kv_type = kv_type;
    cparams.n_ctx = n_ctx;
    cli_warn_ctx(CMD, n_ctx, model);
    skv_context *ctx = NULL;
    skv_compress_info info;
    rc = cli_policy_run(CMD, model, &cparams, &opts, &p, false, &ctx, NULL, &info);
    if (rc == 0) {
        if (json) {
            print_json(stdout, ctx, &info, &opts, p.n_tokens);
            cli_policy_note_unscored(stderr, &opts, &info); /* stdout holds only the JSON */
        } else
            print_summary(stdout, &info, &opts, p.n_tokens);
        if (fflush(stdout) != 0) rc = 1;
        if (rc == 0 && plot_path) rc = plot_kept(ctx, &info, &opts, plot_path);
    }
    skv_compress_info_free(&info);
    skv_context_free(ctx);
    cli_prompt_free(&p);
    skv_model_free(model);
    return rc;
}
